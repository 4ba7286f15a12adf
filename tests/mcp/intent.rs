//! `intentplane_request_mandate` in process: an rmcp client whose user
//! ticks values of the confirmation form, in both elicitation eras; the
//! child mandate the proxy issues decides the session's later calls, and a
//! restart of the proxy continues it.
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::intent::TOOL;
use intentplane::mcp::proxy::Proxy;
use intentplane::mcp::testkit;
use intentplane::store::Store;
use intentplane::store::sqlite::SqliteStore;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation, ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, RequestContext, RoleClient, RunningService,
};
use rmcp::{ClientHandler, ErrorData as McpError, ServiceExt};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

const IPC: &str = env!("CARGO_BIN_EXE_ipc");
const LANDLORD: &str = "DE44 5001 0517 5407 3249 31";
const ATTACKER: &str = "DE75 5121 0800 1245 1261 99";

/// The user's answer to a form: the message and the checkboxes (key,
/// title) in, the action and the content out.
type Choose = fn(&str, &[(String, String)]) -> (ElicitationAction, Value);

/// A form as the user saw it: the message and the checkboxes.
type Seen = (String, Vec<(String, String)>);

#[derive(Clone)]
struct User {
    choose: Choose,
    shown: Arc<Mutex<Vec<Seen>>>,
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("test-client", "1"),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = &request
        else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let schema = serde_json::to_value(requested_schema).unwrap();
        let boxes: Vec<(String, String)> = schema["properties"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v["title"].as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        self.shown
            .lock()
            .unwrap()
            .push((message.clone(), boxes.clone()));
        let (action, content) = (self.choose)(message, &boxes);
        let mut r = ElicitResult::new(action.clone());
        if matches!(action, ElicitationAction::Accept) {
            r = r.with_content(content);
        }
        Ok(r)
    }
}

/// Ticks the boxes whose title holds `landlord`.
fn landlord_only(_: &str, boxes: &[(String, String)]) -> (ElicitationAction, Value) {
    let m: Map<String, Value> = boxes
        .iter()
        .map(|(k, t)| (k.clone(), json!(t.contains("landlord"))))
        .collect();
    (ElicitationAction::Accept, Value::Object(m))
}

fn declines(_: &str, _: &[(String, String)]) -> (ElicitationAction, Value) {
    (ElicitationAction::Decline, Value::Null)
}

/// Answers with a key the form did not ask: the answer is refused.
fn smuggles(_: &str, boxes: &[(String, String)]) -> (ElicitationAction, Value) {
    let mut m: Map<String, Value> = boxes
        .iter()
        .map(|(k, _)| (k.clone(), json!(true)))
        .collect();
    m.insert("grant_99".into(), json!(true));
    (ElicitationAction::Accept, Value::Object(m))
}

struct Session {
    proxy: Proxy,
    client: RunningService<RoleClient, User>,
    user: User,
    state: std::path::PathBuf,
}

/// A proxy over `tw` and `store` whose session offers the request tool,
/// and a client in `era` whose user answers with `choose`.
/// The proxy's setup with mandate requests on, the same at every start.
fn setup(tw: &TestWorld, store: Arc<dyn Store>) -> intentplane::mcp::config::Setup {
    let state = tw.dir.path().join("demo-state.json");
    let server = testkit::demo_server(Path::new(IPC), &state, &[], tw.dir.path());
    let mut setup = testkit::setup(
        tw,
        // the same session mandate at every start (as `[session]` issues it
        // again and the durable session continues it)
        MandateSpec {
            id: "m-emma-session".into(),
            ..MandateSpec::bank("emma")
        },
        server,
        testkit::demo_tools(),
        store,
        true,
    );
    setup.session.issuer_key = Some(tw.issuer.clone());
    setup.session.mandate_requests = true;
    setup
}

async fn session(tw: &TestWorld, store: Arc<dyn Store>, choose: Choose, new_era: bool) -> Session {
    let state = tw.dir.path().join("demo-state.json");
    let proxy = Proxy::start(setup(tw, store))
        .await
        .expect("the proxy starts");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(proxy.clone().serve_on(a));
    let user = User {
        choose,
        shown: Arc::default(),
    };
    let client = if new_era {
        user.clone()
            .serve_with_lifecycle(
                b,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("client discovers")
    } else {
        user.clone().serve(b).await.expect("client connects")
    };
    Session {
        proxy,
        client,
        user,
        state,
    }
}

impl Session {
    async fn call(&self, tool: &str, a: Value) -> CallToolResult {
        self.client
            .call_tool(
                CallToolRequestParams::new(tool.to_string())
                    .with_arguments(a.as_object().cloned().unwrap()),
            )
            .await
            .expect("the call gets a result")
    }

    fn executed(&self) -> usize {
        crate::common::mcp::executed(&self.state, "send_money").len()
    }
}

fn send(iban: &str, amount: f64, subject: &str) -> Value {
    json!({"recipient": iban, "amount": amount, "currency": "EUR", "subject": subject})
}

fn injected() -> Value {
    json!({"claims": {"payee": [LANDLORD, ATTACKER]}, "budget": "1000.00", "calls": 5})
}

fn store(tw: &TestWorld) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(tw.dir.path().join("store.db")).unwrap())
}

fn mandate_receipts(store: &Arc<dyn Store>) -> Vec<Value> {
    store
        .receipts()
        .unwrap()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b["kind"] == "mandate")
        .collect()
}

/// The injected payee is shown, marked as in no registry of the user's,
/// beside the landlord's (named by the registry); the user declines:
/// nothing is granted, the decline is a receipt, and the attacker's IBAN
/// stays refused. In both eras.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_payee_is_visible_and_the_user_declines() {
    for new_era in [false, true] {
        let tw = TestWorld::new();
        let st = store(&tw);
        let s = session(&tw, st.clone(), declines, new_era).await;
        let tools = s.client.list_all_tools().await.unwrap();
        assert!(tools.iter().any(|t| t.name == TOOL));
        let r = s.call(TOOL, injected()).await;
        assert_eq!(r.is_error, Some(true), "{}", text(&r));
        assert!(text(&r).contains("declined"), "{}", text(&r));
        let shown = s.user.shown.lock().unwrap().clone();
        assert_eq!(shown.len(), 1, "asked once");
        let (message, boxes) = &shown[0];
        assert!(message.contains("DE44 5001 0517 5407 3249 31"), "{message}");
        assert!(message.contains("DE75 5121 0800 1245 1261 99"), "{message}");
        assert!(
            message.contains("registry calls it Hausverwaltung Weber (landlord)"),
            "{message}"
        );
        assert!(message.contains("IN NO REGISTRY OF YOURS"), "{message}");
        assert!(
            message.contains("DE75 5121 0800 1245 1261 99 - NOT in any registry of yours"),
            "{message}"
        );
        // offered for ticking: the landlord's only
        assert_eq!(boxes.len(), 1, "{boxes:?}");
        assert!(boxes[0].1.contains("DE44"), "{boxes:?}");
        let recs = mandate_receipts(&st);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0]["change"], "decline");
        assert_eq!(recs[0]["granted"], json!([]));
        let paid = s.call("send_money", send(ATTACKER, 10.0, "rent")).await;
        assert!(
            text(&paid).contains("DENY at stage `provenance`"),
            "{}",
            text(&paid)
        );
        assert_eq!(s.executed(), 0);
    }
}

/// Only what the user ticked enters the child; the calls are decided under
/// it (its budget, not the session's), in both eras; a restart of the
/// proxy on the same store continues it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticked_values_become_the_child_that_decides_and_survives_a_restart() {
    for new_era in [false, true] {
        let tw = TestWorld::new();
        let st = store(&tw);
        let s = session(&tw, st.clone(), landlord_only, new_era).await;
        let parent = s.proxy.mandate_of("send_money").unwrap();
        let r = s.call(TOOL, injected()).await;
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
        let child = s.proxy.mandate_of("send_money").unwrap();
        assert_ne!(child, parent);
        let payees = child["mandate"]["claims"]["payee"].clone();
        assert_eq!(payees, json!(["DE44500105175407324931"]), "{child}");
        assert_eq!(child["mandate"]["budget"]["amount"], json!(100_000));
        let first = s.call("send_money", send(LANDLORD, 600.0, "rent")).await;
        assert_ne!(first.is_error, Some(true), "{}", text(&first));
        // another operation (an identical one is answered from the store)
        let second = s.call("send_money", send(LANDLORD, 600.0, "again")).await;
        assert!(text(&second).contains("budget"), "{}", text(&second));
        assert_eq!(s.executed(), 1);
        let recs = mandate_receipts(&st);
        let grant = recs.iter().find(|r| r["change"] == "grant").unwrap();
        assert_eq!(grant["not_granted"][0]["value"], "DE75512108001245126199");
        drop(s);
        // a new proxy process on the same store and config
        let again = session(&tw, st.clone(), declines, new_era).await;
        assert_eq!(again.proxy.mandate_of("send_money").unwrap(), child);
    }
}

/// An answer holding a key the form did not ask grants nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_form_did_not_ask_for_grants_nothing() {
    let tw = TestWorld::new();
    let st = store(&tw);
    let s = session(&tw, st.clone(), smuggles, false).await;
    let parent = s.proxy.mandate_of("send_money").unwrap();
    let r = s.call(TOOL, injected()).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("did not ask"), "{}", text(&r));
    assert_eq!(s.proxy.mandate_of("send_money").unwrap(), parent);
    assert!(mandate_receipts(&st).is_empty());
}

/// In the 2026-07-28 era the state binds what was shown: an answer sent
/// back with other arguments (what the user saw is not what would be
/// granted) is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_for_another_request_is_refused() {
    let tw = TestWorld::new();
    let st = store(&tw);
    let s = session(&tw, st.clone(), landlord_only, true).await;
    let obj = |v: Value| v.as_object().cloned().unwrap();
    let first = s
        .client
        .call_tool_once(
            CallToolRequestParams::new(TOOL)
                .with_arguments(obj(json!({"claims": {"payee": [LANDLORD]}}))),
        )
        .await
        .unwrap();
    let rmcp::model::CallToolResponse::InputRequired(ir) = first else {
        panic!("expected input required, got {first:?}");
    };
    let state = ir.request_state.clone().unwrap();
    let mut accept = std::collections::BTreeMap::new();
    accept.insert(
        "confirm".to_string(),
        json!({"action": "accept", "content": {"grant_1": true}}),
    );
    // the state of the landlord's request, sent back with the attacker's
    let r = s
        .client
        .call_tool_once(
            CallToolRequestParams::new(TOOL)
                .with_arguments(obj(
                    json!({"claims": {"payee": ["DE89 3704 0044 0532 0130 00"]}}),
                ))
                .with_input_responses(accept)
                .with_request_state(state),
        )
        .await
        .unwrap();
    let t = format!("{r:?}");
    assert!(t.contains("request state was refused"), "{t}");
    assert!(mandate_receipts(&st).is_empty());
}

/// A claim of one value the request names and the user does not tick
/// (here: cannot, it is not the session's account) grants nothing: the
/// child would have held the session's account, which the form never
/// showed as this request's (it was issued so before).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unticked_single_value_claim_grants_nothing() {
    let tw = TestWorld::new();
    let st = store(&tw);
    let s = session(&tw, st.clone(), landlord_only, false).await;
    let parent = s.proxy.mandate_of("send_money").unwrap();
    let r = s
        .call(
            TOOL,
            json!({"claims": {"payee": [LANDLORD], "account": "emma-savings"}}),
        )
        .await;
    let shown = s.user.shown.lock().unwrap().clone();
    assert_eq!(shown.len(), 1, "asked once");
    assert!(shown[0].0.contains("emma-savings"), "{}", shown[0].0);
    assert!(!shown[0].0.contains("emma-checking"), "{}", shown[0].0);
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(
        text(&r).contains("`account` holds one value and it was not granted"),
        "{}",
        text(&r)
    );
    assert_eq!(s.proxy.mandate_of("send_money").unwrap(), parent);
    assert!(mandate_receipts(&st).is_empty());
}

/// A kept child that cannot be read back refuses the restart (it was
/// skipped, and the pack's calls were decided under the session's wider
/// mandate again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_kept_child_refuses_the_restart() {
    let tw = TestWorld::new();
    let st = store(&tw);
    let s = session(&tw, st.clone(), landlord_only, false).await;
    let r = s.call(TOOL, injected()).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    drop(s);
    let slot = intentplane::mcp::session::slot(&tw.dir.path().join("intentplane.toml"));
    let key = intentplane::mcp::intent::key(&slot, "bank");
    st.transaction(&mut |tx| {
        assert!(
            tx.state_get(intentplane::mcp::intent::INTENT_NS, &key)?
                .is_some()
        );
        tx.state_put(
            intentplane::mcp::intent::INTENT_NS,
            &key,
            &json!({"token": 1}),
        )?;
        Ok(Value::Null)
    })
    .unwrap();
    let err = match Proxy::start(setup(&tw, st.clone())).await {
        Ok(_) => panic!("the proxy started on an unreadable kept child"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("the child mandate kept for pack `bank` cannot be read"),
        "{err}"
    );
}

/// A child revoked after it was granted stays the pack's mandate across a
/// restart, as in the running proxy: the calls are denied under it. (A
/// restart dropped it, and the calls were decided under the session's
/// wider mandate again.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_child_is_not_replaced_by_the_session_mandate_on_a_restart() {
    let tw = TestWorld::new();
    let st = store(&tw);
    let s = session(&tw, st.clone(), landlord_only, false).await;
    let parent = s.proxy.mandate_of("send_money").unwrap();
    let r = s.call(TOOL, injected()).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    let child = s.proxy.mandate_of("send_money").unwrap();
    assert_ne!(child, parent);
    let id = child["mandate"]["id"].as_str().unwrap().to_string();
    st.transaction(&mut |tx| {
        tx.revoke(&id)?;
        Ok(Value::Null)
    })
    .unwrap();
    let before = s.call("send_money", send(LANDLORD, 600.0, "rent")).await;
    assert!(text(&before).contains("DENY"), "{}", text(&before));
    assert_eq!(s.executed(), 0);
    drop(s);
    let again = session(&tw, st.clone(), declines, false).await;
    assert_eq!(again.proxy.mandate_of("send_money").unwrap(), child);
    let after = again
        .call("send_money", send(LANDLORD, 600.0, "rent 2"))
        .await;
    assert!(text(&after).contains("DENY"), "{}", text(&after));
    assert_eq!(again.executed(), 0);
}
