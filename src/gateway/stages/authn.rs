//! Stage 1, authn: the mandate token's signature (Ed25519, `verify_strict`,
//! with a key from the world, never from the token), its validity period,
//! and revocation.

use super::{Run, StageResult};
use crate::gateway::{Deny, MandateToken, Stage};
use serde_json::Value;

/// Tolerated clock skew for a token issued "in the future", in seconds.
const SKEW: i64 = 300;

/// `a == b` for JSON values, faster when objects list their keys in the
/// same order (a token and its copy do): pairs are compared in step, and
/// an object whose keys differ in order falls back to the order-free `==`.
fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && (x
                    .iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && same_json(va, vb))
                    || x == y)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(va, vb)| same_json(va, vb))
        }
        _ => a == b,
    }
}

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let deny = |reason: String| Deny::new(Stage::Authn, reason);
    let input = r.input;
    let Some(raw) = &input.mandate else {
        return Err(deny("no mandate token".into())
            .hint(Some(
                "the trusted side issues a mandate from the user's request".into(),
            ))
            .into());
    };
    let cache_key = raw.get("signature").and_then(|v| v.as_str()).unwrap_or("");
    let cached = r.gw.verified.lock().ok().and_then(|m| {
        m.get(cache_key)
            .filter(|(tok, _)| same_json(tok, raw))
            .map(|(_, v)| v.clone())
    });
    let fresh = cached.is_none();
    let verified = match cached {
        Some(v) => v,
        None => {
            let token: MandateToken = serde_json::from_value(raw.clone()).map_err(|e| {
                deny(format!(
                    "malformed mandate token: {}",
                    e.to_string().to_lowercase()
                ))
            })?;
            // cached once kept, below: a token refused before (expired,
            // another tenant's) is verified again when it comes back
            r.gw.verify_token(&token).map_err(deny)?
        }
    };
    // every ancestor: expired or revoked, it takes its children with it
    for a in verified.ancestors.iter() {
        if r.now >= a.expires_at {
            return Err(deny(format!(
                "the parent mandate `{}` has expired",
                crate::base::json::echo(&a.id)
            ))
            .into());
        }
        if r.tx.revoked(&a.id)? {
            return Err(deny(format!(
                "the parent mandate `{}` has been revoked, and with it this child",
                crate::base::json::echo(&a.id)
            ))
            .into());
        }
    }
    if let crate::gateway::Tenants::Unrouted(why) = r.tenants {
        // before any state is read: no shard is this tenant's
        r.mandate = Some(verified.mandate);
        return Err(deny(why.clone())
            .hint(Some(
                "add the tenant to the world's `[store.shards]` (or a `default`) and place it with `ipc shards init`".into(),
            ))
            .into());
    }
    r.ancestors = verified.ancestors.clone();
    let mandate = verified.mandate;
    if r.now >= mandate.expires_at {
        return Err(deny(format!("mandate `{}` has expired", mandate.id))
            .hint(Some("ask the user to renew the mandate".into()))
            .into());
    }
    if mandate.issued_at > r.now + SKEW {
        return Err(deny(format!("mandate `{}` is not valid yet", mandate.id)).into());
    }
    if !r.tenants.allows(&mandate.owner) {
        // the receipt names the mandate refused: its tenant sees the try
        let owner = mandate.owner.clone();
        r.mandate = Some(mandate);
        return Err(deny(format!(
            "the caller may act for `{}`, not for the mandate's owner `{}`",
            crate::base::json::echo(&r.tenants.shown()),
            crate::base::json::echo(&owner)
        ))
        .hint(Some(
            "send it with a token bound to that tenant (the server's token file)".into(),
        ))
        .into());
    }
    if let Some(why) = r.gw.holding.refusal(r.tx, &mandate.owner)? {
        r.mandate = Some(mandate);
        return Err(deny(why)
            .hint(Some(
                "the instance's `[store.shards]` must match where the tenant is placed (`ipc shards check`)".into(),
            ))
            .into());
    }
    if fresh {
        keep_token(r, &mandate.id, raw)?;
        if let Ok(mut m) = r.gw.verified.lock() {
            if m.len() > 10_000 {
                m.clear();
            }
            let v = crate::gateway::chain::Verified {
                mandate: mandate.clone(),
                ancestors: r.ancestors.clone(),
            };
            m.insert(cache_key.to_string(), (raw.clone(), v));
        }
    }
    if r.tx.revoked(&mandate.id)? {
        return Err(deny(format!("mandate `{}` has been revoked", mandate.id)).into());
    }
    r.mandate = Some(mandate);
    Ok(())
}

/// Keeps the token as it was verified, once per mandate id, in the
/// decision's transaction (the first time this gateway verifies it; a
/// token already kept is left as it is): what `ipc replay` verifies again
/// to decide the recorded proposals with another bundle. A token carries
/// no secret parameter (a secret is never a critical value, so never a
/// claim).
fn keep_token(r: &mut Run<'_>, id: &str, raw: &Value) -> Result<(), crate::store::StoreError> {
    let ns = crate::gateway::replay::KEPT_TOKENS;
    if r.tx.state_get(ns, id)?.is_none() {
        r.tx.state_put(ns, id, raw)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/authn.rs"]
mod tests;
