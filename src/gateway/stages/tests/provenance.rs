//! provenance: the DENY paths and the trusted spelling, on the shipped
//! packs (`gateway::testkit`).

use crate::gateway::Outcome;
use crate::gateway::testkit::*;
use serde_json::{Value, json};

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

/// Narrowing, adversarially: for every non-empty subset of a critical
/// parameter's declared sources and values drawn from each source (and from
/// none), a decision under the narrowed mandate is an ALLOW only if the
/// same proposal under the full mandate is one, with the same trusted
/// value from a kept source; and a value that only a removed source vouches
/// for is always refused at provenance.
#[test]
fn narrowing_never_allows_more_and_always_refuses_a_removed_source() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let w = TestWorld::new();
    let gw = w.gateway();
    // (action, param, declared sources, values with the sources holding them)
    type Case = (
        &'static str,
        &'static str,
        [&'static str; 2],
        Vec<(Value, Vec<&'static str>)>,
    );
    let cases: Vec<Case> = vec![
        (
            "payment.transfer",
            "payee_iban",
            ["mandate.payee", "registry.beneficiaries"],
            vec![
                (json!("NL91 ABNA 0417 1643 00"), vec!["mandate.payee"]),
                (json!(LANDLORD), vec!["registry.beneficiaries"]),
                (json!({"ref": "gym"}), vec!["registry.beneficiaries"]),
                (json!(ATTACKER_IBAN), vec![]),
                (json!(SANCTIONED), vec![]),
            ],
        ),
        (
            "payment.send",
            "recipient",
            ["mandate.recipient", "registry.counterparties"],
            vec![
                (json!("CA133012400231215421872"), vec!["mandate.recipient"]),
                (json!("Spotify"), vec!["registry.counterparties"]),
                (json!("landlord-42"), vec!["registry.counterparties"]),
                (json!("noah-sister"), vec![]),
                (json!("attacker-1"), vec![]),
            ],
        ),
        (
            "email.send",
            "to",
            ["mandate.recipients", "registry.contacts"],
            vec![
                (json!(["John.Doe@example.org"]), vec!["mandate.recipients"]),
                (json!(["sarah.connor@gmail.com"]), vec!["registry.contacts"]),
                (
                    json!(["john.doe@example.org", "sarah.connor@gmail.com"]),
                    vec!["both"],
                ),
                (json!(["olivia.chen@quantumleaf.io"]), vec![]),
                (json!(["mark.black-2134@gmail.com"]), vec![]),
            ],
        ),
    ];
    let proposal = |action: &str, param: &str, v: &Value, cents: i64| {
        if action == "email.send" {
            return json!({"action": action, "args": {param: v, "body": "the code is 463820"}});
        }
        let mut args = json!({"from_account": "emma-checking", "currency": "EUR",
            "amount": crate::base::Money::from_minor(cents).to_string(), "date": "2026-12-01"});
        if action == "payment.transfer" {
            args.as_object_mut().unwrap().remove("date");
        }
        args[param] = v.clone();
        json!({"action": action, "args": args})
    };
    let spec = |action: &str| {
        if action == "email.send" {
            return MandateSpec::for_pack("workspace", "emma", "emma", &["mail.send"])
                .claim("recipients", json!(["john.doe@example.org"]));
        }
        MandateSpec::bank("emma")
            .claim("payee", json!(["NL91ABNA0417164300"]))
            .claim("recipient", json!(["CA133012400231215421872"]))
    };
    // per case, (narrowed ALLOWs, refusals of a value from a removed source
    // the full mandate allows): neither side of the property may be vacuous
    let seen = std::cell::Cell::new([(0u32, 0u32); 3]);
    let count = |c: usize, allowed: bool| {
        let mut all = seen.get();
        if allowed {
            all[c].0 += 1;
        } else {
            all[c].1 += 1;
        }
        seen.set(all);
    };
    let mut runner = TestRunner::new(Config {
        cases: 192,
        ..Config::default()
    });
    runner
        .run(
            &(0..cases.len(), 1u8..4, 0usize..5, 1i64..90_000),
            |(c, mask, vi, cents)| {
                let (action, param, declared, values) = &cases[c];
                let kept: Vec<&str> = declared
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, s)| *s)
                    .collect();
                let (value, holders) = &values[vi];
                let p = proposal(action, param, value, cents);
                let full = decide(&gw, p.clone(), &w.mandate(spec(action)));
                let target = format!("{action}.{param}");
                let narrowed = decide(&gw, p, &w.mandate(spec(action).narrow(&target, &kept)));
                if narrowed.decision == Outcome::Allow {
                    count(c, true);
                    prop_assert_eq!(full.decision, Outcome::Allow);
                    prop_assert_eq!(narrowed.resolved.get(*param), full.resolved.get(*param));
                    let origins = match &narrowed.origins[*param] {
                        Value::Array(items) => items.clone(),
                        one => vec![one.clone()],
                    };
                    for o in origins {
                        let o = o.as_str().unwrap_or_default().to_string();
                        prop_assert!(
                            kept.iter().any(|k| o.starts_with(k)),
                            "origin {} not among {:?}",
                            o,
                            kept
                        );
                    }
                }
                // a list needs each member vouched for: `both` takes a
                // member from each source, so every source must be kept
                let vouched = if holders == &vec!["both"] {
                    kept.len() == declared.len()
                } else {
                    holders.iter().any(|h| kept.contains(h))
                };
                if !vouched {
                    if full.decision == Outcome::Allow {
                        count(c, false);
                    }
                    prop_assert_eq!(narrowed.decision, Outcome::Deny);
                    prop_assert_eq!(narrowed.stage.name(), "provenance");
                } else {
                    // a kept source still vouches: narrowing changes nothing
                    prop_assert_eq!(narrowed.decision, full.decision);
                }
                Ok(())
            },
        )
        .unwrap();
    for (c, (allowed, refused)) in seen.get().iter().enumerate() {
        assert!(
            *allowed > 0 && *refused > 0,
            "{}: {allowed} allowed, {refused} refused",
            cases[c].0
        );
    }
}

/// The receipt of a decision under a narrowed mandate records the
/// narrowing next to the mandate id, so that the chain alone says which
/// sources could vouch for each value; a mandate without one writes the
/// receipt as before (no `sources` key).
#[test]
fn a_receipt_records_the_mandates_narrowing() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let strict = w.mandate(
        MandateSpec::bank("emma").narrow("payment.transfer.payee_iban", &["mandate.payee"]),
    );
    let d = decide(&gw, transfer(LANDLORD, json!("10.00")), &strict);
    assert_eq!(d.decision, Outcome::Deny);
    let d = decide(&gw, transfer(LANDLORD, json!("10.00")), &w.emma());
    assert_eq!(d.decision, Outcome::Allow);
    let receipts = gw.store().receipts().unwrap();
    let [.., narrowed, plain] = receipts.as_slice() else {
        panic!("two receipts");
    };
    assert_eq!(
        narrowed.body["mandate"]["sources"],
        json!({"payment.transfer.payee_iban": ["mandate.payee"]})
    );
    assert!(
        narrowed.body["reason"]
            .as_str()
            .unwrap()
            .contains("not from a source this mandate allows")
    );
    assert!(plain.body["mandate"].get("sources").is_none());
}
