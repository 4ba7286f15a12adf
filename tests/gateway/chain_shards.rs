//! Issue #26, item 4: past the ceiling of one database's head lock, chains
//! by tenant (`docs/decisions/chain-shards.md`). Two PostgreSQL databases,
//! a shard map that puts each tenant on one of them, two `ipc run`
//! processes per tenant spending one mandate's budget at once on its
//! shard: each chain verifies, holds its own tenant's receipts only, and
//! no tenant's budget is overspent, whatever the other shard does.
// needs a part of the default features: the test is off without it
#![cfg(feature = "postgres")]

use crate::common;
use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};

/// The shard map: each tenant on one chain, so that its budget is decided
/// in one place.
const SHARDS: [(&str, usize); 2] = [("emma", 0), ("noah", 1)];

#[test]
fn two_shards_each_verify_and_no_tenant_overspends() {
    let w = TestWorld::new();
    let Some(a) = pg::fresh_database() else {
        return;
    };
    let Some(b) = pg::fresh_database() else {
        return;
    };
    let shards = [a.url.clone(), b.url.clone()];
    let budget = 30_000; // 300.00 per tenant
    let mut children = vec![];
    let mut mandates = vec![];
    for (tenant, shard) in SHARDS {
        let mut spec = MandateSpec::bank(tenant);
        spec.budget = budget;
        spec.calls = 1000;
        let m = w.mandate(spec);
        let mpath = w.dir.path().join(format!("{tenant}.json"));
        std::fs::write(&mpath, m.to_string()).unwrap();
        mandates.push((tenant, shard));
        // two processes per tenant, 40 transfers of about 10.00 each: 800.00
        // asked of 300.00
        for p in 0..2 {
            let input = w.dir.path().join(format!("{tenant}{p}.jsonl"));
            let lines: String = (0..40)
                .map(|i| transfer_of(tenant, 1_000 + p * 100 + i).to_string() + "\n")
                .collect();
            std::fs::write(&input, lines).unwrap();
            let child = Command::new(env!("CARGO_BIN_EXE_ipc"))
                .args(["run", "--bundle", &path_str(&w.bundle_path)])
                .args(["--world", &path_str(&w.world_path)])
                .args(["--store", &shards[shard], "--batch", "4"])
                .args(["--mandate", &path_str(&mpath), "--store-stats"])
                .arg(&input)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            children.push((tenant, child));
        }
    }
    let mut spent = std::collections::HashMap::<&str, i64>::new();
    let mut allowed = std::collections::HashMap::<&str, usize>::new();
    for (tenant, c) in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success());
        // `--store-stats`: each of the 10 batches held the head lock, for
        // some time, and committed
        let stderr = String::from_utf8(out.stderr).unwrap();
        let stats: Value = serde_json::from_str(stderr.lines().last().unwrap()).unwrap();
        let hold = &stats["store_stats"]["head_lock"];
        assert!(hold["transactions"].as_u64().unwrap() >= 10, "{stats}");
        assert!(hold["held_seconds"].as_f64().unwrap() > 0.0, "{stats}");
        assert!(
            hold["max_seconds"].as_f64().unwrap() <= hold["held_seconds"].as_f64().unwrap(),
            "{stats}"
        );
        let o = &stats["store_stats"]["optimistic"];
        assert_eq!(
            o["decided"].as_u64().unwrap() + o["rerun"].as_u64().unwrap(),
            10,
            "{stats}"
        );
        for line in String::from_utf8(out.stdout).unwrap().lines() {
            let d: Value = serde_json::from_str(line).unwrap();
            if d["decision"] == "ALLOW" {
                let amount = intentplane::base::Money::from_json(&d["resolved"]["amount"]);
                *spent.entry(tenant).or_default() += amount.unwrap().minor();
                *allowed.entry(tenant).or_default() += 1;
            }
        }
    }
    for (tenant, shard) in &mandates {
        let s = spent.get(tenant).copied().unwrap_or(0);
        assert!(s <= budget, "{tenant} spent {s} of {budget}");
        assert!(s > budget - 1_200, "{tenant}'s budget was nearly used: {s}");
        let url = &shards[*shard];
        let v = Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(["receipts", "verify", url, "--format", "json"])
            .output()
            .unwrap();
        assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
        // the shard's chain: its tenant's 80 decisions, and nobody else's;
        // its budget row is what the ALLOWs spent
        let store = intentplane::store::open(std::path::Path::new(url), false).unwrap();
        let receipts = store.receipts().unwrap();
        assert_eq!(receipts.len(), 80, "{tenant}");
        let other = if *tenant == "emma" { "noah" } else { "emma" };
        for r in &receipts {
            let text = r.body.to_string();
            assert!(text.contains(&format!("{tenant}-checking")), "{text}");
            assert!(!text.contains(&format!("{other}-checking")), "{text}");
        }
        let snap = store.snapshot().unwrap();
        assert_eq!(intentplane::store::verify_store(&snap, None), Ok(80));
        let booked: i64 = snap.accounts.budgets.values().map(|s| s.amount).sum();
        assert_eq!(booked, spent.get(tenant).copied().unwrap_or(0), "{tenant}");
        assert_eq!(
            snap.accounts.executions.len(),
            allowed.get(tenant).copied().unwrap_or(0)
        );
    }
}
