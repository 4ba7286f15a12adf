//! One durable commit on an MCP call's path (issue #20, item 8): the
//! decision commits before the downstream is called, and the outcome of a
//! call is carried into the store by the next decision's transaction
//! instead of a commit of its own; an outcome no decision takes is still
//! written in the background. The store is counted: every transaction the
//! proxy opens after its start.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::counting::Counting;
use intentplane::gateway::testkit::{LANDLORD, MandateSpec, TestWorld};
use intentplane::mcp::proxy::Proxy;
use intentplane::mcp::testkit;
use intentplane::store::Store;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Map, Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const IPC: &str = env!("CARGO_BIN_EXE_ipc");

struct Harness {
    _tw: TestWorld,
    store: Arc<Counting>,
    proxy: Proxy,
    client: RunningService<RoleClient, ()>,
}

async fn harness() -> Harness {
    let tw = TestWorld::new();
    let state = tw.dir.path().join("demo-state.json");
    let store = Arc::new(Counting::open(&tw.dir.path().join("store.db")));
    let server = testkit::demo_server(Path::new(IPC), &state, &[], tw.dir.path());
    let setup = testkit::setup(
        &tw,
        MandateSpec::bank("emma"),
        server,
        testkit::demo_tools(),
        store.clone(),
        true,
    );
    let proxy = Proxy::start(setup).await.expect("the proxy starts");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(proxy.clone().serve_on(a));
    let client = ().serve(b).await.expect("client connects");
    Harness {
        _tw: tw,
        store,
        proxy,
        client,
    }
}

fn pay(subject: &str) -> Map<String, Value> {
    json!({"recipient": LANDLORD, "amount": 1.0, "currency": "EUR", "subject": subject})
        .as_object()
        .cloned()
        .unwrap()
}

impl Harness {
    async fn call(&self, a: Map<String, Value>) -> CallToolResult {
        let r = self
            .client
            .call_tool(CallToolRequestParams::new("send_money").with_arguments(a))
            .await
            .expect("the call gets a result");
        assert_ne!(r.is_error, Some(true), "{r:?}");
        r
    }

    fn kinds(&self) -> Vec<String> {
        self.store
            .receipts()
            .unwrap()
            .into_iter()
            .map(|r| {
                r.body["kind"]
                    .as_str()
                    .or(r.body["decision"].as_str())
                    .unwrap_or("?")
                    .to_string()
            })
            .collect()
    }
}

/// Calls one after the other: one commit each (the decision, carrying the
/// outcome of the call before), and one at the end for the last outcome;
/// every outcome is in the store, each after its decision, and the chain
/// verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_commits_once_and_every_outcome_is_recorded() {
    let h = harness().await;
    // the writer alone never runs in this test: only decisions carry
    h.proxy.set_outcome_idle(Duration::from_secs(3600));
    let before = h.store.commits.load(Ordering::SeqCst);
    const CALLS: usize = 6;
    for i in 0..CALLS {
        h.call(pay(&format!("call {i}"))).await;
    }
    let on_the_path = h.store.commits.load(Ordering::SeqCst) - before;
    h.proxy.flush().await;
    let all = h.store.commits.load(Ordering::SeqCst) - before;
    assert_eq!(
        on_the_path, CALLS,
        "{on_the_path} commits for {CALLS} calls (one each: the decision)"
    );
    assert_eq!(all, CALLS + 1, "the last outcome is written at the flush");
    let receipts = h.store.receipts().unwrap();
    let decided: Vec<&Value> = receipts
        .iter()
        .map(|r| &r.body)
        .filter(|b| b["decision"] == "ALLOW")
        .collect();
    let outcomes: Vec<&Value> = receipts
        .iter()
        .map(|r| &r.body)
        .filter(|b| b["kind"] == "outcome")
        .collect();
    assert_eq!(decided.len(), CALLS, "{:?}", h.kinds());
    assert_eq!(outcomes.len(), CALLS, "{:?}", h.kinds());
    // each outcome follows its own decision in the chain
    for d in &decided {
        let op = &d["operation_hash"];
        let at = |pred: &dyn Fn(&Value) -> bool| receipts.iter().position(|r| pred(&r.body));
        let dec = at(&|b| b["decision"] == "ALLOW" && &b["operation_hash"] == op).unwrap();
        let out = at(&|b| b["kind"] == "outcome" && &b["operation_hash"] == op)
            .unwrap_or_else(|| panic!("no outcome for {op}"));
        assert!(dec < out, "the outcome of {op} before its decision");
    }
    let report = intentplane::store::verify_store(&h.store.snapshot().unwrap(), None);
    assert!(report.is_ok(), "{report:?}");
}

/// When no decision follows, the writer records the outcome on its own,
/// without a flush, soon after the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_no_decision_carries_is_written_alone() {
    let h = harness().await;
    h.proxy.set_outcome_idle(Duration::from_millis(50));
    h.call(pay("alone")).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !h.kinds().iter().any(|k| k == "outcome") {
        assert!(
            Instant::now() < deadline,
            "no outcome written: {:?}",
            h.kinds()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A passthrough's receipt is written before its result is returned but
/// synced with the next decision: no synced commit of its own on the
/// call's path. The decision after it syncs (one commit) and the chain,
/// passthroughs and all, verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_is_written_and_synced_with_the_next_decision() {
    let h = harness().await;
    h.proxy.set_outcome_idle(Duration::from_secs(3600));
    let (synced, written) = (
        h.store.commits.load(Ordering::SeqCst),
        h.store.written.load(Ordering::SeqCst),
    );
    const READS: usize = 4;
    for _ in 0..READS {
        let r = h
            .client
            .call_tool(CallToolRequestParams::new("read_inbox"))
            .await
            .expect("the read gets a result");
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    assert_eq!(
        h.store.commits.load(Ordering::SeqCst) - synced,
        0,
        "no synced commit for a passthrough"
    );
    assert_eq!(h.store.written.load(Ordering::SeqCst) - written, READS);
    let passthroughs = h.kinds().iter().filter(|k| *k == "passthrough").count();
    assert_eq!(passthroughs, READS, "{:?}", h.kinds());
    h.call(pay("after the reads")).await;
    assert_eq!(h.store.commits.load(Ordering::SeqCst) - synced, 1);
    let report = intentplane::store::verify_store(&h.store.snapshot().unwrap(), None);
    assert!(report.is_ok(), "{report:?}");
}
