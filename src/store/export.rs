//! Every row of a store's tables besides the receipts, read in one read
//! transaction ([`super::Store::rows`]): what `ipc shards move` reads off
//! the old shard to copy a tenant's rows (`docs/decisions/tenant-move.md`).
//! The tables are not keyed by tenant; attributing each row to one is the
//! gateway's work (it knows the namespaces), over these rows and the
//! receipts.

use super::{Spent, StoreError};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The rows of a store, by table. `S`: what a state row holds (its value
/// here; what the move writes for it, `gateway::shards::attribute::Put`,
/// where the rows are one tenant's).
#[derive(Clone, Debug, PartialEq)]
pub struct Rows<S = Value> {
    /// Spent amount and calls by mandate id.
    pub budgets: BTreeMap<String, Spent>,
    pub nonces: BTreeSet<String>,
    /// Recorded result by operation hash (`<op>/read/<n>` for a read).
    pub executions: BTreeMap<String, Value>,
    /// Revoked token (mandate) ids.
    pub revocations: BTreeSet<String>,
    /// State rows by namespace and key.
    pub state: BTreeMap<(String, String), S>,
}

// by hand: a derived `Default` would ask `S: Default`
impl<S> Default for Rows<S> {
    fn default() -> Self {
        Rows {
            budgets: BTreeMap::new(),
            nonces: BTreeSet::new(),
            executions: BTreeMap::new(),
            revocations: BTreeSet::new(),
            state: BTreeMap::new(),
        }
    }
}

impl<S> Rows<S> {
    /// How many rows, over every table.
    pub fn len(&self) -> usize {
        self.budgets.len()
            + self.nonces.len()
            + self.executions.len()
            + self.revocations.len()
            + self.state.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The rows of an SQLite store, on its reader connection, in one read
/// transaction.
pub(super) fn sqlite_rows(conn: &rusqlite::Connection) -> Result<Rows, StoreError> {
    let backend = |e: rusqlite::Error| StoreError::Backend(e.to_string());
    conn.execute_batch("BEGIN").map_err(backend)?;
    let rows = sqlite_read(conn);
    let end = conn.execute_batch("COMMIT");
    let rows = rows?;
    end.map_err(backend)?;
    Ok(rows)
}

fn sqlite_read(conn: &rusqlite::Connection) -> Result<Rows, StoreError> {
    let backend = |e: rusqlite::Error| StoreError::Backend(e.to_string());
    let mut out = Rows::default();
    let q = |sql: &str, f: &mut dyn FnMut(&rusqlite::Row<'_>) -> Result<(), StoreError>| {
        let mut stmt = conn.prepare(sql).map_err(backend)?;
        let mut rows = stmt.query([]).map_err(backend)?;
        while let Some(r) = rows.next().map_err(backend)? {
            f(r)?;
        }
        Ok::<(), StoreError>(())
    };
    q("SELECT mandate_id, amount, calls FROM budgets", &mut |r| {
        let (id, amount, calls): (String, i64, i64) = (
            r.get(0).map_err(backend)?,
            r.get(1).map_err(backend)?,
            r.get(2).map_err(backend)?,
        );
        out.budgets.insert(id, super::rows::spent(amount, calls));
        Ok(())
    })?;
    q("SELECT nonce FROM nonces", &mut |r| {
        out.nonces.insert(r.get(0).map_err(backend)?);
        Ok(())
    })?;
    q("SELECT op_hash, result FROM executions", &mut |r| {
        let text: String = r.get(1).map_err(backend)?;
        out.executions
            .insert(r.get(0).map_err(backend)?, super::rows::json(&text)?);
        Ok(())
    })?;
    q("SELECT token_id FROM revocations", &mut |r| {
        out.revocations.insert(r.get(0).map_err(backend)?);
        Ok(())
    })?;
    q("SELECT ns, key, json FROM state", &mut |r| {
        let text: String = r.get(2).map_err(backend)?;
        out.state.insert(
            (r.get(0).map_err(backend)?, r.get(1).map_err(backend)?),
            super::rows::json(&text)?,
        );
        Ok(())
    })?;
    Ok(out)
}

/// The rows of a PostgreSQL store, in one repeatable-read transaction.
#[cfg(feature = "postgres")]
pub(super) fn pg_read(client: &mut postgres::Client) -> Result<Rows, StoreError> {
    let backend = |e: postgres::Error| StoreError::Backend(e.to_string());
    let mut out = Rows::default();
    for r in client
        .query("SELECT mandate_id, amount, calls FROM ipc_budgets", &[])
        .map_err(backend)?
    {
        out.budgets.insert(
            r.get(0),
            super::rows::spent(r.get::<_, i64>(1), r.get::<_, i64>(2)),
        );
    }
    for r in client
        .query("SELECT nonce FROM ipc_nonces", &[])
        .map_err(backend)?
    {
        out.nonces.insert(r.get(0));
    }
    for r in client
        .query("SELECT op_hash, result FROM ipc_executions", &[])
        .map_err(backend)?
    {
        let text: String = r.get(1);
        out.executions.insert(r.get(0), super::rows::json(&text)?);
    }
    for r in client
        .query("SELECT token_id FROM ipc_revocations", &[])
        .map_err(backend)?
    {
        out.revocations.insert(r.get(0));
    }
    for r in client
        .query("SELECT ns, key, json FROM ipc_state", &[])
        .map_err(backend)?
    {
        let text: String = r.get(2);
        out.state
            .insert((r.get(0), r.get(1)), super::rows::json(&text)?);
    }
    Ok(out)
}
