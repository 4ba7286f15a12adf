//! `ipc serve`: JSON lines over stdio, and HTTP (real processes, real
//! sockets): concurrency, timeouts, the connection bound, header limits,
//! receipts paging and metrics. The bearer token and Host / Origin checks
//! are in `serve_access.rs`, starting and stopping in `serve_startup.rs`,
//! approvals and owners' changes in `serve_approvals.rs`.

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;

use crate::serve_kit::*;

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

/// Shadow mode over HTTP: the answer is SHADOW with what would have been
/// decided, the metrics count it by its would-be outcome, and start-up
/// says so on stderr.
#[test]
fn shadow_mode_is_answered_counted_and_announced() {
    let w = TestWorld::new();
    let mut world = std::fs::read_to_string(&w.world_path).unwrap();
    world.push_str("[enforce.tenants]\nemma = false\n");
    std::fs::write(&w.world_path, world).unwrap();
    let log = w.dir.path().join("stderr.log");
    let mut s = launch(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        &path_str(&w.dir.path().join("s.db")),
        TOKEN,
        &[],
        std::process::Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let r = post(&s, &transfer(ATTACKER_IBAN, json!("1.00")));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["decision"], "SHADOW", "{}", r.body);
    assert_eq!(r.body["would_be"]["decision"], "DENY", "{}", r.body);
    assert_eq!(r.body["would_be"]["stage"], "provenance", "{}", r.body);
    let r = post(&s, &transfer(LANDLORD, json!("1.00")));
    assert_eq!(r.body["would_be"]["decision"], "ALLOW", "{}", r.body);
    let text = get(&s, "/metrics").body.as_str().unwrap().to_string();
    assert!(
        text.contains(
            "ipc_decisions_total{outcome=\"shadow\",stage=\"provenance\",would_be=\"deny\"} 1"
        ),
        "{text}"
    );
    assert!(text.contains("would_be=\"allow\"} 1"), "{text}");
    terminate(&mut s);
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert!(
        stderr.contains("SHADOW MODE for tenants `emma`"),
        "{stderr}"
    );
}

/// `tenant=NAME` on one store: only that tenant's receipts of the page,
/// and the page's extent in `Ipc-Scanned-Through`.
#[test]
fn receipts_of_one_tenant_on_one_store() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let noah = w.mandate(MandateSpec::bank("noah"));
    post(&s, &transfer(LANDLORD, json!("1.00")));
    post(
        &s,
        &json!({"proposal": transfer_of("noah", 200), "mandate": noah}),
    );
    post(&s, &transfer(LANDLORD, json!("2.00")));
    let r = get(&s, "/v1/receipts?tenant=emma&after=0&limit=10");
    assert_eq!(r.status, 200, "{:?}", r.body);
    let seqs: Vec<u64> = r
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 3]);
    assert!(
        r.headers.contains("ipc-scanned-through: 3"),
        "{}",
        r.headers
    );
    assert_eq!(get(&s, "/v1/receipts?tenant=emma&tenant=noah").status, 400);
}
