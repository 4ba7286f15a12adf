//! approval: bound to the operation, the person and one use; four eyes. On
//! the shipped packs (`gateway::testkit`).

use crate::gateway::Outcome;
use crate::gateway::testkit::*;
use serde_json::json;

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

/// Issue #15, item 1: the second pair of eyes is a person the world
/// authorises for the mandate's owner, with the role the rule names, and a
/// different key than the user's. Reproduced before: acme's IBAN change
/// approved by the clerk and `noah`, another tenant's person, executed.
#[test]
fn four_eyes_is_someone_of_this_tenant_with_the_role() {
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
    assert_eq!(d.decision, Outcome::Pending);
    let approve_by = d.approve_by.clone().unwrap();
    assert!(
        approve_by.contains("`acme`") && approve_by.contains("`treasury`"),
        "{approve_by}"
    );
    let op = d.operation_hash.unwrap();
    let with = |second: &str| {
        gw.decide(&input(
            p.clone(),
            &m,
            vec![w.approve("clerk", &op), w.approve(second, &op)],
        ))
        .unwrap()
    };
    // a treasurer, but of globex
    assert_deny(
        &with("noah"),
        "approval",
        "`noah` may not approve for `acme` as `treasury`",
    );
    // of no tenant at all
    assert_deny(
        &with("emma"),
        "approval",
        "`emma` may not approve for `acme`",
    );
    // the CFO: acme's treasury
    let d = with("cfo");
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
}

/// Without a role on the rule, any person of the tenant is a second pair
/// of eyes; a person of another tenant is not.
#[test]
fn four_eyes_without_a_role_is_any_person_of_the_tenant() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::for_pack(
        "health",
        "dr_lee",
        "dr_lee",
        &["records.emergency"],
    ));
    let p = json!({"action": "record.break_glass", "args": {
        "patient_id": "P-3001", "reason": "unconscious patient in the ER"}});
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    let op = d.operation_hash.unwrap();
    let with = |second: &str| {
        gw.decide(&input(
            p.clone(),
            &m,
            vec![w.approve("dr_lee", &op), w.approve(second, &op)],
        ))
        .unwrap()
    };
    assert_deny(&with("lead_bo"), "approval", "may not approve for `dr_lee`");
    assert_eq!(with("maria").decision, Outcome::Allow);
}

/// Two names mapped to one key are one person: the world is refused.
#[test]
fn two_approvers_with_one_key_are_refused_at_load() {
    let w = TestWorld::new();
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let world = w.dir.path().join("twins.toml");
    std::fs::write(
        &world,
        text.replace(
            "[approvers]\n",
            "[approvers]\nclerk_alias = { key = \"clerk.pub\", owners = [\"acme\"], roles = [\"treasury\"] }\n",
        ),
    )
    .unwrap();
    let err = crate::gateway::world::World::load(&world, &w.bundle.table).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("share one key"), "{msg}");
    assert!(
        msg.contains("`clerk`") && msg.contains("`clerk_alias`"),
        "{msg}"
    );
}
