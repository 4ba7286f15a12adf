use crate::gateway::mandate::{Budget, Mandate, MandateToken, ParentRef};
use crate::gateway::testkit::{LANDLORD, MandateSpec, TestWorld, now};
use serde_json::{Value, json};

/// A parent of `owner` naming the landlord, and a child of it with every
/// field set to a value of its own (within the parent, so that nothing is
/// shown only because it widens), whose `sources` lets the payee be any
/// saved beneficiary: wider than a drafted child's default.
pub(crate) fn parent_and_child(tw: &TestWorld) -> (MandateToken, Mandate) {
    let mut spec = MandateSpec::bank("emma").claim("payee", json!([LANDLORD]));
    spec.id = "m-parent-q4z".into();
    spec.owner = "emma-household".into();
    spec.claims
        .insert("account".into(), json!("emma-joint-acct"));
    let parent: MandateToken = serde_json::from_value(tw.mandate(spec)).unwrap();
    let pm = &parent.mandate;
    let child = Mandate {
        id: "m-child-k7w".into(),
        pack: pm.pack.clone(),
        user: pm.user.clone(),
        owner: pm.owner.clone(),
        scopes: vec!["account.write".into()],
        claims: pm.claims.clone(),
        budget: Budget {
            amount: 123_456,
            calls: 7,
        },
        issued_at: now() - 17,
        expires_at: now() + 1234,
        sources: [(
            "payment.transfer.payee_iban".to_string(),
            vec!["mandate.payee".into(), "registry.beneficiaries".into()],
        )]
        .into(),
        parent: Some(ParentRef {
            id: pm.id.clone(),
            hash: parent.mandate_hash().unwrap(),
        }),
    };
    (parent, child)
}

/// The rule of the signer's screen: every field of a signed mandate that
/// changes what it allows is shown to the person who signs it, in the
/// rendering (`shown`, as the page and the answers carry it) and in its
/// text (the command line, `ipc mandates show`). The walk goes over the
/// mandate's serialised fields, so a field added to [`Mandate`] without a
/// rendering fails here (and the destructuring below, without `..`, does
/// not compile until it is named).
#[test]
fn every_field_of_a_signed_child_is_shown_to_its_signer() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let (parent, child) = parent_and_child(&tw);
    let shown = gw.show_child(&parent, &child).unwrap();
    assert_eq!(shown.widens, Vec::<String>::new(), "{shown:#?}");
    let Mandate {
        id,
        pack,
        user,
        owner,
        scopes,
        claims: _,
        budget,
        issued_at,
        expires_at,
        sources: _,
        parent: link,
    } = &child;
    let time = crate::base::json::format_time;
    // each field: where `shown` carries it, and the words it shows as
    let expected: Vec<(&str, &str, Vec<String>)> = vec![
        ("id", "/mandate", vec![id.clone()]),
        ("pack", "/pack", vec![pack.clone()]),
        ("user", "/user", vec![user.clone()]),
        ("owner", "/owner", vec![owner.clone()]),
        ("scopes", "/scopes", scopes.clone()),
        (
            "claims",
            "/claims",
            vec![
                "emma-joint-acct".into(),
                "DE44 5001 0517 5407 3249 31".into(),
            ],
        ),
        ("budget", "/budget", vec!["1,234.56 EUR".into()]),
        ("budget", "/calls", vec![budget.calls.to_string()]),
        (
            "budget",
            "/summary",
            vec![format!(
                "up to 1,234.56 EUR in at most {} calls",
                budget.calls
            )],
        ),
        ("issued_at", "/issued", vec![time(*issued_at)]),
        ("expires_at", "/expires", vec![time(*expires_at)]),
        (
            "sources",
            "/sources",
            vec![
                "payment.transfer.payee_iban".into(),
                "the payee this mandate names".into(),
                "any entry of your registry beneficiaries".into(),
            ],
        ),
        ("parent", "/parent", vec![link.as_ref().unwrap().id.clone()]),
    ];
    let as_json = serde_json::to_value(&shown).unwrap();
    // the text folds long values: their lines joined again
    let text = shown.text().replace("\n    | ", "");
    let Value::Object(fields) = serde_json::to_value(&child).unwrap() else {
        panic!("a mandate is an object")
    };
    for k in fields.keys() {
        assert!(
            expected.iter().any(|(f, _, _)| f == k),
            "field `{k}` of a signed mandate is not shown to its signer: render it (render_child.rs, the page) and name it here"
        );
    }
    for (field, at, words) in &expected {
        let part = as_json
            .pointer(at)
            .map(Value::to_string)
            .unwrap_or_default();
        for w in words {
            assert!(
                part.contains(w.as_str()),
                "`{field}`: {w} not in shown{at}: {part}"
            );
            assert!(
                text.contains(w.as_str()),
                "`{field}`: {w} not in the text:\n{text}"
            );
        }
    }
}

/// A child whose sources let a critical value come from more than the
/// values it names says so where the signer reads first (the summary),
/// and in its text; a drafted child's default says nothing of the kind.
#[test]
fn a_child_wider_than_its_default_says_so_in_plain_words() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let (parent, mut child) = parent_and_child(&tw);
    let shown = gw.show_child(&parent, &child).unwrap();
    assert!(shown.sources.iter().any(|s| s.wider), "{shown:#?}");
    let beyond = shown.summary.split("BEYOND THE VALUES NAMED: ").nth(1);
    assert!(
        beyond.is_some_and(|b| b.contains(
            "payment.transfer.payee_iban, standing_order.update.payee_iban from the payee this mandate names or any entry of your registry beneficiaries"
        )),
        "{}",
        shown.summary
    );
    assert!(shown.text().contains("WIDER than the values"));
    // no narrowing at all: every critical value a claim vouches for is
    // wider than the default, each named
    child.sources.clear();
    let shown = gw.show_child(&parent, &child).unwrap();
    for p in [
        "payment.transfer.payee_iban",
        "standing_order.update.payee_iban",
        "payment.send.recipient",
    ] {
        assert!(
            shown
                .sources
                .iter()
                .any(|s| s.wider && s.params.iter().any(|q| q == p)),
            "{p}: {shown:#?}"
        );
    }
    // the default: strict, nothing wider
    child.sources =
        crate::gateway::narrowing::strict_within(&parent.mandate.sources, &gw_actions(&gw));
    let shown = gw.show_child(&parent, &child).unwrap();
    assert!(!shown.sources.is_empty());
    assert!(shown.sources.iter().all(|s| !s.wider), "{shown:#?}");
    assert!(!shown.summary.contains("BEYOND"), "{}", shown.summary);
}

fn gw_actions(gw: &crate::gateway::Gateway) -> Vec<&crate::ir::Action> {
    gw.actions
        .values()
        .filter(|a| a.pack.name == "bank")
        .map(|a| &a.table.action)
        .collect()
}
