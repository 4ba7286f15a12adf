//! Secret parameters (`param new_password: Text secret`): the executor is
//! the only code that sees the value. Everywhere else — the decision, the
//! receipt (the agent's proposal included), the operation hash an approval
//! signs — holds a commitment:
//!
//! `secret:sha256:<hex>` of `salt ‖ mandate id ‖ parameter ‖ value`
//! (separated by U+001F), where the salt is 32 random bytes kept in the
//! store, never in a receipt. The same value under the same mandate gives
//! the same commitment, so an approval binds the exact value (another
//! password is another operation); without the salt, a receipt reader
//! cannot test guesses against it.

use crate::store::{StoreError, Tx};
use serde_json::Value;

const NS: &str = "gateway";
const SALT_KEY: &str = "secret_salt";

/// The store's salt, created on first use (in the caller's transaction).
fn salt(tx: &mut dyn Tx) -> Result<String, StoreError> {
    if let Some(Value::String(s)) = tx.state_get(NS, SALT_KEY)? {
        return Ok(s);
    }
    let mut b = [0u8; 32];
    getrandom::fill(&mut b)
        .map_err(|e| StoreError::Aborted(format!("no randomness for the secret salt: {e}")))?;
    let s = hex::encode(b);
    tx.state_put(NS, SALT_KEY, &Value::String(s.clone()))?;
    Ok(s)
}

/// The commitment that stands for `value` of `param` under `mandate_id`.
pub fn commitment(
    tx: &mut dyn Tx,
    mandate_id: &str,
    param: &str,
    value: &str,
) -> Result<String, StoreError> {
    use sha2::{Digest, Sha256};
    let salt = salt(tx)?;
    let mut h = Sha256::new();
    for part in [salt.as_str(), mandate_id, param, value] {
        h.update(part.as_bytes());
        h.update([0x1f]);
    }
    Ok(format!("secret:sha256:{}", hex::encode(h.finalize())))
}

/// Whether a resolved value is a commitment (what the gateway shows for a
/// secret).
pub fn is_commitment(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with("secret:sha256:"))
}
