//! The MCP proxy's calls ([`crate::proxy`]'s harness): what is listed and
//! forwarded, what is refused and executed, the receipts and outcomes, a
//! failing downstream, the demo, a secret parameter.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use crate::proxy::*;
use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::testkit;
use serde_json::{Map, Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_configured_tools_are_listed_and_a_refused_call_leaves_a_receipt() {
    let h = harness(Opts::default()).await;
    let tools = h.client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["read_inbox", "list_vendors", "send_money"]);
    // the downstream's own schema, less the account the session's claim
    // fills (tests/mcp/downstream.rs checks the schema in detail); a
    // passthrough tool's as it is
    let demo = intentplane::demo::mcp_server::tools();
    let theirs = demo.iter().find(|t| t.name == "send_money").unwrap();
    let ours = tools.iter().find(|t| t.name == "send_money").unwrap();
    let mut expected = (*theirs.input_schema).clone();
    expected["properties"]
        .as_object_mut()
        .unwrap()
        .remove("from_account");
    expected["required"] = json!(["recipient", "amount", "currency"]);
    assert_eq!(*ours.input_schema, expected);
    let theirs = demo.iter().find(|t| t.name == "read_inbox").unwrap();
    let ours = tools.iter().find(|t| t.name == "read_inbox").unwrap();
    assert_eq!(ours.input_schema, theirs.input_schema);
    for hidden in ["delete_file", "send_email", "no_such_tool"] {
        let before = h.receipts().len();
        let r = h.call(hidden, args(json!({"path": "/etc/passwd"}))).await;
        assert!(is_error(&r), "{hidden}: {r:?}");
        assert!(
            text(&r).contains("not available through intentplane"),
            "{}",
            text(&r)
        );
        assert!(text(&r).contains("receipt #"), "{}", text(&r));
        assert!(h.executed(hidden).is_empty());
        // the refusal leaves a receipt naming the tool
        let recs = h.receipts();
        assert_eq!(recs.len(), before + 1, "{hidden}");
        let rec = recs.last().unwrap();
        assert_eq!(rec["kind"], "refused");
        assert_eq!(rec["tool"], hidden);
        // salted: the bare SHA-256 would let a reader test guesses
        assert_eq!(
            rec["arguments_hash"],
            h.proxy
                .gateway()
                .salted_hash("arguments", &json!({"path": "/etc/passwd"}))
                .unwrap()
        );
        assert_ne!(
            rec["arguments_hash"],
            intentplane::gateway::outcome::hash_any(&json!({"path": "/etc/passwd"}))
        );
        assert!(!rec.to_string().contains("/etc/passwd"), "only a hash");
    }
    // a hostile name and arguments without a canonical form still leave one
    let before = h.receipts().len();
    let hostile = format!("x\u{202e}{}", "y".repeat(500));
    let r = h
        .call(&hostile, args(json!({"n": 18_446_744_073_709_551_615u64})))
        .await;
    assert!(is_error(&r));
    let recs = h.receipts();
    assert_eq!(recs.len(), before + 1);
    let rec = recs.last().unwrap();
    assert_eq!(rec["kind"], "refused");
    // escaped and cut, as every echo of the agent's input
    let tool = rec["tool"].as_str().unwrap();
    assert!(
        tool.starts_with("x\\u{202e}y") && tool.ends_with('…'),
        "{rec}"
    );
    assert!(tool.chars().count() < 100, "{rec}");
    assert_eq!(
        rec["arguments_hash"],
        h.proxy
            .gateway()
            .salted_hash("arguments", &json!({"n": 18_446_744_073_709_551_615u64}))
            .unwrap()
    );
    assert!(intentplane::store::verify_store(&h.store.snapshot().unwrap(), None).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_is_forwarded_without_a_decision_and_leaves_a_receipt() {
    let h = harness(Opts::default()).await;
    let before = h.receipts().len();
    let r = h.call("read_inbox", Map::new()).await;
    assert!(!is_error(&r));
    assert!(text(&r).contains("we changed banks"), "{}", text(&r));
    assert_eq!(h.executed("read_inbox").len(), 1);
    // no decision, but a receipt: the tool, the server, the hashes, the status
    let recs = h.receipts();
    assert_eq!(recs.len(), before + 1, "one receipt per call");
    let rec = recs.last().unwrap();
    assert_eq!(rec["kind"], "passthrough");
    assert_eq!(rec["tool"], "read_inbox");
    assert_eq!(rec["server"], "demo");
    assert_eq!(rec["is_error"], json!(false), "a boolean, not a string");
    let gw = h.proxy.gateway();
    assert_eq!(
        rec["arguments_hash"],
        gw.salted_hash("arguments", &json!({})).unwrap()
    );
    assert_eq!(
        rec["result_hash"],
        gw.salted_hash("result", &serde_json::to_value(&r).unwrap())
            .unwrap()
    );
    assert!(rec.get("decision").is_none());
    assert!(!rec.to_string().contains("we changed banks"), "only a hash");
    // a downstream error is recorded as such
    let r = h.call("list_vendors", args(json!({"unexpected": 1}))).await;
    let rec = h.receipts().last().cloned().unwrap();
    assert_eq!(rec["kind"], "passthrough");
    assert_eq!(rec["tool"], "list_vendors");
    assert_eq!(rec["is_error"], json!(is_error(&r)));
    assert!(intentplane::store::verify_store(&h.store.snapshot().unwrap(), None).is_ok());
}

/// The user's kill switch stops the agent's reads too (issue #39, finding
/// 3): once the session's mandate is revoked, or has expired, a
/// passthrough is refused before it reaches the server, with a receipt and
/// a reason the agent reads; a payment is refused at `authn` as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_expired_session_forwards_no_read() {
    let h = harness(Opts::default()).await;
    let r = h.call("read_inbox", Map::new()).await;
    assert!(!is_error(&r), "{}", text(&r));
    let id = h.proxy.mandate_of("send_money").unwrap()["mandate"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    h.store
        .transaction(&mut |tx| {
            tx.revoke(&id)?;
            Ok(Value::Null)
        })
        .unwrap();
    for tool in ["read_inbox", "list_vendors"] {
        let r = h.call(tool, Map::new()).await;
        assert!(is_error(&r), "{}", text(&r));
        let t = text(&r);
        assert!(t.contains(&format!("`{id}` has been revoked")), "{t}");
        assert!(t.contains("--new-session") || t.contains("token"), "{t}");
        let rec = h.receipts().last().cloned().unwrap();
        assert_eq!(rec["kind"], "refused", "{rec}");
        assert_eq!(rec["tool"], tool);
        assert!(t.contains("receipt #"), "{t}");
    }
    assert_eq!(h.executed("read_inbox").len(), 1, "forwarded once, before");
    assert!(h.executed("list_vendors").is_empty());
    let r = h
        .call("send_money", send(testkit_landlord(), json!(10), "x"))
        .await;
    assert!(text(&r).contains("DENY at stage `authn`"), "{}", text(&r));

    // a session whose mandate has expired (the test world's clock is fixed)
    let mut spec = MandateSpec::bank("emma");
    spec.ttl = 0;
    let h = harness(Opts {
        spec: Some(spec),
        ..Opts::default()
    })
    .await;
    let r = h.call("read_inbox", Map::new()).await;
    assert!(is_error(&r), "{}", text(&r));
    assert!(text(&r).contains("has expired"), "{}", text(&r));
    assert_eq!(h.receipts().last().unwrap()["kind"], "refused");
    assert!(h.executed("read_inbox").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_email_iban_is_refused_with_a_readable_reason() {
    let h = harness(Opts::default()).await;
    let r = h
        .call(
            "send_money",
            send(
                intentplane::demo::mcp_server::ATTACKER_IBAN,
                json!(1200.00),
                "Rent December",
            ),
        )
        .await;
    assert!(is_error(&r));
    let t = text(&r);
    assert!(t.contains("DENY at stage `provenance`"), "{t}");
    assert!(t.contains("hint: add this payee as a beneficiary"), "{t}");
    assert!(t.contains("receipt #"), "{t}");
    assert!(h.executed("send_money").is_empty());
    assert!(h.user.shown().is_empty(), "a DENY asks nobody");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_call_executes_with_the_trusted_values_and_leaves_an_outcome_receipt() {
    let h = harness(Opts::default()).await;
    let r = h
        .call(
            "send_money",
            send("de44 5001 0517 5407 3249 31", json!(50.5), "Gym"),
        )
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    let done = h.executed("send_money");
    assert_eq!(done.len(), 1);
    let a = &done[0]["args"];
    let sent = a["recipient"].as_str().unwrap();
    assert_ne!(
        sent, "de44 5001 0517 5407 3249 31",
        "never the agent's spelling"
    );
    assert_eq!(sent.replace(' ', ""), "DE44500105175407324931");
    assert_eq!(
        a["amount"],
        json!(50.5),
        "major units, as the tool takes them"
    );
    assert_eq!(a["currency"], "EUR");
    // the decision, then its outcome, linked by the operation hash
    let recs = h.receipts();
    let outcome = recs.last().unwrap();
    assert_eq!(outcome["kind"], "outcome");
    assert_eq!(outcome["is_error"], json!(false), "a boolean, not a string");
    let decision = &recs[recs.len() - 2];
    assert_eq!(decision["decision"], "ALLOW");
    assert_eq!(outcome["operation_hash"], decision["operation_hash"]);
    // the gateway's own executor did not run: nothing but the dispatch
    assert!(intentplane::store::verify_store(&h.store.snapshot().unwrap(), None).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_call_is_answered_from_the_store_not_run_twice() {
    let h = harness(Opts::default()).await;
    let a = send("DE44500105175407324931", json!(20), "twice");
    let first = h.call("send_money", a.clone()).await;
    let second = h.call("send_money", a).await;
    assert!(!is_error(&first) && !is_error(&second));
    assert_eq!(text(&first), text(&second));
    assert_eq!(h.executed("send_money").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_arguments_are_denied_with_a_receipt() {
    let h = harness(Opts::default()).await;
    let cases = [
        send(testkit_landlord(), json!("a lot"), "x"),
        send(testkit_landlord(), json!(4.001), "x"),
        send(testkit_landlord(), json!(10), &"x".repeat(100_000)),
    ];
    for a in cases {
        let before = h.receipts().len();
        let r = h.call("send_money", a).await;
        assert!(is_error(&r));
        assert!(
            text(&r).contains("DENY at stage `contract`"),
            "{}",
            text(&r)
        );
        assert_eq!(h.receipts().len(), before + 1, "a receipt for each");
    }
    assert!(h.executed("send_money").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_error_is_an_error_result_and_a_receipt_never_retried() {
    let h = harness(Opts {
        balance: Some("100.00"),
        ..Opts::default()
    })
    .await;
    let a = send(testkit_landlord(), json!(150), "too much");
    let r = h.call("send_money", a.clone()).await;
    assert!(is_error(&r));
    assert!(text(&r).contains("insufficient funds"), "{}", text(&r));
    let outcome = h.receipts().last().cloned().unwrap();
    assert_eq!(outcome["kind"], "outcome");
    assert_eq!(outcome["is_error"], json!(true));
    // the same operation again: the stored outcome, the bank is not asked
    let again = h.call("send_money", a).await;
    assert!(is_error(&again));
    assert!(text(&again).contains("insufficient funds"));
    assert_eq!(h.executed("send_money").len(), 1);
}

/// A downstream that dies mid-call: an error and an outcome, never sent
/// again; and (issue #12 follow-up, item 4) the server is started again on
/// the next call to it (its state file carries over) instead of every
/// later call failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_downstream_that_dies_mid_call_is_an_error_not_called_again_and_restarted() {
    let h = harness(Opts {
        extra: vec!["--crash-on", "send_money"],
        ..Opts::default()
    })
    .await;
    let a = send(testkit_landlord(), json!(30), "crash");
    let r = h.call("send_money", a.clone()).await;
    assert!(is_error(&r));
    assert!(text(&r).contains("failed on `send_money`"), "{}", text(&r));
    let outcome = h.receipts().last().cloned().unwrap();
    assert_eq!(outcome["kind"], "outcome");
    for round in 0..2 {
        let r = h.call("read_inbox", Map::new()).await;
        assert!(!is_error(&r), "round {round}: {}", text(&r));
        assert!(text(&r).contains("we changed banks"), "{}", text(&r));
        assert_eq!(h.executed("read_inbox").len(), round + 1);
        // another payment reaches the restarted server (which dies again)
        let other = send(testkit_landlord(), json!(31 + round), "again");
        let r = h.call("send_money", other).await;
        assert!(is_error(&r));
        assert!(text(&r).contains("failed on `send_money`"), "{}", text(&r));
    }
    // the first operation is answered from the store, not sent again
    let again = h.call("send_money", a).await;
    assert!(is_error(&again));
    assert_eq!(text(&again), text(&r), "answered from the store");
    assert!(intentplane::store::verify_store(&h.store.snapshot().unwrap(), None).is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_without_a_recorded_outcome_is_outcome_unknown() {
    let h = harness(Opts::default()).await;
    // the proxy committed the decision and stopped before the downstream
    // answered: the same proposal decided directly, no outcome recorded
    let a = send(testkit_landlord(), json!(40), "lost");
    let tool = testkit::demo_tools()
        .into_iter()
        .find(|t| t.tool == "send_money")
        .unwrap();
    let proposal = tool.to_proposal(&a).unwrap();
    let d = h
        .proxy
        .gateway()
        .decide(&intentplane::gateway::Input {
            proposal,
            mandate: h.proxy.mandate_of("send_money"),
            approvals: vec![],
            malformed: None,
        })
        .unwrap();
    assert_eq!(d.decision, intentplane::gateway::Outcome::Allow);
    let r = h.call("send_money", a).await;
    assert!(is_error(&r));
    assert!(
        text(&r).contains("outcome not recorded yet") && text(&r).contains("ask the user"),
        "{}",
        text(&r)
    );
    assert!(h.executed("send_money").is_empty());
}

/// The gateway the proxy runs executes externally: an ALLOW records the
/// operation as dispatched with its trusted values and runs none of the
/// packs' in-process executors (here the password executor, which would
/// store a credential verifier); the same gateway without the option does.
#[test]
fn an_externally_executing_gateway_runs_no_in_process_executor() {
    use intentplane::gateway::executors::CREDENTIALS_NS;
    use intentplane::gateway::testkit::input;
    use intentplane::gateway::{Gateway, Outcome};
    let tw = TestWorld::new();
    let proposal = json!({"action": "user.update_password", "args": {
        "new_password": "correct horse battery"}});
    let run = |gw: &Gateway| {
        let m = tw.emma();
        let pending = gw.decide(&input(proposal.clone(), &m, vec![])).unwrap();
        assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
        let op = pending.operation_hash.unwrap();
        let d = gw
            .decide(&input(proposal.clone(), &m, vec![tw.approve("emma", &op)]))
            .unwrap();
        assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
        let mut stored = None;
        gw.store()
            .transaction(&mut |tx| {
                stored = tx.state_get(CREDENTIALS_NS, "emma")?;
                Ok(Value::Null)
            })
            .unwrap();
        (d, stored)
    };
    let (d, stored) = run(&tw.gateway().execute_externally());
    let recorded = d.result.clone().unwrap()["execute_with"].clone();
    assert!(recorded.is_object());
    // what is recorded holds the commitment; the caller gets the value
    let c = recorded["new_password"].as_str().unwrap();
    assert!(c.starts_with("secret:sha256:"), "{c}");
    assert_eq!(d.resolved["new_password"], c);
    assert_eq!(
        d.secrets.reveal(&d.resolved)["new_password"],
        "correct horse battery"
    );
    assert!(!format!("{d:?}").contains("correct horse"), "{d:?}");
    assert!(!serde_json::to_string(&d).unwrap().contains("correct horse"));
    assert!(stored.is_none(), "no in-process executor ran");
    let (d, stored) = run(&tw.gateway());
    assert!(d.result.unwrap().get("execute_with").is_none());
    assert!(
        d.secrets.is_empty(),
        "only an external executor's caller gets them"
    );
    assert!(stored.is_some(), "the in-process executor ran");
}

/// `ipc demo mcp` end to end (the binary, the example config, `ipc mcp`,
/// the demo server): the e-mail's IBAN refused, the landlord paid once in
/// the registry's spelling after the user confirmed, the declined, capped
/// and over-budget payments not executed.
#[test]
fn the_mcp_demo_plays_the_story() {
    let out = std::process::Command::new(IPC)
        .args(["demo", "mcp", "--format", "json"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let steps = doc["steps"].as_array().unwrap();
    let step = |tool: &str, n: usize| steps.iter().filter(|s| s["tool"] == tool).nth(n).unwrap();
    assert!(
        step("send_money", 0)["text"]
            .as_str()
            .unwrap()
            .contains("DENY at stage `provenance`")
    );
    assert_eq!(step("send_money", 1)["asked"]["answer"], "accept");
    assert!(
        step("send_money", 1)["asked"]["shown"]
            .as_str()
            .unwrap()
            .contains("1,200.00")
    );
    assert_eq!(step("send_money", 1)["is_error"], false);
    assert_eq!(step("send_money", 2)["asked"]["answer"], "decline");
    assert_eq!(step("send_money", 2)["is_error"], true);
    assert_eq!(step("send_money", 3)["is_error"], true);
    assert_eq!(step("send_money", 4)["is_error"], true);
    let executed = doc["executed_by_the_bank"].as_array().unwrap();
    assert_eq!(executed.len(), 1);
    assert_eq!(executed[0]["args"]["recipient"], "DE44500105175407324931");
    assert_eq!(executed[0]["args"]["amount"], json!(1200.0));
}

/// Issue #12 follow-up, item 1: a tool mapped onto an action with a
/// `secret` parameter (`change_password` onto `user.update_password`).
/// The downstream receives the password itself, not its commitment; the
/// store (receipts, executions, the outcome, pending operations: the
/// SQLite files' bytes) never holds it, even though the bank echoes it.
///
/// Issue #21, item 2, reproduced on 0e4128b with the second password (a
/// `"` and a `\`): the echo inside the answer's JSON text was stored
/// JSON-escaped, in clear, and the outcome receipt's unsalted
/// `result_hash` covered it. Now the answer of a call that carried a
/// secret is not stored (its status and salted hash are), and the agent's
/// copy is scrubbed in every JSON encoding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_reaches_the_downstream_and_never_the_store() {
    // (the password, a piece of it every JSON encoding keeps as it is)
    for (password, core) in [
        ("Tr0ub4dor&3-horse-staple", "Tr0ub4dor&3-horse-staple"),
        ("q\"u\\o-correct-horse-battery", "o-correct-horse-battery"),
    ] {
        secret_never_stored(password, core).await;
    }
}

async fn secret_never_stored(password: &str, core: &str) {
    let mut tools = testkit::demo_tools();
    tools.push(testkit::password_tool());
    let h = harness(Opts {
        tools,
        ..Opts::default()
    })
    .await;
    let r = h
        .call("change_password", args(json!({"password": password})))
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(h.user.shown().len(), 1, "step-up, always");
    assert!(!h.user.shown()[0].contains(core), "{}", h.user.shown()[0]);
    let done = h.executed("change_password");
    assert_eq!(done.len(), 1);
    assert_eq!(
        done[0]["args"]["password"], password,
        "the value, not its commitment"
    );
    // nothing the proxy stored or reports holds it
    let recs = h.receipts();
    let outcome = recs.last().unwrap();
    assert_eq!(outcome["kind"], "outcome");
    let op = outcome["operation_hash"].as_str().unwrap();
    let stored = h.proxy.gateway().outcome(op).unwrap().unwrap();
    assert!(!stored.result.to_string().contains(core), "{stored:?}");
    assert!(
        stored
            .result
            .to_string()
            .contains(intentplane::gateway::outcome::WITHHELD_ANSWER),
        "{stored:?}"
    );
    assert!(!stored.is_error);
    // a retried call is answered from the store, with that sentence
    let again = h
        .call("change_password", args(json!({"password": password})))
        .await;
    assert!(!is_error(&again), "{}", text(&again));
    assert!(
        text(&again).contains(intentplane::gateway::outcome::WITHHELD_ANSWER),
        "{}",
        text(&again)
    );
    assert_eq!(h.executed("change_password").len(), 1, "never run twice");
    // the agent's answer: the bank's, the echo withheld in every encoding
    let answer = serde_json::to_string(&r).unwrap();
    assert!(!answer.contains(core), "{answer}");
    assert!(answer.contains("secret:withheld"), "{answer}");
    assert!(answer.contains("changed"), "{answer}");
    // the receipt's result hash is salted: not the bare hash of the answer
    let rh = outcome["result_hash"].as_str().unwrap();
    assert!(rh.starts_with("salted:sha256:"), "{outcome}");
    assert_ne!(
        rh,
        intentplane::gateway::outcome::hash_any(&serde_json::to_value(&r).unwrap())
    );
    let dump = format!("{:?}", h.store.snapshot().unwrap());
    assert!(!dump.contains(core));
    let mut executed = None;
    h.store
        .transaction(&mut |tx| {
            executed = tx.executed(op)?;
            Ok(Value::Null)
        })
        .unwrap();
    let executed = executed.unwrap().to_string();
    assert!(executed.contains("secret:sha256:"), "{executed}");
    assert!(!executed.contains(core), "{executed}");
    drop(h.client);
    let mut files = 0;
    for e in std::fs::read_dir(h.tw.dir.path()).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with("store.db") {
            files += 1;
            let bytes = std::fs::read(e.path()).unwrap();
            assert!(
                !bytes.windows(core.len()).any(|w| w == core.as_bytes()),
                "{name} holds the password"
            );
        }
    }
    assert!(files >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_shadow_mode_the_call_goes_on_as_the_agent_made_it_and_the_decision_is_attached() {
    let h = harness(Opts {
        shadow: true,
        ..Opts::default()
    })
    .await;
    // the e-mail's IBAN: would be denied, and is sent as the agent wrote it
    let r = h
        .call(
            "send_money",
            send(
                intentplane::demo::mcp_server::ATTACKER_IBAN,
                json!(12.5),
                "Rent December",
            ),
        )
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    let done = h.executed("send_money");
    assert_eq!(done.len(), 1, "forwarded: shadow enforces nothing");
    assert_eq!(
        done[0]["args"]["recipient"],
        json!(intentplane::demo::mcp_server::ATTACKER_IBAN)
    );
    assert_eq!(done[0]["args"]["amount"], json!(12.5));
    let meta = r.meta.as_ref().expect("the decision is attached");
    let d = &meta.0[intentplane::mcp::proxy::DECISION_META];
    assert_eq!(d["decision"], "SHADOW", "{d:#}");
    assert_eq!(d["would_be"]["decision"], "DENY", "{d:#}");
    assert_eq!(d["would_be"]["stage"], "provenance", "{d:#}");
    // a large payment: would ask the user, nobody is asked
    let r = h
        .call("send_money", send(testkit_landlord(), json!(1500), "Rent"))
        .await;
    assert!(!is_error(&r), "{}", text(&r));
    assert!(h.user.shown().is_empty(), "shadow asks nobody");
    let d = &r.meta.as_ref().unwrap().0[intentplane::mcp::proxy::DECISION_META];
    assert_eq!(d["would_be"]["decision"], "PENDING", "{d:#}");
    assert_eq!(h.executed("send_money").len(), 2);
    // the receipts say SHADOW, and the store verifies
    let recs = h.receipts();
    let shadows = recs.iter().filter(|b| b["decision"] == "SHADOW").count();
    assert_eq!(shadows, 2, "{recs:#?}");
    h.verify();
}

/// A server that fails to start, with a PostgreSQL store: the proxy's
/// start is an error naming the server, never a panic (the store's
/// synchronous client used to be dropped on the async runtime's thread).
/// On a current-thread runtime, as `ipc mcp` runs.
#[cfg(feature = "postgres")]
#[test]
fn a_server_that_fails_to_start_over_postgresql_is_an_error_not_a_panic() {
    let Some(pg) = crate::common::pg::fresh() else {
        return;
    };
    let tw = intentplane::gateway::testkit::TestWorld::new();
    let store = intentplane::store::open(std::path::Path::new(&pg.url), true).unwrap();
    let mut server = testkit::demo_server(
        std::path::Path::new(IPC),
        &tw.dir.path().join("state.json"),
        &[],
        tw.dir.path(),
    );
    if let intentplane::mcp::config::Transport::Stdio { command, args, .. } = &mut server.transport
    {
        *command = "/bin/false".into();
        args.clear();
    }
    let setup = testkit::setup(
        &tw,
        intentplane::gateway::testkit::MandateSpec::bank("emma"),
        server,
        testkit::demo_tools(),
        store,
        true,
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = rt.block_on(intentplane::mcp::proxy::Proxy::start(setup));
    let Err(e) = started else {
        panic!("a server that exits at once started");
    };
    assert!(e.to_string().contains("demo"), "{e}");
}
