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

/// `salted:sha256:<hex>` of `salt ‖ domain ‖ bytes` (each followed by
/// U+001F), with the salt of the commitments: what a receipt holds in
/// place of something it does not keep (a refused line, an executor's
/// answer, a tool call's arguments). Whoever holds the store can check a
/// copy against it; a reader of the receipts alone cannot test guesses of
/// a low-entropy value (a password, a PIN) against it. `domain` says what
/// was hashed (`proposal`, `result`, `arguments`).
pub fn salted_hash(tx: &mut dyn Tx, domain: &str, bytes: &[u8]) -> Result<String, StoreError> {
    use sha2::{Digest, Sha256};
    let salt = salt(tx)?;
    let mut h = Sha256::new();
    for part in [salt.as_bytes(), domain.as_bytes(), bytes] {
        h.update(part);
        h.update([0x1f]);
    }
    Ok(format!("salted:sha256:{}", hex::encode(h.finalize())))
}

/// Whether a resolved value is a commitment (what the gateway shows for a
/// secret).
pub fn is_commitment(v: &Value) -> bool {
    v.as_str().is_some_and(|s| s.starts_with("secret:sha256:"))
}

/// The clear values of `secret` parameters, carried by an ALLOW of a
/// gateway that executes externally ([`super::Gateway::execute_externally`])
/// to the caller that executes (the MCP proxy's downstream call): the
/// exact values the decision's commitments bind. Never serialised (a
/// decision written anywhere holds only the commitments) and never printed
/// (`Debug` names the parameters, not the values).
#[derive(Clone, Default, PartialEq)]
pub struct SecretValues(serde_json::Map<String, Value>);

impl SecretValues {
    pub(crate) fn new(values: serde_json::Map<String, Value>) -> Self {
        SecretValues(values)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The clear value of the secret parameter `param`.
    pub fn get(&self, param: &str) -> Option<&Value> {
        self.0.get(param)
    }

    /// `resolved` with each commitment replaced by the clear value it
    /// stands for: what the executor acts with.
    pub fn reveal(
        &self,
        resolved: &serde_json::Map<String, Value>,
    ) -> serde_json::Map<String, Value> {
        let mut out = resolved.clone();
        for (k, v) in &self.0 {
            if out.get(k).is_some_and(is_commitment) {
                out.insert(k.clone(), v.clone());
            }
        }
        out
    }

    /// `value` with every occurrence of a secret's clear text replaced by
    /// `secret:withheld`, in clear and JSON-escaped once, twice and three
    /// times (a tool that answers JSON text holding the echo, or JSON text
    /// of that): what the agent is answered with. The store keeps nothing
    /// of such an answer ([`crate::gateway::Gateway::record_outcome`]),
    /// since no scrub knows every encoding a downstream may choose.
    pub fn scrub(&self, value: &Value) -> Value {
        let mut forms: Vec<String> = vec![];
        for s in self.0.values().filter_map(Value::as_str) {
            let mut form = s.to_string();
            for _ in 0..4 {
                if !form.is_empty() && !forms.contains(&form) {
                    forms.push(form.clone());
                }
                // the text between the quotes of its JSON string
                let quoted = serde_json::to_string(&form).unwrap_or_default();
                form = quoted
                    .get(1..quoted.len().saturating_sub(1))
                    .unwrap_or_default()
                    .to_string();
            }
        }
        // the longest first: an escaped form holds pieces of the shorter
        forms.sort_by_key(|f| std::cmp::Reverse(f.len()));
        let texts: Vec<&str> = forms.iter().map(String::as_str).collect();
        if texts.is_empty() {
            return value.clone();
        }
        fn text(s: &str, texts: &[&str]) -> String {
            texts
                .iter()
                .fold(s.to_string(), |s, t| s.replace(t, "secret:withheld"))
        }
        fn walk(v: &Value, texts: &[&str]) -> Value {
            match v {
                Value::String(s) => Value::String(text(s, texts)),
                Value::Array(items) => Value::Array(items.iter().map(|i| walk(i, texts)).collect()),
                Value::Object(m) => Value::Object(
                    m.iter()
                        .map(|(k, v)| (text(k, texts), walk(v, texts)))
                        .collect(),
                ),
                other => other.clone(),
            }
        }
        walk(value, &texts)
    }
}

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&String> = self.0.keys().collect();
        write!(f, "SecretValues(withheld: {names:?})")
    }
}

#[cfg(test)]
mod tests {
    use super::SecretValues;
    use serde_json::json;

    /// A secret echoed anywhere in an answer (a nested text, a key, inside
    /// a longer text) is withheld; `Debug` names the parameter only.
    #[test]
    fn scrub_withholds_every_occurrence_and_debug_names_only() {
        let s = SecretValues::new(
            json!({"new_password": "hunter2-long-enough"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        let answer = json!({"content": [{"text": "{\"echo\":\"hunter2-long-enough\"}"}],
            "hunter2-long-enough": 1, "n": 3});
        let out = s.scrub(&answer).to_string();
        assert!(!out.contains("hunter2"), "{out}");
        assert_eq!(out.matches("secret:withheld").count(), 2, "{out}");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(format!("{s:?}").contains("new_password"));
        let resolved = json!({"new_password": "secret:sha256:00", "other": "x"});
        let shown = s.reveal(resolved.as_object().unwrap_or(&Default::default()));
        assert_eq!(shown["new_password"], "hunter2-long-enough");
        assert_eq!(shown["other"], "x");
    }
}
