//! The mandate: what the user asked for, signed by the trusted side. The
//! agent never sees the signing key; the gateway holds only verifying keys
//! (world configuration), never a key that came inside a token.

use crate::canonical::to_jcs;
use crate::keys::SecretKey;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
}

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
        })
    }
}
