//! Helpers of the store tests: a fresh store of each kind, transactions,
//! receipts appended, SQLite files to tamper with, spending against a cap,
//! the `ipc` command.

use crate::common;

use intentplane::store::memory::MemoryStore;
#[cfg(feature = "postgres")]
use intentplane::store::postgres::PgStore;
use intentplane::store::sqlite::{SqliteOptions, SqliteStore};
use intentplane::store::{ChainProblem, Store, StoreError, Tx, verify_chain};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

pub(crate) fn sqlite_in(dir: &tempfile::TempDir) -> SqliteStore {
    SqliteStore::open(dir.path().join("store.db")).unwrap()
}

/// Runs `check` against a fresh store of each kind.
pub(crate) fn each_store(check: impl Fn(&dyn Store)) {
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

pub(crate) fn tx(
    store: &dyn Store,
    mut f: impl FnMut(&mut dyn Tx) -> Result<Value, StoreError>,
) -> Result<Value, StoreError> {
    store.transaction(&mut f)
}

/// `n` more receipts in the store (`common::chain`).
pub(crate) fn append(s: &dyn Store, n: u64) {
    common::chain::append_receipts(s, n);
}

/// A SQLite store with `n` receipts, then closed.
pub(crate) fn store_file(n: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.db");
    let s = SqliteStore::open(&path).unwrap();
    append(&s, n);
    drop(s);
    (dir, path)
}

pub(crate) fn tamper(path: &Path, sql: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(sql).unwrap();
}

pub(crate) fn verify_file(path: &Path) -> Result<usize, Vec<ChainProblem>> {
    let s = SqliteStore::open_existing(path).unwrap();
    verify_chain(&s.receipts().unwrap(), s.head().unwrap())
}

pub(crate) const CAP: i64 = 500;

/// One attempt: spend 1 unit from `m` unless the cap is reached, with a
/// receipt. `Ok(true)` when it spent.
pub(crate) fn spend_one(s: &dyn Store, who: &str) -> bool {
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

pub(crate) fn threads_spend(store: Arc<dyn Store>) {
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

pub(crate) fn ipc(args: &[&str]) -> (i32, String, String) {
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

pub(crate) type TxFnRef<'a> = intentplane::store::TxFn<'a>;

#[cfg(feature = "postgres")]
pub(crate) fn pg_store(pg: &common::pg::Schema) -> Arc<dyn Store> {
    Arc::new(PgStore::open(&pg.url).unwrap())
}
