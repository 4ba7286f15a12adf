//! The HTTP routes (axum) and the checks in front of them. Every request
//! passes the `Host` check (DNS rebinding: 421), then the checks of the
//! router its route is in, each router with its own layer (never a list of
//! exempt paths): the agent host's API (`api`: no browser — an `Origin`
//! header or a cross-site `Sec-Fetch-Site` is a 403 —, the bearer token,
//! 401, which names the tenants the caller may act for), `/metrics` (the
//! same, or open with `--public-metrics`), the approval page (`page`: only
//! this server's own origin; an approver session is the identity), the
//! owner's route (no browser; the owner's signature is the identity); and
//! on `POST` the content type (`application/json`, else 415). A route
//! added to the API router gets the token check by being there; a path no
//! router serves answers behind the API's checks. A body is read first
//! (within `--body-timeout`), then the request waits for one of
//! `--max-in-flight` slots: a slow client holds a connection, never a slot.
//!
//! A caller bound to some tenants decides only for mandates of those
//! owners (else a DENY at authn, with its receipt), reads only their
//! receipts and pending operations, and approves or declines only theirs
//! (another's is unknown to it: 404).
//!
//! - `POST /v1/decide`: a proposal or an envelope, its decision as JSON.
//! - `GET /v1/receipts?last=N` (the N newest) or `?after=SEQ&limit=N` (the
//!   N oldest after SEQ: page on with the last `seq` received; a page
//!   shorter than N is the end); N at most 1000.
//! - `GET /v1/approvals`, `POST /v1/approvals` (a signed approval by its
//!   hash), `POST /v1/approvals/decline` (a signed decline).
//! - `POST /v1/registry`: an owner's signed change to its own records.
//! - `GET /approve` and `/v1/approver/*`: the approval page (`page.rs`).
//! - `GET /v1/health`, `GET /metrics` (Prometheus text).
//!
//! Decisions go to one decider thread, which decides everything queued in
//! one store transaction (group commit); receipt reads run on tokio's
//! blocking pool.

use super::auth::TokenFile;
use super::listen::{Listener, accept_loop};
use super::metrics::Metrics;
use super::{HttpConfig, ListenAddr, ServeError};
use crate::gateway::{Decision, Gateway, GatewayError, Input};
use crate::store::ReceiptRange;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Value, json};
use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest request body accepted.
pub(crate) const MAX_BODY: usize = 1 << 20;
/// Most receipts in one answer.
pub(crate) const MAX_PAGE: usize = 1000;
/// Most decisions in one transaction of the decider.
const MAX_BATCH: usize = 256;
/// Receipts in an answer that names no count.
const DEFAULT_PAGE: usize = 50;

pub(super) struct AppState {
    pub(super) gw: Arc<Gateway>,
    mandate: Option<Value>,
    tokens: Option<TokenFile>,
    /// The `Host` values served; `None` on a Unix socket (no browser
    /// reaches one, so no rebinding).
    hosts: Option<Vec<String>>,
    public_metrics: bool,
    body_timeout: Duration,
    pub(super) metrics: Metrics,
    /// The approval page's challenges and approver sessions.
    pub(super) sessions: super::page::Sessions,
    /// Decisions (queued or running) and receipt reads at once.
    slots: tokio::sync::Semaphore,
    /// The decider thread's queue.
    decider: tokio::sync::mpsc::Sender<Job>,
}

pub(super) type Shared = Arc<AppState>;

/// Runs the HTTP server until SIGINT or SIGTERM.
pub fn serve(
    gw: crate::gateway::Gateway,
    mandate: Option<Value>,
    config: HttpConfig,
    out: &mut dyn Write,
) -> Result<(), ServeError> {
    let tokens = match &config.token_file {
        Some(p) => Some(TokenFile::open(p)?),
        None => None,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ServeError::Runtime {
            reason: e.to_string().to_lowercase(),
        })?;
    rt.block_on(async move {
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
        let gw = Arc::new(gw);
        let (jobs, queue) = tokio::sync::mpsc::channel(config.max_in_flight);
        {
            let gw = gw.clone();
            std::thread::Builder::new()
                .name("ipc-decider".into())
                .spawn(move || decider(gw, queue))
                .map_err(|e| ServeError::Runtime {
                    reason: e.to_string().to_lowercase(),
                })?;
        }
        let state = Arc::new(AppState {
            decider: jobs,
            gw,
            mandate,
            tokens,
            hosts,
            public_metrics: config.public_metrics,
            body_timeout: config.body_timeout,
            metrics: Metrics::default(),
            sessions: super::page::Sessions::default(),
            slots: tokio::sync::Semaphore::new(config.max_in_flight),
        });
        let app = router(state.clone());
        if state.tokens.is_some() {
            let st = state.clone();
            // registered now, before "listening": a SIGHUP sent the moment
            // after is a reload, never the default action (exit)
            use tokio::signal::unix::{SignalKind, signal};
            let hup = signal(SignalKind::hangup());
            tokio::spawn(async move {
                let Ok(mut hup) = hup else {
                    return;
                };
                while hup.recv().await.is_some() {
                    if let Some(t) = &st.tokens {
                        t.reload();
                        eprintln!("the token file was read again (SIGHUP)");
                    }
                }
            });
        }
        let stop = shutdown();
        let _ = writeln!(out, "listening on {}", listener.shown());
        let _ = out.flush();
        accept_loop(listener, app, &config, stop).await;
        Ok(())
    })
}

/// SIGINT or SIGTERM. The handlers are registered when this is called,
/// before the server says it is listening, not when the future is first
/// polled: the accept loop may not poll it before answering a first
/// request, and a signal sent in between took the default action (the
/// process died without removing its socket).
fn shutdown() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut t), Ok(mut i)) => {
                tokio::select! {
                    _ = t.recv() => {}
                    _ = i.recv() => {}
                }
            }
            (Ok(mut t), Err(_)) => {
                t.recv().await;
            }
            (Err(_), Ok(mut i)) => {
                i.recv().await;
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

fn router(state: Shared) -> Router {
    routes(state, Router::new())
}

/// Every router with its own checks; `extra` are more routes of the API
/// (tests add some: whatever their path, the token guards them).
fn routes(state: Shared, extra: Router<Shared>) -> Router {
    use axum::middleware::from_fn_with_state as checked;
    let api = Router::new()
        .route("/v1/decide", post(decide))
        .route("/v1/receipts", get(receipts))
        .route("/v1/approvals", get(approvals).post(submit_approval))
        .route("/v1/approvals/decline", post(decline))
        .route("/v1/health", get(health))
        .merge(extra)
        .fallback(not_found)
        .layer(checked(state.clone(), api_guard));
    let metrics = Router::new()
        .route("/metrics", get(metrics))
        .layer(checked(state.clone(), metrics_guard));
    // the page's routes carry an approver session, the registry route an
    // owner's signature: the agent host's token is no part of either
    let page = Router::new()
        .route("/approve", get(super::page::index))
        .route("/approve/app.js", get(super::page::app_js))
        .route("/approve/app.css", get(super::page::app_css))
        .route("/v1/approver/challenge", post(super::page::challenge))
        .route("/v1/approver/session", post(super::page::session))
        .route("/v1/approver/operations", get(super::page::operations))
        .route("/v1/approver/approve", post(super::page::approve))
        .route("/v1/approver/decline", post(super::page::decline))
        .route("/v1/approver/logout", post(super::page::logout))
        .layer(checked(state.clone(), page_guard));
    let owner = Router::new()
        .route("/v1/registry", post(super::owner::change))
        .layer(checked(state.clone(), owner_guard));
    Router::new()
        .merge(page)
        .merge(owner)
        .merge(metrics)
        .merge(api)
        .layer(checked(state.clone(), host_guard))
        .with_state(state)
}

/// Who is calling the agent host's API: the tenants its token may act for
/// (every tenant without a token file: a Unix socket's peer).
#[derive(Clone)]
pub(super) struct Caller(pub Arc<crate::gateway::Tenants>);

/// A JSON answer.
pub(super) fn answer(status: StatusCode, body: String) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    answer(status, json!({"error": message.into()}).to_string())
}

/// At most 100 characters of a header a caller sent, for an error message.
fn shown(v: &str) -> String {
    v.chars().take(100).collect()
}

/// The `Host` check, before any router's: a request for a name this
/// server does not serve is a 421 (DNS rebinding).
async fn host_guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let h = req.headers();
    if let Some(hosts) = &st.hosts {
        let host = h.get(header::HOST).and_then(|v| v.to_str().ok());
        let authority = req.uri().authority().map(|a| a.as_str());
        let ok = |v: &str| hosts.iter().any(|a| a.eq_ignore_ascii_case(v));
        match host {
            Some(v) if ok(v) && authority.is_none_or(ok) => {}
            other => {
                st.metrics.refused("host");
                let msg = match other {
                    Some(v) => format!(
                        "host `{}` is not served here (`--allowed-host` names the hosts a proxy may send)",
                        shown(v)
                    ),
                    None => "a request without a readable `Host` header is refused".into(),
                };
                return error(StatusCode::MISDIRECTED_REQUEST, msg);
            }
        }
    }
    next.run(req).await
}

/// The agent host's API: no browser, the bearer token (its tenants go
/// with the request as its [`Caller`]), a JSON body.
async fn api_guard(State(st): State<Shared>, mut req: Request, next: Next) -> Response {
    if let Some(r) = no_browser(&st, req.headers()) {
        return r;
    }
    let caller = match authenticate(&st, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    req.extensions_mut().insert(caller);
    json_body(&st, req, next).await
}

/// `/metrics`: as the API (an operator's token: the counters are every
/// tenant's), or open with `--public-metrics`.
async fn metrics_guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(r) = no_browser(&st, req.headers()) {
        return r;
    }
    if !st.public_metrics {
        match authenticate(&st, req.headers()) {
            Ok(Caller(t)) if *t == crate::gateway::Tenants::All => {}
            Ok(_) => {
                st.metrics.refused("tenant");
                return error(
                    StatusCode::FORBIDDEN,
                    "the counters are every tenant's: an operator's token (`*`) reads them",
                );
            }
            Err(r) => return *r,
        }
    }
    next.run(req).await
}

/// The approval page: only this server's own origin; the approver's
/// session (checked by each route) is the identity, not the bearer token.
async fn page_guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if !super::page::same_origin(req.headers()) {
        st.metrics.refused("origin");
        return error(
            StatusCode::FORBIDDEN,
            "the approval page's routes answer only this server's own page",
        );
    }
    json_body(&st, req, next).await
}

/// An owner's signed change: no browser; the signature is the identity.
async fn owner_guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(r) = no_browser(&st, req.headers()) {
        return r;
    }
    json_body(&st, req, next).await
}

/// A 403 for a request a web page sent (an `Origin` header or a
/// cross-site `Sec-Fetch-Site`).
fn no_browser(st: &AppState, h: &HeaderMap) -> Option<Response> {
    let cross_site = h
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() != b"none");
    if h.contains_key(header::ORIGIN) || cross_site {
        st.metrics.refused("origin");
        return Some(error(
            StatusCode::FORBIDDEN,
            "requests from a web page (an `Origin` or `Sec-Fetch-Site` header) are refused",
        ));
    }
    None
}

/// The caller of a bearer token, or the 401; every tenant without a
/// token file (a Unix socket: its peer is whoever may open it).
fn authenticate(st: &AppState, h: &HeaderMap) -> Result<Caller, Box<Response>> {
    let Some(tokens) = &st.tokens else {
        return Ok(Caller(Arc::new(crate::gateway::Tenants::All)));
    };
    match bearer(h).and_then(|t| tokens.check(t)) {
        Some(t) => Ok(Caller(t)),
        None => {
            st.metrics.refused("auth");
            let mut r = error(
                StatusCode::UNAUTHORIZED,
                "a valid `Authorization: Bearer TOKEN` header is required",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            Err(Box::new(r))
        }
    }
}

/// On `POST`, a 415 unless the body is sent as JSON.
async fn json_body(st: &AppState, req: Request, next: Next) -> Response {
    if req.method() == Method::POST && !is_json(req.headers()) {
        st.metrics.refused("content_type");
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the body must be sent as `Content-Type: application/json`",
        );
    }
    next.run(req).await
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(h: &HeaderMap) -> Option<&[u8]> {
    let v = h.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, token) = v.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

/// `application/json`, with or without parameters.
fn is_json(h: &HeaderMap) -> bool {
    h.get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

/// The request body as text, read within the body deadline and the size
/// bound; or the answer that says why not.
pub(super) async fn read_text(st: &AppState, body: Body) -> Result<String, Response> {
    let read = tokio::time::timeout(st.body_timeout, Limited::new(body, MAX_BODY).collect()).await;
    let bytes = match read {
        Err(_) => {
            st.metrics.refused("body_timeout");
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time",
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Err(r);
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            st.metrics.refused("body_too_large");
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body too large (at most {MAX_BODY} bytes)"),
            ));
        }
        Ok(Err(e)) => {
            return Err(error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {}", e.to_string().to_lowercase()),
            ));
        }
        Ok(Ok(c)) => c.to_bytes(),
    };
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text"));
    };
    Ok(text.to_string())
}

async fn decide(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    body: Body,
) -> Response {
    let text = match read_text(&st, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let input = crate::gateway::envelope::parse_line(&text, st.mandate.as_ref());
    let start = Instant::now();
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if st
        .decider
        .send(Job {
            input,
            tenants,
            reply,
        })
        .await
        .is_err()
    {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    }
    match answer.await {
        Ok(Ok(d)) => {
            st.metrics.decision(&d, start.elapsed());
            json_ok(&st, &d)
        }
        Ok(Err(Failed { store, message })) => {
            if store {
                st.metrics.store_error();
            } else {
                st.metrics.error();
            }
            eprintln!("error: {message}");
            error(StatusCode::INTERNAL_SERVER_ERROR, message)
        }
        Err(_) => {
            st.metrics.error();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the decision failed unexpectedly: nothing was decided",
            )
        }
    }
}

/// A decision to take, and where its answer goes.
struct Job {
    input: Input,
    /// Whom the caller may act for.
    tenants: Arc<crate::gateway::Tenants>,
    reply: tokio::sync::oneshot::Sender<Result<Decision, Failed>>,
}

/// Why a batch has no decisions: nothing of it was committed.
struct Failed {
    store: bool,
    message: String,
}

/// The decider thread: takes every decision waiting (up to `MAX_BATCH`)
/// and decides them in order in one store transaction (group commit, as
/// `ipc run` does), then answers each. One thread, no lock handoffs
/// between callers: the store sees one body per batch.
fn decider(gw: Arc<Gateway>, mut jobs: tokio::sync::mpsc::Receiver<Job>) {
    while let Some(first) = jobs.blocking_recv() {
        let mut inputs = vec![(first.input, first.tenants)];
        let mut replies = vec![first.reply];
        while inputs.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(j) => {
                    inputs.push((j.input, j.tenants));
                    replies.push(j.reply);
                }
                Err(_) => break,
            }
        }
        let batch: Vec<(&Input, &crate::gateway::Tenants)> =
            inputs.iter().map(|(i, t)| (i, &**t)).collect();
        let decided =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gw.decide_batch_as(&batch)));
        match decided {
            Ok(Ok(ds)) if ds.len() == replies.len() => {
                for (r, d) in replies.into_iter().zip(ds) {
                    let _ = r.send(Ok(d));
                }
            }
            other => {
                let (store, message) = match other {
                    Ok(Err(e)) => (matches!(e, GatewayError::Store(_)), e.to_string()),
                    Ok(Ok(_)) => (false, "a batch came back short: nothing was decided".into()),
                    Err(_) => (
                        false,
                        "the decision failed unexpectedly: nothing was decided".into(),
                    ),
                };
                for r in replies {
                    let _ = r.send(Err(Failed {
                        store,
                        message: message.clone(),
                    }));
                }
            }
        }
    }
}

/// The request body parsed strictly (no duplicate keys) into `T`, or the
/// answer that says why not (400 for a body that is not a `T`).
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    st: &AppState,
    body: Body,
) -> Result<T, Response> {
    let text = read_text(st, body).await?;
    crate::gateway::json::parse_strict(&text)
        .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string().to_lowercase()))
        .map_err(|e| error(StatusCode::BAD_REQUEST, format!("invalid body: {e}")))
}

/// A 200 with the value as JSON, or a 500 that says why it has none.
pub(super) fn json_ok<T: serde::Serialize + ?Sized>(st: &AppState, v: &T) -> Response {
    match serde_json::to_string(v) {
        Ok(body) => answer(StatusCode::OK, body),
        Err(e) => {
            st.metrics.error();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the answer: {e}"),
            )
        }
    }
}

/// Which receipts a request asks for: at most [`MAX_PAGE`], read from the
/// store as one window ([`Store::receipts_range`]), never the whole chain.
fn page(query: &str) -> Result<ReceiptRange, String> {
    let (mut last, mut after, mut limit) = (None, None, None);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let n: u64 = v
            .parse()
            .map_err(|_| format!("`{k}` must be a whole number, not `{}`", shown(v)))?;
        let slot = match k {
            "last" => &mut last,
            "after" => &mut after,
            "limit" => &mut limit,
            _ => {
                return Err(format!(
                    "unknown parameter `{}` (`last`, or `after` and `limit`)",
                    shown(k)
                ));
            }
        };
        if slot.replace(n).is_some() {
            return Err(format!("`{k}` is given twice"));
        }
    }
    let count = |n: Option<u64>, name: &str| -> Result<usize, String> {
        match n {
            None => Ok(DEFAULT_PAGE),
            Some(n) if n as usize > MAX_PAGE || n == 0 => {
                Err(format!("`{name}` is between 1 and {MAX_PAGE}, not `{n}`"))
            }
            Some(n) => Ok(n as usize),
        }
    };
    match (last, after, limit) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            Err("`last` stands alone: page with `after` and `limit`".into())
        }
        (l, None, None) => Ok(ReceiptRange::Last {
            limit: count(l, "last")?,
        }),
        (None, a, l) => Ok(ReceiptRange::After {
            seq: a.unwrap_or(0),
            limit: count(l, "limit")?,
        }),
    }
}

/// `GET /v1/receipts`: a page of the chain. A caller bound to some
/// tenants gets, of the receipts the page spans, those of its tenants (a
/// receipt's tenant: its mandate's owner, or the `owner` of an approval
/// or registry receipt; a receipt of none — a proposal without a valid
/// mandate, an outcome — is an operator's only), and the header
/// `Ipc-Scanned-Through: SEQ` (the last receipt the page spanned: page
/// on with `after=SEQ`).
async fn receipts(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    uri: Uri,
) -> Response {
    let page = match page(uri.query().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    if *tenants == crate::gateway::Tenants::All {
        return read_store(&st, "the receipts", move |gw| {
            gw.store().receipts_range(page)
        })
        .await;
    }
    let read = blocking(&st, "the receipts", move |gw| {
        gw.store().receipts_range(page).map(|rs| {
            let last = rs.last().map(|r| r.seq);
            let mine: Vec<_> = rs
                .into_iter()
                .filter(|r| receipt_tenant(&r.body).is_some_and(|t| tenants.allows(t)))
                .collect();
            (last, mine)
        })
    })
    .await;
    match read {
        Ok((last, mine)) => {
            let mut r = json_ok(&st, &mine);
            if let Some(seq) = last
                && let Ok(v) = HeaderValue::from_str(&seq.to_string())
            {
                r.headers_mut().insert("ipc-scanned-through", v);
            }
            r
        }
        Err(r) => r,
    }
}

/// The tenant a receipt belongs to: its mandate's owner (a decision), or
/// its `owner` (an approval, a registry change).
pub(crate) fn receipt_tenant(body: &Value) -> Option<&str> {
    body.get("mandate")
        .and_then(|m| m.get("owner"))
        .or_else(|| body.get("owner"))
        .and_then(Value::as_str)
}

/// Runs a read of the store off the async workers (the store is blocking)
/// and answers with its result as JSON; a store error is a counted 500.
pub(super) async fn read_store<T: serde::Serialize + Send + 'static>(
    st: &Shared,
    what: &str,
    read: impl FnOnce(&crate::gateway::Gateway) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Response {
    match blocking(st, what, read).await {
        Ok(v) => json_ok(st, &v),
        Err(r) => r,
    }
}

/// A read of the store off the async workers, or the counted 500.
async fn blocking<T: Send + 'static>(
    st: &Shared,
    what: &str,
    read: impl FnOnce(&crate::gateway::Gateway) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Result<T, Response> {
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || read(&gw)).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            st.metrics.store_error();
            Err(error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
        }
        Err(_) => {
            st.metrics.error();
            Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read {what}"),
            ))
        }
    }
}

/// `GET /v1/approvals[?for=NAME]`: the operations waiting for approval, as
/// the store holds them (never the agent's copy), of the caller's tenants.
async fn approvals(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    uri: Uri,
) -> Response {
    let mut for_whom: Option<String> = None;
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some(("for", v)) if !v.is_empty() => for_whom = Some(v.to_string()),
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "unknown parameter `{}`: give `for=NAME` or nothing",
                        shown(pair)
                    ),
                );
            }
        }
    }
    read_store(&st, "the approvals", move |gw| {
        let now = gw.now()?;
        gw.pending_ops_of(&tenants).map(|ops| {
            let ops: Vec<_> = ops
                .into_iter()
                .filter(|(op, executed)| op.status(*executed, now) == "waiting")
                .filter(|(op, _)| {
                    for_whom
                        .as_deref()
                        .is_none_or(|w| op.approvable_by(gw.world(), w))
                })
                .map(|(op, _)| op)
                .collect();
            json!({"operations": ops})
        })
    })
    .await
}

/// A pending-operation refusal as an HTTP answer: 404 for an unknown hash,
/// 409 for one no longer approvable, 400 for a bad approval, 500 for the
/// store.
pub(super) fn pending_error(st: &AppState, e: crate::gateway::pending::PendingError) -> Response {
    use crate::gateway::pending::PendingError as P;
    let status = match &e {
        P::Unknown { .. } => StatusCode::NOT_FOUND,
        P::NotApprover { .. } => StatusCode::FORBIDDEN,
        P::Expired { .. } | P::Executed { .. } | P::Declined { .. } => StatusCode::CONFLICT,
        P::Invalid { .. } => StatusCode::BAD_REQUEST,
        P::Render(_) => StatusCode::CONFLICT,
        P::Store(_) => {
            st.metrics.store_error();
            StatusCode::INTERNAL_SERVER_ERROR
        }
        P::Clock(_) => {
            st.metrics.error();
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    coded_error(status, &e)
}

/// A refusal with its diagnostic code: `{"ok": false, "code", "error"}`.
pub(super) fn coded_error(status: StatusCode, e: &dyn miette::Diagnostic) -> Response {
    let code = e.code().map(|c| c.to_string());
    answer(
        status,
        json!({"ok": false, "code": code, "error": e.to_string()}).to_string(),
    )
}

/// `POST /v1/approvals`: a signed approval, submitted by the operation hash
/// it names; kept with the pending operation (with a receipt) and counted
/// when the operation is proposed again.
async fn submit_approval(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    body: Body,
) -> Response {
    let signed: crate::gateway::approval::SignedApproval = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    submit_signed(&st, signed, &tenants).await
}

/// Refuses an operation of a tenant the caller may not act for as if the
/// store did not know it (nothing of another tenant's shows, not even
/// that it exists).
fn of_tenants(
    gw: &Gateway,
    hash: &str,
    tenants: &crate::gateway::Tenants,
) -> Result<(), crate::gateway::pending::PendingError> {
    match gw.pending_op(hash) {
        Ok(op) if !tenants.allows(&op.owner) => {
            Err(crate::gateway::pending::PendingError::Unknown { hash: hash.into() })
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Records a signed approval for a caller acting for `tenants`; the
/// answer says how it went.
pub(super) async fn submit_signed(
    st: &Shared,
    signed: crate::gateway::approval::SignedApproval,
    tenants: &Arc<crate::gateway::Tenants>,
) -> Response {
    let gw = st.gw.clone();
    let tenants = tenants.clone();
    match tokio::task::spawn_blocking(move || {
        of_tenants(&gw, &signed.approval.operation_hash, &tenants)?;
        gw.submit_approval(&signed)
    })
    .await
    {
        Ok(Ok(r)) => json_ok(st, &json!({"ok": true, "receipt": r})),
        Ok(Err(e)) => pending_error(st, e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the approval failed"),
    }
}

/// `POST /v1/approvals/decline`: a signed decline (`{"decline":
/// {"approver", "operation_hash", "expires_at", "verdict": "decline"},
/// "signature"}`), recorded with a receipt; the operation proposed again
/// is then a DENY. The agent host's token alone declines nothing.
async fn decline(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    body: Body,
) -> Response {
    match read_json(&st, body).await {
        Ok(signed) => decline_signed(&st, signed, &tenants).await,
        Err(r) => r,
    }
}

/// Records a signed decline for a caller acting for `tenants`; the answer
/// says how it went.
pub(super) async fn decline_signed(
    st: &Shared,
    signed: crate::gateway::approval::SignedDecline,
    tenants: &Arc<crate::gateway::Tenants>,
) -> Response {
    let gw = st.gw.clone();
    let tenants = tenants.clone();
    match tokio::task::spawn_blocking(move || {
        of_tenants(&gw, &signed.decline.operation_hash, &tenants)?;
        gw.decline_signed(&signed)
    })
    .await
    {
        Ok(Ok(r)) => json_ok(st, &json!({"ok": true, "receipt": r})),
        Ok(Err(e)) => pending_error(st, e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the decline failed"),
    }
}

async fn health(State(st): State<Shared>) -> Response {
    answer(
        StatusCode::OK,
        json!({"ok": true, "bundle": st.gw.bundle_hash()}).to_string(),
    )
}

async fn metrics(State(st): State<Shared>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        st.metrics.render(st.gw.store().optimistic_counts()),
    )
        .into_response()
}

async fn not_found(uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no route `{}`", shown(uri.path())),
    )
}

#[cfg(test)]
mod tests {
    use super::{AppState, Metrics, allowed_hosts, page, receipts};
    use crate::gateway::testkit::TestWorld;
    use crate::store::ReceiptRange::{After, Last};
    use crate::store::memory::MemoryStore;
    use crate::store::{ReceiptRange, ReceiptRecord, Snapshot, Store, StoreError, Tx, TxFn};
    use axum::extract::State;
    use axum::http::{StatusCode, Uri};
    use http_body_util::BodyExt;
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn pages() {
        assert_eq!(page(""), Ok(Last { limit: 50 }));
        assert_eq!(page("last=3"), Ok(Last { limit: 3 }));
        assert_eq!(page("after=10"), Ok(After { seq: 10, limit: 50 }));
        assert_eq!(
            page("after=10&limit=1000"),
            Ok(After {
                seq: 10,
                limit: 1000
            })
        );
        assert_eq!(page("limit=2"), Ok(After { seq: 0, limit: 2 }));
        for bad in [
            "last=two",
            "last=1001",
            "last=0",
            "last=1&after=2",
            "after=1&after=2",
            "x=1",
        ] {
            assert!(page(bad).is_err(), "{bad}");
        }
    }

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
            sessions: super::super::page::Sessions::default(),
            slots: tokio::sync::Semaphore::new(4),
            decider,
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
        let app = super::routes(state, more);
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

    /// A store that refuses to hand over the whole chain (or a snapshot
    /// of it) and counts the receipt rows it reads.
    struct Counting {
        inner: MemoryStore,
        rows: AtomicUsize,
    }

    impl Store for Counting {
        fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
            self.inner.transaction(f)
        }
        fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
            Err(StoreError::Backend("the whole chain was read".into()))
        }
        fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
            let page = self.inner.receipts_range(range)?;
            self.rows.fetch_add(page.len(), Ordering::SeqCst);
            Ok(page)
        }
        fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
            self.inner.head()
        }
        fn snapshot(&self) -> Result<Snapshot, StoreError> {
            Err(StoreError::Backend("the whole chain was read".into()))
        }
    }

    /// `GET /v1/receipts` on a chain of 5,000 receipts reads one page from
    /// the store, never the chain: the rows read are the rows answered.
    #[test]
    fn a_receipts_page_reads_only_that_page_from_the_store() {
        const CHAIN: u64 = 5000;
        let store = Arc::new(Counting {
            inner: MemoryStore::new(),
            rows: AtomicUsize::new(0),
        });
        let mut append = |t: &mut dyn Tx| {
            for i in 0..CHAIN {
                t.append_receipt(&json!({"decision": "DENY", "n": i}))?;
            }
            Ok(Value::Null)
        };
        store.transaction(&mut append).unwrap();
        let w = TestWorld::new();
        let (decider, _queue) = tokio::sync::mpsc::channel(1);
        let state = Arc::new(AppState {
            gw: Arc::new(w.gateway_with(store.clone())),
            mandate: None,
            tokens: None,
            hosts: None,
            public_metrics: false,
            body_timeout: Duration::from_secs(5),
            metrics: Metrics::default(),
            sessions: super::super::page::Sessions::default(),
            slots: tokio::sync::Semaphore::new(4),
            decider,
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let get = |query: &str| -> Vec<u64> {
            store.rows.store(0, Ordering::SeqCst);
            let uri: Uri = format!("/v1/receipts?{query}").parse().unwrap();
            let all = super::Caller(Arc::new(crate::gateway::Tenants::All));
            let resp = rt.block_on(receipts(State(state.clone()), axum::Extension(all), uri));
            assert_eq!(resp.status(), StatusCode::OK, "{query}");
            let body = rt.block_on(resp.into_body().collect()).unwrap().to_bytes();
            let page: Vec<Value> = serde_json::from_slice(&body).unwrap();
            let seqs: Vec<u64> = page.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
            assert_eq!(store.rows.load(Ordering::SeqCst), seqs.len(), "{query}");
            seqs
        };
        assert_eq!(get("after=10&limit=1000"), (11..=1010).collect::<Vec<_>>());
        assert_eq!(get("last=3"), [CHAIN - 2, CHAIN - 1, CHAIN]);
        assert_eq!(get(""), (CHAIN - 49..=CHAIN).collect::<Vec<_>>());
        assert_eq!(get(&format!("after={}", CHAIN - 1)), [CHAIN]);
        assert!(get(&format!("after={CHAIN}&limit=1000")).is_empty());
    }
}
