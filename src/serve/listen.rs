//! Sockets and connections: binding TCP or a Unix socket (mode 0600, never
//! over a file that is not a socket), the bound on open connections (a
//! connection is accepted only when there is room: the rest wait in the
//! kernel's listen queue), hyper's HTTP/1 limits — the header read
//! timeout (which also closes idle keep-alive connections), the header
//! size and count —, and a write timeout (a client that never reads its
//! answers is dropped).

use super::{HttpConfig, ListenAddr, ServeError};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;

/// Where a request came from: the client's IP address (an IPv6 address
/// by its /64, what one host is usually given), or `None` on a Unix
/// socket. Set on every request by the accept loop (`listen.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Peer(pub Option<std::net::IpAddr>);

impl Peer {
    pub(crate) fn of(addr: std::net::IpAddr) -> Peer {
        use std::net::IpAddr;
        Peer(Some(match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let s = v6.segments();
                    IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
                }
            },
            v4 => v4,
        }))
    }
}

/// Largest request head (start line and headers).
const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most headers in one request.
const MAX_HEADERS: usize = 64;

pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `addr`. A Unix socket path that exists is replaced only if it
    /// is a socket nobody listens on (left by a server that was killed).
    pub(crate) async fn bind(addr: &ListenAddr) -> Result<Listener, ServeError> {
        match addr {
            ListenAddr::Tcp(sa) => {
                TcpListener::bind(sa)
                    .await
                    .map(Listener::Tcp)
                    .map_err(|e| ServeError::Bind {
                        addr: sa.to_string(),
                        reason: e.to_string().to_lowercase(),
                    })
            }
            ListenAddr::Unix(path) => bind_unix(path),
        }
    }

    /// What the server prints: `http://IP:PORT` or `unix:PATH`.
    pub(crate) fn shown(&self) -> String {
        match self {
            Listener::Tcp(l) => match l.local_addr() {
                Ok(a) => format!("http://{a}"),
                Err(_) => "http://?".into(),
            },
            Listener::Unix(_, p) => format!("unix:{}", p.display()),
        }
    }
}

fn bind_unix(path: &Path) -> Result<Listener, ServeError> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let shown = path.display().to_string();
    let bind_err = |e: std::io::Error| ServeError::Bind {
        addr: format!("unix:{shown}"),
        reason: e.to_string().to_lowercase(),
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(ServeError::SocketInUse { path: shown });
            }
            std::fs::remove_file(path).map_err(bind_err)?;
        }
        Ok(_) => return Err(ServeError::NotASocket { path: shown }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(bind_err(e)),
    }
    let l = UnixListener::bind(path).map_err(bind_err)?;
    // before the first accept: nobody else's connection is ever served
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(bind_err(e));
    }
    Ok(Listener::Unix(l, path.to_path_buf()))
}

/// Serves connections with `app` until `shutdown` completes; a Unix
/// socket's file is removed then.
pub(crate) async fn accept_loop(
    listener: Listener,
    app: axum::Router,
    config: &HttpConfig,
    shutdown: impl Future<Output = ()>,
) {
    let room = Arc::new(Semaphore::new(config.max_connections));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(config.header_timeout)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS);
    tokio::pin!(shutdown);
    loop {
        // room first: beyond the bound, connections wait unaccepted
        let permit = tokio::select! {
            p = room.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
            _ = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            a = accept(&listener) => a,
            _ = &mut shutdown => break,
        };
        let http = http.clone();
        let write_timeout = config.write_timeout;
        match accepted {
            Ok(Stream::Tcp(s)) => {
                let _ = s.set_nodelay(true);
                let peer = s.peer_addr().map_or(Peer(None), |a| Peer::of(a.ip()));
                let svc = with_peer(&app, peer);
                tokio::spawn(async move {
                    let _permit = permit;
                    serve_one(http, s, svc, write_timeout).await;
                });
            }
            Ok(Stream::Unix(s)) => {
                let svc = with_peer(&app, Peer(None));
                tokio::spawn(async move {
                    let _permit = permit;
                    serve_one(http, s, svc, write_timeout).await;
                });
            }
            Err(e) => {
                // out of file descriptors, or a connection reset before it
                // was accepted: wait a little instead of spinning
                crate::base::log::warn(
                    "accept",
                    &format!(
                        "cannot accept a connection: {}",
                        e.to_string().to_lowercase()
                    ),
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    if let Listener::Unix(_, p) = &listener {
        let _ = std::fs::remove_file(p);
    }
}

/// The app, with the client's address on each request of the connection
/// (the approval page bounds its challenges per address).
fn with_peer(app: &axum::Router, peer: Peer) -> TowerToHyperService<axum::Router> {
    TowerToHyperService::new(app.clone().layer(axum::Extension(peer)))
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(l: &Listener) -> std::io::Result<Stream> {
    match l {
        Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
        Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
    }
}

async fn serve_one<S>(
    http: hyper::server::conn::http1::Builder,
    stream: S,
    svc: TowerToHyperService<axum::Router>,
    write_timeout: Duration,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(WriteTimeout {
        inner: stream,
        limit: write_timeout,
        timer: None,
    });
    // a connection's errors (a client gone, a header timeout) are its own
    let _ = http.serve_connection(io, svc).await;
}

/// A stream whose writes fail once one has waited `limit` for the client
/// to make room: a client that sends requests and never reads the answers
/// would otherwise hold its connection (and a place under the bound)
/// forever, since hyper stops reading while it cannot write.
struct WriteTimeout<S> {
    inner: S,
    limit: Duration,
    /// Armed while a write is pending.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> WriteTimeout<S> {
    fn guard<T>(&mut self, cx: &mut Context<'_>, r: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if r.is_ready() {
            self.timer = None;
            return r;
        }
        let limit = self.limit;
        let timer = self
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if timer.as_mut().poll(cx).is_ready() {
            self.timer = None;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read its answer in time",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, r)
    }
}
