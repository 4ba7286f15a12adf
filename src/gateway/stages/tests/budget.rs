//! budget: the DENY paths on the shipped packs (`gateway::testkit`).

use crate::gateway::Outcome;
use crate::gateway::testkit::*;
use serde_json::json;

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
