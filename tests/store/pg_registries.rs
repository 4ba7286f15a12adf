//! Registries kept in PostgreSQL tables (`[pg_registries]` in the world),
//! read inside each decision's transaction. Needs `IPC_TEST_PG` (see
//! `common/pg.rs`); the world checks run without it.
// needs a part of the default features: the test is off without it
#![cfg(feature = "postgres")]

use crate::common;

use common::*;
use intentplane::gateway::world::World;
use intentplane::gateway::{Gateway, GatewayError, Outcome};
use intentplane::store::memory::MemoryStore;
use intentplane::store::postgres::PgStore;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::sync::Arc;

fn pay(invoice: &str, iban: &str, amount: &str) -> Value {
    json!({"action": "invoice.pay", "args": {"invoice_id": invoice,
        "payee_iban": iban, "amount": amount, "currency": "EUR"}})
}

fn clerk(w: &TestWorld) -> Value {
    w.mandate(MandateSpec::for_pack(
        "ap",
        "clerk",
        "acme",
        &["payments.write"],
    ))
}

/// The test world's file plus `extra` (TOML tables after `[registries]`).
fn world_with(w: &TestWorld, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(&w.world_path).unwrap();
    let path = w.dir.path().join("world-pg.toml");
    std::fs::write(&path, format!("{text}\n{extra}\n")).unwrap();
    path
}

const TABLES: &str = "[pg_registries.ap]\nvendors = \"erp_vendors\"\ninvoices = \"erp_invoices\"\n\
                      [pg_registries.bank]\nsanctions = \"compliance_sanctions\"\n";

/// The shipped AP vendors and invoices and the bank's sanctions list,
/// copied into tables of the schema (as a company's ERP would hold them).
fn fill_tables(pg: &pg::Schema) {
    pg.sql(
        "CREATE TABLE erp_vendors (owner TEXT NOT NULL, key TEXT NOT NULL, record JSONB NOT NULL);
         CREATE TABLE erp_invoices (owner TEXT NOT NULL, key TEXT NOT NULL, record JSONB NOT NULL);
         CREATE TABLE compliance_sanctions (owner TEXT NOT NULL, value TEXT NOT NULL, id TEXT);",
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("packs");
    let mut client = pg::admin(&std::env::var(pg::ENV).unwrap());
    for (file, table) in [
        ("ap/registries/vendors.json", "erp_vendors"),
        ("ap/registries/invoices.json", "erp_invoices"),
    ] {
        let v: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join(file)).unwrap()).unwrap();
        for (owner, recs) in v.as_object().unwrap() {
            for (key, rec) in recs.as_object().unwrap() {
                client
                    .execute(
                        &format!(
                            "INSERT INTO {}.{table} (owner, key, record) VALUES ($1, $2, $3::text::jsonb)",
                            pg.name
                        ),
                        &[owner, key, &rec.to_string()],
                    )
                    .unwrap();
            }
        }
    }
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("bank/registries/sanctions.json")).unwrap(),
    )
    .unwrap();
    for iban in v["*"].as_array().unwrap() {
        client
            .execute(
                &format!(
                    "INSERT INTO {}.compliance_sanctions (owner, value) VALUES ('*', $1)",
                    pg.name
                ),
                &[&iban.as_str().unwrap()],
            )
            .unwrap();
    }
}

fn gateway(w: &TestWorld, pg: &pg::Schema) -> Gateway {
    let world = World::load(&world_with(w, TABLES), &w.bundle.table).unwrap();
    Gateway::new(&w.bundle, world, Arc::new(PgStore::open(&pg.url).unwrap())).unwrap()
}

#[test]
fn an_invoice_is_paid_from_registry_tables_once() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    let w = TestWorld::new();
    let gw = gateway(&w, &pg);
    let m = clerk(&w);
    // the amount and the payee come from the tables
    let wrong = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4300.00"), &m, vec![]))
        .unwrap();
    assert_deny(&wrong, "provenance", "amount");
    let paid = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4200.00"), &m, vec![]))
        .unwrap();
    assert_eq!(paid.decision, Outcome::Allow, "{paid:#?}");
    assert_eq!(paid.resolved["amount"], json!(420_000));
    // paid once: the executor's mark in the store overrides the table row
    let again = gw
        .decide(&input(
            pay("INV-1001", SUPPLIER, "4200.00"),
            &clerk(&w),
            vec![],
        ))
        .unwrap();
    assert_deny(&again, "policy", "invoice is not open");
    // an invoice that is not in the table does not exist
    let ghost = gw
        .decide(&input(pay("INV-7777", SUPPLIER, "1.00"), &m, vec![]))
        .unwrap();
    assert_deny(&ghost, "provenance", "invoice_id");
    assert_eq!(
        intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None),
        Ok(4)
    );
}

#[test]
fn a_change_to_a_registry_table_is_seen_by_the_next_decision() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    let w = TestWorld::new();
    let gw = gateway(&w, &pg);
    let m = clerk(&w);
    // the ERP corrects the invoice's amount: the old amount is refused
    pg.sql(
        "UPDATE erp_invoices SET record = jsonb_set(record, '{amount}', '\"4250.00\"')
         WHERE owner = 'acme' AND key = 'INV-1001'",
    );
    let old = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4200.00"), &m, vec![]))
        .unwrap();
    assert_deny(&old, "provenance", "amount");
    let new = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4250.00"), &m, vec![]))
        .unwrap();
    assert_eq!(new.decision, Outcome::Allow, "{new:#?}");
    // compliance adds emma's landlord to the sanctions table (a set registry)
    let emma = w.emma();
    assert_eq!(
        decide(&gw, transfer(LANDLORD, json!("10.00")), &emma).decision,
        Outcome::Allow
    );
    pg.sql("INSERT INTO compliance_sanctions (owner, value, id) VALUES ('*', 'DE44 5001 0517 5407 3249 31', 'S-9')");
    assert_deny(
        &decide(&gw, transfer(LANDLORD, json!("11.00")), &emma),
        "policy",
        "sanctioned",
    );
}

#[test]
fn a_bad_row_in_a_registry_table_decides_nothing() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    pg.sql(
        "UPDATE erp_invoices SET record = record - 'currency' WHERE owner = 'acme' AND key = 'INV-1001'",
    );
    let w = TestWorld::new();
    let gw = gateway(&w, &pg);
    let m = clerk(&w);
    // fail closed: a DENY naming the table and the field, with its receipt
    let d = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4200.00"), &m, vec![]))
        .unwrap();
    assert_deny(&d, "provenance", "`erp_invoices`");
    assert!(
        d.reason.as_deref().unwrap().contains("no field `currency`"),
        "{d:#?}"
    );
    // a table that is gone: the same, and the store keeps working
    pg.sql("DROP TABLE erp_vendors");
    let d = gw
        .decide(&input(
            pay("INV-1003", "DE02100500000024290661", "310.40"),
            &m,
            vec![],
        ))
        .unwrap();
    assert_deny(&d, "provenance", "`erp_vendors`");
    let snap = gw.store().snapshot().unwrap();
    assert!(snap.accounts.executions.is_empty());
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(2));
}

#[test]
fn registry_tables_are_declared_cleanly_and_need_postgres() {
    let w = TestWorld::new();
    // a world with tables but a store that has none
    let world = World::load(&world_with(&w, TABLES), &w.bundle.table).unwrap();
    let Err(err) = Gateway::new(&w.bundle, world, Arc::new(MemoryStore::new())) else {
        panic!("a memory store cannot read registry tables");
    };
    assert!(
        matches!(err, GatewayError::RegistryTables { .. }),
        "{err:?}"
    );
    assert_eq!(
        miette::Diagnostic::code(&err).unwrap().to_string(),
        "ipc::gateway::registry_tables"
    );
    for (extra, needle) in [
        (
            "[pg_registries.ap]\nsuppliers = \"t\"\n",
            "declares no registry `suppliers`",
        ),
        (
            "[pg_registries.nope]\nvendors = \"t\"\n",
            "`nope`, which is not in the bundle",
        ),
        (
            "[pg_registries.ap]\nvendors = \"erp.vendors; DROP TABLE x\"\n",
            "is not a table name",
        ),
    ] {
        let err = World::load(&world_with(&w, extra), &w.bundle.table).unwrap_err();
        assert!(err.to_string().contains(needle), "{extra}: {err}");
    }
}

/// The IBAN a concurrent change gives the supplier in [`the_records_flip`].
const NEW_IBAN: &str = "DE02100500000024290661";

/// `n` more open invoices of acme to Stadtwerke for 100.00, `{prefix}000`
/// on.
fn open_invoices(pg: &pg::Schema, prefix: &str, n: usize) {
    for i in 0..n {
        pg.sql(&format!(
            "INSERT INTO erp_invoices (owner, key, record) VALUES ('acme', '{prefix}{i:03}',
             '{{\"vendor\": \"V-STADTWERKE\", \"amount\": \"100.00\", \"currency\": \"EUR\", \"status\": \"open\"}}')"
        ));
    }
}

/// Another connection flips, in one transaction at a time, the supplier's
/// record and the invoices `INV-C…` between two states: *old* (the IBAN on
/// file since 2025, the invoices open for 100.00) and *new* (a new IBAN
/// changed in the cooling-off window, the invoices paid and 200.00).
/// Returns the number of flips once `stop` is set.
fn the_records_flip(url: &str, stop: &std::sync::atomic::AtomicBool) -> usize {
    let mut c = pg::admin(url);
    let mut flips = 0;
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        let new = flips % 2 == 0;
        let (iban, changed, amount, status) = if new {
            (NEW_IBAN, "2099-01-01T00:00:00Z", "200.00", "paid")
        } else {
            (SUPPLIER, "2025-01-15T09:00:00Z", "100.00", "open")
        };
        let mut t = c.transaction().unwrap();
        t.execute(
            "UPDATE erp_vendors SET record = record || jsonb_build_object('iban', $1::text,
             'iban_changed_at', $2::text) WHERE owner = 'acme' AND key = 'V-STADTWERKE'",
            &[&iban, &changed],
        )
        .unwrap();
        t.execute(
            "UPDATE erp_invoices SET record = record || jsonb_build_object('amount', $1::text,
             'status', $2::text) WHERE owner = 'acme' AND key LIKE 'INV-C%'",
            &[&amount, &status],
        )
        .unwrap();
        t.commit().unwrap();
        flips += 1;
    }
    flips
}

/// Issue #14, item 4: a record changed concurrently is seen consistently.
/// While another connection keeps flipping the supplier's record and the
/// invoices between an *old* and a *new* state (each flip one committed
/// transaction), every decision is consistent with one committed state of
/// the registry tables: the store reads them in the decision's
/// transaction, at REPEATABLE READ, in one snapshot taken after the head
/// lock. So only the old IBAN with the old amount on an open invoice is
/// ever paid; a mix (the new IBAN with the old change date — a payment to
/// fresh bank details without the cooling-off —, or the old amount read
/// before and the status after a flip) would pay something else.
#[test]
fn records_changed_concurrently_are_seen_in_one_state_per_decision() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    const N: usize = 160;
    open_invoices(&pg, "INV-C", N);
    let w = TestWorld::new();
    let gw = gateway(&w, &pg);
    let m = clerk(&w);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let proposal = |i: usize| {
        let iban = if i.is_multiple_of(2) {
            SUPPLIER
        } else {
            NEW_IBAN
        };
        let amount = if (i / 2).is_multiple_of(2) {
            "100.00"
        } else {
            "200.00"
        };
        (
            pay(&format!("INV-C{i:03}"), iban, amount),
            i.is_multiple_of(4),
        )
    };
    let (decisions, flips) = std::thread::scope(|sc| {
        let flipper = sc.spawn(|| the_records_flip(&pg.url, &stop));
        let mut decisions = vec![];
        // one transaction per decision, then batches of eight (group commit)
        for i in 0..N / 2 {
            let (p, _) = proposal(i);
            decisions.push(gw.decide(&input(p, &m, vec![])).unwrap());
        }
        for chunk in (N / 2..N).collect::<Vec<_>>().chunks(8) {
            let inputs: Vec<_> = chunk
                .iter()
                .map(|&i| input(proposal(i).0, &m, vec![]))
                .collect();
            decisions.extend(intentplane::gateway::testkit::decide_batch(&gw, &inputs).unwrap());
        }
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        (decisions, flipper.join().unwrap())
    });
    assert!(
        flips > 10,
        "the records hardly changed during the run: {flips} flips"
    );
    let mut paid = 0;
    for (i, d) in decisions.iter().enumerate() {
        let (_, old_and_right) = proposal(i);
        if d.decision == Outcome::Allow {
            assert!(old_and_right, "decision {i} mixes two states: {d:#?}");
            assert_eq!(d.resolved["amount"], json!(10_000), "{d:#?}");
            assert_eq!(d.resolved["payee_iban"], json!(SUPPLIER), "{d:#?}");
            paid += 1;
        } else {
            assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
        }
    }
    // the chain and the store agree, one receipt per decision
    assert_eq!(
        intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None),
        Ok(N)
    );
    let executed = gw.store().snapshot().unwrap().accounts.executions.len();
    assert_eq!(executed, paid);
}

/// Issue #14, item 4: an invoice marked paid by another connection is never
/// paid by a decision that started after that change committed. The ERP
/// marks the invoices `INV-D…` paid one by one while the gateway decides
/// on them in the same order; a decision whose invoice was marked (its
/// `COMMIT` returned) before the decision began is a DENY.
#[test]
fn an_invoice_marked_paid_before_the_decision_is_never_paid() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    const N: usize = 120;
    open_invoices(&pg, "INV-D", N);
    let w = TestWorld::new();
    let gw = gateway(&w, &pg);
    let m = clerk(&w);
    let marked = std::sync::atomic::AtomicUsize::new(0);
    let (decisions, before) = std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut c = pg::admin(&pg.url);
            for i in 0..N {
                c.execute(
                    "UPDATE erp_invoices SET record = record || '{\"status\": \"paid\"}'
                     WHERE owner = 'acme' AND key = $1",
                    &[&format!("INV-D{i:03}")],
                )
                .unwrap();
                marked.store(i + 1, std::sync::atomic::Ordering::SeqCst);
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        });
        let mut decisions = vec![];
        let mut before = vec![];
        for i in 0..N {
            before.push(marked.load(std::sync::atomic::Ordering::SeqCst) > i);
            let p = pay(&format!("INV-D{i:03}"), SUPPLIER, "100.00");
            decisions.push(gw.decide(&input(p, &m, vec![])).unwrap());
        }
        (decisions, before)
    });
    assert!(
        before.iter().any(|b| *b),
        "the ERP never got ahead: no check made"
    );
    for (i, d) in decisions.iter().enumerate() {
        if before[i] {
            assert_deny(d, "policy", "invoice is not open");
        } else {
            assert!(
                matches!(d.decision, Outcome::Allow | Outcome::Deny),
                "{d:#?}"
            );
        }
    }
}

/// Issue #14: a decision is taken before the store's lock and checked
/// under it (`src/store/postgres/optimistic.rs`). The ERP marks the
/// invoice paid, and changes the supplier's IBAN, after the decision read
/// the tables but before its lock: the decision read an open invoice, the
/// committed state has a paid one, so it is decided again under the lock
/// and denied; nothing is executed.
#[test]
fn a_registry_row_changed_between_the_phases_is_decided_again() {
    let Some(pg) = pg::fresh() else { return };
    fill_tables(&pg);
    let w = TestWorld::new();
    let world = World::load(&world_with(&w, TABLES), &w.bundle.table).unwrap();
    let store = Arc::new(PgStore::open(&pg.url).unwrap());
    let gw = Gateway::new(&w.bundle, world, store.clone()).unwrap();
    let m = clerk(&w);
    let (server, schema) = (std::env::var(pg::ENV).unwrap(), pg.name.clone());
    let changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = changed.clone();
    store.set_between_phases(Some(Arc::new(move || {
        if flag.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        pg::admin(&server)
            .batch_execute(&format!(
                "SET search_path TO {schema};
                 UPDATE erp_invoices SET record = record || '{{\"status\": \"paid\"}}'::jsonb
                 WHERE key = 'INV-1001'"
            ))
            .unwrap();
    })));
    let d = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4200.00"), &m, vec![]))
        .unwrap();
    assert!(changed.load(std::sync::atomic::Ordering::SeqCst));
    assert_deny(&d, "policy", "invoice is not open");
    use intentplane::store::Store;
    assert_eq!(store.optimistic_counts(), Some((0, 1)));
    let snap = gw.store().snapshot().unwrap();
    assert!(snap.accounts.executions.is_empty());
    assert_eq!(intentplane::store::verify_store(&snap, None), Ok(1));
    // with nothing changed, the next decision commits as taken
    store.set_between_phases(None);
    let other = gw
        .decide(&input(pay("INV-1001", SUPPLIER, "4200.00"), &m, vec![]))
        .unwrap();
    assert_deny(&other, "policy", "invoice is not open");
    assert_eq!(store.optimistic_counts(), Some((1, 1)));
}
