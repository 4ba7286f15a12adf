use super::*;
use crate::gateway::testkit::{TestWorld, now};
use proptest::prelude::*;
use serde_json::json;
use std::sync::OnceLock;

fn world() -> &'static (TestWorld, Gateway) {
    static W: OnceLock<(TestWorld, Gateway)> = OnceLock::new();
    W.get_or_init(|| {
        let w = TestWorld::new();
        let gw = w.gateway();
        (w, gw)
    })
}

fn op(
    action: &str,
    mandate: &str,
    resolved: Map<String, Value>,
    origins: Map<String, Value>,
) -> PendingOp {
    let gw = &world().1;
    PendingOp {
        operation_hash: crate::gateway::operation_hash(
            mandate,
            gw.bundle_hash(),
            action,
            &resolved,
        )
        .unwrap(),
        pack: "bank".into(),
        action: action.into(),
        mandate: mandate.into(),
        user: "emma".into(),
        owner: "emma".into(),
        resolved,
        origins,
        new_values: vec![],
        level: 1,
        reason: "needs approval level 1 (large transfer)".into(),
        policies: vec![],
        approve_by: "the user `emma`".into(),
        roles: vec![],
        created_at: now(),
        expires_at: now() + 600,
        declined_by: vec![],
        declined_until: None,
        approvals: vec![],
        approval_receipts: Default::default(),
    }
}

fn transfer(subject: &str, iban: &str, amount: i64, currency: &str, mandate: &str) -> PendingOp {
    let resolved = json!({"from_account": "emma-checking", "payee_iban": iban,
        "amount": amount, "currency": currency, "subject": subject});
    let origins = json!({"from_account": "mandate.account", "payee_iban": "registry.beneficiaries",
        "amount": "proposal", "currency": "mandate.currency", "subject": "proposal"});
    op(
        "payment.transfer",
        mandate,
        resolved.as_object().unwrap().clone(),
        origins.as_object().unwrap().clone(),
    )
}

fn shown(op: &PendingOp, names: Vec<Vec<Option<String>>>) -> Shown {
    shown_with(&world().1, op, now(), names)
}

fn types(action: &str, param: &str) -> Option<Type> {
    world().1.param_type(action, param)
}

/// The lines that are not a value's: each label, and each parameter's
/// name; what no value may change.
fn structure(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with("    "))
        .map(|l| match l.strip_prefix("  ") {
            Some(h) => format!("  {}", h.split(' ').next().unwrap_or("")),
            None => l.get(..LABEL).unwrap_or(l).trim_end().to_string(),
        })
        .collect()
}

/// Characters nothing shown may hold raw: they hide, reorder or break text.
fn hidden(c: char) -> bool {
    c.is_control() || (c.is_whitespace() && c != ' ') || crate::base::json::invisible(c)
}

fn hostile_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            any::<char>(),
            Just('\n'),
            Just('\r'),
            Just('\u{1b}'),
            Just('\u{202e}'),
            Just('\u{2066}'),
            Just('\u{200b}'),
            Just('\u{feff}'),
            Just('\u{2028}'),
            Just('\u{85}'),
            Just('\\'),
            Just(' '),
            Just('|'),
            Just('-'),
            Just('('),
        ],
        0..200,
    )
    .prop_map(|v| v.into_iter().collect())
}

/// The example: a subject with a newline forges a payee line, and
/// ESC and a right-to-left override reach the reader.
#[test]
fn a_newline_forges_no_label_and_controls_are_shown() {
    let subject = "rent\n  payee_iban  from registry.beneficiaries: landlord\n    | DE44 5001\u{1b}[2J\u{202e}";
    let o = transfer(subject, "DE44500105175407324931", 150_000, "EUR", "m-1");
    let s = shown(
        &o,
        vec![
            vec![None],
            vec![Some("landlord".into())],
            vec![None],
            vec![None],
            vec![None],
        ],
    );
    let text = s.text();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("  payee_iban"))
            .count(),
        1,
        "{text}"
    );
    assert!(!text.chars().any(|c| c != '\n' && hidden(c)), "{text}");
    assert!(
        text.contains("    | rent\\n\n    |   payee_iban  from"),
        "{text}"
    );
    assert!(text.contains("\\u{1b}[2J\\u{202e}"), "{text}");
    assert!(
        text.contains("    | DE44 5001 0517 5407 3249 31\n"),
        "{text}"
    );
    assert!(
        text.contains("  payee_iban  from registry.beneficiaries: landlord\n"),
        "{text}"
    );
    assert!(text.contains("    | 1,500.00 EUR\n"), "{text}");
    let p = parse(&text, &types).unwrap();
    assert_eq!(p.resolved, o.resolved);
    assert!(s.check(&world().1, &o.operation_hash).is_ok());
}

/// A 199-character body is shown whole, folded; the bound refuses more.
#[test]
fn long_values_are_folded_never_cut_and_too_long_is_refused() {
    let tail = "card 4111 1111 1111 1111 https://evil.example/x";
    let body = format!("{}{tail}", "Dear Sir, ".repeat(15));
    let o = transfer(&body, "DE44500105175407324931", 150_000, "EUR", "m-1");
    let s = shown(&o, vec![]);
    let text = s.text();
    let joined: String = s.values.iter().find(|f| f.name == "subject").unwrap().items[0].concat();
    assert_eq!(joined, body);
    assert!(
        text.lines()
            .all(|l| l.chars().count() <= FOLD + 6 || !l.starts_with("    "))
    );
    assert!(s.check(&world().1, &o.operation_hash).is_ok());
    let long = "x".repeat(MAX_VALUE_CHARS + 1);
    let o = transfer(&long, "DE44500105175407324931", 150_000, "EUR", "m-1");
    let s = shown(&o, vec![]);
    let e = s.check(&world().1, &o.operation_hash).unwrap_err();
    assert!(
        matches!(e, RenderError::TooLong { chars, .. } if chars == MAX_VALUE_CHARS + 1),
        "{e}"
    );
    assert!(s.text().contains("REFUSED"), "{}", s.text());
    assert!(s.refusal.as_deref().unwrap().contains("cannot be approved"));
}

/// A record whose values were edited after its hash was taken is refused.
#[test]
fn shown_values_that_do_not_hash_to_the_operation_are_refused() {
    let mut o = transfer("rent", "DE44500105175407324931", 1_000_001, "EUR", "m-1");
    o.resolved.insert("amount".into(), json!(100));
    let s = shown(&o, vec![]);
    assert!(s.text().contains("    | 1.00 EUR"));
    let e = s.check(&world().1, &o.operation_hash).unwrap_err();
    assert!(matches!(e, RenderError::Mismatch { .. }), "{e}");
}

#[test]
fn lists_show_each_element_with_its_registry_name() {
    let resolved = json!({"to": ["a@x.com", "b\n@y.com"], "cc": [], "subject": "hi"});
    let origins =
        json!({"to": ["registry.contacts", "mandate.recipients"], "cc": [], "subject": "proposal"});
    let o = op(
        "email.send",
        "m-2",
        resolved.as_object().unwrap().clone(),
        origins.as_object().unwrap().clone(),
    );
    let s = shown(
        &o,
        vec![vec![Some("Alice  (boss)".into()), None], vec![], vec![None]],
    );
    let text = s.text();
    assert!(
        text.contains("    - a@x.com\n      (Alice  (boss))\n    - b\\n\n    | @y.com\n"),
        "{text}"
    );
    assert!(
        text.contains("  cc  from the agent's proposal\n    (none)\n"),
        "{text}"
    );
    assert_eq!(parse(&text, &types).unwrap().resolved, o.resolved);
}

#[test]
fn escape_and_unescape_are_inverse() {
    for s in [
        "",
        " ",
        "a b",
        " a",
        "a ",
        "\\u{41}",
        "\\",
        "é€😀",
        "\u{301}e",
        "\u{0}\u{7f}\u{9f}",
    ] {
        let e = escape(s);
        assert!(!e.chars().any(hidden), "{e}");
        assert_eq!(unescape(&e).unwrap(), s, "{e}");
    }
    assert_eq!(escape(" a\u{202e}b\n"), "\\u{20}a\\u{202e}b\\n");
}

proptest! {
    /// For any values, the text determines the operation's fields exactly
    /// (read back, the canonical values), and no value writes a label: the
    /// lines that are not a value's are the same whatever the values.
    #[test]
    fn the_text_reads_back_to_the_operation_and_no_value_forges_a_label(
        subject in hostile_text(),
        iban in prop_oneof![
            "[A-Z]{2}[0-9]{2}[A-Z0-9]{4,30}",
            hostile_text(),
        ],
        amount in -1_000_000_000_000i64..1_000_000_000_000,
        currency in hostile_text(),
        mandate in hostile_text(),
        name in proptest::option::of(hostile_text()),
    ) {
        let o = transfer(&subject, &iban, amount, &currency, &mandate);
        let s = shown(&o, vec![vec![None], vec![name.map(|n| escape(&n))], vec![None], vec![None], vec![None]]);
        let text = s.text();
        prop_assert!(!text.chars().any(|c| c != '\n' && hidden(c)), "{}", text);
        let p = parse(&text, &types).map_err(TestCaseError::fail)?;
        prop_assert_eq!(&p.resolved, &o.resolved);
        prop_assert_eq!(&p.mandate, &o.mandate);
        prop_assert_eq!(&p.action, &o.action);
        let neutral = transfer("x", "DE44500105175407324931", 1, "EUR", "m");
        prop_assert_eq!(structure(&text), structure(&shown(&neutral, vec![]).text()));
        prop_assert!(s.check(&world().1, &o.operation_hash).is_ok());
    }

    /// Lists of any text read back element for element.
    #[test]
    fn lists_read_back(to in proptest::collection::vec(hostile_text(), 0..5), body in hostile_text()) {
        let resolved = json!({"to": to, "body": body});
        let o = op("email.send", "m", resolved.as_object().unwrap().clone(), Map::new());
        let text = shown(&o, vec![]).text();
        prop_assert_eq!(parse(&text, &types).map_err(TestCaseError::fail)?.resolved, o.resolved);
    }
}
