//! `intentplane.toml`: the MCP proxy's configuration, a second front-end to
//! the checked IR.
//!
//! INTERFACE (shared by the config and the proxy work; the config work
//! implements the bodies, the proxy work only calls them).

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

#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    /// A child process speaking MCP on stdio. `command` is resolved
    /// relative to the config's folder when it contains a `/`.
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        /// Working directory (default: the config's folder).
        cwd: PathBuf,
    },
    /// Streamable HTTP (only if rmcp makes it cheap).
    Http { url: String },
}

/// How one argument of the action's parameters is obtained from the
/// tool's arguments, and how the trusted value goes back to the tool.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgMap {
    /// The tool argument `arg` (the parameter's own name unless renamed).
    /// `scale`: the tool speaks major units (4.00) and the parameter is
    /// Money in minor units (400) — `scale = 100`.
    Arg { arg: String, scale: Option<u32> },
    /// A constant the config fixes; the agent cannot set it.
    Const(Value),
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
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolConfig {
    pub server: String,
    /// The downstream tool's name; also the name the client sees.
    pub tool: String,
    pub mode: ToolMode,
}

/// The session's mandate: a token, already signed (issued at start-up from
/// the config with the issuer key, or read from a file).
#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The signed mandate token (the JSON the gateway takes as `mandate`).
    pub token: Value,
    /// The mandate's user (who step-up approvals are minted for).
    pub user: String,
    /// The user's approval key, with which the proxy signs a step-up the
    /// user accepted through elicitation. `None`: step-up cannot be granted
    /// through the client (a refusal that says so).
    pub user_key: Option<crate::keys::SecretKey>,
    /// Where out-of-band approvals (`ipc approve` output, one JSON file
    /// each) are dropped; read on the next identical call.
    pub approvals_dir: Option<PathBuf>,
}

/// Everything `ipc mcp` needs, built and checked.
pub struct Setup {
    pub config_path: PathBuf,
    pub servers: Vec<ServerConfig>,
    pub tools: Vec<ToolConfig>,
    pub bundle: Bundle,
    pub world: World,
    pub store: Arc<dyn Store>,
    pub session: SessionConfig,
}

impl ToolConfig {
    /// The agent's tool arguments as a gateway proposal
    /// `{"action", "args"}` in the gateway's units (minor units for scaled
    /// money). An argument that cannot be converted (4.001 with scale 100, a
    /// string where a number is mapped) is `Err` with a reason the agent can
    /// read: the caller turns it into a DENY with a receipt
    /// (`Input::malformed`), never a silent pass.
    pub fn to_proposal(&self, args: &Map<String, Value>) -> Result<Value, String> {
        let _ = args;
        Err("not implemented".into())
    }

    /// The downstream call's arguments from the decision's **trusted**
    /// values (`Decision::resolved`), in the tool's own units and spelling
    /// (400 → 4.00 with scale 100); constants are not sent back unless the
    /// tool has an argument for them; arguments the tool takes that map to
    /// no parameter are dropped (the agent cannot smuggle them).
    pub fn to_downstream(
        &self,
        resolved: &Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        let _ = resolved;
        Err("not implemented".into())
    }
}
