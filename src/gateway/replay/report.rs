//! What a replay found: each recorded decision against the one the new
//! bundle takes, counted by transition (from → to) per action, stage and
//! reason; what could not be taken again, by why.

use crate::gateway::Decision;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// One side of a transition: a decision as recorded, or as re-decided.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Side {
    /// `ALLOW`, `PENDING` or `DENY` (a recorded `SHADOW`: its would-be
    /// decision).
    pub decision: String,
    pub stage: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Side {
    /// The decision a receipt records (a shadow decision's `would_be`);
    /// `None` for a body that records no decision.
    pub(super) fn recorded(body: &Value) -> Option<Side> {
        let decided = body.get("decision")?.as_str()?;
        let from = match (decided, body.get("would_be")) {
            ("SHADOW", Some(w)) if w.is_object() => w,
            _ => body,
        };
        Some(Side {
            decision: from.get("decision")?.as_str()?.to_string(),
            stage: from.get("stage")?.as_str()?.to_string(),
            level: from.get("level").and_then(Value::as_u64),
            reason: from
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// A re-decision (a SHADOW one, which a replay does not take, by its
    /// `would_be`).
    pub(super) fn decided(d: &Decision) -> Side {
        match &d.would_be {
            Some(w) => Side {
                decision: w.decision.name().to_string(),
                stage: w.stage.name().to_string(),
                level: w.level.map(u64::from),
                reason: w.reason.clone(),
            },
            None => Side {
                decision: d.decision.name().to_string(),
                stage: d.stage.name().to_string(),
                level: d.level.map(u64::from),
                reason: d.reason.clone(),
            },
        }
    }

    /// Whether `self` (the re-decision) lets through what `from` did not:
    /// an ALLOW of what was not allowed, or an approval level lowered.
    pub fn loosens(&self, from: &Side) -> bool {
        if self.decision == "ALLOW" && from.decision != "ALLOW" {
            return true;
        }
        let lower = matches!((self.level, from.level), (Some(a), Some(b)) if a < b);
        self.decision == from.decision && self.decision != "DENY" && lower
    }

    /// The same outcome: decision, stage and level (the reason's words
    /// may differ).
    fn same(&self, other: &Side) -> bool {
        self.decision == other.decision && self.stage == other.stage && self.level == other.level
    }
}

/// A count of recorded decisions of one action that the new bundle
/// decides otherwise, the same way.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Transition {
    pub action: Option<String>,
    pub from: Side,
    pub to: Side,
    pub count: u64,
    /// The new decision lets through what the recorded one did not.
    pub loosens: bool,
}

/// Everything a replay counted.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// The new bundle's hash.
    pub bundle: String,
    /// The recorded chain's head when the replay began (what it read up to).
    pub head: Option<Value>,
    /// Recorded decisions (re-decided and not).
    pub decisions: u64,
    pub replayed: u64,
    pub unchanged: u64,
    pub changed: u64,
    /// Decisions now allowed, or at a lower approval level.
    pub newly_allowed: u64,
    pub transitions: Vec<Transition>,
    /// Decisions not taken again, by why.
    pub not_replayable: BTreeMap<String, u64>,
    /// Registry changes and revocations applied at their place.
    pub registry_changes: u64,
    pub revocations: u64,
    /// Registry changes the new bundle refused, by why.
    pub changes_refused: BTreeMap<String, u64>,
    /// Receipts that decide nothing, by kind.
    pub other: BTreeMap<String, u64>,
}

/// The counts as they are taken.
#[derive(Default)]
pub(super) struct Tally {
    pub report: Report,
    moved: BTreeMap<(Option<String>, Side, Side), u64>,
}

impl Tally {
    pub(super) fn decided(&mut self, action: Option<String>, from: Side, to: Side) {
        self.report.decisions += 1;
        self.report.replayed += 1;
        if to.same(&from) {
            self.report.unchanged += 1;
            return;
        }
        self.report.changed += 1;
        if to.loosens(&from) {
            self.report.newly_allowed += 1;
        }
        *self.moved.entry((action, from, to)).or_default() += 1;
    }

    pub(super) fn unreplayable(&mut self, why: &str) {
        self.report.decisions += 1;
        *self
            .report
            .not_replayable
            .entry(why.to_string())
            .or_default() += 1;
    }

    pub(super) fn other(&mut self, kind: &str) {
        *self.report.other.entry(kind.to_string()).or_default() += 1;
    }

    pub(super) fn refused(&mut self, why: String) {
        *self.report.changes_refused.entry(why).or_default() += 1;
    }

    /// The report, transitions by action, stage and reason.
    pub(super) fn finish(mut self) -> Report {
        let mut t: Vec<Transition> = self
            .moved
            .into_iter()
            .map(|((action, from, to), count)| Transition {
                loosens: to.loosens(&from),
                action,
                from,
                to,
                count,
            })
            .collect();
        t.sort_by(|a, b| {
            (&a.action, &a.to.stage, &a.to.reason, &a.from).cmp(&(
                &b.action,
                &b.to.stage,
                &b.to.reason,
                &b.from,
            ))
        });
        self.report.transitions = t;
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::Side;

    fn side(d: &str, level: Option<u64>) -> Side {
        Side {
            decision: d.into(),
            stage: "approval".into(),
            level,
            reason: None,
        }
    }

    /// A decision recorded in shadow mode is compared by what it would
    /// have been; any other by itself.
    #[test]
    fn a_shadow_decision_is_read_by_its_would_be() {
        let shadow = serde_json::json!({"decision": "SHADOW", "stage": "execution",
            "would_be": {"decision": "DENY", "stage": "policy", "reason": "hard cap", "level": 0}});
        let s = Side::recorded(&shadow).unwrap();
        assert_eq!((s.decision.as_str(), s.stage.as_str()), ("DENY", "policy"));
        assert_eq!(s.reason.as_deref(), Some("hard cap"));
        let plain = serde_json::json!({"decision": "PENDING", "stage": "approval", "level": 1});
        let s = Side::recorded(&plain).unwrap();
        assert_eq!((s.decision.as_str(), s.level), ("PENDING", Some(1)));
        assert!(Side::recorded(&serde_json::json!({"kind": "registry"})).is_none());
    }

    #[test]
    fn what_loosens() {
        assert!(side("ALLOW", Some(0)).loosens(&side("PENDING", Some(1))));
        assert!(side("ALLOW", None).loosens(&side("DENY", None)));
        assert!(side("PENDING", Some(1)).loosens(&side("PENDING", Some(2))));
        assert!(side("ALLOW", Some(1)).loosens(&side("ALLOW", Some(2))));
        assert!(!side("PENDING", Some(1)).loosens(&side("ALLOW", Some(0))));
        assert!(!side("DENY", None).loosens(&side("ALLOW", Some(0))));
        assert!(!side("PENDING", Some(2)).loosens(&side("PENDING", Some(1))));
        assert!(!side("DENY", None).loosens(&side("PENDING", Some(1))));
    }
}
