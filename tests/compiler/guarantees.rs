//! Proven guarantees (issue 23): `ipc build` proves every `guarantee` of a
//! pack with cvc5 and fails with a counterexample scenario; the scenario,
//! added to the pack, fails as the guarantee says until the pack is fixed.
// the proofs need the solver (`solver`): without it only the fail-closed test runs
#![cfg_attr(not(feature = "solver"), allow(dead_code))]

#[cfg(feature = "solver")]
use crate::common::copy_dir;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SIBLING: &str = "tests/fixtures/guarantee/sibling";

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run ipc")
}

fn text(out: &Output) -> String {
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `ipc build --format json` of these packs: the exit code and the report.
fn build_json(paths: &[&Path], out: &Path) -> (i32, Value) {
    let mut args: Vec<String> = vec!["build".into()];
    args.extend(paths.iter().map(|p| p.display().to_string()));
    args.extend(["-o".into(), out.display().to_string()]);
    args.extend(["--format".into(), "json".into()]);
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = run(&refs, &[]);
    let doc: Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&o)));
    (o.status.code().unwrap_or(-1), doc)
}

/// `(action, outcome)` of every proof of a guarantee.
fn outcomes(doc: &Value, guarantee: &str) -> Vec<(String, String)> {
    doc["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["guarantee"] == guarantee)
        .map(|p| {
            (
                p["action"].as_str().unwrap().to_string(),
                p["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

#[cfg(feature = "solver")]
#[test]
fn a_violated_guarantee_fails_the_build_with_a_counterexample_scenario() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle.json");
    let out = run(&["build", SIBLING, "-o", bundle.to_str().unwrap()], &[]);
    let shown = text(&out).replace(bundle.to_str().unwrap(), "BUNDLE");
    assert!(shown.starts_with("exit: 1\n"), "{shown}");
    assert!(
        !bundle.exists(),
        "a bundle was written despite a violated guarantee"
    );
    insta::with_settings!({
        snapshot_path => "../../snapshots/cli",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!("build_guarantee_violated", shown);
    });
}

#[cfg(feature = "solver")]
/// "every action with payee_iban: Iban" covers the sibling that forgot the
/// rule, and an action added later without editing the guarantee.
#[test]
fn a_guarantee_over_every_action_with_a_parameter_catches_a_rule_missing_on_a_sibling() {
    let dir = tempfile::tempdir().unwrap();
    let (code, doc) = build_json(&[&repo(SIBLING)], &dir.path().join("b.json"));
    assert_eq!(code, 1);
    assert_eq!(doc["ok"], false);
    assert_eq!(
        outcomes(&doc, "a blocked payee is never paid"),
        pairs(&[
            ("payment.transfer", "proven"),
            ("payment.refund", "violated")
        ])
    );
    // the step-up is on both: that guarantee holds everywhere
    assert_eq!(
        outcomes(&doc, "above 500.00 the user approves"),
        pairs(&[("payment.transfer", "proven"), ("payment.refund", "proven")])
    );
    let refund = &doc["guarantees"][1];
    assert_eq!(refund["decision"], "ALLOW");
    let ctx = &refund["counterexample"]["context"];
    assert_eq!(ctx["payee_iban in registry.blocked"], true, "{ctx}");

    // an action added later in scope is covered as it is written
    let pack = dir.path().join("sibling");
    copy_dir(&repo(SIBLING), &pack);
    let file = pack.join("pack.ipc");
    let mut spec = std::fs::read_to_string(&file).unwrap();
    spec.push_str(
        r#"
action payment.tip "Tip a courier" {
  scope    payments.write
  budget   amount
  executor external
  param payee_iban: Iban  critical from mandate.payee
  param amount:     Money range 0.01 .. 20.00
}
"#,
    );
    std::fs::write(&file, spec).unwrap();
    let (_, doc) = build_json(&[&pack], &dir.path().join("b2.json"));
    assert_eq!(
        outcomes(&doc, "a blocked payee is never paid"),
        pairs(&[
            ("payment.transfer", "proven"),
            ("payment.refund", "violated"),
            ("payment.tip", "violated")
        ])
    );
}

#[cfg(feature = "solver")]
/// The counterexample, added to the pack's scenarios, fails with the
/// decision the solver found; once the rule is added the build proves the
/// guarantee and the same scenario passes.
#[test]
fn the_counterexample_scenario_fails_until_the_pack_keeps_the_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("sibling");
    copy_dir(&repo(SIBLING), &pack);
    let (_, doc) = build_json(&[&pack], &dir.path().join("b.json"));
    let violated: Vec<&Value> = doc["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["outcome"] == "violated")
        .collect();
    assert_eq!(violated.len(), 1);
    let scenario = &violated[0]["scenario"];
    std::fs::create_dir_all(pack.join("scenarios")).unwrap();
    std::fs::write(
        pack.join("scenarios/guarantee.json"),
        serde_json::to_string_pretty(scenario).unwrap(),
    )
    .unwrap();
    let p = pack.display().to_string();
    let before = run(&["test", &p], &[]);
    let shown = text(&before);
    assert_eq!(before.status.code(), Some(1), "{shown}");
    assert!(shown.contains("expected DENY, got ALLOW"), "{shown}");

    // the fix: the rule the sibling forgot
    let file = pack.join("pack.ipc");
    let spec = std::fs::read_to_string(&file).unwrap().replace(
        "  step_up \"large refund\"",
        "  fact blocked_payee = payee_iban in registry.blocked\n  forbid  \"blocked payee\" when blocked_payee\n  step_up \"large refund\"",
    );
    std::fs::write(&file, spec).unwrap();
    let (code, doc) = build_json(&[&pack], &dir.path().join("b2.json"));
    assert_eq!(code, 0, "{doc}");
    assert!(
        doc["guarantees"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["outcome"] == "proven"),
        "{doc}"
    );
    let after = run(&["test", &p], &[]);
    assert_eq!(after.status.code(), Some(0), "{}", text(&after));
}

#[cfg(feature = "solver")]
/// Every shipped pack states guarantees and the build proves all of them.
#[test]
fn every_shipped_pack_states_guarantees_and_the_build_proves_them() {
    let dir = tempfile::tempdir().unwrap();
    let packs: Vec<PathBuf> = [
        "ap",
        "bank",
        "code",
        "health",
        "slack",
        "travel",
        "workspace",
    ]
    .iter()
    .map(|p| repo(&format!("packs/{p}")))
    .collect();
    let refs: Vec<&Path> = packs.iter().map(PathBuf::as_path).collect();
    let (code, doc) = build_json(&refs, &dir.path().join("b.json"));
    assert_eq!(code, 0, "{doc}");
    let proofs = doc["guarantees"].as_array().unwrap();
    for p in [
        "ap",
        "bank",
        "code",
        "health",
        "slack",
        "travel",
        "workspace",
    ] {
        assert!(
            proofs.iter().any(|x| x["pack"] == p),
            "pack {p} states no guarantee"
        );
    }
    for x in proofs {
        assert_eq!(x["outcome"], "proven", "{x}");
    }
    // the sanctions guarantees cover every action that pays
    let covered: Vec<&str> = proofs
        .iter()
        .filter(|x| x["pack"] == "bank" && x["guarantee"].as_str().unwrap().contains("sanctioned"))
        .map(|x| x["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        covered,
        [
            "payment.transfer",
            "standing_order.update",
            "payment.send",
            "payment.schedule",
            "scheduled.update"
        ]
    );
}

#[cfg(feature = "solver")]
/// The bank pack as it was before the sanctions list reached
/// `payment.send`, `payment.schedule` and `scheduled.update` (7553d99):
/// the guarantee finds exactly those three.
#[test]
fn the_bank_sanctions_guarantee_fails_on_the_pack_before_its_fix() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("bank");
    copy_dir(&repo("packs/bank"), &pack);
    let file = pack.join("pack.ipc");
    let spec = std::fs::read_to_string(&file).unwrap();
    // drop the sanctions fact and rule of every action paying a `recipient`
    let mut old = String::new();
    let mut pays_recipient = false;
    for line in spec.lines() {
        if line.starts_with("action ") || line.starts_with('}') {
            pays_recipient = false;
        }
        if line.trim_start().starts_with("param recipient:") {
            pays_recipient = true;
        }
        if pays_recipient && line.contains("sanctioned") {
            continue;
        }
        old.push_str(line);
        old.push('\n');
    }
    assert_ne!(old, spec);
    std::fs::write(&file, old).unwrap();
    let (code, doc) = build_json(&[&pack], &dir.path().join("b.json"));
    assert_eq!(code, 1);
    assert_eq!(
        outcomes(&doc, "a sanctioned account is never paid"),
        pairs(&[
            ("payment.send", "violated"),
            ("payment.schedule", "violated"),
            ("scheduled.update", "violated")
        ])
    );
    assert_eq!(
        outcomes(&doc, "a sanctioned payee is never paid"),
        pairs(&[
            ("payment.transfer", "proven"),
            ("standing_order.update", "proven")
        ])
    );
}

#[cfg(feature = "solver")]
/// A level the pack does not demand is found, with the decision it gives.
#[test]
fn a_need_level_guarantee_reports_the_level_the_pack_gives() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("sibling");
    copy_dir(&repo(SIBLING), &pack);
    let file = pack.join("pack.ipc");
    let mut spec = std::fs::read_to_string(&file).unwrap();
    spec.push_str(
        "guarantee \"above 900.00 four eyes\"\n  payment.transfer need level 2 when amount > 900.00\n",
    );
    std::fs::write(&file, spec).unwrap();
    let (code, doc) = build_json(&[&pack], &dir.path().join("b.json"));
    assert_eq!(code, 1);
    let p = doc["guarantees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["guarantee"] == "above 900.00 four eyes")
        .unwrap();
    assert_eq!(p["outcome"], "violated");
    assert_eq!(p["decision"], "PENDING level 1");
    assert_eq!(p["scenario"]["tests"][0]["expect"]["decision"], "PENDING");
    assert_eq!(p["scenario"]["tests"][0]["expect"]["level"], 2);
    let amount = p["scenario"]["tests"][0]["proposal"]["args"]["amount"]
        .as_str()
        .unwrap();
    let minor: i64 = amount.replace('.', "").parse().unwrap();
    assert!(
        amount.contains('.') && minor > 90_000,
        "money in units above 900.00: {amount}"
    );
}

/// Without a solver nothing is proven, so nothing is built; `ipc check`
/// type-checks guarantees without one.
#[test]
fn without_a_solver_the_build_fails_closed_and_check_still_checks() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("b.json");
    let out = run(
        &["build", "packs/bank", "-o", bundle.to_str().unwrap()],
        &[("CVC5", "/nonexistent/cvc5")],
    );
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(1), "{shown}");
    assert!(shown.contains("ipc::guarantee_unproven"), "{shown}");
    // said once, counting the proofs it stops (not 17 times the same)
    assert_eq!(
        shown.matches("ipc::guarantee_unproven").count(),
        1,
        "{shown}"
    );
    // (read as words: miette breaks the message where its width says)
    let words = shown
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        words.contains("(nor any of the 17 proofs of 5 guarantees)"),
        "{shown}"
    );
    assert!(!bundle.exists());
    let check = run(
        &["check", "--format", "json", "packs/bank"],
        &[("CVC5", "/nonexistent/cvc5")],
    );
    assert_eq!(check.status.code(), Some(0));
    let doc: Value = serde_json::from_slice(&check.stdout).unwrap();
    let gs = doc["packs"][0]["guarantees"].as_array().unwrap();
    assert!(
        gs.iter()
            .any(|g| g["scope"] == "every action with recipient: Id"
                && g["covers"]
                    == serde_json::json!(["payment.send", "payment.schedule", "scheduled.update"]))
    );
}
