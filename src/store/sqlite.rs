//! The embedded default [`Store`]: one SQLite file in WAL mode.
//!
//! Every transaction runs under `BEGIN IMMEDIATE` (the write lock is taken
//! before the first read, so a read-check-write can never interleave with
//! another writer, thread or process) with `synchronous = FULL` (the WAL is
//! synced at every commit: what `transaction` acknowledges survives a
//! crash) and a 30 s `busy_timeout` (other processes wait for the lock).
//!
//! **Group commit.** Threads of one process that call `transaction` at
//! the same time share one SQLite transaction: each body runs in its own
//! `SAVEPOINT` (an `Err` rolls back that body only; the first body of a
//! batch needs none, the batch's rollback is its own), and the last thread in
//! line commits for everyone. A caller is acknowledged only after the
//! `COMMIT` that contains its writes has returned, so durability is the
//! same as one commit per transaction; only the number of syncs drops.
//! Bodies still run one at a time and each sees the writes of the bodies
//! before it, so the outcome is that of running them one after another.
//! A batch is cut at [`SqliteOptions::max_batch`] bodies so that other
//! processes get the lock too.
//!
//! **Written, not synced.** [`Store::transaction_written`] (records of
//! calls the gateway did not decide) commits alone at `synchronous =
//! NORMAL`: in the WAL when it returns, so a crash of the process loses
//! nothing, and synced with the next `FULL` commit, which syncs the whole
//! WAL file; a crash of the machine can lose only such a tail.

use super::rows::{self, to_i64};
use super::{
    Accounts, ChainLink, ReceiptRange, ReceiptRecord, Snapshot, Spent, Store, StoreError, Tx, TxFn,
};
use crate::canonical::Jcs;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use serde_json::Value;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// `PRAGMA application_id` of an intentplane store ("IPCS").
const APPLICATION_ID: i64 = 0x4950_4353;
/// `PRAGMA user_version`: the schema version.
const SCHEMA_VERSION: i64 = 1;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS budgets (
    mandate_id TEXT PRIMARY KEY,
    amount     INTEGER NOT NULL,
    calls      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS nonces (nonce TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS executions (
    op_hash TEXT PRIMARY KEY,
    result  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS revocations (token_id TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS state (
    ns    TEXT NOT NULL,
    key   TEXT NOT NULL,
    json  TEXT NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE TABLE IF NOT EXISTS receipts (
    seq       INTEGER PRIMARY KEY,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT NOT NULL
);
";

/// Settings of every connection. `synchronous = FULL`: the WAL is synced
/// at every commit. The page cache (64 MiB) and the checkpoint interval
/// (4096 pages, 16 MiB of WAL) are sized for the gateway's random-keyed
/// indexes (operation hashes): fewer page reloads, and a page rewritten by
/// many batches is copied back to the database once per checkpoint.
/// `temp_store = MEMORY`: savepoint and statement journals stay in memory
/// instead of spilling to a temporary file (a write per page).
const PRAGMAS: &str = "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
    PRAGMA cache_size = -65536; PRAGMA wal_autocheckpoint = 4096; PRAGMA temp_store = MEMORY";

/// How a [`SqliteStore`] commits.
#[derive(Clone, Copy, Debug)]
pub struct SqliteOptions {
    /// How long to wait for another process's write lock.
    pub busy_timeout: Duration,
    /// Most transaction bodies committed together; 1 turns group commit
    /// off (one `COMMIT`, one sync, per transaction).
    pub max_batch: usize,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            busy_timeout: Duration::from_secs(30),
            max_batch: 256,
        }
    }
}

/// The writer connection and the state of the open batch.
struct Writer {
    conn: Connection,
    /// A `BEGIN IMMEDIATE` is open.
    in_batch: bool,
    /// Bodies run in the open batch.
    batch_len: usize,
    /// Id of the open (or next) batch.
    batch_id: u64,
    /// Outcome of finished batches, with how many waiters still have to
    /// read it.
    outcomes: HashMap<u64, (Result<(), String>, usize)>,
    /// Threads waiting for the open batch to commit.
    waiting: usize,
    head: Head,
    /// The connection may still be at `synchronous = NORMAL` (set for a
    /// [`Store::transaction_written`] and not yet set back): no batch is
    /// opened before it is `FULL` again.
    unsynced: bool,
}

/// A store in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    options: SqliteOptions,
    writer: Mutex<Writer>,
    committed: Condvar,
    /// Threads inside `transaction` whose body has not finished yet.
    arrived: AtomicUsize,
    /// A second connection for reads outside transactions: it sees only
    /// committed data, never an open batch.
    reader: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteStore {
    /// Opens the store at `path`, creating the file and its tables if
    /// needed.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default(), true)
    }

    /// Opens an existing store; a missing file or a file that is not an
    /// intentplane store is an error (for `ipc receipts`).
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        Self::open_with(path, SqliteOptions::default(), false)
    }

    /// Opens with explicit options; `create` allows making a new store.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
        create: bool,
    ) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let open_err = |reason: String| StoreError::Open {
            path: path.display().to_string(),
            reason,
        };
        if !create && !path.is_file() {
            return Err(open_err("no such file".into()));
        }
        let conn = connect(&path, create, &options).map_err(&open_err)?;
        let reader = connect(&path, false, &options).map_err(&open_err)?;
        Ok(Self {
            path,
            options: SqliteOptions {
                max_batch: options.max_batch.max(1),
                ..options
            },
            writer: Mutex::new(Writer {
                conn,
                in_batch: false,
                batch_len: 0,
                batch_id: 0,
                outcomes: HashMap::new(),
                waiting: 0,
                head: Head::default(),
                unsynced: false,
            }),
            committed: Condvar::new(),
            arrived: AtomicUsize::new(0),
            reader: Mutex::new(reader),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        // A panicking body is caught in `transaction`, so a poisoned lock
        // still guards consistent bookkeeping.
        self.writer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_reader(&self) -> MutexGuard<'_, Connection> {
        self.reader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Opens a batch (`BEGIN IMMEDIATE`) unless one is open.
    fn begin(&self, w: &mut Writer) -> Result<(), StoreError> {
        if !w.in_batch {
            if w.unsynced {
                // fail closed: nothing commits unsynced by mistake
                w.conn
                    .execute_batch("PRAGMA synchronous = FULL")
                    .map_err(backend)?;
                w.unsynced = false;
            }
            w.conn.execute_batch("BEGIN IMMEDIATE").map_err(backend)?;
            w.in_batch = true;
            w.head = Head::default();
        }
        Ok(())
    }

    /// After `bodies` bodies of one caller ran in the open batch: the
    /// caller leaves the line; the last one in line (or the one that fills
    /// the batch) commits, and returns the outcome; otherwise, with `wait`,
    /// waits for the commit of this batch and returns its outcome, and
    /// without `wait` returns `None`.
    fn settle(
        &self,
        mut w: MutexGuard<'_, Writer>,
        bodies: usize,
        wait: bool,
    ) -> Option<Result<(), String>> {
        w.batch_len += bodies;
        let remaining = self.arrived.fetch_sub(1, Ordering::SeqCst) - 1;
        if remaining == 0 || w.batch_len >= self.options.max_batch {
            return Some(self.end_batch(&mut w, true));
        }
        if !wait {
            return None;
        }
        let batch = w.batch_id;
        w.waiting += 1;
        let mut w = self
            .committed
            .wait_while(w, |w| w.batch_id == batch)
            .unwrap_or_else(|e| e.into_inner());
        let (outcome, readers) = w.outcomes.get_mut(&batch)?;
        let outcome = outcome.clone();
        *readers -= 1;
        if *readers == 0 {
            w.outcomes.remove(&batch);
        }
        Some(outcome)
    }

    /// Ends the open batch: `COMMIT` (or `ROLLBACK` when `commit` is
    /// false), then wakes the waiters with the outcome.
    fn end_batch(&self, w: &mut Writer, commit: bool) -> Result<(), String> {
        let outcome = if commit {
            match write_head(w).and_then(|()| w.conn.execute_batch("COMMIT")) {
                Ok(()) => Ok(()),
                Err(e) => {
                    let _ = w.conn.execute_batch("ROLLBACK");
                    Err(format!("commit failed: {e}"))
                }
            }
        } else {
            w.conn.execute_batch("ROLLBACK").map_err(|e| e.to_string())
        };
        if w.waiting > 0 {
            w.outcomes.insert(w.batch_id, (outcome.clone(), w.waiting));
        }
        w.waiting = 0;
        w.in_batch = false;
        w.batch_len = 0;
        w.batch_id += 1;
        self.committed.notify_all();
        outcome
    }
}

/// Sets the writer back to `synchronous = FULL`; when that fails it stays
/// marked, and the next batch tries again before it opens (or fails).
fn set_synced(w: &mut Writer) {
    if w.conn.execute_batch("PRAGMA synchronous = FULL").is_ok() {
        w.unsynced = false;
    }
}

/// Writes the head marker of the open batch, if receipts were appended.
fn write_head(w: &mut Writer) -> Result<(), rusqlite::Error> {
    if let (true, Some(Some((seq, hash)))) = (w.head.dirty, &w.head.known) {
        let seq =
            i64::try_from(*seq).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, 0))?;
        w.conn
            .prepare_cached(
                "INSERT INTO head (id, seq, hash) VALUES (1, ?1, ?2)
                 ON CONFLICT (id) DO UPDATE SET seq = ?1, hash = ?2",
            )?
            .execute(params![seq, hash])?;
    }
    w.head.dirty = false;
    Ok(())
}

/// Runs one body in its own savepoint of the open batch. The flag is true
/// when the batch must be rolled back as a whole: the savepoint could not
/// be opened or closed, or the body ran without one and failed.
///
/// The first body of a batch runs without a savepoint (`savepoint`
/// false): the batch holds nothing else, so rolling the batch back undoes
/// exactly that body. This spares the common case — one caller, one body
/// of many decisions (`ipc run`) — SQLite's copy of every page it touches
/// into the savepoint journal.
fn run_body(
    w: &mut Writer,
    f: &mut TxFn<'_>,
    savepoint: bool,
) -> (std::thread::Result<Result<Value, StoreError>>, bool) {
    if savepoint && let Err(e) = w.conn.execute_batch("SAVEPOINT tx") {
        return (Ok(Err(backend(e))), true);
    }
    // the head to restore if the body's savepoint is rolled back
    let saved = savepoint.then(|| w.head.clone());
    let mut tx = SqlTx {
        conn: &w.conn,
        head: &mut w.head,
    };
    let run = catch_unwind(AssertUnwindSafe(|| f(&mut tx)));
    let ok = matches!(run, Ok(Ok(_)));
    if !savepoint {
        return (run, !ok);
    }
    let end = if ok {
        w.conn.execute_batch("RELEASE tx")
    } else {
        // the body's receipts are gone: so is the head it moved
        if let Some(h) = saved {
            w.head = h;
        }
        w.conn.execute_batch("ROLLBACK TO tx; RELEASE tx")
    };
    match end {
        Ok(()) => (run, false),
        Err(e) => (Ok(Err(backend(e))), true),
    }
}

fn connect(path: &Path, create: bool, options: &SqliteOptions) -> Result<Connection, String> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags).map_err(|e| e.to_string())?;
    conn.busy_timeout(options.busy_timeout)
        .map_err(|e| e.to_string())?;
    let not_a_db = |e: rusqlite::Error| format!("not an SQLite database ({e})");
    // Both read in one read transaction: another process creating the
    // store commits its tables and its application id together, and two
    // separate reads could see the tables without the id (a store taken
    // for a foreign database).
    conn.execute_batch("BEGIN").map_err(not_a_db)?;
    let read = (|| -> Result<(i64, i64), rusqlite::Error> {
        let app_id = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        let tables = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        Ok((app_id, tables))
    })();
    let _ = conn.execute_batch("COMMIT");
    let (app_id, tables) = read.map_err(not_a_db)?;
    let foreign = || "an SQLite database that is not an intentplane store".to_string();
    if app_id != APPLICATION_ID && (tables > 0 || !create) {
        return Err(foreign());
    }
    // SQLite answers a journal-mode switch that another connection blocks
    // with SQLITE_BUSY at once, without its busy handler: wait here
    let started = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < options.busy_timeout =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => break other.map_err(|e| format!("cannot switch to WAL mode: {e}"))?,
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("cannot switch to WAL mode (journal mode `{mode}`)"));
    }
    conn.execute_batch(PRAGMAS)
        .map_err(|e| format!("cannot set up the connection: {e}"))?;
    // Create or check the schema under the write lock, so that two
    // processes opening a new file at once do not race.
    conn.execute_batch("BEGIN IMMEDIATE")
        .map_err(|e| format!("cannot take the write lock: {e}"))?;
    let result = (|| -> Result<(), String> {
        let app_id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        let tables: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| e.to_string())?;
        if app_id == APPLICATION_ID {
            let version: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .map_err(|e| e.to_string())?;
            if version != SCHEMA_VERSION {
                return Err(format!(
                    "store schema version {version} is not supported (expected {SCHEMA_VERSION})"
                ));
            }
            Ok(())
        } else if tables == 0 && create {
            conn.execute_batch(SCHEMA).map_err(|e| e.to_string())?;
            conn.execute_batch(&format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION}"
            ))
            .map_err(|e| e.to_string())
        } else {
            Err(foreign())
        }
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT").map_err(|e| e.to_string())?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(conn)
}

impl Store for SqliteStore {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.arrived.fetch_add(1, Ordering::SeqCst);
        let mut w = self.lock_writer();
        if let Err(e) = self.begin(&mut w) {
            self.arrived.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        // the first body of a batch needs no savepoint of its own
        let first = w.batch_len == 0;
        let (run, broken) = run_body(&mut w, f, !first);
        if broken {
            self.arrived.fetch_sub(1, Ordering::SeqCst);
            let _ = self.end_batch(&mut w, false);
            drop(w);
            return match run {
                Err(panic) => resume_unwind(panic),
                Ok(Ok(_)) => Err(StoreError::Backend("the batch was rolled back".into())),
                Ok(Err(e)) => Err(e),
            };
        }
        match run {
            Err(panic) => {
                let _ = self.settle(w, 1, false);
                resume_unwind(panic);
            }
            // a failed body is already rolled back: no need to wait
            Ok(Err(e)) => {
                let _ = self.settle(w, 1, false);
                Err(e)
            }
            Ok(Ok(value)) => match self.settle(w, 1, true) {
                Some(Ok(())) => Ok(value),
                Some(Err(e)) => Err(StoreError::Backend(e)),
                None => Err(StoreError::Backend("the batch outcome was lost".into())),
            },
        }
    }

    /// A deferred read transaction on the reader connection: no write
    /// lock, no batch to join, nothing to sync. Rolled back: it wrote
    /// nothing, and nothing it tries to write is kept.
    fn read_only(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        let conn = self.lock_reader();
        // a body that panicked earlier may have left its transaction open
        if !conn.is_autocommit() {
            conn.execute_batch("ROLLBACK").map_err(backend)?;
        }
        conn.execute_batch("BEGIN").map_err(backend)?;
        let mut head = Head::default();
        let run = f(&mut SqlTx {
            conn: &conn,
            head: &mut head,
        });
        conn.execute_batch("ROLLBACK").map_err(backend)?;
        run
    }

    /// Alone in a batch of its own at `synchronous = NORMAL` (the WAL is
    /// written, not synced: it survives the process, and the next `FULL`
    /// commit's sync of the WAL file takes it along), then set back to
    /// `FULL` before any other batch opens. A batch already open is
    /// synced: the body joins it as [`Store::transaction`] does.
    fn transaction_written(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        let mut w = self.lock_writer();
        if w.in_batch {
            drop(w);
            return self.transaction(f);
        }
        // SQLite refuses the switch inside a transaction: none is open
        w.unsynced = true;
        if w.conn.execute_batch("PRAGMA synchronous = NORMAL").is_err() {
            drop(w);
            return self.transaction(f);
        }
        let opened = w.conn.execute_batch("BEGIN IMMEDIATE").map_err(backend);
        let result = match opened {
            Err(e) => Err(e),
            Ok(()) => {
                w.in_batch = true;
                w.head = Head::default();
                let (run, broken) = run_body(&mut w, f, false);
                let ended = self.end_batch(&mut w, !broken);
                match run {
                    Err(panic) => {
                        set_synced(&mut w);
                        drop(w);
                        resume_unwind(panic);
                    }
                    Ok(Err(e)) => Err(e),
                    Ok(Ok(value)) => ended.map(|()| value).map_err(StoreError::Backend),
                }
            }
        };
        set_synced(&mut w);
        result
    }

    fn transactions(&self, fs: &mut [&mut TxFn<'_>]) -> Vec<Result<Value, StoreError>> {
        if fs.is_empty() {
            return Vec::new();
        }
        self.arrived.fetch_add(1, Ordering::SeqCst);
        let mut w = self.lock_writer();
        if let Err(e) = self.begin(&mut w) {
            self.arrived.fetch_sub(1, Ordering::SeqCst);
            let reason = e.to_string();
            return fs
                .iter()
                .map(|_| Err(StoreError::Backend(reason.clone())))
                .collect();
        }
        let mut results = Vec::with_capacity(fs.len());
        for f in fs.iter_mut() {
            let (run, broken) = run_body(&mut w, &mut **f, true);
            if broken {
                self.arrived.fetch_sub(1, Ordering::SeqCst);
                let _ = self.end_batch(&mut w, false);
                let reason = match run {
                    Ok(Err(e)) => e.to_string(),
                    _ => "the batch was rolled back".to_string(),
                };
                return fs
                    .iter()
                    .map(|_| Err(StoreError::Backend(reason.clone())))
                    .collect();
            }
            match run {
                Ok(r) => results.push(r),
                Err(panic) => {
                    let _ = self.settle(w, results.len() + 1, false);
                    resume_unwind(panic);
                }
            }
        }
        let any_ok = results.iter().any(Result::is_ok);
        let outcome = self.settle(w, results.len(), any_ok);
        results
            .into_iter()
            .map(|r| {
                let v = r?;
                match &outcome {
                    Some(Ok(())) => Ok(v),
                    Some(Err(e)) => Err(StoreError::Backend(e.clone())),
                    None => Err(StoreError::Backend("the batch outcome was lost".into())),
                }
            })
            .collect()
    }

    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        let conn = self.lock_reader();
        read_records(
            &conn,
            "SELECT seq, prev_hash, hash, body FROM receipts ORDER BY seq",
            [],
        )
    }

    fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        let conn = self.lock_reader();
        match range {
            ReceiptRange::Last { limit: n } => read_records(
                &conn,
                "SELECT * FROM (SELECT seq, prev_hash, hash, body FROM receipts
                 ORDER BY seq DESC LIMIT ?1) ORDER BY seq",
                [rows::param(n)],
            ),
            ReceiptRange::After { seq, limit: n } => read_records(
                &conn,
                "SELECT seq, prev_hash, hash, body FROM receipts WHERE seq > ?1
                 ORDER BY seq LIMIT ?2",
                [rows::param(seq), rows::param(n)],
            ),
        }
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        let conn = self.lock_reader();
        conn.query_row("SELECT seq, hash FROM head WHERE id = 1", [], shown_head)
            .optional()
            .map_err(backend)
    }

    fn rows(&self) -> Result<super::Rows, StoreError> {
        super::export::sqlite_rows(&self.lock_reader())
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let conn = self.lock_reader();
        // one read transaction: WAL gives it one consistent view, so a
        // writer committing meanwhile cannot make the parts disagree
        conn.execute_batch("BEGIN").map_err(backend)?;
        let snap = read_snapshot(&conn);
        let end = conn.execute_batch("COMMIT");
        let snap = snap.map_err(backend)?;
        end.map_err(backend)?;
        Ok(snap)
    }
}

/// The store as of one read transaction (see [`Store::snapshot`]).
/// Receipt records from a query of `seq, prev_hash, hash, body`.
fn read_records(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> Result<Vec<ReceiptRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql).map_err(backend)?;
    let rows = stmt
        .query_map(params, |row| {
            Ok(rows::receipt(
                u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                text(row.get_ref(1)?),
                text(row.get_ref(2)?),
                text(row.get_ref(3)?),
            ))
        })
        .map_err(backend)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(backend)
}

fn read_snapshot(conn: &Connection) -> Result<Snapshot, rusqlite::Error> {
    let mut receipts = Vec::new();
    let mut stmt =
        conn.prepare("SELECT seq, prev_hash, hash, body, typeof(body) FROM receipts ORDER BY seq")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let storage: String = row.get(4)?;
        receipts.push(rows::stored_receipt(
            u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
            text(row.get_ref(1)?),
            text(row.get_ref(2)?),
            text(row.get_ref(3)?),
            &storage,
        ));
    }
    let head = conn
        .query_row("SELECT seq, hash FROM head WHERE id = 1", [], shown_head)
        .optional()?;
    let mut accounts = Accounts::default();
    let mut stmt = conn.prepare("SELECT mandate_id, amount, calls FROM budgets")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        let calls: i64 = row.get(2)?;
        accounts.budgets.insert(
            text(row.get_ref(0)?),
            // a negative count (tampered) is not any receipt's sum
            rows::audited_spent(Some(row.get(1)?), u64::try_from(calls).ok()),
        );
    }
    let mut stmt = conn.prepare("SELECT nonce FROM nonces")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        accounts.nonces.insert(text(row.get_ref(0)?));
    }
    let mut stmt = conn.prepare("SELECT op_hash FROM executions")?;
    let mut rows = stmt.query([])?;
    while let Some(row) = rows.next()? {
        accounts.executions.insert(text(row.get_ref(0)?));
    }
    Ok(Snapshot {
        receipts,
        head,
        accounts,
    })
}

/// Any column as text: a tampered file may hold another type.
fn text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => String::new(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) | ValueRef::Blob(t) => String::from_utf8_lossy(t).into_owned(),
    }
}

/// The head marker's row (`seq`, `hash`) as [`Store::head`] shows it.
fn shown_head(r: &rusqlite::Row<'_>) -> rusqlite::Result<(u64, String)> {
    Ok(rows::shown_head(r.get(0)?, text(r.get_ref(1)?)))
}

/// The operations of one transaction body, on the writer connection.
struct SqlTx<'c> {
    conn: &'c Connection,
    head: &'c mut Head,
}

/// The chain's head as the open batch sees it. The head marker row is
/// written once, just before `COMMIT`, instead of after every receipt:
/// it is in the same transaction either way.
#[derive(Clone, Debug, Default)]
struct Head {
    /// `None`: not read yet in this batch (another process may have
    /// appended since the last one).
    known: Option<Option<(u64, String)>>,
    /// Receipts were appended: the marker row must be written.
    dirty: bool,
}

impl SqlTx<'_> {
    fn exists(&self, sql: &str, key: &str) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(backend)?;
        stmt.exists(params![key]).map_err(backend)
    }

    fn json(&self, sql: &str, p: impl rusqlite::Params) -> Result<Option<Value>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(backend)?;
        let raw: Option<String> = stmt
            .query_row(p, |r| Ok(text(r.get_ref(0)?)))
            .optional()
            .map_err(backend)?;
        raw.map(|s| rows::json(&s)).transpose()
    }

    /// Inserts a key; `Ok(false)` when it was already there.
    fn insert_key(&self, sql: &str, key: &str) -> Result<bool, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql).map_err(backend)?;
        Ok(stmt.execute(params![key]).map_err(backend)? == 1)
    }
}

fn to_json_text(v: &Value) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(e.to_string()))
}

impl Tx for SqlTx<'_> {
    fn spent(&mut self, mandate_id: &str) -> Result<Spent, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT amount, calls FROM budgets WHERE mandate_id = ?1")
            .map_err(backend)?;
        let row: Option<(i64, i64)> = stmt
            .query_row(params![mandate_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(backend)?;
        Ok(row
            .map(|(amount, calls)| rows::spent(amount, calls))
            .unwrap_or_default())
    }

    fn spend(&mut self, mandate_id: &str, amount: i64) -> Result<Spent, StoreError> {
        // read, add in Rust (checked), write: a single `... RETURNING`
        // statement was measured slower (its statement journal spills to
        // a temporary file inside the batch's savepoint)
        let now = self.spent(mandate_id)?;
        let next = rows::spent_after(now, mandate_id, amount)?;
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO budgets (mandate_id, amount, calls) VALUES (?1, ?2, ?3)
                 ON CONFLICT (mandate_id) DO UPDATE SET amount = ?2, calls = ?3",
            )
            .map_err(backend)?;
        stmt.execute(params![mandate_id, next.amount, to_i64(next.calls)?])
            .map_err(backend)?;
        Ok(next)
    }

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        self.exists("SELECT 1 FROM nonces WHERE nonce = ?1", nonce)
    }

    fn use_nonce(&mut self, nonce: &str) -> Result<(), StoreError> {
        if self.insert_key(
            "INSERT INTO nonces (nonce) VALUES (?1) ON CONFLICT DO NOTHING",
            nonce,
        )? {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!(
                "nonce `{nonce}` was already used"
            )))
        }
    }

    fn executed(&mut self, op_hash: &str) -> Result<Option<Value>, StoreError> {
        self.json(
            "SELECT result FROM executions WHERE op_hash = ?1",
            params![op_hash],
        )
    }

    fn record_execution(&mut self, op_hash: &str, result: &Value) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO executions (op_hash, result) VALUES (?1, ?2) ON CONFLICT DO NOTHING",
            )
            .map_err(backend)?;
        if stmt
            .execute(params![op_hash, to_json_text(result)?])
            .map_err(backend)?
            == 1
        {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!(
                "operation `{op_hash}` was already executed"
            )))
        }
    }

    fn revoked(&mut self, token_id: &str) -> Result<bool, StoreError> {
        self.exists("SELECT 1 FROM revocations WHERE token_id = ?1", token_id)
    }

    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError> {
        self.insert_key(
            "INSERT INTO revocations (token_id) VALUES (?1) ON CONFLICT DO NOTHING",
            token_id,
        )
        .map(|_| ())
    }

    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.json(
            "SELECT json FROM state WHERE ns = ?1 AND key = ?2",
            params![ns, key],
        )
    }

    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "INSERT INTO state (ns, key, json) VALUES (?1, ?2, ?3)
                 ON CONFLICT (ns, key) DO UPDATE SET json = ?3",
            )
            .map_err(backend)?;
        stmt.execute(params![ns, key, to_json_text(value)?])
            .map_err(backend)?;
        Ok(())
    }

    fn state_list(
        &mut self,
        ns: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        // a prefix compared as bytes (no LIKE: its `%` and `_` would match)
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT key, json FROM state WHERE ns = ?1 AND key >= ?2
                 AND substr(CAST(key AS BLOB), 1, length(CAST(?2 AS BLOB))) = CAST(?2 AS BLOB)
                 ORDER BY key LIMIT ?3",
            )
            .map_err(backend)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![ns, prefix, limit], |r| {
                Ok((text(r.get_ref(0)?), text(r.get_ref(1)?)))
            })
            .map_err(backend)?;
        let mut out = vec![];
        for row in rows {
            let (k, j) = row.map_err(backend)?;
            out.push((k, rows::json(&j)?));
        }
        Ok(out)
    }

    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
        if self.head.known.is_none() {
            let mut stmt = self
                .conn
                .prepare_cached("SELECT seq, hash FROM head WHERE id = 1")
                .map_err(backend)?;
            let row: Option<(i64, String)> = stmt
                .query_row([], |r| Ok((r.get(0)?, text(r.get_ref(1)?))))
                .optional()
                .map_err(backend)?;
            let head = row.map(|(seq, hash)| rows::head(seq, hash)).transpose()?;
            self.head.known = Some(head);
        }
        let prev = match &self.head.known {
            Some(Some((seq, hash))) => Some((*seq, hash.as_str())),
            _ => None,
        };
        let link = ChainLink::next(prev, body);
        let mut insert = self
            .conn
            .prepare_cached(
                "INSERT INTO receipts (seq, prev_hash, hash, body) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(backend)?;
        insert
            .execute(params![
                to_i64(link.seq)?,
                link.prev_hash,
                link.hash,
                body.as_str()
            ])
            .map_err(backend)?;
        self.head.known = Some(Some((link.seq, link.hash.clone())));
        self.head.dirty = true;
        Ok(link)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synchronous(store: &SqliteStore) -> i64 {
        store
            .lock_writer()
            .conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    fn put(key: &str) -> impl FnMut(&mut dyn Tx) -> Result<Value, StoreError> + '_ {
        move |tx| {
            tx.state_put("t", key, &Value::Bool(true))?;
            Ok(Value::Null)
        }
    }

    /// A written transaction commits (another connection reads it), and
    /// the writer is back at `FULL` (2) after it, whether its body
    /// succeeded, failed or panicked: no decision ever commits unsynced.
    #[test]
    fn a_written_transaction_commits_and_leaves_the_writer_synced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(synchronous(&store), 2);
        store.transaction_written(&mut put("a")).unwrap();
        assert_eq!(synchronous(&store), 2);
        let failed = store.transaction_written(&mut |tx| {
            tx.state_put("t", "b", &Value::Bool(true))?;
            Err(StoreError::Aborted("no".into()))
        });
        assert!(failed.is_err());
        assert_eq!(synchronous(&store), 2);
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            let _ = store.transaction_written(&mut |_tx| panic!("a body that panics"));
        }));
        assert!(panicked.is_err());
        assert_eq!(synchronous(&store), 2);
        store.transaction(&mut put("c")).unwrap();
        let other = SqliteStore::open_existing(&path).unwrap();
        let mut seen = Vec::new();
        other
            .transaction(&mut |tx| {
                for k in ["a", "b", "c"] {
                    seen.push(tx.state_get("t", k)?.is_some());
                }
                Ok(Value::Null)
            })
            .unwrap();
        assert_eq!(
            seen,
            [true, false, true],
            "a and c committed, b rolled back"
        );
    }

    /// A writer left at `NORMAL` (setting it back failed) opens no batch
    /// before it is `FULL` again.
    #[test]
    fn a_writer_left_unsynced_is_synced_before_the_next_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        {
            let mut w = store.lock_writer();
            w.conn.execute_batch("PRAGMA synchronous = NORMAL").unwrap();
            w.unsynced = true;
        }
        store
            .transaction(&mut |tx| {
                tx.state_put("t", "a", &Value::Bool(true))?;
                Ok(Value::Null)
            })
            .unwrap();
        assert_eq!(synchronous(&store), 2);
    }
}
