//! Parent and child mandates, adversarially (issue 25): for random
//! parents, children and proposals, a child never allows what its parent
//! does not; a child that widens anything is always refused when issued
//! and, forged with a key that may sign, denied at decision; children
//! together never spend more than their parent's budget.

use crate::common::{ATTACKER_IBAN, LANDLORD, MandateSpec, SUPPLIER, TestWorld, now, transfer};
use intentplane::gateway::{
    ChildError, ChildRequest, Gateway, Input, MandateToken, Outcome, Widening,
};
use intentplane::store::memory::MemoryStore;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};
use std::sync::Arc;

const GYM: &str = "FR7630006000011234567890189";
/// Emma's beneficiaries (landlord, gym), a payee of Noah's, and two no one
/// of hers has saved.
const POOL: [&str; 5] = [LANDLORD, GYM, "NL91ABNA0417164300", SUPPLIER, ATTACKER_IBAN];
const SCOPES: [&str; 3] = ["payments.write", "account.write", "admin.write"];

fn cases() -> u32 {
    std::env::var("IPC_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(24)
}

fn pick<T: Copy>(all: &[T], mask: u8) -> Vec<T> {
    all.iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .map(|(_, x)| *x)
        .collect()
}

#[derive(Clone, Debug)]
struct ParentCase {
    payees: u8,
    scopes: u8,
    budget: i64,
    calls: u64,
    ttl: i64,
    strict: bool,
}

fn a_parent() -> impl Strategy<Value = ParentCase> {
    (
        0u8..32,
        1u8..4,
        0i64..300_000,
        1u64..8,
        600i64..7200,
        any::<bool>(),
    )
        .prop_map(|(payees, scopes, budget, calls, ttl, strict)| ParentCase {
            payees,
            scopes,
            budget,
            calls,
            ttl,
            strict,
        })
}

fn parent_token(tw: &TestWorld, p: &ParentCase) -> MandateToken {
    let mut spec = MandateSpec::bank("emma");
    spec.claims
        .insert("payee".into(), json!(pick(&POOL, p.payees)));
    spec.scopes = pick(&SCOPES[..2], p.scopes)
        .into_iter()
        .map(String::from)
        .collect();
    spec.budget = p.budget;
    spec.calls = p.calls;
    spec.ttl = p.ttl;
    if p.strict {
        spec = spec.narrow("payment.transfer.payee_iban", &["mandate.payee"]);
    }
    // forged: the pool's payees are signed in the spellings drawn
    serde_json::from_value(tw.forge_mandate(spec)).unwrap()
}

#[derive(Clone, Debug)]
struct ChildCase {
    payees: u8,
    scopes: u8,
    budget: Option<i64>,
    calls: Option<u64>,
    ttl: Option<i64>,
    other_account: bool,
}

fn a_child() -> impl Strategy<Value = ChildCase> {
    (
        0u8..32,
        0u8..8,
        proptest::option::of(0i64..400_000),
        proptest::option::of(1u64..12),
        proptest::option::of(60i64..9000),
        prop::bool::weighted(0.1),
    )
        .prop_map(
            |(payees, scopes, budget, calls, ttl, other_account)| ChildCase {
                payees,
                scopes,
                budget,
                calls,
                ttl,
                other_account,
            },
        )
}

/// `c` cut down to what `p` allows (payees, scopes, budget, calls, expiry,
/// the account): a child that should be issued. Independent random
/// children almost always widen somewhere, so without this the property
/// would seldom see an issued child.
fn within(p: &ParentCase, c: ChildCase) -> ChildCase {
    ChildCase {
        payees: c.payees & p.payees,
        scopes: c.scopes & p.scopes,
        budget: c.budget.map(|b| b.min(p.budget)),
        calls: c.calls.map(|n| n.min(p.calls)),
        ttl: c.ttl.map(|t| t.min(p.ttl - 60)),
        other_account: false,
    }
}

fn request(c: &ChildCase) -> ChildRequest {
    let mut claims: Vec<(String, Value)> = pick(&POOL, c.payees)
        .into_iter()
        .map(|p| ("payee".to_string(), json!(p)))
        .collect();
    if c.other_account {
        claims.push(("account".into(), json!("noah-checking")));
    }
    ChildRequest {
        claims,
        scopes: pick(&SCOPES, c.scopes)
            .into_iter()
            .map(String::from)
            .collect(),
        budget: c.budget,
        calls: c.calls,
        expires_at: c.ttl.map(|t| now() + t),
        ..Default::default()
    }
}

fn fresh(gw: &Gateway, tw: &TestWorld) -> Gateway {
    gw.fork(tw.world(), Arc::new(MemoryStore::new()))
}

fn decide(gw: &Gateway, proposal: &Value, token: &MandateToken) -> Outcome {
    gw.decide(&Input {
        proposal: proposal.clone(),
        mandate: Some(serde_json::to_value(token).unwrap()),
        approvals: vec![],
        malformed: None,
    })
    .unwrap()
    .decision
}

/// A child never allows what its parent does not: each proposal decided on
/// a fresh store under the issued child (and its child), and under the
/// parent; an ALLOW under the child is an ALLOW under the parent, a
/// PENDING never a DENY. And a child that widens is never issued, its
/// widening named.
#[test]
fn a_child_never_allows_what_its_parent_does_not() {
    let tw = TestWorld::with_packs(&["bank"]);
    let gw = tw.gateway();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        ..Config::default()
    });
    let proposals = proptest::collection::vec((0usize..5, 1i64..200_000), 1..4);
    let issued = std::cell::Cell::new(0u32);
    runner
        .run(
            &(a_parent(), a_child(), any::<bool>(), a_child(), proposals),
            |(p, c, cut, g, props)| {
                let c = if cut { within(&p, c) } else { c };
                let parent = parent_token(&tw, &p);
                let child = match gw.issue_child(&parent, &request(&c), tw.key("emma")) {
                    Ok(t) => t,
                    Err(ChildError::Widens { widens, .. }) => {
                        prop_assert!(!widens.is_empty());
                        return Ok(());
                    }
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                };
                issued.set(issued.get() + 1);
                // a grandchild, issued by the issuer this time
                let chain = match gw.issue_child(&child, &request(&g), &tw.issuer) {
                    Ok(t) => vec![child, t],
                    Err(ChildError::Widens { .. }) => vec![child],
                    Err(e) => return Err(TestCaseError::fail(e.to_string())),
                };
                for (who, cents) in props {
                    let amount = format!("{}.{:02}", cents / 100, cents % 100);
                    let proposal = transfer(POOL[who], json!(amount));
                    let under_parent = decide(&fresh(&gw, &tw), &proposal, &parent);
                    for t in &chain {
                        let under_child = decide(&fresh(&gw, &tw), &proposal, t);
                        match under_child {
                            Outcome::Allow => prop_assert_eq!(
                                under_parent,
                                Outcome::Allow,
                                "{} allowed under the child only",
                                proposal
                            ),
                            Outcome::Pending => prop_assert_ne!(
                                under_parent,
                                Outcome::Deny,
                                "{} pending under the child, denied under the parent",
                                proposal
                            ),
                            Outcome::Deny => {}
                            Outcome::Shadow => {
                                return Err(TestCaseError::fail("no shadow in this world"));
                            }
                        }
                    }
                }
                Ok(())
            },
        )
        .unwrap();
    // the property is about issued children: some must have been
    assert!(issued.get() > 0, "no child was issued in {} cases", cases());
    eprintln!("{} of {} cases issued a child", issued.get(), cases());
}

#[derive(Clone, Debug)]
enum Widen {
    Scope,
    Budget(i64),
    Calls(u64),
    Expiry(i64),
    Payee(usize),
    Account,
}

fn a_widening() -> impl Strategy<Value = Widen> {
    prop_oneof![
        Just(Widen::Scope),
        (1i64..100_000).prop_map(Widen::Budget),
        (1u64..5).prop_map(Widen::Calls),
        (1i64..5000).prop_map(Widen::Expiry),
        (3usize..5).prop_map(Widen::Payee),
        Just(Widen::Account),
    ]
}

/// A child that widens any one thing is refused when issued, naming that
/// thing; the same child forged (signed by the user's own key, which may
/// sign a child) is a DENY when used, whatever it proposes.
#[test]
fn a_widening_child_is_always_refused() {
    let tw = TestWorld::with_packs(&["bank"]);
    let gw = tw.gateway();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        ..Config::default()
    });
    runner
        .run(&(a_parent(), a_widening(), 0usize..5), |(mut p, w, who)| {
            // a parent naming neither outsider, with both scopes
            p.payees &= 0b00111;
            p.scopes = 0b11;
            let parent = parent_token(&tw, &p);
            let pm = &parent.mandate;
            let mut req = ChildRequest {
                claims: vec![("payee".into(), json!(LANDLORD))],
                scopes: vec!["payments.write".into()],
                budget: Some(pm.budget.amount),
                calls: Some(pm.budget.calls),
                expires_at: Some(pm.expires_at),
                ..Default::default()
            };
            match &w {
                Widen::Scope => req.scopes.push("admin.write".into()),
                Widen::Budget(b) => req.budget = Some(pm.budget.amount + b),
                Widen::Calls(c) => req.calls = Some(pm.budget.calls + c),
                Widen::Expiry(e) => req.expires_at = Some(pm.expires_at + e),
                Widen::Payee(i) => req.claims.push(("payee".into(), json!(POOL[*i]))),
                Widen::Account => req.claims.push(("account".into(), json!("noah-checking"))),
            }
            let draft = gw.draft_child(&parent, &req).unwrap();
            let named = draft.widens.iter().any(|x| {
                matches!(
                    (&w, x),
                    (Widen::Scope, Widening::Scope { .. })
                        | (Widen::Budget(_), Widening::Budget { .. })
                        | (Widen::Calls(_), Widening::Calls { .. })
                        | (Widen::Expiry(_), Widening::Expiry { .. })
                        | (Widen::Payee(_), Widening::Claim { .. })
                        | (Widen::Account, Widening::Claim { .. })
                )
            });
            prop_assert!(named, "{:?} not named in {:?}", w, draft.widens);
            let refused = gw.issue_child(&parent, &req, tw.key("emma"));
            prop_assert!(
                matches!(refused, Err(ChildError::Widens { .. })),
                "{:?} issued",
                w
            );
            // forged: signed with the user's key all the same
            let msg = draft.signing_text().unwrap();
            let k = tw.key("emma");
            let forged = MandateToken {
                mandate: draft.mandate.clone(),
                key_id: k.public().id(),
                signature: k.sign(msg.as_bytes()),
                ancestors: parent.lineage(),
            };
            let proposal = transfer(POOL[who], json!("1.00"));
            let d = decide(&fresh(&gw, &tw), &proposal, &forged);
            prop_assert_eq!(d, Outcome::Deny, "{:?} forged and used", w);
            Ok(())
        })
        .unwrap();
}

/// Children together never spend more than their parent: random children
/// (and grandchildren) of one parent, random transfers under them on one
/// store; the parent's spend is the sum of its descendants' ALLOWs and
/// never above its budget, nor its calls above its cap, and the store
/// verifies against the receipts.
#[test]
fn children_together_never_exceed_the_parent() {
    let tw = TestWorld::with_packs(&["bank"]);
    let gw = tw.gateway();
    let mut runner = TestRunner::new(Config {
        cases: cases(),
        ..Config::default()
    });
    let budgets = proptest::collection::vec((1i64..150_000, any::<bool>()), 2..5);
    let spends = proptest::collection::vec((0usize..8, 1i64..90_000), 1..12);
    runner
        .run(
            &(10_000i64..200_000, 2u64..8, budgets, spends),
            |(budget, calls, children, spends)| {
                let g = fresh(&gw, &tw);
                let mut spec = MandateSpec::bank("emma");
                spec.budget = budget;
                spec.calls = calls;
                let parent: MandateToken = serde_json::from_value(tw.mandate(spec)).unwrap();
                let mut tokens: Vec<MandateToken> = vec![];
                for (b, nested) in children {
                    let req = ChildRequest {
                        claims: vec![("payee".into(), json!(LANDLORD))],
                        budget: Some(b.min(budget)),
                        ..Default::default()
                    };
                    let under = match (nested, tokens.first()) {
                        (true, Some(first)) => first.clone(),
                        _ => parent.clone(),
                    };
                    match g.issue_child(&under, &req, tw.key("emma")) {
                        Ok(t) => tokens.push(t),
                        Err(ChildError::Widens { .. }) => {}
                        Err(e) => return Err(TestCaseError::fail(e.to_string())),
                    }
                }
                prop_assume!(!tokens.is_empty());
                let mut allowed: i64 = 0;
                let mut n = 0u64;
                for (i, cents) in spends {
                    let t = &tokens[i % tokens.len()];
                    let amount = format!("{}.{:02}", cents / 100, cents % 100);
                    if decide(&g, &transfer(LANDLORD, json!(amount)), t) == Outcome::Allow {
                        allowed += cents;
                        n += 1;
                    }
                }
                let spent = g
                    .store()
                    .transaction(&mut |tx| {
                        let s = tx.spent(&parent.mandate.id)?;
                        Ok(json!([s.amount, s.calls]))
                    })
                    .unwrap();
                prop_assert_eq!(spent, json!([allowed, n]));
                prop_assert!(allowed <= budget, "{} spent of {}", allowed, budget);
                prop_assert!(n <= calls);
                let snap = g.store().snapshot().unwrap();
                prop_assert!(intentplane::store::verify_store(&snap, None).is_ok());
                Ok(())
            },
        )
        .unwrap();
}
