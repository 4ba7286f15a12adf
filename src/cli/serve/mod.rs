//! `ipc serve`: the gateway as a long-lived process. `--stdio`: one JSON
//! line in, one decision line out (for harnesses). `--listen ADDR`: HTTP
//! JSON for many callers at once (`http.rs`: routes and checks; `listen.rs`:
//! sockets, the connection bound and timeouts; `auth.rs`: the bearer token;
//! `metrics.rs`: the Prometheus counters; `page.rs`: the approval page and
//! approver sessions; `owner.rs`: an owner's signed registry changes).

mod auth;
mod http;
mod listen;
mod metrics;
mod owner;
mod page;

use super::gateway::{GatewayArgs, Line, malformed, next_line, parse_line};
use miette::Diagnostic;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Serve JSON lines on standard input and output.
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,
    /// Serve HTTP on this address: `127.0.0.1:8787` (port 0 picks one),
    /// `8787` (loopback), `[::1]:8787`, or `unix:/path/to.sock`. A TCP
    /// address needs `--auth-token-file`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The bearer tokens callers must send (`Authorization: Bearer TOKEN`),
    /// each with the tenants it may act for (`TOKEN acme,globex`, `TOKEN *`
    /// for an operator; one token alone: an operator's), read from this
    /// file: re-read when the file changes, on a token that does not match,
    /// and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// A `Host` the server answers to (repeatable; `name` or `name:port`),
    /// instead of its own loopback names: what a reverse proxy sends.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
    /// Serve `/metrics` without the token (to a scraper on a trusted
    /// network; the counters show decision volume, nothing else).
    #[arg(long)]
    pub public_metrics: bool,
    /// Run on an in-memory store: approvals, budgets and idempotency last
    /// only as long as the process (`ipc serve` refuses to start without a
    /// store otherwise).
    #[arg(long)]
    pub ephemeral: bool,
    /// Connections open at once; more wait in the listen queue.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_connections: usize,
    /// Decisions (and receipt reads) running at once; more wait their
    /// turn. A request's body is read before it waits.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_in_flight: usize,
    /// Seconds a client has to send a request's headers (also how long an
    /// idle connection stays open).
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub body_timeout: u64,
    /// Seconds an answer may wait for the client to read it before the
    /// connection is dropped.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub write_timeout: u64,
    /// Serve a world that fixes the `clock` (development and replays only:
    /// at a fixed time nothing expires). Without it `ipc serve` refuses
    /// such a world.
    #[arg(long)]
    pub allow_frozen_clock: bool,
    /// Mandate token for inputs that carry none.
    #[arg(long, value_name = "FILE")]
    pub mandate: Option<PathBuf>,
}

/// Why `ipc serve` does not start.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum ServeError {
    #[error("give `--stdio` or `--listen ADDR`")]
    #[diagnostic(code(ipc::serve::mode))]
    NoMode,
    #[error("cannot read `{addr}` as an address to listen on")]
    #[diagnostic(
        code(ipc::serve::listen_address),
        help("`127.0.0.1:8787`, `8787` (loopback), `[::1]:8787` or `unix:/path/to.sock`")
    )]
    ListenAddress { addr: String },
    #[error(
        "`--listen {addr}` needs `--auth-token-file`: every process on this machine, and every web page its user opens, can reach a loopback port"
    )]
    #[diagnostic(
        code(ipc::serve::auth_required),
        help(
            "write a random token to a file readable by you only (`head -c 32 /dev/urandom | base64 > token; chmod 600 token`) and give `--auth-token-file token`, or listen on `unix:/path/to.sock`"
        )
    )]
    AuthRequired { addr: String },
    #[error(
        "`{addr}` is not a loopback address: serving it without `--auth-token-file` would let anyone on the network decide"
    )]
    #[diagnostic(
        code(ipc::serve::exposed_without_auth),
        help("give `--auth-token-file FILE`, or listen on `127.0.0.1:PORT`")
    )]
    ExposedWithoutAuth { addr: String },
    #[error("cannot listen on `{addr}`: {reason}")]
    #[diagnostic(code(ipc::serve::bind))]
    Bind { addr: String, reason: String },
    #[error("`{path}` exists and is not a socket: `ipc serve` does not replace it")]
    #[diagnostic(
        code(ipc::serve::socket_path),
        help("choose another path for `--listen unix:PATH`")
    )]
    NotASocket { path: String },
    #[error("another server listens on `{path}`")]
    #[diagnostic(code(ipc::serve::socket_in_use))]
    SocketInUse { path: String },
    #[error("cannot use the token file `{path}`: {reason}")]
    #[diagnostic(
        code(ipc::serve::token_file),
        help(
            "one token a line with the tenants it may act for (`TOKEN acme,globex`, `TOKEN *` for an operator; `sha256:HEX` of a token instead of it), each token at least 16 printable characters (`head -c 32 /dev/urandom | base64`); a file of one token alone is an operator's"
        )
    )]
    TokenFile { path: String, reason: String },
    #[error("cannot start the server: {reason}")]
    #[diagnostic(code(ipc::serve::runtime))]
    Runtime { reason: String },
}

/// Where `--listen` points.
#[derive(Clone, Debug)]
pub(crate) enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddr {
    pub(crate) fn parse(s: &str) -> Result<ListenAddr, ServeError> {
        let bad = || ServeError::ListenAddress {
            addr: s.to_string(),
        };
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err(bad());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(p)));
        }
        let loopback = |port: &str| {
            port.parse::<u16>()
                .map(|p| ListenAddr::Tcp(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p)))
        };
        if let Ok(a) = loopback(s) {
            return Ok(a);
        }
        if let Some(port) = s.strip_prefix("localhost:") {
            return loopback(port).map_err(|_| bad());
        }
        s.parse::<SocketAddr>()
            .map(ListenAddr::Tcp)
            .map_err(|_| bad())
    }
}

/// Everything the HTTP server needs besides the gateway.
pub(crate) struct HttpConfig {
    pub listen: ListenAddr,
    pub token_file: Option<PathBuf>,
    pub allowed_hosts: Vec<String>,
    pub public_metrics: bool,
    pub max_connections: usize,
    pub max_in_flight: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub write_timeout: Duration,
}

impl HttpConfig {
    /// Reads the flags; refuses a TCP address without a token.
    fn from_args(args: &ServeArgs, addr: &str) -> Result<HttpConfig, ServeError> {
        let listen = ListenAddr::parse(addr)?;
        if let ListenAddr::Tcp(sa) = &listen
            && args.auth_token_file.is_none()
        {
            return Err(if sa.ip().is_loopback() {
                ServeError::AuthRequired {
                    addr: addr.to_string(),
                }
            } else {
                ServeError::ExposedWithoutAuth {
                    addr: addr.to_string(),
                }
            });
        }
        Ok(HttpConfig {
            listen,
            token_file: args.auth_token_file.clone(),
            allowed_hosts: args
                .allowed_host
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            public_metrics: args.public_metrics,
            max_connections: args.max_connections.max(1),
            max_in_flight: args.max_in_flight.max(1),
            header_timeout: Duration::from_secs(args.header_timeout.max(1)),
            body_timeout: Duration::from_secs(args.body_timeout.max(1)),
            write_timeout: Duration::from_secs(args.write_timeout.max(1)),
        })
    }
}

pub fn run(args: &ServeArgs, out: &mut dyn Write) -> u8 {
    let fail = |e: &dyn Diagnostic| {
        eprint!("{}", super::bundle::render_error(e, false));
    };
    // the listen flags first: a server that cannot start says so before
    // it loads anything
    let config = match (&args.listen, args.stdio) {
        (_, true) => None,
        (Some(addr), false) => match HttpConfig::from_args(args, addr) {
            Ok(c) => Some(c),
            Err(e) => {
                fail(&e);
                return 2;
            }
        },
        (None, false) => {
            fail(&ServeError::NoMode);
            return 2;
        }
    };
    let mut gateway_args = args.gateway.clone();
    gateway_args.ephemeral_ok = args.ephemeral;
    gateway_args.frozen_clock_ok = args.allow_frozen_clock;
    gateway_args.announce_frozen_clock = args.allow_frozen_clock;
    gateway_args.wait_for_store = true;
    let Some((gw, mandate)) = super::gateway::load_with_mandate(&gateway_args, &args.mandate)
    else {
        return 1;
    };
    let Some(config) = config else {
        return stdio(&gw, mandate.as_ref(), out);
    };
    match http::serve(gw, mandate, config, out) {
        Ok(()) => 0,
        Err(e) => {
            fail(&e);
            1
        }
    }
}

/// One line in, its decision out, each committed on its own. A store that
/// cannot record a decision (not even its DENY, see
/// [`crate::gateway::Gateway::decide_batch`]) does not end the loop: that
/// line is answered with a DENY that has no receipt, the error goes to
/// stderr, the next line is read, and the exit code is 1.
fn stdio(
    gw: &crate::gateway::Gateway,
    mandate: Option<&serde_json::Value>,
    out: &mut dyn Write,
) -> u8 {
    let mut stdin = std::io::stdin().lock();
    let mut failed = false;
    loop {
        let input = match next_line(&mut stdin) {
            Ok(None) => break,
            Ok(Some(Line::Text(l))) => parse_line(&l, mandate),
            Ok(Some(Line::Bad(reason))) => malformed(reason, mandate),
            Err(e) => {
                eprintln!(
                    "error: cannot read the input: {}",
                    e.to_string().to_lowercase()
                );
                return 1;
            }
        };
        let d = match gw.decide(&input) {
            Ok(d) => d,
            Err(e) => {
                eprint!("{}", super::bundle::render_error(&e, false));
                failed = true;
                crate::gateway::Decision::unrecorded(
                    "the store failed: this line was not decided and nothing of it was committed",
                )
            }
        };
        if serde_json::to_writer(&mut *out, &d).is_err()
            || out.write_all(b"\n").is_err()
            || out.flush().is_err()
        {
            return 1;
        }
    }
    u8::from(failed)
}

#[cfg(test)]
mod tests {
    use super::ListenAddr;

    #[test]
    fn listen_addresses() {
        let tcp = |s: &str| match ListenAddr::parse(s) {
            Ok(ListenAddr::Tcp(a)) => a.to_string(),
            other => panic!("{s}: {other:?}"),
        };
        assert_eq!(tcp("8787"), "127.0.0.1:8787");
        assert_eq!(tcp("localhost:0"), "127.0.0.1:0");
        assert_eq!(tcp("[::1]:9"), "[::1]:9");
        assert_eq!(tcp("0.0.0.0:80"), "0.0.0.0:80");
        assert!(matches!(
            ListenAddr::parse("unix:/tmp/s"),
            Ok(ListenAddr::Unix(p)) if p.to_str() == Some("/tmp/s")
        ));
        for bad in ["unix:", "example.com:80", "localhost:x", ""] {
            assert!(ListenAddr::parse(bad).is_err(), "{bad}");
        }
    }
}
