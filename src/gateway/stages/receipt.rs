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
use crate::base::json::format_time;
use crate::canonical::{CanonicalError, Jcs, ObjectWriter};
use crate::gateway::{Decision, Gateway, Input, Mandate};
use crate::store::{ChainLink, StoreError, Tx};
use serde_json::{Map, Value};
use std::borrow::Cow;

pub(super) fn append(r: &mut Run<'_>, d: &Decision) -> Result<ChainLink, StoreError> {
    let consumed = r.spent.map(|amount| Consumed {
        amount,
        nonces: &r.nonces,
    });
    write(
        r.gw,
        r.tx,
        r.now,
        r.mandate.as_deref().map(|m| (m, &r.ancestors[..])),
        r.input,
        d,
        consumed.as_ref(),
    )
}

/// The receipt of a decision taken outside a run (a DENY for a decision the
/// store refused, [`crate::gateway::Gateway::decide_all`]): no verified
/// mandate, nothing consumed; the proposal kept as every receipt keeps it.
pub(crate) fn append_alone(
    gw: &Gateway,
    tx: &mut dyn Tx,
    input: &Input,
    d: &Decision,
    now: i64,
) -> Result<ChainLink, StoreError> {
    write(gw, tx, now, None, input, d, None)
}

fn write(
    gw: &Gateway,
    tx: &mut dyn Tx,
    now: i64,
    mandate: Option<(&Mandate, &[Mandate])>,
    input: &Input,
    d: &Decision,
    consumed: Option<&Consumed<'_>>,
) -> Result<ChainLink, StoreError> {
    let kept = kept_proposal(gw, tx, input, &d.resolved)?;
    let body = body_with(
        now,
        &gw.bundle_hash,
        mandate,
        &kept.proposal,
        kept.withheld.as_ref(),
        d,
        consumed,
    )
    .map_err(|e| StoreError::Backend(format!("cannot encode the receipt: {e}")))?;
    tx.append_receipt_jcs(&body)
}

/// What a receipt keeps of the agent's proposal, and, when that is not
/// the proposal as it came, the salted hash of what came.
struct Kept<'a> {
    proposal: Cow<'a, Value>,
    withheld: Option<Withheld>,
}

/// `"proposal_withheld": {"bytes": N, "hash": "salted:sha256:..."}`: the
/// length and salted hash ([`crate::gateway::secret::salted_hash`], domain
/// `proposal`) of what the agent sent — the line as read for a line that
/// did not parse, else the proposal's canonical JSON (its serde_json text
/// when it has no canonical form).
struct Withheld {
    bytes: usize,
    hash: String,
}

/// A raw line that did not parse is kept as its first this many characters
/// (a bundle that declares no secret parameter).
const RAW_KEPT: usize = 4096;

/// The stand-in for a value a receipt does not keep.
const WITHHELD: &str = "secret:withheld";

/// What the receipt keeps of the proposal (see
/// `docs/decisions/secrets-in-refused-lines.md`). A bundle that declares a
/// `secret` parameter keeps no value in clear that the bundle's schema
/// cannot attribute to a declared non-secret parameter:
/// - a line that did not parse (not JSON, a duplicate key, an unknown
///   envelope key, ...): no text at all, only its length and salted hash;
/// - a proposal that parsed: `action` (a string) and, for an action of the
///   bundle, the values of its declared parameters; a secret parameter's
///   value is its commitment when the decision has one, else withheld; a
///   value under a key some action declares secret is withheld at any
///   depth; everything else (an unknown action's arguments, an unknown
///   parameter, an extra key, a proposal that is no object) keeps its
///   shape, keys, numbers and booleans, each text withheld (only a `Text`
///   parameter can be secret).
///
/// A bundle without secret parameters keeps the proposal as it came (a raw
/// line cut to 4,096 characters). On the decision path nothing is copied
/// unless something is withheld.
fn kept_proposal<'a>(
    gw: &Gateway,
    tx: &mut dyn Tx,
    input: &'a Input,
    resolved: &Map<String, Value>,
) -> Result<Kept<'a>, StoreError> {
    let p = &input.proposal;
    let raw = match (&input.malformed, p) {
        (Some(_), Value::String(s)) => Some(s.as_str()),
        _ => None,
    };
    let names = &gw.secret_params;
    if names.is_empty() {
        let proposal = match raw {
            Some(s) if s.chars().nth(RAW_KEPT).is_some() => {
                Cow::Owned(Value::String(s.chars().take(RAW_KEPT).collect()))
            }
            _ => Cow::Borrowed(p),
        };
        return Ok(Kept {
            proposal,
            withheld: None,
        });
    }
    let kept = if input.malformed.is_some() {
        withhold_all(p)
    } else if attributable(gw, p) {
        return Ok(Kept {
            proposal: Cow::Borrowed(p),
            withheld: None,
        });
    } else {
        attribute(gw, p, resolved)
    };
    if kept == *p {
        return Ok(Kept {
            proposal: Cow::Borrowed(p),
            withheld: None,
        });
    }
    let text = match raw {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(
            crate::canonical::value_to_jcs(p)
                .unwrap_or_else(|_| serde_json::to_string(p).unwrap_or_default()),
        ),
    };
    let hash = crate::gateway::secret::salted_hash(tx, "proposal", text.as_bytes())?;
    Ok(Kept {
        proposal: Cow::Owned(kept),
        withheld: Some(Withheld {
            bytes: text.len(),
            hash,
        }),
    })
}

/// Whether the receipt can keep `p` as it came: exactly `action` and
/// `args`, an action of the bundle, only its declared non-secret
/// parameters, and no key some action declares secret inside their values.
fn attributable(gw: &Gateway, p: &Value) -> bool {
    let Value::Object(o) = p else { return false };
    let (Some(Value::String(name)), Some(Value::Object(args))) = (o.get("action"), o.get("args"))
    else {
        return false;
    };
    let Some(a) = gw.actions.get(name.as_str()) else {
        return false;
    };
    o.len() == 2
        && args.iter().all(|(k, v)| {
            a.table.action.param(k).is_some_and(|p| !p.secret)
                && (!matches!(v, Value::Array(_) | Value::Object(_))
                    || !holds_secret_key(v, &gw.secret_params))
        })
}

/// Whether a key of `names` appears anywhere inside `v`.
fn holds_secret_key(v: &Value, names: &[String]) -> bool {
    let mut stack = vec![v];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => {
                if m.keys().any(|k| names.iter().any(|n| n == k)) {
                    return true;
                }
                stack.extend(m.values());
            }
            _ => {}
        }
    }
    false
}

/// `p` with every value the bundle's schema cannot attribute withheld (see
/// [`kept_proposal`]).
fn attribute(gw: &Gateway, p: &Value, resolved: &Map<String, Value>) -> Value {
    let Value::Object(o) = p else {
        return withhold_all(p);
    };
    let action = o
        .get("action")
        .and_then(Value::as_str)
        .and_then(|n| gw.actions.get(n));
    let names = &gw.secret_params;
    let kept = o.iter().map(|(k, v)| {
        let v = match (k.as_str(), v, action) {
            ("action", Value::String(_), _) => v.clone(),
            ("args", Value::Object(args), Some(a)) => Value::Object(
                args.iter()
                    .map(|(name, v)| {
                        let v = match a.table.action.param(name) {
                            Some(p) if p.secret => match resolved.get(name) {
                                Some(c) if crate::gateway::secret::is_commitment(c) => c.clone(),
                                _ => Value::String(WITHHELD.into()),
                            },
                            Some(_) => withhold_named(v, names),
                            None => withhold_all(v),
                        };
                        (name.clone(), v)
                    })
                    .collect(),
            ),
            _ => withhold_all(v),
        };
        (k.clone(), v)
    });
    Value::Object(kept.collect())
}

/// `v` with the value under any key of `names`, at any depth, withheld.
fn withhold_named(v: &Value, names: &[String]) -> Value {
    match v {
        Value::Array(items) => {
            Value::Array(items.iter().map(|i| withhold_named(i, names)).collect())
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = if names.iter().any(|n| n == k) {
                        Value::String(WITHHELD.into())
                    } else {
                        withhold_named(v, names)
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `v`'s shape and keys, every text withheld (only a `Text` parameter can
/// be secret: numbers, booleans and nulls stay, such as the integer beyond
/// 2^53 that a receipt keeps as `proposal_text`).
fn withhold_all(v: &Value) -> Value {
    match v {
        Value::String(_) => Value::String(WITHHELD.into()),
        Value::Array(items) => Value::Array(items.iter().map(withhold_all).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| (k.clone(), withhold_all(v)))
                .collect(),
        ),
        other => other.clone(),
    }
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
    body_with(
        now,
        bundle,
        mandate.map(|m| (m, &[][..])),
        proposal,
        None,
        d,
        consumed,
    )
}

/// [`body`], with the length and salted hash of a proposal the receipt
/// does not keep as it came.
fn body_with(
    now: i64,
    bundle: &str,
    mandate: Option<(&Mandate, &[Mandate])>,
    proposal: &Value,
    withheld: Option<&Withheld>,
    d: &Decision,
    consumed: Option<&Consumed<'_>>,
) -> Result<Jcs, CanonicalError> {
    let mut w = ObjectWriter::with_capacity(RECEIPT_CAPACITY);
    w.opt_str("action", d.action.as_deref())
        .strs("approvers", &d.approvers)
        .str("bundle", bundle);
    if let Some(c) = consumed {
        let mut cw = ObjectWriter::with_capacity(64);
        cw.value("amount", &Value::from(c.amount))?
            .strs("nonces", c.nonces);
        w.jcs("consumed", &cw.finish());
    }
    w.str("decision", d.decision.name());
    // a read says so, and an executed one the key of its execution; a
    // write's receipt has neither key (as before reads existed)
    if !d.effect.is_write() {
        w.str("effect", d.effect.name());
    }
    if let Some(e) = &d.execution {
        w.str("execution", e);
    }
    w.opt_uint("level", d.level.map(u64::from))?;
    match mandate {
        Some((m, ancestors)) => {
            let mut mw = ObjectWriter::with_capacity(256);
            // a child's chain, root first: every link's budget it spent from
            if !ancestors.is_empty() {
                let ids: Vec<String> = ancestors.iter().map(|a| a.id.clone()).collect();
                mw.strs("ancestors", &ids);
            }
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
    if let Some(h) = withheld {
        let mut hw = ObjectWriter::with_capacity(128);
        hw.value("bytes", &Value::from(h.bytes))?
            .str("hash", &h.hash);
        w.jcs("proposal_withheld", &hw.finish());
    }
    w.opt_str("reason", d.reason.as_deref())
        .bool("replayed", d.replayed)
        .map("resolved", &d.resolved)?
        .value("result", d.result.as_ref().unwrap_or(&Value::Null))?;
    // the selections evaluated (absent when none, as before selections)
    if !d.selections.is_empty() {
        w.map("selections", &d.selections)?;
    }
    w.str("stage", d.stage.name())
        .str("time", &format_time(now));
    // a SHADOW decision: what enforcement would have decided
    if let Some(wb) = &d.would_be {
        let mut ww = ObjectWriter::with_capacity(256);
        ww.str("decision", wb.decision.name())
            .opt_uint("level", wb.level.map(u64::from))?
            .opt_str("reason", wb.reason.as_deref())
            .str("stage", wb.stage.name());
        w.jcs("would_be", &ww.finish());
    }
    Ok(w.finish())
}

/// Room a receipt body is written into at first: most are under 2 KiB
/// (an ALLOW of the bank pack is about 1 KiB).
const RECEIPT_CAPACITY: usize = 2048;

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
            shown: Map::new(),
            origins,
            level: Some(1),
            operation_hash: Some("sha256:ab".into()),
            approve_by: None,
            approvers: vec!["emma".into(), "zoe".into()],
            policies: vec!["policy1".into()],
            result: (outcome == Outcome::Allow).then(|| json!({"ok": true, "n": 1.5})),
            selections: Map::new(),
            replayed: outcome == Outcome::Allow,
            effect: crate::gateway::Effect::Write,
            execution: None,
            receipt: None,
            would_be: None,
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
        if !d.effect.is_write() {
            v["effect"] = json!(d.effect.name());
        }
        if let Some(e) = &d.execution {
            v["execution"] = json!(e);
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
            parent: None,
        };
        let proposal = json!({"action": "payment.transfer", "args": {"z": 1, "a": [null, 2.5]}});
        for (o, s) in [
            (Outcome::Allow, Stage::Execution),
            (Outcome::Pending, Stage::Approval),
            (Outcome::Deny, Stage::Authn),
        ] {
            for read in [false, true] {
                let mut d = decision(o, s);
                if read {
                    d.effect = crate::gateway::Effect::Read;
                    d.execution = (o == Outcome::Allow).then(|| "sha256:ab/read/3".to_string());
                }
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
                            body(1_764_268_800, "sha256:b", mandate, &proposal, &d, consumed)
                                .unwrap();
                        assert_eq!(direct.as_str(), via_value(mandate, &proposal, &d, consumed));
                        // a write's receipt has neither key
                        assert_eq!(direct.as_str().contains("\"effect\""), read);
                    }
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
