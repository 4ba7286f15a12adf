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
            snapshot_path => "../../snapshots/cli",
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

#[cfg(feature = "demo")]
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
    assert!(text.contains("the store verifies"), "{text}");
}

#[cfg(feature = "demo")]
/// One injection, three domains: the hostile text's proposals are refused
/// in the bank, the health record and the repository; the users' own tasks
/// execute; the store verifies.
#[test]
fn the_three_domain_demo_refuses_the_same_injection_everywhere() {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["demo", "three", "--format", "json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let got: Vec<(String, String)> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["decision"]["decision"].as_str().unwrap().to_string(),
                s["decision"]["stage"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("DENY", "provenance"),
        ("ALLOW", "execution"),
        ("DENY", "provenance"),
        ("DENY", "provenance"),
        ("ALLOW", "execution"),
        ("DENY", "policy"),
        ("ALLOW", "execution"),
    ];
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(d, s)| (d.to_string(), s.to_string()))
        .collect();
    assert_eq!(got, want);
    assert_eq!(v["chain_verifies"], true);
}

#[cfg(feature = "solver")]
#[test]
fn build_lint_reports_dead_and_unreachable_rules() {
    if !crate::common::tools::cvc5() {
        return;
    }
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

// ------------------------------------------------------------ ipc receipts

use intentplane::store::sqlite::SqliteStore;
use serde_json::{Value, json};
use std::path::Path;

/// `ipc` run inside `dir`, so that the output names files relatively.
fn ipc_in(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .current_dir(dir)
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

macro_rules! cli_snapshot_in {
    ($name:expr, $dir:expr, $args:expr) => {
        insta::with_settings!({
            snapshot_path => "../../snapshots/cli",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!($name, ipc_in($dir, $args));
        })
    };
}

/// `n` more receipts in `dir/store.db` (`common::chain`).
fn receipts(dir: &Path, n: u64) {
    crate::common::chain::append_receipts(&SqliteStore::open(dir.join("store.db")).unwrap(), n);
}

/// A folder with `store.db` (`n` receipts) and two key pairs, `ops` (signs
/// the checkpoints) and `other`.
fn receipts_dir(n: u64) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    receipts(dir.path(), n);
    for (name, seed) in [("ops", 42u8), ("other", 7)] {
        intentplane::keys::SecretKey::from_seed(&[seed; 32])
            .write_pair(&dir.path().join(name))
            .unwrap();
    }
    dir
}

fn tamper(dir: &Path, sql: &str) {
    rusqlite::Connection::open(dir.join("store.db"))
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

const CHECKPOINT: &[&str] = &[
    "receipts",
    "checkpoint",
    "store.db",
    "--key",
    "ops.key",
    "--now",
    "2026-11-27T18:40:00Z",
    "-o",
    "cp.json",
];

const VERIFY_CHECKPOINT: &[&str] = &[
    "receipts",
    "verify",
    "store.db",
    "--checkpoint",
    "cp.json",
    "--key",
    "ops.pub",
];

#[test]
fn receipts_checkpoint_and_a_chain_that_extends_it() {
    let dir = receipts_dir(5);
    let d = dir.path();
    cli_snapshot_in!("receipts_checkpoint", d, CHECKPOINT);
    insta::with_settings!({
        snapshot_path => "../../snapshots/cli",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_snapshot!(
            "receipts_checkpoint_file",
            std::fs::read_to_string(d.join("cp.json")).unwrap()
        );
    });
    // without -o the checkpoint itself is printed
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(&CHECKPOINT[..7])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        std::fs::read_to_string(d.join("cp.json")).unwrap()
    );
    // the gateway goes on: the chain still holds the checkpoint's record
    receipts(d, 2);
    cli_snapshot_in!("receipts_verify_extends_checkpoint", d, VERIFY_CHECKPOINT);
    let mut json_args = VERIFY_CHECKPOINT.to_vec();
    json_args.extend(["--format", "json"]);
    let out = ipc_in(d, &json_args);
    assert!(out.starts_with("exit: 0\n"), "{out}");
    let doc: Value = serde_json::from_str(
        out.split("--- stdout\n")
            .nth(1)
            .unwrap()
            .split("--- stderr")
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(doc["ok"], json!(true));
    assert_eq!(doc["count"], json!(7));
    assert_eq!(doc["checkpoint"]["seq"], json!(5));
    assert_eq!(doc["checkpoint"]["time"], json!("2026-11-27T18:40:00Z"));
}

#[test]
fn receipts_verify_sees_a_cut_tail_with_the_head_moved_back() {
    let dir = receipts_dir(6);
    let d = dir.path();
    assert!(ipc_in(d, CHECKPOINT).starts_with("exit: 0\n"));
    tamper(
        d,
        "DELETE FROM receipts WHERE seq > 3;
         UPDATE head SET seq = 3, hash = (SELECT hash FROM receipts WHERE seq = 3);",
    );
    // by the store's state alone, then also against the checkpoint
    cli_snapshot_in!(
        "receipts_verify_cut_tail",
        d,
        &["receipts", "verify", "store.db"]
    );
    cli_snapshot_in!("receipts_verify_cut_tail_checkpoint", d, VERIFY_CHECKPOINT);
    let mut json_args = VERIFY_CHECKPOINT.to_vec();
    json_args.extend(["--format", "json"]);
    cli_snapshot_in!("receipts_verify_cut_tail_json", d, &json_args);
}

#[test]
fn receipts_verify_sees_every_record_and_the_head_deleted() {
    let dir = receipts_dir(3);
    let d = dir.path();
    assert!(ipc_in(d, CHECKPOINT).starts_with("exit: 0\n"));
    tamper(d, "DELETE FROM receipts; DELETE FROM head;");
    cli_snapshot_in!("receipts_verify_all_deleted", d, VERIFY_CHECKPOINT);
}

#[test]
fn receipts_verify_refuses_bodies_not_stored_canonically() {
    let dir = receipts_dir(4);
    let d = dir.path();
    // record 2 executed a payment; SQL would now read DENY for it
    tamper(
        d,
        r#"UPDATE receipts SET body = '{"decision":"DENY",' || substr(body, 2) WHERE seq = 2;
           UPDATE receipts SET body = replace(body, ',"', ', "') WHERE seq = 3;"#,
    );
    cli_snapshot_in!(
        "receipts_verify_not_canonical",
        d,
        &["receipts", "verify", "store.db"]
    );
}

#[test]
fn receipts_checkpoint_refused_with_another_key_or_edited() {
    let dir = receipts_dir(3);
    let d = dir.path();
    assert!(ipc_in(d, CHECKPOINT).starts_with("exit: 0\n"));
    let other = [
        "receipts",
        "verify",
        "store.db",
        "--checkpoint",
        "cp.json",
        "--key",
        "other.pub",
    ];
    cli_snapshot_in!("receipts_verify_checkpoint_wrong_key", d, &other);
    let mut json_args = other.to_vec();
    json_args.extend(["--format", "json"]);
    cli_snapshot_in!("receipts_verify_checkpoint_wrong_key_json", d, &json_args);
    // a secret key is not a verifying key
    let secret = [
        "receipts",
        "verify",
        "store.db",
        "--checkpoint",
        "cp.json",
        "--key",
        "ops.key",
    ];
    let out = ipc_in(d, &secret);
    assert!(out.starts_with("exit: 1\n"), "{out}");
    assert!(out.contains("ipc::key::format"), "{out}");
    // moved back a record: the signature no longer holds
    let text = std::fs::read_to_string(d.join("cp.json")).unwrap();
    std::fs::write(d.join("cp.json"), text.replace("\"seq\": 3", "\"seq\": 2")).unwrap();
    cli_snapshot_in!("receipts_verify_checkpoint_edited", d, VERIFY_CHECKPOINT);
    std::fs::write(d.join("cp.json"), "{\"seq\": 3}").unwrap();
    cli_snapshot_in!("receipts_verify_checkpoint_malformed", d, VERIFY_CHECKPOINT);
    // a checkpoint without its key is a usage error
    let out = ipc_in(
        d,
        &["receipts", "verify", "store.db", "--checkpoint", "cp.json"],
    );
    assert!(out.starts_with("exit: 2\n"), "{out}");
}

#[test]
fn receipts_checkpoint_refuses_a_store_that_does_not_verify() {
    let dir = receipts_dir(3);
    let d = dir.path();
    tamper(d, "DELETE FROM receipts WHERE seq = 2");
    cli_snapshot_in!("receipts_checkpoint_unverified", d, CHECKPOINT);
    assert!(!d.join("cp.json").exists());
    let mut json_args = CHECKPOINT.to_vec();
    json_args.extend(["--format", "json"]);
    let out = ipc_in(d, &json_args);
    assert!(out.starts_with("exit: 1\n"), "{out}");
    assert!(
        out.contains("\"code\": \"ipc::receipts::unverified\""),
        "{out}"
    );
    assert!(out.contains("\"problem\": \"missing\""), "{out}");
    // an empty store has nothing to checkpoint
    let empty = receipts_dir(0);
    cli_snapshot_in!("receipts_checkpoint_empty", empty.path(), CHECKPOINT);
}

// `ipc token issue --only` / `--strict`: the narrowing a mandate signs,
// and each refusal up front (exit code and the rendered diagnostic).

#[cfg(feature = "solver")]
/// A folder with the bank bundle (`b.json`, signed with `r.key`) and an
/// issuer key (`k.key`).
fn setup() -> tempfile::TempDir {
    setup_pack("bank")
}

/// A folder with `packs/NAME` built into `b.json`, signed with `r.key`,
/// and an issuer key `k.key`.
fn setup_pack(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let pack = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packs")
        .join(name);
    for args in [
        &["keygen", "-o", "r"][..],
        &[
            "build",
            pack.to_str().expect("utf-8 path"),
            "-o",
            "b.json",
            "--sign",
            "r.key",
        ],
        &["keygen", "-o", "k"],
    ] {
        let out = ipc_in(dir.path(), args);
        assert!(out.starts_with("exit: 0\n"), "{out}");
    }
    dir
}

#[cfg(feature = "solver")]
/// `ipc token issue` for emma on the bank bundle, with `extra` options.
fn issue(dir: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "token",
        "issue",
        "--bundle",
        "b.json",
        "--bundle-key",
        "r.pub",
        "--key",
        "k.key",
        "--pack",
        "bank",
        "--user",
        "emma",
        "--claim",
        "account=emma-checking",
        "--claim",
        "payee=NL91ABNA0417164300",
    ];
    args.extend_from_slice(extra);
    ipc_in(dir, &args)
}

#[cfg(feature = "solver")]
/// The `sources` of the token an exit-0 `issue` printed.
fn sources(out: &str) -> Value {
    assert!(out.starts_with("exit: 0\n"), "{out}");
    let stdout = &out
        [out.find("--- stdout\n").expect("stdout") + 11..out.find("--- stderr").expect("stderr")];
    let tok: Value = serde_json::from_str(stdout).expect("a token");
    tok["mandate"]["sources"].clone()
}

#[cfg(feature = "solver")]
#[test]
fn strict_narrows_every_critical_parameter_that_has_a_mandate_source() {
    let dir = setup();
    let out = issue(dir.path(), &["--strict"]);
    // standing_order.update.order_id (registry only) and the parameters
    // that only a mandate gives are left as declared
    assert_eq!(
        sources(&out),
        json!({
            "payment.schedule.recipient": ["mandate.recipient"],
            "payment.send.recipient": ["mandate.recipient"],
            "payment.transfer.payee_iban": ["mandate.payee"],
            "scheduled.update.recipient": ["mandate.recipient"],
            "standing_order.update.payee_iban": ["mandate.payee"],
        })
    );
    let out = issue(dir.path(), &["--strict", "payment.transfer.payee_iban"]);
    assert_eq!(
        sources(&out),
        json!({"payment.transfer.payee_iban": ["mandate.payee"]})
    );
}

#[cfg(feature = "solver")]
/// Issue #21, item 9: `ipc token issue` reads the bundle's table (claim
/// types, what `--strict` narrows) only once its signature verifies, as
/// `ipc run` does. A bundle whose table was edited (here: the mandate
/// source of `payment.transfer.payee_iban` removed, so `--strict` would
/// leave the saved payees open) and re-hashed is refused: unsigned, with a
/// signature that is not over it, or with no key to check it against.
#[test]
fn token_issue_refuses_a_bundle_its_pinned_key_did_not_sign() {
    let dir = setup();
    let path = dir.path().join("b.json");
    let mut b: intentplane::bundle::Bundle =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ta = b
        .table
        .actions
        .iter_mut()
        .find(|t| t.action.name == "payment.transfer")
        .unwrap();
    let p = ta
        .action
        .params
        .iter_mut()
        .find(|p| p.name == "payee_iban")
        .unwrap();
    p.sources
        .retain(|s| !matches!(s, intentplane::ir::Source::Claim { .. }));
    b.hash = b.content_hash().unwrap();
    let signed_stale = b.to_json().unwrap();
    b.signature = None;
    let unsigned = b.to_json().unwrap();
    let edited = dir.path().join("edited.json");
    let run = |bundle: &str, extra: &[&str]| {
        std::fs::write(&edited, bundle).unwrap();
        let mut args = vec![
            "token",
            "issue",
            "--bundle",
            "edited.json",
            "--key",
            "k.key",
            "--pack",
            "bank",
            "--user",
            "emma",
            "--claim",
            "account=emma-checking",
            "--strict",
        ];
        args.extend_from_slice(extra);
        ipc_in(dir.path(), &args)
    };
    for (bundle, extra, code) in [
        (
            &unsigned,
            &["--bundle-key", "r.pub"][..],
            "ipc::bundle::unsigned",
        ),
        (
            &signed_stale,
            &["--bundle-key", "r.pub"][..],
            "ipc::bundle::bad_signature",
        ),
        (&unsigned, &[][..], "ipc::bundle::key_required"),
    ] {
        let out = run(bundle, extra);
        assert!(out.starts_with("exit: 1\n--- stdout\n--- stderr"), "{out}");
        assert!(out.contains(code), "{code}: {out}");
    }
    // the same bundle, unedited and verified, issues (and narrows)
    assert_eq!(
        sources(&issue(dir.path(), &["--strict", "payment.transfer"]))["payment.transfer.payee_iban"],
        json!(["mandate.payee"])
    );
    // development only: an unverified bundle with `--allow-unsigned`, with a warning
    let out = run(&unsigned, &["--allow-unsigned"]);
    assert!(out.starts_with("exit: 0\n"), "{out}");
    assert!(out.contains("read unverified"), "{out}");
}

#[cfg(feature = "solver")]
#[test]
fn only_keeps_the_declared_order_and_drops_repeats() {
    let dir = setup();
    let out = issue(
        dir.path(),
        &[
            "--only",
            "payment.transfer.payee_iban=registry.beneficiaries,mandate.payee,mandate.payee",
        ],
    );
    assert_eq!(
        sources(&out),
        json!({"payment.transfer.payee_iban": ["mandate.payee", "registry.beneficiaries"]})
    );
    // no narrowing: no `sources` key, the token signs as it always did
    let out = issue(dir.path(), &[]);
    assert_eq!(sources(&out), Value::Null);
}

#[cfg(feature = "solver")]
#[test]
fn token_issue_refuses_a_narrowing_the_pack_does_not_allow() {
    let dir = setup();
    let cases: [(&str, &[&str]); 9] = [
        (
            "unknown_action",
            &["--only", "payment.wire.payee_iban=mandate.payee"],
        ),
        (
            "unknown_param",
            &["--only", "payment.transfer.iban=mandate.payee"],
        ),
        (
            "not_critical",
            &["--only", "payment.transfer.amount=mandate.payee"],
        ),
        (
            "undeclared_source",
            &["--only", "payment.transfer.payee_iban=registry.sanctions"],
        ),
        ("empty", &["--only", "payment.transfer.payee_iban="]),
        (
            "no_mandate_source",
            &["--strict", "standing_order.update.order_id"],
        ),
        (
            "twice",
            &[
                "--strict",
                "--only",
                "payment.transfer.payee_iban=registry.beneficiaries",
            ],
        ),
        ("not_a_pair", &["--only", "payment.transfer.payee_iban"]),
        ("nothing_to_narrow", &["--strict", "user.update_password"]),
    ];
    for (name, extra) in cases {
        let out = issue(dir.path(), extra);
        assert!(
            out.starts_with("exit: 1\n--- stdout\n--- stderr"),
            "{name}: {out}"
        );
        insta::with_settings!({
            snapshot_path => "../../snapshots/cli",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(format!("token_issue_narrowing_{name}"), out);
        });
    }
}

#[cfg(feature = "solver")]
/// Issue #40, item 14: what a token will be refused for is said when it
/// is issued: an owner the world holds no records of (the user, when
/// `--owner` is left out), a granted action's value that only a missing
/// claim could give. The token is still written (exit 0).
#[test]
fn token_issue_warns_of_what_the_token_will_be_refused_for() {
    let dir = setup();
    let regs = Path::new(env!("CARGO_MANIFEST_DIR")).join("packs/bank/registries");
    std::fs::write(
        dir.path().join("w.toml"),
        format!(
            "bundle_keys = [\"r.pub\"]\n[registries]\nbank = {:?}\n",
            regs.display().to_string()
        ),
    )
    .unwrap();
    let stderr = |out: &str| {
        assert!(out.starts_with("exit: 0\n"), "{out}");
        out[out.find("--- stderr\n").expect("stderr") + 11..].to_string()
    };
    // emma's own records, every claim the granted actions need: silent
    let full = [
        "--world",
        "w.toml",
        "--scope",
        "payments.write",
        "--claim",
        "currency=EUR",
    ];
    assert_eq!(stderr(&issue(dir.path(), &full)), "");
    // another owner the world knows nothing of
    let err = stderr(&issue(
        dir.path(),
        &[&full[..], &["--owner", "acme"]].concat(),
    ));
    assert!(
        err.contains(
            "warning: the owner `acme` has no records in the world's registries of `bank`"
        ),
        "{err}"
    );
    // without the world, a left-out owner is named
    let err = stderr(&issue(
        dir.path(),
        &["--scope", "payments.write", "--claim", "currency=EUR"],
    ));
    assert!(
        err.contains("the owner is the user `emma` (no `--owner` was given)"),
        "{err}"
    );
    // a granted action whose currency only the mandate gives
    let err = stderr(&issue(
        dir.path(),
        &["--world", "w.toml", "--scope", "payments.write"],
    ));
    assert!(
        err.contains("`payment.transfer`'s `currency` comes only from the claim `currency`, which this token does not carry"),
        "{err}"
    );
}

#[cfg(feature = "solver")]
/// Issue 42, item 3: `ipc token issue --claim product=@q.json` checks the
/// query against the registry it selects from before anything is signed
/// (`ipc::mandate::selection_invalid`, naming the field, operator or
/// literal), keeps a good one as signed JSON, and warns of one that
/// selects every record (`ipc::mandate::selection_selects_all`).
#[test]
fn token_issue_checks_a_selection_query() {
    let dir = setup_pack("shop");
    let run = |name: &str, query: &str| {
        std::fs::write(dir.path().join(format!("{name}.json")), query).unwrap();
        let claim = format!("product=@{name}.json");
        ipc_in(
            dir.path(),
            &[
                "token",
                "issue",
                "--bundle",
                "b.json",
                "--bundle-key",
                "r.pub",
                "--key",
                "k.key",
                "--pack",
                "shop",
                "--user",
                "maya",
                "--now",
                "2026-11-27T18:00:00Z",
                "--claim",
                "account=mayaortiz",
                "--claim",
                &claim,
            ],
        )
    };
    let good = run(
        "good",
        r#"{"where": [["category", "==", "Headphones"], ["name", "contains_word", "bluetooth"],
                     ["rating", ">", 40], ["price", "<=", "60.00"]],
            "pick": {"min": "price"}, "limit": 1}"#,
    );
    assert!(good.starts_with("exit: 0\n"), "{good}");
    let stdout = &good
        [good.find("--- stdout\n").expect("stdout") + 11..good.find("--- stderr").expect("stderr")];
    let tok: Value = serde_json::from_str(stdout).expect("a token");
    assert_eq!(
        tok["mandate"]["claims"]["product"]["pick"],
        serde_json::json!({"min": "price"})
    );
    for (name, query) in [
        ("unknown_field", r#"{"where": [["colour", "==", "black"]]}"#),
        ("op_for_type", r#"{"where": [["name", "<", "m"]]}"#),
        ("bad_money", r#"{"where": [["price", "<=", "cheap"]]}"#),
        (
            "substring",
            r#"{"where": [["name", "contains_word", "blue tooth"]]}"#,
        ),
        ("pick_text", r#"{"pick": {"min": "brand"}}"#),
        ("not_json", r#"{"where": "#),
    ] {
        let out = run(name, query);
        assert!(
            out.starts_with("exit: 1\n--- stdout\n--- stderr"),
            "{name}: {out}"
        );
        if name != "not_json" {
            assert!(out.contains("selection_invalid"), "{name}: {out}");
        }
        insta::with_settings!({
            snapshot_path => "../../snapshots/cli",
            prepend_module_to_snapshot => false,
            omit_expression => true,
        }, {
            insta::assert_snapshot!(format!("token_issue_selection_{name}"), out);
        });
    }
    let all = run("all", r#"{"limit": 2}"#);
    assert!(all.starts_with("exit: 0\n"), "{all}");
    assert!(all.contains("selection_selects_all"), "{all}");
}
