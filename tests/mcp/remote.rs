//! A downstream over Streamable HTTP, in process: the demo server served
//! by rmcp's Streamable HTTP server on loopback, behind a bearer token
//! (an axum layer of the test), and the proxy started against it with the
//! `url` transport (`intentplane::mcp::transport`). What the server
//! executed is read from its state file. The Python tests
//! (tests/py/test_mcp_remote.py) drive the same through the official SDK,
//! with TLS and `ipc mcp --listen`.
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::common::mcp::executed;
use intentplane::gateway::testkit::{MandateSpec, TestWorld};
use intentplane::mcp::config::{Bearer, Remote, ServerConfig, Transport};
use intentplane::mcp::demo_server::{DemoOptions, DemoServer};
use intentplane::mcp::proxy::{Proxy, ProxyError};
use intentplane::mcp::testkit;
use intentplane::mcp::transport::RemoteError;
use intentplane::store::Store;
use intentplane::store::sqlite::SqliteStore;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const TOKEN: &str = "remote-rust-token-0123456789abcdef";

/// The demo server over Streamable HTTP at `http://127.0.0.1:PORT/mcp`,
/// answering 401 to a request without `Bearer TOKEN`; counts the
/// requests that reach it.
async fn http_demo(state: &Path) -> (String, Arc<AtomicUsize>) {
    let state = state.to_path_buf();
    let svc = StreamableHttpService::new(
        move || {
            DemoServer::new(DemoOptions {
                state: Some(state.clone()),
                ..Default::default()
            })
            .map_err(std::io::Error::other)
        },
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let reached = Arc::new(AtomicUsize::new(0));
    let counter = reached.clone();
    let app = axum::Router::new()
        .route_service("/mcp", svc)
        .layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let counter = counter.clone();
                async move {
                    let ok = req
                        .headers()
                        .get("authorization")
                        .is_some_and(|v| v.as_bytes() == format!("Bearer {TOKEN}").as_bytes());
                    if !ok {
                        return axum::http::Response::builder()
                            .status(401)
                            .header("www-authenticate", "Bearer")
                            .body(axum::body::Body::empty())
                            .unwrap();
                    }
                    counter.fetch_add(1, Ordering::SeqCst);
                    next.run(req).await
                }
            },
        ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/mcp"), reached)
}

fn remote(url: &str, token: Option<&str>) -> ServerConfig {
    ServerConfig {
        name: "demo".into(),
        transport: Transport::Http(Remote {
            url: url.into(),
            token: token.map(|t| Bearer::new(t.into())),
            ca: None,
        }),
    }
}

struct Setup {
    tw: TestWorld,
    state: PathBuf,
    store: Arc<dyn Store>,
}

fn world() -> Setup {
    let tw = TestWorld::new();
    let state = tw.dir.path().join("demo-state.json");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(tw.dir.path().join("store.db")).unwrap());
    Setup { tw, state, store }
}

async fn start(s: &Setup, server: ServerConfig) -> Result<Proxy, ProxyError> {
    let setup = testkit::setup(
        &s.tw,
        MandateSpec::bank("emma"),
        server,
        testkit::demo_tools(),
        s.store.clone(),
        true,
    );
    Proxy::start(setup).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_call_reaches_an_http_downstream_with_the_trusted_values() {
    let s = world();
    let (url, reached) = http_demo(&s.state).await;
    let proxy = start(&s, remote(&url, Some(TOKEN))).await.expect("starts");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(proxy.clone().serve_on(a));
    let client = ().serve(b).await.unwrap();
    let call = |tool: &str, args: Value| {
        CallToolRequestParams::new(tool.to_string())
            .with_arguments(args.as_object().cloned().unwrap())
    };
    let read = client
        .call_tool(call("read_inbox", json!({})))
        .await
        .unwrap();
    assert_ne!(read.is_error, Some(true));
    let denied = client
        .call_tool(call(
            "send_money",
            json!({"recipient": intentplane::mcp::demo_server::ATTACKER_IBAN, "amount": 50.5, "currency": "EUR", "subject": "x"}),
        ))
        .await
        .unwrap();
    assert_eq!(denied.is_error, Some(true));
    let paid = client
        .call_tool(call(
            "send_money",
            json!({"recipient": "de44 5001 0517 5407 3249 31", "amount": 50.5, "currency": "EUR", "subject": "Gym"}),
        ))
        .await
        .unwrap();
    assert_ne!(paid.is_error, Some(true), "{paid:?}");
    let sent = executed(&s.state, "send_money");
    assert_eq!(sent.len(), 1, "the DENY sent nothing");
    assert_eq!(
        sent[0]["args"]["recipient"]
            .as_str()
            .unwrap()
            .replace(' ', ""),
        "DE44500105175407324931"
    );
    assert_eq!(sent[0]["args"]["amount"], json!(50.5));
    assert!(reached.load(Ordering::SeqCst) > 0);
    proxy.flush().await;
    let kinds: Vec<Value> = s
        .store
        .receipts()
        .unwrap()
        .iter()
        .map(|r| r.body["kind"].clone())
        .collect();
    assert!(kinds.contains(&json!("passthrough")), "{kinds:?}");
    assert!(kinds.contains(&json!("outcome")), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_token_or_no_server_stops_the_proxy() {
    let s = world();
    let (url, reached) = http_demo(&s.state).await;
    for token in [None, Some("not-the-token-0123456789")] {
        match start(&s, remote(&url, token)).await {
            Err(ProxyError::Remote(RemoteError::Unauthorized { server, .. })) => {
                assert_eq!(server, "demo")
            }
            Err(e) => panic!("{token:?}: {e}"),
            Ok(_) => panic!("{token:?}: the proxy started"),
        }
    }
    assert_eq!(reached.load(Ordering::SeqCst), 0);
    // a port nobody listens on
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    match start(&s, remote(&format!("http://{closed}/mcp"), Some(TOKEN))).await {
        Err(ProxyError::Remote(RemoteError::Connect { reason, .. })) => {
            assert!(!reason.is_empty())
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("the proxy started"),
    }
    assert!(executed(&s.state, "read_inbox").is_empty());
}

/// The same check of the config against what the server declares, read
/// over HTTP (`ipc mcp --check --servers`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_declarations_of_an_http_downstream_are_read() {
    let s = world();
    let (url, _) = http_demo(&s.state).await;
    let servers = vec![remote(&url, Some(TOKEN))];
    let declared =
        tokio::task::spawn_blocking(move || intentplane::mcp::proxy::declarations(&servers))
            .await
            .unwrap()
            .expect("read");
    let names: Vec<&str> = declared["demo"].iter().map(|t| t.name.as_str()).collect();
    assert!(
        names.contains(&"send_money") && names.contains(&"read_inbox"),
        "{names:?}"
    );
}
