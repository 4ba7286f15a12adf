//! The HTTP routes (axum) and the checks in front of them. Every request
//! passes, in order: the `Host` check (DNS rebinding: 421), the browser
//! check (an `Origin` header or a cross-site `Sec-Fetch-Site`: 403), the
//! bearer token (401), and on `POST` the content type (`application/json`,
//! else 415). A body is read first (within `--body-timeout`), then the
//! request waits for one of `--max-in-flight` slots: a slow client holds a
//! connection, never a slot.
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
pub(crate) fn serve(
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
    Router::new()
        .route("/v1/decide", post(decide))
        .route("/v1/receipts", get(receipts))
        .route("/v1/approvals", get(approvals).post(submit_approval))
        .route("/v1/approvals/decline", post(decline))
        .route("/v1/registry", post(super::owner::change))
        .route("/approve", get(super::page::index))
        .route("/approve/app.js", get(super::page::app_js))
        .route("/approve/app.css", get(super::page::app_css))
        .route("/v1/approver/challenge", post(super::page::challenge))
        .route("/v1/approver/session", post(super::page::session))
        .route("/v1/approver/operations", get(super::page::operations))
        .route("/v1/approver/approve", post(super::page::approve))
        .route("/v1/approver/decline", post(super::page::decline))
        .route("/v1/approver/logout", post(super::page::logout))
        .route("/v1/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

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

async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
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
    let path = req.uri().path();
    let page = super::page::is_page_route(path);
    let cross_site = h
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() != b"none");
    if page && !super::page::same_origin(h) {
        st.metrics.refused("origin");
        return error(
            StatusCode::FORBIDDEN,
            "the approval page's routes answer only this server's own page",
        );
    }
    if !page && (h.contains_key(header::ORIGIN) || cross_site) {
        st.metrics.refused("origin");
        return error(
            StatusCode::FORBIDDEN,
            "requests from a web page (an `Origin` or `Sec-Fetch-Site` header) are refused",
        );
    }
    // the page's routes carry an approver session, the registry route an
    // owner's signature: the agent host's token is no part of either
    let open = page || path == "/v1/registry" || (st.public_metrics && path == "/metrics");
    if let Some(tokens) = &st.tokens
        && !open
        && !bearer(h).is_some_and(|t| tokens.check(t))
    {
        st.metrics.refused("auth");
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "a valid `Authorization: Bearer TOKEN` header is required",
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return r;
    }
    if req.method() == Method::POST && !is_json(h) {
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

async fn decide(State(st): State<Shared>, body: Body) -> Response {
    let text = match read_text(&st, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    let input = super::parse_line(&text, st.mandate.as_ref());
    let start = Instant::now();
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if st.decider.send(Job { input, reply }).await.is_err() {
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
        let mut inputs = vec![first.input];
        let mut replies = vec![first.reply];
        while inputs.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(j) => {
                    inputs.push(j.input);
                    replies.push(j.reply);
                }
                Err(_) => break,
            }
        }
        let decided =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gw.decide_batch(&inputs)));
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

async fn receipts(State(st): State<Shared>, uri: Uri) -> Response {
    let page = match page(uri.query().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    read_store(&st, "the receipts", move |gw| {
        gw.store().receipts_range(page)
    })
    .await
}

/// Runs a read of the store off the async workers (the store is blocking)
/// and answers with its result as JSON; a store error is a counted 500.
pub(super) async fn read_store<T: serde::Serialize + Send + 'static>(
    st: &Shared,
    what: &str,
    read: impl FnOnce(&crate::gateway::Gateway) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Response {
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || read(&gw)).await {
        Ok(Ok(v)) => json_ok(st, &v),
        Ok(Err(e)) => {
            st.metrics.store_error();
            error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
        Err(_) => {
            st.metrics.error();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot read {what}"),
            )
        }
    }
}

/// `GET /v1/approvals[?for=NAME]`: the operations waiting for approval, as
/// the store holds them (never the agent's copy).
async fn approvals(State(st): State<Shared>, uri: Uri) -> Response {
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
        let now = gw.now();
        gw.pending_ops().map(|ops| {
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
async fn submit_approval(State(st): State<Shared>, body: Body) -> Response {
    let signed: crate::gateway::approval::SignedApproval = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    submit_signed(&st, signed).await
}

/// Records a signed approval; the answer says how it went.
pub(super) async fn submit_signed(
    st: &Shared,
    signed: crate::gateway::approval::SignedApproval,
) -> Response {
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || gw.submit_approval(&signed)).await {
        Ok(Ok(r)) => json_ok(st, &json!({"ok": true, "receipt": r})),
        Ok(Err(e)) => pending_error(st, e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the approval failed"),
    }
}

/// `POST /v1/approvals/decline`: a signed decline (`{"decline":
/// {"approver", "operation_hash", "expires_at", "verdict": "decline"},
/// "signature"}`), recorded with a receipt; the operation proposed again
/// is then a DENY. The agent host's token alone declines nothing.
async fn decline(State(st): State<Shared>, body: Body) -> Response {
    match read_json(&st, body).await {
        Ok(signed) => decline_signed(&st, signed).await,
        Err(r) => r,
    }
}

/// Records a signed decline; the answer says how it went.
pub(super) async fn decline_signed(
    st: &Shared,
    signed: crate::gateway::approval::SignedDecline,
) -> Response {
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || gw.decline_signed(&signed)).await {
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
            let resp = rt.block_on(receipts(State(state.clone()), uri));
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
