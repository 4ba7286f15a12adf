//! Caps and budgets through the MCP proxy ([`crate::proxy`]'s harness):
//! the hard cap, one budget spent by concurrent calls, four proxies on one
//! store executing an operation once.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use crate::proxy::*;
use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::proxy::Proxy;
use intentplane::mcp::testkit;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::json;
use std::path::Path;

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
