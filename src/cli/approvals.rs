//! `ipc approvals list|show`: the operations waiting for approval, as the
//! gateway resolved them (never the agent's copy), shown as a person reads
//! them (`gateway::render`, the one rendering every approver sees):
//! amounts in major units, each value escaped and whole with its origin,
//! what is new to the owner, why approval is needed and who must give it.

use super::Format;
use super::gateway::GatewayArgs;
use crate::gateway::Gateway;
use crate::gateway::pending::PendingOp;
use crate::gateway::render::Shown;
use serde_json::{Value, json};
use std::fmt::Write as _;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct ApprovalsArgs {
    #[command(subcommand)]
    pub command: ApprovalsCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ApprovalsCommand {
    /// The operations waiting for approval (not executed, declined or expired).
    List(ListArgs),
    /// One operation, in full.
    Show(ShowArgs),
}

#[derive(clap::Args, Debug)]
pub struct ListArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Only those this person may approve (as the user, or as the second
    /// pair of eyes for the owner).
    #[arg(long = "for", value_name = "NAME")]
    pub for_whom: Option<String>,
    /// Also those executed, declined or expired.
    #[arg(long)]
    pub all: bool,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct ShowArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The operation hash.
    pub operation: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(args: &ApprovalsArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        ApprovalsCommand::List(a) => list(a, out),
        ApprovalsCommand::Show(a) => show(a, out),
    }
}

fn list(a: &ListArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    let which = crate::gateway::approving::Which {
        tenants: &crate::gateway::Tenants::All,
        all: a.all,
        for_whom: a.for_whom.as_deref(),
    };
    let shown: Vec<(PendingOp, &'static str)> = match gw.pending_listing(&which) {
        Ok(s) => s,
        Err(e) => return failure(out, a.format, &e),
    };
    let written = match a.format {
        Format::Json => writeln!(
            out,
            "{}",
            json!({"ok": true, "operations": shown.iter().map(|(op, s)| {
                let mut v = serde_json::to_value(op).unwrap_or(Value::Null);
                v["status"] = json!(s);
                v
            }).collect::<Vec<_>>()})
        ),
        Format::Human => {
            let mut t = String::new();
            for (op, s) in &shown {
                let view = match self::shown(&gw, op) {
                    Ok(v) => v,
                    Err(e) => return failure(out, a.format, &e),
                };
                let _ = writeln!(
                    t,
                    "{}  {:<8}  level {}  {:<22}  {}  {}",
                    view.operation_hash,
                    s,
                    op.level,
                    view.action,
                    view.user,
                    summary(&view)
                );
            }
            let _ = writeln!(
                t,
                "{} operation{}{}",
                shown.len(),
                if shown.len() == 1 { "" } else { "s" },
                if a.all { "" } else { " waiting for approval" }
            );
            write!(out, "{t}")
        }
    };
    u8::from(written.is_err())
}

fn show(a: &ShowArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = super::gateway::load_trusted_or_report(&a.gateway) else {
        return 1;
    };
    let ops = match gw.pending_ops() {
        Ok(o) => o,
        Err(e) => return failure(out, a.format, &e),
    };
    let Some((op, executed)) = ops
        .into_iter()
        .find(|(o, _)| o.operation_hash == a.operation)
    else {
        let e = crate::gateway::approving::PendingError::Unknown {
            hash: a.operation.clone(),
        };
        return failure(out, a.format, &e);
    };
    let now = match gw.now() {
        Ok(n) => n,
        Err(e) => return failure(out, a.format, &e),
    };
    let s = op.status(executed, now);
    let view = match shown(&gw, &op) {
        Ok(v) => v,
        Err(e) => return failure(out, a.format, &e),
    };
    let written = match a.format {
        Format::Json => {
            let mut v = serde_json::to_value(&op).unwrap_or(Value::Null);
            v["status"] = json!(s);
            v["shown"] = serde_json::to_value(&view).unwrap_or(Value::Null);
            v["text"] = json!(view.text());
            writeln!(out, "{v}")
        }
        Format::Human => write!(out, "{:<12}{s}\n{}", "status", view.text()),
    };
    u8::from(written.is_err())
}

/// The values in a line, escaped and whole: `payee_iban=DE02 1203 …
/// amount=1,500.00 EUR`.
fn summary(shown: &Shown) -> String {
    shown
        .values
        .iter()
        .map(|f| {
            let items: Vec<String> = f.items.iter().map(|lines| lines.concat()).collect();
            if f.list {
                format!("{}=[{}]", f.name, items.join(", "))
            } else {
                format!("{}={}", f.name, items.concat())
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The operation as its approver sees it, or the store's failure.
fn shown(gw: &Gateway, op: &PendingOp) -> Result<Shown, crate::store::StoreError> {
    crate::gateway::render::show(gw, op, gw.now()?)
}

pub(super) fn failure(out: &mut dyn Write, format: Format, e: &dyn miette::Diagnostic) -> u8 {
    match format {
        Format::Human => eprint!("{}", super::bundle::render_error(e, false)),
        Format::Json => {
            let _ = writeln!(
                out,
                "{}",
                json!({"ok": false, "error": super::bundle::error_json(e)})
            );
        }
    }
    1
}
