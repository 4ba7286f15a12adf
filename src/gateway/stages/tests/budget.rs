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

/// A budget parameter without an integer amount is a DENY (it read as 0
/// before: a spend nobody counted).
#[test]
fn a_missing_budget_value_is_a_deny() {
    use crate::gateway::stages::Run;
    use crate::store::Store;
    let w = TestWorld::new();
    let gw = w.gateway();
    let action = gw.actions.get("payment.transfer").unwrap();
    assert_eq!(action.table.action.budget.as_deref(), Some("amount"));
    let input = crate::gateway::Input::default();
    let store = crate::store::memory::MemoryStore::new();
    for resolved in [
        json!({}),
        json!({"amount": "4.00"}),
        json!({"amount": null}),
    ] {
        let mut amount = None;
        store
            .transaction(&mut |tx| {
                let r = Run {
                    gw: &gw,
                    tx,
                    now: now(),
                    input: &input,
                    tenants: &crate::gateway::Tenants::All,
                    dispatch: None,
                    mandate: None,
                    ancestors: std::sync::Arc::from(Vec::new()),
                    action: Some(action),
                    args: Default::default(),
                    resolved: resolved.as_object().unwrap().clone(),
                    secrets: Default::default(),
                    origins: Default::default(),
                    facts: Default::default(),
                    level: 0,
                    policies: vec![],
                    operation_hash: None,
                    approvers: vec![],
                    nonces: vec![],
                    spent: None,
                    result: None,
                    replayed: false,
                    effect: crate::gateway::Effect::Write,
                    execution: None,
                    shadow: false,
                    selections: Default::default(),
                };
                amount = Some(super::amount_of(&r).map_err(|d| d.reason));
                Ok(serde_json::Value::Null)
            })
            .unwrap();
        let reason = amount.unwrap().unwrap_err();
        assert!(
            reason.contains("`amount` has no amount"),
            "{resolved}: {reason}"
        );
    }
}
