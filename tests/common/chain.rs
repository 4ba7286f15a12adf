//! Filling a store's chain for the store and `ipc receipts` tests.
#![allow(dead_code)]

use intentplane::store::{Store, Tx};
use serde_json::json;

/// `n` more receipts as the gateway writes them, each in one transaction
/// with the effects it records: every third (from the first) a DENY, the
/// others executed ALLOWs of mandate `m-1` spending `100 × i` and, for an
/// even `i`, using up an approval nonce (`i` counts the store's receipts).
/// Deterministic: the hashes in the CLI snapshots do not change from run
/// to run.
pub fn append_receipts(s: &dyn Store, n: u64) {
    let start = s.receipts().unwrap().len() as u64;
    for i in start..start + n {
        s.transaction(&mut |t: &mut dyn Tx| {
            let body = if i % 3 == 0 {
                json!({"decision": "DENY", "stage": "provenance",
                       "action": "payment.transfer", "i": i})
            } else {
                let op = format!("sha256:op-{i}");
                let nonces: Vec<String> =
                    (i % 2 == 0).then(|| format!("n-{i}")).into_iter().collect();
                t.record_execution(&op, &json!({"i": i}))?;
                t.spend("m-1", 100 * i as i64)?;
                for n in &nonces {
                    t.use_nonce(n)?;
                }
                json!({"decision": "ALLOW", "stage": "execution",
                       "action": "payment.transfer", "i": i, "replayed": false,
                       "mandate": {"id": "m-1"}, "operation_hash": op,
                       "consumed": {"amount": 100 * i, "nonces": nonces}})
            };
            t.append_receipt(&body).map(|r| json!(r.seq))
        })
        .unwrap();
    }
}
