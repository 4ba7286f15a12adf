//! Issue #14: a PostgreSQL store on another machine is reached over TLS
//! with the server's certificate checked (`src/store/postgres/tls.rs`), and
//! a URL that would cross the network in clear is refused. The TLS tests
//! need the test cluster's authority (`IPC_TEST_PG_TLS`, set by
//! `scripts/test` from `scripts/pg-cluster`); the refusals need no server.
// needs a part of the default features: the test is off without it
#![cfg(feature = "postgres")]

use crate::common;
use common::*;
use intentplane::store::postgres::PgStore;
use intentplane::store::{Store, StoreError, verify_store};
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// The test server's URL under another host name (`localhost`, which its
/// certificate holds, or a name it does not hold, reached at 127.0.0.1),
/// in `schema`, with TLS checked against `ca`.
fn tls_url(schema: &pg::Schema, host: &str, ca: &Path, app: &str) -> String {
    let server = std::env::var(pg::ENV).unwrap();
    let port = server
        .rsplit_once(':')
        .and_then(|(_, rest)| rest.split('/').next())
        .unwrap()
        .to_string();
    let user = server
        .trim_start_matches("postgres://")
        .split('@')
        .next()
        .unwrap()
        .to_string();
    let hostaddr = if host == "localhost" {
        String::new()
    } else {
        "&hostaddr=127.0.0.1".into()
    };
    format!(
        "postgres://{user}@{host}:{port}/postgres?options=-csearch_path%3D{}&application_name={app}{hostaddr}&sslmode=verify-full&sslrootcert={}",
        schema.name,
        ca.display()
    )
}

/// Over verified TLS the store works as ever (a receipt appended, the
/// store verifies), and the server sees the session encrypted.
#[test]
fn a_store_over_verified_tls_works_and_its_session_is_encrypted() {
    let Some(dir) = pg::tls_dir() else { return };
    let schema = pg::fresh().unwrap();
    let url = tls_url(&schema, "localhost", &dir.join("ca.pem"), "ipc-tls-ok");
    let store = PgStore::open(&url).unwrap();
    store
        .transaction(&mut |tx| {
            tx.append_receipt(&json!({"decision": "DENY", "over": "tls"}))?;
            Ok(serde_json::Value::Null)
        })
        .unwrap();
    assert_eq!(verify_store(&store.snapshot().unwrap(), None), Ok(1));
    let mut admin = pg::admin(&std::env::var(pg::ENV).unwrap());
    let sessions: Vec<bool> = admin
        .query(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
             WHERE a.application_name = 'ipc-tls-ok'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(sessions, vec![true], "the store's session, encrypted");
}

/// A server whose certificate another authority signed is refused before
/// anything is sent: the store does not open.
#[test]
fn a_server_certified_by_another_authority_is_refused() {
    let Some(dir) = pg::tls_dir() else { return };
    let schema = pg::fresh().unwrap();
    let url = tls_url(
        &schema,
        "localhost",
        &dir.join("other-ca.pem"),
        "ipc-tls-other",
    );
    let e = PgStore::open(&url).unwrap_err();
    assert!(matches!(e, StoreError::Open { .. }), "{e}");
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");
}

/// A server reached under a name its certificate does not hold (the
/// right address, the wrong name) is refused.
#[test]
fn a_server_under_a_name_its_certificate_does_not_hold_is_refused() {
    let Some(dir) = pg::tls_dir() else { return };
    let schema = pg::fresh().unwrap();
    let url = tls_url(&schema, "db.example", &dir.join("ca.pem"), "ipc-tls-name");
    let e = PgStore::open(&url).unwrap_err();
    assert!(matches!(e, StoreError::Open { .. }), "{e}");
    assert!(e.to_string().contains("not valid for name"), "{e}");
}

/// `ipc` refuses, before connecting, a store URL that names another
/// machine without TLS, or asks for TLS that checks nothing; the
/// diagnostic names the code and the way out.
#[test]
fn ipc_refuses_a_store_url_in_clear_or_unchecked() {
    for (url, code) in [
        ("postgres://ipc@db.internal/intentplane", "plaintext_remote"),
        (
            "postgres://ipc@db.internal/intentplane?sslmode=require",
            "ipc::store::tls",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(["receipts", "verify", url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(stderr.contains(code), "{url}: {stderr}");
        assert!(stderr.contains("sslmode=verify-full"), "{url}: {stderr}");
    }
}
