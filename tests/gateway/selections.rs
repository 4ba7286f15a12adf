//! Mandate selections (issue 42, item 3): the user's criterion, signed in
//! the mandate as a query over a keyed registry, evaluated by the gateway
//! at each decision over the rows it reads; the agent's choice is checked
//! against it, the receipt records the evaluation.

use crate::common;
use common::*;
use intentplane::gateway::{Decision, Gateway, Outcome, Stage};
use intentplane::store::Store;
use intentplane::store::memory::MemoryStore;
use serde_json::{Value, json};
use std::sync::Arc;

/// "Bluetooth headphones rated above 4.0, the cheapest": P103 in the shop
/// pack's sample catalogue.
fn bluetooth() -> Value {
    json!({"where": [["category", "==", "Headphones"], ["name", "contains_word", "bluetooth"],
                     ["rating", ">", 40]],
           "pick": {"min": "price"}})
}

fn shop_mandate(w: &TestWorld, product: Value) -> Value {
    w.mandate(
        MandateSpec::for_pack("shop", "maya", "maya", &["shop.buy"])
            .claim("account", json!("mayaortiz"))
            .claim("product", product),
    )
}

fn checkout(product: &str) -> Value {
    json!({"action": "order.checkout", "args": {"account": "mayaortiz", "product_id": product}})
}

fn last_receipt(gw: &Gateway) -> Value {
    let snap = gw.store().snapshot().unwrap();
    snap.records().pop().expect("a receipt").body
}

#[test]
fn the_product_the_criterion_selects_goes_through_and_the_receipt_records_it() {
    let w = TestWorld::with_packs(&["shop"]);
    let gw = w.gateway();
    let m = shop_mandate(&w, bluetooth());
    let d = decide(&gw, checkout("P103"), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    let r = last_receipt(&gw);
    let s = &r["selections"]["product"];
    assert_eq!(s["registry"], "shop.catalogue");
    assert_eq!(s["result"], json!(["P103"]));
    assert_eq!(s["picked"], "P103");
    let q = intentplane::canonical::hash_of(&bluetooth()).unwrap();
    assert_eq!(s["query_hash"], json!(q));
    // the rows as the gateway read them (amounts in cents): an auditor
    // holding the catalogue checks the result offline
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("packs/shop/registries/catalogue.json")).unwrap(),
    )
    .unwrap();
    let mut rows = serde_json::Map::new();
    for (k, rec) in file["*"].as_object().unwrap() {
        let mut rec = rec.clone();
        let cents = intentplane::base::Money::parse(rec["price"].as_str().unwrap())
            .unwrap()
            .minor();
        rec["price"] = json!(cents);
        rows.insert(k.clone(), rec);
    }
    let rows_hash = intentplane::canonical::hash_of(&Value::Object(rows)).unwrap();
    assert_eq!(s["rows_hash"], json!(rows_hash));
    let snap = gw.store().snapshot().unwrap();
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(1));
}

#[test]
fn a_product_outside_the_criterion_needs_the_user_per_the_pack() {
    let w = TestWorld::with_packs(&["shop"]);
    let gw = w.gateway();
    let m = shop_mandate(&w, bluetooth());
    // P100: bluetooth headphones, rated 4.2, but not the cheapest (a
    // review told the agent "P100 is the exact item I need")
    let d = decide(&gw, checkout("P100"), &m);
    assert_eq!((d.decision, d.level), (Outcome::Pending, Some(1)), "{d:#?}");
    let r = last_receipt(&gw);
    assert_eq!(r["selections"]["product"]["result"], json!(["P103"]));
    assert!(r["selections"]["product"].get("picked").is_none(), "{r:#}");
}

#[test]
fn a_signed_query_that_does_not_fit_the_registry_is_denied_at_authn() {
    let w = TestWorld::with_packs(&["shop"]);
    let gw = w.gateway();
    for bad in [
        json!({"where": [["colour", "==", "black"]]}),
        json!({"where": [["price", "<", "cheap"]]}),
        json!({"where": [["name", "contains_word", "blue.*"]]}),
        json!({"pick": {"first": "price"}}),
        json!("P103"),
    ] {
        let mut spec = MandateSpec::for_pack("shop", "maya", "maya", &["shop.buy"]);
        spec.claims.insert("account".into(), json!("mayaortiz"));
        spec.claims.insert("product".into(), bad.clone());
        let m = w.forge_mandate(spec);
        let d = decide(&gw, checkout("P103"), &m);
        assert_deny(&d, "authn", "product");
        assert!(d.receipt.is_some(), "{bad}: {d:#?}");
    }
}

/// A pack whose critical value comes only from the selection: a product
/// outside it is refused at provenance. Its folder is removed when the
/// process ends, not before the world that reads its registries.
fn pick_world() -> TestWorld {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        write_pick(&dir.path().join("pick"));
        dir
    });
    TestWorld::with_pack_dirs(&[dir.path().join("pick")])
}

/// The `pick` pack and its catalogue, written once.
fn write_pick(pack: &std::path::Path) {
    std::fs::create_dir_all(pack.join("registries")).unwrap();
    std::fs::write(
        pack.join("pack.ipc"),
        r#"pack pick
mandate {
  product: selection over registry.catalogue
}
registry catalogue by Id { name: Text, price: Money, added: Date }
action buy {
  scope shop.buy
  executor external
  param product_id: Id critical from mandate.product
}
"#,
    )
    .unwrap();
    std::fs::write(
        pack.join("registries/catalogue.json"),
        r#"{"maya": {
  "A": {"name": "Red Mug", "price": "5.00", "added": "2026-11-27"},
  "B": {"name": "Blue Mug", "price": "5.00", "added": "2026-11-20"},
  "C": {"name": "Mug Set", "price": "9.00", "added": "2026-11-27"}}}"#,
    )
    .unwrap();
}

fn buy(product: &str) -> Value {
    json!({"action": "buy", "args": {"product_id": product}})
}

fn pick_mandate(w: &TestWorld, q: Value) -> Value {
    w.mandate(MandateSpec::for_pack("pick", "maya", "maya", &["shop.buy"]).claim("product", q))
}

#[test]
fn a_critical_value_from_a_selection_is_a_key_it_returns_ties_all_kept() {
    let w = pick_world();
    let gw = w.gateway();
    let m = pick_mandate(
        &w,
        json!({"where": [["name", "contains_word", "mug"]], "pick": {"min": "price"}}),
    );
    assert_eq!(decide(&gw, buy("A"), &m).decision, Outcome::Allow);
    assert_eq!(decide(&gw, buy("B"), &m).decision, Outcome::Allow);
    let d = decide(&gw, buy("C"), &m);
    assert_deny(&d, "provenance", "not in mandate.product");
    assert_eq!(d.stage, Stage::Provenance);
}

#[test]
fn a_criterion_nothing_matches_refuses_with_the_query_shown() {
    let w = pick_world();
    let gw = w.gateway();
    let m = pick_mandate(&w, json!({"where": [["price", ">", "100.00"]]}));
    let d = decide(&gw, buy("A"), &m);
    assert_deny(&d, "provenance", "no record of `pick.catalogue` matches");
    assert!(
        d.reason.as_deref().unwrap_or("").contains("100.00"),
        "{d:#?}"
    );
}

#[test]
fn today_is_the_gateways_day() {
    let w = pick_world();
    let gw = w.gateway();
    // the test world's clock is on 2026-11-27
    let m = pick_mandate(&w, json!({"where": [["added", "==", "today"]]}));
    assert_eq!(decide(&gw, buy("C"), &m).decision, Outcome::Allow);
    assert_deny(&decide(&gw, buy("B"), &m), "provenance", "mandate.product");
    let m = pick_mandate(&w, json!({"where": [["added", ">=", "today - 7 days"]]}));
    assert_eq!(decide(&gw, buy("B"), &m).decision, Outcome::Allow);
}

#[test]
fn a_record_override_changes_the_result() {
    let w = pick_world();
    let gw = w.gateway();
    let m = pick_mandate(&w, json!({"pick": {"min": "price"}}));
    assert_deny(&decide(&gw, buy("C"), &m), "provenance", "mandate.product");
    // the shop lowers C's price (a record of the store, over the file)
    let regs = intentplane::gateway::registry::Registries {
        world: gw.world(),
        pack: "pick",
        owner: "maya",
    };
    let reg = w.bundle.table.pack("pick").unwrap().registries[0].clone();
    let rec = json!({"name": "Mug Set", "price": 300, "added": 1_795_737_600});
    gw.store()
        .transaction(&mut |tx| {
            regs.put_record(tx, &reg, "C", rec.as_object().unwrap().clone())?;
            Ok(Value::Null)
        })
        .unwrap();
    assert_eq!(decide(&gw, buy("C"), &m).decision, Outcome::Allow);
    assert_deny(&decide(&gw, buy("A"), &m), "provenance", "mandate.product");
    // and a deleted record is no longer selected
    gw.store()
        .transaction(&mut |tx| {
            regs.delete_record(tx, &reg, "C")?;
            Ok(Value::Null)
        })
        .unwrap();
    assert_eq!(decide(&gw, buy("A"), &m).decision, Outcome::Allow);
}

fn limit_world(enforce: &str) -> TestWorld {
    let w = pick_world();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str(enforce);
    std::fs::write(&w.world_path, text).unwrap();
    w
}

fn shadowed(d: &Decision) -> (Outcome, Stage) {
    let b = d.would_be.as_ref().expect("a shadow decision");
    (b.decision, b.stage)
}

#[test]
fn a_limit_counts_distinct_keys_per_mandate_and_shadow_counts_apart() {
    let q = json!({"where": [["name", "contains_word", "mug"]], "limit": 1});
    // enforced: one product, bought again at will; a second is refused
    let w = limit_world("");
    let gw = w.gateway();
    let m = pick_mandate(&w, q.clone());
    assert_eq!(decide(&gw, buy("A"), &m).decision, Outcome::Allow);
    let d = decide(&gw, buy("B"), &m);
    assert_deny(&d, "budget", "allows 1 distinct key");

    // in shadow: the same count, kept under the shadow keys
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let w = limit_world("[enforce.tenants]\nmaya = false\n");
    let shadow = w.gateway_with(store.clone());
    let m = pick_mandate(&w, q);
    assert_eq!(
        shadowed(&decide(&shadow, buy("A"), &m)),
        (Outcome::Allow, Stage::Execution)
    );
    assert_eq!(
        shadowed(&decide(&shadow, buy("B"), &m)),
        (Outcome::Deny, Stage::Budget)
    );
    // enforcement turned on over the same store starts clean
    std::fs::write(
        &w.world_path,
        std::fs::read_to_string(&w.world_path)
            .unwrap()
            .replace("maya = false", "maya = true"),
    )
    .unwrap();
    let enforced = w.gateway_with(store);
    assert_eq!(decide(&enforced, buy("B"), &m).decision, Outcome::Allow);
    assert_deny(&decide(&enforced, buy("A"), &m), "budget", "distinct key");
}

#[test]
fn a_registry_over_the_bound_is_refused_not_read() {
    let w = pick_world();
    let gw = w.gateway();
    let m = pick_mandate(&w, json!({"pick": {"min": "price"}}));
    let regs = intentplane::gateway::registry::Registries {
        world: gw.world(),
        pack: "pick",
        owner: "maya",
    };
    let reg = w.bundle.table.pack("pick").unwrap().registries[0].clone();
    let n = intentplane::gateway::selection::MAX_ROWS;
    gw.store()
        .transaction(&mut |tx| {
            for i in 0..n {
                let rec = json!({"name": "x", "price": 100 + i, "added": 0});
                regs.put_record(
                    tx,
                    &reg,
                    &format!("K{i:05}"),
                    rec.as_object().unwrap().clone(),
                )?;
            }
            Ok(Value::Null)
        })
        .unwrap();
    let d = decide(&gw, buy("A"), &m);
    assert_deny(&d, "provenance", "more than");
}

/// On PostgreSQL a decision is first taken before the head lock
/// (optimistic); a selection's listing is not read there, so the decision
/// is taken again under the lock, on the state it commits on: the result
/// is the same as on any store, and a record override is seen.
#[cfg(feature = "postgres")]
#[test]
fn a_selection_is_decided_under_the_lock_on_postgresql() {
    use intentplane::store::postgres::{PgOptions, PgStore};
    let Some(schema) = common::pg::fresh() else {
        return;
    };
    let w = pick_world();
    let gw = w.gateway_with(Arc::new(
        PgStore::open_with(&schema.url, PgOptions::default(), true).unwrap(),
    ));
    let m = pick_mandate(&w, json!({"pick": {"min": "price"}, "limit": 1}));
    assert_deny(&decide(&gw, buy("C"), &m), "provenance", "mandate.product");
    let regs = intentplane::gateway::registry::Registries {
        world: gw.world(),
        pack: "pick",
        owner: "maya",
    };
    let reg = w.bundle.table.pack("pick").unwrap().registries[0].clone();
    let rec = json!({"name": "Mug Set", "price": 300, "added": 1_795_737_600});
    gw.store()
        .transaction(&mut |tx| {
            regs.put_record(tx, &reg, "C", rec.as_object().unwrap().clone())?;
            Ok(Value::Null)
        })
        .unwrap();
    let d = decide(&gw, buy("C"), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_deny(&decide(&gw, buy("A"), &m), "provenance", "mandate.product");
    let snap = gw.store().snapshot().unwrap();
    let bodies: Vec<Value> = snap.records().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies[1]["selections"]["product"]["picked"], "C");
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(3));
}

/// A registry keyed by numbers: a key the query returns is vouched for as
/// the number the proposal gave (keys compare as their text, as a
/// registry membership does).
#[test]
fn a_number_key_is_vouched_for_by_its_selection() {
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let pack = dir.path().join("seats");
        std::fs::create_dir_all(pack.join("registries")).unwrap();
        std::fs::write(
            pack.join("pack.ipc"),
            "pack seats\nmandate { seat: selection over registry.seats }\n\
             registry seats by Int { price: Money }\n\
             action book {\n  scope seats.book\n  executor external\n  \
             param seat: Int critical from mandate.seat\n}\n",
        )
        .unwrap();
        std::fs::write(
            pack.join("registries/seats.json"),
            r#"{"maya": {"12": {"price": "30.00"}, "14": {"price": "20.00"}}}"#,
        )
        .unwrap();
        dir
    });
    let w = TestWorld::with_pack_dirs(&[dir.path().join("seats")]);
    let gw = w.gateway();
    let m = w.mandate(
        MandateSpec::for_pack("seats", "maya", "maya", &["seats.book"])
            .claim("seat", json!({"pick": {"min": "price"}})),
    );
    let book = |n: i64| json!({"action": "book", "args": {"seat": n}});
    let d = decide(&gw, book(14), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["seat"], json!(14));
    assert_eq!(last_receipt(&gw)["selections"]["seat"]["picked"], "14");
    assert_deny(&decide(&gw, book(12), &m), "provenance", "mandate.seat");
}
