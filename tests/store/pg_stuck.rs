//! One stuck instance must not stop the others (issue #26, item 5): two
//! `ipc serve --listen` instances on one PostgreSQL database; one is
//! frozen with SIGSTOP while it holds the receipt chain's head lock (a
//! paused VM, a stopped process), and the other must go on deciding
//! meanwhile, because the store bounds its own sessions (lock wait, idle in
//! transaction). The frozen one, continued, fails its late commit cleanly:
//! nothing of it is committed, every answer it gave is durable and the
//! chain verifies. And `ipc serve` started while the database cannot be
//! reached waits for it (bounded, logged) instead of exiting. Each needs
//! PostgreSQL (`IPC_TEST_PG`, see `common/pg.rs`).
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "postgres", feature = "http"))]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn transfer(tag: &str, i: usize) -> Value {
    json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": LANDLORD, "amount": "1.00", "currency": "EUR",
        "subject": format!("{tag} {i}")}})
}

/// A bearer token for one instance (long enough for `ipc serve`).
fn token() -> String {
    format!(
        "instance-{}",
        intentplane::gateway::approval::random_id().unwrap()
    )
}

fn big_mandate(w: &TestWorld) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 10_000_000;
    s.calls = 100_000;
    w.mandate(s)
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid}");
}

/// How many sessions hold the head lock of `schema`'s chain, and how many
/// of them are idle in their transaction.
fn head_holders(admin: &mut postgres::Client, schema: &str) -> (i64, i64) {
    let row = admin
        .query_one(
            "SELECT count(*), count(*) FILTER (WHERE a.state = 'idle in transaction')
             FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
             JOIN pg_stat_activity a ON a.pid = l.pid
             WHERE c.relname = 'ipc_head' AND c.relnamespace = $1::text::regnamespace
               AND l.granted AND l.mode = 'ExclusiveLock'",
            &[&schema],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

fn assert_verifies(url: &str) {
    let v = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["receipts", "verify", url])
        .output()
        .unwrap();
    assert!(
        v.status.success(),
        "{}{}",
        String::from_utf8_lossy(&v.stdout),
        String::from_utf8_lossy(&v.stderr)
    );
}

#[test]
fn an_instance_frozen_holding_the_head_lock_does_not_stop_the_others() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let m = big_mandate(&w);
    let log_a = w.dir.path().join("a.stderr");
    let log_b = w.dir.path().join("b.stderr");
    let a = launch(
        &w,
        &m,
        "127.0.0.1:0",
        &pg.url,
        &token(),
        &[],
        std::fs::File::create(&log_a).unwrap().into(),
    );
    let b = launch(
        &w,
        &m,
        "127.0.0.1:0",
        &pg.url,
        &token(),
        &[],
        std::fs::File::create(&log_b).unwrap().into(),
    );
    let mut admin = common::pg::admin(&common::pg::server().unwrap());
    let stop = AtomicBool::new(false);
    let (a_answers, b_answers, b_took) = std::thread::scope(|sc| {
        // A decides without a pause, so that it holds the head lock often
        let feeder = sc.spawn(|| {
            let mut answers = vec![];
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                answers.push(post(&a, &transfer("a", i)));
                i += 1;
            }
            answers
        });
        // freeze A at a moment it holds the lock
        let pid = a.child.id();
        let mut frozen = false;
        for attempt in 0..2000 {
            signal(pid, "-STOP");
            std::thread::sleep(Duration::from_millis(30));
            let (holders, idle) = head_holders(&mut admin, &pg.name);
            if holders == 1 && idle == 1 {
                frozen = true;
                break;
            }
            signal(pid, "-CONT");
            std::thread::sleep(Duration::from_millis(1 + attempt % 7));
        }
        assert!(frozen, "instance A was never caught holding the head lock");
        let frozen_at = Instant::now();
        // B decides while A stays frozen with the lock
        let (tx, rx) = std::sync::mpsc::channel();
        let b_ref = &b;
        sc.spawn(move || {
            for i in 0..5 {
                let _ = tx.send(post(b_ref, &transfer("b", i)));
            }
        });
        // A stays frozen for up to 20 s
        let deadline = frozen_at + Duration::from_secs(20);
        let mut b_answers = vec![];
        for _ in 0..5 {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(r) => b_answers.push(r),
                Err(_) => break,
            }
        }
        let b_took = frozen_at.elapsed();
        // A is still frozen: the whole time B decided
        let (holders, _) = head_holders(&mut admin, &pg.name);
        signal(pid, "-CONT");
        stop.store(true, Ordering::SeqCst);
        let a_answers = feeder.join().unwrap();
        assert_eq!(
            b_answers.len(),
            5,
            "B decided {} of 5 in {b_took:?} while A was frozen (A's session still holding the lock: {holders})",
            b_answers.len()
        );
        (a_answers, b_answers, b_took)
    });
    eprintln!("B decided 5 while A was frozen with the head lock, in {b_took:?}");
    assert!(b_took < Duration::from_secs(15), "{b_took:?}");
    for r in &b_answers {
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.body["decision"], "ALLOW", "{}", r.body);
    }
    // A's late commit failed cleanly: every decision it answered is
    // committed (its receipt holds its operation), the others it refused
    // with a clear error, and A goes on deciding
    let after = post(&a, &transfer("a after", 0));
    assert_eq!(after.status, 200, "{}", after.body);
    assert_eq!(after.body["decision"], "ALLOW", "{}", after.body);
    let receipts = intentplane::store::open(Path::new(&pg.url), false)
        .unwrap()
        .receipts()
        .unwrap();
    let by_seq: HashMap<u64, &Value> = receipts.iter().map(|r| (r.seq, &r.body)).collect();
    let answered = a_answers.iter().chain(&b_answers).chain([&after]);
    for r in answered {
        if r.status != 200 {
            assert_eq!(r.status, 500, "{}", r.body);
            assert!(r.body.get("decision").is_none(), "{}", r.body);
            continue;
        }
        let d = &r.body;
        let seq = d["receipt"]["seq"].as_u64().unwrap();
        let body = by_seq
            .get(&seq)
            .unwrap_or_else(|| panic!("no receipt {seq} for {d}"));
        assert_eq!(body["operation_hash"], d["operation_hash"], "{d}");
        assert_eq!(body["decision"], d["decision"], "{d}");
    }
    // nothing executed twice
    let mut executed: HashMap<&str, usize> = HashMap::new();
    for r in &receipts {
        if r.body["decision"] == "ALLOW" && r.body["replayed"] == false {
            *executed
                .entry(r.body["operation_hash"].as_str().unwrap())
                .or_default() += 1;
        }
    }
    assert!(executed.values().all(|&n| n == 1), "{executed:?}");
    assert_verifies(&pg.url);
    for log in [&log_a, &log_b] {
        let text = std::fs::read_to_string(log).unwrap();
        assert!(!text.contains("panicked"), "{text}");
    }
}

/// Copies bytes between two streams until either side closes.
fn pipe(mut from: std::net::TcpStream, mut to: std::net::TcpStream) {
    let _ = std::io::copy(&mut from, &mut to);
    let _ = to.shutdown(std::net::Shutdown::Both);
    let _ = from.shutdown(std::net::Shutdown::Both);
}

/// `ipc serve` started on a database that cannot be reached yet (nothing
/// listens on its port) tries again, says so, and serves once the
/// database is there (a forwarder to the test server, opened 3 s later).
#[test]
fn serve_waits_for_a_database_that_is_not_up_yet() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    // postgres://USER@HOST:PORT/DB?...
    let rest = pg.url.split_once("://").unwrap().1;
    let authority = &rest[..rest.find('/').unwrap()];
    let (user_at, real) = match authority.rsplit_once('@') {
        Some((u, hp)) => (format!("{u}@"), hp.to_string()),
        None => (String::new(), authority.to_string()),
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = pg.url.replacen(
        &format!("{user_at}{real}"),
        &format!("{user_at}127.0.0.1:{port}"),
        1,
    );
    let w = TestWorld::new();
    let m = big_mandate(&w);
    let log = w.dir.path().join("serve.stderr");
    let forwarder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(3));
        let listener = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        for client in listener.incoming().flatten() {
            let Ok(server) = std::net::TcpStream::connect(&real) else {
                continue;
            };
            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
            std::thread::spawn(move || pipe(client, server));
            std::thread::spawn(move || pipe(s2, c2));
        }
    });
    let started = Instant::now();
    let s = launch(
        &w,
        &m,
        "127.0.0.1:0",
        &url,
        &token(),
        &[],
        std::fs::File::create(&log).unwrap().into(),
    );
    let waited = started.elapsed();
    let r = post(&s, &transfer("after the wait", 0));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["decision"], "ALLOW", "{}", r.body);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(waited >= Duration::from_secs(2), "{waited:?}: {text}");
    assert!(text.contains("trying again in"), "nothing logged: {text}");
    drop(s);
    drop(forwarder);
}
