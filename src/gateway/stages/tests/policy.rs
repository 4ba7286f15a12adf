//! policy: levels, the hard cap and sanctions on the shipped packs
//! (`gateway::testkit`).

use crate::gateway::Outcome;
use crate::gateway::testkit::*;
use serde_json::json;

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
