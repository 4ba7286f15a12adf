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
//!
//! **Phase 2, under the lock.** The writer's transaction of every store
//! transaction (`BEGIN ISOLATION LEVEL REPEATABLE READ; LOCK TABLE
//! ipc_head IN EXCLUSIVE MODE`, its snapshot taken after the lock) reads
//! again every key phase 1 read, a few statements for the lot (`= ANY`).
//! If each still holds what phase 1 read, the body run now would read the
//! same values and so decide the same (a body acts only through its `Tx`,
//! and its clock is fixed before the transaction): its writes are applied
//! as they are, one statement per table, the receipts linked after the
//! head read under the lock, and the transaction commits. If any value
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
    BEGIN_LOCKED, Conn, EXECUTED_SQL, Failure, HEAD_SQL, Head, NONCE_SQL, REVOKED_SQL,
    RegistryFailure, RegistryRead, SPENT_SQL, STATE_SQL, backend, begin, col, commit, fail,
    head_of, retryable, run_bodies, spent_of, to_i64, to_json_text,
};
use crate::canonical::Jcs;
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
/// snapshot (an absent row as `None` / `false` / zero).
#[derive(Default)]
struct Reads {
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
    /// A statement failed: the body's result is not used, the locked
    /// path decides (and meets the failure itself).
    failed: bool,
}

impl OptimisticTx<'_> {
    fn row(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, StoreError> {
        let read = self
            .conn
            .stmt(sql)
            .and_then(|st| self.conn.client.query_opt(&st, params));
        read.map_err(|e| {
            self.failed = true;
            backend(e)
        })
    }

    fn text(
        &mut self,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
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
        if let Some(t) = self.reads.executions.get(op_hash) {
            return Ok(t.clone());
        }
        let t = self.text(EXECUTED_SQL, &[&op_hash])?;
        self.reads.executions.insert(op_hash.to_string(), t.clone());
        Ok(t)
    }
}

fn parse(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Backend(format!("stored json is invalid: {e}")))
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
        let amount = base
            .amount
            .checked_add(amount)
            .ok_or_else(|| StoreError::Backend(format!("budget of `{mandate_id}` overflows")))?;
        let spent = Spent {
            amount,
            calls: base.calls.saturating_add(1),
        };
        self.writes.spent.insert(mandate_id.to_string(), spent);
        Ok(spent)
    }

    fn nonce_used(&mut self, nonce: &str) -> Result<bool, StoreError> {
        if self.writes.nonces.contains(nonce) {
            return Ok(true);
        }
        if let Some(u) = self.reads.nonces.get(nonce) {
            return Ok(*u);
        }
        let used = self.row(NONCE_SQL, &[&nonce])?.is_some();
        self.reads.nonces.insert(nonce.to_string(), used);
        Ok(used)
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
            .map(|t| parse(&t))
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
        if let Some(r) = self.reads.revoked.get(token_id) {
            return Ok(*r);
        }
        let revoked = self.row(REVOKED_SQL, &[&token_id])?.is_some();
        self.reads.revoked.insert(token_id.to_string(), revoked);
        Ok(revoked)
    }

    fn revoke(&mut self, token_id: &str) -> Result<(), StoreError> {
        self.writes.revoked.insert(token_id.to_string());
        Ok(())
    }

    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let k = (ns.to_string(), key.to_string());
        let text = match self.writes.state.get(&k) {
            Some(t) => Some(t.clone()),
            None => match self.reads.state.get(&k) {
                Some(t) => t.clone(),
                None => {
                    let t = self.text(STATE_SQL, &[&ns, &key])?;
                    self.reads.state.insert(k, t.clone());
                    t
                }
            },
        };
        text.map(|t| parse(&t))
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
) -> Result<(Value, Vec<Relink>, Path), Failure> {
    begin(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")?;
    let mut tx = OptimisticTx {
        conn: &mut *conn,
        reads: Reads::default(),
        writes: Writes::default(),
        failed: false,
    };
    let result = f(&mut tx);
    let OptimisticTx {
        reads,
        writes,
        failed,
        ..
    } = tx;
    if let Some(hook) = between {
        hook();
    }
    // phase 1 wrote nothing: a session lost here is reconnected and the
    // whole attempt run again
    begin(conn, &format!("COMMIT; {BEGIN_LOCKED}"))?;
    if let Ok(value) = result
        && !failed
        && unchanged(conn, &reads)?
    {
        let relinks = apply(conn, writes)?;
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

/// Whether every key phase 1 read holds the same value now (under the
/// lock): one statement per table read from. A row that cannot be read
/// counts as changed: the body run again under the lock meets it.
fn unchanged(conn: &mut Conn, reads: &Reads) -> Result<bool, Failure> {
    let text = |r: Option<&postgres::Row>| r.and_then(|r| col::<String>(r, 0).ok());
    let now = by_key(
        conn,
        "SELECT amount, calls, mandate_id FROM ipc_budgets WHERE mandate_id = ANY($1)",
        reads.spent.keys(),
    )?;
    if reads
        .spent
        .iter()
        .any(|(k, s)| spent_of(now.get(k)).ok() != Some(*s))
    {
        return Ok(false);
    }
    let now = by_key(
        conn,
        "SELECT nonce FROM ipc_nonces WHERE nonce = ANY($1)",
        reads.nonces.keys(),
    )?;
    if reads.nonces.iter().any(|(k, u)| now.contains_key(k) != *u) {
        return Ok(false);
    }
    let now = by_key(
        conn,
        "SELECT result, op_hash FROM ipc_executions WHERE op_hash = ANY($1)",
        reads.executions.keys(),
    )?;
    if reads.executions.iter().any(|(k, t)| text(now.get(k)) != *t) {
        return Ok(false);
    }
    let now = by_key(
        conn,
        "SELECT token_id FROM ipc_revocations WHERE token_id = ANY($1)",
        reads.revoked.keys(),
    )?;
    if reads.revoked.iter().any(|(k, r)| now.contains_key(k) != *r) {
        return Ok(false);
    }
    if !reads.state.is_empty() {
        let (ns, keys): (Vec<&str>, Vec<&str>) = reads
            .state
            .keys()
            .map(|(n, k)| (n.as_str(), k.as_str()))
            .unzip();
        let rows = typed_query(
            conn,
            "SELECT s.json, s.ns, s.key FROM ipc_state s
             JOIN unnest($1::text[], $2::text[]) AS k(ns, key) ON s.ns = k.ns AND s.key = k.key",
            &[&ns, &keys],
        )?;
        let mut now = HashMap::new();
        for r in &rows {
            if let (Ok(n), Ok(k)) = (col::<String>(r, 1), col::<String>(r, 2)) {
                now.insert((n, k), r);
            }
        }
        if reads
            .state
            .iter()
            .any(|(k, t)| text(now.get(k).copied()) != *t)
        {
            return Ok(false);
        }
    }
    for (read, seen) in &reads.registry {
        match read.run(conn) {
            Ok(rows) if rows == *seen => {}
            Ok(_) => return Ok(false),
            Err(RegistryFailure::Pg(e)) if retryable(&e) => return Err(fail(e)),
            // the body run again under the lock meets the error itself
            Err(_) => return Ok(false),
        }
    }
    Ok(true)
}

/// Runs `sql` with `text[]` parameters as an unnamed statement, planned
/// for the arrays and the tables as they are now. A prepared statement's
/// generic plan, made while a table was small (a fresh store), scanned it
/// whole for every key once it was not (measured: `ipc serve` on
/// PostgreSQL, p99 48 ms → 28 ms).
fn typed_query(
    conn: &mut Conn,
    sql: &str,
    params: &[&(dyn postgres::types::ToSql + Sync)],
) -> Result<Vec<postgres::Row>, Failure> {
    let typed: Vec<(&(dyn postgres::types::ToSql + Sync), postgres::types::Type)> = params
        .iter()
        .map(|p| (*p, postgres::types::Type::TEXT_ARRAY))
        .collect();
    conn.client.query_typed(sql, &typed).map_err(fail)
}

/// The rows `sql` (`… WHERE key = ANY($1)`, the key in the last column)
/// holds now for `keys`, by key; no statement for no key.
fn by_key<'k>(
    conn: &mut Conn,
    sql: &str,
    keys: impl Iterator<Item = &'k String>,
) -> Result<HashMap<String, postgres::Row>, Failure> {
    let keys: Vec<&str> = keys.map(String::as_str).collect();
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = typed_query(conn, sql, &[&keys])?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let key = col::<String>(&r, r.len().checked_sub(1)?).ok()?;
            Some((key, r))
        })
        .collect())
}

/// Applies phase 1's writes, one statement per table, and links its
/// receipts after the head read under the lock; then commits.
fn apply(conn: &mut Conn, writes: Writes) -> Result<Vec<Relink>, Failure> {
    fn exec(
        conn: &mut Conn,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<(), Failure> {
        let st = conn.stmt(sql).map_err(fail)?;
        conn.client.execute(&st, params).map_err(fail)?;
        Ok(())
    }
    let int = |n: u64| to_i64(n).map_err(Failure::Fail);
    if !writes.spent.is_empty() {
        let ids: Vec<&str> = writes.spent.keys().map(String::as_str).collect();
        let amounts: Vec<i64> = writes.spent.values().map(|s| s.amount).collect();
        let calls: Vec<i64> = writes
            .spent
            .values()
            .map(|s| int(s.calls))
            .collect::<Result<_, _>>()?;
        exec(
            conn,
            "INSERT INTO ipc_budgets (mandate_id, amount, calls)
             SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[])
             ON CONFLICT (mandate_id) DO UPDATE SET amount = EXCLUDED.amount, calls = EXCLUDED.calls",
            &[&ids, &amounts, &calls],
        )?;
    }
    if !writes.nonces.is_empty() {
        let keys: Vec<&str> = writes.nonces.iter().map(String::as_str).collect();
        exec(
            conn,
            "INSERT INTO ipc_nonces (nonce) SELECT * FROM unnest($1::text[])",
            &[&keys],
        )?;
    }
    if !writes.executions.is_empty() {
        let (ops, results): (Vec<&str>, Vec<&str>) = writes
            .executions
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .unzip();
        exec(
            conn,
            "INSERT INTO ipc_executions (op_hash, result)
             SELECT * FROM unnest($1::text[], $2::text[])",
            &[&ops, &results],
        )?;
    }
    if !writes.revoked.is_empty() {
        let keys: Vec<&str> = writes.revoked.iter().map(String::as_str).collect();
        exec(
            conn,
            "INSERT INTO ipc_revocations (token_id) SELECT * FROM unnest($1::text[])
             ON CONFLICT DO NOTHING",
            &[&keys],
        )?;
    }
    if !writes.state.is_empty() {
        let mut ns = Vec::with_capacity(writes.state.len());
        let mut keys = Vec::with_capacity(writes.state.len());
        let mut json = Vec::with_capacity(writes.state.len());
        for ((n, k), v) in &writes.state {
            ns.push(n.as_str());
            keys.push(k.as_str());
            json.push(v.as_str());
        }
        exec(
            conn,
            "INSERT INTO ipc_state (ns, key, json)
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
             ON CONFLICT (ns, key) DO UPDATE SET json = EXCLUDED.json",
            &[&ns, &keys, &json],
        )?;
    }
    let mut head = Head::default();
    let mut relinks = Vec::with_capacity(writes.receipts.len());
    if !writes.receipts.is_empty() {
        let st = conn.stmt(HEAD_SQL).map_err(fail)?;
        let row = conn.client.query_opt(&st, &[]).map_err(fail)?;
        let mut prev = head_of(row).map_err(Failure::Fail)?;
        let mut seqs = Vec::with_capacity(writes.receipts.len());
        let mut prevs = Vec::with_capacity(writes.receipts.len());
        let mut hashes = Vec::with_capacity(writes.receipts.len());
        let mut bodies = Vec::with_capacity(writes.receipts.len());
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
        exec(
            conn,
            "INSERT INTO ipc_receipts (seq, prev_hash, hash, body)
             SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[])",
            &[&seqs, &prevs, &hashes, &bodies],
        )?;
        head.known = Some(prev);
        head.dirty = true;
    }
    commit(conn, &head)?;
    Ok(relinks)
}
