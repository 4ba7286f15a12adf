//! `ipc receipts verify STORE` (exit 1 on any problem, each named: the
//! chain, the stored bytes, the store's state against the chain, and a
//! signed checkpoint the chain must extend), `ipc receipts checkpoint
//! STORE --key K` (signs the head of a store that verifies) and `ipc
//! receipts show STORE` (the receipts, readably or as JSON).

use super::Format;
use super::report::{
    error_json, failure, load, plural, problems_json, render, signing_time, write_json,
};
use crate::keys::{PublicKey, SecretKey};
use crate::store::{ChainProblem, Checkpoint, CheckpointError, ReceiptRecord, verify_store};
use clap::Subcommand;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReceiptsArgs {
    #[command(subcommand)]
    pub command: ReceiptsCommand,
}

#[derive(Subcommand, Debug)]
pub enum ReceiptsCommand {
    /// Check the store: the hash chain and its head (edited, deleted,
    /// reordered, truncated receipts), the stored bytes (canonical, no key
    /// twice), the budgets, nonces and executed operations against the
    /// receipts, and optionally a signed checkpoint the chain must extend.
    Verify(VerifyArgs),
    /// Sign the head of a store that verifies (sequence number and hash)
    /// into a checkpoint, to keep where the store's writers cannot reach.
    Checkpoint(CheckpointArgs),
    /// Print the receipts: sequence number, kind (a decision's outcome, or
    /// outcome, passthrough, refused, approval, registry), what it is about,
    /// its detail (stage and reason, status, change) and hash.
    Show(ShowArgs),
    /// Count the decisions: by outcome, and those denied or asked for
    /// approval by action, stage and reason, enforced and in shadow mode
    /// (what would have been denied or asked).
    Report(super::receipts_report::ReportArgs),
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The store: an SQLite file or a `postgres://` URL.
    #[arg(required_unless_present = "world", conflicts_with = "world")]
    pub store: Option<PathBuf>,
    /// Every shard of this world's `[store.shards]` instead of one store,
    /// each against its own checkpoint of a set (`--checkpoint SET`).
    #[arg(long, value_name = "FILE")]
    pub world: Option<PathBuf>,
    /// A checkpoint from `ipc receipts checkpoint`: the chain must still
    /// hold its record (same hash), so nothing up to it was cut or rewritten.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub checkpoint: Option<PathBuf>,
    /// The public key that verifies the checkpoint (`NAME.pub` from `ipc
    /// keygen`), from the trusted side: never taken from the checkpoint.
    #[arg(long, value_name = "KEY.pub", requires = "checkpoint")]
    pub key: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// The store: an SQLite file or a `postgres://` URL.
    #[arg(required_unless_present = "world", conflicts_with = "world")]
    pub store: Option<PathBuf>,
    /// Every shard of this world's `[store.shards]`: one set of
    /// checkpoints, each shard's head signed.
    #[arg(long, value_name = "FILE")]
    pub world: Option<PathBuf>,
    /// The secret key that signs (`NAME.key` from `ipc keygen`).
    #[arg(long, value_name = "KEY.key")]
    pub key: PathBuf,
    /// Where to write the checkpoint (replaced whole); default: print it.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// The time to sign (`YYYY-MM-DDTHH:MM:SSZ`); default now.
    #[arg(long, value_name = "TIME", value_parser = crate::base::json::parse_time_str)]
    pub now: Option<i64>,
    /// Output format (of the summary, with `-o`; the checkpoint itself is
    /// JSON).
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The store: an SQLite file or a `postgres://` URL.
    pub store: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Only the last N receipts.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,
}

pub fn run(args: &ReceiptsArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        ReceiptsCommand::Verify(a) => verify(a, out),
        ReceiptsCommand::Checkpoint(a) => checkpoint(a, out),
        ReceiptsCommand::Show(a) => show(a, out),
        ReceiptsCommand::Report(a) => super::receipts_report::run(a, out),
    }
}

fn verify(args: &VerifyArgs, out: &mut dyn Write) -> u8 {
    let store = match (&args.store, &args.world) {
        (Some(s), _) => s,
        (None, Some(w)) => {
            let all = super::receipts_world::VerifyAll {
                world: w,
                checkpoint: args.checkpoint.as_deref(),
                key: args.key.as_deref(),
                format: args.format,
            };
            return super::receipts_world::verify(&all, out);
        }
        (None, None) => return 2,
    };
    let snap = match load(store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let checkpoint = match (&args.checkpoint, &args.key) {
        (Some(file), Some(key)) => {
            match PublicKey::load(key)
                .map_err(CheckpointError::from)
                .and_then(|k| Checkpoint::load(file, &k))
            {
                Ok(cp) => Some(cp),
                Err(e) => return failure(out, args.format, &e),
            }
        }
        _ => None,
    };
    let file = store.display().to_string();
    let result = verify_store(&snap, checkpoint.as_ref().map(|c| (c.seq, c.hash.as_str())));
    let written = match (args.format, &result) {
        (Format::Human, Ok(count)) => {
            let mut text = format!(
                "ok    {file}: {} verif{}\n",
                plural(*count, "receipt"),
                if *count == 1 { "ies" } else { "y" },
            );
            match snap.last() {
                Some((seq, hash)) => text.push_str(&format!("head  {seq} {hash}\n")),
                None => text.push_str("head  none (empty chain)\n"),
            }
            let a = &snap.accounts;
            text.push_str(&format!(
                "state {}, {}, {} match the receipts\n",
                plural(a.executions.len(), "execution"),
                plural(a.budgets.len(), "budget"),
                plural(a.nonces.len(), "nonce"),
            ));
            if let Some(cp) = &checkpoint {
                text.push_str(&format!(
                    "extends checkpoint {} {} (signed {} by key {})\n",
                    cp.seq, cp.hash, cp.time, cp.signature.key_id
                ));
            }
            out.write_all(text.as_bytes())
        }
        (Format::Human, Err(problems)) => write_problems(out, &file, problems, snap.receipts.len()),
        (Format::Json, result) => {
            let doc = json!({
                "ok": result.is_ok(),
                "store": file,
                "count": snap.receipts.len(),
                "head": snap.head.as_ref().map(|(seq, hash)| json!({"seq": seq, "hash": hash})),
                "accounts": {
                    "executions": snap.accounts.executions.len(),
                    "budgets": snap.accounts.budgets.len(),
                    "nonces": snap.accounts.nonces.len(),
                },
                "checkpoint": checkpoint.as_ref().map(|c| json!({
                    "seq": c.seq, "hash": c.hash, "time": c.time,
                    "key_id": c.signature.key_id,
                })),
                "problems": problems_json(result.as_ref().err()),
            });
            write_json(out, &doc)
        }
    };
    if written.is_err() {
        return 1;
    }
    u8::from(result.is_err())
}

/// `fail  FILE: N problems in M receipts` and one line per problem.
fn write_problems(
    out: &mut dyn Write,
    file: &str,
    problems: &[ChainProblem],
    records: usize,
) -> std::io::Result<()> {
    let mut text = format!(
        "fail  {file}: {} in {}\n",
        plural(problems.len(), "problem"),
        plural(records, "receipt"),
    );
    for p in problems {
        text.push_str(&format!("  {p}\n"));
    }
    out.write_all(text.as_bytes())
}

fn checkpoint(args: &CheckpointArgs, out: &mut dyn Write) -> u8 {
    let key = match SecretKey::load(&args.key) {
        Ok(k) => k,
        Err(e) => return failure(out, args.format, &e),
    };
    let store = match (&args.store, &args.world) {
        (Some(s), _) => s,
        (None, Some(w)) => {
            let all = super::receipts_world::SignAll {
                world: w,
                key: &key,
                now: args.now,
                output: args.output.as_deref(),
                format: args.format,
            };
            return super::receipts_world::checkpoint(&all, out);
        }
        (None, None) => return 2,
    };
    let snap = match load(store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let file = store.display().to_string();
    // a checkpoint vouches for the chain: never sign one that does not verify
    if let Err(problems) = verify_store(&snap, None) {
        let e = CheckpointError::Unverified {
            store: file.clone(),
            problems: plural(problems.len(), "problem"),
        };
        match args.format {
            Format::Human => {
                let _ = write_problems(out, &file, &problems, snap.receipts.len());
                render(&e);
            }
            Format::Json => {
                let mut doc = error_json(&e);
                doc["store"] = json!(file);
                doc["problems"] = json!(problems_json(Some(&problems)));
                let _ = write_json(out, &doc);
            }
        }
        return 1;
    }
    let Some((seq, hash)) = snap.last() else {
        return failure(
            out,
            args.format,
            &CheckpointError::EmptyChain { store: file },
        );
    };
    let now = match signing_time(args.now) {
        Ok(t) => t,
        Err(e) => return failure(out, args.format, &e),
    };
    let cp = match Checkpoint::sign(seq, hash, now, &key) {
        Ok(cp) => cp,
        Err(e) => return failure(out, args.format, &e),
    };
    let Some(path) = &args.output else {
        // the checkpoint itself is the output
        return u8::from(out.write_all(cp.to_text().as_bytes()).is_err());
    };
    if let Err(e) = cp.write(path) {
        return failure(out, args.format, &e);
    }
    let shown = path.display().to_string();
    let written = match args.format {
        Format::Human => writeln!(
            out,
            "signed {file}: checkpoint of record {} {}\nwrote  {shown} (key {}, {})",
            cp.seq, cp.hash, cp.signature.key_id, cp.time
        ),
        Format::Json => write_json(
            out,
            &json!({"ok": true, "store": file, "file": shown,
                    "checkpoint": serde_json::to_value(&cp).unwrap_or(Value::Null)}),
        ),
    };
    u8::from(written.is_err())
}

fn show(args: &ShowArgs, out: &mut dyn Write) -> u8 {
    let snap = match load(&args.store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let verified = verify_store(&snap, None).is_ok();
    let records = snap.records();
    let skip = args.last.map_or(0, |n| records.len().saturating_sub(n));
    let shown = &records[skip..];
    let written = match args.format {
        Format::Json => {
            // each record as stored, with what it is in a line
            let rows: Vec<Value> = shown
                .iter()
                .map(|r| {
                    let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
                    if let Value::Object(m) = &mut v {
                        let d = describe(&r.body);
                        m.insert(
                            "summary".into(),
                            json!({"kind": d.kind, "subject": d.subject, "detail": d.detail,
                                   "replayed": d.replayed}),
                        );
                    }
                    v
                })
                .collect();
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&rows).unwrap_or_default()
            )
        }
        Format::Human => human_table(shown, records.len(), verified, out),
    };
    u8::from(written.is_err())
}

/// What a receipt is, in three short cells.
#[derive(Debug, PartialEq)]
struct Described {
    /// A decision's outcome (`ALLOW`, `DENY`, `PENDING`), or the kind of
    /// any other receipt (`outcome`, `passthrough`, `refused`,
    /// `approval`, `registry`).
    kind: String,
    /// What it is about: the action, the tool, the operation, the registry.
    subject: String,
    /// The stage (and a refusal's reason; `, replayed` for a decision
    /// answered from the store), the status, the change.
    detail: String,
    /// A decision answered from the store: the operation had executed
    /// before (a retry), nothing ran again.
    replayed: bool,
}

/// A receipt's kind, subject and detail, read from its body (a receipt
/// of an older version, with `is_error` as the text `"true"`, included).
fn describe(body: &Value) -> Described {
    let f = |k: &str| field(body, k).unwrap_or_else(|| "-".into());
    let status = || match body.get("is_error") {
        Some(Value::Bool(false)) => "ok",
        Some(Value::String(s)) if s == "false" => "ok",
        Some(_) => "error",
        None => "-",
    };
    let op = || {
        field(body, "operation_hash")
            .map(|h| format!("operation {}", hash_prefix(&h)))
            .unwrap_or_else(|| "-".into())
    };
    let kind = field(body, "kind");
    let replayed = kind.is_none() && body.get("replayed") == Some(&Value::Bool(true));
    let (kind, subject, detail) = match kind.as_deref() {
        None if body.get("decision").is_some() => {
            let action = field(body, "action")
                .or_else(|| body.get("proposal").and_then(|p| field(p, "action")))
                .unwrap_or_else(|| "-".into());
            let mut detail = match field(body, "reason") {
                Some(reason) => format!("{}: {reason}", f("stage")),
                None => f("stage"),
            };
            if replayed {
                detail.push_str(", replayed");
            }
            if let Some(w) = body.get("would_be").and_then(|w| field(w, "decision")) {
                detail = format!("would be {w} at {detail}");
            }
            (f("decision"), action, detail)
        }
        Some("outcome") => (
            "outcome".into(),
            f("executor"),
            format!("{}, {}", status(), op()),
        ),
        Some("passthrough") => (
            "passthrough".into(),
            format!("{}/{}", f("server"), f("tool")),
            status().into(),
        ),
        Some("refused") => ("refused".into(), f("tool"), f("reason")),
        // `ipc mcp`'s durable session: a new one started, and why
        Some("session") => {
            let list = |k: &str| {
                body.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .filter(|s| !s.is_empty())
            };
            let detail = match list("revoked") {
                Some(r) => format!("{} ({}), revoked {r}", f("change"), f("reason")),
                None => format!("{} ({})", f("change"), f("reason")),
            };
            (
                "session".into(),
                list("mandates").unwrap_or_else(|| "-".into()),
                detail,
            )
        }
        Some("approval") => (
            "approval".into(),
            op(),
            format!("{} by {}", f("change"), f("by")),
        ),
        Some("registry") => {
            let entry = field(body, "value")
                .or_else(|| field(body, "key"))
                .unwrap_or_else(|| "-".into());
            (
                "registry".into(),
                format!("{}.{}", f("pack"), f("registry")),
                format!(
                    "{} {entry} by {} (owner {})",
                    f("change"),
                    f("by"),
                    f("owner")
                ),
            )
        }
        Some(other) => (other.to_string(), "-".into(), "-".into()),
        None => ("-".into(), "-".into(), "-".into()),
    };
    // a decision on a read, or its outcome: sent again at each call
    let detail = match field(body, "effect") {
        Some(e) if e == "read" => format!("{detail}, read"),
        _ => detail,
    };
    Described {
        kind,
        subject,
        detail: detail.chars().take(80).collect(),
        replayed,
    }
}

fn human_table(
    shown: &[ReceiptRecord],
    total: usize,
    verified: bool,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = shown
        .iter()
        .map(|r| {
            let d = describe(&r.body);
            [
                r.seq.to_string(),
                d.kind,
                d.subject,
                d.detail,
                hash_prefix(&r.hash),
            ]
        })
        .collect();
    let header = ["seq", "kind", "subject", "detail", "hash"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        format!(
            "{:>w0$}  {:<w1$}  {:<w2$}  {:<w3$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
        )
        .trim_end()
        .to_string()
    };
    writeln!(out, "{}", line(header))?;
    for row in &rows {
        writeln!(out, "{}", line(row.each_ref().map(String::as_str)))?;
    }
    writeln!(
        out,
        "{} of {}; {}",
        plural(shown.len(), "receipt"),
        total,
        if verified {
            "the chain verifies"
        } else {
            "the chain has problems: run `ipc receipts verify`"
        }
    )
}

/// A body field as one short line of text.
fn field(body: &Value, key: &str) -> Option<String> {
    let v = body.get(key)?;
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Null => return None,
        other => other.to_string(),
    };
    // receipts are data written by the gateway, but keep the table sane
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(60)
        .collect();
    Some(clean)
}

fn hash_prefix(hash: &str) -> String {
    let hex = hash.strip_prefix("sha256:").unwrap_or(hash);
    let short: String = hex.chars().take(12).collect();
    format!("{short}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decision answered from the store (a retry of an executed
    /// operation) is marked in the table and in JSON (#40.20); one that
    /// executed is not.
    #[test]
    fn replayed_decisions_are_marked() {
        let body = |replayed: bool| {
            json!({"decision": "ALLOW", "stage": "execution",
                   "action": "payment.transfer", "replayed": replayed})
        };
        let d = describe(&body(true));
        assert_eq!(
            (d.kind.as_str(), d.detail.as_str(), d.replayed),
            ("ALLOW", "execution, replayed", true)
        );
        let d = describe(&body(false));
        assert_eq!((d.detail.as_str(), d.replayed), ("execution", false));
        // only a decision's own field counts
        let other = json!({"kind": "outcome", "executor": "x", "replayed": true});
        assert!(!describe(&other).replayed);
    }

    /// A store written before `is_error` was a boolean reads the same;
    /// a kind this version does not know is named, not hidden.
    #[test]
    fn older_and_unknown_receipts_are_described() {
        let old = json!({"kind": "outcome", "executor": "mcp:demo/send_money",
                         "is_error": "true", "operation_hash": "sha256:0123456789abcdef"});
        let d = describe(&old);
        assert_eq!(d.kind, "outcome");
        assert_eq!(d.subject, "mcp:demo/send_money");
        assert_eq!(d.detail, "error, operation 0123456789ab…");
        let old = json!({"kind": "passthrough", "server": "s", "tool": "t", "is_error": "false"});
        assert_eq!(describe(&old).detail, "ok");
        let new = json!({"kind": "passthrough", "server": "s", "tool": "t", "is_error": true});
        assert_eq!(describe(&new).detail, "error");
        let other = json!({"kind": "future"});
        assert_eq!(describe(&other).kind, "future");
        // control characters never reach the terminal
        let hostile = json!({"kind": "refused", "tool": "a\u{1b}[2Jb", "reason": "r\nx"});
        let d = describe(&hostile);
        assert!(!d.subject.chars().any(char::is_control), "{d:?}");
        assert!(!d.detail.chars().any(char::is_control), "{d:?}");
    }

    /// A read's decision and outcome say so; a write's read as before.
    #[test]
    fn a_reads_receipts_say_read() {
        let allow = json!({"decision": "ALLOW", "action": "web.fetch", "stage": "execution",
                           "effect": "read", "execution": "sha256:ab/read/2"});
        assert_eq!(describe(&allow).detail, "execution, read");
        let outcome = json!({"kind": "outcome", "executor": "mcp:web/fetch", "is_error": false,
                             "effect": "read", "operation_hash": "sha256:0123456789abcdef"});
        assert_eq!(
            describe(&outcome).detail,
            "ok, operation 0123456789ab…, read"
        );
        let write =
            json!({"decision": "ALLOW", "action": "payment.transfer", "stage": "execution"});
        assert_eq!(describe(&write).detail, "execution");
    }
}
