//! The MCP proxy end to end in process: an rmcp client (ours) talks to the
//! proxy over an in-memory pipe; the proxy starts the demo server
//! (`ipc demo mcp-server --state F`) as its downstream; the assertions read
//! what the demo server actually executed from its state file.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::config::ToolConfig;
use intentplane::mcp::proxy::Proxy;
use intentplane::mcp::testkit;
use intentplane::store::Store;
use intentplane::store::sqlite::SqliteStore;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RequestContext, RoleClient, RunningService,
};
use rmcp::{ClientHandler, ErrorData as McpError, ServiceExt};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const IPC: &str = env!("CARGO_BIN_EXE_ipc");

/// A client whose user answers every confirmation with `answer` (None: the
/// client declares no elicitation), and remembers what it was shown.
#[derive(Clone)]
struct User {
    answer: Option<ElicitationAction>,
    shown: Arc<Mutex<Vec<String>>>,
}

impl User {
    fn new(answer: Option<ElicitationAction>) -> Self {
        User {
            answer,
            shown: Arc::new(Mutex::new(vec![])),
        }
    }
    fn shown(&self) -> Vec<String> {
        self.shown.lock().unwrap().clone()
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        let caps = if self.answer.is_some() {
            ClientCapabilities::builder().enable_elicitation().build()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(caps, Implementation::new("test-client", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.shown.lock().unwrap().push(message.clone());
        }
        let action = self.answer.clone().unwrap_or(ElicitationAction::Decline);
        let accept = matches!(action, ElicitationAction::Accept);
        let mut r = ElicitResult::new(action);
        if accept {
            r = r.with_content(json!({}));
        }
        Ok(r)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Era {
    /// `initialize`, 2025-11-25: server-to-client elicitation.
    Legacy,
    /// `server/discover`, 2026-07-28: input-required results.
    Mrtr,
}

struct Harness {
    tw: TestWorld,
    state: PathBuf,
    store: Arc<dyn Store>,
    proxy: Proxy,
    client: RunningService<RoleClient, User>,
    user: User,
}

struct Opts {
    spec: Option<MandateSpec>,
    tools: Vec<ToolConfig>,
    answer: Option<ElicitationAction>,
    era: Era,
    user_key: bool,
    extra: Vec<&'static str>,
    balance: Option<&'static str>,
    /// The session's `decline_for` (default: the config's default).
    decline_for: Option<i64>,
    /// The store's location (default: an SQLite file in the test's folder).
    store: Option<String>,
    /// The shipped packs of the world (default: [`TestWorld::new`]'s).
    packs: Option<&'static [&'static str]>,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            spec: None,
            tools: testkit::demo_tools(),
            answer: Some(ElicitationAction::Accept),
            era: Era::Legacy,
            user_key: true,
            extra: vec![],
            balance: None,
            decline_for: None,
            store: None,
            packs: None,
        }
    }
}

async fn harness(o: Opts) -> Harness {
    let tw = o.packs.map_or_else(TestWorld::new, TestWorld::with_packs);
    let state = tw.dir.path().join("demo-state.json");
    if let Some(b) = o.balance {
        let mut st = intentplane::demo::mcp_server::initial_state();
        st["balance"] = json!(b);
        std::fs::write(&state, st.to_string()).unwrap();
    }
    let store: Arc<dyn Store> = match &o.store {
        Some(at) => {
            tokio::task::block_in_place(|| intentplane::store::open(Path::new(at), true).unwrap())
        }
        None => Arc::new(SqliteStore::open(tw.dir.path().join("store.db")).unwrap()),
    };
    let server = testkit::demo_server(Path::new(IPC), &state, &o.extra, tw.dir.path());
    let spec = o.spec.unwrap_or_else(|| MandateSpec::bank("emma"));
    let mut setup = testkit::setup(&tw, spec, server, o.tools, store.clone(), o.user_key);
    if let Some(d) = o.decline_for {
        setup.session.decline_for = d;
    }
    let proxy = Proxy::start(setup).await.expect("the proxy starts");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(proxy.clone().serve_on(a));
    let user = User::new(o.answer);
    let client = match o.era {
        Era::Legacy => user.clone().serve(b).await.expect("client connects"),
        Era::Mrtr => user
            .clone()
            .serve_with_lifecycle(
                b,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("client discovers"),
    };
    Harness {
        tw,
        state,
        store,
        proxy,
        client,
        user,
    }
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn send(recipient: &str, amount: Value, subject: &str) -> Map<String, Value> {
    args(json!({"recipient": recipient, "amount": amount, "currency": "EUR", "subject": subject}))
}

impl Harness {
    async fn call(&self, tool: &str, a: Map<String, Value>) -> CallToolResult {
        self.client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(a))
            .await
            .expect("the call gets a result")
    }

    /// The calls the demo server executed (or attempted) of `tool`.
    fn executed(&self, tool: &str) -> Vec<Value> {
        crate::common::mcp::executed(&self.state, tool)
    }

    /// The chain, once the outcomes the proxy answered with are written
    /// (in the background, after the answer).
    fn receipts(&self) -> Vec<Value> {
        // off the async workers: a PostgreSQL store's client runs a
        // runtime of its own
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.proxy.flush());
            self.store.receipts().unwrap()
        })
        .into_iter()
        .map(|r| r.body)
        .collect()
    }
}

impl Harness {
    /// The whole store verifies (read off the async workers: a PostgreSQL
    /// store's client runs a runtime of its own).
    fn verify(&self) {
        let snap = tokio::task::block_in_place(|| self.store.snapshot().unwrap());
        assert!(intentplane::store::verify_store(&snap, None).is_ok());
    }
}

fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

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

fn testkit_landlord() -> &'static str {
    "DE44 5001 0517 5407 3249 31"
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn above_the_hard_cap_or_the_budget_nothing_executes() {
    let mut rich = MandateSpec::bank("emma");
    rich.budget = 5_000_000;
    let h = harness(Opts {
        spec: Some(rich),
        ..Opts::default()
    })
    .await;
    let r = h
        .call(
            "send_money",
            send(testkit_landlord(), json!(10000.01), "Rent"),
        )
        .await;
    assert!(is_error(&r));
    assert!(text(&r).contains("DENY at stage `policy`"), "{}", text(&r));
    assert!(text(&r).contains("hard cap"), "{}", text(&r));
    assert!(
        h.user.shown().is_empty(),
        "a forbidden payment is not even asked"
    );
    assert!(h.executed("send_money").is_empty());
    let h = harness(Opts::default()).await;
    // Emma's session budget is 2,000.00: 1,200 then 900 more
    let ok = h
        .call("send_money", send(testkit_landlord(), json!(1200), "one"))
        .await;
    assert!(!is_error(&ok), "{}", text(&ok));
    let r = h
        .call("send_money", send(testkit_landlord(), json!(900), "two"))
        .await;
    assert!(is_error(&r));
    assert!(text(&r).contains("DENY at stage `budget`"), "{}", text(&r));
    assert_eq!(h.executed("send_money").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_calls_spend_one_budget() {
    concurrent_calls_spend_one_budget(&harness(Opts::default()).await).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_calls_spend_one_budget_postgres() {
    let Some(pg) = tokio::task::block_in_place(crate::common::pg::fresh) else {
        return;
    };
    let h = harness(Opts {
        store: Some(pg.url.clone()),
        ..Opts::default()
    })
    .await;
    let (_pg, h) = (OffAsync(Some(pg)), OffAsync(Some(h)));
    concurrent_calls_spend_one_budget(h.0.as_ref().unwrap()).await;
}

async fn concurrent_calls_spend_one_budget(h: &Harness) {
    let a = h.call("send_money", send(testkit_landlord(), json!(900), "a"));
    let b = h.call("send_money", send(testkit_landlord(), json!(900), "b"));
    let c = h.call("send_money", send(testkit_landlord(), json!(900), "c"));
    let (a, b, c) = tokio::join!(a, b, c);
    let ok = [&a, &b, &c].iter().filter(|r| !is_error(r)).count();
    assert_eq!(ok, 2, "2,000.00 pays two of 900.00, never three");
    let denied: Vec<String> = [&a, &b, &c]
        .iter()
        .filter(|r| is_error(r))
        .map(|r| text(r))
        .collect();
    assert!(denied[0].contains("budget"), "{denied:?}");
    assert_eq!(h.executed("send_money").len(), 2);
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

/// Four proxies on one store (four `ipc mcp` of one session) and the same
/// operation (issue #39, finding 10): the first executes it; the others,
/// while its outcome is not yet in the store, are told so and to call
/// again, not "outcome unknown"; once it is recorded, their retries read
/// its result. The downstream runs it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_proxies_on_one_store_execute_once_and_the_others_read_its_result() {
    let tw = TestWorld::new();
    let store = tw.dir.path().join("store.db").display().to_string();
    four_proxies(&tw, &store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_proxies_on_one_store_execute_once_and_the_others_read_its_result_postgres() {
    let Some(pg) = tokio::task::block_in_place(crate::common::pg::fresh) else {
        return;
    };
    let pg = OffAsync(Some(pg));
    four_proxies(&TestWorld::new(), &pg.0.as_ref().unwrap().url).await;
}

/// Dropped off the async workers (a PostgreSQL schema: its client runs a
/// runtime of its own), also when a failed assertion unwinds.
#[cfg(feature = "postgres")]
struct OffAsync<T>(Option<T>);

#[cfg(feature = "postgres")]
impl<T> Drop for OffAsync<T> {
    fn drop(&mut self) {
        let t = self.0.take();
        tokio::task::block_in_place(|| drop(t));
    }
}

async fn four_proxies(tw: &TestWorld, store: &str) {
    let state = tw.dir.path().join("demo-state.json");
    let id = MandateSpec::bank("emma").id;
    let mut proxies = vec![];
    for _ in 0..4 {
        let at = Path::new(store);
        let store = tokio::task::block_in_place(|| intentplane::store::open(at, true).unwrap());
        let server = testkit::demo_server(Path::new(IPC), &state, &[], tw.dir.path());
        let mut spec = MandateSpec::bank("emma");
        spec.id = id.clone();
        let setup = testkit::setup(tw, spec, server, testkit::demo_tools(), store, true);
        let proxy = Proxy::start(setup).await.expect("the proxy starts");
        // an outcome stays in memory until the flush below
        proxy.set_outcome_idle(std::time::Duration::from_secs(3600));
        let (a, b) = tokio::io::duplex(1 << 20);
        tokio::spawn(proxy.clone().serve_on(a));
        let client = User::new(None).serve(b).await.expect("client connects");
        proxies.push((proxy, client));
    }
    let a = send(testkit_landlord(), json!(100), "rent");
    let call = |i: usize| {
        let client = &proxies[i].1;
        let a = a.clone();
        async move {
            client
                .call_tool(CallToolRequestParams::new("send_money").with_arguments(a))
                .await
                .expect("the call gets a result")
        }
    };
    let first = call(0).await;
    assert!(!is_error(&first), "{}", text(&first));
    let (b, c, d) = tokio::join!(call(1), call(2), call(3));
    for r in [&b, &c, &d] {
        let t = text(r);
        assert!(is_error(r), "{t}");
        assert!(t.contains("outcome not recorded yet"), "{t}");
        assert!(
            t.contains("another instance") && t.contains("call again"),
            "{t}"
        );
        assert!(!t.contains("outcome unknown"), "{t}");
    }
    proxies[0].0.flush().await;
    for i in 1..4 {
        let r = call(i).await;
        assert_eq!(text(&r), text(&first), "proxy {i} reads the result");
        assert!(!is_error(&r));
    }
    assert_eq!(crate::common::mcp::executed(&state, "send_money").len(), 1);
    for (p, _) in &proxies {
        p.flush().await;
    }
    // (a PostgreSQL store is closed off the async workers)
    tokio::task::block_in_place(|| drop(proxies));
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

/// The page the read tests fetch (a site of Emma's mandate).
const PAGE: &str = "https://news.example/today";

/// Issue #40, item 2: a tool the config declares `effect = "read"` (the
/// demo's `fetch` onto `web.fetch`) is decided and sent again at each
/// call: a 404 does not stay a 404 once the page exists, a changed page is
/// read as it is now, also by a proxy started again on the same store;
/// each call is an ALLOW of its own (`effect: "read"`, its own
/// `execution`), and its outcome another receipt. The write beside it
/// (`publish`) keeps its receipts as they were (no `effect`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_sent_again_at_each_call_and_returns_the_changed_answer() {
    let (h, id) = web_harness(None).await;
    reads_sent_again(&h, id).await;
}

/// The slack pack's world, Emma's web mandate (and its id) and
/// [`testkit::web_tools`]; the store at `store` (default: SQLite).
async fn web_harness(store: Option<String>) -> (Harness, String) {
    let spec = testkit::web_mandate(&[PAGE]);
    let id = spec.id.clone();
    let h = harness(Opts {
        spec: Some(spec),
        tools: testkit::web_tools(),
        packs: Some(&["slack"]),
        store,
        ..Opts::default()
    })
    .await;
    (h, id)
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_is_sent_again_at_each_call_and_returns_the_changed_answer_postgres() {
    let Some(pg) = tokio::task::block_in_place(crate::common::pg::fresh) else {
        return;
    };
    let (h, id) = web_harness(Some(pg.url.clone())).await;
    let (_pg, h) = (OffAsync(Some(pg)), OffAsync(Some(h)));
    reads_sent_again(h.0.as_ref().unwrap(), id).await;
}

/// The read test on `h` (Emma's web mandate `id`, [`testkit::web_tools`]).
async fn reads_sent_again(h: &Harness, id: String) {
    let fetch = || args(json!({"url": PAGE}));
    let publish = |c: &str| args(json!({"url": PAGE, "content": c}));
    // nothing there yet: a 404, and the same 404 asked again reaches the
    // server again
    for n in 1..=2 {
        let r = h.call("fetch", fetch()).await;
        assert!(is_error(&r), "{r:?}");
        assert!(text(&r).contains("404"), "{}", text(&r));
        assert_eq!(h.executed("fetch").len(), n);
    }
    // published: the same call reads the page, and then its new version
    for (n, content) in [(3, "v1"), (4, "v2")] {
        let r = h.call("publish", publish(content)).await;
        assert!(!is_error(&r), "{}", text(&r));
        let r = h.call("fetch", fetch()).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert!(text(&r).contains(content), "{}", text(&r));
        assert_eq!(h.executed("fetch").len(), n);
    }
    let recs = h.receipts();
    let reads: Vec<&Value> = recs
        .iter()
        .filter(|b| b["action"] == "web.fetch" && b["decision"] == "ALLOW")
        .collect();
    assert_eq!(reads.len(), 4);
    let op = reads[0]["operation_hash"].as_str().unwrap();
    let mut keys = std::collections::BTreeSet::new();
    for b in &reads {
        // one operation (what an approval would sign), executed anew
        assert_eq!(b["operation_hash"], op, "{b}");
        assert_eq!(b["effect"], "read", "{b}");
        assert_eq!(b["replayed"], false, "{b}");
        let key = b["execution"].as_str().unwrap();
        assert_eq!(intentplane::store::read_operation(key), Some(op), "{b}");
        keys.insert(key.to_string());
    }
    assert_eq!(keys.len(), 4, "each execution its own key");
    // each execution's outcome, linked by its key
    let outcomes: Vec<&Value> = recs
        .iter()
        .filter(|b| b["kind"] == "outcome" && b["effect"] == "read")
        .collect();
    assert_eq!(outcomes.len(), 4);
    for o in &outcomes {
        assert_eq!(o["operation_hash"], op);
        assert!(keys.contains(o["execution"].as_str().unwrap()), "{o}");
    }
    assert_eq!(
        outcomes.iter().filter(|o| o["is_error"] == true).count(),
        2,
        "the two 404s"
    );
    // the write's receipts say nothing of an effect, as before reads
    for b in recs
        .iter()
        .filter(|b| b["action"] == "web.post" || (b["kind"] == "outcome" && b["effect"].is_null()))
    {
        assert!(
            b.get("effect").is_none() && b.get("execution").is_none(),
            "{b}"
        );
    }
    h.verify();
    // a proxy started again on the same store, with the same mandate (the
    // same operation hash): still sent, still the page as it is now
    let mut spec = testkit::web_mandate(&[PAGE]);
    spec.id = id;
    let server = testkit::demo_server(Path::new(IPC), &h.state, &[], h.tw.dir.path());
    let setup = testkit::setup(
        &h.tw,
        spec,
        server,
        testkit::web_tools(),
        h.store.clone(),
        true,
    );
    let again = Proxy::start(setup).await.expect("the proxy starts again");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(again.clone().serve_on(a));
    let client = User::new(None).serve(b).await.unwrap();
    let r = client
        .call_tool(CallToolRequestParams::new("fetch").with_arguments(fetch()))
        .await
        .unwrap();
    assert!(text(&r).contains("v2"), "{}", text(&r));
    assert_eq!(h.executed("fetch").len(), 5);
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(again.flush()));
    let last = h
        .receipts()
        .into_iter()
        .rev()
        .find(|b| b["decision"] == "ALLOW")
        .unwrap();
    assert_eq!(last["operation_hash"], op, "the same operation, sent again");
    h.verify();
}

/// `tools` with `name` declared a read (`effect = "read"`).
fn as_read(mut tools: Vec<ToolConfig>, name: &str) -> Vec<ToolConfig> {
    for t in tools.iter_mut().filter(|t| t.tool == name) {
        if let intentplane::mcp::config::ToolMode::Action { effect, .. } = &mut t.mode {
            *effect = intentplane::gateway::Effect::Read;
        }
    }
    tools
}

/// A read that needs people is approved for each execution (an approval
/// counts for one, docs/decisions/reads-sent-again-writes-once.md): a
/// step-up read asks the user at every call; a four-eyes read takes the
/// second approver's signature dropped out of band once, and the next call
/// is refused again without asking the user in vain, until another comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_needs_approval_is_approved_at_each_execution() {
    // (every execution spends from the budget: room for two)
    let h = harness(Opts {
        spec: Some(MandateSpec {
            budget: 1_000_000,
            ..MandateSpec::bank("emma")
        }),
        tools: as_read(testkit::demo_tools(), "send_money"),
        ..Opts::default()
    })
    .await;
    let a = send(testkit_landlord(), json!(1200), "Rent December");
    for n in 1..=2 {
        let r = h.call("send_money", a.clone()).await;
        assert!(!is_error(&r), "{}", text(&r));
        assert_eq!(h.user.shown().len(), n, "asked again");
        assert_eq!(h.executed("send_money").len(), n);
    }
    // four eyes
    let spec = MandateSpec::for_pack("ap", "clerk", "acme", &["vendors.write"]);
    let h = harness(Opts {
        spec: Some(spec),
        tools: as_read(testkit::ap_tools(), "update_vendor"),
        ..Opts::default()
    })
    .await;
    let a = args(
        json!({"vendor_id": "V-STADTWERKE", "callback_id": "CB-7", "iban": "es91 2100 0418 4502 0005 1332"}),
    );
    let r = h.call("update_vendor", a.clone()).await;
    assert!(
        is_error(&r) && text(&r).contains("four eyes"),
        "{}",
        text(&r)
    );
    let op = r.structured_content.as_ref().unwrap()["operation_hash"]
        .as_str()
        .unwrap()
        .to_string();
    let drop = |name: &str| {
        std::fs::write(
            h.tw.dir.path().join("approvals").join(name),
            h.tw.approve("cfo", &op).to_string(),
        )
        .unwrap()
    };
    drop("cfo-1.json");
    let r = h.call("update_vendor", a.clone()).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(
        (h.user.shown().len(), h.executed("update_vendor").len()),
        (1, 1)
    );
    // the CFO's signature was for that execution: refused again, the user
    // not asked for nothing
    let r = h.call("update_vendor", a.clone()).await;
    assert!(
        is_error(&r) && text(&r).contains("four eyes"),
        "{}",
        text(&r)
    );
    assert_eq!(
        (h.user.shown().len(), h.executed("update_vendor").len()),
        (1, 1)
    );
    drop("cfo-2.json");
    let r = h.call("update_vendor", a.clone()).await;
    assert!(!is_error(&r), "{}", text(&r));
    assert_eq!(
        (h.user.shown().len(), h.executed("update_vendor").len()),
        (2, 2)
    );
    // submitted to the store instead: the same, once
    let signed: intentplane::gateway::approval::SignedApproval =
        serde_json::from_value(h.tw.approve("cfo", &op)).unwrap();
    h.proxy.gateway().submit_approval(&signed).unwrap();
    for (shown, executed) in [(3, 3), (3, 3)] {
        h.call("update_vendor", a.clone()).await;
        assert_eq!(
            (h.user.shown().len(), h.executed("update_vendor").len()),
            (shown, executed)
        );
    }
    assert!(intentplane::store::verify_store(&h.store.snapshot().unwrap(), None).is_ok());
}
