//! Step-up and four eyes through the MCP proxy ([`crate::proxy`]'s
//! harness): elicitation (2025 era) and input-required (2026 era), declines,
//! approvals out of band, what the user is shown.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use crate::proxy::*;
use intentplane::gateway::testkit::MandateSpec;
use intentplane::mcp::testkit;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ElicitationAction};
use serde_json::{Map, Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_up_is_confirmed_by_elicitation_in_the_2025_era() {
    let h = harness(Opts::default()).await;
    let r = h
        .call(
            "send_money",
            send(testkit_landlord(), json!(1200), "Rent December"),
        )
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    let shown = h.user.shown();
    assert_eq!(shown.len(), 1);
    assert!(shown[0].contains("payment.transfer"), "{}", shown[0]);
    assert!(
        shown[0].contains("  amount  from the agent's proposal\n    | 1,200.00 EUR\n"),
        "{}",
        shown[0]
    );
    // the registry's name for the payee, the IBAN in fours
    assert!(
        shown[0].contains("  payee_iban  from registry.beneficiaries: Hausverwaltung Weber (landlord)\n    | DE44 5001 0517 5407 3249 31\n"),
        "{}",
        shown[0]
    );
    assert_eq!(h.executed("send_money").len(), 1);
    assert_eq!(h.executed("send_money")[0]["args"]["amount"], json!(1200.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_step_up_executes_nothing_and_is_not_asked_again() {
    for era in [Era::Legacy, Era::Mrtr] {
        let h = harness(Opts {
            answer: Some(ElicitationAction::Decline),
            era,
            ..Opts::default()
        })
        .await;
        let r = h
            .call("send_money", send(testkit_landlord(), json!(1500), "Rent"))
            .await;
        assert!(is_error(&r));
        // a DENY, not a PENDING: the user said no
        let t = text(&r);
        assert!(
            t.starts_with(
                "DENY at stage `approval`: declined by the user: `emma` declined this operation"
            ),
            "{t}"
        );
        assert!(t.contains("the decline stands until"), "{t}");
        let d = r.structured_content.as_ref().unwrap();
        assert_eq!(d["decision"], "DENY");
        assert_eq!(h.user.shown().len(), 1);
        assert!(h.executed("send_money").is_empty());
        // recorded as the user's decline of that operation, with a receipt
        let op = d["operation_hash"].as_str().unwrap().to_string();
        let ops = h.proxy.gateway().pending_ops().unwrap();
        let (declined, _) = ops.iter().find(|(p, _)| p.operation_hash == op).unwrap();
        assert_eq!(declined.declined_by, ["emma"]);
        let rec = h.receipts().last().cloned().unwrap();
        assert_eq!(rec["kind"], "approval");
        assert_eq!(rec["change"], "decline");
        assert_eq!(rec["operation_hash"], op.as_str());
        assert!(rec["until"].is_string(), "{rec}");
        assert_eq!(d["receipt"]["hash"], rec_hash(&h), "the decline's receipt");
        // the same operation again: refused, the user is not asked again
        let again = h
            .call("send_money", send(testkit_landlord(), json!(1500), "Rent"))
            .await;
        assert!(is_error(&again));
        let t = text(&again);
        assert!(
            t.starts_with(
                "DENY at stage `approval`: declined by the user: `emma` declined this operation"
            ),
            "{t}"
        );
        assert_eq!(h.user.shown().len(), 1, "not asked again");
        // another operation is asked as usual
        let other = h
            .call("send_money", send(testkit_landlord(), json!(1600), "Rent"))
            .await;
        assert!(is_error(&other));
        assert_eq!(h.user.shown().len(), 2);
        assert!(h.executed("send_money").is_empty());
    }
}

/// The hash of the newest receipt.
fn rec_hash(h: &Harness) -> String {
    h.receipts();
    h.store.head().unwrap().unwrap().1
}

/// A decline stands for `decline_for` seconds only: once it lapsed, the
/// same operation (even a tool without arguments) is asked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_decline_is_asked_again() {
    for era in [Era::Legacy, Era::Mrtr] {
        let h = harness(Opts {
            answer: Some(ElicitationAction::Decline),
            era,
            decline_for: Some(0),
            ..Opts::default()
        })
        .await;
        let a = send(testkit_landlord(), json!(1500), "Rent");
        for round in 1..=3 {
            let r = h.call("send_money", a.clone()).await;
            assert!(
                text(&r).starts_with("DENY at stage `approval`: declined by the user"),
                "{}",
                text(&r)
            );
            assert_eq!(h.user.shown().len(), round, "asked again");
        }
        assert!(h.executed("send_money").is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_up_is_confirmed_through_input_required_in_the_2026_era() {
    let h = harness(Opts {
        era: Era::Mrtr,
        ..Opts::default()
    })
    .await;
    let r = h
        .call("send_money", send(testkit_landlord(), json!(1200), "Rent"))
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(h.user.shown().len(), 1);
    assert!(h.user.shown()[0].contains("1,200.00"));
    assert_eq!(h.executed("send_money").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_or_misbound_request_state_grants_nothing() {
    let h = harness(Opts {
        era: Era::Mrtr,
        ..Opts::default()
    })
    .await;
    let a = send(testkit_landlord(), json!(1200), "Rent");
    let first = h
        .client
        .call_tool_once(CallToolRequestParams::new("send_money").with_arguments(a.clone()))
        .await
        .unwrap();
    let CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input required, got {first:?}");
    };
    let state = ir.request_state.clone().unwrap();
    let accept = || {
        let mut m = std::collections::BTreeMap::new();
        m.insert(
            "confirm".to_string(),
            json!({"action": "accept", "content": {}}),
        );
        m
    };
    let retry = |a: Map<String, Value>, s: String| {
        CallToolRequestParams::new("send_money")
            .with_arguments(a)
            .with_input_responses(accept())
            .with_request_state(s)
    };
    // tampered
    let mut forged = state.clone();
    forged.push('x');
    let r = h
        .client
        .call_tool_once(retry(a.clone(), forged))
        .await
        .unwrap();
    let CallToolResponse::Complete(r) = r else {
        panic!()
    };
    assert!(
        is_error(&r) && text(&r).contains("request state was refused"),
        "{}",
        text(&r)
    );
    // the state of 1,200.00 replayed for 1,900.00
    let other = send(testkit_landlord(), json!(1900), "Rent");
    let r = h
        .client
        .call_tool_once(retry(other, state.clone()))
        .await
        .unwrap();
    let CallToolResponse::Complete(r) = r else {
        panic!()
    };
    assert!(
        is_error(&r) && text(&r).contains("request state was refused"),
        "{}",
        text(&r)
    );
    assert!(h.executed("send_money").is_empty());
    // the genuine answer executes once
    let r = h
        .client
        .call_tool_once(retry(a.clone(), state.clone()))
        .await
        .unwrap();
    let CallToolResponse::Complete(r) = r else {
        panic!()
    };
    assert!(!is_error(&r), "{}", text(&r));
    // and replaying it does not execute again
    let _ = h.client.call_tool_once(retry(a, state)).await.unwrap();
    assert_eq!(h.executed("send_money").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_is_told_why() {
    for era in [Era::Legacy, Era::Mrtr] {
        let h = harness(Opts {
            answer: None,
            era,
            ..Opts::default()
        })
        .await;
        let r = h
            .call("send_money", send(testkit_landlord(), json!(1200), "Rent"))
            .await;
        assert!(is_error(&r));
        let t = text(&r);
        assert!(t.contains("PENDING at stage `approval`"), "{t}");
        assert!(t.contains("does not support elicitation"), "{t}");
        // and the way out, ready to run
        let op = r.structured_content.as_ref().unwrap()["operation_hash"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            t.contains("approves out of band (`ipc approve --config ")
                && t.contains(&format!("--operation {op} --as emma --key ")),
            "{t}"
        );
        assert!(h.executed("send_money").is_empty());
    }
}

/// A proxy for the clerk of acme and a vendor's IBAN change (four eyes):
/// the harness, the arguments, and the first call's refusal.
async fn four_eyes_pending() -> (Harness, Map<String, Value>, CallToolResult) {
    let spec = MandateSpec::for_pack("ap", "clerk", "acme", &["vendors.write"]);
    let h = harness(Opts {
        spec: Some(spec),
        tools: testkit::ap_tools(),
        ..Opts::default()
    })
    .await;
    let a = args(
        json!({"vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "iban": "es91 2100 0418 4502 0005 1332"}),
    );
    let r = h.call("update_vendor", a.clone()).await;
    assert!(is_error(&r));
    (h, a, r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_is_refused_until_the_second_approver_signs_out_of_band() {
    let (h, a, r) = four_eyes_pending().await;
    let t = text(&r);
    assert!(t.contains("four eyes"), "{t}");
    assert!(t.contains("must be approved by"), "{t}");
    // exactly what happens next: the second half out of band (the very
    // command), then the user's half through this client
    let op = r.structured_content.as_ref().unwrap()["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let config = h.tw.dir.path().join("intentplane.toml");
    // the key is named by where it is (beside the public key the world
    // names), every path absolute: the line runs from any folder
    let key = h.tw.dir.path().join("cfo.key");
    assert!(
        t.contains(&format!(
            "1. Out of band, first: `cfo` signs it with `ipc approve --config {} --operation {op} --as cfo --key {} --submit`",
            config.display(),
            key.display()
        )),
        "{t}"
    );
    assert!(
        t.contains("2. Then call this tool again with the same arguments: the user `clerk` is asked to confirm through this client"),
        "{t}"
    );
    assert!(
        h.user.shown().is_empty(),
        "the client cannot grant four eyes"
    );
    assert!(h.executed("update_vendor").is_empty());
    // the CFO signs out of band; the clerk confirms through the client
    let approval = h.tw.approve("cfo", &op);
    std::fs::write(
        h.tw.dir.path().join("approvals").join("cfo.json"),
        approval.to_string(),
    )
    .unwrap();
    let r = h.call("update_vendor", a).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(h.user.shown().len(), 1);
    let done = h.executed("update_vendor");
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0]["args"]["iban"].as_str().unwrap().replace(' ', ""),
        "ES9121000418450200051332"
    );
}

/// The second half submitted to the store (`ipc approve --submit`, the
/// approval page) counts like one dropped in the folder: the user is then
/// asked through the client, and the operation runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_eyes_submitted_to_the_store_then_the_user_through_the_client() {
    let (h, a, r) = four_eyes_pending().await;
    let op = r.structured_content.as_ref().unwrap()["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let signed: intentplane::gateway::approval::SignedApproval =
        serde_json::from_value(h.tw.approve("cfo", &op)).unwrap();
    h.proxy.gateway().submit_approval(&signed).unwrap();
    let r = h.call("update_vendor", a).await;
    assert!(!is_error(&r), "{}", text(&r));
    let shown = h.user.shown();
    assert_eq!(shown.len(), 1);
    assert!(shown[0].contains("approved by cfo\n"), "{}", shown[0]);
    assert_eq!(h.executed("update_vendor").len(), 1);
}

/// What elicitation shows, in both eras, is the escaped rendering: a
/// subject cannot forge a line, and no control or bidi character reaches
/// the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_shows_hostile_text_escaped_in_both_eras() {
    for era in [Era::Legacy, Era::Mrtr] {
        let h = harness(Opts {
            era,
            ..Opts::default()
        })
        .await;
        let subject = "Rent\n  payee_iban  from registry.beneficiaries: Hausverwaltung Weber (landlord)\n    | DE44 5001\u{1b}[2J\u{202e}\u{200b}";
        let r = h
            .call("send_money", send(testkit_landlord(), json!(1200), subject))
            .await;
        assert!(!is_error(&r), "{}", text(&r));
        let shown = h.user.shown();
        assert_eq!(shown.len(), 1);
        let m = &shown[0];
        assert_eq!(
            m.lines().filter(|l| l.starts_with("  payee_iban")).count(),
            1,
            "{m}"
        );
        assert!(
            !m.chars()
                .any(|c| c != '\n' && (c.is_control() || matches!(c, '\u{202e}' | '\u{200b}'))),
            "{m}"
        );
        assert!(m.contains("\\u{1b}[2J\\u{202e}\\u{200b}"), "{m}");
        assert!(m.contains("    | Rent\\n\n    |   payee_iban"), "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_users_key_step_up_is_refused_with_the_reason() {
    let h = harness(Opts {
        user_key: false,
        ..Opts::default()
    })
    .await;
    let r = h
        .call("send_money", send(testkit_landlord(), json!(1200), "Rent"))
        .await;
    assert!(is_error(&r));
    let t = text(&r);
    assert!(t.contains("no approval key for the user"), "{t}");
    // the ready line, as four eyes prints it: the operation and the key
    let op = r.structured_content.as_ref().unwrap()["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let (config, key) = (
        h.tw.dir.path().join("intentplane.toml"),
        h.tw.dir.path().join("emma.key"),
    );
    assert!(
        t.contains(&format!(
            "the user `emma` approves out of band (`ipc approve --config {} --operation {op} --as emma --key {} --submit`)",
            config.display(),
            key.display()
        )),
        "{t}"
    );
    assert!(h.user.shown().is_empty());
    // a secret key this machine does not hold is a placeholder, never a
    // path that looks real
    std::fs::remove_file(&key).unwrap();
    let t = text(
        &h.call("send_money", send(testkit_landlord(), json!(1200), "Rent"))
            .await,
    );
    assert!(
        t.contains("--as emma --key PATH/TO/emma.key --submit"),
        "{t}"
    );
}
