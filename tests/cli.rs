//! The `ipc` binary end to end: exit code, stdout and stderr snapshotted
//! for each case (ruff's CLI tests style).

use std::process::Command;

fn ipc(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run ipc");
    format!(
        "exit: {}\n--- stdout\n{}--- stderr\n{}",
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

macro_rules! cli_snapshot {
    ($name:expr, $args:expr) => {
        insta::with_settings!({
            snapshot_path => "../snapshots/cli",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, ipc($args));
        })
    };
}

#[test]
fn check_a_valid_pack() {
    let out = ipc(&["check", "packs/bank"]);
    assert!(out.starts_with("exit: 0\n"), "{out}");
    cli_snapshot!("check_bank", &["check", "packs/bank"]);
}

#[test]
fn check_a_broken_pack_exits_1() {
    let out = ipc(&["check", "tests/fixtures/check/untrusted_key.ipc"]);
    assert!(out.starts_with("exit: 1\n"), "{out}");
    cli_snapshot!(
        "check_untrusted_key",
        &["check", "tests/fixtures/check/untrusted_key.ipc"]
    );
}

#[test]
fn check_json_is_parseable() {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "check",
            "--format",
            "json",
            "tests/fixtures/check/unknown_claim.ipc",
            "packs/bank",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"], 1);
    let d = &v["packs"][0]["diagnostics"][0];
    assert_eq!(d["code"], "ipc::unknown_claim");
    assert_eq!(d["severity"], "error");
    assert_eq!(d["labels"][0]["line"], 6);
    assert_eq!(d["help"], "did you mean `payee`?");
    assert_eq!(v["packs"][1]["pack"], "bank");
    cli_snapshot!(
        "check_json",
        &[
            "check",
            "--format",
            "json",
            "tests/fixtures/check/unknown_claim.ipc"
        ]
    );
}

#[test]
fn warnings_pass_unless_denied() {
    let f = "tests/fixtures/check/unused_fact.ipc";
    assert!(ipc(&["check", f]).starts_with("exit: 0\n"));
    assert!(ipc(&["check", "--deny-warnings", f]).starts_with("exit: 1\n"));
    cli_snapshot!("check_deny_warnings", &["check", "--deny-warnings", f]);
}

#[test]
fn missing_paths_are_io_diagnostics() {
    let out = ipc(&["check", "no/such/pack", "tests"]);
    assert!(out.starts_with("exit: 1\n"), "{out}");
    cli_snapshot!("check_missing", &["check", "no/such/pack", "tests"]);
}

#[test]
fn no_arguments_is_a_usage_error() {
    let out = ipc(&["check"]);
    assert!(out.starts_with("exit: 2\n"), "{out}");
}

#[test]
fn the_demo_blocks_every_attack_and_verifies_its_receipts() {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["demo", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = v["steps"].as_array().unwrap();
    let decisions: Vec<(&str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["decision"]["decision"].as_str().unwrap(),
                s["decision"]["stage"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("DENY", "provenance"),
            ("DENY", "provenance"),
            ("DENY", "provenance"),
            ("ALLOW", "execution"),
            ("DENY", "budget"),
            ("PENDING", "approval"),
        ]
    );
    assert_eq!(v["chain_verifies"], true);

    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["demo", "ap", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let outcomes: Vec<&str> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["decision"]["decision"].as_str().unwrap())
        .collect();
    assert_eq!(
        outcomes,
        vec!["DENY", "DENY", "ALLOW", "DENY", "PENDING", "ALLOW", "DENY"]
    );
    let human = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .arg("demo")
        .output()
        .unwrap();
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(text.contains("without intentplane: the money leaves"));
    assert!(text.contains("the hash chain verifies"));
}

#[test]
fn build_lint_reports_dead_and_unreachable_rules() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b.json");
    let run = |deny: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
        c.args(["build", "--lint", "tests/fixtures/mutate/lint", "-o"])
            .arg(&out);
        if deny {
            c.arg("--deny-warnings");
        }
        c.current_dir(env!("CARGO_MANIFEST_DIR")).output().unwrap()
    };
    let o = run(false);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(text.contains("ipc::lint::never-matches"), "{text}");
    assert!(text.contains("ipc::lint::approval-unreachable"), "{text}");
    assert_eq!(run(true).status.code(), Some(1));
}
