//! Whether the session's mandates still stand, for the calls no decision
//! covers (a passthrough). A mapped call's mandate is checked by the
//! gateway's `authn` stage; a passthrough is forwarded only while every
//! mandate of the session, and every link of its chain, is unexpired and
//! unrevoked: the user's kill switch (`ipc token revoke`, the `ttl`) stops
//! the agent's reads too. The signatures and chains are verified once, at
//! start; expiry and revocation at every call (a revocation is written by
//! another process, `ipc token revoke`, at any time).

use crate::base::json::echo;
use crate::gateway::Gateway;
use crate::gateway::mandate::MandateToken;
use serde_json::Value;

/// The session's mandates as a passthrough checks them.
pub(super) struct Standing {
    /// Every link (ancestors and the mandates), or why the session's
    /// mandates do not verify (then nothing is forwarded).
    links: Result<Vec<Link>, String>,
}

struct Link {
    id: String,
    expires_at: i64,
}

impl Standing {
    /// The session's `(pack, token)` mandates, verified by `gw`.
    pub(super) fn of(gw: &Gateway, mandates: &[(String, Value)]) -> Standing {
        let links = mandates
            .iter()
            .map(|(_, token)| links_of(gw, token))
            .collect::<Result<Vec<_>, _>>()
            .map(|l| l.into_iter().flatten().collect());
        Standing { links }
    }

    /// `Ok(None)` while every mandate stands; `Ok(Some(why))` once one
    /// expired or was revoked; `Err` when it cannot be known (the clock,
    /// the store): a passthrough is refused in both cases.
    pub(super) fn check(&self, gw: &Gateway) -> Result<Option<String>, String> {
        let links = match &self.links {
            Ok(l) => l,
            Err(why) => return Ok(Some(why.clone())),
        };
        let now = gw.now().map_err(|e| e.to_string())?;
        if let Some(l) = links.iter().find(|l| now >= l.expires_at) {
            return Ok(Some(format!(
                "the session's mandate `{}` has expired",
                echo(&l.id)
            )));
        }
        let mut revoked = None;
        gw.store()
            .read_only(&mut |tx| {
                revoked = None;
                for l in links {
                    if tx.revoked(&l.id)? {
                        revoked = Some(l.id.clone());
                        break;
                    }
                }
                Ok(Value::Null)
            })
            .map_err(|e| e.to_string())?;
        Ok(revoked.map(|id| format!("the session's mandate `{}` has been revoked", echo(&id))))
    }
}

/// The links of one mandate token, root first, once its signatures and
/// chain verify.
fn links_of(gw: &Gateway, token: &Value) -> Result<Vec<Link>, String> {
    let token: MandateToken = serde_json::from_value(token.clone())
        .map_err(|e| format!("a mandate of the session cannot be read: {e}"))?;
    let verified = gw
        .verify_token(&token)
        .map_err(|e| format!("a mandate of the session does not verify: {e}"))?;
    Ok(verified
        .links()
        .map(|m| Link {
            id: m.id.clone(),
            expires_at: m.expires_at,
        })
        .collect())
}
