//! Issue #21, items 5 and 8: a stuck store, and `ipc run` without one.
//!
//! Item 5, reproduced on 0e4128b with PostgreSQL: a NUL in a value the
//! gateway looks up (`{"ref": "landlord\u0000"}`) made the statement fail
//! and aborted the transaction: `ipc run` printed 0 of 3 decisions and
//! exited 1, `ipc serve --stdio` ended at that line, and the line had no
//! receipt. Now NUL is refused at the contract stage on every store, and a
//! store error on one decision is that decision's DENY (with a receipt),
//! never its batch's or the server's end.
//!
//! Item 8, reproduced on 0e4128b: `ipc run` without `--store` (and without
//! the world's `store`) decided into memory with only a warning.
//!
//! The PostgreSQL halves need `IPC_TEST_PG` (see `common/pg.rs`); without it
//! they say so loudly and pass, except under `CI`.

use crate::common;
use common::cli::{decide_lines, ipc, lines};
use common::*;
use intentplane::canonical::Jcs;
use intentplane::gateway::{Input, Outcome};
use intentplane::store::{
    ChainLink, ReceiptRange, ReceiptRecord, RegistryRow, Relink, Snapshot, Spent, Store,
    StoreError, Tx, TxFn,
};
use serde_json::{Value, json};
#[cfg(feature = "postgres")]
use std::path::Path;
use std::sync::Arc;

/// Values holding a NUL where the gateway reads them: a reference it
/// resolves in the owner's registry, a critical IBAN, the account, and a
/// free text it only stores.
fn hostile_proposals() -> Vec<Value> {
    let mut subject = transfer(LANDLORD, json!("1.00"));
    subject["args"]["subject"] = json!("rent\u{0}");
    let mut account = transfer(LANDLORD, json!("1.00"));
    account["args"]["from_account"] = json!("emma-checking\u{0}");
    let mut by_ref = transfer(LANDLORD, json!("1.00"));
    by_ref["args"]["payee_iban"] = json!({"ref": "landlord\u{0}"});
    // a recipient is looked up among the owner's added counterparties: a
    // statement with a NUL in it (what stopped PostgreSQL)
    let send = json!({"action": "payment.send", "args": {"from_account": "emma-checking",
        "recipient": "Stadtwerke Nord\u{0}", "amount": "1.00", "currency": "EUR",
        "date": "2026-12-01"}});
    vec![
        send,
        by_ref,
        transfer("DE44500105175407324931\u{0}", json!("1.00")),
        account,
        subject,
    ]
}

/// Three lines, the middle one hostile: through `ipc run` (one batch) and
/// `ipc serve --stdio` on `store`, each line gets its decision, the
/// hostile one a DENY (contract) with a receipt, and the chain verifies.
fn three_lines_three_decisions(w: &TestWorld, store: &str, hostile: &Value) {
    let m = w.dir.path().join(format!("m-{}.json", random()));
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let input = format!(
        "{}\n{}\n{}\n",
        transfer(LANDLORD, json!("1.00")),
        hostile,
        transfer(LANDLORD, json!("2.00"))
    );
    for mode in ["run", "serve"] {
        let out = decide_lines(mode, w, store, &m, &input);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode} {hostile}: {err}");
        let ds = lines(&out);
        assert_eq!(ds.len(), 3, "{mode} {hostile}: {ds:#?} {err}");
        assert_eq!(ds[0]["decision"], "ALLOW", "{mode}: {}", ds[0]);
        assert_eq!(ds[1]["decision"], "DENY", "{mode}: {}", ds[1]);
        assert_eq!(ds[1]["stage"], "contract", "{mode}: {}", ds[1]);
        assert!(
            ds[1]["reason"].as_str().unwrap().contains("NUL"),
            "{}",
            ds[1]
        );
        assert!(ds[1]["receipt"]["seq"].is_u64(), "{}", ds[1]);
        assert_eq!(ds[2]["decision"], "ALLOW", "{mode}: {}", ds[2]);
    }
    let out = ipc(&["receipts", "verify", store], "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

fn random() -> String {
    intentplane::gateway::approval::random_id().unwrap()
}

#[test]
fn a_nul_is_refused_at_contract_with_a_receipt_on_sqlite() {
    let w = TestWorld::new();
    for hostile in hostile_proposals() {
        let db = w.dir.path().join(format!("s-{}.db", random()));
        three_lines_three_decisions(&w, &path_str(&db), &hostile);
    }
    // in process too, on every store: the same refusal, with its reason
    let gw = w.gateway();
    for hostile in hostile_proposals() {
        let d = decide(&gw, hostile.clone(), &w.emma());
        assert_deny(&d, "contract", "NUL character (`\\u{0}`, U+0000)");
        assert!(d.receipt.is_some());
    }
}

#[cfg(feature = "postgres")]
#[test]
fn pg_a_nul_is_refused_at_contract_with_a_receipt() {
    let Some(schema) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    for hostile in hostile_proposals() {
        three_lines_three_decisions(&w, &schema.url, &hostile);
    }
}

// ---- a store error on one decision is that decision's DENY ---------------

/// A store that fails a read or write of a state key holding `poison`
/// and, as PostgreSQL does after a failed statement, every operation of
/// that transaction after it: the rest works as the inner store.
struct Failing {
    inner: Arc<dyn Store>,
    poison: &'static str,
}

struct FailingTx<'a> {
    inner: &'a mut dyn Tx,
    poison: &'static str,
    aborted: bool,
}

impl FailingTx<'_> {
    fn check(&mut self, key: &str) -> Result<(), StoreError> {
        if key.contains(self.poison) {
            self.aborted = true;
        }
        if self.aborted {
            return Err(StoreError::Backend(format!(
                "injected failure on `{}`: the transaction is aborted",
                self.poison
            )));
        }
        Ok(())
    }
}

impl Tx for FailingTx<'_> {
    fn spent(&mut self, m: &str) -> Result<Spent, StoreError> {
        self.check("")?;
        self.inner.spent(m)
    }
    fn spend(&mut self, m: &str, amount: i64) -> Result<Spent, StoreError> {
        self.check("")?;
        self.inner.spend(m, amount)
    }
    fn nonce_used(&mut self, n: &str) -> Result<bool, StoreError> {
        self.check("")?;
        self.inner.nonce_used(n)
    }
    fn use_nonce(&mut self, n: &str) -> Result<(), StoreError> {
        self.check("")?;
        self.inner.use_nonce(n)
    }
    fn executed(&mut self, op: &str) -> Result<Option<Value>, StoreError> {
        self.check("")?;
        self.inner.executed(op)
    }
    fn record_execution(&mut self, op: &str, result: &Value) -> Result<(), StoreError> {
        self.check("")?;
        self.inner.record_execution(op, result)
    }
    fn revoked(&mut self, t: &str) -> Result<bool, StoreError> {
        self.check("")?;
        self.inner.revoked(t)
    }
    fn revoke(&mut self, t: &str) -> Result<(), StoreError> {
        self.check("")?;
        self.inner.revoke(t)
    }
    fn state_get(&mut self, ns: &str, key: &str) -> Result<Option<Value>, StoreError> {
        self.check(key)?;
        self.inner.state_get(ns, key)
    }
    fn state_put(&mut self, ns: &str, key: &str, value: &Value) -> Result<(), StoreError> {
        self.check(key)?;
        self.inner.state_put(ns, key, value)
    }
    fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
        self.check("")?;
        self.inner.append_receipt_jcs(body)
    }
    fn registry_rows(
        &mut self,
        table: &str,
        owner: &str,
        keyed: bool,
        key: Option<&str>,
    ) -> Result<Vec<RegistryRow>, StoreError> {
        self.check(key.unwrap_or(""))?;
        self.inner.registry_rows(table, owner, keyed, key)
    }
}

impl Failing {
    fn wrap<'a>(
        &self,
        f: &'a mut TxFn<'_>,
    ) -> impl FnMut(&mut dyn Tx) -> Result<Value, StoreError> + 'a {
        let poison = self.poison;
        move |tx: &mut dyn Tx| {
            f(&mut FailingTx {
                inner: tx,
                poison,
                aborted: false,
            })
        }
    }
}

impl Store for Failing {
    fn transaction(&self, f: &mut TxFn<'_>) -> Result<Value, StoreError> {
        self.inner.transaction(&mut self.wrap(f))
    }
    fn transaction_linked(&self, f: &mut TxFn<'_>) -> Result<(Value, Vec<Relink>), StoreError> {
        self.inner.transaction_linked(&mut self.wrap(f))
    }
    common::counting::reads_from_inner!();
    fn registry_tables(&self) -> bool {
        self.inner.registry_tables()
    }
}

/// A batch of three whose middle decision the store refuses: the two
/// others are decided (and executed once), the middle one is a DENY
/// (stage receipt) with a receipt that says so without quoting the store,
/// and the chain and the store's state verify.
fn one_failing_decision_is_denied_alone(inner: Arc<dyn Store>) {
    let w = TestWorld::new();
    let store = Arc::new(Failing {
        inner,
        poison: "DE89370400440532013000",
    });
    let gw = w.gateway_with(store.clone());
    let m = w.emma();
    // the attacker's IBAN is looked up among the owner's added payees
    let hostile = transfer(ATTACKER_IBAN, json!("3.00"));
    let batch: Vec<Input> = [
        transfer(LANDLORD, json!("1.00")),
        hostile.clone(),
        transfer(LANDLORD, json!("2.00")),
    ]
    .into_iter()
    .map(|p| input(p, &m, vec![]))
    .collect();
    // the poison does fail a decision of its own
    assert!(
        intentplane::gateway::Gateway::decide(&gw, &batch[1]).is_ok(),
        "decided alone, it is a DENY too, not an error"
    );
    let ds = intentplane::gateway::testkit::decide_batch(&gw, &batch).unwrap();
    assert_eq!(ds.len(), 3, "{ds:#?}");
    assert_eq!(ds[0].decision, Outcome::Allow, "{:#?}", ds[0]);
    assert_eq!(ds[2].decision, Outcome::Allow, "{:#?}", ds[2]);
    assert_deny(&ds[1], "receipt", "the store refused this decision");
    let reason = ds[1].reason.clone().unwrap();
    assert!(reason.contains("ipc::store::backend"), "{reason}");
    assert!(
        !reason.contains("injected"),
        "never the store's text: {reason}"
    );
    assert_eq!(ds[1].action.as_deref(), Some("payment.transfer"));
    // every decision has its own receipt, in the chain
    let recs = gw.store().receipts().unwrap();
    for d in &ds {
        let r = d.receipt.as_ref().unwrap();
        let rec = recs.iter().find(|x| x.seq == r.seq).unwrap();
        assert_eq!(rec.hash, r.hash);
    }
    let denied = recs
        .iter()
        .find(|x| x.seq == ds[1].receipt.as_ref().unwrap().seq)
        .unwrap();
    assert_eq!(denied.body["decision"], "DENY");
    assert_eq!(denied.body["stage"], "receipt");
    // the two others executed once: run again, both are replays
    let again =
        intentplane::gateway::testkit::decide_batch(&gw, &[batch[0].clone(), batch[2].clone()])
            .unwrap();
    assert!(again.iter().all(|d| d.replayed), "{again:#?}");
    let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
    assert!(audit.is_ok(), "{audit:?}");
}

/// Reproduced on 0e4128b: `decide_batch` returned the store's error for
/// the whole batch (0 of 3 decisions, nothing committed).
#[test]
fn a_store_error_on_one_decision_denies_it_alone_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let s = intentplane::store::sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap();
    one_failing_decision_is_denied_alone(Arc::new(s));
}

#[cfg(feature = "postgres")]
#[test]
fn pg_a_store_error_on_one_decision_denies_it_alone() {
    let Some(schema) = common::pg::fresh() else {
        return;
    };
    let s = intentplane::store::open(Path::new(&schema.url), true).unwrap();
    one_failing_decision_is_denied_alone(s);
}

/// A store that cannot even write the DENY: `decide_batch` is an error
/// (nothing is reported as decided).
#[test]
fn a_store_that_cannot_write_the_deny_is_an_error() {
    struct Broken;
    impl Store for Broken {
        fn transaction(&self, _: &mut TxFn<'_>) -> Result<Value, StoreError> {
            Err(StoreError::Backend("disk full".into()))
        }
        fn receipts(&self) -> Result<Vec<ReceiptRecord>, StoreError> {
            Ok(vec![])
        }
        fn receipts_range(&self, _: ReceiptRange) -> Result<Vec<ReceiptRecord>, StoreError> {
            Ok(vec![])
        }
        fn head(&self) -> Result<Option<(u64, String)>, StoreError> {
            Ok(None)
        }
        fn snapshot(&self) -> Result<Snapshot, StoreError> {
            Err(StoreError::Backend("disk full".into()))
        }
    }
    let w = TestWorld::new();
    let gw = w.gateway_with(Arc::new(Broken));
    let m = w.emma();
    let batch = vec![
        input(transfer(LANDLORD, json!("1.00")), &m, vec![]),
        input(transfer(LANDLORD, json!("2.00")), &m, vec![]),
    ];
    assert!(intentplane::gateway::testkit::decide_batch(&gw, &batch).is_err());
}

// ---- 8. `ipc run` needs a store, as `ipc serve` does ----------------------

/// Reproduced on 0e4128b: exit 0, an ALLOW decided into memory, a warning.
#[test]
fn run_without_a_store_refuses_unless_ephemeral() {
    let w = TestWorld::new();
    let m = w.dir.path().join("m.json");
    std::fs::write(&m, w.emma().to_string()).unwrap();
    let line = transfer(LANDLORD, json!("1.00")).to_string() + "\n";
    let (b, wp, mp) = (
        path_str(&w.bundle_path),
        path_str(&w.world_path),
        path_str(&m),
    );
    let base = ["run", "--bundle", &b, "--world", &wp, "--mandate", &mp];
    let out = ipc(&base, &line);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ipc::serve::no_store"), "{err}");
    assert!(err.contains("--ephemeral"), "{err}");
    assert!(out.stdout.is_empty(), "nothing decided");
    // --ephemeral: decided, and said on stderr
    let mut args = base.to_vec();
    args.push("--ephemeral");
    let out = ipc(&args, &line);
    assert!(out.status.success());
    assert_eq!(lines(&out)[0]["decision"], "ALLOW");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("warning: no store"), "{err}");
    // the world's store counts as a store
    let db = w.dir.path().join("world-store.db");
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let world = w.dir.path().join("world-with-store.toml");
    std::fs::write(&world, format!("store = \"{}\"\n{text}", path_str(&db))).unwrap();
    let wp2 = path_str(&world);
    let out = ipc(
        &["run", "--bundle", &b, "--world", &wp2, "--mandate", &mp],
        &line,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(db.exists());
}
