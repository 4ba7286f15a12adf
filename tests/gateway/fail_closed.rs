//! Issue #11: the gateway fails closed when its configuration or its input
//! is wrong. One test per item; each failed on the main line before the fix
//! (the reproduction is in each test's comment). A wrong configuration
//! refuses to start, naming what is wrong; a hostile line is a DENY with a
//! receipt, and the run goes on.

use crate::common;
use common::cli::{ipc, lines};
use common::*;
use intentplane::gateway::Outcome;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The diagnostics on stderr as one line of words: miette wraps a message
/// where the terminal width and the length of a path in it say (a long
/// `TMPDIR` moves the breaks), so a test reads the words, not the lines.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr)
        .split_whitespace()
        .filter(|w| *w != "│")
        .collect::<Vec<_>>()
        .join(" ")
}

/// `ipc run` over `input` with emma's mandate, on a fresh SQLite store;
/// returns the output and the store's path.
fn run_lines(w: &TestWorld, input: &str, extra: &[&str]) -> (Output, PathBuf) {
    let m = w.dir.path().join(format!("m-{}.json", random()));
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let db = w.dir.path().join(format!("s-{}.db", random()));
    let mut args = vec![
        "run".to_string(),
        "--bundle".into(),
        path_str(&w.bundle_path),
        "--world".into(),
        path_str(&w.world_path),
        "--store".into(),
        path_str(&db),
        "--mandate".into(),
        path_str(&m),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    (ipc(&refs, input), db)
}

fn random() -> String {
    intentplane::gateway::approval::random_id().unwrap()
}

fn verify_chain(db: &Path) {
    let out = ipc(&["receipts", "verify", &path_str(db)], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

// ---- 1. claims are canonicalised when the token is verified -------------

/// Reproduced on main: a payee claim spelled `GB29 NWBK 6016 1331 9268 19`
/// passed provenance, but the sanctions fact compared the raw spelling:
/// ALLOW, `result.to = "GB29 NWBK ..."`.
#[test]
fn a_claim_in_another_spelling_is_the_canonical_value() {
    let w = TestWorld::new();
    let gw = w.gateway();
    for spelling in ["GB29 NWBK 6016 1331 9268 19", "gb29nwbk60161331926819"] {
        // forged: the issuing code would sign the canonical spelling; the
        // gateway must canonicalise a token whoever signed it
        let m = w.forge_mandate(MandateSpec::bank("emma").claim("payee", json!([spelling])));
        let d = decide(&gw, transfer(SANCTIONED, json!("10.00")), &m);
        assert_deny(&d, "policy", "sanctioned payee");
        assert_eq!(d.resolved["payee_iban"], json!(SANCTIONED));
    }
    // a payee that is not sanctioned is paid with the canonical spelling
    let m = w.forge_mandate(
        MandateSpec::bank("emma").claim("payee", json!(["DE89 3704 0044 0532 0130 00"])),
    );
    let d = decide(&gw, transfer("de89370400440532013000", json!("10.00")), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.result.as_ref().unwrap()["to"], "DE89370400440532013000");
}

/// Whoever issued it, a token whose claims do not type-check is refused at
/// authn: an undeclared claim, a value that is no IBAN, a number where a
/// string is declared, a scalar where a set is.
#[test]
fn claims_that_do_not_type_check_are_refused_at_authn() {
    let w = TestWorld::new();
    let gw = w.gateway();
    for (claim, value, needle) in [
        (
            "payee",
            json!(["DE89 3704 0044 0532 0130 01"]),
            "wrong checksum",
        ),
        ("payee", json!(["DE89\u{200b}370400440532013000"]), "U+200B"),
        ("payee", json!("DE89370400440532013000"), "expected a list"),
        ("account", json!(42), "expected a string"),
        ("origin", json!("user"), "not declared"),
    ] {
        // forged: the issuing code refuses each of these claims
        let m = w.forge_mandate(MandateSpec::bank("emma").claim(claim, value));
        let d = decide(&gw, transfer(LANDLORD, json!("1.00")), &m);
        assert_deny(&d, "authn", needle);
        assert!(!d.reason.as_ref().unwrap().contains('\u{200b}'));
    }
}

// ---- 2. an integer beyond ±(2^53 − 1) is a DENY, never a stop ----------

/// Reproduced on main: `ipc serve --stdio` exited 1 at such a line and never
/// decided the next; `ipc run` exited 1 and rolled back the whole batch.
#[test]
fn an_inexact_integer_is_a_deny_with_a_receipt_and_the_run_goes_on() {
    let w = TestWorld::new();
    let big = r#"{"action":"payment.transfer","args":{"from_account":"emma-checking","payee_iban":"DE44500105175407324931","amount":"1.00","currency":"EUR","subject":"s","n":9007199254740993}}"#;
    let deep = r#"{"action":"payment.transfer","args":{"from_account":"emma-checking","payee_iban":"DE44500105175407324931","amount":"1.00","currency":"EUR","subject":{"x":[18446744073709551615]}}}"#;
    let top = r#"[-9223372036854775808]"#;
    let ok = transfer(LANDLORD, json!("1.00")).to_string();
    let input = [
        ok.as_str(),
        big,
        deep,
        top,
        &transfer(LANDLORD, json!("2.00")).to_string(),
    ]
    .join("\n")
        + "\n";
    for mode in ["run", "serve"] {
        let (out, db) = if mode == "run" {
            run_lines(&w, &input, &[])
        } else {
            run_lines_serve(&w, &input)
        };
        assert!(out.status.success(), "{mode}: {}", stderr(&out));
        let ds = lines(&out);
        assert_eq!(ds.len(), 5, "{mode}: {ds:#?}");
        assert_eq!(ds[0]["decision"], "ALLOW");
        for d in &ds[1..4] {
            assert_eq!(d["decision"], "DENY", "{mode}: {d}");
            assert_eq!(d["stage"], "contract", "{mode}: {d}");
            assert!(d["receipt"]["seq"].is_u64());
        }
        assert!(
            ds[1]["reason"].as_str().unwrap().contains("2^53"),
            "{}",
            ds[1]
        );
        assert_eq!(ds[4]["decision"], "ALLOW");
        verify_chain(&db);
        // the receipt keeps what the agent wrote, as text
        let show = ipc(
            &["receipts", "show", &path_str(&db), "--format", "json"],
            "",
        );
        let text = String::from_utf8_lossy(&show.stdout);
        assert!(text.contains("9007199254740993") && text.contains("18446744073709551615"));
    }
}

fn run_lines_serve(w: &TestWorld, input: &str) -> (Output, PathBuf) {
    let m = w.dir.path().join(format!("m-{}.json", random()));
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let db = w.dir.path().join(format!("s-{}.db", random()));
    let out = ipc(
        &[
            "serve",
            "--stdio",
            "--allow-frozen-clock",
            "--bundle",
            &path_str(&w.bundle_path),
            "--world",
            &path_str(&w.world_path),
            "--store",
            &path_str(&db),
            "--mandate",
            &path_str(&m),
        ],
        input,
    );
    (out, db)
}

// ---- 3. amounts are read from their decimal text ------------------------

/// Reproduced on main: `1000.00000000000001` was ALLOWed as 100000 cents
/// and `1000.0099999999999999` became 100001.
#[test]
fn amounts_are_never_rounded() {
    let w = TestWorld::new();
    let raw = |amount: &str| {
        format!(
            r#"{{"action":"payment.transfer","args":{{"from_account":"emma-checking","payee_iban":"{LANDLORD}","amount":{amount},"currency":"EUR"}}}}"#
        )
    };
    let input = [
        "10.00000000000000001",
        "10.0099999999999999",
        "10.001",
        "1e1",
        "10.01",
    ]
    .map(raw)
    .join("\n");
    let (out, _) = run_lines(&w, &input, &[]);
    let ds = lines(&out);
    assert_eq!(ds.len(), 5);
    for d in &ds[..3] {
        assert_eq!(
            (d["decision"].as_str(), d["stage"].as_str()),
            (Some("DENY"), Some("contract")),
            "{d}"
        );
    }
    assert!(
        ds[0]["reason"]
            .as_str()
            .unwrap()
            .contains("send it as a string")
    );
    assert!(
        ds[2]["reason"]
            .as_str()
            .unwrap()
            .contains("more than two decimals")
    );
    // the answer carries the amount as the caller's tool takes it
    assert_eq!(ds[3]["resolved"]["amount"], "10.00");
    assert_eq!(ds[4]["resolved"]["amount"], "10.01");
}

// ---- 4. a bundle edited after signing never runs ------------------------

/// The bundle file with `edit` applied to its JSON and the hash recomputed
/// over the result (the stale signature left in place, as an attacker who
/// can write the file but has no signing key would).
fn edited_bundle(w: &TestWorld, name: &str, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(&w.bundle_path).unwrap()).unwrap();
    edit(&mut v);
    let mut content: Map<String, Value> = v.as_object().unwrap().clone();
    content.remove("hash");
    content.remove("signature");
    let hash = format!(
        "sha256:{}",
        intentplane::canonical::sha256_hex(
            intentplane::canonical::value_to_jcs(&Value::Object(content))
                .unwrap()
                .as_bytes()
        )
    );
    v["hash"] = json!(hash);
    let p = w.dir.path().join(name);
    std::fs::write(&p, v.to_string()).unwrap();
    p
}

fn param<'a>(v: &'a mut Value, action: &str, param: &str) -> &'a mut Value {
    let actions = v["table"]["actions"].as_array_mut().unwrap();
    let a = actions
        .iter_mut()
        .find(|a| a["action"]["name"] == action)
        .unwrap();
    a["action"]["params"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == param)
        .unwrap()
}

fn world_without_bundle_keys(w: &TestWorld) -> PathBuf {
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let p = w.dir.path().join("world-unpinned.toml");
    std::fs::write(&p, text.replace("bundle_keys = [\"bundle.pub\"]\n", "")).unwrap();
    p
}

fn start(bundle: &Path, world: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        "--ephemeral",
        "--bundle",
        bundle.to_str().unwrap(),
        "--world",
        world.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    ipc(&args, &transfer(ATTACKER_IBAN, json!("1.00")).to_string())
}

/// Reproduced on main: `payee_iban` made non-critical, hash recomputed,
/// stale signature: loaded without `--bundle-key`, and the attacker's IBAN
/// was paid.
#[test]
fn an_edited_bundle_is_refused() {
    let w = TestWorld::new();
    let unpinned = world_without_bundle_keys(&w);
    // no key pinned and no `--allow-unsigned`: refuses to start
    let out = start(&w.bundle_path, &unpinned, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ipc::bundle::key_required"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());

    // critical flipped and sources dropped, hash recomputed: the pinned key
    // sees the stale signature
    let flipped = edited_bundle(&w, "flipped.json", |v| {
        let p = param(v, "payment.transfer", "payee_iban");
        p["critical"] = json!(false);
        p["sources"] = json!([]);
    });
    let out = start(&flipped, &w.world_path, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ipc::bundle::bad_signature"),
        "{}",
        stderr(&out)
    );
    assert!(out.stdout.is_empty());

    // the table's invariants hold whatever the signature, even unsigned
    type Edit = Box<dyn FnOnce(&mut Value)>;
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "non-critical with sources",
            Box::new(|v| param(v, "payment.transfer", "payee_iban")["critical"] = json!(false)),
            "names trusted sources but is not critical",
        ),
        (
            "critical without a source",
            Box::new(|v| param(v, "payment.transfer", "payee_iban")["sources"] = json!([])),
            "has no trusted source",
        ),
        (
            "a lookup keyed by an untrusted value",
            Box::new(|v| {
                let p = param(v, "invoice.pay", "invoice_id");
                p["critical"] = json!(false);
                p["sources"] = json!([]);
            }),
            "which is not critical",
        ),
        (
            "a rule's policy not evaluated",
            Box::new(|v| {
                let a = v["table"]["actions"]
                    .as_array_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|a| a["action"]["name"] == "payment.transfer")
                    .unwrap();
                let rule = a["rule_policy_ids"][0].clone();
                a["policy_ids"]
                    .as_array_mut()
                    .unwrap()
                    .retain(|id| *id != rule);
            }),
            "one of its rules",
        ),
    ];
    for (what, edit, needle) in cases {
        let p = edited_bundle(&w, "edited.json", edit);
        let out = start(&p, &unpinned, &["--allow-unsigned"]);
        assert_eq!(out.status.code(), Some(1), "{what}");
        let e = stderr(&out);
        assert!(
            e.contains("ipc::bundle::invariant") && e.contains(needle),
            "{what}: {e}"
        );
        let out = ipc(
            &["bundle", "verify", p.to_str().unwrap(), "--allow-unsigned"],
            "",
        );
        assert_eq!(out.status.code(), Some(1), "{what}");
    }
    // the genuine bundle runs with the pinned key
    let out = start(&w.bundle_path, &w.world_path, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

// ---- 5. a missing registry refuses the start ----------------------------

/// Reproduced on main: a bank folder without `sanctions.json` ALLOWed a
/// sanctioned payee; a code folder without `protected_branches.json`
/// merged into `main` at level 0.
#[test]
fn a_missing_registry_refuses_the_start() {
    let w = TestWorld::new();
    let world_text = std::fs::read_to_string(&w.world_path).unwrap();
    for (pack, file) in [
        ("bank", "sanctions.json"),
        ("code", "protected_branches.json"),
    ] {
        let dir = w.dir.path().join(format!("regs-{pack}"));
        std::fs::create_dir_all(&dir).unwrap();
        let src = root().join("packs").join(pack).join("registries");
        for e in std::fs::read_dir(&src).unwrap() {
            let e = e.unwrap();
            if e.file_name() != file {
                std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
            }
        }
        let world = w.dir.path().join(format!("world-{pack}.toml"));
        let line = format!("{pack} = {:?}", src.display().to_string());
        assert!(world_text.contains(&line));
        std::fs::write(
            &world,
            world_text.replace(&line, &format!("{pack} = {:?}", dir.display().to_string())),
        )
        .unwrap();
        let out = start(&w.bundle_path, &world, &[]);
        assert_eq!(out.status.code(), Some(1), "{pack}");
        let e = stderr(&out);
        assert!(
            e.contains("ipc::world::missing_registry") && e.contains(file),
            "{e}"
        );
        assert!(out.stdout.is_empty());
        // an empty registry, written explicitly, is accepted
        std::fs::write(dir.join(file), "{}").unwrap();
        let out = start(&w.bundle_path, &world, &[]);
        assert!(out.status.success(), "{pack}: {}", stderr(&out));
    }
    // a pack with registries but no folder at all
    let world = w.dir.path().join("world-nocode.toml");
    let code_line = world_text
        .lines()
        .find(|l| l.starts_with("code = "))
        .unwrap()
        .to_string();
    std::fs::write(&world, world_text.replace(&(code_line + "\n"), "")).unwrap();
    let out = start(&w.bundle_path, &world, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("ipc::world::missing_registries"),
        "{}",
        stderr(&out)
    );
}

// ---- 9. input edges -------------------------------------------------------

/// Reproduced on main: a blank line got no decision and no receipt.
#[test]
fn every_line_gets_a_decision_even_a_blank_one() {
    let w = TestWorld::new();
    let ok = transfer(LANDLORD, json!("1.00")).to_string();
    let input = format!("{ok}\n\n   \n{ok}\n");
    for (out, db) in [run_lines(&w, &input, &[]), run_lines_serve(&w, &input)] {
        let ds = lines(&out);
        assert_eq!(ds.len(), 4, "{ds:#?}");
        for d in &ds[1..3] {
            assert_eq!(d["decision"], "DENY");
            assert!(d["reason"].as_str().unwrap().contains("empty line"));
            assert!(d["receipt"]["seq"].is_u64());
        }
        verify_chain(&db);
    }
}

/// Reproduced on main: IBAN refusals echoed bidi marks, zero-width
/// characters, newlines and NUL as they were.
#[test]
fn refusal_reasons_never_carry_hidden_characters() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    for hidden in [
        "\u{202e}", "\u{200b}", "\n", "\u{0}", "\u{2066}", "\u{feff}",
    ] {
        for iban in [
            format!("DE89{hidden}370400440532013000"),
            format!("DE89 3704 0044 0532 0130 0{hidden}"),
        ] {
            let d = decide(&gw, transfer(&iban, json!("1.00")), &m);
            assert_eq!(d.decision, Outcome::Deny);
            let shown = format!(
                "{} {}",
                d.reason.clone().unwrap(),
                d.hint.clone().unwrap_or_default()
            );
            assert!(!shown.contains(hidden), "{hidden:?} in {shown:?}");
            assert!(shown.contains("\\u{"), "{shown}");
        }
    }
}

/// Reproduced on main: `upper` turned `"\u00a0p-1001\u3000"` into `P-1001`.
#[test]
fn text_normalisers_refuse_rather_than_fold() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::for_pack(
        "health",
        "dr_lee",
        "dr_lee",
        &["records.read"],
    ));
    let read =
        |id: &str| json!({"action": "record.read", "args": {"patient_id": id, "view": "summary"}});
    let d = decide(&gw, read("p-1001"), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    for disguised in [
        "\u{a0}p-1001\u{3000}",
        "p-1001\u{200b}",
        "\u{202e}p-1001",
        "p\u{2010}1001",
    ] {
        let d = decide(&gw, read(disguised), &m);
        assert_eq!(d.decision, Outcome::Deny, "{disguised:?}: {d:#?}");
        assert!(d.result.is_none());
    }
}

/// Reproduced on main: a 100,001-character subject was refused for the
/// global text bound, not for the parameter's own `max_len 140`.
#[test]
fn a_long_value_is_refused_for_its_own_limit() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let mut p = transfer(LANDLORD, json!("1.00"));
    p["args"]["subject"] = json!("x".repeat(100_001));
    let d = decide(&gw, p, &w.emma());
    assert_deny(&d, "contract", "longer than 140 characters");
}

// ---- the classes of items 1, 2, 3 and 9 as properties ---------------------

mod properties {
    use super::*;
    use intentplane::cli::gateway::parse_line;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    fn world() -> &'static TestWorld {
        static W: OnceLock<TestWorld> = OnceLock::new();
        W.get_or_init(TestWorld::new)
    }

    /// The exact value of a decimal text in cents, when it has one (at most
    /// two decimals once trailing zeros are dropped), computed here from the
    /// text alone.
    fn cents(int: &str, frac: &str) -> Option<i128> {
        let frac = frac.trim_end_matches('0');
        if frac.len() > 2 {
            return None;
        }
        Some(int.parse::<i128>().ok()? * 100 + format!("{frac:0<2}").parse::<i128>().ok()?)
    }

    /// A line the agent may write around a transfer: an amount as a JSON
    /// number with any number of digits, an extra integer anywhere, a blank.
    fn hostile_line() -> impl Strategy<Value = (String, Option<i128>)> {
        let amount = ("[1-9][0-9]{0,5}", "[0-9]{0,22}");
        let big = prop_oneof![
            Just(None),
            (9_007_199_254_740_992u64..=u64::MAX).prop_map(|n| Some(n.to_string())),
            (i64::MIN..=-9_007_199_254_740_992i64).prop_map(|n| Some(n.to_string())),
        ];
        (amount, big, 0..4u8).prop_map(|((int, frac), big, shape)| {
            let num = if frac.is_empty() { int.clone() } else { format!("{int}.{frac}") };
            let exact = if big.is_some() || shape == 3 { None } else { cents(&int, &frac) };
            let extra = match (&big, shape) {
                (Some(b), 0) => format!(r#","subject":{{"n":[{b}]}}"#),
                (Some(b), 1) => format!(r#","n":{b}"#),
                (Some(b), _) => format!(r#","subject":"s","x":{{"y":{b}}}"#),
                (None, _) => String::new(),
            };
            let line = if shape == 3 && big.is_none() {
                "   ".to_string()
            } else {
                format!(
                    r#"{{"action":"payment.transfer","args":{{"from_account":"emma-checking","payee_iban":"{LANDLORD}","amount":{num},"currency":"EUR"{extra}}}}}"#
                )
            };
            (line, exact)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Every hostile line is decided, in a batch that commits: never a
        /// store error, never a rounded amount; what is allowed is the
        /// amount written, to the cent; the chain verifies.
        #[test]
        fn every_line_is_decided_and_no_amount_is_rounded(
            batch in prop::collection::vec(hostile_line(), 1..8)
        ) {
            let w = world();
            let gw = w.gateway();
            let mandate = w.mandate(MandateSpec::bank("emma").claim("payee", json!([])));
            let inputs: Vec<_> = batch.iter().map(|(l, _)| parse_line(l, Some(&mandate))).collect();
            let decided = intentplane::gateway::testkit::decide_batch(&gw, &inputs).expect("a batch of hostile lines commits");
            prop_assert_eq!(decided.len(), batch.len());
            for (d, (line, exact)) in decided.iter().zip(&batch) {
                prop_assert!(d.receipt.is_some());
                match exact {
                    None => prop_assert_eq!(d.decision, Outcome::Deny, "{}", line),
                    Some(c) if d.decision != Outcome::Deny || d.stage.name() != "contract" => {
                        prop_assert_eq!(
                            d.resolved.get("amount").and_then(Value::as_i64).map(i128::from),
                            Some(*c),
                            "{}", line
                        );
                    }
                    Some(_) => {}
                }
            }
            let records = gw.store().receipts().unwrap();
            prop_assert!(intentplane::store::receipts::verify_chain(&records, gw.store().head().unwrap()).is_ok());
        }

        /// A payee claim in any spelling resolves to the canonical IBAN, so
        /// the sanctions list always sees it.
        #[test]
        fn a_claim_in_any_spelling_is_checked_as_the_canonical_iban(
            sanctioned in any::<bool>(),
            cuts in prop::collection::vec(0..22usize, 0..6),
            lower in prop::collection::vec(any::<bool>(), 22),
        ) {
            let w = world();
            let gw = w.gateway();
            let iban = if sanctioned { SANCTIONED } else { "DE89370400440532013000" };
            let mut spelled: String = iban
                .chars()
                .zip(&lower)
                .map(|(c, l)| if *l { c.to_ascii_lowercase() } else { c })
                .collect();
            for c in cuts.iter().rev() {
                spelled.insert(*c.min(&spelled.len()), ' ');
            }
            // forged: signed in the spelling drawn, as another issuer might
            let m = w.forge_mandate(MandateSpec::bank("emma").claim("payee", json!([spelled])));
            let d = decide(&gw, transfer(iban, json!("10.00")), &m);
            if sanctioned {
                prop_assert_eq!(d.decision, Outcome::Deny, "{:?}", spelled);
                prop_assert!(d.reason.as_deref().unwrap_or("").contains("sanctioned"));
            } else {
                prop_assert_eq!(d.decision, Outcome::Allow, "{:?}", spelled);
                prop_assert_eq!(&d.result.as_ref().unwrap()["to"], &json!(iban));
            }
        }
    }
}
