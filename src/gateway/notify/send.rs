//! The sender: a thread of its own that drains the outbox of every store
//! the gateway decides on (each shard's), claiming due rows in a
//! transaction, at most each target's `concurrency` in flight, and a small
//! tokio runtime that sends them (reqwest, rustls with ring: the webpki
//! roots or the target's `ca_file` alone; no redirect, no proxy from the
//! environment, a name that resolves to a private address refused unless
//! `allow_private`). Each result is recorded in the store: delivered,
//! due again after a backoff, or failed at `max_attempts` (a warning on
//! stderr and `ipc_notify_deliveries_total{outcome="failed"}`).
//! Decisions never wait for it.

use super::config::{NotifyError, Target};
use super::outbox::{self, Attempt, Delivery};
use super::{Stats, gateways};
use crate::gateway::Gateway;
use hmac::{KeyInit, Mac};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// How long the sender sleeps when nothing finished.
const IDLE: Duration = Duration::from_millis(200);
/// A claim outlives its attempt's timeout by this much (ms).
const LEASE_MARGIN_MS: i64 = 30_000;
/// The header of the signature.
pub const SIGNATURE_HEADER: &str = "x-ipc-signature";
/// The header of the idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The running sender; stopped when dropped.
pub struct Sender {
    stop: Arc<AtomicBool>,
    pub stats: Arc<Stats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sender {
    /// Stops taking rows and waits for the thread (deliveries in flight
    /// are dropped: their claims lapse and they are sent again, with the
    /// same key, by the next sender).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Starts the sender of `gw`'s world's targets; `None` when it has none.
/// A target whose `ca_file` cannot be read refuses the start.
pub fn start(gw: Arc<Gateway>) -> Result<Option<Sender>, NotifyError> {
    let targets = gw.world.notify.targets.clone();
    if targets.is_empty() {
        return Ok(None);
    }
    let mut clients = HashMap::new();
    for t in &targets {
        clients.insert(t.name.clone(), client(t)?);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("ipc-notify-io")
        .enable_all()
        .build()
        .map_err(|e| NotifyError::Invalid {
            reason: format!("cannot start the sender: {e}"),
        })?;
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Stats::default());
    let (done_tx, done_rx) = mpsc::channel();
    let mut l = Loop {
        gw,
        targets,
        clients,
        rt,
        done_tx,
        done_rx,
        in_flight: HashMap::new(),
        stats: stats.clone(),
    };
    let names: Vec<String> = l
        .targets
        .iter()
        .map(|t| format!("`{}` ({})", t.name, t.host))
        .collect();
    crate::base::log::info(
        "notify_started",
        &format!(
            "notify: new pending operations are sent to {}",
            names.join(", ")
        ),
    );
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("ipc-notify".into())
        .spawn(move || l.run(&flag))
        .map_err(|e| NotifyError::Invalid {
            reason: format!("cannot start the sender: {e}"),
        })?;
    Ok(Some(Sender {
        stop,
        stats,
        thread: Some(thread),
    }))
}

/// One attempt finished.
struct Done {
    shard: usize,
    /// It was sent (held a slot), not refused before.
    sent: bool,
    key: String,
    target: String,
    attempt: Attempt,
}

struct Loop {
    gw: Arc<Gateway>,
    targets: Vec<Target>,
    clients: HashMap<String, reqwest::Client>,
    rt: tokio::runtime::Runtime,
    done_tx: mpsc::Sender<Done>,
    done_rx: mpsc::Receiver<Done>,
    /// Per target.
    in_flight: HashMap<String, usize>,
    stats: Arc<Stats>,
}

impl Loop {
    fn run(&mut self, stop: &AtomicBool) {
        let mut done: Vec<Done> = vec![];
        while !stop.load(Ordering::Relaxed) {
            self.round(std::mem::take(&mut done));
            let first = self.done_rx.recv_timeout(IDLE).ok();
            done = first.into_iter().chain(self.done_rx.try_iter()).collect();
        }
    }

    fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }

    /// One round: on each store, in one transaction, the finished
    /// attempts recorded and what is due claimed (up to the free slots);
    /// then the claimed rows sent.
    fn round(&mut self, done: Vec<Done>) {
        let mut by_shard: BTreeMap<usize, Vec<Done>> = BTreeMap::new();
        for d in done {
            if d.sent {
                self.release(&d);
            }
            by_shard.entry(d.shard).or_default().push(d);
        }
        let gw = self.gw.clone();
        for (i, g) in gateways(&gw).into_iter().enumerate() {
            let ds = by_shard.remove(&i).unwrap_or_default();
            self.store_round(i, g, &ds);
        }
    }

    /// The free slots of each target now (none while held).
    fn free(&self) -> HashMap<String, usize> {
        self.targets
            .iter()
            .map(|t| {
                let used = self.in_flight.get(&t.name).copied().unwrap_or(0);
                let free = if held() {
                    0
                } else {
                    t.concurrency.saturating_sub(used)
                };
                (t.name.clone(), free)
            })
            .collect()
    }

    fn store_round(&mut self, shard: usize, g: &Gateway, ds: &[Done]) {
        let free = self.free();
        if ds.is_empty() && free.values().all(|n| *n == 0) {
            return;
        }
        let mut settled: Vec<(Delivery, &Done)> = vec![];
        let mut claimed: Vec<Delivery> = vec![];
        let r = g.store.transaction(&mut |tx| {
            settled.clear();
            claimed.clear();
            let now = outbox::wall_ms();
            for d in ds {
                let max = self.target(&d.target).map_or(1, |t| t.max_attempts);
                if let Some(row) = outbox::settle(tx, &d.key, &d.attempt, max, now)? {
                    settled.push((row, d));
                }
            }
            self.claim(tx, free.clone(), now, &mut claimed)?;
            Ok(Value::Null)
        });
        if let Err(e) = r {
            crate::base::log::warn(
                "notify_store",
                &format!("notify: cannot read or write the outbox: {e}"),
            );
            return;
        }
        settled.iter().for_each(|(row, d)| self.report(row, d));
        for d in claimed {
            self.send(shard, g, d);
        }
    }

    /// Claims, in `tx`, what is due and has a free slot in `free`.
    fn claim(
        &self,
        tx: &mut dyn crate::store::Tx,
        mut free: HashMap<String, usize>,
        now: i64,
        claimed: &mut Vec<Delivery>,
    ) -> Result<(), crate::store::StoreError> {
        if free.values().all(|n| *n == 0) {
            return Ok(());
        }
        for (key, at) in outbox::due(tx)? {
            if at > now {
                break;
            }
            let Some((_, target)) = key.rsplit_once(':') else {
                continue;
            };
            let Some(t) = self.target(target) else {
                let gone =
                    Attempt::Permanent(format!("the target `{target}` is no longer in the world"));
                outbox::settle(tx, &key, &gone, 0, now)?;
                continue;
            };
            let slots = free.entry(t.name.clone()).or_default();
            if *slots == 0 {
                continue;
            }
            let ms = i64::try_from(t.timeout.as_millis()).unwrap_or(i64::MAX);
            if let Some(d) = outbox::claim(tx, &key, now, ms.saturating_add(LEASE_MARGIN_MS))? {
                *slots -= 1;
                claimed.push(d);
            }
        }
        Ok(())
    }

    /// Sends one claimed delivery on the runtime (or records at once why
    /// it cannot be sent).
    fn send(&mut self, shard: usize, g: &Gateway, d: Delivery) {
        let Some(t) = self.target(&d.target).cloned() else {
            return;
        };
        let key = d.key();
        let body = match super::prepare(g, &t, &d) {
            Ok(b) => b,
            Err(attempt) => {
                let _ = self.done_tx.send(Done {
                    shard,
                    sent: false,
                    key,
                    target: t.name.clone(),
                    attempt,
                });
                return;
            }
        };
        let Some(client) = self.clients.get(&t.name).cloned() else {
            return;
        };
        *self.in_flight.entry(t.name.clone()).or_default() += 1;
        self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
        let done = self.done_tx.clone();
        let attempts = d.attempts;
        self.rt.spawn(async move {
            let attempt = post(&client, &t, &key, attempts, body).await;
            let _ = done.send(Done {
                shard,
                sent: true,
                key,
                target: t.name.clone(),
                attempt,
            });
        });
    }

    /// A slot given back (an attempt that was sent).
    fn release(&mut self, d: &Done) {
        if let Some(n) = self.in_flight.get_mut(&d.target)
            && *n > 0
        {
            *n -= 1;
            self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn report(&self, row: &Delivery, d: &Done) {
        use crate::base::log::{self, Level};
        let (outcome, level) = match row.status {
            outbox::Status::Delivered => ("delivered", Level::Event),
            outbox::Status::Due => ("retried", Level::Event),
            outbox::Status::Failed => ("failed", Level::Warning),
        };
        self.stats.count(&d.target, outcome);
        let error = row.last_error.clone().unwrap_or_default();
        let message = match row.status {
            outbox::Status::Failed => format!(
                "notify: gave up the delivery `{}` after {} attempt(s): {error}",
                row.key(),
                row.attempts
            ),
            _ => format!("notify: `{}` {outcome}", row.key()),
        };
        log::line(
            level,
            "notify",
            &message,
            &[
                ("target", Value::from(row.target.as_str())),
                ("operation_hash", Value::from(row.operation_hash.as_str())),
                ("outcome", Value::from(outcome)),
                ("attempts", Value::from(row.attempts)),
            ],
        );
    }
}

/// The test builds' hold (`IPC_TEST_NOTIFY_HOLD`: a file; while it
/// exists, nothing is claimed): a gateway killed between its commit and
/// any send. Never honoured outside the tests' build.
fn held() -> bool {
    #[cfg(feature = "testkit")]
    {
        std::env::var_os("IPC_TEST_NOTIFY_HOLD").is_some_and(|p| std::path::Path::new(&p).exists())
    }
    #[cfg(not(feature = "testkit"))]
    {
        false
    }
}

/// `hex(HMAC-SHA256(key, "<t>.<body>"))`.
pub fn signature(key: &[u8], t: i64, body: &[u8]) -> String {
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return String::new();
    };
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

/// One attempt: the body POSTed, signed now.
async fn post(
    client: &reqwest::Client,
    t: &Target,
    key: &str,
    attempt: u32,
    body: Vec<u8>,
) -> Attempt {
    let now = outbox::wall_ms() / 1000;
    let sig = signature(t.secret.expose(), now, &body);
    let sent = client
        .post(&t.url)
        .header("content-type", "application/json")
        .header(
            "user-agent",
            concat!("intentplane/", env!("CARGO_PKG_VERSION")),
        )
        .header(SIGNATURE_HEADER, format!("t={now},v1={sig}"))
        .header(IDEMPOTENCY_HEADER, key)
        .header("x-ipc-attempt", attempt.to_string())
        .body(body)
        .send()
        .await;
    match sent {
        Ok(r) if r.status().is_success() => Attempt::Delivered,
        Ok(r) => Attempt::Retry(format!("the receiver answered {}", r.status())),
        Err(e) => Attempt::Retry(describe(&e)),
    }
}

/// An error and its causes, in one line.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s.to_lowercase()
}

/// The client of one target: its authority, its timeout, its resolver.
fn client(t: &Target) -> Result<reqwest::Client, NotifyError> {
    let ca_err = |path: &std::path::Path, reason: String| NotifyError::CaFile {
        name: t.name.clone(),
        path: path.display().to_string(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(path) => {
            for c in read_certs(path).map_err(|r| ca_err(path, r))? {
                roots.add(c).map_err(|e| ca_err(path, e.to_string()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let invalid = |e: String| NotifyError::Invalid {
        reason: format!("`{}`: {e}", t.name),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .https_only(true)
        .connect_timeout(t.timeout)
        .timeout(t.timeout)
        .pool_max_idle_per_host(t.concurrency)
        .dns_resolver(Arc::new(Resolver {
            allow_private: t.allow_private,
        }))
        .build()
        .map_err(|e| invalid(e.to_string().to_lowercase()))
}

/// The certificates of a PEM file (at least one).
fn read_certs(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot be read: {}", e.to_string().to_lowercase()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("holds no certificate".into());
    }
    Ok(certs)
}

/// The system's resolver, refusing a private address unless allowed (a
/// public name pointed at the gateway's own network).
struct Resolver {
    allow_private: bool,
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow = self.allow_private;
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<std::net::SocketAddr> = addrs
                .into_iter()
                .filter(|a| allow || !super::config::private_ip(a.ip()))
                .collect();
            if kept.is_empty() {
                let e: Box<dyn std::error::Error + Send + Sync> = format!(
                    "`{host}` resolves to no address allowed (a private one needs `allow_private = true`)"
                )
                .into();
                return Err(e);
            }
            let it: reqwest::dns::Addrs = Box::new(kept.into_iter());
            Ok(it)
        })
    }
}
