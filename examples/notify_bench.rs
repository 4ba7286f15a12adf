//! `[[notify]]`: notifications delivered per second to a local HTTPS
//! receiver, and what notifications add to a PENDING decision. Run
//! through `scripts/bench-notify`.
//!
//! `cargo run --release --example notify_bench -- [N]`
//!
//! 1. N PENDING decisions, one transaction each, on an SQLite file: with
//!    no target, with one target and no sender (the outbox rows alone),
//!    then with one target and its sender running against the receiver
//!    (the sender's own transactions beside the decisions).
//! 2. N rows in the outbox, then a sender started: deliveries/s until the
//!    receiver has all N, at `concurrency` 4 and 16.

#[path = "../tests/service/notify_receiver.rs"]
#[allow(dead_code)]
mod receiver;

use intentplane::gateway::Gateway;
use intentplane::gateway::testkit::*;
use receiver::{Mode, Receiver};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn with_target(w: &TestWorld, r: &Receiver, concurrency: usize) {
    std::fs::write(
        w.dir.path().join("notify.secret"),
        "bench-secret-0123456789abcdef\n",
    )
    .unwrap();
    let mut text = "approval_page = \"https://gw.example.com/approve\"\n".to_string();
    text.push_str(&std::fs::read_to_string(&w.world_path).unwrap());
    text.push_str(&format!(
        "\n[[notify]]\nname = \"bench\"\nurl = \"{}\"\nsecret_file = \"notify.secret\"\nca_file = \"{}\"\nallow_private = true\nconcurrency = {concurrency}\n",
        r.url,
        r.ca_file.display()
    ));
    std::fs::write(&w.world_path, text).unwrap();
}

fn mandate(w: &TestWorld, n: usize) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 1_000_000_000;
    s.calls = (n as u64) * 2 + 10;
    w.mandate(s)
}

fn big(i: usize) -> Value {
    transfer(
        LANDLORD,
        json!(format!("{}.{:02}", 1500 + i / 100, i % 100)),
    )
}

fn gateway(w: &TestWorld) -> Arc<Gateway> {
    let db = w.dir.path().join("state.db");
    let store = intentplane::store::sqlite::SqliteStore::open(&db).unwrap();
    Arc::new(w.gateway_with(Arc::new(store)))
}

/// Each decision's time, sorted.
fn decide_pending(gw: &Gateway, m: &Value, n: usize) -> Vec<Duration> {
    let mut took: Vec<Duration> = (0..n)
        .map(|i| {
            let t = Instant::now();
            let d = decide(gw, big(i), m);
            assert_eq!(d.decision, intentplane::gateway::Outcome::Pending);
            t.elapsed()
        })
        .collect();
    took.sort();
    took
}

fn show(what: &str, took: &[Duration]) {
    let mean = took.iter().sum::<Duration>().as_secs_f64() / took.len() as f64;
    let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3;
    println!(
        "{what:<34} mean {:.3} ms  p50 {:.3} ms  p99 {:.3} ms",
        mean * 1e3,
        at(0.5),
        at(0.99)
    );
}

fn latency(n: usize) {
    let off = TestWorld::new();
    let gw = gateway(&off);
    show(
        "PENDING, no [[notify]]",
        &decide_pending(&gw, &mandate(&off, n), n),
    );
    let rows = TestWorld::new();
    let r0 = Receiver::start(rows.dir.path(), Mode::Ok);
    with_target(&rows, &r0, 4);
    let gw = gateway(&rows);
    show(
        "PENDING, one target, no sender",
        &decide_pending(&gw, &mandate(&rows, n), n),
    );
    let on = TestWorld::new();
    let r = Receiver::start(on.dir.path(), Mode::Ok);
    with_target(&on, &r, 4);
    let gw = gateway(&on);
    let sender = intentplane::gateway::notify::start(gw.clone())
        .unwrap()
        .unwrap();
    show(
        "PENDING, one target, sender on",
        &decide_pending(&gw, &mandate(&on, n), n),
    );
    assert!(r.wait_for(600, |r| r.delivered().len() >= n));
    sender.stop();
}

fn throughput(n: usize, concurrency: usize) {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_target(&w, &r, concurrency);
    let gw = gateway(&w);
    let m = mandate(&w, n);
    for i in 0..n {
        decide(&gw, big(i), &m);
    }
    let t = Instant::now();
    let sender = intentplane::gateway::notify::start(gw.clone())
        .unwrap()
        .unwrap();
    assert!(
        r.wait_for(600, |r| r.delivered().len() >= n),
        "{}",
        r.delivered().len()
    );
    let secs = t.elapsed().as_secs_f64();
    println!(
        "delivered {n} at concurrency {concurrency:<3}       {:.0}/s  (max {} open at once)",
        n as f64 / secs,
        r.max_concurrent()
    );
    sender.stop();
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1000);
    latency(n);
    throughput(n, 4);
    throughput(n, 16);
}
