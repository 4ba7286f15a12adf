//! A SQLite store that counts its transactions (each one durable commit):
//! what the group-commit tests read.

use intentplane::store::sqlite::SqliteStore;
use intentplane::store::{Relink, Store, StoreError, TxFn};
use serde_json::Value;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

/// In an `impl Store` of a wrapper with an `inner` store: the reads of
/// the chain and of the state (`receipts`, `receipts_range`, `head`,
/// `snapshot`) as `inner` answers them.
macro_rules! reads_from_inner {
    () => {
        fn receipts(
            &self,
        ) -> Result<Vec<intentplane::store::ReceiptRecord>, intentplane::store::StoreError> {
            self.inner.receipts()
        }
        fn receipts_range(
            &self,
            range: intentplane::store::ReceiptRange,
        ) -> Result<Vec<intentplane::store::ReceiptRecord>, intentplane::store::StoreError> {
            self.inner.receipts_range(range)
        }
        fn head(&self) -> Result<Option<(u64, String)>, intentplane::store::StoreError> {
            self.inner.head()
        }
        fn snapshot(&self) -> Result<intentplane::store::Snapshot, intentplane::store::StoreError> {
            self.inner.snapshot()
        }
        fn read_only(
            &self,
            f: &mut intentplane::store::TxFn<'_>,
        ) -> Result<serde_json::Value, intentplane::store::StoreError> {
            self.inner.read_only(f)
        }
    };
}
#[allow(unused_imports)]
pub(crate) use reads_from_inner;

pub struct Counting {
    pub inner: SqliteStore,
    /// Synced commits.
    pub commits: AtomicUsize,
    /// Commits written, not synced (`Store::transaction_written`).
    pub written: AtomicUsize,
}

impl Counting {
    pub fn open(path: &Path) -> Counting {
        Counting {
            inner: SqliteStore::open(path).unwrap(),
            commits: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
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
    fn transaction_written(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.written.fetch_add(1, Ordering::SeqCst);
        self.inner.transaction_written(f)
    }
    fn transaction_linked(&self, f: &mut TxFn<'_>) -> Result<(Value, Vec<Relink>), StoreError> {
        self.commits.fetch_add(1, Ordering::SeqCst);
        self.inner.transaction_linked(f)
    }
    reads_from_inner!();
}
