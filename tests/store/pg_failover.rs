//! Issue #37, item 4: the store on a primary that can fail over. Its URL
//! names several hosts with `target_session_attrs=read-write` (the client
//! tries them in order and keeps the one that accepts writes), an instance
//! whose connection is lost connects again at its next decision, and a
//! decision whose `COMMIT` was sent but never answered (the connection
//! lost during it: the server may have committed) is never reported, above
//! all never as an ALLOW, nor decided again in place; its retry is answered
//! from the store by its operation hash. The loss is made by a proxy in
//! front of the test server that forwards a `COMMIT` and then drops the
//! connection instead of relaying the answer. The failover itself, under
//! load, on pg_auto_failover: scripts/test-failover. Needs PostgreSQL
//! (`IPC_TEST_PG`, see `common/pg.rs`).
#![cfg(feature = "postgres")]

use crate::common;
use common::*;
use intentplane::gateway::{GatewayError, Outcome};
use intentplane::store::StoreError;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `COMMIT` as the simple query protocol sends it (`batch_execute`).
const COMMIT: &[u8] = b"Q\0\0\0\x0bCOMMIT\0";

/// A TCP proxy in front of the test server. Armed, it forwards the next
/// `COMMIT` and then closes both sides of that connection when the
/// server's answer comes, without relaying it.
struct Proxy {
    port: u16,
    armed: Arc<AtomicBool>,
    cuts: Arc<AtomicUsize>,
    connections: Arc<AtomicUsize>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cuts = Arc::new(AtomicUsize::new(0));
        let connections = Arc::new(AtomicUsize::new(0));
        let (a, c, n) = (armed.clone(), cuts.clone(), connections.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { break };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                n.fetch_add(1, Ordering::SeqCst);
                relay(client, server, a.clone(), c.clone());
            }
        });
        Proxy {
            port,
            armed,
            cuts,
            connections,
        }
    }
}

fn relay(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>, cuts: Arc<AtomicUsize>) {
    let cut = Arc::new(AtomicBool::new(false));
    let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let cut_up = cut.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        loop {
            let n = match c_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let chunk = &buf[..n];
            if chunk.windows(COMMIT.len()).any(|w| w == COMMIT)
                && armed.swap(false, Ordering::SeqCst)
            {
                // before the server can answer
                cut_up.store(true, Ordering::SeqCst);
            }
            if s_out.write_all(chunk).is_err() {
                break;
            }
        }
        let _ = s_out.shutdown(Shutdown::Write);
    });
    let (mut s_in, mut c_out) = (server, client);
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        loop {
            let n = match s_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if cut.load(Ordering::SeqCst) {
                // the server answered the COMMIT: the client never learns it
                cuts.fetch_add(1, Ordering::SeqCst);
                break;
            }
            if c_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = c_out.shutdown(Shutdown::Both);
        let _ = s_in.shutdown(Shutdown::Both);
    });
}

/// `HOST:PORT` of a `postgres://USER@HOST:PORT/...` URL.
fn host_port(url: &str) -> String {
    let rest = url.split_once('@').map(|(_, r)| r).unwrap_or(url);
    rest.split(['/', '?']).next().unwrap().to_string()
}

/// A port nothing listens on.
fn dead_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn amount_transfer(amount: &str) -> Value {
    transfer(LANDLORD, json!(amount))
}

/// The store's budget row of the mandate: amount spent (cents) and calls.
fn spent(server: &str, schema: &str) -> Vec<(i64, i64)> {
    common::pg::admin(server)
        .query(
            &format!("SELECT amount, calls FROM {schema}.ipc_budgets"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[test]
fn pg_a_commit_whose_outcome_is_unknown_is_never_an_allow_and_its_retry_is_answered_from_the_store()
{
    let Some(schema) = common::pg::fresh() else {
        return;
    };
    let server = std::env::var(common::pg::ENV).unwrap();
    let upstream = host_port(&schema.url);
    let proxy = Proxy::start(upstream.clone());
    // two hosts, the first down: the client goes on to the next that
    // accepts writes
    let url = schema
        .url
        .replace(
            &upstream,
            &format!("127.0.0.1:{},127.0.0.1:{}", dead_port(), proxy.port),
        )
        .replace("?options", "?target_session_attrs=read-write&options");
    assert!(url.contains(",127.0.0.1:"), "{url}");
    let store = intentplane::store::open(Path::new(&url), true).unwrap();
    let w = TestWorld::new();
    let gw = w.gateway_with(store);
    let m = w.emma();
    let first = input(amount_transfer("1.00"), &m, vec![]);
    let d = gw.decide(&first).unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");

    // the connection lost during COMMIT: an error, not an ALLOW, and no
    // DENY receipt beside what the server committed
    let second = input(amount_transfer("2.00"), &m, vec![]);
    proxy.armed.store(true, Ordering::SeqCst);
    let lost = gw.decide(&second);
    assert_eq!(proxy.cuts.load(Ordering::SeqCst), 1, "the commit was cut");
    match &lost {
        Err(GatewayError::Store(StoreError::CommitUnknown(_))) => {}
        other => panic!("a commit of unknown outcome must be an error, got {other:#?}"),
    }
    // the server did commit it: the ALLOW's receipt is the chain's last
    let direct = intentplane::store::open(Path::new(&schema.url), false).unwrap();
    let recs = direct.receipts().unwrap();
    assert_eq!(recs.len(), 2, "{recs:#?}");
    let committed = &recs[1];
    assert_eq!(committed.body["decision"], "ALLOW");
    assert_eq!(spent(&server, &schema.name), vec![(300, 2)]);

    // the retry, on a new connection: answered from the store by its
    // operation hash, the committed result, nothing executed again
    let before = proxy.connections.load(Ordering::SeqCst);
    let again = gw.decide(&second).unwrap();
    assert!(proxy.connections.load(Ordering::SeqCst) > before);
    assert_eq!(again.decision, Outcome::Allow, "{again:#?}");
    assert!(again.replayed, "{again:#?}");
    assert_eq!(
        again.operation_hash.as_deref(),
        committed.body["operation_hash"].as_str()
    );
    assert_eq!(again.result.as_ref(), Some(&committed.body["result"]));
    assert_eq!(spent(&server, &schema.name), vec![(300, 2)]);

    // a batch cut the same way: none of it answered nor decided again
    // input by input; its retry is answered from the store, each once
    let batch = [
        input(amount_transfer("3.00"), &m, vec![]),
        input(amount_transfer("4.00"), &m, vec![]),
    ];
    proxy.armed.store(true, Ordering::SeqCst);
    let lost = intentplane::gateway::testkit::decide_batch(&gw, &batch);
    assert!(
        matches!(lost, Err(GatewayError::Store(StoreError::CommitUnknown(_)))),
        "{lost:#?}"
    );
    assert_eq!(direct.receipts().unwrap().len(), 5);
    let again = intentplane::gateway::testkit::decide_batch(&gw, &batch).unwrap();
    assert!(
        again
            .iter()
            .all(|d| d.decision == Outcome::Allow && d.replayed),
        "{again:#?}"
    );
    assert_eq!(spent(&server, &schema.name), vec![(1000, 4)]);
    let audit = intentplane::store::verify_store(&direct.snapshot().unwrap(), None);
    assert!(audit.is_ok(), "{audit:?}");
}
