//! The trusted side (issue #15): the owner changes its own records at run
//! time, through the store, with a receipt.

use crate::common;
use common::*;
use intentplane::gateway::Outcome;
use intentplane::gateway::trusted::{RegistryChange, TrustedError};
use intentplane::store::Store;
use serde_json::{Value, json};
use std::process::Command;

const NEW_PAYEE: &str = "DE02 1203 0000 0000 2020 51";

fn add(v: &str) -> RegistryChange {
    RegistryChange::Add { value: json!(v) }
}

#[test]
fn a_payee_the_owner_adds_is_trusted_for_the_next_decision_and_leaves_a_receipt() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let d = decide(&gw, transfer(SUPPLIER, json!("98.70")), &m);
    assert_deny(&d, "provenance", "not from a trusted source");
    let r = gw
        .change_registry("bank", "beneficiaries", "emma", &add(NEW_PAYEE), "emma")
        .unwrap();
    let d = decide(&gw, transfer(SUPPLIER, json!("98.70")), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.resolved["payee_iban"], json!(SUPPLIER));
    // the change is in the chain, before the decision it enabled
    let recs = gw.store().receipts().unwrap();
    let change = recs.iter().find(|x| x.seq == r.seq).unwrap();
    assert_eq!(change.body["kind"], "registry");
    assert_eq!(change.body["change"], "add");
    assert_eq!(change.body["value"], json!(SUPPLIER), "canonical spelling");
    assert_eq!(change.body["by"], "emma");
    assert!(d.receipt.unwrap().seq > r.seq);
    let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
    assert!(audit.is_ok(), "{audit:?}");
    // another owner's records are untouched
    let noah = w.mandate(MandateSpec::bank("noah"));
    let mut p = transfer(SUPPLIER, json!("1.00"));
    p["args"]["from_account"] = json!("noah-checking");
    assert_deny(
        &decide(&gw, p, &noah),
        "provenance",
        "not from a trusted source",
    );
}

#[test]
fn a_value_the_owner_removes_is_no_longer_trusted_until_added_again() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("1.00")), &m).decision,
        Outcome::Allow
    );
    gw.change_registry(
        "bank",
        "beneficiaries",
        "emma",
        &RegistryChange::Remove {
            value: json!("de44 5001 0517 5407 3249 31"),
        },
        "emma",
    )
    .unwrap();
    let d = decide(&gw, transfer(LANDLORD, json!("2.00")), &m);
    assert_deny(&d, "provenance", "not from a trusted source");
    gw.change_registry("bank", "beneficiaries", "emma", &add(LANDLORD), "emma")
        .unwrap();
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("3.00")), &m).decision,
        Outcome::Allow
    );
}

#[test]
fn a_keyed_record_is_written_and_deleted() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let record = json!({"name": "New Vendor", "iban": "DE89 3704 0044 0532 0130 00",
        "phone": "+49 30 1234 5678", "iban_changed_at": "2025-01-01T00:00:00Z"});
    let Value::Object(record) = record else {
        unreachable!()
    };
    gw.change_registry(
        "ap",
        "vendors",
        "acme",
        &RegistryChange::Put {
            key: "V-NEW".into(),
            record,
        },
        "cfo",
    )
    .unwrap();
    let recs = gw.store().receipts().unwrap();
    assert_eq!(recs[0].body["record"]["iban"], "DE89370400440532013000");
    gw.change_registry(
        "ap",
        "vendors",
        "acme",
        &RegistryChange::Delete {
            key: "V-PAPER".into(),
        },
        "cfo",
    )
    .unwrap();
    // paying an invoice of the deleted vendor now finds no payee
    let m = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write"],
    ));
    let pay = |inv: &str, iban: &str, amount: &str| {
        json!({"action": "invoice.pay", "args": {"invoice_id": inv,
            "payee_iban": iban, "amount": amount, "currency": "EUR"}})
    };
    let d = decide(&gw, pay("INV-1003", "DE02100500000024290661", "310.40"), &m);
    assert_deny(&d, "provenance", "payee_iban");
}

#[test]
fn a_bad_change_is_refused_and_leaves_nothing() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let cases: Vec<(&str, &str, RegistryChange, &str)> = vec![
        ("nope", "emma", add(NEW_PAYEE), "ipc::registry::unknown"),
        ("sanctions", "emma", add(NEW_PAYEE), "ipc::registry::owner"),
        ("beneficiaries", "*", add(NEW_PAYEE), "ipc::registry::owner"),
        (
            "beneficiaries",
            "emma",
            add("DE02 1203 0000 0000 2020 52"),
            "ipc::registry::value",
        ),
        (
            "beneficiaries",
            "emma",
            add("DE02\u{200b}120300000000202051"),
            "ipc::registry::value",
        ),
        (
            "beneficiaries",
            "emma",
            RegistryChange::Delete { key: "x".into() },
            "ipc::registry::shape",
        ),
    ];
    for (reg, owner, change, code) in cases {
        let e = gw
            .change_registry("bank", reg, owner, &change, "emma")
            .unwrap_err();
        let got = miette::Diagnostic::code(&e).map(|c| c.to_string());
        assert_eq!(got.as_deref(), Some(code), "{reg} {owner}: {e}");
        assert!(!matches!(e, TrustedError::Store(_)));
    }
    assert!(gw.store().receipts().unwrap().is_empty());
}

/// `ipc registry add` on a store file, then `ipc run` on the same store:
/// the payee added from the command line is trusted.
#[test]
fn ipc_registry_add_then_run() {
    let w = TestWorld::new();
    let db = w.dir.path().join("s.db");
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "registry",
            "add",
            "--pack",
            "bank",
            "--registry",
            "beneficiaries",
        ])
        .args(["--owner", "emma", "--format", "json"])
        .args(["--bundle", &path_str(&w.bundle_path)])
        .args(["--world", &path_str(&w.world_path)])
        .args(["--store", &path_str(&db), NEW_PAYEE])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["receipt"]["seq"], 1);
    let m = w.dir.path().join("m.json");
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let input = w.dir.path().join("p.jsonl");
    std::fs::write(&input, transfer(SUPPLIER, json!("98.70")).to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["run", "--bundle", &path_str(&w.bundle_path)])
        .args([
            "--world",
            &path_str(&w.world_path),
            "--store",
            &path_str(&db),
        ])
        .args(["--mandate", &path_str(&m)])
        .arg(&input)
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["receipt"]["seq"], 2);
    // a refused change: exit 1, a diagnostic, no receipt
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "registry",
            "add",
            "--pack",
            "bank",
            "--registry",
            "beneficiaries",
        ])
        .args(["--owner", "emma"])
        .args(["--bundle", &path_str(&w.bundle_path)])
        .args(["--world", &path_str(&w.world_path)])
        .args(["--store", &path_str(&db), "not an iban"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipc::registry::value"));
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["receipts", "verify", &path_str(&db)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("2 receipts"));
}

// ---- secrets (issue #15, item 5) -------------------------------------------

fn password(p: &str) -> Value {
    json!({"action": "user.update_password", "args": {"new_password": p}})
}

/// A `secret` parameter reaches the executor only: the decision, the
/// receipts (the agent's proposal included) and the operation hash hold a
/// commitment; the approval binds the exact value through it.
#[test]
fn a_new_password_never_reaches_a_receipt_or_a_decision() {
    let w = TestWorld::new();
    let store = std::sync::Arc::new(intentplane::store::memory::MemoryStore::new());
    let gw = w.gateway_with(store.clone());
    let m = w.emma();
    let secret = "correct horse battery staple";
    let d = decide(&gw, password(secret), &m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    let c = d.resolved["new_password"].as_str().unwrap().to_string();
    assert!(c.starts_with("secret:sha256:"), "{c}");
    let op = d.operation_hash.clone().unwrap();
    // the same password gives the same operation: emma's approval executes it
    let approved = gw
        .decide(&input(password(secret), &m, vec![w.approve("emma", &op)]))
        .unwrap();
    assert_eq!(approved.decision, Outcome::Allow, "{approved:#?}");
    assert_eq!(approved.resolved["new_password"], json!(c));
    // another password is another operation: the approval does not carry over
    let other = gw
        .decide(&input(
            password("another password entirely"),
            &m,
            vec![w.approve("emma", &op)],
        ))
        .unwrap();
    assert_deny(&other, "approval", "another operation");
    // a refused password is withheld, not echoed
    let short = decide(&gw, password("short-pw"), &m);
    assert_deny(&short, "contract", "shorter than 12");
    // the executor alone saw it: the simulated bank keeps a salted hash
    let verifier = store
        .transaction(&mut |tx| {
            Ok(tx
                .state_get(intentplane::gateway::executors::CREDENTIALS_NS, "emma")?
                .unwrap_or(Value::Null))
        })
        .unwrap();
    use sha2::{Digest, Sha256};
    let salt = hex::decode(verifier["salt"].as_str().unwrap()).unwrap();
    let mut h = Sha256::new();
    h.update(&salt);
    h.update(secret.as_bytes());
    assert_eq!(verifier["sha256"], json!(hex::encode(h.finalize())));
    // nowhere in the decisions or the receipts
    for d in [&d, &approved, &other, &short] {
        let text = serde_json::to_string(d).unwrap();
        assert!(
            !text.contains("horse") && !text.contains("short-pw"),
            "{text}"
        );
    }
    let receipts = serde_json::to_string(&gw.store().receipts().unwrap()).unwrap();
    assert!(!receipts.contains("horse"), "{receipts}");
    assert!(!receipts.contains("another password"), "{receipts}");
    assert!(!receipts.contains("short-pw"), "{receipts}");
    assert!(receipts.contains("secret:withheld"));
    // an allowed proposal keeps, in place of the value, the commitment the
    // approval bound
    let kept: Vec<String> = gw
        .store()
        .receipts()
        .unwrap()
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW")
        .filter_map(|r| {
            r.body["proposal"]["args"]["new_password"]
                .as_str()
                .map(String::from)
        })
        .collect();
    assert!(!kept.is_empty(), "{receipts}");
    assert!(
        kept.iter().all(|v| v.starts_with("secret:sha256:")),
        "{kept:?}"
    );
    let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
    assert!(audit.is_ok(), "{audit:?}");
}

// ---- what you see is what you sign (issue #15, item 2) --------------------

fn ipc_in(args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// A PENDING decision records its operation; the approver sees it from the
/// store (amounts in major units, origins, what is new), is asked, signs;
/// an unknown hash is refused; a declined operation is then a DENY.
#[test]
fn approvers_see_the_pending_operation_from_the_store() {
    let w = TestWorld::new();
    let db = w.dir.path().join("s.db");
    let g = |v: &mut Vec<String>| {
        v.extend([
            "--bundle".to_string(),
            path_str(&w.bundle_path),
            "--world".into(),
            path_str(&w.world_path),
            "--store".into(),
            path_str(&db),
        ])
    };
    let cmd = |head: &[&str], tail: &[&str], stdin: &str| {
        let mut v: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        g(&mut v);
        v.extend(tail.iter().map(|s| s.to_string()));
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        ipc_in(&refs, stdin)
    };
    let m = w.emma();
    let line_for = |m: &Value, p: Value, approvals: Vec<Value>| {
        json!({"proposal": p, "mandate": m, "approvals": approvals}).to_string() + "\n"
    };
    let line = |p: Value, approvals: Vec<Value>| line_for(&m, p, approvals);
    let big = transfer(LANDLORD, json!("1500.00"));
    let out = cmd(&["run"], &[], &line(big.clone(), vec![]));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();

    let out = cmd(&["approvals", "list"], &["--for", "emma"], "");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&op) && text.contains("waiting"), "{text}");
    assert!(text.contains("amount=1,500.00"), "{text}");
    assert!(text.contains("1 operation waiting"), "{text}");
    // not for someone who may not approve it
    let out = cmd(&["approvals", "list"], &["--for", "lead_bo"], "");
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 operations"));
    let out = cmd(&["approvals", "show"], &[&op, "--format", "json"], "");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "waiting");
    assert_eq!(v["resolved"]["payee_iban"], LANDLORD);
    assert_eq!(v["origins"]["payee_iban"], "registry.beneficiaries");
    assert_eq!(v["level"], 1);

    let key = path_str(&w.dir.path().join("emma.key"));
    let approve = |extra: &[&str], stdin: &str| {
        let mut tail = vec!["--as", "emma", "--key", &key, "--operation", &op];
        tail.extend_from_slice(extra);
        cmd(&["approve"], &tail, stdin)
    };
    // another person's key, or a name the world does not know, is said
    // before the operation is shown or a confirmation asked
    let other = path_str(&w.dir.path().join("lead_bo.key"));
    for (who, k, said) in [
        ("emma", other.as_str(), "is not `emma`'s"),
        ("mallory", key.as_str(), "`mallory` is not an approver"),
    ] {
        let out = cmd(
            &["approve"],
            &["--as", who, "--key", k, "--operation", &op],
            "y\n",
        );
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
        assert!(!err.contains("1,500.00") && !err.contains("[y/N]"), "{err}");
        assert!(out.stdout.is_empty());
    }
    // asked, and a "no" signs nothing
    let out = approve(&[], "n\n");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("1,500.00") && err.contains("from registry.beneficiaries"),
        "{err}"
    );
    assert!(err.contains("[y/N]") && err.contains("not signed"), "{err}");
    assert!(out.stdout.is_empty());
    // a yes signs
    let out = approve(&[], "y\n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let approval: Value = serde_json::from_slice(&out.stdout).unwrap();
    let out = cmd(&["run"], &[], &line(big, vec![approval]));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["decision"], "ALLOW", "{d}");
    // executed: no longer waiting, and no longer approvable
    let out = cmd(&["approvals", "list"], &[], "");
    assert!(String::from_utf8_lossy(&out.stdout).contains("0 operations"));
    let out = approve(&["--yes"], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipc::approvals::executed"));
    // a hash the store does not know
    let out = cmd(
        &["approve"],
        &[
            "--as",
            "emma",
            "--key",
            &key,
            "--yes",
            "--operation",
            "sha256:00",
        ],
        "",
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipc::approvals::unknown"));

    // declined: recorded with a receipt; the same operation is then a DENY
    let m2 = w.emma();
    let other = transfer(LANDLORD, json!("1700.00"));
    let out = cmd(&["run"], &[], &line_for(&m2, other.clone(), vec![]));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let op2 = d["operation_hash"].as_str().unwrap().to_string();
    let out = cmd(
        &["approve"],
        &["--as", "emma", "--decline", "--operation", &op2],
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("declined"));
    let out = cmd(&["run"], &[], &line_for(&m2, other, vec![]));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (d["decision"].as_str(), d["stage"].as_str()),
        (Some("DENY"), Some("approval"))
    );
    assert!(
        d["reason"].as_str().unwrap().contains("`emma` declined"),
        "{d}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["receipts", "verify", &path_str(&db)])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// An operation whose mandate has expired can no longer be approved.
#[test]
fn an_expired_pending_operation_is_refused() {
    let w = TestWorld::new();
    let store = std::sync::Arc::new(intentplane::store::memory::MemoryStore::new());
    let gw = w.gateway_with(store.clone());
    let mut spec = MandateSpec::bank("emma");
    spec.ttl = 120;
    let m = w.mandate(spec);
    let d = decide(&gw, transfer(LANDLORD, json!("1500.00")), &m);
    let op = d.operation_hash.unwrap();
    assert!(gw.pending_op(&op).is_ok());
    let mut later = w.world();
    later.clock = Some(now() + 3600);
    let gw_later = gw.fork(later, store);
    let e = gw_later.pending_op(&op).unwrap_err();
    assert!(
        matches!(
            e,
            intentplane::gateway::approving::PendingError::Expired { .. }
        ),
        "{e}"
    );
}

/// Approvals submitted by hash are kept with the pending operation and
/// count when the agent proposes it again — with no approval in hand.
#[test]
fn approvals_submitted_by_hash_count_on_the_next_proposal() {
    use intentplane::gateway::approval::SignedApproval;
    use intentplane::gateway::approving::PendingError;
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["vendors.write", "payments.write"],
    ));
    let p = json!({"action": "vendor.change_iban", "args": {
        "vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "new_iban": "ES91 2100 0418 4502 0005 1332"}});
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Pending);
    let op = d.operation_hash.unwrap();
    let sign =
        |who: &str, hash: &str| SignedApproval::issue(who, hash, now() + 600, w.key(who)).unwrap();
    // refused at submission: an unknown operation, a forged signature
    assert!(matches!(
        gw.submit_approval(&sign("cfo", "sha256:00")),
        Err(PendingError::Unknown { .. })
    ));
    let mut forged = sign("cfo", &op);
    forged.approval.approver = "clerk".into();
    assert!(matches!(
        gw.submit_approval(&forged),
        Err(PendingError::Invalid { .. })
    ));
    // the clerk's alone: still pending; with the CFO's: executes
    gw.submit_approval(&sign("clerk", &op)).unwrap();
    assert_eq!(decide(&gw, p.clone(), &m).decision, Outcome::Pending);
    gw.submit_approval(&sign("cfo", &op)).unwrap();
    let d = decide(&gw, p, &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.approvers, vec!["clerk".to_string(), "cfo".to_string()]);
    let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
    assert!(audit.is_ok(), "{audit:?}");
    let kinds: Vec<Value> = gw
        .store()
        .receipts()
        .unwrap()
        .iter()
        .map(|r| r.body["change"].clone())
        .collect();
    assert_eq!(kinds.iter().filter(|k| **k == json!("approve")).count(), 2);
}

/// A gateway whose world declares emma's key for her own records
/// (`[owners.emma] keys`), over a fresh in-memory store.
fn gateway_with_owner_keys(w: &TestWorld) -> intentplane::gateway::Gateway {
    let mut world = w.world();
    world
        .owner_keys
        .insert("emma".into(), vec![w.key("emma").public()]);
    intentplane::gateway::Gateway::new(
        &w.bundle,
        world,
        std::sync::Arc::new(intentplane::store::memory::MemoryStore::new()),
    )
    .unwrap()
}

fn owner_change(nonce: &str) -> intentplane::gateway::trusted::OwnerChange {
    intentplane::gateway::trusted::OwnerChange {
        owner: "emma".into(),
        pack: "bank".into(),
        registry: "beneficiaries".into(),
        change: intentplane::gateway::trusted::Verb::Add,
        value: NEW_PAYEE.into(),
        record: None,
        audience: GATEWAY_ID.into(),
        expires_at: now() + 600,
        nonce: nonce.into(),
    }
}

/// Issue #21, item 9: a signed change names the gateway it is for (the
/// world's `gateway_id`) and expires at most 15 minutes ahead. A change for
/// another gateway, one expiring a year out, and any signed change on a
/// gateway with no `gateway_id` are refused, and change nothing.
#[test]
fn an_owner_change_is_for_one_gateway_and_short_lived() {
    use intentplane::gateway::trusted::{MAX_OWNER_CHANGE_LIFETIME, SignedOwnerChange};
    let w = world_once();
    let gw = gateway_with_owner_keys(w);
    let refused = |c: intentplane::gateway::trusted::OwnerChange,
                   gw: &intentplane::gateway::Gateway| {
        let before = gw.store().receipts().unwrap().len();
        let r = gw.change_registry_signed(&SignedOwnerChange::sign(c, w.key("emma")).unwrap());
        assert_eq!(gw.store().receipts().unwrap().len(), before, "{r:?}");
        let d = decide(gw, transfer(SUPPLIER, json!("98.70")), &w.emma());
        assert_eq!(d.decision, Outcome::Deny, "{r:?}");
        r.unwrap_err()
    };
    let mut other = owner_change("aud-1");
    other.audience = "staging-gateway".into();
    let e = refused(other, &gw);
    assert!(matches!(e, TrustedError::Audience { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "the change is for the gateway `staging-gateway`, not this one (`test-gateway`)"
    );
    let mut year = owner_change("ttl-1");
    year.expires_at = now() + 365 * 24 * 3600;
    let e = refused(year, &gw);
    assert!(matches!(e, TrustedError::TooLong { .. }), "{e:?}");
    let mut just_over = owner_change("ttl-2");
    just_over.expires_at = now() + MAX_OWNER_CHANGE_LIFETIME + 1;
    assert!(matches!(
        refused(just_over, &gw),
        TrustedError::TooLong { .. }
    ));
    // a gateway whose world names no gateway applies no signed change
    let mut world = w.world();
    world.gateway_id = None;
    world
        .owner_keys
        .insert("emma".into(), vec![w.key("emma").public()]);
    let anonymous = intentplane::gateway::Gateway::new(
        &w.bundle,
        world,
        std::sync::Arc::new(intentplane::store::memory::MemoryStore::new()),
    )
    .unwrap();
    let e = refused(owner_change("anon-1"), &anonymous);
    assert!(matches!(e, TrustedError::NoGatewayId), "{e:?}");
    // the same change, for this gateway, expiring at the bound: applied
    let mut at_bound = owner_change("ok-1");
    at_bound.expires_at = now() + MAX_OWNER_CHANGE_LIFETIME;
    gw.change_registry_signed(&SignedOwnerChange::sign(at_bound, w.key("emma")).unwrap())
        .unwrap();
    let d = decide(&gw, transfer(SUPPLIER, json!("98.70")), &w.emma());
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Any edit of a signed owner's change (another owner, registry,
    /// value, verb, expiry or nonce under the same signature) is refused
    /// as unsigned, and changes nothing: no record, no receipt.
    #[test]
    fn a_tampered_owner_change_is_refused_and_changes_nothing(
        field in 0usize..7,
        text in "[A-Za-z0-9 ]{1,24}",
        shift in 1i64..100_000,
    ) {
        use intentplane::gateway::trusted::{SignedOwnerChange, Verb};
        let w = world_once();
        let gw = gateway_with_owner_keys(w);
        let mut signed = SignedOwnerChange::sign(owner_change("n-1"), w.key("emma")).unwrap();
        let c = &mut signed.change;
        match field {
            0 => c.owner = if text == "emma" { "emma2".into() } else { text.clone() },
            1 => c.registry = format!("{text}x"),
            2 => c.value = format!("{} {text}", c.value),
            3 => c.change = Verb::Remove,
            4 => c.expires_at += shift,
            5 => c.audience = format!("{text}x"),
            // never the signed `n-1` itself
            _ => c.nonce = format!("n-1-{text}"),
        }
        let before = gw.store().receipts().unwrap().len();
        let r = gw.change_registry_signed(&signed);
        proptest::prop_assert!(matches!(r, Err(TrustedError::NotOwner { .. })), "{r:?}");
        proptest::prop_assert_eq!(gw.store().receipts().unwrap().len(), before);
        let d = decide(&gw, transfer(SUPPLIER, json!("98.70")), &w.emma());
        proptest::prop_assert_eq!(d.decision, Outcome::Deny);
    }

    /// Any edit of a signed decline (another operation, approver or
    /// expiry) is refused, and the operation stays approvable.
    #[test]
    fn a_tampered_decline_is_refused_and_declines_nothing(field in 0usize..3, shift in 1i64..100_000) {
        use intentplane::gateway::approval::SignedDecline;
        let w = world_once();
        let gw = w.gateway();
        let op = decide(&gw, change_iban(), &w.clerk()).operation_hash.unwrap();
        let mut signed = SignedDecline::issue("clerk", &op, now() + 600, w.key("clerk")).unwrap();
        match field {
            0 => signed.decline.approver = "cfo".into(),
            1 => signed.decline.expires_at += shift,
            _ => signed.decline.operation_hash = format!("{op}0"),
        }
        proptest::prop_assert!(gw.decline_signed(&signed).is_err());
        proptest::prop_assert!(gw.pending_op(&op).unwrap().declined_by.is_empty());
    }
}

/// One test world for the property tests (keys and a bundle are slow to make).
fn world_once() -> &'static TestWorld {
    static W: std::sync::OnceLock<TestWorld> = std::sync::OnceLock::new();
    W.get_or_init(TestWorld::new)
}

/// A signed decline by someone who may not approve the operation (a
/// treasurer of another tenant), or an unsigned CLI decline under their
/// name, is refused: declining is the approvers' power too.
#[test]
fn only_an_approver_of_the_operation_may_decline_it() {
    use intentplane::gateway::approval::SignedDecline;
    use intentplane::gateway::approving::PendingError;
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.clerk();
    let p = change_iban();
    let op = decide(&gw, p.clone(), &m).operation_hash.unwrap();
    let noah = SignedDecline::issue("noah", &op, now() + 600, w.key("noah")).unwrap();
    assert!(matches!(
        gw.decline_signed(&noah),
        Err(PendingError::NotApprover { .. })
    ));
    assert!(matches!(
        gw.decline(&op, "noah"),
        Err(PendingError::NotApprover { .. })
    ));
    let late = SignedDecline::issue("cfo", &op, now() - 1, w.key("cfo")).unwrap();
    assert!(matches!(
        gw.decline_signed(&late),
        Err(PendingError::Invalid { .. })
    ));
    // the treasury's signed decline: recorded, and final
    let cfo = SignedDecline::issue("cfo", &op, now() + 600, w.key("cfo")).unwrap();
    gw.decline_signed(&cfo).unwrap();
    assert!(matches!(
        gw.submit_approval(
            &intentplane::gateway::approval::SignedApproval::issue(
                "clerk",
                &op,
                now() + 600,
                w.key("clerk")
            )
            .unwrap()
        ),
        Err(PendingError::Declined { .. })
    ));
    assert_deny(&decide(&gw, p, &m), "approval", "`cfo` declined");
}

// ---- what is shown is what is signed (issue #20, items 3 and 5) ----------

/// `--bundle B --world W --store S` of the test world, then `tail`.
fn with_gateway(w: &TestWorld, db: &std::path::Path, head: &[&str], tail: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    for (k, p) in [
        ("--bundle", &w.bundle_path),
        ("--world", &w.world_path),
        ("--store", &db.to_path_buf()),
    ] {
        v.push(k.into());
        v.push(path_str(p));
    }
    v.extend(tail.iter().map(|s| s.to_string()));
    v
}

fn ipc_args(args: &[String], stdin: &str) -> std::process::Output {
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    ipc_in(&refs, stdin)
}

/// A pending record whose displayed values were edited in the store (1.00
/// shown under the hash of a 1,500.00 transfer) is refused by
/// `ipc approve`: nothing signed, nothing submitted; `ipc approvals show`
/// prints every value whole and escaped.
#[test]
fn ipc_approve_refuses_a_record_whose_shown_values_do_not_hash_to_it() {
    let w = TestWorld::new();
    let db = w.dir.path().join("s.db");
    let m = w.emma();
    let subject = format!(
        "{}\npayee_iban  DE00 (from registry.beneficiaries)\u{1b}[2J\u{202e}card 4111 1111 1111 1111",
        "x".repeat(60)
    );
    let mut p = transfer(LANDLORD, json!("1500.00"));
    p["args"]["subject"] = json!(subject);
    let line = json!({"proposal": p, "mandate": m}).to_string() + "\n";
    let out = ipc_args(&with_gateway(&w, &db, &["run"], &[]), &line);
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();

    let out = ipc_args(&with_gateway(&w, &db, &["approvals", "show"], &[&op]), "");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // whole (the tail past 80 characters), escaped, and no forged line
    assert!(text.contains("card 4111 1111 1111 1111"), "{text}");
    assert!(
        text.contains("x\\n\n    | payee_iban  DE00 (from "),
        "{text}"
    );
    assert!(text.contains("\\u{1b}[2J\\u{202e}"), "{text}");
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{202e}'),
        "{text}"
    );
    assert_eq!(
        text.lines()
            .filter(|l| l.trim_start().starts_with("payee_iban"))
            .count(),
        1,
        "{text}"
    );
    // the registry's name beside the trusted value, the IBAN in fours
    assert!(
        text.contains("  payee_iban  from registry.beneficiaries: "),
        "{text}"
    );
    assert!(
        text.contains("    | DE44 5001 0517 5407 3249 31\n"),
        "{text}"
    );

    // the stored record now shows 1.00 under the 1,500.00 operation's hash
    edit_pending(
        intentplane::store::open(&db, false).unwrap().as_ref(),
        &op,
        "amount",
        json!(100),
    );
    let key = path_str(&w.dir.path().join("emma.key"));
    for extra in [&[][..], &["--submit"][..]] {
        let mut tail = vec!["--as", "emma", "--key", &key, "--operation", &op, "--yes"];
        tail.extend_from_slice(extra);
        let out = ipc_args(&with_gateway(&w, &db, &["approve"], &tail), "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("    | 1.00 EUR"), "{err}");
        assert!(err.contains("ipc::approvals::mismatch"), "{err}");
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // the gateway's own submission path (the page) refuses it too
    let gw = w.gateway_with(intentplane::store::open(&db, false).unwrap());
    let e = gw.submit_approval(&emma_approves(&w, &op)).unwrap_err();
    assert!(e.to_string().contains("refused to sign"), "{e}");
    assert!(gw.pending_op(&op).unwrap().approvals.is_empty());
}

/// Sets one resolved value of the pending record `op` in the store,
/// behind the gateway's back (its hash unchanged).
fn edit_pending(store: &dyn Store, op: &str, param: &str, value: Value) {
    store
        .transaction(&mut |tx| {
            let mut rec = tx.state_get("pending", op)?.unwrap();
            rec["resolved"][param] = value.clone();
            tx.state_put("pending", op, &rec)?;
            Ok(Value::Null)
        })
        .unwrap();
}

fn emma_approves(w: &TestWorld, op: &str) -> intentplane::gateway::approval::SignedApproval {
    intentplane::gateway::approval::SignedApproval::issue("emma", op, now() + 600, w.key("emma"))
        .unwrap()
}

/// A value longer than the bound is not approvable, with the reason.
#[test]
fn a_value_too_long_to_show_is_not_approvable() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.mandate(MandateSpec::bank("emma"));
    let p =
        json!({"action": "user.update_info", "args": {"street": "Hauptstr. 1", "city": "Berlin"}});
    let op = decide(&gw, p, &m).operation_hash.unwrap();
    // a record with a value past the bound (the contract keeps these short;
    // the bound holds whatever the pack allows)
    let long = "y".repeat(intentplane::gateway::render::MAX_VALUE_CHARS + 1);
    edit_pending(gw.store().as_ref(), &op, "street", json!(long));
    let e = gw.submit_approval(&emma_approves(&w, &op)).unwrap_err();
    assert!(e.to_string().contains("cannot be approved"), "{e}");
    let shown =
        intentplane::gateway::render::show(&gw, &gw.pending_op(&op).unwrap(), now()).unwrap();
    assert!(shown.refusal.is_some());
    assert!(
        shown.text().contains("too long to be shown whole"),
        "{}",
        shown.text()
    );
}

/// An expired approval kept in the store never blocks its operation: a
/// fresh approval is accepted and the operation executes; the listing
/// shows the expired one as expired, not as approved.
#[test]
fn an_expired_approval_never_stops_a_fresh_one() {
    use intentplane::gateway::approval::SignedApproval;
    let w = TestWorld::new();
    let store: std::sync::Arc<dyn intentplane::store::Store> =
        std::sync::Arc::new(intentplane::store::memory::MemoryStore::new());
    let gw = w.gateway_with(store.clone());
    let m = w.emma();
    let p = transfer(LANDLORD, json!("1500.00"));
    let op = decide(&gw, p.clone(), &m).operation_hash.unwrap();
    let short = SignedApproval::issue("emma", &op, now() + 60, w.key("emma")).unwrap();
    gw.submit_approval(&short).unwrap();
    // two minutes later: the approval expired, the mandate still holds
    let mut later = w.world();
    later.clock = Some(now() + 120);
    let gw = gw.fork(later, store);
    let pending = gw.pending_op(&op).unwrap();
    assert!(pending.approved_by(gw.now().unwrap()).is_empty());
    assert_eq!(
        pending.expired_approvals(gw.now().unwrap()),
        vec!["emma".to_string()]
    );
    let shown = intentplane::gateway::render::show(&gw, &pending, gw.now().unwrap()).unwrap();
    assert!(
        shown
            .text()
            .contains("expired     the approval of emma expired"),
        "{}",
        shown.text()
    );
    // alone it counts for nothing: still pending, not refused
    assert_eq!(decide(&gw, p.clone(), &m).decision, Outcome::Pending);
    // a fresh approval is accepted and counts
    let fresh = SignedApproval::issue("emma", &op, gw.now().unwrap() + 60, w.key("emma")).unwrap();
    gw.submit_approval(&fresh).unwrap();
    let d = decide(&gw, p.clone(), &m);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert_eq!(d.approvers, vec!["emma".to_string()]);
}

/// An expired approval the caller brings does not stop a valid one either;
/// alone it is refused, saying so.
#[test]
fn a_brought_expired_approval_does_not_stop_a_valid_one() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    let p = transfer(LANDLORD, json!("1500.00"));
    let op = decide(&gw, p.clone(), &m).operation_hash.unwrap();
    let old = w.approve_with("emma", &op, now() - 1, "n-old");
    let d = gw.decide(&input(p.clone(), &m, vec![old.clone()])).unwrap();
    assert_deny(&d, "approval", "has expired");
    let fresh = w.approve_with("emma", &op, now() + 60, "n-fresh");
    let d = gw.decide(&input(p, &m, vec![old, fresh])).unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
}

// ---- inline packs on the trusted side (issue #20, item 6) -----------------

#[cfg(feature = "mcp")]
/// Tools declared inline in the proxy's TOML have no bundle file: four
/// eyes (`ipc approvals list|show`, `ipc approve`) and owner changes
/// (`ipc registry add`) work with `--config`, on the very gateway and
/// store `ipc mcp` runs.
#[test]
fn inline_tools_are_approved_and_their_registries_changed_with_config() {
    use intentplane::keys::SecretKey;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    for name in ["issuer", "emma", "cfo"] {
        SecretKey::generate()
            .unwrap()
            .write_pair(&d.join(name))
            .unwrap();
    }
    std::fs::write(
        d.join("world.toml"),
        "[approvers]\nemma = \"emma.pub\"\ncfo = { key = \"cfo.pub\", owners = [\"emma\"] }\n",
    )
    .unwrap();
    std::fs::write(
        d.join("vendors.json"),
        r#"{"emma": {"DE89 3704 0044 0532 0130 00": {"name": "ACME Office Supplies"}}}"#,
    )
    .unwrap();
    let cfg = d.join("intentplane.toml");
    std::fs::write(
        &cfg,
        r#"world = "world.toml"
store = "state.db"
[[servers]]
name = "demo"
command = "ipc"
args = ["demo", "mcp-server"]
[session]
user = "emma"
scopes = ["payments.write"]
budget = "50000.00"
issuer_key = "issuer.key"
user_key = "emma.key"
[pack]
name = "pay"
[pack.registries.vendors]
key = "Iban"
fields = { name = "Text" }
file = "vendors.json"
[[tools]]
server = "demo"
tool = "pay_vendor"
action = "vendor.pay"
scope = "payments.write"
budget_param = "amount"
[tools.params.iban]
type = "Iban"
critical = true
sources = ["registry:vendors"]
normalize = "iban"
[tools.params.amount]
type = "Money"
scale = 100
range = [0.01, 20_000.00]
[[tools.rules]]
kind = "four_eyes"
reason = "large vendor payment"
when = "amount > 1_000.00"
"#,
    )
    .unwrap();
    // the proxy's gateway and session, as one `ipc mcp` process holds them
    let setup = intentplane::mcp::config::load(&cfg).unwrap();
    let tool = setup.tool("pay_vendor").unwrap().clone();
    let mandate = setup.mandate_for(&tool).unwrap().clone();
    let gw = intentplane::gateway::Gateway::new(&setup.bundle, setup.world, setup.store)
        .unwrap()
        .execute_externally();
    let decide = |iban: &str| {
        let proposal = tool
            .to_proposal(
                &json!({"iban": iban, "amount": 2500.0})
                    .as_object()
                    .unwrap()
                    .clone(),
            )
            .unwrap();
        gw.decide(&input(proposal, &mandate, vec![])).unwrap()
    };
    let d0 = decide("DE89 3704 0044 0532 0130 00");
    assert_eq!(d0.decision, Outcome::Pending, "{d0:#?}");
    assert_eq!(d0.level, Some(2));
    let op = d0.operation_hash.clone().unwrap();
    let c = path_str(&cfg);
    let run = |args: &[&str]| {
        let mut v = args.to_vec();
        v.extend(["--config", &c]);
        let out = ipc_in(&v, "");
        assert!(
            out.status.success(),
            "ipc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let listed = run(&["approvals", "list", "--for", "cfo"]);
    assert!(
        listed.contains(&op) && listed.contains("1 operation waiting"),
        "{listed}"
    );
    let shown = run(&["approvals", "show", &op]);
    assert!(
        shown.contains("  iban  from registry.vendors: ACME Office Supplies\n    | DE89 3704 0044 0532 0130 00\n"),
        "{shown}"
    );
    assert!(shown.contains("    | 2,500.00\n"), "{shown}");
    for who in ["cfo", "emma"] {
        let key = path_str(&d.join(format!("{who}.key")));
        let out = run(&[
            "approve",
            "--as",
            who,
            "--key",
            &key,
            "--operation",
            &op,
            "--yes",
            "--submit",
        ]);
        assert!(out.contains("approved"), "{out}");
    }
    let d1 = decide("DE89 3704 0044 0532 0130 00");
    assert_eq!(d1.decision, Outcome::Allow, "{d1:#?}");
    assert_eq!(d1.approvers, vec!["cfo".to_string(), "emma".to_string()]);
    // the owner adds a vendor at run time: trusted for the next decision
    let other = "DE02 1203 0000 0000 2020 51";
    assert_eq!(decide(other).stage, intentplane::gateway::Stage::Provenance);
    let out = run(&[
        "registry",
        "add",
        "--pack",
        "pay",
        "--registry",
        "vendors",
        "--owner",
        "emma",
        "--record",
        r#"{"name": "Stadtwerke Nord"}"#,
        other,
    ]);
    assert!(out.contains("added to pay/vendors"), "{out}");
    let d2 = decide(other);
    assert_eq!(d2.decision, Outcome::Pending, "{d2:#?}");
    let shown = run(&["approvals", "show", d2.operation_hash.as_deref().unwrap()]);
    assert!(
        shown.contains("from registry.vendors: Stadtwerke Nord"),
        "{shown}"
    );
    // a command that decides does not take the proxy's configuration
    let out = ipc_in(&["run", "--config", &c], "");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ipc::gateway::config_not_here"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
