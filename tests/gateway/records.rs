//! Record types (issue #24, item 2) on the gateway: the fixture pack
//! `tests/fixtures/mutate/records` with its scenarios (every attack class
//! one scenario: an injected element among trusted ones, a critical field
//! missing from one element, an unknown field, a nested record of another
//! type, a huge list), and the property that one untrusted element, at any
//! place of any list of trusted ones, refuses the proposal.

use intentplane::bundle::Bundle;
use intentplane::compile::build;
use intentplane::scenarios::{Status, Suite, run_suite_with_bundle};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mutate/records")
}

fn bundle() -> &'static Bundle {
    static B: OnceLock<Bundle> = OnceLock::new();
    B.get_or_init(|| {
        let r = build(&[fixture()]);
        r.bundle.expect("the records fixture builds")
    })
}

/// One proposal of `memory.relate`, decided on a fresh gateway: the
/// decision, its stage and its reason.
fn relate(relations: Value) -> (String, String, String) {
    let suite = json!({
        "pack": "records",
        "clock": "2026-11-27T18:40:00Z",
        "mandates": {"emma": {"user": "emma", "scopes": ["memory.write"]}},
        "tests": [{
            "name": "one",
            "mandate": "emma",
            "proposal": {"action": "memory.relate", "args": {"relations": relations}},
            "expect": {"decision": "ALLOW"}
        }]
    });
    let dir = fixture().join("scenarios");
    let suite = Suite::parse(
        &suite.to_string(),
        &dir.join("prop.json"),
        fixture().join("registries"),
    )
    .expect("the suite parses");
    let res = run_suite_with_bundle(&suite, bundle());
    assert!(res.error.is_none(), "{:?}", res.error);
    let d = res.tests[0].decision.clone().expect("a decision");
    let v = serde_json::to_value(&d).unwrap();
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    (s("decision"), s("stage"), s("reason"))
}

#[test]
fn the_fixture_scenarios_pass() {
    let r = build(&[fixture()]);
    let bundle = r.bundle.expect("the records fixture builds");
    let suite = Suite::load(&fixture().join("scenarios/records.json")).expect("the suite loads");
    let res = run_suite_with_bundle(&suite, &bundle);
    assert!(res.error.is_none(), "{:?}", res.error);
    let failed: Vec<String> = res
        .tests
        .iter()
        .filter(|t| t.status != Status::Pass)
        .map(|t| format!("{}: expected {}, got {}", t.name, t.expected, t.got))
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(res.tests.len(), 20);
}

#[test]
fn the_schema_holds_records_and_sets_of_records() {
    let schema = &bundle().schema;
    assert!(
        schema.contains("edits: Set<{ oldText: String, newText: String }>"),
        "{schema}"
    );
    assert!(
        schema.contains("meta: { owner: String, tag?: String }"),
        "{schema}"
    );
    // the origin of a record's critical fields, beside the parameters'
    assert!(schema.contains("relations: String,"), "{schema}");
}

const TRUSTED: &[&str] = &["Emma", "Lukas"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Any number of trusted relations with one untrusted end anywhere:
    /// refused at provenance, naming that element and that field; the same
    /// list without it is allowed.
    #[test]
    fn one_untrusted_element_anywhere_refuses_the_list(
        ends in prop::collection::vec((0usize..2, 0usize..2), 0..12),
        at in any::<prop::sample::Index>(),
        to in any::<bool>(),
        name in "[A-Z][a-z]{1,10}".prop_filter("not trusted", |n| !TRUSTED.contains(&n.as_str())),
    ) {
        let rel = |f: &str, t: &str| json!({"from": f, "to": t, "relationType": "knows"});
        let mut list: Vec<Value> = ends.iter().map(|(f, t)| rel(TRUSTED[*f], TRUSTED[*t])).collect();
        if !list.is_empty() {
            let (d, _, r) = relate(Value::Array(list.clone()));
            prop_assert_eq!(d, "ALLOW", "{}", r);
        }
        let i = at.index(list.len() + 1);
        let bad = if to { rel("Emma", &name) } else { rel(&name, "Lukas") };
        list.insert(i, bad);
        let (d, stage, reason) = relate(Value::Array(list));
        prop_assert_eq!(d, "DENY");
        prop_assert_eq!(stage, "provenance");
        let field = if to { "to" } else { "from" };
        let needle = format!("`relations[{i}].{field}` `{name}` is not from a trusted source");
        prop_assert!(reason.contains(&needle), "{}", reason);
    }
}

/// A table whose record parameter lost a field's declaration, or whose
/// record is critical itself, is refused at every load (the table's
/// invariants, whatever its signature): the field would pass unvouched.
#[test]
fn a_table_that_drops_a_field_is_refused() {
    use intentplane::bundle::invariants;
    let table = &bundle().table;
    assert_eq!(invariants::check(table), Ok(()));
    let mut t = table.clone();
    relations_param(&mut t).fields.retain(|f| f.name != "to");
    let e = invariants::check(&t).unwrap_err();
    assert!(
        e.contains("its fields are not those of its record type"),
        "{e}"
    );
    let mut t = table.clone();
    relations_param(&mut t).fields.swap(0, 1);
    assert!(invariants::check(&t).is_err());
    let mut t = table.clone();
    let p = relations_param(&mut t);
    p.critical = true;
    p.sources = vec![intentplane::ir::Source::Registry {
        registry: "entities".into(),
    }];
    let e = invariants::check(&t).unwrap_err();
    assert!(e.contains("is critical itself"), "{e}");
    // a field flagged critical without a source is refused as a parameter is
    let mut t = table.clone();
    relations_param(&mut t).fields[0].sources.clear();
    let e = invariants::check(&t).unwrap_err();
    assert!(e.contains("has no trusted source"), "{e}");
}

fn relations_param(t: &mut intentplane::bundle::format::Table) -> &mut intentplane::ir::Param {
    let a = t
        .actions
        .iter_mut()
        .find(|a| a.action.name == "memory.relate")
        .unwrap();
    a.action
        .params
        .iter_mut()
        .find(|p| p.name == "relations")
        .unwrap()
}

/// A pack with a set of records whose field is vouched for, one whose
/// fields are the agent's own, and a list of the same records.
const SETS: &str = r#"pack sets version "0.1.0" "Sets of records"

registry entities: set<Text>

action memory.tag "Tag entities" {
  scope    memory.write
  executor external
  param tags: set<{ name: Text critical from registry.entities, xs: list<Text> }> max_items 1000
}

action memory.note "Notes" {
  scope    memory.write
  executor external
  param notes: set<{ xs: list<Text> }> max_items 1000
}

action memory.tag_list "Tag entities, in order" {
  scope    memory.write
  executor external
  param tags: list<{ name: Text critical from registry.entities, xs: list<Text> }> max_items 1000
}
"#;

/// Each proposal's decision on a fresh gateway of the `SETS` pack, as JSON.
fn decide_sets(proposals: &[Value]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pack.ipc"), SETS).unwrap();
    std::fs::create_dir_all(dir.path().join("registries")).unwrap();
    std::fs::write(
        dir.path().join("registries/entities.json"),
        r#"{"emma": [{"id": "emma", "value": "Emma"}]}"#,
    )
    .unwrap();
    let bundle = build(&[dir.path().to_path_buf()])
        .bundle
        .expect("the sets pack builds");
    let tests: Vec<Value> = proposals
        .iter()
        .enumerate()
        .map(|(i, p)| {
            json!({"name": format!("t{i}"), "mandate": "emma", "proposal": p,
                   "expect": {"decision": "ALLOW"}})
        })
        .collect();
    let suite = json!({
        "pack": "sets",
        "clock": "2026-11-27T18:40:00Z",
        "mandates": {"emma": {"user": "emma", "scopes": ["memory.write"]}},
        "tests": tests,
    });
    let suite = Suite::parse(
        &suite.to_string(),
        &dir.path().join("scenarios/sets.json"),
        dir.path().join("registries"),
    )
    .expect("the suite parses");
    let res = run_suite_with_bundle(&suite, &bundle);
    assert!(res.error.is_none(), "{:?}", res.error);
    res.tests
        .iter()
        .map(|t| serde_json::to_value(t.decision.as_ref().expect("a decision")).unwrap())
        .collect()
}

/// A set's duplicates are dropped: of the agent's own records as the
/// agent wrote them (the same fields in the same order), of vouched ones
/// once trusted, whatever their fields' order.
#[test]
fn a_set_of_records_keeps_each_element_once() {
    let d = decide_sets(&[
        json!({"action": "memory.tag", "args": {"tags": [
            {"name": "Emma", "xs": ["a"]},
            {"xs": ["a"], "name": "Emma"},
            {"name": "Emma", "xs": ["b"]},
        ]}}),
        json!({"action": "memory.note", "args": {"notes": [
            {"xs": ["a"]}, {"xs": ["b"]}, {"xs": ["a"]},
        ]}}),
    ]);
    assert_eq!(d[0]["decision"], "ALLOW", "{}", d[0]);
    assert_eq!(
        d[0]["resolved"]["tags"],
        json!([{"name": "Emma", "xs": ["a"]}, {"name": "Emma", "xs": ["b"]}]),
        "{}",
        d[0]
    );
    assert_eq!(d[1]["decision"], "ALLOW", "{}", d[1]);
    assert_eq!(
        d[1]["resolved"]["notes"],
        json!([{"xs": ["a"]}, {"xs": ["b"]}]),
        "{}",
        d[1]
    );
}
