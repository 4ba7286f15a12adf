//! Issue #37, item 3: moving a tenant between shards (`ipc shards move`).

use crate::common;
use common::*;
use intentplane::gateway::shards::moving::{self, MoveError, Moved, Step};
use intentplane::gateway::shards::{self, Standing, admin};
use intentplane::gateway::trusted::RegistryChange;
use intentplane::gateway::world::ShardMap;
use intentplane::gateway::{ChildRequest, Gateway, MandateToken, Outcome};
use intentplane::store::{self, Store};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;

const NEW_PAYEE: &str = "DE02 1203 0000 0000 2020 51";

pub(crate) fn open(p: &Path) -> Result<Arc<dyn Store>, store::StoreError> {
    store::open(p, true)
}

pub(crate) fn map(w: &TestWorld, tenants: &[(&str, &str)]) -> ShardMap {
    ShardMap {
        tenants: tenants
            .iter()
            .map(|(t, f)| (t.to_string(), w.dir.path().join(f)))
            .collect(),
        default: None,
    }
}

pub(crate) fn place(map: &ShardMap) {
    let shards = admin::open_all(map, &open).unwrap();
    admin::place(map, &shards, now()).unwrap();
}

pub(crate) fn router(w: &TestWorld, map: &ShardMap) -> Gateway {
    let mut world = w.world();
    world.shards = Some(map.clone());
    Gateway::sharded(&w.bundle, world, &open).unwrap()
}

/// What a tenant did before its move, to check after it.
pub(crate) struct Workload {
    pub emma: Value,
    pub child: Value,
    /// A transfer executed before the move.
    pub executed: Value,
    /// A large transfer waiting for emma's approval, and its hash.
    pub pending: (Value, String),
    /// A large transfer emma declined.
    pub declined: Value,
}

/// emma and noah on `a.db`: emma spends, adds a payee, holds a child
/// mandate and decides with it, has one large transfer pending and
/// another declined; noah spends.
pub(crate) fn workload(w: &TestWorld, gw: &Gateway) -> Workload {
    let em = w.mandate(MandateSpec::bank("emma"));
    let executed = transfer_of("emma", 1200);
    assert_eq!(decide(gw, executed.clone(), &em).decision, Outcome::Allow);
    gw.change_registry(
        "bank",
        "beneficiaries",
        "emma",
        &RegistryChange::Add {
            value: json!(NEW_PAYEE),
        },
        "emma",
    )
    .unwrap();
    let parent: MandateToken = serde_json::from_value(em.clone()).unwrap();
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
    let child = serde_json::to_value(&child).unwrap();
    assert_eq!(
        decide(gw, transfer_of("emma", 1300), &child).decision,
        Outcome::Allow
    );
    let big = transfer_of("emma", 150_000);
    let d = decide(gw, big.clone(), &em);
    assert_eq!(d.decision, Outcome::Pending, "{d:?}");
    let op = d.operation_hash.unwrap();
    let declined = transfer_of("emma", 100_100);
    let d = decide(gw, declined.clone(), &em);
    assert_eq!(d.decision, Outcome::Pending, "{d:?}");
    let signed = serde_json::from_value(w.decline("emma", &d.operation_hash.unwrap())).unwrap();
    gw.decline_signed(&signed).unwrap();
    let no = w.mandate(MandateSpec::bank("noah"));
    assert_eq!(
        decide(gw, transfer_of("noah", 1200), &no).decision,
        Outcome::Allow
    );
    Workload {
        emma: em,
        child,
        executed,
        pending: (big, op),
        declined,
    }
}

pub(crate) fn shards_of(m: &ShardMap) -> Vec<admin::Opened> {
    admin::open_all(m, &open).unwrap()
}

pub(crate) fn opened(w: &TestWorld, f: &str) -> admin::Opened {
    let location = w.dir.path().join(f);
    admin::Opened {
        store: open(&location).unwrap(),
        location,
    }
}

fn move_emma(
    w: &TestWorld,
    m: &ShardMap,
    step: &mut dyn FnMut(Step) -> Result<(), String>,
) -> Result<Moved, MoveError> {
    moving::move_tenant(m, &shards_of(m), "emma", &opened(w, "b.db"), now(), step)
}

fn no_stop(_: Step) -> Result<(), String> {
    Ok(())
}

pub(crate) fn check_clean(m: &ShardMap) {
    for r in admin::check(m, &shards_of(m)) {
        assert!(r.problems.is_empty(), "{r:?}");
    }
}

/// What emma's shard `f` records of her: where she stands.
pub(crate) fn standing_on(w: &TestWorld, f: &str) -> Standing {
    let s = store::open(&w.dir.path().join(f), false).unwrap();
    let mut out = Standing::Absent;
    s.read_only(&mut |tx| {
        out = shards::standing(tx, "emma")?;
        Ok(Value::Null)
    })
    .unwrap();
    out
}

#[test]
fn a_moved_tenant_is_decided_on_its_new_shard_with_everything_it_had() {
    let w = TestWorld::new();
    let before = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&before);
    let gw = router(&w, &before);
    let wl = workload(&w, &gw);
    let a_head = store::open(&w.dir.path().join("a.db"), false)
        .unwrap()
        .head()
        .unwrap()
        .unwrap();
    let moved = move_emma(&w, &before, &mut no_stop).unwrap();
    assert!(moved.rows > 5, "{moved:?}");
    // the first receipt of the move on b.db names a.db's last one (the fence)
    assert_eq!(moved.from_receipt.0, a_head.0 + 1);
    let b = store::open(&w.dir.path().join("b.db"), false).unwrap();
    let first = b
        .receipts()
        .unwrap()
        .into_iter()
        .find(|r| r.body["change"] == "moved-in")
        .unwrap();
    assert_eq!(first.body["from_hash"], json!(moved.from_receipt.1));
    let a_fence = store::open(&w.dir.path().join("a.db"), false)
        .unwrap()
        .receipts()
        .unwrap()
        .into_iter()
        .find(|r| r.body["change"] == "moving")
        .unwrap();
    assert_eq!(a_fence.hash, moved.from_receipt.1);
    assert!(matches!(standing_on(&w, "a.db"), Standing::Moved { .. }));
    assert_eq!(standing_on(&w, "b.db"), Standing::Held);

    // a stale router (map still sending emma to a.db) is denied there
    let d = decide(&gw, transfer_of("emma", 100), &wl.emma);
    assert_deny(&d, "authn", "moved off this shard");
    // and refuses to start, naming the new store
    let mut world = w.world();
    world.shards = Some(before.clone());
    let e = Gateway::sharded(&w.bundle, world, &open).err().unwrap();
    assert!(e.to_string().contains("b.db"), "{e}");

    // the map updated: emma decided on b.db with all she had
    let after = map(&w, &[("emma", "b.db"), ("noah", "a.db")]);
    let gw = router(&w, &after);
    let again = decide(&gw, wl.executed.clone(), &wl.emma);
    assert_eq!(again.decision, Outcome::Allow, "{again:?}");
    assert!(again.replayed, "answered from the store: {again:?}");
    let spent = |id: &str| {
        b.transaction(&mut |tx| Ok(json!(tx.spent(id)?.amount)))
            .unwrap()
    };
    let emma_id = wl.emma["mandate"]["id"].as_str().unwrap().to_string();
    assert_eq!(spent(&emma_id), json!(2500), "the duplicate spent nothing");
    // the pending operation, approved on the new shard, executes there
    let signed = serde_json::from_value(w.approve("emma", &wl.pending.1)).unwrap();
    gw.submit_approval(&signed).unwrap();
    let d = decide(&gw, wl.pending.0.clone(), &wl.emma);
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    assert_eq!(spent(&emma_id), json!(152_500));
    // the declined one stays declined
    let d = decide(&gw, wl.declined.clone(), &wl.emma);
    assert_eq!(d.decision.name(), "DENY", "{d:?}");
    // the budget moved: 1,525.00 of 2,000.00 spent, 4.80 more is over
    let d = decide(&gw, transfer_of("emma", 48_000), &wl.emma);
    assert_deny(&d, "budget", "over the mandate's budget");
    // the payee she added is trusted on the new shard
    let d = decide(
        &gw,
        transfer("DE02 1203 0000 0000 2020 51", json!("5.00")),
        &wl.emma,
    );
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    // the child mandate is held there and decides, its budget with it
    assert!(
        gw.mandate_row(wl.child["mandate"]["id"].as_str().unwrap())
            .unwrap()
            .is_some()
    );
    let d = decide(&gw, transfer_of("emma", 1400), &wl.child);
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    let d = decide(&gw, transfer_of("emma", 2400), &wl.child);
    assert_deny(&d, "budget", "over the mandate's budget");
    // noah stays on a.db, decided as before
    let no = w.mandate(MandateSpec::bank("noah"));
    assert_eq!(
        decide(&gw, transfer_of("noah", 1500), &no).decision,
        Outcome::Allow
    );
    check_clean(&after);
    // nothing of emma decided on a.db after the fence
    let fence_seq = moved.from_receipt.0;
    for r in store::open(&w.dir.path().join("a.db"), false)
        .unwrap()
        .receipts()
        .unwrap()
    {
        if r.seq > fence_seq && r.body["mandate"]["owner"] == "emma" {
            assert_eq!(r.body["decision"], "DENY", "{}", r.body);
        }
    }
}

#[test]
fn a_move_that_fails_half_way_leaves_the_tenant_decidable_on_its_shard() {
    for at in [Step::Fence, Step::Copy] {
        let w = TestWorld::new();
        let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
        place(&m);
        let gw = router(&w, &m);
        let wl = workload(&w, &gw);
        let e = move_emma(&w, &m, &mut |s| {
            if s == at {
                Err("injected".into())
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        assert_eq!(standing_on(&w, "a.db"), Standing::Held, "{at:?}");
        assert_eq!(standing_on(&w, "b.db"), Standing::Absent);
        assert_eq!(
            decide(&gw, transfer_of("emma", 100), &wl.emma).decision,
            Outcome::Allow
        );
        check_clean(&m);
    }
}

#[test]
fn a_failure_after_the_commit_is_finished_by_the_next_move() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let gw = router(&w, &m);
    let wl = workload(&w, &gw);
    let e = move_emma(&w, &m, &mut |s| {
        if s == Step::Commit {
            Err("injected".into())
        } else {
            Ok(())
        }
    })
    .unwrap_err();
    assert!(e.to_string().contains("injected"), "{e}");
    // fenced on a.db, held on b.db: decided nowhere until the move ends
    assert!(matches!(standing_on(&w, "a.db"), Standing::Moving { .. }));
    assert_deny(
        &decide(&gw, transfer_of("emma", 100), &wl.emma),
        "authn",
        "being moved",
    );
    let done = move_emma(&w, &m, &mut no_stop).unwrap();
    assert_eq!(done.recovered, Some(moving::Recovered::Finished));
    assert!(matches!(standing_on(&w, "a.db"), Standing::Moved { .. }));
    check_clean(&map(&w, &[("emma", "b.db"), ("noah", "a.db")]));
}

#[test]
fn a_row_no_rule_attributes_refuses_the_move() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let a = store::open(&w.dir.path().join("a.db"), false).unwrap();
    a.transaction(&mut |tx| {
        tx.state_put("some.new.kind", "k1", &json!(1))?;
        Ok(Value::Null)
    })
    .unwrap();
    let e = move_emma(&w, &m, &mut no_stop).unwrap_err();
    assert_eq!(
        miette::Diagnostic::code(&e).unwrap().to_string(),
        "ipc::shards::unclassified"
    );
    assert!(e.to_string().contains("some.new.kind"), "{e}");
    assert_eq!(standing_on(&w, "a.db"), Standing::Held);
}

/// The same move between two PostgreSQL shards (schemas of one server).
#[cfg(feature = "postgres")]
#[test]
fn a_tenant_moves_between_postgresql_shards() {
    let (Some(a), Some(b)) = (common::pg::fresh(), common::pg::fresh()) else {
        return;
    };
    let w = TestWorld::new();
    let (la, lb) = (
        std::path::PathBuf::from(&a.url),
        std::path::PathBuf::from(&b.url),
    );
    let sharded = |emma: &std::path::PathBuf| ShardMap {
        tenants: [
            ("emma".to_string(), emma.clone()),
            ("noah".into(), la.clone()),
        ]
        .into(),
        default: None,
    };
    let before = sharded(&la);
    place(&before);
    let wl = workload(&w, &router(&w, &before));
    let to = admin::Opened {
        store: open(&lb).unwrap(),
        location: lb.clone(),
    };
    let moved = moving::move_tenant(
        &before,
        &shards_of(&before),
        "emma",
        &to,
        now(),
        &mut no_stop,
    )
    .unwrap();
    assert!(moved.rows > 5, "{moved:?}");
    let after = sharded(&lb);
    let gw = router(&w, &after);
    assert_eq!(
        decide(&gw, wl.executed.clone(), &wl.emma).decision,
        Outcome::Allow
    );
    let signed = serde_json::from_value(w.approve("emma", &wl.pending.1)).unwrap();
    gw.submit_approval(&signed).unwrap();
    assert_eq!(
        decide(&gw, wl.pending.0.clone(), &wl.emma).decision,
        Outcome::Allow
    );
    let d = decide(&gw, transfer_of("emma", 48_000), &wl.emma);
    assert_deny(&d, "budget", "over the mandate's budget");
    check_clean(&after);
}

/// While the move is under way (fenced), the trusted side changes nothing
/// of the tenant on the old shard either: a registry change and an
/// approval are refused, so none is left behind.
#[test]
fn the_trusted_side_is_fenced_too() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let gw = router(&w, &m);
    let wl = workload(&w, &gw);
    let mut checked = false;
    move_emma(&w, &m, &mut |s| {
        if s == Step::Fence {
            let e = gw
                .change_registry(
                    "bank",
                    "beneficiaries",
                    "emma",
                    &RegistryChange::Add {
                        value: json!(SUPPLIER),
                    },
                    "emma",
                )
                .unwrap_err();
            assert!(e.to_string().contains("being moved"), "{e}");
            let signed = serde_json::from_value(w.approve("emma", &wl.pending.1)).unwrap();
            let e = gw.submit_approval(&signed).unwrap_err();
            assert!(e.to_string().contains("being moved"), "{e}");
            // nor a child mandate recorded, nor one revoked
            let parent: MandateToken = serde_json::from_value(wl.emma.clone()).unwrap();
            let req = ChildRequest {
                scopes: vec!["payments.write".into()],
                budget: Some(1_000),
                calls: Some(1),
                expires_at: Some(parent.mandate.expires_at),
                ..Default::default()
            };
            let child = gw.issue_child(&parent, &req, w.key("emma")).unwrap();
            let e = gw.record_child(&child, "cli").unwrap_err();
            assert!(e.to_string().contains("being moved"), "{e}");
            let id = wl.child["mandate"]["id"].as_str().unwrap();
            let e = gw.revoke_child(id, "emma").unwrap_err();
            assert!(e.to_string().contains("being moved"), "{e}");
            checked = true;
        }
        Ok(())
    })
    .unwrap();
    assert!(checked);
}

/// The new shard's answer about a fence never changes: a move that
/// committed on b.db and was not finished on a.db, then the tenant moved
/// on from b.db to c.db, is still finished (not voided) when run again,
/// so the tenant is held on c.db alone.
#[test]
fn a_move_ended_after_the_tenant_moved_on_is_still_finished() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let _ = workload(&w, &router(&w, &m));
    let e = move_emma(&w, &m, &mut |s| {
        if s == Step::Commit {
            Err("injected".into())
        } else {
            Ok(())
        }
    });
    assert!(e.is_err());
    let on_b = map(&w, &[("emma", "b.db"), ("noah", "a.db")]);
    let c = opened(&w, "c.db");
    moving::move_tenant(&on_b, &shards_of(&on_b), "emma", &c, now(), &mut no_stop).unwrap();
    let done = move_emma(&w, &m, &mut no_stop).unwrap();
    assert_eq!(done.recovered, Some(moving::Recovered::Finished));
    assert!(matches!(standing_on(&w, "a.db"), Standing::Moved { .. }));
    assert!(matches!(standing_on(&w, "b.db"), Standing::Moved { .. }));
    assert_eq!(standing_on(&w, "c.db"), Standing::Held);
    check_clean(&map(&w, &[("emma", "c.db"), ("noah", "a.db")]));
}

/// A tenant the map does not name, decided on the default shard, moves to
/// a shard of its own.
#[test]
fn a_tenant_of_the_default_shard_moves_to_its_own() {
    let w = TestWorld::new();
    let mut m = map(&w, &[("emma", "a.db")]);
    m.default = Some(w.dir.path().join("rest.db"));
    place(&m);
    let gw = router(&w, &m);
    let no = w.mandate(MandateSpec::bank("noah"));
    assert_eq!(
        decide(&gw, transfer_of("noah", 1200), &no).decision,
        Outcome::Allow
    );
    let b = opened(&w, "b.db");
    let moved = moving::move_tenant(&m, &shards_of(&m), "noah", &b, now(), &mut no_stop).unwrap();
    assert!(moved.rows >= 2, "{moved:?}");
    // the stale instance sends noah to the default, which denies him
    assert_deny(
        &decide(&gw, transfer_of("noah", 1300), &no),
        "authn",
        "moved off this shard",
    );
    let mut after = map(&w, &[("emma", "a.db"), ("noah", "b.db")]);
    after.default = m.default.clone();
    let gw = router(&w, &after);
    let again = decide(&gw, transfer_of("noah", 1200), &no);
    assert!(again.replayed, "{again:?}");
    assert_eq!(
        decide(&gw, transfer_of("noah", 1300), &no).decision,
        Outcome::Allow
    );
    check_clean(&after);
}

/// A tenant decided in shadow mode before its move: its shadow budget and
/// executions (under `shadow:` keys) are its rows too, moved with it, not
/// rows no rule attributes.
#[test]
fn a_tenant_with_shadow_history_moves_with_its_shadow_rows() {
    let w = TestWorld::new();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let mut world = w.world();
    world.shards = Some(m.clone());
    world.shadow.tenants.insert("emma".into());
    let shadow = Gateway::sharded(&w.bundle, world, &open).unwrap();
    let em = w.mandate(MandateSpec::bank("emma"));
    let d = decide(&shadow, transfer_of("emma", 150_000), &em);
    assert_eq!(d.decision, Outcome::Shadow, "{d:?}");
    assert_eq!(d.would_be.unwrap().decision, Outcome::Pending);
    let d = decide(&shadow, transfer_of("emma", 1200), &em);
    assert_eq!(d.would_be.unwrap().decision, Outcome::Allow);
    drop(shadow);
    let moved = m.clone();
    let moved_map = ShardMap {
        tenants: [("emma", "b.db"), ("noah", "a.db")]
            .iter()
            .map(|(t, f)| (t.to_string(), w.dir.path().join(f)))
            .collect(),
        default: None,
    };
    move_emma(&w, &moved, &mut no_stop).unwrap();
    check_clean(&moved_map);
    // in shadow on the new shard: the shadow execution came along
    let mut world = w.world();
    world.shards = Some(moved_map.clone());
    world.shadow.tenants.insert("emma".into());
    let shadow = Gateway::sharded(&w.bundle, world, &open).unwrap();
    let again = decide(&shadow, transfer_of("emma", 1200), &em);
    assert!(
        again.replayed,
        "answered from the moved shadow record: {again:?}"
    );
    drop(shadow);
    // enforced there: nothing of shadow counts
    let gw = router(&w, &moved_map);
    let d = decide(&gw, transfer_of("emma", 1200), &em);
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    assert!(!d.replayed);
    let b = store::open(&w.dir.path().join("b.db"), false).unwrap();
    assert_eq!(
        intentplane::store::verify_store(&b.snapshot().unwrap(), None).map(|_| ()),
        Ok(())
    );
}

/// A tenant whose pending operation queued a notification (`[[notify]]`)
/// moves: the outbox's rows are the shard's, sent from there, never rows
/// no rule attributes (the move is not refused).
#[test]
fn a_tenant_with_queued_notifications_moves() {
    let w = TestWorld::new();
    let secret = w.dir.path().join("hook.secret");
    std::fs::write(&secret, "0123456789abcdef0123456789abcdef").unwrap();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text = format!(
        "approval_page = \"https://gw.example.com/approve\"\n{text}[[notify]]\nurl = \"https://hooks.example.com/ipc\"\nsecret_file = \"hook.secret\"\n"
    );
    let path = w.dir.path().join("notify-world.toml");
    std::fs::write(&path, text).unwrap();
    let m = map(&w, &[("emma", "a.db"), ("noah", "a.db")]);
    place(&m);
    let mut world = intentplane::gateway::world::World::load(&path, &w.bundle.table).unwrap();
    assert_eq!(world.notify.targets.len(), 1);
    world.shards = Some(m.clone());
    let gw = Gateway::sharded(&w.bundle, world, &open).unwrap();
    let em = w.mandate(MandateSpec::bank("emma"));
    let d = decide(&gw, transfer_of("emma", 150_000), &em);
    assert_eq!(d.decision, Outcome::Pending, "{d:?}");
    drop(gw);
    let queued = store::open(&w.dir.path().join("a.db"), false)
        .unwrap()
        .rows()
        .unwrap()
        .state
        .keys()
        .filter(|(ns, _)| ns == intentplane::gateway::notify::outbox::NS)
        .count();
    assert!(queued > 0, "the PENDING queued its notification");
    move_emma(&w, &m, &mut no_stop).unwrap();
    assert_eq!(standing_on(&w, "b.db"), Standing::Held);
    // the mandate token a replay verifies again came along
    let kept = store::open(&w.dir.path().join("b.db"), false)
        .unwrap()
        .rows()
        .unwrap()
        .state
        .keys()
        .filter(|(ns, _)| ns == intentplane::gateway::replay::KEPT_TOKENS)
        .count();
    assert_eq!(kept, 1, "emma's mandate token, kept for ipc replay");
}

/// An instance started before the move, whose map names both shards:
/// once emma moved from a.db to b.db, its next decision is denied on a.db
/// (a refusal in a.db's chain) and decided again on b.db, which holds her;
/// the decisions after go to b.db first. Nothing of hers is decided on
/// a.db after the fence, and the shards check clean.
#[test]
fn a_router_started_before_the_move_follows_the_tenant_to_a_shard_it_holds() {
    let w = TestWorld::new();
    let before = map(&w, &[("emma", "a.db"), ("noah", "b.db")]);
    place(&before);
    let gw = router(&w, &before);
    let wl = workload_on(&w, &gw);
    move_emma(&w, &before, &mut no_stop).unwrap();
    let a_decisions = |w: &TestWorld| decision_owners(&w.dir.path().join("a.db")).len();
    let on_a = a_decisions(&w);
    // the stale router: emma's transfer decided on b.db, not denied
    let d = decide(&gw, transfer_of("emma", 101), &wl);
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    assert_eq!(a_decisions(&w), on_a + 1, "one refusal on a.db");
    let b_owners = decision_owners(&w.dir.path().join("b.db"));
    assert_eq!(b_owners.iter().filter(|o| *o == "emma").count(), 1);
    // the next goes to b.db first: no second refusal on a.db
    let d = decide(&gw, transfer_of("emma", 102), &wl);
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    assert_eq!(a_decisions(&w), on_a + 1);
    // her budget came along: the one spent before the move still counts
    let after = map(&w, &[("emma", "b.db"), ("noah", "b.db")]);
    check_clean(&after);
}

/// emma spends 12.00 on a.db before her move.
fn workload_on(w: &TestWorld, gw: &Gateway) -> Value {
    let em = w.mandate(MandateSpec::bank("emma"));
    assert_eq!(
        decide(gw, transfer_of("emma", 1200), &em).decision,
        Outcome::Allow
    );
    em
}
