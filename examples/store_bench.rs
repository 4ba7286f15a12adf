//! Transactions per second of the stores: each transaction spends one unit
//! from a budget and appends a receipt (about the work of one decision).
//! Run through `scripts/bench-store`.
//!
//! `cargo run --release --example store_bench -- [TRANSACTIONS]`

use intentplane::store::memory::MemoryStore;
use intentplane::store::sqlite::{SqliteOptions, SqliteStore};
use intentplane::store::{Store, StoreError, Tx, TxFn, verify_chain};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

fn body(i: usize) -> Value {
    json!({
        "time": "2026-11-02T10:00:00Z",
        "decision": "ALLOW",
        "stage": "execution",
        "action": "payment.transfer",
        "proposal": {"action": "payment.transfer", "args": {
            "from_account": "ACC-1", "payee_iban": "DE89 3704 0044 0532 0130 00",
            "amount": "120.00", "currency": "EUR", "subject": format!("invoice {i}")}},
        "resolved": {"payee_iban": {"value": "DE89370400440532013000", "origin": "registry.beneficiaries"},
                     "amount": {"value": 12000, "origin": "proposal"}},
        "policy_ids": ["bank/payment.transfer/permit"],
        "bundle_hash": "sha256:5f0c3c8b0c5d4f1e9a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f",
    })
}

/// Runs `n` transactions over `threads` threads; returns transactions/s.
fn run(store: Arc<dyn Store>, n: usize, threads: usize) -> f64 {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let s = Arc::clone(&store);
            std::thread::spawn(move || {
                let mut i = t;
                while i < n {
                    let b = body(i);
                    let mut f = |tx: &mut dyn Tx| -> Result<Value, StoreError> {
                        tx.spend("mandate-1", 12000)?;
                        tx.append_receipt(&b)?;
                        Ok(Value::Null)
                    };
                    if let Err(e) = s.transaction(&mut f) {
                        eprintln!("transaction failed: {e}");
                        std::process::exit(1);
                    }
                    i += threads;
                }
            })
        })
        .collect();
    for h in handles {
        if h.join().is_err() {
            eprintln!("a thread panicked");
            std::process::exit(1);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    match (store.receipts(), store.head()) {
        (Ok(r), Ok(h)) if verify_chain(&r, h.clone()) == Ok(n) => {}
        _ => {
            eprintln!("the chain does not verify after the run");
            std::process::exit(1);
        }
    }
    n as f64 / secs
}

/// Runs `n` transactions from one thread in `Store::transactions` calls of
/// `batch` bodies; returns transactions/s.
fn run_batched(store: &dyn Store, n: usize, batch: usize) -> f64 {
    let start = Instant::now();
    let mut i = 0;
    while i < n {
        let k = batch.min(n - i);
        let bodies: Vec<Value> = (i..i + k).map(body).collect();
        let mut fs: Vec<_> = bodies
            .iter()
            .map(|b| {
                move |tx: &mut dyn Tx| -> Result<Value, StoreError> {
                    tx.spend("mandate-1", 12000)?;
                    tx.append_receipt(b)?;
                    Ok(Value::Null)
                }
            })
            .collect();
        let mut refs: Vec<&mut TxFn<'_>> = fs.iter_mut().map(|f| f as &mut TxFn<'_>).collect();
        if let Some(Err(e)) = store
            .transactions(&mut refs)
            .into_iter()
            .find(Result::is_err)
        {
            eprintln!("transaction failed: {e}");
            std::process::exit(1);
        }
        i += k;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let dir = match tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| ".".into()))
    {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cannot make a temporary folder: {e}");
            std::process::exit(1);
        }
    };
    let sqlite = |name: &str, max_batch: usize| -> Arc<dyn Store> {
        let opts = SqliteOptions {
            max_batch,
            ..SqliteOptions::default()
        };
        match SqliteStore::open_with(dir.path().join(name), opts, true) {
            Ok(s) => Arc::new(s),
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(1);
            }
        }
    };
    // one commit (one WAL sync) per transaction is slow: fewer of them
    let n_sync = (n / 10).max(100);
    println!("{:<44} {:>8} {:>12}", "store", "txs", "txs/s");
    let row = |name: &str, store: Arc<dyn Store>, n: usize, threads: usize| {
        let rate = run(store, n, threads);
        println!("{name:<44} {n:>8} {rate:>12.0}");
    };
    row("memory, 1 thread", Arc::new(MemoryStore::new()), n, 1);
    row("memory, 8 threads", Arc::new(MemoryStore::new()), n, 8);
    row(
        "sqlite, commit each, 1 thread",
        sqlite("a.db", 1),
        n_sync,
        1,
    );
    row(
        "sqlite, commit each, 8 threads",
        sqlite("b.db", 1),
        n_sync,
        8,
    );
    row(
        "sqlite, group commit, 1 thread",
        sqlite("c.db", 256),
        n_sync,
        1,
    );
    row("sqlite, group commit, 8 threads", sqlite("d.db", 256), n, 8);
    row(
        "sqlite, group commit, 32 threads",
        sqlite("e.db", 256),
        n,
        32,
    );
    row(
        "sqlite, group commit, 128 threads",
        sqlite("f.db", 256),
        n,
        128,
    );
    let s = sqlite("g.db", 256);
    let rate = run_batched(s.as_ref(), n, 100);
    println!(
        "{:<44} {n:>8} {rate:>12.0}",
        "sqlite, transactions() of 100, 1 thread"
    );
}
