//! The checks of `ipc serve --listen` in front of another service on the
//! same listener: `ipc mcp --listen` serves rmcp's Streamable HTTP behind
//! them. The same functions as the API's (`http.rs`'s `Host` check, a 421;
//! `common.rs`'s refusal of a web page, a 403 for an `Origin` or a
//! cross-site `Sec-Fetch-Site`; the bearer token, a 401, read from the
//! same token file format and reloaded the same way), the same listener
//! (`listen.rs`: the connection bound, the header and write timeouts, a
//! Unix socket of mode 0600), the body deadline (`common.rs`'s reader: a
//! body that does not arrive within `body_timeout` is a 408, one longer
//! than the service takes a 413), and one more check: the caller's token
//! must be allowed to act for the tenant(s) the service acts for
//! (`admit`, else a 403).

use super::auth::TokenFile;
use super::common::{authenticate_with, browser_refused, error, read_body};
use super::http::{Reload, host_refused, listen_and_serve};
use super::metrics::Metrics;
use super::{HttpConfig, ServeError};
use crate::gateway::Tenants;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{Next, from_fn_with_state};
use axum::response::Response;
use std::io::Write;
use std::sync::Arc;

/// Whether a caller whose token acts for these tenants may use the
/// service; `Err` says why not (the 403's message).
pub type Admit = Box<dyn Fn(&Tenants) -> Result<(), String> + Send + Sync>;

struct Gate {
    tokens: Option<TokenFile>,
    hosts: Option<Vec<String>>,
    metrics: Metrics,
    admit: Admit,
    body_timeout: std::time::Duration,
    max_body: usize,
}

/// Serves `service` behind the checks of `ipc serve --listen` on
/// `config.listen` until SIGINT or SIGTERM (`listening on ...` is written
/// to `out` once bound); a request's body is read (within
/// `config.body_timeout`, at most `max_body` bytes) before `service` sees
/// it.
pub async fn serve_gated(
    config: &HttpConfig,
    service: Router,
    max_body: usize,
    admit: Admit,
    out: &mut dyn Write,
) -> Result<(), ServeError> {
    let tokens = match &config.token_file {
        Some(p) => Some(TokenFile::open(p)?),
        None => None,
    };
    listen_and_serve(config, out, move |hosts, _shown| {
        let gate = Arc::new(Gate {
            tokens,
            hosts,
            metrics: Metrics::default(),
            admit,
            body_timeout: config.body_timeout,
            max_body,
        });
        let reload = gate.tokens.is_some().then(|| {
            let g = gate.clone();
            Box::new(move || {
                if let Some(t) = &g.tokens {
                    t.reload();
                }
            }) as Reload
        });
        Ok((service.layer(from_fn_with_state(gate, check)), reload))
    })
    .await
    .map(|_signal| ())
}

/// `Host`, then no browser, then the token and its tenants, then the
/// body within its deadline.
async fn check(State(g): State<Arc<Gate>>, req: Request, next: Next) -> Response {
    if let Some(r) = host_refused(g.hosts.as_deref(), &g.metrics, &req) {
        return r;
    }
    if let Some(r) = browser_refused(&g.metrics, req.headers()) {
        return r;
    }
    let caller = match authenticate_with(g.tokens.as_ref(), &g.metrics, req.headers()) {
        Ok(c) => c,
        Err(r) => return *r,
    };
    if let Err(why) = (g.admit)(&caller.0) {
        g.metrics.refused("tenant");
        return error(StatusCode::FORBIDDEN, why);
    }
    let (parts, body) = req.into_parts();
    match read_body(g.body_timeout, g.max_body, &g.metrics, body).await {
        Ok(bytes) => next.run(Request::from_parts(parts, bytes.into())).await,
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use super::{Gate, check};
    use crate::serve::metrics::Metrics;
    use axum::body::{Body, Bytes, HttpBody};
    use axum::http::StatusCode;
    use axum::middleware::from_fn_with_state;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};
    use std::time::Duration;

    /// A body whose first bytes arrive and the rest never does.
    struct Stalls(bool);

    impl HttpBody for Stalls {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
            if self.0 {
                return Poll::Pending;
            }
            self.0 = true;
            Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                b"{\"jsonrpc\": \"2.0\", ",
            )))))
        }
    }

    /// A body that does not arrive within the deadline is a 408 before the
    /// service is reached (it was read by the service without a deadline,
    /// holding a connection and its task for as long as the client
    /// wished); a whole one reaches it intact; one longer than the limit
    /// is a 413.
    #[test]
    fn a_body_is_read_within_its_deadline_before_the_service() {
        let gate = Arc::new(Gate {
            tokens: None,
            hosts: None,
            metrics: Metrics::default(),
            admit: Box::new(|_| Ok(())),
            body_timeout: Duration::from_millis(100),
            max_body: 64,
        });
        let reached = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r2 = reached.clone();
        let app = axum::Router::new()
            .route(
                "/mcp",
                axum::routing::post(move |body: String| {
                    r2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    async move { body }
                }),
            )
            .layer(from_fn_with_state(gate, check));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let call = |body: Body| {
            use hyper::service::Service;
            let req = axum::http::Request::post("/mcp").body(body).unwrap();
            let svc = hyper_util::service::TowerToHyperService::new(app.clone());
            rt.block_on(async {
                let r = tokio::time::timeout(Duration::from_secs(5), svc.call(req))
                    .await
                    .expect("answered within the deadline, not when the body ends")
                    .unwrap();
                let status = r.status();
                let body = http_body_util::BodyExt::collect(r.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                (status, String::from_utf8_lossy(&body).to_string())
            })
        };
        let (status, text) = call(Body::new(Stalls(false)));
        assert_eq!(status, StatusCode::REQUEST_TIMEOUT, "{text}");
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 0);
        let (status, text) = call(Body::from("{\"jsonrpc\": \"2.0\"}"));
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(text, "{\"jsonrpc\": \"2.0\"}");
        let (status, _) = call(Body::from("x".repeat(65)));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(reached.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
