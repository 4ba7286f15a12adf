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

mod same_json {
    use super::super::same_json;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..3).prop_map(Value::from),
            "[ab]{0,2}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(("[abc]", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    /// The same object with its keys in reverse order, at every depth.
    fn reversed(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, x) in m.iter().rev() {
                    out.insert(k.clone(), reversed(x));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(reversed).collect()),
            other => other.clone(),
        }
    }

    proptest! {
        /// The fast comparison the token cache uses is exactly `==`:
        /// on unrelated values, on a value and its copy, and on a value
        /// and the same with its keys in another order.
        #[test]
        fn is_equality(a in arb_json(), b in arb_json()) {
            prop_assert_eq!(same_json(&a, &b), a == b);
            prop_assert!(same_json(&a, &a.clone()));
            let r = reversed(&a);
            prop_assert!(same_json(&a, &r));
            prop_assert_eq!(same_json(&r, &b), r == b);
        }
    }
}

/// A narrowing is checked against the bundle's table when the token is
/// verified: each way it can name something the pack does not declare is
/// a DENY at authn with its own reason, before any value is looked at.
#[test]
fn authn_refuses_a_narrowing_the_pack_does_not_allow() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = transfer(LANDLORD, json!("10.00"));
    let cases: [(&str, &[&str], &str); 6] = [
        (
            "payment.wire.payee_iban",
            &["mandate.payee"],
            "`payment.wire.payee_iban` names no action of pack `bank`",
        ),
        (
            "payment.transfer",
            &["mandate.payee"],
            "`payment.transfer` names no action of pack `bank`",
        ),
        (
            "payment.transfer.payee",
            &["mandate.payee"],
            "action `payment.transfer` has no parameter `payee`",
        ),
        (
            "payment.transfer.amount",
            &["mandate.payee"],
            "`payment.transfer.amount` is not critical",
        ),
        (
            "payment.transfer.payee_iban",
            &["mandate.payee", "registry.sanctions"],
            "`registry.sanctions` is not a source of `payment.transfer.payee_iban`",
        ),
        (
            "payment.transfer.payee_iban",
            &[],
            "`payment.transfer.payee_iban` is narrowed to no source",
        ),
    ];
    for (target, sources, reason) in cases {
        // forged: the issuing code refuses each of these narrowings
        let m = w.forge_mandate(MandateSpec::bank("emma").narrow(target, sources));
        let d = decide(&gw, p.clone(), &m);
        assert_deny(&d, "authn", "invalid mandate narrowing: ");
        assert_deny(&d, "authn", reason);
    }
    // another pack's action is not this mandate's to narrow
    let m =
        w.forge_mandate(MandateSpec::bank("emma").narrow("email.send.to", &["mandate.recipients"]));
    assert_deny(&decide(&gw, p.clone(), &m), "authn", "names no action");
    // a well-formed narrowing passes authn (and its value is then refused)
    let m = w.mandate(
        MandateSpec::bank("emma").narrow("payment.transfer.payee_iban", &["mandate.payee"]),
    );
    assert_deny(
        &decide(&gw, p, &m),
        "provenance",
        "is not from a source this mandate allows: not in mandate.payee",
    );
}

/// The narrowing is signed with the rest: the agent cannot widen a strict
/// mandate back by editing or dropping its `sources`.
#[test]
fn authn_refuses_a_strict_mandate_whose_narrowing_was_edited() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = transfer(LANDLORD, json!("10.00"));
    let strict = w.mandate(
        MandateSpec::bank("emma").narrow("payment.transfer.payee_iban", &["mandate.payee"]),
    );
    let mut dropped = strict.clone();
    dropped["mandate"]
        .as_object_mut()
        .unwrap()
        .remove("sources");
    assert_deny(
        &decide(&gw, p.clone(), &dropped),
        "authn",
        "invalid mandate signature",
    );
    let mut widened = strict.clone();
    widened["mandate"]["sources"]["payment.transfer.payee_iban"] =
        json!(["mandate.payee", "registry.beneficiaries"]);
    assert_deny(
        &decide(&gw, p.clone(), &widened),
        "authn",
        "invalid mandate signature",
    );
    // the same token unedited: past authn, refused by provenance
    assert_deny(
        &decide(&gw, p, &strict),
        "provenance",
        "this mandate allows",
    );
}
