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

pub mod elicit;
mod request;
mod standing;

use crate::gateway::approval::SignedApproval;
use crate::gateway::outcome::{ExternalOutcome, ProxyCall};
use crate::gateway::secret::SecretValues;
use crate::gateway::{Ask, Decision, Gateway, Input, Outcome, ReceiptRef};
use crate::mcp::config::declared::DeclaredTool;
use crate::mcp::config::{ServerConfig, SessionConfig, Setup, ToolConfig, ToolMode, Transport};
use crate::mcp::transport::said;
use crate::mcp::{intent, session};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::{RequestContext, RoleClient, RoleServer, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};
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
}

/// The operations whose downstream call runs in this process (`None`) or
/// answered with an outcome not yet in the store (`Some`): the outcome is
/// recorded after the agent has its answer, in the transaction of the next
/// decision ([`Gateway::decide_all`] with the outcomes: one durable commit per
/// call), or, when no decision comes within [`OUTCOME_IDLE`], by a writer
/// in the background that commits whatever queued up at once. An entry
/// leaves the map only once its outcome is in the store, so a retry finds
/// it here or there; a crash before that is "outcome unknown", as a crash
/// during the downstream's call.
struct Outcomes {
    calls: Arc<Mutex<HashMap<String, Option<ExternalOutcome>>>>,
    queue: Arc<Mutex<Queue>>,
    /// Wakes the writer: something was queued.
    queued: Arc<tokio::sync::Notify>,
    /// Wakes a flush: outcomes taken were settled.
    settled: Arc<tokio::sync::Notify>,
    /// How long an outcome waits for the next decision, in milliseconds
    /// ([`OUTCOME_IDLE`] unless a test sets another).
    idle_ms: Arc<std::sync::atomic::AtomicU64>,
}

/// How long an answered outcome waits for the next decision to carry it
/// into the store before the writer commits it alone.
const OUTCOME_IDLE: Duration = Duration::from_millis(20);

/// Outcomes answered, not yet taken to the store (oldest first, with the
/// time they were queued), and how many are taken and not yet settled.
#[derive(Default)]
struct Queue {
    waiting: Vec<(std::time::Instant, String, ExternalOutcome)>,
    taken: usize,
}

/// Where a retried operation stands in this process.
enum Seen {
    Running,
    Answered(ExternalOutcome),
    Unknown,
}

impl Outcomes {
    /// The writer runs on the current runtime for as long as the proxy.
    fn start(gateway: Arc<Gateway>) -> Outcomes {
        let out = Outcomes {
            calls: Arc::default(),
            queue: Arc::default(),
            queued: Arc::default(),
            settled: Arc::default(),
            idle_ms: Arc::new(std::sync::atomic::AtomicU64::new(
                OUTCOME_IDLE.as_millis() as u64
            )),
        };
        tokio::spawn(write_outcomes(gateway, out.clone_handles()));
        out
    }

    fn clone_handles(&self) -> Outcomes {
        Outcomes {
            calls: self.calls.clone(),
            queue: self.queue.clone(),
            queued: self.queued.clone(),
            settled: self.settled.clone(),
            idle_ms: self.idle_ms.clone(),
        }
    }

    fn seen(&self, op: &str) -> Seen {
        match self.calls.lock() {
            Ok(calls) => match calls.get(op) {
                Some(None) => Seen::Running,
                Some(Some(o)) => Seen::Answered(o.clone()),
                None => Seen::Unknown,
            },
            Err(_) => Seen::Running,
        }
    }

    /// Marks `op` as running here; `false` when the state is poisoned.
    fn running(&self, op: &str) -> bool {
        match self.calls.lock() {
            Ok(mut calls) => {
                calls.insert(op.to_string(), None);
                true
            }
            Err(_) => false,
        }
    }

    /// The downstream answered `op`: kept here until it is in the store.
    fn answered(&self, op: &str, outcome: &ExternalOutcome) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(op.to_string(), Some(outcome.clone()));
        }
        if let Ok(mut q) = self.queue.lock() {
            q.waiting
                .push((std::time::Instant::now(), op.to_string(), outcome.clone()));
        }
        self.queued.notify_one();
    }

    /// Takes the outcomes queued at or before `before` (all with `None`)
    /// to write them; each must be [`Self::settle`]d.
    fn take(&self, before: Option<std::time::Instant>) -> Vec<(String, ExternalOutcome)> {
        let Ok(mut q) = self.queue.lock() else {
            return vec![];
        };
        let n = match before {
            None => q.waiting.len(),
            Some(t) => q.waiting.iter().take_while(|(at, _, _)| *at <= t).count(),
        };
        q.taken += n;
        q.waiting.drain(..n).map(|(_, op, o)| (op, o)).collect()
    }

    /// The outcomes taken are written: `Ok` ones leave the map, refused
    /// ones are reported and answered from memory.
    fn settle(
        &self,
        taken: &[(String, ExternalOutcome)],
        results: Vec<Result<ReceiptRef, String>>,
    ) {
        if let Ok(mut c) = self.calls.lock() {
            for ((op, _), r) in taken.iter().zip(results) {
                match r {
                    Ok(_) => {
                        c.remove(op);
                    }
                    Err(e) => eprintln!(
                        "intentplane: the outcome of the operation {op} could not be recorded: {e}"
                    ),
                }
            }
        }
        self.forget(taken.len());
    }

    /// `n` outcomes taken are settled (written, or lost with a task that
    /// did not finish: then answered from memory only).
    fn forget(&self, n: usize) {
        if let Ok(mut q) = self.queue.lock() {
            q.taken = q.taken.saturating_sub(n);
        }
        self.settled.notify_waiters();
    }

    /// Outcomes a decision took but could not record with it: written in
    /// a commit of their own, in the background.
    fn write_later(&self, gw: &Arc<Gateway>, batch: Vec<(String, ExternalOutcome)>) {
        let (me, gw) = (self.clone_handles(), gw.clone());
        tokio::spawn(async move { me.write(&gw, batch).await });
    }

    /// Waits until every outcome answered so far is written.
    async fn flush(&self, gw: &Arc<Gateway>) {
        loop {
            let settled = self.settled.notified();
            let batch = self.take(None);
            if !batch.is_empty() {
                self.write(gw, batch).await;
                continue;
            }
            match self.queue.lock() {
                Ok(q) if q.taken > 0 => {}
                _ => return,
            }
            // a decision carries some: wait until it is settled
            settled.await;
        }
    }

    /// Records `batch` in one commit of its own.
    async fn write(&self, gw: &Arc<Gateway>, batch: Vec<(String, ExternalOutcome)>) {
        let (gw, n) = (gw.clone(), batch.len());
        match tokio::task::spawn_blocking(move || {
            let r = gw.record_outcomes(&batch);
            (batch, r)
        })
        .await
        {
            Ok((batch, results)) => {
                let results = results
                    .into_iter()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect();
                self.settle(&batch, results);
            }
            Err(e) => {
                eprintln!("intentplane: recording outcomes did not finish: {e}");
                self.forget(n);
            }
        }
    }
}

/// The outcome writer: outcomes no decision took within [`OUTCOME_IDLE`]
/// of their answer are recorded in one commit. One that cannot be
/// recorded stays answered from memory and is reported on stderr.
async fn write_outcomes(gw: Arc<Gateway>, outcomes: Outcomes) {
    loop {
        outcomes.queued.notified().await;
        loop {
            let oldest = match outcomes.queue.lock() {
                Ok(q) => q.waiting.first().map(|(at, _, _)| *at),
                Err(_) => return,
            };
            let Some(at) = oldest else { break };
            let idle = Duration::from_millis(outcomes.idle_ms.load(Ordering::Relaxed));
            let now = std::time::Instant::now();
            if now < at + idle {
                tokio::time::sleep_until((at + idle).into()).await;
                continue;
            }
            let batch = outcomes.take(Some(now.checked_sub(idle).unwrap_or(at)));
            if !batch.is_empty() {
                outcomes.write(&gw, batch).await;
            }
        }
    }
}

/// One downstream server: its config (to start it again) and the running
/// client, replaced when the server died.
struct Downstream {
    config: ServerConfig,
    running: tokio::sync::RwLock<Arc<RunningService<RoleClient, ()>>>,
}

impl Downstream {
    /// The secrets a message withholds from the server's text: the token
    /// the config gave, and the one its `token_file` holds now.
    fn tokens(&self) -> Vec<String> {
        let mut out: Vec<String> = self.config.tokens().iter().map(|t| t.to_string()).collect();
        if let Transport::Http(r) = &self.config.transport
            && let Some(Ok(now)) = r.token_now()
        {
            out.push(now.expose().to_string());
        }
        out
    }
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
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProxyError::Session {
            reason: e.to_string(),
        })?;
    rt.block_on(async move {
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

/// The command a server config names: `ipc` is this very binary.
fn command_of(command: &str) -> std::path::PathBuf {
    if command == "ipc"
        && let Ok(me) = std::env::current_exe()
    {
        return me;
    }
    std::path::PathBuf::from(command)
}

async fn start_server(s: &ServerConfig) -> Result<RunningService<RoleClient, ()>, ProxyError> {
    let (command, args, env, cwd) = match &s.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => (command, args, env, cwd),
        Transport::Http(remote) => {
            return Ok(crate::mcp::transport::connect(&s.name, remote).await?);
        }
    };
    let mut cmd = tokio::process::Command::new(command_of(command));
    cmd.args(args).current_dir(cwd);
    // the server's environment is what its entry gives, nothing else
    cmd.env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (transport, _stderr) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| ProxyError::Spawn {
            server: s.name.clone(),
            reason: e.to_string(),
        })?;
    ().serve(transport)
        .await
        .map_err(|e| ProxyError::Handshake {
            server: s.name.clone(),
            reason: said::describe::<&str>(&e, &[]).text,
        })
}

/// A tool as the config check reads it.
fn declared_tool(t: &Tool) -> DeclaredTool {
    DeclaredTool {
        name: t.name.to_string(),
        input_schema: (*t.input_schema).clone(),
        read_only: t.annotations.as_ref().and_then(|a| a.read_only_hint),
        idempotent: t.annotations.as_ref().and_then(|a| a.idempotent_hint),
    }
}

/// Starts each server, reads its `tools/list` and stops it: what
/// `ipc mcp --check --servers` checks the config against.
pub fn declarations(
    servers: &[ServerConfig],
) -> Result<HashMap<String, Vec<DeclaredTool>>, ProxyError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ProxyError::Session {
            reason: e.to_string(),
        })?;
    rt.block_on(async {
        let mut out = HashMap::new();
        for s in servers {
            let client = start_server(s).await?;
            let tools = client
                .list_all_tools()
                .await
                .map_err(|e| ProxyError::Handshake {
                    server: s.name.clone(),
                    reason: said::describe(&e, &s.tokens()).text,
                })?;
            let _ = client.cancel().await;
            out.insert(s.name.clone(), tools.iter().map(declared_tool).collect());
        }
        Ok(out)
    })
}

/// The session recorded in the store, continued or started anew (see
/// [`session::resume`]), and the child mandates the user granted in it;
/// synchronous: it reads and writes the store.
fn resume_session(
    mut setup: Setup,
    fresh: bool,
) -> Result<(Setup, session::Start, HashMap<String, Value>), ProxyError> {
    let now = setup
        .world
        .clock
        .map_or_else(crate::gateway::unix_now, Ok)?;
    let reads: Vec<String> = setup
        .tools
        .iter()
        .filter_map(|t| match &t.mode {
            ToolMode::Action { action, effect, .. } if !effect.is_write() => Some(action.clone()),
            _ => None,
        })
        .collect();
    let start = session::resume(
        setup.store.as_ref(),
        &setup.bundle.hash,
        now,
        &setup.config_path,
        &mut setup.session,
        &reads,
        fresh,
    )?;
    let children = intent::resume(setup.store.as_ref(), &setup.config_path, &setup.session)?;
    Ok((setup, start, children))
}

impl Proxy {
    /// Builds the gateway (executing externally), starts every downstream
    /// server and checks that each configured tool exists there; the
    /// session recorded in the store is continued.
    pub async fn start(setup: Setup) -> Result<Proxy, ProxyError> {
        Self::start_session(setup, false).await
    }

    /// [`Proxy::start`]; `fresh`: a new session, the recorded one revoked
    /// (`ipc mcp --new-session`).
    pub async fn start_session(setup: Setup, fresh: bool) -> Result<Proxy, ProxyError> {
        // the store is synchronous (PostgreSQL's client runs a runtime of
        // its own, which cannot start on an async worker): read off them
        let (setup, start, children) =
            tokio::task::spawn_blocking(move || resume_session(setup, fresh))
                .await
                .map_err(|e| ProxyError::Session {
                    reason: format!("reading the session did not finish: {e}"),
                })??;
        let mandates: Vec<Value> = setup
            .tools
            .iter()
            .map(|t| setup.mandate_for(t).unwrap_or(&setup.session.token).clone())
            .collect();
        let packs: Vec<Option<String>> = setup
            .tools
            .iter()
            .map(|t| match &t.mode {
                ToolMode::Action { action, .. } => {
                    setup.bundle.table.action(action).map(|a| a.pack.clone())
                }
                ToolMode::Passthrough => None,
            })
            .collect();
        let request_tool = setup
            .session
            .mandate_requests
            .then(|| intent::tool(&setup.bundle, &setup.session.mandates));
        let gateway = Gateway::new(&setup.bundle, setup.world, setup.store)?.execute_externally();
        let mut clients = HashMap::new();
        let mut offered: HashMap<String, Vec<Tool>> = HashMap::new();
        for s in &setup.servers {
            let client = start_server(s).await?;
            let tools = client
                .list_all_tools()
                .await
                .map_err(|e| ProxyError::Handshake {
                    server: s.name.clone(),
                    reason: said::describe(&e, &s.tokens()).text,
                })?;
            offered.insert(s.name.clone(), tools);
            clients.insert(
                s.name.clone(),
                Downstream {
                    config: s.clone(),
                    running: tokio::sync::RwLock::new(Arc::new(client)),
                },
            );
        }
        let declared: HashMap<String, Vec<DeclaredTool>> = offered
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(declared_tool).collect()))
            .collect();
        let report = crate::mcp::config::declared::check(&setup.sites, &setup.tools, &declared);
        if report.has_errors() {
            return Err(ProxyError::Declared {
                report: report.render_human(false),
            });
        }
        if !report.items.is_empty() {
            eprint!("{}", report.render_human(false));
        }
        let mut tools = vec![];
        for ((t, mandate), pack) in setup.tools.into_iter().zip(mandates).zip(packs) {
            let list = offered
                .get(&t.server)
                .ok_or_else(|| ProxyError::UnknownServer {
                    tool: t.tool.clone(),
                    server: t.server.clone(),
                })?;
            let tool = list
                .iter()
                .find(|d| d.name == t.tool)
                .cloned()
                .ok_or_else(|| ProxyError::MissingTool {
                    server: t.server.clone(),
                    tool: t.tool.clone(),
                    offered: list
                        .iter()
                        .map(|d| format!("`{}`", d.name))
                        .collect::<Vec<_>>()
                        .join(", "),
                })?;
            if let Some(arg) = t.undeclared_argument(&tool.input_schema) {
                return Err(ProxyError::UndeclaredArgument {
                    server: t.server.clone(),
                    tool: t.tool.clone(),
                    arg: arg.to_string(),
                });
            }
            // the agent is shown only the arguments it gives
            let mut tool = tool;
            let declared = declared_tool(&tool);
            tool.input_schema = Arc::new(t.advertised_schema(&tool.input_schema));
            tools.push(Routed {
                config: t,
                tool,
                declared,
                mandate,
                pack,
            });
        }
        let standing = standing::Standing::of(&gateway, &setup.session.mandates);
        let gateway = Arc::new(gateway);
        Ok(Proxy {
            inner: Arc::new(Inner {
                gateway: gateway.clone(),
                session: setup.session,
                tools,
                clients,
                sealer: elicit::Sealer::new().map_err(|reason| ProxyError::Session { reason })?,
                config_path: setup.config_path,
                start,
                outcomes: Outcomes::start(gateway),
                changed: Mutex::default(),
                request_tool,
                children: Mutex::new(children),
                standing,
            }),
        })
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

    /// The gateway's decision, off the async workers (it is synchronous and
    /// writes the store). An ALLOW records the downstream call it
    /// dispatches (`ToolConfig::downstream_call`) before it is made.
    async fn decide(&self, routed: &Routed, input: Input) -> Result<Decision, String> {
        let gw = self.inner.gateway.clone();
        let tool = routed.config.clone();
        let effect = tool.effect();
        let dispatch = move |resolved: &Map<String, Value>, secrets: &SecretValues| {
            tool.downstream_call(resolved, secrets)?.record()
        };
        // the outcomes answered since the last decision commit with this one
        let outcomes = &self.inner.outcomes;
        let earlier = outcomes.take(None);
        let n = earlier.len();
        let gw2 = gw.clone();
        let decided = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(1);
            let ask = Ask::one(&input)
                .dispatching(&dispatch, effect)
                .after(&earlier);
            let r = gw2.decide_all(ask, &mut out).map(|links| {
                let d = out
                    .pop()
                    .unwrap_or_else(|| Decision::unrecorded("no decision"));
                (d, links)
            });
            (earlier, r)
        })
        .await;
        match decided {
            Ok((earlier, Ok((d, Some(links))))) => {
                outcomes.settle(&earlier, links.into_iter().map(Ok).collect());
                Ok(d)
            }
            Ok((earlier, r)) => {
                // still taken: settled once written
                outcomes.write_later(&gw, earlier);
                r.map(|(d, _)| d)
                    .map_err(|e| format!("the gateway failed: {e}"))
            }
            Err(e) => {
                outcomes.forget(n);
                Err(format!("the decision did not finish: {e}"))
            }
        }
    }

    fn input(
        &self,
        routed: &Routed,
        proposal: Value,
        malformed: Option<String>,
        approvals: Vec<Value>,
    ) -> Input {
        Input {
            proposal,
            mandate: Some(self.current_mandate(routed)),
            approvals,
            malformed,
        }
    }

    /// Approvals dropped out of band for this operation (`ipc approve`
    /// output, one JSON file each); unreadable files and approvals of other
    /// operations are skipped.
    fn dropped_approvals(&self, op: &str) -> Vec<Value> {
        let Some(dir) = &self.inner.session.approvals_dir else {
            return vec![];
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return vec![];
        };
        let mut out = vec![];
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() || meta.len() > MAX_ARGS_BYTES as u64 {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Ok(sa) = serde_json::from_str::<SignedApproval>(&text) else {
                continue;
            };
            if sa.approval.operation_hash == op
                && let Ok(v) = serde_json::to_value(&sa)
            {
                out.push(v);
            }
        }
        out
    }

    /// A step-up approval by the mandate's user for `op`, signed by the
    /// proxy with the user's key after the user accepted.
    fn mint(&self, op: &str) -> Result<Value, String> {
        let key = self
            .inner
            .session
            .user_key
            .as_ref()
            .ok_or("no approval key for the user in this session")?;
        let expires = self.inner.gateway.now().map_err(|e| e.to_string())? + 300;
        let sa = SignedApproval::issue(&self.inner.session.user, op, expires, key)
            .map_err(|e| e.to_string())?;
        serde_json::to_value(sa).map_err(|e| e.to_string())
    }

    async fn call_mapped(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        // a dead downstream is started again before anything is decided: a
        // decision commits the budget, which a server that cannot be
        // reached must not spend
        if let Err(reason) = self.client(&routed.config.server).await {
            return self.refuse(&request.name, request, &reason).await.into();
        }
        // started again just now, it may declare the tool otherwise
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, request).await.into();
        }
        let args = request.arguments.clone().unwrap_or_default();
        let size = serde_json::to_string(&args).map_or(usize::MAX, |s| s.len());
        let (proposal, malformed) = if size > MAX_ARGS_BYTES {
            (
                Value::Null,
                Some(format!(
                    "the arguments are {size} bytes, more than the {MAX_ARGS_BYTES} accepted"
                )),
            )
        } else {
            match routed.config.to_proposal(&args) {
                Ok(p) => (p, None),
                Err(reason) => (Value::Null, Some(reason)),
            }
        };
        let first = match self
            .decide(
                routed,
                self.input(routed, proposal.clone(), malformed, vec![]),
            )
            .await
        {
            Ok(d) => d,
            Err(e) => return error_result(e).into(),
        };
        let d = if first.decision == Outcome::Pending {
            match self.step_up(routed, first, &proposal, request, ctx).await {
                Ok(d) => d,
                Err(resp) => return resp,
            }
        } else {
            first
        };
        match d.decision {
            Outcome::Allow => self.execute(routed, &d).await.into(),
            _ => refusal(&d).into(),
        }
    }

    /// A PENDING decision: approvals dropped out of band, then the user
    /// through elicitation (level 1). Returns the next decision, or the
    /// response to give now (a refusal, or the 2026-07-28 input request).
    async fn step_up(
        &self,
        routed: &Routed,
        pending: Decision,
        proposal: &Value,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Decision, CallToolResponse> {
        let Some(op) = pending.operation_hash.clone() else {
            return Err(refusal(&pending).into());
        };
        // (one a read's execution used up counts for nothing: not brought)
        let dropped = self.dropped_approvals(&op);
        let mut approvals = if dropped.is_empty() {
            dropped
        } else {
            self.blocking(move |gw| gw.unused_approvals(dropped))
                .await
                .map_err(|e| CallToolResponse::from(error_result(e)))?
        };
        let mut d = pending;
        if !approvals.is_empty() {
            d = self
                .decide(
                    routed,
                    self.input(routed, proposal.clone(), None, approvals.clone()),
                )
                .await
                .map_err(|e| CallToolResponse::from(error_result(e)))?;
            if d.decision != Outcome::Pending {
                return Ok(d);
            }
        }
        if d.level.unwrap_or(0) >= 2
            && let Some(next) = self.four_eyes_missing(&d, &op, &approvals).await?
        {
            return Err(refusal_with(&d, &next).into());
        }
        if self.inner.session.user_key.is_none() {
            let (s, config) = (&self.inner.session, &self.inner.config_path);
            let line = elicit::approve_line(&self.inner.gateway, config, &op, &s.user);
            return Err(refusal_with(
                &d,
                &format!(
                    "this session holds no approval key for the user, so the step-up cannot be confirmed through this client; the user `{}` approves out of band (`{line}`), then call this tool again with the same arguments",
                    s.user
                ),
            )
            .into());
        }
        let asked = elicit::ask(
            &self.inner.sealer,
            &self.inner.gateway,
            &d,
            request,
            ctx,
            &self.inner.session,
            &self.inner.config_path,
        )
        .await;
        match asked {
            elicit::Answer::Accepted => {}
            elicit::Answer::Declined => return Err(self.declined(&d, &op).await.into()),
            elicit::Answer::Respond(resp) => return Err(*resp),
        }
        let minted = self
            .mint(&op)
            .map_err(|e| CallToolResponse::from(error_result(e)))?;
        approvals.push(minted);
        self.decide(
            routed,
            self.input(routed, proposal.clone(), None, approvals),
        )
        .await
        .map_err(|e| CallToolResponse::from(error_result(e)))
    }

    /// A four-eyes operation `op` without its second half (out of band):
    /// what the agent is told happens next; `None` when it is at hand.
    async fn four_eyes_missing(
        &self,
        d: &Decision,
        op: &str,
        approvals: &[Value],
    ) -> Result<Option<String>, CallToolResponse> {
        let (inner, d, op, approvals) = (
            self.inner.clone(),
            d.clone(),
            op.to_string(),
            approvals.to_vec(),
        );
        self.blocking(move |gw| {
            let (s, config) = (&inner.session, &inner.config_path);
            (!elicit::second_half(gw, &op, &s.user, &approvals))
                .then(|| elicit::four_eyes_next(gw, &d, s, config))
        })
        .await
        .map_err(|e| CallToolResponse::from(error_result(e)))
    }

    /// The user declined `op` through elicitation: recorded in the store as
    /// the user's decline (as `ipc approve --decline` does), standing for
    /// the session's `decline_for` seconds: until then the same operation
    /// is refused without asking, after that it may be asked again. The
    /// agent reads a DENY, with the decline's receipt.
    async fn declined(&self, d: &Decision, op: &str) -> CallToolResult {
        let until = match self.inner.gateway.now() {
            Ok(now) => now.saturating_add(self.inner.session.decline_for),
            // no clock: the decline cannot be dated, nothing is recorded
            // and nothing runs
            Err(e) => return error_result(e.to_string()),
        };
        let (op, user) = (op.to_string(), self.inner.session.user.clone());
        let who = user.clone();
        let recorded = self
            .blocking(move |gw| gw.decline_until(&op, &who, Some(until)))
            .await;
        let deny = crate::gateway::pending::declined(&user, &user, Some(until));
        let mut denied = Decision {
            decision: Outcome::Deny,
            stage: deny.stage,
            reason: Some(deny.reason),
            hint: deny.hint,
            approve_by: None,
            receipt: None,
            ..d.clone()
        };
        let note = match recorded {
            Ok(Ok(r)) => {
                denied.receipt = Some(r);
                String::new()
            }
            Ok(Err(e)) => format!("the decline was not recorded: {e}"),
            Err(e) => format!("the decline was not recorded: {e}"),
        };
        refusal_with(&denied, &note)
    }

    /// An ALLOW: the downstream executes with the trusted values, once (a
    /// write) or at this call (a read, whose every call is decided and
    /// sent). The decision is committed; the outcome is recorded after the
    /// answer, under the operation hash (a write) or the read's execution.
    async fn execute(&self, routed: &Routed, d: &Decision) -> CallToolResult {
        let Some(op) = d.operation_hash.clone() else {
            return error_result("an allowed operation without an operation hash".into());
        };
        let outcomes = &self.inner.outcomes;
        if d.replayed {
            return match outcomes.seen(&op) {
                Seen::Running => error_result(format!(
                    "the same operation ({op}) is running now; wait for its result instead of calling again"
                )),
                Seen::Answered(o) => stored_result(&o),
                Seen::Unknown => match self
                    .blocking({
                        let op = op.clone();
                        move |gw| gw.outcome(&op)
                    })
                    .await
                {
                    Ok(Ok(Some(o))) => stored_result(&o),
                    Ok(Ok(None)) => error_result(format!(
                        "{NOT_RECORDED}: the operation {op} was allowed and dispatched before, by another instance of the proxy on this store that may still be running it, or by one that stopped during the call; it is not sent again; call again in a moment to read its result once recorded; if none is ever recorded, the outcome is unknown: ask the user"
                    )),
                    Ok(Err(e)) => error_result(format!("the store failed: {e}")),
                    Err(e) => error_result(e),
                },
            };
        }
        // a read's execution has a key of its own: never answered to a
        // retry (the gateway decides each call of a read afresh)
        let op = d.execution.clone().unwrap_or(op);
        if !outcomes.running(&op) {
            return error_result("the proxy's state is poisoned".into());
        }
        let executor = format!("mcp:{}/{}", routed.config.server, routed.config.tool);
        // what is sent is what the decision's receipt recorded: the same
        // function built both, and a call that differs is not sent; a
        // secret goes downstream as the value its commitment binds, and
        // what is stored of the answer never holds it
        let call = routed
            .config
            .downstream_call(&d.resolved, &d.secrets)
            .and_then(|c| {
                let recorded = d.result.as_ref().and_then(|r| r.get("downstream"));
                if recorded == Some(&c.record()?) {
                    Ok(c)
                } else {
                    Err("the call differs from the one the decision recorded".into())
                }
            });
        let outcome = match call {
            Err(reason) => ExternalOutcome {
                executor,
                is_error: true,
                result: json!({"error": format!("the trusted values do not map back onto the tool: {reason}")}),
            },
            Ok(call) => match self.forward(&routed.config, call.arguments).await {
                Ok(r) => ExternalOutcome {
                    executor,
                    is_error: r.is_error.unwrap_or(false),
                    result: serde_json::to_value(&r).unwrap_or(Value::Null),
                },
                Err(reason) => ExternalOutcome {
                    executor,
                    is_error: true,
                    result: json!({ "error": reason }),
                },
            },
        };
        let outcome = ExternalOutcome {
            result: d.secrets.scrub(&outcome.result),
            ..outcome
        };
        outcomes.answered(&op, &outcome);
        stored_result(&outcome)
    }

    /// The running client of a downstream server; a server that died (its
    /// transport closed) is started again first, once for all the calls
    /// that find it dead. `Err` says the server is down and why.
    async fn client(&self, server: &str) -> Result<Arc<RunningService<RoleClient, ()>>, String> {
        let d = self
            .inner
            .clients
            .get(server)
            .ok_or_else(|| format!("no downstream server `{server}`"))?;
        let current = d.running.read().await.clone();
        if !current.peer().is_transport_closed() {
            return Ok(current);
        }
        self.restart(server, d, &current).await.map_err(|e| {
            format!("the downstream server `{server}` stopped and {e}; restart `ipc mcp`")
        })
    }

    /// Starts (or connects to) `server` again in place of `stale`, once
    /// for all the calls that found it so; a remote's `token_file` is read
    /// again as it connects. `Err`: what failed, in words.
    async fn restart(
        &self,
        server: &str,
        d: &Downstream,
        stale: &Arc<RunningService<RoleClient, ()>>,
    ) -> Result<Arc<RunningService<RoleClient, ()>>, String> {
        let mut slot = d.running.write().await;
        if !Arc::ptr_eq(&slot, stale) && !slot.peer().is_transport_closed() {
            return Ok(slot.clone());
        }
        let fresh = start_server(&d.config)
            .await
            .map_err(|e| format!("could not be started again ({e})"))?;
        // what the server declares now: a tool declared otherwise than
        // when the config was checked against it is refused from now on
        let now = fresh.list_all_tools().await.map_err(|e| {
            format!(
                "was started again but does not list its tools ({})",
                said::describe(&e, &d.tokens()).text
            )
        })?;
        let now: Vec<DeclaredTool> = now.iter().map(declared_tool).collect();
        if let Ok(mut changed) = self.inner.changed.lock() {
            for r in self
                .inner
                .tools
                .iter()
                .filter(|r| r.config.server == server)
            {
                if !now.contains(&r.declared) {
                    changed.insert(r.config.tool.clone());
                }
            }
        }
        *slot = Arc::new(fresh);
        Ok(slot.clone())
    }

    /// Calls a downstream tool; an MCP error or a dead server is `Err`. A
    /// remote server with a `token_file` that refuses the token (HTTP 401
    /// or 403, the token was rotated) is connected to again with the
    /// file's token and sent the same call once more: it refused the
    /// first, so it executed nothing.
    async fn forward(
        &self,
        config: &ToolConfig,
        args: Map<String, Value>,
    ) -> Result<CallToolResult, String> {
        let client = self.client(&config.server).await?;
        let params = CallToolRequestParams::new(config.tool.clone()).with_arguments(args);
        let failed = match self.call(config, &client, params.clone()).await {
            Ok(r) => return Ok(r),
            Err(failed) => failed,
        };
        let Some(d) = self.inner.clients.get(&config.server) else {
            return Err(failed.text);
        };
        if !(failed.refused && d.config.token_file().is_some()) {
            return Err(failed.text);
        }
        let client = self
            .restart(&config.server, d, &client)
            .await
            .map_err(|e| {
                format!(
                    "{}; connected to again with the token file's token, it {e}",
                    failed.text
                )
            })?;
        self.call(config, &client, params)
            .await
            .map_err(|again| again.text)
    }

    /// One `tools/call`; its failure in words (`said::describe`).
    async fn call(
        &self,
        config: &ToolConfig,
        client: &RunningService<RoleClient, ()>,
        params: CallToolRequestParams,
    ) -> Result<CallToolResult, said::Described> {
        let tokens = self
            .inner
            .clients
            .get(&config.server)
            .map(Downstream::tokens)
            .unwrap_or_default();
        let (server, tool) = (&config.server, &config.tool);
        match tokio::time::timeout(DOWNSTREAM_TIMEOUT, client.call_tool(params)).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => {
                let said = said::describe(&e, &tokens);
                Err(said::Described {
                    text: format!(
                        "the downstream server `{server}` failed on `{tool}`: {}",
                        said.text
                    ),
                    ..said
                })
            }
            Err(_) => Err(said::Described {
                text: format!(
                    "the downstream server `{server}` did not answer `{tool}` within {} s",
                    DOWNSTREAM_TIMEOUT.as_secs()
                ),
                refused: false,
                tls: None,
            }),
        }
    }
}

/// The agent's view of a stored outcome.
fn stored_result(o: &ExternalOutcome) -> CallToolResult {
    if let Ok(r) = serde_json::from_value::<CallToolResult>(o.result.clone()) {
        return r;
    }
    let text = o
        .result
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| o.result.to_string());
    if o.is_error {
        error_result(text)
    } else {
        CallToolResult::success(vec![Content::text(text)])
    }
}

fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![Content::text(text)])
}

/// A DENY or a PENDING as the agent reads it: the stage, the reason, the
/// hint, who must approve, the receipt; the decision itself as structured
/// content.
fn refusal(d: &Decision) -> CallToolResult {
    refusal_with(d, "")
}

fn refusal_with(d: &Decision, extra: &str) -> CallToolResult {
    let mut text = match d.decision {
        Outcome::Pending => format!(
            "PENDING at stage `{}`: {}",
            d.stage.name(),
            d.reason.as_deref().unwrap_or("approval required")
        ),
        _ => format!(
            "DENY at stage `{}`: {}",
            d.stage.name(),
            d.reason.as_deref().unwrap_or("refused")
        ),
    };
    if let Some(h) = &d.hint {
        text.push_str(&format!("\nhint: {h}"));
    }
    if let Some(who) = &d.approve_by {
        text.push_str(&format!("\nmust be approved by: {who}"));
    }
    if !extra.is_empty() {
        text.push_str(&format!("\n{extra}"));
    }
    if let Some(r) = &d.receipt {
        text.push_str(&format!("\nreceipt #{} {}", r.seq, r.hash));
    }
    let mut r = error_result(text);
    let decision = serde_json::to_value(d).ok();
    if let Some(v) = &decision {
        let mut meta = serde_json::Map::new();
        meta.insert(DECISION_META.to_string(), v.clone());
        r.meta = Some(rmcp::model::MetaObject(meta));
    }
    r.structured_content = decision;
    r
}

/// The `_meta` key of a refusal's decision object: there for every client,
/// where `structuredContent` cannot be (a tool that declares an
/// `outputSchema`, which the decision does not match; see
/// [`readable_by_every_sdk`]).
pub const DECISION_META: &str = "intentplane/decision";

/// A refusal of a tool that declares an `outputSchema` carries no
/// `structuredContent`: an SDK that checks it against the schema (the
/// TypeScript SDK, the Inspector) would throw instead of showing the
/// reason and the hint. The decision stays in the text and in `_meta`.
fn readable_by_every_sdk(output_schema: bool, r: &mut CallToolResult) {
    if output_schema && is_refusal(r) {
        r.structured_content = None;
    }
}

/// A result [`refusal_with`] made (its decision in `_meta`), not one a
/// downstream returned.
fn is_refusal(r: &CallToolResult) -> bool {
    r.meta
        .as_ref()
        .is_some_and(|m| m.0.contains_key(DECISION_META))
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

impl Proxy {
    async fn route(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        if request.name == intent::TOOL && self.inner.request_tool.is_some() {
            return self.request_mandate(&request, &context).await;
        }
        let Some(routed) = self.routed(&request.name) else {
            return self
                .refuse(&request.name, &request, "not listed in the config")
                .await
                .into();
        };
        // the server may have been started again by an earlier call
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, &request).await.into();
        }
        match &routed.config.mode {
            ToolMode::Passthrough => self.passthrough(routed, &request).await.into(),
            ToolMode::Action { .. } => self.call_mapped(routed, &request, &context).await,
        }
    }

    fn declaration_changed(&self, tool: &str) -> bool {
        self.inner.changed.lock().map_or(true, |c| c.contains(tool))
    }

    async fn refuse_changed(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
    ) -> CallToolResult {
        let reason = format!(
            "the server `{}` was started again and declares `{}` otherwise than when the config was checked against it; check the config again (`ipc mcp --config {} --check --servers`) and restart `ipc mcp`",
            routed.config.server,
            routed.config.tool,
            self.inner.config_path.display()
        );
        self.refuse(&request.name, request, &reason).await
    }

    /// A call refused before any decision, with its receipt.
    async fn refuse(
        &self,
        tool: &str,
        request: &CallToolRequestParams,
        reason: &str,
    ) -> CallToolResult {
        let receipt = self.record_refusal(tool, request, reason).await;
        error_result(format!(
            "tool `{}` is not available through intentplane: {reason}\n{receipt}",
            crate::base::json::echo(tool)
        ))
    }

    /// Records a call refused before any decision; the receipt's line for
    /// the agent (or why there is none).
    async fn record_refusal(
        &self,
        tool: &str,
        request: &CallToolRequestParams,
        reason: &str,
    ) -> String {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let (t, why) = (tool.to_string(), reason.to_string());
        let recorded = self
            .blocking(move |gw| {
                gw.record_call(&ProxyCall::Refused {
                    tool: &t,
                    arguments: &arguments,
                    reason: &why,
                })
            })
            .await;
        match recorded {
            Ok(Ok(r)) => format!("receipt #{} {}", r.seq, r.hash),
            Ok(Err(e)) => format!("its receipt could not be recorded: {e}"),
            Err(e) => e,
        }
    }

    /// A passthrough: forwarded as is, then its receipt (the hashes of the
    /// arguments and of the answer, the status). A call whose receipt cannot
    /// be written gives the agent no result.
    async fn passthrough(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
    ) -> CallToolResult {
        // a dead server is started again here (the call's error otherwise
        // comes from `forward`), and may declare the tool otherwise now
        let _ = self.client(&routed.config.server).await;
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, request).await;
        }
        if let Some(why) = self.session_ended().await {
            return self.refuse(&request.name, request, &why).await;
        }
        let args = request.arguments.clone().unwrap_or_default();
        let arguments = Value::Object(args.clone());
        let (result, answer) = match self.forward(&routed.config, args).await {
            Ok(r) => {
                let v = serde_json::to_value(&r).unwrap_or(Value::Null);
                (r, v)
            }
            Err(e) => (error_result(e.clone()), json!({ "error": e })),
        };
        let server = routed.config.server.clone();
        let tool = routed.config.tool.clone();
        let is_error = result.is_error.unwrap_or(false);
        let recorded = self
            .blocking(move |gw| {
                gw.record_call(&ProxyCall::Passthrough {
                    server: &server,
                    tool: &tool,
                    arguments: &arguments,
                    is_error,
                    result: &answer,
                })
            })
            .await;
        match recorded {
            Ok(Ok(_)) => result,
            Ok(Err(e)) => error_result(format!(
                "the call's receipt could not be recorded, so its result is withheld: {e}"
            )),
            Err(e) => error_result(e),
        }
    }

    /// Why no call is forwarded any more: a mandate of the session expired
    /// or was revoked (or that cannot be known); `None` while it stands.
    async fn session_ended(&self) -> Option<String> {
        let inner = self.inner.clone();
        let why = match self.blocking(move |gw| inner.standing.check(gw)).await {
            Ok(Ok(None)) => return None,
            Ok(Ok(Some(why))) => why,
            Ok(Err(e)) | Err(e) => format!("the session's mandates cannot be checked: {e}"),
        };
        let next = if self.inner.session.issued {
            "every call is refused until a new session is started (`ipc mcp --new-session`)"
        } else {
            "every call is refused until `[session] token` names a mandate that stands (`ipc token issue`)"
        };
        Some(format!("{why}; {next}"))
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
