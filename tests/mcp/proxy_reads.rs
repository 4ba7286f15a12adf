//! Reads through the MCP proxy ([`crate::proxy`]'s harness): a read is
//! decided and sent again at each call, and approved at each execution.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::text;
use crate::proxy::*;
use intentplane::gateway::testkit::MandateSpec;
use intentplane::mcp::config::ToolConfig;
use intentplane::mcp::proxy::Proxy;
use intentplane::mcp::testkit;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};
use std::path::Path;

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
