//! A recorded receipt read as what a replay does with it: a decision to
//! take again, one that cannot be (and why), a change of the trusted side
//! to apply at its place in the chain, or a receipt that decides nothing.

use super::report::Side;
use crate::gateway::Effect;
use crate::gateway::trusted::RegistryChange;
use serde_json::{Map, Value};

/// What one recorded receipt is to the replay.
pub(super) enum Event {
    Decision(Box<Recorded>),
    /// A decision the replay cannot take again, with why.
    Unreplayable {
        why: &'static str,
        /// A mandate the refusal shows revoked by then (its parent's).
        revoked: Option<String>,
    },
    /// A registry change of the trusted side.
    Registry(Box<Change>),
    /// A mandate revoked with a receipt (a child mandate's).
    Revoked {
        id: String,
        time: i64,
    },
    /// A receipt that decides nothing (an outcome, a passthrough, an
    /// approval, a shard's placement, ...), by kind.
    Other(String),
}

/// A recorded decision, as the replay takes it again.
pub(super) struct Recorded {
    pub seq: u64,
    pub time: i64,
    pub mandate: String,
    pub proposal: Value,
    pub action: Option<String>,
    pub side: Side,
    /// Who approved it (an ALLOW after approvals).
    pub approvers: Vec<String>,
    pub resolved: Map<String, Value>,
    /// The call was made outside (`{"downstream": ...}`), with this effect.
    pub external: Option<Effect>,
    /// The refusal shows this mandate revoked by then.
    pub revoked: Option<String>,
}

/// A registry change as its receipt records it.
pub(super) struct Change {
    pub time: i64,
    pub pack: String,
    pub registry: String,
    pub owner: String,
    pub by: String,
    pub change: RegistryChange,
}

fn text(body: &Value, key: &str) -> Option<String> {
    body.get(key).and_then(Value::as_str).map(str::to_string)
}

fn time(body: &Value) -> Option<i64> {
    body.get("time")
        .and_then(Value::as_str)
        .and_then(|t| crate::base::json::parse_time_str(t).ok())
}

/// What the replay does with the receipt `seq` whose body is `body`.
pub(super) fn read(seq: u64, body: &Value) -> Event {
    if let Some(kind) = body.get("kind").and_then(Value::as_str) {
        return other(kind, body);
    }
    let Some(side) = Side::recorded(body) else {
        return Event::Other("unknown".into());
    };
    let action = text(body, "action");
    let unreplayable =
        |why: &'static str, revoked: Option<String>| Event::Unreplayable { why, revoked };
    let Some(time) = time(body) else {
        return unreplayable("the receipt's time cannot be read", None);
    };
    if body.get("proposal_withheld").is_some() {
        return unreplayable(
            "the proposal was not kept (withheld: it may carry a secret)",
            None,
        );
    }
    if body.get("proposal_text").is_some() {
        return unreplayable("the proposal is kept as text only", None);
    }
    let proposal = body.get("proposal").cloned().unwrap_or(Value::Null);
    if proposal.is_string() {
        return unreplayable("a line that was not a proposal", None);
    }
    let (mandate, revoked) = match body.get("mandate").and_then(|m| m.get("id")) {
        Some(Value::String(id)) => (id.clone(), None),
        _ => match revocation(&side) {
            Some(Revocation::Own(id)) => (id.clone(), Some(id)),
            Some(Revocation::Parent(id)) => {
                return unreplayable(
                    "a child of a revoked parent: its id is not recorded",
                    Some(id),
                );
            }
            None => return unreplayable("no mandate was verified (denied at authn)", None),
        },
    };
    Event::Decision(Box::new(Recorded {
        seq,
        time,
        mandate,
        proposal,
        action,
        approvers: strings(body.get("approvers")),
        resolved: body
            .get("resolved")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default(),
        external: external(body),
        side,
        revoked,
    }))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The effect of a call the recorded decision made outside (its result is
/// `{"downstream": ...}`); `None`: the gateway's own executors ran.
fn external(body: &Value) -> Option<Effect> {
    body.get("result")?.get("downstream")?;
    Some(match body.get("effect").and_then(Value::as_str) {
        Some("read") => Effect::Read,
        _ => Effect::Write,
    })
}

enum Revocation {
    Own(String),
    Parent(String),
}

/// A recorded refusal of a revoked mandate (authn writes no mandate into
/// such a receipt, only its reason names it).
fn revocation(side: &Side) -> Option<Revocation> {
    if side.decision != "DENY" || side.stage != "authn" {
        return None;
    }
    let reason = side.reason.as_deref()?;
    let quoted = |s: &str| s.split('`').nth(1).map(str::to_string);
    if reason.starts_with("mandate `") && reason.ends_with("` has been revoked") {
        return quoted(reason).map(Revocation::Own);
    }
    if reason.starts_with("the parent mandate `") && reason.contains("has been revoked") {
        return quoted(reason).map(Revocation::Parent);
    }
    None
}

/// A receipt with a `kind`: a change to apply, or nothing to decide.
fn other(kind: &str, body: &Value) -> Event {
    match kind {
        "registry" => match registry(body) {
            Some(c) => Event::Registry(Box::new(c)),
            None => Event::Other("registry (unreadable)".into()),
        },
        "mandate" if text(body, "change").as_deref() == Some("revoked") => {
            match (body.get("mandate").and_then(|m| m.get("id")), time(body)) {
                (Some(Value::String(id)), Some(time)) => Event::Revoked {
                    id: id.clone(),
                    time,
                },
                _ => Event::Other("mandate (unreadable)".into()),
            }
        }
        k => Event::Other(k.to_string()),
    }
}

fn registry(body: &Value) -> Option<Change> {
    let change = match text(body, "change")?.as_str() {
        "add" => RegistryChange::Add {
            value: body.get("value")?.clone(),
        },
        "remove" => RegistryChange::Remove {
            value: body.get("value")?.clone(),
        },
        "put" => RegistryChange::Put {
            key: text(body, "key")?,
            record: body.get("record")?.as_object()?.clone(),
        },
        "delete" => RegistryChange::Delete {
            key: text(body, "key")?,
        },
        _ => return None,
    };
    Some(Change {
        time: time(body)?,
        pack: text(body, "pack")?,
        registry: text(body, "registry")?,
        owner: text(body, "owner")?,
        by: text(body, "by")?,
        change,
    })
}
