//! Held children in the store (issue 39, finding 8): a proposal reads only
//! its own tenant's index, counted as the keys it reads through a store
//! that logs them (never timed); children held in the index of every
//! tenant kept before stay listed and confirmable.

use super::held::PENDING_NS;
use super::*;
use crate::gateway::Gateway;
use crate::gateway::testkit::{MandateSpec, TestWorld, now};
use crate::store::memory::MemoryStore;
use crate::store::{ChainLink, ReceiptRange, ReceiptRecord, Snapshot, Spent, Store, Tx, TxFn};
use serde_json::json;
use std::sync::{Arc, Mutex};

/// A memory store that logs every state key its transactions read.
#[derive(Default)]
struct Reads {
    inner: MemoryStore,
    log: Mutex<Vec<(String, String)>>,
}

impl Reads {
    fn take(&self, ns: &str) -> Vec<String> {
        let mut log = self.log.lock().unwrap();
        let out = log
            .iter()
            .filter(|(n, _)| n == ns)
            .map(|(_, k)| k.clone())
            .collect();
        log.clear();
        out
    }
}

struct Logged<'a> {
    inner: &'a mut dyn Tx,
    log: &'a Mutex<Vec<(String, String)>>,
}

impl Tx for Logged<'_> {
    fn spent(&mut self, m: &str) -> Result<Spent, StoreError> {
        self.inner.spent(m)
    }
    fn spend(&mut self, m: &str, amount: i64) -> Result<Spent, StoreError> {
        self.inner.spend(m, amount)
    }
    fn nonce_used(&mut self, n: &str) -> Result<bool, StoreError> {
        self.inner.nonce_used(n)
    }
    fn use_nonce(&mut self, n: &str) -> Result<(), StoreError> {
        self.inner.use_nonce(n)
    }
    fn executed(&mut self, h: &str) -> Result<Option<Value>, StoreError> {
        self.inner.executed(h)
    }
    fn record_execution(&mut self, h: &str, r: &Value) -> Result<(), StoreError> {
        self.inner.record_execution(h, r)
    }
    fn revoked(&mut self, t: &str) -> Result<bool, StoreError> {
        self.inner.revoked(t)
    }
    fn revoke(&mut self, t: &str) -> Result<(), StoreError> {
        self.inner.revoke(t)
    }
    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.log.lock().unwrap().push((ns.into(), key.into()));
        self.inner.state_get(ns, key)
    }
    fn state_put(&mut self, ns: &str, key: &str, v: &Value) -> Result<(), StoreError> {
        self.inner.state_put(ns, key, v)
    }
    fn append_receipt_jcs(
        &mut self,
        body: &crate::canonical::Jcs,
    ) -> Result<ChainLink, StoreError> {
        self.inner.append_receipt_jcs(body)
    }
}

impl Store for Reads {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.inner.transaction(&mut |tx| {
            f(&mut Logged {
                inner: tx,
                log: &self.log,
            })
        })
    }
    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.inner.receipts()
    }
    fn receipts_range(&self, r: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.inner.receipts_range(r)
    }
    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.inner.head()
    }
    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.inner.snapshot()
    }
}

fn token(v: &Value) -> MandateToken {
    serde_json::from_value(v.clone()).unwrap()
}

/// A draft of a child of `parent` (no claim, 1.00, one call).
fn draft(gw: &Gateway, parent: &MandateToken) -> Draft {
    let req = ChildRequest {
        budget: Some(100),
        calls: Some(1),
        expires_at: Some(now() + 600),
        ..Default::default()
    };
    gw.propose_child(parent, &req).unwrap()
}

/// The ids of the held children in the listing, oldest first.
fn held_ids(gw: &Gateway) -> Vec<String> {
    let held = gw.held_children().unwrap();
    held.into_iter().map(|h| h.mandate.id).collect()
}

/// Another tenant's held children are never read by a proposal: only
/// the proposal's own key, its tenant's index and the list of tenants.
#[test]
fn a_proposal_reads_no_other_tenants_held_children() {
    let tw = TestWorld::new();
    let store = Arc::new(Reads::default());
    let gw = tw.gateway_with(store.clone());
    let noah = token(&tw.mandate(MandateSpec::bank("noah")));
    let mut d = draft(&gw, &noah);
    let mut theirs = vec![];
    for i in 0..30 {
        d.mandate.id = format!("m-noah-{i}");
        gw.hold_child(&d, "http").unwrap();
        theirs.push(d.mandate.id.clone());
    }
    let emma = token(&tw.emma());
    for i in 0..2 {
        let mine = draft(&gw, &emma);
        store.take(PENDING_NS);
        gw.hold_child(&mine, "http").unwrap();
        let read = store.take(PENDING_NS);
        assert!(
            read.iter()
                .all(|k| !theirs.contains(k) && !k.contains("noah") && k != "#index"),
            "proposal {i} read another tenant's held children: {read:?}"
        );
        assert!(read.len() <= 3, "proposal {i}: {read:?}");
    }
    // each tenant's still listed, and found by id
    let held = gw.held_children().unwrap();
    assert_eq!(held.len(), 32);
    assert!(gw.held_child("m-noah-0").unwrap().is_some());
}

/// A child held under the index of every tenant (as stores written before
/// the per-tenant index keep it) stays listed and confirmable; a new
/// proposal reads none of it, and a key of the listing is no mandate.
#[test]
fn children_held_in_the_old_index_stay_listed_and_confirmable() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let emma = token(&tw.emma());
    let old = draft(&gw, &emma);
    let held = Held {
        parent: emma.clone(),
        mandate: old.mandate.clone(),
        created_at: now(),
    };
    gw.store()
        .transaction(&mut |tx| {
            tx.state_put(PENDING_NS, &held.mandate.id, &json!(held))?;
            tx.state_put(PENDING_NS, "#index", &json!([held.mandate.id]))?;
            Ok(Value::Null)
        })
        .unwrap();
    let new = draft(&gw, &emma);
    gw.hold_child(&new, "http").unwrap();
    assert_eq!(
        held_ids(&gw),
        [old.mandate.id.clone(), new.mandate.id.clone()]
    );
    let sig = tw
        .key("emma")
        .sign(to_jcs(&old.mandate).unwrap().as_bytes());
    let key_id = tw.key("emma").public().id();
    gw.confirm_child(&old.mandate.id, &key_id, &sig, "http")
        .unwrap();
    assert_eq!(held_ids(&gw), std::slice::from_ref(&new.mandate.id));
    for key in ["#index", "#tenants", "#index/emma"] {
        assert!(gw.held_child(key).unwrap().is_none(), "{key}");
    }
    let mut bad = draft(&gw, &emma);
    bad.mandate.id = "#index/noah".into();
    assert!(matches!(
        gw.hold_child(&bad, "http"),
        Err(ChildError::Request { .. })
    ));
}
