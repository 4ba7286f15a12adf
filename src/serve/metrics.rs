//! The counters `GET /metrics` shows, in Prometheus' text format:
//! decisions by outcome and stage, a histogram of decision latency (from
//! the body read to the committed decision), store errors, and refused
//! requests by reason.

use crate::gateway::{Decision, Outcome};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
pub(crate) struct Metrics {
    /// By outcome, stage and (a SHADOW decision) the would-be outcome.
    decisions: Mutex<BTreeMap<(&'static str, &'static str, &'static str), u64>>,
    /// Per bucket (not cumulative; summed when shown), the last one +Inf.
    latency: [AtomicU64; BUCKETS.len() + 1],
    latency_sum_micros: AtomicU64,
    store_errors: AtomicU64,
    errors: AtomicU64,
    refused: Mutex<BTreeMap<&'static str, u64>>,
}

fn outcome_name(o: Outcome) -> &'static str {
    match o {
        Outcome::Allow => "allow",
        Outcome::Pending => "pending",
        Outcome::Deny => "deny",
        Outcome::Shadow => "shadow",
    }
}

impl Metrics {
    pub(crate) fn decision(&self, d: &Decision, took: Duration) {
        {
            let mut m = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
            let would_be = d.would_be.as_ref().map_or("", |w| outcome_name(w.decision));
            *m.entry((outcome_name(d.decision), d.stage.name(), would_be))
                .or_default() += 1;
        }
        let secs = took.as_secs_f64();
        let i = BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(BUCKETS.len());
        self.latency[i].fetch_add(1, Ordering::Relaxed);
        self.latency_sum_micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn store_error(&self) {
        self.store_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn refused(&self, reason: &'static str) {
        let mut m = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry(reason).or_default() += 1;
    }

    /// The text format (version 0.0.4); `optimistic`: the store's
    /// [`Store::optimistic_counts`](crate::store::Store::optimistic_counts);
    /// `hold`: its [`Store::head_lock_hold`](crate::store::Store::head_lock_hold).
    pub(crate) fn render(
        &self,
        optimistic: Option<(u64, u64)>,
        hold: Option<crate::store::HeadLockHold>,
    ) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP ipc_decisions_total Decisions taken, by outcome and stage (a shadow decision also by the outcome it would have had).\n# TYPE ipc_decisions_total counter"
        );
        {
            let m = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
            for ((outcome, stage, would_be), n) in m.iter() {
                let extra = if would_be.is_empty() {
                    String::new()
                } else {
                    format!(",would_be=\"{would_be}\"")
                };
                let _ = writeln!(
                    s,
                    "ipc_decisions_total{{outcome=\"{outcome}\",stage=\"{stage}\"{extra}}} {n}"
                );
            }
        }
        let _ = writeln!(
            s,
            "# HELP ipc_decision_duration_seconds From the request's body read to its committed decision.\n# TYPE ipc_decision_duration_seconds histogram"
        );
        let mut cumulative = 0u64;
        for (i, b) in BUCKETS.iter().enumerate() {
            cumulative += self.latency[i].load(Ordering::Relaxed);
            let _ = writeln!(
                s,
                "ipc_decision_duration_seconds_bucket{{le=\"{b}\"}} {cumulative}"
            );
        }
        cumulative += self.latency[BUCKETS.len()].load(Ordering::Relaxed);
        let _ = writeln!(
            s,
            "ipc_decision_duration_seconds_bucket{{le=\"+Inf\"}} {cumulative}"
        );
        let sum = self.latency_sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(s, "ipc_decision_duration_seconds_sum {sum}");
        let _ = writeln!(s, "ipc_decision_duration_seconds_count {cumulative}");
        let _ = writeln!(
            s,
            "# HELP ipc_store_errors_total Decisions that failed in the store (answered 500, nothing decided).\n# TYPE ipc_store_errors_total counter\nipc_store_errors_total {}",
            self.store_errors.load(Ordering::Relaxed)
        );
        if let Some((decided, rerun)) = optimistic {
            let _ = writeln!(
                s,
                "# HELP ipc_store_transactions_total Store transactions of decisions, by how they committed: as decided before the store's lock, or decided again under it because a value they read had changed.\n# TYPE ipc_store_transactions_total counter\nipc_store_transactions_total{{path=\"decided\"}} {decided}\nipc_store_transactions_total{{path=\"rerun\"}} {rerun}"
            );
        }
        if let Some(h) = hold {
            let _ = writeln!(
                s,
                "# HELP ipc_store_head_lock_seconds_total How long this instance's store transactions held the receipt chain's head lock (every writer of the database takes turns on it).\n# TYPE ipc_store_head_lock_seconds_total counter\nipc_store_head_lock_seconds_total {}\n# HELP ipc_store_head_lock_holds_total Store transactions that held the head lock.\n# TYPE ipc_store_head_lock_holds_total counter\nipc_store_head_lock_holds_total {}\n# HELP ipc_store_head_lock_max_seconds The longest hold of the head lock so far.\n# TYPE ipc_store_head_lock_max_seconds gauge\nipc_store_head_lock_max_seconds {}",
                h.total.as_secs_f64(),
                h.transactions,
                h.max.as_secs_f64()
            );
        }
        let _ = writeln!(
            s,
            "# HELP ipc_errors_total Other requests answered 500.\n# TYPE ipc_errors_total counter\nipc_errors_total {}",
            self.errors.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP ipc_http_refused_total Requests refused before any route, by reason.\n# TYPE ipc_http_refused_total counter"
        );
        let m = self.refused.lock().unwrap_or_else(|e| e.into_inner());
        for (reason, n) in m.iter() {
            let _ = writeln!(s, "ipc_http_refused_total{{reason=\"{reason}\"}} {n}");
        }
        s
    }
}

/// The `[[notify]]` sender's counters (nothing without a sender):
/// deliveries by target and outcome (`delivered`, `retried`: an attempt
/// failed and another is due, `failed`: given up after `max_attempts`),
/// and those in flight.
pub(crate) fn notify(stats: Option<&crate::gateway::notify::Stats>) -> String {
    let Some(stats) = stats else {
        return String::new();
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP ipc_notify_deliveries_total Notification attempts to the world's `[[notify]]` targets, by target and outcome (failed: given up).\n# TYPE ipc_notify_deliveries_total counter"
    );
    for (target, outcome, n) in stats.outcomes() {
        let _ = writeln!(
            s,
            "ipc_notify_deliveries_total{{target=\"{target}\",outcome=\"{outcome}\"}} {n}"
        );
    }
    let _ = writeln!(
        s,
        "# HELP ipc_notify_in_flight Notifications being sent now.\n# TYPE ipc_notify_in_flight gauge\nipc_notify_in_flight {}",
        stats.in_flight()
    );
    s
}
