//! The agent host's API: the bearer token (its tenants are the caller's),
//! no browser, JSON bodies; and `/metrics` (an operator's token, or open
//! with `--public-metrics`). A route added here gets the token check by
//! being here; a path no router serves answers behind these checks.
//!
//! Decisions go to one decider thread (over shards, one per shard), which
//! decides everything queued in one store transaction (group commit);
//! receipt reads run on tokio's blocking pool.

use super::common::AppState;
use super::common::{
    Caller, Failed, Job, Route, Shared, answer, authenticate, blocking, build, decline_signed,
    error, json_body, json_ok, no_browser, read_json, read_store, read_text, shown, submit_signed,
};
use crate::base::log;
use crate::gateway::{Gateway, GatewayError, Input};
use crate::store::ReceiptRange;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Instant;

/// Most receipts in one answer.
pub(crate) const MAX_PAGE: usize = 1000;
/// Most decisions in one transaction of the decider.
const MAX_BATCH: usize = 256;
/// Receipts in an answer that names no count.
const DEFAULT_PAGE: usize = 50;

/// The API's routes.
pub(super) fn routes() -> Vec<Route<Shared>> {
    vec![
        Route::post("/v1/decide", decide),
        Route::get("/v1/receipts", receipts),
        Route::get("/v1/approvals", approvals),
        Route::post("/v1/approvals", submit_approval),
        Route::post("/v1/approvals/decline", decline),
        Route::get("/v1/mandates", super::mandates::list),
        Route::post("/v1/mandates", super::mandates::propose),
        Route::get("/v1/health", health),
        Route::get("/v1/ready", super::ready::ready),
        Route::get("/v1/openapi.json", super::openapi::document),
    ]
}

/// The API's router behind its checks; `extra` are more routes of the API
/// (tests add some: whatever their path, the token guards them).
pub(super) fn router(state: &Shared, extra: Router<Shared>) -> Router {
    build(routes())
        .merge(extra)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(from_fn_with_state(state.clone(), guard))
        .with_state(state.clone())
}

/// `/metrics`.
pub(super) fn metrics_routes() -> Vec<Route<Shared>> {
    vec![Route::get("/metrics", metrics)]
}

/// `/metrics` behind its check.
pub(super) fn metrics_router(state: &Shared) -> Router {
    build(metrics_routes())
        .layer(from_fn_with_state(state.clone(), metrics_guard))
        .with_state(state.clone())
}

/// The agent host's API: no browser, the bearer token (its tenants go
/// with the request as its [`Caller`]), a JSON body.
async fn guard(State(st): State<Shared>, mut req: Request, next: Next) -> Response {
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

async fn decide(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    body: Body,
) -> Response {
    let text = match read_text(&st, body).await {
        Ok(t) => t,
        Err(r) => return r,
    };
    // an empty request is no proposal at all (the words of an empty line
    // of `ipc serve --stdio` would speak of lines here): #40, item 20
    if text.trim().is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "the request's body is empty: POST one JSON object, `{\"proposal\": {\"action\": …, \"args\": {…}}}` with its `mandate` unless the server holds one (docs/http-api.md)",
        );
    }
    let input = crate::gateway::envelope::parse_line(&text, st.mandate.as_ref());
    let start = Instant::now();
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if st
        .decider
        .of(&st.gw, &input)
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
            log_decision(&st, &d);
            json_ok(&st, &d)
        }
        Ok(Err(Failed { store, message })) => {
            if store {
                st.metrics.store_error();
            } else {
                st.metrics.error();
            }
            log::line(
                log::Level::Error,
                "decision_failed",
                &message,
                &[("store", Value::from(store))],
            );
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

/// With `--log-format json`, the decision's line: its action (one of the
/// bundle's: the name of an unknown one is the agent's text, left out),
/// outcome, stage, operation hash and receipt; never a value of its
/// arguments, nor its reason (which may quote one).
fn log_decision(st: &AppState, d: &crate::gateway::Decision) {
    if log::format() != log::Format::Json {
        return;
    }
    let action = d.action.as_deref().filter(|a| st.gw.policies(a).is_some());
    let fields = [
        ("action", Value::from(action)),
        ("decision", json!(d.decision)),
        ("stage", json!(d.stage)),
        ("operation_hash", Value::from(d.operation_hash.as_deref())),
        (
            "receipt_seq",
            Value::from(d.receipt.as_ref().map(|r| r.seq)),
        ),
        ("replayed", Value::from(d.replayed)),
        (
            "would_be",
            Value::from(d.would_be.as_ref().map(|w| w.decision.name())),
        ),
    ];
    log::line(log::Level::Event, "decision", "", &fields);
}

/// The decider thread: takes every decision waiting (up to `MAX_BATCH`)
/// and decides them in order in one store transaction (group commit, as
/// `ipc run` does), then answers each. One thread, no lock handoffs
/// between callers: the store sees one body per batch. A store error (or
/// a panic) after the fallback committed some of them
/// ([`Gateway::decide_all`]) answers those with their
/// decisions, and only the others with the error. Over shards, each input
/// is answered on its own ([`ShardSet::decide_each`]): a shard's error
/// answers that shard's undecided inputs only.
///
/// [`ShardSet::decide_each`]: crate::gateway::shards::ShardSet::decide_each
pub(super) fn decider(gw: Arc<Gateway>, mut jobs: tokio::sync::mpsc::Receiver<Job>) {
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
        if let Some(set) = gw.shard_set() {
            // over shards, each input answered on its own: one shard
            // failing (its database failing over) never fails, nor hides,
            // what the other shards decided beside it
            let (each, lost) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                set.decide_each(crate::gateway::Ask::of(batch.clone()))
            })) {
                Ok(each) => (each, "a batch came back short: nothing was decided"),
                Err(_) => (
                    vec![],
                    "the decision failed unexpectedly: nothing was decided",
                ),
            };
            let mut each = each.into_iter();
            for r in replies {
                let _ = r.send(match each.next().flatten() {
                    Some(Ok(d)) => Ok(d),
                    Some(Err(e)) => Err(Failed {
                        store: matches!(*e, GatewayError::Store(_)),
                        message: e.to_string(),
                    }),
                    None => Err(Failed {
                        store: false,
                        message: lost.into(),
                    }),
                });
            }
            continue;
        }
        // on an error (or a panic), `decided` holds the decisions committed
        // before it: those are answered, the others were not decided
        let mut decided = Vec::with_capacity(batch.len());
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            gw.decide_all(crate::gateway::Ask::of(batch.clone()), &mut decided)
        }));
        let failure = match result {
            Ok(Ok(_)) if decided.len() == replies.len() => None,
            Ok(Ok(_)) => Some((false, "a batch came back short: nothing was decided".into())),
            Ok(Err(e)) => Some((matches!(e, GatewayError::Store(_)), e.to_string())),
            Err(_) => Some((
                false,
                "the decision failed unexpectedly: nothing was decided".to_string(),
            )),
        };
        // `decided` first: zip takes from it first, and a reply taken
        // when it has run out would be dropped unanswered
        let mut replies = replies.into_iter();
        for (d, r) in decided.into_iter().zip(replies.by_ref()) {
            let _ = r.send(Ok(d));
        }
        if let Some((store, message)) = failure {
            for r in replies {
                let _ = r.send(Err(Failed {
                    store,
                    message: message.clone(),
                }));
            }
        }
    }
}

/// Which receipts a request asks for: at most [`MAX_PAGE`], read from the
/// store as one window ([`Store::receipts_range`]), never the whole chain.
fn page(query: &str) -> Result<ReceiptRange, String> {
    let (mut last, mut after, mut limit) = (None, None, None);
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        // read by `tenant_of_query`
        if k == "tenant" {
            continue;
        }
        let n: u64 = v
            .parse()
            .map_err(|_| format!("`{k}` must be a whole number, not `{}`", shown(v)))?;
        let slot = match k {
            "last" => &mut last,
            "after" => &mut after,
            "limit" => &mut limit,
            _ => {
                return Err(format!(
                    "unknown parameter `{}` (`last`, or `after` and `limit`; `tenant`)",
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

/// `tenant=NAME` of `GET /v1/receipts`: only that tenant's receipts, from
/// the chain of the shard that holds it. Written as it is (no percent
/// escapes), once.
fn tenant_of_query(query: &str) -> Result<Option<String>, String> {
    let mut found = None;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let Some(("tenant", v)) = kv.split_once('=') else {
            continue;
        };
        if v.is_empty() || v.contains(['%', '+']) {
            return Err(format!(
                "`tenant` is a tenant's name as it is written, not `{}`",
                shown(v)
            ));
        }
        if found.replace(v.to_string()).is_some() {
            return Err("`tenant` is given twice".into());
        }
    }
    Ok(found)
}

/// `GET /v1/receipts`: a page of the chain (`tenant=NAME`: of the chain
/// of the shard that holds the tenant, only its receipts; required when
/// the stores are sharded). A caller bound to some
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
    let query = uri.query().unwrap_or("");
    let (page, only) = match page(query).and_then(|p| Ok((p, tenant_of_query(query)?))) {
        Ok(p) => p,
        Err(e) => return error(StatusCode::BAD_REQUEST, e),
    };
    if only.is_none() && st.gw.shard_set().is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "the stores are sharded: each shard has its own chain; name a tenant (`tenant=NAME`) to read its receipts from its shard's chain",
        );
    }
    if let (Some(t), Some(set)) = (&only, st.gw.shard_set())
        && set.route(t).is_none()
    {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "tenant `{}` has no shard in the map, and there is no default",
                shown(t)
            ),
        );
    }
    let Ok(_slot) = st.slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
    };
    if *tenants == crate::gateway::Tenants::All && only.is_none() {
        return read_store(&st, "the receipts", move |gw| {
            gw.store().receipts_range(page)
        })
        .await;
    }
    let read = blocking(&st, "the receipts", move |gw| {
        let chain = match &only {
            Some(t) => gw.for_tenant(t)?,
            None => gw,
        };
        chain.store().receipts_range(page).map(|rs| {
            let last = rs.last().map(|r| r.seq);
            let mine: Vec<_> = rs
                .into_iter()
                .filter(|r| {
                    receipt_tenant(&r.body).is_some_and(|t| {
                        tenants.allows(t) && only.as_deref().is_none_or(|o| o == t)
                    })
                })
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

/// `GET /v1/approvals[?for=NAME]`: the operations waiting for approval, as
/// the store holds them (never the agent's copy), of the caller's tenants.
async fn approvals(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    uri: Uri,
) -> Response {
    // a repeated `for` names the last one, as it always did
    let for_whom = match super::common::query_values(&uri, "for", "NAME") {
        Ok(v) => v.into_iter().last(),
        Err(r) => return *r,
    };
    read_store(&st, "the approvals", move |gw| {
        let which = crate::gateway::approving::Which {
            tenants: &tenants,
            all: false,
            for_whom: for_whom.as_deref(),
        };
        let ops: Vec<_> = gw
            .pending_listing(&which)?
            .into_iter()
            .map(|(op, _)| op)
            .collect();
        Ok(json!({"operations": ops}))
    })
    .await
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
        st.metrics.render(
            st.gw.store().optimistic_counts(),
            st.gw.store().head_lock_hold(),
        ) + &super::metrics::notify(st.notify.as_ref().map(|n| &*n.stats)),
    )
        .into_response()
}

/// A route asked with a method it does not take (`GET /v1/decide`): a
/// 405 with a JSON body, as every error of the API (#40, item 20).
pub(super) async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "`{}` does not take `{}` (docs/http-api.md lists each route's method)",
            shown(uri.path()),
            shown(method.as_str())
        ),
    )
}

async fn not_found(uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no route `{}`", shown(uri.path())),
    )
}

#[cfg(test)]
mod tests {
    use super::{page, receipts};
    use crate::gateway::testkit::TestWorld;
    use crate::serve::common::AppState;
    use crate::serve::metrics::Metrics;
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

    /// A store that refuses to hand over the whole chain (or a snapshot
    /// of it) and counts the receipt rows it reads; its transactions pass
    /// or fail (a `Backend` error, as a rejected statement is) as `script`
    /// says, one entry each, then pass.
    struct Counting {
        inner: MemoryStore,
        rows: AtomicUsize,
        script: std::sync::Mutex<std::collections::VecDeque<bool>>,
    }

    impl Store for Counting {
        fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
            if self.script.lock().unwrap().pop_front() == Some(false) {
                return Err(StoreError::Backend("injected".into()));
            }
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
            script: Default::default(),
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
            slots: tokio::sync::Semaphore::new(4),
            notify: None,
            decider: decider.into(),
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

    /// The decider's batch fails, its fallback commits the first input
    /// alone, then the store fails for good (not even a DENY's receipt):
    /// the first caller is answered with its committed decision and
    /// receipt, never "nothing was decided" (before: all three were), and
    /// only the two others get the error.
    #[test]
    fn a_decision_committed_before_a_store_failure_is_answered() {
        use crate::gateway::testkit::{LANDLORD, input, transfer};
        let w = TestWorld::new();
        let store = Arc::new(Counting {
            inner: MemoryStore::new(),
            rows: AtomicUsize::new(0),
            script: Default::default(),
        });
        let gw = Arc::new(w.gateway_with(store.clone()));
        // the batch of three fails, the first input alone commits, the
        // second's decision and then its DENY's receipt fail
        *store.script.lock().unwrap() = [false, true, false, false].into();
        let m = w.emma();
        let (jobs, queue) = tokio::sync::mpsc::channel(8);
        let answers: Vec<_> = ["1.00", "2.00", "3.00"]
            .into_iter()
            .map(|a| {
                let (reply, answer) = tokio::sync::oneshot::channel();
                let job = super::Job {
                    input: input(transfer(LANDLORD, json!(a)), &m, vec![]),
                    tenants: Arc::new(crate::gateway::Tenants::All),
                    reply,
                };
                assert!(jobs.try_send(job).is_ok());
                answer
            })
            .collect();
        drop(jobs);
        // all three queued: decided as one batch
        super::decider(gw, queue);
        let answers: Vec<_> = answers
            .into_iter()
            .map(|a| a.blocking_recv().unwrap())
            .collect();
        let first = answers[0].as_ref().map_err(|f| f.message.clone()).unwrap();
        assert_eq!(first.decision, crate::gateway::Outcome::Allow, "{first:#?}");
        let committed = store.inner.receipts().unwrap();
        assert_eq!(committed.len(), 1);
        let r = first.receipt.as_ref().unwrap();
        assert_eq!((r.seq, &r.hash), (committed[0].seq, &committed[0].hash));
        assert_eq!(committed[0].body["resolved"]["amount"], json!(100));
        for a in &answers[1..] {
            let f = a.as_ref().err().unwrap();
            assert!(f.store, "{}", f.message);
        }
    }
}
