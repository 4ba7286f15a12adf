//! `ipc mutate`: mutants on the fixture packs of `tests/fixtures/mutate/`,
//! killed by scenarios, proved equivalent or reported with a counterexample
//! by cvc5 (installed by `.ci/run`), and the solver-backed lint.
// needs a part of the default features: the test is off without it
#![cfg(feature = "solver")]

use intentplane::bundle::build;
use intentplane::mutate::equiv::Prover;
use intentplane::mutate::mutants::Operator;
use intentplane::mutate::{PackReport, PackScenarios, Solver, Status, mutate_pack};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mutate")
        .join(name)
}

/// The fixture's mutation report, or `None` after the skip without cvc5
/// (`common::tools`: a failure under CI).
fn mutate(name: &str, lint: bool) -> Option<PackReport> {
    if !crate::common::tools::cvc5() {
        return None;
    }
    let path = fixture(name);
    let built = build(std::slice::from_ref(&path));
    let bundle = built.bundle.expect("the fixture builds");
    let mut runner = PackScenarios::load(&bundle, name, &path).expect("scenarios load");
    let schema = bundle.cedar().expect("cedar").schema;
    let mut prover = Prover::new(schema).expect("prover");
    let mut solver = Solver::Available(&mut prover);
    let checked = built.checked.iter().find_map(|c| c.pack.as_ref());
    mutate_pack(
        &bundle,
        name,
        checked,
        &mut runner,
        &mut solver,
        lint,
        &mut |_, _| {},
    )
    .map(Some)
    .expect("mutation run")
}

fn ipc(args: &[&str], cvc5: Option<&str>) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
    c.args(args);
    if let Some(p) = cvc5 {
        c.env("CVC5", p);
    }
    let out = c.output().expect("ipc runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn a_weak_suite_leaves_boundary_survivors_with_counterexamples() {
    let Some(r) = mutate("weak", false) else {
        return;
    };
    assert!(!r.ok());
    assert!(r.score() < 100.0);
    // the hard cap moved from `>` to `>=`: only 10,000.00 tells them apart
    let m = r
        .mutants
        .iter()
        .find(|m| {
            m.policy_id == "weak/payment.transfer/forbid/hard-cap"
                && m.operator == Operator::ShiftBoundary
        })
        .expect("the boundary mutant");
    assert_eq!(m.source, "weak/pack.ipc:14");
    let Status::Survived {
        counterexample,
        original,
        mutant,
        scenario,
    } = &m.status
    else {
        panic!("expected a survivor, got {:?}", m.status);
    };
    assert_eq!(counterexample.context["amount"], 1000000);
    assert_eq!(original, "PENDING level 1");
    assert_eq!(mutant, "DENY");
    let test = &scenario["test"];
    assert_eq!(test["proposal"]["action"], "payment.transfer");
    assert_eq!(test["proposal"]["args"]["amount"], "10000.00");
    assert_eq!(
        test["proposal"]["args"]["from_account"],
        "<from mandate.account>"
    );
    assert_eq!(test["expect"]["decision"], "PENDING");
    assert_eq!(test["expect"]["level"], 1);
    // the rules the suite does test are killed, naming the scenario
    let removed = r
        .mutants
        .iter()
        .find(|m| m.operator == Operator::RemoveForbid)
        .expect("the forbid removed");
    assert!(
        matches!(&removed.status, Status::Killed { scenario, .. } if scenario == "weak.json: over the cap"),
        "{:?}",
        removed.status
    );
    let approval_removed = r
        .mutants
        .iter()
        .find(|m| m.operator == Operator::RemoveApprovalRule)
        .expect("the approval rule removed");
    assert!(matches!(
        &approval_removed.status,
        Status::Killed { scenario, .. } if scenario == "weak.json: a large transfer needs the user"
    ));
    // no mutant of this pack is equivalent
    assert_eq!(r.count("equivalent"), 0);
}

#[test]
fn a_duplicated_forbid_is_proved_equivalent() {
    let Some(r) = mutate("dup", false) else {
        return;
    };
    assert!(r.ok(), "{:#?}", r.mutants);
    assert_eq!(r.score(), 100.0);
    for id in [
        "dup/payment.transfer/forbid/hard-cap",
        "dup/payment.transfer/forbid/hard-cap-again",
    ] {
        let removed = r
            .mutants
            .iter()
            .find(|m| m.policy_id == id && m.operator == Operator::RemoveForbid)
            .expect("removed");
        assert!(matches!(removed.status, Status::Equivalent), "{id}");
        // `> 1000000` nudged to `> 1000001`: the other cap still holds
        let nudged = r
            .mutants
            .iter()
            .find(|m| m.policy_id == id && m.description.contains("> 1000001"))
            .expect("nudged up");
        assert!(matches!(nudged.status, Status::Equivalent), "{id}");
        // `>=` is not equivalent, and the boundary test kills it
        let shifted = r
            .mutants
            .iter()
            .find(|m| m.policy_id == id && m.operator == Operator::ShiftBoundary)
            .expect("shifted");
        assert!(
            matches!(&shifted.status, Status::Killed { scenario, .. } if scenario == "cap.json: exactly the cap")
        );
    }
}

#[test]
fn the_lint_finds_a_dead_rule_and_an_unreachable_approval() {
    let Some(r) = mutate("lint", true) else {
        return;
    };
    let codes: Vec<(&str, &str)> = r
        .lint
        .iter()
        .map(|f| (f.code, f.policy_id.as_str()))
        .collect();
    assert!(codes.contains(&(
        "never-matches",
        "lint/payment.transfer/forbid/above-the-range"
    )));
    assert!(codes.contains(&(
        "approval-unreachable",
        "lint/payment.transfer/step_up/huge-transfer"
    )));
    assert_eq!(codes.len(), 2, "{codes:?}");
    // the dead rule's mutants that weaken it are equivalent
    let removed = r
        .mutants
        .iter()
        .find(|m| {
            m.policy_id == "lint/payment.transfer/forbid/above-the-range"
                && m.operator == Operator::RemoveForbid
        })
        .expect("removed");
    assert!(matches!(removed.status, Status::Equivalent));
}

#[test]
fn the_cli_reports_json_and_exits_1_on_a_survivor() {
    if !crate::common::tools::cvc5() {
        return;
    }
    let weak = fixture("weak");
    let dup = fixture("dup");
    let (code, out) = ipc(
        &[
            "mutate",
            "--format",
            "json",
            weak.to_str().expect("path"),
            dup.to_str().expect("path"),
        ],
        None,
    );
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).expect("json");
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["packs"][0]["pack"], "weak");
    assert_eq!(doc["packs"][0]["summary"]["survived"], 6);
    assert_eq!(doc["packs"][1]["pack"], "dup");
    assert_eq!(doc["packs"][1]["summary"]["score"], 100.0);
    let survivor = doc["packs"][0]["mutants"]
        .as_array()
        .expect("mutants")
        .iter()
        .find(|m| m["status"] == "survived")
        .expect("a survivor");
    assert!(survivor["counterexample"]["context"].is_object());
    assert!(survivor["scenario"]["test"]["proposal"].is_object());

    let (code, out) = ipc(&["mutate", dup.to_str().expect("path")], None);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("equivalent (proved)"), "{out}");
    assert!(out.contains("score dup: 100.0%"), "{out}");
    assert!(out.contains("killed by cap.json: exactly the cap"), "{out}");
}

#[test]
fn without_the_solver_survivors_are_unproven() {
    let dup = fixture("dup");
    let (code, out) = ipc(
        &["mutate", dup.to_str().expect("path")],
        Some("/nonexistent/cvc5"),
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("UNPROVEN"), "{out}");
    assert!(out.contains("the solver is not available"), "{out}");
    assert!(!out.contains("equivalent (proved)"), "{out}");
}
