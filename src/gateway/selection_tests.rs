use super::*;
use crate::ir::{Claim, Registry, RegistryShape, Type};
use proptest::prelude::*;
use serde_json::json;

fn catalogue() -> Registry {
    let f = |n: &str, ty: Type| Claim { name: n.into(), ty };
    Registry {
        name: "catalogue".into(),
        global: false,
        shape: RegistryShape::Keyed {
            key: Type::Id,
            fields: vec![
                f("name", Type::Text),
                f("category", Type::Text),
                f("price", Type::Money),
                f("rating", Type::Int),
                f("day", Type::Date),
            ],
        },
    }
}

fn rows() -> BTreeMap<String, Map<String, Value>> {
    let r = |name: &str, cat: &str, price: i64, rating: i64, day: i64| {
        json!({"name": name, "category": cat, "price": price, "rating": rating, "day": day})
            .as_object()
            .cloned()
            .unwrap_or_default()
    };
    let d = 1_795_000_000 / DAY * DAY;
    BTreeMap::from([
        (
            "P1".into(),
            r("Bluetooth Headphones", "Headphones", 5900, 42, d),
        ),
        (
            "P2".into(),
            r("Bluetooth-Headphones Pro", "Headphones", 4900, 44, d - DAY),
        ),
        (
            "P3".into(),
            r("Wired Headphones", "Headphones", 4900, 46, d - 3 * DAY),
        ),
        (
            "P4".into(),
            r("Bluetoothless Speaker", "Audio", 1000, 30, d),
        ),
    ])
}

fn parse(q: Value) -> Result<Query, SelectionError> {
    Query::parse(&q, &catalogue(), "shop")
}

fn run(q: Value) -> Vec<String> {
    let now = 1_795_000_000 / DAY * DAY + 3600;
    parse(q)
        .and_then(|q| {
            q.eval(&rows(), now)
                .map_err(|reason| SelectionError::Invalid {
                    registry: "x".into(),
                    reason,
                })
        })
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_conjunction_with_a_minimum_keeps_every_tied_key() {
    assert_eq!(
        run(json!({"where": [["category", "==", "Headphones"]], "pick": {"min": "price"}})),
        ["P2", "P3"]
    );
    assert_eq!(
        run(json!({"where": [["rating", ">", 43]], "pick": {"max": "rating"}})),
        ["P3"]
    );
}

#[test]
fn contains_word_is_a_whole_word_case_folded_never_a_substring() {
    assert_eq!(
        run(json!({"where": [["name", "contains_word", "BLUETOOTH"]]})),
        ["P1", "P2"]
    );
    assert!(run(json!({"where": [["name", "contains_word", "tooth"]]})).is_empty());
    assert!(parse(json!({"where": [["name", "contains_word", "blue tooth"]]})).is_err());
    assert!(parse(json!({"where": [["price", "contains_word", "5"]]})).is_err());
}

#[test]
fn money_literals_are_read_as_amounts_and_dates_against_today() {
    assert_eq!(
        run(json!({"where": [["price", "<=", "49.00"]]})),
        ["P2", "P3", "P4"]
    );
    assert_eq!(run(json!({"where": [["price", "<", 49]]})), ["P4"]);
    assert_eq!(
        run(json!({"where": [["day", "==", "today"]]})),
        ["P1", "P4"]
    );
    assert_eq!(
        run(json!({"where": [["day", ">=", "today - 1 days"]]})),
        ["P1", "P2", "P4"]
    );
    assert!(parse(json!({"where": [["day", ">=", "today + 1 days"]]})).is_err());
    assert!(parse(json!({"where": [["price", "<", "cheap"]]})).is_err());
}

#[test]
fn a_malformed_query_names_what_is_wrong() {
    let cases = [
        (
            json!({"where": [["colour", "==", "black"]]}),
            "`colour` is not a field",
        ),
        (json!({"where": [["name", "~=", "x"]]}), "unknown operator"),
        (json!({"where": [["name", "<", "x"]]}), "compares numbers"),
        (json!({"where": [["rating", ">", "4.0"]]}), "rating"),
        (json!({"pick": {"min": "name"}}), "only a number"),
        (
            json!({"pick": {"first": "price"}}),
            "neither `min` nor `max`",
        ),
        (json!({"limit": 0}), "`limit`"),
        (json!({"order": "price"}), "unknown key"),
        (json!(["where"]), "a JSON object"),
        (json!({"where": [["name", "=="]]}), "[field, op, literal]"),
    ];
    for (q, want) in cases {
        let e = parse(q.clone()).expect_err(&q.to_string()).to_string();
        assert!(e.contains(want), "{q}: {e}");
        assert!(e.contains("shop.catalogue"), "{e}");
    }
}

#[test]
fn a_set_registry_has_no_selection() {
    let set = Registry {
        name: "purchased".into(),
        global: false,
        shape: RegistryShape::Set { element: Type::Id },
    };
    assert!(Query::parse(&json!({}), &set, "shop").is_err());
}

#[test]
fn the_receipt_cuts_a_long_result_and_counts_it() {
    let ev = Evaluated {
        registry: "shop.catalogue".into(),
        query_hash: "sha256:q".into(),
        rows_hash: "sha256:r".into(),
        result: (0..RESULT_SHOWN + 5).map(|i| format!("P{i}")).collect(),
        limit: None,
        picked: Some("P3".into()),
    };
    let r = ev.to_receipt();
    assert_eq!(r["result"].as_array().map(Vec::len), Some(RESULT_SHOWN));
    assert_eq!(r["result_count"], json!(RESULT_SHOWN + 5));
    assert_eq!(r["picked"], json!("P3"));
}

// ---- the evaluator against a naive one --------------------------------

/// The same semantics written the obvious way: every row tested against
/// every condition, the extremum found with `min`/`max` over the matches.
fn naive(
    conds: &[(usize, u8, i64)],
    pick: Option<(bool, usize)>,
    rows: &[[i64; 3]],
) -> Vec<String> {
    let holds = |row: &[i64; 3], (f, op, lit): &(usize, u8, i64)| {
        let v = row[*f];
        match op {
            0 => v == *lit,
            1 => v != *lit,
            2 => v < *lit,
            3 => v <= *lit,
            4 => v > *lit,
            _ => v >= *lit,
        }
    };
    let hits: Vec<usize> = (0..rows.len())
        .filter(|i| conds.iter().all(|c| holds(&rows[*i], c)))
        .collect();
    let kept: Vec<usize> = match pick {
        None => hits,
        Some((max, f)) => {
            let vals = hits.iter().map(|i| rows[*i][f]);
            let best = if max { vals.max() } else { vals.min() };
            hits.into_iter()
                .filter(|i| Some(rows[*i][f]) == best)
                .collect()
        }
    };
    let mut keys: Vec<String> = kept.iter().map(|i| format!("K{i:03}")).collect();
    keys.sort();
    keys
}

fn ints() -> Registry {
    let f = |n: &str| Claim {
        name: n.into(),
        ty: Type::Int,
    };
    Registry {
        name: "r".into(),
        global: false,
        shape: RegistryShape::Keyed {
            key: Type::Id,
            fields: vec![f("a"), f("b"), f("c")],
        },
    }
}

proptest! {
    #[test]
    fn the_evaluator_agrees_with_the_naive_one(
        rows in prop::collection::vec([-5i64..5, -5i64..5, -5i64..5], 0..30),
        conds in prop::collection::vec((0usize..3, 0u8..6, -5i64..5), 0..4),
        pick in prop::option::of((any::<bool>(), 0usize..3)),
    ) {
        let names = ["a", "b", "c"];
        let ops = ["==", "!=", "<", "<=", ">", ">="];
        let mut q = Map::new();
        q.insert("where".into(), Value::Array(conds.iter().map(|(f, op, lit)| {
            json!([names[*f], ops[*op as usize], lit])
        }).collect()));
        if let Some((max, f)) = pick {
            q.insert("pick".into(), json!({ if max { "max" } else { "min" }: names[f] }));
        }
        let table: BTreeMap<String, Map<String, Value>> = rows.iter().enumerate().map(|(i, r)| {
            (format!("K{i:03}"), json!({"a": r[0], "b": r[1], "c": r[2]}).as_object().cloned().unwrap_or_default())
        }).collect();
        let query = Query::parse(&Value::Object(q), &ints(), "p").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let got = query.eval(&table, 0).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got, naive(&conds, pick, &rows));
    }

    #[test]
    fn contains_word_agrees_with_splitting_into_words(
        words in prop::collection::vec("[a-zA-Z0-9]{1,4}", 0..5),
        seps in prop::collection::vec("[ ,.\\-/]{1,2}", 0..5),
        w in "[a-zA-Z0-9]{1,4}",
    ) {
        let mut text = String::new();
        for (i, x) in words.iter().enumerate() {
            text.push_str(x);
            text.push_str(seps.get(i).map(String::as_str).unwrap_or(" "));
        }
        let want = words.iter().any(|x| x.eq_ignore_ascii_case(&w));
        prop_assert_eq!(contains_word(&text, &w), want);
    }
}
