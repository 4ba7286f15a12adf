//! `ipc test`: every shipped pack's scenarios pass, each pack has at least
//! 15, and the runner can fail (a fixture of wrong expectations, an invalid
//! file, a weakened policy set through the library API).

use intentplane::compile::build;
use intentplane::gateway::Gateway;
use intentplane::gateway::world::World;
use intentplane::scenarios::{Status, Suite, run_suite, run_suite_with_bundle};
use intentplane::store::memory::MemoryStore;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn ipc(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).to_string(),
    )
}

fn shipped_packs() -> Vec<String> {
    let mut packs: Vec<String> = std::fs::read_dir(root().join("packs"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.path().join("pack.ipc").is_file())
        .map(|e| format!("packs/{}", e.file_name().to_string_lossy()))
        .collect();
    packs.sort();
    packs
}

#[test]
fn every_shipped_pack_passes_its_scenarios_and_has_at_least_15() {
    let packs = shipped_packs();
    assert!(packs.len() >= 5, "{packs:?}");
    let mut args: Vec<&str> = vec!["test", "--format", "json"];
    args.extend(packs.iter().map(String::as_str));
    let (code, out) = ipc(&args);
    let doc: Value = serde_json::from_str(&out).unwrap();
    let mut failures = vec![];
    for p in doc["packs"].as_array().unwrap() {
        for s in p["suites"].as_array().unwrap() {
            if let Some(e) = s.get("error") {
                failures.push(format!("{e}"));
            }
            for t in s["tests"].as_array().unwrap() {
                if t["status"] != "pass" {
                    failures.push(format!("{} / {}: {}", s["file"], t["name"], t));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert_eq!(code, 0, "{out}");
    assert_eq!(doc["ok"], true);
    for p in doc["packs"].as_array().unwrap() {
        let n: usize = p["suites"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["tests"].as_array().unwrap().len())
            .sum();
        assert!(
            n >= 15,
            "pack {} has {n} scenarios, fewer than 15",
            p["pack"]
        );
    }
    assert_eq!(doc["packs"].as_array().unwrap().len(), packs.len());
}

#[test]
fn the_human_table_lists_every_test_and_a_summary() {
    let (code, out) = ipc(&["test", "packs/bank", "--filter", "hard cap"]);
    assert_eq!(code, 0, "{out}");
    let header = out.lines().next().unwrap();
    for col in ["pack", "file", "test", "expected", "got", "result"] {
        assert!(header.contains(col), "{header}");
    }
    let rows: Vec<&str> = out.lines().filter(|l| l.ends_with("PASS")).collect();
    assert!(rows.len() >= 2, "{out}");
    assert!(rows.iter().all(|r| r.contains("hard cap")), "{out}");
    assert!(out.contains(&format!("ok  {} tests: {} passed", rows.len(), rows.len())));
}

/// A copy of the bank pack whose only scenario file is `fixture`.
fn pack_with(fixture: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let bank = dir.path().join("bank");
    std::fs::create_dir_all(bank.join("scenarios")).unwrap();
    std::fs::create_dir_all(bank.join("registries")).unwrap();
    std::fs::copy(root().join("packs/bank/pack.ipc"), bank.join("pack.ipc")).unwrap();
    for f in std::fs::read_dir(root().join("packs/bank/registries")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), bank.join("registries").join(f.file_name())).unwrap();
    }
    std::fs::copy(
        root().join("tests/fixtures/scenarios").join(fixture),
        bank.join("scenarios").join(fixture),
    )
    .unwrap();
    dir
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn wrong_expectations_fail_and_exit_1() {
    let dir = pack_with("bank_must_fail.json");
    let bank = path_str(&dir.path().join("bank"));
    let (code, out) = ipc(&["test", &bank, "--format", "json"]);
    assert_eq!(code, 1, "{out}");
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], false);
    let tests = doc["packs"][0]["suites"][0]["tests"].as_array().unwrap();
    let by_name = |n: &str| tests.iter().find(|t| t["name"] == n).unwrap().clone();
    assert_eq!(
        by_name("passes: the attacker's IBAN is refused")["status"],
        "pass"
    );
    let expect_fail = [
        (
            "wrong decision: expects the attacker to be paid",
            1,
            "decision: expected ALLOW, got DENY",
        ),
        (
            "wrong stage",
            1,
            "stage: expected `policy`, got `provenance`",
        ),
        ("wrong reason", 1, "does not contain \"hard cap\""),
        ("wrong level", 1, "level: expected 2, got 1"),
        (
            "wrong resolved value",
            1,
            "resolved `payee_iban`: expected \"DE44 5001 0517 5407 3249 31\", got \"DE44500105175407324931\"",
        ),
        (
            "approvals that were not needed",
            1,
            "the approvals were not needed",
        ),
        (
            "second step wrong: a replay is not a fresh execution",
            2,
            "replayed: expected false, got true",
        ),
    ];
    for (name, step, needle) in expect_fail {
        let t = by_name(name);
        assert_eq!(t["status"], "fail", "{t}");
        assert_eq!(t["failure"]["step"], step, "{t}");
        let problems: Vec<&str> = t["failure"]["problems"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let problems = problems.join("\n");
        assert!(
            problems.contains(needle),
            "{name}: {problems} lacks {needle}"
        );
    }
    let err = by_name("cannot run: no such registry");
    assert_eq!(err["status"], "error");
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("step 1: pack `bank` declares no registry `payees`"),
        "{err}"
    );
    assert_eq!(doc["summary"]["passed"], 1);
    assert_eq!(doc["summary"]["failed"], 7);
    assert_eq!(doc["summary"]["errors"], 1);

    // the human table says the same
    let (code, human) = ipc(&["test", &bank]);
    assert_eq!(code, 1);
    assert_eq!(human.lines().filter(|l| l.ends_with("FAIL")).count(), 7);
    assert!(human.contains("FAIL   bank / bank_must_fail.json / wrong stage"));
    assert!(human.contains("step 1: stage: expected `policy`, got `provenance`"));
    assert!(human.contains("FAILED  9 tests: 1 passed, 7 failed, 1 error"));
}

#[test]
fn an_invalid_scenario_file_names_the_file_and_the_test_and_exits_1() {
    let dir = pack_with("bank_invalid.json");
    let bank = path_str(&dir.path().join("bank"));
    let (code, out) = ipc(&["test", &bank]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("bank_invalid.json"), "{out}");
    assert!(out.contains("test `a typo in expect`"), "{out}");
    assert!(out.contains("unknown field `stgae`"), "{out}");
    assert!(out.contains("1 invalid file"), "{out}");
}

#[test]
fn a_filter_that_matches_nothing_runs_nothing_and_fails() {
    let (code, out) = ipc(&["test", "packs/bank", "--filter", "no test is called this"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no test ran"), "{out}");
}

#[test]
fn a_weakened_policy_set_makes_the_bank_suite_fail() {
    // what the mutation tester does: same scenarios, weaker Cedar
    let bundle = build(&[root().join("packs/bank")]).bundle.unwrap();
    let suite = Suite::load(&root().join("packs/bank/scenarios/transfers.json")).unwrap();
    assert!(run_suite_with_bundle(&suite, &bundle).ok());

    let mut base = Gateway::new(&bundle, World::empty(), Arc::new(MemoryStore::new())).unwrap();
    let permit_all =
        cedar_policy::PolicySet::from_str("permit(principal, action, resource);").unwrap();
    base.with_policies("payment.transfer", permit_all).unwrap();
    let res = run_suite(&suite, &bundle.table, &|w, s| Ok(base.fork(w, s)));
    assert!(!res.ok());
    let failed: Vec<&str> = res
        .tests
        .iter()
        .filter(|t| t.status == Status::Fail)
        .map(|t| t.name.as_str())
        .collect();
    for name in [
        "10,000.01 is over the hard cap",
        "1,000.01 needs emma's step-up",
        "a sanctioned payee is refused even though the user named it",
    ] {
        assert!(failed.contains(&name), "{name} should fail: {failed:?}");
    }
    // provenance does not depend on Cedar: the attacker is still refused
    assert!(
        !failed.contains(
            &"the attacker's IBAN from the PDF is refused, with the hint to add the payee"
        )
    );
    assert!(
        base.with_policies("payment.nuke", cedar_policy::PolicySet::new())
            .is_err()
    );
}
