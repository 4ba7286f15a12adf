//! Reads of registry tables that other applications write
//! (`Tx::registry_rows`): one query per table, owner and key, comparable so
//! that an optimistic transaction re-reads each under the head lock.

use super::{Conn, col, quote_table};
use crate::store::{RegistryRow, StoreError};

/// One read of a registry table
/// ([`Tx::registry_rows`](crate::store::Tx::registry_rows)): its query and
/// parameters, comparable (an optimistic transaction re-reads each one
/// under the head lock, `optimistic`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RegistryRead {
    pub(super) table: String,
    pub(super) sql: String,
    pub(super) owner: String,
    pub(super) keyed: bool,
    pub(super) key: Option<String>,
}

pub(super) enum RegistryFailure {
    /// The statement failed (a missing table, a serialization failure).
    Pg(postgres::Error),
    /// A row of the wrong shape.
    Store(StoreError),
}

impl RegistryRead {
    pub(super) fn new(
        table: &str,
        owner: &str,
        keyed: bool,
        key: Option<&str>,
    ) -> Result<Self, StoreError> {
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
    pub(super) fn run(&self, conn: &mut Conn) -> Result<Vec<RegistryRow>, RegistryFailure> {
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
