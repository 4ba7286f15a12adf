//! Opening a store (something that is not one, reopening with its data) and
//! the `ipc` commands over a store (verify, show).

use crate::contract_kit::*;
use intentplane::store::sqlite::SqliteStore;
use intentplane::store::{Store, StoreError, verify_chain};
use serde_json::{Value, json};
use std::path::Path;

// ------------------------------------------------------------ opening files

#[test]
fn opening_something_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(
        &text,
        "these are not the bytes of a database, just some text\n".repeat(100),
    )
    .unwrap();
    let err = SqliteStore::open(&text).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot open store `"), "{err}");
    assert!(err.to_string().contains("not an SQLite database"), "{err}");

    let foreign = dir.path().join("other.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE t (x); INSERT INTO t VALUES (1);")
        .unwrap();
    let err = SqliteStore::open(&foreign).unwrap_err();
    assert!(
        err.to_string().contains("not an intentplane store"),
        "{err}"
    );
    // and it was not touched (still in rollback-journal mode)
    let mode: String = rusqlite::Connection::open(&foreign)
        .unwrap()
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "delete");

    let missing = dir.path().join("missing.db");
    let err = SqliteStore::open_existing(&missing).unwrap_err();
    assert!(err.to_string().contains("no such file"), "{err}");
    assert!(!missing.exists());

    let empty = dir.path().join("empty.db");
    std::fs::write(&empty, "").unwrap();
    let err = SqliteStore::open_existing(&empty).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
}

#[test]
fn a_store_reopens_with_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        tx(&s, |t| {
            t.spend("m", 42)?;
            t.use_nonce("n")?;
            t.append_receipt(&json!({"x": 1}))?;
            Ok(Value::Null)
        })
        .unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    tx(&s, |t| {
        assert_eq!(t.spent("m")?.amount, 42);
        assert!(t.nonce_used("n")?);
        Ok(Value::Null)
    })
    .unwrap();
    append(&s, 2);
    assert_eq!(
        verify_chain(&s.receipts().unwrap(), s.head().unwrap()),
        Ok(3)
    );
}

// ---------------------------------------------------------------- the CLI

#[test]
fn cli_verify_a_good_chain() {
    let (_dir, path) = store_file(5);
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", p]);
    assert_eq!(code, 0, "{stdout}");
    let head = SqliteStore::open_existing(&path)
        .unwrap()
        .head()
        .unwrap()
        .unwrap();
    assert_eq!(
        stdout,
        format!(
            "ok    {p}: 5 receipts verify\nhead  5 {}\n\
             state 3 executions, 1 budget, 2 nonces match the receipts\n",
            head.1
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "verify", p, "--format", "json"]);
    assert_eq!(code, 0);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(true));
    assert_eq!(doc["count"], json!(5));
    assert_eq!(doc["head"], json!({"seq": 5, "hash": head.1}));
    assert_eq!(
        doc["accounts"],
        json!({"executions": 3, "budgets": 1, "nonces": 2})
    );
    assert_eq!(doc["checkpoint"], Value::Null);
    assert_eq!(doc["problems"], json!([]));
}

#[test]
fn cli_verify_names_every_problem() {
    let (_dir, path) = store_file(10);
    tamper(
        &path,
        r#"UPDATE receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 3;
           DELETE FROM receipts WHERE seq = 6;
           DELETE FROM receipts WHERE seq > 8;"#,
    );
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", p]);
    assert_eq!(code, 1, "{stdout}");
    // the chain's problems, then what the store's state shows: the
    // executions, spending and nonces of the deleted and edited ALLOWs
    assert_eq!(
        stdout,
        format!(
            "fail  {p}: 11 problems in 7 receipts\n  \
             record 3 was edited: its hash does not match its content\n  \
             record 3 cannot be accounted for: an executed ALLOW without `operation_hash`\n  \
             record 3 cannot be accounted for: an executed ALLOW that does not record what it \
             consumed (no `consumed`: written by a gateway older than this check?)\n  \
             record 6 is missing (deleted)\n  \
             chain truncated: the head marker names record 10 but the last record is 8\n  \
             operation `sha256:op-2` was executed but no receipt allows it (receipts deleted?)\n  \
             operation `sha256:op-5` was executed but no receipt allows it (receipts deleted?)\n  \
             operation `sha256:op-8` was executed but no receipt allows it (receipts deleted?)\n  \
             mandate `m-1`: the store records 2700 spent in 6 calls, the receipts add up to \
             1200 in 3 calls (minor units)\n  \
             approval nonce `n-2` is used up but no receipt consumed it (receipts deleted?)\n  \
             approval nonce `n-8` is used up but no receipt consumed it (receipts deleted?)\n"
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "verify", "--format", "json", p]);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(false));
    assert_eq!(
        doc["problems"][0],
        json!({"problem": "edited", "seq": 3,
               "message": "record 3 was edited: its hash does not match its content"})
    );
    assert_eq!(doc["problems"][1]["problem"], json!("unaccounted"));
    assert_eq!(doc["problems"][3]["problem"], json!("missing"));
    assert_eq!(doc["problems"][4]["problem"], json!("truncated"));
    assert_eq!(
        doc["problems"][5],
        json!({"problem": "execution_without_receipt", "operation_hash": "sha256:op-2",
               "message": "operation `sha256:op-2` was executed but no receipt allows it (receipts deleted?)"})
    );
    assert_eq!(
        doc["problems"][8],
        json!({"problem": "budget_mismatch", "mandate": "m-1",
               "store_amount": 2700, "store_calls": 6,
               "receipts_amount": 1200, "receipts_calls": 3,
               "message": "mandate `m-1`: the store records 2700 spent in 6 calls, the receipts add up to 1200 in 3 calls (minor units)"})
    );
}

#[test]
fn cli_show_the_receipts() {
    let (_dir, path) = store_file(4);
    let p = path.to_str().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "show", p, "--last", "2"]);
    assert_eq!(code, 0, "{stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["seq", "kind", "subject", "detail", "hash"]
    );
    assert!(
        lines[1].starts_with("  3  ALLOW  payment.transfer  execution  "),
        "{stdout}"
    );
    assert!(lines[2].starts_with("  4  DENY   "), "{stdout}");
    assert_eq!(lines[3], "2 receipts of 4; the chain verifies");

    let (code, stdout, _) = ipc(&["receipts", "show", p, "--format", "json"]);
    assert_eq!(code, 0);
    let records: Vec<intentplane::store::ReceiptRecord> = serde_json::from_str(&stdout).unwrap();
    let s = SqliteStore::open_existing(&path).unwrap();
    assert_eq!(records, s.receipts().unwrap());
}

#[test]
fn cli_on_a_file_that_is_not_a_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.txt");
    std::fs::write(&path, "hello, not a database at all; ".repeat(50)).unwrap();
    let p = path.to_str().unwrap();
    for cmd in ["verify", "show"] {
        let (code, stdout, stderr) = ipc(&["receipts", cmd, p]);
        assert_eq!(code, 1);
        assert_eq!(stdout, "");
        assert!(stderr.contains("cannot open store"), "{stderr}");
        assert!(stderr.contains("ipc::store::open"), "{stderr}");
    }
    let (code, stdout, _) = ipc(&[
        "receipts",
        "verify",
        "--format",
        "json",
        "/nonexistent/store.db",
    ]);
    assert_eq!(code, 1);
    let doc: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(doc["ok"], json!(false));
    assert_eq!(doc["error"]["code"], json!("ipc::store::open"));
    assert!(!Path::new("/nonexistent/store.db").exists());
}
