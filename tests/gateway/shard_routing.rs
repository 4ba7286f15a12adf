//! Issue #37, items 1 and 2: the product routes each tenant to its shard
//! (`[store.shards]` in the world), and a tenant is never decided on two
//! shards: every shard records the tenants it holds (`ipc shards init`),
//! a map that sends a tenant elsewhere refuses to start, and a decision on
//! a shard that does not hold its tenant (a stale instance) is a DENY.

use crate::common;
use common::*;
use intentplane::gateway::shards::admin;
use intentplane::gateway::world::ShardMap;
use intentplane::gateway::{Gateway, Input};
use intentplane::store::{self, Store};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

fn open(p: &Path) -> Result<Arc<dyn Store>, store::StoreError> {
    store::open(p, true)
}

fn map(w: &TestWorld, tenants: &[(&str, &str)], default: Option<&str>) -> ShardMap {
    ShardMap {
        tenants: tenants
            .iter()
            .map(|(t, f)| (t.to_string(), w.dir.path().join(f)))
            .collect(),
        default: default.map(|f| w.dir.path().join(f)),
    }
}

fn place(map: &ShardMap) {
    let shards = admin::open_all(map, &open).unwrap();
    admin::place(map, &shards, intentplane::gateway::testkit::now()).unwrap();
}

fn router(
    w: &TestWorld,
    map: &ShardMap,
) -> Result<Gateway, intentplane::gateway::shards::ShardError> {
    let mut world = w.world();
    world.shards = Some(map.clone());
    Gateway::sharded(&w.bundle, world, &open)
}

fn mandate_of(w: &TestWorld, tenant: &str) -> Value {
    w.mandate(MandateSpec::bank(tenant))
}

#[test]
fn each_tenant_is_decided_on_its_shard_in_one_batch() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "b.db")], None);
    place(&m);
    let gw = router(&w, &m).unwrap();
    let (em, no) = (mandate_of(&w, "emma"), mandate_of(&w, "noah"));
    let inputs: Vec<Input> = vec![
        input(transfer_of("emma", 1200), &em, vec![]),
        input(transfer_of("noah", 1200), &no, vec![]),
        input(transfer_of("emma", 1200), &em, vec![]),
    ];
    let ds = decide_batch(&gw, &inputs).unwrap();
    assert_eq!(ds.len(), 3);
    for d in &ds {
        assert_eq!(d.decision.name(), "ALLOW", "{d:?}");
    }
    assert_eq!(
        decision_owners(&w.dir.path().join("a.db")),
        ["emma", "emma"]
    );
    assert_eq!(decision_owners(&w.dir.path().join("b.db")), ["noah"]);
    // the answers are in input order: the second is noah's, on its shard
    assert_eq!(
        ds[1].receipt.as_ref().unwrap().seq,
        2,
        "b.db: placement 1, noah 2"
    );
    let reports = admin::check(&m, &admin::open_all(&m, &open).unwrap());
    for r in &reports {
        assert!(r.problems.is_empty(), "{r:?}");
    }
    assert_eq!(reports[0].holds, ["emma"]);
    assert_eq!(reports[1].holds, ["noah"]);
}

#[test]
fn a_map_sending_a_tenant_to_a_shard_that_does_not_hold_it_refuses_to_start() {
    let w = TestWorld::new();
    place(&map(&w, &[("emma", "a.db"), ("noah", "b.db")], None));
    // a typo, or a stale map: emma on b, noah on a
    let swapped = map(&w, &[("emma", "b.db"), ("noah", "a.db")], None);
    let e = router(&w, &swapped).err().expect("refused");
    assert_eq!(
        miette::Diagnostic::code(&e).unwrap().to_string(),
        "ipc::shards::not_held",
        "{e}"
    );
    // and placing it is refused: emma is held by a.db
    let shards = admin::open_all(&swapped, &open).unwrap();
    let e = admin::place(&swapped, &shards, intentplane::gateway::testkit::now()).unwrap_err();
    assert!(e.to_string().contains("already held by"), "{e}");
    // a new tenant mapped but never placed: refused too
    let unplaced = map(
        &w,
        &[("emma", "a.db"), ("noah", "b.db"), ("zoe", "b.db")],
        None,
    );
    assert!(router(&w, &unplaced).is_err());
}

#[test]
fn a_stale_instance_is_denied_on_a_shard_its_tenant_left() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "b.db")], None);
    place(&m);
    let gw = router(&w, &m).unwrap();
    let em = mandate_of(&w, "emma");
    assert_eq!(
        decide(&gw, transfer_of("emma", 1200), &em).decision.name(),
        "ALLOW"
    );
    // the tenant leaves a.db behind this instance's back
    let a = store::open(&w.dir.path().join("a.db"), false).unwrap();
    a.transaction(&mut |tx| {
        tx.state_put(
            intentplane::gateway::shards::NS,
            "tenant/emma",
            &json!({"status": "moved", "to": "b.db"}),
        )?;
        Ok(Value::Null)
    })
    .unwrap();
    let d = decide(&gw, transfer_of("emma", 1200), &em);
    assert_deny(&d, "authn", "moved off this shard");
    // the other tenant is decided as before
    let no = mandate_of(&w, "noah");
    assert_eq!(
        decide(&gw, transfer_of("noah", 1200), &no).decision.name(),
        "ALLOW"
    );
}

#[test]
fn a_tenant_without_a_shard_is_refused_with_a_receipt_on_the_first_shard() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db")], None);
    place(&m);
    let gw = router(&w, &m).unwrap();
    let no = mandate_of(&w, "noah");
    let d = decide(&gw, transfer_of("noah", 1200), &no);
    assert_deny(&d, "authn", "no shard holds tenant `noah`");
    assert_eq!(decision_owners(&w.dir.path().join("a.db")), ["noah"]);
    // a refusal, not a decision: the shard stays sound
    let reports = admin::check(&m, &admin::open_all(&m, &open).unwrap());
    assert!(reports[0].problems.is_empty(), "{:?}", reports[0]);
}

#[test]
fn the_default_shard_decides_every_tenant_the_map_does_not_name() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db")], Some("rest.db"));
    place(&m);
    let gw = router(&w, &m).unwrap();
    let no = mandate_of(&w, "noah");
    assert_eq!(
        decide(&gw, transfer_of("noah", 1200), &no).decision.name(),
        "ALLOW"
    );
    assert_eq!(decision_owners(&w.dir.path().join("rest.db")), ["noah"]);
    assert!(decision_owners(&w.dir.path().join("a.db")).is_empty());
    // a default never marked as one (a map pointing at another store): refused
    let other = map(&w, &[("emma", "a.db")], Some("other.db"));
    let e = router(&w, &other).err().expect("refused");
    assert_eq!(
        miette::Diagnostic::code(&e).unwrap().to_string(),
        "ipc::shards::not_default"
    );
}

#[test]
fn shards_check_finds_a_receipt_of_a_tenant_the_shard_does_not_hold() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "b.db")], None);
    place(&m);
    // noah decided on emma's shard by a gateway that does not route (a
    // deployment's own router gone wrong)
    let a = store::open(&w.dir.path().join("a.db"), false).unwrap();
    let plain = w.gateway_with(a);
    let no = mandate_of(&w, "noah");
    assert_eq!(
        decide(&plain, transfer_of("noah", 1200), &no)
            .decision
            .name(),
        "ALLOW"
    );
    let reports = admin::check(&m, &admin::open_all(&m, &open).unwrap());
    assert_eq!(reports[0].problems.len(), 1, "{:?}", reports[0]);
    assert!(
        reports[0].problems[0].contains("belongs to tenant `noah`"),
        "{:?}",
        reports[0].problems
    );
    assert!(reports[1].problems.is_empty());
}

/// The world file with `[store.shards]` appended.
fn sharded_world(w: &TestWorld, name: &str, shards: &[(&str, &str)]) -> PathBuf {
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str("[store.shards]\n");
    for (t, f) in shards {
        text.push_str(&format!("{t} = {f:?}\n"));
    }
    let p = w.dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn ipc(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn ipc_run_routes_by_tenant_and_ipc_shards_check_reports_each_head() {
    let w = TestWorld::new();
    let world = sharded_world(&w, "sharded.toml", &[("emma", "a.db"), ("noah", "b.db")]);
    let world_s = path_str(&world);
    let init = ipc(&["shards", "init", "--world", &world_s]);
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let text = String::from_utf8(init.stdout).unwrap();
    assert!(text.contains("placed   emma on"), "{text}");
    let lines: String = ["emma", "noah"]
        .iter()
        .map(|t| {
            json!({"proposal": transfer_of(t, 1200), "mandate": mandate_of(&w, t)}).to_string()
                + "\n"
        })
        .collect();
    let input = w.dir.path().join("in.jsonl");
    std::fs::write(&input, lines).unwrap();
    let bundle = path_str(&w.bundle_path);
    let run = ipc(&[
        "run",
        "--bundle",
        &bundle,
        "--world",
        &world_s,
        &path_str(&input),
    ]);
    let out = String::from_utf8(run.stdout).unwrap();
    assert!(
        run.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(out.matches("\"ALLOW\"").count(), 2, "{out}");
    assert_eq!(decision_owners(&w.dir.path().join("a.db")), ["emma"]);
    assert_eq!(decision_owners(&w.dir.path().join("b.db")), ["noah"]);
    let check = ipc(&["shards", "check", "--world", &world_s, "--format", "json"]);
    assert_eq!(check.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["shards"][0]["holds"], json!(["emma"]));
    assert_eq!(doc["shards"][0]["head"][0], 2, "{doc}");
    // one checkpoint set for both shards, each extending its own
    let key = intentplane::keys::SecretKey::generate().unwrap();
    key.write_pair(&w.dir.path().join("cp")).unwrap();
    let (k, pubk) = (w.dir.path().join("cp.key"), w.dir.path().join("cp.pub"));
    let set = w.dir.path().join("set.json");
    let cp = ipc(&[
        "receipts",
        "checkpoint",
        "--world",
        &world_s,
        "--key",
        &path_str(&k),
        "-o",
        &path_str(&set),
    ]);
    assert!(
        cp.status.success(),
        "{}",
        String::from_utf8_lossy(&cp.stderr)
    );
    let verify = |set: &Path| {
        ipc(&[
            "receipts",
            "verify",
            "--world",
            &world_s,
            "--checkpoint",
            &path_str(set),
            "--key",
            &path_str(&pubk),
            "--format",
            "json",
        ])
    };
    let v = verify(&set);
    let doc: Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(v.status.code(), Some(0), "{doc}");
    assert_eq!(doc["shards"][1]["checkpoint"]["seq"], 2, "{doc}");
    // each shard's checkpoint presented as the other's: both fail
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&set).unwrap()).unwrap();
    let shards = doc["shards"].as_object_mut().unwrap();
    let names: Vec<String> = shards.keys().cloned().collect();
    let (a, b) = (shards[&names[0]].clone(), shards[&names[1]].clone());
    shards.insert(names[0].clone(), b);
    shards.insert(names[1].clone(), a);
    let swapped_set = w.dir.path().join("swapped-set.json");
    std::fs::write(&swapped_set, doc.to_string()).unwrap();
    let v = verify(&swapped_set);
    assert_eq!(v.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&v.stdout).unwrap();
    assert_eq!(doc["shards"][0]["ok"], false, "{doc}");
    assert_eq!(doc["shards"][1]["ok"], false, "{doc}");
    // the map edited by hand to swap them: `ipc run` refuses to start,
    // `ipc shards check` names both shards
    let swapped = sharded_world(&w, "swapped.toml", &[("emma", "b.db"), ("noah", "a.db")]);
    let swapped_s = path_str(&swapped);
    let run = ipc(&[
        "run",
        "--bundle",
        &bundle,
        "--world",
        &swapped_s,
        &path_str(&input),
    ]);
    assert_eq!(
        run.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(err.contains("ipc::shards::not_held"), "{err}");
    let check = ipc(&["shards", "check", "--world", &swapped_s]);
    assert_eq!(check.status.code(), Some(1));
    let text = String::from_utf8(check.stdout).unwrap();
    assert_eq!(text.matches("does not hold it").count(), 2, "{text}");
    // `--store` beside a sharded world would put everyone on one store
    let run = ipc(&[
        "run", "--bundle", &bundle, "--world", &world_s, "--store", "x.db",
    ]);
    assert!(String::from_utf8_lossy(&run.stderr).contains("ipc::shards::store_given"));
}

/// The trusted side through the router: a pending operation of `acme` on
/// its shard is listed, approved by hash and executed there; another
/// shard never sees it.
#[test]
fn an_approval_by_hash_reaches_the_shard_of_its_operation() {
    use intentplane::gateway::approval::SignedApproval;
    use intentplane::gateway::approving::{PendingError, Which};
    use intentplane::gateway::{Outcome, Tenants};
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("acme", "b.db")], None);
    place(&m);
    let gw = router(&w, &m).unwrap();
    let clerk = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["vendors.write", "payments.write"],
    ));
    let p = json!({"action": "vendor.change_iban", "args": {
        "vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES91 2100 0418 4502 0005 1332"}});
    let d = decide(&gw, p.clone(), &clerk);
    assert_eq!(d.decision, Outcome::Pending);
    let op = d.operation_hash.unwrap();
    let listed = gw
        .pending_listing(&Which {
            tenants: &Tenants::All,
            all: false,
            for_whom: None,
        })
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].0.operation_hash, op);
    // shown to the approver from its shard, as the page and `ipc approve` do
    let shown = intentplane::gateway::render::show(&gw, &listed[0].0, now()).unwrap();
    assert!(shown.text().contains("V-STADTWERKE"), "{}", shown.text());
    let sign =
        |who: &str, hash: &str| SignedApproval::issue(who, hash, now() + 600, w.key(who)).unwrap();
    assert!(matches!(
        gw.submit_approval(&sign("cfo", "sha256:00")),
        Err(PendingError::Unknown { .. })
    ));
    gw.submit_approval(&sign("clerk", &op)).unwrap();
    gw.submit_approval(&sign("cfo", &op)).unwrap();
    assert_eq!(decide(&gw, p, &clerk).decision, Outcome::Allow);
    let kinds = |f: &str| -> Vec<String> {
        store::open(&w.dir.path().join(f), false)
            .unwrap()
            .receipts()
            .unwrap()
            .iter()
            .map(|r| {
                r.body["kind"]
                    .as_str()
                    .or(r.body["decision"].as_str())
                    .unwrap_or("-")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(
        kinds("b.db"),
        ["shard", "PENDING", "approval", "approval", "ALLOW"]
    );
    assert_eq!(kinds("a.db"), ["shard"]);
}

/// Child mandates through the router: drafted, recorded, listed, revoked
/// and decided on their parent's tenant's shard.
#[test]
fn a_child_mandate_lives_on_its_parents_shard() {
    use intentplane::gateway::{ChildRequest, MandateToken};
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "b.db")], None);
    place(&m);
    let gw = router(&w, &m).unwrap();
    let parent: MandateToken = serde_json::from_value(mandate_of(&w, "emma")).unwrap();
    let req = ChildRequest {
        claims: vec![("payee".into(), json!(LANDLORD))],
        scopes: vec!["payments.write".into()],
        budget: Some(5_000),
        calls: Some(3),
        expires_at: Some(parent.mandate.expires_at),
        ..Default::default()
    };
    let child = gw.issue_child(&parent, &req, w.key("emma")).unwrap();
    gw.record_child(&child, "cli").unwrap();
    let listed = gw.mandate_listing().unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(gw.mandate_row(&child.mandate.id).unwrap().is_some());
    let token = serde_json::to_value(&child).unwrap();
    assert_eq!(
        decide(&gw, transfer_of("emma", 1200), &token)
            .decision
            .name(),
        "ALLOW"
    );
    gw.revoke_child(&child.mandate.id, "emma").unwrap();
    let d = decide(&gw, transfer_of("emma", 1300), &token);
    assert_deny(&d, "authn", "revoked");
    // all of it on emma's shard: issued, decided, revoked, refused
    let kinds: Vec<String> = store::open(&w.dir.path().join("a.db"), false)
        .unwrap()
        .receipts()
        .unwrap()
        .iter()
        .map(|r| {
            r.body["change"]
                .as_str()
                .or(r.body["decision"].as_str())
                .unwrap_or("-")
                .into()
        })
        .collect();
    assert_eq!(kinds, ["held", "issued", "ALLOW", "revoked", "DENY"]);
    // a child naming another owner than its root is routed by its root:
    // refused on emma's shard, nothing on noah's
    let mut other = serde_json::to_value(&child).unwrap();
    other["mandate"]["owner"] = json!("noah");
    let d = decide(&gw, transfer_of("noah", 1200), &other);
    assert_eq!(d.decision.name(), "DENY", "{d:?}");
    assert!(d.receipt.is_some(), "{d:?}");
    // emma's decisions (issued, allowed, refused as revoked) and this one
    assert_eq!(decision_owners(&w.dir.path().join("a.db")).len(), 5);
    assert!(decision_owners(&w.dir.path().join("b.db")).is_empty());
    assert_eq!(
        decision_owners(&w.dir.path().join("b.db")),
        Vec::<String>::new()
    );
}

/// The default shard decides every tenant it has not seen placed
/// elsewhere: a stale map that lost a tenant's own entry sends it to the
/// default, which refuses it; and a tenant the default already decided
/// for cannot be placed afresh elsewhere (a second budget): that is a move.
#[test]
fn the_default_shard_refuses_a_tenant_placed_elsewhere_and_keeps_one_it_decided() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db")], Some("rest.db"));
    place(&m);
    let stale = map(&w, &[], Some("rest.db"));
    let gw = router(&w, &stale).unwrap();
    let em = mandate_of(&w, "emma");
    assert_deny(
        &decide(&gw, transfer_of("emma", 1200), &em),
        "authn",
        "moved off this shard",
    );
    // noah decided on the default, then mapped to a shard of his own:
    // refused, his budget is on the default
    let no = mandate_of(&w, "noah");
    assert_eq!(
        decide(&gw, transfer_of("noah", 1200), &no).decision.name(),
        "ALLOW"
    );
    let grown = map(&w, &[("emma", "a.db"), ("noah", "b.db")], Some("rest.db"));
    let shards = admin::open_all(&grown, &open).unwrap();
    let e = admin::place(&grown, &shards, intentplane::gateway::testkit::now()).unwrap_err();
    assert!(e.to_string().contains("`noah` is already held by"), "{e}");
    let reports = admin::check(&m, &admin::open_all(&m, &open).unwrap());
    for r in &reports {
        assert!(r.problems.is_empty(), "{r:?}");
    }
}
