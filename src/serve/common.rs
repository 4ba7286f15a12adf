//! What the routers share: the service's state, the caller a guard found,
//! the checks more than one router makes (no browser, the bearer token, a
//! JSON body), reading a body, answering, and recording a signed approval
//! or decline (the API and the approval page both do). It imports none of
//! the routers.

use super::auth::TokenFile;
use super::metrics::Metrics;
use crate::gateway::Gateway;
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::handler::Handler;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Largest request body accepted.
pub(crate) const MAX_BODY: usize = 1 << 20;

pub(super) struct AppState {
    pub(super) gw: Arc<Gateway>,
    pub(super) mandate: Option<Value>,
    pub(super) tokens: Option<TokenFile>,
    /// The `Host` values served; `None` on a Unix socket (no browser
    /// reaches one, so no rebinding).
    pub(super) hosts: Option<Vec<String>>,
    pub(super) public_metrics: bool,
    pub(super) body_timeout: Duration,
    pub(super) metrics: Metrics,
    /// Decisions (queued or running) and receipt reads at once.
    pub(super) slots: tokio::sync::Semaphore,
    /// The decider threads' queues.
    pub(super) decider: Deciders,
    /// The `[[notify]]` sender (its counters in `/metrics`).
    pub(super) notify: Option<crate::gateway::notify::Running>,
}

/// The decider threads' queues: one, or over shards one per shard, so that
/// a shard whose database is failing over (a connection that hangs, a
/// retry) never holds up the other shards' decisions.
pub(super) struct Deciders {
    first: tokio::sync::mpsc::Sender<Job>,
    shards: Vec<tokio::sync::mpsc::Sender<Job>>,
}

impl From<tokio::sync::mpsc::Sender<Job>> for Deciders {
    fn from(first: tokio::sync::mpsc::Sender<Job>) -> Self {
        Deciders {
            first,
            shards: vec![],
        }
    }
}

impl Deciders {
    /// One queue per shard, in the shards' order (none: the one queue).
    pub(super) fn sharded(shards: Vec<tokio::sync::mpsc::Sender<Job>>) -> Option<Self> {
        Some(Deciders {
            first: shards.first()?.clone(),
            shards,
        })
    }

    /// The queue of `input`'s decider: its tenant's shard's (a refusal's
    /// shard for an input no shard holds).
    pub(super) fn of(
        &self,
        gw: &Gateway,
        input: &crate::gateway::Input,
    ) -> &tokio::sync::mpsc::Sender<Job> {
        gw.shard_set()
            .and_then(|s| self.shards.get(s.shard_of(input)))
            .unwrap_or(&self.first)
    }
}

/// A decision to take, and where its answer goes.
pub(super) struct Job {
    pub(super) input: crate::gateway::Input,
    /// Whom the caller may act for.
    pub(super) tenants: Arc<crate::gateway::Tenants>,
    pub(super) reply: tokio::sync::oneshot::Sender<Result<crate::gateway::Decision, Failed>>,
}

/// Why a batch has no decisions: nothing of it was committed.
pub(super) struct Failed {
    pub(super) store: bool,
    pub(super) message: String,
}

pub(super) type Shared = Arc<AppState>;

/// One route of a router: its method and path (what the OpenAPI document
/// lists, [`super::routes`]) and its handler. A router is built from its
/// list only, so the list is what it answers.
pub(super) struct Route<S> {
    pub(super) method: Method,
    pub(super) path: &'static str,
    handler: MethodRouter<S>,
}

impl<S: Clone + Send + Sync + 'static> Route<S> {
    pub(super) fn get<H: Handler<T, S>, T: 'static>(path: &'static str, h: H) -> Route<S> {
        Route {
            method: Method::GET,
            path,
            handler: axum::routing::get(h),
        }
    }

    pub(super) fn post<H: Handler<T, S>, T: 'static>(path: &'static str, h: H) -> Route<S> {
        Route {
            method: Method::POST,
            path,
            handler: axum::routing::post(h),
        }
    }
}

/// The router of these routes (two methods on one path share it).
pub(super) fn build<S: Clone + Send + Sync + 'static>(routes: Vec<Route<S>>) -> Router<S> {
    routes
        .into_iter()
        .fold(Router::new(), |r, x| r.route(x.path, x.handler))
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

/// The one query parameter `name` a route takes (`?name=VALUE`, `VALUE`
/// spelled `what` in a refusal), or none: each value given, in order (a
/// caller decides what a repeat means); any other parameter, or an empty
/// value, is refused in words that name the one it takes.
pub(super) fn query_values(
    uri: &axum::http::Uri,
    name: &str,
    what: &str,
) -> Result<Vec<String>, Box<Response>> {
    let mut out = vec![];
    for pair in uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some((k, v)) if k == name && !v.is_empty() => out.push(v.to_string()),
            _ => return Err(Box::new(unknown_query(pair, name, what))),
        }
    }
    Ok(out)
}

/// The refusal of a query parameter a route does not take.
pub(super) fn unknown_query(pair: &str, name: &str, what: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!(
            "unknown parameter `{}`: give `{name}={what}` or nothing",
            shown(pair)
        ),
    )
}

/// At most 100 characters of a header a caller sent, for an error message.
pub(super) fn shown(v: &str) -> String {
    v.chars().take(100).collect()
}

/// A 403 for a request a web page sent (an `Origin` header or a
/// cross-site `Sec-Fetch-Site`).
pub(super) fn no_browser(st: &AppState, h: &HeaderMap) -> Option<Response> {
    browser_refused(&st.metrics, h)
}

/// [`no_browser`], counted in `metrics`.
pub(super) fn browser_refused(metrics: &Metrics, h: &HeaderMap) -> Option<Response> {
    let cross_site = h
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() != b"none");
    if h.contains_key(header::ORIGIN) || cross_site {
        metrics.refused("origin");
        return Some(error(
            StatusCode::FORBIDDEN,
            "requests from a web page (an `Origin` or `Sec-Fetch-Site` header) are refused",
        ));
    }
    None
}

/// The caller of a bearer token, or the 401; every tenant without a
/// token file (a Unix socket: its peer is whoever may open it).
pub(super) fn authenticate(st: &AppState, h: &HeaderMap) -> Result<Caller, Box<Response>> {
    authenticate_with(st.tokens.as_ref(), &st.metrics, h)
}

/// [`authenticate`] against `tokens` (`None`: no token file), counted in
/// `metrics`.
pub(super) fn authenticate_with(
    tokens: Option<&TokenFile>,
    metrics: &Metrics,
    h: &HeaderMap,
) -> Result<Caller, Box<Response>> {
    let Some(tokens) = tokens else {
        return Ok(Caller(Arc::new(crate::gateway::Tenants::All)));
    };
    match bearer(h).and_then(|t| tokens.check(t)) {
        Some(t) => Ok(Caller(t)),
        None => {
            metrics.refused("auth");
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
pub(super) async fn json_body(st: &AppState, req: Request, next: Next) -> Response {
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

/// The whole request body, read within `timeout` and at most `limit`
/// bytes; or the answer that says why not (a 408 that closes the
/// connection, a 413, a 400), counted in `metrics`.
pub(super) async fn read_body(
    timeout: Duration,
    limit: usize,
    metrics: &Metrics,
    body: Body,
) -> Result<axum::body::Bytes, Response> {
    match tokio::time::timeout(timeout, Limited::new(body, limit).collect()).await {
        Err(_) => {
            metrics.refused("body_timeout");
            let mut r = error(
                StatusCode::REQUEST_TIMEOUT,
                "the body did not arrive in time",
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(r)
        }
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            metrics.refused("body_too_large");
            Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body too large (at most {limit} bytes)"),
            ))
        }
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {}", e.to_string().to_lowercase()),
        )),
        Ok(Ok(c)) => Ok(c.to_bytes()),
    }
}

/// The request body as text, read within the body deadline and the size
/// bound; or the answer that says why not.
pub(super) async fn read_text(st: &AppState, body: Body) -> Result<String, Response> {
    let bytes = read_body(st.body_timeout, MAX_BODY, &st.metrics, body).await?;
    let Ok(text) = std::str::from_utf8(&bytes) else {
        return Err(error(StatusCode::BAD_REQUEST, "the body is not UTF-8 text"));
    };
    Ok(text.to_string())
}

/// The request body parsed strictly (no duplicate keys) into `T`, or the
/// answer that says why not (400 for a body that is not a `T`).
pub(super) async fn read_json<T: serde::de::DeserializeOwned>(
    st: &AppState,
    body: Body,
) -> Result<T, Response> {
    let text = read_text(st, body).await?;
    crate::base::json::parse_strict(&text)
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

/// Runs a read of the store off the async workers (the store is blocking)
/// and answers with its result as JSON; a store error is a counted 500.
pub(super) async fn read_store<T: serde::Serialize + Send + 'static>(
    st: &AppState,
    what: &str,
    read: impl FnOnce(&crate::gateway::Gateway) -> Result<T, crate::store::StoreError> + Send + 'static,
) -> Response {
    match blocking(st, what, read).await {
        Ok(v) => json_ok(st, &v),
        Err(r) => r,
    }
}

/// A read of the store off the async workers, or the counted 500.
pub(super) async fn blocking<T: Send + 'static>(
    st: &AppState,
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

/// A pending-operation refusal as an HTTP answer: 404 for an unknown hash,
/// 409 for one no longer approvable, 400 for a bad approval, 500 for the
/// store.
pub(super) fn pending_error(st: &AppState, e: crate::gateway::approving::PendingError) -> Response {
    use crate::gateway::approving::PendingError as P;
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

/// Refuses an operation of a tenant the caller may not act for as if the
/// store did not know it (nothing of another tenant's shows, not even
/// that it exists).
fn of_tenants(
    gw: &Gateway,
    hash: &str,
    tenants: &crate::gateway::Tenants,
) -> Result<(), crate::gateway::approving::PendingError> {
    match gw.pending_op(hash) {
        Ok(op) if !tenants.allows(&op.owner) => {
            Err(crate::gateway::approving::PendingError::Unknown { hash: hash.into() })
        }
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Records a signed approval for a caller acting for `tenants`; the
/// answer says how it went.
pub(super) async fn submit_signed(
    st: &AppState,
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
        // the same signed approval again (a retry): its first receipt,
        // marked, nothing written
        Ok(Ok(s)) if s.already => json_ok(
            st,
            &json!({"ok": true, "already": true, "receipt": s.receipt}),
        ),
        Ok(Ok(s)) => json_ok(st, &json!({"ok": true, "receipt": s.receipt})),
        Ok(Err(e)) => pending_error(st, e),
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the approval failed"),
    }
}

/// Records a signed decline for a caller acting for `tenants`; the answer
/// says how it went.
pub(super) async fn decline_signed(
    st: &AppState,
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

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    async fn text(r: Response) -> String {
        let b = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        String::from_utf8(b.to_vec()).unwrap()
    }

    /// A route's one query parameter: its values in order, and any other
    /// parameter (or an empty value) refused in words naming the one it
    /// takes (`GET /v1/approvals?for=`, `GET /v1/mandates?id=`).
    #[tokio::test]
    async fn a_query_takes_its_one_parameter_and_refuses_any_other() {
        let uri = |q: &str| q.parse::<axum::http::Uri>().unwrap();
        assert_eq!(
            query_values(&uri("/v1/approvals?for=emma&for=cfo"), "for", "NAME").unwrap(),
            vec!["emma", "cfo"]
        );
        assert!(
            query_values(&uri("/v1/approvals"), "for", "NAME")
                .unwrap()
                .is_empty()
        );
        for (q, name, what, said) in [
            (
                "/v1/approvals?who=emma",
                "for",
                "NAME",
                "give `for=NAME` or nothing",
            ),
            (
                "/v1/approvals?for=",
                "for",
                "NAME",
                "give `for=NAME` or nothing",
            ),
            (
                "/v1/mandates?id=a&x=1",
                "id",
                "ID",
                "give `id=ID` or nothing",
            ),
        ] {
            let r = *query_values(&uri(q), name, what).unwrap_err();
            assert_eq!(r.status(), StatusCode::BAD_REQUEST);
            let t = text(r).await;
            assert!(t.contains(said), "{t}");
        }
    }
}
