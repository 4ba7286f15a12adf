//! `POST /v1/registry`: an owner changes its own records over HTTP. The
//! body is a [`SignedOwnerChange`]: the change (owner, pack, registry,
//! `add`/`remove`, value, a keyed registry's record, expiry, nonce) signed
//! by a key the world declares for that owner. The agent host's bearer
//! token is neither needed nor enough: the signature is the authority.

use super::common::{
    Route, Shared, build, coded_error, error, json_body, json_ok, no_browser, read_json,
};
use crate::gateway::trusted::{SignedOwnerChange, TrustedError};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use serde_json::json;

/// The owner's routes.
pub(super) fn routes() -> Vec<Route<Shared>> {
    vec![Route::post("/v1/registry", change)]
}

/// The owner's router behind its check.
pub(super) fn router(state: &Shared) -> Router {
    build(routes())
        .method_not_allowed_fallback(super::api::method_not_allowed)
        .layer(from_fn_with_state(state.clone(), guard))
        .with_state(state.clone())
}

/// An owner's signed change: no browser; the signature is the identity.
async fn guard(State(st): State<Shared>, req: Request, next: Next) -> Response {
    if let Some(r) = no_browser(&st, req.headers()) {
        return r;
    }
    json_body(&st, req, next).await
}

async fn change(State(st): State<Shared>, body: Body) -> Response {
    let signed: SignedOwnerChange = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let gw = st.gw.clone();
    match tokio::task::spawn_blocking(move || gw.change_registry_signed(&signed)).await {
        Ok(Ok(r)) => json_ok(&st, &json!({"ok": true, "receipt": r})),
        Ok(Err(e)) => {
            let status = match &e {
                TrustedError::NotOwner { .. } => {
                    st.metrics.refused("owner_signature");
                    StatusCode::FORBIDDEN
                }
                TrustedError::Expired { .. } | TrustedError::Replayed { .. } => {
                    st.metrics.refused("owner_replay");
                    StatusCode::CONFLICT
                }
                TrustedError::Store(_) => {
                    st.metrics.store_error();
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                TrustedError::Clock(_) => {
                    st.metrics.error();
                    StatusCode::INTERNAL_SERVER_ERROR
                }
                _ => StatusCode::BAD_REQUEST,
            };
            coded_error(status, &e)
        }
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the change failed"),
    }
}
