//! Child mandates over HTTP (issue 25): the agent host proposes a child of
//! a parent it holds (`POST /v1/mandates`); it waits until its user
//! confirms it on the approval page, which shows it with the rendering
//! every approval uses and signs it in the browser with her key (WebCrypto,
//! as approvals); then the child is issued and recorded with a receipt, and
//! `GET /v1/mandates?id=ID` hands the agent host its token.

use super::common::{AppState, Caller, Shared, coded_error, error, json_ok, read_json};
use super::signin::{Page, signed_in};
use crate::gateway::chain::ChildError;
use crate::gateway::{ChildRequest, MandateToken};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Value, json};

/// The body of `POST /v1/mandates`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Propose {
    parent: MandateToken,
    request: Value,
}

/// A refusal of a child as an HTTP answer: 422 for one that widens (with
/// what widens), 400 for a request that does not type, 403 for a parent or
/// a signature that is not accepted, 500 for the store.
fn child_error(st: &AppState, e: &ChildError) -> Response {
    let status = match e {
        ChildError::Widens { widens, .. } => {
            let body = json!({
                "ok": false,
                "code": "ipc::mandate::widens",
                "error": e.to_string(),
                "widens": widens,
            });
            return super::common::answer(StatusCode::UNPROCESSABLE_ENTITY, body.to_string());
        }
        ChildError::Request { .. } => StatusCode::BAD_REQUEST,
        ChildError::Parent { .. } | ChildError::Signer { .. } => StatusCode::FORBIDDEN,
        ChildError::Store(_) => {
            st.metrics.store_error();
            StatusCode::INTERNAL_SERVER_ERROR
        }
    };
    coded_error(status, e)
}

/// Runs `f` off the async workers; its error as [`child_error`].
async fn off_loop<T: serde::Serialize + Send + 'static>(
    st: &AppState,
    f: impl FnOnce(&crate::gateway::Gateway) -> Result<T, ChildError> + Send + 'static,
) -> Response {
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || f(&gw)).await {
        Ok(Ok(v)) => json_ok(st, &v),
        Ok(Err(e)) => child_error(st, &e),
        Err(_) => {
            st.metrics.error();
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the mandate request failed",
            )
        }
    }
}

/// `POST /v1/mandates`: proposes a child of `parent` (a token the caller
/// holds, of one of its tenants): typed, checked against the parent (one
/// that widens is a 422 naming what widens), and held until its user
/// confirms it on the approval page.
pub(super) async fn propose(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    body: Body,
) -> Response {
    let p: Propose = match read_json(&st, body).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    if !tenants.allows(&p.parent.mandate.owner) {
        st.metrics.refused("tenant");
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "the caller may act for `{}`, not for the parent's owner `{}`",
                crate::base::json::echo(&tenants.shown()),
                crate::base::json::echo(&p.parent.mandate.owner)
            ),
        );
    }
    off_loop(&st, move |gw| {
        let req = ChildRequest::from_json(&p.request)?;
        let d = gw.propose_child(&p.parent, &req)?;
        let r = gw.hold_child(&d, "http")?;
        Ok(json!({
            "ok": true,
            "status": "pending",
            "mandate": d.mandate.id,
            "confirm_by": d.mandate.user,
            "shown": d.shown,
            "text": d.shown.text(),
            "receipt": r,
        }))
    })
    .await
}

/// `GET /v1/mandates[?id=ID]`: the child mandates of the caller's tenants,
/// waiting (`pending`) or issued (`issued`, `revoked`); with `id`, that one,
/// with its token once issued.
pub(super) async fn list(
    State(st): State<Shared>,
    axum::Extension(Caller(tenants)): axum::Extension<Caller>,
    uri: Uri,
) -> Response {
    let id = match super::common::query_values(&uri, "id", "ID") {
        Ok(v) if v.len() > 1 => {
            return super::common::unknown_query(&format!("id={}", v[1]), "id", "ID");
        }
        Ok(v) => v.into_iter().next(),
        Err(r) => return *r,
    };
    off_loop(&st, move |gw| {
        let allowed = |r: &Value| r["owner"].as_str().is_some_and(|o| tenants.allows(o));
        let Some(i) = &id else {
            let mine: Vec<Value> = gw.mandate_listing()?.into_iter().filter(allowed).collect();
            return Ok(json!({"ok": true, "mandates": mine}));
        };
        // by its id, listed or not
        match gw.mandate_row(i)?.filter(allowed) {
            Some(one) => Ok(one),
            None => Err(ChildError::Request {
                reason: format!("no child mandate `{}`", crate::base::json::echo(i)),
            }),
        }
    })
    .await
}

/// `GET /v1/approver/mandates`: the child mandates waiting for the
/// signed-in user's confirmation, each as she reads it and as she signs it
/// (`mandate`: the object whose JCS her key signs).
pub(super) async fn waiting(State(st): State<Page>, headers: HeaderMap) -> Response {
    let who = match signed_in(&st, &headers) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    off_loop(&st, move |gw| {
        let mut out = vec![];
        for h in gw.held_children()? {
            if h.mandate.user != who {
                continue;
            }
            // rendered afresh (registries change): the held child is what
            // is signed
            let shown = match gw.show_child(&h.parent, &h.mandate) {
                Ok(v) => json!(v),
                Err(e) => json!({"refusal": e.to_string()}),
            };
            out.push(json!({"shown": shown, "mandate": h.mandate}));
        }
        Ok(json!({"user": who, "mandates": out}))
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Confirm {
    id: String,
    /// Ed25519 over the JCS of the held mandate, by the signed-in user's
    /// key, base64.
    signature: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeclineChild {
    id: String,
}

/// The signed-in user and the body of her request.
async fn signed_body<T: serde::de::DeserializeOwned>(
    st: &Page,
    headers: &HeaderMap,
    body: Body,
) -> Result<(String, T), Response> {
    let who = signed_in(st, headers).map_err(|r| *r)?;
    Ok((who, read_json(st, body).await?))
}

/// The held child `id`, if it waits for `who`.
fn held_for(gw: &crate::gateway::Gateway, id: &str, who: &str) -> Result<(), ChildError> {
    if gw.held_child(id)?.is_some_and(|h| h.mandate.user == who) {
        Ok(())
    } else {
        Err(ChildError::Request {
            reason: format!(
                "no child mandate `{}` waits for `{}`'s confirmation",
                crate::base::json::echo(id),
                crate::base::json::echo(who)
            ),
        })
    }
}

/// `POST /v1/approver/mandates/confirm`: the signed-in user's signature of
/// a child waiting for her; issued and recorded with a receipt.
pub(super) async fn confirm(State(st): State<Page>, headers: HeaderMap, body: Body) -> Response {
    let (who, c) = match signed_body::<Confirm>(&st, &headers, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    off_loop(&st, move |gw| {
        held_for(gw, &c.id, &who)?;
        let key_id = gw
            .world()
            .approvers
            .get(&who)
            .map(|a| a.key.id())
            .ok_or_else(|| ChildError::Signer {
                child: c.id.clone(),
                reason: format!(
                    "`{}` has no key in the world",
                    crate::base::json::echo(&who)
                ),
            })?;
        let (token, r) = gw.confirm_child(&c.id, &key_id, &c.signature, "http")?;
        Ok(json!({"ok": true, "receipt": r, "token": token}))
    })
    .await
}

/// `POST /v1/approver/mandates/decline`: the signed-in user declines a
/// child waiting for her; recorded with a receipt.
pub(super) async fn decline(State(st): State<Page>, headers: HeaderMap, body: Body) -> Response {
    let (who, c) = match signed_body::<DeclineChild>(&st, &headers, body).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    off_loop(&st, move |gw| {
        held_for(gw, &c.id, &who)?;
        let r = gw.decline_child(&c.id, &who)?;
        Ok(json!({"ok": true, "receipt": r}))
    })
    .await
}
