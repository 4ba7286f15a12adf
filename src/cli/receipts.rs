//! `ipc receipts verify STORE` (exit 1 on any chain problem, each named)
//! and `ipc receipts show STORE` (the receipts, readably or as JSON).

use super::Format;
use crate::store::sqlite::SqliteStore;
use crate::store::{ReceiptRecord, Store, StoreError, verify_chain};
use clap::Subcommand;
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ReceiptsArgs {
    #[command(subcommand)]
    pub command: ReceiptsCommand,
}

#[derive(Subcommand, Debug)]
pub enum ReceiptsCommand {
    /// Check the hash chain: detects edited, deleted, reordered and
    /// truncated receipts, and names each.
    Verify(VerifyArgs),
    /// Print the receipts: sequence number, decision, action, stage, hash.
    Show(ShowArgs),
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The store file (SQLite).
    pub store: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    /// The store file (SQLite).
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
        ReceiptsCommand::Show(a) => show(a, out),
    }
}

/// The head marker: last sequence number and hash.
type Head = Option<(u64, String)>;

/// The chain and head marker of a store file.
fn load(path: &Path) -> Result<(Vec<ReceiptRecord>, Head), StoreError> {
    let store = SqliteStore::open_existing(path)?;
    Ok((store.receipts()?, store.head()?))
}

fn verify(args: &VerifyArgs, out: &mut dyn Write) -> u8 {
    let (records, head) = match load(&args.store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let file = args.store.display().to_string();
    let last = records.last().map(|r| (r.seq, r.hash.clone()));
    let result = verify_chain(&records, head.clone());
    let written = match (args.format, &result) {
        (Format::Human, Ok(count)) => {
            let head_line = match &last {
                Some((seq, hash)) => format!("head  {seq} {hash}"),
                None => "head  none (empty chain)".to_string(),
            };
            writeln!(
                out,
                "ok    {file}: {} verif{}\n{head_line}",
                plural(*count, "receipt"),
                if *count == 1 { "ies" } else { "y" },
            )
        }
        (Format::Human, Err(problems)) => {
            let mut text = String::new();
            for p in problems {
                text.push_str(&format!("  {p}\n"));
            }
            write!(
                out,
                "fail  {file}: {} in {}\n{text}",
                plural(problems.len(), "problem"),
                plural(records.len(), "receipt"),
            )
        }
        (Format::Json, result) => {
            let problems: Vec<Value> = match result {
                Ok(_) => Vec::new(),
                Err(ps) => ps
                    .iter()
                    .map(|p| {
                        let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
                        if let Value::Object(m) = &mut v {
                            m.insert("message".into(), json!(p.to_string()));
                        }
                        v
                    })
                    .collect(),
            };
            let doc = json!({
                "ok": result.is_ok(),
                "store": file,
                "count": records.len(),
                "head": head.map(|(seq, hash)| json!({"seq": seq, "hash": hash})),
                "problems": problems,
            });
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )
        }
    };
    if written.is_err() {
        return 1;
    }
    u8::from(result.is_err())
}

fn show(args: &ShowArgs, out: &mut dyn Write) -> u8 {
    let (records, head) = match load(&args.store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let verified = verify_chain(&records, head).is_ok();
    let skip = args.last.map_or(0, |n| records.len().saturating_sub(n));
    let shown = &records[skip..];
    let written = match args.format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(shown).unwrap_or_default()
        ),
        Format::Human => human_table(shown, records.len(), verified, out),
    };
    u8::from(written.is_err())
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
            let action = field(&r.body, "action")
                .or_else(|| r.body.get("proposal").and_then(|p| field(p, "action")));
            [
                r.seq.to_string(),
                field(&r.body, "decision").unwrap_or_else(|| "-".into()),
                action.unwrap_or_else(|| "-".into()),
                field(&r.body, "stage").unwrap_or_else(|| "-".into()),
                hash_prefix(&r.hash),
            ]
        })
        .collect();
    let header = ["seq", "decision", "action", "stage", "hash"];
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

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The store could not be read: a diagnostic on stderr (human) or a JSON
/// document on stdout; exit 1.
fn failure(out: &mut dyn Write, format: Format, e: &StoreError) -> u8 {
    use miette::Diagnostic;
    match format {
        Format::Json => {
            let doc = json!({
                "ok": false,
                "error": {
                    "code": e.code().map(|c| c.to_string()),
                    "message": e.to_string(),
                },
            });
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            );
        }
        Format::Human => {
            let theme = if super::use_color() {
                miette::GraphicalTheme::unicode()
            } else {
                miette::GraphicalTheme::unicode_nocolor()
            };
            let mut text = String::new();
            let handler = miette::GraphicalReportHandler::new_themed(theme).with_width(100);
            if handler.render_report(&mut text, e).is_err() {
                text = format!("error: {e}\n");
            }
            eprint!("{text}");
        }
    }
    1
}
