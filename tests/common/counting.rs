//! A SQLite store that counts its transactions (each one durable commit):
//! what the group-commit tests read.

use intentplane::store::sqlite::SqliteStore;
use intentplane::store::{ReceiptRange, ReceiptRecord, Relink, Snapshot, Store, StoreError, TxFn};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

pub struct Counting {
    pub inner: SqliteStore,
    pub commits: AtomicUsize,
}

impl Counting {
    pub fn open(path: &Path) -> Counting {
        Counting {
            inner: SqliteStore::open(path).unwrap(),
            commits: AtomicUsize::new(0),
        }
    }

    pub fn commits(&self) -> usize {
        self.commits.load(Ordering::SeqCst)
    }
}

impl Store for Counting {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.transaction(f)
    }
    fn transactions(&self, fs: &mut [&mut TxFn<'_>]) -> Vec<Result<Value, StoreError>> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.transactions(fs)
    }
    fn transaction_linked(&self, f: &mut TxFn<'_>) -> Result<(Value, Vec<Relink>), StoreError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.transaction_linked(f)
    }
    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.inner.receipts()
    }
    fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.inner.receipts_range(range)
    }
    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.inner.head()
    }
    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        self.inner.snapshot()
    }
}
