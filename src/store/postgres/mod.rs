//! A [`Store`] in PostgreSQL, for several gateway instances (processes, on
//! one or several machines) on one database. Client: the maintained,
//! synchronous `postgres` crate (over `tokio-postgres`); TLS with rustls
//! (`tls.rs`: verified, or refused).
//!
//! **Location.** `postgres://USER@HOST:PORT/DATABASE` (or
//! `postgresql://`; a Unix socket with `?host=/run/postgresql`). The tables
//! live in the connection's current schema (`public` unless the URL sets
//! another with `?options=-csearch_path%3DNAME`), all named `ipc_*`, so the
//! store can share a database with a company's own tables (registries
//! read from PostgreSQL).
//!
//! **Password.** Never in the URL: a URL holding one is refused
//! ([`StoreError::PasswordInUrl`]), so that it shows neither in `ps`, in a
//! shell history nor in a world file. The password is read from the file
//! named by `IPC_PG_PASSWORD_FILE` (its first line), else from `PGPASSWORD`;
//! without either, the server's own authentication applies (peer, trust).
//!
//! **Isolation.** Every transaction runs at REPEATABLE READ and first takes
//! `LOCK TABLE ipc_head IN EXCLUSIVE MODE`: writers (decisions,
//! revocations) are serialised on the chain's head, across every process
//! and machine, exactly as SQLite's `BEGIN IMMEDIATE` serialises them on
//! one file. `LOCK` takes no snapshot, so the transaction's one snapshot is
//! taken by its first query, after the lock: it holds every writer's
//! commit before it, so a read-check-write (budget, nonce, open invoice)
//! cannot interleave with another writer, the chain never forks, and no
//! store row can change under it (no writer runs concurrently). The same
//! snapshot serves the registry tables that other applications write
//! (`[pg_registries]`): every read of a decision (of a batch) sees one
//! committed state of them, never a record half before and half after a
//! concurrent change. Readers (`snapshot`, `receipts`) are not blocked (the
//! lock mode admits plain `SELECT`s); `snapshot` reads in one REPEATABLE
//! READ transaction. The lock is on the table, not on the head row, so that
//! it holds even when the row is missing (an empty chain, or a tampered
//! store). Should the server still abort a transaction with a serialization
//! failure (40001) or a deadlock (40P01), the whole transaction is rolled
//! back and run again from the start (bodies are re-runnable: they only act
//! through the [`Tx`](super::Tx)); it is never turned into a decision.
//!
//! **Decisions before the lock.** [`Store::transaction_linked`] (the
//! gateway's decisions) runs the body first on a read-only snapshot without
//! the lock, then checks under it that every value the body read is
//! unchanged before applying its writes, or runs it again under the lock
//! (`postgres/optimistic.rs`): instances decide side by side and take turns only to
//! check and write.
//!
//! **Group commit.** A body given to [`Store::transaction`] may decide many
//! proposals (`ipc run --batch N`): one `COMMIT`, one WAL flush, for all of
//! them. [`Store::transactions`] runs several bodies in one transaction,
//! each in its own `SAVEPOINT`.
//!
//! **Schema.** `ipc_meta` holds `application = intentplane` and
//! `schema_version`; the tables are created on first open under an
//! advisory lock (two instances starting at once do not race). A schema
//! holding `ipc_*` tables without that marker (another application), or
//! with a newer version, is refused and left untouched.

mod connect;
mod names;
mod optimistic;
mod registry;
mod schema;
mod tls;
mod tx;

pub use names::{is_url, quote_table, redact};

use super::rows::{self, to_i64};
use connect::{config, lower};
use registry::{RegistryFailure, RegistryRead};
use schema::{SchemaError, prepare_schema, read_snapshot, txt};
use tx::{
    EXECUTED_SQL, Head, NONCE_SQL, PgTx, REVOKED_SQL, SPENT_SQL, STATE_SQL, spent_of, to_json_text,
};

use super::{HeadLockHold, ReceiptRange, ReceiptRecord, Relink, Snapshot, Store, StoreError, TxFn};
use postgres::error::SqlState;
use postgres::{Client, Config, NoTls, Statement};
use serde_json::Value;
use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The application marker in `ipc_meta`.
pub const APPLICATION: &str = "intentplane";
/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i64 = 1;
/// The environment variable naming a file that holds the password.
pub const PASSWORD_FILE_ENV: &str = "IPC_PG_PASSWORD_FILE";
/// How a [`PgStore`] connects and retries.
#[derive(Clone, Copy, Debug)]
pub struct PgOptions {
    /// How many times a transaction aborted by a serialization failure or
    /// a deadlock is run again before the error is returned.
    pub max_retries: u32,
    /// Connection timeout when the URL sets none.
    pub connect_timeout: Duration,
    /// The longest a statement of this store's sessions waits for a lock
    /// (`lock_timeout`; the chain's head lock above all) when the URL's
    /// `options` set none: a wait past it fails the transaction, which
    /// rolls back (nothing of it committed).
    pub lock_timeout: Duration,
    /// The longest this store's session may stay idle inside a transaction
    /// (`idle_in_transaction_session_timeout`) when the URL's `options`
    /// set none: the server ends the session of an instance frozen while
    /// it holds the head lock (a paused VM, a stopped process), the lock is
    /// released and the other instances go on; the frozen one's late
    /// commit fails, nothing of its transaction committed. Below
    /// `lock_timeout`, so that the others wait for the lock to come free
    /// rather than give up first.
    pub idle_in_transaction_timeout: Duration,
    /// Every transaction of the session read-only
    /// (`default_transaction_read_only`): the server refuses any write
    /// (`ipc replay` reads a recorded store this way).
    pub read_only: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            max_retries: 20,
            connect_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(2),
            read_only: false,
        }
    }
}

/// A query's parameter.
type Param<'a> = &'a (dyn postgres::types::ToSql + Sync);

/// One connection and its prepared statements.
struct Conn {
    client: Client,
    stmts: HashMap<&'static str, Statement>,
    /// Registry table reads, by their SQL.
    table_stmts: HashMap<String, Statement>,
    /// When the open transaction was granted the head lock.
    locked_at: Option<Instant>,
    /// How long this store's transactions held the head lock.
    holds: Arc<Holds>,
}

/// How long the head lock was held, over the store's transactions: from
/// the moment `LOCK TABLE ipc_head` returned to the moment `COMMIT` (or
/// `ROLLBACK`) returned, so the commit's WAL flush included (the server
/// releases the lock after it) and one round trip more than the server
/// holds it.
#[derive(Debug, Default)]
struct Holds {
    transactions: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Conn {
    /// The open transaction was granted the head lock now.
    fn locked(&mut self) {
        self.locked_at = Some(Instant::now());
    }

    /// The open transaction ended (committed or rolled back): its hold of
    /// the head lock, if it took it, is counted.
    fn released(&mut self) {
        if let Some(at) = self.locked_at.take() {
            let ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
            self.holds.transactions.fetch_add(1, Ordering::Relaxed);
            self.holds.total_ns.fetch_add(ns, Ordering::Relaxed);
            self.holds.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
    }

    fn stmt(&mut self, sql: &'static str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        self.stmts.insert(sql, s.clone());
        Ok(s)
    }

    /// At most one row of the prepared `sql`.
    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Option<postgres::Row>, postgres::Error> {
        let st = self.stmt(sql)?;
        self.client.query_opt(&st, params)
    }

    /// Every row of the prepared `sql`.
    fn query(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Vec<postgres::Row>, postgres::Error> {
        let st = self.stmt(sql)?;
        self.client.query(&st, params)
    }

    /// The prepared `sql` run; the number of rows it changed.
    fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, postgres::Error> {
        let st = self.stmt(sql)?;
        self.client.execute(&st, params)
    }
}

/// A store in a PostgreSQL database.
pub struct PgStore {
    /// The URL as given (it holds no password).
    url: String,
    config: Config,
    /// In clear or over verified TLS (`tls.rs`).
    tls: tls::Tls,
    options: PgOptions,
    /// The connection; `None` after it broke (reconnected on next use).
    conn: Mutex<Option<Conn>>,
    /// Transactions committed as decided before the head lock, and run
    /// again under it (`postgres/optimistic.rs`).
    decided: AtomicU64,
    rerun: AtomicU64,
    /// The guesses of optimistic transactions (`postgres/optimistic.rs`).
    guesses: Mutex<optimistic::Guesses>,
    holds: Arc<Holds>,
    /// Runs between the two phases of an optimistic transaction (tests).
    between: Mutex<Option<Arc<dyn Fn() + Send + Sync>>>,
}

/// The synchronous client closes its connection by blocking on a runtime
/// of its own, which panics on a thread that drives an async runtime (the
/// MCP proxy's store, dropped when a server fails to start): the
/// connection is closed on a thread of its own, waited for.
impl Drop for PgStore {
    fn drop(&mut self) {
        let conn = self
            .conn
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(conn) = conn {
            let closing = std::thread::Builder::new()
                .name("ipc-pg-close".into())
                .spawn(move || drop(conn));
            if let Ok(t) = closing {
                let _ = t.join();
            }
        }
    }
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.url)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Why one attempt at a transaction failed.
enum Failure {
    /// Serialization failure or deadlock: run the transaction again.
    Retry(String),
    /// Returned as is.
    Fail(StoreError),
    /// The connection was found closed before any body ran (the server
    /// restarted, or ended the session): connect again and start over.
    Reconnect(StoreError),
}

fn retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// A column of a row, typed; a row of another shape (a tampered table) is
/// an error, never a panic.
fn col<'a, T: postgres::types::FromSql<'a>>(
    r: &'a postgres::Row,
    i: usize,
) -> Result<T, StoreError> {
    r.try_get(i)
        .map_err(|e| StoreError::Backend(format!("postgresql: unexpected column {i}: {e}")))
}

/// The session is gone: the connection closed, or the server ended it
/// (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now,
/// class 08 connection exceptions).
fn session_lost(e: &postgres::Error) -> bool {
    e.is_closed()
        || e.code().is_some_and(|c| {
            let c = c.code();
            c.starts_with("57P0") || c.starts_with("08")
        })
}

fn backend(e: postgres::Error) -> StoreError {
    StoreError::Backend(pg_text(&e))
}

/// The server's message when there is one (the `Display` of a database
/// error is only "db error").
fn pg_text(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("postgresql: {} ({})", db.message(), db.code().code()),
        None => {
            // the client's own errors keep their detail in the source
            // ("invalid configuration": "password missing")
            let mut text = lower(&e.to_string());
            if let Some(source) = std::error::Error::source(e)
                && !text.contains(&source.to_string())
            {
                text = format!("{text}: {source}");
            }
            if text.contains("password missing") {
                text.push_str(&format!(
                    " (the server wants a password: put it in a file named by `{PASSWORD_FILE_ENV}`, or in `PGPASSWORD`)"
                ));
            }
            format!("postgresql: {text}")
        }
    }
}

impl PgStore {
    /// Opens the store at `url`, creating its tables if the schema has none.
    pub fn open(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, PgOptions::default(), true)
    }

    /// Opens an existing store; a schema without one is an error (for
    /// `ipc receipts`).
    pub fn open_existing(url: &str) -> Result<Self, StoreError> {
        Self::open_with(url, PgOptions::default(), false)
    }

    pub fn open_with(url: &str, options: PgOptions, create: bool) -> Result<Self, StoreError> {
        let (config, tls) = config(url, &options)?;
        let store = Self {
            url: url.to_string(),
            config,
            tls,
            options,
            conn: Mutex::new(None),
            decided: AtomicU64::new(0),
            rerun: AtomicU64::new(0),
            guesses: Mutex::new(optimistic::Guesses::default()),
            holds: Arc::new(Holds::default()),
            between: Mutex::new(None),
        };
        let mut guard = store.lock();
        let conn = store.connection(&mut guard)?;
        prepare_schema(&mut conn.client, create).map_err(|e| match e {
            SchemaError::Pg(e) => StoreError::Open {
                path: url.to_string(),
                reason: pg_text(&e),
            },
            SchemaError::Foreign(reason) => StoreError::Foreign {
                store: url.to_string(),
                reason,
            },
            SchemaError::Newer(found) => StoreError::NewerSchema {
                store: url.to_string(),
                found,
                supported: SCHEMA_VERSION,
            },
            SchemaError::Missing(reason) => StoreError::Open {
                path: url.to_string(),
                reason,
            },
        })?;
        drop(guard);
        Ok(store)
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs `hook` between the two phases of every optimistic transaction
    /// (after the decision, before the head lock): for tests that change
    /// the store there.
    #[doc(hidden)]
    pub fn set_between_phases(&self, hook: Option<Arc<dyn Fn() + Send + Sync>>) {
        *self.between.lock().unwrap_or_else(|e| e.into_inner()) = hook;
    }

    fn lock(&self) -> MutexGuard<'_, Option<Conn>> {
        // a panicking body is caught and its transaction rolled back
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection, (re)connecting when there is none or it closed.
    fn connection<'g>(
        &self,
        guard: &'g mut MutexGuard<'_, Option<Conn>>,
    ) -> Result<&'g mut Conn, StoreError> {
        if guard.as_ref().is_some_and(|c| c.client.is_closed()) {
            **guard = None;
        }
        if guard.is_none() {
            let client = match &self.tls {
                tls::Tls::Off => self.config.connect(NoTls),
                tls::Tls::Verified(t) => self.config.connect(t.clone()),
            };
            let client = client.map_err(|e| StoreError::Open {
                path: self.url.clone(),
                reason: pg_text(&e),
            })?;
            **guard = Some(Conn {
                client,
                stmts: HashMap::new(),
                table_stmts: HashMap::new(),
                locked_at: None,
                holds: self.holds.clone(),
            });
        }
        guard
            .as_mut()
            .ok_or_else(|| StoreError::Backend("no connection".into()))
    }

    /// Runs `bodies` in one transaction (each in a savepoint when
    /// `savepoints`), retrying the whole on a serialization failure.
    fn run(
        &self,
        bodies: &mut [&mut TxFn<'_>],
        savepoints: bool,
    ) -> Result<Vec<Result<Value, StoreError>>, StoreError> {
        self.attempts(|conn| attempt_once(conn, bodies, savepoints))
    }

    /// Runs `attempt` on the connection until it succeeds: again from the
    /// start after a serialization failure or a deadlock (up to
    /// `max_retries`), once more on a new connection when the session was
    /// found lost before any body ran; the open transaction is rolled back
    /// after every failure.
    fn attempts<T>(
        &self,
        mut attempt: impl FnMut(&mut Conn) -> Result<T, Failure>,
    ) -> Result<T, StoreError> {
        let mut guard = self.lock();
        let mut tries = 0u32;
        let mut reconnected = false;
        loop {
            let conn = self.connection(&mut guard)?;
            let outcome = catch_unwind(AssertUnwindSafe(|| attempt(conn)));
            let outcome = match outcome {
                Ok(o) => o,
                Err(panic) => {
                    // the transaction is rolled back with the connection
                    *guard = None;
                    drop(guard);
                    resume_unwind(panic);
                }
            };
            match outcome {
                Ok(results) => return Ok(results),
                Err(failure) => {
                    // whatever state the session is in, end the transaction
                    let broken = match guard.as_mut() {
                        Some(c) => {
                            let broken = c.client.batch_execute("ROLLBACK").is_err();
                            c.released();
                            broken
                        }
                        None => true,
                    };
                    if broken {
                        *guard = None;
                    }
                    match failure {
                        Failure::Retry(_) if tries < self.options.max_retries => {
                            tries += 1;
                            let pause = Duration::from_millis(u64::from(tries.min(10)) * 2);
                            std::thread::sleep(pause);
                        }
                        Failure::Retry(reason) => {
                            return Err(StoreError::Backend(format!(
                                "gave up after {} serialization failures: {reason}",
                                tries + 1
                            )));
                        }
                        Failure::Reconnect(_) if !reconnected => {
                            reconnected = true;
                            *guard = None;
                        }
                        // the session was lost under a body, before its
                        // `COMMIT` was sent (the server died, a failover):
                        // nothing of it committed, so it runs once more
                        // from the start on a new connection (to whichever
                        // host is now the primary); never after a `COMMIT`
                        // whose outcome is unknown
                        Failure::Fail(e)
                            if broken
                                && !reconnected
                                && !matches!(e, StoreError::CommitUnknown(_)) =>
                        {
                            reconnected = true;
                        }
                        Failure::Reconnect(e) | Failure::Fail(e) => return Err(e),
                    }
                }
            }
        }
    }
}

/// A failure of a statement of the transaction: a serialization failure
/// or a deadlock is retried, anything else returned.
fn fail(e: postgres::Error) -> Failure {
    if retryable(&e) {
        Failure::Retry(pg_text(&e))
    } else {
        Failure::Fail(backend(e))
    }
}

/// Runs `sql` (transaction control) at the start of an attempt: a session
/// found lost there is reconnected (nothing has run yet).
fn begin(conn: &mut Conn, sql: &str) -> Result<(), Failure> {
    conn.client.batch_execute(sql).map_err(|e| {
        if session_lost(&e) || conn.client.is_closed() {
            Failure::Reconnect(backend(e))
        } else {
            fail(e)
        }
    })
}

/// Starts a writer's transaction: the head lock first, so that the
/// snapshot, taken by the first query after it (`LOCK` takes none), holds
/// every writer's commit before.
const BEGIN_LOCKED: &str =
    "BEGIN ISOLATION LEVEL REPEATABLE READ; LOCK TABLE ipc_head IN EXCLUSIVE MODE";

/// One attempt: `BEGIN`, the head lock, the bodies, `COMMIT`.
fn attempt_once(
    conn: &mut Conn,
    bodies: &mut [&mut TxFn<'_>],
    savepoints: bool,
) -> Result<Vec<Result<Value, StoreError>>, Failure> {
    attempt_once_as(conn, bodies, savepoints, false)
}

/// [`attempt_once`]; `written`: committed with `synchronous_commit = off`
/// ([`Store::transaction_written`]): acknowledged once in the server's WAL
/// buffers, flushed by the WAL writer or the next synchronous commit (a
/// crash of the server can lose only such a tail, never a decision).
fn attempt_once_as(
    conn: &mut Conn,
    bodies: &mut [&mut TxFn<'_>],
    savepoints: bool,
    written: bool,
) -> Result<Vec<Result<Value, StoreError>>, Failure> {
    begin(conn, BEGIN_LOCKED)?;
    conn.locked();
    if written {
        conn.client
            .batch_execute("SET LOCAL synchronous_commit = off")
            .map_err(fail)?;
    }
    let mut head = Head::default();
    let results = run_bodies(conn, &mut head, bodies, savepoints)?;
    commit(conn, &head)?;
    Ok(results)
}

/// Runs the bodies inside the open transaction (which holds the head
/// lock), each in a savepoint when `savepoints`.
fn run_bodies(
    conn: &mut Conn,
    head: &mut Head,
    bodies: &mut [&mut TxFn<'_>],
    savepoints: bool,
) -> Result<Vec<Result<Value, StoreError>>, Failure> {
    let mut results = Vec::with_capacity(bodies.len());
    for f in bodies.iter_mut() {
        if savepoints {
            conn.client.batch_execute("SAVEPOINT tx").map_err(fail)?;
        }
        let saved = head.clone();
        let mut retry = None;
        let result = {
            let mut tx = PgTx {
                conn: &mut *conn,
                head: &mut *head,
                retry: &mut retry,
            };
            f(&mut tx)
        };
        if let Some(reason) = retry {
            return Err(Failure::Retry(reason));
        }
        match result {
            Ok(v) => {
                if savepoints {
                    conn.client.batch_execute("RELEASE tx").map_err(fail)?;
                }
                results.push(Ok(v));
            }
            Err(e) if savepoints => {
                *head = saved;
                conn.client
                    .batch_execute("ROLLBACK TO tx; RELEASE tx")
                    .map_err(fail)?;
                results.push(Err(e));
            }
            // one body without a savepoint: its error rolls back the lot
            Err(e) => return Err(Failure::Fail(e)),
        }
    }
    Ok(results)
}

/// Writes the head (when the transaction moved it) and commits.
fn commit(conn: &mut Conn, head: &Head) -> Result<(), Failure> {
    write_head(conn, head).map_err(fail)?;
    let done = conn.client.batch_execute("COMMIT");
    conn.released();
    done.map_err(|e| {
        if retryable(&e) {
            Failure::Retry(pg_text(&e))
        } else if session_lost(&e) || conn.client.is_closed() {
            // sent, never answered: the server may have committed it
            Failure::Fail(StoreError::CommitUnknown(pg_text(&e)))
        } else {
            Failure::Fail(StoreError::Backend(format!(
                "commit failed: {}",
                pg_text(&e)
            )))
        }
    })
}

fn write_head(conn: &mut Conn, head: &Head) -> Result<(), postgres::Error> {
    if let (true, Some(Some((seq, hash)))) = (head.dirty, &head.known) {
        let seq = i64::try_from(*seq).unwrap_or(i64::MAX);
        let st = conn.stmt(
            "INSERT INTO ipc_head (id, seq, hash) VALUES (1, $1, $2)
             ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash",
        )?;
        conn.client.execute(&st, &[&seq, hash])?;
    }
    Ok(())
}

impl Store for PgStore {
    /// Decides before the head lock and checks under it
    /// (`postgres/optimistic.rs`): processes decide side by side and take turns
    /// only to check and write.
    fn transaction_linked(&self, f: &mut TxFn<'_>) -> Result<(Value, Vec<Relink>), StoreError> {
        let between = self
            .between
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut guesses = self.guesses.lock().unwrap_or_else(|e| e.into_inner());
        let (value, relinks, path) =
            self.attempts(|conn| optimistic::attempt(conn, f, between.as_deref(), &mut guesses))?;
        match path {
            optimistic::Path::Decided => self.decided.fetch_add(1, Ordering::Relaxed),
            optimistic::Path::Rerun => self.rerun.fetch_add(1, Ordering::Relaxed),
        };
        Ok((value, relinks))
    }

    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        let mut bodies: [&mut TxFn<'_>; 1] = [f];
        self.run(&mut bodies, false)?
            .pop()
            .unwrap_or_else(|| Err(StoreError::Backend("no result".into())))
    }

    fn transaction_written(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        let mut bodies: [&mut TxFn<'_>; 1] = [f];
        self.attempts(|conn| attempt_once_as(conn, &mut bodies, false, true))?
            .pop()
            .unwrap_or_else(|| Err(StoreError::Backend("no result".into())))
    }

    fn transactions(&self, fs: &mut [&mut TxFn<'_>]) -> Vec<Result<Value, StoreError>> {
        if fs.is_empty() {
            return Vec::new();
        }
        match self.run(fs, true) {
            Ok(results) => results,
            Err(e) => {
                let reason = e.to_string();
                fs.iter()
                    .map(|_| Err(StoreError::Backend(reason.clone())))
                    .collect()
            }
        }
    }

    fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
        Ok(self.snapshot()?.records())
    }

    fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
        let (sql, params): (&'static str, Vec<i64>) = match range {
            ReceiptRange::Last { limit: n } => (
                "SELECT seq::text, prev_hash::text, hash::text, body::text FROM
                 (SELECT * FROM ipc_receipts ORDER BY seq DESC LIMIT $1) AS r ORDER BY seq",
                vec![rows::param(n)],
            ),
            ReceiptRange::After { seq, limit: n } => (
                "SELECT seq::text, prev_hash::text, hash::text, body::text
                 FROM ipc_receipts WHERE seq > $1 ORDER BY seq LIMIT $2",
                vec![rows::param(seq), rows::param(n)],
            ),
        };
        let params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            params.iter().map(|p| p as _).collect();
        let mut guard = self.lock();
        let mut reconnected = false;
        loop {
            let conn = self.connection(&mut guard)?;
            let read = conn
                .stmt(sql)
                .and_then(|st| conn.client.query(&st, &params));
            match read {
                Ok(rows) => {
                    return Ok(rows
                        .iter()
                        .map(|r| {
                            rows::receipt(
                                txt(r, 0).parse().unwrap_or(0),
                                txt(r, 1),
                                txt(r, 2),
                                txt(r, 3),
                            )
                        })
                        .collect());
                }
                // a session the server ended (a restart): once more on a new one
                Err(e) if session_lost(&e) && !reconnected => {
                    reconnected = true;
                    *guard = None;
                }
                Err(e) => return Err(backend(e)),
            }
        }
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        let mut guard = self.lock();
        let conn = self.connection(&mut guard)?;
        let row = conn
            .client
            .query_opt("SELECT seq, hash FROM ipc_head WHERE id = 1", &[])
            .map_err(backend)?;
        row.map(|r| Ok(rows::shown_head(col(&r, 0)?, col(&r, 1)?)))
            .transpose()
    }

    fn registry_tables(&self) -> bool {
        true
    }

    /// Transactions of [`Store::transaction_linked`] committed as decided
    /// before the head lock, and run again under it because a value they
    /// read had changed (`postgres/optimistic.rs`).
    fn optimistic_counts(&self) -> Option<(u64, u64)> {
        Some((
            self.decided.load(Ordering::Relaxed),
            self.rerun.load(Ordering::Relaxed),
        ))
    }

    fn head_lock_hold(&self) -> Option<HeadLockHold> {
        let ns = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
        Some(HeadLockHold {
            transactions: self.holds.transactions.load(Ordering::Relaxed),
            total: ns(&self.holds.total_ns),
            max: ns(&self.holds.max_ns),
        })
    }

    fn rows(&self) -> Result<crate::store::Rows, StoreError> {
        let mut guard = self.lock();
        let conn = self.connection(&mut guard)?;
        conn.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(backend)?;
        let rows = crate::store::export::pg_read(&mut conn.client);
        let end = conn.client.batch_execute("COMMIT");
        if end.is_err() {
            *guard = None;
        }
        let rows = rows?;
        end.map_err(backend)?;
        Ok(rows)
    }

    fn snapshot(&self) -> Result<Snapshot, StoreError> {
        let mut guard = self.lock();
        let conn = self.connection(&mut guard)?;
        conn.client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .map_err(backend)?;
        let snap = read_snapshot(&mut conn.client);
        let end = conn.client.batch_execute("COMMIT");
        if end.is_err() {
            *guard = None;
        }
        let snap = snap.map_err(backend)?;
        end.map_err(backend)?;
        Ok(snap)
    }
}
