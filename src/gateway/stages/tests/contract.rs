//! contract: the DENY paths on the shipped packs (`gateway::testkit`).

use crate::gateway::testkit::*;
use serde_json::{Value, json};

#[test]
fn contract_refuses_anything_but_the_exact_parameters() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let cases: Vec<(Value, &str)> = vec![
        (json!("pay"), "a proposal is an object"),
        (json!({"action": "payment.transfer"}), "no `args`"),
        (
            json!({"action": "payment.transfer", "args": {}, "context": {"approval_level": 2}}),
            "unexpected key `context`",
        ),
        (
            json!({"action": "payment.nuke", "args": {}}),
            "unknown action",
        ),
        (
            json!({"action": "invoice.pay", "args": {}}),
            "unknown action",
        ),
        (
            json!({"action": "payment.transfer", "args": {"from_account": "emma-checking", "payee_iban": LANDLORD, "amount": "1.00"}}),
            "missing parameter `currency`",
        ),
        (
            json!({"action": "payment.transfer", "args": {"from_account": "emma-checking", "payee_iban": LANDLORD, "amount": "1.00", "currency": "EUR", "origin": "mandate"}}),
            "unknown parameter `origin`",
        ),
        (
            json!({"action": "payment.transfer", "args": {"from_account": "emma-checking", "Payee_IBAN": LANDLORD, "amount": "1.00", "currency": "EUR"}}),
            "unknown parameter `Payee_IBAN`",
        ),
        (transfer(LANDLORD, json!("1.005")), "more than two decimals"),
        (transfer(LANDLORD, json!("1e3")), "not a decimal amount"),
        (transfer(LANDLORD, json!(true)), "expected an amount"),
        (transfer(LANDLORD, json!("-5.00")), "outside"),
        (
            transfer(LANDLORD, json!("99999999999999999999")),
            "too large",
        ),
        (
            transfer("DE44 5001 0517 5407 3249 3\u{200b}1", json!("1.00")),
            "non-ASCII",
        ),
        (transfer("DE00 0000", json!("1.00")), "not an IBAN"),
        (
            transfer_obj(json!({"ref": "x", "origin": "mandate"})),
            "exactly",
        ),
        (transfer_obj(json!({"ref": 7})), "a `ref` is a string"),
    ];
    for (p, needle) in cases {
        assert_deny(&decide(&gw, p, &m), "contract", needle);
    }
    // a reference is only for critical parameters with a registry source
    let p = json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": LANDLORD, "amount": {"ref": "rent"}, "currency": "EUR"}});
    assert_deny(&decide(&gw, p, &m), "contract", "found an object");
}

fn transfer_obj(payee: Value) -> Value {
    json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": payee, "amount": "1.00", "currency": "EUR"}})
}

/// A `Duration` is a whole number of seconds; an ISO 8601 string is
/// refused in words that say so (#40, item 13).
#[test]
fn a_duration_is_a_whole_number_of_seconds_and_says_so() {
    let p = crate::ir::Param {
        name: "stay".into(),
        ty: crate::ir::Type::Duration,
        critical: false,
        sources: vec![],
        normalize: None,
        validators: vec![],
        default: None,
        hint: None,
        secret: false,
        optional: false,
        fields: vec![],
        line: 1,
    };
    let ty = p.ty.clone();
    assert!(matches!(
        super::parse_scalar(&p, &ty, &json!(7200)),
        Ok(crate::gateway::stages::Arg::Val(v)) if v == json!(7200)
    ));
    let e = super::parse_scalar(&p, &ty, &json!("PT2H")).err().unwrap();
    assert!(e.contains("whole number of seconds"), "{e}");
}
