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

#[cfg(test)]
pub(super) mod tests {
    use super::DOCUMENT;
    use crate::gateway::testkit::TestWorld;
    use crate::serve::{App, HttpConfig, ListenAddr};
    use axum::http::{Method, StatusCode};
    use http_body_util::BodyExt;
    use serde_json::Value;
    use std::collections::BTreeSet;
    use std::time::Duration;

    const TOKEN: &str = "openapi-test-token-0123456789";

    /// The document's routes, as (METHOD, path).
    fn documented() -> BTreeSet<(String, String)> {
        let doc: Value = serde_json::from_str(DOCUMENT).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let mut out = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
        out
    }

    /// The real router (`App::router`, as `ipc serve --listen` runs it) on
    /// the test world, with a token file.
    fn app(dir: &std::path::Path) -> axum::Router {
        app_on(dir, TestWorld::new().gateway())
    }

    /// [`app`] on `gw`.
    pub(in crate::serve) fn app_on(
        dir: &std::path::Path,
        gw: crate::gateway::Gateway,
    ) -> axum::Router {
        let tf = dir.join("token");
        std::fs::write(&tf, format!("{TOKEN}\n")).unwrap();
        let config = HttpConfig {
            listen: ListenAddr::Unix(dir.join("sock")),
            token_file: Some(tf),
            allowed_hosts: vec![],
            public_metrics: false,
            max_connections: 4,
            max_in_flight: 4,
            header_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(5),
        };
        App::new(gw, None, &config, None).unwrap().router()
    }

    /// Sends a request as an agent host would (its token, a JSON body on
    /// `POST`): the status, and the body.
    pub(in crate::serve) fn call(
        rt: &tokio::runtime::Runtime,
        app: &axum::Router,
        m: &Method,
        path: &str,
    ) -> (StatusCode, String) {
        use hyper::service::Service;
        let mut req = axum::http::Request::builder()
            .method(m.clone())
            .uri(path)
            .header("authorization", format!("Bearer {TOKEN}"));
        let body = if *m == Method::POST {
            req = req.header("content-type", "application/json");
            axum::body::Body::from("{}")
        } else {
            axum::body::Body::empty()
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let resp = rt.block_on(svc.call(req.body(body).unwrap())).unwrap();
        let status = resp.status();
        let bytes = rt.block_on(resp.into_body().collect()).unwrap().to_bytes();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Every route the router is built from is documented, and no other.
    #[test]
    fn every_route_is_documented_and_every_documented_route_is_a_route() {
        let routes: BTreeSet<(String, String)> = crate::serve::routes()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let doc = documented();
        let undocumented: Vec<_> = routes.difference(&doc).collect();
        let unserved: Vec<_> = doc.difference(&routes).collect();
        assert!(
            undocumented.is_empty(),
            "not in docs/openapi.json: {undocumented:?}"
        );
        assert!(unserved.is_empty(), "documented, not served: {unserved:?}");
    }

    /// The route table of docs/http-api.md ("Every route") has one row per
    /// route the routers serve, and no other (#40, item 17: `POST
    /// /v1/mandates` was in no table, `GET /v1/openapi.json` missing from
    /// one of two).
    #[test]
    fn the_route_table_of_the_docs_lists_every_route_once() {
        let md = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/http-api.md"),
        )
        .unwrap();
        let table = md
            .split("\n## Every route\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("docs/http-api.md has a section `## Every route`");
        let mut rows = vec![];
        for line in table.lines() {
            let Some(cell) = line
                .strip_prefix("| `")
                .and_then(|l| l.split_once("` |"))
                .map(|(c, _)| c)
            else {
                continue;
            };
            let (method, path) = cell.split_once(' ').unwrap();
            rows.push((method.to_string(), path.to_string()));
        }
        let listed: BTreeSet<(String, String)> = rows.iter().cloned().collect();
        assert_eq!(listed.len(), rows.len(), "a route listed twice: {rows:?}");
        let routes: BTreeSet<(String, String)> = crate::serve::routes()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        let missing: Vec<_> = routes.difference(&listed).collect();
        let extra: Vec<_> = listed.difference(&routes).collect();
        assert!(missing.is_empty(), "not in the table: {missing:?}");
        assert!(extra.is_empty(), "in the table, not served: {extra:?}");
        assert_eq!(listed, documented());
    }

    /// Against the real router: each documented route answers (not the
    /// router's 404 or 405), each other method on a documented path is a
    /// 405, a path not documented is a 404, and the document served is
    /// `docs/openapi.json`.
    #[test]
    fn the_router_answers_what_the_document_says() {
        let dir = tempfile::tempdir().unwrap();
        let app = app(dir.path());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let doc = documented();
        let paths: BTreeSet<&String> = doc.iter().map(|(_, p)| p).collect();
        for (m, path) in &doc {
            let m = Method::from_bytes(m.as_bytes()).unwrap();
            let (status, body) = call(&rt, &app, &m, path);
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{m} {path}: {body}");
            assert!(
                !(status == StatusCode::NOT_FOUND && body.contains("no route")),
                "{m} {path}: {body}"
            );
        }
        for path in paths {
            for m in [
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::PATCH,
            ] {
                if doc.contains(&(m.to_string(), path.clone())) {
                    continue;
                }
                let (status, body) = call(&rt, &app, &m, path);
                assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{m} {path}: {body}");
                // the API's: a JSON body that says what went wrong
                if path.starts_with("/v1/") {
                    let v: serde_json::Value = serde_json::from_str(&body)
                        .unwrap_or_else(|e| panic!("{m} {path}: {e}: {body:?}"));
                    assert!(
                        v["error"]
                            .as_str()
                            .is_some_and(|e| e.contains("does not take")),
                        "{m} {path}: {body}"
                    );
                }
            }
        }
        for path in [
            "/v1/nothing",
            "/v1",
            "/",
            "/approve/nothing",
            "/v1/decide/x",
        ] {
            let (status, body) = call(&rt, &app, &Method::GET, path);
            assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        }
        let (status, served) = call(&rt, &app, &Method::GET, "/v1/openapi.json");
        assert_eq!(status, StatusCode::OK);
        assert_eq!(served, DOCUMENT);
    }
}
