//! Load for `ipc serve`: CLIENTS callers at once, each sending its share of
//! the proposal lines one after the other; prints decisions per second and
//! the latency of each decision (p50, p99, max). Run through
//! `scripts/bench-serve`.
//!
//! ```text
//! serve_bench http ADDR TOKEN_FILE PROPOSALS CLIENTS
//!     CLIENTS keep-alive HTTP/1.1 connections to `ipc serve --listen ADDR`
//! serve_bench stdio PROPOSALS CLIENTS -- IPC serve --stdio ...
//!     one `ipc serve --stdio` child; CLIENTS lines in flight at once (a
//!     line is written when one of the CLIENTS slots is free), answers in order
//! ```
//!
//! Every answer must be an ALLOW: the bench fails otherwise.

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error + Send + Sync>;

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, rest) = args
        .split_first()
        .ok_or("usage: serve_bench http|stdio ...")?;
    let (lat, took) = match (mode.as_str(), rest) {
        ("http", [addr, token, proposals, clients]) => {
            let token = std::fs::read_to_string(token)?.trim().to_string();
            let lines = read_lines(proposals)?;
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            rt.block_on(http(addr.clone(), token, lines, clients.parse()?))?
        }
        ("stdio", [proposals, clients, dashdash, cmd @ ..]) if dashdash == "--" => {
            stdio(read_lines(proposals)?, clients.parse()?, cmd)?
        }
        _ => return Err("usage: serve_bench http ADDR TOKEN_FILE PROPOSALS CLIENTS | serve_bench stdio PROPOSALS CLIENTS -- CMD...".into()),
    };
    report(mode, lat, took);
    Ok(())
}

fn read_lines(p: &str) -> Result<Vec<String>, Error> {
    Ok(std::fs::read_to_string(p)?
        .lines()
        .map(str::to_string)
        .collect())
}

fn report(mode: &str, mut lat: Vec<Duration>, took: Duration) {
    lat.sort();
    let n = lat.len();
    let q = |p: f64| {
        let i = ((n as f64 * p).ceil() as usize).clamp(1, n.max(1)) - 1;
        lat.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    println!(
        "{mode:<6} {n} decisions  {:>7.0} /s  p50 {:>6.2} ms  p99 {:>6.2} ms  max {:>6.2} ms",
        n as f64 / took.as_secs_f64(),
        q(0.50),
        q(0.99),
        q(1.0),
    );
}

fn check(answer: &[u8]) -> Result<(), Error> {
    let text = String::from_utf8_lossy(answer);
    if text.contains("\"decision\":\"ALLOW\"") {
        Ok(())
    } else {
        Err(format!("not an ALLOW: {text}").into())
    }
}

async fn http(
    addr: String,
    token: String,
    lines: Vec<String>,
    clients: usize,
) -> Result<(Vec<Duration>, Duration), Error> {
    let clients = clients.max(1);
    let lines = Arc::new(lines);
    let start = Instant::now();
    let mut tasks = vec![];
    for k in 0..clients {
        let (addr, token, lines) = (addr.clone(), token.clone(), lines.clone());
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await?;
            stream.set_nodelay(true)?;
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(conn);
            let mut lat = vec![];
            for line in lines.iter().skip(k).step_by(clients) {
                let req = hyper::Request::post("/v1/decide")
                    .header("host", "localhost")
                    .header("content-type", "application/json")
                    .header("authorization", format!("Bearer {token}"))
                    .body(Full::new(Bytes::from(line.clone())))?;
                let t = Instant::now();
                let resp = send.send_request(req).await?;
                let body = resp.into_body().collect().await?.to_bytes();
                lat.push(t.elapsed());
                check(&body)?;
            }
            Ok::<_, Error>(lat)
        }));
    }
    let mut all = vec![];
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((all, start.elapsed()))
}

fn stdio(
    lines: Vec<String>,
    clients: usize,
    cmd: &[String],
) -> Result<(Vec<Duration>, Duration), Error> {
    let (prog, args) = cmd.split_first().ok_or("no command after `--`")?;
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?);
    let (free, slot) = std::sync::mpsc::sync_channel::<()>(clients.max(1));
    for _ in 0..clients.max(1) {
        free.send(())?;
    }
    let sent: Arc<Mutex<VecDeque<Instant>>> = Arc::default();
    let n = lines.len();
    let start = Instant::now();
    let writer = {
        let sent = sent.clone();
        std::thread::spawn(move || -> std::io::Result<()> {
            for line in lines {
                if slot.recv().is_err() {
                    break;
                }
                sent.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push_back(Instant::now());
                stdin.write_all(line.as_bytes())?;
                stdin.write_all(b"\n")?;
                stdin.flush()?;
            }
            Ok(())
        })
    };
    let mut lat = Vec::with_capacity(n);
    for answer in stdout.lines().take(n) {
        let answer = answer?;
        let t = sent
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front()
            .ok_or("an answer to no line")?;
        lat.push(t.elapsed());
        check(answer.as_bytes())?;
        let _ = free.send(());
    }
    let took = start.elapsed();
    drop(free);
    writer.join().map_err(|_| "the writer panicked")??;
    child.wait()?;
    if lat.len() != n {
        return Err(format!("{} answers to {n} lines", lat.len()).into());
    }
    Ok((lat, took))
}
