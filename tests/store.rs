//! The store contract, run against both implementations, plus the receipt
//! chain under tampering, and concurrency across threads and processes.

use intentplane::store::memory::MemoryStore;
use intentplane::store::sqlite::{SqliteOptions, SqliteStore};
use intentplane::store::{ChainProblem, Store, StoreError, Tx, verify_chain};
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

fn append(s: &dyn Store, n: u64) {
    for i in 0..n {
        tx(s, |t| {
            t.append_receipt(&json!({
                "decision": if i % 3 == 0 { "DENY" } else { "ALLOW" },
                "stage": "execution",
                "action": "payment.transfer",
                "i": i,
            }))
            .map(|r| json!(r.seq))
        })
        .unwrap();
    }
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

/// Not a test on its own: when the environment names a store file, it is
/// one of the worker processes of `four_processes_spend_exactly_the_cap`.
#[test]
fn process_worker() {
    let Some(path) = std::env::var_os(WORKER_ENV) else {
        return;
    };
    let s = SqliteStore::open(PathBuf::from(path)).unwrap();
    let me = format!("process-{}", std::process::id());
    let ok = (0..200).filter(|_| spend_one(&s, &me)).count();
    println!("worker-ok={ok}");
}

#[test]
fn four_processes_spend_exactly_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args([
                    "process_worker",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(WORKER_ENV, &path)
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
    let s = SqliteStore::open_existing(&path).unwrap();
    let spent = tx(&s, |t| Ok(json!(t.spent("m")?))).unwrap();
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
        format!("ok    {p}: 5 receipts verify\nhead  5 {}\n", head.1)
    );
    let (code, stdout, _) = ipc(&["receipts", "verify", p, "--format", "json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(true));
    assert_eq!(doc["count"], json!(5));
    assert_eq!(doc["head"], json!({"seq": 5, "hash": head.1}));
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
    assert_eq!(
        stdout,
        format!(
            "fail  {p}: 3 problems in 7 receipts\n  \
             record 3 was edited: its hash does not match its content\n  \
             record 6 is missing (deleted)\n  \
             chain truncated: the head marker names record 10 but the last record is 8\n"
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
    assert_eq!(doc["problems"][1]["problem"], json!("missing"));
    assert_eq!(doc["problems"][2]["problem"], json!("truncated"));
}

#[test]
fn cli_show_the_receipts() {
    let (_dir, path) = store_file(4);
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "show", p, "--last", "2"]);
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0], "seq  decision  action            stage      hash");
    assert!(
        lines[1].starts_with("  3  ALLOW     payment.transfer  execution  "),
        "{stdout}"
    );
    assert!(lines[2].starts_with("  4  DENY      "), "{stdout}");
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
            t.append_receipt(&json!({"n": 1}))?;
            Ok(json!("first"))
        };
        let mut failing = |t: &mut dyn Tx| -> Result<Value, StoreError> {
            t.spend("m", 1000)?;
            t.use_nonce("n-1")?;
            t.append_receipt(&json!({"n": "lost"}))?;
            Err(StoreError::Aborted("over budget".into()))
        };
        let mut third = |t: &mut dyn Tx| -> Result<Value, StoreError> {
            // sees the first body's spending, not the failed one's
            let spent = t.spent("m")?;
            t.use_nonce("n-1")?;
            t.append_receipt(&json!({"n": 3}))?;
            Ok(json!(spent.amount))
        };
        let results = s.transactions(&mut [&mut first, &mut failing, &mut third]);
        assert_eq!(results.len(), 3);
        assert_eq!(results[0].as_ref().unwrap(), &json!("first"));
        assert!(matches!(results[1], Err(StoreError::Aborted(_))));
        assert_eq!(results[2].as_ref().unwrap(), &json!(10));
        let records = s.receipts().unwrap();
        assert_eq!(verify_chain(&records, s.head().unwrap()), Ok(2));
        assert_eq!(records[1].body, json!({"n": 3}));
        assert!(s.transactions(&mut []).is_empty());
    });
}

#[test]
fn eight_threads_of_batches_spend_exactly_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(sqlite_in(&dir));
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
