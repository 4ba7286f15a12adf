//! `ipc serve --listen` as a real process, and a tiny HTTP/1.1 client over
//! real sockets (each request on its own connection, `Connection: close`),
//! for `tests/service/serve*.rs` and `tests/service/pg_serve.rs`.
#![allow(dead_code)]

use super::{TestWorld, path_str};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The bearer token of the servers `start` launches.
pub const TOKEN: &str = "test-token-0123456789abcdef";

pub fn serve_cmd(w: &TestWorld, mandate: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
    c.args([
        "serve",
        "--bundle",
        &path_str(&w.bundle_path),
        "--world",
        &path_str(&w.world_path),
        "--mandate",
        &path_str(mandate),
        // the test world fixes the clock (tests/common's `NOW`)
        "--allow-frozen-clock",
    ]);
    c
}

pub fn write_mandate(w: &TestWorld, m: &Value) -> PathBuf {
    let p = w.dir.path().join(format!(
        "m-{}.json",
        intentplane::gateway::approval::random_id().unwrap()
    ));
    std::fs::write(&p, m.to_string()).unwrap();
    p
}

/// A running `ipc serve --listen`; killed when dropped.
pub struct Server {
    pub child: Child,
    /// `127.0.0.1:PORT`, or the socket path.
    pub addr: String,
    pub unix: bool,
    pub token_file: PathBuf,
    /// The token the client sends.
    pub token: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `ipc serve` on `store` (an SQLite file or a PostgreSQL URL, or
/// `""`: the world's) with
/// a token file of its own holding `token`; `listen` is the `--listen`
/// value; `extra` more flags; its stderr goes to `stderr` (the test's, or
/// a file the test reads: the errors it expects, kept out of the test's
/// output). Returns once the server listens.
pub fn launch(
    w: &TestWorld,
    mandate: &Value,
    listen: &str,
    store: &str,
    token: &str,
    extra: &[&str],
    stderr: Stdio,
) -> Server {
    let m = write_mandate(w, mandate);
    let token_file = w.dir.path().join(format!(
        "token-{}",
        intentplane::gateway::approval::random_id().unwrap()
    ));
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut cmd = serve_cmd(w, &m);
    // no store: the world's (its shards)
    if !store.is_empty() {
        cmd.args(["--store", store]);
    }
    let mut child = cmd
        .args(["--listen", listen])
        .args(["--auth-token-file", &path_str(&token_file)])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let shown = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the server did not start: `{first}`"))
        .to_string();
    let (addr, unix) = match shown.strip_prefix("unix:") {
        Some(p) => (p.to_string(), true),
        None => (shown.strip_prefix("http://").unwrap().to_string(), false),
    };
    Server {
        child,
        addr,
        unix,
        token_file,
        token: token.to_string(),
    }
}

/// SIGTERM, and the process's exit.
pub fn terminate(s: &mut Server) {
    let pid = s.child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(s.child.wait().unwrap().success());
}

/// An answer: status, headers (lower-case names), body as JSON (or the
/// text as a JSON string when it is not JSON).
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: String,
    pub body: Value,
}

pub fn connect(s: &Server) -> Box<dyn ReadWrite> {
    try_connect(s).unwrap()
}

fn try_connect(s: &Server) -> std::io::Result<Box<dyn ReadWrite>> {
    let timeout = Some(Duration::from_secs(60));
    if s.unix {
        let c = std::os::unix::net::UnixStream::connect(&s.addr)?;
        c.set_read_timeout(timeout)?;
        Ok(Box::new(c))
    } else {
        let c = TcpStream::connect(&s.addr)?;
        c.set_read_timeout(timeout)?;
        Ok(Box::new(c))
    }
}

pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

pub fn read_resp(c: &mut dyn ReadWrite) -> Resp {
    let mut raw = String::new();
    c.read_to_string(&mut raw).unwrap();
    parse_resp(&raw)
}

pub fn parse_resp(raw: &str) -> Resp {
    let status: u16 = raw[9..12].parse().unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw, ""));
    Resp {
        status,
        headers: head.to_ascii_lowercase(),
        body: serde_json::from_str(body).unwrap_or(Value::String(body.to_string())),
    }
}

/// A request with the usual headers (`Host: localhost`, JSON, the
/// server's token) changed by `headers`: a `(name, None)` drops one,
/// `(name, Some(v))` sets it.
pub fn request(
    s: &Server,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, Option<&str>)],
) -> Resp {
    try_request(s, method, path, body, headers).unwrap()
}

/// [`request`], with the socket's error when the server is gone (killed)
/// or cut the answer short.
pub fn try_request(
    s: &Server,
    method: &str,
    path: &str,
    body: &str,
    headers: &[(&str, Option<&str>)],
) -> std::io::Result<Resp> {
    let bearer = format!("Bearer {}", s.token);
    let mut hs: Vec<(String, String)> = vec![
        ("Host".into(), "localhost".into()),
        ("Content-Type".into(), "application/json".into()),
        ("Authorization".into(), bearer),
    ];
    for (k, v) in headers {
        hs.retain(|(n, _)| !n.eq_ignore_ascii_case(k));
        if let Some(v) = v {
            hs.push((k.to_string(), v.to_string()));
        }
    }
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in hs {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ));
    let mut c = try_connect(s)?;
    c.write_all(text.as_bytes())?;
    let mut raw = String::new();
    c.read_to_string(&mut raw)?;
    if raw.len() < 12 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("a short answer: `{raw}`"),
        ));
    }
    Ok(parse_resp(&raw))
}

pub fn get(s: &Server, path: &str) -> Resp {
    request(s, "GET", path, "", &[])
}

pub fn post(s: &Server, body: &Value) -> Resp {
    request(s, "POST", "/v1/decide", &body.to_string(), &[])
}
