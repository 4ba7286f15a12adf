//! `ipc serve`: JSON lines over stdio, and HTTP on loopback.

mod common;
use common::*;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

fn serve(w: &TestWorld, mode: &[&str], mandate: &std::path::Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args([
            "serve",
            "--bundle",
            &path_str(&w.bundle_path),
            "--world",
            &path_str(&w.world_path),
        ])
        .args(["--mandate", &path_str(mandate)])
        .args(mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn stdio_answers_one_line_per_line() {
    let w = TestWorld::new();
    let m = w.dir.path().join("m.json");
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let mut child = serve(&w, &["--stdio"], &m);
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut ask = |line: String| -> Value {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        let mut resp = String::new();
        out.read_line(&mut resp).unwrap();
        serde_json::from_str(&resp).unwrap()
    };
    // answered before the next line is sent: a long-lived process
    let d = ask(transfer(ATTACKER_IBAN, json!("98.70")).to_string());
    assert_eq!(d["decision"], "DENY");
    assert_eq!(d["stage"], "provenance");
    let d = ask(transfer(LANDLORD, json!("98.70")).to_string());
    assert_eq!(d["decision"], "ALLOW");
    assert_eq!(d["resolved"]["payee_iban"], LANDLORD);
    let d = ask("{\"action\": ".into());
    assert_eq!(d["decision"], "DENY");
    assert_eq!(d["stage"], "contract");
    let d = ask(transfer(LANDLORD, json!("1500.00")).to_string());
    assert_eq!(d["decision"], "PENDING");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let env = json!({"proposal": transfer(LANDLORD, json!("1500.00")),
                     "approvals": [w.approve("emma", &op)]});
    let d = ask(env.to_string());
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["approvers"], json!(["emma"]));
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    let status: u16 = resp[9..12].parse().unwrap();
    let body = resp.split("\r\n\r\n").nth(1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[test]
fn http_decides_takes_approvals_and_shows_receipts() {
    let w = TestWorld::new();
    let m = w.dir.path().join("m.json");
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let mut child = serve(&w, &["--listen", "127.0.0.1:0"], &m);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let port: u16 = first.trim().rsplit(':').next().unwrap().parse().unwrap();

    let (st, v) = http(port, "GET", "/v1/health", "");
    assert_eq!((st, v["ok"].clone()), (200, json!(true)));
    let (st, d) = http(
        port,
        "POST",
        "/v1/decide",
        &transfer(ATTACKER_IBAN, json!(10)).to_string(),
    );
    assert_eq!(st, 200);
    assert_eq!(d["decision"], "DENY");
    let p = transfer(LANDLORD, json!("2000.00"));
    let (_, d) = http(port, "POST", "/v1/decide", &p.to_string());
    assert_eq!(d["decision"], "PENDING");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let env = json!({"proposal": p, "approvals": [w.approve("emma", &op)]});
    let (_, d) = http(port, "POST", "/v1/decide", &env.to_string());
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let (st, r) = http(port, "GET", "/v1/receipts?last=2", "");
    assert_eq!(st, 200);
    let r = r.as_array().unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(r[1]["body"]["decision"], "ALLOW");
    let (st, e) = http(port, "GET", "/v1/receipts?last=two", "");
    assert_eq!(st, 400, "a bad `last` is an error, not the default: {e}");
    assert!(e["error"].as_str().unwrap().contains("`two`"), "{e}");
    let (st, _) = http(port, "GET", "/nope", "");
    assert_eq!(st, 404);
    let (st, d) = http(port, "POST", "/v1/decide", "{\"a\":1,\"a\":2}");
    assert_eq!(st, 200);
    assert_eq!(d["stage"], "contract");
    child.kill().unwrap();
    let _ = child.wait();
}
