//! The stores' rows, mapped once per row type: a budget (read in a
//! transaction, spent, or read leniently for an audit), the head marker,
//! a receipt (as a record, or as stored), a stored JSON value, and the
//! integers a store writes. Every store (memory, SQLite, PostgreSQL and its
//! optimistic transactions) reads and writes its rows through these, so
//! they agree on what a row means and on every message.

use super::{ReceiptRecord, Spent, StoreError, StoredReceipt};
use serde_json::Value;
use std::fmt::Display;

/// A budget row (`amount`, `calls`) read inside a transaction: a count
/// that is not a count (negative) reads as none.
pub(crate) fn spent(amount: i64, calls: i64) -> Spent {
    Spent {
        amount,
        calls: u64::try_from(calls).unwrap_or(0),
    }
}

/// A budget row read leniently for an audit (`verify_store`): an amount
/// that is not a number (tampered) is no receipt's sum, nor is a count
/// that is not one (negative).
pub(crate) fn audited_spent(amount: Option<i64>, calls: Option<u64>) -> Spent {
    Spent {
        amount: amount.unwrap_or(i64::MIN),
        calls: calls.unwrap_or(u64::MAX),
    }
}

/// The budget `now` after spending `amount` more, in one more call: an
/// amount past the integer range is an error, never a wrapped sum.
pub(crate) fn spent_after(now: Spent, mandate_id: &str, amount: i64) -> Result<Spent, StoreError> {
    Ok(Spent {
        amount: now
            .amount
            .checked_add(amount)
            .ok_or_else(|| overflows(mandate_id))?,
        calls: now.calls.saturating_add(1),
    })
}

/// A budget that would leave the integer range.
pub(crate) fn overflows(mandate_id: &str) -> StoreError {
    StoreError::Backend(format!("budget of `{mandate_id}` overflows"))
}

/// The head marker row (`seq`, `hash`) read inside a transaction, which
/// chains onto it: a sequence number that is not one is an error.
pub(crate) fn head(seq: i64, hash: String) -> Result<(u64, String), StoreError> {
    Ok((u64::try_from(seq).map_err(|_| bad_head(seq))?, hash))
}

/// A head marker whose sequence number is not one (a tampered table).
pub(crate) fn bad_head(seq: impl Display) -> StoreError {
    StoreError::Backend(format!("head marker has seq `{seq}`"))
}

/// The head marker row as [`super::Store::head`] and a snapshot show it:
/// a sequence number that is not one reads as 0 (`verify_chain` judges).
pub(crate) fn shown_head(seq: i64, hash: String) -> (u64, String) {
    (u64::try_from(seq).unwrap_or(0), hash)
}

/// A receipt row (`seq`, `prev_hash`, `hash`, `body`) as a record, its
/// body parsed (a body that is not JSON is kept as a string: its hash will
/// not match, and verify says so).
pub(crate) fn receipt(seq: u64, prev_hash: String, hash: String, body: String) -> ReceiptRecord {
    stored_receipt(seq, prev_hash, hash, body, "text").record()
}

/// A receipt row exactly as stored, with the storage type of its body
/// (`text`, or what a tampered table holds instead).
pub(crate) fn stored_receipt(
    seq: u64,
    prev_hash: String,
    hash: String,
    body: String,
    storage: &str,
) -> StoredReceipt {
    StoredReceipt {
        seq,
        prev_hash,
        hash,
        body,
        body_storage: (storage != "text").then(|| storage.to_string()),
    }
}

/// A JSON value stored as text (an execution's result, a state entry).
pub(crate) fn json(text: &str) -> Result<Value, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::Backend(format!("stored json is invalid: {e}")))
}

/// A count or sequence number as the stores' integer column.
pub(crate) fn to_i64(n: u64) -> Result<i64, StoreError> {
    i64::try_from(n).map_err(|_| StoreError::Backend(format!("`{n}` does not fit the store")))
}

/// A limit or a sequence number as a query's parameter: past the integer
/// range, the largest (a range that holds everything).
pub(crate) fn param(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_count_is_none_in_a_transaction_and_no_sum_in_an_audit() {
        assert_eq!(
            spent(5, -1),
            Spent {
                amount: 5,
                calls: 0
            }
        );
        assert_eq!(
            spent(5, 2),
            Spent {
                amount: 5,
                calls: 2
            }
        );
        let audited = audited_spent(None, u64::try_from(-1_i64).ok());
        assert_eq!(audited.amount, i64::MIN);
        assert_eq!(audited.calls, u64::MAX);
    }

    #[test]
    fn spending_past_the_integer_range_is_an_error_never_a_wrapped_sum() {
        let now = Spent {
            amount: i64::MAX - 1,
            calls: 3,
        };
        assert_eq!(spent_after(now, "m", 1).unwrap().calls, 4);
        let err = spent_after(now, "m", 2).unwrap_err();
        assert_eq!(err.to_string(), overflows("m").to_string());
        assert!(err.to_string().contains("`m`"), "{err}");
    }

    #[test]
    fn a_head_marker_with_a_negative_seq_is_an_error_and_shown_as_zero() {
        let err = head(-4, "h".into()).unwrap_err();
        assert!(err.to_string().contains("`-4`"), "{err}");
        assert_eq!(head(4, "h".into()).unwrap(), (4, "h".to_string()));
        assert_eq!(shown_head(-4, "h".into()), (0, "h".to_string()));
    }

    #[test]
    fn a_receipt_body_that_is_not_json_is_kept_as_a_string() {
        let r = receipt(1, "p".into(), "h".into(), "{not json".into());
        assert_eq!(r.body, Value::String("{not json".into()));
        let s = stored_receipt(1, "p".into(), "h".into(), "x".into(), "blob");
        assert_eq!(s.body_storage.as_deref(), Some("blob"));
        let t = stored_receipt(1, "p".into(), "h".into(), "x".into(), "text");
        assert_eq!(t.body_storage, None);
    }

    #[test]
    fn integers_past_the_column_are_refused_or_saturate_as_parameters() {
        assert!(to_i64(u64::MAX).is_err());
        assert_eq!(to_i64(7).unwrap(), 7);
        assert_eq!(param(u64::MAX), i64::MAX);
        assert_eq!(param(usize::MAX), i64::MAX);
        assert!(json("{").is_err());
    }
}
