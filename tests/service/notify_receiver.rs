//! A local HTTPS receiver of `[[notify]]` deliveries: a CA and a server
//! certificate for 127.0.0.1 made per receiver (rcgen), served with
//! rustls and hyper on a runtime of its own. It records every request,
//! answers as told (200, 503, or not at all until released) and counts
//! the requests it holds at once.

#![cfg(feature = "notify")]

use http_body_util::BodyExt;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// How the receiver answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ok,
    Fail,
    /// Holds each request until the mode changes.
    Hang,
}

/// One request received.
#[derive(Clone, Debug)]
pub struct Got {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// The answer it was given (`0`: none, it hung).
    pub status: u16,
}

#[derive(Default)]
struct State {
    mode: Mutex<Option<Mode>>,
    got: Mutex<Vec<Got>>,
    now: AtomicUsize,
    max: AtomicUsize,
    changed: tokio::sync::Notify,
}

pub struct Receiver {
    pub url: String,
    pub ca_file: PathBuf,
    state: Arc<State>,
    _rt: tokio::runtime::Runtime,
}

impl Receiver {
    /// A receiver on 127.0.0.1, its CA written to `dir/ca.pem`.
    pub fn start(dir: &Path, mode: Mode) -> Receiver {
        let (ca_pem, cert_der, key_der) = certs();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_pem).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert_der], key_der)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = rt
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State::default());
        *state.mode.lock().unwrap() = Some(mode);
        rt.spawn(accept(listener, acceptor, state.clone()));
        Receiver {
            url: format!("https://127.0.0.1:{port}/hook"),
            ca_file,
            state,
            _rt: rt,
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.state.mode.lock().unwrap() = Some(mode);
        self.state.changed.notify_waiters();
    }

    pub fn got(&self) -> Vec<Got> {
        self.state.got.lock().unwrap().clone()
    }

    /// The requests answered 2xx.
    pub fn delivered(&self) -> Vec<Got> {
        self.got().into_iter().filter(|g| g.status == 200).collect()
    }

    /// The most requests held at once.
    pub fn max_concurrent(&self) -> usize {
        self.state.max.load(Ordering::SeqCst)
    }

    /// Requests being held now.
    pub fn holding(&self) -> usize {
        self.state.now.load(Ordering::SeqCst)
    }

    /// Waits (at most `secs`) until `ok` holds of the receiver.
    pub fn wait_for(&self, secs: u64, ok: impl Fn(&Receiver) -> bool) -> bool {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < end {
            if ok(self) {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        ok(self)
    }
}

/// A CA's PEM, and a certificate it signed for 127.0.0.1 with its key.
fn certs() -> (
    String,
    rustls::pki_types::CertificateDer<'static>,
    rustls::pki_types::PrivateKeyDer<'static>,
) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    (ca.pem(), cert.der().clone(), key_der)
}

async fn accept(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, state) = (acceptor.clone(), state.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(req, &state).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
        });
    }
}

struct Held<'a>(&'a AtomicUsize);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn answer(
    req: hyper::Request<hyper::body::Incoming>,
    state: &State,
) -> hyper::Response<http_body_util::Full<hyper::body::Bytes>> {
    let n = state.now.fetch_add(1, Ordering::SeqCst) + 1;
    state.max.fetch_max(n, Ordering::SeqCst);
    // counted down however the request ends (answered, or dropped with
    // its connection)
    let _held = Held(&state.now);
    let headers = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().to_vec())
        .unwrap_or_default();
    let status = loop {
        let changed = state.changed.notified();
        match *state.mode.lock().unwrap() {
            Some(Mode::Ok) => break 200,
            Some(Mode::Fail) => break 503,
            _ => {}
        }
        changed.await;
    };
    state.got.lock().unwrap().push(Got {
        headers,
        body,
        status,
    });
    hyper::Response::builder()
        .status(status)
        .body(http_body_util::Full::new(hyper::body::Bytes::from_static(
            b"{}",
        )))
        .unwrap()
}
