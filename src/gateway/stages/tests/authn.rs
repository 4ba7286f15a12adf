//! authn: the DENY paths on the shipped packs (`gateway::testkit`), and the
//! cache of verified tokens.

use crate::gateway::testkit::*;
use crate::gateway::{Input, Outcome};
use serde_json::{Value, json};

#[test]
fn authn_refuses_a_missing_tampered_foreign_expired_or_revoked_token() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = transfer(LANDLORD, json!("10.00"));
    let d = gw
        .decide(&Input {
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

/// The cache of verified tokens is keyed by the signature, but a hit counts
/// only for the very token that was verified: an edited mandate under a
/// signature already seen is checked again, and refused.
#[test]
fn authn_cache_never_accepts_an_edited_token_under_a_verified_signature() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let p = transfer(LANDLORD, json!("10.00"));
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    let signature = m["signature"].as_str().unwrap();
    assert!(
        gw.verified.lock().unwrap().contains_key(signature),
        "the verified token is cached under its signature"
    );

    let edits: [(&str, Value); 4] = [
        ("/mandate/budget/amount", json!(999_999_999)),
        ("/mandate/owner", json!("noah")),
        ("/mandate/scopes", json!(["payments.write", "admin"])),
        ("/mandate/expires_at", json!(now() + 365 * 24 * 3600)),
    ];
    for (field, value) in edits {
        let mut edited = m.clone();
        *edited.pointer_mut(field).unwrap() = value;
        assert_eq!(edited["signature"], m["signature"]);
        assert_deny(
            &decide(&gw, transfer(LANDLORD, json!("11.00")), &edited),
            "authn",
            "invalid mandate signature",
        );
    }
    // the genuine token still passes (the cache was not replaced)
    let d = decide(&gw, transfer(LANDLORD, json!("12.00")), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
}
