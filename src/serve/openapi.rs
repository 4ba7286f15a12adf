//! `GET /v1/openapi.json`: the HTTP API as an OpenAPI 3.1 document
//! (`docs/openapi.json`, compiled in). Its test checks it against the
//! router: every route answered is documented, every documented route
//! answers.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The document, as written in `docs/openapi.json`.
pub(crate) const DOCUMENT: &str = include_str!("../../docs/openapi.json");

pub(super) async fn document() -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        DOCUMENT,
    )
        .into_response()
}
