//! `POST /v1/registry`: an owner changes its own records over HTTP. The
//! body is a [`SignedOwnerChange`]: the change (owner, pack, registry,
//! `add`/`remove`, value, a keyed registry's record, expiry, nonce) signed
//! by a key the world declares for that owner. The agent host's bearer
//! token is neither needed nor enough: the signature is the authority.

use super::http::{Shared, error, json_ok, read_json};
use crate::gateway::trusted::{SignedOwnerChange, TrustedError};
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

pub(super) async fn change(State(st): State<Shared>, body: Body) -> Response {
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
            super::http::coded_error(status, &e)
        }
        Err(_) => error(StatusCode::INTERNAL_SERVER_ERROR, "the change failed"),
    }
}
