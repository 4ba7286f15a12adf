//! The bundle: determinism, tamper evidence (hash, signature, key), clear
//! errors for every way a file can be wrong, and the `ipc build`, `ipc
//! keygen` and `ipc bundle` commands end to end.

use intentplane::bundle::{Bundle, BundleError};
use intentplane::keys::{KeyError, PublicKey, SecretKey};
use std::path::{Path, PathBuf};
use std::process::Command;

fn shipped_packs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir("packs")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("pack.ipc").is_file())
        .collect();
    v.sort();
    v
}

fn build_ok(paths: &[PathBuf]) -> Bundle {
    let r = intentplane::compile::build(paths);
    assert_eq!(r.errors(), 0, "{:?} {:?}", r.problems, r.failure);
    r.bundle.expect("a bundle")
}

fn bank() -> Bundle {
    build_ok(&[PathBuf::from("packs/bank")])
}

fn key(seed: u8) -> SecretKey {
    SecretKey::from_seed(&[seed; 32])
}

#[test]
fn same_input_gives_byte_identical_files_whatever_the_order() {
    let packs = shipped_packs();
    let one = build_ok(&packs).to_json().unwrap();
    let two = build_ok(&packs).to_json().unwrap();
    assert_eq!(one, two);
    let mut reversed = packs.clone();
    reversed.reverse();
    assert_eq!(one, build_ok(&reversed).to_json().unwrap());
    // folders and files name the same packs
    let files: Vec<PathBuf> = packs.iter().map(|p| p.join("pack.ipc")).collect();
    assert_eq!(one, build_ok(&files).to_json().unwrap());
    // nothing depends on where the build ran
    let cwd = std::env::current_dir().unwrap().display().to_string();
    assert!(!one.contains(&cwd));
    let absolute: Vec<PathBuf> = packs
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap())
        .collect();
    assert_eq!(one, build_ok(&absolute).to_json().unwrap());
}

#[test]
fn write_then_load_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.json");
    let b = bank();
    b.write(&path).unwrap();
    let loaded = Bundle::load(&path, None).unwrap();
    assert_eq!(loaded, b);
    assert_eq!(loaded.format, "intentplane-bundle/1");
    assert!(loaded.hash.starts_with("sha256:") && loaded.hash.len() == 7 + 64);
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        b.to_json().unwrap()
    );
    // the cedar side builds, with the real policy ids, per action
    let cedar = loaded.cedar().unwrap();
    assert_eq!(cedar.policies.policies().count(), b.policies.len());
    let transfer = &cedar.by_action["payment.transfer"];
    let mut ids: Vec<String> = transfer.policies().map(|p| p.id().to_string()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "bank/payment.transfer/forbid/hard-cap",
            "bank/payment.transfer/forbid/sanctioned-payee",
            "bank/payment.transfer/permit",
            "bank/payment.transfer/step_up/large-transfer",
        ]
    );
}

#[test]
fn a_signed_bundle_verifies_with_its_key_only() {
    let mut b = bank();
    let k = key(1);
    b.sign(&k);
    let text = b.to_json().unwrap();
    let ok = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&k.public())).unwrap();
    assert_eq!(ok.signature.as_ref().unwrap().key_id, k.public().id());
    // without a key it loads (hash checked), the signature unchecked
    Bundle::from_bytes(text.as_bytes(), "b.json", None).unwrap();
    // another key
    let err = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&key(2).public())).unwrap_err();
    assert!(matches!(err, BundleError::WrongKey { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "`b.json` is signed by key `{}`, not by the given key `{}`",
            k.public().id(),
            key(2).public().id()
        )
    );
    // a signature from another key, relabelled with the right key id
    let mut forged = b.clone();
    forged.signature.as_mut().unwrap().sig = key(2).sign(b.hash.as_bytes());
    let text = forged.to_json().unwrap();
    let err = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&k.public())).unwrap_err();
    assert!(matches!(err, BundleError::BadSignature { .. }), "{err:?}");
    // the right key's signature over another hash
    let mut replayed = b.clone();
    replayed.signature.as_mut().unwrap().sig = k.sign(b"sha256:0000");
    let text = replayed.to_json().unwrap();
    let err = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&k.public())).unwrap_err();
    assert!(matches!(err, BundleError::BadSignature { .. }), "{err:?}");
    // a signature that is not even base64
    let mut garbled = b.clone();
    garbled.signature.as_mut().unwrap().sig = "%%%".into();
    let text = garbled.to_json().unwrap();
    let err = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&k.public())).unwrap_err();
    assert!(matches!(err, BundleError::BadSignature { .. }), "{err:?}");
    // a key given for an unsigned bundle
    let text = bank().to_json().unwrap();
    let err = Bundle::from_bytes(text.as_bytes(), "b.json", Some(&k.public())).unwrap_err();
    assert!(matches!(err, BundleError::Unsigned { .. }), "{err:?}");
}

#[test]
fn an_edited_policy_is_a_hash_mismatch_naming_both_hashes() {
    let b = bank();
    let text = b.to_json().unwrap();
    // raise the hard cap from 10,000.00 to 90,000.00
    let edited = text.replacen(
        "context.amount > 1000000 }",
        "context.amount > 9000000 }",
        1,
    );
    assert_ne!(edited, text);
    let err = Bundle::from_bytes(edited.as_bytes(), "b.json", None).unwrap_err();
    let BundleError::HashMismatch {
        expected, actual, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(*expected, b.hash);
    assert_ne!(actual, expected);
    let msg = err.to_string();
    assert!(
        msg.contains(&b.hash) && msg.contains(actual.as_str()),
        "{msg}"
    );
    // editing the table is caught the same way
    let edited = text.replacen("\"max\": 100000000", "\"max\": 100000001", 1);
    assert_ne!(edited, text);
    assert!(matches!(
        Bundle::from_bytes(edited.as_bytes(), "b.json", None),
        Err(BundleError::HashMismatch { .. })
    ));
    // so is recomputing nothing but replacing the recorded hash
    let edited = text.replacen(&b.hash, &format!("sha256:{}", "0".repeat(64)), 1);
    assert!(matches!(
        Bundle::from_bytes(edited.as_bytes(), "b.json", None),
        Err(BundleError::HashMismatch { .. })
    ));
}

#[test]
fn every_flipped_byte_is_rejected_or_harmless() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("tiny.ipc");
    std::fs::write(
        &pack,
        "pack tiny version \"1.0.0\" \"one rule\"\nmandate { payee: set<Iban> }\n\
         action pay.it \"Pay\" {\n  scope p.w\n  executor external\n\
         param payee: Iban critical from mandate.payee normalize iban\n\
         param amount: Money range 0.01 .. 100.00\n\
         step_up \"large\" when amount > 50.00\n}\n",
    )
    .unwrap();
    let mut b = build_ok(&[pack]);
    let k = key(3);
    b.sign(&k);
    let bytes = b.to_json().unwrap().into_bytes();
    let mut rejected = 0;
    for i in 0..bytes.len() {
        // a different bit at each position: letters, digits, quotes, braces
        let bit = 1u8 << (i % 7);
        let mut flipped = bytes.clone();
        flipped[i] ^= bit;
        match Bundle::from_bytes(&flipped, "b.json", Some(&k.public())) {
            Err(_) => rejected += 1,
            // only a change JSON does not see (whitespace) may load, and
            // then it must be the very same bundle
            Ok(loaded) => assert_eq!(loaded, b, "byte {i} ^ {bit:#x} changed the bundle"),
        }
    }
    // everything but a few whitespace flips (space <-> tab, newline <-> cr)
    assert!(
        rejected * 10 > bytes.len() * 9,
        "{rejected} of {} flips rejected",
        bytes.len()
    );
}

#[test]
fn files_that_are_not_bundles_get_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    let err = Bundle::load(&missing, None).unwrap_err();
    assert!(matches!(err, BundleError::Io { .. }), "{err:?}");
    assert!(err.to_string().starts_with("cannot read `"));
    let err = Bundle::load(dir.path(), None).unwrap_err();
    assert!(matches!(err, BundleError::Io { .. }), "{err:?}");

    let err = Bundle::from_bytes(b"pack bank", "x", None).unwrap_err();
    assert!(matches!(err, BundleError::NotJson { .. }), "{err:?}");
    let err = Bundle::from_bytes(b"[1, 2]", "x", None).unwrap_err();
    assert!(matches!(err, BundleError::NotABundle { .. }), "{err:?}");
    let err = Bundle::from_bytes(b"{\"hash\": \"x\"}", "x", None).unwrap_err();
    assert!(matches!(err, BundleError::NotABundle { .. }), "{err:?}");

    let text = bank().to_json().unwrap();
    let future = text.replacen("intentplane-bundle/1", "intentplane-bundle/2", 1);
    let err = Bundle::from_bytes(future.as_bytes(), "x", None).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`x` has format `intentplane-bundle/2`, this ipc reads `intentplane-bundle/1`"
    );
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("hash");
    let err = Bundle::from_bytes(v.to_string().as_bytes(), "x", None).unwrap_err();
    assert!(matches!(err, BundleError::Malformed { .. }), "{err:?}");

    // an extra field, hashed correctly, is still refused
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let obj = v.as_object_mut().unwrap();
    obj.remove("hash");
    obj.insert("extra".into(), serde_json::json!(true));
    let hash = intentplane::canonical::hash_of(&v).unwrap();
    v.as_object_mut()
        .unwrap()
        .insert("hash".into(), serde_json::json!(hash));
    let err = Bundle::from_bytes(v.to_string().as_bytes(), "x", None).unwrap_err();
    assert!(matches!(err, BundleError::Malformed { .. }), "{err:?}");
}

#[test]
fn a_table_naming_a_missing_policy_is_refused_even_with_a_valid_hash() {
    let mut b = bank();
    b.table.actions[0].policy_ids.push("bank/nowhere".into());
    b.hash = b.content_hash().unwrap();
    let err = Bundle::from_bytes(b.to_json().unwrap().as_bytes(), "x", None).unwrap_err();
    assert!(err.to_string().contains("bank/nowhere"), "{err}");
}

#[test]
fn integers_canonical_json_would_round_fail_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let pack = dir.path().join("big.ipc");
    std::fs::write(
        &pack,
        "pack big version \"1\" \"big\"\naction a.b \"x\" {\n  scope s.w\n  executor external\n  param n: Int range 0 .. 9_007_199_254_740_993\n}\n",
    )
    .unwrap();
    let r = intentplane::compile::build(&[pack]);
    assert!(r.bundle.is_none());
    let err = r.failure.expect("a failure");
    assert!(err.to_string().contains("9007199254740993"), "{err}");
}

#[test]
fn a_broken_pack_gives_no_bundle() {
    let r = intentplane::compile::build(&[
        PathBuf::from("packs/bank"),
        PathBuf::from("tests/fixtures/codegen/custom_bad"),
    ]);
    assert!(r.bundle.is_none());
    assert_eq!(r.errors(), 1);
    let r = intentplane::compile::build(&[PathBuf::from("tests/fixtures/check/untrusted_key.ipc")]);
    assert!(r.bundle.is_none());
    assert!(r.errors() >= 1);
    assert!(
        r.problems.is_empty(),
        "codegen does not run on a pack with errors"
    );
}

// ---- the commands --------------------------------------------------------

fn ipc(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("NO_COLOR", "1")
        .output()
        .expect("run ipc");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[cfg(feature = "solver")]
#[test]
fn keygen_build_sign_verify_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("ops");
    let (code, out) = ipc(&["keygen", "-o", s(&name)]);
    assert_eq!(code, 0, "{out}");
    let sk = dir.path().join("ops.key");
    let pk = dir.path().join("ops.pub");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&sk).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let id = PublicKey::load(&pk).unwrap().id();
    assert!(out.contains(&id), "{out}");
    // never overwrites
    let (code, out) = ipc(&["keygen", "-o", s(&name)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("already exists"), "{out}");

    let out_file = dir.path().join("b.json");
    let (code, out) = ipc(&["build", "packs/bank", "-o", s(&out_file), "--sign", s(&sk)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("signed with key {id}")), "{out}");

    let (code, out) = ipc(&["bundle", "verify", s(&out_file), "--key", s(&pk)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains(&format!("verified with key {id}")), "{out}");
    // issue #11, item 4: without a key, a signed bundle is never `ok`
    let (code, out) = ipc(&["bundle", "verify", s(&out_file)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ipc::bundle::key_required"), "{out}");
    assert!(!out.contains("ok "), "{out}");
    let (code, out) = ipc(&["bundle", "verify", s(&out_file), "--allow-unsigned"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("intact "), "{out}");
    assert!(out.contains("NOT checked"), "{out}");
    let (code, out) = ipc(&[
        "bundle",
        "verify",
        s(&out_file),
        "--allow-unsigned",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["signed"], true);
    assert_eq!(v["ok"], false);
    assert_eq!(v["intact"], true);
    assert_eq!(v["signature_verified"], false);

    // the wrong key
    let other = dir.path().join("other");
    assert_eq!(ipc(&["keygen", "-o", s(&other)]).0, 0);
    let (code, out) = ipc(&[
        "bundle",
        "verify",
        s(&out_file),
        "--key",
        s(&dir.path().join("other.pub")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ipc::bundle::wrong_key"), "{out}");

    // a flipped byte inside a policy
    let text = std::fs::read_to_string(&out_file).unwrap();
    let tampered = dir.path().join("t.json");
    std::fs::write(&tampered, text.replacen("> 1000000", "> 1000001", 1)).unwrap();
    let (code, out) = ipc(&["bundle", "verify", s(&tampered), "--key", s(&pk)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("has been modified"), "{out}");
    let (code, out) = ipc(&["bundle", "inspect", s(&tampered)]);
    assert_eq!(code, 1, "{out}");

    let (code, out) = ipc(&["bundle", "inspect", s(&out_file)]);
    assert_eq!(code, 0, "{out}");
    for want in [
        "pack bank 0.1.0",
        "action payment.transfer",
        "critical from mandate.payee | registry.beneficiaries",
        "range 0.01 .. 1000000.00",
        "bank/payment.transfer/forbid/hard-cap",
        &format!("yes, key {id}"),
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    let (code, out) = ipc(&["bundle", "inspect", s(&out_file), "--format", "json"]);
    assert_eq!(code, 0, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let transfer = v["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "payment.transfer")
        .unwrap();
    assert_eq!(transfer["params"][1]["name"], "payee_iban");
    assert_eq!(
        transfer["params"][1]["sources"],
        serde_json::json!(["mandate.payee", "registry.beneficiaries"])
    );
    assert_eq!(v["policy_count"], v["policies"].as_array().unwrap().len());
}

#[test]
fn build_failures_write_nothing_and_exit_1() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("b.json");
    let (code, out) = ipc(&[
        "build",
        "tests/fixtures/codegen/custom_bad",
        "-o",
        s(&out_file),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("policy.cedar:7:8"), "{out}");
    assert!(out.contains("no bundle written: 1 error"), "{out}");
    assert!(!out_file.exists());

    let (code, out) = ipc(&[
        "build",
        "packs/bank",
        "-o",
        s(&out_file),
        "--sign",
        s(&dir.path().join("nokey.key")),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("cannot read"), "{out}");
    assert!(!out_file.exists());

    let (code, out) = ipc(&[
        "build",
        "tests/fixtures/codegen/custom_syntax",
        "-o",
        s(&out_file),
        "--format",
        "json",
    ]);
    assert_eq!(code, 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["diagnostics"][0]["code"], "ipc::cedar_syntax");
    assert_eq!(v["diagnostics"][0]["labels"][0]["line"], 4);
    assert!(!out_file.exists());
}

#[test]
fn key_errors_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("k.pub");
    std::fs::write(&p, "{}").unwrap();
    assert!(matches!(PublicKey::load(&p), Err(KeyError::Format { .. })));
    std::fs::write(&p, r#"{"alg":"ed25519","public":"AAAA"}"#).unwrap();
    let err = PublicKey::load(&p).unwrap_err();
    assert!(matches!(err, KeyError::Encoding { .. }), "{err:?}");
    assert!(err.to_string().contains("3 bytes, expected 32"), "{err}");
}
