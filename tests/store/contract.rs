//! The store contract, one conformance suite run against every
//! implementation (memory, SQLite with and without group commit,
//! PostgreSQL when `IPC_TEST_PG` names a server: see `common/pg.rs`). The
//! receipt chain under tampering is in `tamper.rs`, concurrency across
//! threads and processes in `concurrency.rs`, opening files and the CLI in
//! `opening.rs`, the PostgreSQL halves in `pg_contract.rs`.

use crate::common;

use crate::contract_kit::*;
use common::TestWorld;
use intentplane::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
use intentplane::store::postgres::PgStore;
use intentplane::store::sqlite::SqliteStore;
use intentplane::store::{ReceiptRange, Store, StoreError, Tx, verify_chain};
use serde_json::{Value, json};
use std::sync::Arc;

#[test]
fn an_err_rolls_everything_back() {
    each_store(|s| {
        let err = tx(s, |t| {
            t.spend("m1", 500)?;
            t.use_nonce("n1")?;
            t.record_execution("op1", &json!({"ok": true}))?;
            t.revoke("tok1")?;
            t.state_put("ap.invoice_status", "INV-1", &json!("paid"))?;
            t.append_receipt(&json!({"decision": "ALLOW"}))?;
            Err(StoreError::Aborted("changed my mind".into()))
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Aborted(ref m) if m == "changed my mind"));
        tx(s, |t| {
            assert_eq!(t.spent("m1")?, Default::default());
            assert!(!t.nonce_used("n1")?);
            assert_eq!(t.executed("op1")?, None);
            assert!(!t.revoked("tok1")?);
            assert_eq!(t.state_get("ap.invoice_status", "INV-1")?, None);
            Ok(Value::Null)
        })
        .unwrap();
        assert!(s.receipts().unwrap().is_empty());
        assert_eq!(s.head().unwrap(), None);
    });
}

/// A failing body after committed ones (on SQLite, the first body of its
/// batch, which runs without a savepoint): the chain and the head are the
/// committed ones, and the next receipt links to them.
#[test]
fn an_err_after_commits_leaves_the_chain_as_it_was() {
    each_store(|s| {
        tx(s, |t| {
            t.append_receipt(&json!({"n": 1})).map(|_| Value::Null)
        })
        .unwrap();
        let head = s.head().unwrap();
        let err = tx(s, |t| {
            t.append_receipt(&json!({"n": "lost"}))?;
            t.spend("m", 5)?;
            Err(StoreError::Aborted("no".into()))
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Aborted(_)), "{err:?}");
        assert_eq!(s.head().unwrap(), head);
        tx(s, |t| {
            assert_eq!(t.spent("m")?.amount, 0);
            t.append_receipt(&json!({"n": 2})).map(|_| Value::Null)
        })
        .unwrap();
        let records = s.receipts().unwrap();
        assert_eq!(verify_chain(&records, s.head().unwrap()), Ok(2));
        assert_eq!(records[1].body, json!({"n": 2}));
    });
}

/// Written transactions (records of calls not decided) between synced
/// ones, on every store: each commits atomically (a failing one leaves
/// nothing), the chain links through them in order, and the head is the
/// last one's.
#[test]
fn written_transactions_commit_in_the_chain_between_synced_ones() {
    each_store(|s| {
        let append =
            |n: i64| move |t: &mut dyn Tx| t.append_receipt(&json!({"n": n})).map(|_| Value::Null);
        s.transaction(&mut append(1)).unwrap();
        s.transaction_written(&mut append(2)).unwrap();
        let err = s
            .transaction_written(&mut |t: &mut dyn Tx| {
                t.append_receipt(&json!({"n": "lost"}))?;
                t.spend("m", 5)?;
                Err(StoreError::Aborted("no".into()))
            })
            .unwrap_err();
        assert!(matches!(err, StoreError::Aborted(_)), "{err:?}");
        s.transaction_written(&mut append(3)).unwrap();
        s.transaction(&mut append(4)).unwrap();
        let records = s.receipts().unwrap();
        assert_eq!(verify_chain(&records, s.head().unwrap()), Ok(4));
        let ns: Vec<&Value> = records.iter().map(|r| &r.body["n"]).collect();
        assert_eq!(ns, [&json!(1), &json!(2), &json!(3), &json!(4)]);
        tx(s, |t| {
            assert_eq!(t.spent("m")?.amount, 0);
            Ok(Value::Null)
        })
        .unwrap();
    });
}

#[test]
fn a_panicking_body_leaves_nothing_and_the_store_keeps_working() {
    each_store(|s| {
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = tx(s, |t| {
                t.spend("m", 7)?;
                t.append_receipt(&json!({"n": 1}))?;
                panic!("body panics");
            });
        }));
        assert!(panicked.is_err());
        tx(s, |t| {
            assert_eq!(t.spent("m")?.amount, 0);
            t.spend("m", 1)?;
            Ok(Value::Null)
        })
        .unwrap();
        assert!(s.receipts().unwrap().is_empty());
        tx(s, |t| Ok(json!(t.spent("m")?.amount))).unwrap();
    });
}

#[test]
fn a_transaction_sees_its_own_writes_and_returns_its_value() {
    each_store(|s| {
        let v = tx(s, |t| {
            t.spend("m", 3)?;
            t.spend("m", 4)?;
            t.state_put("ns", "k", &json!({"a": [1, 2]}))?;
            Ok(json!({"spent": t.spent("m")?, "state": t.state_get("ns", "k")?}))
        })
        .unwrap();
        assert_eq!(
            v,
            json!({"spent": {"amount": 7, "calls": 2}, "state": {"a": [1, 2]}})
        );
    });
}

#[test]
fn a_nonce_is_single_use() {
    each_store(|s| {
        tx(s, |t| t.use_nonce("approval-1").map(|()| Value::Null)).unwrap();
        let err = tx(s, |t| t.use_nonce("approval-1").map(|()| Value::Null)).unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
        assert!(err.to_string().contains("`approval-1`"), "{err}");
        tx(s, |t| {
            assert!(t.nonce_used("approval-1")?);
            assert!(!t.nonce_used("approval-2")?);
            // used twice in one transaction: also a conflict
            t.use_nonce("approval-2")?;
            assert!(matches!(
                t.use_nonce("approval-2"),
                Err(StoreError::Conflict(_))
            ));
            Ok(Value::Null)
        })
        .unwrap();
    });
}

#[test]
fn budgets_accumulate_per_mandate() {
    each_store(|s| {
        for amount in [100, 250, 1] {
            tx(s, |t| t.spend("m-a", amount).map(|sp| json!(sp))).unwrap();
        }
        tx(s, |t| t.spend("m-b", 5).map(|sp| json!(sp))).unwrap();
        tx(s, |t| {
            let a = t.spent("m-a")?;
            assert_eq!((a.amount, a.calls), (351, 3));
            let b = t.spent("m-b")?;
            assert_eq!((b.amount, b.calls), (5, 1));
            let c = t.spent("m-c")?;
            assert_eq!((c.amount, c.calls), (0, 0));
            Ok(Value::Null)
        })
        .unwrap();
        // overflow is an error, not a wrap or a panic
        let err = tx(s, |t| t.spend("m-a", i64::MAX).map(|_| Value::Null)).unwrap_err();
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
        assert!(err.to_string().contains("`m-a` overflows"), "{err}");
        // ... and changes nothing
        tx(s, |t| {
            let a = t.spent("m-a")?;
            assert_eq!((a.amount, a.calls), (351, 3));
            Ok(Value::Null)
        })
        .unwrap();
        // the same on the negative side
        tx(s, |t| t.spend("m-n", i64::MIN).map(|sp| json!(sp))).unwrap();
        let err = tx(s, |t| t.spend("m-n", -1).map(|_| Value::Null)).unwrap_err();
        assert!(err.to_string().contains("`m-n` overflows"), "{err}");
        let up = tx(s, |t| t.spend("m-n", 1).map(|sp| json!(sp))).unwrap();
        assert_eq!(up["amount"], json!(i64::MIN + 1));
        assert_eq!(up["calls"], json!(2));
    });
}

#[test]
fn an_operation_executes_once() {
    each_store(|s| {
        let result = json!({"transfer_id": "T-1", "amount": 12000});
        tx(s, |t| {
            assert_eq!(t.executed("op-1")?, None);
            t.record_execution("op-1", &result)?;
            Ok(Value::Null)
        })
        .unwrap();
        assert_eq!(
            tx(s, |t| Ok(t.executed("op-1")?.unwrap_or(Value::Null))).unwrap(),
            result
        );
        let err = tx(s, |t| {
            t.record_execution("op-1", &json!({"again": true}))
                .map(|()| Value::Null)
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)), "{err:?}");
        assert_eq!(
            tx(s, |t| Ok(t.executed("op-1")?.unwrap_or(Value::Null))).unwrap(),
            result,
            "the first result is kept"
        );
    });
}

#[test]
fn revocation_sticks() {
    each_store(|s| {
        tx(s, |t| {
            t.revoke("tok-1")?;
            t.revoke("tok-1")?; // idempotent
            Ok(Value::Null)
        })
        .unwrap();
        tx(s, |t| {
            assert!(t.revoked("tok-1")?);
            assert!(!t.revoked("tok-2")?);
            Ok(Value::Null)
        })
        .unwrap();
    });
}

#[test]
fn state_get_and_put() {
    each_store(|s| {
        tx(s, |t| {
            t.state_put("ap.invoice_status", "INV-1", &json!("open"))?;
            t.state_put("ap.invoice_status", "INV-2", &json!("open"))?;
            t.state_put("bank.ledger", "INV-1", &json!({"balance": 10}))?;
            Ok(Value::Null)
        })
        .unwrap();
        tx(s, |t| {
            t.state_put("ap.invoice_status", "INV-1", &json!("paid"))?;
            Ok(Value::Null)
        })
        .unwrap();
        tx(s, |t| {
            assert_eq!(
                t.state_get("ap.invoice_status", "INV-1")?,
                Some(json!("paid"))
            );
            assert_eq!(
                t.state_get("ap.invoice_status", "INV-2")?,
                Some(json!("open"))
            );
            assert_eq!(
                t.state_get("bank.ledger", "INV-1")?,
                Some(json!({"balance": 10}))
            );
            assert_eq!(t.state_get("bank.ledger", "INV-2")?, None);
            Ok(Value::Null)
        })
        .unwrap();
    });
}

/// An owner's record overrides of a registry, listed whole (a mandate's
/// selection reads them): the committed entries and the transaction's own,
/// in key order, a deletion (`null`) listed as such, another owner's (a
/// prefix of hers, a `%` or `_` a LIKE would match) never, at most `limit`.
#[test]
fn state_list_lists_an_owners_entries_of_a_namespace() {
    each_store(|s| {
        let ns = "registry:shop/catalogue";
        tx(s, |t| {
            t.state_put(ns, "maya\u{1f}P2", &json!({"price": 100}))?;
            t.state_put(ns, "maya\u{1f}P1", &json!({"price": 200}))?;
            t.state_put(ns, "mayb\u{1f}P1", &json!({"price": 1}))?;
            t.state_put(ns, "ma%a\u{1f}P9", &json!({"price": 1}))?;
            t.state_put(ns, "ma_a\u{1f}P9", &json!({"price": 1}))?;
            t.state_put("registry:shop/other", "maya\u{1f}P7", &json!({}))?;
            Ok(Value::Null)
        })
        .unwrap();
        tx(s, |t| {
            t.state_put(ns, "maya\u{1f}P3", &Value::Null)?;
            t.state_put(ns, "maya\u{1f}P1", &json!({"price": 150}))?;
            let all = t.state_list(ns, "maya\u{1f}", 10)?;
            assert_eq!(
                all,
                vec![
                    ("maya\u{1f}P1".to_string(), json!({"price": 150})),
                    ("maya\u{1f}P2".to_string(), json!({"price": 100})),
                    ("maya\u{1f}P3".to_string(), Value::Null),
                ]
            );
            assert_eq!(t.state_list(ns, "maya\u{1f}", 2)?.len(), 2);
            assert!(t.state_list(ns, "ma%a\u{1f}", 10)?.len() == 1);
            assert!(t.state_list(ns, "nobody\u{1f}", 10)?.is_empty());
            Ok(Value::Null)
        })
        .unwrap();
    });
}

#[test]
fn the_chain_links_and_verifies() {
    each_store(|s| {
        append(s, 6);
        let records = s.receipts().unwrap();
        assert_eq!(
            records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5, 6]
        );
        assert_eq!(records[0].prev_hash, format!("sha256:{}", "0".repeat(64)));
        for pair in records.windows(2) {
            assert_eq!(pair[1].prev_hash, pair[0].hash);
        }
        assert_eq!(records[5].body["i"], json!(5));
        let head = s.head().unwrap();
        assert_eq!(head, Some((6, records[5].hash.clone())));
        assert_eq!(verify_chain(&records, head), Ok(6));
    });
}

/// `receipts_range` (the paged `GET /v1/receipts`) gives exactly the
/// window of the whole chain it names, in chain order, on every store.
#[test]
fn a_range_of_receipts_is_the_window_of_the_chain() {
    each_store(|s| {
        let last = |limit| ReceiptRange::Last { limit };
        let after = |seq, limit| ReceiptRange::After { seq, limit };
        assert!(s.receipts_range(last(5)).unwrap().is_empty());
        assert!(s.receipts_range(after(0, 5)).unwrap().is_empty());
        append(s, 7);
        let all = s.receipts().unwrap();
        let cases = [
            (last(3), &all[4..]),
            (last(7), &all[..]),
            (last(100), &all[..]),
            (last(0), &all[..0]),
            (after(0, 2), &all[..2]),
            (after(2, 3), &all[2..5]),
            (after(5, 10), &all[5..]),
            (after(7, 10), &all[7..]),
            (after(u64::MAX, 10), &all[7..]),
            (after(0, usize::MAX), &all[..]),
        ];
        for (range, want) in cases {
            assert_eq!(s.receipts_range(range).unwrap(), want, "{range:?}");
        }
    });
}

#[test]
fn a_body_without_exact_canonical_form_is_refused() {
    each_store(|s| {
        // JSON numbers beyond 2^53 would be rounded by canonical JSON, so
        // two bodies could share a hash; appending must fail, not panic.
        let err = tx(s, |t| {
            t.append_receipt(&json!({"ok": 1}))?;
            t.append_receipt(&json!({"n": u64::MAX}))
                .map(|r| json!(r.seq))
        })
        .unwrap_err();
        assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
        assert!(err.to_string().contains("18446744073709551615"), "{err}");
        assert!(s.receipts().unwrap().is_empty());
        assert_eq!(s.head().unwrap(), None);
    });
}

/// Opens a store again.
pub(crate) type Opener = Box<dyn Fn() -> Arc<dyn Store>>;

/// Held child mandates (issue 39, finding 8) behave alike on every store:
/// one pushed out of its parent's listing is found and confirmed by its
/// id, after the store is opened again, and another tenant's stays listed.
#[test]
fn a_held_child_past_the_listing_is_found_by_id_on_every_store() {
    use intentplane::gateway::ChildRequest;
    use intentplane::gateway::pending::MAX_PER_MANDATE;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("held.db");
    #[allow(unused_mut)]
    let mut stores: Vec<(&str, Opener)> = vec![
        ("memory", {
            let m: Arc<dyn Store> = Arc::new(MemoryStore::new());
            Box::new(move || m.clone())
        }),
        (
            "sqlite",
            Box::new(move || Arc::new(SqliteStore::open(&db).unwrap())),
        ),
    ];
    #[cfg(feature = "postgres")]
    let pg = common::pg::fresh();
    #[cfg(feature = "postgres")]
    if let Some(pg) = &pg {
        let url = pg.url.clone();
        stores.push((
            "postgres",
            Box::new(move || Arc::new(PgStore::open(&url).unwrap())),
        ));
    }
    let w = TestWorld::new();
    let token =
        |v: Value| -> intentplane::gateway::MandateToken { serde_json::from_value(v).unwrap() };
    let req = ChildRequest {
        budget: Some(100),
        calls: Some(1),
        ..Default::default()
    };
    for (kind, open) in &stores {
        let gw = w.gateway_with(open());
        let noah = gw
            .propose_child(&token(w.mandate(common::MandateSpec::bank("noah"))), &req)
            .unwrap();
        gw.hold_child(&noah, "http").unwrap();
        let mut d = gw.propose_child(&token(w.emma()), &req).unwrap();
        let first = d.mandate.id.clone();
        for i in 0..=MAX_PER_MANDATE {
            if i > 0 {
                d.mandate.id = format!("m-flood-{i}");
            }
            gw.hold_child(&d, "http").unwrap();
        }
        let gw = w.gateway_with(open());
        let held = gw.held_children().unwrap();
        assert!(!held.iter().any(|h| h.mandate.id == first), "{kind}");
        assert!(
            held.iter().any(|h| h.mandate.id == noah.mandate.id),
            "{kind}"
        );
        let row = gw.mandate_row(&first).unwrap().unwrap();
        assert_eq!(row["status"], "pending", "{kind}: {row}");
        let h = gw.held_child(&first).unwrap().unwrap();
        let sig = w.key("emma").sign(
            intentplane::canonical::to_jcs(&h.mandate)
                .unwrap()
                .as_bytes(),
        );
        let key_id = w.key("emma").public().id();
        gw.confirm_child(&first, &key_id, &sig, "http").unwrap();
        let row = gw.mandate_row(&first).unwrap().unwrap();
        assert_eq!(row["status"], "issued", "{kind}: {row}");
    }
}

/// `Store::read_only` on SQLite (the MCP proxy's check, before each
/// passthrough, that the session's mandates stand): it sees what is
/// committed, joins no writer's batch, and keeps nothing it tries to write.
#[test]
fn a_read_only_transaction_sees_the_committed_state_and_keeps_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open(dir.path().join("s.db")).unwrap();
    s.transaction(&mut |tx| {
        tx.revoke("m-1")?;
        Ok(serde_json::Value::Null)
    })
    .unwrap();
    let seen = s
        .read_only(&mut |tx| Ok(serde_json::Value::Bool(tx.revoked("m-1")?)))
        .unwrap();
    assert_eq!(seen, serde_json::Value::Bool(true));
    let _ = s.read_only(&mut |tx| {
        tx.revoke("m-2")?;
        Ok(serde_json::Value::Null)
    });
    let kept = s
        .transaction(&mut |tx| Ok(serde_json::Value::Bool(tx.revoked("m-2")?)))
        .unwrap();
    assert_eq!(
        kept,
        serde_json::Value::Bool(false),
        "a read-only write was kept"
    );
}

/// `Store::rows` lists every row of every table besides the receipts, as
/// committed (what `ipc shards move` reads off the old shard).
#[test]
fn rows_lists_every_committed_row() {
    each_store(|s| {
        tx(s, |t| {
            t.spend("m1", 500)?;
            t.spend("m1", 0)?;
            t.use_nonce("n1")?;
            t.record_execution("op1", &json!({"ok": true}))?;
            t.revoke("tok1")?;
            t.state_put("ap.invoice_status", "INV-1", &json!("paid"))?;
            t.append_receipt(&json!({"decision": "ALLOW"}))?;
            Ok(Value::Null)
        })
        .unwrap();
        let _ = tx(s, |t| {
            t.use_nonce("lost")?;
            Err(StoreError::Aborted("rolled back".into()))
        });
        let rows = s.rows().unwrap();
        assert_eq!(rows.budgets["m1"].amount, 500);
        assert_eq!(rows.budgets["m1"].calls, 2);
        assert_eq!(rows.nonces, ["n1".to_string()].into());
        assert_eq!(rows.executions["op1"], json!({"ok": true}));
        assert_eq!(rows.revocations, ["tok1".to_string()].into());
        assert_eq!(
            rows.state[&("ap.invoice_status".to_string(), "INV-1".to_string())],
            json!("paid")
        );
        assert_eq!(rows.len(), 5);
    });
}
