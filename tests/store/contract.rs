//! The store contract, one conformance suite run against every
//! implementation (memory, SQLite with and without group commit,
//! PostgreSQL when `IPC_TEST_PG` names a server: see `common/pg.rs`), plus
//! the receipt chain under tampering, and concurrency across threads and
//! processes on SQLite and PostgreSQL alike.

use crate::common;

use common::{ATTACKER_IBAN, LANDLORD, TestWorld, assert_deny, decide, input, transfer};
use intentplane::gateway::{Gateway, Outcome};
use intentplane::keys::SecretKey;
use intentplane::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
use intentplane::store::postgres::PgStore;
use intentplane::store::sqlite::{SqliteOptions, SqliteStore};
use intentplane::store::{
    ChainProblem, Checkpoint, CheckpointError, ReceiptRange, Spent, Store, StoreError, Tx,
    verify_chain, verify_store,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn sqlite_in(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("store.db")).unwrap()
}

/// Runs `check` against a fresh store of each kind.
fn each_store(check: impl Fn(&dyn Store)) {
    check(&MemoryStore::new());
    let dir = tempfile::tempdir().unwrap();
    check(&sqlite_in(&dir));
    let batched = SqliteStore::open_with(
        dir.path().join("nobatch.db"),
        SqliteOptions {
            max_batch: 1,
            ..SqliteOptions::default()
        },
        true,
    )
    .unwrap();
    check(&batched);
    #[cfg(feature = "postgres")]
    if let Some(pg) = common::pg::fresh() {
        check(&PgStore::open(&pg.url).unwrap());
    }
}

fn tx(
    store: &dyn Store,
    mut f: impl FnMut(&mut dyn Tx) -> Result<Value, StoreError>,
) -> Result<Value, StoreError> {
    store.transaction(&mut f)
}

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

/// `n` more receipts in the store (`common::chain`).
fn append(s: &dyn Store, n: u64) {
    common::chain::append_receipts(s, n);
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

// ---------------------------------------------------------------- tampering

/// A SQLite store with `n` receipts, then closed.
fn store_file(n: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let s = SqliteStore::open(&path).unwrap();
    append(&s, n);
    drop(s);
    (dir, path)
}

fn tamper(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

fn verify_file(path: &Path) -> Result<usize, Vec<ChainProblem>> {
    let s = SqliteStore::open_existing(path).unwrap();
    verify_chain(&s.receipts().unwrap(), s.head().unwrap())
}

#[test]
fn tamper_edit_a_body() {
    let (_dir, path) = store_file(8);
    tamper(
        &path,
        r#"UPDATE receipts SET body = json_set(body, '$.decision', 'ALLOW') WHERE seq = 4"#,
    );
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(problems, vec![ChainProblem::Edited { seq: 4 }]);
    assert_eq!(
        problems[0].to_string(),
        "record 4 was edited: its hash does not match its content"
    );
}

#[test]
fn tamper_body_that_is_no_longer_json() {
    let (_dir, path) = store_file(3);
    tamper(
        &path,
        "UPDATE receipts SET body = '{not json' WHERE seq = 2",
    );
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::Edited { seq: 2 }]
    );
}

#[test]
fn tamper_delete_a_middle_record() {
    let (_dir, path) = store_file(8);
    tamper(&path, "DELETE FROM receipts WHERE seq = 5");
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(problems, vec![ChainProblem::Missing { from: 5, to: 5 }]);
    assert_eq!(problems[0].to_string(), "record 5 is missing (deleted)");
}

#[test]
fn tamper_delete_the_first_records() {
    let (_dir, path) = store_file(5);
    tamper(&path, "DELETE FROM receipts WHERE seq <= 2");
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::Missing { from: 1, to: 2 }]
    );
}

#[test]
fn tamper_swap_two_records() {
    let (_dir, path) = store_file(8);
    tamper(
        &path,
        "UPDATE receipts SET seq = -1 WHERE seq = 3;
         UPDATE receipts SET seq = 3 WHERE seq = 4;
         UPDATE receipts SET seq = 4 WHERE seq = -1;",
    );
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(
        problems,
        vec![
            ChainProblem::Reordered {
                seq: 3,
                original_seq: 4
            },
            ChainProblem::Reordered {
                seq: 4,
                original_seq: 3
            },
        ]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 3 was reordered: it was written as record 4"
    );
}

#[test]
fn tamper_cut_the_tail_keeping_the_head() {
    let (_dir, path) = store_file(8);
    tamper(&path, "DELETE FROM receipts WHERE seq > 5");
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(
        problems,
        vec![ChainProblem::Truncated {
            last_seq: 5,
            head_seq: 8
        }]
    );
    assert_eq!(
        problems[0].to_string(),
        "chain truncated: the head marker names record 8 but the last record is 5"
    );
}

#[test]
fn tamper_cut_the_tail_and_move_the_head_back_by_seq_only() {
    let (_dir, path) = store_file(6);
    tamper(
        &path,
        "DELETE FROM receipts WHERE seq > 4; UPDATE head SET seq = 4",
    );
    let problems = verify_file(&path).unwrap_err();
    assert!(
        matches!(
            problems.as_slice(),
            [ChainProblem::HeadMismatch { seq: 4, .. }]
        ),
        "{problems:?}"
    );
}

#[test]
fn tamper_remove_the_head() {
    let (_dir, path) = store_file(3);
    tamper(&path, "DELETE FROM head");
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::NoHead { last_seq: 3 }]
    );
}

#[test]
fn tamper_rewrite_a_record_with_a_fresh_hash() {
    // The attacker edits record 2 and recomputes its hash: record 3 no
    // longer links to it.
    let (_dir, path) = store_file(4);
    let s = SqliteStore::open_existing(&path).unwrap();
    let r2 = s.receipts().unwrap()[1].clone();
    drop(s);
    let body = json!({"decision": "ALLOW", "forged": true});
    let hash = intentplane::store::receipts::record_hash(2, &r2.prev_hash, &body).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE receipts SET body = ?1, hash = ?2 WHERE seq = 2",
        rusqlite::params![body.to_string(), hash],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::BrokenLink {
            seq: 3,
            prev_seq: 2
        }]
    );
}

#[test]
fn tamper_several_things_at_once_names_each() {
    let (_dir, path) = store_file(12);
    tamper(
        &path,
        r#"UPDATE receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 2;
           DELETE FROM receipts WHERE seq IN (6, 7);
           DELETE FROM receipts WHERE seq > 10;"#,
    );
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![
            ChainProblem::Edited { seq: 2 },
            ChainProblem::Missing { from: 6, to: 7 },
            ChainProblem::Truncated {
                last_seq: 10,
                head_seq: 12
            },
        ]
    );
}

// ------------------------------------------- the whole store (verify_store)
//
// Each tamper below verified `ok` before verify looked past the chain: the
// tests assert that `verify_chain` alone still passes, then what
// `verify_store` names.

fn audit_file(path: &Path, checkpoint: Option<&Checkpoint>) -> Result<usize, Vec<ChainProblem>> {
    let s = SqliteStore::open_existing(path).unwrap();
    verify_store(
        &s.snapshot().unwrap(),
        checkpoint.map(|c| (c.seq, c.hash.as_str())),
    )
}

fn ops_key() -> SecretKey {
    SecretKey::from_seed(&[42; 32])
}

/// A checkpoint of record `seq` as the store holds it now.
fn checkpoint_at(path: &Path, seq: u64) -> Checkpoint {
    let s = SqliteStore::open_existing(path).unwrap();
    let r = s
        .receipts()
        .unwrap()
        .into_iter()
        .find(|r| r.seq == seq)
        .unwrap();
    Checkpoint::sign(seq, &r.hash, 1_764_268_800, &ops_key()).unwrap()
}

fn hash_of_record(path: &Path, seq: u64) -> String {
    let s = SqliteStore::open_existing(path).unwrap();
    s.receipts().unwrap()[usize::try_from(seq - 1).unwrap()]
        .hash
        .clone()
}

/// The real gateway on a store file: (1) a 700.00 transfer executes, (2)
/// its replay, (3) a DENY, (4) a 1,200.00 transfer waits for a step-up,
/// (5) which emma's approval executes. Emma's mandate then has 1,900.00
/// spent in two calls, one approval nonce used, two operations executed.
struct Decided {
    w: TestWorld,
    gw: Gateway,
    mandate: Value,
    mandate_id: String,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

fn decided() -> Decided {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    let w = TestWorld::new();
    let gw = w.gateway_with(Arc::new(SqliteStore::open(&path).unwrap()));
    let m = w.emma();
    let paid = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(paid.decision, Outcome::Allow, "{paid:#?}");
    assert!(decide(&gw, transfer(LANDLORD, json!("700.00")), &m).replayed);
    assert_deny(
        &decide(&gw, transfer(ATTACKER_IBAN, json!("1.00")), &m),
        "provenance",
        "payee_iban",
    );
    let big = transfer(LANDLORD, json!("1200.00"));
    let pending = decide(&gw, big.clone(), &m);
    assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
    let op = pending.operation_hash.clone().unwrap();
    let approved = gw
        .decide(&input(big, &m, vec![w.approve("emma", &op)]))
        .unwrap();
    assert_eq!(approved.decision, Outcome::Allow, "{approved:#?}");
    let mandate_id = m["mandate"]["id"].as_str().unwrap().to_string();
    Decided {
        w,
        gw,
        mandate: m,
        mandate_id,
        path,
        _dir: dir,
    }
}

#[test]
fn the_gateway_records_what_each_executed_decision_consumed() {
    let d = decided();
    let snap = d.gw.store().snapshot().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(&d.mandate_id),
        Some(&Spent {
            amount: 190_000,
            calls: 2
        })
    );
    assert_eq!(snap.accounts.executions.len(), 2);
    assert_eq!(snap.accounts.nonces.len(), 1);
    let records = snap.records();
    let nonce = snap.accounts.nonces.iter().next().unwrap();
    assert_eq!(
        records[0].body["consumed"],
        json!({"amount": 70_000, "nonces": []})
    );
    assert_eq!(
        records[4].body["consumed"],
        json!({"amount": 120_000, "nonces": [nonce]})
    );
    for r in &records[1..4] {
        assert!(r.body.get("consumed").is_none(), "{}", r.body);
    }
    // each body is stored as its canonical text
    for (stored, r) in snap.receipts.iter().zip(&records) {
        assert_eq!(
            stored.body,
            intentplane::canonical::value_to_jcs(&r.body).unwrap()
        );
    }
    assert_eq!(verify_store(&snap, None), Ok(5));
    // the memory store keeps the same accounts
    let mem = decided_in_memory(&d);
    assert_eq!(verify_store(&mem.snapshot().unwrap(), None), Ok(2));
}

/// The same world on a memory store: an ALLOW and a DENY.
fn decided_in_memory(d: &Decided) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let gw = d.w.gateway_with(store.clone());
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("5.00")), &d.mandate).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, transfer(ATTACKER_IBAN, json!("5.00")), &d.mandate).decision,
        Outcome::Deny
    );
    let snap = store.snapshot().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(&d.mandate_id),
        Some(&Spent {
            amount: 500,
            calls: 1
        })
    );
    store
}

#[test]
fn tamper_delete_the_last_records_and_move_the_head_back() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    let snap = d.gw.store().snapshot().unwrap();
    let nonce = snap.accounts.nonces.iter().next().unwrap().clone();
    let op5 = snap.records()[4].body["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    drop(d.gw);
    tamper(
        &d.path,
        "DELETE FROM receipts WHERE seq > 3;
         UPDATE head SET seq = 3, hash = (SELECT hash FROM receipts WHERE seq = 3);",
    );
    assert_eq!(verify_file(&d.path), Ok(3), "the chain alone looks intact");
    let state = vec![
        ChainProblem::ExecutionWithoutReceipt {
            operation_hash: op5,
        },
        ChainProblem::BudgetMismatch {
            mandate: d.mandate_id.clone(),
            store_amount: 190_000,
            store_calls: 2,
            receipts_amount: 70_000,
            receipts_calls: 1,
        },
        ChainProblem::NonceWithoutReceipt { nonce },
    ];
    assert_eq!(audit_file(&d.path, None), Err(state.clone()));
    let mut with_checkpoint = vec![ChainProblem::CheckpointTruncated {
        checkpoint_seq: 5,
        last_seq: 3,
    }];
    with_checkpoint.extend(state);
    assert_eq!(audit_file(&d.path, Some(&cp)), Err(with_checkpoint));
}

#[test]
fn tamper_drop_trailing_denials_only_a_checkpoint_sees() {
    // records without effects (DENY, PENDING) leave nothing in the state:
    // cutting them off with the head is seen only against a checkpoint
    let (_dir, path) = store_file(4);
    let cp = checkpoint_at(&path, 4);
    tamper(
        &path,
        "DELETE FROM receipts WHERE seq = 4;
         UPDATE head SET seq = 3, hash = (SELECT hash FROM receipts WHERE seq = 3);",
    );
    assert_eq!(audit_file(&path, None), Ok(3));
    assert_eq!(
        audit_file(&path, Some(&cp)),
        Err(vec![ChainProblem::CheckpointTruncated {
            checkpoint_seq: 4,
            last_seq: 3
        }])
    );
}

#[test]
fn tamper_delete_every_record_and_the_head() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    let snap = d.gw.store().snapshot().unwrap();
    drop(d.gw);
    tamper(&d.path, "DELETE FROM receipts; DELETE FROM head;");
    assert_eq!(verify_file(&d.path), Ok(0), "an empty chain looks intact");
    let mut state: Vec<ChainProblem> = snap
        .accounts
        .executions
        .iter()
        .map(|op| ChainProblem::ExecutionWithoutReceipt {
            operation_hash: op.clone(),
        })
        .collect();
    state.push(ChainProblem::BudgetMismatch {
        mandate: d.mandate_id.clone(),
        store_amount: 190_000,
        store_calls: 2,
        receipts_amount: 0,
        receipts_calls: 0,
    });
    state.extend(
        snap.accounts
            .nonces
            .iter()
            .map(|n| ChainProblem::NonceWithoutReceipt { nonce: n.clone() }),
    );
    assert_eq!(state.len(), 4);
    assert_eq!(audit_file(&d.path, None), Err(state.clone()));
    let problems = audit_file(&d.path, Some(&cp)).unwrap_err();
    assert_eq!(
        problems[0],
        ChainProblem::CheckpointTruncated {
            checkpoint_seq: 5,
            last_seq: 0
        }
    );
    assert_eq!(problems[1..], state[..]);
}

#[test]
fn tamper_a_duplicated_key_in_front_of_an_executed_payment() {
    let d = decided();
    drop(d.gw);
    tamper(
        &d.path,
        r#"UPDATE receipts SET body = '{"decision":"DENY",' || substr(body, 2) WHERE seq = 1"#,
    );
    // SQL now reads DENY for the payment that executed...
    let conn = rusqlite::Connection::open(&d.path).unwrap();
    let read: String = conn
        .query_row(
            "SELECT json_extract(body, '$.decision') FROM receipts WHERE seq = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(read, "DENY");
    drop(conn);
    // ...while a reader keeping the last value hashes the original
    assert_eq!(verify_file(&d.path), Ok(5));
    let problems = audit_file(&d.path, None).unwrap_err();
    assert_eq!(
        problems,
        vec![ChainProblem::DuplicateKey {
            seq: 1,
            key: "decision".into()
        }]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 1 holds the key `decision` twice: readers may disagree on its value"
    );
}

#[test]
fn tamper_a_stored_body_that_is_not_canonical() {
    let (_dir, path) = store_file(4);
    tamper(
        &path,
        r#"UPDATE receipts SET body = replace(body, ',"', ', "') WHERE seq = 3;
           UPDATE receipts SET body = ' ' || body WHERE seq = 4;"#,
    );
    assert_eq!(verify_file(&path), Ok(4));
    let problems = audit_file(&path, None).unwrap_err();
    assert_eq!(
        problems,
        vec![
            ChainProblem::NotCanonical { seq: 3 },
            ChainProblem::NotCanonical { seq: 4 }
        ]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 3 is not stored in canonical form: its bytes are not the canonical json of its content"
    );
}

#[test]
fn tamper_a_body_stored_as_a_blob() {
    let (_dir, path) = store_file(3);
    tamper(
        &path,
        "UPDATE receipts SET body = CAST(body AS BLOB) WHERE seq = 2",
    );
    assert_eq!(verify_file(&path), Ok(3));
    assert_eq!(
        audit_file(&path, None),
        Err(vec![ChainProblem::NotText {
            seq: 2,
            storage: "blob".into()
        }])
    );
}

#[test]
fn tamper_the_state_to_run_a_payment_again() {
    // forgetting an execution and a nonce would let the operation and its
    // approval run again; lowering the budget would let the agent spend more
    let d = decided();
    let snap = d.gw.store().snapshot().unwrap();
    let records = snap.records();
    let op = |i: usize| {
        records[i].body["operation_hash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let nonce = snap.accounts.nonces.iter().next().unwrap().clone();
    drop(d.gw);
    tamper(
        &d.path,
        "DELETE FROM executions; DELETE FROM nonces; UPDATE budgets SET amount = 0;",
    );
    assert_eq!(verify_file(&d.path), Ok(5));
    let problems = audit_file(&d.path, None).unwrap_err();
    let mut expected = vec![
        ChainProblem::ReceiptWithoutExecution {
            seq: 1,
            operation_hash: op(0),
        },
        ChainProblem::ReceiptWithoutExecution {
            seq: 5,
            operation_hash: op(4),
        },
        ChainProblem::ReceiptNonceNotUsed { seq: 5, nonce },
        ChainProblem::BudgetMismatch {
            mandate: d.mandate_id.clone(),
            store_amount: 0,
            store_calls: 2,
            receipts_amount: 190_000,
            receipts_calls: 2,
        },
    ];
    expected.sort_by_key(ChainProblem::seq);
    assert_eq!(problems, expected);
}

#[test]
fn a_chain_that_extends_its_checkpoint_verifies() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    assert_eq!(audit_file(&d.path, Some(&cp)), Ok(5));
    drop(d.gw);
    // the gateway goes on, on the same file
    let gw =
        d.w.gateway_with(Arc::new(SqliteStore::open(&d.path).unwrap()));
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("50.00")), &d.mandate).decision,
        Outcome::Allow
    );
    assert_deny(
        &decide(&gw, transfer(ATTACKER_IBAN, json!("5.00")), &d.mandate),
        "provenance",
        "payee_iban",
    );
    assert_eq!(audit_file(&d.path, Some(&cp)), Ok(7));
    // an older checkpoint too
    assert_eq!(audit_file(&d.path, Some(&checkpoint_at(&d.path, 2))), Ok(7));
}

#[test]
fn tamper_rewrite_the_chain_and_head_consistently_after_a_checkpoint_is_seen() {
    // The attacker rewrites a DENY (record 4) and recomputes every hash
    // from there on, and the head: the chain and the state agree, only
    // the checkpoint taken at record 5 knows better.
    let (_dir, path) = store_file(6);
    let cp = checkpoint_at(&path, 5);
    let s = SqliteStore::open_existing(&path).unwrap();
    let mut records = s.receipts().unwrap();
    drop(s);
    records[3].body["reason"] = json!("nothing happened here");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for i in 3..records.len() {
        let prev = records[i - 1].hash.clone();
        let r = &mut records[i];
        r.prev_hash = prev;
        r.hash = intentplane::store::receipts::record_hash(r.seq, &r.prev_hash, &r.body).unwrap();
        conn.execute(
            "UPDATE receipts SET prev_hash = ?1, hash = ?2, body = ?3 WHERE seq = ?4",
            rusqlite::params![
                r.prev_hash,
                r.hash,
                intentplane::canonical::value_to_jcs(&r.body).unwrap(),
                r.seq as i64
            ],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE head SET hash = ?1",
        rusqlite::params![records[5].hash],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        audit_file(&path, None),
        Ok(6),
        "consistent without a checkpoint"
    );
    assert_eq!(
        audit_file(&path, Some(&cp)),
        Err(vec![ChainProblem::CheckpointMismatch {
            seq: 5,
            checkpoint_hash: cp.hash.clone(),
            hash: hash_of_record(&path, 5),
        }])
    );
}

/// An agent's number such as `1e17` is a double; its canonical text has no
/// exponent (`100000000000000000`), which a plain JSON read takes for an
/// integer beyond 2^53 with no exact canonical form: the record looked
/// edited (and a checkpoint was refused) though nobody touched it.
#[test]
fn a_receipt_holding_a_large_double_verifies() {
    let w = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let memory = Arc::new(MemoryStore::new());
    let stores: [Arc<dyn Store>; 2] = [memory, Arc::new(SqliteStore::open(&path).unwrap())];
    for store in stores {
        let gw = w.gateway_with(store.clone());
        let line = r#"{"action": "payment.transfer", "args": {"from_account": "emma-checking",
            "payee_iban": "DE44500105175407324931", "amount": 1e17, "currency": "EUR",
            "note": [1.0694069464974614e17, -1e17]}}"#;
        let proposal = intentplane::base::json::parse_strict(line).unwrap();
        assert_eq!(decide(&gw, proposal, &w.emma()).decision, Outcome::Deny);
        let records = store.receipts().unwrap();
        assert_eq!(verify_chain(&records, store.head().unwrap()), Ok(1));
        assert_eq!(verify_store(&store.snapshot().unwrap(), None), Ok(1));
    }
}

/// A bare proposal line may be 127 levels deep (`parse_strict`); its
/// receipt body would be 128 deep, one more than serde_json reads back, so
/// the receipt keeps such a proposal as its text (`proposal_text`) and the
/// record verifies.
#[test]
fn a_deep_proposal_leaves_a_receipt_that_verifies() {
    let w = TestWorld::new();
    let store = Arc::new(MemoryStore::new());
    let gw = w.gateway_with(store.clone());
    let line = format!("{}{}", "[".repeat(127), "]".repeat(127));
    let proposal = intentplane::base::json::parse_strict(&line).unwrap();
    let d = decide(&gw, proposal, &w.emma());
    assert_eq!(d.decision, Outcome::Deny);
    assert_eq!(verify_store(&store.snapshot().unwrap(), None), Ok(1));
}

#[test]
fn a_checkpoint_file_is_checked_with_the_trusted_key() {
    let (dir, path) = store_file(3);
    let cp = checkpoint_at(&path, 3);
    let file = dir.path().join("cp.json");
    cp.write(&file).unwrap();
    let key = ops_key().public();
    assert_eq!(Checkpoint::load(&file, &key).unwrap(), cp);
    // another key
    let other = SecretKey::from_seed(&[7; 32]).public();
    let err = Checkpoint::load(&file, &other).unwrap_err();
    assert!(matches!(err, CheckpointError::WrongKey { .. }), "{err:?}");
    assert_eq!(
        miette::Diagnostic::code(&err).unwrap().to_string(),
        "ipc::receipts::checkpoint_wrong_key"
    );
    // an edited checkpoint: moved back to record 2 with that record's hash
    let text = std::fs::read_to_string(&file).unwrap();
    let edited = text
        .replace("\"seq\": 3", "\"seq\": 2")
        .replace(&cp.hash, &hash_of_record(&path, 2));
    assert_ne!(edited, text);
    std::fs::write(&file, edited).unwrap();
    let err = Checkpoint::load(&file, &key).unwrap_err();
    assert!(
        matches!(err, CheckpointError::BadSignature { .. }),
        "{err:?}"
    );
    // not a checkpoint
    std::fs::write(&file, "{\"seq\": 3}").unwrap();
    let err = Checkpoint::load(&file, &key).unwrap_err();
    assert!(matches!(err, CheckpointError::Format { .. }), "{err:?}");
    let err = Checkpoint::load(&dir.path().join("missing.json"), &key).unwrap_err();
    assert!(matches!(err, CheckpointError::Io { .. }), "{err:?}");
}

// ------------------------------------------------------------ opening files

#[test]
fn opening_something_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "these are not the bytes of a database, just some text\n".repeat(100),
    )
    .unwrap();
    let err = SqliteStore::open(&text).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot open store `"), "{err}");
    assert!(err.to_string().contains("not an SQLite database"), "{err}");

    let foreign = dir.path().join("other.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let err = SqliteStore::open(&foreign).unwrap_err();
    assert!(
        err.to_string().contains("not an intentplane store"),
        "{err}"
    );
    // and it was not touched (still in rollback-journal mode)
    let mode: String = rusqlite::Connection::open(&foreign)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");

    let missing = dir.path().join("missing.db");
    let err = SqliteStore::open_existing(&missing).unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
    assert!(!missing.exists());

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let err = SqliteStore::open_existing(&empty).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
}

#[test]
fn a_store_reopens_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        tx(&s, |t| {
            t.spend("m", 42)?;
            t.use_nonce("n")?;
            t.append_receipt(&json!({"x": 1}))?;
            Ok(Value::Null)
        })
        .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    tx(&s, |t| {
        assert_eq!(t.spent("m")?.amount, 42);
        assert!(t.nonce_used("n")?);
        Ok(Value::Null)
    })
    .unwrap();
    append(&s, 2);
    assert_eq!(
        verify_chain(&s.receipts().unwrap(), s.head().unwrap()),
        Ok(3)
    );
}

// -------------------------------------------------------------- concurrency

const CAP: i64 = 500;

/// One attempt: spend 1 unit from `m` unless the cap is reached, with a
/// receipt. `Ok(true)` when it spent.
fn spend_one(s: &dyn Store, who: &str) -> bool {
    let r = tx(s, |t| {
        let spent = t.spent("m")?;
        if spent.amount >= CAP {
            return Err(StoreError::Aborted("budget exhausted".into()));
        }
        t.spend("m", 1)?;
        t.append_receipt(&json!({
            "decision": "ALLOW",
            "stage": "execution",
            "action": "payment.transfer",
            "by": who,
            "spent": spent.amount + 1,
        }))?;
        Ok(Value::Null)
    });
    match r {
        Ok(_) => true,
        Err(StoreError::Aborted(_)) => false,
        Err(e) => panic!("unexpected store error: {e}"),
    }
}

fn threads_spend(store: Arc<dyn Store>) {
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| spend_one(s.as_ref(), &format!("thread-{i}")))
                    .count()
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, CAP as usize);
    let spent = tx(store.as_ref(), |t| Ok(json!(t.spent("m")?))).unwrap();
    assert_eq!(spent, json!({"amount": CAP, "calls": CAP}));
    let records = store.receipts().unwrap();
    assert_eq!(
        verify_chain(&records, store.head().unwrap()),
        Ok(CAP as usize)
    );
    // the receipts saw the budget grow one by one, in chain order
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.body["spent"], json!(i + 1));
    }
}

#[test]
fn eight_threads_spend_exactly_the_cap_memory() {
    threads_spend(Arc::new(MemoryStore::new()));
}

#[test]
fn eight_threads_spend_exactly_the_cap_sqlite_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    threads_spend(Arc::new(sqlite_in(&dir)));
}

#[test]
fn eight_threads_spend_exactly_the_cap_sqlite_one_commit_each() {
    let dir = tempfile::tempdir().unwrap();
    let s = SqliteStore::open_with(
        dir.path().join("s.db"),
        SqliteOptions {
            max_batch: 1,
            ..SqliteOptions::default()
        },
        true,
    )
    .unwrap();
    threads_spend(Arc::new(s));
}

#[test]
fn eight_threads_with_two_store_handles_on_one_file() {
    // two handles (two connections, as two processes would have)
    let dir = tempfile::tempdir().unwrap();
    let a: Arc<dyn Store> = Arc::new(sqlite_in(&dir));
    let b: Arc<dyn Store> = Arc::new(sqlite_in(&dir));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| spend_one(s.as_ref(), &format!("thread-{i}")))
                    .count()
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, CAP as usize);
    assert_eq!(
        verify_chain(&a.receipts().unwrap(), a.head().unwrap()),
        Ok(CAP as usize)
    );
}

const WORKER_ENV: &str = "IPC_STORE_TEST_WORKER";

/// Not a test: one of the worker processes of
/// `four_processes_spend_exactly_the_cap`, which starts it with the store
/// in `IPC_STORE_TEST_WORKER`. Ignored, so no `cargo test` runs it by
/// accident; started any other way (`--ignored`, without the variable) it
/// fails, never passes without doing anything.
#[test]
#[ignore = "a worker process that four_processes_spend_exactly_the_cap starts"]
fn process_worker() {
    let Some(path) = std::env::var_os(WORKER_ENV) else {
        panic!(
            "process_worker is not a test: {WORKER_ENV} names no store; \
             four_processes_spend_exactly_the_cap starts it with one"
        );
    };
    // a file or a `postgres://` URL
    let s = intentplane::store::open(&PathBuf::from(path), true).unwrap();
    let me = format!("process-{}", std::process::id());
    let ok = (0..200).filter(|_| spend_one(s.as_ref(), &me)).count();
    println!("worker-ok={ok}");
}

#[test]
fn four_processes_spend_exactly_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    four_processes_spend(&path);
}

#[cfg(feature = "postgres")]
#[test]
fn four_processes_spend_exactly_the_cap_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    four_processes_spend(Path::new(&pg.url));
}

/// Four worker processes, 200 attempts each, on the store at `path` (a
/// file or a URL): exactly the cap is spent, and the chain verifies.
fn four_processes_spend(path: &Path) {
    let exe = std::env::current_exe().unwrap();
    // the worker's name in this binary: this module's path without the crate
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    let worker = format!("{module}::process_worker");
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    worker.as_str(),
                    "--exact",
                    "--ignored",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_ENV, path)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut total = 0;
    for child in children {
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "worker failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ok: usize = stdout
            .lines()
            .find_map(|l| l.split("worker-ok=").nth(1))
            .and_then(|n| n.split_whitespace().next()?.parse().ok())
            .unwrap_or_else(|| panic!("no count in worker output: {stdout}"));
        total += ok;
    }
    assert_eq!(total, CAP as usize);
    let s = intentplane::store::open(path, false).unwrap();
    let spent = tx(s.as_ref(), |t| Ok(json!(t.spent("m")?))).unwrap();
    assert_eq!(spent, json!({"amount": CAP, "calls": CAP}));
    assert_eq!(
        verify_chain(&s.receipts().unwrap(), s.head().unwrap()),
        Ok(CAP as usize)
    );
    // the receipts name the processes that spent
    let records = s.receipts().unwrap();
    let writers: std::collections::BTreeSet<_> =
        records.iter().map(|r| r.body["by"].to_string()).collect();
    assert!(writers.len() >= 3, "{writers:?}"); // 200 attempts each: at least three of them
}

// ---------------------------------------------------------------- the CLI

fn ipc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_verify_a_good_chain() {
    let (_dir, path) = store_file(5);
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", p]);
    assert_eq!(code, 0, "{stdout}");
    let head = SqliteStore::open_existing(&path)
        .unwrap()
        .head()
        .unwrap()
        .unwrap();
    assert_eq!(
        stdout,
        format!(
            "ok    {p}: 5 receipts verify\nhead  5 {}\n\
             state 3 executions, 1 budget, 2 nonces match the receipts\n",
            head.1
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "verify", p, "--format", "json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(true));
    assert_eq!(doc["count"], json!(5));
    assert_eq!(doc["head"], json!({"seq": 5, "hash": head.1}));
    assert_eq!(
        doc["accounts"],
        json!({"executions": 3, "budgets": 1, "nonces": 2})
    );
    assert_eq!(doc["checkpoint"], Value::Null);
    assert_eq!(doc["problems"], json!([]));
}

#[test]
fn cli_verify_names_every_problem() {
    let (_dir, path) = store_file(10);
    tamper(
        &path,
        r#"UPDATE receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 3;
           DELETE FROM receipts WHERE seq = 6;
           DELETE FROM receipts WHERE seq > 8;"#,
    );
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", p]);
    assert_eq!(code, 1, "{stdout}");
    // the chain's problems, then what the store's state shows: the
    // executions, spending and nonces of the deleted and edited ALLOWs
    assert_eq!(
        stdout,
        format!(
            "fail  {p}: 11 problems in 7 receipts\n  \
             record 3 was edited: its hash does not match its content\n  \
             record 3 cannot be accounted for: an executed ALLOW without `operation_hash`\n  \
             record 3 cannot be accounted for: an executed ALLOW that does not record what it \
             consumed (no `consumed`: written by a gateway older than this check?)\n  \
             record 6 is missing (deleted)\n  \
             chain truncated: the head marker names record 10 but the last record is 8\n  \
             operation `sha256:op-2` was executed but no receipt allows it (receipts deleted?)\n  \
             operation `sha256:op-5` was executed but no receipt allows it (receipts deleted?)\n  \
             operation `sha256:op-8` was executed but no receipt allows it (receipts deleted?)\n  \
             mandate `m-1`: the store records 2700 spent in 6 calls, the receipts add up to \
             1200 in 3 calls (minor units)\n  \
             approval nonce `n-2` is used up but no receipt consumed it (receipts deleted?)\n  \
             approval nonce `n-8` is used up but no receipt consumed it (receipts deleted?)\n"
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "verify", "--format", "json", p]);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(false));
    assert_eq!(
        doc["problems"][0],
        json!({"problem": "edited", "seq": 3,
               "message": "record 3 was edited: its hash does not match its content"})
    );
    assert_eq!(doc["problems"][1]["problem"], json!("unaccounted"));
    assert_eq!(doc["problems"][3]["problem"], json!("missing"));
    assert_eq!(doc["problems"][4]["problem"], json!("truncated"));
    assert_eq!(
        doc["problems"][5],
        json!({"problem": "execution_without_receipt", "operation_hash": "sha256:op-2",
               "message": "operation `sha256:op-2` was executed but no receipt allows it (receipts deleted?)"})
    );
    assert_eq!(
        doc["problems"][8],
        json!({"problem": "budget_mismatch", "mandate": "m-1",
               "store_amount": 2700, "store_calls": 6,
               "receipts_amount": 1200, "receipts_calls": 3,
               "message": "mandate `m-1`: the store records 2700 spent in 6 calls, the receipts add up to 1200 in 3 calls (minor units)"})
    );
}

#[test]
fn cli_show_the_receipts() {
    let (_dir, path) = store_file(4);
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "show", p, "--last", "2"]);
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["seq", "kind", "subject", "detail", "hash"]
    );
    assert!(
        lines[1].starts_with("  3  ALLOW  payment.transfer  execution  "),
        "{stdout}"
    );
    assert!(lines[2].starts_with("  4  DENY   "), "{stdout}");
    assert_eq!(lines[3], "2 receipts of 4; the chain verifies");

    let (code, stdout, _) = ipc(&["receipts", "show", p, "--format", "json"]);
    assert_eq!(code, 0);
    let records: Vec<intentplane::store::ReceiptRecord> = serde_json::from_str(&stdout).unwrap();
    let s = SqliteStore::open_existing(&path).unwrap();
    assert_eq!(records, s.receipts().unwrap());
}

#[test]
fn cli_on_a_file_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.txt");
    std::fs::write(&path, "hello, not a database at all; ".repeat(50)).unwrap();
    let p = path.to_str().unwrap();
    for cmd in ["verify", "show"] {
        let (code, stdout, stderr) = ipc(&["receipts", cmd, p]);
        assert_eq!(code, 1);
        assert_eq!(stdout, "");
        assert!(stderr.contains("cannot open store"), "{stderr}");
        assert!(stderr.contains("ipc::store::open"), "{stderr}");
    }
    let (code, stdout, _) = ipc(&[
        "receipts",
        "verify",
        "--format",
        "json",
        "/nonexistent/store.db",
    ]);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(false));
    assert_eq!(doc["error"]["code"], json!("ipc::store::open"));
    assert!(!Path::new("/nonexistent/store.db").exists());
}

// --------------------------------------------------------- batched commits

#[test]
fn a_batch_commits_each_body_on_its_own() {
    each_store(|s| {
        let mut first = |t: &mut dyn Tx| -> Result<Value, StoreError> {
            t.spend("m", 10)?;
            t.revoked("tok")?; // read before the failing body revokes it
            t.append_receipt(&json!({"n": 1}))?;
            Ok(json!("first"))
        };
        let mut failing = |t: &mut dyn Tx| -> Result<Value, StoreError> {
            t.spend("m", 1000)?;
            t.revoke("tok")?;
            t.use_nonce("n-1")?;
            t.append_receipt(&json!({"n": "lost"}))?;
            Err(StoreError::Aborted("over budget".into()))
        };
        let mut third = |t: &mut dyn Tx| -> Result<Value, StoreError> {
            // sees the first body's spending, not the failed one's, and
            // no revocation
            let spent = t.spent("m")?;
            t.use_nonce("n-1")?;
            t.append_receipt(&json!({"n": 3}))?;
            Ok(json!([spent.amount, t.revoked("tok")?]))
        };
        let results = s.transactions(&mut [&mut first, &mut failing, &mut third]);
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].as_ref().unwrap(), &json!("first"));
        assert!(matches!(results[1], Err(StoreError::Aborted(_))));
        assert_eq!(results[2].as_ref().unwrap(), &json!([10, false]));
        let records = s.receipts().unwrap();
        assert_eq!(verify_chain(&records, s.head().unwrap()), Ok(2));
        assert_eq!(records[1].body, json!({"n": 3}));
        assert!(s.transactions(&mut []).is_empty());
    });
}

#[test]
fn eight_threads_of_batches_spend_exactly_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    threads_of_batches_spend(Arc::new(sqlite_in(&dir)));
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_of_batches_spend_exactly_the_cap_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    threads_of_batches_spend(Arc::new(PgStore::open(&pg.url).unwrap()));
}

fn threads_of_batches_spend(store: Arc<dyn Store>) {
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut ok = 0;
                for _ in 0..10 {
                    let mut bodies: Vec<_> = (0..10)
                        .map(|_| {
                            move |t: &mut dyn Tx| -> Result<Value, StoreError> {
                                let spent = t.spent("m")?;
                                if spent.amount >= CAP {
                                    return Err(StoreError::Aborted("budget exhausted".into()));
                                }
                                t.spend("m", 1)?;
                                t.append_receipt(&json!({"by": i, "spent": spent.amount + 1}))?;
                                Ok(Value::Null)
                            }
                        })
                        .collect();
                    let mut refs: Vec<&mut TxFnRef> =
                        bodies.iter_mut().map(|b| b as &mut TxFnRef).collect();
                    for r in s.transactions(&mut refs) {
                        match r {
                            Ok(_) => ok += 1,
                            Err(StoreError::Aborted(_)) => {}
                            Err(e) => panic!("unexpected store error: {e}"),
                        }
                    }
                }
                ok
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, CAP as usize);
    let records = store.receipts().unwrap();
    assert_eq!(
        verify_chain(&records, store.head().unwrap()),
        Ok(CAP as usize)
    );
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.body["spent"], json!(i + 1));
    }
}

type TxFnRef<'a> = intentplane::store::TxFn<'a>;

// ------------------------------------------------------------- PostgreSQL
//
// The contract tests above run on PostgreSQL through `each_store`; these
// are the PostgreSQL halves of the concurrency, opening, tampering and CLI
// tests (each skips loudly without `IPC_TEST_PG`, fails under `CI`).

#[cfg(feature = "postgres")]
fn pg_store(pg: &common::pg::Schema) -> Arc<dyn Store> {
    Arc::new(PgStore::open(&pg.url).unwrap())
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_spend_exactly_the_cap_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    threads_spend(pg_store(&pg));
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_with_two_store_handles_on_one_database() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // two handles: two connections, as two instances would have
    let a = pg_store(&pg);
    let b = pg_store(&pg);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| spend_one(s.as_ref(), &format!("thread-{i}")))
                    .count()
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, CAP as usize);
    assert_eq!(
        verify_chain(&b.receipts().unwrap(), a.head().unwrap()),
        Ok(CAP as usize)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_gateway_on_postgres_records_what_it_consumed_and_verifies() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let store = pg_store(&pg);
    let gw = w.gateway_with(store.clone());
    let m = w.emma();
    let paid = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(paid.decision, Outcome::Allow, "{paid:#?}");
    assert!(decide(&gw, transfer(LANDLORD, json!("700.00")), &m).replayed);
    let big = transfer(LANDLORD, json!("1200.00"));
    let pending = decide(&gw, big.clone(), &m);
    assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
    let op = pending.operation_hash.clone().unwrap();
    let approval = w.approve("emma", &op);
    let approved = gw
        .decide(&input(big.clone(), &m, vec![approval.clone()]))
        .unwrap();
    assert_eq!(approved.decision, Outcome::Allow, "{approved:#?}");
    // the approval is single use, also from another instance
    let other = w.gateway_with(pg_store(&pg));
    let again = other.decide(&input(big, &m, vec![approval])).unwrap();
    assert!(
        again.replayed || again.decision != Outcome::Allow,
        "{again:#?}"
    );
    let snap = store.snapshot().unwrap();
    let mandate_id = m["mandate"]["id"].as_str().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(mandate_id),
        Some(&Spent {
            amount: 190_000,
            calls: 2
        })
    );
    assert_eq!(snap.accounts.executions.len(), 2);
    assert_eq!(snap.accounts.nonces.len(), 1);
    assert_eq!(verify_store(&snap, None), Ok(5));
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_reopens_with_its_data() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    {
        let s = PgStore::open(&pg.url).unwrap();
        append(&s, 4);
    }
    let s = PgStore::open_existing(&pg.url).unwrap();
    append(&s, 2);
    assert_eq!(verify_store(&s.snapshot().unwrap(), None), Ok(6));
    // the meta table: the application marker and the schema version
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let rows = c
        .query(
            &format!("SELECT key, value FROM {}.ipc_meta ORDER BY key", pg.name),
            &[],
        )
        .unwrap();
    let meta: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        meta,
        vec![
            ("application".to_string(), "intentplane".to_string()),
            ("schema_version".to_string(), "1".to_string())
        ]
    );
}

#[cfg(feature = "postgres")]
#[test]
fn opening_a_postgres_schema_that_is_not_a_store() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // an empty schema is no store for `ipc receipts`, and is left empty
    let err = PgStore::open_existing(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not an intentplane store"),
        "{err}"
    );
    // another application's table with one of the store's names
    pg.sql("CREATE TABLE ipc_receipts (id INT); INSERT INTO ipc_receipts VALUES (7);");
    let err = PgStore::open(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_eq!(
        miette::Diagnostic::code(&err).unwrap().to_string(),
        "ipc::store::foreign"
    );
    // never modified: no table was added
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&pg.name],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    // another application's meta table
    pg.sql(
        "DROP TABLE ipc_receipts; CREATE TABLE ipc_meta (key TEXT, value TEXT);
         INSERT INTO ipc_meta VALUES ('application', 'someone-else');",
    );
    let err = PgStore::open(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains("another application"), "{err}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_of_a_newer_version_is_refused_untouched() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 2);
    pg.sql("UPDATE ipc_meta SET value = '2' WHERE key = 'schema_version'");
    for create in [true, false] {
        let err = PgStore::open_with(&pg.url, Default::default(), create).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NewerSchema {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            miette::Diagnostic::code(&err).unwrap().to_string(),
            "ipc::store::newer_schema"
        );
    }
    pg.sql("UPDATE ipc_meta SET value = '1' WHERE key = 'schema_version'");
    assert_eq!(
        verify_store(&PgStore::open(&pg.url).unwrap().snapshot().unwrap(), None),
        Ok(2)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_url_with_a_password_is_refused() {
    // no server needed: refused before connecting
    for url in [
        "postgres://alice:s3cret@db.example:5432/ipc",
        "postgresql://alice:s3cret@db.example/ipc?sslmode=disable",
        "postgres://alice@db.example/ipc?password=s3cret",
    ] {
        let err = PgStore::open(url).unwrap_err();
        assert!(matches!(err, StoreError::PasswordInUrl { .. }), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert_eq!(
            miette::Diagnostic::code(&err).unwrap().to_string(),
            "ipc::store::password_in_url"
        );
    }
    assert_eq!(
        intentplane::store::postgres::redact("postgres://alice:s3cret@db:5432/x"),
        "postgres://alice:***@db:5432/x"
    );
    assert_eq!(
        intentplane::store::postgres::redact("postgres://alice@db/x?password=s3cret&host=/run"),
        "postgres://alice@db/x?password=***&host=/run"
    );
    // and on the command line, before anything else happens
    let (code, _, stderr) = ipc(&[
        "token",
        "revoke",
        "--store",
        "postgres://alice:s3cret@127.0.0.1:1/ipc",
        "tok",
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("holds a password"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[cfg(feature = "postgres")]
#[test]
fn tamper_a_postgres_store_and_verify_names_it() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 10);
    pg.sql(
        r#"UPDATE ipc_receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 3;
           DELETE FROM ipc_receipts WHERE seq = 6;
           DELETE FROM ipc_receipts WHERE seq > 8;"#,
    );
    let problems = verify_store(
        &PgStore::open_existing(&pg.url).unwrap().snapshot().unwrap(),
        None,
    )
    .unwrap_err();
    assert!(
        problems.contains(&ChainProblem::Edited { seq: 3 }),
        "{problems:?}"
    );
    assert!(
        problems.contains(&ChainProblem::Missing { from: 6, to: 6 }),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, ChainProblem::Truncated { .. })),
        "{problems:?}"
    );
    // the CLI says the same, in the same words as for a file
    let (code, stdout, _) = ipc(&["receipts", "verify", &pg.url]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.starts_with(&format!("fail  {}: 11 problems in 7 receipts\n", pg.url)),
        "{stdout}"
    );
    assert!(stdout.contains("record 6 is missing (deleted)"), "{stdout}");
}

#[cfg(feature = "postgres")]
#[test]
fn cli_verify_show_and_revoke_on_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let s = PgStore::open(&pg.url).unwrap();
    append(&s, 5);
    let head = s.head().unwrap().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", &pg.url]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "ok    {}: 5 receipts verify\nhead  5 {}\n\
             state 3 executions, 1 budget, 2 nonces match the receipts\n",
            pg.url, head.1
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "show", &pg.url, "--format", "json"]);
    assert_eq!(code, 0, "{stdout}");
    let records: Vec<intentplane::store::ReceiptRecord> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(records, s.receipts().unwrap());
    let (code, stdout, stderr) = ipc(&["token", "revoke", "--store", &pg.url, "tok-9"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        tx(&s, |t| Ok(json!(t.revoked("tok-9")?)))
            .unwrap()
            .as_bool()
            .unwrap()
    );
    // `ipc receipts` never creates a store
    let Some(empty) = common::pg::fresh() else {
        return;
    };
    let (code, _, stderr) = ipc(&["receipts", "verify", &empty.url]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not an intentplane store"), "{stderr}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_reconnects_after_its_connection_is_killed() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // a name of its own, to find this store's server process
    let url = format!("{}&application_name={}", pg.url, pg.name);
    let s = PgStore::open(&url).unwrap();
    append(&s, 2);
    let mut admin = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let killed: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1) t",
            &[&pg.name],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    // the dead connection is found at `BEGIN`, before the body runs: the
    // store connects again and the transaction goes through
    let seq = tx(&s, |t| {
        t.spend("m-1", 1)?;
        t.append_receipt(&json!({"decision": "DENY", "after": "reconnect"}))
            .map(|r| json!(r.seq))
    })
    .unwrap();
    assert_eq!(seq, json!(3));
    let snap = s.snapshot().unwrap();
    assert_eq!(snap.receipts.len(), 3);
    // one spend from `append`, one after the reconnection: none lost, none twice
    assert_eq!(snap.accounts.budgets["m-1"].calls, 2);
}

#[cfg(feature = "postgres")]
#[test]
fn a_world_naming_a_postgres_store_runs_on_it() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    // `store = URL` in the world, no `--store`: the URL is taken as written
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let world = w.dir.path().join("world-pg.toml");
    std::fs::write(&world, format!("store = {:?}\n{text}", pg.url)).unwrap();
    let mandate = w.dir.path().join("m.json");
    std::fs::write(&mandate, w.emma().to_string()).unwrap();
    let input = w.dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n{}\n",
            transfer(LANDLORD, json!("12.00")),
            transfer(ATTACKER_IBAN, json!("12.00"))
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["run", "--bundle", w.bundle_path.to_str().unwrap()])
        .args(["--world", world.to_str().unwrap()])
        .args(["--mandate", mandate.to_str().unwrap()])
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = PgStore::open_existing(&pg.url).unwrap();
    let snap = s.snapshot().unwrap();
    assert_eq!(verify_store(&snap, None), Ok(2));
    assert_eq!(snap.records()[0].body["decision"], json!("ALLOW"));
    assert_eq!(snap.records()[1].body["decision"], json!("DENY"));
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_password_comes_from_the_file_named_in_the_environment() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // an unreadable file: a typed error naming the variable, no connection
    let missing = dir.path().join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["token", "revoke", "--store", &pg.url, "tok"])
        .env("IPC_PG_PASSWORD_FILE", &missing)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IPC_PG_PASSWORD_FILE"), "{stderr}");
    assert!(stderr.contains("cannot read the password file"), "{stderr}");
    // a readable one is used (the test server trusts local connections,
    // so any password is accepted)
    let file = dir.path().join("pw");
    std::fs::write(&file, "not-on-the-command-line\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["token", "revoke", "--store", &pg.url, "tok"])
        .env("IPC_PG_PASSWORD_FILE", &file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = PgStore::open_existing(&pg.url).unwrap();
    assert_eq!(
        tx(&s, |t| Ok(json!(t.revoked("tok")?))).unwrap(),
        json!(true)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn tamper_a_postgres_store_with_other_column_types_and_nulls() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 4);
    pg.sql(
        "ALTER TABLE ipc_receipts ALTER COLUMN body TYPE bytea USING convert_to(body, 'UTF8');
         ALTER TABLE ipc_receipts ALTER COLUMN prev_hash DROP NOT NULL;
         UPDATE ipc_receipts SET prev_hash = NULL WHERE seq = 3;
         ALTER TABLE ipc_budgets ALTER COLUMN calls DROP NOT NULL;
         UPDATE ipc_budgets SET calls = NULL;",
    );
    // read and judged, never a panic
    let s = PgStore::open_existing(&pg.url).unwrap();
    let problems = verify_store(&s.snapshot().unwrap(), None).unwrap_err();
    assert!(
        problems.contains(&ChainProblem::NotText {
            seq: 1,
            storage: "bytea".into()
        }),
        "{problems:?}"
    );
    assert!(problems.len() >= 5, "{problems:?}");
    // a decision-time read of the tampered budget is an error, not a panic
    let err = tx(&s, |t| t.spent("m-1").map(|sp| json!(sp))).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
}

#[cfg(feature = "postgres")]
/// Makes every write to `table` in the schema fail with SQLSTATE `code`
/// (40001 serialization failure, 40P01 deadlock) for its first `times`
/// rows, counted by a sequence (which a rollback does not undo).
fn inject_failures(pg: &common::pg::Schema, table: &str, code: &str, times: i64) {
    pg.sql(&format!(
        "CREATE SEQUENCE {table}_fails;
         CREATE FUNCTION {table}_fail() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('{schema}.{table}_fails') <= {times} THEN
             RAISE EXCEPTION 'injected' USING ERRCODE = '{code}';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER {table}_fail BEFORE INSERT OR UPDATE ON {table}
           FOR EACH ROW EXECUTE FUNCTION {table}_fail();",
        schema = pg.name
    ));
}

#[cfg(feature = "postgres")]
/// How many writes the trigger of [`inject_failures`] saw.
fn failures_seen(pg: &common::pg::Schema, table: &str) -> i64 {
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    c.query_one(
        &format!("SELECT last_value FROM {}.{table}_fails", pg.name),
        &[],
    )
    .unwrap()
    .get(0)
}

#[cfg(feature = "postgres")]
/// Issue #14, item 1: a serialization failure or a deadlock, wherever in
/// a decision's writes the server raises it (the budget, the execution,
/// the receipt, the chain's head), is retried from the start and the
/// decision is taken once, on the attempt that commits: never a DENY
/// made of the error, never a double spend or a second execution.
#[test]
fn a_serialization_failure_is_retried_never_a_wrong_decision_postgres() {
    for (table, code) in [
        ("ipc_budgets", "40001"),
        ("ipc_executions", "40P01"),
        ("ipc_head", "40001"),
        ("ipc_receipts", "40P01"),
    ] {
        let Some(pg) = common::pg::fresh() else {
            return;
        };
        let store = pg_store(&pg);
        inject_failures(&pg, table, code, 3);
        let w = TestWorld::new();
        let gw = w.gateway_with(store.clone());
        let m = w.emma();
        let d = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
        assert_eq!(d.decision, Outcome::Allow, "{table}: {d:#?}");
        assert!(!d.replayed, "{table}");
        assert!(failures_seen(&pg, table) > 3, "{table}: never retried");
        let snap = store.snapshot().unwrap();
        let mandate_id = m["mandate"]["id"].as_str().unwrap();
        assert_eq!(
            snap.accounts.budgets.get(mandate_id),
            Some(&Spent {
                amount: 70_000,
                calls: 1
            }),
            "{table}"
        );
        assert_eq!(snap.accounts.executions.len(), 1, "{table}");
        assert_eq!(verify_store(&snap, None), Ok(1), "{table}");
    }
}

#[cfg(feature = "postgres")]
/// A transaction that keeps failing is given up after the retries: never
/// an ALLOW, and nothing of it committed. Since issue #21 (item 5) that
/// decision is a DENY (stage receipt) whose receipt is the only write of a
/// fresh transaction, instead of an error for its whole batch.
#[test]
fn serialization_failures_without_end_decide_nothing_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let store = pg_store(&pg);
    inject_failures(&pg, "ipc_executions", "40001", i64::MAX);
    let w = TestWorld::new();
    let gw = w.gateway_with(store.clone());
    let d = gw.decide(&input(
        transfer(LANDLORD, json!("700.00")),
        &w.emma(),
        vec![],
    ));
    let d = d.unwrap();
    assert_deny(&d, "receipt", "the store refused this decision");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.receipts.len(), 1, "the DENY's receipt alone");
    assert!(snap.accounts.executions.is_empty());
    assert!(snap.accounts.budgets.is_empty());
    assert_eq!(verify_store(&snap, None), Ok(1));
}

/// Opens a store again.
type Opener = Box<dyn Fn() -> Arc<dyn Store>>;

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
