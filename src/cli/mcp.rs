//! `ipc mcp --config F [--check] [--new-session] [--listen ADDR]
//! [--format json]`: the MCP proxy, on stdio or (`--listen`) over
//! Streamable HTTP. The session recorded in the store for this config is continued
//! (`crate::mcp::session`); `--new-session` revokes it and starts another.
//! With
//! `--check`, every diagnostic of the config (its own, the packs', the
//! inline tools') and nothing started: no child process, no store; with
//! `--check --servers`, the downstream servers are started, what each
//! declares (`tools/list`) is checked against the tools' mappings
//! (`mcp::config::declared`), and they are stopped. Exit 0 when clean
//! (warnings printed), 1 on any error.

use super::Format;
#[cfg(feature = "mcp")]
use crate::gateway::Effect;
#[cfg(feature = "mcp")]
use crate::mcp::config::declared::{Hint, ToolEffect};
#[cfg(feature = "mcp")]
use crate::mcp::config::{ConfigReport, check, load_with_report};
#[cfg(feature = "mcp")]
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// The proxy's configuration (`intentplane.toml`); or the environment's
    /// `IPC_MCP_CONFIG`, for a client that takes `--config` for itself (the
    /// MCP Inspector's CLI).
    #[arg(long, value_name = "FILE", env = "IPC_MCP_CONFIG")]
    pub config: PathBuf,
    /// Check the configuration and report; start nothing.
    #[arg(long)]
    pub check: bool,
    /// With `--check`: also start the downstream servers, read what each
    /// declares (`tools/list`), check every tool against it, and stop them.
    #[arg(long, requires = "check")]
    pub servers: bool,
    /// Revoke the session recorded in the store for this config and start
    /// a new one (new mandates: budget and call count from zero). Without
    /// it, the recorded session is continued until it expires or its
    /// declared content changes.
    #[arg(long, conflicts_with = "check")]
    pub new_session: bool,
    /// Serve the proxy over Streamable HTTP at `/mcp` on this address
    /// instead of stdio, for a shared gateway: `127.0.0.1:8788` (port 0
    /// picks one), `8788` (loopback), `[::1]:8788`, or
    /// `unix:/path/to.sock`. The checks of `ipc serve --listen`: a TCP
    /// address needs `--auth-token-file`; the `Host` must be one served;
    /// a request from a web page (`Origin`) is refused.
    #[arg(long, value_name = "ADDR", conflicts_with = "check")]
    pub listen: Option<String>,
    /// With `--listen`: the bearer tokens clients must send, in the format
    /// of `ipc serve --auth-token-file` (each token's tenants must include
    /// the session's owner); re-read when the file changes and on SIGHUP.
    #[arg(long, value_name = "FILE", requires = "listen")]
    pub auth_token_file: Option<PathBuf>,
    /// With `--listen`: a `Host` the server answers to (repeatable), instead
    /// of its own loopback names: what a reverse proxy sends.
    #[arg(long, value_name = "HOST", requires = "listen")]
    pub allowed_host: Vec<String>,
    /// Output format of `--check`.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[cfg(not(feature = "mcp"))]
pub fn run(_: &McpArgs, _: &mut dyn Write) -> u8 {
    super::feature_off("ipc mcp", "mcp")
}

#[cfg(feature = "mcp")]
pub fn run(args: &McpArgs, out: &mut dyn Write) -> u8 {
    if args.check {
        let (mut report, checked) = check(&args.config);
        let mut offered = None;
        if args.servers
            && let Some(c) = &checked
        {
            match crate::mcp::proxy::declarations(&c.servers) {
                Ok(o) => {
                    report
                        .items
                        .extend(crate::mcp::config::declared::check(&c.sites, &c.tools, &o).items);
                    offered = Some(o);
                }
                Err(e) => {
                    let _ = write!(out, "{}", super::bundle::render_error(&e, false));
                    return 1;
                }
            }
        }
        let checked = checked.filter(|_| !report.has_errors());
        let summary = checked.as_ref().map(|c| {
            (
                c.servers.len(),
                c.tools.len(),
                c.bundle.table.actions.len(),
                c.store_path.display().to_string(),
            )
        });
        let environment = checked.as_ref().map(|c| environment(&c.servers));
        // how each decided tool is executed (the config's `effect`), and
        // what its server's annotations suggest (`--servers`)
        let effects: Vec<ToolEffect> = checked
            .as_ref()
            .map(|c| crate::mcp::config::declared::effects(&c.sites, &c.tools, offered.as_ref()))
            .unwrap_or_default();
        let written = match args.format {
            Format::Human => {
                // which variables each server will see: with `--servers`,
                // where the servers were started with them
                let shown = environment.as_ref().filter(|_| args.servers);
                let treated = checked
                    .as_ref()
                    .map(|c| treatment(&c.tools, &effects))
                    .unwrap_or_default();
                human(&report, &args.config, summary, shown, &treated, out)
            }
            Format::Json => {
                let doc = json!({
                    "ok": !report.has_errors(),
                    "config": args.config.display().to_string(),
                    "errors": report.errors(),
                    "warnings": report.warnings(),
                    "servers": checked.as_ref().map(|c| c.servers.iter().map(|s| s.name.clone()).collect::<Vec<_>>()),
                    // each stdio server's variables, by name (never a value)
                    "environment": environment,
                    "tools": checked.as_ref().map(|c| c.tools.iter().map(|t| {
                        let e = effects.iter().find(|e| e.tool == t.tool);
                        json!({
                            "server": t.server,
                            "tool": t.tool,
                            "action": match &t.mode {
                                crate::mcp::config::ToolMode::Action { action, .. } => Some(action.clone()),
                                crate::mcp::config::ToolMode::Passthrough => None,
                            },
                            // `read`: decided and sent again at each call;
                            // `write`: executed once; none for a passthrough
                            "effect": e.map(|e| e.effect.name()),
                            // a server's annotation that suggests a read
                            // (it changes nothing by itself)
                            "hint": e.and_then(|e| e.hint).map(|h| h.annotation()),
                            "suggested_effect": e.and_then(|e| e.hint).map(|_| "read"),
                        })
                    }).collect::<Vec<_>>()),
                    "diagnostics": report.items.iter().map(|r| r.to_json()).collect::<Vec<_>>(),
                });
                writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&doc).unwrap_or_default()
                )
            }
        };
        return u8::from(written.is_err() || report.has_errors());
    }
    // the listen flags first: a server that cannot start says so before
    // it loads anything
    let listen = match args.listen.as_deref().map(|a| listen_config(args, a)) {
        None => None,
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => {
            eprint!("{}", super::bundle::render_error(&e, false));
            return 2;
        }
    };
    let (report, setup) = load_with_report(&args.config);
    // diagnostics go to stderr: stdout is the MCP channel
    eprint!("{}", report.render_human(false));
    let Some(setup) = setup else {
        return 1;
    };
    let ran = match listen {
        Some(http) => crate::mcp::transport::listen::run(setup, args.new_session, http, out),
        None => crate::mcp::proxy::run(setup, args.new_session),
    };
    match ran {
        Ok(code) => {
            if code == std::process::ExitCode::SUCCESS {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprint!("{}", super::bundle::render_error(&*e, false));
            1
        }
    }
}

/// `--listen` and its flags, as `ipc serve --listen` reads them (the
/// limits at its defaults).
#[cfg(feature = "mcp")]
fn listen_config(
    args: &McpArgs,
    addr: &str,
) -> Result<crate::serve::HttpConfig, crate::serve::ServeError> {
    use std::time::Duration;
    let listen = crate::serve::ListenAddr::parse(addr)?;
    listen.require_auth(addr, args.auth_token_file.is_some())?;
    Ok(crate::serve::HttpConfig {
        listen,
        token_file: args.auth_token_file.clone(),
        allowed_hosts: args
            .allowed_host
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        public_metrics: false,
        max_connections: 256,
        max_in_flight: 128,
        header_timeout: Duration::from_secs(5),
        body_timeout: Duration::from_secs(10),
        write_timeout: Duration::from_secs(10),
    })
}

/// The names of the variables each stdio server is started with, sorted
/// (never a value).
#[cfg(feature = "mcp")]
fn environment(servers: &[crate::mcp::config::ServerConfig]) -> Environment {
    servers
        .iter()
        .filter_map(|s| match &s.transport {
            crate::mcp::config::Transport::Stdio { env, .. } => {
                let mut names: Vec<String> = env.iter().map(|(k, _)| k.clone()).collect();
                names.sort_unstable();
                Some((s.name.clone(), names))
            }
            crate::mcp::config::Transport::Http(_) => None,
        })
        .collect()
}

/// How each tool's calls are treated, a line each (a hint on a line of
/// its own): passed through, a read (decided and sent again at each call)
/// or a write (executed once).
#[cfg(feature = "mcp")]
fn treatment(tools: &[crate::mcp::config::ToolConfig], effects: &[ToolEffect]) -> Vec<String> {
    let mut out = vec![];
    for t in tools {
        let Some(e) = effects.iter().find(|e| e.tool == t.tool) else {
            out.push(format!(
                "pass  {}: forwarded as is, without a decision",
                t.tool
            ));
            continue;
        };
        let how = match e.effect {
            Effect::Read => "decided and sent again at each call",
            Effect::Write => "executed once, a retry answered from the store",
        };
        out.push(format!(
            "{:<5} {} ({}): {how}",
            e.effect.name(),
            e.tool,
            e.action
        ));
        if let Some(h) = e.hint {
            let why = match h {
                Hint::ReadOnly => "if its answer may change between calls",
                Hint::Idempotent => "if a call may be sent again",
            };
            out.push(format!(
                "      hint: `{}` marks `{}` `{}: true`; {why}, write `effect = \"read\"` (a server's hint changes nothing by itself)",
                e.server,
                e.tool,
                h.annotation()
            ));
        }
    }
    out
}

#[cfg(feature = "mcp")]
type Environment = std::collections::BTreeMap<String, Vec<String>>;

#[cfg(feature = "mcp")]
fn human(
    report: &ConfigReport,
    config: &std::path::Path,
    summary: Option<(usize, usize, usize, String)>,
    environment: Option<&Environment>,
    treated: &[String],
    out: &mut dyn Write,
) -> std::io::Result<()> {
    write!(out, "{}", report.render_human(super::use_color()))?;
    for (server, names) in environment.into_iter().flatten() {
        writeln!(out, "env   {server}: {}", names.join(" "))?;
    }
    for line in treated.iter().filter(|_| summary.is_some()) {
        writeln!(out, "{line}")?;
    }
    match summary {
        Some((servers, tools, actions, store)) => writeln!(
            out,
            "ok    {} ({servers} server{}, {tools} tool{}, {actions} action{} in the bundle, store `{store}`)",
            config.display(),
            if servers == 1 { "" } else { "s" },
            if tools == 1 { "" } else { "s" },
            if actions == 1 { "" } else { "s" },
        )?,
        None => writeln!(out, "fail  {}", config.display())?,
    }
    let (e, w) = (report.errors(), report.warnings());
    writeln!(
        out,
        "{e} error{}, {w} warning{}",
        if e == 1 { "" } else { "s" },
        if w == 1 { "" } else { "s" }
    )
}
