//! Issue #37: one shard failing in a batch that spans several. The other
//! shards' decisions are committed beside it and must be answered, each in
//! its place, never decided again (a second receipt) nor hidden; only the
//! failing shard's inputs get the error: `Gateway::decide_each`, `ipc run`
//! (`cli::run::flush`) and `ipc serve --stdio` (`serve_lines`).

use crate::common;
use common::*;
use intentplane::gateway::shards::admin;
use intentplane::gateway::world::ShardMap;
use intentplane::gateway::{Ask, Gateway, Input};
use intentplane::store::{self, Store, StoreError, TxFn};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A store that fails every transaction once `down` is set: its database
/// gone (nothing decided on it).
struct Breakable {
    inner: Arc<dyn Store>,
    down: Arc<AtomicBool>,
}

impl Breakable {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Open {
                path: "b.db".into(),
                reason: "the shard database is down".into(),
            })
        } else {
            Ok(())
        }
    }
}

impl Store for Breakable {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.check()?;
        self.inner.transaction(f)
    }
    fn transaction_linked(
        &self,
        f: &mut TxFn<'_>,
    ) -> Result<(Value, Vec<store::Relink>), StoreError> {
        self.check()?;
        self.inner.transaction_linked(f)
    }
    common::counting::reads_from_inner!();
}

struct World2 {
    w: TestWorld,
    gw: Gateway,
    down: Arc<AtomicBool>,
    emma: Value,
    noah: Value,
}

/// emma on a.db, noah on b.db (which `down` breaks), placed.
fn two_shards() -> World2 {
    let w = TestWorld::new();
    let map = ShardMap {
        tenants: [("emma", "a.db"), ("noah", "b.db")]
            .iter()
            .map(|(t, f)| (t.to_string(), w.dir.path().join(f)))
            .collect(),
        default: None,
    };
    let down = Arc::new(AtomicBool::new(false));
    let d = down.clone();
    let open = move |p: &Path| -> Result<Arc<dyn Store>, StoreError> {
        let inner = store::open(p, true)?;
        if p.ends_with("b.db") {
            Ok(Arc::new(Breakable {
                inner,
                down: d.clone(),
            }))
        } else {
            Ok(inner)
        }
    };
    let shards = admin::open_all(&map, &open).unwrap();
    admin::place(&map, &shards, intentplane::gateway::testkit::now()).unwrap();
    let mut world = w.world();
    world.shards = Some(map);
    let gw = Gateway::sharded(&w.bundle, world, &open).unwrap();
    let emma = w.mandate(MandateSpec::bank("emma"));
    let noah = w.mandate(MandateSpec::bank("noah"));
    World2 {
        w,
        gw,
        down,
        emma,
        noah,
    }
}

/// emma, noah, emma, noah, emma: distinct small transfers.
fn mixed(t: &World2) -> Vec<Input> {
    (0..5)
        .map(|i| {
            let (who, m) = if i % 2 == 0 {
                ("emma", &t.emma)
            } else {
                ("noah", &t.noah)
            };
            input(transfer_of(who, 100 + i), m, vec![])
        })
        .collect()
}

fn emmas_decisions_on_a(t: &World2) -> usize {
    decision_owners(&t.w.dir.path().join("a.db")).len()
}

#[test]
fn decide_each_answers_the_shards_that_committed_and_errs_the_failing_ones() {
    let t = two_shards();
    t.down.store(true, Ordering::SeqCst);
    let inputs = mixed(&t);
    let each = t.gw.decide_each(Ask::batch(&inputs));
    assert_eq!(each.len(), 5);
    for (i, e) in each.iter().enumerate() {
        match (i % 2, e) {
            (0, Some(Ok(d))) => assert_eq!(d.decision.name(), "ALLOW", "{d:?}"),
            (1, Some(Err(e))) => assert!(e.to_string().contains("down"), "{e}"),
            (_, other) => panic!("input {i}: {other:?}"),
        }
    }
    assert_eq!(emmas_decisions_on_a(&t), 3);
}

#[test]
fn ipc_run_prints_every_committed_decision_in_its_place_and_fails() {
    let t = two_shards();
    t.down.store(true, Ordering::SeqCst);
    let mut batch = mixed(&t);
    let mut out = vec![];
    let r = intentplane::cli::run::flush(&t.gw, &mut batch, &mut out);
    assert!(r.is_err(), "a shard failed: exit code 1");
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    for (i, l) in lines.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(l["decision"], "ALLOW", "{l}");
            assert!(l["receipt"]["seq"].is_u64(), "{l}");
        } else {
            assert_eq!(l["decision"], "DENY", "{l}");
            assert!(
                l.get("receipt").is_none(),
                "no receipt on a shard that is down: {l}"
            );
            assert!(l["reason"].as_str().unwrap().contains("not decided"), "{l}");
        }
    }
    assert_eq!(emmas_decisions_on_a(&t), 3);
}

#[test]
fn serve_stdio_answers_the_committed_shards_once_and_retries_only_the_failed_one() {
    let t = two_shards();
    t.down.store(true, Ordering::SeqCst);
    let text: String = mixed(&t)
        .iter()
        .map(|i| {
            format!(
                "{}\n",
                json!({"proposal": i.proposal, "mandate": i.mandate})
            )
        })
        .collect();
    let mut out = vec![];
    let code = intentplane::cli::serve::stdio::serve_lines(
        &t.gw,
        None,
        std::io::Cursor::new(text.into_bytes()),
        &mut out,
    );
    assert_eq!(code, 1, "a shard failed");
    let lines: Vec<Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 5, "{lines:#?}");
    for (i, l) in lines.iter().enumerate() {
        if i % 2 == 0 {
            assert_eq!(l["decision"], "ALLOW", "{l}");
            assert!(l.get("replayed").is_none(), "decided once, not again: {l}");
        } else {
            assert_eq!(l["decision"], "DENY", "{l}");
            assert!(l.get("receipt").is_none(), "{l}");
        }
    }
    // emma's three decisions, each once: no receipt of a second decision
    assert_eq!(emmas_decisions_on_a(&t), 3);
    // the shard back: noah's lines decide
    t.down.store(false, Ordering::SeqCst);
    let again = t.gw.decide_each(Ask::batch(&mixed(&t)[1..2]));
    assert!(matches!(&again[0], Some(Ok(d)) if d.decision.name() == "ALLOW"));
}
