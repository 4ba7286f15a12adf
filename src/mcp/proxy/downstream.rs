//! The downstream servers: started (a child process, or a remote over
//! Streamable HTTP), their `tools/list` read, started again when they died
//! (a tool declared otherwise from then on refused), and each
//! `tools/call` sent with a timeout, its failure in words.

use super::{DOWNSTREAM_TIMEOUT, Proxy, ProxyError};
use crate::mcp::config::declared::DeclaredTool;
use crate::mcp::config::{ServerConfig, ToolConfig, Transport};
use crate::mcp::transport::said;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// One downstream server: its config (to start it again) and the running
/// client, replaced when the server died.
pub(super) struct Downstream {
    pub(super) config: ServerConfig,
    pub(super) running: tokio::sync::RwLock<Arc<RunningService<RoleClient, ()>>>,
}

impl Downstream {
    /// The secrets a message withholds from the server's text: the token
    /// the config gave, and the one its `token_file` holds now.
    pub(super) fn tokens(&self) -> Vec<String> {
        let mut out: Vec<String> = self.config.tokens().iter().map(|t| t.to_string()).collect();
        if let Transport::Http(r) = &self.config.transport
            && let Some(Ok(now)) = r.token_now()
        {
            out.push(now.expose().to_string());
        }
        out
    }
}

/// The command a server config names: `ipc` is this very binary.
pub(super) fn command_of(command: &str) -> std::path::PathBuf {
    if command == "ipc"
        && let Ok(me) = std::env::current_exe()
    {
        return me;
    }
    std::path::PathBuf::from(command)
}

pub(super) async fn start_server(
    s: &ServerConfig,
) -> Result<RunningService<RoleClient, ()>, ProxyError> {
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

/// Starts a server and reads its `tools/list`.
pub(super) async fn start_listed(
    s: &ServerConfig,
) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), ProxyError> {
    let client = start_server(s).await?;
    let tools = client
        .list_all_tools()
        .await
        .map_err(|e| ProxyError::Handshake {
            server: s.name.clone(),
            reason: said::describe(&e, &s.tokens()).text,
        })?;
    Ok((client, tools))
}

/// A tool as the config check reads it.
pub(super) fn declared_tool(t: &Tool) -> DeclaredTool {
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
    super::runtime()?.block_on(async {
        let mut out = HashMap::new();
        for s in servers {
            let (client, tools) = start_listed(s).await?;
            let _ = client.cancel().await;
            out.insert(s.name.clone(), tools.iter().map(declared_tool).collect());
        }
        Ok(out)
    })
}

impl Proxy {
    /// The running client of a downstream server; a server that died (its
    /// transport closed) is started again first, once for all the calls
    /// that find it dead. `Err` says the server is down and why.
    pub(super) async fn client(
        &self,
        server: &str,
    ) -> Result<Arc<RunningService<RoleClient, ()>>, String> {
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
    pub(super) async fn restart(
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
    pub(super) async fn forward(
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
    pub(super) async fn call(
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
