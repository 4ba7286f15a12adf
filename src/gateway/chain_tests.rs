use super::*;
use crate::gateway::testkit::{
    ATTACKER_IBAN, LANDLORD, MandateSpec, TestWorld, assert_deny, decide, now, transfer,
};
use crate::gateway::{Gateway, Outcome};
use crate::keys::SecretKey;
use serde_json::json;

fn token(v: &Value) -> MandateToken {
    serde_json::from_value(v.clone()).unwrap()
}

fn rent(budget: i64) -> ChildRequest {
    ChildRequest {
        claims: vec![("payee".into(), json!("DE44 5001 0517 5407 3249 31"))],
        scopes: vec!["payments.write".into()],
        budget: Some(budget),
        calls: Some(2),
        expires_at: Some(now() + 600),
        ..Default::default()
    }
}

/// A child for the landlord (a beneficiary of Emma's) is issued, signed
/// by Emma's own key, and a transfer under it is allowed; a payee
/// outside it is denied though the parent's registry would allow it.
#[test]
fn a_child_issued_by_the_user_narrows_and_decides() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let child = gw
        .issue_child(&parent, &rent(150_000), tw.key("emma"))
        .unwrap();
    assert_eq!(child.ancestors.len(), 1);
    assert_eq!(child.mandate.parent.as_ref().unwrap().id, parent.mandate.id);
    let c = serde_json::to_value(&child).unwrap();
    let d = decide(
        &gw,
        transfer("DE44 5001 0517 5407 3249 31", json!("100.00")),
        &c,
    );
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    // the gym is Emma's beneficiary too, but not in the child
    let d = decide(
        &gw,
        transfer("FR76 3000 6000 0112 3456 7890 189", json!("10.00")),
        &c,
    );
    assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
    // a scope the child left out
    let d = decide(
        &gw,
        json!({"action": "user.update_info", "args": {"city": "Paris"}}),
        &c,
    );
    assert_deny(&d, "delegation", "does not grant the scope");
    // the spend counted against the parent too
    let spent = gw
        .store()
        .transaction(&mut |tx| Ok(json!(tx.spent(&parent.mandate.id)?.amount)))
        .unwrap();
    assert_eq!(spent, json!(10_000));
}

/// Each way of widening is refused at issue, named.
#[test]
fn a_widening_child_is_refused_naming_what_widens() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let cases: Vec<(ChildRequest, &str)> = vec![
        (
            ChildRequest {
                claims: vec![("payee".into(), json!(ATTACKER_IBAN))],
                ..rent(100)
            },
            "claim `payee`",
        ),
        (
            ChildRequest {
                scopes: vec!["payments.write".into(), "admin".into()],
                ..rent(100)
            },
            "scope `admin`",
        ),
        (rent(200_001), "budget 2,000.01"),
        (
            ChildRequest {
                calls: Some(11),
                ..rent(100)
            },
            "11 calls",
        ),
        (
            ChildRequest {
                expires_at: Some(now() + 7200),
                ..rent(100)
            },
            "expiry",
        ),
        (
            ChildRequest {
                claims: vec![("account".into(), json!("noah-checking"))],
                ..rent(100)
            },
            "claim `account`",
        ),
    ];
    for (req, needle) in cases {
        let e = gw.issue_child(&parent, &req, tw.key("emma")).unwrap_err();
        let text = e.to_string();
        assert!(
            matches!(e, ChildError::Widens { .. }) && text.contains(needle),
            "{needle}: {text}"
        );
        assert_eq!(
            miette::Diagnostic::code(&e).unwrap().to_string(),
            "ipc::mandate::widens"
        );
    }
}

/// A forged child (signed by the issuer, so its signature verifies) that
/// widens is a DENY at delegation, with a receipt.
#[test]
fn a_forged_widening_child_is_denied_with_a_receipt() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let d = gw
        .draft_child(
            &parent,
            &ChildRequest {
                claims: vec![("payee".into(), json!(ATTACKER_IBAN))],
                budget: Some(900_000),
                ..rent(100)
            },
        )
        .unwrap();
    assert_eq!(d.widens.len(), 2, "{:?}", d.widens);
    assert!(
        d.shown.text().contains("IN NO REGISTRY OF YOURS"),
        "{}",
        d.shown.text()
    );
    let mut forged = MandateToken::sign(d.mandate.clone(), &tw.issuer).unwrap();
    forged.ancestors = parent.lineage();
    let v = serde_json::to_value(&forged).unwrap();
    let out = decide(&gw, transfer(ATTACKER_IBAN, json!("10.00")), &v);
    assert_deny(&out, "delegation", "widens its parent");
    assert!(out.receipt.is_some());
}

/// Only an issuer key or the parent's user's key signs a child: another
/// approver's key (even one that approves for the owner), a user key for a
/// root, a child whose parent link is not the carried token: DENY at authn.
#[test]
fn only_the_issuer_or_the_parents_user_signs_a_child() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let d = gw.propose_child(&parent, &rent(100)).unwrap();
    let msg = d.signing_text().unwrap();
    for who in ["noah", "cfo"] {
        let k = tw.key(who);
        let e = gw
            .seal_child(
                &parent,
                d.mandate.clone(),
                &k.public().id(),
                &k.sign(msg.as_bytes()),
            )
            .unwrap_err();
        assert!(matches!(e, ChildError::Signer { .. }), "{who}: {e}");
    }
    // emma's key for a root mandate
    let mut root = parent.clone();
    root.signature = tw
        .key("emma")
        .sign(to_jcs(&root.mandate).unwrap().as_bytes());
    root.key_id = tw.key("emma").public().id();
    let out = decide(
        &gw,
        transfer(LANDLORD, json!("1.00")),
        &serde_json::to_value(&root).unwrap(),
    );
    assert_deny(&out, "authn", "unknown key");
    // a child naming a parent other than the token it carries
    let other = token(&tw.emma());
    let mut child = gw.issue_child(&parent, &rent(100), tw.key("emma")).unwrap();
    child.ancestors = other.lineage();
    let out = decide(
        &gw,
        transfer(LANDLORD, json!("1.00")),
        &serde_json::to_value(&child).unwrap(),
    );
    assert_deny(&out, "authn", "not the token it carries");
    // a child without its parent's token (signed by the issuer: a user's
    // key signs no mandate without a parent to be the user of)
    let mut child = gw.issue_child(&parent, &rent(100), &tw.issuer).unwrap();
    child.ancestors.clear();
    let out = decide(
        &gw,
        transfer(LANDLORD, json!("1.00")),
        &serde_json::to_value(&child).unwrap(),
    );
    assert_deny(&out, "authn", "whose token it does not carry");
}

/// Emma's mandate, a child of it signed by the issuer and a grandchild
/// signed by Emma.
fn chain(tw: &TestWorld, gw: &Gateway) -> (MandateToken, MandateToken, MandateToken) {
    let parent = token(&tw.emma());
    let child = gw.issue_child(&parent, &rent(100_000), &tw.issuer).unwrap();
    let grand = gw
        .issue_child(&child, &rent(50_000), tw.key("emma"))
        .unwrap();
    (parent, child, grand)
}

/// Revokes mandate `id` in the store.
fn revoke(gw: &Gateway, id: &str) {
    gw.store()
        .transaction(&mut |tx| {
            tx.revoke(id)?;
            Ok(Value::Null)
        })
        .unwrap();
}

/// A revoked parent revokes its children, at decision and at issue.
#[test]
fn a_revoked_parent_revokes_its_children() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let (parent, child, grandchild) = chain(&tw, &gw);
    assert_eq!(grandchild.ancestors.len(), 2);
    let v = serde_json::to_value(&grandchild).unwrap();
    let d = decide(&gw, transfer(LANDLORD, json!("5.00")), &v);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    let id = parent.mandate.id.clone();
    revoke(&gw, &id);
    let d = decide(&gw, transfer(LANDLORD, json!("5.00")), &v);
    assert_deny(&d, "authn", "has been revoked");
    let e = gw
        .issue_child(&child, &rent(100), tw.key("emma"))
        .unwrap_err();
    assert!(matches!(e, ChildError::Parent { .. }), "{e}");
}

/// Two children together never spend more than their parent: the second
/// is refused at the budget stage once the parent's budget is used.
#[test]
fn children_together_never_exceed_the_parent() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.mandate(MandateSpec {
        budget: 15_000,
        ..MandateSpec::bank("emma")
    }));
    let a =
        serde_json::to_value(gw.issue_child(&parent, &rent(10_000), &tw.issuer).unwrap()).unwrap();
    let b =
        serde_json::to_value(gw.issue_child(&parent, &rent(10_000), &tw.issuer).unwrap()).unwrap();
    let d = decide(&gw, transfer(LANDLORD, json!("90.00")), &a);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    let d = decide(&gw, transfer(LANDLORD, json!("90.00")), &b);
    assert_deny(&d, "budget", "the parent mandate");
    // the store's budgets agree with the receipts (each ancestor counted)
    let snap = gw.store().snapshot().unwrap();
    crate::store::verify_store(&snap, None).unwrap();
}

/// Recorded with a receipt; listed; a second record of the same id refused.
#[test]
fn an_issued_child_is_recorded_with_a_receipt() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let child = gw.issue_child(&parent, &rent(100), tw.key("emma")).unwrap();
    let r = gw.record_child(&child, "cli").unwrap();
    let recs = gw.store().receipts().unwrap();
    let last = recs.iter().find(|x| x.seq == r.seq).unwrap();
    assert_eq!(last.body["kind"], "mandate");
    assert_eq!(
        last.body["mandate"]["ancestors"],
        json!([parent.mandate.id])
    );
    let all = gw
        .store()
        .transaction(&mut |tx| Ok(serde_json::to_value(recorded(tx)?).unwrap()));
    assert_eq!(
        all.unwrap()[0]["token"]["mandate"]["id"],
        json!(child.mandate.id)
    );
    assert!(gw.record_child(&child, "cli").is_err());
    crate::store::verify_store(&gw.store().snapshot().unwrap(), None).unwrap();
}

/// What the confirmer reads: the IBAN grouped, the registry's name, the
/// budget with its currency, and an old token signs as before.
#[test]
fn a_child_is_shown_in_plain_words() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let d = gw.propose_child(&parent, &rent(150_000)).unwrap();
    assert!(
        d.shown
            .summary
            .contains("payee DE44 5001 0517 5407 3249 31 (Hausverwaltung Weber (landlord))"),
        "{}",
        d.shown.summary
    );
    assert!(
        d.shown.summary.contains("up to 1,500.00 EUR"),
        "{}",
        d.shown.summary
    );
    assert!(
        d.shown.text().contains("from your registry"),
        "{}",
        d.shown.text()
    );
    // no `parent` nor `ancestors` in a root's signed text or token
    let text = to_jcs(&parent.mandate).unwrap();
    assert!(!text.contains("parent"));
    assert!(
        !serde_json::to_string(&parent)
            .unwrap()
            .contains("ancestors")
    );
}

/// `m` signed with `key`, carrying `ancestors`.
fn forged(m: Mandate, key: &SecretKey, ancestors: Vec<MandateToken>) -> Value {
    let mut t = MandateToken::sign(m, key).unwrap();
    t.ancestors = ancestors;
    serde_json::to_value(&t).unwrap()
}

/// Every forged or broken chain is a DENY, never an ALLOW: a parent link
/// whose hash is another token's (same id, wider), ancestors reordered or
/// duplicated, a child of another user, owner or pack, a child signed by
/// another user's key, an expired or revoked middle link. Each is signed
/// by a key the world knows, so only the chain checks stand between it and
/// the transfer; the same transfer under the genuine chain is allowed.
#[test]
fn a_forged_or_broken_chain_is_denied_never_allowed() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let (parent, child, grand) = chain(&tw, &gw);
    let pay = || transfer(LANDLORD, json!("5.00"));
    let genuine = serde_json::to_value(&grand).unwrap();
    assert_eq!(decide(&gw, pay(), &genuine).decision, Outcome::Allow);
    let mut cases: Vec<(&str, Value, &str, String)> = vec![];
    // the parent's id, another body: the child's hash names the genuine one
    let mut wider = parent.mandate.clone();
    wider.budget.amount = 9_000_000;
    let wider = MandateToken::sign(wider, &tw.issuer).unwrap();
    let mut t = child.clone();
    t.ancestors = wider.lineage();
    cases.push((
        "hash",
        serde_json::to_value(&t).unwrap(),
        "authn",
        "not the token it carries".into(),
    ));
    // reordered and duplicated ancestors
    for (what, order) in [("reordered", [1, 0]), ("duplicated", [0, 0])] {
        let mut t = grand.clone();
        t.ancestors = order.iter().map(|&i| grand.ancestors[i].clone()).collect();
        cases.push((
            what,
            serde_json::to_value(&t).unwrap(),
            "authn",
            String::new(),
        ));
    }
    let mut t = grand.clone();
    t.ancestors.insert(0, grand.ancestors[0].clone());
    cases.push((
        "root twice",
        serde_json::to_value(&t).unwrap(),
        "authn",
        "names no parent".into(),
    ));
    // another user, owner or pack, signed by the issuer
    for (field, value) in [("user", "noah"), ("owner", "noah"), ("pack", "ap")] {
        let mut m = child.mandate.clone();
        match field {
            "user" => m.user = value.into(),
            "owner" => m.owner = value.into(),
            // its claims and narrowing are the bank's: refused at authn
            _ => m.pack = value.into(),
        }
        let (stage, needle) = match field {
            "pack" => ("authn", "pack `ap`".to_string()),
            _ => (
                "delegation",
                format!("{field} `{value}` is not the parent's"),
            ),
        };
        cases.push((
            field,
            forged(m, &tw.issuer, parent.lineage()),
            stage,
            needle,
        ));
    }
    // signed by another user's key: as Emma's child, and as Noah's own
    let mut m = child.mandate.clone();
    m.id = "m-by-noah".into();
    cases.push((
        "noah's key",
        forged(m.clone(), tw.key("noah"), parent.lineage()),
        "authn",
        "unknown key".into(),
    ));
    m.user = "noah".into();
    cases.push((
        "noah's key, noah's child",
        forged(m, tw.key("noah"), parent.lineage()),
        "authn",
        "unknown key".into(),
    ));
    for (what, v, stage, needle) in &cases {
        let d = decide(&gw, pay(), v);
        assert_eq!(d.decision, Outcome::Deny, "{what}: {d:#?}");
        assert_deny(&d, stage, needle);
    }
    // the middle link expired (the grandchild forged to outlive it)
    let mut m = grand.mandate.clone();
    m.expires_at = child.mandate.expires_at + 600;
    let outliving = forged(m, &tw.issuer, child.lineage());
    let mut w = tw.world();
    w.clock = Some(child.mandate.expires_at + 1);
    let later = gw.fork(w, gw.store().clone());
    let d = decide(&later, pay(), &outliving);
    assert_deny(&d, "authn", "has expired");
    // the middle link revoked
    let id = child.mandate.id.clone();
    revoke(&gw, &id);
    let d = decide(&gw, pay(), &genuine);
    assert_deny(&d, "authn", "has been revoked");
}

/// One parent's flood of proposals stays within the bounds of pending
/// approvals: the oldest of that parent leaves the listing (and stays
/// confirmable by its id), another tenant's proposal stays listed.
#[test]
fn held_children_are_listed_within_the_pending_bounds() {
    use crate::gateway::pending::MAX_PER_MANDATE;
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let noah = token(&tw.mandate(MandateSpec::bank("noah")));
    let other = gw
        .propose_child(
            &noah,
            &ChildRequest {
                claims: vec![],
                ..rent(100)
            },
        )
        .unwrap();
    gw.hold_child(&other, "http").unwrap();
    let parent = token(&tw.emma());
    let mut d = gw.propose_child(&parent, &rent(100)).unwrap();
    let first = d.mandate.id.clone();
    for i in 0..=MAX_PER_MANDATE {
        d.mandate.id = if i == 0 {
            first.clone()
        } else {
            format!("m-flood-{i}")
        };
        gw.hold_child(&d, "http").unwrap();
    }
    let held = gw.held_children().unwrap();
    let of_emma = held.iter().filter(|h| h.mandate.user == "emma").count();
    assert_eq!(of_emma, MAX_PER_MANDATE);
    assert!(held.iter().any(|h| h.mandate.id == other.mandate.id));
    assert!(!held.iter().any(|h| h.mandate.id == first));
    // out of the listing, still confirmable by its id
    let h = gw.held_child(&first).unwrap().unwrap();
    let sig = tw.key("emma").sign(to_jcs(&h.mandate).unwrap().as_bytes());
    let key_id = tw.key("emma").public().id();
    gw.confirm_child(&first, &key_id, &sig, "http").unwrap();
    // an index key is no mandate
    assert!(gw.held_child("#index").unwrap().is_none());
    assert!(matches!(
        gw.revoke_child("#index", "cli"),
        Err(ChildError::Request { .. })
    ));
}

/// A child drafted again for the second round of a question (the proxy's
/// 2026-07-28 state carries the time it was first drafted at) is the very
/// child, "valid from" included, whatever second the clock reads now; a
/// carried time later than now is taken as now.
#[test]
fn a_child_drafted_at_a_carried_time_shows_that_time() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let parent = token(&tw.emma());
    let req = ChildRequest {
        id: Some("m-carried".into()),
        ..rent(100)
    };
    let now = gw.now().unwrap();
    let first = gw.draft_child_at(&parent, &req, Some(now - 7)).unwrap();
    assert_eq!(first.mandate.issued_at, now - 7);
    let again = gw.draft_child_at(&parent, &req, Some(now - 7)).unwrap();
    assert_eq!(first.shown.text(), again.shown.text());
    assert_eq!(first.mandate, again.mandate);
    let later = gw.draft_child_at(&parent, &req, Some(now + 60)).unwrap();
    assert_eq!(later.mandate.issued_at, now);
    assert_eq!(
        gw.draft_child(&parent, &req).unwrap().mandate.issued_at,
        now
    );
}
