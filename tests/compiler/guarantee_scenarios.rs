//! Issue 40, item 3: the scenario `ipc build` prints for a broken guarantee
//! reproduces the violation. For every shipped pack and every guarantee,
//! the rules of the actions it covers are deleted (in a copy of the pack),
//! the build proves it violated, and each printed scenario, saved into the
//! broken copy, FAILS there with the decision the solver found, and PASSES
//! on the intact pack. Through the library: one build per guarantee, no
//! subprocess.
#![cfg(feature = "solver")]

use crate::common::copy_dir;
use intentplane::bundle::Bundle;
use intentplane::compile::build;
use intentplane::guarantee::{Outcome, Proof, inputs, prove};
use intentplane::scenarios::{Status, Suite, SuiteResult, run_suite_with_bundle};
use std::path::{Path, PathBuf};

/// The bundle of the pack at `dir` and the proofs of its guarantees.
fn build_and_prove(dir: &Path) -> (Bundle, Vec<Proof>) {
    let mut report = build(&[dir.to_path_buf()]);
    let Some(bundle) = report.bundle.take() else {
        panic!("{}", report.render_human(true, false));
    };
    let proofs = prove(&bundle, &inputs(&report.checked));
    (bundle, proofs)
}

/// The lines of the rules (`forbid`, `step_up`, `four_eyes`) of these
/// actions: what may keep a guarantee over them.
fn rules_of(spec: &str, actions: &[String]) -> Vec<usize> {
    let mut out = vec![];
    let mut inside = false;
    for (i, line) in spec.lines().enumerate() {
        if let Some(rest) = line.strip_prefix("action ") {
            inside = actions
                .iter()
                .any(|a| rest.split_whitespace().next() == Some(a));
        } else if line.starts_with('}') {
            inside = false;
        }
        let rule = ["forbid ", "step_up ", "four_eyes "]
            .iter()
            .any(|k| line.trim_start().starts_with(k));
        if inside && rule {
            out.push(i);
        }
    }
    out
}

fn without(spec: &str, lines: &[usize]) -> String {
    spec.lines()
        .enumerate()
        .filter(|(i, _)| !lines.contains(i))
        .map(|(_, l)| format!("{l}\n"))
        .collect()
}

/// The guarantee broken: every rule of the actions it covers deleted.
fn break_guarantee(
    pack: &Path,
    spec: &str,
    g: &intentplane::ir::Guarantee,
) -> (Bundle, Vec<Proof>) {
    let covered: Vec<String> = g.covers.iter().map(|c| c.action.clone()).collect();
    let removed = rules_of(spec, &covered);
    std::fs::write(pack.join("pack.ipc"), without(spec, &removed)).unwrap();
    build_and_prove(pack)
}

/// The scenario as saved in the pack's `scenarios/`, run on `bundle`.
fn run_saved(pack: &Path, scenario: &serde_json::Value, bundle: &Bundle) -> SuiteResult {
    let file = pack.join("scenarios/zz-guarantee.json");
    std::fs::write(&file, serde_json::to_string_pretty(scenario).unwrap()).unwrap();
    let suite = Suite::load(&file).unwrap_or_else(|e| panic!("{e}: {scenario:#}"));
    run_suite_with_bundle(&suite, bundle)
}

/// Each violation of the guarantee in the broken copy, checked both ways;
/// the problems found, one line each.
fn check_violations(
    broken: &Path,
    proofs: &[Proof],
    reason: &str,
    intact: &Bundle,
    broken_bundle: &Bundle,
) -> (usize, Vec<String>) {
    let mut problems = vec![];
    let mut seen = 0;
    for p in proofs
        .iter()
        .filter(|p| p.guarantee == reason && p.outcome == Outcome::Violated)
    {
        seen += 1;
        let scenario = p.scenario.as_ref().expect("a violation prints a scenario");
        let found = p.decision.clone().unwrap_or_default();
        let on_broken = run_saved(broken, scenario, broken_bundle);
        let t = &on_broken.tests[0];
        if t.status != Status::Fail || !t.got.starts_with(&found) {
            problems.push(format!(
                "{} / {}: on the broken pack expected a FAIL with {found}, got {:?} {} {:?}\n{scenario:#}",
                reason, p.action, t.status, t.got, t.error
            ));
        }
        let on_intact = run_saved(broken, scenario, intact);
        let t = &on_intact.tests[0];
        if t.status != Status::Pass && !stricter(scenario, &t.got) {
            problems.push(format!(
                "{} / {}: on the intact pack expected a PASS, got {:?} {} {:?}\n{scenario:#}",
                reason, p.action, t.status, t.got, t.error
            ));
        }
    }
    (seen, problems)
}

/// Whether the intact pack's decision `got` is stricter than the level
/// the scenario demands: a DENY at policy where a level of approval was
/// demanded. The test breaks a guarantee by deleting every rule of the
/// action, so the solver's counterexample may also break another rule
/// (an attestation for another developer, a call-back for another vendor),
/// which the intact pack then denies by; the guarantee holds there. A pack
/// that misses only the guarantee's rule keeps the others, and its
/// counterexample satisfies them.
fn stricter(scenario: &serde_json::Value, got: &str) -> bool {
    scenario["tests"][0]["expect"]["decision"] == "PENDING" && got.starts_with("DENY policy")
}

#[test]
fn a_counterexample_scenario_fails_on_the_broken_pack_and_passes_on_the_intact_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("packs");
    let tmp = tempfile::tempdir().unwrap();
    let mut problems = vec![];
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        let pack: PathBuf = tmp.path().join(name);
        copy_dir(&root.join(name), &pack);
        std::fs::remove_dir_all(pack.join("scenarios")).unwrap();
        std::fs::create_dir_all(pack.join("scenarios")).unwrap();
        let spec = std::fs::read_to_string(pack.join("pack.ipc")).unwrap();
        let (intact, proofs) = build_and_prove(&pack);
        assert!(proofs.iter().all(|p| p.outcome == Outcome::Proven));
        let checked = intentplane::check::check_path(&pack);
        let ir = checked.pack.expect("a shipped pack checks");
        for g in &ir.guarantees {
            let (broken, proofs) = break_guarantee(&pack, &spec, g);
            let (seen, found) = check_violations(&pack, &proofs, &g.reason, &intact, &broken);
            if seen == 0 {
                problems.push(format!(
                    "{name}: `{}` still holds without the rules",
                    g.reason
                ));
            }
            problems.extend(found);
        }
        std::fs::write(pack.join("pack.ipc"), &spec).unwrap();
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}
