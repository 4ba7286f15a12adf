//! `ipc receipts report STORE`: the decisions counted, by outcome, and
//! those denied or asked for approval by action, stage and reason, apart
//! for enforced decisions and for decisions taken in shadow mode (by what
//! they would have been). What an operator reads before turning a pack's
//! enforcement on (`docs/rollout.md`).

use super::Format;
use super::report::{failure, load, plural, write_json};
use crate::store::ReceiptRecord;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// The store: an SQLite file or a `postgres://` URL.
    pub store: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// Enforced, or in shadow (counted by what it would have been).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Mode {
    Enforced,
    Shadow,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Enforced => "enforced",
            Mode::Shadow => "shadow",
        }
    }
}

/// One decision receipt, as the report counts it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    mode: Mode,
    /// ALLOW, DENY or PENDING (a shadow decision's would-be one).
    decision: String,
    action: String,
    stage: String,
    reason: String,
}

fn text(v: Option<&Value>) -> String {
    v.and_then(Value::as_str).unwrap_or("-").to_string()
}

/// A decision receipt as a row; `None` for other receipts (approvals,
/// outcomes, registry changes, ...), which carry a `kind`.
fn row(r: &ReceiptRecord) -> Option<Row> {
    let b = &r.body;
    if b.get("kind").is_some() {
        return None;
    }
    let decision = b.get("decision")?.as_str()?;
    let (mode, of) = match (decision, b.get("would_be")) {
        ("SHADOW", Some(w)) => (Mode::Shadow, w),
        _ => (Mode::Enforced, b),
    };
    let action = b
        .get("action")
        .or_else(|| b.get("proposal").and_then(|p| p.get("action")))
        .filter(|a| a.is_string());
    Some(Row {
        mode,
        decision: text(of.get("decision")),
        action: text(action),
        stage: text(of.get("stage")),
        reason: text(of.get("reason")),
    })
}

/// The counts: by mode and decision, and the refused or asked rows.
#[derive(Default)]
struct Counts {
    totals: BTreeMap<(Mode, String), usize>,
    refused: BTreeMap<Row, usize>,
}

fn count(records: &[ReceiptRecord]) -> Counts {
    let mut c = Counts::default();
    for r in records.iter().filter_map(row) {
        *c.totals.entry((r.mode, r.decision.clone())).or_default() += 1;
        if r.decision != "ALLOW" {
            *c.refused.entry(r).or_default() += 1;
        }
    }
    c
}

pub fn run(args: &ReportArgs, out: &mut dyn Write) -> u8 {
    let snap = match load(&args.store) {
        Ok(x) => x,
        Err(e) => return failure(out, args.format, &e),
    };
    let c = count(&snap.records());
    let written = match args.format {
        Format::Json => write_json(out, &as_json(&c)),
        Format::Human => human(&c, out),
    };
    u8::from(written.is_err())
}

fn as_json(c: &Counts) -> Value {
    let mut totals = json!({"enforced": {}, "shadow": {}});
    for ((mode, decision), n) in &c.totals {
        totals[mode.name()][decision] = json!(n);
    }
    let refused: Vec<Value> = c
        .refused
        .iter()
        .map(|(r, n)| {
            json!({"mode": r.mode.name(), "decision": r.decision, "action": r.action,
                   "stage": r.stage, "reason": r.reason, "count": n})
        })
        .collect();
    json!({"ok": true, "decisions": totals, "denied_or_asked": refused})
}

fn human(c: &Counts, out: &mut dyn Write) -> std::io::Result<()> {
    for mode in [Mode::Enforced, Mode::Shadow] {
        let of_mode: Vec<String> = c
            .totals
            .iter()
            .filter(|((m, _), _)| *m == mode)
            .map(|((_, d), n)| format!("{n} {d}"))
            .collect();
        let total: usize = c
            .totals
            .iter()
            .filter(|((m, _), _)| *m == mode)
            .map(|(_, n)| n)
            .sum();
        let label = match mode {
            Mode::Enforced => "enforced",
            Mode::Shadow => "in shadow, would be",
        };
        if total > 0 {
            writeln!(
                out,
                "{} {label}: {}",
                plural(total, "decision"),
                of_mode.join(", ")
            )?;
        }
    }
    if c.totals.is_empty() {
        writeln!(out, "no decisions")?;
    }
    for mode in [Mode::Enforced, Mode::Shadow] {
        let rows: Vec<(&Row, &usize)> = c.refused.iter().filter(|(r, _)| r.mode == mode).collect();
        if rows.is_empty() {
            continue;
        }
        let title = match mode {
            Mode::Enforced => "denied or asked (enforced)",
            Mode::Shadow => "would be denied or asked (shadow)",
        };
        writeln!(out, "\n{title}:")?;
        writeln!(
            out,
            "{:>7}  {:<8} {:<24} {:<11} reason",
            "count", "decision", "action", "stage"
        )?;
        for (r, n) in rows {
            writeln!(
                out,
                "{n:>7}  {:<8} {:<24} {:<11} {}",
                r.decision, r.action, r.stage, r.reason
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(body: Value) -> ReceiptRecord {
        ReceiptRecord {
            seq: 1,
            prev_hash: String::new(),
            hash: String::new(),
            body,
        }
    }

    #[test]
    fn shadow_decisions_are_counted_by_what_they_would_have_been() {
        let records = vec![
            rec(json!({"decision": "ALLOW", "action": "a.pay", "stage": "execution"})),
            rec(
                json!({"decision": "DENY", "action": "a.pay", "stage": "budget", "reason": "over"}),
            ),
            rec(
                json!({"decision": "SHADOW", "action": "a.pay", "stage": "provenance",
                       "would_be": {"decision": "DENY", "stage": "provenance", "reason": "unknown payee"}}),
            ),
            rec(
                json!({"decision": "SHADOW", "action": "a.pay", "stage": "provenance",
                       "would_be": {"decision": "DENY", "stage": "provenance", "reason": "unknown payee"}}),
            ),
            rec(
                json!({"decision": "SHADOW", "action": "a.pay", "stage": "approval",
                       "would_be": {"decision": "PENDING", "stage": "approval", "reason": "big", "level": 1}}),
            ),
            rec(
                json!({"decision": "SHADOW", "action": "a.pay", "stage": "execution",
                       "would_be": {"decision": "ALLOW", "stage": "execution"}}),
            ),
            // not a decision: left out
            rec(json!({"kind": "approval", "decision": "x"})),
        ];
        let c = count(&records);
        let v = as_json(&c);
        assert_eq!(v["decisions"]["enforced"], json!({"ALLOW": 1, "DENY": 1}));
        assert_eq!(
            v["decisions"]["shadow"],
            json!({"ALLOW": 1, "DENY": 2, "PENDING": 1})
        );
        let rows = v["denied_or_asked"].as_array().unwrap();
        assert_eq!(rows.len(), 3, "{rows:#?}");
        let denied = rows
            .iter()
            .find(|r| r["mode"] == "shadow" && r["decision"] == "DENY")
            .unwrap();
        assert_eq!(denied["count"], 2);
        assert_eq!(denied["reason"], "unknown payee");
        let mut text = vec![];
        human(&c, &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains("4 decisions in shadow, would be: 1 ALLOW, 2 DENY, 1 PENDING"),
            "{text}"
        );
        assert!(text.contains("would be denied or asked (shadow)"), "{text}");
    }
}
