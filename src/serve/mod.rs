//! The gateway as an HTTP service (`ipc serve --listen`): one router of
//! separate sub-routers, each behind its own checks (`http.rs`: the router
//! and the server; `api.rs`: the agent host's API and `/metrics`;
//! `page.rs`: the approval page and approver sessions; `owner.rs`: an
//! owner's signed registry changes; `common.rs`: what they share;
//! `openapi.rs`: the API's description; `ready.rs`: the readiness probe;
//! `listen.rs`: sockets, the connection bound and timeouts; `gate.rs`: the
//! same checks in front of another service, `ipc mcp --listen`; `auth.rs`: the
//! bearer token; `metrics.rs`: the Prometheus counters). It reads the
//! gateway and the store, never the command line or the compiler.

// the service itself: the `http` feature (its flags and errors below are
// in every build, so that `ipc serve` can say what it would need)
#[cfg(feature = "http")]
mod api;
#[cfg(feature = "http")]
mod auth;
#[cfg(feature = "http")]
mod common;
#[cfg(feature = "http")]
mod gate;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
mod listen;
#[cfg(feature = "http")]
mod mandates;
#[cfg(feature = "http")]
mod metrics;
#[cfg(feature = "http")]
mod openapi;
#[cfg(feature = "http")]
mod owner;
#[cfg(feature = "http")]
mod page;
#[cfg(feature = "http")]
mod ready;
#[cfg(feature = "http")]
mod signin;

#[cfg(feature = "http")]
pub use gate::{Admit, serve_gated};
#[cfg(feature = "http")]
pub use http::{App, routes, serve};

use miette::Diagnostic;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

/// Why `ipc serve` does not start.
#[derive(Debug, thiserror::Error, Diagnostic)]
pub enum ServeError {
    /// `ipc serve` was given neither `--stdio` nor `--listen`: it does not
    /// guess how the caller means to reach it (a server that picked a port
    /// on its own could be reached by callers it was never meant for). Give
    /// `--stdio` to read JSON lines on standard input, or `--listen ADDR`
    /// for HTTP.
    #[error("give `--stdio` or `--listen ADDR`")]
    #[diagnostic(code(ipc::serve::mode))]
    NoMode,
    /// `--listen` names neither a TCP address nor a Unix socket: the server
    /// refuses to start rather than listen somewhere else than asked. A
    /// bare port means loopback (`8787` is `127.0.0.1:8787`); a Unix
    /// socket is `unix:` followed by a non-empty path.
    #[error("cannot read `{addr}` as an address to listen on")]
    #[diagnostic(
        code(ipc::serve::listen_address),
        help("`127.0.0.1:8787`, `8787` (loopback), `[::1]:8787` or `unix:/path/to.sock`")
    )]
    ListenAddress { addr: String },
    /// A loopback TCP address without `--auth-token-file`. Loopback is not
    /// private: every process on the machine, and every web page its user
    /// opens in a browser, can send requests to it, so the HTTP service
    /// never runs on TCP without a bearer token, loopback included. A Unix
    /// socket (created 0600) needs no token: only its owner can connect.
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
    /// A TCP address other than loopback without `--auth-token-file`:
    /// anyone who can reach that address on the network could have
    /// proposals decided and read the receipts. The server refuses to start
    /// instead of serving them; give a token file, or listen on loopback
    /// (with a token) or on a Unix socket.
    #[error(
        "`{addr}` is not a loopback address: serving it without `--auth-token-file` would let anyone on the network decide"
    )]
    #[diagnostic(
        code(ipc::serve::exposed_without_auth),
        help("give `--auth-token-file FILE`, or listen on `127.0.0.1:PORT`")
    )]
    ExposedWithoutAuth { addr: String },
    /// The operating system refused the address `--listen` names (the
    /// port is taken or privileged, the address is not this machine's, the
    /// socket's folder is missing or not writable, the socket's mode could
    /// not be set to 0600) and its reason is given. The server stops
    /// before it serves anything. Free the port or choose another address
    /// or path.
    #[error("cannot listen on `{addr}`: {reason}")]
    #[diagnostic(code(ipc::serve::bind))]
    Bind { addr: String, reason: String },
    /// `--listen unix:PATH` names a file that exists and is not a socket.
    /// `ipc serve` replaces only a socket nobody listens on (one left by a
    /// server that was killed); removing any other file would destroy data
    /// that a typing mistake pointed at.
    #[error("`{path}` exists and is not a socket: `ipc serve` does not replace it")]
    #[diagnostic(
        code(ipc::serve::socket_path),
        help("choose another path for `--listen unix:PATH`")
    )]
    NotASocket { path: String },
    /// `--listen unix:PATH` names a socket another process accepts
    /// connections on (the server tried to connect to it). Taking it over
    /// would cut that server's callers off, so `ipc serve` stops instead;
    /// stop the other server, or choose another path.
    #[error("another server listens on `{path}`")]
    #[diagnostic(code(ipc::serve::socket_in_use))]
    SocketInUse { path: String },
    /// The file of `--auth-token-file` cannot be read, holds no token, or
    /// a line of it is not a token with its tenants (the reason names the
    /// line): a token shorter than 16 printable characters, a bad
    /// `sha256:` digest, the same token twice, tenants that are not a
    /// comma-separated list. The server does not start on a file it cannot
    /// use, and a server already running refuses every request while its
    /// file is unusable (fail closed) rather than fall back to no token.
    #[error("cannot use the token file `{path}`: {reason}")]
    #[diagnostic(
        code(ipc::serve::token_file),
        help(
            "one token a line with the tenants it may act for (`TOKEN acme,globex`, `TOKEN *` for an operator; `sha256:HEX` of a token instead of it), each token at least 16 printable characters (`head -c 32 /dev/urandom | base64`); a file of one token alone is an operator's"
        )
    )]
    TokenFile { path: String, reason: String },
    /// The server's runtime could not be set up: tokio's runtime or the
    /// decider thread could not be created, or the bound address could not
    /// be read back; the operating system's reason is given. Nothing was
    /// served.
    #[error("cannot start the server: {reason}")]
    #[diagnostic(code(ipc::serve::runtime))]
    Runtime { reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Notify(#[from] crate::gateway::notify::NotifyError),
}

/// Where `--listen` points.
#[derive(Clone, Debug)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl ListenAddr {
    pub fn parse(s: &str) -> Result<ListenAddr, ServeError> {
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

    /// A TCP address (`addr` as given) is served only with a token file:
    /// every process on the machine, and every web page its user opens,
    /// reaches a loopback port; anyone on the network another one. A Unix
    /// socket (mode 0600) needs none.
    pub fn require_auth(&self, addr: &str, has_token_file: bool) -> Result<(), ServeError> {
        match self {
            ListenAddr::Tcp(sa) if !has_token_file => Err(if sa.ip().is_loopback() {
                ServeError::AuthRequired {
                    addr: addr.to_string(),
                }
            } else {
                ServeError::ExposedWithoutAuth {
                    addr: addr.to_string(),
                }
            }),
            _ => Ok(()),
        }
    }
}

/// Everything the HTTP server needs besides the gateway.
pub struct HttpConfig {
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
            ListenAddr::parse("unix:/run/ipc/s.sock"),
            Ok(ListenAddr::Unix(p)) if p.to_str() == Some("/run/ipc/s.sock")
        ));
        for bad in ["unix:", "example.com:80", "localhost:x", ""] {
            assert!(ListenAddr::parse(bad).is_err(), "{bad}");
        }
    }
}
