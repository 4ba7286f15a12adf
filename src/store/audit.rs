//! Verifying a whole store, not only its chain: the bytes each receipt is
//! stored as, the chain and its head ([`verify_chain`]), the store's
//! state against what the chain says happened, and optionally a signed
//! checkpoint ([`super::checkpoint`]) the chain must extend.
//!
//! **Stored bytes.** The gateway stores each body as its canonical JSON
//! text and hashes that text. A body whose stored bytes are not exactly
//! the canonical form of their content is refused: otherwise a body with a
//! key written twice (`{"decision":"DENY", ...the original...}`) would
//! hash like the original for a reader that keeps the last value, while
//! SQL's `json_extract` reads the first.
//!
//! **State against the chain.** Budgets, used approval nonces and executed
//! operations are only ever written by an executed decision, in the same
//! transaction as its ALLOW receipt, and that receipt records what it
//! consumed (`"consumed": {"amount", "nonces"}`, its `mandate.id` and its
//! `operation_hash`). So the chain alone gives what the state must be:
//! every executed operation has exactly one executed ALLOW (a read: every
//! execution of it, under its own key), each mandate's
//! spent amount and call count are the sums of its executed ALLOWs (a
//! child's ALLOW counts for each of its `mandate.ancestors` too), and
//! every used nonce was consumed by one. An execution, spend or nonce
//! without its receipt means receipts were deleted (the last ones, with
//! the head moved back, or all of them and the head). Revocations and the
//! systems-of-record state are written by the trusted side too
//! (`ipc token revoke`, a user adding a payee, trusted scenario steps)
//! without a receipt, so they are not checked against the chain.

use super::Spent;
use super::receipts::{ChainProblem, ReceiptRecord, verify_chain};
use crate::canonical::Jcs;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A receipt exactly as stored: the body is the stored text, unparsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredReceipt {
    pub seq: u64,
    pub prev_hash: String,
    pub hash: String,
    pub body: String,
    /// The storage type of the body when it is not text (SQLite: `blob`,
    /// `integer`, `real`, `null`); `None` for text.
    pub body_storage: Option<String>,
}

impl StoredReceipt {
    /// The record with its body parsed, as [`super::Store::receipts`]
    /// gives it (a body that is not JSON is kept as a string).
    pub fn record(&self) -> ReceiptRecord {
        ReceiptRecord {
            seq: self.seq,
            prev_hash: self.prev_hash.clone(),
            hash: self.hash.clone(),
            body: parse_body(&self.body),
        }
    }
}

/// What the store remembers besides the receipts that the chain accounts
/// for: spent budgets by mandate id, used approval nonces, executed
/// operation hashes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Accounts {
    pub budgets: BTreeMap<String, Spent>,
    pub nonces: BTreeSet<String>,
    pub executions: BTreeSet<String>,
}

/// The receipts, the head marker and the accounts, read together (one
/// read transaction: a concurrent writer cannot make them disagree).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub receipts: Vec<StoredReceipt>,
    pub head: Option<(u64, String)>,
    pub accounts: Accounts,
}

impl Snapshot {
    /// The records with their bodies parsed, as [`super::Store::receipts`]
    /// gives them (a body that is not JSON is kept as a string).
    pub fn records(&self) -> Vec<ReceiptRecord> {
        self.receipts.iter().map(StoredReceipt::record).collect()
    }

    /// The last record's sequence number and hash, if any.
    pub fn last(&self) -> Option<(u64, &str)> {
        self.receipts
            .iter()
            .max_by_key(|r| r.seq)
            .map(|r| (r.seq, r.hash.as_str()))
    }
}

fn parse_body(text: &str) -> Value {
    // A body that is not JSON (tampered) is kept as a string: its hash will
    // not match, and verify says so.
    crate::canonical::read_json(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Verifies a store: stored bytes, chain and head, the accounts against
/// the chain and, given `checkpoint` (a sequence number and hash a signed
/// checkpoint vouches for), that the chain extends it. Returns the number
/// of records, or every problem (sorted by the record they concern; the
/// problems about the store's state, which name no record, last).
pub fn verify_store(
    snap: &Snapshot,
    checkpoint: Option<(u64, &str)>,
) -> Result<usize, Vec<ChainProblem>> {
    let mut problems = Vec::new();
    let mut records = Vec::with_capacity(snap.receipts.len());
    for r in &snap.receipts {
        if let Some(storage) = &r.body_storage {
            problems.push(ChainProblem::NotText {
                seq: r.seq,
                storage: storage.clone(),
            });
        }
        // a text that is not JSON is left to the hash check (it cannot
        // match: the record was edited)
        let parsed: Option<Value> = crate::canonical::read_json(&r.body).ok();
        if let Some(p) = parsed.as_ref().and_then(|v| stored_form(r.seq, &r.body, v)) {
            problems.push(p);
        }
        let body = parsed.unwrap_or_else(|| Value::String(r.body.clone()));
        records.push(ReceiptRecord {
            seq: r.seq,
            prev_hash: r.prev_hash.clone(),
            hash: r.hash.clone(),
            body,
        });
    }
    if let Err(chain) = verify_chain(&records, snap.head.clone()) {
        problems.extend(chain);
    }
    cross_check(&records, &snap.accounts, &mut problems);
    if let Some((seq, hash)) = checkpoint {
        check_checkpoint(snap, seq, hash, &mut problems);
    }
    if problems.is_empty() {
        Ok(records.len())
    } else {
        problems.sort_by_key(ChainProblem::seq);
        Err(problems)
    }
}

/// A body whose stored text is not the canonical form of its content. A
/// content without canonical form is left to the hash check (it cannot
/// match: the record was edited).
fn stored_form(seq: u64, text: &str, body: &Value) -> Option<ChainProblem> {
    let canonical = Jcs::from_value(body).ok()?;
    if canonical.as_str() == text {
        return None;
    }
    // the duplicate-refusing reader names a key written twice
    match crate::base::json::parse_no_duplicates(text) {
        Err(msg) => match duplicated_key(&msg) {
            Some(key) => Some(ChainProblem::DuplicateKey { seq, key }),
            None => Some(ChainProblem::NotCanonical { seq }),
        },
        Ok(_) => Some(ChainProblem::NotCanonical { seq }),
    }
}

/// The key in `` duplicate key `KEY` at line L column C ``.
fn duplicated_key(msg: &str) -> Option<String> {
    let rest = msg.strip_prefix("duplicate key `")?;
    let key = match rest.rsplit_once("` at line ") {
        Some((key, _)) => key,
        None => rest.strip_suffix('`')?,
    };
    Some(key.to_string())
}

/// What the chain says the accounts must hold.
#[derive(Default)]
struct Ledger {
    /// Amount (wide: a sum of many i64) and calls by mandate id.
    budgets: BTreeMap<String, (i128, u64)>,
    /// Nonce → the record that consumed it.
    nonces: BTreeMap<String, u64>,
    /// Operation hash → the record that executed it.
    executions: BTreeMap<String, u64>,
}

fn str_at<'v>(body: &'v Value, path: &[&str]) -> Option<&'v str> {
    path.iter()
        .try_fold(body, |v, k| v.get(k))
        .and_then(Value::as_str)
}

/// The prefix of a shadow decision's keys (`crate::gateway::shadow::PREFIX`:
/// the store names nothing of the gateway).
pub(crate) const SHADOW_PREFIX: &str = "shadow:";

/// The accounts against the chain's executed ALLOW receipts.
fn cross_check(records: &[ReceiptRecord], accounts: &Accounts, problems: &mut Vec<ChainProblem>) {
    let mut ledger = Ledger::default();
    for r in records {
        let b = &r.body;
        let unaccounted = |reason: &str| ChainProblem::Unaccounted {
            seq: r.seq,
            reason: reason.to_string(),
        };
        if str_at(b, &["kind"]) == Some("shard") && str_at(b, &["change"]) == Some("moved-in") {
            brought(r.seq, b, accounts, &mut ledger, problems);
            continue;
        }
        // a replay answers with the recorded result and consumes nothing;
        // a SHADOW decision that would have been an ALLOW consumed under
        // the shadow keys (`crate::gateway::shadow`)
        let shadow = str_at(b, &["decision"]) == Some("SHADOW");
        let allowed = if shadow {
            str_at(b, &["would_be", "decision"]) == Some("ALLOW")
        } else {
            str_at(b, &["decision"]) == Some("ALLOW")
        };
        let executed = allowed && b.get("replayed") != Some(&Value::Bool(true));
        let k = |key: &str| {
            if shadow {
                format!("{SHADOW_PREFIX}{key}")
            } else {
                key.to_string()
            }
        };
        let consumed = b.get("consumed");
        if !executed {
            if consumed.is_some() {
                problems.push(unaccounted("it records `consumed` but did not execute"));
            }
            continue;
        }
        // a read is recorded under its execution's key, which names its
        // operation (`super::read_execution`); a write under the
        // operation hash
        let key = match (str_at(b, &["effect"]), str_at(b, &["operation_hash"])) {
            (None, op) => op,
            (Some("read"), Some(op)) => match str_at(b, &["execution"]) {
                Some(e) if super::read_operation(e) == Some(op) => Some(e),
                _ => {
                    problems.push(unaccounted(
                        "an executed read whose `execution` is not a key of its operation",
                    ));
                    continue;
                }
            },
            (Some(_), _) => {
                problems.push(unaccounted("an executed ALLOW of an unknown `effect`"));
                continue;
            }
        };
        match key.map(k) {
            Some(op) => match ledger.executions.get(&op) {
                Some(&first_seq) => problems.push(ChainProblem::ExecutedTwice {
                    seq: r.seq,
                    first_seq,
                    operation_hash: op.to_string(),
                }),
                None => {
                    ledger.executions.insert(op.clone(), r.seq);
                    if !accounts.executions.contains(&op) {
                        problems.push(ChainProblem::ReceiptWithoutExecution {
                            seq: r.seq,
                            operation_hash: op,
                        });
                    }
                }
            },
            None => problems.push(unaccounted("an executed ALLOW without `operation_hash`")),
        }
        let Some(consumed) = consumed else {
            problems.push(unaccounted(
                "an executed ALLOW that does not record what it consumed \
                 (no `consumed`: written by a gateway older than this check?)",
            ));
            continue;
        };
        let amount = consumed.get("amount").and_then(Value::as_i64);
        let nonces: Option<Vec<&str>> = consumed
            .get("nonces")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_str).collect());
        let (Some(amount), Some(nonces)) = (amount, nonces) else {
            problems.push(unaccounted(
                "`consumed` is not `{\"amount\": <integer>, \"nonces\": [<string>...]}`",
            ));
            continue;
        };
        match str_at(b, &["mandate", "id"]) {
            Some(m) => {
                // a child mandate spends from each ancestor's budget too
                let ancestors = b
                    .get("mandate")
                    .and_then(|m| m.get("ancestors"))
                    .and_then(Value::as_array);
                let links = ancestors
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .chain(std::iter::once(m));
                for id in links {
                    let e = ledger.budgets.entry(k(id)).or_default();
                    e.0 += i128::from(amount);
                    e.1 = e.1.saturating_add(1);
                }
            }
            None => problems.push(unaccounted("an executed ALLOW without `mandate.id`")),
        }
        for n in nonces.into_iter().map(k) {
            let n = n.as_str();
            if let Some(&first) = ledger.nonces.get(n) {
                problems.push(unaccounted(&format!(
                    "it consumes approval nonce `{}`, already consumed by record {first}",
                    n.escape_debug()
                )));
                continue;
            }
            ledger.nonces.insert(n.to_string(), r.seq);
            if !accounts.nonces.contains(n) {
                problems.push(ChainProblem::ReceiptNonceNotUsed {
                    seq: r.seq,
                    nonce: n.to_string(),
                });
            }
        }
    }

    for op in &accounts.executions {
        if !ledger.executions.contains_key(op) {
            problems.push(ChainProblem::ExecutionWithoutReceipt {
                operation_hash: op.clone(),
            });
        }
    }
    let mandates: BTreeSet<&String> = accounts
        .budgets
        .keys()
        .chain(ledger.budgets.keys())
        .collect();
    for m in mandates {
        let store = accounts.budgets.get(m).copied().unwrap_or_default();
        let (amount, calls) = ledger.budgets.get(m).copied().unwrap_or_default();
        if i128::from(store.amount) != amount || store.calls != calls {
            problems.push(ChainProblem::BudgetMismatch {
                mandate: m.clone(),
                store_amount: store.amount,
                store_calls: store.calls,
                receipts_amount: amount,
                receipts_calls: calls,
            });
        }
    }
    for n in &accounts.nonces {
        if !ledger.nonces.contains_key(n) {
            problems.push(ChainProblem::NonceWithoutReceipt { nonce: n.clone() });
        }
    }
}

/// A tenant moved in from another shard (`ipc shards move`): its receipt
/// lists what the move wrote here (`brought`: budgets as `[amount,
/// calls]` added, nonces and executions recorded), which the old shard's
/// receipts account for.
fn brought(
    seq: u64,
    b: &Value,
    accounts: &Accounts,
    ledger: &mut Ledger,
    problems: &mut Vec<ChainProblem>,
) {
    let Some(br) = b.get("brought") else {
        problems.push(ChainProblem::Unaccounted {
            seq,
            reason: "a tenant moved in without `brought`".into(),
        });
        return;
    };
    let strs = |k: &str| -> Vec<String> {
        br.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(String::from)
            .collect()
    };
    for (id, v) in br
        .get("budgets")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let e = ledger.budgets.entry(id.clone()).or_default();
        e.0 += i128::from(v.get(0).and_then(Value::as_i64).unwrap_or(0));
        e.1 =
            e.1.saturating_add(v.get(1).and_then(Value::as_u64).unwrap_or(0));
    }
    for n in strs("nonces") {
        if !accounts.nonces.contains(&n) {
            problems.push(ChainProblem::ReceiptNonceNotUsed {
                seq,
                nonce: n.clone(),
            });
        }
        ledger.nonces.entry(n).or_insert(seq);
    }
    for op in strs("executions") {
        if !accounts.executions.contains(&op) {
            problems.push(ChainProblem::ReceiptWithoutExecution {
                seq,
                operation_hash: op.clone(),
            });
        }
        ledger.executions.entry(op).or_insert(seq);
    }
}

/// The chain must reach the checkpoint's record, and that record must be
/// the one signed. Its hash covers every record before it through the
/// links, which [`verify_chain`] checks.
fn check_checkpoint(snap: &Snapshot, seq: u64, hash: &str, problems: &mut Vec<ChainProblem>) {
    let last_seq = snap.last().map_or(0, |(s, _)| s);
    if last_seq < seq {
        problems.push(ChainProblem::CheckpointTruncated {
            checkpoint_seq: seq,
            last_seq,
        });
        return;
    }
    // a record absent at `seq` is a gap, which the chain check names
    if let Some(r) = snap.receipts.iter().find(|r| r.seq == seq)
        && r.hash != hash
    {
        problems.push(ChainProblem::CheckpointMismatch {
            seq,
            checkpoint_hash: hash.to_string(),
            hash: r.hash.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::receipts::ReceiptRecord;
    use serde_json::json;

    fn stored(bodies: &[Value]) -> Snapshot {
        let mut out: Vec<ReceiptRecord> = Vec::new();
        for b in bodies {
            let prev = out.last().map(|r| (r.seq, r.hash.as_str()));
            out.push(ReceiptRecord::next(prev, b.clone()).unwrap());
        }
        Snapshot {
            head: out.last().map(|r| (r.seq, r.hash.clone())),
            receipts: out
                .iter()
                .map(|r| StoredReceipt {
                    seq: r.seq,
                    prev_hash: r.prev_hash.clone(),
                    hash: r.hash.clone(),
                    body: Jcs::from_value(&r.body).unwrap().into_string(),
                    body_storage: None,
                })
                .collect(),
            accounts: Accounts::default(),
        }
    }

    fn executed(m: &str, op: &str, amount: i64, nonces: &[&str]) -> Value {
        json!({"decision": "ALLOW", "replayed": false, "mandate": {"id": m},
               "operation_hash": op, "consumed": {"amount": amount, "nonces": nonces}})
    }

    #[test]
    fn the_accounts_of_a_consistent_store_verify() {
        let mut s = stored(&[
            executed("m1", "op1", 500, &["n1"]),
            json!({"decision": "ALLOW", "replayed": true, "mandate": {"id": "m1"},
                   "operation_hash": "op1"}),
            json!({"decision": "DENY", "mandate": null}),
            executed("m1", "op2", 0, &[]),
            executed("m2", "op3", 7, &["n2", "n3"]),
        ]);
        s.accounts.budgets.insert(
            "m1".into(),
            Spent {
                amount: 500,
                calls: 2,
            },
        );
        s.accounts.budgets.insert(
            "m2".into(),
            Spent {
                amount: 7,
                calls: 1,
            },
        );
        s.accounts.nonces = ["n1", "n2", "n3"].map(String::from).into();
        s.accounts.executions = ["op1", "op2", "op3"].map(String::from).into();
        assert_eq!(verify_store(&s, None), Ok(5));
        let (seq, hash) = s.last().map(|(q, h)| (q, h.to_string())).unwrap();
        assert_eq!(verify_store(&s, Some((seq, &hash))), Ok(5));
        assert_eq!(verify_store(&s, Some((2, &s.receipts[1].hash))), Ok(5));
    }

    /// A read executes again at each call, each execution under its own
    /// key: the same operation in several executed ALLOWs is no double
    /// execution then, as long as each names a key of that operation and
    /// no key twice.
    #[test]
    fn each_execution_of_a_read_is_accounted_under_its_own_key() {
        let read = |op: &str, key: &str| {
            let mut b = executed("m1", op, 0, &[]);
            b["effect"] = json!("read");
            b["execution"] = json!(key);
            b
        };
        let k1 = crate::store::read_execution("op1", 1);
        let k2 = crate::store::read_execution("op1", 2);
        let mut s = stored(&[read("op1", &k1), read("op1", &k2)]);
        s.accounts.budgets.insert(
            "m1".into(),
            Spent {
                amount: 0,
                calls: 2,
            },
        );
        s.accounts.executions = [k1.clone(), k2.clone()].into();
        assert_eq!(verify_store(&s, None), Ok(2));
        // the same key twice is executed twice; a key of another operation
        // (or none) is unaccounted for; a key in the store without its
        // receipt is named
        let mut s = stored(&[
            read("op1", &k1),
            read("op1", &k1),
            read("op2", &k2),
            executed("m1", "op3", 0, &[]),
        ]);
        s.accounts.budgets.insert(
            "m1".into(),
            Spent {
                amount: 0,
                calls: 3,
            },
        );
        s.accounts.executions = [k1.clone(), "op3".into(), "op1/read/9".into()].into();
        let shown: Vec<String> = verify_store(&s, None)
            .unwrap_err()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            vec![
                format!("record 2 executes operation `{k1}` again (first executed in record 1)"),
                "record 3 cannot be accounted for: an executed read whose `execution` is not a key of its operation".to_string(),
                "operation `op1/read/9` was executed but no receipt allows it (receipts deleted?)"
                    .to_string(),
            ],
        );
    }

    #[test]
    fn state_without_receipts_is_named() {
        let mut s = stored(&[executed("m1", "op1", 500, &["n1"])]);
        s.accounts.budgets.insert(
            "m1".into(),
            Spent {
                amount: 900,
                calls: 2,
            },
        );
        s.accounts.nonces = ["n1", "n9"].map(String::from).into();
        s.accounts.executions = ["op1", "op9"].map(String::from).into();
        let problems = verify_store(&s, None).unwrap_err();
        assert_eq!(
            problems,
            vec![
                ChainProblem::ExecutionWithoutReceipt {
                    operation_hash: "op9".into()
                },
                ChainProblem::BudgetMismatch {
                    mandate: "m1".into(),
                    store_amount: 900,
                    store_calls: 2,
                    receipts_amount: 500,
                    receipts_calls: 1
                },
                ChainProblem::NonceWithoutReceipt { nonce: "n9".into() },
            ]
        );
        assert_eq!(
            problems[1].to_string(),
            "mandate `m1`: the store records 900 spent in 2 calls, the receipts add up to 500 in 1 call (minor units)"
        );
    }

    #[test]
    fn receipts_without_state_and_unaccountable_receipts_are_named() {
        let s = stored(&[
            executed("m1", "op1", 5, &["n1"]),
            executed("m1", "op1", 5, &["n1"]),
            json!({"decision": "ALLOW", "replayed": false, "mandate": {"id": "m1"},
                   "operation_hash": "op2"}),
            json!({"decision": "DENY", "consumed": {"amount": 1, "nonces": []}}),
        ]);
        let problems = verify_store(&s, None).unwrap_err();
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            shown,
            vec![
                "record 1 executed operation `op1` but the store has no execution of it",
                "record 1 consumed approval nonce `n1` but the store does not mark it used",
                "record 2 executes operation `op1` again (first executed in record 1)",
                "record 2 cannot be accounted for: it consumes approval nonce `n1`, already consumed by record 1",
                "record 3 executed operation `op2` but the store has no execution of it",
                "record 3 cannot be accounted for: an executed ALLOW that does not record what it consumed (no `consumed`: written by a gateway older than this check?)",
                "record 4 cannot be accounted for: it records `consumed` but did not execute",
                "mandate `m1`: the store records 0 spent in 0 calls, the receipts add up to 10 in 2 calls (minor units)",
            ]
        );
    }

    #[test]
    fn stored_bytes_must_be_canonical() {
        let mut s = stored(&[json!({"a": 1, "decision": "ALLOW", "replayed": true})]);
        let original = s.receipts[0].body.clone();
        s.receipts[0].body = format!("{{\"decision\":\"DENY\",{}", &original[1..]);
        assert_eq!(
            verify_store(&s, None),
            Err(vec![ChainProblem::DuplicateKey {
                seq: 1,
                key: "decision".into()
            }])
        );
        s.receipts[0].body = original.replace(',', ", ");
        assert_eq!(
            verify_store(&s, None),
            Err(vec![ChainProblem::NotCanonical { seq: 1 }])
        );
        s.receipts[0].body = original.clone();
        s.receipts[0].body_storage = Some("blob".into());
        assert_eq!(
            verify_store(&s, None),
            Err(vec![ChainProblem::NotText {
                seq: 1,
                storage: "blob".into()
            }])
        );
        // not JSON at all: the hash check says it was edited
        s.receipts[0].body = "{not json".into();
        s.receipts[0].body_storage = None;
        assert_eq!(
            verify_store(&s, None),
            Err(vec![ChainProblem::Edited { seq: 1 }])
        );
    }

    #[test]
    fn a_chain_must_extend_its_checkpoint() {
        let s = stored(&[json!({"n": 1}), json!({"n": 2})]);
        assert_eq!(
            verify_store(&s, Some((3, "sha256:x"))),
            Err(vec![ChainProblem::CheckpointTruncated {
                checkpoint_seq: 3,
                last_seq: 2
            }])
        );
        assert_eq!(
            verify_store(&s, Some((1, "sha256:x"))),
            Err(vec![ChainProblem::CheckpointMismatch {
                seq: 1,
                checkpoint_hash: "sha256:x".into(),
                hash: s.receipts[0].hash.clone(),
            }])
        );
        assert_eq!(
            verify_store(&Snapshot::default(), Some((1, "sha256:x"))),
            Err(vec![ChainProblem::CheckpointTruncated {
                checkpoint_seq: 1,
                last_seq: 0
            }])
        );
    }

    #[test]
    fn duplicated_key_is_read_from_the_message() {
        assert_eq!(
            duplicated_key("duplicate key `a` b` at line 1 column 9").as_deref(),
            Some("a` b")
        );
        assert_eq!(duplicated_key("duplicate key `k`").as_deref(), Some("k"));
        assert_eq!(duplicated_key("expected value at line 1 column 1"), None);
    }
}
