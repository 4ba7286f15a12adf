//! Decisions taken before the head lock and checked under it
//! ([`Store::transaction_linked`](crate::store::Store::transaction_linked)
//! on PostgreSQL): what lets several gateway processes on one database
//! decide at the same time instead of taking turns.
//!
//! **Phase 1, no lock.** The body runs in a `REPEATABLE READ READ ONLY`
//! transaction against an [`OptimisticTx`]: every value it reads from the
//! store's tables (a budget, a nonce, an executed operation, a revocation,
//! a system-of-record entry, a registry table's rows) is read once and
//! kept as read; every write is kept in memory, and later reads of the
//! body see it (as in any [`Tx`]); receipts are chained from a provisional
//! head. Nothing is written, so processes do this part side by side.
//! Budgets and registry rows are read when the body asks (one statement
//! per mandate or registry read); a nonce, an executed operation, a
//! revocation or a system-of-record entry is *guessed* (absent, unless
//! this connection found it present before), and after the body all its
//! guesses are checked in the same snapshot in one statement
//! ([`current`]). Where a guess was wrong (a replayed operation, a
//! revoked mandate), the body runs again with the values found, so what
//! phase 1 hands on has read the snapshot's values only; after
//! [`GUESS_RUNS`] runs it reads key by key. A batch of 256 decisions
//! costs a few statements instead of a few per decision.
//!
//! **Phase 2, under the lock.** The writer's transaction of every store
//! transaction (`BEGIN ISOLATION LEVEL REPEATABLE READ; LOCK TABLE
//! ipc_head IN EXCLUSIVE MODE`, its snapshot taken after the lock) reads
//! again every key phase 1 read and the head marker, in one statement
//! (`= ANY`, [`current`]). If each still holds what phase 1 read, the
//! body run now would read the same values and so decide the same (a
//! body acts only through its `Tx`, and its clock is fixed before the
//! transaction): its writes are applied as they are, in one statement
//! for every table ([`APPLY_SQL`]), the receipts linked after the head
//! read under the lock, and the transaction commits: three round trips
//! while the lock is held (check, write, `COMMIT`). If any value
//! changed (another instance spent the same budget, paid the same invoice,
//! used the same approval), or phase 1 met any error, the body is run
//! again inside this same locked transaction, exactly as
//! [`Store::transaction`] runs it: the decision that commits is always one
//! taken on the state it commits on. A write phase 1 made without reading
//! (a system-of-record entry put, a revocation) needs no check: under the
//! lock it lands as the body meant it.
//!
//! The links the body saw are provisional (chained from no head); those
//! committed elsewhere are returned with them ([`Relink`]) for the caller
//! to report.

use super::{
    BEGIN_LOCKED, Conn, EXECUTED_SQL, Failure, Head, NONCE_SQL, Param, REVOKED_SQL,
    RegistryFailure, RegistryRead, SPENT_SQL, STATE_SQL, backend, begin, col, commit, fail,
    retryable, run_bodies, spent_of, to_i64, to_json_text,
};
use crate::canonical::Jcs;
use crate::store::rows;
use crate::store::{ChainLink, RegistryRow, Relink, Spent, StoreError, Tx, TxFn};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which way a transaction committed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Path {
    /// As decided in phase 1: every value read was unchanged.
    Decided,
    /// Run again under the lock: a value changed, or phase 1 failed.
    Rerun,
}

/// What phase 1 read from the tables: the value each key held in its
/// snapshot (an absent row as `None` / `false` / zero). The same shape
/// holds the values phase 1 guessed, and those it learnt by checking its
/// guesses ([`Guesses`]).
#[derive(Default)]
pub(super) struct Reads {
    spent: HashMap<String, Spent>,
    nonces: HashMap<String, bool>,
    executions: HashMap<String, Option<String>>,
    revoked: HashMap<String, bool>,
    state: HashMap<(String, String), Option<String>>,
    registry: HashMap<RegistryRead, Vec<RegistryRow>>,
}

/// What phase 1 wrote: the final value of each key.
#[derive(Default)]
struct Writes {
    spent: BTreeMap<String, Spent>,
    nonces: BTreeSet<String>,
    executions: BTreeMap<String, String>,
    revoked: BTreeSet<String>,
    state: BTreeMap<(String, String), String>,
    receipts: Vec<(Jcs, ChainLink)>,
}

/// The [`Tx`] of phase 1.
struct OptimisticTx<'c> {
    conn: &'c mut Conn,
    reads: Reads,
    writes: Writes,
    /// Where a read of a nonce, an executed operation, a revocation or a
    /// system-of-record entry comes from: a guess, checked in bulk after
    /// the body (one statement per table), or a statement of its own.
    source: Source<'c>,
    /// The values this run took from a guess, as guessed.
    guessed: Reads,
    /// A statement failed: the body's result is not used, the locked
    /// path decides (and meets the failure itself).
    failed: bool,
}

/// Where phase 1 reads the keys it may guess.
enum Source<'a> {
    /// A guess: the value this attempt checked in an earlier run
    /// (`known`), else the value this connection last found in the store
    /// (`recent`: a salt, a revoked mandate, a replayed operation), else
    /// absent, which the common case is (a nonce or an operation never
    /// seen, a mandate not revoked).
    Guess { known: &'a Reads, recent: &'a Reads },
    /// One statement per key (the last run of phase 1).
    Direct { known: &'a Reads },
}

impl Source<'_> {
    fn known(&self) -> &Reads {
        match self {
            Source::Guess { known, .. } | Source::Direct { known } => known,
        }
    }
}

/// The guesses of one transaction's phase 1 that turned out right, and
/// the values the store held where they did not.
#[derive(Default)]
pub(super) struct Guesses {
    /// Values found (present) in the store by earlier checks of this
    /// connection, at most [`RECENT_MAX`] of them: later guesses take
    /// them rather than "absent".
    pub(super) recent: Reads,
}

/// The most values [`Guesses::recent`] keeps (then it starts again).
const RECENT_MAX: usize = 4096;

/// How many runs of phase 1 guess (then one reads key by key).
const GUESS_RUNS: usize = 2;

/// A key phase 1 may guess, and the tables it lives in.
trait Guessable {
    type Key: std::hash::Hash + Eq + Clone;
    type Value: Clone + PartialEq + Default;
    fn map(reads: &Reads) -> &HashMap<Self::Key, Self::Value>;
    fn map_mut(reads: &mut Reads) -> &mut HashMap<Self::Key, Self::Value>;
}

macro_rules! guessable {
    ($name:ident, $field:ident, $key:ty, $value:ty) => {
        struct $name;
        impl Guessable for $name {
            type Key = $key;
            type Value = $value;
            fn map(reads: &Reads) -> &HashMap<$key, $value> {
                &reads.$field
            }
            fn map_mut(reads: &mut Reads) -> &mut HashMap<$key, $value> {
                &mut reads.$field
            }
        }
    };
}
guessable!(NonceKey, nonces, String, bool);
guessable!(ExecutionKey, executions, String, Option<String>);
guessable!(RevokedKey, revoked, String, bool);
guessable!(StateKey, state, (String, String), Option<String>);

impl OptimisticTx<'_> {
    /// The value of a guessable key: as this run read it before, else as
    /// known or guessed (recorded as guessed), else read by `direct`.
    fn lookup<G: Guessable>(
        &mut self,
        key: &G::Key,
        direct: impl FnOnce(&mut Self) -> Result<G::Value, StoreError>,
    ) -> Result<G::Value, StoreError> {
        if let Some(v) = G::map(&self.reads).get(key) {
            return Ok(v.clone());
        }
        let v = match &self.source {
            _ if G::map(self.source.known()).contains_key(key) => G::map(self.source.known())
                .get(key)
                .cloned()
                .unwrap_or_default(),
            Source::Guess { recent, .. } => {
                let v = G::map(recent).get(key).cloned().unwrap_or_default();
                G::map_mut(&mut self.guessed).insert(key.clone(), v.clone());
                v
            }
            Source::Direct { .. } => direct(self)?,
        };
        G::map_mut(&mut self.reads).insert(key.clone(), v.clone());
        Ok(v)
    }

    fn row(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Option<postgres::Row>, StoreError> {
        let read = self.conn.query_opt(sql, params);
        read.map_err(|e| {
            self.failed = true;
            backend(e)
        })
    }

    fn text(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Option<String>, StoreError> {
        self.row(sql, params)?
            .map(|r| col::<String>(&r, 0))
            .transpose()
            .inspect_err(|_| self.failed = true)
    }

    fn executed_text(&mut self, op_hash: &str) -> Result<Option<String>, StoreError> {
        if let Some(t) = self.writes.executions.get(op_hash) {
            return Ok(Some(t.clone()));
        }
        self.lookup::<ExecutionKey>(&op_hash.to_string(), |tx| {
            tx.text(EXECUTED_SQL, &[&op_hash])
        })
    }
}

impl Tx for OptimisticTx<'_> {
    fn spent(&mut self, mandate_id: &str) -> Result<Spent, StoreError> {
        if let Some(s) = self.writes.spent.get(mandate_id) {
            return Ok(*s);
        }
        if let Some(s) = self.reads.spent.get(mandate_id) {
            return Ok(*s);
        }
        let row = self.row(SPENT_SQL, &[&mandate_id])?;
        let spent = spent_of(row.as_ref()).inspect_err(|_| self.failed = true)?;
        self.reads.spent.insert(mandate_id.to_string(), spent);
        Ok(spent)
    }

    fn spend(&mut self, mandate_id: &str, amount: i64) -> Result<Spent, StoreError> {
        let base = self.spent(mandate_id)?;
        let spent = rows::spent_after(base, mandate_id, amount)?;
        self.writes.spent.insert(mandate_id.to_string(), spent);
        Ok(spent)
    }

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        if self.writes.nonces.contains(nonce) {
            return Ok(true);
        }
        self.lookup::<NonceKey>(&nonce.to_string(), |tx| {
            Ok(tx.row(NONCE_SQL, &[&nonce])?.is_some())
        })
    }

    fn use_nonce(&mut self, nonce: &str) -> Result<(), StoreError> {
        if self.nonce_used(nonce)? {
            return Err(StoreError::Conflict(format!(
                "nonce `{nonce}` was already used"
            )));
        }
        self.writes.nonces.insert(nonce.to_string());
        Ok(())
    }

    fn executed(&mut self, op_hash: &str) -> Result<Option<Value>, StoreError> {
        self.executed_text(op_hash)?
            .map(|t| rows::json(&t))
            .transpose()
            .inspect_err(|_| self.failed = true)
    }

    fn record_execution(&mut self, op_hash: &str, result: &Value) -> Result<(), StoreError> {
        if self.executed_text(op_hash)?.is_some() {
            return Err(StoreError::Conflict(format!(
                "operation `{op_hash}` was already executed"
            )));
        }
        let text = to_json_text(result)?;
        self.writes.executions.insert(op_hash.to_string(), text);
        Ok(())
    }

    fn revoked(&mut self, token_id: &str) -> Result<bool, StoreError> {
        if self.writes.revoked.contains(token_id) {
            return Ok(true);
        }
        self.lookup::<RevokedKey>(&token_id.to_string(), |tx| {
            Ok(tx.row(REVOKED_SQL, &[&token_id])?.is_some())
        })
    }

    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError> {
        self.writes.revoked.insert(token_id.to_string());
        Ok(())
    }

    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let k = (ns.to_string(), key.to_string());
        let text = match self.writes.state.get(&k) {
            Some(t) => Some(t.clone()),
            None => self.lookup::<StateKey>(&k, |tx| tx.text(STATE_SQL, &[&ns, &key]))?,
        };
        text.map(|t| rows::json(&t))
            .transpose()
            .inspect_err(|_| self.failed = true)
    }

    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        let text = to_json_text(value)?;
        self.writes
            .state
            .insert((ns.to_string(), key.to_string()), text);
        Ok(())
    }

    /// Not read before the lock: a listing is a range, which phase 2's
    /// key-by-key check cannot confirm unchanged. Failing here runs the
    /// body again under the lock, where [`PgTx`](super::PgTx) lists it
    /// (a decision over a selection is decided on the state it commits on).
    fn state_list(
        &mut self,
        ns: &str,
        _prefix: &str,
        _limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        self.failed = true;
        Err(StoreError::Backend(format!(
            "the namespace `{ns}` is listed under the lock"
        )))
    }

    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
        // provisional: chained from no head, linked again under the lock
        let prev = self
            .writes
            .receipts
            .last()
            .map(|(_, l)| (l.seq, l.hash.as_str()));
        let link = ChainLink::next(prev, body);
        self.writes.receipts.push((body.clone(), link.clone()));
        Ok(link)
    }

    fn registry_rows(
        &mut self,
        table: &str,
        owner: &str,
        keyed: bool,
        key: Option<&str>,
    ) -> Result<Vec<RegistryRow>, StoreError> {
        let read = RegistryRead::new(table, owner, keyed, key)?;
        if let Some(rows) = self.reads.registry.get(&read) {
            return Ok(rows.clone());
        }
        match read.run(self.conn) {
            Ok(rows) => {
                self.reads.registry.insert(read, rows.clone());
                Ok(rows)
            }
            Err(e) => {
                self.failed = true;
                Err(match e {
                    RegistryFailure::Pg(e) => {
                        StoreError::Backend(format!("registry table `{table}`: {}", backend(e)))
                    }
                    RegistryFailure::Store(e) => e,
                })
            }
        }
    }
}

/// One attempt: phase 1, then the locked transaction, in which the
/// decision of phase 1 is checked and applied, or the body run again.
/// `between` runs between the phases (tests make a conflicting change
/// there).
pub(super) fn attempt(
    conn: &mut Conn,
    f: &mut TxFn<'_>,
    between: Option<&(dyn Fn() + Send + Sync)>,
    guesses: &mut Guesses,
) -> Result<(Value, Vec<Relink>, Path), Failure> {
    begin(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
    let (result, reads, writes, failed) = phase_one(conn, f, guesses);
    if let Some(hook) = between {
        hook();
    }
    // phase 1 wrote nothing: a session lost here is reconnected and the
    // whole attempt run again
    begin(conn, &format!("COMMIT; {BEGIN_LOCKED}"))?;
    conn.locked();
    if let Ok(value) = result
        && !failed
        && let Some(now) = unchanged(conn, &reads)?
    {
        let relinks = apply(conn, writes, now.head())?;
        return Ok((value, relinks, Path::Decided));
    }
    // the locked path, in this transaction: its links are final
    let mut head = Head::default();
    let value = run_bodies(conn, &mut head, &mut [f], false)?
        .pop()
        .unwrap_or_else(|| Err(StoreError::Backend("no result".into())))
        .map_err(Failure::Fail)?;
    commit(conn, &head)?;
    Ok((value, Vec::new(), Path::Rerun))
}

/// Phase 1 in the open read-only transaction: the body run with guesses
/// for the keys it may guess, the guesses then checked in this snapshot,
/// one statement per table for the lot; where one was wrong, the body run
/// again with what the check found (and, after [`GUESS_RUNS`] runs, with
/// a statement per key). Returns the body's result, what it read (every
/// value as this snapshot holds it) and wrote, and whether a statement
/// failed.
fn phase_one(
    conn: &mut Conn,
    f: &mut TxFn<'_>,
    guesses: &mut Guesses,
) -> (Result<Value, StoreError>, Reads, Writes, bool) {
    let mut known = Reads::default();
    let mut run = 0;
    loop {
        run += 1;
        let source = if run <= GUESS_RUNS {
            Source::Guess {
                known: &known,
                recent: &guesses.recent,
            }
        } else {
            Source::Direct { known: &known }
        };
        let mut tx = OptimisticTx {
            conn: &mut *conn,
            reads: Reads::default(),
            writes: Writes::default(),
            source,
            guessed: Reads::default(),
            failed: false,
        };
        let result = f(&mut tx);
        let OptimisticTx {
            reads,
            writes,
            guessed,
            failed,
            ..
        } = tx;
        if failed || guessed.is_empty() {
            return (result, reads, writes, failed);
        }
        let Ok(Current { values: now, .. }) = current(conn, &guessed) else {
            return (result, reads, writes, true);
        };
        let right = agrees(&guessed, &now);
        guesses.learn(&now);
        known.extend(now);
        if right {
            return (result, reads, writes, false);
        }
    }
}

impl Reads {
    fn is_empty(&self) -> bool {
        self.spent.is_empty()
            && self.nonces.is_empty()
            && self.executions.is_empty()
            && self.revoked.is_empty()
            && self.state.is_empty()
            && self.registry.is_empty()
    }

    fn len(&self) -> usize {
        self.spent.len()
            + self.nonces.len()
            + self.executions.len()
            + self.revoked.len()
            + self.state.len()
            + self.registry.len()
    }

    fn extend(&mut self, other: Reads) {
        self.spent.extend(other.spent);
        self.nonces.extend(other.nonces);
        self.executions.extend(other.executions);
        self.revoked.extend(other.revoked);
        self.state.extend(other.state);
        self.registry.extend(other.registry);
    }
}

impl Guesses {
    /// Keeps the values `now` found present (a later guess takes them),
    /// forgets those it found absent.
    fn learn(&mut self, now: &Reads) {
        fn keep<K: std::hash::Hash + Eq + Clone, V: Clone + PartialEq + Default>(
            recent: &mut HashMap<K, V>,
            now: &HashMap<K, V>,
        ) {
            for (k, v) in now {
                if *v == V::default() {
                    recent.remove(k);
                } else {
                    recent.insert(k.clone(), v.clone());
                }
            }
        }
        if self.recent.len() + now.len() > RECENT_MAX {
            self.recent = Reads::default();
        }
        keep(&mut self.recent.nonces, &now.nonces);
        keep(&mut self.recent.executions, &now.executions);
        keep(&mut self.recent.revoked, &now.revoked);
        keep(&mut self.recent.state, &now.state);
    }
}

/// Whether `now` holds, for every key of `seen`, the value `seen` holds
/// (a key missing from `now`, a row that could not be read, disagrees).
fn agrees(seen: &Reads, now: &Reads) -> bool {
    fn same<K: std::hash::Hash + Eq, V: PartialEq>(a: &HashMap<K, V>, b: &HashMap<K, V>) -> bool {
        a.iter().all(|(k, v)| b.get(k) == Some(v))
    }
    same(&seen.spent, &now.spent)
        && same(&seen.nonces, &now.nonces)
        && same(&seen.executions, &now.executions)
        && same(&seen.revoked, &now.revoked)
        && same(&seen.state, &now.state)
}

/// Whether every key phase 1 read holds the same value now (under the
/// lock): one statement for the tables ([`current`], the head marker
/// with them), one per registry read. A row that cannot be read counts
/// as changed: the body run again under the lock meets it. Returns what
/// was read when nothing changed.
fn unchanged(conn: &mut Conn, reads: &Reads) -> Result<Option<Current>, Failure> {
    let now = current(conn, reads)?;
    if !agrees(reads, &now.values) {
        return Ok(None);
    }
    for (read, seen) in &reads.registry {
        match read.run(conn) {
            Ok(rows) if rows == *seen => {}
            Ok(_) => return Ok(None),
            Err(RegistryFailure::Pg(e)) if retryable(&e) => return Err(fail(e)),
            // the body run again under the lock meets the error itself
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(now))
}

/// Every key of a [`Reads`] (its registry reads aside) as it stands in
/// the open transaction's snapshot, and the chain's head marker: one
/// statement, a row per key found (its kind, its key, its value, all as
/// text), the head's row last.
const CURRENT_SQL: &str = "
    SELECT 'b', mandate_id::text, NULL::text, amount::text, calls::text
      FROM ipc_budgets WHERE mandate_id = ANY($1)
    UNION ALL SELECT 'n', nonce::text, NULL, NULL, NULL FROM ipc_nonces WHERE nonce = ANY($2)
    UNION ALL SELECT 'e', op_hash::text, NULL, result::text, NULL
      FROM ipc_executions WHERE op_hash = ANY($3)
    UNION ALL SELECT 'r', token_id::text, NULL, NULL, NULL
      FROM ipc_revocations WHERE token_id = ANY($4)
    UNION ALL SELECT 's', s.ns::text, s.key::text, s.json::text, NULL FROM ipc_state s
      JOIN unnest($5::text[], $6::text[]) AS k(ns, key) ON s.ns = k.ns AND s.key = k.key
    UNION ALL SELECT 'h', NULL, NULL, seq::text, hash::text FROM ipc_head WHERE id = 1";

/// What [`current`] found: the keys' values, and the head marker's row
/// (`seq`, `hash` as text) if there is one.
struct Current {
    values: Reads,
    head: Option<(Option<String>, Option<String>)>,
}

impl Current {
    /// The head marker, as [`head_of`] reads it: a row that is not a
    /// marker (a tampered table) is an error.
    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        let Some((seq, hash)) = &self.head else {
            return Ok(None);
        };
        let seq = seq.as_deref().unwrap_or("");
        match (seq.parse::<u64>(), hash) {
            (Ok(n), Some(h)) => Ok(Some((n, h.clone()))),
            _ => Err(rows::bad_head(seq)),
        }
    }
}

/// The value every key of `keys` (its registry reads aside) holds in the
/// open transaction's snapshot, and the head marker, in one statement
/// ([`CURRENT_SQL`]). A key whose row cannot be read is left out.
fn current(conn: &mut Conn, keys: &Reads) -> Result<Current, Failure> {
    fn list<'k>(keys: impl Iterator<Item = &'k String>) -> Vec<&'k str> {
        keys.map(String::as_str).collect()
    }
    let (ns, names): (Vec<&str>, Vec<&str>) = keys
        .state
        .keys()
        .map(|(n, k)| (n.as_str(), k.as_str()))
        .unzip();
    let rows = typed_query(
        conn,
        CURRENT_SQL,
        &[
            &list(keys.spent.keys()),
            &list(keys.nonces.keys()),
            &list(keys.executions.keys()),
            &list(keys.revoked.keys()),
            &ns,
            &names,
        ],
    )?;
    // every key asked for, absent as its default; a row found but not
    // readable leaves its key out (it agrees with nothing)
    let mut now = Reads::default();
    for k in keys.spent.keys() {
        now.spent.insert(k.clone(), Spent::default());
    }
    for k in keys.nonces.keys() {
        now.nonces.insert(k.clone(), false);
    }
    for k in keys.executions.keys() {
        now.executions.insert(k.clone(), None);
    }
    for k in keys.revoked.keys() {
        now.revoked.insert(k.clone(), false);
    }
    for k in keys.state.keys() {
        now.state.insert(k.clone(), None);
    }
    let mut head = None;
    for r in &rows {
        let t = |i: usize| col::<Option<String>>(r, i).ok().flatten();
        let (Some(kind), Some(key)) = (t(0), t(1)) else {
            if t(0).as_deref() == Some("h") {
                head = Some((t(3), t(4)));
            }
            continue;
        };
        match kind.as_str() {
            "b" => {
                let amount = t(3).and_then(|a| a.parse::<i64>().ok());
                let calls = t(4).and_then(|c| c.parse::<i64>().ok());
                match (amount, calls) {
                    (Some(amount), Some(calls)) => {
                        now.spent.insert(key, rows::spent(amount, calls));
                    }
                    _ => {
                        now.spent.remove(&key);
                    }
                }
            }
            "n" => {
                now.nonces.insert(key, true);
            }
            "e" => match t(3) {
                Some(result) => {
                    now.executions.insert(key, Some(result));
                }
                None => {
                    now.executions.remove(&key);
                }
            },
            "r" => {
                now.revoked.insert(key, true);
            }
            "s" => {
                if let Some(name) = t(2) {
                    match t(3) {
                        Some(json) => now.state.insert((key, name), Some(json)),
                        None => now.state.remove(&(key, name)),
                    };
                }
            }
            _ => {}
        }
    }
    Ok(Current { values: now, head })
}

/// Runs `sql` with `text[]` parameters as an unnamed statement, planned
/// for the arrays and the tables as they are now. A prepared statement's
/// generic plan, made while a table was small (a fresh store), scanned it
/// whole for every key once it was not (measured: `ipc serve` on
/// PostgreSQL, p99 48 ms → 28 ms).
fn typed_query(
    conn: &mut Conn,
    sql: &str,
    params: &[Param<'_>],
) -> Result<Vec<postgres::Row>, Failure> {
    let typed: Vec<(&(dyn postgres::types::ToSql + Sync), postgres::types::Type)> = params
        .iter()
        .map(|p| (*p, postgres::types::Type::TEXT_ARRAY))
        .collect();
    conn.client.query_typed(sql, &typed).map_err(fail)
}

/// Every write of phase 1 in one statement: an `INSERT` from arrays
/// (`unnest`) per table, in data-modifying `WITH` clauses (no table is
/// written twice, so none sees another's rows), the head marker moved
/// last when `$17` (receipts were appended). Empty arrays insert nothing.
const APPLY_SQL: &str = "
    WITH budgets AS (
        INSERT INTO ipc_budgets (mandate_id, amount, calls)
        SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
        ON CONFLICT (mandate_id) DO UPDATE SET amount = EXCLUDED.amount, calls = EXCLUDED.calls),
    nonces AS (
        INSERT INTO ipc_nonces (nonce) SELECT * FROM unnest($4::text[])),
    executions AS (
        INSERT INTO ipc_executions (op_hash, result)
        SELECT * FROM unnest($5::text[], $6::text[])),
    revocations AS (
        INSERT INTO ipc_revocations (token_id) SELECT * FROM unnest($7::text[])
        ON CONFLICT DO NOTHING),
    state AS (
        INSERT INTO ipc_state (ns, key, json)
        SELECT * FROM unnest($8::text[], $9::text[], $10::text[])
        ON CONFLICT (ns, key) DO UPDATE SET json = EXCLUDED.json),
    receipts AS (
        INSERT INTO ipc_receipts (seq, prev_hash, hash, body)
        SELECT * FROM unnest($11::bigint[], $12::text[], $13::text[], $14::text[]))
    INSERT INTO ipc_head (id, seq, hash) SELECT 1, $15::bigint, $16::text WHERE $17::boolean
    ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq, hash = EXCLUDED.hash";

/// Applies phase 1's writes in one statement ([`APPLY_SQL`]), its
/// receipts linked after `head` (read under the lock); then commits.
fn apply(
    conn: &mut Conn,
    writes: Writes,
    head: Result<Option<(u64, String)>, StoreError>,
) -> Result<Vec<Relink>, Failure> {
    let int = |n: u64| to_i64(n).map_err(Failure::Fail);
    let ids: Vec<&str> = writes.spent.keys().map(String::as_str).collect();
    let amounts: Vec<i64> = writes.spent.values().map(|s| s.amount).collect();
    let calls: Vec<i64> = writes
        .spent
        .values()
        .map(|s| int(s.calls))
        .collect::<Result<_, _>>()?;
    let nonces: Vec<&str> = writes.nonces.iter().map(String::as_str).collect();
    let (ops, results): (Vec<&str>, Vec<&str>) = writes
        .executions
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .unzip();
    let revoked: Vec<&str> = writes.revoked.iter().map(String::as_str).collect();
    let mut ns = Vec::with_capacity(writes.state.len());
    let mut keys = Vec::with_capacity(writes.state.len());
    let mut json = Vec::with_capacity(writes.state.len());
    for ((n, k), v) in &writes.state {
        ns.push(n.as_str());
        keys.push(k.as_str());
        json.push(v.as_str());
    }
    let n = writes.receipts.len();
    let mut relinks = Vec::with_capacity(n);
    let (mut seqs, mut prevs, mut hashes, mut bodies) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let mut prev = None;
    if n > 0 {
        prev = head.map_err(Failure::Fail)?;
        for (body, seen) in &writes.receipts {
            let link = ChainLink::next(prev.as_ref().map(|(s, h)| (*s, h.as_str())), body);
            seqs.push(int(link.seq)?);
            prevs.push(link.prev_hash.clone());
            hashes.push(link.hash.clone());
            bodies.push(body.as_str());
            prev = Some((link.seq, link.hash.clone()));
            if link != *seen {
                relinks.push(Relink {
                    seen: seen.clone(),
                    committed: link,
                });
            }
        }
    }
    let (head_seq, head_hash) = match &prev {
        Some((seq, hash)) => (int(*seq)?, hash.as_str()),
        None => (0, ""),
    };
    let moved = prev.is_some();
    let st = conn.stmt(APPLY_SQL).map_err(fail)?;
    conn.client
        .execute(
            &st,
            &[
                &ids, &amounts, &calls, &nonces, &ops, &results, &revoked, &ns, &keys, &json,
                &seqs, &prevs, &hashes, &bodies, &head_seq, &head_hash, &moved,
            ],
        )
        .map_err(fail)?;
    // the head marker moved in the statement above
    commit(conn, &Head::default())?;
    Ok(relinks)
}
