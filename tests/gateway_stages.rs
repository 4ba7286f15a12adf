//! The DENY path of every stage, and the ALLOW / PENDING paths, on the
//! shipped packs with a test world (tests/common).

mod common;
use common::*;
use intentplane::gateway::Outcome;
use serde_json::{Value, json};

// ---- authn -------------------------------------------------------------

#[test]
fn authn_refuses_a_missing_tampered_foreign_expired_or_revoked_token() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = transfer(LANDLORD, json!("10.00"));
    let d = gw
        .decide(&intentplane::gateway::Input {
            proposal: p.clone(),
            ..Default::default()
        })
        .unwrap();
    assert_deny(&d, "authn", "no mandate");

    let mut tampered = w.emma();
    tampered["mandate"]["budget"]["amount"] = json!(999_999_999);
    assert_deny(
        &decide(&gw, p.clone(), &tampered),
        "authn",
        "invalid mandate signature",
    );

    let mut foreign = w.emma();
    foreign["key_id"] = json!("0123456789abcdef");
    assert_deny(&decide(&gw, p.clone(), &foreign), "authn", "unknown key");

    let mut spec = MandateSpec::bank("emma");
    spec.ttl = -1;
    assert_deny(
        &decide(&gw, p.clone(), &w.mandate(spec)),
        "authn",
        "expired",
    );

    let mut smuggled = w.emma();
    smuggled["mandate"]["approval_level"] = json!(2);
    assert_deny(
        &decide(&gw, p.clone(), &smuggled),
        "authn",
        "malformed mandate",
    );

    let m = w.emma();
    let id = m["mandate"]["id"].as_str().unwrap().to_string();
    gw.store()
        .transaction(&mut |tx| {
            tx.revoke(&id)?;
            Ok(Value::Null)
        })
        .unwrap();
    assert_deny(&decide(&gw, p, &m), "authn", "revoked");
}

// ---- contract ----------------------------------------------------------

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

// ---- provenance --------------------------------------------------------

#[test]
fn provenance_refuses_untrusted_values_and_uses_the_trusted_spelling() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    // the attacker's IBAN from the PDF
    let d = decide(&gw, transfer(ATTACKER_IBAN, json!("98.70")), &m);
    assert_deny(&d, "provenance", "not from a trusted source");
    assert_eq!(
        d.hint.as_deref(),
        Some("add this payee as a beneficiary in your bank app, then ask again")
    );
    // another tenant's beneficiary, by value and by reference
    assert_deny(
        &decide(&gw, transfer("NL91ABNA0417164300", json!("5.00")), &m),
        "provenance",
        "not from a trusted source",
    );
    assert_deny(
        &decide(&gw, transfer("x", json!("5.00")).clone(), &m),
        "contract",
        "not an IBAN",
    );
    let by_ref = json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": {"ref": "noah-sister"}, "amount": "5.00", "currency": "EUR"}});
    assert_deny(
        &decide(&gw, by_ref, &m),
        "provenance",
        "names none of your records",
    );
    // someone else's account as the source of funds
    let p = json!({"action": "payment.transfer", "args": {"from_account": "noah-checking",
        "payee_iban": LANDLORD, "amount": "5.00", "currency": "EUR"}});
    assert_deny(&decide(&gw, p, &m), "provenance", "`from_account`");

    // a beneficiary in another spelling executes with the trusted spelling
    let d = decide(
        &gw,
        transfer("de44 5001 0517 5407 3249 31", json!(12.5)),
        &m,
    );
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["payee_iban"], json!(LANDLORD));
    assert_eq!(d.resolved["amount"], json!(1250));
    assert_eq!(d.origins["payee_iban"], json!("registry.beneficiaries"));
    assert_eq!(d.origins["from_account"], json!("mandate.account"));
    // a reference resolves to the owner's record
    let by_ref = json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": {"ref": "gym"}, "amount": "5.00", "currency": "EUR"}});
    let d = decide(&gw, by_ref, &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(
        d.resolved["payee_iban"],
        json!("FR7630006000011234567890189")
    );
    // a payee the user named in the request
    let named = w.mandate(MandateSpec::bank("emma").claim("payee", json!([SUPPLIER])));
    let d = decide(&gw, transfer(SUPPLIER, json!("98.70")), &named);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.origins["payee_iban"], json!("mandate.payee"));
}

// ---- delegation --------------------------------------------------------

#[test]
fn delegation_needs_the_scope() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let mut spec = MandateSpec::bank("emma");
    spec.scopes = vec!["account.write".into()];
    let d = decide(&gw, transfer(LANDLORD, json!("5.00")), &w.mandate(spec));
    assert_deny(&d, "delegation", "`payments.write`");
}

// ---- budget ------------------------------------------------------------

#[test]
fn budget_caps_the_amount_and_the_calls() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma(); // 2,000.00 and 10 calls
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("900.00")), &m).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("900.00")), &w.emma()).decision,
        Outcome::Allow
    );
    let d = decide(&gw, transfer(LANDLORD, json!("900.01")), &m);
    assert_eq!(
        d.decision,
        Outcome::Allow,
        "a separate mandate has its own budget: {d:#?}"
    );
    let d = decide(&gw, transfer(LANDLORD, json!("1100.00")), &m);
    assert_deny(&d, "budget", "over the mandate's budget");

    let mut spec = MandateSpec::bank("emma");
    spec.calls = 2;
    let m = w.mandate(spec);
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("1.00")), &m).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("2.00")), &m).decision,
        Outcome::Allow
    );
    assert_deny(
        &decide(&gw, transfer(LANDLORD, json!("3.00")), &m),
        "budget",
        "calls are used up",
    );
}

// ---- policy ------------------------------------------------------------

#[test]
fn policy_levels_hard_cap_and_sanctions() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let mut spec = MandateSpec::bank("emma").claim("payee", json!([SANCTIONED]));
    spec.budget = 10_000_000;
    let m = w.mandate(spec);
    // 1,000.00 is not above the step-up threshold; 1,000.01 is
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("1000.00")), &m).decision,
        Outcome::Allow
    );
    let d = decide(&gw, transfer(LANDLORD, json!("1000.01")), &m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    assert_eq!(d.level, Some(1));
    assert!(d.reason.as_deref().unwrap_or("").contains("large transfer"));
    assert_eq!(d.approve_by.as_deref(), Some("the user `emma`"));
    // 10,000.00 is the cap; above it nothing executes, whoever approves
    let d = decide(&gw, transfer(LANDLORD, json!("10000.00")), &m);
    assert_eq!(d.decision, Outcome::Pending);
    let p = transfer(LANDLORD, json!("10000.01"));
    let d = decide(&gw, p.clone(), &m);
    assert_deny(&d, "policy", "hard cap");
    let op = d.operation_hash.clone().unwrap();
    let d = gw
        .decide(&input(
            p,
            &m,
            vec![w.approve("emma", &op), w.approve("cfo", &op)],
        ))
        .unwrap();
    assert_deny(&d, "policy", "hard cap");
    assert!(d.hint.unwrap().contains("no approval can lift this"));
    // a sanctioned payee, even one the user named
    assert_deny(
        &decide(&gw, transfer(SANCTIONED, json!("10.00")), &m),
        "policy",
        "sanctioned payee",
    );
}

// ---- approval ----------------------------------------------------------

#[test]
fn approval_is_bound_to_the_operation_the_person_and_one_use() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let p = transfer(LANDLORD, json!("1500.00"));
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Pending);
    let op = d.operation_hash.clone().unwrap();

    // for another operation (another amount) / another mandate
    let other = decide(&gw, transfer(LANDLORD, json!("1600.00")), &m)
        .operation_hash
        .unwrap();
    let d = gw
        .decide(&input(p.clone(), &m, vec![w.approve("emma", &other)]))
        .unwrap();
    assert_deny(&d, "approval", "another operation");
    let m2 = w.emma();
    let d = gw
        .decide(&input(p.clone(), &m2, vec![w.approve("emma", &op)]))
        .unwrap();
    assert_deny(&d, "approval", "another operation");
    // expired
    let d = gw
        .decide(&input(
            p.clone(),
            &m,
            vec![w.approve_with("emma", &op, now() - 1, "n-exp")],
        ))
        .unwrap();
    assert_deny(&d, "approval", "expired");
    // forged: someone signs in emma's name
    let mut forged = w.approve("noah", &op);
    forged["approval"]["approver"] = json!("emma");
    assert_deny(
        &gw.decide(&input(p.clone(), &m, vec![forged])).unwrap(),
        "approval",
        "invalid signature",
    );
    // someone else cannot step up for emma
    let d = gw
        .decide(&input(p.clone(), &m, vec![w.approve("noah", &op)]))
        .unwrap();
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    // emma herself: executes, once
    let ok = w.approve_with("emma", &op, now() + 60, "n-1");
    let d = gw.decide(&input(p.clone(), &m, vec![ok.clone()])).unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.approvers, vec!["emma".to_string()]);
    // the same approval again, for a new identical operation of another mandate
    let m3 = w.emma();
    let d3 = decide(&gw, p.clone(), &m3);
    let reuse = w.approve_with(
        "emma",
        d3.operation_hash.as_ref().unwrap(),
        now() + 60,
        "n-1",
    );
    let d = gw.decide(&input(p, &m3, vec![reuse])).unwrap();
    assert_deny(&d, "approval", "already used");
}

#[test]
fn four_eyes_needs_the_user_and_a_different_person() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["vendors.write", "payments.write"],
    ));
    let p = json!({"action": "vendor.change_iban", "args": {
        "vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES91 2100 0418 4502 0005 1332"}});
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    assert_eq!(d.level, Some(2));
    let op = d.operation_hash.unwrap();
    // the user alone, or the user twice: still pending
    let d = gw
        .decide(&input(p.clone(), &m, vec![w.approve("clerk", &op)]))
        .unwrap();
    assert_eq!(d.decision, Outcome::Pending);
    let d = gw
        .decide(&input(
            p.clone(),
            &m,
            vec![w.approve("clerk", &op), w.approve("clerk", &op)],
        ))
        .unwrap();
    assert_eq!(d.decision, Outcome::Pending);
    // the user and the CFO: executes
    let d = gw
        .decide(&input(
            p,
            &m,
            vec![w.approve("clerk", &op), w.approve("cfo", &op)],
        ))
        .unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.approvers, vec!["clerk".to_string(), "cfo".to_string()]);
}

// ---- execution ---------------------------------------------------------

#[test]
fn execution_is_idempotent_and_spends_once() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let p = transfer(LANDLORD, json!("700.00"));
    let first = decide(&gw, p.clone(), &m);
    assert_eq!(first.decision, Outcome::Allow);
    let again = decide(&gw, p, &m);
    assert_eq!(again.decision, Outcome::Allow);
    assert!(again.replayed);
    assert_eq!(again.result, first.result);
    // spent once: 700 + 1300 = 2000 still fits
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("1000.00")), &m).decision,
        Outcome::Allow
    );
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("300.00")), &m).decision,
        Outcome::Allow
    );
    assert_deny(
        &decide(&gw, transfer(LANDLORD, json!("0.01")), &m),
        "budget",
        "budget",
    );
}

#[test]
fn an_invoice_is_paid_once_and_only_at_its_amount_to_its_vendor() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write"],
    ));
    let pay = |iban: &str, amount: &str| {
        json!({"action": "invoice.pay", "args": {
        "invoice_id": "INV-1001", "payee_iban": iban, "amount": amount, "currency": "EUR"}})
    };
    assert_deny(
        &decide(&gw, pay(ATTACKER_IBAN, "4200.00"), &m),
        "provenance",
        "payee_iban",
    );
    assert_deny(
        &decide(&gw, pay(SUPPLIER, "4199.99"), &m),
        "provenance",
        "amount",
    );
    let d = decide(&gw, pay(SUPPLIER, "4200.00"), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    // paid: a second attempt under a new mandate is refused by the policy
    let m2 = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write"],
    ));
    assert_deny(
        &decide(&gw, pay(SUPPLIER, "4200.00"), &m2),
        "policy",
        "invoice is not open",
    );
    // another company's invoice does not exist for acme
    let g = json!({"action": "invoice.pay", "args": {"invoice_id": "INV-G-1",
        "payee_iban": "IT60X0542811101000000123456", "amount": "800.00", "currency": "EUR"}});
    assert_deny(&decide(&gw, g, &m2), "provenance", "invoice_id");
}

// ---- receipts ----------------------------------------------------------

#[test]
fn every_decision_is_a_receipt_and_the_chain_verifies() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let outs = [
        decide(&gw, transfer(ATTACKER_IBAN, json!("1.00")), &m),
        decide(&gw, transfer(LANDLORD, json!("1.00")), &m),
        decide(&gw, transfer(LANDLORD, json!("1500.00")), &m),
        decide(&gw, json!("junk"), &m),
    ];
    let recs = gw.store().receipts().unwrap();
    assert_eq!(recs.len(), outs.len());
    for (d, r) in outs.iter().zip(&recs) {
        assert_eq!(d.receipt.as_ref().unwrap().hash, r.hash);
        assert_eq!(
            r.body["decision"],
            serde_json::to_value(d.decision).unwrap()
        );
        assert_eq!(r.body["bundle"], json!(w.bundle.hash));
    }
    assert_eq!(
        recs[0].body["proposal"]["args"]["payee_iban"],
        json!(ATTACKER_IBAN)
    );
    assert_eq!(
        recs[1].body["origins"]["payee_iban"],
        json!("registry.beneficiaries")
    );
    let head = gw.store().head().unwrap();
    assert_eq!(intentplane::store::verify_chain(&recs, head).unwrap(), 4);
}
