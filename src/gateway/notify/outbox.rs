//! The outbox: one row per (pending operation, target), in the store's
//! state (namespace `notify`), written by the PENDING decision in its own
//! transaction, beside its receipt, so that a crash between the commit and
//! the send loses nothing. The store has no scan: the rows waiting to be
//! sent are listed in [`BUCKETS`] index rows (`#due/X`, X the last hex
//! digit of the operation hash: a decision rewrites one small index, not
//! one of every waiting row), each entry `[key, next_at]`; failed rows in
//! `#failed` (the newest [`FAILED_KEPT`]). A row leaves the due index when
//! it is delivered or failed, never before: a sender that dies mid-send
//! leaves its claim to lapse, and the row is sent again under the same
//! idempotency key.
//!
//! Times here are the wall clock in milliseconds (when to try again),
//! never a decision's time.

use super::config::Target;
use crate::store::{StoreError, Tx};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub const NS: &str = "notify";
const DUE: &str = "#due/";
const FAILED: &str = "#failed";
/// How many index rows list the due deliveries.
pub const BUCKETS: &[u8; 16] = b"0123456789abcdef";
/// How many failed deliveries `#failed` lists (their rows stay).
pub const FAILED_KEPT: usize = 1_000;
/// The longest pause between two attempts.
pub const MAX_BACKOFF_MS: i64 = 300_000;
/// The first pause.
pub const FIRST_BACKOFF_MS: i64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Due,
    Delivered,
    Failed,
}

/// One delivery of one pending operation to one target.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delivery {
    pub operation_hash: String,
    pub target: String,
    pub status: Status,
    /// Attempts started (a claim is one).
    pub attempts: u32,
    pub created_at: i64,
    /// Not sent before (ms).
    pub next_at: i64,
    /// A sender holds it until then (ms); 0: nobody.
    #[serde(default)]
    pub claimed_until: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_at: Option<i64>,
}

impl Delivery {
    /// The row's key, and the `Idempotency-Key` the receiver is sent.
    pub fn key(&self) -> String {
        key(&self.operation_hash, &self.target)
    }
}

pub fn key(operation_hash: &str, target: &str) -> String {
    format!("{operation_hash}:{target}")
}

/// The wall clock in ms (0 if it reads before 1970: a row is then due at
/// once, which only schedules a send).
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn bucket(operation_hash: &str) -> String {
    let last = operation_hash.bytes().last().unwrap_or(b'0');
    let b = if BUCKETS.contains(&last) { last } else { b'0' };
    format!("{DUE}{}", b as char)
}

fn aborted(e: serde_json::Error) -> StoreError {
    StoreError::Aborted(e.to_string())
}

type Index = Vec<(String, i64)>;

fn index(tx: &mut dyn Tx, name: &str) -> Result<Index, StoreError> {
    match tx.state_get(NS, name)? {
        Some(v) if !v.is_null() => serde_json::from_value(v)
            .map_err(|e| StoreError::Backend(format!("notify index `{name}`: {e}"))),
        _ => Ok(vec![]),
    }
}

fn put_index(tx: &mut dyn Tx, name: &str, idx: &Index) -> Result<(), StoreError> {
    tx.state_put(NS, name, &serde_json::to_value(idx).map_err(aborted)?)
}

pub fn get(tx: &mut dyn Tx, key: &str) -> Result<Option<Delivery>, StoreError> {
    if key.starts_with('#') {
        return Ok(None);
    }
    match tx.state_get(NS, key)? {
        Some(v) if !v.is_null() => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("notify row `{key}`: {e}"))),
        _ => Ok(None),
    }
}

fn put(tx: &mut dyn Tx, d: &Delivery) -> Result<(), StoreError> {
    tx.state_put(NS, &d.key(), &serde_json::to_value(d).map_err(aborted)?)
}

/// A row per target for a newly pending operation, in the caller's
/// transaction (the PENDING decision's). A row that exists is left as it
/// is: each operation is sent once per target.
pub fn enqueue(
    tx: &mut dyn Tx,
    targets: &[Target],
    operation_hash: &str,
) -> Result<(), StoreError> {
    if targets.is_empty() {
        return Ok(());
    }
    let now = wall_ms();
    let b = bucket(operation_hash);
    let mut idx = index(tx, &b)?;
    for t in targets {
        if get(tx, &key(operation_hash, &t.name))?.is_some() {
            continue;
        }
        let d = Delivery {
            operation_hash: operation_hash.to_string(),
            target: t.name.clone(),
            status: Status::Due,
            attempts: 0,
            created_at: now,
            next_at: now,
            claimed_until: 0,
            last_error: None,
            settled_at: None,
        };
        put(tx, &d)?;
        idx.push((d.key(), now));
    }
    put_index(tx, &b, &idx)
}

/// Every due entry `(key, next_at)`, the soonest first.
pub fn due(tx: &mut dyn Tx) -> Result<Index, StoreError> {
    let mut all = vec![];
    for b in BUCKETS {
        all.extend(index(tx, &format!("{DUE}{}", *b as char))?);
    }
    all.sort_by_key(|(_, at)| *at);
    Ok(all)
}

/// Takes the row `key` for one attempt until `now + lease` if it is due
/// and nobody holds it: the attempt counted, the row returned.
pub fn claim(
    tx: &mut dyn Tx,
    key: &str,
    now: i64,
    lease: i64,
) -> Result<Option<Delivery>, StoreError> {
    let Some(mut d) = get(tx, key)? else {
        return Ok(None);
    };
    if d.status != Status::Due || d.next_at > now || d.claimed_until > now {
        return Ok(None);
    }
    d.attempts += 1;
    d.claimed_until = now.saturating_add(lease);
    put(tx, &d)?;
    Ok(Some(d))
}

/// What an attempt came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    Delivered,
    /// Worth trying again (a refusal, a timeout, a connection error).
    Retry(String),
    /// Never worth trying again (the operation cannot be shown).
    Permanent(String),
}

/// Records an attempt's end: delivered, failed for good (at
/// `max_attempts`, or a permanent error) or due again after a backoff.
/// Returns the row as settled (`None`: the row is gone or settled
/// already, e.g. by another sender).
pub fn settle(
    tx: &mut dyn Tx,
    key: &str,
    attempt: &Attempt,
    max_attempts: u32,
    now: i64,
) -> Result<Option<Delivery>, StoreError> {
    let Some(mut d) = get(tx, key)? else {
        return Ok(None);
    };
    if d.status != Status::Due {
        return Ok(None);
    }
    d.claimed_until = 0;
    match attempt {
        Attempt::Delivered => {
            d.status = Status::Delivered;
            d.last_error = None;
            d.settled_at = Some(now);
        }
        Attempt::Retry(e) if d.attempts < max_attempts => {
            d.last_error = Some(e.clone());
            d.next_at = now.saturating_add(backoff(d.attempts));
        }
        Attempt::Retry(e) | Attempt::Permanent(e) => {
            d.status = Status::Failed;
            d.last_error = Some(e.clone());
            d.settled_at = Some(now);
        }
    }
    put(tx, &d)?;
    let b = bucket(&d.operation_hash);
    let mut idx = index(tx, &b)?;
    idx.retain(|(k, _)| k != key);
    match d.status {
        Status::Due => idx.push((key.to_string(), d.next_at)),
        Status::Failed => {
            let mut failed = index(tx, FAILED)?;
            failed.push((key.to_string(), now));
            let over = failed.len().saturating_sub(FAILED_KEPT);
            failed.drain(..over);
            put_index(tx, FAILED, &failed)?;
        }
        Status::Delivered => {}
    }
    put_index(tx, &b, &idx)?;
    Ok(Some(d))
}

/// The pause after attempt `n` (1, 2, 4, ... seconds, at most five
/// minutes).
pub fn backoff(n: u32) -> i64 {
    let shift = n.saturating_sub(1).min(20);
    (FIRST_BACKOFF_MS << shift).min(MAX_BACKOFF_MS)
}

/// The failed deliveries listed, newest last.
pub fn failed(tx: &mut dyn Tx) -> Result<Vec<Delivery>, StoreError> {
    let mut out = vec![];
    for (k, _) in index(tx, FAILED)? {
        if let Some(d) = get(tx, &k)? {
            out.push(d);
        }
    }
    Ok(out)
}

/// The row as JSON (for listings).
pub fn to_value(d: &Delivery) -> Value {
    serde_json::to_value(d).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::memory::MemoryStore;

    fn target(name: &str) -> Target {
        Target {
            name: name.into(),
            url: "https://h/".into(),
            host: "h".into(),
            format: super::super::config::Format::Json,
            secret: super::super::config::HookKey::for_tests(),
            ca_file: None,
            allow_private: false,
            concurrency: 1,
            max_attempts: 2,
            timeout: std::time::Duration::from_secs(1),
        }
    }

    #[test]
    fn a_row_is_due_until_delivered_or_given_up() {
        let s = MemoryStore::new();
        let op = "sha256:ab";
        s.transaction(&mut |tx| {
            enqueue(tx, &[target("a"), target("b")], op)?;
            // enqueued again (the operation proposed again): nothing new
            enqueue(tx, &[target("a")], op)?;
            assert_eq!(due(tx)?.len(), 2);
            let now = wall_ms();
            let d = claim(tx, &key(op, "a"), now, 1_000)?.unwrap();
            assert_eq!(d.attempts, 1);
            // held: not claimed twice
            assert!(claim(tx, &key(op, "a"), now, 1_000)?.is_none());
            settle(tx, &key(op, "a"), &Attempt::Delivered, 2, now)?;
            let b = claim(tx, &key(op, "b"), now, 1_000)?.unwrap();
            assert_eq!(b.attempts, 1);
            let again = settle(tx, &key(op, "b"), &Attempt::Retry("503".into()), 2, now)?.unwrap();
            assert_eq!(again.status, Status::Due);
            assert_eq!(again.next_at, now + FIRST_BACKOFF_MS);
            assert!(claim(tx, &key(op, "b"), now, 1_000)?.is_none());
            claim(tx, &key(op, "b"), now + FIRST_BACKOFF_MS, 1_000)?.unwrap();
            let gone = settle(tx, &key(op, "b"), &Attempt::Retry("503".into()), 2, now)?.unwrap();
            assert_eq!(gone.status, Status::Failed);
            assert!(due(tx)?.is_empty());
            assert_eq!(failed(tx)?.len(), 1);
            Ok(Value::Null)
        })
        .unwrap();
    }

    #[test]
    fn backoff_doubles_to_a_bound() {
        assert_eq!(backoff(1), 1_000);
        assert_eq!(backoff(2), 2_000);
        assert_eq!(backoff(30), MAX_BACKOFF_MS);
    }
}
