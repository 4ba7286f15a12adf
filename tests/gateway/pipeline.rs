//! Decisions across stages, on the shipped packs with the test world
//! (`intentplane::gateway::testkit`, through tests/common): idempotent
//! execution over a run, an invoice paid once, every decision a receipt in
//! a chain that verifies. Each stage's own tests (its DENY paths, approval
//! binding, four eyes) are unit tests beside it, in
//! `src/gateway/stages/tests/`.

use crate::common;
use common::*;
use intentplane::gateway::Outcome;
use serde_json::json;

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
    // the ALLOW records what it consumed; the store agrees with the chain
    assert_eq!(recs[1].body["consumed"]["amount"], json!(100));
    for r in [&recs[0], &recs[2], &recs[3]] {
        assert!(r.body.get("consumed").is_none(), "{}", r.body);
    }
    assert_eq!(
        intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None),
        Ok(4)
    );
}
