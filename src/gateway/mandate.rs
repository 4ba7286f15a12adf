//! The mandate: what the user asked for, signed by the trusted side. The
//! agent never sees the signing key; the gateway holds only verifying keys
//! (world configuration), never a key that came inside a token.

use crate::bundle::format::TablePack;
use crate::canonical::to_jcs;
use crate::ir::{Action, Type};
use crate::keys::SecretKey;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mandate {
    /// Token id: unique, revocable.
    pub id: String,
    /// The pack whose actions this mandate covers.
    pub pack: String,
    /// The person the agent acts for (who may step up).
    pub user: String,
    /// The tenant whose records are in scope (a company, a clinician, the
    /// user herself).
    pub owner: String,
    pub scopes: Vec<String>,
    /// The pack's mandate claims, checked against their declared types when
    /// the token is issued.
    pub claims: Map<String, Value>,
    pub budget: Budget,
    /// Seconds since the epoch.
    pub issued_at: i64,
    pub expires_at: i64,
    /// The narrowing: `action.param` to the only sources (a non-empty
    /// subset of those the pack declares for that critical parameter) this
    /// mandate lets vouch for its value. Absent: every declared source.
    /// Left out of the signed text when empty, so a mandate without a
    /// narrowing signs as it always did.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: Narrowing,
    /// The mandate this one narrows (a child mandate,
    /// [`crate::gateway::chain`]): its id and the hash of its signed text.
    /// Left out of the signed text when absent, so a mandate without a
    /// parent signs as it always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
}

/// A child mandate's parent: its id, and `sha256:` of the JCS of its
/// mandate (exactly the bytes its issuer signed), so that a child names
/// one parent and no other mandate that reuses its id.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentRef {
    pub id: String,
    pub hash: String,
}

pub use super::narrowing::Narrowing;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Cumulative cap in minor units over every budgeted action.
    pub amount: i64,
    /// Cap on the number of executed actions.
    pub calls: u64,
}

/// A mandate with its signature, as handed to the gateway.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MandateToken {
    pub mandate: Mandate,
    /// Which verifying key (world configuration) checks the signature.
    pub key_id: String,
    /// Ed25519 over the JCS encoding of `mandate`, base64.
    pub signature: String,
    /// A child mandate's ancestors, root first, each a whole token without
    /// ancestors of its own: the gateway verifies the chain from the token
    /// alone (`docs/decisions/mandate-chains.md`). Absent for a root.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ancestors: Vec<MandateToken>,
}

impl MandateToken {
    pub fn sign(
        mandate: Mandate,
        key: &SecretKey,
    ) -> Result<Self, crate::canonical::CanonicalError> {
        let msg = to_jcs(&mandate)?;
        Ok(MandateToken {
            signature: key.sign(msg.as_bytes()),
            key_id: key.public().id(),
            mandate,
            ancestors: vec![],
        })
    }

    /// The hash a child's [`ParentRef`] names this token's mandate by.
    pub fn mandate_hash(&self) -> Result<String, crate::canonical::CanonicalError> {
        crate::canonical::hash_of(&self.mandate)
    }

    /// The chain from the root to this token's mandate, each token without
    /// ancestors of its own: what a child of this token carries.
    pub fn lineage(&self) -> Vec<MandateToken> {
        let mut out = self.ancestors.clone();
        out.push(MandateToken {
            ancestors: vec![],
            ..self.clone()
        });
        out
    }
}

/// What a mandate says before it is signed: `ipc token issue`'s options
/// and the MCP proxy's `[session]` both come to this, and [`issue`] types
/// and signs it.
#[derive(Clone, Debug)]
pub struct MandateSpec {
    pub user: String,
    /// The tenant whose records are in scope (default: the user).
    pub owner: Option<String>,
    pub scopes: Vec<String>,
    /// `(claim, value)`; a set claim's name repeated for each member. A
    /// string given for a number or boolean claim is read as JSON when it
    /// parses (`--claim limit=3`).
    pub claims: Vec<(String, Value)>,
    /// Cumulative cap in minor units.
    pub budget: i64,
    pub calls: u64,
    pub issued_at: i64,
    /// Validity in seconds.
    pub ttl: i64,
    /// Default: random.
    pub id: Option<String>,
    /// `(action.param, sources)`: narrow a critical parameter to a subset
    /// of its declared sources (`--only`).
    pub only: Vec<(String, Vec<String>)>,
    /// `action.param`, `action` or `*`: narrow to the mandate's own claims
    /// (`--strict`); see [`crate::gateway::narrowing::strict`].
    pub strict: Vec<String>,
}

/// Types every claim against the pack's declaration (in its canonical
/// form; a set claim without members is an empty set), and signs.
pub fn issue(
    spec: &MandateSpec,
    pack: &TablePack,
    actions: &[&Action],
    key: &SecretKey,
) -> Result<MandateToken, String> {
    let sources = super::narrowing::of_spec(&spec.strict, &spec.only, &pack.name, actions)
        .map_err(|e| e.to_string())?;
    let mut given = typed_claims(&spec.claims, pack)?;
    for d in &pack.claims {
        if d.ty.is_collection() && !given.contains_key(&d.name) {
            given.insert(d.name.clone(), Value::Array(vec![]));
        }
    }
    let id = match &spec.id {
        Some(id) => id.clone(),
        None => new_id()?,
    };
    let mandate = Mandate {
        id,
        pack: pack.name.clone(),
        user: spec.user.clone(),
        owner: spec.owner.clone().unwrap_or_else(|| spec.user.clone()),
        scopes: spec.scopes.clone(),
        claims: given,
        budget: Budget {
            amount: spec.budget,
            calls: spec.calls,
        },
        issued_at: spec.issued_at,
        expires_at: spec.issued_at.saturating_add(spec.ttl),
        sources,
        parent: None,
    };
    MandateToken::sign(mandate, key).map_err(|e| e.to_string())
}

/// A fresh mandate id: `m-` and 16 random bytes in hex.
pub(crate) fn new_id() -> Result<String, String> {
    Ok(format!(
        "m-{}",
        crate::gateway::approval::random_id().map_err(|e| e.to_string())?
    ))
}

/// `(claim, value)` pairs typed against the pack's declarations, each in
/// its canonical form; a set claim's name repeated for each member.
pub(crate) fn typed_claims(
    pairs: &[(String, Value)],
    pack: &TablePack,
) -> Result<Map<String, Value>, String> {
    let mut given: Map<String, Value> = Map::new();
    for (name, value) in pairs {
        let decl = pack
            .claims
            .iter()
            .find(|d| &d.name == name)
            .ok_or_else(|| format!("pack `{}` declares no claim `{name}`", pack.name))?;
        let one = match &decl.ty {
            Type::Selection(_) => selection_claim(value, &decl.ty, &pack.name, &pack.registries)
                .map_err(|e| e.to_string())?,
            ty => claim_value(value, ty.element()).map_err(|e| format!("claim `{name}`: {e}"))?,
        };
        if decl.ty.is_collection() {
            let entry = given.entry(name.clone()).or_insert(Value::Array(vec![]));
            if let Value::Array(items) = entry
                && !items.contains(&one)
            {
                items.push(one);
            }
        } else if given.insert(name.clone(), one).is_some() {
            return Err(format!(
                "claim `{name}` given twice, but it is a single value"
            ));
        }
    }
    Ok(given)
}

/// A selection claim's query, checked against the registry it selects
/// from (`ty` is `Type::Selection`, over a registry of `pack`): the JSON
/// object, or its text (the command line's `--claim
/// product={"where": ...}`). Returned as an object, as given.
pub fn selection_claim(
    v: &Value,
    ty: &Type,
    pack: &str,
    registries: &[crate::ir::Registry],
) -> Result<Value, super::selection::SelectionError> {
    let registry = match ty {
        Type::Selection(r) => r.as_str(),
        _ => "",
    };
    let invalid = |reason: String| super::selection::SelectionError::Invalid {
        registry: [pack, ".", registry].concat(),
        reason,
    };
    let Some(reg) = registries.iter().find(|r| r.name == registry) else {
        return Err(invalid("the pack declares no such registry".into()));
    };
    let q = match v {
        Value::String(text) => crate::base::json::parse_strict(text)
            .map_err(|e| invalid(format!("the query is not JSON: {e}")))?,
        other => other.clone(),
    };
    super::selection::Query::parse(&q, reg, pack)?;
    Ok(q)
}

/// One claim value, typed and in its type's canonical form (IBAN, e-mail,
/// phone).
fn claim_value(v: &Value, ty: &Type) -> Result<Value, String> {
    let v = match (ty, v) {
        (
            Type::Int | Type::Duration | Type::Money | Type::Date | Type::Timestamp | Type::Bool,
            Value::String(text),
        ) => match serde_json::from_str::<Value>(text) {
            Ok(n @ (Value::Number(_) | Value::Bool(_))) => n,
            _ => v.clone(),
        },
        _ => v.clone(),
    };
    crate::gateway::world::typed_value(&v, ty)
}

impl Mandate {
    /// Checks every claim against its declaration in the pack and puts it
    /// in its canonical runtime form (an IBAN without spaces, an e-mail in
    /// lower case, a set without repeats), once, when the token is verified:
    /// whoever issued the token, a resolved value is always the canonical
    /// spelling of the trusted value (a sanctions list compares against that
    /// spelling). An undeclared claim, a value of the wrong type or one that
    /// does not normalise is refused.
    pub fn canonicalize_claims(&mut self, pack: &TablePack) -> Result<(), String> {
        for (name, v) in self.claims.iter_mut() {
            let Some(decl) = pack.claims.iter().find(|c| &c.name == name) else {
                return Err(format!(
                    "claim `{}` is not declared by pack `{}`",
                    crate::base::json::echo(name),
                    pack.name
                ));
            };
            *v = match &decl.ty {
                // a query that does not fit the registry: the mandate
                // does not verify (a DENY at authn, never at provenance)
                Type::Selection(_) => match v {
                    Value::Object(_) => selection_claim(v, &decl.ty, &pack.name, &pack.registries)
                        .map_err(|e| format!("claim `{name}`: {e}"))?,
                    _ => return Err(format!("claim `{name}`: a selection is a JSON object")),
                },
                ty => runtime_value(v, ty).map_err(|e| format!("claim `{name}`: {e}"))?,
            };
        }
        Ok(())
    }
}

/// A claim value in the form the gateway compares: amounts, times and
/// durations as exact integers (as `ipc token issue` writes them), strings
/// in their type's canonical spelling, collections element by element.
fn runtime_value(v: &Value, ty: &Type) -> Result<Value, String> {
    use crate::base::json::kind;
    match ty {
        Type::List(el) | Type::Set(el) => {
            let Value::Array(items) = v else {
                return Err(format!("expected a list, found {}", kind(v)));
            };
            let mut out: Vec<Value> = Vec::with_capacity(items.len());
            for it in items {
                let one = runtime_value(it, el)?;
                if matches!(ty, Type::List(_)) || !out.contains(&one) {
                    out.push(one);
                }
            }
            Ok(Value::Array(out))
        }
        t if t.is_numeric() => match v.as_i64() {
            Some(i) if i.unsigned_abs() <= crate::canonical::MAX_EXACT_INTEGER => Ok(v.clone()),
            _ => Err(format!(
                "expected a whole number within ±(2^53 - 1), found {}",
                kind(v)
            )),
        },
        t => crate::gateway::world::typed_value(v, t),
    }
}
