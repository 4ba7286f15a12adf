//! `ipc serve`: JSON lines over stdio, and HTTP (real processes, real
//! sockets): concurrency, timeouts, the connection bound, the bearer token,
//! Host / Origin / content-type checks, the Unix socket, receipts paging,
//! metrics, and the refusal to run without a store.
// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A mandate for many transfers: 100,000.00 and 1,000 calls.
fn big_mandate(w: &TestWorld) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 10_000_000;
    s.calls = 1000;
    w.mandate(s)
}

/// Starts `ipc serve` with a SQLite store of its own and a token file.
fn start(w: &TestWorld, mandate: &Value, listen: &str, extra: &[&str]) -> Server {
    let db = w.dir.path().join(format!(
        "s-{}.db",
        intentplane::gateway::approval::random_id().unwrap()
    ));
    launch(
        w,
        mandate,
        listen,
        &path_str(&db),
        TOKEN,
        extra,
        std::process::Stdio::inherit(),
    )
}

fn receipts(s: &Server, query: &str) -> Vec<Value> {
    let r = get(s, &format!("/v1/receipts?{query}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body.as_array().unwrap().clone()
}

/// A distinct ALLOW transfer (level 0) for each `i`.
fn small_transfer(i: usize) -> Value {
    transfer(LANDLORD, json!(format!("{}.{:02}", 1 + i / 100, i % 100)))
}

#[test]
fn stdio_answers_one_line_per_line() {
    let w = TestWorld::new();
    let m = write_mandate(&w, &w.emma());
    let db = w.dir.path().join("stdio.db");
    let mut child = serve_cmd(&w, &m)
        .args(["--stdio", "--store", &path_str(&db)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |line: String| -> Value {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut resp = String::new();
        out.read_line(&mut resp).unwrap();
        serde_json::from_str(&resp).unwrap()
    };
    // answered before the next line is sent: a long-lived process
    let d = ask(transfer(ATTACKER_IBAN, json!("98.70")).to_string());
    assert_eq!(d["decision"], "DENY");
    assert_eq!(d["stage"], "provenance");
    let d = ask(transfer(LANDLORD, json!("98.70")).to_string());
    assert_eq!(d["decision"], "ALLOW");
    assert_eq!(d["resolved"]["payee_iban"], LANDLORD);
    let d = ask("{\"action\": ".into());
    assert_eq!(d["decision"], "DENY");
    assert_eq!(d["stage"], "contract");
    let d = ask(transfer(LANDLORD, json!(1500.00)).to_string());
    assert_eq!(d["decision"], "PENDING");
    assert_eq!(d["resolved"]["amount"], "1500.00", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let env = json!({"proposal": transfer(LANDLORD, json!("1500.00")),
                     "approvals": [w.approve("emma", &op)]});
    let d = ask(env.to_string());
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["approvers"], json!(["emma"]));
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

#[test]
fn http_decides_takes_approvals_and_shows_receipts() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);

    let r = get(&s, "/v1/health");
    assert_eq!((r.status, r.body["ok"].clone()), (200, json!(true)));
    let r = post(&s, &transfer(ATTACKER_IBAN, json!(10)));
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: application/json"));
    assert_eq!(r.body["decision"], "DENY");
    let p = transfer(LANDLORD, json!("2000.00"));
    let d = post(&s, &p).body;
    assert_eq!(d["decision"], "PENDING");
    // the amount leaves as the caller wrote it, not in minor units (#40.20)
    assert_eq!(d["resolved"]["amount"], "2000.00", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let env = json!({"proposal": p, "approvals": [w.approve("emma", &op)]});
    let d = post(&s, &env).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["resolved"]["amount"], "2000.00", "{d}");
    let r = receipts(&s, "last=2");
    assert_eq!(r.len(), 2);
    assert_eq!(r[1]["body"]["decision"], "ALLOW");
    let e = get(&s, "/v1/receipts?last=two");
    assert_eq!(e.status, 400, "a bad `last` is an error, not the default");
    assert!(
        e.body["error"].as_str().unwrap().contains("`two`"),
        "{}",
        e.body
    );
    assert_eq!(get(&s, "/nope").status, 404);
    let r = request(&s, "POST", "/v1/decide", "{\"a\":1,\"a\":2}", &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.body["stage"], "contract");
    // a body over 1 MiB
    let big = format!("\"{}\"", "x".repeat((1 << 20) + 1));
    assert_eq!(request(&s, "POST", "/v1/decide", &big, &[]).status, 413);
}

#[test]
fn concurrent_clients_are_all_answered() {
    let w = TestWorld::new();
    let s = start(&w, &big_mandate(&w), "127.0.0.1:0", &[]);
    let n = 48;
    let answers: Vec<Value> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..n)
            .map(|i| {
                let s = &s;
                scope.spawn(move || {
                    let p = if i % 3 == 0 {
                        transfer(ATTACKER_IBAN, json!("5.00"))
                    } else {
                        small_transfer(i)
                    };
                    let r = post(s, &p);
                    assert_eq!(r.status, 200, "{}", r.body);
                    r.body
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let allowed = answers.iter().filter(|d| d["decision"] == "ALLOW").count();
    assert_eq!(allowed, n - n.div_ceil(3), "{answers:?}");
    // every decision has its own receipt, in one chain
    let mut seqs: Vec<u64> = answers
        .iter()
        .map(|d| d["receipt"]["seq"].as_u64().unwrap())
        .collect();
    seqs.sort();
    assert_eq!(seqs, (1..=n as u64).collect::<Vec<_>>());
    assert_eq!(receipts(&s, "after=0&limit=1000").len(), n);
}

#[test]
fn a_half_sent_body_does_not_block_another_clients_decision() {
    let w = TestWorld::new();
    // one decision at a time: the slow client must not hold it
    let s = start(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        &["--max-in-flight", "1", "--body-timeout", "2"],
    );
    let mut slow = connect(&s);
    let body = transfer(LANDLORD, json!("3.00")).to_string();
    write!(
        slow,
        "POST /v1/decide HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{}",
        body.len(),
        &body[..body.len() / 2]
    )
    .unwrap();
    slow.flush().unwrap();
    // answered while the slow body is still missing its second half
    let r = post(&s, &transfer(LANDLORD, json!("4.00")));
    assert_eq!(r.status, 200);
    assert_eq!(r.body["decision"], "ALLOW");
    // the slow client is told, and nothing was decided for it
    let r = read_resp(&mut *slow);
    assert_eq!(r.status, 408, "{}", r.body);
    let all = receipts(&s, "last=10");
    assert_eq!(all.len(), 1, "{all:?}");
}

#[test]
fn a_flood_of_connections_does_not_stop_a_client_once_it_has_room() {
    let w = TestWorld::new();
    let s = start(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        &["--max-connections", "4", "--header-timeout", "1"],
    );
    // more idle connections than the bound, each with half a request line
    let mut flood: Vec<Box<dyn ReadWrite>> = (0..12)
        .map(|_| {
            let mut c = connect(&s);
            c.write_all(b"GET /v1/heal").unwrap();
            c
        })
        .collect();
    // the well-behaved client waits for room, then is answered
    let r = post(&s, &transfer(LANDLORD, json!("5.00")));
    assert_eq!(r.status, 200);
    assert_eq!(r.body["decision"], "ALLOW");
    // the flood was closed by the server (header timeout), not answered
    for c in flood.iter_mut() {
        let mut buf = Vec::new();
        let _ = c.read_to_end(&mut buf);
        assert!(
            !String::from_utf8_lossy(&buf).contains("\"ok\""),
            "an incomplete request was answered"
        );
    }
}

/// Header limits: more than 64 headers, or a head over 16 KiB, is refused
/// before any route runs (431, nothing decided), and the server goes on.
#[test]
fn too_many_or_too_large_headers_are_refused() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let body = transfer(LANDLORD, json!("6.00")).to_string();
    let many: Vec<(String, String)> = (0..80)
        .map(|i| (format!("X-Pad-{i}"), "1".to_string()))
        .collect();
    let large = vec![("X-Pad".to_string(), "x".repeat(20 * 1024))];
    for extra in [many, large] {
        let headers: Vec<(&str, Option<&str>)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), Some(v.as_str())))
            .collect();
        let r = request(&s, "POST", "/v1/decide", &body, &headers);
        assert_eq!(r.status, 431, "{}", r.body);
    }
    assert!(receipts(&s, "last=10").is_empty(), "nothing was decided");
    assert_eq!(post(&s, &transfer(LANDLORD, json!("6.00"))).status, 200);
}

#[test]
fn a_client_that_never_reads_its_answers_is_dropped() {
    let w = TestWorld::new();
    let s = start(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        &["--max-connections", "1", "--write-timeout", "1"],
    );
    // pipelined requests, answers never read: the server's writes stall
    // once the socket buffers are full, and it stops reading
    let mut greedy = TcpStream::connect(&s.addr).unwrap();
    let one = "GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(1000);
    let writer = std::thread::spawn(move || {
        for _ in 0..2000 {
            if greedy.write_all(one.as_bytes()).is_err() {
                return true; // dropped by the server
            }
        }
        false
    });
    // the only place under the bound is taken until the server gives up
    let r = post(&s, &transfer(LANDLORD, json!("5.50")));
    assert_eq!(r.status, 200);
    assert_eq!(r.body["decision"], "ALLOW");
    assert!(
        writer.join().unwrap(),
        "the greedy connection was never closed"
    );
}

#[test]
fn no_token_or_a_wrong_one_gets_nothing() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let no_auth = [("Authorization", None)];
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &transfer(LANDLORD, json!("6.00")).to_string(),
        &no_auth,
    );
    assert_eq!(r.status, 401);
    assert!(r.headers.contains("www-authenticate: bearer"));
    assert!(r.body["error"].as_str().unwrap().contains("Bearer"));
    for path in ["/v1/health", "/v1/receipts", "/metrics", "/nope"] {
        let r = request(&s, "GET", path, "", &no_auth);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.body.get("ok").is_none() && r.body.get("bundle").is_none());
    }
    let wrong = [("Authorization", Some("Bearer test-token-0123456789abcdeX"))];
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &transfer(LANDLORD, json!("6.00")).to_string(),
        &wrong,
    );
    assert_eq!(r.status, 401);
    let basic = [("Authorization", Some("Basic dGVzdA=="))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &basic).status, 401);
    // nothing was decided, nothing appended
    assert!(receipts(&s, "last=10").is_empty());
}

#[test]
fn a_token_rotated_in_the_file_is_honoured() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    assert_eq!(get(&s, "/v1/health").status, 200);
    let new = "rotated-token-9876543210fedcba";
    let tmp = s.token_file.with_extension("new");
    std::fs::write(&tmp, new).unwrap();
    std::fs::rename(&tmp, &s.token_file).unwrap();
    let auth = format!("Bearer {new}");
    let with_new = [("Authorization", Some(auth.as_str()))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &with_new).status, 200);
    assert_eq!(get(&s, "/v1/health").status, 401, "the old token is gone");
}

#[test]
fn browsers_and_rebound_hosts_are_refused() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let p = transfer(LANDLORD, json!("7.00")).to_string();
    let evil = format!("evil.example.com:{port}");
    for (headers, status) in [
        (vec![("Host", Some(evil.as_str()))], 421),
        (vec![("Host", Some("localhost:1"))], 421),
        (vec![("Host", None)], 421),
        (vec![("Origin", Some("http://localhost"))], 403),
        (vec![("Origin", Some("null"))], 403),
        (vec![("Sec-Fetch-Site", Some("cross-site"))], 403),
        (vec![("Content-Type", Some("text/plain"))], 415),
        (vec![("Content-Type", None)], 415),
    ] {
        let r = request(&s, "POST", "/v1/decide", &p, &headers);
        assert_eq!(r.status, status, "{headers:?}: {}", r.body);
    }
    // the names of this server are accepted, with or without the port
    let local = format!("127.0.0.1:{port}");
    let ok = [("Host", Some(local.as_str()))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &ok).status, 200);
    // an empty body: a 400 in words about the request, not about lines
    // (#40, item 20), and nothing decided
    for empty in ["", " \n"] {
        let r = request(&s, "POST", "/v1/decide", empty, &[]);
        assert_eq!(r.status, 400, "{}", r.body);
        let e = r.body["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("the request's body is empty") && !e.contains("line"),
            "{e}"
        );
    }
    assert!(
        receipts(&s, "last=10").is_empty(),
        "nothing refused was decided"
    );

    // behind a proxy: its Host, and only it
    let w2 = TestWorld::new();
    let s2 = start(
        &w2,
        &w2.emma(),
        "127.0.0.1:0",
        &["--allowed-host", "gw.example.com"],
    );
    let proxied = [("Host", Some("gw.example.com"))];
    assert_eq!(request(&s2, "GET", "/v1/health", "", &proxied).status, 200);
    assert_eq!(get(&s2, "/v1/health").status, 421);
}

/// `ipc serve` with these flags, which must refuse to start.
fn refused(w: &TestWorld, args: &[&str]) -> (i32, String) {
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

#[test]
fn receipts_are_paged() {
    let w = TestWorld::new();
    let s = start(&w, &big_mandate(&w), "127.0.0.1:0", &[]);
    for i in 0..5 {
        assert_eq!(post(&s, &small_transfer(i)).body["decision"], "ALLOW");
    }
    let seqs =
        |v: Vec<Value>| -> Vec<u64> { v.iter().map(|r| r["seq"].as_u64().unwrap()).collect() };
    assert_eq!(seqs(receipts(&s, "after=0&limit=2")), [1, 2]);
    assert_eq!(seqs(receipts(&s, "after=2&limit=2")), [3, 4]);
    assert_eq!(
        seqs(receipts(&s, "after=4&limit=2")),
        [5],
        "a short page ends"
    );
    assert!(receipts(&s, "after=5&limit=2").is_empty());
    assert_eq!(seqs(receipts(&s, "last=2")), [4, 5]);
    assert_eq!(seqs(receipts(&s, "")), [1, 2, 3, 4, 5]);
    for bad in ["last=1001", "limit=0", "last=1&after=1", "page=2"] {
        assert_eq!(get(&s, &format!("/v1/receipts?{bad}")).status, 400, "{bad}");
    }
}

#[test]
fn metrics_count_decisions() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    post(&s, &transfer(ATTACKER_IBAN, json!("1.00")));
    post(&s, &transfer(LANDLORD, json!("1.00")));
    request(&s, "GET", "/v1/health", "", &[("Origin", Some("null"))]);
    let r = get(&s, "/metrics");
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: text/plain"));
    let text = r.body.as_str().unwrap();
    assert!(
        text.contains("ipc_decisions_total{outcome=\"deny\",stage=\"provenance\"} 1"),
        "{text}"
    );
    assert!(text.contains("outcome=\"allow\""), "{text}");
    assert!(
        text.contains("ipc_decision_duration_seconds_count 2"),
        "{text}"
    );
    assert!(text.contains("ipc_store_errors_total 0"), "{text}");
    // SQLite decides under its lock: no optimistic counts
    assert!(!text.contains("ipc_store_transactions_total"), "{text}");
    assert!(!text.contains("ipc_store_head_lock"), "{text}");
    assert!(
        text.contains("ipc_http_refused_total{reason=\"origin\"} 1"),
        "{text}"
    );
    // the token is needed unless --public-metrics
    let no_auth = [("Authorization", None)];
    assert_eq!(request(&s, "GET", "/metrics", "", &no_auth).status, 401);
    let w2 = TestWorld::new();
    let s2 = start(&w2, &w2.emma(), "127.0.0.1:0", &["--public-metrics"]);
    assert_eq!(request(&s2, "GET", "/metrics", "", &no_auth).status, 200);
    assert_eq!(request(&s2, "GET", "/v1/health", "", &no_auth).status, 401);
}

/// Issue #15, item 2 over HTTP: the approver lists what waits for them and
/// submits a signed approval by its hash; the agent's next identical
/// proposal executes without carrying any approval. A decline refuses
/// the operation for good.
#[test]
fn approvals_are_listed_and_submitted_by_hash() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let p = transfer(LANDLORD, json!("1500.00"));
    let d = post(&s, &p).body;
    assert_eq!(d["decision"], "PENDING");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let r = get(&s, "/v1/approvals?for=emma");
    assert_eq!(r.status, 200, "{}", r.body);
    let ops = r.body["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["operation_hash"], json!(op));
    assert_eq!(ops[0]["resolved"]["amount"], 150_000);
    assert_eq!(ops[0]["origins"]["payee_iban"], "registry.beneficiaries");
    // not for someone who may not approve it
    let r = get(&s, "/v1/approvals?for=lead_bo");
    assert!(r.body["operations"].as_array().unwrap().is_empty());
    assert_eq!(get(&s, "/v1/approvals?who=emma").status, 400);
    // an approval for an operation the store does not know: 404
    let stray = w.approve("emma", "sha256:00");
    let r = request(&s, "POST", "/v1/approvals", &stray.to_string(), &[]);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::unknown");
    // a forged one (another name over emma's signature): 400
    let mut forged = w.approve("noah", &op);
    forged["approval"]["approver"] = json!("emma");
    let r = request(&s, "POST", "/v1/approvals", &forged.to_string(), &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    // the real one, by hash; the same proposal, with no approval, executes
    let approval = w.approve("emma", &op).to_string();
    let r = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.get("already"), None, "{}", r.body);
    // the same signed approval again (a client's retry): answered with the
    // first receipt, marked, and no second receipt written (#40.20)
    let chain = receipts(&s, "last=1000").len();
    let again = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["already"], json!(true), "{}", again.body);
    assert_eq!(again.body["receipt"], r.body["receipt"]);
    assert_eq!(receipts(&s, "last=1000").len(), chain);
    let d = post(&s, &p).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["approvers"], json!(["emma"]));
    // once executed, it is no longer something to approve
    let late = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.body["code"], "ipc::approvals::executed");
    assert!(
        get(&s, "/v1/approvals").body["operations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // a declined operation is then refused
    let pw =
        json!({"action": "user.update_password", "args": {"new_password": "a long new password"}});
    let d = post(&s, &pw).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op2 = d["operation_hash"].as_str().unwrap().to_string();
    // the agent host's token alone declines nothing: the decline is signed
    let unsigned = json!({"operation_hash": op2, "approver": "emma"}).to_string();
    let r = request(&s, "POST", "/v1/approvals/decline", &unsigned, &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    let mut forged = w.decline("noah", &op2);
    forged["decline"]["approver"] = json!("emma");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &forged.to_string(),
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // an approval's signature is no decline's
    let mut as_decline = w.approve("emma", &op2);
    as_decline["decline"] = as_decline["approval"].take();
    as_decline.as_object_mut().unwrap().remove("approval");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &as_decline.to_string(),
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // someone who may not approve it may not decline it either
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &w.decline("noah", &op2).to_string(),
        &[],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::not_approver");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &w.decline("emma", &op2).to_string(),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let d = post(&s, &pw).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("approval"))
    );
    // without the token: nothing
    let r = request(&s, "GET", "/v1/approvals", "", &[("Authorization", None)]);
    assert_eq!(r.status, 401);
}

/// Signs `who` in on the approval page's API with `key`: the challenge,
/// the signed login (origin `origin`), and the session token, or the
/// refusal's status.
pub(crate) fn sign_in(
    s: &Server,
    who: &str,
    key: &intentplane::keys::SecretKey,
    origin: &str,
) -> Result<String, u16> {
    let page = [("Authorization", None)];
    let c = request(
        s,
        "POST",
        "/v1/approver/challenge",
        &json!({"approver": who}).to_string(),
        &page,
    );
    assert_eq!(c.status, 200, "{}", c.body);
    let login = json!({"approver": who, "challenge": c.body["challenge"],
        "origin": origin, "purpose": "ipc approver login"});
    let msg = intentplane::canonical::to_jcs(&login).unwrap();
    let body = json!({"login": login, "signature": key.sign(msg.as_bytes())});
    let r = request(s, "POST", "/v1/approver/session", &body.to_string(), &page);
    match r.status {
        200 => Ok(r.body["session"].as_str().unwrap().to_string()),
        other => Err(other),
    }
}

/// A request on the page's API with an approver session (no bearer token).
pub(crate) fn as_approver(s: &Server, session: &str, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Approver {session}");
    request(s, method, path, body, &[("Authorization", Some(&auth))])
}

/// Issue #15, item 3: the page is served without the agent's token, under
/// a strict Content-Security-Policy; only this server's own origin may
/// call the page's routes, and every other route still refuses browsers.
#[test]
fn the_approval_page_is_served_and_only_its_own_origin_may_call_it() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let host = format!("127.0.0.1:{port}");
    let own = format!("http://{host}");
    let no_token = ("Authorization", None);
    let r = request(
        &s,
        "GET",
        "/approve",
        "",
        &[no_token, ("Host", Some(&host))],
    );
    assert_eq!(r.status, 200);
    assert!(
        r.headers.contains("content-type: text/html"),
        "{}",
        r.headers
    );
    assert!(
        r.headers
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{}",
        r.headers
    );
    assert!(
        !r.body.as_str().unwrap().contains("<script>"),
        "no inline script"
    );
    for asset in ["/approve/app.js", "/approve/app.css"] {
        let r = request(&s, "GET", asset, "", &[no_token]);
        assert_eq!(r.status, 200, "{asset}");
        assert!(r.headers.contains("x-content-type-options: nosniff"));
    }
    let ask = json!({"approver": "emma"}).to_string();
    let same = [
        no_token,
        ("Host", Some(host.as_str())),
        ("Origin", Some(own.as_str())),
        ("Sec-Fetch-Site", Some("same-origin")),
    ];
    let r = request(&s, "POST", "/v1/approver/challenge", &ask, &same);
    assert_eq!(r.status, 200, "{}", r.body);
    let evil_port = format!("http://127.0.0.1:{}", port.parse::<u32>().unwrap() + 1);
    for headers in [
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some("http://evil.example.com")),
        ],
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some(evil_port.as_str())),
        ],
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some("null")),
        ],
        vec![no_token, ("Sec-Fetch-Site", Some("cross-site"))],
        // DNS rebinding: the Origin matches the Host, which is not served
        vec![
            no_token,
            ("Host", Some("evil.example.com")),
            ("Origin", Some("http://evil.example.com")),
        ],
    ] {
        let r = request(&s, "POST", "/v1/approver/challenge", &ask, &headers);
        assert!(
            matches!(r.status, 403 | 421),
            "{headers:?}: {} {}",
            r.status,
            r.body
        );
        let r = request(&s, "GET", "/approve", "", &headers);
        assert!(matches!(r.status, 403 | 421), "{headers:?}: {}", r.status);
    }
    // the agent's routes still refuse even the page's own origin
    let p = transfer(LANDLORD, json!("7.00")).to_string();
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &p,
        &[
            ("Origin", Some(own.as_str())),
            ("Host", Some(host.as_str())),
        ],
    );
    assert_eq!(r.status, 403);
    let r = request(
        &s,
        "GET",
        "/v1/approvals",
        "",
        &[
            ("Origin", Some(own.as_str())),
            ("Host", Some(host.as_str())),
        ],
    );
    assert_eq!(r.status, 403);
}

/// Issue #40, item 18: a browser asks for `/favicon.ico` with every load of
/// the page; the API's router refused it (403) and counted a refused
/// `origin`, the counter an operator alerts on. Now it is the page's: no
/// content, nothing counted; another site's request for it is refused.
#[test]
fn the_browsers_icon_request_is_answered_and_not_counted_as_refused() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let host = format!("127.0.0.1:{port}");
    // as Chromium asks for it: an image, same origin, no token, no Origin
    let browser = [
        ("Authorization", None),
        ("Content-Type", None),
        ("Host", Some(host.as_str())),
        ("Sec-Fetch-Site", Some("same-origin")),
        ("Sec-Fetch-Mode", Some("no-cors")),
        ("Sec-Fetch-Dest", Some("image")),
    ];
    for _ in 0..3 {
        let r = request(&s, "GET", "/favicon.ico", "", &browser);
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let text = get(&s, "/metrics").body.as_str().unwrap().to_string();
    assert!(!text.contains("ipc_http_refused_total{"), "{text}");
    let r = request(
        &s,
        "GET",
        "/favicon.ico",
        "",
        &[
            ("Authorization", None),
            ("Sec-Fetch-Site", Some("cross-site")),
        ],
    );
    assert_eq!(r.status, 403);
    let text = get(&s, "/metrics").body.as_str().unwrap().to_string();
    assert!(
        text.contains("ipc_http_refused_total{reason=\"origin\"} 1"),
        "{text}"
    );
}

/// Sign-in is a challenge signed by the approver's key; a session sees and
/// acts on the operations its approver may approve, nothing else, and
/// signs as itself only. The agent's bearer token opens none of it.
#[test]
fn an_approver_signs_in_with_their_key_and_acts_only_on_their_operations() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let d = post(&s, &transfer(LANDLORD, json!("1500.00"))).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let origin = "http://localhost";
    // a key that is not the approver's does not sign in
    assert_eq!(sign_in(&s, "emma", w.key("noah"), origin), Err(401));
    assert_eq!(sign_in(&s, "nobody", w.key("noah"), origin), Err(401));
    // a login signed for another origin does not sign in here
    assert_eq!(
        sign_in(&s, "emma", w.key("emma"), "http://evil.example.com"),
        Err(401)
    );
    // a challenge is used once, and only by the approver it was issued to
    let c = request(
        &s,
        "POST",
        "/v1/approver/challenge",
        &json!({"approver": "noah"}).to_string(),
        &[],
    );
    let login = json!({"approver": "emma", "challenge": c.body["challenge"],
        "origin": origin, "purpose": "ipc approver login"});
    let sig = w
        .key("emma")
        .sign(intentplane::canonical::to_jcs(&login).unwrap().as_bytes());
    let body = json!({"login": login, "signature": sig}).to_string();
    assert_eq!(
        request(&s, "POST", "/v1/approver/session", &body, &[]).status,
        401
    );
    let emma = sign_in(&s, "emma", w.key("emma"), origin).unwrap();
    let noah = sign_in(&s, "noah", w.key("noah"), origin).unwrap();

    // no session, a made-up one, or the agent's bearer token: nothing
    let r = request(&s, "GET", "/v1/approver/operations", "", &[]);
    assert_eq!(r.status, 401, "the bearer token is no approver session");
    assert_eq!(
        as_approver(&s, "0123456789abcdef", "GET", "/v1/approver/operations", "").status,
        401
    );

    let r = as_approver(&s, &emma, "GET", "/v1/approver/operations", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let ops = r.body["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1);
    let shown = &ops[0];
    assert_eq!(shown["operation_hash"], json!(op));
    assert_eq!(shown["status"], "waiting");
    let value = |name: &str| {
        shown["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(value("amount")["items"], json!([["1,500.00 EUR"]]));
    assert_eq!(
        value("payee_iban")["items"],
        json!([["DE44 5001 0517 5407 3249 31"]])
    );
    assert_eq!(value("payee_iban")["origin_kind"], "registry");
    assert_eq!(value("payee_iban")["origin"], "registry.beneficiaries");
    assert_eq!(value("currency")["origin_kind"], "mandate");
    // a saved payee and the mandate's own currency are not news
    assert_eq!(value("payee_iban")["new"], false);
    assert_eq!(value("currency")["new"], false);
    assert_eq!(shown["level"], 1);
    assert!(!shown["rules"].as_array().unwrap().is_empty(), "{shown}");
    assert!(shown["rules"][0]["policy"].as_str().is_some());
    let r = as_approver(&s, &noah, "GET", "/v1/approver/operations", "");
    assert!(
        r.body["operations"].as_array().unwrap().is_empty(),
        "{}",
        r.body
    );

    // signed as someone else than the session: refused
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // noah's own approval of emma's operation: not his to approve
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/approve",
        &w.approve("noah", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::not_approver");
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/decline",
        &w.decline("noah", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // emma's approval under emma's session, then the proposal executes
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let d = post(&s, &transfer(LANDLORD, json!("1500.00"))).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let r = as_approver(&s, &emma, "GET", "/v1/approver/operations", "");
    assert_eq!(r.body["operations"][0]["status"], "executed");

    // a signed decline from the page: recorded, then the operation is refused
    let pw =
        json!({"action": "user.update_password", "args": {"new_password": "a long new password"}});
    let d = post(&s, &pw).body;
    let op2 = d["operation_hash"].as_str().unwrap().to_string();
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/decline",
        &w.decline("emma", &op2).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let receipts = receipts(&s, "last=5");
    assert!(
        receipts
            .iter()
            .any(|x| x["body"]["change"] == "decline" && x["body"]["by"] == "emma"),
        "{receipts:?}"
    );
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op2).to_string(),
    );
    assert_eq!(
        r.status, 409,
        "a declined operation is no longer approvable: {}",
        r.body
    );
    assert_eq!(r.body["code"], "ipc::approvals::declined");
    let d = post(&s, &pw).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("approval"))
    );
    // signing out ends the session
    assert_eq!(
        as_approver(&s, &emma, "POST", "/v1/approver/logout", "{}").status,
        200
    );
    assert_eq!(
        as_approver(&s, &emma, "GET", "/v1/approver/operations", "").status,
        401
    );
}

/// Issue #15, item 4 over HTTP: `POST /v1/registry` takes a change signed
/// by a key the world declares for that owner; the next decision sees it
/// and the chain holds its receipt. Another owner's key, the bearer token
/// alone, a replay and an expired change are refused.
#[test]
fn an_owner_changes_its_records_over_http_with_its_own_signature() {
    use intentplane::gateway::trusted::{OwnerChange, SignedOwnerChange, Verb};
    let w = TestWorld::new();
    let mut world = std::fs::read_to_string(&w.world_path).unwrap();
    world.push_str("[owners.emma]\nkeys = [\"emma.pub\"]\n[owners.noah]\nkeys = [\"noah.pub\"]\n");
    std::fs::write(&w.world_path, world).unwrap();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let supplier = || transfer(SUPPLIER, json!("98.70"));
    let d = post(&s, &supplier()).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("provenance")),
        "{d}"
    );
    let change = |owner: &str, expires_at: i64, nonce: &str| OwnerChange {
        owner: owner.into(),
        pack: "bank".into(),
        registry: "beneficiaries".into(),
        change: Verb::Add,
        value: "DE02 1203 0000 0000 2020 51".into(),
        record: None,
        audience: GATEWAY_ID.into(),
        expires_at,
        nonce: nonce.into(),
    };
    let signed = |c: OwnerChange, key: &str| {
        serde_json::to_string(&SignedOwnerChange::sign(c, w.key(key)).unwrap()).unwrap()
    };
    let send = |body: &str, auth: Option<&str>| {
        request(&s, "POST", "/v1/registry", body, &[("Authorization", auth)])
    };
    let bearer = format!("Bearer {TOKEN}");
    let later = now() + 600;
    // the agent's token alone: no signature, nothing changes
    let unsigned = json!({"change": change("emma", later, "n1"), "signature": ""}).to_string();
    assert_eq!(send(&unsigned, Some(&bearer)).status, 403);
    // another owner's key (noah signs a change to emma's records)
    let r = send(&signed(change("emma", later, "n2"), "noah"), Some(&bearer));
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::unauthenticated");
    // an owner the world declares no key for
    let r = send(&signed(change("acme", later, "n3"), "clerk"), None);
    assert_eq!(r.status, 403, "{}", r.body);
    // expired
    let r = send(&signed(change("emma", now() - 1, "n4"), "emma"), None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::expired");
    assert_eq!(
        post(&s, &supplier()).body["decision"],
        "DENY",
        "nothing refused changed anything"
    );
    // emma's own signed change, without the bearer token
    let good = signed(change("emma", later, "n5"), "emma");
    let r = send(&good, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let seq = r.body["receipt"]["seq"].as_u64().unwrap();
    let d = post(&s, &supplier()).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let chain = receipts(&s, "last=10");
    let rec = chain.iter().find(|x| x["seq"] == seq).unwrap();
    assert_eq!(rec["body"]["kind"], "registry");
    assert_eq!(rec["body"]["by"], "emma");
    assert_eq!(rec["body"]["value"], SUPPLIER);
    // replayed: refused, even after the value was removed again
    let r = send(&good, None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::replayed");
    let mut remove = change("emma", later, "n6");
    remove.change = Verb::Remove;
    assert_eq!(send(&signed(remove, "emma"), None).status, 200);
    assert_eq!(send(&good, None).status, 409);
    let d = post(&s, &supplier()).body;
    assert_eq!(d["decision"], "DENY", "{d}");
    // a tampered change (another value under emma's signature)
    let mut tampered: Value =
        serde_json::from_str(&signed(change("emma", later, "n7"), "emma")).unwrap();
    tampered["change"]["value"] = json!(ATTACKER_IBAN);
    assert_eq!(send(&tampered.to_string(), None).status, 403);
    // a browser page may not send it
    let r = request(
        &s,
        "POST",
        "/v1/registry",
        &signed(change("emma", later, "n8"), "emma"),
        &[("Origin", Some("http://localhost"))],
    );
    assert_eq!(r.status, 403);
}

// ---- issue #21: tenants, floods, fallbacks ------------------------------

const EMMA_TOKEN: &str = "emma-tenant-token-0123456789";
const NOAH_TOKEN: &str = "noah-tenant-token-0123456789";
const OPS_TOKEN: &str = "operator-token-0123456789ab";

/// Replaces the server's token file (a rename: the server reads it again
/// at the next request).
fn rewrite_tokens(s: &Server, text: &str) {
    let tmp = s.token_file.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &s.token_file).unwrap();
}

fn as_token(s: &Server, token: &str, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Bearer {token}");
    request(s, method, path, body, &[("Authorization", Some(&auth))])
}

/// A distinct PENDING (a password change needs a step-up) under `mandate`.
fn pending_for(s: &Server, token: &str, mandate: &Value, i: usize) -> String {
    let p = json!({"action": "user.update_password",
        "args": {"new_password": format!("a long new password {i}")}});
    let body = json!({"proposal": p, "mandate": mandate}).to_string();
    let d = as_token(s, token, "POST", "/v1/decide", &body).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    d["operation_hash"].as_str().unwrap().to_string()
}

fn listed(s: &Server, token: &str, query: &str) -> Vec<String> {
    let r = as_token(s, token, "GET", &format!("/v1/approvals{query}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation_hash"].as_str().unwrap().to_string())
        .collect()
}

/// Issue #21, item 4: one bearer token showed every tenant's operations
/// and receipts and decided for any mandate. Now each token is bound to
/// its tenants: emma's token cannot decide for noah's mandate (a DENY at
/// authn, with a receipt noah's side sees), nor list, read, approve or
/// decline noah's operations; an operator's (`*`) sees both.
#[test]
fn a_tenants_token_cannot_see_decide_or_approve_anothers() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    rewrite_tokens(
        &s,
        &format!("{EMMA_TOKEN} emma\n{NOAH_TOKEN} noah\n{OPS_TOKEN} *\n"),
    );
    // the old single token is gone with the file it was in
    assert_eq!(get(&s, "/v1/approvals").status, 401);
    let emma_m = w.emma();
    let noah_m = w.mandate(MandateSpec::bank("noah"));
    let op_e = pending_for(&s, EMMA_TOKEN, &emma_m, 1);
    let op_n = pending_for(&s, NOAH_TOKEN, &noah_m, 2);
    // emma's token deciding with noah's mandate: a DENY, with its receipt
    let p = json!({"action": "user.update_password",
        "args": {"new_password": "a long new password 3"}});
    let body = json!({"proposal": p, "mandate": noah_m}).to_string();
    let d = as_token(&s, EMMA_TOKEN, "POST", "/v1/decide", &body).body;
    assert_eq!(d["decision"], "DENY", "{d}");
    assert_eq!(d["stage"], "authn", "{d}");
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains("not for the mandate's owner `noah`"),
        "{d}"
    );
    let denied_seq = d["receipt"]["seq"].clone();
    assert!(denied_seq.is_u64(), "{d}");
    // listings: each tenant its own; `for=` does not widen them
    assert_eq!(listed(&s, EMMA_TOKEN, ""), vec![op_e.clone()]);
    assert_eq!(listed(&s, EMMA_TOKEN, "?for=noah"), Vec::<String>::new());
    assert_eq!(listed(&s, NOAH_TOKEN, ""), vec![op_n.clone()]);
    let all = listed(&s, OPS_TOKEN, "");
    assert!(all.contains(&op_e) && all.contains(&op_n), "{all:?}");
    // receipts: only the tenant's own, and where the page's scan ended
    let owners = |token: &str| -> (Vec<Value>, Vec<Value>) {
        let r = as_token(&s, token, "GET", "/v1/receipts?last=100", "");
        assert_eq!(r.status, 200, "{}", r.body);
        let rs = r.body.as_array().unwrap().clone();
        if token != OPS_TOKEN {
            assert!(r.headers.contains("ipc-scanned-through: "), "{}", r.headers);
        }
        (
            rs.iter()
                .map(|x| x["body"]["mandate"]["owner"].clone())
                .collect(),
            rs.iter().map(|x| x["seq"].clone()).collect(),
        )
    };
    let (o, seqs) = owners(EMMA_TOKEN);
    assert!(!o.is_empty() && o.iter().all(|x| x == "emma"), "{o:?}");
    assert!(
        !seqs.contains(&denied_seq),
        "emma's side tried; the mandate is noah's"
    );
    let (o, seqs) = owners(NOAH_TOKEN);
    assert!(!o.is_empty() && o.iter().all(|x| x == "noah"), "{o:?}");
    assert!(
        seqs.contains(&denied_seq),
        "noah's side sees the try on its mandate"
    );
    let (o, _) = owners(OPS_TOKEN);
    assert!(o.contains(&json!("emma")) && o.contains(&json!("noah")));
    // approving or declining noah's operation with emma's token: unknown
    // to it (even signed by noah, its user), and nothing recorded
    let approval = w.approve("noah", &op_n).to_string();
    let r = as_token(&s, EMMA_TOKEN, "POST", "/v1/approvals", &approval);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::unknown");
    let decline = w.decline("noah", &op_n).to_string();
    let r = as_token(&s, EMMA_TOKEN, "POST", "/v1/approvals/decline", &decline);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = as_token(&s, NOAH_TOKEN, "GET", "/v1/approvals", "");
    assert!(
        r.body["operations"][0]["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        r.body["operations"][0]["declined_by"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // noah's own token may
    let r = as_token(&s, NOAH_TOKEN, "POST", "/v1/approvals", &approval);
    assert_eq!(r.status, 200, "{}", r.body);
    // the approval's receipt is noah's tenant's, not emma's
    let (_, seqs) = owners(EMMA_TOKEN);
    assert!(!seqs.contains(&r.body["receipt"]["seq"]));
    let rs = as_token(&s, NOAH_TOKEN, "GET", "/v1/receipts?last=1", "").body;
    assert_eq!(rs[0]["body"]["kind"], "approval");
    assert_eq!(rs[0]["body"]["owner"], "noah");
    // the counters are every tenant's: an operator's
    assert_eq!(as_token(&s, EMMA_TOKEN, "GET", "/metrics", "").status, 403);
    assert_eq!(as_token(&s, OPS_TOKEN, "GET", "/metrics", "").status, 200);
    // a token in the file, bound to no tenant it names, decides nothing
    rewrite_tokens(&s, &format!("{EMMA_TOKEN} acme\n{OPS_TOKEN} *\n"));
    assert!(listed(&s, EMMA_TOKEN, "").is_empty());
    let body = json!({"proposal": p, "mandate": emma_m}).to_string();
    let d = as_token(&s, EMMA_TOKEN, "POST", "/v1/decide", &body).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("authn"))
    );
    // a file that cannot be read as tokens refuses everyone (fail closed)
    rewrite_tokens(&s, &format!("{EMMA_TOKEN}\n{OPS_TOKEN} *\n"));
    assert_eq!(as_token(&s, OPS_TOKEN, "GET", "/v1/health", "").status, 401);
}

/// Issue #21, item 4: the pending index was one list of 1,000, so one
/// agent's 1,000 PENDING proposals pushed another tenant's waiting
/// operation out of its approvers' listing. Now each tenant has its own,
/// and one mandate at most `MAX_PER_MANDATE` of its tenant's: a flood of
/// 1,050 PENDING from one mandate pushes out neither noah's operation nor
/// one of another of emma's mandates. (The operator's single token of the
/// old file format reads every tenant's.)
#[test]
fn a_flood_of_pending_from_one_mandate_hides_no_other_operation() {
    use intentplane::gateway::pending::{MAX_PER_MANDATE, MAX_PER_TENANT};
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let noah_m = w.mandate(MandateSpec::bank("noah"));
    let op_n = pending_for(&s, TOKEN, &noah_m, 0);
    let other = w.emma();
    let op_other = pending_for(&s, TOKEN, &other, 1);
    let flooding = w.emma();
    for i in 0..MAX_PER_TENANT + 50 {
        pending_for(&s, TOKEN, &flooding, 10 + i);
    }
    let all = listed(&s, TOKEN, "");
    assert!(all.contains(&op_n), "noah's operation was pushed out");
    assert!(all.contains(&op_other), "another mandate's was pushed out");
    assert_eq!(all.len(), 2 + MAX_PER_MANDATE, "the flood keeps its newest");
    assert_eq!(listed(&s, TOKEN, "?for=noah"), vec![op_n.clone()]);
}

/// Issue #21, item 6: 4,096 unauthenticated challenges in 0.7 s locked
/// every approver out (503) for two minutes. Now a flood in other names
/// (known approvers and not) and in emma's own name, from the address she
/// signs in from too, neither refuses her a challenge nor pushes out the
/// one she holds: she signs in.
#[test]
fn a_flood_of_challenges_does_not_lock_an_approver_out() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let no_token = [("Authorization", None)];
    let ask = |who: &str| {
        let r = request(
            &s,
            "POST",
            "/v1/approver/challenge",
            &json!({"approver": who}).to_string(),
            &no_token,
        );
        assert_eq!(r.status, 200, "{who}: {}", r.body);
        r.body["challenge"].as_str().unwrap().to_string()
    };
    let names = ["cfo", "noah", "clerk", "maria", "nobody", "x"];
    let flood = |n: usize| {
        for i in 0..n {
            ask(names[i % names.len()]);
        }
    };
    flood(100);
    let mine = ask("emma");
    flood(4096);
    let login = json!({"approver": "emma", "challenge": mine,
        "origin": "http://localhost", "purpose": "ipc approver login"});
    let sig = w
        .key("emma")
        .sign(intentplane::canonical::to_jcs(&login).unwrap().as_bytes());
    let body = json!({"login": login, "signature": sig}).to_string();
    let r = request(&s, "POST", "/v1/approver/session", &body, &no_token);
    assert_eq!(r.status, 200, "{}", r.body);
    // and after it, a fresh sign-in works as well
    assert!(sign_in(&s, "emma", w.key("emma"), "http://localhost").is_ok());
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
