//! `ipc serve`: the gateway as a long-lived process. `--stdio`: one JSON
//! line in, one decision line out (for harnesses). `--listen ADDR`: HTTP
//! JSON on a loopback address — `POST /v1/decide` (a proposal, or an
//! envelope `{proposal, mandate, approvals}`; an approval is submitted by
//! sending the proposal again with it), `GET /v1/receipts?last=N`,
//! `GET /v1/health`.

use super::gateway::{GatewayArgs, Line, malformed, next_line, parse_line};
use crate::gateway::Gateway;
use serde_json::json;
use std::io::{Read, Write};

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Serve JSON lines on standard input and output.
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,
    /// Serve HTTP on this address (e.g. `127.0.0.1:8787`; port 0 picks one).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// Mandate token for inputs that carry none.
    #[arg(long, value_name = "FILE")]
    pub mandate: Option<std::path::PathBuf>,
}

/// Largest HTTP body accepted.
const MAX_BODY: u64 = 1 << 20;

pub fn run(args: &ServeArgs, out: &mut dyn Write) -> u8 {
    let Some((gw, mandate)) = super::gateway::load_with_mandate(&args.gateway, &args.mandate)
    else {
        return 1;
    };
    if args.stdio {
        let mut stdin = std::io::stdin().lock();
        loop {
            let input = match next_line(&mut stdin) {
                Ok(None) => break,
                Ok(Some(Line::Text(l))) => parse_line(&l, mandate.as_ref()),
                Ok(Some(Line::Bad(reason))) => malformed(reason, mandate.as_ref()),
                Err(e) => {
                    eprintln!(
                        "error: cannot read the input: {}",
                        e.to_string().to_lowercase()
                    );
                    return 1;
                }
            };
            if super::run::flush(&gw, &mut vec![input], out).is_err() {
                return 1;
            }
        }
        return 0;
    }
    let Some(addr) = &args.listen else {
        eprintln!("error: give `--stdio` or `--listen ADDR`");
        return 2;
    };
    http(&gw, addr, mandate.as_ref(), out)
}

fn http(gw: &Gateway, addr: &str, mandate: Option<&serde_json::Value>, out: &mut dyn Write) -> u8 {
    let server = match tiny_http::Server::http(addr) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "error: cannot listen on `{addr}`: {}",
                e.to_string().to_lowercase()
            );
            return 1;
        }
    };
    let bound = server
        .server_addr()
        .to_ip()
        .map(|a| a.to_string())
        .unwrap_or_else(|| addr.to_string());
    let _ = writeln!(out, "listening on http://{bound}");
    let _ = out.flush();
    for mut req in server.incoming_requests() {
        let (status, body) = route(gw, &mut req, mandate);
        let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..]);
        let mut resp = tiny_http::Response::from_string(body).with_status_code(status);
        if let Ok(h) = header {
            resp = resp.with_header(h);
        }
        let _ = req.respond(resp);
    }
    0
}

fn route(
    gw: &Gateway,
    req: &mut tiny_http::Request,
    mandate: Option<&serde_json::Value>,
) -> (u16, String) {
    let url = req.url().to_string();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    match (req.method(), path) {
        (tiny_http::Method::Get, "/v1/health") => (
            200,
            json!({"ok": true, "bundle": gw.bundle_hash()}).to_string(),
        ),
        (tiny_http::Method::Post, "/v1/decide") => {
            let mut body = String::new();
            if req
                .as_reader()
                .take(MAX_BODY + 1)
                .read_to_string(&mut body)
                .is_err()
            {
                return (
                    400,
                    json!({"error": "the body is not UTF-8 text"}).to_string(),
                );
            }
            if body.len() as u64 > MAX_BODY {
                return (413, json!({"error": "body too large"}).to_string());
            }
            let input = parse_line(&body, mandate);
            match gw.decide(&input) {
                Ok(d) => ok_json(&d),
                Err(e) => (500, json!({"error": e.to_string()}).to_string()),
            }
        }
        (tiny_http::Method::Get, "/v1/receipts") => {
            let last: usize = match query.split('&').find_map(|kv| kv.strip_prefix("last=")) {
                None => 50,
                Some(n) => match n.parse() {
                    Ok(n) => n,
                    Err(_) => {
                        return (
                            400,
                            json!({"error": format!("`last` must be a whole number, not `{n}`")})
                                .to_string(),
                        );
                    }
                },
            };
            match gw.store().receipts() {
                Ok(all) => {
                    let skip = all.len().saturating_sub(last);
                    ok_json(&all[skip..])
                }
                Err(e) => (500, json!({"error": e.to_string()}).to_string()),
            }
        }
        _ => (
            404,
            json!({"error": format!("no route `{path}`")}).to_string(),
        ),
    }
}

/// A 200 with the value as JSON, or a 500 that says why it has none.
fn ok_json<T: serde::Serialize + ?Sized>(v: &T) -> (u16, String) {
    match serde_json::to_string(v) {
        Ok(body) => (200, body),
        Err(e) => (
            500,
            json!({"error": format!("cannot encode the answer: {e}")}).to_string(),
        ),
    }
}
