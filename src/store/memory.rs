//! An in-memory [`Store`] for tests: one mutex around the state; a
//! transaction writes into an overlay that is merged only when the body
//! returns `Ok`, so an `Err` (or a panic) leaves nothing behind.

use super::rows;
use super::{
    Accounts, ChainLink, ReceiptRange, ReceiptRecord, Snapshot, Spent, Store, StoreError, Tx, TxFn,
};
use crate::canonical::Jcs;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

/// A receipt as kept: its link and its canonical body text (compact, and
/// parsed only when read back).
#[derive(Clone, Debug)]
struct Stored {
    link: ChainLink,
    body: Box<str>,
}

impl Stored {
    fn record(&self) -> Result<ReceiptRecord, StoreError> {
        Ok(ReceiptRecord {
            seq: self.link.seq,
            prev_hash: self.link.prev_hash.clone(),
            hash: self.link.hash.clone(),
            body: crate::canonical::read_json(&self.body)
                .map_err(|e| StoreError::Backend(format!("stored receipt: {e}")))?,
        })
    }
}

#[derive(Default, Debug)]
struct State {
    budgets: HashMap<String, Spent>,
    nonces: HashSet<String>,
    executions: HashMap<String, Value>,
    revocations: HashSet<String>,
    /// Namespace to key to value (looked up without building a key).
    state: HashMap<String, HashMap<String, Value>>,
    receipts: Vec<Stored>,
    head: Option<(u64, String)>,
    /// Receipts are chained (the head moves) but not kept (see
    /// [`MemoryStore::forgetting_receipts`]).
    forget_receipts: bool,
}

/// The in-memory store. Not durable; atomic and serialised across threads.
#[derive(Default, Debug)]
pub struct MemoryStore {
    inner: Mutex<State>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// A store that chains its receipts (each links to the one before,
    /// the head moves) but keeps none of them: for a caller that only
    /// needs the decisions' state (`ipc replay`'s own store, whose size
    /// would otherwise grow with every receipt it decides again).
    pub fn forgetting_receipts() -> Self {
        let s = Self::default();
        s.lock().forget_receipts = true;
        s
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only changed by merging a finished overlay, so a
        // panic inside a transaction body cannot leave it half-written.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The writes of one transaction, over the committed state.
struct Overlay<'a> {
    base: &'a State,
    budgets: HashMap<String, Spent>,
    nonces: HashSet<String>,
    executions: HashMap<String, Value>,
    revocations: HashSet<String>,
    state: HashMap<String, HashMap<String, Value>>,
    receipts: Vec<Stored>,
}

impl<'a> Overlay<'a> {
    fn new(base: &'a State) -> Self {
        Self {
            base,
            budgets: HashMap::new(),
            nonces: HashSet::new(),
            executions: HashMap::new(),
            revocations: HashSet::new(),
            state: HashMap::new(),
            receipts: Vec::new(),
        }
    }

    fn head(&self) -> Option<(u64, &str)> {
        match self.receipts.last() {
            Some(r) => Some((r.link.seq, r.link.hash.as_str())),
            None => self.base.head.as_ref().map(|(s, h)| (*s, h.as_str())),
        }
    }

    fn into_writes(self) -> Writes {
        Writes {
            budgets: self.budgets,
            nonces: self.nonces,
            executions: self.executions,
            revocations: self.revocations,
            state: self.state,
            receipts: self.receipts,
        }
    }
}

struct Writes {
    budgets: HashMap<String, Spent>,
    nonces: HashSet<String>,
    executions: HashMap<String, Value>,
    revocations: HashSet<String>,
    state: HashMap<String, HashMap<String, Value>>,
    receipts: Vec<Stored>,
}

impl Writes {
    fn apply(self, s: &mut State) {
        s.budgets.extend(self.budgets);
        s.nonces.extend(self.nonces);
        s.executions.extend(self.executions);
        s.revocations.extend(self.revocations);
        for (ns, kv) in self.state {
            s.state.entry(ns).or_default().extend(kv);
        }
        if let Some(last) = self.receipts.last() {
            s.head = Some((last.link.seq, last.link.hash.clone()));
        }
        if !s.forget_receipts {
            s.receipts.extend(self.receipts);
        }
    }
}

/// The value under `ns` and `key`, looked up without building a key.
fn nested_get<'m>(
    m: &'m HashMap<String, HashMap<String, Value>>,
    ns: &str,
    key: &str,
) -> Option<&'m Value> {
    m.get(ns)?.get(key)
}

impl Tx for Overlay<'_> {
    fn spent(&mut self, mandate_id: &str) -> Result<Spent, StoreError> {
        Ok(self
            .budgets
            .get(mandate_id)
            .or_else(|| self.base.budgets.get(mandate_id))
            .copied()
            .unwrap_or_default())
    }

    fn spend(&mut self, mandate_id: &str, amount: i64) -> Result<Spent, StoreError> {
        let now = self.spent(mandate_id)?;
        let next = rows::spent_after(now, mandate_id, amount)?;
        self.budgets.insert(mandate_id.to_string(), next);
        Ok(next)
    }

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self.nonces.contains(nonce) || self.base.nonces.contains(nonce))
    }

    fn use_nonce(&mut self, nonce: &str) -> Result<(), StoreError> {
        if self.nonce_used(nonce)? {
            return Err(StoreError::Conflict(format!(
                "nonce `{nonce}` was already used"
            )));
        }
        self.nonces.insert(nonce.to_string());
        Ok(())
    }

    fn executed(&mut self, op_hash: &str) -> Result<Option<Value>, StoreError> {
        Ok(self
            .executions
            .get(op_hash)
            .or_else(|| self.base.executions.get(op_hash))
            .cloned())
    }

    fn record_execution(&mut self, op_hash: &str, result: &Value) -> Result<(), StoreError> {
        if self.executed(op_hash)?.is_some() {
            return Err(StoreError::Conflict(format!(
                "operation `{op_hash}` was already executed"
            )));
        }
        self.executions.insert(op_hash.to_string(), result.clone());
        Ok(())
    }

    fn revoked(&mut self, token_id: &str) -> Result<bool, StoreError> {
        Ok(self.revocations.contains(token_id) || self.base.revocations.contains(token_id))
    }

    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError> {
        self.revocations.insert(token_id.to_string());
        Ok(())
    }

    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        Ok(nested_get(&self.state, ns, key)
            .or_else(|| nested_get(&self.base.state, ns, key))
            .cloned())
    }

    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        self.state
            .entry(ns.to_string())
            .or_default()
            .insert(key.to_string(), value.clone());
        Ok(())
    }

    fn state_list(
        &mut self,
        ns: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        // the committed entries, then this transaction's over them
        let mut out: std::collections::BTreeMap<&str, &Value> = std::collections::BTreeMap::new();
        for m in [self.base.state.get(ns), self.state.get(ns)]
            .into_iter()
            .flatten()
        {
            for (k, v) in m.iter().filter(|(k, _)| k.starts_with(prefix)) {
                out.insert(k, v);
            }
        }
        Ok(out
            .into_iter()
            .take(limit)
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect())
    }

    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
        let link = ChainLink::next(self.head(), body);
        self.receipts.push(Stored {
            link: link.clone(),
            body: body.as_str().into(),
        });
        Ok(link)
    }
}

impl Store for MemoryStore {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        let mut state = self.lock();
        let mut overlay = Overlay::new(&state);
        let value = f(&mut overlay)?;
        let writes = overlay.into_writes();
        writes.apply(&mut state);
        Ok(value)
    }

    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.lock().receipts.iter().map(Stored::record).collect()
    }

    fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        let s = self.lock();
        let window = match range {
            ReceiptRange::Last { limit } => &s.receipts[s.receipts.len().saturating_sub(limit)..],
            ReceiptRange::After { seq, limit } => {
                let from = s.receipts.partition_point(|r| r.link.seq <= seq);
                let rest = &s.receipts[from..];
                &rest[..rest.len().min(limit)]
            }
        };
        window.iter().map(Stored::record).collect()
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        Ok(self.lock().head.clone())
    }

    fn rows(&self) -> Result<super::Rows, StoreError> {
        let s = self.lock();
        Ok(super::Rows {
            budgets: s.budgets.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            nonces: s.nonces.iter().cloned().collect(),
            executions: s.executions.clone().into_iter().collect(),
            revocations: s.revocations.iter().cloned().collect(),
            state: s
                .state
                .iter()
                .flat_map(|(ns, kv)| kv.iter().map(|(k, v)| ((ns.clone(), k.clone()), v.clone())))
                .collect(),
        })
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let s = self.lock();
        Ok(Snapshot {
            receipts: s
                .receipts
                .iter()
                .map(|r| {
                    rows::stored_receipt(
                        r.link.seq,
                        r.link.prev_hash.clone(),
                        r.link.hash.clone(),
                        r.body.to_string(),
                        "text",
                    )
                })
                .collect(),
            head: s.head.clone(),
            accounts: Accounts {
                budgets: s.budgets.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                nonces: s.nonces.iter().cloned().collect(),
                executions: s.executions.keys().cloned().collect(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::MemoryStore;
    use crate::store::Store;
    use serde_json::{Value, json};

    /// A store forgetting its receipts still chains them: the head moves,
    /// each new receipt links to the one before, and none is kept.
    #[test]
    fn a_store_forgetting_receipts_chains_them_and_keeps_none() {
        let s = MemoryStore::forgetting_receipts();
        let mut links = vec![];
        for i in 0..3 {
            s.transaction(&mut |tx| {
                links.push(tx.append_receipt(&json!({"n": i}))?);
                Ok(Value::Null)
            })
            .unwrap();
        }
        assert_eq!(links[2].seq, 3);
        assert_eq!(links[2].prev_hash, links[1].hash);
        assert_eq!(s.head().unwrap(), Some((3, links[2].hash.clone())));
        assert!(s.receipts().unwrap().is_empty());
    }
}
