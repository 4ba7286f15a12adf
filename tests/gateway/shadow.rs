//! Shadow mode (`[enforce]` in the world): every stage runs and writes its
//! receipt, the answer is SHADOW with what would have been decided, the
//! gateway executes nothing, and what shadow spends is kept apart, so that
//! turning enforcement on starts from a clean state. Never for a proposal
//! whose mandate does not verify; never for a pack marked `shadow never`.

use crate::common;
use common::*;
use intentplane::gateway::{Gateway, GatewayError, Outcome, Stage};
use intentplane::store::Store;
use intentplane::store::memory::MemoryStore;
use serde_json::json;
use std::sync::Arc;

/// The test world with `enforce` appended to its world file.
fn world_with(enforce: &str) -> TestWorld {
    let w = TestWorld::new();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str(enforce);
    std::fs::write(&w.world_path, text).unwrap();
    w
}

fn would_be(d: &intentplane::gateway::Decision) -> (Outcome, Stage) {
    assert_eq!(d.decision, Outcome::Shadow, "{d:#?}");
    let w = d
        .would_be
        .as_ref()
        .expect("a shadow decision says what it would be");
    (w.decision, w.stage)
}

#[test]
fn a_tenant_in_shadow_is_answered_with_what_would_have_been_decided() {
    let w = world_with("[enforce.tenants]\nemma = false\n");
    let gw = w.gateway();
    let m = w.emma();
    // an attacker's IBAN: would be a DENY at provenance
    let d = decide(&gw, transfer(ATTACKER_IBAN, json!("10.00")), &m);
    assert_eq!(would_be(&d), (Outcome::Deny, Stage::Provenance));
    assert!(
        d.reason.as_deref().unwrap_or("").contains("payee_iban"),
        "{d:#?}"
    );
    // a large transfer: would be PENDING at level 1, and nothing waits
    let d = decide(&gw, transfer(LANDLORD, json!("1500.00")), &m);
    assert_eq!(would_be(&d), (Outcome::Pending, Stage::Approval));
    assert_eq!(d.would_be.as_ref().unwrap().level, Some(1));
    let which = intentplane::gateway::approving::Which {
        tenants: &intentplane::gateway::Tenants::All,
        all: true,
        for_whom: None,
    };
    assert!(gw.pending_listing(&which).unwrap().is_empty());
    // a payment to her landlord: would be an ALLOW, not executed
    let d = decide(&gw, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(would_be(&d), (Outcome::Allow, Stage::Execution));
    assert_eq!(d.result, Some(json!({"shadow": "not executed"})));
    // every receipt says so, and the store verifies
    let snap = gw.store().snapshot().unwrap();
    let bodies: Vec<_> = snap.records().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 3);
    for b in &bodies {
        assert_eq!(b["decision"], "SHADOW", "{b:#}");
        assert!(b["would_be"]["decision"].is_string(), "{b:#}");
    }
    assert_eq!(
        bodies[2]["would_be"],
        json!({"decision": "ALLOW", "stage": "execution", "level": 0, "reason": null})
    );
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(3));
}

#[test]
fn shadow_keeps_its_own_budget_and_executions_and_enforcement_starts_clean() {
    let w = world_with("[enforce.tenants]\nemma = false\n");
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let shadow = w.gateway_with(store.clone());
    let m = w.emma();
    // 2,000.00 of budget: the third 700.00 would be over it, in shadow
    for amount in ["700.00", "700.01"] {
        let d = decide(&shadow, transfer(LANDLORD, json!(amount)), &m);
        assert_eq!(would_be(&d), (Outcome::Allow, Stage::Execution));
    }
    let d = decide(&shadow, transfer(LANDLORD, json!("700.02")), &m);
    assert_eq!(would_be(&d), (Outcome::Deny, Stage::Budget));
    // the same operation again: would be answered from the (shadow) record
    let again = decide(&shadow, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(would_be(&again), (Outcome::Allow, Stage::Execution));
    assert!(again.replayed, "{again:#?}");
    // enforcement on, same store: nothing of the shadow decisions counts
    let enforced = Gateway::new(&w.bundle, enforced_world(&w), store.clone()).unwrap();
    let d = decide(&enforced, transfer(LANDLORD, json!("700.00")), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert!(
        !d.replayed,
        "executed now, not answered from shadow: {d:#?}"
    );
    assert_ne!(d.result, Some(json!({"shadow": "not executed"})));
    let d = decide(&enforced, transfer(LANDLORD, json!("1000.00")), &m);
    assert_eq!(
        d.decision,
        Outcome::Allow,
        "the enforced budget is whole: {d:#?}"
    );
    // shadow and enforced records both accounted for
    let snap = store.snapshot().unwrap();
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(6));
}

#[test]
fn a_mandate_that_does_not_verify_is_denied_even_for_a_tenant_in_shadow() {
    let w = world_with("[enforce.tenants]\nemma = false\n");
    let gw = w.gateway();
    let mut m = w.emma();
    m["mandate"]["budget"]["amount"] = json!(999_999_999);
    let d = decide(&gw, transfer(ATTACKER_IBAN, json!("10.00")), &m);
    assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
    assert_eq!(d.stage, Stage::Authn);
    assert!(d.would_be.is_none());
    // and a proposal with no mandate at all
    let d = gw
        .decide(&intentplane::gateway::Input {
            proposal: transfer(ATTACKER_IBAN, json!("10.00")),
            mandate: None,
            approvals: vec![],
            malformed: None,
        })
        .unwrap();
    assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
}

#[test]
fn a_pack_in_shadow_covers_every_tenant_of_its_actions_only() {
    let w = world_with("[enforce.packs]\nbank = false\nap = true\n");
    let gw = w.gateway();
    let d = decide(&gw, transfer(ATTACKER_IBAN, json!("10.00")), &w.emma());
    assert_eq!(would_be(&d), (Outcome::Deny, Stage::Provenance));
    // an ap action is enforced
    let m = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write"],
    ));
    let pay = json!({"action": "invoice.pay", "args": {
        "invoice_id": "INV-1001", "payee_iban": ATTACKER_IBAN, "amount": "4200.00", "currency": "EUR"}});
    assert_deny(&decide(&gw, pay, &m), "provenance", "payee_iban");
}

#[test]
fn a_pack_marked_shadow_never_refuses_to_start_in_shadow() {
    // the bank pack, marked `shadow never`
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    copy_dir(&root().join("packs/bank"), &bank);
    let text = std::fs::read_to_string(bank.join("pack.ipc")).unwrap();
    let marked = text.replacen(
        "\"Retail banking: payments from the user's own account\"",
        "\"Retail banking: payments from the user's own account\" shadow never",
        1,
    );
    assert_ne!(marked, text);
    std::fs::write(bank.join("pack.ipc"), marked).unwrap();
    let w = TestWorld::with_pack_dirs(&[bank]);
    assert!(w.bundle.packs[0].shadow_never);
    let start = |enforce: &str| {
        let mut text = std::fs::read_to_string(&w.world_path).unwrap();
        text.push_str(enforce);
        let path = w.dir.path().join("shadow-world.toml");
        std::fs::write(&path, text).unwrap();
        let world = intentplane::gateway::world::World::load(&path, &w.bundle.table).unwrap();
        Gateway::new(&w.bundle, world, Arc::new(MemoryStore::new()))
    };
    for enforce in [
        "[enforce.packs]\nbank = false\n",
        "[enforce.tenants]\nemma = false\n",
    ] {
        match start(enforce) {
            Err(e @ GatewayError::ShadowForbidden { .. }) => {
                assert!(e.to_string().contains("`bank`"), "{e}")
            }
            Err(e) => panic!("{enforce}: another error: {e}"),
            Ok(_) => panic!("{enforce}: started in shadow"),
        }
    }
    // enforced, it starts
    assert!(start("[enforce.packs]\nbank = true\n").is_ok());
}

#[test]
fn an_enforce_table_naming_a_pack_not_in_the_bundle_is_refused() {
    let w = world_with("[enforce.packs]\nbnak = false\n");
    let Err(e) = intentplane::gateway::world::World::load(&w.world_path, &w.bundle.table) else {
        panic!("a world naming a pack not in the bundle loads");
    };
    assert!(e.to_string().contains("`bnak`"), "{e}");
}

/// The test world's world file without its `[enforce]` tables.
fn enforced_world(w: &TestWorld) -> intentplane::gateway::world::World {
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let cut = text.find("[enforce").expect("an enforce table");
    let path = w.dir.path().join("enforced-world.toml");
    std::fs::write(&path, &text[..cut]).unwrap();
    intentplane::gateway::world::World::load(&path, &w.bundle.table).unwrap()
}

#[test]
fn ipc_run_says_shadow_at_start_and_in_every_answer_and_the_report_counts_it() {
    let w = world_with("[enforce.tenants]\nemma = false\n");
    let mpath = w.dir.path().join("emma.json");
    std::fs::write(&mpath, w.emma().to_string()).unwrap();
    let input = w.dir.path().join("in.jsonl");
    let lines = [
        transfer(ATTACKER_IBAN, json!("10.00")),
        transfer(ATTACKER_IBAN, json!("20.00")),
        transfer(LANDLORD, json!("1500.00")),
        transfer(LANDLORD, json!("700.00")),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let db = w.dir.path().join("s.db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["run", "--bundle", &path_str(&w.bundle_path)])
        .args(["--world", &path_str(&w.world_path)])
        .args(["--store", &path_str(&db), "--mandate", &path_str(&mpath)])
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("SHADOW MODE for tenants `emma`"),
        "{stderr}"
    );
    let ds: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(&str, &str)> = ds
        .iter()
        .map(|d| {
            (
                d["decision"].as_str().unwrap(),
                d["would_be"]["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("SHADOW", "DENY"),
            ("SHADOW", "DENY"),
            ("SHADOW", "PENDING"),
            ("SHADOW", "ALLOW")
        ]
    );
    let report = |format: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(["receipts", "report", &path_str(&db), "--format", format])
            .output()
            .unwrap()
    };
    let out = report("json");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["decisions"]["shadow"],
        json!({"ALLOW": 1, "DENY": 2, "PENDING": 1})
    );
    assert_eq!(v["decisions"]["enforced"], json!({}));
    let denied: Vec<&serde_json::Value> = v["denied_or_asked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["decision"] == "DENY")
        .collect();
    assert_eq!(denied.len(), 1, "{v:#}");
    assert_eq!(
        (
            &denied[0]["count"],
            &denied[0]["stage"],
            &denied[0]["action"]
        ),
        (&json!(2), &json!("provenance"), &json!("payment.transfer"))
    );
    let human = String::from_utf8(report("human").stdout).unwrap();
    assert!(
        human.contains("4 decisions in shadow, would be: 1 ALLOW, 2 DENY, 1 PENDING"),
        "{human}"
    );
    // the chain, shadow receipts included, verifies
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["receipts", "verify", &path_str(&db)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
