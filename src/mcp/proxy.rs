//! The rmcp shell of `ipc mcp`: an MCP server on stdio in front of the
//! configured downstream MCP servers (child processes), with the gateway
//! deciding every call to a mapped tool.
//!
//! - `tools/list` shows only the configured tools, each with its
//!   downstream's schema; any other tool is hidden and a call to it refused.
//! - A `passthrough` tool is forwarded as is, while the session's
//!   mandates stand (not expired, not revoked: [`standing`]).
//! - A mapped tool: the arguments become a proposal (`ToolConfig::to_proposal`),
//!   the gateway decides (nine stages, the session's mandate); on ALLOW the
//!   downstream tool is called with the decision's *trusted* values in the
//!   tool's units (`ToolConfig::downstream_call`, recorded in the ALLOW's
//!   receipt before it is sent), on DENY or PENDING the
//!   agent reads a tool error with the stage, the reason and the hint.
//! - Step-up (level 1) is asked of the user through MCP elicitation, in the
//!   era the client speaks (see [`elicit`]); four eyes (level 2) only with
//!   an approval signed out of band and dropped in the approvals folder.
//! - The gateway executes externally: the decision commits (durably) before
//!   the downstream is called; the downstream's outcome is a second receipt
//!   (see `gateway::outcome`), written in the background after the agent
//!   has its answer ([`Outcomes`]); a retried write is answered from
//!   the store (or from the outcomes not yet written), never run twice
//!   (a tool the config declares `effect = "read"` is decided and sent
//!   again at each call, [`crate::gateway::Effect`]), and
//!   one without a recorded outcome is "outcome not recorded yet" (another
//!   instance on the same store may be running it: a retry reads its
//!   result once recorded; else, the outcome is unknown: ask the user).
//! - The session is durable ([`crate::mcp::session`]): a restart with the
//!   same config and store continues the same mandates.

mod answer;
mod decide;
mod downstream;
pub mod elicit;
mod outcomes;
mod passthrough;
mod request;
mod route;
mod standing;
mod start;
mod step_up;

pub use answer::DECISION_META;
pub use downstream::declarations;

use crate::gateway::Gateway;
use crate::mcp::config::declared::DeclaredTool;
use crate::mcp::config::{SessionConfig, Setup, ToolConfig};
use crate::mcp::session;
use answer::{is_refusal, readable_by_every_sdk};
use downstream::Downstream;
use outcomes::Outcomes;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest tool arguments accepted (their JSON text): anything larger
/// is a DENY with a receipt, never parsed further.
pub const MAX_ARGS_BYTES: usize = 64 * 1024;

/// How a retried operation without a recorded outcome is answered.
const NOT_RECORDED: &str = "outcome not recorded yet";

/// How long a downstream call may take before it counts as failed.
const DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ProxyError {
    /// A downstream MCP server cannot be started (its command is missing or
    /// fails).
    #[error("cannot start the downstream server `{server}`: {reason}")]
    #[diagnostic(
        code(ipc::mcp::spawn),
        help("check `command`, `args` and `cwd` of `[servers.{server}]` in the config")
    )]
    Spawn { server: String, reason: String },
    /// A downstream server started but does not complete MCP's initialisation.
    #[error("the downstream server `{server}` does not answer as an MCP server: {reason}")]
    #[diagnostic(code(ipc::mcp::handshake))]
    Handshake { server: String, reason: String },
    /// The config maps a tool the downstream server does not list.
    #[error("the downstream server `{server}` has no tool `{tool}`")]
    #[diagnostic(code(ipc::mcp::missing_tool), help("the server offers: {offered}"))]
    MissingTool {
        server: String,
        tool: String,
        offered: String,
    },
    /// The downstream tool's schema allows no other arguments and lacks one
    /// the proxy would send: every call would fail downstream after an ALLOW.
    #[error(
        "the downstream tool `{tool}` of `{server}` takes no argument `{arg}`, which the config maps"
    )]
    #[diagnostic(
        code(ipc::mcp::undeclared_argument),
        help(
            "the tool's schema allows no other arguments (`additionalProperties: false`): map the parameter onto one of its arguments with `arg = \"NAME\"`"
        )
    )]
    UndeclaredArgument {
        server: String,
        tool: String,
        arg: String,
    },
    /// A tool names a server the config does not declare.
    #[error("tool `{tool}` names no configured server `{server}`")]
    #[diagnostic(code(ipc::mcp::unknown_server))]
    UnknownServer { tool: String, server: String },
    /// A remote downstream server (`url`) cannot be used.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Remote(#[from] crate::mcp::transport::RemoteError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Gateway(#[from] crate::gateway::GatewayError),
    /// The MCP session with the client failed.
    #[error("the MCP session failed: {reason}")]
    #[diagnostic(code(ipc::mcp::session))]
    Session { reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Durable(#[from] session::SessionError),
    /// The system clock cannot be read: the session is not started.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Clock(#[from] crate::gateway::ClockError),
    /// A mapped or inline tool does not match what its server declares in
    /// `tools/list` (a tool or argument name, a required argument, a type):
    /// the proxy refuses to start.
    #[error("the config does not match what the servers declare:\n{report}")]
    #[diagnostic(
        code(ipc::mcp::declared),
        help("fix the config, then check it with `ipc mcp --config FILE --check --servers`")
    )]
    Declared { report: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Notify(#[from] crate::gateway::notify::NotifyError),
}

/// One tool the client sees.
struct Routed {
    config: ToolConfig,
    tool: Tool,
    /// The tool as its server declared it when the config was checked
    /// against it (at start-up): a restarted server that declares it
    /// otherwise has it refused.
    declared: DeclaredTool,
    /// The mandate its calls are decided under (its action's pack's),
    /// unless the user granted a child of it (`Inner::children`).
    mandate: Value,
    /// Its action's pack (`None` for a passthrough).
    pack: Option<String>,
}

struct Inner {
    gateway: Arc<Gateway>,
    session: SessionConfig,
    /// In the config's order.
    tools: Vec<Routed>,
    clients: HashMap<String, Downstream>,
    /// Seals the 2026-07-28 era's request state (a per-process random key).
    sealer: elicit::Sealer,
    /// The configuration it runs from (named in what a refusal says to do).
    config_path: std::path::PathBuf,
    /// How the session was come to at start-up.
    start: session::Start,
    /// The calls of this process not yet recorded, and the writer.
    outcomes: Outcomes,
    /// Tools whose server, started again, declares them otherwise than at
    /// start-up: refused (with a receipt) until the config is checked
    /// against the new declaration (a restart of `ipc mcp`).
    changed: Mutex<std::collections::HashSet<String>>,
    /// `intentplane_request_mandate` as the agent sees it, when offered.
    request_tool: Option<Tool>,
    /// Per pack, the child mandate the user granted last (kept in the
    /// store too): the pack's calls are decided under it.
    children: Mutex<HashMap<String, Value>>,
    /// The session's mandates, checked before a passthrough is forwarded.
    standing: standing::Standing,
    /// The `[[notify]]` sender, while the proxy runs (kept for its life).
    #[allow(dead_code)]
    notify: Option<crate::gateway::notify::Running>,
}

/// A runtime on the current thread.
fn runtime() -> Result<tokio::runtime::Runtime, ProxyError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProxyError::Session {
            reason: e.to_string(),
        })
}

/// The proxy: an rmcp [`ServerHandler`].
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

/// Runs `ipc mcp`: the proxy on stdio until the client closes it; `fresh`
/// (`--new-session`) revokes the recorded session and starts another.
pub fn run(setup: Setup, fresh: bool) -> Result<ExitCode, miette::Report> {
    // one client on stdio: its messages, the downstreams' and the
    // elicitations are I/O, on one thread; decisions and store writes run
    // on the blocking pool. No hand-off between two workers on a call's
    // path (measured: 0.56-0.61 ms of overhead per call instead of
    // 0.73-0.83 ms with two workers, store on tmpfs, docs/performance.md)
    runtime()?.block_on(async move {
        let proxy = Proxy::start_session(setup, fresh).await?;
        if let Some(line) = session::describe(proxy.session_start()) {
            eprintln!("intentplane: {line}");
        }
        // a client starts the proxy on pipes: they are read and written on
        // the IO reactor, not through a blocking thread per message
        // (`stdio()`), two thread hand-offs less on every call's path
        proxy.serve_on(rmcp::transport::stdio_pipes()).await?;
        Ok(ExitCode::SUCCESS)
    })
}

impl Proxy {
    /// Builds the gateway (executing externally), starts every downstream
    /// server and checks that each configured tool exists there; the
    /// session recorded in the store is continued.
    pub async fn start(setup: Setup) -> Result<Proxy, ProxyError> {
        Self::start_session(setup, false).await
    }

    /// How long an answered outcome waits for the next decision to carry
    /// it into the store before it is committed alone (20 ms; tests that
    /// count commits set it longer).
    #[doc(hidden)]
    pub fn set_outcome_idle(&self, idle: Duration) {
        let ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
        self.inner.outcomes.idle_ms.store(ms, Ordering::Relaxed);
    }

    /// How the session was come to at start-up.
    pub fn session_start(&self) -> &session::Start {
        &self.inner.start
    }

    /// Waits until every outcome the agent was answered with is in the
    /// store (they are written in the background).
    pub async fn flush(&self) {
        self.inner.outcomes.flush(&self.inner.gateway).await;
    }

    /// Serves one MCP client on `transport` until it closes.
    pub async fn serve_on<T, E, A>(self, transport: T) -> Result<(), ProxyError>
    where
        T: rmcp::transport::IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let me = self.clone();
        let running = self
            .serve(transport)
            .await
            .map_err(|e| ProxyError::Session {
                reason: e.to_string(),
            })?;
        let closed = running.waiting().await.map_err(|e| ProxyError::Session {
            reason: e.to_string(),
        });
        me.flush().await;
        closed?;
        Ok(())
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.inner.gateway
    }

    /// The mandate token a tool's calls are decided under: the child the
    /// user granted for its pack, else the session's.
    pub fn mandate_of(&self, tool: &str) -> Option<Value> {
        self.routed(tool).map(|r| self.current_mandate(r))
    }

    fn current_mandate(&self, routed: &Routed) -> Value {
        routed
            .pack
            .as_ref()
            .and_then(|p| self.inner.children.lock().ok()?.get(p).cloned())
            .unwrap_or_else(|| routed.mandate.clone())
    }

    fn routed(&self, name: &str) -> Option<&Routed> {
        self.inner.tools.iter().find(|r| r.config.tool == name)
    }

    /// Runs `f` with the gateway on the blocking pool (it is synchronous
    /// and writes the store).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Gateway) -> T + Send + 'static,
    ) -> Result<T, String> {
        let gw = self.inner.gateway.clone();
        tokio::task::spawn_blocking(move || f(&gw))
            .await
            .map_err(|e| format!("the gateway's work did not finish: {e}"))
    }
}

impl ServerHandler for Proxy {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(rmcp::model::Implementation::new(
                "intentplane",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "intentplane: every tool call is decided by a gateway; a refusal says why",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools: Vec<Tool> = self.inner.tools.iter().map(|r| r.tool.clone()).collect();
        tools.extend(self.inner.request_tool.clone());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.clone();
        let mut response = self.route(request, context).await;
        if let CallToolResponse::Complete(r) = &mut response {
            // a result forwarded from a downstream on an older protocol has
            // no `resultType`, which a 2026-07-28 client requires (rmcp
            // removes it again for older clients)
            if r.result_type.is_none() {
                r.result_type = Some(rmcp::model::ResultType::COMPLETE);
            }
            // (the tool looked up only for a refusal of ours, off the
            // ALLOW path)
            if is_refusal(r) {
                let schema = self
                    .routed(&name)
                    .is_some_and(|t| t.tool.output_schema.is_some());
                readable_by_every_sdk(schema, r);
            }
        }
        Ok(response)
    }
}
