//! Cedar generation: snapshots of the schema, policies and per-action policy
//! ids for every fixture under tests/fixtures/codegen/ and every shipped
//! pack (adding either adds a test); diagnostics located at the pack or
//! `.cedar` line; and decisions of the generated policies through Cedar's
//! own Authorizer.

use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, Request, RestrictedExpression, Schema,
};
use intentplane::bundle::Bundle;
use intentplane::bundle::Generated;
use intentplane::check::{check_path, check_text};
use intentplane::codegen::{self, CedarFile, PackInput, Problem};
use intentplane::diagnostics::{PackDiagnostic, render_human};
use intentplane::ir::{self, Type};
use std::collections::HashMap;
use std::path::Path;
use std::str::FromStr;

/// A pack path as the checker sees it, with its `.cedar` file if any.
fn input(path: &Path) -> PackInput {
    let c = check_path(path);
    assert!(!c.has_errors(), "{}: {:?}", c.file, c.diagnostics);
    let pack = c.pack.clone().expect("a pack");
    let cedar = codegen::custom_policy_path(Path::new(&c.file));
    let custom = std::fs::read_to_string(&cedar).ok().map(|text| CedarFile {
        file: cedar.display().to_string(),
        text,
    });
    PackInput {
        pack,
        source: c.source,
        custom,
    }
}

fn input_text(file: &str, text: &str) -> PackInput {
    let c = check_text(file, text);
    assert!(!c.has_errors(), "{file}: {:?}", c.diagnostics);
    PackInput {
        pack: c.pack.expect("a pack"),
        source: text.to_string(),
        custom: None,
    }
}

/// The schema, every policy, and which policies each action evaluates.
fn render(g: &Generated) -> String {
    let mut s = g.schema.clone();
    s.push_str("\n// ---- policies\n\n");
    for p in &g.policies {
        s.push_str(&p.text);
        s.push('\n');
    }
    s.push_str("// ---- table: policies per action\n");
    for a in &g.table.actions {
        s.push_str(&format!("{} ({})\n", a.action.name, a.cedar_action));
        for id in &a.policy_ids {
            s.push_str(&format!("  {id}\n"));
        }
        for (r, id) in a.action.rules.iter().zip(&a.rule_policy_ids) {
            s.push_str(&format!("  rule {:?} -> {id}\n", r.reason));
        }
    }
    s
}

fn render_problems(problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| render_human(&p.diagnostic, &p.file, &p.source))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn fixtures_snapshot() {
    insta::glob!("../fixtures/codegen", "*.ipc", |path| {
        let g = codegen::generate(&[input(path)]).unwrap_or_else(|p| panic!("{p:?}"));
        check_invariants(&g);
        insta::with_settings!({
            snapshot_path => "../../snapshots/codegen",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(render(&g));
        });
    });
}

#[test]
fn shipped_packs_snapshot() {
    insta::glob!("../../packs", "*/pack.ipc", |path| {
        let g = codegen::generate(&[input(path)]).unwrap_or_else(|p| panic!("{p:?}"));
        check_invariants(&g);
        insta::with_settings!({
            snapshot_path => "../../snapshots/codegen",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(render(&g));
        });
    });
}

#[test]
fn custom_policies_snapshot() {
    let g = codegen::generate(&[input(Path::new("tests/fixtures/codegen/custom"))])
        .unwrap_or_else(|p| panic!("{p:?}"));
    check_invariants(&g);
    insta::with_settings!({
        snapshot_path => "../../snapshots/codegen",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("custom_policy_cedar", render(&g));
    });
    let ids = |a: &str| g.table.action(a).unwrap().policy_ids.clone();
    // `action in [...]` lists both payment actions, `action` (any) all three
    assert!(ids("pay.one").contains(&"custom/mandate-payees-only".to_string()));
    assert!(ids("pay.two").contains(&"custom/mandate-payees-only".to_string()));
    assert!(!ids("note.write").contains(&"custom/mandate-payees-only".to_string()));
    assert!(ids("pay.two").contains(&"custom/custom/2".to_string()));
    assert!(!ids("pay.one").contains(&"custom/custom/2".to_string()));
    for a in ["pay.one", "pay.two", "note.write"] {
        assert!(ids(a).contains(&"custom/custom/3".to_string()), "{a}");
    }
    let p = g
        .policies
        .iter()
        .find(|p| p.id == "custom/custom/3")
        .unwrap();
    assert_eq!(p.source, "custom/policy.cedar:16");
    assert!(
        p.text
            .starts_with("@id(\"custom/custom/3\")\n@source(\"custom/policy.cedar:16\")\n")
    );
}

/// Every policy has a unique id, an `@id` equal to it and a `@source`; every
/// action lists its permit and one policy per rule.
fn check_invariants(g: &Generated) {
    let mut seen = std::collections::HashSet::new();
    for p in &g.policies {
        assert!(seen.insert(p.id.clone()), "duplicate id {}", p.id);
        let parsed =
            cedar_policy::Policy::parse(Some(cedar_policy::PolicyId::new(&p.id)), &p.text).unwrap();
        assert_eq!(parsed.annotation("id"), Some(p.id.as_str()));
        assert_eq!(parsed.annotation("source"), Some(p.source.as_str()));
        assert!(!p.source.starts_with('/'), "absolute path in {}", p.source);
    }
    for a in &g.table.actions {
        let permit = format!("{}/{}/permit", a.pack, a.action.name);
        assert!(a.policy_ids.contains(&permit));
        assert_eq!(a.rule_policy_ids.len(), a.action.rules.len());
        for id in &a.rule_policy_ids {
            assert!(a.policy_ids.contains(id), "{id}");
        }
    }
}

// ---- diagnostics ---------------------------------------------------------

#[test]
fn hand_written_policy_failing_validation_points_at_its_cedar_line() {
    let err =
        codegen::generate(&[input(Path::new("tests/fixtures/codegen/custom_bad"))]).unwrap_err();
    assert_eq!(err.len(), 1, "{}", render_problems(&err));
    let p = &err[0];
    assert_eq!(p.file, "tests/fixtures/codegen/custom_bad/policy.cedar");
    assert_eq!(p.line(), Some(7));
    assert!(
        matches!(&p.diagnostic, PackDiagnostic::CedarValidation { policy, .. } if policy == "custom_bad/custom/2")
    );
    insta::with_settings!({
        snapshot_path => "../../snapshots/codegen",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("custom_bad_validation", render_problems(&err));
    });
}

#[test]
fn hand_written_policy_syntax_error_points_at_its_cedar_line() {
    let err =
        codegen::generate(&[input(Path::new("tests/fixtures/codegen/custom_syntax"))]).unwrap_err();
    assert_eq!(err.len(), 1, "{}", render_problems(&err));
    assert_eq!(err[0].line(), Some(4));
    assert_eq!(err[0].diagnostic.code_str(), "ipc::cedar_syntax");
}

const SMALL: &str = r#"pack small version "1.0.0" "one action"
mandate { payee: set<Iban> }
action pay.single "Pay" {
  scope    pay.write
  executor external
  param payee:  Iban  critical from mandate.payee
  param amount: Money range 0.01 .. 100.00
  param urgent: Bool
  forbid  "too much" when amount > 50.00
  step_up "urgent"   when urgent
}
"#;

#[test]
fn generated_policy_failing_validation_points_at_the_rule_line() {
    // an IR the checker would refuse: a Bool compared with money
    let mut inp = input_text("small/pack.ipc", SMALL);
    let rule = &mut inp.pack.actions[0].rules[0];
    rule.when = Some(ir::Expr::Binary {
        op: ir::BinOp::Gt,
        lhs: Box::new(ir::Expr::Param {
            name: "urgent".into(),
        }),
        rhs: Box::new(ir::Expr::Lit {
            value: ir::Value::Money(5000),
        }),
    });
    let err = codegen::generate(&[inp]).unwrap_err();
    assert_eq!(err.len(), 1, "{}", render_problems(&err));
    assert_eq!(err[0].file, "small/pack.ipc");
    assert_eq!(err[0].line(), Some(9));
    assert!(matches!(
        &err[0].diagnostic,
        PackDiagnostic::CedarValidation { policy, .. } if policy == "small/pay.single/forbid/too-much"
    ));
    insta::with_settings!({
        snapshot_path => "../../snapshots/codegen",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("generated_validation_failure", render_problems(&err));
    });
}

#[test]
fn store_reads_in_rules_are_an_internal_error_not_a_panic() {
    let mut inp = input_text("small/pack.ipc", SMALL);
    inp.pack.actions[0].rules[1].when = Some(ir::Expr::Claim {
        name: "payee".into(),
    });
    let err = codegen::generate(&[inp]).unwrap_err();
    assert_eq!(err[0].diagnostic.code_str(), "ipc::codegen_internal");
    assert_eq!(err[0].line(), Some(10));
}

#[test]
fn names_the_generator_reserves_are_refused_at_their_line() {
    let text = SMALL.replace(
        "param urgent: Bool",
        "param approval_level: Int range 0 .. 2\n  param urgent: Bool",
    );
    let err = codegen::generate(&[input_text("small/pack.ipc", &text)]).unwrap_err();
    assert_eq!(err.len(), 1, "{}", render_problems(&err));
    assert_eq!(err[0].diagnostic.code_str(), "ipc::reserved_name");
    assert_eq!(err[0].line(), Some(8));
    let text = SMALL.replace("pack small", "pack like");
    let err = codegen::generate(&[input_text("like/pack.ipc", &text)]).unwrap_err();
    assert_eq!(err[0].diagnostic.code_str(), "ipc::reserved_name");
    assert_eq!(err[0].line(), Some(1));
}

#[test]
fn two_packs_cannot_share_a_name_or_an_action() {
    let a = input_text("a/pack.ipc", SMALL);
    let b = input_text(
        "b/pack.ipc",
        &SMALL.replace("action pay.single", "action pay.later"),
    );
    let err = codegen::generate(&[a.clone(), b]).unwrap_err();
    assert_eq!(err[0].diagnostic.code_str(), "ipc::duplicate_pack");
    let c = input_text("c/pack.ipc", &SMALL.replace("pack small", "pack other"));
    let err = codegen::generate(&[a.clone(), c]).unwrap_err();
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].diagnostic.code_str(), "ipc::duplicate_action");
    assert_eq!(err[0].line(), Some(3));
    // reordering the packs does not change the output
    let d = input_text(
        "d/pack.ipc",
        &SMALL
            .replace("pack small", "pack zeta")
            .replace("pay.single", "pay.z"),
    );
    let one = codegen::generate(&[a.clone(), d.clone()]).unwrap();
    let two = codegen::generate(&[d, a]).unwrap();
    assert_eq!(render(&one), render(&two));
}

// ---- decisions through Cedar's Authorizer ----------------------------------

/// A Cedar value of an IR type that is neither true nor interesting.
fn zero(t: &Type) -> RestrictedExpression {
    match t {
        Type::Bool => RestrictedExpression::new_bool(false),
        Type::List(_) | Type::Set(_) => RestrictedExpression::new_set(vec![]),
        t if t.is_numeric() => RestrictedExpression::new_long(0),
        _ => RestrictedExpression::new_string(String::new()),
    }
}

enum V {
    S(&'static str),
    L(i64),
    B(bool),
    Set(Vec<&'static str>),
}

impl V {
    fn expr(&self) -> RestrictedExpression {
        match self {
            V::S(s) => RestrictedExpression::new_string(s.to_string()),
            V::L(n) => RestrictedExpression::new_long(*n),
            V::B(b) => RestrictedExpression::new_bool(*b),
            V::Set(items) => RestrictedExpression::new_set(
                items
                    .iter()
                    .map(|s| RestrictedExpression::new_string(s.to_string())),
            ),
        }
    }
}

struct Decider {
    bundle: Bundle,
    cedar: intentplane::bundle::CedarBundle,
}

impl Decider {
    fn new(g: Generated) -> Self {
        let bundle = Bundle::from_generated(g).unwrap();
        let cedar = bundle.cedar().unwrap();
        Decider { bundle, cedar }
    }

    /// Evaluates one action at approval levels 0, 1, 2 over only its own
    /// policies (as the gateway does); returns the smallest level that
    /// permits and, at level 2, the ids of the determining policies. Any
    /// evaluation error fails the test.
    fn decide(&self, action: &str, values: &[(&str, V)]) -> (Option<u8>, Vec<String>) {
        let a = self.bundle.table.action(action).unwrap();
        let pack = self.bundle.table.pack(&a.pack).unwrap();
        let given: HashMap<&str, &V> = values.iter().map(|(k, v)| (*k, v)).collect();
        let mut smallest = None;
        let mut reasons = vec![];
        for level in 0..=2u8 {
            let mut pairs: Vec<(String, RestrictedExpression)> = vec![];
            let named = a
                .action
                .params
                .iter()
                .map(|p| (&p.name, &p.ty))
                .chain(a.action.facts.iter().map(|f| (&f.name, &f.ty)));
            for (name, ty) in named {
                let v = given
                    .get(name.as_str())
                    .map(|v| v.expr())
                    .unwrap_or_else(|| zero(ty));
                pairs.push((name.clone(), v));
            }
            let critical: Vec<(String, RestrictedExpression)> = a
                .action
                .params
                .iter()
                .filter(|p| p.critical)
                .map(|p| {
                    (
                        p.name.clone(),
                        RestrictedExpression::new_string(p.sources[0].to_string()),
                    )
                })
                .collect();
            if !critical.is_empty() {
                pairs.push((
                    "provenance".into(),
                    RestrictedExpression::new_record(critical).unwrap(),
                ));
            }
            pairs.push((
                "approval_level".into(),
                RestrictedExpression::new_long(level.into()),
            ));
            let now = given
                .get("now")
                .map(|v| v.expr())
                .unwrap_or(RestrictedExpression::new_long(1_750_000_000));
            pairs.push(("now".into(), now));
            let context = Context::from_pairs(pairs).unwrap();
            let principal =
                EntityUid::from_str(&format!("{}::\"alice\"", pack.principal_type)).unwrap();
            let resource = EntityUid::from_str(&format!("{}::\"t1\"", pack.resource_type)).unwrap();
            let action_uid = EntityUid::from_str(&a.cedar_action).unwrap();
            // with the schema: the context we build must match it exactly
            let request = Request::new(
                principal,
                action_uid,
                resource,
                context,
                Some(&self.cedar.schema),
            )
            .unwrap_or_else(|e| panic!("{action}: request does not match the schema: {e}"));
            let set = &self.cedar.by_action[action];
            let response = Authorizer::new().is_authorized(&request, set, &Entities::empty());
            let errors: Vec<String> = response
                .diagnostics()
                .errors()
                .map(|e| e.to_string())
                .collect();
            assert!(errors.is_empty(), "{action}: evaluation errors {errors:?}");
            if response.decision() == Decision::Allow && smallest.is_none() {
                smallest = Some(level);
            }
            if level == 2 {
                reasons = response
                    .diagnostics()
                    .reason()
                    .map(|id| id.to_string())
                    .collect();
                reasons.sort();
            }
        }
        (smallest, reasons)
    }
}

fn schema_of(g: &Generated) -> Schema {
    Schema::from_cedarschema_str(&g.schema).unwrap().0
}

#[test]
fn bank_transfer_decisions() {
    let g = codegen::generate(&[input(Path::new("packs/bank"))]).unwrap();
    let _ = schema_of(&g);
    let d = Decider::new(g);
    let transfer = |amount: i64, sanctioned: bool| {
        d.decide(
            "payment.transfer",
            &[
                ("amount", V::L(amount)),
                ("currency", V::S("EUR")),
                ("sanctioned", V::B(sanctioned)),
            ],
        )
    };
    assert_eq!(transfer(50_000, false).0, Some(0), "500.00 needs nothing");
    assert_eq!(
        transfer(100_000, false).0,
        Some(0),
        "1,000.00 is not above the step-up"
    );
    assert_eq!(
        transfer(100_001, false).0,
        Some(1),
        "1,000.01 needs step-up"
    );
    assert_eq!(
        transfer(500_000, false).0,
        Some(1),
        "5,000.00 needs step-up"
    );
    let (level, reasons) = transfer(5_000_000, false);
    assert_eq!(level, None, "50,000.00 is denied at every level");
    assert_eq!(
        reasons,
        vec!["bank/payment.transfer/forbid/hard-cap".to_string()]
    );
    // the table maps the Cedar reason back to the rule
    let a = d.bundle.table.action("payment.transfer").unwrap();
    assert_eq!(a.rule_of(&reasons[0]).unwrap().reason, "hard cap");
    assert_eq!(transfer(50_000, true).0, None, "sanctioned payee is denied");
    assert_eq!(
        d.decide("user.update_password", &[]).0,
        Some(1),
        "account changes always need the user"
    );
}

#[test]
fn expressions_fixture_decisions() {
    let g =
        codegen::generate(&[input(Path::new("tests/fixtures/codegen/expressions.ipc"))]).unwrap();
    let d = Decider::new(g);
    let day = 86_400;
    let now = 1_750_000_000;
    // the forbids that hold at level 2 (an `always` forbid makes every
    // decision a denial, so the reasons show which conditions held)
    let held = |extra: Vec<(&'static str, V)>| -> Vec<String> {
        let mut v = vec![
            ("amount", V::L(1_000)),
            ("currency", V::S("EUR")),
            ("channel", V::S("sepa")),
            ("labels", V::Set(vec!["a"])),
            ("due", V::L(now)),
            ("sent_at", V::L(now)),
            ("now", V::L(now)),
        ];
        v.extend(extra);
        let (level, reasons) = d.decide("pay.out", &v);
        assert_eq!(level, None, "`forbid ... always` denies at every level");
        reasons
            .into_iter()
            .filter(|r| r != "expr/pay.out/forbid/never-on-this-action")
            .map(|r| r.trim_start_matches("expr/pay.out/").to_string())
            .collect()
    };
    let none: Vec<String> = vec![];
    assert_eq!(held(vec![]), none);
    assert_eq!(held(vec![("labels", V::Set(vec![]))]), ["forbid/no-labels"]);
    assert_eq!(
        held(vec![("currency", V::S("GBP")), ("channel", V::S("x"))]),
        ["forbid/currency"]
    );
    assert_eq!(
        held(vec![("currency", V::S("GBP")), ("channel", V::S("swift"))]),
        none
    );
    assert_eq!(
        held(vec![
            ("due", V::L(now - 31 * day)),
            ("sent_at", V::L(now - 31 * day))
        ]),
        ["forbid/late"]
    );
    assert_eq!(
        held(vec![
            ("due", V::L(now - 29 * day)),
            ("sent_at", V::L(now - 29 * day))
        ]),
        none
    );
    assert_eq!(
        held(vec![("sent_at", V::L(now + 3 * day))]),
        ["forbid/late"]
    );
    assert_eq!(
        held(vec![
            ("labels", V::Set(vec!["urgent"])),
            ("amount", V::L(500_000))
        ]),
        ["forbid/label-urgent-cap"]
    );
    assert_eq!(
        held(vec![
            ("labels", V::Set(vec!["urgent"])),
            ("amount", V::L(499_999))
        ]),
        none
    );
    assert_eq!(
        held(vec![("blocked", V::B(true))]),
        ["forbid/blocked-payee"]
    );
}

#[test]
fn every_shipped_action_evaluates_without_errors() {
    let inputs: Vec<PackInput> = std::fs::read_dir("packs")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pack.ipc").is_file())
        .map(|p| input(&p))
        .collect();
    assert!(!inputs.is_empty());
    let g = codegen::generate(&inputs).unwrap_or_else(|p| panic!("{}", render_problems(&p)));
    let names: Vec<String> = g
        .table
        .actions
        .iter()
        .map(|a| a.action.name.clone())
        .collect();
    let d = Decider::new(g);
    for name in names {
        // default values: the decision itself varies, errors must not
        let _ = d.decide(&name, &[]);
    }
}
