//! The checks of `ipc serve --listen` in front of another service on the
//! same listener: `ipc mcp --listen` serves rmcp's Streamable HTTP behind
//! them. The same functions as the API's (`http.rs`'s `Host` check, a 421;
//! `common.rs`'s refusal of a web page, a 403 for an `Origin` or a
//! cross-site `Sec-Fetch-Site`; the bearer token, a 401, read from the
//! same token file format and reloaded the same way), the same listener
//! (`listen.rs`: the connection bound, the header and write timeouts, a
//! Unix socket of mode 0600), and one more check: the caller's token must
//! be allowed to act for the tenant(s) the service acts for (`admit`,
//! else a 403).

use super::auth::TokenFile;
use super::common::{authenticate_with, browser_refused, error};
use super::http::{Reload, host_refused, listen_and_serve};
use super::metrics::Metrics;
use super::{HttpConfig, ServeError};
use crate::gateway::Tenants;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use std::io::Write;
use std::sync::Arc;

/// Whether a caller whose token acts for these tenants may use the
/// service; `Err` says why not (the 403's message).
pub type Admit = Box<dyn Fn(&Tenants) -> Result<(), String> + Send + Sync>;

struct Gate {
    tokens: Option<TokenFile>,
    hosts: Option<Vec<String>>,
    metrics: Metrics,
    admit: Admit,
}

/// Serves `service` behind the checks of `ipc serve --listen` on
/// `config.listen` until SIGINT or SIGTERM (`listening on ...` is written
/// to `out` once bound).
pub async fn serve_gated(
    config: &HttpConfig,
    service: Router,
    admit: Admit,
    out: &mut dyn Write,
) -> Result<(), ServeError> {
    let tokens = match &config.token_file {
        Some(p) => Some(TokenFile::open(p)?),
        None => None,
    };
    listen_and_serve(config, out, move |hosts| {
        let gate = Arc::new(Gate {
            tokens,
            hosts,
            metrics: Metrics::default(),
            admit,
        });
        let reload = gate.tokens.is_some().then(|| {
            let g = gate.clone();
            Box::new(move || {
                if let Some(t) = &g.tokens {
                    t.reload();
                }
            }) as Reload
        });
        Ok((service.layer(from_fn_with_state(gate, check)), reload))
    })
    .await
}

/// `Host`, then no browser, then the token and its tenants.
async fn check(State(g): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    if let Some(r) = host_refused(g.hosts.as_deref(), &g.metrics, &req) {
        return r;
    }
    if let Some(r) = browser_refused(&g.metrics, req.headers()) {
        return r;
    }
    let caller = match authenticate_with(g.tokens.as_ref(), &g.metrics, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if let Err(why) = (g.admit)(&caller.0) {
        g.metrics.refused("tenant");
        return error(StatusCode::FORBIDDEN, why);
    }
    next.run(req).await
}
