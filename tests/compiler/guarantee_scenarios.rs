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
        if (t.status != Status::Fail || !t.got.starts_with(&found)) && !known(&p.action, "broken") {
            problems.push(format!(
                "{} / {}: on the broken pack expected a FAIL with {found}, got {:?} {} {:?}\n{scenario:#}",
                reason, p.action, t.status, t.got, t.error
            ));
        }
        let on_intact = run_saved(broken, scenario, intact);
        let t = &on_intact.tests[0];
        if t.status != Status::Pass && !known(&p.action, "intact") {
            problems.push(format!(
                "{} / {}: on the intact pack expected a PASS, got {:?} {} {:?}\n{scenario:#}",
                reason, p.action, t.status, t.got, t.error
            ));
        }
    }
    (seen, problems)
}

/// What the printed scenario cannot reproduce yet (issue 40, item 3, left
/// open): `ACTION: broken` (it does not fail on the broken pack with the
/// solver's decision) or `ACTION: intact` (it does not pass on the intact
/// pack: another rule fires, or a contract check refuses the proposal). A
/// case not listed must reproduce; fixing one lets its line go.
const KNOWN_GAPS: &[&str] = &[
    // a secret parameter is left out of the proposal
    "user.update_password: broken",
    "user.update_password: intact",
    // a record-sourced key from another registry than the fact's
    "record.read_research: broken",
    "record.read_research: intact",
    // a text's `min_len` is not met by the solver's value
    "record.break_glass: broken",
    "record.break_glass: intact",
    // a list taken from a registry is written as one string
    "trip.remind: broken",
    "trip.remind: intact",
    "trip.send_email: broken",
    "trip.send_email: intact",
    "calendar.invite: broken",
    "calendar.invite: intact",
    // the intact pack decides by another rule the counterexample triggers
    // (every rule of the action is deleted), or implausible dates are
    // moved to one day and lose `end < start`
    "vendor.change_iban: intact",
    "invoice.pay: intact",
    "payment.transfer: intact",
    "standing_order.update: intact",
    "payment.send: intact",
    "payment.schedule: intact",
    "scheduled.update: intact",
    "commit.merge: intact",
    "booking.hotel: intact",
    "booking.car: intact",
    "calendar.reschedule: intact",
];

fn known(action: &str, on: &str) -> bool {
    KNOWN_GAPS.contains(&format!("{action}: {on}").as_str())
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
