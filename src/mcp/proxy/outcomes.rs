//! The outcomes of this process's downstream calls, recorded after the
//! agent has its answer ([`Outcomes`]): carried into the store by the next
//! decision's transaction, or by a writer in the background.

use crate::gateway::Gateway;
use crate::gateway::ReceiptRef;
use crate::gateway::outcome::ExternalOutcome;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The operations whose downstream call runs in this process (`None`) or
/// answered with an outcome not yet in the store (`Some`): the outcome is
/// recorded after the agent has its answer, in the transaction of the next
/// decision ([`Gateway::decide_all`] with the outcomes: one durable commit per
/// call), or, when no decision comes within [`OUTCOME_IDLE`], by a writer
/// in the background that commits whatever queued up at once. An entry
/// leaves the map only once its outcome is in the store, so a retry finds
/// it here or there; a crash before that is "outcome unknown", as a crash
/// during the downstream's call.
pub(super) struct Outcomes {
    calls: Arc<Mutex<HashMap<String, Option<ExternalOutcome>>>>,
    queue: Arc<Mutex<Queue>>,
    /// Wakes the writer: something was queued.
    queued: Arc<tokio::sync::Notify>,
    /// Wakes a flush: outcomes taken were settled.
    settled: Arc<tokio::sync::Notify>,
    /// How long an outcome waits for the next decision, in milliseconds
    /// ([`OUTCOME_IDLE`] unless a test sets another).
    pub(super) idle_ms: Arc<std::sync::atomic::AtomicU64>,
}

/// How long an answered outcome waits for the next decision to carry it
/// into the store before the writer commits it alone.
pub(super) const OUTCOME_IDLE: Duration = Duration::from_millis(20);

/// Outcomes answered, not yet taken to the store (oldest first, with the
/// time they were queued), and how many are taken and not yet settled.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Vec<(std::time::Instant, String, ExternalOutcome)>,
    taken: usize,
}

/// Where a retried operation stands in this process.
pub(super) enum Seen {
    Running,
    Answered(ExternalOutcome),
    Unknown,
}

impl Outcomes {
    /// The writer runs on the current runtime for as long as the proxy.
    pub(super) fn start(gateway: Arc<Gateway>) -> Outcomes {
        let out = Outcomes {
            calls: Arc::default(),
            queue: Arc::default(),
            queued: Arc::default(),
            settled: Arc::default(),
            idle_ms: Arc::new(std::sync::atomic::AtomicU64::new(
                OUTCOME_IDLE.as_millis() as u64
            )),
        };
        tokio::spawn(write_outcomes(gateway, out.clone_handles()));
        out
    }

    pub(super) fn clone_handles(&self) -> Outcomes {
        Outcomes {
            calls: self.calls.clone(),
            queue: self.queue.clone(),
            queued: self.queued.clone(),
            settled: self.settled.clone(),
            idle_ms: self.idle_ms.clone(),
        }
    }

    pub(super) fn seen(&self, op: &str) -> Seen {
        match self.calls.lock() {
            Ok(calls) => match calls.get(op) {
                Some(None) => Seen::Running,
                Some(Some(o)) => Seen::Answered(o.clone()),
                None => Seen::Unknown,
            },
            Err(_) => Seen::Running,
        }
    }

    /// Marks `op` as running here; `false` when the state is poisoned.
    pub(super) fn running(&self, op: &str) -> bool {
        match self.calls.lock() {
            Ok(mut calls) => {
                calls.insert(op.to_string(), None);
                true
            }
            Err(_) => false,
        }
    }

    /// The downstream answered `op`: kept here until it is in the store.
    pub(super) fn answered(&self, op: &str, outcome: &ExternalOutcome) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.insert(op.to_string(), Some(outcome.clone()));
        }
        if let Ok(mut q) = self.queue.lock() {
            q.waiting
                .push((std::time::Instant::now(), op.to_string(), outcome.clone()));
        }
        self.queued.notify_one();
    }

    /// Takes the outcomes queued at or before `before` (all with `None`)
    /// to write them; each must be [`Self::settle`]d.
    pub(super) fn take(
        &self,
        before: Option<std::time::Instant>,
    ) -> Vec<(String, ExternalOutcome)> {
        let Ok(mut q) = self.queue.lock() else {
            return vec![];
        };
        let n = match before {
            None => q.waiting.len(),
            Some(t) => q.waiting.iter().take_while(|(at, _, _)| *at <= t).count(),
        };
        q.taken += n;
        q.waiting.drain(..n).map(|(_, op, o)| (op, o)).collect()
    }

    /// The outcomes taken are written: `Ok` ones leave the map, refused
    /// ones are reported and answered from memory.
    pub(super) fn settle(
        &self,
        taken: &[(String, ExternalOutcome)],
        results: Vec<Result<ReceiptRef, String>>,
    ) {
        if let Ok(mut c) = self.calls.lock() {
            for ((op, _), r) in taken.iter().zip(results) {
                match r {
                    Ok(_) => {
                        c.remove(op);
                    }
                    Err(e) => eprintln!(
                        "intentplane: the outcome of the operation {op} could not be recorded: {e}"
                    ),
                }
            }
        }
        self.forget(taken.len());
    }

    /// `n` outcomes taken are settled (written, or lost with a task that
    /// did not finish: then answered from memory only).
    pub(super) fn forget(&self, n: usize) {
        if let Ok(mut q) = self.queue.lock() {
            q.taken = q.taken.saturating_sub(n);
        }
        self.settled.notify_waiters();
    }

    /// Outcomes a decision took but could not record with it: written in
    /// a commit of their own, in the background.
    pub(super) fn write_later(&self, gw: &Arc<Gateway>, batch: Vec<(String, ExternalOutcome)>) {
        let (me, gw) = (self.clone_handles(), gw.clone());
        tokio::spawn(async move { me.write(&gw, batch).await });
    }

    /// Waits until every outcome answered so far is written.
    pub(super) async fn flush(&self, gw: &Arc<Gateway>) {
        loop {
            let settled = self.settled.notified();
            let batch = self.take(None);
            if !batch.is_empty() {
                self.write(gw, batch).await;
                continue;
            }
            match self.queue.lock() {
                Ok(q) if q.taken > 0 => {}
                _ => return,
            }
            // a decision carries some: wait until it is settled
            settled.await;
        }
    }

    /// Records `batch` in one commit of its own.
    pub(super) async fn write(&self, gw: &Arc<Gateway>, batch: Vec<(String, ExternalOutcome)>) {
        let (gw, n) = (gw.clone(), batch.len());
        match tokio::task::spawn_blocking(move || {
            let r = gw.record_outcomes(&batch);
            (batch, r)
        })
        .await
        {
            Ok((batch, results)) => {
                let results = results
                    .into_iter()
                    .map(|r| r.map_err(|e| e.to_string()))
                    .collect();
                self.settle(&batch, results);
            }
            Err(e) => {
                eprintln!("intentplane: recording outcomes did not finish: {e}");
                self.forget(n);
            }
        }
    }
}

/// The outcome writer: outcomes no decision took within [`OUTCOME_IDLE`]
/// of their answer are recorded in one commit. One that cannot be
/// recorded stays answered from memory and is reported on stderr.
pub(super) async fn write_outcomes(gw: Arc<Gateway>, outcomes: Outcomes) {
    loop {
        outcomes.queued.notified().await;
        loop {
            let oldest = match outcomes.queue.lock() {
                Ok(q) => q.waiting.first().map(|(at, _, _)| *at),
                Err(_) => return,
            };
            let Some(at) = oldest else { break };
            let idle = Duration::from_millis(outcomes.idle_ms.load(Ordering::Relaxed));
            let now = std::time::Instant::now();
            if now < at + idle {
                tokio::time::sleep_until((at + idle).into()).await;
                continue;
            }
            let batch = outcomes.take(Some(now.checked_sub(idle).unwrap_or(at)));
            if !batch.is_empty() {
                outcomes.write(&gw, batch).await;
            }
        }
    }
}
