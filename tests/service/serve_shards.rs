//! Issue #37: `ipc serve --listen` over a world whose stores are sharded:
//! each proposal decided on its tenant's shard, the readiness probe
//! reading every shard, and the receipts read by tenant from its shard's
//! chain (a request that names no tenant refused rather than answered
//! from some shard).

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::json;
use std::process::{Command, Stdio};

#[test]
fn the_service_decides_each_tenant_on_its_shard() {
    let w = TestWorld::new();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str("[store.shards]\nemma = \"a.db\"\nnoah = \"b.db\"\n");
    // the test world's own file, so that `launch` serves it
    let world = w.world_path.clone();
    std::fs::write(&world, text).unwrap();
    let ipc = env!("CARGO_BIN_EXE_ipc");
    let init = Command::new(ipc)
        .args(["shards", "init", "--world", &path_str(&world)])
        .output()
        .unwrap();
    assert!(init.status.success());
    let s = launch(&w, &w.emma(), "127.0.0.1:0", "", TOKEN, &[], Stdio::null());
    let emma = post(&s, &json!({"proposal": transfer_of("emma", 1200)}));
    assert_eq!(emma.body["decision"], "ALLOW", "{:?}", emma.body);
    let noah_m = w.mandate(MandateSpec::bank("noah"));
    let noah = post(
        &s,
        &json!({"proposal": transfer_of("noah", 1300), "mandate": noah_m}),
    );
    assert_eq!(noah.body["decision"], "ALLOW", "{:?}", noah.body);
    let zoe = post(
        &s,
        &json!({"proposal": transfer_of("noah", 1300),
        "mandate": w.mandate(MandateSpec::bank("zoe"))}),
    );
    assert_eq!(zoe.body["decision"], "DENY", "{:?}", zoe.body);
    assert_eq!(zoe.body["stage"], "authn");
    let ready = get(&s, "/v1/ready");
    assert_eq!(ready.status, 200, "{:?}", ready.body);
    // the receipts of one chain: which? refused, never some shard's
    let receipts = get(&s, "/v1/receipts");
    assert_eq!(receipts.status, 400, "{:?}", receipts.body);
    assert!(
        receipts.body.to_string().contains("name a tenant"),
        "{:?}",
        receipts.body
    );
    // by tenant: its shard's chain, only its receipts, paged there
    let noahs = get(&s, "/v1/receipts?tenant=noah&after=0&limit=10");
    assert_eq!(noahs.status, 200, "{:?}", noahs.body);
    let rs = noahs.body.as_array().unwrap();
    assert_eq!(rs.len(), 1, "{rs:?}");
    assert_eq!(rs[0]["body"]["mandate"]["owner"], "noah");
    assert_eq!(rs[0]["seq"], 2, "b.db: noah's placement, then his decision");
    let emmas = get(&s, "/v1/receipts?tenant=emma&last=10");
    let owners: Vec<&str> = emmas
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["body"]["mandate"]["owner"].as_str().unwrap())
        .collect();
    assert_eq!(owners, ["emma"], "zoe's refusal is on a.db too, not emma's");
    let nobody = get(&s, "/v1/receipts?tenant=zoe");
    assert_eq!(nobody.status, 404, "{:?}", nobody.body);
    assert_eq!(get(&s, "/v1/receipts?tenant=a%20b").status, 400);
    drop(s);
    assert_eq!(decision_owners(&w.dir.path().join("a.db")), ["emma", "zoe"]);
    assert_eq!(decision_owners(&w.dir.path().join("b.db")), ["noah"]);
}
