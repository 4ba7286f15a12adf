//! `ipc approvals list|show`: the operations waiting for approval, as the
//! gateway resolved them (never the agent's copy), shown as a person reads
//! them: amounts in major units, each value with its origin, what is new
//! to the owner, why approval is needed and who must give it.

use super::Format;
use super::gateway::GatewayArgs;
use crate::gateway::Gateway;
use crate::gateway::json::format_time;
use crate::gateway::pending::PendingOp;
use crate::ir::Type;
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

fn load(g: &GatewayArgs) -> Option<Gateway> {
    match super::gateway::load(g) {
        Ok(gw) => Some(gw),
        Err(e) => {
            eprint!("{}", super::bundle::render_error(e.as_ref(), false));
            None
        }
    }
}

fn list(a: &ListArgs, out: &mut dyn Write) -> u8 {
    let Some(gw) = load(&a.gateway) else { return 1 };
    let ops = match gw.pending_ops() {
        Ok(o) => o,
        Err(e) => return failure(out, a.format, &e),
    };
    let now = match gw.now() {
        Ok(n) => n,
        Err(e) => return failure(out, a.format, &e),
    };
    let shown: Vec<(PendingOp, &'static str)> = ops
        .into_iter()
        .map(|(op, ex)| {
            let s = op.status(ex, now);
            (op, s)
        })
        .filter(|(_, s)| a.all || *s == "waiting")
        .filter(|(op, _)| {
            a.for_whom
                .as_deref()
                .is_none_or(|w| op.approvable_by(gw.world(), w))
        })
        .collect();
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
                let _ = writeln!(
                    t,
                    "{}  {:<8}  level {}  {:<22}  {}  {}",
                    op.operation_hash,
                    s,
                    op.level,
                    op.action,
                    op.user,
                    summary(&gw, op)
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
    let Some(gw) = load(&a.gateway) else { return 1 };
    let ops = match gw.pending_ops() {
        Ok(o) => o,
        Err(e) => return failure(out, a.format, &e),
    };
    let Some((op, executed)) = ops
        .into_iter()
        .find(|(o, _)| o.operation_hash == a.operation)
    else {
        let e = crate::gateway::pending::PendingError::Unknown {
            hash: a.operation.clone(),
        };
        return failure(out, a.format, &e);
    };
    let now = match gw.now() {
        Ok(n) => n,
        Err(e) => return failure(out, a.format, &e),
    };
    let s = op.status(executed, now);
    let written = match a.format {
        Format::Json => {
            let mut v = serde_json::to_value(&op).unwrap_or(Value::Null);
            v["status"] = json!(s);
            writeln!(out, "{v}")
        }
        Format::Human => writeln!(out, "{}status     {s}", describe(&gw, &op)),
    };
    u8::from(written.is_err())
}

/// The values in a line: `payee_iban=DE02… amount=1,500.00`.
fn summary(gw: &Gateway, op: &PendingOp) -> String {
    op.resolved
        .iter()
        .map(|(k, v)| format!("{k}={}", shown_value(gw, op, k, v)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A value as a person reads it: an amount in major units, a time as a
/// date, text escaped.
fn shown_value(gw: &Gateway, op: &PendingOp, param: &str, v: &Value) -> String {
    let ty = gw.param_type(&op.action, param).unwrap_or(Type::Text);
    match (ty, v) {
        (Type::Money, Value::Number(n)) => n
            .as_i64()
            .map(crate::gateway::money)
            .unwrap_or_else(|| n.to_string()),
        (Type::Date | Type::Timestamp, Value::Number(n)) => {
            n.as_i64().map(format_time).unwrap_or_else(|| n.to_string())
        }
        (_, Value::String(s)) => crate::gateway::json::echo(s),
        (_, other) => other.to_string(),
    }
}

/// Where a value came from, as a person reads it: `mandate`, `registry`
/// or `proposal` (the first word of each origin), and the origins in full.
fn origin_of(op: &PendingOp, param: &str) -> (String, String) {
    let all: Vec<String> = match op.origins.get(param) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => vec![],
    };
    let kind = all
        .first()
        .and_then(|o| o.split('.').next())
        .unwrap_or("proposal")
        .to_string();
    let full = if all.is_empty() {
        "proposal".to_string()
    } else {
        all.join(", ")
    };
    (kind, full)
}

/// The operation as the approval page shows it: every value as a person
/// reads it (an amount in major units with its currency), its origin, what
/// is new to the owner, the rules that asked (their text and policy), who
/// must approve and who already did, and the expiry. Text only: the page
/// puts it into the document as text, never as markup.
pub(crate) fn view(gw: &Gateway, op: &PendingOp, status: &str) -> Value {
    let currency = op
        .resolved
        .iter()
        .find(|(k, _)| gw.param_type(&op.action, k) == Some(Type::Currency))
        .and_then(|(_, v)| v.as_str());
    let values: Vec<Value> = op
        .resolved
        .iter()
        .map(|(k, v)| {
            let mut shown = shown_value(gw, op, k, v);
            if let (Some(Type::Money), Some(c)) = (gw.param_type(&op.action, k), currency) {
                shown = format!("{shown} {c}");
            }
            let (kind, origin) = origin_of(op, k);
            json!({"name": k, "value": shown, "origin": origin, "origin_kind": kind,
                "new": op.new_values.contains(k)})
        })
        .collect();
    let rules: Vec<Value> = op
        .policies
        .iter()
        .filter_map(|id| gw.rule(&op.action, id).map(|r| (id, r)))
        .filter(|(_, r)| r.kind.level() > 0)
        .map(|(id, r)| {
            json!({"policy": id, "rule": r.kind.keyword(), "reason": r.reason,
                "level": r.kind.level(), "role": r.role})
        })
        .collect();
    json!({
        "operation_hash": op.operation_hash,
        "pack": op.pack,
        "action": op.action,
        "user": op.user,
        "owner": op.owner,
        "mandate": op.mandate,
        "status": status,
        "level": op.level,
        "reason": op.reason,
        "rules": rules,
        "approve_by": op.approve_by,
        "approved_by": op.approved_by(),
        "declined_by": op.declined_by,
        "values": values,
        "created_at": format_time(op.created_at),
        "expires_at": op.expires_at,
        "expires": format_time(op.expires_at),
    })
}

/// The whole operation, as `ipc approve` shows it before signing.
pub(crate) fn describe(gw: &Gateway, op: &PendingOp) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "operation  {}", op.operation_hash);
    let _ = writeln!(
        t,
        "action     {} ({}), for `{}` of `{}`, mandate {}",
        op.action, op.pack, op.user, op.owner, op.mandate
    );
    let _ = writeln!(t, "why        {}", op.reason);
    let _ = writeln!(t, "approve    {}", op.approve_by);
    let width = op.resolved.keys().map(String::len).max().unwrap_or(0);
    for (i, (k, v)) in op.resolved.iter().enumerate() {
        let (_, origin) = origin_of(op, k);
        let new = if op.new_values.contains(k) {
            "  NEW: not among the owner's records"
        } else {
            ""
        };
        let _ = writeln!(
            t,
            "{}  {k:<width$}  {}  (from {origin}){new}",
            if i == 0 { "values   " } else { "         " },
            shown_value(gw, op, k, v)
        );
    }
    let _ = writeln!(t, "expires    {}", format_time(op.expires_at));
    if !op.declined_by.is_empty() {
        let _ = writeln!(t, "declined   by {}", op.declined_by.join(", "));
    }
    t
}

fn failure(out: &mut dyn Write, format: Format, e: &dyn miette::Diagnostic) -> u8 {
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
