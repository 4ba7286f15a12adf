//! `GET /v1/ready`: whether this instance can decide now — the store
//! answers a read-only transaction, the bundle is loaded, the clock reads —
//! for a load balancer, which drains an instance that answers 503.
//! `GET /v1/health` stays liveness: the process serves HTTP, whatever its
//! store does (a decision then fails closed with a 500).

use super::common::{Shared, answer};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};
use std::time::Duration;

/// How long the store may take to answer the probe: a store that takes
/// longer is not ready (a load balancer's probe has a timeout of its own,
/// and a probe must not pile up threads behind a hung connection).
const STORE_WAIT: Duration = Duration::from_secs(5);

/// `GET /v1/ready`: 200 `{"ready": true, "checks": {...}}`, or 503 with
/// `ready: false`, the failing checks, and `error` naming the first.
pub(super) async fn ready(State(st): State<Shared>) -> Response {
    let gw = st.gw.clone();
    let probe = tokio::task::spawn_blocking(move || {
        // every shard it decides on (the one store when not sharded)
        for (_, g) in gw.stores() {
            g.store().read_only(&mut |t| {
                // any read will do: a key nobody writes
                t.revoked("ipc-readiness-probe")?;
                Ok(Value::Null)
            })?;
        }
        Ok::<(), crate::store::StoreError>(())
    });
    let store = match tokio::time::timeout(STORE_WAIT, probe).await {
        Ok(Ok(Ok(_))) => Ok(()),
        Ok(Ok(Err(e))) => Err(e.to_string()),
        Ok(Err(_)) => Err("the store's read failed unexpectedly".to_string()),
        Err(_) => Err(format!(
            "the store did not answer within {} s",
            STORE_WAIT.as_secs()
        )),
    };
    if store.is_err() {
        st.metrics.store_error();
    }
    let hash = st.gw.bundle_hash();
    let bundle = if hash.is_empty() {
        Err("no bundle is loaded".to_string())
    } else {
        Ok(())
    };
    let clock = st
        .gw
        .now()
        .map(crate::base::json::format_time)
        .map_err(|e| e.to_string());
    let frozen = st.gw.world().clock.is_some();
    let checks = json!({
        "store": check(&store, json!({})),
        "bundle": check(&bundle, json!({"hash": hash})),
        "clock": match &clock {
            Ok(now) => json!({"ok": true, "now": now, "frozen": frozen}),
            Err(e) => json!({"ok": false, "error": e}),
        },
    });
    let failed = [
        ("the store", store.err()),
        ("the bundle", bundle.err()),
        ("the clock", clock.err()),
    ]
    .into_iter()
    .find_map(|(what, e)| e.map(|e| format!("not ready: {what}: {e}")));
    match failed {
        None => answer(
            StatusCode::OK,
            json!({"ready": true, "checks": checks}).to_string(),
        ),
        Some(error) => answer(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "error": error, "checks": checks}).to_string(),
        ),
    }
}

/// One check's part of the answer: `ok`, with `more` or the error.
fn check(r: &Result<(), String>, more: Value) -> Value {
    match r {
        Ok(()) => {
            let mut v = json!({"ok": true});
            if let (Some(o), Value::Object(m)) = (v.as_object_mut(), more) {
                o.extend(m);
            }
            v
        }
        Err(e) => json!({"ok": false, "error": e}),
    }
}

#[cfg(test)]
mod tests {
    use crate::gateway::testkit::TestWorld;
    use crate::serve::openapi::tests::{app_on, call};
    use crate::store::memory::MemoryStore;
    use crate::store::{ReceiptRange, ReceiptRecord, Snapshot, Store, StoreError, TxFn};
    use axum::http::{Method, StatusCode};
    use serde_json::Value;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A store that is down (every call a `Backend` error, as a database
    /// that stopped answers) until it is brought back.
    struct Switch {
        inner: MemoryStore,
        down: AtomicBool,
    }

    impl Switch {
        fn up(&self) -> Result<(), StoreError> {
            match self.down.load(Ordering::SeqCst) {
                true => Err(StoreError::Backend("the database is down".into())),
                false => Ok(()),
            }
        }
    }

    impl Store for Switch {
        fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
            self.up()?;
            self.inner.transaction(f)
        }
        fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
            self.up()?;
            self.inner.receipts()
        }
        fn receipts_range(&self, range: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
            self.up()?;
            self.inner.receipts_range(range)
        }
        fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
            self.up()?;
            self.inner.head()
        }
        fn snapshot(&self) -> Result<Snapshot, StoreError> {
            self.up()?;
            self.inner.snapshot()
        }
    }

    /// #41, item 4: with the store down `/v1/health` still answered 200
    /// and nothing told a load balancer that this instance cannot decide.
    /// `/v1/ready` answers 503 naming the store while it is down, and 200
    /// once it is back; `/v1/health` stays 200 throughout (liveness).
    #[test]
    fn ready_follows_the_store_and_health_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Switch {
            inner: MemoryStore::new(),
            down: AtomicBool::new(false),
        });
        let w = TestWorld::new();
        let app = app_on(dir.path(), w.gateway_with(store.clone()));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let get = |path: &str| -> (StatusCode, Value) {
            let (status, body) = call(&rt, &app, &Method::GET, path);
            (status, serde_json::from_str(&body).unwrap())
        };
        let (status, ready) = get("/v1/ready");
        assert_eq!(status, StatusCode::OK, "{ready}");
        assert_eq!(ready["ready"], true);
        for check in ["store", "bundle", "clock"] {
            assert_eq!(ready["checks"][check]["ok"], true, "{ready}");
        }
        let hash = w.gateway().bundle_hash().to_string();
        assert_eq!(ready["checks"]["bundle"]["hash"], hash.as_str());
        // the test world's clock is fixed: it reads, and says so
        assert_eq!(ready["checks"]["clock"]["frozen"], true, "{ready}");

        store.down.store(true, Ordering::SeqCst);
        let (status, health) = get("/v1/health");
        assert_eq!(status, StatusCode::OK, "{health}");
        let (status, ready) = get("/v1/ready");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{ready}");
        assert_eq!(ready["ready"], false);
        assert_eq!(ready["checks"]["store"]["ok"], false, "{ready}");
        assert_eq!(ready["checks"]["bundle"]["ok"], true, "{ready}");
        let error = ready["error"].as_str().unwrap();
        assert!(
            error.contains("the store") && error.contains("the database is down"),
            "{error}"
        );
        // and a decision fails closed meanwhile, as before
        let (status, _) = call(&rt, &app, &Method::POST, "/v1/decide");
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);

        store.down.store(false, Ordering::SeqCst);
        let (status, ready) = get("/v1/ready");
        assert_eq!(status, StatusCode::OK, "{ready}");
        assert_eq!(ready["ready"], true);
    }
}
