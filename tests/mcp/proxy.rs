//! The MCP proxy end to end in process: an rmcp client (ours) talks to the
//! proxy over an in-memory pipe; the proxy starts the demo server
//! (`ipc demo mcp-server --state F`) as its downstream; the assertions read
//! what the demo server actually executed from its state file.
//!
//! This file is the harness the `proxy_*` files share: the client, the
//! options, a proxy started on a test world. The tests, by behaviour:
//! `proxy_calls` (what is listed, forwarded, refused, executed, recorded),
//! `proxy_approval` (step-up and four eyes, in both eras), `proxy_budget`
//! (caps, budgets and concurrent proxies) and `proxy_reads` (reads sent
//! again at each call).
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::config::ToolConfig;
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
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub(crate) const IPC: &str = env!("CARGO_BIN_EXE_ipc");

/// A client whose user answers every confirmation with `answer` (None: the
/// client declares no elicitation), and remembers what it was shown.
#[derive(Clone)]
pub(crate) struct User {
    pub(crate) answer: Option<ElicitationAction>,
    pub(crate) shown: Arc<Mutex<Vec<String>>>,
}

impl User {
    pub(crate) fn new(answer: Option<ElicitationAction>) -> Self {
        User {
            answer,
            shown: Arc::new(Mutex::new(vec![])),
        }
    }
    pub(crate) fn shown(&self) -> Vec<String> {
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
pub(crate) enum Era {
    /// `initialize`, 2025-11-25: server-to-client elicitation.
    Legacy,
    /// `server/discover`, 2026-07-28: input-required results.
    Mrtr,
}

pub(crate) struct Harness {
    pub(crate) tw: TestWorld,
    pub(crate) state: PathBuf,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) proxy: Proxy,
    pub(crate) client: RunningService<RoleClient, User>,
    pub(crate) user: User,
}

pub(crate) struct Opts {
    pub(crate) spec: Option<MandateSpec>,
    pub(crate) tools: Vec<ToolConfig>,
    pub(crate) answer: Option<ElicitationAction>,
    pub(crate) era: Era,
    pub(crate) user_key: bool,
    pub(crate) extra: Vec<&'static str>,
    pub(crate) balance: Option<&'static str>,
    /// The session's `decline_for` (default: the config's default).
    pub(crate) decline_for: Option<i64>,
    /// The store's location (default: an SQLite file in the test's folder).
    pub(crate) store: Option<String>,
    /// The shipped packs of the world (default: [`TestWorld::new`]'s).
    pub(crate) packs: Option<&'static [&'static str]>,
    /// The session's tenant in shadow mode (`[enforce.tenants]`).
    pub(crate) shadow: bool,
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
            shadow: false,
        }
    }
}

pub(crate) async fn harness(o: Opts) -> Harness {
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
    if o.shadow {
        setup.world.shadow.tenants.insert("emma".into());
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

pub(crate) fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

pub(crate) fn send(recipient: &str, amount: Value, subject: &str) -> Map<String, Value> {
    args(json!({"recipient": recipient, "amount": amount, "currency": "EUR", "subject": subject}))
}

impl Harness {
    pub(crate) async fn call(&self, tool: &str, a: Map<String, Value>) -> CallToolResult {
        self.client
            .call_tool(CallToolRequestParams::new(tool.to_string()).with_arguments(a))
            .await
            .expect("the call gets a result")
    }

    /// The calls the demo server executed (or attempted) of `tool`.
    pub(crate) fn executed(&self, tool: &str) -> Vec<Value> {
        crate::common::mcp::executed(&self.state, tool)
    }

    /// The chain, once the outcomes the proxy answered with are written
    /// (in the background, after the answer).
    pub(crate) fn receipts(&self) -> Vec<Value> {
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
    pub(crate) fn verify(&self) {
        let snap = tokio::task::block_in_place(|| self.store.snapshot().unwrap());
        assert!(intentplane::store::verify_store(&snap, None).is_ok());
    }
}

pub(crate) fn is_error(r: &CallToolResult) -> bool {
    r.is_error == Some(true)
}

pub(crate) fn testkit_landlord() -> &'static str {
    "DE44 5001 0517 5407 3249 31"
}

/// Dropped off the async workers (a PostgreSQL schema: its client runs a
/// runtime of its own), also when a failed assertion unwinds.
#[cfg(feature = "postgres")]
pub(crate) struct OffAsync<T>(pub(crate) Option<T>);

#[cfg(feature = "postgres")]
impl<T> Drop for OffAsync<T> {
    fn drop(&mut self) {
        let t = self.0.take();
        tokio::task::block_in_place(|| drop(t));
    }
}
