//! What an operator and a log shipper read of `ipc serve --listen` (issue
//! #41, item 4): the start-up line (store, bundle hash, approval page),
//! the shutdown line, a timestamp on every line, and `--log-format json`
//! (one object a line, one per decision and per request, never a secret).
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};

/// Starts a server whose stderr goes to a file of the test's; the server
/// and that file.
fn start_logged(w: &TestWorld, extra: &[&str]) -> (Server, std::path::PathBuf, String) {
    let db = path_str(&w.dir.path().join("logged.db"));
    let log = w.dir.path().join("serve.stderr");
    let file = std::fs::File::create(&log).unwrap();
    let s = launch(w, &w.emma(), "127.0.0.1:0", &db, TOKEN, extra, file.into());
    (s, log, db)
}

/// `2026-12-03T23:18:49.123Z`: RFC 3339, UTC, to the millisecond.
fn is_timestamp(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn start_up_names_the_store_bundle_and_page_and_shutdown_says_so() {
    let w = TestWorld::new();
    let (mut s, log, db) = start_logged(&w, &[]);
    let health = get(&s, "/v1/health").body;
    let hash = health["bundle"].as_str().unwrap().to_string();
    terminate(&mut s);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // every line after its timestamp
    for l in &lines {
        let (ts, _) = l.split_once(' ').unwrap_or((l, ""));
        assert!(is_timestamp(ts), "a line without its timestamp: `{l}`");
    }
    let started = lines
        .iter()
        .find(|l| l.contains(" serving bundle "))
        .unwrap_or_else(|| panic!("no start-up line: {text}"));
    assert!(started.contains(&hash), "{started}");
    assert!(started.contains(&format!("store: {db}")), "{started}");
    assert!(
        started.contains(&format!("approval page: http://{}/approve", s.addr)),
        "{started}"
    );
    let last = lines.last().unwrap();
    assert!(last.contains(" stopped (SIGTERM)"), "{text}");
}

#[test]
fn the_json_log_has_a_line_per_decision_and_request_and_no_secret() {
    const SECRET: &str = "a long new password";
    let w = TestWorld::new();
    let (mut s, log, _) = start_logged(&w, &["--log-format", "json"]);
    // a password change: PENDING, approved, then ALLOW (executed with the
    // secret), and a query string that must not be logged
    let pw = json!({"action": "user.update_password", "args": {"new_password": SECRET}});
    let pending = post(&s, &pw).body;
    assert_eq!(pending["decision"], "PENDING", "{pending}");
    let op = pending["operation_hash"].as_str().unwrap().to_string();
    let r = request(
        &s,
        "POST",
        "/v1/approvals",
        &w.approve("emma", &op).to_string(),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let allowed = post(&s, &pw).body;
    assert_eq!(allowed["decision"], "ALLOW", "{allowed}");
    assert_eq!(get(&s, "/v1/receipts?last=2&x=secret-query").status, 400);
    terminate(&mut s);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(SECRET), "the secret is in the log: {text}");
    assert!(!text.contains("secret-query"), "a query string: {text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): `{l}`")))
        .collect();
    for l in &lines {
        assert!(is_timestamp(l["ts"].as_str().unwrap_or("")), "{l}");
        assert!(l["level"].is_string() && l["event"].is_string(), "{l}");
    }
    let of =
        |event: &str| -> Vec<&Value> { lines.iter().filter(|l| l["event"] == event).collect() };
    let decisions = of("decision");
    assert_eq!(decisions.len(), 2, "{text}");
    for (d, outcome) in decisions.iter().zip(["PENDING", "ALLOW"]) {
        assert_eq!(d["action"], "user.update_password", "{d}");
        assert_eq!(d["decision"], outcome, "{d}");
        assert_eq!(d["operation_hash"], op.as_str(), "{d}");
        assert!(d["receipt_seq"].is_u64(), "{d}");
        assert!(
            d.get("args").is_none() && d.get("resolved").is_none(),
            "{d}"
        );
    }
    let requests = of("request");
    let seen: Vec<(&str, &str, u64)> = requests
        .iter()
        .map(|r| {
            assert!(r["duration_ms"].is_number(), "{r}");
            (
                r["method"].as_str().unwrap(),
                r["path"].as_str().unwrap(),
                r["status"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("POST", "/v1/decide", 200),
            ("POST", "/v1/approvals", 200),
            ("POST", "/v1/decide", 200),
            ("GET", "/v1/receipts", 400),
        ]
    );
    assert_eq!(of("started").len(), 1, "{text}");
    assert_eq!(of("stopped").len(), 1, "{text}");
}
