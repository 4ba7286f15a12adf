//! `intentplane.toml`: the MCP proxy's configuration, a second front-end to
//! the checked IR.
//!
//! [`load`] reads the file and builds everything `ipc mcp` needs (a
//! [`Setup`]); [`check`] does the same without opening the store, for
//! `ipc mcp --check`. Every problem is a diagnostic pointing into the TOML
//! (or into a pack file): [`ConfigReport`].
//!
//! Submodules: `file` (the TOML's shape, with spans), `lower` (inline tools
//! to the pack language's syntax tree, checked by `crate::check`), `load`
//! (the driver of the passes: `servers`, `packs` (packs or bundle),
//! `world`, `session`, `tools` and `args` (tool mappings), each reporting
//! into `ctx::Diags`), `mapping` (tool arguments to proposals and trusted
//! values back), `diag`.

mod args;
mod ctx;
pub mod declared;
mod diag;
pub mod environ;
mod file;
mod load;
mod lower;
mod mapping;
mod packs;
mod remote;
mod servers;
mod session;
mod tools;
mod world;

pub use diag::{ConfigError, ConfigReport, Diag, Reported};
pub use load::{Checked, DEFAULT_STORE, check, load, load_with_report};
pub use lower::{DEFAULT_PACK, INLINE_EXECUTOR};
pub use mapping::{SCALES, minor_from_tool, minor_to_tool};

use crate::bundle::Bundle;
use crate::gateway::world::World;
use crate::store::Store;
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::sync::Arc;

/// A downstream MCP server the proxy starts and forwards to.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// The name tools refer to (`server = "demo"`).
    pub name: String,
    pub transport: Transport,
}

impl ServerConfig {
    /// The secrets the proxy sends this server (a remote's bearer token),
    /// withheld from any text of the server's a message quotes
    /// (`crate::mcp::transport::said`).
    pub fn tokens(&self) -> Vec<&str> {
        match &self.transport {
            Transport::Http(r) => r.token.iter().map(Bearer::expose).collect(),
            Transport::Stdio { .. } => vec![],
        }
    }

    /// A remote's `token_file` (read again at every connection).
    pub fn token_file(&self) -> Option<&std::path::Path> {
        match &self.transport {
            Transport::Http(r) => r.token_file.as_deref(),
            Transport::Stdio { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on stdio. `command` is resolved
    /// relative to the config's folder when it contains a `/`.
    Stdio {
        command: String,
        args: Vec<String>,
        /// The server's whole environment (`environ.rs`): the base
        /// variables the proxy's environment sets, those `env_pass`
        /// forwards and `env`; nothing else of the proxy's.
        env: Vec<(String, String)>,
        /// Working directory (default: the config's folder).
        cwd: PathBuf,
    },
    /// A remote server over Streamable HTTP (`url = "https://..."`):
    /// [`Remote`], checked when the config is loaded.
    Http(Remote),
}

/// A downstream over Streamable HTTP, as the config gives it: checked when
/// the config is loaded (`remote.rs`: an `https://` URL, or `http://` to
/// a loopback address only; the token read; the authority's certificates
/// read), connected to by `crate::mcp::transport`.
#[derive(Clone, Debug, PartialEq)]
pub struct Remote {
    /// The endpoint (`https://mcp.example.com/mcp`).
    pub url: String,
    /// Sent as `Authorization: Bearer TOKEN` on every request.
    pub token: Option<Bearer>,
    /// `token_file`, where `token` was read from: read again when the
    /// server refuses the token (a rotated token is taken without a
    /// restart). `None`: `token_env`, or no token.
    pub token_file: Option<PathBuf>,
    /// `ca_file`: the certificates (DER) of the private authority the
    /// server's certificate must be signed by, instead of the webpki
    /// roots. `None`: the webpki roots (Mozilla's).
    pub ca: Option<Vec<Vec<u8>>>,
}

/// A bearer token (from `token_file` or `token_env`); never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer(pub(crate) String);

impl Bearer {
    pub fn new(token: String) -> Bearer {
        Bearer(token)
    }

    /// The token itself, for the `Authorization` header.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(<withheld>)")
    }
}

/// How one argument of the action's parameters is obtained from the
/// tool's arguments, and how the trusted value goes back to the tool.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgMap {
    /// The tool argument `arg` (the parameter's own name unless renamed).
    /// `scale`: the tool speaks major units (4.00) and the parameter is
    /// Money in minor units (400) — `scale = 100` (one of [`SCALES`];
    /// always set for a Money parameter, never for another).
    Arg {
        arg: String,
        scale: Option<u32>,
        /// The parameter's type: a Date goes back to the tool as
        /// `YYYY-MM-DD`, a Timestamp as `YYYY-MM-DDTHH:MM:SSZ`.
        ty: crate::ir::Type,
        /// `format = "string"`: the tool writes the amount as a string
        /// (`"4.00"`), not a number.
        as_text: bool,
        /// The parameter has a default: the argument may be left out.
        optional: bool,
    },
    /// A value the config fixes (`value = ...`, or `claim = "account"`:
    /// the session mandate's claim, read at start-up): the agent cannot set
    /// it (the advertised schema drops the argument, and an agent that
    /// sends it is refused); the proxy proposes it, and sends the
    /// decision's value to the tool under `arg` (the parameter's own name
    /// unless renamed), converted as an [`ArgMap::Arg`] is.
    Const {
        /// In the gateway's proposal spelling (major units for Money).
        value: Value,
        arg: String,
        scale: Option<u32>,
        ty: crate::ir::Type,
        as_text: bool,
    },
}

impl ArgMap {
    /// The tool's argument name.
    pub fn arg(&self) -> &str {
        match self {
            ArgMap::Arg { arg, .. } | ArgMap::Const { arg, .. } => arg,
        }
    }

    /// Whether the agent gives this argument (rather than the config).
    pub fn from_agent(&self) -> bool {
        matches!(self, ArgMap::Arg { .. })
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum ToolMode {
    /// Read-only: forwarded as is, no decision (still a receipt-free call).
    Passthrough,
    /// Every call is decided by the gateway as `action`; `params` maps each
    /// of the action's parameters (by parameter name).
    Action {
        /// The qualified action name as the bundle knows it
        /// (e.g. `payment.transfer`).
        action: String,
        params: Vec<(String, ArgMap)>,
        /// `effect = "read"`: every call decided and, when allowed, sent
        /// again; `"write"` (the default, also when the config says
        /// nothing): executed once, a retry answered from the store. Only
        /// the config says which; a server's annotations never do.
        effect: crate::gateway::Effect,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolConfig {
    pub server: String,
    /// The downstream tool's name; also the name the client sees.
    pub tool: String,
    pub mode: ToolMode,
    /// The folder a relative `Path` argument is resolved against before
    /// it is decided: the server's working directory (where the server
    /// itself would resolve it). `None`: a relative path stays relative.
    pub base: Option<PathBuf>,
}

/// The session's mandate: a token, already signed (issued at start-up from
/// the config with the issuer key, or read from a file).
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The signed mandate token (the JSON the gateway takes as `mandate`)
    /// of the first pack the tools use; see [`SessionConfig::mandates`].
    pub token: Value,
    /// One mandate per pack the tools use (a mandate covers one pack), in
    /// the order of first use: `(pack, token)`. Same user, owner, scopes
    /// and expiry. [`Setup::mandate_for`] picks a tool's.
    pub mandates: Vec<(String, Value)>,
    /// The mandate's user (who step-up approvals are minted for).
    pub user: String,
    /// The user's approval key, with which the proxy signs a step-up the
    /// user accepted through elicitation. `None`: step-up cannot be granted
    /// through the client (a refusal that says so).
    pub user_key: Option<crate::keys::SecretKey>,
    /// Where out-of-band approvals (`ipc approve` output, one JSON file
    /// each) are dropped; read on the next identical call.
    pub approvals_dir: Option<PathBuf>,
    /// The mandates were issued by the proxy from `[session]` (not read
    /// from `token`): the session is durable, continued across restarts
    /// from the store's session record (`crate::mcp::session`).
    pub issued: bool,
    /// Seconds a step-up the user declined through the client stands: the
    /// same operation is a DENY until then, and may be asked again after.
    pub decline_for: i64,
    /// The key the session's mandates were issued with (`issuer_key`),
    /// which signs the child mandates the user grants through
    /// `intentplane_request_mandate`. `None` for a `token` session.
    pub issuer_key: Option<crate::keys::SecretKey>,
    /// `[session] mandate_requests = true`: the agent is offered
    /// `intentplane_request_mandate` (see `crate::mcp::intent`).
    pub mandate_requests: bool,
}

/// [`SessionConfig::decline_for`] when `[session]` does not set it.
pub const DEFAULT_DECLINE_FOR: i64 = 600;

/// Everything `ipc mcp` needs, built and checked.
pub struct Setup {
    pub config_path: PathBuf,
    pub servers: Vec<ServerConfig>,
    pub tools: Vec<ToolConfig>,
    pub bundle: Bundle,
    pub world: World,
    pub store: Arc<dyn Store>,
    pub session: SessionConfig,
    /// Where each tool was written in the TOML, for the check against the
    /// servers' declarations at start-up.
    pub sites: declared::Sites,
    /// What each decision checks of the session's tenant's placement: the
    /// store is its shard when the world's stores are sharded
    /// (`gateway::shards`).
    pub holding: crate::gateway::shards::Holding,
}

impl Setup {
    /// The mandate token for a tool's calls: the one of the pack its action
    /// belongs to (`None` for a passthrough tool).
    pub fn mandate_for(&self, tool: &ToolConfig) -> Option<&Value> {
        let ToolMode::Action { action, .. } = &tool.mode else {
            return None;
        };
        let pack = &self.bundle.table.action(action)?.pack;
        self.session
            .mandates
            .iter()
            .find(|(p, _)| p == pack)
            .map(|(_, t)| t)
    }

    /// The tool the client calls by this name.
    pub fn tool(&self, name: &str) -> Option<&ToolConfig> {
        self.tools.iter().find(|t| t.tool == name)
    }
}

impl ToolConfig {
    /// What a call of the tool does, as the config declares it: a
    /// passthrough is forwarded without a decision, and counts as a write
    /// here (it has no operation to execute once or again).
    pub fn effect(&self) -> crate::gateway::Effect {
        match &self.mode {
            ToolMode::Action { effect, .. } => *effect,
            ToolMode::Passthrough => crate::gateway::Effect::Write,
        }
    }

    /// The agent's tool arguments as a gateway proposal
    /// `{"action", "args"}` in the gateway's units (minor units for scaled
    /// money). An argument that cannot be converted (4.001 with scale 100, a
    /// string where a number is mapped) is `Err` with a reason the agent can
    /// read: the caller turns it into a DENY with a receipt
    /// (`Input::malformed`), never a silent pass.
    pub fn to_proposal(&self, args: &Map<String, Value>) -> Result<Value, String> {
        mapping::to_proposal(self, args)
    }

    /// The downstream call of a decision: its **trusted** values
    /// (`Decision::resolved`, secrets as commitments) in the tool's own
    /// units and names (400 → 4.00 with scale 100), every mapped parameter
    /// under its `arg`, the config's constants included; each secret is
    /// sent as the clear value of `secrets` its commitment stands for, and
    /// recorded as the commitment. Arguments the tool takes that map to no
    /// parameter are never sent (the agent cannot smuggle them).
    ///
    /// The one function that builds the call: the gateway records its
    /// [`DownstreamCall::record`] in the decision's receipt (before the
    /// call), and the proxy sends its [`DownstreamCall::arguments`].
    pub fn downstream_call(
        &self,
        resolved: &Map<String, Value>,
        secrets: &crate::gateway::secret::SecretValues,
    ) -> Result<DownstreamCall, String> {
        mapping::downstream_call(self, resolved, secrets)
    }

    /// The downstream arguments of values without secrets (a commitment
    /// among them is refused): [`ToolConfig::downstream_call`]'s.
    pub fn to_downstream(
        &self,
        resolved: &Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        self.downstream_call(resolved, &Default::default())
            .map(|c| c.arguments)
    }

    /// The tool's input schema as the agent is shown it (`tools/list`):
    /// the downstream's, with only the arguments the agent gives. An
    /// argument the config fills (`claim`, `value`) or that maps to no
    /// parameter is dropped from `properties` and `required`, and one with
    /// a default is not required.
    pub fn advertised_schema(&self, downstream: &Map<String, Value>) -> Map<String, Value> {
        mapping::advertised_schema(self, downstream)
    }

    /// An argument the proxy would send that the downstream's schema
    /// refuses (it allows no other properties, `additionalProperties:
    /// false`, and does not declare it): every call would fail.
    pub fn undeclared_argument(&self, downstream: &Map<String, Value>) -> Option<&str> {
        mapping::undeclared_argument(self, downstream)
    }
}

/// One call to a downstream tool, built from a decision
/// ([`ToolConfig::downstream_call`]). Not `Debug`: it holds the clear
/// value of any secret.
#[derive(Clone, PartialEq)]
pub struct DownstreamCall {
    pub server: String,
    pub tool: String,
    /// What the tool receives.
    pub arguments: Map<String, Value>,
    /// What is recorded of them: the same, each secret argument its
    /// commitment.
    pub recorded: Map<String, Value>,
}

impl DownstreamCall {
    /// What the decision's receipt keeps of the call (its `result`'s
    /// `downstream`): `server`, `tool`, `arguments` (secrets as
    /// commitments) and `arguments_hash`, the JCS hash of those arguments.
    /// Without a secret, the hash is the one of exactly what the tool
    /// received.
    pub fn record(&self) -> Result<Value, String> {
        let arguments = Value::Object(self.recorded.clone());
        let hash = crate::canonical::hash_of(&arguments).map_err(|e| e.to_string())?;
        Ok(serde_json::json!({
            "server": self.server,
            "tool": self.tool,
            "arguments": arguments,
            "arguments_hash": hash,
        }))
    }
}
