//! The store of a sharded gateway's router (`gateway::shards`): it holds
//! nothing and refuses everything, so that work the router does not route
//! to a tenant's shard fails instead of landing on some shard.

use super::{ReceiptRange, ReceiptRecord, Snapshot, Store, StoreError, TxFn};
use serde_json::Value;

/// Refuses every transaction and every read ([`StoreError::Unrouted`]).
pub struct Unrouted;

fn refused<T>() -> Result<T, StoreError> {
    Err(StoreError::Unrouted {
        what: "this store operation".into(),
    })
}

impl Store for Unrouted {
    fn transaction(&self, _f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        refused()
    }

    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        refused()
    }

    fn receipts_range(&self, _range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        refused()
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        refused()
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        refused()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_is_refused() {
        let s = Unrouted;
        assert!(matches!(
            s.transaction(&mut |_tx| Ok(Value::Null)),
            Err(StoreError::Unrouted { .. })
        ));
        assert!(matches!(
            s.read_only(&mut |_tx| Ok(Value::Null)),
            Err(StoreError::Unrouted { .. })
        ));
        assert!(matches!(s.receipts(), Err(StoreError::Unrouted { .. })));
        assert!(matches!(s.head(), Err(StoreError::Unrouted { .. })));
        assert!(matches!(s.snapshot(), Err(StoreError::Unrouted { .. })));
        assert!(matches!(
            s.receipts_range(ReceiptRange::Last { limit: 1 }),
            Err(StoreError::Unrouted { .. })
        ));
    }
}
