//! `ipc mcp --listen` as a process, driven by raw HTTP/1.1 (hyper): what
//! one client may do to another's MCP session. Two tokens act for the
//! same user, so both pass the gate; a session is nonetheless its
//! opener's (issue #39, finding 6). The Python tests
//! (tests/py/test_mcp_remote.py) drive the proxy over HTTP with the SDK.
#![cfg(all(feature = "mcp", feature = "demo"))]

use crate::session::{Env, pay};
use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const A: &str = "token-a-0123456789abcdef";
const B: &str = "token-b-0123456789abcdef";
const VERSION: &str = "2025-06-18";

/// `ipc mcp --listen 127.0.0.1:0` on `env`'s config, with a token file
/// of two tokens for `emma`; its address.
async fn listen(env: &Env) -> (tokio::process::Child, String) {
    let tokens = env.path().join("tokens");
    std::fs::write(&tokens, format!("{A} emma\n{B} emma\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .arg("mcp")
        .arg("--config")
        .arg(env.config())
        .args(["--listen", "127.0.0.1:0", "--auth-token-file"])
        .arg(&tokens)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let read = tokio::time::timeout(Duration::from_secs(60), out.read_line(&mut line)).await;
    if !matches!(read, Ok(Ok(n)) if n > 0) {
        panic!(
            "the proxy does not listen: {}",
            crate::session::stderr_of(&mut child).await
        );
    }
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    (child, addr)
}

/// One request on a connection of its own: `token`, the session `sid`,
/// a JSON body.
async fn send(
    addr: &str,
    method: Method,
    token: &str,
    sid: Option<&str>,
    body: Option<Value>,
) -> Response<Incoming> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}/mcp"))
        .header("host", addr)
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .header("mcp-protocol-version", VERSION);
    if let Some(s) = sid {
        req = req.header("mcp-session-id", s);
    }
    let body = body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()));
    tx.send_request(req.body(Full::new(body)).unwrap())
        .await
        .unwrap()
}

/// The next JSON-RPC message of an SSE response (its `data:` lines).
async fn next_message(body: &mut Incoming, buf: &mut String) -> Value {
    loop {
        if let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            let data: String = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .collect();
            if !data.is_empty() {
                return serde_json::from_str(&data).unwrap();
            }
            continue;
        }
        let frame = tokio::time::timeout(Duration::from_secs(60), body.frame())
            .await
            .expect("a message within 60 s")
            .expect("the stream goes on")
            .unwrap();
        if let Ok(data) = frame.into_data() {
            buf.push_str(&String::from_utf8_lossy(&data).replace("\r\n", "\n"));
        }
    }
}

/// Client A's session, initialised: its id.
async fn open(addr: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": VERSION, "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "a", "version": "1"}}});
    let mut r = send(addr, Method::POST, token, None, Some(init)).await;
    assert_eq!(r.status(), StatusCode::OK);
    let sid = r.headers()["mcp-session-id"].to_str().unwrap().to_string();
    let answer = next_message(r.body_mut(), &mut String::new()).await;
    assert_eq!(answer["id"], 1, "{answer}");
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let r = send(addr, Method::POST, token, Some(&sid), Some(done)).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    sid
}

/// Client B, another token for the same user, answers the step-up asked
/// of client A on A's session (accepting, declining), lists tools on it,
/// closes it: each is an unknown session, nothing executes, and A's own
/// answer still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_token_cannot_use_a_clients_session() {
    let env = Env::new("5000.00", &[]);
    let (_proxy, addr) = listen(&env).await;
    let sid = open(&addr, A).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "send_money", "arguments": pay(1600.0, "step-up")}});
    let mut stream = send(&addr, Method::POST, A, Some(&sid), Some(call)).await;
    assert_eq!(stream.status(), StatusCode::OK);
    let mut buf = String::new();
    let asked = next_message(stream.body_mut(), &mut buf).await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    let qid = asked["id"].clone();
    let answer = |action: &str| json!({"jsonrpc": "2.0", "id": qid, "result": {"action": action, "content": {}}});
    for action in ["accept", "decline"] {
        let r = send(&addr, Method::POST, B, Some(&sid), Some(answer(action))).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "B's {action}");
    }
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
    let r = send(&addr, Method::POST, B, Some(&sid), Some(list)).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = send(&addr, Method::DELETE, B, Some(&sid), None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(env.sent().is_empty(), "B's accept executed A's payment");
    // A's own answer is taken: it cancels, nothing is decided
    let r = send(&addr, Method::POST, A, Some(&sid), Some(answer("cancel"))).await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let result = next_message(stream.body_mut(), &mut buf).await;
    assert_eq!(result["id"], 2, "{result}");
    assert!(result.to_string().contains("cancelled"), "{result}");
    assert!(env.sent().is_empty());
    assert!(env.receipts("approval").is_empty(), "no decline recorded");
    // and B's own session is B's
    let b = open(&addr, B).await;
    let r = send(&addr, Method::DELETE, A, Some(&b), None).await;
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let r = send(&addr, Method::DELETE, B, Some(&b), None).await;
    assert!(r.status().is_success(), "{}", r.status());
}
