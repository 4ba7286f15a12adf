//! Helpers of the `ipc serve` tests: a server started on a mandate, its
//! receipts, transfers to send it.

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};

/// A mandate for many transfers: 100,000.00 and 1,000 calls.
pub(crate) fn big_mandate(w: &TestWorld) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 10_000_000;
    s.calls = 1000;
    w.mandate(s)
}

/// Starts `ipc serve` with a SQLite store of its own and a token file.
pub(crate) fn start(w: &TestWorld, mandate: &Value, listen: &str, extra: &[&str]) -> Server {
    let db = w.dir.path().join(format!(
        "s-{}.db",
        intentplane::gateway::approval::random_id().unwrap()
    ));
    launch(
        w,
        mandate,
        listen,
        &path_str(&db),
        TOKEN,
        extra,
        std::process::Stdio::inherit(),
    )
}

pub(crate) fn receipts(s: &Server, query: &str) -> Vec<Value> {
    let r = get(s, &format!("/v1/receipts?{query}"));
    assert_eq!(r.status, 200, "{}", r.body);
    r.body.as_array().unwrap().clone()
}

/// A distinct ALLOW transfer (level 0) for each `i`.
pub(crate) fn small_transfer(i: usize) -> Value {
    transfer(LANDLORD, json!(format!("{}.{:02}", 1 + i / 100, i % 100)))
}
