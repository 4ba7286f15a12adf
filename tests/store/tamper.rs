//! The receipt chain under tampering, on SQLite files: what `verify_chain`
//! names, then what `verify_store` sees past the chain (budgets, nonces,
//! executions, checkpoints).

use crate::common;

use crate::contract_kit::*;
use common::{ATTACKER_IBAN, LANDLORD, TestWorld, assert_deny, decide, input, transfer};
use intentplane::gateway::{Gateway, Outcome};
use intentplane::keys::SecretKey;
use intentplane::store::memory::MemoryStore;
use intentplane::store::sqlite::SqliteStore;
use intentplane::store::{
    ChainProblem, Checkpoint, CheckpointError, Spent, Store, verify_chain, verify_store,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

// ---------------------------------------------------------------- tampering

#[test]
fn tamper_edit_a_body() {
    let (_dir, path) = store_file(8);
    tamper(
        &path,
        r#"UPDATE receipts SET body = json_set(body, '$.decision', 'ALLOW') WHERE seq = 4"#,
    );
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(problems, vec![ChainProblem::Edited { seq: 4 }]);
    assert_eq!(
        problems[0].to_string(),
        "record 4 was edited: its hash does not match its content"
    );
}

#[test]
fn tamper_body_that_is_no_longer_json() {
    let (_dir, path) = store_file(3);
    tamper(
        &path,
        "UPDATE receipts SET body = '{not json' WHERE seq = 2",
    );
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::Edited { seq: 2 }]
    );
}

#[test]
fn tamper_delete_a_middle_record() {
    let (_dir, path) = store_file(8);
    tamper(&path, "DELETE FROM receipts WHERE seq = 5");
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(problems, vec![ChainProblem::Missing { from: 5, to: 5 }]);
    assert_eq!(problems[0].to_string(), "record 5 is missing (deleted)");
}

#[test]
fn tamper_delete_the_first_records() {
    let (_dir, path) = store_file(5);
    tamper(&path, "DELETE FROM receipts WHERE seq <= 2");
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::Missing { from: 1, to: 2 }]
    );
}

#[test]
fn tamper_swap_two_records() {
    let (_dir, path) = store_file(8);
    tamper(
        &path,
        "UPDATE receipts SET seq = -1 WHERE seq = 3;
         UPDATE receipts SET seq = 3 WHERE seq = 4;
         UPDATE receipts SET seq = 4 WHERE seq = -1;",
    );
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(
        problems,
        vec![
            ChainProblem::Reordered {
                seq: 3,
                original_seq: 4
            },
            ChainProblem::Reordered {
                seq: 4,
                original_seq: 3
            },
        ]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 3 was reordered: it was written as record 4"
    );
}

#[test]
fn tamper_cut_the_tail_keeping_the_head() {
    let (_dir, path) = store_file(8);
    tamper(&path, "DELETE FROM receipts WHERE seq > 5");
    let problems = verify_file(&path).unwrap_err();
    assert_eq!(
        problems,
        vec![ChainProblem::Truncated {
            last_seq: 5,
            head_seq: 8
        }]
    );
    assert_eq!(
        problems[0].to_string(),
        "chain truncated: the head marker names record 8 but the last record is 5"
    );
}

#[test]
fn tamper_cut_the_tail_and_move_the_head_back_by_seq_only() {
    let (_dir, path) = store_file(6);
    tamper(
        &path,
        "DELETE FROM receipts WHERE seq > 4; UPDATE head SET seq = 4",
    );
    let problems = verify_file(&path).unwrap_err();
    assert!(
        matches!(
            problems.as_slice(),
            [ChainProblem::HeadMismatch { seq: 4, .. }]
        ),
        "{problems:?}"
    );
}

#[test]
fn tamper_remove_the_head() {
    let (_dir, path) = store_file(3);
    tamper(&path, "DELETE FROM head");
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::NoHead { last_seq: 3 }]
    );
}

#[test]
fn tamper_rewrite_a_record_with_a_fresh_hash() {
    // The attacker edits record 2 and recomputes its hash: record 3 no
    // longer links to it.
    let (_dir, path) = store_file(4);
    let s = SqliteStore::open_existing(&path).unwrap();
    let r2 = s.receipts().unwrap()[1].clone();
    drop(s);
    let body = json!({"decision": "ALLOW", "forged": true});
    let hash = intentplane::store::receipts::record_hash(2, &r2.prev_hash, &body).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute(
        "UPDATE receipts SET body = ?1, hash = ?2 WHERE seq = 2",
        rusqlite::params![body.to_string(), hash],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![ChainProblem::BrokenLink {
            seq: 3,
            prev_seq: 2
        }]
    );
}

#[test]
fn tamper_several_things_at_once_names_each() {
    let (_dir, path) = store_file(12);
    tamper(
        &path,
        r#"UPDATE receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 2;
           DELETE FROM receipts WHERE seq IN (6, 7);
           DELETE FROM receipts WHERE seq > 10;"#,
    );
    assert_eq!(
        verify_file(&path).unwrap_err(),
        vec![
            ChainProblem::Edited { seq: 2 },
            ChainProblem::Missing { from: 6, to: 7 },
            ChainProblem::Truncated {
                last_seq: 10,
                head_seq: 12
            },
        ]
    );
}

// ------------------------------------------- the whole store (verify_store)
//
// Each tamper below verified `ok` before verify looked past the chain: the
// tests assert that `verify_chain` alone still passes, then what
// `verify_store` names.

pub(crate) fn audit_file(
    path: &Path,
    checkpoint: Option<&Checkpoint>,
) -> Result<usize, Vec<ChainProblem>> {
    let s = SqliteStore::open_existing(path).unwrap();
    verify_store(
        &s.snapshot().unwrap(),
        checkpoint.map(|c| (c.seq, c.hash.as_str())),
    )
}

pub(crate) fn ops_key() -> SecretKey {
    SecretKey::from_seed(&[42; 32])
}

/// A checkpoint of record `seq` as the store holds it now.
pub(crate) fn checkpoint_at(path: &Path, seq: u64) -> Checkpoint {
    let s = SqliteStore::open_existing(path).unwrap();
    let r = s
        .receipts()
        .unwrap()
        .into_iter()
        .find(|r| r.seq == seq)
        .unwrap();
    Checkpoint::sign(seq, &r.hash, 1_764_268_800, &ops_key()).unwrap()
}

pub(crate) fn hash_of_record(path: &Path, seq: u64) -> String {
    let s = SqliteStore::open_existing(path).unwrap();
    s.receipts().unwrap()[usize::try_from(seq - 1).unwrap()]
        .hash
        .clone()
}

/// The real gateway on a store file: (1) a 700.00 transfer executes, (2)
/// its replay, (3) a DENY, (4) a 1,200.00 transfer waits for a step-up,
/// (5) which emma's approval executes. Emma's mandate then has 1,900.00
/// spent in two calls, one approval nonce used, two operations executed.
pub(crate) struct Decided {
    pub(crate) w: TestWorld,
    pub(crate) gw: Gateway,
    pub(crate) mandate: Value,
    pub(crate) mandate_id: String,
    pub(crate) path: PathBuf,
    pub(crate) _dir: tempfile::TempDir,
}

pub(crate) fn decided() -> Decided {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    let w = TestWorld::new();
    let gw = w.gateway_with(Arc::new(SqliteStore::open(&path).unwrap()));
    let m = w.emma();
    let paid = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(paid.decision, Outcome::Allow, "{paid:#?}");
    assert!(decide(&gw, transfer(LANDLORD, json!("700.00")), &m).replayed);
    assert_deny(
        &decide(&gw, transfer(ATTACKER_IBAN, json!("1.00")), &m),
        "provenance",
        "payee_iban",
    );
    let big = transfer(LANDLORD, json!("1200.00"));
    let pending = decide(&gw, big.clone(), &m);
    assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
    let op = pending.operation_hash.clone().unwrap();
    let approved = gw
        .decide(&input(big, &m, vec![w.approve("emma", &op)]))
        .unwrap();
    assert_eq!(approved.decision, Outcome::Allow, "{approved:#?}");
    let mandate_id = m["mandate"]["id"].as_str().unwrap().to_string();
    Decided {
        w,
        gw,
        mandate: m,
        mandate_id,
        path,
        _dir: dir,
    }
}

#[test]
fn the_gateway_records_what_each_executed_decision_consumed() {
    let d = decided();
    let snap = d.gw.store().snapshot().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(&d.mandate_id),
        Some(&Spent {
            amount: 190_000,
            calls: 2
        })
    );
    assert_eq!(snap.accounts.executions.len(), 2);
    assert_eq!(snap.accounts.nonces.len(), 1);
    let records = snap.records();
    let nonce = snap.accounts.nonces.iter().next().unwrap();
    assert_eq!(
        records[0].body["consumed"],
        json!({"amount": 70_000, "nonces": []})
    );
    assert_eq!(
        records[4].body["consumed"],
        json!({"amount": 120_000, "nonces": [nonce]})
    );
    for r in &records[1..4] {
        assert!(r.body.get("consumed").is_none(), "{}", r.body);
    }
    // each body is stored as its canonical text
    for (stored, r) in snap.receipts.iter().zip(&records) {
        assert_eq!(
            stored.body,
            intentplane::canonical::value_to_jcs(&r.body).unwrap()
        );
    }
    assert_eq!(verify_store(&snap, None), Ok(5));
    // the memory store keeps the same accounts
    let mem = decided_in_memory(&d);
    assert_eq!(verify_store(&mem.snapshot().unwrap(), None), Ok(2));
}

/// The same world on a memory store: an ALLOW and a DENY.
pub(crate) fn decided_in_memory(d: &Decided) -> Arc<MemoryStore> {
    let store = Arc::new(MemoryStore::new());
    let gw = d.w.gateway_with(store.clone());
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("5.00")), &d.mandate).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, transfer(ATTACKER_IBAN, json!("5.00")), &d.mandate).decision,
        Outcome::Deny
    );
    let snap = store.snapshot().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(&d.mandate_id),
        Some(&Spent {
            amount: 500,
            calls: 1
        })
    );
    store
}

#[test]
fn tamper_delete_the_last_records_and_move_the_head_back() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    let snap = d.gw.store().snapshot().unwrap();
    let nonce = snap.accounts.nonces.iter().next().unwrap().clone();
    let op5 = snap.records()[4].body["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    drop(d.gw);
    tamper(
        &d.path,
        "DELETE FROM receipts WHERE seq > 3;
         UPDATE head SET seq = 3, hash = (SELECT hash FROM receipts WHERE seq = 3);",
    );
    assert_eq!(verify_file(&d.path), Ok(3), "the chain alone looks intact");
    let state = vec![
        ChainProblem::ExecutionWithoutReceipt {
            operation_hash: op5,
        },
        ChainProblem::BudgetMismatch {
            mandate: d.mandate_id.clone(),
            store_amount: 190_000,
            store_calls: 2,
            receipts_amount: 70_000,
            receipts_calls: 1,
        },
        ChainProblem::NonceWithoutReceipt { nonce },
    ];
    assert_eq!(audit_file(&d.path, None), Err(state.clone()));
    let mut with_checkpoint = vec![ChainProblem::CheckpointTruncated {
        checkpoint_seq: 5,
        last_seq: 3,
    }];
    with_checkpoint.extend(state);
    assert_eq!(audit_file(&d.path, Some(&cp)), Err(with_checkpoint));
}

#[test]
fn tamper_drop_trailing_denials_only_a_checkpoint_sees() {
    // records without effects (DENY, PENDING) leave nothing in the state:
    // cutting them off with the head is seen only against a checkpoint
    let (_dir, path) = store_file(4);
    let cp = checkpoint_at(&path, 4);
    tamper(
        &path,
        "DELETE FROM receipts WHERE seq = 4;
         UPDATE head SET seq = 3, hash = (SELECT hash FROM receipts WHERE seq = 3);",
    );
    assert_eq!(audit_file(&path, None), Ok(3));
    assert_eq!(
        audit_file(&path, Some(&cp)),
        Err(vec![ChainProblem::CheckpointTruncated {
            checkpoint_seq: 4,
            last_seq: 3
        }])
    );
}

#[test]
fn tamper_delete_every_record_and_the_head() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    let snap = d.gw.store().snapshot().unwrap();
    drop(d.gw);
    tamper(&d.path, "DELETE FROM receipts; DELETE FROM head;");
    assert_eq!(verify_file(&d.path), Ok(0), "an empty chain looks intact");
    let mut state: Vec<ChainProblem> = snap
        .accounts
        .executions
        .iter()
        .map(|op| ChainProblem::ExecutionWithoutReceipt {
            operation_hash: op.clone(),
        })
        .collect();
    state.push(ChainProblem::BudgetMismatch {
        mandate: d.mandate_id.clone(),
        store_amount: 190_000,
        store_calls: 2,
        receipts_amount: 0,
        receipts_calls: 0,
    });
    state.extend(
        snap.accounts
            .nonces
            .iter()
            .map(|n| ChainProblem::NonceWithoutReceipt { nonce: n.clone() }),
    );
    assert_eq!(state.len(), 4);
    assert_eq!(audit_file(&d.path, None), Err(state.clone()));
    let problems = audit_file(&d.path, Some(&cp)).unwrap_err();
    assert_eq!(
        problems[0],
        ChainProblem::CheckpointTruncated {
            checkpoint_seq: 5,
            last_seq: 0
        }
    );
    assert_eq!(problems[1..], state[..]);
}

#[test]
fn tamper_a_duplicated_key_in_front_of_an_executed_payment() {
    let d = decided();
    drop(d.gw);
    tamper(
        &d.path,
        r#"UPDATE receipts SET body = '{"decision":"DENY",' || substr(body, 2) WHERE seq = 1"#,
    );
    // SQL now reads DENY for the payment that executed...
    let conn = rusqlite::Connection::open(&d.path).unwrap();
    let read: String = conn
        .query_row(
            "SELECT json_extract(body, '$.decision') FROM receipts WHERE seq = 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(read, "DENY");
    drop(conn);
    // ...while a reader keeping the last value hashes the original
    assert_eq!(verify_file(&d.path), Ok(5));
    let problems = audit_file(&d.path, None).unwrap_err();
    assert_eq!(
        problems,
        vec![ChainProblem::DuplicateKey {
            seq: 1,
            key: "decision".into()
        }]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 1 holds the key `decision` twice: readers may disagree on its value"
    );
}

#[test]
fn tamper_a_stored_body_that_is_not_canonical() {
    let (_dir, path) = store_file(4);
    tamper(
        &path,
        r#"UPDATE receipts SET body = replace(body, ',"', ', "') WHERE seq = 3;
           UPDATE receipts SET body = ' ' || body WHERE seq = 4;"#,
    );
    assert_eq!(verify_file(&path), Ok(4));
    let problems = audit_file(&path, None).unwrap_err();
    assert_eq!(
        problems,
        vec![
            ChainProblem::NotCanonical { seq: 3 },
            ChainProblem::NotCanonical { seq: 4 }
        ]
    );
    assert_eq!(
        problems[0].to_string(),
        "record 3 is not stored in canonical form: its bytes are not the canonical json of its content"
    );
}

#[test]
fn tamper_a_body_stored_as_a_blob() {
    let (_dir, path) = store_file(3);
    tamper(
        &path,
        "UPDATE receipts SET body = CAST(body AS BLOB) WHERE seq = 2",
    );
    assert_eq!(verify_file(&path), Ok(3));
    assert_eq!(
        audit_file(&path, None),
        Err(vec![ChainProblem::NotText {
            seq: 2,
            storage: "blob".into()
        }])
    );
}

#[test]
fn tamper_the_state_to_run_a_payment_again() {
    // forgetting an execution and a nonce would let the operation and its
    // approval run again; lowering the budget would let the agent spend more
    let d = decided();
    let snap = d.gw.store().snapshot().unwrap();
    let records = snap.records();
    let op = |i: usize| {
        records[i].body["operation_hash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let nonce = snap.accounts.nonces.iter().next().unwrap().clone();
    drop(d.gw);
    tamper(
        &d.path,
        "DELETE FROM executions; DELETE FROM nonces; UPDATE budgets SET amount = 0;",
    );
    assert_eq!(verify_file(&d.path), Ok(5));
    let problems = audit_file(&d.path, None).unwrap_err();
    let mut expected = vec![
        ChainProblem::ReceiptWithoutExecution {
            seq: 1,
            operation_hash: op(0),
        },
        ChainProblem::ReceiptWithoutExecution {
            seq: 5,
            operation_hash: op(4),
        },
        ChainProblem::ReceiptNonceNotUsed { seq: 5, nonce },
        ChainProblem::BudgetMismatch {
            mandate: d.mandate_id.clone(),
            store_amount: 0,
            store_calls: 2,
            receipts_amount: 190_000,
            receipts_calls: 2,
        },
    ];
    expected.sort_by_key(ChainProblem::seq);
    assert_eq!(problems, expected);
}

#[test]
fn a_chain_that_extends_its_checkpoint_verifies() {
    let d = decided();
    let cp = checkpoint_at(&d.path, 5);
    assert_eq!(audit_file(&d.path, Some(&cp)), Ok(5));
    drop(d.gw);
    // the gateway goes on, on the same file
    let gw =
        d.w.gateway_with(Arc::new(SqliteStore::open(&d.path).unwrap()));
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("50.00")), &d.mandate).decision,
        Outcome::Allow
    );
    assert_deny(
        &decide(&gw, transfer(ATTACKER_IBAN, json!("5.00")), &d.mandate),
        "provenance",
        "payee_iban",
    );
    assert_eq!(audit_file(&d.path, Some(&cp)), Ok(7));
    // an older checkpoint too
    assert_eq!(audit_file(&d.path, Some(&checkpoint_at(&d.path, 2))), Ok(7));
}

#[test]
fn tamper_rewrite_the_chain_and_head_consistently_after_a_checkpoint_is_seen() {
    // The attacker rewrites a DENY (record 4) and recomputes every hash
    // from there on, and the head: the chain and the state agree, only
    // the checkpoint taken at record 5 knows better.
    let (_dir, path) = store_file(6);
    let cp = checkpoint_at(&path, 5);
    let s = SqliteStore::open_existing(&path).unwrap();
    let mut records = s.receipts().unwrap();
    drop(s);
    records[3].body["reason"] = json!("nothing happened here");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for i in 3..records.len() {
        let prev = records[i - 1].hash.clone();
        let r = &mut records[i];
        r.prev_hash = prev;
        r.hash = intentplane::store::receipts::record_hash(r.seq, &r.prev_hash, &r.body).unwrap();
        conn.execute(
            "UPDATE receipts SET prev_hash = ?1, hash = ?2, body = ?3 WHERE seq = ?4",
            rusqlite::params![
                r.prev_hash,
                r.hash,
                intentplane::canonical::value_to_jcs(&r.body).unwrap(),
                r.seq as i64
            ],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE head SET hash = ?1",
        rusqlite::params![records[5].hash],
    )
    .unwrap();
    drop(conn);
    assert_eq!(
        audit_file(&path, None),
        Ok(6),
        "consistent without a checkpoint"
    );
    assert_eq!(
        audit_file(&path, Some(&cp)),
        Err(vec![ChainProblem::CheckpointMismatch {
            seq: 5,
            checkpoint_hash: cp.hash.clone(),
            hash: hash_of_record(&path, 5),
        }])
    );
}

/// An agent's number such as `1e17` is a double; its canonical text has no
/// exponent (`100000000000000000`), which a plain JSON read takes for an
/// integer beyond 2^53 with no exact canonical form: the record looked
/// edited (and a checkpoint was refused) though nobody touched it.
#[test]
fn a_receipt_holding_a_large_double_verifies() {
    let w = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let memory = Arc::new(MemoryStore::new());
    let stores: [Arc<dyn Store>; 2] = [memory, Arc::new(SqliteStore::open(&path).unwrap())];
    for store in stores {
        let gw = w.gateway_with(store.clone());
        let line = r#"{"action": "payment.transfer", "args": {"from_account": "emma-checking",
            "payee_iban": "DE44500105175407324931", "amount": 1e17, "currency": "EUR",
            "note": [1.0694069464974614e17, -1e17]}}"#;
        let proposal = intentplane::base::json::parse_strict(line).unwrap();
        assert_eq!(decide(&gw, proposal, &w.emma()).decision, Outcome::Deny);
        let records = store.receipts().unwrap();
        assert_eq!(verify_chain(&records, store.head().unwrap()), Ok(1));
        assert_eq!(verify_store(&store.snapshot().unwrap(), None), Ok(1));
    }
}

/// A bare proposal line may be 127 levels deep (`parse_strict`); its
/// receipt body would be 128 deep, one more than serde_json reads back, so
/// the receipt keeps such a proposal as its text (`proposal_text`) and the
/// record verifies.
#[test]
fn a_deep_proposal_leaves_a_receipt_that_verifies() {
    let w = TestWorld::new();
    let store = Arc::new(MemoryStore::new());
    let gw = w.gateway_with(store.clone());
    let line = format!("{}{}", "[".repeat(127), "]".repeat(127));
    let proposal = intentplane::base::json::parse_strict(&line).unwrap();
    let d = decide(&gw, proposal, &w.emma());
    assert_eq!(d.decision, Outcome::Deny);
    assert_eq!(verify_store(&store.snapshot().unwrap(), None), Ok(1));
}

#[test]
fn a_checkpoint_file_is_checked_with_the_trusted_key() {
    let (dir, path) = store_file(3);
    let cp = checkpoint_at(&path, 3);
    let file = dir.path().join("cp.json");
    cp.write(&file).unwrap();
    let key = ops_key().public();
    assert_eq!(Checkpoint::load(&file, &key).unwrap(), cp);
    // another key
    let other = SecretKey::from_seed(&[7; 32]).public();
    let err = Checkpoint::load(&file, &other).unwrap_err();
    assert!(matches!(err, CheckpointError::WrongKey { .. }), "{err:?}");
    assert_eq!(
        miette::Diagnostic::code(&err).unwrap().to_string(),
        "ipc::receipts::checkpoint_wrong_key"
    );
    // an edited checkpoint: moved back to record 2 with that record's hash
    let text = std::fs::read_to_string(&file).unwrap();
    let edited = text
        .replace("\"seq\": 3", "\"seq\": 2")
        .replace(&cp.hash, &hash_of_record(&path, 2));
    assert_ne!(edited, text);
    std::fs::write(&file, edited).unwrap();
    let err = Checkpoint::load(&file, &key).unwrap_err();
    assert!(
        matches!(err, CheckpointError::BadSignature { .. }),
        "{err:?}"
    );
    // not a checkpoint
    std::fs::write(&file, "{\"seq\": 3}").unwrap();
    let err = Checkpoint::load(&file, &key).unwrap_err();
    assert!(matches!(err, CheckpointError::Format { .. }), "{err:?}");
    let err = Checkpoint::load(&dir.path().join("missing.json"), &key).unwrap_err();
    assert!(matches!(err, CheckpointError::Io { .. }), "{err:?}");
}
