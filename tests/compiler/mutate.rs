//! `ipc mutate`: mutants on the fixture packs of `tests/fixtures/mutate/`,
//! killed by scenarios, proved equivalent or reported with a counterexample
//! by cvc5 (installed by `.ci/run`), and the solver-backed lint.
// needs a part of the default features: the test is off without it
#![cfg(feature = "solver")]

use intentplane::compile::build;
use intentplane::mutate::equiv::Prover;
use intentplane::mutate::mutants::Operator;
use intentplane::mutate::{MutantResult, PackReport, PackScenarios, Solver, Status, mutate_pack};
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
    mutate_at(&fixture(name), name, lint)
}

/// The mutation report of pack `name` in the folder `path`.
fn mutate_at(path: &Path, name: &str, lint: bool) -> Option<PackReport> {
    if !crate::common::tools::cvc5() {
        return None;
    }
    let path = path.to_path_buf();
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

/// The mutant of `policy` whose description contains `change`.
fn mutant<'a>(r: &'a PackReport, policy: &str, change: &str) -> &'a MutantResult {
    r.mutants
        .iter()
        .find(|m| m.policy_id == policy && m.description.contains(change))
        .unwrap_or_else(|| panic!("no mutant `{change}` of `{policy}`: {:#?}", r.mutants))
}

const CAP: &str = "guarded/payment.transfer/forbid/hard-cap";
const STEP_UP: &str = "guarded/payment.transfer/step_up/large-transfer";

/// The `guarded` fixture in a temporary folder, its guarantees replaced by
/// `guarantees`.
fn guarded_with(guarantees: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = fixture("guarded");
    let text = std::fs::read_to_string(src.join("pack.ipc")).expect("pack");
    let rules = text.split("// no scenario tests").next().expect("rules");
    std::fs::write(dir.path().join("pack.ipc"), format!("{rules}{guarantees}")).expect("write");
    std::fs::create_dir(dir.path().join("scenarios")).expect("mkdir");
    std::fs::copy(
        src.join("scenarios/guarded.json"),
        dir.path().join("scenarios/guarded.json"),
    )
    .expect("copy");
    dir
}

#[test]
fn a_guarantee_kills_a_mutant_every_scenario_misses_and_is_named() {
    let Some(r) = mutate("guarded", false) else {
        return;
    };
    // the cap moved up by one cent: no scenario tests 10,000.01, the
    // guarantee's proof finds it
    let m = mutant(&r, CAP, "> 1000001");
    let Status::KilledByGuarantee {
        guarantee,
        guarantee_source,
        claim,
        counterexample,
        original,
        mutant: decided,
    } = &m.status
    else {
        panic!("expected a kill by the guarantee, got {:?}", m.status);
    };
    assert_eq!(guarantee, "no transfer above the cap");
    assert_eq!(guarantee_source, "guarded/pack.ipc:20");
    assert_eq!(claim, "never allow");
    assert_eq!(counterexample.context["amount"], 1000001);
    assert_eq!(original, "DENY");
    assert_eq!(decided, "PENDING level 1");
    // the approval threshold moved up: the level guarantee kills it
    let m = mutant(&r, STEP_UP, "> 100001");
    assert!(
        matches!(&m.status, Status::KilledByGuarantee { guarantee, claim, mutant, .. }
            if guarantee == "above 1,000.00 the user approves" && claim == "need level 1" && mutant == "ALLOW"),
        "{:?}",
        m.status
    );
    assert_eq!(r.count("killed by guarantee"), 2);
    assert!(
        r.guarantees_not_kept.is_empty(),
        "{:?}",
        r.guarantees_not_kept
    );
    // a stronger mutant breaks no guarantee: it still survives, with its
    // counterexample
    for change in [">= 1000000", "> 999999"] {
        let m = mutant(&r, CAP, change);
        assert!(
            matches!(m.status, Status::Survived { .. }),
            "{change}: {:?}",
            m.status
        );
    }
    // what a scenario kills stays the scenario's
    assert!(matches!(
        &mutant(&r, CAP, "forbid removed").status,
        Status::Killed { scenario, .. } if scenario == "guarded.json: over the cap"
    ));
}

#[test]
fn without_the_guarantee_the_same_mutant_survives() {
    let dir = guarded_with("");
    let Some(r) = mutate_at(dir.path(), "guarded", false) else {
        return;
    };
    for (policy, change) in [(CAP, "> 1000001"), (STEP_UP, "> 100001")] {
        let m = mutant(&r, policy, change);
        assert!(
            matches!(m.status, Status::Survived { .. }),
            "{change}: {:?}",
            m.status
        );
    }
    assert_eq!(r.count("killed by guarantee"), 0);
}

#[test]
fn a_guarantee_the_pack_does_not_keep_kills_nothing() {
    // wrong about the pack: 5,000.01 .. 10,000.00 is allowed with approval.
    // Every mutant that allows more breaks it too; it must not count.
    let dir = guarded_with(
        "guarantee \"nothing above 5,000.00\"\n  never allow payment.transfer when amount > 5_000.00\n",
    );
    let Some(r) = mutate_at(dir.path(), "guarded", false) else {
        return;
    };
    let m = mutant(&r, CAP, "> 1000001");
    assert!(
        matches!(m.status, Status::Survived { .. }),
        "{:?}",
        m.status
    );
    assert_eq!(r.count("killed by guarantee"), 0);
    assert_eq!(
        r.guarantees_not_kept.len(),
        1,
        "{:?}",
        r.guarantees_not_kept
    );
    assert!(r.guarantees_not_kept[0].contains("`nothing above 5,000.00`"));
    assert!(r.guarantees_not_kept[0].contains("does not hold for `payment.transfer`"));
}

#[test]
fn the_cli_names_the_guarantee_in_text_and_json() {
    if !crate::common::tools::cvc5() {
        return;
    }
    let guarded = fixture("guarded");
    let path = guarded.to_str().expect("path");
    let (code, out) = ipc(&["mutate", "--format", "json", path], None);
    // four stronger mutants survive: the run fails
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).expect("json");
    let pack = &doc["packs"][0];
    assert_eq!(pack["summary"]["killed_by_guarantee"], 2);
    assert_eq!(pack["summary"]["survived"], 4);
    let killed: Vec<&Value> = pack["mutants"]
        .as_array()
        .expect("mutants")
        .iter()
        .filter(|m| m["status"] == "killed_by_guarantee")
        .collect();
    assert_eq!(killed.len(), 2);
    assert_eq!(killed[0]["guarantee"], "no transfer above the cap");
    assert_eq!(killed[0]["guarantee_source"], "guarded/pack.ipc:20");
    assert_eq!(killed[0]["policy_id"], CAP);
    assert_eq!(killed[0]["mutant"], "PENDING level 1");
    assert!(killed[0]["counterexample"]["context"].is_object());
    assert_eq!(killed[1]["guarantee"], "above 1,000.00 the user approves");

    let (code, out) = ipc(&["mutate", path], None);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("killed by guarantee \"no transfer above the cap\""),
        "{out}"
    );
    assert!(
        out.contains("(11 killed by a scenario, 2 by a guarantee, 0 equivalent, 4 survived"),
        "{out}"
    );
}

/// Record types (issue #24, item 2): the mutants of an action with lists of
/// records are killed by scenarios that propose records, and the solver
/// proves a survivor over a context that holds a set of records.
#[test]
fn records_are_mutated_as_other_types() {
    let Some(r) = mutate("records", false) else {
        return;
    };
    assert!(r.ok(), "{:?}", r.mutants);
    assert_eq!(r.score(), 100.0);
    assert!(
        r.mutants
            .iter()
            .any(|m| m.policy_id == "records/memory.relate/forbid/a-note-about-passwords"
                && m.operator == Operator::RemoveForbid
                && matches!(&m.status, Status::Killed { scenario, .. } if scenario == "records.json: a forbidden note")),
        "{:?}",
        r.mutants
    );
    // without the scenario that tests the note, the forbid's removal
    // survives, with a counterexample whose context has the relations
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("records");
    std::fs::create_dir_all(copy.join("scenarios")).unwrap();
    std::fs::create_dir_all(copy.join("registries")).unwrap();
    std::fs::copy(fixture("records").join("pack.ipc"), copy.join("pack.ipc")).unwrap();
    for f in ["workspace.json", "entities.json", "people.json"] {
        std::fs::copy(
            fixture("records").join("registries").join(f),
            copy.join("registries").join(f),
        )
        .unwrap();
    }
    let mut suite: Value = serde_json::from_str(
        &std::fs::read_to_string(fixture("records").join("scenarios/records.json")).unwrap(),
    )
    .unwrap();
    suite["tests"]
        .as_array_mut()
        .unwrap()
        .retain(|t| t["name"] != "a forbidden note");
    std::fs::write(copy.join("scenarios/records.json"), suite.to_string()).unwrap();
    let Some(r) = mutate_at(&copy, "records", false) else {
        return;
    };
    let m = mutant(
        &r,
        "records/memory.relate/forbid/a-note-about-passwords",
        "forbid removed",
    );
    let Status::Survived { counterexample, .. } = &m.status else {
        panic!("expected a survivor, got {:?}", m.status);
    };
    assert_eq!(counterexample.context["note"], "password");
    assert!(counterexample.context["relations"].is_array());
    assert!(counterexample.context["provenance"]["relations"].is_string());
}
