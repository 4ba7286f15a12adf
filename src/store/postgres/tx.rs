//! The operations of one transaction body ([`PgTx`]): the chain's head and
//! the rows the transaction has read, read once and written once under the
//! head lock.

use super::registry::{RegistryFailure, RegistryRead};
use super::{Conn, Param, backend, col, pg_text, retryable};
use crate::canonical::Jcs;
use crate::store::rows::{self, to_i64};
use crate::store::{ChainLink, RegistryRow, Spent, StoreError, Tx};
use serde_json::Value;
use std::collections::HashMap;

/// The chain's head as the open transaction sees it: read once after the
/// lock, written once before `COMMIT`. With it, the revocations and
/// budgets the transaction has read or written: while it holds the head
/// lock no other writer can change them (every writer takes the lock
/// first), so a batch of decisions under one mandate reads each once
/// instead of once per decision (two round trips of seven).
#[derive(Clone, Debug, Default)]
pub(super) struct Head {
    pub(super) known: Option<Option<(u64, String)>>,
    pub(super) dirty: bool,
    pub(super) revoked: HashMap<String, bool>,
    pub(super) spent: HashMap<String, Spent>,
}

/// The operations of one transaction body.
pub(super) struct PgTx<'c> {
    pub(super) conn: &'c mut Conn,
    pub(super) head: &'c mut Head,
    /// Set when the server aborted the transaction with a serialization
    /// failure or a deadlock: the body's result is discarded and the
    /// transaction run again.
    pub(super) retry: &'c mut Option<String>,
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
        params: &[Param<'_>],
    ) -> Result<Option<postgres::Row>, StoreError> {
        self.conn.query_opt(sql, params).map_err(|e| self.err(e))
    }

    fn execute(&mut self, sql: &'static str, params: &[Param<'_>]) -> Result<u64, StoreError> {
        self.conn.execute(sql, params).map_err(|e| self.err(e))
    }

    fn json(
        &mut self,
        sql: &'static str,
        params: &[Param<'_>],
    ) -> Result<Option<Value>, StoreError> {
        let row = self.query_opt(sql, params)?;
        row.map(|r| {
            let text: String = col(&r, 0)?;
            rows::json(&text)
        })
        .transpose()
    }
}

pub(super) fn to_json_text(v: &Value) -> Result<String, StoreError> {
    serde_json::to_string(v).map_err(|e| StoreError::Backend(e.to_string()))
}

/// The chain's head as the head marker records it.
const HEAD_SQL: &str = "SELECT seq, hash FROM ipc_head WHERE id = 1";
/// One key's row, as both kinds of transaction read it (`PgTx`, and
/// `optimistic` before the lock).
pub(super) const SPENT_SQL: &str = "SELECT amount, calls FROM ipc_budgets WHERE mandate_id = $1";
pub(super) const NONCE_SQL: &str = "SELECT 1 FROM ipc_nonces WHERE nonce = $1";
pub(super) const EXECUTED_SQL: &str = "SELECT result FROM ipc_executions WHERE op_hash = $1";
pub(super) const REVOKED_SQL: &str = "SELECT 1 FROM ipc_revocations WHERE token_id = $1";
pub(super) const STATE_SQL: &str = "SELECT json FROM ipc_state WHERE ns = $1 AND key = $2";

/// A budget row (`amount`, `calls` first), or nothing spent without one.
pub(super) fn spent_of(row: Option<&postgres::Row>) -> Result<Spent, StoreError> {
    Ok(match row {
        Some(r) => rows::spent(col(r, 0)?, col(r, 1)?),
        None => Spent::default(),
    })
}

fn head_of(row: Option<postgres::Row>) -> Result<Option<(u64, String)>, StoreError> {
    row.map(|r| rows::head(col(&r, 0)?, col(&r, 1)?))
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
                return Err(rows::overflows(mandate_id));
            }
            other => other?,
        };
        let row = row.ok_or_else(|| StoreError::Backend("no budget row returned".into()))?;
        let spent = rows::spent(col(&row, 0)?, col(&row, 1)?);
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

    fn state_list(
        &mut self,
        ns: &str,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<(String, Value)>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let found = self
            .conn
            .query(
                "SELECT key, json FROM ipc_state WHERE ns = $1 AND starts_with(key, $2)
                 ORDER BY key COLLATE \"C\" LIMIT $3",
                &[&ns as Param<'_>, &prefix, &limit],
            )
            .map_err(|e| self.err(e))?;
        let mut out = Vec::with_capacity(found.len());
        for r in &found {
            let key: String = col(r, 0)?;
            let text: String = col(r, 1)?;
            out.push((key, rows::json(&text)?));
        }
        Ok(out)
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
