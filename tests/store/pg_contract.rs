//! The PostgreSQL halves of the store's concurrency, opening, tampering and
//! CLI tests, and serialization failures retried (issue #14).

#![cfg(feature = "postgres")]

use crate::common;

use crate::contract_kit::*;
use common::{ATTACKER_IBAN, LANDLORD, TestWorld, assert_deny, decide, input, transfer};
use intentplane::gateway::Outcome;
#[cfg(feature = "postgres")]
use intentplane::store::postgres::PgStore;
use intentplane::store::{ChainProblem, Spent, Store, StoreError, verify_chain, verify_store};
use serde_json::json;
use std::process::Command;
use std::sync::Arc;

// ------------------------------------------------------------- PostgreSQL
//
// The contract tests (`contract.rs`) run on PostgreSQL through `each_store`; these
// are the PostgreSQL halves of the concurrency, opening, tampering and CLI
// tests (each skips loudly without `IPC_TEST_PG`, fails under `CI`).

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_spend_exactly_the_cap_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    threads_spend(pg_store(&pg));
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_with_two_store_handles_on_one_database() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // two handles: two connections, as two instances would have
    let a = pg_store(&pg);
    let b = pg_store(&pg);
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let s = Arc::clone(if i % 2 == 0 { &a } else { &b });
            std::thread::spawn(move || {
                (0..100)
                    .filter(|_| spend_one(s.as_ref(), &format!("thread-{i}")))
                    .count()
            })
        })
        .collect();
    let ok: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(ok, CAP as usize);
    assert_eq!(
        verify_chain(&b.receipts().unwrap(), a.head().unwrap()),
        Ok(CAP as usize)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_gateway_on_postgres_records_what_it_consumed_and_verifies() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let store = pg_store(&pg);
    let gw = w.gateway_with(store.clone());
    let m = w.emma();
    let paid = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(paid.decision, Outcome::Allow, "{paid:#?}");
    assert!(decide(&gw, transfer(LANDLORD, json!("700.00")), &m).replayed);
    let big = transfer(LANDLORD, json!("1200.00"));
    let pending = decide(&gw, big.clone(), &m);
    assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
    let op = pending.operation_hash.clone().unwrap();
    let approval = w.approve("emma", &op);
    let approved = gw
        .decide(&input(big.clone(), &m, vec![approval.clone()]))
        .unwrap();
    assert_eq!(approved.decision, Outcome::Allow, "{approved:#?}");
    // the approval is single use, also from another instance
    let other = w.gateway_with(pg_store(&pg));
    let again = other.decide(&input(big, &m, vec![approval])).unwrap();
    assert!(
        again.replayed || again.decision != Outcome::Allow,
        "{again:#?}"
    );
    let snap = store.snapshot().unwrap();
    let mandate_id = m["mandate"]["id"].as_str().unwrap();
    assert_eq!(
        snap.accounts.budgets.get(mandate_id),
        Some(&Spent {
            amount: 190_000,
            calls: 2
        })
    );
    assert_eq!(snap.accounts.executions.len(), 2);
    assert_eq!(snap.accounts.nonces.len(), 1);
    assert_eq!(verify_store(&snap, None), Ok(5));
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_reopens_with_its_data() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    {
        let s = PgStore::open(&pg.url).unwrap();
        append(&s, 4);
    }
    let s = PgStore::open_existing(&pg.url).unwrap();
    append(&s, 2);
    assert_eq!(verify_store(&s.snapshot().unwrap(), None), Ok(6));
    // the meta table: the application marker and the schema version
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let rows = c
        .query(
            &format!("SELECT key, value FROM {}.ipc_meta ORDER BY key", pg.name),
            &[],
        )
        .unwrap();
    let meta: Vec<(String, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        meta,
        vec![
            ("application".to_string(), "intentplane".to_string()),
            ("schema_version".to_string(), "1".to_string())
        ]
    );
}

#[cfg(feature = "postgres")]
#[test]
fn opening_a_postgres_schema_that_is_not_a_store() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // an empty schema is no store for `ipc receipts`, and is left empty
    let err = PgStore::open_existing(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Open { .. }), "{err:?}");
    assert!(
        err.to_string().contains("not an intentplane store"),
        "{err}"
    );
    // another application's table with one of the store's names
    pg.sql("CREATE TABLE ipc_receipts (id INT); INSERT INTO ipc_receipts VALUES (7);");
    let err = PgStore::open(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert_eq!(
        miette::Diagnostic::code(&err).unwrap().to_string(),
        "ipc::store::foreign"
    );
    // never modified: no table was added
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let n: i64 = c
        .query_one(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1",
            &[&pg.name],
        )
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
    // another application's meta table
    pg.sql(
        "DROP TABLE ipc_receipts; CREATE TABLE ipc_meta (key TEXT, value TEXT);
         INSERT INTO ipc_meta VALUES ('application', 'someone-else');",
    );
    let err = PgStore::open(&pg.url).unwrap_err();
    assert!(matches!(err, StoreError::Foreign { .. }), "{err:?}");
    assert!(err.to_string().contains("another application"), "{err}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_of_a_newer_version_is_refused_untouched() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 2);
    pg.sql("UPDATE ipc_meta SET value = '2' WHERE key = 'schema_version'");
    for create in [true, false] {
        let err = PgStore::open_with(&pg.url, Default::default(), create).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::NewerSchema {
                    found: 2,
                    supported: 1,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!(
            miette::Diagnostic::code(&err).unwrap().to_string(),
            "ipc::store::newer_schema"
        );
    }
    pg.sql("UPDATE ipc_meta SET value = '1' WHERE key = 'schema_version'");
    assert_eq!(
        verify_store(&PgStore::open(&pg.url).unwrap().snapshot().unwrap(), None),
        Ok(2)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_url_with_a_password_is_refused() {
    // no server needed: refused before connecting
    for url in [
        "postgres://alice:s3cret@db.example:5432/ipc",
        "postgresql://alice:s3cret@db.example/ipc?sslmode=disable",
        "postgres://alice@db.example/ipc?password=s3cret",
    ] {
        let err = PgStore::open(url).unwrap_err();
        assert!(matches!(err, StoreError::PasswordInUrl { .. }), "{err:?}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert_eq!(
            miette::Diagnostic::code(&err).unwrap().to_string(),
            "ipc::store::password_in_url"
        );
    }
    assert_eq!(
        intentplane::store::postgres::redact("postgres://alice:s3cret@db:5432/x"),
        "postgres://alice:***@db:5432/x"
    );
    assert_eq!(
        intentplane::store::postgres::redact("postgres://alice@db/x?password=s3cret&host=/run"),
        "postgres://alice@db/x?password=***&host=/run"
    );
    // and on the command line, before anything else happens
    let (code, _, stderr) = ipc(&[
        "token",
        "revoke",
        "--store",
        "postgres://alice:s3cret@127.0.0.1:1/ipc",
        "tok",
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("holds a password"), "{stderr}");
    assert!(!stderr.contains("s3cret"), "{stderr}");
}

#[cfg(feature = "postgres")]
#[test]
fn tamper_a_postgres_store_and_verify_names_it() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 10);
    pg.sql(
        r#"UPDATE ipc_receipts SET body = '{"decision":"ALLOW"}' WHERE seq = 3;
           DELETE FROM ipc_receipts WHERE seq = 6;
           DELETE FROM ipc_receipts WHERE seq > 8;"#,
    );
    let problems = verify_store(
        &PgStore::open_existing(&pg.url).unwrap().snapshot().unwrap(),
        None,
    )
    .unwrap_err();
    assert!(
        problems.contains(&ChainProblem::Edited { seq: 3 }),
        "{problems:?}"
    );
    assert!(
        problems.contains(&ChainProblem::Missing { from: 6, to: 6 }),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, ChainProblem::Truncated { .. })),
        "{problems:?}"
    );
    // the CLI says the same, in the same words as for a file
    let (code, stdout, _) = ipc(&["receipts", "verify", &pg.url]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.starts_with(&format!("fail  {}: 11 problems in 7 receipts\n", pg.url)),
        "{stdout}"
    );
    assert!(stdout.contains("record 6 is missing (deleted)"), "{stdout}");
}

#[cfg(feature = "postgres")]
#[test]
fn cli_verify_show_and_revoke_on_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let s = PgStore::open(&pg.url).unwrap();
    append(&s, 5);
    let head = s.head().unwrap().unwrap();
    let (code, stdout, _) = ipc(&["receipts", "verify", &pg.url]);
    assert_eq!(code, 0, "{stdout}");
    assert_eq!(
        stdout,
        format!(
            "ok    {}: 5 receipts verify\nhead  5 {}\n\
             state 3 executions, 1 budget, 2 nonces match the receipts\n",
            pg.url, head.1
        )
    );
    let (code, stdout, _) = ipc(&["receipts", "show", &pg.url, "--format", "json"]);
    assert_eq!(code, 0, "{stdout}");
    let records: Vec<intentplane::store::ReceiptRecord> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(records, s.receipts().unwrap());
    let (code, stdout, stderr) = ipc(&["token", "revoke", "--store", &pg.url, "tok-9"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        tx(&s, |t| Ok(json!(t.revoked("tok-9")?)))
            .unwrap()
            .as_bool()
            .unwrap()
    );
    // `ipc receipts` never creates a store
    let Some(empty) = common::pg::fresh() else {
        return;
    };
    let (code, _, stderr) = ipc(&["receipts", "verify", &empty.url]);
    assert_eq!(code, 1);
    assert!(stderr.contains("not an intentplane store"), "{stderr}");
}

#[cfg(feature = "postgres")]
#[test]
fn a_postgres_store_reconnects_after_its_connection_is_killed() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // a name of its own, to find this store's server process
    let url = format!("{}&application_name={}", pg.url, pg.name);
    let s = PgStore::open(&url).unwrap();
    append(&s, 2);
    let mut admin = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    let killed: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1) t",
            &[&pg.name],
        )
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    // the dead connection is found at `BEGIN`, before the body runs: the
    // store connects again and the transaction goes through
    let seq = tx(&s, |t| {
        t.spend("m-1", 1)?;
        t.append_receipt(&json!({"decision": "DENY", "after": "reconnect"}))
            .map(|r| json!(r.seq))
    })
    .unwrap();
    assert_eq!(seq, json!(3));
    let snap = s.snapshot().unwrap();
    assert_eq!(snap.receipts.len(), 3);
    // one spend from `append`, one after the reconnection: none lost, none twice
    assert_eq!(snap.accounts.budgets["m-1"].calls, 2);
}

#[cfg(feature = "postgres")]
#[test]
fn a_world_naming_a_postgres_store_runs_on_it() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    // `store = URL` in the world, no `--store`: the URL is taken as written
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let world = w.dir.path().join("world-pg.toml");
    std::fs::write(&world, format!("store = {:?}\n{text}", pg.url)).unwrap();
    let mandate = w.dir.path().join("m.json");
    std::fs::write(&mandate, w.emma().to_string()).unwrap();
    let input = w.dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n{}\n",
            transfer(LANDLORD, json!("12.00")),
            transfer(ATTACKER_IBAN, json!("12.00"))
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["run", "--bundle", w.bundle_path.to_str().unwrap()])
        .args(["--world", world.to_str().unwrap()])
        .args(["--mandate", mandate.to_str().unwrap()])
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = PgStore::open_existing(&pg.url).unwrap();
    let snap = s.snapshot().unwrap();
    assert_eq!(verify_store(&snap, None), Ok(2));
    assert_eq!(snap.records()[0].body["decision"], json!("ALLOW"));
    assert_eq!(snap.records()[1].body["decision"], json!("DENY"));
}

#[cfg(feature = "postgres")]
#[test]
fn the_postgres_password_comes_from_the_file_named_in_the_environment() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // an unreadable file: a typed error naming the variable, no connection
    let missing = dir.path().join("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["token", "revoke", "--store", &pg.url, "tok"])
        .env("IPC_PG_PASSWORD_FILE", &missing)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("IPC_PG_PASSWORD_FILE"), "{stderr}");
    assert!(stderr.contains("cannot read the password file"), "{stderr}");
    // a readable one is used (the test server trusts local connections,
    // so any password is accepted)
    let file = dir.path().join("pw");
    std::fs::write(&file, "not-on-the-command-line\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["token", "revoke", "--store", &pg.url, "tok"])
        .env("IPC_PG_PASSWORD_FILE", &file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = PgStore::open_existing(&pg.url).unwrap();
    assert_eq!(
        tx(&s, |t| Ok(json!(t.revoked("tok")?))).unwrap(),
        json!(true)
    );
}

#[cfg(feature = "postgres")]
#[test]
fn tamper_a_postgres_store_with_other_column_types_and_nulls() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    append(&PgStore::open(&pg.url).unwrap(), 4);
    pg.sql(
        "ALTER TABLE ipc_receipts ALTER COLUMN body TYPE bytea USING convert_to(body, 'UTF8');
         ALTER TABLE ipc_receipts ALTER COLUMN prev_hash DROP NOT NULL;
         UPDATE ipc_receipts SET prev_hash = NULL WHERE seq = 3;
         ALTER TABLE ipc_budgets ALTER COLUMN calls DROP NOT NULL;
         UPDATE ipc_budgets SET calls = NULL;",
    );
    // read and judged, never a panic
    let s = PgStore::open_existing(&pg.url).unwrap();
    let problems = verify_store(&s.snapshot().unwrap(), None).unwrap_err();
    assert!(
        problems.contains(&ChainProblem::NotText {
            seq: 1,
            storage: "bytea".into()
        }),
        "{problems:?}"
    );
    assert!(problems.len() >= 5, "{problems:?}");
    // a decision-time read of the tampered budget is an error, not a panic
    let err = tx(&s, |t| t.spent("m-1").map(|sp| json!(sp))).unwrap_err();
    assert!(matches!(err, StoreError::Backend(_)), "{err:?}");
}

#[cfg(feature = "postgres")]
/// Makes every write to `table` in the schema fail with SQLSTATE `code`
/// (40001 serialization failure, 40P01 deadlock) for its first `times`
/// rows, counted by a sequence (which a rollback does not undo).
pub(crate) fn inject_failures(pg: &common::pg::Schema, table: &str, code: &str, times: i64) {
    pg.sql(&format!(
        "CREATE SEQUENCE {table}_fails;
         CREATE FUNCTION {table}_fail() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF nextval('{schema}.{table}_fails') <= {times} THEN
             RAISE EXCEPTION 'injected' USING ERRCODE = '{code}';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER {table}_fail BEFORE INSERT OR UPDATE ON {table}
           FOR EACH ROW EXECUTE FUNCTION {table}_fail();",
        schema = pg.name
    ));
}

#[cfg(feature = "postgres")]
/// How many writes the trigger of [`inject_failures`] saw.
pub(crate) fn failures_seen(pg: &common::pg::Schema, table: &str) -> i64 {
    let mut c = common::pg::admin(&std::env::var(common::pg::ENV).unwrap());
    c.query_one(
        &format!("SELECT last_value FROM {}.{table}_fails", pg.name),
        &[],
    )
    .unwrap()
    .get(0)
}

#[cfg(feature = "postgres")]
/// Issue #14, item 1: a serialization failure or a deadlock, wherever in
/// a decision's writes the server raises it (the budget, the execution,
/// the receipt, the chain's head), is retried from the start and the
/// decision is taken once, on the attempt that commits: never a DENY
/// made of the error, never a double spend or a second execution.
#[test]
fn a_serialization_failure_is_retried_never_a_wrong_decision_postgres() {
    for (table, code) in [
        ("ipc_budgets", "40001"),
        ("ipc_executions", "40P01"),
        ("ipc_head", "40001"),
        ("ipc_receipts", "40P01"),
    ] {
        let Some(pg) = common::pg::fresh() else {
            return;
        };
        let store = pg_store(&pg);
        inject_failures(&pg, table, code, 3);
        let w = TestWorld::new();
        let gw = w.gateway_with(store.clone());
        let m = w.emma();
        let d = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
        assert_eq!(d.decision, Outcome::Allow, "{table}: {d:#?}");
        assert!(!d.replayed, "{table}");
        assert!(failures_seen(&pg, table) > 3, "{table}: never retried");
        let snap = store.snapshot().unwrap();
        let mandate_id = m["mandate"]["id"].as_str().unwrap();
        assert_eq!(
            snap.accounts.budgets.get(mandate_id),
            Some(&Spent {
                amount: 70_000,
                calls: 1
            }),
            "{table}"
        );
        assert_eq!(snap.accounts.executions.len(), 1, "{table}");
        assert_eq!(verify_store(&snap, None), Ok(1), "{table}");
    }
}

#[cfg(feature = "postgres")]
/// A transaction that keeps failing is given up after the retries: never
/// an ALLOW, and nothing of it committed. Since issue #21 (item 5) that
/// decision is a DENY (stage receipt) whose receipt is the only write of a
/// fresh transaction, instead of an error for its whole batch.
#[test]
fn serialization_failures_without_end_decide_nothing_postgres() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let store = pg_store(&pg);
    inject_failures(&pg, "ipc_executions", "40001", i64::MAX);
    let w = TestWorld::new();
    let gw = w.gateway_with(store.clone());
    let d = gw.decide(&input(
        transfer(LANDLORD, json!("700.00")),
        &w.emma(),
        vec![],
    ));
    let d = d.unwrap();
    assert_deny(&d, "receipt", "the store refused this decision");
    let snap = store.snapshot().unwrap();
    assert_eq!(snap.receipts.len(), 1, "the DENY's receipt alone");
    assert!(snap.accounts.executions.is_empty());
    assert!(snap.accounts.budgets.is_empty());
    assert_eq!(verify_store(&snap, None), Ok(1));
}
