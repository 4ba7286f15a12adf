//! Concurrency and crashes: 8 threads, 4 `ipc` processes on one store,
//! and a run killed with SIGKILL mid-batch; each on an SQLite file and on
//! PostgreSQL (when `IPC_TEST_PG` names a server: see `common/pg.rs`).

use crate::common;
use common::*;
use intentplane::gateway::Outcome;
use intentplane::store::Store;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

/// Where a test keeps its state: an SQLite file in the test world's
/// folder, or a fresh PostgreSQL schema (kept alive by the guard).
enum Loc {
    File(PathBuf),
    #[cfg(feature = "postgres")]
    Pg(common::pg::Schema),
}

impl Loc {
    fn sqlite(w: &TestWorld) -> Loc {
        Loc::File(w.dir.path().join("state.db"))
    }

    /// A fresh schema, or `None` when the test is skipped.
    #[cfg(feature = "postgres")]
    fn pg() -> Option<Loc> {
        common::pg::fresh().map(Loc::Pg)
    }

    fn path(&self) -> &Path {
        match self {
            Loc::File(p) => p,
            #[cfg(feature = "postgres")]
            Loc::Pg(s) => Path::new(&s.url),
        }
    }

    fn arg(&self) -> String {
        self.path().to_str().unwrap().to_string()
    }

    fn open(&self) -> Arc<dyn Store> {
        intentplane::store::open(self.path(), true).unwrap()
    }
}

fn pay_1001() -> Value {
    json!({"action": "invoice.pay", "args": {"invoice_id": "INV-1001",
        "payee_iban": SUPPLIER, "amount": "4200.00", "currency": "EUR"}})
}

#[test]
fn eight_threads_pay_one_invoice_once() {
    let w = TestWorld::new();
    let loc = Loc::sqlite(&w);
    threads_pay_one_invoice_once(&w, &loc);
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_pay_one_invoice_once_postgres() {
    let w = TestWorld::new();
    let Some(loc) = Loc::pg() else { return };
    threads_pay_one_invoice_once(&w, &loc);
}

fn threads_pay_one_invoice_once(w: &TestWorld, loc: &Loc) {
    let gw = Arc::new(w.gateway_with(loc.open()));
    // eight clerks, eight mandates: idempotency cannot hide a double payment
    let mandates: Vec<Value> = (0..8).map(|_| w.clerk()).collect();
    let handles: Vec<_> = mandates
        .into_iter()
        .map(|m| {
            let gw = gw.clone();
            std::thread::spawn(move || gw.decide(&input(pay_1001(), &m, vec![])).unwrap())
        })
        .collect();
    let decisions: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let allowed = decisions
        .iter()
        .filter(|d| d.decision == Outcome::Allow)
        .count();
    assert_eq!(allowed, 1, "{decisions:#?}");
    for d in decisions.iter().filter(|d| d.decision != Outcome::Allow) {
        assert_deny(d, "policy", "invoice is not open");
    }
    let recs = gw.store().receipts().unwrap();
    assert_eq!(recs.len(), 8);
    intentplane::store::verify_chain(&recs, gw.store().head().unwrap()).unwrap();
    // one payment executed, one spend, one receipt that allows it
    assert_eq!(
        intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None),
        Ok(8)
    );
}

#[test]
fn eight_threads_spend_one_budget_exactly() {
    let w = TestWorld::new();
    let loc = Loc::sqlite(&w);
    threads_spend_one_budget_exactly(&w, &loc);
}

#[cfg(feature = "postgres")]
#[test]
fn eight_threads_spend_one_budget_exactly_postgres() {
    let w = TestWorld::new();
    let Some(loc) = Loc::pg() else { return };
    threads_spend_one_budget_exactly(&w, &loc);
}

fn threads_spend_one_budget_exactly(w: &TestWorld, loc: &Loc) {
    let gw = Arc::new(w.gateway_with(loc.open()));
    let mut spec = MandateSpec::bank("emma");
    spec.budget = 50_000; // 500.00
    spec.calls = 1000;
    let m = w.mandate(spec);
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (gw, m) = (gw.clone(), m.clone());
            std::thread::spawn(move || {
                (0..10)
                    .map(|i| {
                        // distinct amounts: distinct operations
                        let amount = format!("10.{:02}", t * 10 + i);
                        gw.decide(&input(transfer(LANDLORD, json!(amount)), &m, vec![]))
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let all: Vec<_> = handles
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let spent: i64 = all
        .iter()
        .filter(|d| d.decision == Outcome::Allow)
        .map(|d| d.resolved["amount"].as_i64().unwrap())
        .sum();
    assert!(spent <= 50_000, "spent {spent}");
    assert!(
        spent > 50_000 - 1_100,
        "the budget was nearly used: {spent}"
    );
    let denied = all.iter().filter(|d| d.decision == Outcome::Deny).count();
    assert!(denied > 0);
}

fn ipc() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ipc"))
}

#[test]
fn four_processes_pay_one_invoice_once() {
    let w = TestWorld::new();
    let loc = Loc::sqlite(&w);
    processes_pay_one_invoice_once(&w, &loc);
}

#[cfg(feature = "postgres")]
#[test]
fn four_processes_pay_one_invoice_once_postgres() {
    let w = TestWorld::new();
    let Some(loc) = Loc::pg() else { return };
    processes_pay_one_invoice_once(&w, &loc);
}

fn processes_pay_one_invoice_once(w: &TestWorld, loc: &Loc) {
    let db = loc.arg();
    let mut children = vec![];
    for i in 0..4 {
        let m = w.clerk();
        let mpath = w.dir.path().join(format!("m{i}.json"));
        std::fs::write(&mpath, m.to_string()).unwrap();
        let input = w.dir.path().join(format!("in{i}.jsonl"));
        // each process tries twice, and pays another invoice too
        let lines = [pay_1001(), pay_1001()];
        std::fs::write(
            &input,
            lines
                .iter()
                .map(|l| l.to_string() + "\n")
                .collect::<String>(),
        )
        .unwrap();
        children.push(
            ipc()
                .args([
                    "run",
                    "--bundle",
                    &path_str(&w.bundle_path),
                    "--world",
                    &path_str(&w.world_path),
                ])
                .args([
                    "--store",
                    &db,
                    "--batch",
                    "1",
                    "--mandate",
                    &path_str(&mpath),
                ])
                .arg(&input)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap(),
        );
    }
    let mut allowed = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let d: Value = serde_json::from_str(line).unwrap();
            if d["decision"] == "ALLOW" && d.get("replayed").is_none() {
                allowed += 1;
            }
        }
    }
    assert_eq!(allowed, 1, "the invoice was paid {allowed} times");
    let v = ipc().args(["receipts", "verify", &db]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
}

#[test]
fn a_run_killed_mid_batch_verifies_and_reruns_without_double_execution() {
    let w = TestWorld::new();
    let loc = Loc::sqlite(&w);
    run_killed_mid_batch(&w, &loc);
}

#[cfg(feature = "postgres")]
#[test]
fn a_run_killed_mid_batch_verifies_and_reruns_without_double_execution_postgres() {
    let w = TestWorld::new();
    let Some(loc) = Loc::pg() else { return };
    run_killed_mid_batch(&w, &loc);
}

fn run_killed_mid_batch(w: &TestWorld, loc: &Loc) {
    let db = loc.arg();
    let mut spec = MandateSpec::bank("emma");
    spec.budget = 100_000_000;
    spec.calls = 1_000_000;
    let m = w.mandate(spec);
    let mpath = w.dir.path().join("m.json");
    std::fs::write(&mpath, m.to_string()).unwrap();
    let input = w.dir.path().join("in.jsonl");
    let lines: String = (0..3000)
        .map(|i| {
            transfer(LANDLORD, json!(format!("{}.{:02}", 1 + i / 100, i % 100))).to_string() + "\n"
        })
        .collect();
    std::fs::write(&input, &lines).unwrap();
    let run = |kill: bool| {
        let mut child = ipc()
            .args([
                "run",
                "--bundle",
                &path_str(&w.bundle_path),
                "--world",
                &path_str(&w.world_path),
            ])
            .args([
                "--store",
                &db,
                "--batch",
                "50",
                "--mandate",
                &path_str(&mpath),
            ])
            .arg(&input)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        if kill {
            // wait for the first committed batch, then kill without warning
            use std::io::Read;
            let mut first = [0u8; 1];
            let mut out = child.stdout.take().unwrap();
            out.read_exact(&mut first).unwrap();
            child.kill().unwrap();
            let _ = child.wait();
            return None;
        }
        Some(child.wait_with_output().unwrap())
    };
    run(true);
    let v = ipc().args(["receipts", "verify", &db]).output().unwrap();
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    let out = run(false).unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let ds: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ds.len(), 3000);
    assert!(ds.iter().all(|d| d["decision"] == "ALLOW"));
    let replayed = ds.iter().filter(|d| d["replayed"] == true).count();
    assert!(replayed >= 50, "the killed run committed its first batch");
    assert!(replayed < 3000, "the kill came before the end of the run");
    assert_eq!(replayed % 50, 0, "whole batches or nothing: {replayed}");
    // what the killed run committed is replayed, never executed again
    let store = loc.open();
    let executed = store
        .receipts()
        .unwrap()
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW" && r.body["replayed"] == false)
        .count();
    assert_eq!(executed, 3000, "each transfer executed exactly once");
    let v = ipc().args(["receipts", "verify", &db]).output().unwrap();
    assert!(v.status.success());
}
