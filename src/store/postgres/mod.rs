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
//! through the [`Tx`]); it is never turned into a decision.
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

mod names;
mod optimistic;
mod tls;

pub use names::{is_url, quote_table, redact};

use super::{
    Accounts, ChainLink, HeadLockHold, ReceiptRange, ReceiptRecord, RegistryRow, Relink, Snapshot,
    Spent, Store, StoreError, StoredReceipt, Tx, TxFn,
};
use crate::canonical::Jcs;
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
/// Advisory lock key serialising schema creation ("IPCS").
const SCHEMA_LOCK: i64 = 0x4950_4353;

/// Every table of the store, `ipc_meta` first.
const TABLES: [&str; 8] = [
    "ipc_meta",
    "ipc_budgets",
    "ipc_nonces",
    "ipc_executions",
    "ipc_revocations",
    "ipc_state",
    "ipc_receipts",
    "ipc_head",
];

const SCHEMA: &str = r#"
CREATE TABLE ipc_meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ipc_budgets (
    mandate_id TEXT COLLATE "C" PRIMARY KEY,
    amount     BIGINT NOT NULL,
    calls      BIGINT NOT NULL
);
CREATE TABLE ipc_nonces (nonce TEXT COLLATE "C" PRIMARY KEY);
CREATE TABLE ipc_executions (op_hash TEXT COLLATE "C" PRIMARY KEY, result TEXT NOT NULL);
CREATE TABLE ipc_revocations (token_id TEXT COLLATE "C" PRIMARY KEY);
CREATE TABLE ipc_state (
    ns   TEXT COLLATE "C" NOT NULL,
    key  TEXT COLLATE "C" NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE TABLE ipc_receipts (
    seq       BIGINT PRIMARY KEY,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE TABLE ipc_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL
);
"#;

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
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            max_retries: 20,
            connect_timeout: Duration::from_secs(10),
            lock_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: Duration::from_secs(2),
        }
    }
}

/// The session bounds ([`PgOptions::lock_timeout`],
/// [`PgOptions::idle_in_transaction_timeout`]) added to the connection's
/// `options` (`-c name=ms`), each unless the URL's `options` set it.
fn session_bounds(c: &mut Config, options: &PgOptions) {
    let given = c.get_options().unwrap_or_default().to_string();
    let mut out = given.clone();
    for (name, d) in [
        ("lock_timeout", options.lock_timeout),
        (
            "idle_in_transaction_session_timeout",
            options.idle_in_transaction_timeout,
        ),
    ] {
        if !given.contains(name) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("-c {name}={}", d.as_millis()));
        }
    }
    c.options(&out);
}

/// Parses the URL (refusing a password in it) and adds the password from
/// the environment, a default user and timeouts.
fn config(url: &str, options: &PgOptions) -> Result<(Config, tls::Tls), StoreError> {
    let shown = redact(url);
    let (rest, tls_params) = tls::split(url);
    let mut c: Config = rest
        .parse()
        .map_err(|e: postgres::Error| StoreError::Open {
            path: shown.clone(),
            reason: format!("invalid postgresql url: {}", lower(&e.to_string())),
        })?;
    if c.get_password().is_some() {
        return Err(StoreError::PasswordInUrl { url: shown });
    }
    let tls = tls::choose(&shown, &mut c, tls_params)?;
    if let Some(file) = std::env::var_os(PASSWORD_FILE_ENV) {
        let text = std::fs::read_to_string(&file).map_err(|e| StoreError::Open {
            path: shown.clone(),
            reason: format!(
                "cannot read the password file `{}` (`{PASSWORD_FILE_ENV}`): {}",
                std::path::Path::new(&file).display(),
                lower(&e.to_string())
            ),
        })?;
        let password = text.lines().next().unwrap_or("");
        c.password(password);
    } else if let Ok(p) = std::env::var("PGPASSWORD") {
        c.password(p);
    }
    if c.get_user().is_none()
        && let Some(u) = ["PGUSER", "USER"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
    {
        c.user(&u);
    }
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(options.connect_timeout);
    }
    if c.get_application_name().is_none() {
        c.application_name("ipc");
    }
    session_bounds(&mut c, options);
    Ok((c, tls))
}

fn lower(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

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

enum SchemaError {
    Pg(postgres::Error),
    Foreign(String),
    Newer(i64),
    Missing(String),
}

impl From<postgres::Error> for SchemaError {
    fn from(e: postgres::Error) -> Self {
        SchemaError::Pg(e)
    }
}

/// Checks the schema, creating it when allowed and absent; all in one
/// transaction under an advisory lock.
fn prepare_schema(client: &mut Client, create: bool) -> Result<(), SchemaError> {
    client.batch_execute("BEGIN")?;
    let r = check_or_create(client, create);
    match r {
        Ok(()) => {
            client.batch_execute("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK");
            Err(e)
        }
    }
}

fn check_or_create(client: &mut Client, create: bool) -> Result<(), SchemaError> {
    client.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let schema = txt(&client.query_one("SELECT current_schema()::text", &[])?, 0);
    if schema.is_empty() {
        return Err(SchemaError::Missing(
            "no schema to use: none of the `search_path` schemas exists".into(),
        ));
    }
    let present: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
               AND c.relname = ANY($2)",
            &[&schema, &TABLES.to_vec()],
        )?
        .iter()
        .map(|r| txt(r, 0))
        .collect();
    if present.iter().any(|t| t == "ipc_meta") {
        let rows = client
            .query("SELECT key::text, value::text FROM ipc_meta", &[])
            .map_err(|e| {
                SchemaError::Foreign(format!(
                    "schema `{schema}` has an `ipc_meta` table that is not intentplane's ({})",
                    pg_text(&e)
                ))
            })?;
        let meta: HashMap<String, String> = rows.iter().map(|r| (txt(r, 0), txt(r, 1))).collect();
        if meta.get("application").map(String::as_str) != Some(APPLICATION) {
            return Err(SchemaError::Foreign(format!(
                "schema `{schema}` belongs to another application (`ipc_meta` has no `application = {APPLICATION}`)"
            )));
        }
        let version: i64 = meta
            .get("schema_version")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                SchemaError::Foreign(format!(
                    "schema `{schema}`: `ipc_meta` has no readable `schema_version`"
                ))
            })?;
        if version > SCHEMA_VERSION {
            return Err(SchemaError::Newer(version));
        }
        if version < SCHEMA_VERSION {
            // version 1 is the first: there is nothing older to migrate
            return Err(SchemaError::Foreign(format!(
                "schema `{schema}`: unknown schema version {version}"
            )));
        }
        if let Some(missing) = TABLES.iter().find(|t| !present.iter().any(|p| p == *t)) {
            return Err(SchemaError::Missing(format!(
                "schema `{schema}` is an intentplane store without its table `{missing}`"
            )));
        }
        return Ok(());
    }
    if let Some(t) = present.first() {
        return Err(SchemaError::Foreign(format!(
            "schema `{schema}` has a table `{t}` but no intentplane marker (`ipc_meta`): another application's"
        )));
    }
    if !create {
        return Err(SchemaError::Missing(format!(
            "not an intentplane store: schema `{schema}` has no `ipc_meta` table"
        )));
    }
    client.batch_execute(SCHEMA)?;
    client.execute(
        "INSERT INTO ipc_meta (key, value) VALUES ('application', $1), ('schema_version', $2)",
        &[&APPLICATION, &SCHEMA_VERSION.to_string()],
    )?;
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
        let limit = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let (sql, params): (&'static str, Vec<i64>) = match range {
            ReceiptRange::Last { limit: n } => (
                "SELECT seq::text, prev_hash::text, hash::text, body::text FROM
                 (SELECT * FROM ipc_receipts ORDER BY seq DESC LIMIT $1) AS r ORDER BY seq",
                vec![limit(n)],
            ),
            ReceiptRange::After { seq, limit: n } => (
                "SELECT seq::text, prev_hash::text, hash::text, body::text
                 FROM ipc_receipts WHERE seq > $1 ORDER BY seq LIMIT $2",
                vec![i64::try_from(seq).unwrap_or(i64::MAX), limit(n)],
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
                            StoredReceipt {
                                seq: txt(r, 0).parse().unwrap_or(0),
                                prev_hash: txt(r, 1),
                                hash: txt(r, 2),
                                body: txt(r, 3),
                                body_storage: None,
                            }
                            .record()
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
        row.map(|r| Ok((u64::try_from(col::<i64>(&r, 0)?).unwrap_or(0), col(&r, 1)?)))
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

/// A column read leniently, as text (`::text` in the query): whatever a
/// tampered table holds, a snapshot reads it and `verify_store` judges it.
fn txt(r: &postgres::Row, i: usize) -> String {
    r.try_get::<_, Option<String>>(i)
        .ok()
        .flatten()
        .unwrap_or_default()
}

fn read_snapshot(client: &mut Client) -> Result<Snapshot, postgres::Error> {
    let receipts = client
        .query(
            "SELECT seq::text, prev_hash::text, hash::text, body::text, pg_typeof(body)::text
             FROM ipc_receipts ORDER BY ipc_receipts.seq",
            &[],
        )?
        .iter()
        .map(|r| {
            let storage = txt(r, 4);
            StoredReceipt {
                seq: txt(r, 0).parse().unwrap_or(0),
                prev_hash: txt(r, 1),
                hash: txt(r, 2),
                body: txt(r, 3),
                body_storage: (storage != "text").then_some(storage),
            }
        })
        .collect();
    let head = client
        .query_opt(
            "SELECT seq::text, hash::text FROM ipc_head WHERE id = 1",
            &[],
        )?
        .map(|r| (txt(&r, 0).parse().unwrap_or(0), txt(&r, 1)));
    let mut accounts = Accounts::default();
    for r in client.query(
        "SELECT mandate_id::text, amount::text, calls::text FROM ipc_budgets",
        &[],
    )? {
        accounts.budgets.insert(
            txt(&r, 0),
            Spent {
                // an amount that is not a number (tampered) is no receipt's sum
                amount: txt(&r, 1).parse().unwrap_or(i64::MIN),
                // nor is a negative count
                calls: txt(&r, 2).parse().unwrap_or(u64::MAX),
            },
        );
    }
    for r in client.query("SELECT nonce::text FROM ipc_nonces", &[])? {
        accounts.nonces.insert(txt(&r, 0));
    }
    for r in client.query("SELECT op_hash::text FROM ipc_executions", &[])? {
        accounts.executions.insert(txt(&r, 0));
    }
    Ok(Snapshot {
        receipts,
        head,
        accounts,
    })
}

/// The chain's head as the open transaction sees it: read once after the
/// lock, written once before `COMMIT`. With it, the revocations and
/// budgets the transaction has read or written: while it holds the head
/// lock no other writer can change them (every writer takes the lock
/// first), so a batch of decisions under one mandate reads each once
/// instead of once per decision (two round trips of seven).
#[derive(Clone, Debug, Default)]
struct Head {
    known: Option<Option<(u64, String)>>,
    dirty: bool,
    revoked: HashMap<String, bool>,
    spent: HashMap<String, Spent>,
}

/// The operations of one transaction body.
struct PgTx<'c> {
    conn: &'c mut Conn,
    head: &'c mut Head,
    /// Set when the server aborted the transaction with a serialization
    /// failure or a deadlock: the body's result is discarded and the
    /// transaction run again.
    retry: &'c mut Option<String>,
}

impl PgTx<'_> {
    fn err(&mut self, e: postgres::Error) -> StoreError {
        if retryable(&e) {
            *self.retry = Some(pg_text(&e));
        }
        backend(e)
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, StoreError> {
        let st = self.conn.stmt(sql).map_err(|e| self.err(e))?;
        self.conn
            .client
            .query_opt(&st, params)
            .map_err(|e| self.err(e))
    }

    fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let st = self.conn.stmt(sql).map_err(|e| self.err(e))?;
        self.conn
            .client
            .execute(&st, params)
            .map_err(|e| self.err(e))
    }

    fn json(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<Value>, StoreError> {
        let row = self.query_opt(sql, params)?;
        row.map(|r| {
            let text: String = col(&r, 0)?;
            serde_json::from_str(&text)
                .map_err(|e| StoreError::Backend(format!("stored json is invalid: {e}")))
        })
        .transpose()
    }
}

fn to_i64(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("`{n}` does not fit the store")))
}

fn to_json_text(v: &Value) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(e.to_string()))
}

/// One read of a registry table ([`Tx::registry_rows`]): its query and
/// parameters, comparable (an optimistic transaction re-reads each one
/// under the head lock, `optimistic`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct RegistryRead {
    table: String,
    sql: String,
    owner: String,
    keyed: bool,
    key: Option<String>,
}

enum RegistryFailure {
    /// The statement failed (a missing table, a serialization failure).
    Pg(postgres::Error),
    /// A row of the wrong shape.
    Store(StoreError),
}

impl RegistryRead {
    fn new(table: &str, owner: &str, keyed: bool, key: Option<&str>) -> Result<Self, StoreError> {
        let quoted = quote_table(table).ok_or_else(|| {
            StoreError::Backend(format!(
                "`{table}` is not a table name (`name` or `schema.name`)"
            ))
        })?;
        let key = key.filter(|_| keyed);
        let sql = match (keyed, key.is_some()) {
            (true, true) => format!(
                "SELECT key::text, NULL::text, record::text FROM {quoted} WHERE owner = $1 AND key = $2"
            ),
            (true, false) => {
                format!("SELECT key::text, NULL::text, record::text FROM {quoted} WHERE owner = $1")
            }
            _ => format!("SELECT value::text, id::text, NULL::text FROM {quoted} WHERE owner = $1"),
        };
        Ok(Self {
            table: table.to_string(),
            sql,
            owner: owner.to_string(),
            keyed,
            key: key.map(str::to_string),
        })
    }

    /// Reads the rows in the open transaction, in a savepoint: a table
    /// that is missing or of another shape fails this read (the gateway
    /// denies), not the whole transaction.
    fn run(&self, conn: &mut Conn) -> Result<Vec<RegistryRow>, RegistryFailure> {
        conn.client
            .batch_execute("SAVEPOINT registry")
            .map_err(RegistryFailure::Pg)?;
        let read = (|| -> Result<Vec<postgres::Row>, postgres::Error> {
            let st = match conn.table_stmts.get(&self.sql) {
                Some(s) => s.clone(),
                None => {
                    let s = conn.client.prepare(&self.sql)?;
                    conn.table_stmts.insert(self.sql.clone(), s.clone());
                    s
                }
            };
            match &self.key {
                Some(k) => conn.client.query(&st, &[&self.owner, k]),
                None => conn.client.query(&st, &[&self.owner]),
            }
        })();
        let end = if read.is_ok() {
            "RELEASE registry"
        } else {
            "ROLLBACK TO registry; RELEASE registry"
        };
        conn.client
            .batch_execute(end)
            .map_err(RegistryFailure::Pg)?;
        let rows = read.map_err(RegistryFailure::Pg)?;
        self.records(&rows).map_err(RegistryFailure::Store)
    }

    fn records(&self, rows: &[postgres::Row]) -> Result<Vec<RegistryRow>, StoreError> {
        let (table, owner, keyed) = (&self.table, &self.owner, self.keyed);
        let bad = |what: String| StoreError::Backend(format!("registry table `{table}`: {what}"));
        rows.iter()
            .map(|r| {
                let key: Option<String> = col(r, 0)?;
                let key = key.ok_or_else(|| {
                    bad(format!(
                        "a row of `{owner}` has no {}",
                        if keyed { "key" } else { "value" }
                    ))
                })?;
                let record = match col::<Option<String>>(r, 2)? {
                    Some(text) => Some(
                        serde_json::from_str(&text)
                            .map_err(|e| bad(format!("record `{key}` is not json: {e}")))?,
                    ),
                    None if keyed => return Err(bad(format!("record `{key}` is null"))),
                    None => None,
                };
                Ok(RegistryRow {
                    key,
                    id: col(r, 1)?,
                    record,
                })
            })
            .collect()
    }
}

/// The chain's head as the head marker records it.
const HEAD_SQL: &str = "SELECT seq, hash FROM ipc_head WHERE id = 1";
/// One key's row, as both kinds of transaction read it (`PgTx`, and
/// `optimistic` before the lock).
const SPENT_SQL: &str = "SELECT amount, calls FROM ipc_budgets WHERE mandate_id = $1";
const NONCE_SQL: &str = "SELECT 1 FROM ipc_nonces WHERE nonce = $1";
const EXECUTED_SQL: &str = "SELECT result FROM ipc_executions WHERE op_hash = $1";
const REVOKED_SQL: &str = "SELECT 1 FROM ipc_revocations WHERE token_id = $1";
const STATE_SQL: &str = "SELECT json FROM ipc_state WHERE ns = $1 AND key = $2";

/// A budget row (`amount`, `calls` first), or nothing spent without one.
fn spent_of(row: Option<&postgres::Row>) -> Result<Spent, StoreError> {
    Ok(match row {
        Some(r) => Spent {
            amount: col(r, 0)?,
            calls: u64::try_from(col::<i64>(r, 1)?).unwrap_or(0),
        },
        None => Spent::default(),
    })
}

fn head_of(row: Option<postgres::Row>) -> Result<Option<(u64, String)>, StoreError> {
    row.map(|r| {
        let seq: i64 = col(&r, 0)?;
        Ok((
            u64::try_from(seq)
                .map_err(|_| StoreError::Backend(format!("head marker has seq `{seq}`")))?,
            col::<String>(&r, 1)?,
        ))
    })
    .transpose()
}

impl Tx for PgTx<'_> {
    fn registry_rows(
        &mut self,
        table: &str,
        owner: &str,
        keyed: bool,
        key: Option<&str>,
    ) -> Result<Vec<RegistryRow>, StoreError> {
        let read = RegistryRead::new(table, owner, keyed, key)?;
        read.run(self.conn).map_err(|e| match e {
            RegistryFailure::Pg(e) => {
                let e = self.err(e);
                StoreError::Backend(format!("registry table `{table}`: {e}"))
            }
            RegistryFailure::Store(e) => e,
        })
    }

    fn spent(&mut self, mandate_id: &str) -> Result<Spent, StoreError> {
        if let Some(s) = self.head.spent.get(mandate_id) {
            return Ok(*s);
        }
        let row = self.query_opt(SPENT_SQL, &[&mandate_id])?;
        let spent = spent_of(row.as_ref())?;
        self.head.spent.insert(mandate_id.to_string(), spent);
        Ok(spent)
    }

    fn spend(&mut self, mandate_id: &str, amount: i64) -> Result<Spent, StoreError> {
        // one round trip: add in the database (BIGINT overflow is an
        // error there, 22003, as `checked_add` is in the other stores)
        let row = self.query_opt(
            "INSERT INTO ipc_budgets (mandate_id, amount, calls) VALUES ($1, $2, 1)
             ON CONFLICT (mandate_id) DO UPDATE
             SET amount = ipc_budgets.amount + EXCLUDED.amount, calls = ipc_budgets.calls + 1
             RETURNING amount, calls",
            &[&mandate_id, &amount],
        );
        let row = match row {
            Err(StoreError::Backend(e)) if e.contains("(22003)") => {
                return Err(StoreError::Backend(format!(
                    "budget of `{mandate_id}` overflows"
                )));
            }
            other => other?,
        };
        let row = row.ok_or_else(|| StoreError::Backend("no budget row returned".into()))?;
        let spent = Spent {
            amount: col(&row, 0)?,
            calls: u64::try_from(col::<i64>(&row, 1)?).unwrap_or(0),
        };
        self.head.spent.insert(mandate_id.to_string(), spent);
        Ok(spent)
    }

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        Ok(self.query_opt(NONCE_SQL, &[&nonce])?.is_some())
    }

    fn use_nonce(&mut self, nonce: &str) -> Result<(), StoreError> {
        let n = self.execute(
            "INSERT INTO ipc_nonces (nonce) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&nonce],
        )?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!(
                "nonce `{nonce}` was already used"
            )))
        }
    }

    fn executed(&mut self, op_hash: &str) -> Result<Option<Value>, StoreError> {
        self.json(EXECUTED_SQL, &[&op_hash])
    }

    fn record_execution(&mut self, op_hash: &str, result: &Value) -> Result<(), StoreError> {
        let text = to_json_text(result)?;
        let n = self.execute(
            "INSERT INTO ipc_executions (op_hash, result) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&op_hash, &text],
        )?;
        if n == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict(format!(
                "operation `{op_hash}` was already executed"
            )))
        }
    }

    fn revoked(&mut self, token_id: &str) -> Result<bool, StoreError> {
        if let Some(r) = self.head.revoked.get(token_id) {
            return Ok(*r);
        }
        let revoked = self.query_opt(REVOKED_SQL, &[&token_id])?.is_some();
        self.head.revoked.insert(token_id.to_string(), revoked);
        Ok(revoked)
    }

    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO ipc_revocations (token_id) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&token_id],
        )?;
        self.head.revoked.insert(token_id.to_string(), true);
        Ok(())
    }

    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.json(STATE_SQL, &[&ns, &key])
    }

    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let text = to_json_text(value)?;
        self.execute(
            "INSERT INTO ipc_state (ns, key, json) VALUES ($1, $2, $3)
             ON CONFLICT (ns, key) DO UPDATE SET json = EXCLUDED.json",
            &[&ns, &key, &text],
        )?;
        Ok(())
    }

    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
        if self.head.known.is_none() {
            let row = self.query_opt(HEAD_SQL, &[])?;
            self.head.known = Some(head_of(row)?);
        }
        let prev = match &self.head.known {
            Some(Some((seq, hash))) => Some((*seq, hash.as_str())),
            _ => None,
        };
        let link = ChainLink::next(prev, body);
        let seq = to_i64(link.seq)?;
        self.execute(
            "INSERT INTO ipc_receipts (seq, prev_hash, hash, body) VALUES ($1, $2, $3, $4)",
            &[&seq, &link.prev_hash, &link.hash, &body.as_str()],
        )?;
        self.head.known = Some(Some((link.seq, link.hash.clone())));
        self.head.dirty = true;
        Ok(link)
    }
}
