//! Where the gateway's state lives: budgets, used nonces (approvals, token
//! ids), executed operations (idempotency), revocations, the simulated
//! systems of record the executors change, and the hash-chained receipts.
//!
//! Everything goes through [`Store::transaction`]: the gateway re-checks,
//! executes, updates the budget, consumes the nonce and appends the receipt
//! inside one transaction, so that two gateways (threads or processes) can
//! never both spend the last euro or pay the same invoice twice, and a
//! crash leaves either all of it or none of it.
//!
//! Implementations: [`memory::MemoryStore`] (tests),
//! [`sqlite::SqliteStore`] (the embedded default: one file, WAL,
//! `BEGIN IMMEDIATE`) and [`postgres::PgStore`] (several gateway
//! instances on one database). [`open`] picks one from a location: a
//! `postgres://` URL or a file path.

pub mod audit;
pub mod checkpoint;
pub mod checkpoint_set;
pub mod export;
pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
/// Without the `postgres` feature: what names a PostgreSQL store (a world
/// or a config may), no client; opening one is a [`StoreError::FeatureOff`].
#[cfg(not(feature = "postgres"))]
#[path = "postgres/names.rs"]
pub mod postgres;
pub mod receipts;
pub mod recorded;
mod rows;
pub mod sqlite;
pub mod unrouted;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::Jcs;
pub use audit::{Accounts, Snapshot, StoredReceipt, verify_store};
pub use checkpoint::{Checkpoint, CheckpointError};
pub use export::Rows;
pub use receipts::{ChainLink, ChainProblem, Receipt, ReceiptRecord, verify_chain};

/// The key an executed read is recorded under (in the store's executed
/// operations, its outcome, and the receipts' `execution`): the operation
/// hash and the mandate's call count after it, which every execution
/// under the mandate raises by one, so no two executions share it. (A
/// write is recorded under its operation hash.)
pub fn read_execution(operation_hash: &str, call: u64) -> String {
    format!("{operation_hash}{READ_MARK}{call}")
}

/// The operation hash of a key [`read_execution`] made; `None` for an
/// operation hash (a write's key).
pub fn read_operation(execution: &str) -> Option<&str> {
    let (op, n) = execution.rsplit_once(READ_MARK)?;
    (!op.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then_some(op)
}

const READ_MARK: &str = "/read/";

/// Cumulative spending of one mandate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// Minor units.
    pub amount: i64,
    pub calls: u64,
}

/// The operations available inside a transaction. Every method sees the
/// writes made earlier in the same transaction.
pub trait Tx {
    fn spent(&mut self, mandate_id: &str) -> Result<Spent, StoreError>;
    /// Adds to the mandate's cumulative amount and call count.
    fn spend(&mut self, mandate_id: &str, amount: i64) -> Result<Spent, StoreError>;

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError>;
    /// Marks a nonce used; `Err(StoreError::Conflict)` if it already was.
    fn use_nonce(&mut self, nonce: &str) -> Result<(), StoreError>;

    /// The result recorded for an executed operation, if any.
    fn executed(&mut self, op_hash: &str) -> Result<Option<Value>, StoreError>;
    fn record_execution(&mut self, op_hash: &str, result: &Value) -> Result<(), StoreError>;

    fn revoked(&mut self, token_id: &str) -> Result<bool, StoreError>;
    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError>;

    /// State of the simulated systems of record, by namespace and key
    /// (`("ap.invoice_status", "INV-1")`, `("bank.ledger", "...")`).
    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError>;
    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError>;

    /// The entries of namespace `ns` whose key starts with `prefix`, in
    /// key order, at most `limit` of them (a caller that must see them all
    /// asks one more than it accepts): an owner's record overrides of a
    /// keyed registry, which a selection reads whole. A value written
    /// `null` (a deleted record) is listed as such. The default refuses,
    /// so a store that cannot list fails closed.
    fn state_list(
        &mut self,
        ns: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        let _ = (prefix, limit);
        Err(StoreError::Backend(format!(
            "this store cannot list the namespace `{ns}`"
        )))
    }

    /// Appends a receipt whose body is already canonical JSON (the
    /// gateway's way: the body is written once, hashed and stored as is)
    /// and returns its place in the chain.
    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError>;

    /// The rows of `owner` in a registry kept in a table of the store's
    /// database (`[pg_registries]` in the world), read inside this
    /// transaction: for a set registry (`keyed` false) the columns `value`
    /// and `id`, for a keyed one `key` and `record` (a JSON object); with
    /// `key`, only the row(s) of that key (keyed registries). Only a
    /// PostgreSQL store has tables to read ([`Store::registry_tables`]).
    fn registry_rows(
        &mut self,
        table: &str,
        owner: &str,
        keyed: bool,
        key: Option<&str>,
    ) -> Result<Vec<RegistryRow>, StoreError> {
        let _ = (owner, keyed, key);
        Err(StoreError::Backend(format!(
            "registry table `{table}`: this store has no database tables to read (a PostgreSQL store has)"
        )))
    }

    /// Appends a receipt given as a JSON value and returns the stored
    /// record (with its sequence number, previous hash and own hash).
    fn append_receipt(&mut self, body: &Value) -> Result<ReceiptRecord, StoreError> {
        let jcs = Jcs::from_value(body)
            .map_err(|e| StoreError::Backend(format!("cannot hash the receipt: {e}")))?;
        let link = self.append_receipt_jcs(&jcs)?;
        Ok(ReceiptRecord {
            seq: link.seq,
            prev_hash: link.prev_hash,
            hash: link.hash,
            body: body.clone(),
        })
    }
}

/// One row of a registry table (see [`Tx::registry_rows`]): a set
/// registry's `value` (in `key`) and optional `id`, or a keyed registry's
/// `key` and `record`.
#[derive(Clone, Debug, PartialEq)]
pub struct RegistryRow {
    pub key: String,
    pub id: Option<String>,
    pub record: Option<Value>,
}

/// A window of the receipt chain (see [`Store::receipts_range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiptRange {
    /// The `limit` newest receipts.
    Last { limit: usize },
    /// The `limit` oldest receipts whose sequence number is above `seq`
    /// (page on with the last `seq` received; a shorter page is the end).
    After { seq: u64, limit: usize },
}

/// The body of a transaction: runs against a [`Tx`]; returning `Err` rolls
/// everything back.
pub type TxFn<'a> = dyn FnMut(&mut dyn Tx) -> Result<Value, StoreError> + 'a;

pub trait Store: Send + Sync {
    /// Runs `f` atomically and durably: all its writes commit together or
    /// not at all. Concurrent transactions (threads or processes) are
    /// serialised.
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError>;

    /// Runs several bodies, each atomic on its own (an `Err` rolls back
    /// that body only; each sees the writes of the bodies before it), and
    /// commits them together: one durable commit for the lot, and no
    /// result is returned before that commit. For callers that hold many
    /// proposals at once (`ipc run` on a file). The default runs one
    /// transaction per body.
    fn transactions(&self, fs: &mut [&mut TxFn<'_>]) -> Vec<Result<Value, StoreError>> {
        fs.iter_mut().map(|f| self.transaction(&mut **f)).collect()
    }

    /// Runs `f` as [`Store::transaction`] does, for a body that uses the
    /// links of the receipts it appends only to report them (the
    /// gateway's decisions): such a body may be run before its
    /// transaction takes its place in the chain, its receipts linked at
    /// commit (PostgreSQL decides before the head lock and re-checks under
    /// it, [`postgres`]), so a link it saw may not be the one committed.
    /// Returns the body's value and the receipts linked elsewhere than the
    /// body saw, each as seen and as committed; a receipt not listed was
    /// committed where the body saw it. The default runs
    /// [`Store::transaction`], where nothing moves.
    fn transaction_linked(&self, f: &mut TxFn<'_>) -> Result<(Value, Vec<Relink>), StoreError> {
        Ok((self.transaction(f)?, Vec::new()))
    }

    /// Runs `f` as [`Store::transaction`] does, atomically and before it
    /// returns, for a record that need not be synced to disk on its own
    /// (a receipt of a call the gateway did not decide, such as an MCP
    /// passthrough): it survives a crash of the process, and the next
    /// synced commit (or checkpoint) takes it to the disk with it. A crash
    /// of the machine before that may lose such records, only ever a tail
    /// of the chain after its last synced commit, never one before it, so
    /// the chain still verifies. Never for a decision. The default syncs.
    fn transaction_written(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.transaction(f)
    }

    /// Runs `f`, which only reads, in one transaction: it writes nothing,
    /// so there is nothing to sync (an MCP passthrough's check that the
    /// session's mandates stand, on the call's path). The default is
    /// [`Store::transaction`]; SQLite reads on its reader connection,
    /// outside the writer's group commit.
    fn read_only(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.transaction(f)
    }

    /// Every receipt, in chain order (for `ipc receipts verify / show`).
    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError>;

    /// One window of the chain, in chain order, read on its own: the
    /// store reads at most the window's `limit` rows, whatever the chain's
    /// length (`GET /v1/receipts` of a long-running service). Required,
    /// never derived from [`Store::receipts`], so that no store can page
    /// by loading the whole chain.
    fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError>;

    /// The sequence number and hash of the last receipt as recorded by the
    /// store's head marker (detects a truncated chain).
    fn head(&self) -> Result<Option<(u64, String)>, StoreError>;

    /// The receipts as stored (bodies as their stored text), the head
    /// marker, and the budgets, used nonces and executed operations, all
    /// read at one point in time: what [`verify_store`] checks.
    fn snapshot(&self) -> Result<Snapshot, StoreError>;

    /// For a store that decides before its lock
    /// ([`Store::transaction_linked`] on PostgreSQL): how many
    /// transactions committed as decided, and how many were decided again
    /// under the lock because a value they read had changed. `None` for
    /// the others.
    fn optimistic_counts(&self) -> Option<(u64, u64)> {
        None
    }

    /// For a store whose writers take turns on a lock over the network
    /// (PostgreSQL's chain head): how long its transactions held it, so
    /// far. `None` for the others.
    fn head_lock_hold(&self) -> Option<HeadLockHold> {
        None
    }

    /// Whether [`Tx::registry_rows`] can read registry tables (PostgreSQL).
    fn registry_tables(&self) -> bool {
        false
    }

    /// Every row of the store's tables besides the receipts (budgets,
    /// nonces, executions, revocations, state), read in one read
    /// transaction: what moving a tenant copies ([`export`]). A store
    /// without tables to list refuses.
    fn rows(&self) -> Result<Rows, StoreError> {
        Err(StoreError::Backend(
            "this store cannot list its rows".into(),
        ))
    }
}

/// How long a store's transactions held the chain's head lock
/// ([`Store::head_lock_hold`]): one database decides at most (decisions
/// per transaction) / (`total` / `transactions`) per second, whatever the
/// number of instances.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeadLockHold {
    /// Transactions that took the lock (committed or rolled back).
    pub transactions: u64,
    /// Their holds, summed.
    pub total: std::time::Duration,
    /// The longest one.
    pub max: std::time::Duration,
}

/// A receipt's link as the body that appended it saw it, and as it was
/// committed ([`Store::transaction_linked`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relink {
    pub seen: ChainLink,
    pub committed: ChainLink,
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum StoreError {
    /// The store cannot be opened: a missing file for a command that never
    /// creates one, a database of another application, a PostgreSQL server that
    /// cannot be reached. A store is never modified when it is refused.
    #[error("cannot open store `{path}`: {reason}")]
    #[diagnostic(code(ipc::store::open))]
    Open { path: String, reason: String },

    /// The database refused a statement or a commit; the transaction rolled
    /// back and nothing of it is reported as decided.
    #[error("store error: {0}")]
    #[diagnostic(code(ipc::store::backend))]
    Backend(String),

    /// The connection was lost while `COMMIT` was in flight (the server
    /// died, a failover): the transaction may or may not have committed.
    /// Nothing of it is reported as decided, never as an ALLOW, and no
    /// receipt is written for it: the caller sends it again, and a write
    /// that did commit is then answered from the store by its operation
    /// hash (never executed twice), one that did not is decided anew.
    #[error(
        "the connection was lost during commit: whether the transaction committed is unknown ({0})"
    )]
    #[diagnostic(
        code(ipc::store::commit_unknown),
        help(
            "send the proposal again once the store answers: an operation that committed is answered from the store by its operation hash"
        )
    )]
    CommitUnknown(String),

    /// A uniqueness conflict (a nonce already used, an operation already
    /// executed): the caller turns it into a DENY.
    #[error("conflict: {0}")]
    #[diagnostic(code(ipc::store::conflict))]
    Conflict(String),

    /// Raised by a transaction body to abort with a reason; rolls back.
    #[error("{0}")]
    #[diagnostic(code(ipc::store::aborted))]
    Aborted(String),

    /// A PostgreSQL URL holding a password: refused, so that the password
    /// never sits on a command line or in a world file.
    #[error("the store url `{url}` holds a password: passwords are never given in the url")]
    #[diagnostic(
        code(ipc::store::password_in_url),
        help(
            "remove the password from the url; put it in a file named by `IPC_PG_PASSWORD_FILE` or in `PGPASSWORD`"
        )
    )]
    PasswordInUrl { url: String },

    /// A PostgreSQL store in a build without the `postgres` feature.
    #[error(
        "a PostgreSQL store (`postgres://`) needs the `postgres` feature, which this build of intentplane leaves out"
    )]
    #[diagnostic(
        code(ipc::store::feature_off),
        help(
            "build with the default features (`cargo install intentplane`) or `--features postgres`, or use an SQLite file"
        )
    )]
    FeatureOff,

    /// The TLS parameters of a PostgreSQL URL are refused (a mode that
    /// does not check the server, a root certificate that cannot be read).
    #[error("cannot use `{store}` over tls: {reason}")]
    #[diagnostic(
        code(ipc::store::tls),
        help(
            "connect with `sslmode=verify-full&sslrootcert=FILE` (FILE: the PEM certificate of the authority that signed the server's), or `sslmode=disable` to go in clear on purpose"
        )
    )]
    Tls { store: String, reason: String },

    /// A PostgreSQL URL naming a host that is neither a Unix socket nor
    /// loopback, without `sslmode`: refused rather than sent in clear.
    #[error(
        "`{store}` would reach `{host}` in clear: receipts, budgets and any password would cross the network unencrypted"
    )]
    #[diagnostic(
        code(ipc::store::plaintext_remote),
        help(
            "add `sslmode=verify-full&sslrootcert=FILE` (FILE: the PEM certificate of the authority that signed the server's), or `sslmode=disable` to accept a connection in clear on purpose"
        )
    )]
    PlaintextRemote { store: String, host: String },

    /// The database (schema) belongs to another application: left
    /// untouched.
    #[error("`{store}` is not an intentplane store: {reason}")]
    #[diagnostic(
        code(ipc::store::foreign),
        help("point the store at an empty schema (`?options=-csearch_path%3DNAME`) or database")
    )]
    Foreign { store: String, reason: String },

    /// The store was written by a newer intentplane: left untouched.
    #[error("`{store}` has schema version {found}, newer than this build's {supported}")]
    #[diagnostic(
        code(ipc::store::newer_schema),
        help("run a newer `ipc`; this one never downgrades a store")
    )]
    NewerSchema {
        store: String,
        found: i64,
        supported: i64,
    },

    /// The world's stores are sharded and this work names no tenant to
    /// route by: it is refused, never run on a shard chosen for it.
    #[error(
        "the stores are sharded and {what} names no tenant: refused rather than run on a shard chosen for it"
    )]
    #[diagnostic(
        code(ipc::store::unrouted),
        help("name the tenant (`--tenant`), or run it against one shard's store (`--store URL`)")
    )]
    Unrouted { what: String },
}

/// Opens the store at `location`: a `postgres://` (or `postgresql://`)
/// URL, else an SQLite file; `create` allows making a new one (`false`
/// for commands that only read or amend a store: `ipc receipts`).
pub fn open(
    location: &std::path::Path,
    create: bool,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    if let Some(url) = location.to_str().filter(|s| postgres::is_url(s)) {
        #[cfg(feature = "postgres")]
        {
            let s = postgres::PgStore::open_with(url, postgres::PgOptions::default(), create)?;
            return Ok(std::sync::Arc::new(s));
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = url;
            return Err(StoreError::FeatureOff);
        }
    }
    open_sqlite(location, create)
}

/// [`open`], and a PostgreSQL database that cannot be reached
/// (`StoreError::Open`: down, restarting, refusing connections) is tried
/// again after 0.5, 1, 2, 4, 8, 8, ... seconds until `wait` has passed,
/// each failure reported on stderr (`ipc serve`: a rolling restart of the
/// database needs no supervisor to start the service again). Any other
/// error, and an SQLite file, is returned at once.
pub fn open_waiting(
    location: &std::path::Path,
    create: bool,
    wait: std::time::Duration,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    #[cfg(not(feature = "postgres"))]
    {
        // nothing to wait for: an SQLite file, or `ipc::store::feature_off`
        let _ = wait;
        open(location, create)
    }
    #[cfg(feature = "postgres")]
    open_waiting_pg(location, create, wait)
}

#[cfg(feature = "postgres")]
fn open_waiting_pg(
    location: &std::path::Path,
    create: bool,
    wait: std::time::Duration,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    let Some(url) = location.to_str().filter(|s| postgres::is_url(s)) else {
        return open_sqlite(location, create);
    };
    let start = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(500);
    let mut attempt = 1u32;
    loop {
        match postgres::PgStore::open_with(url, postgres::PgOptions::default(), create) {
            Ok(s) => return Ok(std::sync::Arc::new(s)),
            Err(e @ StoreError::Open { .. }) if start.elapsed() + pause <= wait => {
                crate::base::log::info(
                    "store_wait",
                    &format!(
                        "intentplane: attempt {attempt}: {e}; trying again in {:.1} s (giving up {} s after the first)",
                        pause.as_secs_f64(),
                        wait.as_secs()
                    ),
                );
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_secs(8));
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

fn open_sqlite(
    location: &std::path::Path,
    create: bool,
) -> Result<std::sync::Arc<dyn Store>, StoreError> {
    let s = if create {
        sqlite::SqliteStore::open(location)?
    } else {
        sqlite::SqliteStore::open_existing(location)?
    };
    Ok(std::sync::Arc::new(s))
}
