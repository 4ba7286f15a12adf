//! The outcome of an operation executed outside the gateway (an MCP
//! downstream tool): recorded after the decision committed, as a second
//! receipt (`"kind": "outcome"`) linked to the decision by the operation
//! hash, and kept under that hash so a retried identical call is answered
//! from the store instead of running again.

use super::{Gateway, ReceiptRef};
use crate::canonical::ObjectWriter;
use crate::gateway::json::format_time;
use crate::store::StoreError;
use serde_json::Value;

/// Where outcomes are kept in the store's state, by operation hash.
pub const OUTCOME_NS: &str = "outcome";

/// What the external executor reported for one operation.
#[derive(Clone, Debug, PartialEq)]
pub struct ExternalOutcome {
    /// Who executed: `mcp:<server>/<tool>`.
    pub executor: String,
    /// The executor reported an error (or could not be reached).
    pub is_error: bool,
    /// The executor's answer as it was returned (an MCP tool result), or
    /// `{"error": text}` when there was none.
    pub result: Value,
}

impl Gateway {
    /// Records `outcome` for the operation `operation_hash` with its receipt,
    /// in one transaction. A second outcome for the same operation is
    /// refused: the first one stands.
    pub fn record_outcome(
        &self,
        operation_hash: &str,
        outcome: &ExternalOutcome,
    ) -> Result<ReceiptRef, StoreError> {
        let now = self.now();
        let stored = serde_json::json!({
            "executor": outcome.executor,
            "is_error": outcome.is_error,
            "result": outcome.result,
        });
        self.with_receipt(&mut |tx| {
            if tx.executed(operation_hash)?.is_none() {
                return Err(StoreError::Aborted(format!(
                    "no decision executed the operation `{operation_hash}`"
                )));
            }
            if tx.state_get(OUTCOME_NS, operation_hash)?.is_some() {
                return Err(StoreError::Aborted(format!(
                    "the operation `{operation_hash}` already has an outcome"
                )));
            }
            tx.state_put(OUTCOME_NS, operation_hash, &stored)?;
            let result_hash = crate::canonical::hash_of(&outcome.result)
                .map_err(|e| StoreError::Aborted(e.to_string()))?;
            let mut w = ObjectWriter::new();
            w.str("bundle", &self.bundle_hash)
                .str("executor", &outcome.executor)
                .str("is_error", if outcome.is_error { "true" } else { "false" })
                .str("kind", "outcome")
                .str("operation_hash", operation_hash)
                .str("result_hash", &result_hash)
                .str("time", &format_time(now));
            Ok(w.finish())
        })
    }

    /// The recorded outcome of an operation, if any.
    pub fn outcome(&self, operation_hash: &str) -> Result<Option<ExternalOutcome>, StoreError> {
        let mut found = None;
        self.store.transaction(&mut |tx| {
            found = tx.state_get(OUTCOME_NS, operation_hash)?;
            Ok(Value::Null)
        })?;
        Ok(found.map(|v| ExternalOutcome {
            executor: v
                .get("executor")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(true),
            result: v.get("result").cloned().unwrap_or(Value::Null),
        }))
    }
}
