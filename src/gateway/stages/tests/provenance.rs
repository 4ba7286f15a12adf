//! provenance: the DENY paths and the trusted spelling, on the shipped
//! packs (`gateway::testkit`).

use crate::gateway::Outcome;
use crate::gateway::testkit::*;
use serde_json::json;

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
