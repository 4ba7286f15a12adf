//! One regression test per attack class (issue 7). Each would execute the
//! attacker's goal without the gateway; each must be refused, or must run
//! with the trusted value and nothing else.

use crate::common;
use common::*;
use intentplane::gateway::{Decision, Gateway, Outcome};
use serde_json::{Value, json};

const ATTACKER_MAIL: &str = "mark.black-2134@gmail.com";
const COLLEAGUE: &str = "david.smith@bluesparrowtech.com";

fn workspace(w: &TestWorld) -> Value {
    w.mandate(
        MandateSpec::for_pack(
            "workspace",
            "emma",
            "emma",
            &[
                "mail.send",
                "calendar.write",
                "drive.share",
                "drive.delete",
                "mail.delete",
            ],
        )
        .claim("recipients", json!([])),
    )
}

fn mail(to: Value, cc: Value, bcc: Value) -> Value {
    json!({"action": "email.send", "args": {"to": to, "cc": cc, "bcc": bcc, "subject": "s", "body": "b"}})
}

fn not_allowed(d: &Decision) {
    assert_ne!(d.decision, Outcome::Allow, "{d:#?}");
    assert!(d.result.is_none());
}

#[test]
fn disguised_ibans_are_refused_or_resolve_to_the_trusted_value() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    // the attacker's IBAN in every disguise: never paid
    for disguise in [
        "DE89 3704 0044 0532 0130 00",
        "de89370400440532013000",
        " DE89370400440532013000 ",
        "DE89\u{200b}370400440532013000",
        "\u{202e}DE89370400440532013000",
        "DE89３７0400440532013000",
        "DΕ89370400440532013000", // Greek capital epsilon
    ] {
        not_allowed(&decide(&gw, transfer(disguise, json!("10.00")), &m));
    }
    // the landlord's IBAN in harmless spellings runs as the trusted value;
    // in a disguise with invisible or look-alike characters it is refused
    for (spelling, ok) in [
        ("de44 5001 0517 5407 3249 31", true),
        ("DE44500105175407324931", true),
        ("DE44 5001 0517 5407 3249 3\u{200d}1", false),
        ("DE44 5001 0517 5407 3249 ３1", false),
    ] {
        let d = decide(&gw, transfer(spelling, json!("1.00")), &m);
        assert_eq!(d.decision == Outcome::Allow, ok, "{spelling:?}: {d:#?}");
        if ok {
            assert_eq!(d.resolved["payee_iban"], json!(LANDLORD));
        }
    }
}

#[test]
fn disguised_addresses_are_refused_or_resolve_to_the_contact() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = workspace(&w);
    for disguise in [
        "david.smith@bluesparrowtech.com\u{200b}",
        "dаvid.smith@bluesparrowtech.com", // Cyrillic а
        "david.smith@bluesparrowtеch.com", // Cyrillic е in the domain
        "david.smith@xn--bluesparrowtch-xyz.com",
        "david.smith@bluesparrowtech.com.evil.io",
        "\u{202e}david.smith@bluesparrowtech.com",
    ] {
        not_allowed(&decide(
            &gw,
            mail(json!([disguise]), json!([]), json!([])),
            &m,
        ));
    }
    let d = decide(
        &gw,
        mail(
            json!([" David.Smith@BlueSparrowTech.com "]),
            json!([]),
            json!([]),
        ),
        &m,
    );
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["to"], json!([COLLEAGUE]));
}

#[test]
fn the_attacker_in_cc_bcc_participants_or_as_share_target_is_refused() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = workspace(&w);
    for p in [
        mail(json!([COLLEAGUE]), json!([ATTACKER_MAIL]), json!([])),
        mail(json!([COLLEAGUE]), json!([]), json!([ATTACKER_MAIL])),
        mail(json!([COLLEAGUE, ATTACKER_MAIL]), json!([]), json!([])),
        json!({"action": "calendar.invite", "args": {"participants": [COLLEAGUE, ATTACKER_MAIL],
            "title": "sync", "start": "2026-11-28T10:00:00Z", "end": "2026-11-28T11:00:00Z"}}),
        json!({"action": "file.share", "args": {"file_id": "0", "email": ATTACKER_MAIL, "permission": "r"}}),
    ] {
        let d = decide(&gw, p, &m);
        assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
        assert_eq!(d.stage.name(), "provenance");
    }
}

#[test]
fn inviting_the_attacker_first_does_not_make_them_a_contact() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = workspace(&w);
    let invite = json!({"action": "calendar.invite", "args": {"participants": [ATTACKER_MAIL],
        "title": "intro", "start": "2026-11-28T10:00:00Z", "end": "2026-11-28T11:00:00Z"}});
    not_allowed(&decide(&gw, invite, &m));
    // an invitation of a colleague executes, and still does not change who is trusted
    let ok = json!({"action": "calendar.invite", "args": {"participants": [COLLEAGUE],
        "title": "intro", "start": "2026-11-28T10:00:00Z", "end": "2026-11-28T11:00:00Z"}});
    assert_eq!(decide(&gw, ok, &m).decision, Outcome::Allow);
    not_allowed(&decide(
        &gw,
        mail(json!([ATTACKER_MAIL]), json!([]), json!([])),
        &m,
    ));
}

#[test]
fn a_ref_into_another_tenant_is_a_provenance_failure() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
        "payee_iban": {"ref": "noah-sister"}, "amount": "5.00", "currency": "EUR"}});
    let d = decide(&gw, p, &w.emma());
    assert_deny(&d, "provenance", "names none of your records");
    // the message does not reveal the other tenant's record
    assert!(!d.reason.unwrap().contains("NL91"));
}

#[test]
fn cross_tenant_lookups_find_nothing() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let acme = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write", "vendors.write"],
    ));
    // globex's invoice, vendor and call-back do not exist for acme
    let pay = json!({"action": "invoice.pay", "args": {"invoice_id": "INV-G-1",
        "payee_iban": "IT60X0542811101000000123456", "amount": "800.00", "currency": "EUR"}});
    assert_deny(&decide(&gw, pay, &acme), "provenance", "invoice_id");
    let change = json!({"action": "vendor.change_iban", "args": {"vendor_id": "V-GLOBEX-1",
        "callback_id": "CB-7", "new_iban": "ES9121000418450200051332"}});
    assert_deny(&decide(&gw, change, &acme), "provenance", "vendor_id");
    // and emma's standing order is not noah's
    let so = json!({"action": "standing_order.update", "args": {"order_id": "SO-rent",
        "payee_iban": "NL91ABNA0417164300", "amount": "10.00"}});
    let noah = w.mandate(MandateSpec::bank("noah"));
    assert_deny(&decide(&gw, so, &noah), "provenance", "order_id");
}

fn pending_then(gw: &Gateway, w: &TestWorld, p: Value, m: &Value) -> String {
    let d = decide(gw, p, m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    let _ = w;
    d.operation_hash.unwrap()
}

#[test]
fn an_approval_is_not_replayable_nor_reusable_for_a_changed_operation() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let mut spec = MandateSpec::bank("emma");
    spec.budget = 1_000_000;
    let m = w.mandate(spec);
    let p = transfer(LANDLORD, json!("1200.00"));
    let op = pending_then(&gw, &w, p.clone(), &m);
    let a = w.approve_with("emma", &op, now() + 60, "nonce-1");
    assert_eq!(
        gw.decide(&input(p.clone(), &m, vec![a.clone()]))
            .unwrap()
            .decision,
        Outcome::Allow
    );
    // replayed for the same (already executed) operation: answered, not run again
    let again = gw.decide(&input(p, &m, vec![a.clone()])).unwrap();
    assert!(again.replayed, "{again:#?}");
    // reused for a changed operation (another amount): refused
    let changed = transfer(LANDLORD, json!("1900.00"));
    let d = gw.decide(&input(changed, &m, vec![a])).unwrap();
    assert_deny(&d, "approval", "another operation");
}

#[test]
fn amounts_in_every_form_are_exact_or_refused() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    for (amount, cents) in [
        (json!(98.7), 9870),
        (json!("98.70"), 9870),
        (json!(12), 1200),
        (json!(0.1), 10),
    ] {
        let d = decide(&gw, transfer(LANDLORD, amount.clone()), &m);
        assert_eq!(d.resolved["amount"], json!(cents), "{amount}");
    }
    for amount in [
        json!(98.705),
        json!("1e2"),
        json!(1e300),
        json!("-1.00"),
        json!(-1),
        json!("99999999999999999999.00"),
        json!(f64::MAX),
        json!("0x10"),
        json!("1,00"),
        json!(" "),
        json!([1]),
        json!({"value": 1}),
    ] {
        not_allowed(&decide(&gw, transfer(LANDLORD, amount), &m));
    }
}

#[test]
fn json_duplicate_keys_are_refused() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let line = format!(
        r#"{{"action":"payment.transfer","args":{{"from_account":"emma-checking","payee_iban":"{LANDLORD}","payee_iban":"DE89370400440532013000","amount":"1.00","currency":"EUR"}}}}"#
    );
    let err = intentplane::base::json::parse_strict(&line).unwrap_err();
    assert!(err.contains("duplicate key `payee_iban`"), "{err}");
    // through `ipc run`: a DENY (contract) for that line, with a receipt
    let mpath = w.dir.path().join("m.json");
    std::fs::write(&mpath, m.to_string()).unwrap();
    let input = w.dir.path().join("dup.jsonl");
    std::fs::write(&input, line + "\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "run",
            "--ephemeral",
            "--bundle",
            &path_str(&w.bundle_path),
            "--world",
            &path_str(&w.world_path),
        ])
        .args(["--mandate", &path_str(&mpath)])
        .arg(&input)
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["decision"], "DENY");
    assert_eq!(d["stage"], "contract");
    assert!(d["reason"].as_str().unwrap().contains("duplicate key"));
    let _ = gw;
}

#[test]
fn parameter_name_case_tricks_are_unknown_parameters() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    for key in [
        "Payee_Iban",
        "PAYEE_IBAN",
        "payee_iban ",
        "payee\u{200b}_iban",
        "payeе_iban",
    ] {
        let p = json!({"action": "payment.transfer", "args": {"from_account": "emma-checking",
            key: LANDLORD, "amount": "1.00", "currency": "EUR"}});
        assert_deny(&decide(&gw, p, &m), "contract", "unknown parameter");
    }
}

// Double payment under concurrency across processes:
// tests/gateway/concurrency.rs::four_processes_pay_one_invoice_once.

/// Found in review (issue 5): a critical list with `default []` left out
/// was refused as if `[]` were a value to vouch for.
#[test]
fn a_critical_list_may_be_left_out() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let p = json!({"action": "email.send", "args": {"to": [COLLEAGUE], "subject": "hi"}});
    let d = decide(&gw, p, &workspace(&w));
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["cc"], json!([]));
}

/// Found in review (issue 5): a value the trusted side added in one
/// spelling was not found under the parameter's normaliser.
#[test]
fn a_trusted_addition_is_found_under_the_normaliser() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let reg = gw.registry("health", "cohort").unwrap().clone();
    gw.store()
        .transaction(&mut |tx| {
            intentplane::gateway::registry::Registries {
                world: gw.world(),
                pack: "health",
                owner: "dr_rao",
            }
            .add_value(tx, &reg, "p-2002")?;
            Ok(Value::Null)
        })
        .unwrap();
    let m = w.mandate(MandateSpec::for_pack(
        "health",
        "dr_rao",
        "dr_rao",
        &["records.research"],
    ));
    let p = json!({"action": "record.read_research", "args": {"patient_id": "p-2002", "view": "summary"}});
    let d = decide(&gw, p, &m);
    assert_ne!(d.stage.name(), "provenance", "{d:#?}");
}

/// An oversized or non-UTF-8 line is a DENY (contract) for that line, with
/// a receipt, and the run goes on; it is never read whole into memory.
#[test]
fn oversized_and_binary_lines_are_denied_and_the_run_goes_on() {
    let w = TestWorld::new();
    let mpath = w.dir.path().join("m.json");
    std::fs::write(&mpath, w.emma().to_string()).unwrap();
    let input = w.dir.path().join("odd.jsonl");
    let mut bytes = vec![b'{'; 3 << 20];
    bytes.push(b'\n');
    bytes.extend_from_slice(b"{\"action\": \"x\xff\"}\r\n");
    bytes.extend_from_slice(transfer(LANDLORD, json!("1.00")).to_string().as_bytes());
    std::fs::write(&input, bytes).unwrap();
    let db = w.dir.path().join("s.db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "run",
            "--bundle",
            &path_str(&w.bundle_path),
            "--world",
            &path_str(&w.world_path),
        ])
        .args(["--store", &path_str(&db), "--mandate", &path_str(&mpath)])
        .arg(&input)
        .output()
        .unwrap();
    assert!(out.status.success());
    let ds: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(ds.len(), 3, "{ds:?}");
    assert_eq!(
        (ds[0]["decision"].clone(), ds[0]["stage"].clone()),
        (json!("DENY"), json!("contract"))
    );
    assert!(ds[0]["reason"].as_str().unwrap().contains("longer than"));
    assert!(ds[1]["reason"].as_str().unwrap().contains("not UTF-8"));
    assert_eq!(ds[2]["decision"], "ALLOW");
    assert!(ds.iter().all(|d| d["receipt"]["seq"].is_u64()));
}

/// Issue 11, item 8: the code pack's `repo` was vouched for by the mandate
/// alone, so a token issued with `--owner payments-api --claim
/// repo=web-portal` merged a commit that payments-api's CI attested into
/// web-portal. The repository must be one of the owner's (registry
/// `repositories`) and the one the mandate names.
#[test]
fn a_commit_attested_for_one_owner_cannot_be_merged_into_another_owners_repository() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let merge = |repo: &str| {
        json!({"action": "commit.merge", "args": {"repo": repo,
            "commit": "09a46f0fe208bfff9d6ccfc8342bead6bd1be1bb", "branch": "feature/ledger-v2"}})
    };
    let code = |owner: &str, repo: &str| {
        w.mandate(
            MandateSpec::for_pack("code", "dev_ana", owner, &["code.merge"])
                .claim("developer", json!("dev_ana"))
                .claim("repo", json!(repo)),
        )
    };
    let cross = code("payments-api", "web-portal");
    let d = decide(&gw, merge("web-portal"), &cross);
    assert_deny(&d, "provenance", "`repo` `web-portal`");
    assert!(
        d.hint.unwrap_or_default().contains("mandate's owner"),
        "the hint says where the repository must come from"
    );
    // nor may the agent swap in the owner's own repository: the user named
    // another one
    let d = decide(&gw, merge("payments-api"), &cross);
    assert_deny(&d, "policy", "not the repository of the request");
    // the legitimate merge still runs, into the repository it names
    let d = decide(
        &gw,
        merge("payments-api"),
        &code("payments-api", "payments-api"),
    );
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["repo"], json!("payments-api"));
    assert_eq!(d.result.unwrap()["repo"], json!("payments-api"));
}

/// A sanctioned IBAN written as an account (`payment.send.recipient: Id`)
/// in a trusted source — a mandate claim, or `registry.counterparties`,
/// where a counterparty's bank wrote it — is never paid, whatever the
/// separators and prefix around it (issue #39, finding 5): the fact
/// `recipient in registry.sanctions` compares it as the IBAN it is, and
/// refuses it in a disguise it cannot fold.
#[test]
fn a_sanctioned_iban_is_never_paid_as_an_account_in_any_spelling() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let send = |recipient: &str| {
        json!({"action": "payment.send", "args": {
            "from_account": "emma-checking", "recipient": recipient, "amount": "10.00",
            "currency": "EUR", "date": "2026-12-04"}})
    };
    let spellings = [
        "GB29-NWBK-6016-1331-9268-19",
        "GB29NWBK60161331926819.",
        "GB29/NWBK/6016/1331/9268/19",
        "IBAN GB29NWBK60161331926819",
        "gb29 nwbk 6016 1331 9268 19",
        "GB29NWBK6016\u{200B}1331926819",
        "GB29 NWBK 6016 1331 9268 １9",
    ];
    // named in the mandate: past provenance, refused by policy or the fact
    for s in spellings {
        let m = w.mandate(MandateSpec::bank("emma").claim("recipient", json!([s])));
        let d = decide(&gw, send(s), &m);
        not_allowed(&d);
        assert_eq!(d.stage.name(), "policy", "{s:?}: {d:#?}");
    }
    // saved by the user's bank as a counterparty, as written
    let reg = gw.registry("bank", "counterparties").unwrap().clone();
    gw.store()
        .transaction(&mut |tx| {
            let regs = intentplane::gateway::registry::Registries {
                world: gw.world(),
                pack: "bank",
                owner: "emma",
            };
            for s in spellings {
                regs.add_value(tx, &reg, s)?;
            }
            Ok(Value::Null)
        })
        .unwrap();
    let m = w.emma();
    for s in spellings {
        let d = decide(&gw, send(s), &m);
        not_allowed(&d);
        assert_eq!(d.stage.name(), "policy", "{s:?}: {d:#?}");
    }
    // an account that is no IBAN at all is still paid as written
    let d = decide(&gw, send("landlord-42"), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
}
