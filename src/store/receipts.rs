//! Hash-chained receipts: every gateway outcome is one record whose hash
//! covers its sequence number, the previous record's hash and its body, so
//! that editing, deleting, reordering or truncating records is detected by
//! [`verify_chain`].
//!
//! A record's hash is `sha256:<hex>` of the canonical JSON (RFC 8785) of
//! `{"seq": .., "prev_hash": .., "body": ..}`; the first record has
//! `seq = 1` and `prev_hash = GENESIS_HASH`. The store also keeps a head
//! marker (the last sequence number and hash) so that cutting records off
//! the end of the chain is detected too.
//!
//! [`verify_chain`] checks the chain alone, as parsed records; a store is
//! verified whole (stored bytes, its state against the chain, a signed
//! checkpoint) by [`super::audit::verify_store`].

use crate::canonical::Jcs;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;

/// The `prev_hash` of the first record.
pub const GENESIS_HASH: &str =
    "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// One stored receipt: its place in the chain and its body.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReceiptRecord {
    pub seq: u64,
    pub prev_hash: String,
    pub hash: String,
    pub body: Value,
}

impl ReceiptRecord {
    /// Builds the record that follows `prev` (or the first record when
    /// `prev` is `None`), computing its hash.
    pub fn next(prev: Option<(u64, &str)>, body: Value) -> Result<Self, String> {
        let (seq, prev_hash) = match prev {
            Some((seq, hash)) => (seq + 1, hash.to_string()),
            None => (1, GENESIS_HASH.to_string()),
        };
        let hash = record_hash(seq, &prev_hash, &body)?;
        Ok(Self {
            seq,
            prev_hash,
            hash,
            body,
        })
    }

    /// Whether the stored hash matches the record's content.
    pub fn is_intact(&self) -> bool {
        record_hash(self.seq, &self.prev_hash, &self.body).is_ok_and(|h| h == self.hash)
    }
}

/// The hash of a record: `sha256:<hex>` of the canonical JSON of
/// `{seq, prev_hash, body}`. Fails on a body with no exact canonical form
/// (an integer beyond ±(2^53 − 1)), see [`crate::canonical`].
pub fn record_hash(seq: u64, prev_hash: &str, body: &Value) -> Result<String, String> {
    let body = Jcs::from_value(body).map_err(|e| e.to_string())?;
    Ok(record_hash_jcs(seq, prev_hash, &body))
}

/// [`record_hash`] of a body already in canonical form: the canonical text
/// of `{seq, prev_hash, body}` (keys in JCS order) is fed to SHA-256
/// around the body's own text, never copied.
pub fn record_hash_jcs(seq: u64, prev_hash: &str, body: &Jcs) -> String {
    use sha2::{Digest, Sha256};
    let mut tail = String::from(",\"prev_hash\":");
    crate::canonical::write_string(prev_hash, &mut tail);
    tail.push_str(&format!(",\"seq\":{seq}}}"));
    let mut h = Sha256::new();
    h.update(b"{\"body\":");
    h.update(body.as_str().as_bytes());
    h.update(tail.as_bytes());
    crate::canonical::sha256_tagged(h.finalize().as_slice())
}

/// Where a new record went in the chain (what `Tx::append_receipt_jcs`
/// returns; the body is the caller's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainLink {
    pub seq: u64,
    pub prev_hash: String,
    pub hash: String,
}

impl ChainLink {
    /// The link after `prev` (or the first one) for a canonical body.
    pub fn next(prev: Option<(u64, &str)>, body: &Jcs) -> Self {
        let (seq, prev_hash) = match prev {
            Some((seq, hash)) => (seq + 1, hash),
            None => (1, GENESIS_HASH),
        };
        ChainLink {
            seq,
            hash: record_hash_jcs(seq, prev_hash, body),
            prev_hash: prev_hash.to_string(),
        }
    }
}

/// The body of a receipt as the gateway writes it. Every field is optional
/// on reading so that `ipc receipts show` can display any body; fields the
/// gateway adds later land in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Receipt {
    /// When the decision was made (RFC 3339, from the gateway's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// `ALLOW`, `PENDING` or `DENY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// The stage that decided (`authn`, `contract`, ..., `execution`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The action named by the proposal, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The proposal exactly as the agent sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposal: Option<Value>,
    /// Resolved values with their origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// Ids of the Cedar policies that decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policy_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_hash: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Receipt {
    /// The JSON body to pass to `Tx::append_receipt`.
    pub fn to_body(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// One thing wrong with a receipt chain; each names the records involved.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum ChainProblem {
    /// The record's hash does not match its content.
    Edited { seq: u64 },
    /// The record is intact but sits at another place than the one it was
    /// written for (its content hashes correctly with `original_seq`).
    Reordered { seq: u64, original_seq: u64 },
    /// The records `from..=to` are absent (deleted).
    Missing { from: u64, to: u64 },
    /// The record comes after a record with a higher sequence number.
    OutOfOrder { seq: u64, after: u64 },
    /// Two records share a sequence number.
    Duplicate { seq: u64 },
    /// The record's `prev_hash` is not the hash of the record before it.
    BrokenLink { seq: u64, prev_seq: u64 },
    /// The first record does not start from the genesis hash.
    BadGenesis { seq: u64 },
    /// The head marker names records beyond the last one present.
    Truncated { last_seq: u64, head_seq: u64 },
    /// The last record is the one the head names, but its hash differs.
    HeadMismatch {
        seq: u64,
        head_hash: String,
        hash: String,
    },
    /// Records follow the one the head marker names.
    BeyondHead { head_seq: u64, last_seq: u64 },
    /// There are records but no head marker.
    NoHead { last_seq: u64 },

    // -- the stored bytes (`verify_store`)
    /// The body is stored as another SQLite type than text.
    NotText { seq: u64, storage: String },
    /// The stored body holds an object key twice: two readers (the
    /// verifier, SQL's `json_extract`) may see two different values.
    DuplicateKey { seq: u64, key: String },
    /// The stored body's bytes are not its canonical JSON form (spacing,
    /// key order, escapes, number form): what was hashed is not what is
    /// stored.
    NotCanonical { seq: u64 },

    // -- the store's state against the chain (`verify_store`)
    /// An executed ALLOW that does not say what it consumed, or a receipt
    /// that cannot be accounted for.
    Unaccounted { seq: u64, reason: String },
    /// The store records an executed operation that no receipt allows.
    ExecutionWithoutReceipt { operation_hash: String },
    /// An executed ALLOW whose operation the store does not record.
    ReceiptWithoutExecution { seq: u64, operation_hash: String },
    /// Two receipts execute the same operation.
    ExecutedTwice {
        seq: u64,
        first_seq: u64,
        operation_hash: String,
    },
    /// The store's budget of a mandate is not the sum of its receipts.
    BudgetMismatch {
        mandate: String,
        store_amount: i64,
        store_calls: u64,
        receipts_amount: i128,
        receipts_calls: u64,
    },
    /// The store marks an approval nonce used that no receipt consumed.
    NonceWithoutReceipt { nonce: String },
    /// A receipt consumed a nonce the store does not mark used.
    ReceiptNonceNotUsed { seq: u64, nonce: String },

    // -- a signed checkpoint (`verify_store` with a checkpoint)
    /// The chain ends before the checkpoint's record.
    CheckpointTruncated { checkpoint_seq: u64, last_seq: u64 },
    /// The record at the checkpoint's sequence number is not the one the
    /// checkpoint signed.
    CheckpointMismatch {
        seq: u64,
        checkpoint_hash: String,
        hash: String,
    },
}

impl ChainProblem {
    /// The sequence number the problem is about (for sorting and display).
    pub fn seq(&self) -> u64 {
        match self {
            Self::Edited { seq }
            | Self::Reordered { seq, .. }
            | Self::OutOfOrder { seq, .. }
            | Self::Duplicate { seq }
            | Self::BrokenLink { seq, .. }
            | Self::BadGenesis { seq }
            | Self::HeadMismatch { seq, .. } => *seq,
            Self::Missing { from, .. } => *from,
            Self::Truncated { last_seq, .. } => last_seq + 1,
            Self::BeyondHead { head_seq, .. } => head_seq + 1,
            Self::NoHead { last_seq } => *last_seq,
            Self::NotText { seq, .. }
            | Self::DuplicateKey { seq, .. }
            | Self::NotCanonical { seq }
            | Self::Unaccounted { seq, .. }
            | Self::ReceiptWithoutExecution { seq, .. }
            | Self::ExecutedTwice { seq, .. }
            | Self::ReceiptNonceNotUsed { seq, .. }
            | Self::CheckpointMismatch { seq, .. } => *seq,
            Self::CheckpointTruncated { last_seq, .. } => last_seq + 1,
            // about the store's state, not one record: listed last
            Self::ExecutionWithoutReceipt { .. }
            | Self::BudgetMismatch { .. }
            | Self::NonceWithoutReceipt { .. } => u64::MAX,
        }
    }
}

impl fmt::Display for ChainProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Edited { seq } => write!(
                f,
                "record {seq} was edited: its hash does not match its content"
            ),
            Self::Reordered { seq, original_seq } => write!(
                f,
                "record {seq} was reordered: it was written as record {original_seq}"
            ),
            Self::Missing { from, to } if from == to => {
                write!(f, "record {from} is missing (deleted)")
            }
            Self::Missing { from, to } => {
                write!(f, "records {from} to {to} are missing (deleted)")
            }
            Self::OutOfOrder { seq, after } => write!(
                f,
                "record {seq} is out of order: it comes after record {after}"
            ),
            Self::Duplicate { seq } => write!(f, "record {seq} appears more than once"),
            Self::BrokenLink { seq, prev_seq } => write!(
                f,
                "record {seq} does not follow record {prev_seq}: its `prev_hash` is not the hash of record {prev_seq}"
            ),
            Self::BadGenesis { seq } => write!(
                f,
                "record {seq} starts the chain but its `prev_hash` is not the genesis hash"
            ),
            Self::Truncated { last_seq, head_seq } => write!(
                f,
                "chain truncated: the head marker names record {head_seq} but the last record is {last_seq}"
            ),
            Self::HeadMismatch {
                seq,
                head_hash,
                hash,
            } => write!(
                f,
                "record {seq} differs from the head marker: hash `{hash}`, head `{head_hash}`"
            ),
            Self::BeyondHead { head_seq, last_seq } => write!(
                f,
                "records {} to {last_seq} follow the head marker (record {head_seq})",
                head_seq + 1
            ),
            Self::NoHead { last_seq } => write!(
                f,
                "the head marker is missing but the chain has records up to {last_seq}"
            ),
            Self::NotText { seq, storage } => write!(
                f,
                "record {seq}: the body is stored as `{storage}`, not as text"
            ),
            Self::DuplicateKey { seq, key } => write!(
                f,
                "record {seq} holds the key `{}` twice: readers may disagree on its value",
                key.escape_debug()
            ),
            Self::NotCanonical { seq } => write!(
                f,
                "record {seq} is not stored in canonical form: its bytes are not the canonical json of its content"
            ),
            Self::Unaccounted { seq, reason } => {
                write!(f, "record {seq} cannot be accounted for: {reason}")
            }
            Self::ExecutionWithoutReceipt { operation_hash } => write!(
                f,
                "operation `{}` was executed but no receipt allows it (receipts deleted?)",
                operation_hash.escape_debug()
            ),
            Self::ReceiptWithoutExecution {
                seq,
                operation_hash,
            } => write!(
                f,
                "record {seq} executed operation `{}` but the store has no execution of it",
                operation_hash.escape_debug()
            ),
            Self::ExecutedTwice {
                seq,
                first_seq,
                operation_hash,
            } => write!(
                f,
                "record {seq} executes operation `{}` again (first executed in record {first_seq})",
                operation_hash.escape_debug()
            ),
            Self::BudgetMismatch {
                mandate,
                store_amount,
                store_calls,
                receipts_amount,
                receipts_calls,
            } => write!(
                f,
                "mandate `{}`: the store records {store_amount} spent in {}, the receipts add up to {receipts_amount} in {} (minor units)",
                mandate.escape_debug(),
                calls(*store_calls),
                calls(*receipts_calls)
            ),
            Self::NonceWithoutReceipt { nonce } => write!(
                f,
                "approval nonce `{}` is used up but no receipt consumed it (receipts deleted?)",
                nonce.escape_debug()
            ),
            Self::ReceiptNonceNotUsed { seq, nonce } => write!(
                f,
                "record {seq} consumed approval nonce `{}` but the store does not mark it used",
                nonce.escape_debug()
            ),
            Self::CheckpointTruncated {
                checkpoint_seq,
                last_seq,
            } => write!(
                f,
                "chain truncated: the checkpoint names record {checkpoint_seq} but the last record is {last_seq}"
            ),
            Self::CheckpointMismatch {
                seq,
                checkpoint_hash,
                hash,
            } => write!(
                f,
                "record {seq} differs from the checkpoint: hash `{hash}`, checkpoint `{checkpoint_hash}`"
            ),
        }
    }
}

fn calls(n: u64) -> String {
    if n == 1 {
        "1 call".into()
    } else {
        format!("{n} calls")
    }
}

/// Most hash-mismatched records for which a reorder is looked for (each
/// try costs one hash per other mismatched record).
const REORDER_SEARCH_LIMIT: usize = 256;

/// Verifies a chain given in stored order, against the store's head marker.
/// Returns the number of records, or every problem found (sorted by the
/// sequence number they concern).
pub fn verify_chain(
    records: &[ReceiptRecord],
    head: Option<(u64, String)>,
) -> Result<usize, Vec<ChainProblem>> {
    let mut problems = Vec::new();

    // 1. Content: each record's hash against its content. A mismatched
    //    record whose content hashes correctly under another mismatched
    //    record's sequence number was moved, not edited.
    let mismatched: Vec<usize> = (0..records.len())
        .filter(|&i| !records[i].is_intact())
        .collect();
    let candidate_seqs: BTreeSet<u64> = mismatched.iter().map(|&i| records[i].seq).collect();
    let mut moved = BTreeSet::new();
    for &i in &mismatched {
        let r = &records[i];
        let original = if mismatched.len() <= REORDER_SEARCH_LIMIT {
            candidate_seqs.iter().copied().find(|&s| {
                s != r.seq && record_hash(s, &r.prev_hash, &r.body).is_ok_and(|h| h == r.hash)
            })
        } else {
            None
        };
        match original {
            Some(original_seq) => {
                moved.insert(i);
                problems.push(ChainProblem::Reordered {
                    seq: r.seq,
                    original_seq,
                });
            }
            None => problems.push(ChainProblem::Edited { seq: r.seq }),
        }
    }

    // 2. Sequence numbers: duplicates, gaps, order.
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for r in records {
        *counts.entry(r.seq).or_default() += 1;
    }
    for (&seq, &n) in &counts {
        if n > 1 {
            problems.push(ChainProblem::Duplicate { seq });
        }
    }
    let mut expected = 1u64;
    for &seq in counts.keys() {
        if seq > expected {
            problems.push(ChainProblem::Missing {
                from: expected,
                to: seq - 1,
            });
        }
        expected = expected.max(seq.saturating_add(1));
    }
    let mut out_of_order = BTreeSet::new();
    for (i, pair) in records.windows(2).enumerate() {
        if pair[1].seq < pair[0].seq {
            out_of_order.insert(i + 1);
            problems.push(ChainProblem::OutOfOrder {
                seq: pair[1].seq,
                after: pair[0].seq,
            });
        }
    }

    // 3. Links, where no problem above already explains a break.
    let index_of: HashMap<u64, usize> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.seq, i))
        .collect();
    for (i, r) in records.iter().enumerate() {
        if moved.contains(&i) || out_of_order.contains(&i) {
            continue;
        }
        if r.seq == 1 {
            if r.prev_hash != GENESIS_HASH {
                problems.push(ChainProblem::BadGenesis { seq: r.seq });
            }
            continue;
        }
        let Some(&p) = r.seq.checked_sub(1).and_then(|s| index_of.get(&s)) else {
            continue; // a gap, already named
        };
        if moved.contains(&p) {
            continue;
        }
        if records[p].hash != r.prev_hash {
            problems.push(ChainProblem::BrokenLink {
                seq: r.seq,
                prev_seq: records[p].seq,
            });
        }
    }

    // 4. The head marker.
    let last = records.iter().map(|r| r.seq).max();
    match (head, last) {
        (None, None) => {}
        (None, Some(last_seq)) => problems.push(ChainProblem::NoHead { last_seq }),
        (Some((head_seq, _)), None) => problems.push(ChainProblem::Truncated {
            last_seq: 0,
            head_seq,
        }),
        (Some((head_seq, head_hash)), Some(last_seq)) => {
            if last_seq < head_seq {
                problems.push(ChainProblem::Truncated { last_seq, head_seq });
            } else if last_seq > head_seq {
                problems.push(ChainProblem::BeyondHead { head_seq, last_seq });
            } else if let Some(r) = index_of.get(&last_seq).map(|&i| &records[i])
                && r.hash != head_hash
            {
                problems.push(ChainProblem::HeadMismatch {
                    seq: last_seq,
                    head_hash,
                    hash: r.hash.clone(),
                });
            }
        }
    }

    if problems.is_empty() {
        Ok(records.len())
    } else {
        problems.sort_by_key(ChainProblem::seq);
        Err(problems)
    }
}

#[cfg(test)]
mod hash_tests {
    use super::*;
    use serde_json::json;

    /// The direct construction is the canonical encoding of the record.
    #[test]
    fn record_hash_is_the_hash_of_the_canonical_record() {
        let body = json!({"z": [1, 2.5, "é\u{1}"], "a": {"k": null}});
        let whole = json!({"seq": 7, "prev_hash": "sha256:00", "body": body});
        assert_eq!(
            record_hash(7, "sha256:00", &body).unwrap(),
            crate::canonical::hash_of(&whole).unwrap()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chain(n: u64) -> Vec<ReceiptRecord> {
        let mut out: Vec<ReceiptRecord> = Vec::new();
        for i in 0..n {
            let prev = out.last().map(|r| (r.seq, r.hash.as_str()));
            let r = ReceiptRecord::next(prev, json!({ "i": i })).unwrap();
            out.push(r);
        }
        out
    }

    fn head(c: &[ReceiptRecord]) -> Option<(u64, String)> {
        c.last().map(|r| (r.seq, r.hash.clone()))
    }

    #[test]
    fn hash_is_jcs_of_seq_prev_body() {
        let r = ReceiptRecord::next(None, json!({"b": 1, "a": "x"})).unwrap();
        let text = format!(r#"{{"body":{{"a":"x","b":1}},"prev_hash":"{GENESIS_HASH}","seq":1}}"#);
        assert_eq!(
            r.hash,
            format!("sha256:{}", crate::canonical::sha256_hex(text.as_bytes()))
        );
        assert_eq!(r.seq, 1);
    }

    #[test]
    fn a_good_chain_verifies() {
        let c = chain(5);
        assert_eq!(verify_chain(&c, head(&c)), Ok(5));
        assert_eq!(verify_chain(&[], None), Ok(0));
    }

    #[test]
    fn swapped_positions_are_out_of_order() {
        let mut c = chain(5);
        let h = head(&c);
        c.swap(1, 2);
        let problems = verify_chain(&c, h).unwrap_err();
        assert_eq!(
            problems,
            vec![ChainProblem::OutOfOrder { seq: 2, after: 3 }]
        );
    }

    #[test]
    fn rewritten_hash_breaks_the_next_link() {
        let mut c = chain(4);
        let h = head(&c);
        c[1].body = json!({"i": 99});
        c[1].hash = record_hash(2, &c[1].prev_hash, &c[1].body).unwrap();
        let problems = verify_chain(&c, h).unwrap_err();
        assert_eq!(
            problems,
            vec![ChainProblem::BrokenLink {
                seq: 3,
                prev_seq: 2
            }]
        );
    }

    #[test]
    fn problems_read_well() {
        assert_eq!(
            ChainProblem::Missing { from: 3, to: 3 }.to_string(),
            "record 3 is missing (deleted)"
        );
        assert_eq!(
            serde_json::to_value(ChainProblem::Edited { seq: 4 }).unwrap(),
            json!({"problem": "edited", "seq": 4})
        );
    }
}
