//! `ipc replay` (issue #41, item 2): traffic recorded with one bundle,
//! decided again with another on a store of the replay's own; the
//! recorded store is only read.

use crate::common;
use common::cli::ipc;
use common::*;
use intentplane::bundle::Bundle;
use intentplane::gateway::replay::{Report, replay};
use intentplane::gateway::trusted::RegistryChange;
use intentplane::gateway::{Gateway, Input, Outcome};
use intentplane::store::recorded::open_read_only;
use intentplane::store::sqlite::SqliteStore;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The bank pack with `edit` applied to its text, built into a bundle
/// signed with the test world's bundle key.
fn variant(w: &TestWorld, name: &str, edit: impl Fn(&str) -> String) -> (Bundle, PathBuf) {
    let dir = w.dir.path().join(name).join("bank");
    copy_dir(&root().join("packs/bank"), &dir);
    let text = std::fs::read_to_string(dir.join("pack.ipc")).unwrap();
    let edited = edit(&text);
    assert_ne!(edited, text, "the variant changes the pack");
    std::fs::write(dir.join("pack.ipc"), edited).unwrap();
    let report = intentplane::compile::build(&[dir]);
    let mut bundle = report.bundle.clone().expect("the variant builds");
    let key = intentplane::keys::load_secret(&w.dir.path().join("bundle.key")).unwrap();
    bundle.sign(&key);
    let path = w.dir.path().join(format!("{name}.json"));
    bundle.write(&path).unwrap();
    (Bundle::load(&path, None).unwrap(), path)
}

/// A transfer's step-up threshold raised from 1,000.00 to 5,000.00.
fn higher_threshold(w: &TestWorld) -> (Bundle, PathBuf) {
    variant(w, "higher", |t| {
        t.replacen(
            "step_up   \"large transfer\"    when amount > 1_000.00",
            "step_up   \"large transfer\"    when amount > 5_000.00",
            1,
        )
    })
}

/// A transfer above 400.00 forbidden.
fn new_forbid(w: &TestWorld) -> (Bundle, PathBuf) {
    variant(w, "forbid", |t| {
        t.replacen(
            "  forbid    \"sanctioned payee\"  when sanctioned\n  step_up   \"large transfer\"",
            "  forbid    \"sanctioned payee\"  when sanctioned\n  forbid    \"small payments only\" when amount > 400.00\n  step_up   \"large transfer\"",
            1,
        )
    })
}

fn pay(amount: &str, subject: &str) -> Value {
    json!({"action": "payment.transfer", "args": {
        "from_account": "emma-checking", "amount": amount, "currency": "EUR",
        "subject": subject}})
}

fn to(iban: &str, amount: &str) -> Value {
    json!({"action": "payment.transfer", "args": {
        "from_account": "emma-checking", "payee_iban": iban, "amount": amount,
        "currency": "EUR"}})
}

fn with_landlord(p: Value) -> Value {
    let mut p = p;
    p["args"]["payee_iban"] = json!(LANDLORD);
    p
}

fn one(gw: &Gateway, input: Input) -> intentplane::gateway::Decision {
    gw.decide(&input).unwrap()
}

/// What the recorded store holds after the traffic below (bundle A, the
/// shipped bank pack):
/// - mandate `big` (10,000.00): 500.00 ALLOW; 1,500.00 PENDING; 2,000.00
///   PENDING, then ALLOW with emma's approval;
/// - mandate `small` (2,000.00): 900.00 ALLOW twice, then 900.00 DENY at
///   budget (the first two spent it);
/// - a payee emma adds: DENY (provenance) before, ALLOW after;
/// - a line that is not JSON and a proposal without a mandate: DENY.
fn record(w: &TestWorld, store: &Path) {
    let gw = w.gateway_with(Arc::new(SqliteStore::open(store).unwrap()));
    let mut big = MandateSpec::bank("emma");
    big.budget = 1_000_000;
    let big = w.mandate(big);
    let d = decide(&gw, with_landlord(pay("500.00", "a")), &big);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    let d = decide(&gw, with_landlord(pay("1500.00", "b")), &big);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    let c = with_landlord(pay("2000.00", "c"));
    let d = decide(&gw, c.clone(), &big);
    assert_eq!(d.decision, Outcome::Pending);
    let ok = w.approve("emma", d.operation_hash.as_deref().unwrap());
    let d = one(&gw, input(c, &big, vec![ok]));
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.approvers, vec!["emma".to_string()]);

    let mut small = MandateSpec::bank("emma");
    small.budget = 200_000;
    let small = w.mandate(small);
    for (i, want) in [Outcome::Allow, Outcome::Allow, Outcome::Deny]
        .into_iter()
        .enumerate()
    {
        let d = decide(&gw, with_landlord(pay("900.00", &format!("s{i}"))), &small);
        assert_eq!(d.decision, want, "{d:#?}");
    }
    assert_eq!(
        decide(&gw, with_landlord(pay("900.00", "s2")), &small).stage,
        intentplane::gateway::Stage::Budget
    );

    let d = decide(&gw, to(SUPPLIER, "98.70"), &big);
    assert_eq!(d.decision, Outcome::Deny);
    gw.change_registry(
        "bank",
        "beneficiaries",
        "emma",
        &RegistryChange::Add {
            value: json!(SUPPLIER),
        },
        "emma",
    )
    .unwrap();
    let d = decide(&gw, to(SUPPLIER, "98.70"), &big);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");

    let bad = Input {
        proposal: json!("{not json"),
        mandate: Some(big.clone()),
        approvals: vec![],
        malformed: Some("not json".into()),
    };
    assert_eq!(one(&gw, bad).decision, Outcome::Deny);
    let none = Input {
        proposal: with_landlord(pay("1.00", "n")),
        mandate: None,
        approvals: vec![],
        malformed: None,
    };
    assert_eq!(one(&gw, none).decision, Outcome::Deny);
}

/// Every byte of the store's files (the database, and a WAL or shared
/// memory file beside it).
fn files(store: &Path) -> Vec<(String, Vec<u8>)> {
    let dir = store.parent().unwrap();
    let name = store.file_name().unwrap().to_string_lossy().to_string();
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&name))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    out.sort();
    out
}

fn replayed(w: &TestWorld, store: &Path, bundle: &Bundle) -> Report {
    let recorded = open_read_only(store).unwrap();
    replay(bundle, &w.world(), recorded.as_ref()).unwrap()
}

fn setup() -> (TestWorld, PathBuf) {
    let w = TestWorld::with_packs(&["bank"]);
    let store = w.dir.path().join("recorded.db");
    record(&w, &store);
    (w, store)
}

fn count(r: &Report, action: &str, from: &str, to: &str) -> u64 {
    r.transitions
        .iter()
        .filter(|t| t.action.as_deref() == Some(action) && t.from.decision == from)
        .filter(|t| t.to.decision == to)
        .map(|t| t.count)
        .sum()
}

/// The same bundle decides every recorded proposal as it was decided:
/// approvals carried over (the ALLOW after emma's approval), budgets
/// rebuilt (the third 900.00 still over budget), the registry change
/// applied in its place (the new payee refused before it, paid after).
#[test]
fn the_same_bundle_changes_nothing() {
    let (w, store) = setup();
    let r = replayed(&w, &store, &w.bundle);
    assert_eq!(r.changed, 0, "{r:#?}");
    assert_eq!(r.newly_allowed, 0);
    assert_eq!(r.replayed, 10, "{r:#?}");
    assert_eq!(r.unchanged, 10);
    assert_eq!(r.registry_changes, 1);
    assert_eq!(r.decisions, 12);
    assert_eq!(
        r.not_replayable
            .get("the proposal was not kept (withheld: it may carry a secret)"),
        Some(&1)
    );
    assert_eq!(
        r.not_replayable
            .get("no mandate was verified (denied at authn)"),
        Some(&1)
    );
}

/// A threshold raised: what waited for approval is allowed now (newly
/// allowed, counted), the approved one needs no approval (a lower level);
/// the budget still refuses the third 900.00.
#[test]
fn a_higher_threshold_newly_allows_what_was_pending() {
    let (w, store) = setup();
    let (b, _) = higher_threshold(&w);
    let r = replayed(&w, &store, &b);
    assert_eq!(
        count(&r, "payment.transfer", "PENDING", "ALLOW"),
        2,
        "{r:#?}"
    );
    // the approved ALLOW: the operation executed already (its PENDING
    // now ALLOWs it), answered from the store, at level 0
    assert!(r.newly_allowed >= 2, "{r:#?}");
    assert!(
        r.transitions
            .iter()
            .all(|t| t.from.stage != "budget" && t.to.stage != "budget"),
        "the budget refusal stands: {r:#?}"
    );
    assert_eq!(count(&r, "payment.transfer", "DENY", "ALLOW"), 0);
}

/// A new forbid: what was allowed is refused at the policy stage, nothing
/// is newly allowed; the third 900.00, over budget in the record, is now
/// refused by the policy (the first two no longer spent anything: the
/// alternative history's budget).
#[test]
fn a_new_forbid_denies_what_was_allowed() {
    let (w, store) = setup();
    let (b, _) = new_forbid(&w);
    let r = replayed(&w, &store, &b);
    assert_eq!(r.newly_allowed, 0, "{r:#?}");
    // 500, 2000 (approved), 900, 900
    assert_eq!(count(&r, "payment.transfer", "ALLOW", "DENY"), 4, "{r:#?}");
    assert_eq!(count(&r, "payment.transfer", "PENDING", "DENY"), 2);
    let budget = r
        .transitions
        .iter()
        .find(|t| t.from.stage == "budget")
        .expect("the budget refusal moved");
    assert_eq!(
        (budget.to.decision.as_str(), budget.to.stage.as_str()),
        ("DENY", "policy")
    );
    assert!(r.transitions.iter().all(|t| t.to.stage == "policy"));
}

/// The recorded store is never written: its database file is byte for
/// byte the same after a replay, and its head too. (A read-only reader of
/// a WAL database leaves the empty `-wal` and the `-shm` index SQLite
/// makes for any reader; nothing is written into the WAL.)
#[test]
fn the_recorded_store_is_left_as_it_was() {
    let (w, store) = setup();
    let head = SqliteStore::open_existing(&store)
        .map(|s| intentplane::store::Store::head(&s).unwrap())
        .unwrap();
    let before = std::fs::read(&store).unwrap();
    let (b, _) = higher_threshold(&w);
    let r = replayed(&w, &store, &b);
    assert!(r.changed > 0);
    assert!(
        std::fs::read(&store).unwrap() == before,
        "the database file changed"
    );
    for (name, bytes) in files(&store) {
        if name.ends_with("-wal") {
            assert!(bytes.is_empty(), "the replay wrote into the WAL");
        }
    }
    let recorded = open_read_only(&store).unwrap();
    assert_eq!(recorded.head().unwrap(), head);
    // and the command, which reads the same way
    let (s, bp, wp) = (
        path_str(&store),
        path_str(&w.bundle_path),
        path_str(&w.world_path),
    );
    let out = ipc(
        &["replay", "--store", &s, "--bundle", &bp, "--world", &wp],
        "",
    );
    assert_eq!(out.status.code(), Some(0));
    assert!(
        std::fs::read(&store).unwrap() == before,
        "the database file changed"
    );
}

/// A token the store does not keep (a store recorded before tokens were
/// kept) is counted, never dropped.
#[test]
fn a_mandate_not_kept_is_counted_as_not_replayable() {
    let (w, store) = setup();
    let conn = rusqlite::Connection::open(&store).unwrap();
    conn.execute("DELETE FROM state WHERE ns = 'mandates.kept'", [])
        .unwrap();
    drop(conn);
    let r = replayed(&w, &store, &w.bundle);
    assert_eq!(r.replayed, 0, "{r:#?}");
    assert_eq!(
        r.not_replayable
            .get("the mandate was not kept (recorded before replay kept tokens)"),
        Some(&10)
    );
    assert_eq!(r.decisions, 12);
}

fn run(w: &TestWorld, store: &Path, bundle: &Path, json: bool) -> std::process::Output {
    let (s, b, wp) = (path_str(store), path_str(bundle), path_str(&w.world_path));
    let mut args = vec!["replay", "--store", &s, "--bundle", &b, "--world", &wp];
    if json {
        args.extend(["--format", "json"]);
    }
    ipc(&args, "")
}

/// The command: exit 0 when nothing is newly allowed, 1 when something
/// is (CI gates a pack change on it), 2 when it cannot run; JSON with
/// `--format json`.
#[test]
fn the_command_exits_1_when_anything_is_newly_allowed() {
    let (w, store) = setup();
    let out = run(&w, &store, &w.bundle_path, false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("0 changed, 0 newly allowed"), "{text}");

    let (_, higher) = higher_threshold(&w);
    let out = run(&w, &store, &higher, true);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert!(doc["newly_allowed"].as_u64().unwrap() >= 2, "{doc:#}");
    let human = run(&w, &store, &higher, false);
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("PENDING (level 1) -> ALLOW (level 0)"),
        "{text}"
    );
    assert!(text.contains("NEWLY ALLOWED"), "{text}");

    let (_, forbid) = new_forbid(&w);
    let out = run(&w, &store, &forbid, true);
    assert_eq!(out.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert!(doc["changed"].as_u64().unwrap() >= 6);

    let missing = w.dir.path().join("missing.db");
    let out = run(&w, &missing, &w.bundle_path, true);
    assert_eq!(out.status.code(), Some(2));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["code"], "ipc::store::open");
    assert!(!missing.exists(), "a missing store is never created");
}

/// A PostgreSQL store is replayed through read-only transactions: the
/// replay finds what an SQLite store gives it, and a write through a
/// store opened that way is refused by the server.
#[cfg(feature = "postgres")]
#[test]
fn a_postgresql_store_is_replayed_read_only() {
    use intentplane::store::Store;
    use intentplane::store::postgres::{PgOptions, PgStore};
    let Some(schema) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::with_packs(&["bank"]);
    let gw = w.gateway_with(Arc::new(
        PgStore::open_with(&schema.url, PgOptions::default(), true).unwrap(),
    ));
    let m = w.emma();
    assert_eq!(
        decide(&gw, to(LANDLORD, "500.00"), &m).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, to(LANDLORD, "1500.00"), &m).decision,
        Outcome::Pending
    );
    let head = gw.store().head().unwrap();
    drop(gw);
    let (b, _) = higher_threshold(&w);
    let recorded = open_read_only(Path::new(&schema.url)).unwrap();
    let r = replay(&b, &w.world(), recorded.as_ref()).unwrap();
    assert_eq!(
        (r.replayed, r.changed, r.newly_allowed),
        (2, 1, 1),
        "{r:#?}"
    );
    assert_eq!(recorded.head().unwrap(), head);
    let options = PgOptions {
        read_only: true,
        ..Default::default()
    };
    let ro = PgStore::open_with(&schema.url, options, false).unwrap();
    let write = ro.transaction(&mut |tx| {
        tx.revoke("m-x")?;
        Ok(Value::Null)
    });
    assert!(write.is_err(), "a read-only session wrote");
    let rw = PgStore::open_with(&schema.url, PgOptions::default(), false).unwrap();
    assert_eq!(rw.head().unwrap(), head);
}

/// A child mandate (signed by its parent's user, whose key the replay's
/// stand-ins replace) is verified with the world's keys and decided again
/// with its own budget; a revocation that left no receipt (`ipc token
/// revoke`) takes effect where the record shows it.
#[test]
fn a_child_and_a_revocation_are_replayed_in_place() {
    use intentplane::gateway::{ChildRequest, MandateToken};
    let w = TestWorld::with_packs(&["bank"]);
    let store = w.dir.path().join("recorded.db");
    let gw = w.gateway_with(Arc::new(SqliteStore::open(&store).unwrap()));
    let mut big = MandateSpec::bank("emma");
    big.budget = 1_000_000;
    let parent: MandateToken = serde_json::from_value(w.mandate(big)).unwrap();
    let req = ChildRequest {
        claims: vec![("payee".into(), json!(LANDLORD))],
        budget: Some(60_000),
        ..Default::default()
    };
    let child = gw.issue_child(&parent, &req, w.key("emma")).unwrap();
    let child = serde_json::to_value(&child).unwrap();
    let parent_v = serde_json::to_value(&parent).unwrap();
    let d = decide(&gw, to(LANDLORD, "500.00"), &child);
    assert_eq!(d.decision, Outcome::Allow, "{:?} {:?}", d.stage, d.reason);
    let d = decide(&gw, to(LANDLORD, "200.00"), &child);
    assert_eq!(d.stage, intentplane::gateway::Stage::Budget, "{d:#?}");
    assert_eq!(
        decide(&gw, to(LANDLORD, "10.00"), &parent_v).decision,
        Outcome::Allow
    );
    // revoked as `ipc token revoke` does: no receipt
    gw.store()
        .transaction(&mut |tx| {
            tx.revoke(&parent.mandate.id)?;
            Ok(Value::Null)
        })
        .unwrap();
    assert_deny(
        &decide(&gw, to(LANDLORD, "11.00"), &parent_v),
        "authn",
        "revoked",
    );
    assert_deny(
        &decide(&gw, to(LANDLORD, "12.00"), &child),
        "authn",
        "revoked",
    );
    drop(gw);
    let r = replayed(&w, &store, &w.bundle);
    assert_eq!((r.replayed, r.unchanged), (4, 4), "{r:#?}");
    assert_eq!(
        r.not_replayable
            .get("a child of a revoked parent: its id is not recorded"),
        Some(&1)
    );
    // a lower threshold: the child's transfers are its own, and the
    // revocation still refuses the parent's last one
    let lower = variant(&w, "lower", |t| {
        t.replacen(
            "step_up   \"large transfer\"    when amount > 1_000.00",
            "step_up   \"large transfer\"    when amount > 100.00",
            1,
        )
    })
    .0;
    let r = replayed(&w, &store, &lower);
    assert_eq!(
        count(&r, "payment.transfer", "ALLOW", "PENDING"),
        1,
        "{r:#?}"
    );
    assert_eq!(r.newly_allowed, 0);
    assert_eq!(r.changed, 2, "{r:#?}");
}

/// A token first refused before it could be kept (another tenant's
/// caller) is kept by the next decision that accepts it: the gateway
/// caches a token only once it is kept.
#[test]
fn a_token_refused_first_is_kept_when_accepted() {
    use intentplane::gateway::{Ask, Tenants};
    let w = TestWorld::with_packs(&["bank"]);
    let gw = w.gateway();
    let m = w.emma();
    let id = m["mandate"]["id"].as_str().unwrap().to_string();
    let noah = Tenants::Only(["noah".to_string()].into());
    let first = input(to(LANDLORD, "5.00"), &m, vec![]);
    let mut out = vec![];
    gw.decide_all(Ask::of(vec![(&first, &noah)]), &mut out)
        .unwrap();
    assert_deny(&out[0], "authn", "may act for");
    assert_eq!(
        decide(&gw, to(LANDLORD, "5.00"), &m).decision,
        Outcome::Allow
    );
    let mut kept = None;
    gw.store()
        .transaction(&mut |tx| {
            kept = tx.state_get("mandates.kept", &id)?;
            Ok(Value::Null)
        })
        .unwrap();
    assert_eq!(kept, Some(m.clone()));
}

/// Traffic recorded in shadow mode (`[enforce.tenants] emma = false`),
/// replayed with the same bundle and that same world: the replay enforces
/// (it answers what enforcing would have decided), and each recorded
/// SHADOW is compared by its `would_be`: nothing changes. A new forbid is
/// seen as it would be enforced.
#[test]
fn traffic_recorded_in_shadow_is_compared_by_what_it_would_have_been() {
    let w = TestWorld::with_packs(&["bank"]);
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str("[enforce.tenants]\nemma = false\n");
    let shadow_world = w.dir.path().join("shadow-world.toml");
    std::fs::write(&shadow_world, text).unwrap();
    let world = intentplane::gateway::world::World::load(&shadow_world, &w.bundle.table).unwrap();
    let store = w.dir.path().join("shadow.db");
    let gw = Gateway::new(
        &w.bundle,
        world.clone(),
        Arc::new(SqliteStore::open(&store).unwrap()),
    )
    .unwrap();
    let m = w.mandate(MandateSpec::bank("emma"));
    let mut seen = vec![];
    for p in [
        with_landlord(pay("500.00", "a")),
        with_landlord(pay("1500.00", "b")),
        to(SUPPLIER, "98.70"),
    ] {
        let d = decide(&gw, p, &m);
        assert_eq!(d.decision, Outcome::Shadow, "{d:#?}");
        seen.push(d.would_be.unwrap().decision);
    }
    assert_eq!(seen, [Outcome::Allow, Outcome::Pending, Outcome::Deny]);
    drop(gw);
    let recorded = open_read_only(&store).unwrap();
    let r = replay(&w.bundle, &world, recorded.as_ref()).unwrap();
    assert_eq!(
        (r.replayed, r.changed, r.newly_allowed),
        (3, 0, 0),
        "{r:#?}"
    );
    let (forbid, _) = new_forbid(&w);
    let r = replay(&forbid, &world, recorded.as_ref()).unwrap();
    assert!(r.changed > 0, "{r:#?}");
    assert!(
        r.transitions.iter().all(|t| t.to.decision != "SHADOW"),
        "{r:#?}"
    );
}
