//! A store read and never written: the receipts of a recorded chain, in
//! pages, and rows of its state, for `ipc replay`. An SQLite file is
//! opened read-only (`SQLITE_OPEN_READ_ONLY`, `query_only`), a PostgreSQL
//! database with every transaction read-only
//! (`default_transaction_read_only`): whatever the reader does, the store
//! refuses to change.

use super::{ReceiptRange, ReceiptRecord, StoreError, rows};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde_json::Value;
use std::path::Path;

/// What a replay reads of a recorded store.
pub trait Recorded {
    /// The `limit` oldest receipts after `seq`, in chain order (a shorter
    /// page is the end).
    fn page(&self, after: u64, limit: usize) -> Result<Vec<ReceiptRecord>, StoreError>;
    /// The head marker: the last receipt's sequence number and hash.
    fn head(&self) -> Result<Option<(u64, String)>, StoreError>;
    /// One row of the store's state.
    fn state(&self, ns: &str, key: &str) -> Result<Option<Value>, StoreError>;
}

/// Opens the store at `location` for reading only: a `postgres://` URL or
/// an SQLite file (which must exist and be an intentplane store).
pub fn open_read_only(location: &Path) -> Result<Box<dyn Recorded>, StoreError> {
    if let Some(url) = location.to_str().filter(|s| super::postgres::is_url(s)) {
        #[cfg(feature = "postgres")]
        {
            let options = super::postgres::PgOptions {
                read_only: true,
                ..Default::default()
            };
            let s = super::postgres::PgStore::open_with(url, options, false)?;
            return Ok(Box::new(ThroughStore(Box::new(s))));
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = url;
            return Err(StoreError::FeatureOff);
        }
    }
    Ok(Box::new(SqliteReader::open(location)?))
}

/// A store whose every transaction the server keeps read-only.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
struct ThroughStore(Box<dyn super::Store>);

impl Recorded for ThroughStore {
    fn page(&self, after: u64, limit: usize) -> Result<Vec<ReceiptRecord>, StoreError> {
        self.0
            .receipts_range(ReceiptRange::After { seq: after, limit })
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.0.head()
    }

    fn state(&self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let mut out = None;
        self.0.read_only(&mut |tx| {
            out = tx.state_get(ns, key)?;
            Ok(Value::Null)
        })?;
        Ok(out)
    }
}

/// An SQLite store opened read-only.
struct SqliteReader {
    conn: Connection,
}

/// `PRAGMA application_id` of an intentplane store ("IPCS"), as
/// [`super::sqlite`] writes it.
const APPLICATION_ID: i64 = 0x4950_4353;

impl SqliteReader {
    fn open(path: &Path) -> Result<Self, StoreError> {
        let err = |reason: String| StoreError::Open {
            path: path.display().to_string(),
            reason,
        };
        if !path.is_file() {
            return Err(err("no such file".into()));
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| err(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .and_then(|()| conn.execute_batch("PRAGMA query_only = 1"))
            .map_err(|e| err(e.to_string()))?;
        let app_id: i64 = conn
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| err(format!("not an SQLite database ({e})")))?;
        if app_id != APPLICATION_ID {
            return Err(err(
                "an SQLite database that is not an intentplane store".into()
            ));
        }
        Ok(SqliteReader { conn })
    }
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl Recorded for SqliteReader {
    fn page(&self, after: u64, limit: usize) -> Result<Vec<ReceiptRecord>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached(
                "SELECT seq, prev_hash, hash, body FROM receipts WHERE seq > ?1
                 ORDER BY seq LIMIT ?2",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map([rows::param(after), rows::param(limit)], |row| {
                Ok(rows::receipt(
                    u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0),
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                ))
            })
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
        self.conn
            .query_row("SELECT seq, hash FROM head WHERE id = 1", [], |r| {
                Ok(rows::shown_head(r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(backend)
    }

    fn state(&self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT json FROM state WHERE ns = ?1 AND key = ?2")
            .map_err(backend)?;
        let raw: Option<String> = stmt
            .query_row([ns, key], |r| r.get(0))
            .optional()
            .map_err(backend)?;
        raw.map(|s| rows::json(&s)).transpose()
    }
}
