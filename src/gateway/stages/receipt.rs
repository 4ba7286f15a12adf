//! Stage 9, receipt: every decision, whatever its outcome, is appended to
//! the hash chain in the same transaction as its effects: the raw proposal,
//! the resolved values and their origins, the stage, the decision, the
//! approvers, the policies that decided, and the bundle hash.
//!
//! The body is written straight to canonical JSON (keys in RFC 8785 order)
//! from the decision, without building a JSON value first; the store hashes
//! and keeps that text as is.
//!
//! A decision that executed also records what it took from the store,
//! `"consumed": {"amount": <minor units spent>, "nonces": [<approval
//! nonces used up>]}`, so that `ipc receipts verify` can recompute the
//! budgets, used nonces and executed operations from the chain alone and
//! compare them with the store's (see [`crate::store::audit`]). Other
//! receipts have no `consumed` key.

use super::Run;
use crate::canonical::{CanonicalError, Jcs, ObjectWriter};
use crate::gateway::json::format_time;
use crate::gateway::{Decision, Mandate};
use crate::store::{ChainLink, StoreError};
use serde_json::Value;

pub(super) fn append(r: &mut Run<'_>, d: &Decision) -> Result<ChainLink, StoreError> {
    let consumed = r.spent.map(|amount| Consumed {
        amount,
        nonces: &r.nonces,
    });
    let redacted = redact_secrets(r, d);
    let body = body(
        r.now,
        &r.gw.bundle_hash,
        r.mandate.as_deref(),
        redacted.as_ref().unwrap_or(&r.input.proposal),
        d,
        consumed.as_ref(),
    )
    .map_err(|e| StoreError::Backend(format!("cannot encode the receipt: {e}")))?;
    r.tx.append_receipt_jcs(&body)
}

/// The proposal as the receipt keeps it when it names an action with
/// `secret` parameters: each secret argument replaced by its commitment
/// (or, when it never got one — a refused value —, by `secret:withheld`).
/// `None`: nothing to hide, the proposal is kept as it came.
/// The commitments are read from the decision: the run's own `resolved`
/// has been moved into it by then.
fn redact_secrets(r: &Run<'_>, d: &Decision) -> Option<Value> {
    let name = r.input.proposal.get("action")?.as_str()?;
    let params = &r.gw.actions.get(name)?.table.action.params;
    let args = r.input.proposal.get("args")?.as_object()?;
    // on the decision path: nothing is copied unless a secret is present
    let is_secret = |p: &&crate::ir::Param| p.secret && args.contains_key(&p.name);
    if !params.iter().any(|p| is_secret(&p)) {
        return None;
    }
    let mut p = r.input.proposal.clone();
    if let Some(Value::Object(args)) = p.get_mut("args") {
        for s in params.iter().filter(is_secret).map(|p| p.name.as_str()) {
            if let Some(v) = args.get_mut(s) {
                *v = match d.resolved.get(s) {
                    Some(c) if crate::gateway::secret::is_commitment(c) => c.clone(),
                    _ => Value::String("secret:withheld".into()),
                };
            }
        }
    }
    Some(p)
}

/// What an executed decision took from the store: the amount spent from
/// the mandate's budget (minor units; 0 for an action without a budget
/// parameter; one call) and the approval nonces it used up.
#[derive(Clone, Copy, Debug)]
pub struct Consumed<'a> {
    pub amount: i64,
    pub nonces: &'a [String],
}

/// The receipt body of a decision, in canonical form: what the store
/// hashes into the chain (see [`crate::store::receipts`]). `consumed` is
/// given for a decision that executed, and only then.
pub fn body(
    now: i64,
    bundle: &str,
    mandate: Option<&Mandate>,
    proposal: &Value,
    d: &Decision,
    consumed: Option<&Consumed<'_>>,
) -> Result<Jcs, CanonicalError> {
    let mut w = ObjectWriter::new();
    w.opt_str("action", d.action.as_deref())
        .strs("approvers", &d.approvers)
        .str("bundle", bundle);
    if let Some(c) = consumed {
        let mut cw = ObjectWriter::new();
        cw.value("amount", &Value::from(c.amount))?
            .strs("nonces", c.nonces);
        w.jcs("consumed", &cw.finish());
    }
    w.str("decision", outcome_name(d))
        .opt_uint("level", d.level.map(u64::from))?;
    match mandate {
        Some(m) => {
            let mut mw = ObjectWriter::new();
            mw.str("id", &m.id).str("owner", &m.owner);
            // a narrowed mandate's allowed sources, so that the receipt
            // alone says which sources could vouch for each value
            if !m.sources.is_empty() {
                let sources = Value::Object(
                    m.sources
                        .iter()
                        .map(|(k, v)| (k.clone(), Value::from(v.clone())))
                        .collect(),
                );
                mw.value("sources", &sources)?;
            }
            mw.str("user", &m.user);
            w.jcs("mandate", &mw.finish())
        }
        None => w.value("mandate", &Value::Null)?,
    };
    w.opt_str("operation_hash", d.operation_hash.as_deref())
        .map("origins", &d.origins)?
        .strs("policies", &d.policies);
    // the agent's proposal as it came, whatever it holds: a value canonical
    // JSON cannot hold exactly (an integer beyond ±(2^53 − 1)), or one
    // nested so deep that its body could not be read back, is kept as its
    // JSON text instead, so that no line can make its receipt fail
    match crate::canonical::check_exact(proposal, "$.proposal") {
        Ok(()) if depth(proposal) <= MAX_PROPOSAL_DEPTH => w.value("proposal", proposal)?,
        _ => w.value("proposal", &Value::Null)?.str(
            "proposal_text",
            &serde_json::to_string(proposal).unwrap_or_else(|e| format!("(unencodable: {e})")),
        ),
    };
    w.opt_str("reason", d.reason.as_deref())
        .bool("replayed", d.replayed)
        .map("resolved", &d.resolved)?
        .value("result", d.result.as_ref().unwrap_or(&Value::Null))?
        .str("stage", d.stage.name())
        .str("time", &format_time(now));
    Ok(w.finish())
}

/// Deepest proposal kept as a JSON value in a receipt: the body adds a
/// level, and serde_json reads at most 128 back.
const MAX_PROPOSAL_DEPTH: usize = 64;

/// Nesting depth of a JSON value (a scalar is 0), without recursion.
fn depth(v: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(m) => stack.extend(m.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

fn outcome_name(d: &Decision) -> &'static str {
    match d.decision {
        crate::gateway::Outcome::Allow => "ALLOW",
        crate::gateway::Outcome::Pending => "PENDING",
        crate::gateway::Outcome::Deny => "DENY",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{Budget, Outcome, Stage};
    use serde_json::{Map, json};

    fn decision(outcome: Outcome, stage: Stage) -> Decision {
        let mut resolved = Map::new();
        resolved.insert("payee_iban".into(), json!("DE44500105175407324931"));
        resolved.insert("amount".into(), json!(12_050));
        resolved.insert("tags".into(), json!(["a", "é\n"]));
        let mut origins = Map::new();
        origins.insert("payee_iban".into(), json!("registry.beneficiaries"));
        Decision {
            decision: outcome,
            stage,
            action: Some("payment.transfer".into()),
            reason: (outcome != Outcome::Allow).then(|| "a \"reason\"".into()),
            hint: Some("not in the receipt".into()),
            resolved,
            origins,
            level: Some(1),
            operation_hash: Some("sha256:ab".into()),
            approve_by: None,
            approvers: vec!["emma".into(), "zoe".into()],
            policies: vec!["policy1".into()],
            result: (outcome == Outcome::Allow).then(|| json!({"ok": true, "n": 1.5})),
            replayed: outcome == Outcome::Allow,
            receipt: None,
            secrets: Default::default(),
        }
    }

    /// What the body was before it was written directly: a JSON value,
    /// canonicalised. The direct writer must give the same bytes.
    fn via_value(
        mandate: Option<&Mandate>,
        proposal: &Value,
        d: &Decision,
        consumed: Option<&Consumed<'_>>,
    ) -> String {
        let mut v = json!({
            "time": format_time(1_764_268_800),
            "bundle": "sha256:b",
            "mandate": mandate.map(|m| json!({"id": m.id, "user": m.user, "owner": m.owner})),
            "proposal": proposal,
            "decision": d.decision,
            "stage": d.stage,
            "action": d.action,
            "reason": d.reason,
            "resolved": d.resolved,
            "origins": d.origins,
            "level": d.level,
            "operation_hash": d.operation_hash,
            "approvers": d.approvers,
            "policies": d.policies,
            "result": d.result,
            "replayed": d.replayed,
        });
        if let Some(c) = consumed {
            v["consumed"] = json!({"amount": c.amount, "nonces": c.nonces});
        }
        crate::canonical::value_to_jcs(&v).unwrap()
    }

    #[test]
    fn direct_body_is_the_canonical_form_of_the_receipt_value() {
        let m = Mandate {
            id: "m-1".into(),
            pack: "bank".into(),
            user: "emma".into(),
            owner: "emma \u{1}".into(),
            scopes: vec![],
            claims: Map::new(),
            budget: Budget {
                amount: 1,
                calls: 1,
            },
            issued_at: 0,
            expires_at: 1,
            sources: Default::default(),
        };
        let proposal = json!({"action": "payment.transfer", "args": {"z": 1, "a": [null, 2.5]}});
        for (o, s) in [
            (Outcome::Allow, Stage::Execution),
            (Outcome::Pending, Stage::Approval),
            (Outcome::Deny, Stage::Authn),
        ] {
            let d = decision(o, s);
            let nonces = ["n-2".to_string(), "n-1\u{7f}".to_string()];
            let executed = Consumed {
                amount: 12_050,
                nonces: &nonces,
            };
            let none = Consumed {
                amount: 0,
                nonces: &[],
            };
            for mandate in [Some(&m), None] {
                for consumed in [None, Some(&executed), Some(&none)] {
                    let direct =
                        body(1_764_268_800, "sha256:b", mandate, &proposal, &d, consumed).unwrap();
                    assert_eq!(direct.as_str(), via_value(mandate, &proposal, &d, consumed));
                }
            }
        }
        let mut bare = decision(Outcome::Deny, Stage::Contract);
        bare.action = None;
        bare.level = None;
        bare.operation_hash = None;
        bare.resolved = Map::new();
        let direct = body(
            1_764_268_800,
            "sha256:b",
            None,
            &json!("not json"),
            &bare,
            None,
        )
        .unwrap();
        assert_eq!(
            direct.as_str(),
            via_value(None, &json!("not json"), &bare, None)
        );
    }

    /// Issue #11, item 2: whatever the agent wrote, its receipt encodes;
    /// a proposal canonical JSON cannot hold exactly is kept as its text.
    #[test]
    fn an_inexact_integer_in_the_proposal_is_kept_as_text() {
        let d = decision(Outcome::Deny, Stage::Contract);
        let proposal =
            json!({"action": "x", "args": {"n": u64::MAX, "m": -9_007_199_254_740_993i64}});
        let b = body(0, "b", None, &proposal, &d, None).unwrap();
        let v: Value = serde_json::from_str(b.as_str()).unwrap();
        assert_eq!(v["proposal"], Value::Null);
        let text = v["proposal_text"].as_str().unwrap();
        assert!(text.contains("18446744073709551615") && text.contains("-9007199254740993"));
        assert_eq!(crate::canonical::value_to_jcs(&v).unwrap(), b.as_str());
        // an exact one is kept as a value, with no text beside it
        let b = body(
            0,
            "b",
            None,
            &json!({"n": 9_007_199_254_740_991u64}),
            &d,
            None,
        )
        .unwrap();
        assert!(!b.as_str().contains("proposal_text"));
    }
}
