//! `ipc mcp --listen ADDR`: the proxy as a shared gateway over Streamable
//! HTTP (rmcp's server transport, at `/mcp`), behind the checks of
//! `ipc serve --listen` (`crate::serve::serve_gated`: the `Host` check,
//! no web page, the bearer token and the token file's tenants, the same
//! listener and limits). Every client is served by the same proxy: one
//! gateway, one store, one session (its mandates, budget and approvals),
//! so a token must be allowed to act for the session's owner. A call is
//! decided exactly as over stdio; a step-up is asked of the client that
//! made the call, and answered only by it: an MCP session belongs to the
//! token that opened it ([`crate::mcp::transport::sessions`]).

use crate::gateway::Tenants;
use crate::mcp::config::Setup;
use crate::mcp::proxy::Proxy;
use crate::mcp::session;
use crate::mcp::transport::sessions::{Sessions, bound};
use crate::serve::HttpConfig;
use axum::middleware::from_fn_with_state;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

/// The path the MCP endpoint is served at.
pub const PATH: &str = "/mcp";

/// Runs the proxy over HTTP until SIGINT or SIGTERM; `fresh`
/// (`--new-session`) as for stdio. `listening on http://...` goes to `out`.
pub fn run(
    setup: Setup,
    fresh: bool,
    http: HttpConfig,
    out: &mut dyn Write,
) -> Result<ExitCode, miette::Report> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| crate::mcp::proxy::ProxyError::Session {
            reason: e.to_string(),
        })?;
    let tools: Vec<String> = setup.tools.iter().map(|t| t.tool.clone()).collect();
    rt.block_on(async move {
        let proxy = Proxy::start_session(setup, fresh).await?;
        if let Some(line) = session::describe(proxy.session_start()) {
            eprintln!("intentplane: {line}");
        }
        let mut owners: Vec<String> = tools
            .iter()
            .filter_map(|t| proxy.mandate_of(t))
            .filter_map(|m| m["mandate"]["owner"].as_str().map(str::to_string))
            .collect();
        owners.sort();
        owners.dedup();
        // the gate checks `Host` (rmcp's own check would be a second,
        // different list)
        let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
        let max_body = config.max_request_body_bytes;
        let stop = config.cancellation_token.clone();
        let p = proxy.clone();
        let manager = Arc::new(LocalSessionManager::default());
        let service = StreamableHttpService::new(move || Ok(p.clone()), manager.clone(), config);
        // a session is its opener's: another token's request on it is an
        // unknown session
        let sessions = Arc::new(Sessions::new(manager));
        let router = axum::Router::new()
            .route_service(PATH, service)
            .layer(from_fn_with_state(sessions, bound));
        let admit: crate::serve::Admit = Box::new(move |t: &Tenants| admit(&owners, t));
        let served = crate::serve::serve_gated(&http, router, max_body, admit, out).await;
        stop.cancel();
        proxy.flush().await;
        served?;
        Ok(ExitCode::SUCCESS)
    })
}

/// A caller may use the proxy if its token acts for every owner of the
/// session's mandates.
fn admit(owners: &[String], t: &Tenants) -> Result<(), String> {
    match owners.iter().find(|o| !t.allows(o)) {
        None => Ok(()),
        Some(o) => Err(format!(
            "this token may act for `{}`, and this proxy's session is `{o}`'s",
            t.shown()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{Tenants, admit};

    #[test]
    fn a_token_must_act_for_the_sessions_owner() {
        let only = |n: &[&str]| Tenants::Only(n.iter().map(|s| s.to_string()).collect());
        let emma = vec!["emma".to_string()];
        assert!(admit(&emma, &Tenants::All).is_ok());
        assert!(admit(&emma, &only(&["emma", "acme"])).is_ok());
        assert!(admit(&emma, &only(&["acme"])).is_err());
        assert!(admit(&emma, &only(&["emm"])).is_err());
        assert!(admit(&[], &only(&["acme"])).is_ok());
    }
}
