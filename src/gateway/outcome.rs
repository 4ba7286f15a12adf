//! The outcome of an operation executed outside the gateway (an MCP
//! downstream tool): recorded after the decision committed, as a second
//! receipt (`"kind": "outcome"`) linked to the decision by the operation
//! hash, and kept under that hash so a retried identical call is answered
//! from the store instead of running again. Outcomes may be recorded
//! several at a time ([`Gateway::record_outcomes`]: one durable commit).
//! A read's outcome ([`super::Effect::Read`]) is recorded under its
//! execution's key, and its answer is not kept: no call is answered with it.

use super::{Gateway, ReceiptRef};
use crate::base::json::format_time;
use crate::canonical::ObjectWriter;
use crate::store::{StoreError, Tx, TxFn};
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

/// A tool call through the MCP proxy that no decision covers, recorded so
/// that every call leaves a receipt. Neither the arguments nor the result
/// are kept, only their salted hashes ([`salted_hash_any`]): a read may
/// carry and return anything (up to the client's and the downstream's
/// limits, personal data included), and the hash lets an auditor holding a
/// copy and the store check it against the chain, while a reader of the
/// receipts alone cannot test guesses of a short value against it.
pub enum ProxyCall<'a> {
    /// Forwarded as is (a read-only tool), with the downstream's status.
    Passthrough {
        server: &'a str,
        tool: &'a str,
        arguments: &'a Value,
        is_error: bool,
        /// The downstream's answer, or `{"error": text}` without one.
        result: &'a Value,
    },
    /// Refused before any decision (a tool the config does not list).
    Refused {
        /// As the client named it (shown escaped and cut in the receipt).
        tool: &'a str,
        arguments: &'a Value,
        reason: &'a str,
    },
}

/// The hash of any JSON value: its JCS hash, or, when it has no canonical
/// form (an integer beyond 2^53), `sha256-text:` and the hash of its
/// serde_json text, so that a hostile value can never keep a receipt from
/// being written.
pub fn hash_any(v: &Value) -> String {
    crate::canonical::hash_of(v).unwrap_or_else(|_| {
        use sha2::{Digest, Sha256};
        let text = serde_json::to_string(v).unwrap_or_default();
        format!(
            "sha256-text:{}",
            hex::encode(Sha256::digest(text.as_bytes()))
        )
    })
}

/// The salted hash ([`crate::gateway::secret::salted_hash`]) of a JSON
/// value's canonical text, or of its serde_json text when it has no
/// canonical form: what receipts hold of arguments and results.
pub fn salted_hash_any(tx: &mut dyn Tx, domain: &str, v: &Value) -> Result<String, StoreError> {
    let text = crate::canonical::value_to_jcs(v)
        .unwrap_or_else(|_| serde_json::to_string(v).unwrap_or_default());
    crate::gateway::secret::salted_hash(tx, domain, text.as_bytes())
}

/// Whether an executed operation's record (`{"execute_with": resolved}`)
/// holds a commitment: the call carried a secret.
fn carried_secret(executed: &Value) -> bool {
    let mut stack = vec![executed];
    while let Some(v) = stack.pop() {
        match v {
            Value::Array(items) => stack.extend(items),
            Value::Object(m) => stack.extend(m.values()),
            v if crate::gateway::secret::is_commitment(v) => return true,
            _ => {}
        }
    }
    false
}

/// What is stored, and answered on a retried call, in place of the answer
/// of a call that carried a secret.
pub const WITHHELD_ANSWER: &str =
    "the operation was executed; its answer is not kept because the call carried a secret";

impl Gateway {
    /// The salted hash of `v` under this gateway's store (see
    /// [`salted_hash_any`]), for an auditor holding a copy of what a
    /// receipt hashed (`domain`: `result` or `arguments`).
    pub fn salted_hash(&self, domain: &str, v: &Value) -> Result<String, StoreError> {
        let mut out = String::new();
        self.store.transaction(&mut |tx| {
            out = salted_hash_any(tx, domain, v)?;
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// Records `outcome` for the operation `operation_hash` with its receipt,
    /// in one transaction. A second outcome for the same operation is
    /// refused: the first one stands. The receipt holds the salted hash of
    /// the answer; the answer of an operation that carried a secret (its
    /// resolved values hold a commitment) is not stored at all, whatever
    /// encoding an echo of the secret would take in it: only a tool result
    /// whose text is [`WITHHELD_ANSWER`], with the status and the hash.
    pub fn record_outcome(
        &self,
        operation_hash: &str,
        outcome: &ExternalOutcome,
    ) -> Result<ReceiptRef, StoreError> {
        let now = self.now()?;
        self.with_receipt(&mut |tx| self.outcome_change(tx, operation_hash, outcome, now))
    }

    /// [`Self::record_outcome`] for several operations in one durable
    /// commit (each atomic on its own: one refused leaves the others
    /// recorded); the results in the same order.
    pub fn record_outcomes(
        &self,
        outcomes: &[(String, ExternalOutcome)],
    ) -> Vec<Result<ReceiptRef, StoreError>> {
        let now = match self.now() {
            Ok(n) => n,
            // no clock, no outcome recorded: each is the clock's error
            Err(e) => {
                return outcomes
                    .iter()
                    .map(|_| Err(StoreError::from(e.clone())))
                    .collect();
            }
        };
        let mut links: Vec<Option<ReceiptRef>> = vec![None; outcomes.len()];
        let mut bodies: Vec<Box<TxFn<'_>>> = links
            .iter_mut()
            .zip(outcomes)
            .map(|(link, (op, outcome))| {
                Box::new(move |tx: &mut dyn Tx| {
                    let body = self.outcome_change(tx, op, outcome, now)?;
                    let l = tx.append_receipt_jcs(&body)?;
                    *link = Some(ReceiptRef {
                        seq: l.seq,
                        hash: l.hash,
                    });
                    Ok(Value::Null)
                }) as Box<TxFn<'_>>
            })
            .collect();
        let mut refs: Vec<&mut TxFn<'_>> = bodies.iter_mut().map(|b| &mut **b).collect();
        let results = self.store.transactions(&mut refs);
        drop(refs);
        drop(bodies);
        results
            .into_iter()
            .zip(links)
            .map(|(r, link)| {
                r.and_then(|_| {
                    link.ok_or_else(|| StoreError::Aborted("the outcome left no receipt".into()))
                })
            })
            .collect()
    }

    /// Stores one outcome in `tx` and returns its receipt's body: refused
    /// for an operation no decision executed or one already with an
    /// outcome. The receipt holds the salted hash of the answer; the answer
    /// of an operation that carried a secret (its resolved values hold a
    /// commitment) is not stored at all, whatever encoding an echo of the
    /// secret would take in it: only a tool result whose text is
    /// [`WITHHELD_ANSWER`], with the status and the hash.
    pub(crate) fn outcome_change(
        &self,
        tx: &mut dyn Tx,
        operation_hash: &str,
        outcome: &ExternalOutcome,
        now: i64,
    ) -> Result<crate::canonical::Jcs, StoreError> {
        let Some(executed) = tx.executed(operation_hash)? else {
            return Err(StoreError::Aborted(format!(
                "no decision executed the operation `{operation_hash}`"
            )));
        };
        if tx.state_get(OUTCOME_NS, operation_hash)?.is_some() {
            return Err(StoreError::Aborted(format!(
                "the operation `{operation_hash}` already has an outcome"
            )));
        }
        // a read's execution (its own key): no retry is ever answered with
        // it, so its answer is not kept, only that it came (one outcome
        // per execution) and, in the receipt, its salted hash
        let read = super::read_operation(operation_hash);
        let mut stored = serde_json::json!({
            "executor": outcome.executor,
            "is_error": outcome.is_error,
        });
        if read.is_none() {
            // an MCP tool result, so that a retried call is answered with
            // the sentence
            stored["result"] = if carried_secret(&executed) {
                serde_json::json!({
                    "content": [{"type": "text", "text": WITHHELD_ANSWER}],
                    "isError": outcome.is_error,
                })
            } else {
                outcome.result.clone()
            };
        }
        tx.state_put(OUTCOME_NS, operation_hash, &stored)?;
        let result_hash = salted_hash_any(tx, "result", &outcome.result)?;
        let mut w = ObjectWriter::new();
        w.str("bundle", &self.bundle_hash);
        if read.is_some() {
            w.str("effect", super::Effect::Read.name())
                .str("execution", operation_hash);
        }
        w.str("executor", &outcome.executor)
            .bool("is_error", outcome.is_error)
            .str("kind", "outcome")
            .str("operation_hash", read.unwrap_or(operation_hash))
            .str("result_hash", &result_hash)
            .str("time", &format_time(now));
        Ok(w.finish())
    }

    /// Records a tool call the gateway did not decide (see [`ProxyCall`])
    /// as a receipt of its own, in the chain beside the decisions. Written
    /// when this returns, synced with the next decision
    /// ([`Store::transaction_written`](crate::store::Store::transaction_written)):
    /// no fsync of its own on the call's path.
    pub fn record_call(&self, call: &ProxyCall<'_>) -> Result<ReceiptRef, StoreError> {
        let now = self.now()?;
        self.with_receipt_as(true, &mut |tx| {
            let mut w = ObjectWriter::new();
            match call {
                ProxyCall::Passthrough {
                    server,
                    tool,
                    arguments,
                    is_error,
                    result,
                } => {
                    w.str(
                        "arguments_hash",
                        &salted_hash_any(tx, "arguments", arguments)?,
                    )
                    .str("bundle", &self.bundle_hash)
                    .bool("is_error", *is_error)
                    .str("kind", "passthrough")
                    .str("result_hash", &salted_hash_any(tx, "result", result)?)
                    .str("server", server)
                    .str("time", &format_time(now))
                    .str("tool", tool);
                }
                ProxyCall::Refused {
                    tool,
                    arguments,
                    reason,
                } => {
                    w.str(
                        "arguments_hash",
                        &salted_hash_any(tx, "arguments", arguments)?,
                    )
                    .str("bundle", &self.bundle_hash)
                    .str("kind", "refused")
                    .str("reason", reason)
                    .str("time", &format_time(now))
                    .str("tool", &crate::base::json::echo(tool));
                }
            }
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
