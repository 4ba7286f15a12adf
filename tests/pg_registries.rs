//! Registries kept in PostgreSQL tables (`[pg_registries]` in the world),
//! read inside each decision's transaction. Needs `IPC_TEST_PG` (see
//! `common/pg.rs`); the world checks run without it.

mod common;

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
