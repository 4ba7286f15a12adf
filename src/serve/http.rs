//! The service's router: the approval page's, the owner's, `/metrics` and
//! the API's routers (`page.rs`, `owner.rs`, `api.rs`), each behind its
//! own layer of checks (never a list of exempt paths), all behind the
//! `Host` check (DNS rebinding: 421); and the server that runs it until
//! SIGINT or SIGTERM.
//!
//! The checks: the agent host's API (no browser — an `Origin` header or a
//! cross-site `Sec-Fetch-Site` is a 403 —, the bearer token, 401, which
//! names the tenants the caller may act for), `/metrics` (the same, or
//! open with `--public-metrics`), the approval page (only this server's
//! own origin; an approver session is the identity), the owner's route (no
//! browser; the owner's signature is the identity); and on `POST` the
//! content type (`application/json`, else 415). A body is read first
//! (within `--body-timeout`), then the request waits for one of
//! `--max-in-flight` slots: a slow client holds a connection, never a slot.
//!
//! A caller bound to some tenants decides only for mandates of those
//! owners (else a DENY at authn, with its receipt), reads only their
//! receipts and pending operations, and approves or declines only theirs
//! (another's is unknown to it: 404).
//!
//! The routes are those of [`routes`], documented in `docs/openapi.json`
//! (served at `GET /v1/openapi.json`).

use super::auth::TokenFile;
use super::common::{AppState, Deciders, Shared, error, shown};
use super::listen::{Listener, accept_loop};
use super::metrics::Metrics;
use super::{HttpConfig, ListenAddr, ServeError};
use crate::base::log;
use crate::gateway::Gateway;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::Response;
use serde_json::Value;
use std::io::Write;
use std::sync::Arc;

/// The HTTP service on one gateway: its state (the decider thread, the
/// token file, the counters, the approval page's sessions) and its router.
pub struct App {
    state: Shared,
    page: super::page::Page,
}

impl App {
    /// The service for `gw`; `mandate` goes with inputs that carry none,
    /// `hosts` are the `Host` values served (`None`: any, as on a Unix
    /// socket). Starts the decider thread, which ends with the last
    /// router.
    pub fn new(
        gw: impl Into<Arc<Gateway>>,
        mandate: Option<Value>,
        config: &HttpConfig,
        hosts: Option<Vec<String>>,
    ) -> Result<App, ServeError> {
        let tokens = match &config.token_file {
            Some(p) => Some(TokenFile::open(p)?),
            None => None,
        };
        let gw: Arc<Gateway> = gw.into();
        // one decider thread, or one per shard: each shard's batches its
        // own, so that one shard's failover never holds up another's
        let n = gw.shard_set().map_or(1, |s| s.shards.len().max(1));
        let mut queues = Vec::with_capacity(n);
        for k in 0..n {
            let (jobs, queue) = tokio::sync::mpsc::channel(config.max_in_flight);
            let gw = gw.clone();
            std::thread::Builder::new()
                .name(if n == 1 {
                    "ipc-decider".into()
                } else {
                    format!("ipc-decider-{k}")
                })
                .spawn(move || super::api::decider(gw, queue))
                .map_err(|e| ServeError::Runtime {
                    reason: e.to_string().to_lowercase(),
                })?;
            queues.push(jobs);
        }
        let decider = match gw.shard_set() {
            Some(_) => Deciders::sharded(queues),
            None => queues.pop().map(Deciders::from),
        }
        .ok_or_else(|| ServeError::Runtime {
            reason: "no decider thread".into(),
        })?;
        let notify = crate::gateway::notify::start(gw.clone())?;
        let state = Arc::new(AppState {
            notify,
            decider,
            gw,
            mandate,
            tokens,
            hosts,
            public_metrics: config.public_metrics,
            body_timeout: config.body_timeout,
            metrics: Metrics::default(),
            slots: tokio::sync::Semaphore::new(config.max_in_flight),
        });
        let page = super::page::Page::new(state.clone());
        Ok(App { state, page })
    }

    /// The service's router.
    pub fn router(&self) -> Router {
        compose(&self.state, self.page.clone(), Router::new())
    }
}

/// Every route the service answers, by method and path: those of its
/// routers, which are built from these lists only.
pub fn routes() -> Vec<(Method, &'static str)> {
    let api = super::api::routes().into_iter().map(|r| (r.method, r.path));
    let metrics = super::api::metrics_routes()
        .into_iter()
        .map(|r| (r.method, r.path));
    let page = super::page::routes()
        .into_iter()
        .map(|r| (r.method, r.path));
    let owner = super::owner::routes()
        .into_iter()
        .map(|r| (r.method, r.path));
    api.chain(metrics).chain(page).chain(owner).collect()
}

/// Runs the HTTP server until SIGINT or SIGTERM; `store` names the
/// gateway's store (its password hidden) in the start-up line.
pub fn serve(
    gw: Gateway,
    mandate: Option<Value>,
    config: HttpConfig,
    store: &str,
    out: &mut dyn Write,
) -> Result<(), ServeError> {
    // Held here, declared before the runtime so that it outlives it: the
    // gateway's last reference is never dropped inside the runtime, where
    // a PostgreSQL store's client, closing its connection on a runtime of
    // its own, would panic (a start-up error after the store is open: a
    // port taken, an unusable token file).
    let gw = Arc::new(gw);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Runtime {
            reason: e.to_string().to_lowercase(),
        })?;
    let app_gw = gw.clone();
    let signal = rt.block_on(listen_and_serve(&config, out, |hosts, shown| {
        started(&app_gw, store, shown, &config.allowed_hosts);
        let app = App::new(app_gw, mandate, &config, hosts)?;
        let state = app.state.clone();
        let reload = state.tokens.is_some().then(|| {
            Box::new(move || {
                if let Some(t) = &state.tokens {
                    t.reload();
                }
            }) as Reload
        });
        Ok((app.router(), reload))
    }))?;
    log::line(
        log::Level::Info,
        "stopped",
        &format!("stopped ({signal}): no more requests are taken"),
        &[("signal", Value::from(signal))],
    );
    Ok(())
}

/// The start-up line: the store, the bundle's hash, where the approval
/// page is (`shown`: where the server listens).
fn started(gw: &Gateway, store: &str, shown: &str, allowed_hosts: &[String]) {
    let page = match allowed_hosts.first() {
        // behind a proxy: the page is where the proxy serves that name
        Some(h) => format!("https://{h}/approve"),
        None if shown.starts_with("http") => format!("{shown}/approve"),
        None => format!("/approve through a proxy to {shown}"),
    };
    log::line(
        log::Level::Info,
        "started",
        &format!(
            "serving bundle {} on {shown}; store: {store}; approval page: {page}",
            gw.bundle_hash()
        ),
        &[
            ("bundle", Value::from(gw.bundle_hash())),
            ("listen", Value::from(shown)),
            ("store", Value::from(store)),
            ("approval_page", Value::from(page.as_str())),
        ],
    );
}

/// Reads the token file again (on SIGHUP).
pub(super) type Reload = Box<dyn Fn() + Send + Sync>;

/// Binds `config.listen`, builds the app for the `Host` values served
/// there (`None` on a Unix socket) and the address shown (`http://IP:PORT`
/// or `unix:PATH`), reloads its token file on SIGHUP, and serves it until
/// SIGINT or SIGTERM, whose name it returns: `ipc serve --listen` and
/// `ipc mcp --listen` alike.
pub(super) async fn listen_and_serve(
    config: &HttpConfig,
    out: &mut dyn Write,
    build: impl FnOnce(Option<Vec<String>>, &str) -> Result<(Router, Option<Reload>), ServeError>,
) -> Result<&'static str, ServeError> {
    let listener = Listener::bind(&config.listen).await?;
    let hosts = match (&config.listen, &listener) {
        (ListenAddr::Tcp(_), Listener::Tcp(l)) => {
            let bound = l.local_addr().map_err(|e| ServeError::Bind {
                addr: listener.shown(),
                reason: e.to_string().to_lowercase(),
            })?;
            Some(allowed_hosts(&config.allowed_hosts, bound))
        }
        _ => None,
    };
    let (app, reload) = build(hosts, &listener.shown())?;
    if let Some(reload) = reload {
        // registered now, before "listening": a SIGHUP sent the moment
        // after is a reload, never the default action (exit)
        use tokio::signal::unix::{SignalKind, signal};
        let hup = signal(SignalKind::hangup());
        tokio::spawn(async move {
            let Ok(mut hup) = hup else {
                return;
            };
            while hup.recv().await.is_some() {
                reload();
                log::info("reload", "the token file was read again (SIGHUP)");
            }
        });
    }
    let signal = std::sync::Arc::new(std::sync::OnceLock::new());
    let stop = {
        let (stop, signal) = (shutdown(), signal.clone());
        async move {
            let _ = signal.set(stop.await);
        }
    };
    let _ = writeln!(out, "listening on {}", listener.shown());
    let _ = out.flush();
    accept_loop(listener, app, config, stop).await;
    Ok(signal.get().copied().unwrap_or("a signal"))
}

/// SIGINT or SIGTERM, by name. The handlers are registered when this is called,
/// before the server says it is listening, not when the future is first
/// polled: the accept loop may not poll it before answering a first
/// request, and a signal sent in between took the default action (the
/// process died without removing its socket).
fn shutdown() -> impl std::future::Future<Output = &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! {
                    _ = t.recv() => "SIGTERM",
                    _ = i.recv() => "SIGINT",
                }
            }
            (Ok(mut t), Err(_)) => {
                t.recv().await;
                "SIGTERM"
            }
            (Err(_), Ok(mut i)) => {
                i.recv().await;
                "SIGINT"
            }
            // no handler could be installed: the signals keep their
            // default action, which ends the process
            (Err(_), Err(_)) => std::future::pending().await,
        }
    }
}

/// The `Host` values accepted: `--allowed-host` as given, else the
/// loopback names and the bound address, each with or without the port.
fn allowed_hosts(given: &[String], bound: std::net::SocketAddr) -> Vec<String> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let port = bound.port();
    let ip = match bound.ip() {
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        v4 => v4.to_string(),
    };
    let mut names = vec!["localhost".to_string(), "127.0.0.1".into(), "[::1]".into()];
    if !names.contains(&ip) {
        names.push(ip);
    }
    names
        .iter()
        .flat_map(|n| [n.clone(), format!("{n}:{port}")])
        .collect()
}

/// The routers, each behind its own checks, behind the `Host` check;
/// `extra` are more routes of the API.
fn compose(state: &Shared, page: super::page::Page, extra: Router<Shared>) -> Router {
    Router::new()
        .merge(super::page::router(page))
        .merge(super::owner::router(state))
        .merge(super::api::metrics_router(state))
        .merge(super::api::router(state, extra))
        .layer(from_fn_with_state(state.clone(), host_guard))
        .layer(from_fn(log_request))
}

/// With `--log-format json`: one line per request, refused ones included
/// (method, path without its query, status, milliseconds), never a header
/// or a body.
async fn log_request(req: Request, next: Next) -> Response {
    if log::format() != log::Format::Json {
        return next.run(req).await;
    }
    let method = req.method().to_string();
    let path: String = req.uri().path().chars().take(200).collect();
    let start = std::time::Instant::now();
    let resp = next.run(req).await;
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    log::line(
        log::Level::Event,
        "request",
        "",
        &[
            ("method", Value::from(method)),
            ("path", Value::from(path)),
            ("status", Value::from(resp.status().as_u16())),
            ("duration_ms", Value::from((ms * 1000.0).round() / 1000.0)),
        ],
    );
    resp
}

/// The `Host` check, before any router's: a request for a name this
/// server does not serve is a 421 (DNS rebinding).
async fn host_guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(refused) = host_refused(st.hosts.as_deref(), &st.metrics, &req) {
        return refused;
    }
    next.run(req).await
}

/// The 421 of [`host_guard`] for a request whose `Host` (or absolute URI's
/// authority) is not among `hosts` (`None`: any is served), counted in
/// `metrics`.
pub(super) fn host_refused(
    hosts: Option<&[String]>,
    metrics: &super::metrics::Metrics,
    req: &Request,
) -> Option<Response> {
    let h = req.headers();
    if let Some(hosts) = hosts {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        let authority = req.uri().authority().map(|a| a.as_str());
        let ok = |v: &str| hosts.iter().any(|a| a.eq_ignore_ascii_case(v));
        match host {
            Some(v) if ok(v) && authority.is_none_or(ok) => {}
            other => {
                metrics.refused("host");
                let msg = match other {
                    Some(v) => format!(
                        "host `{}` is not served here (`--allowed-host` names the hosts a proxy may send)",
                        shown(v)
                    ),
                    None => "a request without a readable `Host` header is refused".into(),
                };
                return Some(error(StatusCode::MISDIRECTED_REQUEST, msg));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::{AppState, Metrics, allowed_hosts};
    use crate::gateway::testkit::TestWorld;
    use axum::http::StatusCode;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn hosts() {
        let h = allowed_hosts(&[], "127.0.0.1:8787".parse().unwrap());
        for ok in [
            "localhost",
            "localhost:8787",
            "127.0.0.1:8787",
            "[::1]:8787",
        ] {
            assert!(h.iter().any(|a| a == ok), "{ok}");
        }
        assert!(!h.iter().any(|a| a == "localhost:8788"));
        let given = vec!["gw.example.com".to_string()];
        assert_eq!(allowed_hosts(&given, "0.0.0.0:1".parse().unwrap()), given);
    }

    /// Issue #21, item 7: authentication was skipped for any path under
    /// `/approve/`, `/v1/approver/` or `/v1/registry`; a route added there
    /// by mistake was open. Now a route of the API router asks for the
    /// token whatever its path, and a path no router serves answers behind
    /// the API's checks.
    #[test]
    fn a_route_under_a_formerly_exempt_path_needs_the_token() {
        use axum::routing::get;
        let dir = tempfile::tempdir().unwrap();
        let tf = dir.path().join("token");
        std::fs::write(&tf, "router-test-token-0123456789\n").unwrap();
        let w = TestWorld::new();
        let (decider, _queue) = tokio::sync::mpsc::channel(1);
        let state = Arc::new(AppState {
            gw: Arc::new(w.gateway()),
            mandate: None,
            tokens: Some(super::TokenFile::open(&tf).unwrap()),
            hosts: None,
            public_metrics: false,
            body_timeout: Duration::from_secs(5),
            metrics: Metrics::default(),
            slots: tokio::sync::Semaphore::new(4),
            notify: None,
            decider: decider.into(),
        });
        let extra = [
            "/v1/approver/secret",
            "/approve/secret",
            "/v1/registry/secret",
            "/metrics/secret",
        ];
        let mut more = axum::Router::new();
        for p in extra {
            more = more.route(p, get(|| async { "the secret" }));
        }
        let page = super::super::page::Page::new(state.clone());
        let app = super::compose(&state, page, more);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let call = |path: &str, token: Option<&str>| -> StatusCode {
            use hyper::service::Service;
            let mut req = axum::http::Request::get(path);
            if let Some(t) = token {
                req = req.header("authorization", format!("Bearer {t}"));
            }
            let req = req.body(axum::body::Body::empty()).unwrap();
            let svc = hyper_util::service::TowerToHyperService::new(app.clone());
            rt.block_on(svc.call(req)).unwrap().status()
        };
        for p in extra {
            assert_eq!(call(p, None), StatusCode::UNAUTHORIZED, "{p}");
            assert_eq!(
                call(p, Some("not-the-token-0123456789")),
                StatusCode::UNAUTHORIZED,
                "{p}"
            );
            assert_eq!(
                call(p, Some("router-test-token-0123456789")),
                StatusCode::OK,
                "{p}"
            );
        }
        // what no router serves: behind the token too
        assert_eq!(call("/v1/approver/nothing", None), StatusCode::UNAUTHORIZED);
        assert_eq!(call("/approve/nothing", None), StatusCode::UNAUTHORIZED);
        assert_eq!(
            call("/approve/nothing", Some("router-test-token-0123456789")),
            StatusCode::NOT_FOUND
        );
        // the page itself and its API stay open to the page
        assert_eq!(call("/approve", None), StatusCode::OK);
        assert_eq!(call("/metrics", None), StatusCode::UNAUTHORIZED);
        assert_eq!(
            call("/metrics", Some("router-test-token-0123456789")),
            StatusCode::OK
        );
    }
}
