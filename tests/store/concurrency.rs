//! The store under concurrency: threads and processes spending against one
//! cap, with and without batched commits, on SQLite (and PostgreSQL for
//! the processes and batches).

#[cfg(feature = "postgres")]
use crate::common;

use crate::contract_kit::*;
use intentplane::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
use intentplane::store::postgres::PgStore;
use intentplane::store::sqlite::{SqliteOptions, SqliteStore};
use intentplane::store::{Store, StoreError, Tx, verify_chain};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

// -------------------------------------------------------------- concurrency

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

pub(crate) const WORKER_ENV: &str = "IPC_STORE_TEST_WORKER";

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
pub(crate) fn four_processes_spend(path: &Path) {
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

pub(crate) fn threads_of_batches_spend(store: Arc<dyn Store>) {
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
