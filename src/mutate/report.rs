//! The mutation report: a table per pack and a score, or one JSON document.

use super::{PackReport, Status};
use serde_json::{Value, json};
use std::fmt::Write as _;

fn pad(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n >= w {
        s.to_string()
    } else {
        format!("{s}{}", " ".repeat(w - n))
    }
}

/// The status column: `killed by <scenario>`, `killed by guarantee
/// "<reason>"`, `equivalent (proved)`, `SURVIVED`, `UNPROVEN`.
fn status_text(s: &Status) -> String {
    match s {
        Status::Killed { scenario, .. } => format!("killed by {scenario}"),
        Status::KilledByGuarantee { guarantee, .. } => {
            format!("killed by guarantee \"{guarantee}\"")
        }
        Status::Equivalent => "equivalent (proved)".into(),
        Status::Survived {
            original, mutant, ..
        } => format!("SURVIVED ({original} → {mutant} on the counterexample)"),
        Status::Unproven { .. } => "UNPROVEN".into(),
    }
}

/// The human report of one pack.
pub fn human(r: &PackReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "pack {}: {} mutants, {} scenarios",
        r.pack,
        r.mutants.len(),
        r.scenarios
    );
    let rows: Vec<[String; 4]> = r
        .mutants
        .iter()
        .map(|m| {
            [
                m.id.clone(),
                format!("{} ({})", m.policy_id, m.source),
                m.description.clone(),
                status_text(&m.status),
            ]
        })
        .collect();
    let head = ["mutant", "policy (pack line)", "mutation", "status"];
    let mut w = head.map(|h| h.chars().count());
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let _ = writeln!(
        out,
        "  {}  {}  {}  {}",
        pad(head[0], w[0]),
        pad(head[1], w[1]),
        pad(head[2], w[2]),
        head[3]
    );
    for row in &rows {
        let _ = writeln!(
            out,
            "  {}  {}  {}  {}",
            pad(&row[0], w[0]),
            pad(&row[1], w[1]),
            pad(&row[2], w[2]),
            row[3]
        );
    }
    for m in &r.mutants {
        match &m.status {
            Status::Survived {
                counterexample,
                scenario,
                ..
            } => {
                let _ = writeln!(
                    out,
                    "\n{} SURVIVED: {} — {} ({})",
                    m.id, m.description, m.policy_id, m.source
                );
                let _ = writeln!(
                    out,
                    "  counterexample: {} {} {} context {}",
                    counterexample.principal,
                    counterexample.action,
                    counterexample.resource,
                    counterexample.context
                );
                let _ = writeln!(out, "  scenario to add (the test, and what it needs):");
                let text = serde_json::to_string_pretty(scenario).unwrap_or_default();
                for l in text.lines() {
                    let _ = writeln!(out, "    {l}");
                }
            }
            Status::KilledByGuarantee {
                guarantee,
                guarantee_source,
                claim,
                counterexample,
                original,
                mutant,
            } => {
                let _ = writeln!(
                    out,
                    "\n{} killed by guarantee \"{guarantee}\" ({guarantee_source}, {claim}): {} — {} ({})",
                    m.id, m.description, m.policy_id, m.source
                );
                let _ = writeln!(
                    out,
                    "  the mutant decides {mutant} (the pack: {original}) on: context {}",
                    counterexample.context
                );
            }
            Status::Unproven { reason } => {
                let _ = writeln!(
                    out,
                    "\n{} UNPROVEN: {} — {} ({}): {reason}",
                    m.id, m.description, m.policy_id, m.source
                );
            }
            _ => {}
        }
    }
    if let Some(why) = &r.solver_unavailable {
        let _ = writeln!(
            out,
            "\nthe solver is not available ({why}): survivors are listed as UNPROVEN"
        );
    }
    if !r.guarantees_not_kept.is_empty() {
        let _ = writeln!(out, "\nguarantees that kill no mutant:");
        for g in &r.guarantees_not_kept {
            let _ = writeln!(out, "  {g}");
        }
    }
    if !r.lint.is_empty() {
        let _ = writeln!(out, "\nlint ({} findings):", r.lint.len());
        for f in &r.lint {
            let _ = writeln!(
                out,
                "  {}: {} ({}), action `{}`: {}",
                f.code, f.policy_id, f.source, f.action, f.message
            );
            if let Some(e) = &f.example {
                let _ = writeln!(out, "    for example: context {}", e.context);
            }
        }
    }
    let _ = writeln!(
        out,
        "\nscore {}: {:.1}% ({} killed by a scenario, {} by a guarantee, {} equivalent, {} survived, {} unproven of {})",
        r.pack,
        r.score(),
        r.count("killed"),
        r.count("killed by guarantee"),
        r.count("equivalent"),
        r.count("SURVIVED"),
        r.count("UNPROVEN"),
        r.mutants.len()
    );
    out
}

/// Every pack, as one JSON document.
pub fn json(reports: &[PackReport], errors: &[String]) -> Value {
    let ok = errors.is_empty() && reports.iter().all(PackReport::ok);
    json!({
        "ok": ok,
        "errors": errors,
        "packs": reports.iter().map(|r| {
            let mut v = serde_json::to_value(r).unwrap_or(Value::Null);
            if let Value::Object(o) = &mut v {
                o.insert("summary".into(), r.summary());
            }
            v
        }).collect::<Vec<_>>(),
    })
}
