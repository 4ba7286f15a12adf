//! `ipc mandates list|show|revoke|issue`: child mandates (issue 25) on the
//! trusted side. `list` and `show` read the store (held for their user's
//! confirmation, issued, revoked); `revoke` revokes a recorded child, and
//! with it its own children, with a receipt; `issue` is the administrator's
//! way to a child: typed against the pack, checked against its parent
//! (one that widens is `ipc::mandate::widens`), signed with the issuer's
//! key and recorded with a receipt.

use super::Format;
use super::approvals::failure;
use super::gateway::GatewayArgs;
use crate::gateway::MandateToken;
use serde_json::{Value, json};
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MandatesArgs {
    #[command(subcommand)]
    pub command: MandatesCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum MandatesCommand {
    /// The child mandates: waiting for their user, issued, revoked.
    List(ListArgs),
    /// One child mandate, as its user confirms it, and its token.
    Show(IdArgs),
    /// Revoke a recorded child mandate (and its children), with a receipt.
    Revoke(IdArgs),
    /// Issue a child of a parent mandate, signed with the issuer's key and
    /// recorded with a receipt.
    Issue(Box<IssueChildArgs>),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct IdArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The child mandate's id.
    pub id: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct IssueChildArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The parent mandate token (a file from `ipc token issue`, or a child).
    #[arg(long, value_name = "FILE")]
    pub parent: PathBuf,
    /// The signing key: the issuer's (or the parent's user's) secret key.
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,
    #[command(flatten)]
    pub child: super::child::ChildFields,
    /// Validity in seconds from now; default until the parent expires.
    #[arg(long)]
    pub ttl: Option<i64>,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(args: &MandatesArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        MandatesCommand::List(a) => list(a, out),
        MandatesCommand::Show(a) => show(a, out),
        MandatesCommand::Revoke(a) => revoke(a, out),
        MandatesCommand::Issue(a) => issue(a, out),
    }
}

fn list(a: &ListArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    let rows = match gw.mandate_listing() {
        Ok(r) => r,
        Err(e) => return failure(out, a.format, &e),
    };
    let written = match a.format {
        Format::Json => {
            let rows: Vec<Value> = rows
                .into_iter()
                .map(|mut r| {
                    if let Some(o) = r.as_object_mut() {
                        o.remove("token");
                    }
                    r
                })
                .collect();
            writeln!(out, "{}", json!({"ok": true, "mandates": rows}))
        }
        Format::Human => {
            let mut t = String::new();
            for r in &rows {
                let field = |k: &str| crate::gateway::render::escape(r[k].as_str().unwrap_or("-"));
                t.push_str(&format!(
                    "{}  {:<8}  parent {}  {} of {}  until {}\n",
                    field("mandate"),
                    field("status"),
                    field("parent"),
                    field("user"),
                    field("owner"),
                    crate::base::json::format_time(r["expires_at"].as_i64().unwrap_or(0))
                ));
            }
            t.push_str(&format!(
                "{} child mandate{}\n",
                rows.len(),
                if rows.len() == 1 { "" } else { "s" }
            ));
            write!(out, "{t}")
        }
    };
    u8::from(written.is_err())
}

fn show(a: &IdArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    // by its id, listed or not
    let row = match gw.mandate_row(&a.id) {
        Ok(r) => r,
        Err(e) => return failure(out, a.format, &e),
    };
    let Some(row) = row else {
        let e = crate::gateway::ChildError::Request {
            reason: format!(
                "the store holds no child mandate `{}`",
                crate::base::json::echo(&a.id)
            ),
        };
        return failure(out, a.format, &e);
    };
    // the parent and the child, from the token (issued) or the held record
    let (parent, child) = match serde_json::from_value::<MandateToken>(row["token"].clone()) {
        Ok(t) => match t.ancestors.last() {
            Some(p) => (
                MandateToken {
                    ancestors: t.ancestors[..t.ancestors.len() - 1].to_vec(),
                    ..p.clone()
                },
                t.mandate,
            ),
            None => return failure(out, a.format, &no_parent(&a.id)),
        },
        Err(_) => match gw.held_child(&a.id) {
            Ok(Some(h)) => (h.parent, h.mandate),
            Ok(None) => return failure(out, a.format, &no_parent(&a.id)),
            Err(e) => return failure(out, a.format, &e),
        },
    };
    let shown = match gw.show_child(&parent, &child) {
        Ok(s) => s,
        Err(e) => return failure(out, a.format, &e),
    };
    let written = match a.format {
        Format::Json => {
            let mut v = row;
            v["ok"] = json!(true);
            v["shown"] = serde_json::to_value(&shown).unwrap_or(Value::Null);
            v["text"] = json!(shown.text());
            writeln!(out, "{v}")
        }
        Format::Human => write!(
            out,
            "{:<12}{}\n{}",
            "status",
            row["status"].as_str().unwrap_or(""),
            shown.text()
        ),
    };
    u8::from(written.is_err())
}

fn no_parent(id: &str) -> crate::gateway::ChildError {
    crate::gateway::ChildError::Request {
        reason: format!(
            "the child mandate `{}` is recorded without its parent",
            crate::base::json::echo(id)
        ),
    }
}

fn revoke(a: &IdArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    match gw.revoke_child(&a.id, "cli") {
        Ok(r) => {
            let written = match a.format {
                Format::Json => writeln!(out, "{}", json!({"ok": true, "receipt": r})),
                Format::Human => writeln!(
                    out,
                    "revoked `{}` and its children (receipt {})",
                    crate::gateway::render::escape(&a.id),
                    r.seq
                ),
            };
            u8::from(written.is_err())
        }
        Err(e) => failure(out, a.format, &e),
    }
}

fn issue(a: &IssueChildArgs, out: &mut dyn Write) -> u8 {
    let bad = |reason: String| crate::gateway::ChildError::Request { reason };
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    let parent = match super::child::read_parent(&a.parent) {
        Ok(p) => p,
        Err(e) => return failure(out, a.format, &bad(e)),
    };
    let key = match crate::keys::load_secret(&a.key) {
        Ok(k) => k,
        Err(e) => return failure(out, a.format, &e),
    };
    let now = match gw.now() {
        Ok(n) => n,
        Err(e) => return failure(out, a.format, &e),
    };
    let token = match a
        .child
        .request(a.ttl.map(|t| json!(now.saturating_add(t))))
        .and_then(|req| super::child::issue(&gw, &parent, &req, &key))
    {
        Ok(t) => t,
        Err(e) => return failure(out, a.format, &e),
    };
    let (token, receipt) = token;
    let text = match serde_json::to_string_pretty(&token) {
        Ok(t) => t,
        Err(e) => return failure(out, a.format, &bad(e.to_string())),
    };
    let written = match (&a.output, a.format) {
        (Some(p), _) => std::fs::write(p, text + "\n").and_then(|()| match a.format {
            Format::Json => writeln!(
                out,
                "{}",
                json!({"ok": true, "mandate": token.mandate.id, "receipt": receipt})
            ),
            Format::Human => writeln!(
                out,
                "issued `{}` (receipt {})",
                crate::gateway::render::escape(&token.mandate.id),
                receipt.seq
            ),
        }),
        (None, Format::Json) => writeln!(
            out,
            "{}",
            json!({"ok": true, "token": token, "receipt": receipt})
        ),
        (None, Format::Human) => writeln!(out, "{text}"),
    };
    u8::from(written.is_err())
}
