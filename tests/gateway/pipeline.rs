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

/// NEW, the approver's one warning, marks a value only the request vouched
/// for that is in none of the owner's records for that parameter (#40,
/// item 4): named in the mandate and also in the owner's set, keyed or
/// global registry, it is not news; named only in the mandate, it is.
#[test]
fn new_marks_only_what_no_record_of_the_owner_holds() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("newness");
    std::fs::create_dir_all(pack.join("registries")).unwrap();
    std::fs::write(
        pack.join("pack.ipc"),
        r#"pack newness version "0.1.0" "What the approver is told is new"
mandate {
  payee:  set<Iban>
  vendor: set<Id>
  bank:   set<Iban>
}
registry saved: set<Iban>
registry vendors by Id { name: Text }
registry shared: set<Iban> global
action pay.saved "Pay a saved payee" {
  scope    pay
  executor external
  param iban: Iban critical from mandate.payee | registry.saved
  step_up "every payment" always
}
action pay.vendor "Pay a vendor" {
  scope    pay
  executor external
  param vendor_id: Id critical from mandate.vendor | registry.vendors
  step_up "every payment" always
}
action pay.shared "Pay an account of the shared list" {
  scope    pay
  executor external
  param iban: Iban critical from mandate.bank | registry.shared
  step_up "every payment" always
}
"#,
    )
    .unwrap();
    let saved = "DE44 5001 0517 5407 3249 31";
    let other = "DE02120300000000202051";
    std::fs::write(
        pack.join("registries/saved.json"),
        json!({"emma": [saved]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        pack.join("registries/vendors.json"),
        json!({"emma": {"V-1": {"name": "Stadtwerke"}}}).to_string(),
    )
    .unwrap();
    std::fs::write(
        pack.join("registries/shared.json"),
        json!({"*": [saved]}).to_string(),
    )
    .unwrap();
    let w = TestWorld::with_pack_dirs(&[pack]);
    let gw = w.gateway();
    let new_of = |action: &str, param: &str, claim: &str, value: &str| {
        // forged: the claim is signed in the spelling the record holds, not
        // the canonical one the issuing code would sign
        let m = w.forge_mandate(
            MandateSpec::for_pack("newness", "emma", "emma", &["pay"]).claim(claim, json!([value])),
        );
        let d = decide(&gw, json!({"action": action, "args": {param: value}}), &m);
        assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
        assert!(
            d.origins[param].as_str().unwrap().starts_with("mandate."),
            "{d:#?}"
        );
        let (op, _) = gw
            .pending_ops()
            .unwrap()
            .into_iter()
            .find(|(op, _)| Some(&op.operation_hash) == d.operation_hash.as_ref())
            .unwrap();
        op.new_values.contains(&param.to_string())
    };
    // a set registry of the owner's
    assert!(!new_of("pay.saved", "iban", "payee", saved));
    assert!(new_of("pay.saved", "iban", "payee", other));
    // a keyed registry: an existing key
    assert!(!new_of("pay.vendor", "vendor_id", "vendor", "V-1"));
    assert!(new_of("pay.vendor", "vendor_id", "vendor", "V-2"));
    // a global registry (`"*"`)
    assert!(!new_of("pay.shared", "iban", "bank", saved));
    assert!(new_of("pay.shared", "iban", "bank", other));
}

/// A mandate whose owner the world holds no records of (a token issued
/// without `--owner`, defaulting to the user) is refused in words that
/// name that owner (#40, item 14); the owner's own refusal does not say it.
#[test]
fn a_refusal_names_an_owner_the_world_holds_no_records_of() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let pay = json!({"action": "invoice.pay", "args": {
        "invoice_id": "INV-1001", "payee_iban": ATTACKER_IBAN, "amount": "4200.00", "currency": "EUR"}});
    // the clerk's token without an owner: the owner is the clerk
    let mut spec = MandateSpec::for_pack("ap", "clerk", "acme", &["payments.write"]);
    spec.owner = "clerk".into();
    let d = decide(&gw, pay.clone(), &w.mandate(spec));
    assert_deny(
        &d,
        "provenance",
        "the mandate's owner `clerk` has no records in this world's registries of `ap`",
    );
    let d = decide(
        &gw,
        pay,
        &w.mandate(MandateSpec::for_pack(
            "ap",
            "clerk",
            "acme",
            &["payments.write"],
        )),
    );
    assert_deny(&d, "provenance", "payee_iban");
    assert!(
        !d.reason.as_deref().unwrap_or("").contains("has no records"),
        "{d:?}"
    );
}
