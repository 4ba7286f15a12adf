//! Reaching the approver: the world's `[[notify]]` webhooks
//! (docs/notifications.md). A PENDING decision that records a new pending
//! operation writes one outbox row per target in its own transaction
//! ([`outbox`]); a long-running process's sender ([`send`], feature
//! `notify`) drains the outbox with bounded concurrency, each delivery the
//! approver's rendering ([`body`]) signed with the target's HMAC key.
//! Sending never runs on a decision's path: a slow or dead receiver holds
//! up only its own deliveries.

pub mod body;
pub mod config;
pub mod outbox;
#[cfg(feature = "notify")]
pub mod send;

pub use config::{Format, Notify, NotifyError, Target};

use crate::gateway::Gateway;
use outbox::{Attempt, Delivery};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What the sender did so far (`/metrics`).
#[derive(Default)]
pub struct Stats {
    /// By (target, outcome): `delivered`, `retried`, `failed`.
    outcomes: Mutex<BTreeMap<(String, &'static str), u64>>,
    pub(crate) in_flight: AtomicU64,
}

impl Stats {
    #[cfg_attr(not(feature = "notify"), allow(dead_code))]
    pub(crate) fn count(&self, target: &str, outcome: &'static str) {
        let mut m = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((target.to_string(), outcome)).or_default() += 1;
    }

    /// Each (target, outcome) and its count.
    pub fn outcomes(&self) -> Vec<(String, &'static str, u64)> {
        let m = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        m.iter().map(|((t, o), n)| (t.clone(), *o, *n)).collect()
    }

    /// Deliveries being sent now.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
}

/// The gateways whose stores hold outboxes: each shard's, or `gw`.
pub(crate) fn gateways(gw: &Gateway) -> Vec<&Gateway> {
    match gw.shard_set() {
        Some(set) => set.shards.iter().map(|s| &s.gw).collect(),
        None => vec![gw],
    }
}

/// How many deliveries wait in the outboxes of `gw`'s stores (due now or
/// after a backoff).
pub fn waiting(gw: &Gateway) -> Result<usize, crate::store::StoreError> {
    let mut n = 0;
    for g in gateways(gw) {
        g.store.read_only(&mut |tx| {
            n += outbox::due(tx)?.len();
            Ok(Value::Null)
        })?;
    }
    Ok(n)
}

/// The sender of a long-running process, while it runs.
pub struct Running {
    pub stats: Arc<Stats>,
    #[cfg(feature = "notify")]
    sender: send::Sender,
}

impl Running {
    /// Stops the sender (see [`send::Sender::stop`]).
    pub fn stop(self) {
        #[cfg(feature = "notify")]
        self.sender.stop();
    }
}

/// Starts the sender of `gw`'s `[[notify]]` targets (`None`: there are
/// none). A build without the `notify` feature sends nothing: it says so,
/// and the outbox's rows wait for a build that sends.
pub fn start(gw: Arc<Gateway>) -> Result<Option<Running>, NotifyError> {
    #[cfg(feature = "notify")]
    {
        Ok(send::start(gw)?.map(|sender| Running {
            stats: sender.stats.clone(),
            sender,
        }))
    }
    #[cfg(not(feature = "notify"))]
    {
        if !gw.world.notify.targets.is_empty() {
            crate::base::log::warn(
                "notify_off",
                "this build leaves out the `notify` feature: the `[[notify]]` deliveries stay in the outbox for a build that sends",
            );
        }
        Ok(None)
    }
}

/// The body of one delivery, as the approver's rendering of the pending
/// operation on `gw`'s store (a shard's gateway for a sharded world), or
/// why not: a store error is worth another attempt, an operation that
/// cannot be shown never is.
pub fn prepare(gw: &Gateway, target: &Target, d: &Delivery) -> Result<Vec<u8>, Attempt> {
    let Some(page) = gw.world.notify.page.as_deref() else {
        return Err(Attempt::Permanent(
            "the world names no `approval_page`".into(),
        ));
    };
    let mut op = None;
    gw.store
        .read_only(&mut |tx| {
            op = crate::gateway::pending::get(tx, &d.operation_hash)?;
            Ok(Value::Null)
        })
        .map_err(|e| Attempt::Retry(e.to_string()))?;
    let Some(op) = op else {
        return Err(Attempt::Permanent(format!(
            "the pending operation `{}` is not in the store",
            d.operation_hash
        )));
    };
    let shown = crate::gateway::render::checked(gw, &op).map_err(|e| match e {
        crate::gateway::render::RenderError::Store(e) => Attempt::Retry(e.to_string()),
        e => Attempt::Permanent(e.to_string()),
    })?;
    Ok(body::body(target, &shown, page, &d.key()))
}
