//! Stage 9, receipt: every decision, whatever its outcome, is appended to
//! the hash chain in the same transaction as its effects: the raw proposal,
//! the resolved values and their origins, the stage, the decision, the
//! approvers, the policies that decided, and the bundle hash.
//!
//! The body is written straight to canonical JSON (keys in RFC 8785 order)
//! from the decision, without building a JSON value first; the store hashes
//! and keeps that text as is.

use super::Run;
use crate::canonical::{CanonicalError, Jcs, ObjectWriter};
use crate::gateway::json::format_time;
use crate::gateway::{Decision, Mandate};
use crate::store::{ChainLink, StoreError};
use serde_json::Value;

pub(super) fn append(r: &mut Run<'_>, d: &Decision) -> Result<ChainLink, StoreError> {
    let body = body(
        r.now,
        &r.gw.bundle_hash,
        r.mandate.as_deref(),
        &r.input.proposal,
        d,
    )
    .map_err(|e| StoreError::Backend(format!("cannot encode the receipt: {e}")))?;
    r.tx.append_receipt_jcs(&body)
}

/// The receipt body of a decision, in canonical form: what the store
/// hashes into the chain (see [`crate::store::receipts`]).
pub fn body(
    now: i64,
    bundle: &str,
    mandate: Option<&Mandate>,
    proposal: &Value,
    d: &Decision,
) -> Result<Jcs, CanonicalError> {
    let mut w = ObjectWriter::new();
    w.opt_str("action", d.action.as_deref())
        .strs("approvers", &d.approvers)
        .str("bundle", bundle)
        .str("decision", outcome_name(d))
        .opt_uint("level", d.level.map(u64::from))?;
    match mandate {
        Some(m) => {
            let mut mw = ObjectWriter::new();
            mw.str("id", &m.id)
                .str("owner", &m.owner)
                .str("user", &m.user);
            w.jcs("mandate", &mw.finish())
        }
        None => w.value("mandate", &Value::Null)?,
    };
    w.opt_str("operation_hash", d.operation_hash.as_deref())
        .map("origins", &d.origins)?
        .strs("policies", &d.policies);
    // the agent's proposal as it came, whatever it holds: a value canonical
    // JSON cannot hold exactly (an integer beyond ±(2^53 − 1)) is kept as
    // its JSON text instead, so that no line can make its receipt fail
    match crate::canonical::check_exact(proposal, "$.proposal") {
        Ok(()) => w.value("proposal", proposal)?,
        Err(_) => w.value("proposal", &Value::Null)?.str(
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
        }
    }

    /// What the body was before it was written directly: a JSON value,
    /// canonicalised. The direct writer must give the same bytes.
    fn via_value(mandate: Option<&Mandate>, proposal: &Value, d: &Decision) -> String {
        let v = json!({
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
        };
        let proposal = json!({"action": "payment.transfer", "args": {"z": 1, "a": [null, 2.5]}});
        for (o, s) in [
            (Outcome::Allow, Stage::Execution),
            (Outcome::Pending, Stage::Approval),
            (Outcome::Deny, Stage::Authn),
        ] {
            let d = decision(o, s);
            for mandate in [Some(&m), None] {
                let direct = body(1_764_268_800, "sha256:b", mandate, &proposal, &d).unwrap();
                assert_eq!(direct.as_str(), via_value(mandate, &proposal, &d));
            }
        }
        let mut bare = decision(Outcome::Deny, Stage::Contract);
        bare.action = None;
        bare.level = None;
        bare.operation_hash = None;
        bare.resolved = Map::new();
        let direct = body(1_764_268_800, "sha256:b", None, &json!("not json"), &bare).unwrap();
        assert_eq!(direct.as_str(), via_value(None, &json!("not json"), &bare));
    }

    /// Issue #11, item 2: whatever the agent wrote, its receipt encodes;
    /// a proposal canonical JSON cannot hold exactly is kept as its text.
    #[test]
    fn an_inexact_integer_in_the_proposal_is_kept_as_text() {
        let d = decision(Outcome::Deny, Stage::Contract);
        let proposal =
            json!({"action": "x", "args": {"n": u64::MAX, "m": -9_007_199_254_740_993i64}});
        let b = body(0, "b", None, &proposal, &d).unwrap();
        let v: Value = serde_json::from_str(b.as_str()).unwrap();
        assert_eq!(v["proposal"], Value::Null);
        let text = v["proposal_text"].as_str().unwrap();
        assert!(text.contains("18446744073709551615") && text.contains("-9007199254740993"));
        assert_eq!(crate::canonical::value_to_jcs(&v).unwrap(), b.as_str());
        // an exact one is kept as a value, with no text beside it
        let b = body(0, "b", None, &json!({"n": 9_007_199_254_740_991u64}), &d).unwrap();
        assert!(!b.as_str().contains("proposal_text"));
    }
}
