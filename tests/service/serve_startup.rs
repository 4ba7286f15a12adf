//! `ipc serve`: starting and stopping: the refusal to run without a token
//! on TCP, without a store, or on a frozen clock; the Unix socket and its
//! mode; SIGTERM.

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::serve_kit::*;

/// `ipc serve` with these flags, which must refuse to start.
pub(crate) fn refused(w: &TestWorld, args: &[&str]) -> (i32, String) {
    let m = write_mandate(w, &w.emma());
    let out = serve_cmd(w, &m)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn tcp_without_a_token_refuses_to_start() {
    let w = TestWorld::new();
    let db = path_str(&w.dir.path().join("s.db"));
    let (code, err) = refused(&w, &["--store", &db, "--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ipc::serve::exposed_without_auth"), "{err}");
    let (code, err) = refused(&w, &["--store", &db, "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ipc::serve::auth_required"), "{err}");
    let (code, err) = refused(&w, &["--store", &db, "--listen", "example.com:80"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("ipc::serve::listen_address"), "{err}");
}

#[test]
fn serve_without_a_store_refuses_to_start_unless_ephemeral() {
    let w = TestWorld::new();
    let (code, err) = refused(&w, &["--stdio"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ipc::serve::no_store"), "{err}");
    assert!(err.contains("--ephemeral"), "{err}");
    // --ephemeral: it runs, and says what is lost
    let m = write_mandate(&w, &w.emma());
    let mut child = serve_cmd(&w, &m)
        .args(["--stdio", "--ephemeral"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    writeln!(
        child.stdin.take().unwrap(),
        "{}",
        transfer(LANDLORD, json!("8.00"))
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"ALLOW\""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("approvals, budgets and idempotency last only as long as"),
        "{err}"
    );
}

/// `ipc run --ephemeral` (without it, `ipc run` refuses to start, as
/// `ipc serve` does: `tests/store/failures.rs`).
#[test]
fn run_without_a_store_says_so() {
    let w = TestWorld::new();
    let m = write_mandate(&w, &w.emma());
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["run", "--ephemeral", "--bundle", &path_str(&w.bundle_path)])
        .args(["--world", &path_str(&w.world_path)])
        .args(["--mandate", &path_str(&m)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("approvals, budgets and idempotency last only as long as"),
        "{err}"
    );
}

#[test]
fn a_unix_socket_is_private_and_serves() {
    use std::os::unix::fs::PermissionsExt;
    let w = TestWorld::new();
    let sock = w.dir.path().join("ipc.sock");
    let listen = format!("unix:{}", path_str(&sock));
    let s = start(&w, &w.emma(), &listen, &[]);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let r = post(&s, &transfer(LANDLORD, json!("9.00")));
    assert_eq!(r.status, 200);
    assert_eq!(r.body["decision"], "ALLOW");
    // the token still counts when one is configured
    let no_auth = [("Authorization", None)];
    assert_eq!(request(&s, "GET", "/v1/health", "", &no_auth).status, 401);
    // a second server on the same live socket, or on a path that is not a
    // socket, refuses to start
    let (code, err) = refused(&w, &["--ephemeral", "--listen", &listen]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ipc::serve::socket_in_use"), "{err}");
    let file = w.dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let listen = format!("unix:{}", path_str(&file));
    let (code, err) = refused(&w, &["--ephemeral", "--listen", &listen]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("ipc::serve::socket_path"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[test]
fn a_unix_socket_without_a_token_relies_on_its_mode() {
    let w = TestWorld::new();
    let sock = w.dir.path().join("open.sock");
    let m = write_mandate(&w, &w.emma());
    let mut child = serve_cmd(&w, &m)
        .args([
            "--ephemeral",
            "--listen",
            &format!("unix:{}", path_str(&sock)),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let s = Server {
        child,
        addr: path_str(&sock),
        unix: true,
        token_file: PathBuf::new(),
        token: String::new(),
    };
    let r = request(&s, "GET", "/v1/health", "", &[("Authorization", None)]);
    assert_eq!(r.status, 200);
    // browsers are still refused
    let r = request(&s, "GET", "/v1/health", "", &[("Origin", Some("null"))]);
    assert_eq!(r.status, 403);
}

#[test]
fn sigterm_stops_the_server_and_removes_its_socket() {
    let w = TestWorld::new();
    let sock = w.dir.path().join("term.sock");
    let mut s = start(&w, &w.emma(), &format!("unix:{}", path_str(&sock)), &[]);
    assert_eq!(get(&s, "/v1/health").status, 200);
    terminate(&mut s);
    assert!(!sock.exists(), "the socket file is left behind");
}

/// Issue #21, item 7: `ipc serve` took a world's fixed `clock` without a
/// word (nothing ever expires at a fixed time). Now it refuses to start,
/// unless `--allow-frozen-clock`, which it announces.
#[test]
fn serve_refuses_a_frozen_clock_unless_allowed() {
    let w = TestWorld::new();
    let m = write_mandate(&w, &w.emma());
    for mode in [
        &["--stdio"][..],
        &["--listen", "unix:/nonexistent/x.sock"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(["serve", "--bundle", &path_str(&w.bundle_path)])
            .args(["--world", &path_str(&w.world_path), "--ephemeral"])
            .args(["--mandate", &path_str(&m)])
            .args(mode)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("ipc::serve::frozen_clock"), "{err}");
    }
    let out = serve_cmd(&w, &m)
        .args(["--stdio", "--ephemeral"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--allow-frozen-clock"), "announced: {err}");
}
