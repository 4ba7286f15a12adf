//! The store's tables: created on first open under an advisory lock, a
//! foreign or newer schema refused untouched; a snapshot of every table read
//! leniently for `verify_store`.

use super::{APPLICATION, SCHEMA_VERSION, pg_text};
use crate::store::rows;
use crate::store::{Accounts, Snapshot};
use postgres::Client;
use std::collections::HashMap;

/// Advisory lock key serialising schema creation ("IPCS").
const SCHEMA_LOCK: i64 = 0x4950_4353;

/// Every table of the store, `ipc_meta` first.
const TABLES: [&str; 8] = [
    "ipc_meta",
    "ipc_budgets",
    "ipc_nonces",
    "ipc_executions",
    "ipc_revocations",
    "ipc_state",
    "ipc_receipts",
    "ipc_head",
];

const SCHEMA: &str = r#"
CREATE TABLE ipc_meta (key TEXT COLLATE "C" PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ipc_budgets (
    mandate_id TEXT COLLATE "C" PRIMARY KEY,
    amount     BIGINT NOT NULL,
    calls      BIGINT NOT NULL
);
CREATE TABLE ipc_nonces (nonce TEXT COLLATE "C" PRIMARY KEY);
CREATE TABLE ipc_executions (op_hash TEXT COLLATE "C" PRIMARY KEY, result TEXT NOT NULL);
CREATE TABLE ipc_revocations (token_id TEXT COLLATE "C" PRIMARY KEY);
CREATE TABLE ipc_state (
    ns   TEXT COLLATE "C" NOT NULL,
    key  TEXT COLLATE "C" NOT NULL,
    json TEXT NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE TABLE ipc_receipts (
    seq       BIGINT PRIMARY KEY,
    prev_hash TEXT NOT NULL,
    hash      TEXT NOT NULL,
    body      TEXT NOT NULL
);
CREATE TABLE ipc_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  BIGINT NOT NULL,
    hash TEXT NOT NULL
);
"#;

pub(super) enum SchemaError {
    Pg(postgres::Error),
    Foreign(String),
    Newer(i64),
    Missing(String),
}

impl From<postgres::Error> for SchemaError {
    fn from(e: postgres::Error) -> Self {
        SchemaError::Pg(e)
    }
}

/// Checks the schema, creating it when allowed and absent; all in one
/// transaction under an advisory lock.
pub(super) fn prepare_schema(client: &mut Client, create: bool) -> Result<(), SchemaError> {
    client.batch_execute("BEGIN")?;
    let r = check_or_create(client, create);
    match r {
        Ok(()) => {
            client.batch_execute("COMMIT")?;
            Ok(())
        }
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK");
            Err(e)
        }
    }
}

fn check_or_create(client: &mut Client, create: bool) -> Result<(), SchemaError> {
    client.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let schema = txt(&client.query_one("SELECT current_schema()::text", &[])?, 0);
    if schema.is_empty() {
        return Err(SchemaError::Missing(
            "no schema to use: none of the `search_path` schemas exists".into(),
        ));
    }
    let present: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
               AND c.relname = ANY($2)",
            &[&schema, &TABLES.to_vec()],
        )?
        .iter()
        .map(|r| txt(r, 0))
        .collect();
    if present.iter().any(|t| t == "ipc_meta") {
        let rows = client
            .query("SELECT key::text, value::text FROM ipc_meta", &[])
            .map_err(|e| {
                SchemaError::Foreign(format!(
                    "schema `{schema}` has an `ipc_meta` table that is not intentplane's ({})",
                    pg_text(&e)
                ))
            })?;
        let meta: HashMap<String, String> = rows.iter().map(|r| (txt(r, 0), txt(r, 1))).collect();
        if meta.get("application").map(String::as_str) != Some(APPLICATION) {
            return Err(SchemaError::Foreign(format!(
                "schema `{schema}` belongs to another application (`ipc_meta` has no `application = {APPLICATION}`)"
            )));
        }
        let version: i64 = meta
            .get("schema_version")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| {
                SchemaError::Foreign(format!(
                    "schema `{schema}`: `ipc_meta` has no readable `schema_version`"
                ))
            })?;
        if version > SCHEMA_VERSION {
            return Err(SchemaError::Newer(version));
        }
        if version < SCHEMA_VERSION {
            // version 1 is the first: there is nothing older to migrate
            return Err(SchemaError::Foreign(format!(
                "schema `{schema}`: unknown schema version {version}"
            )));
        }
        if let Some(missing) = TABLES.iter().find(|t| !present.iter().any(|p| p == *t)) {
            return Err(SchemaError::Missing(format!(
                "schema `{schema}` is an intentplane store without its table `{missing}`"
            )));
        }
        return Ok(());
    }
    if let Some(t) = present.first() {
        return Err(SchemaError::Foreign(format!(
            "schema `{schema}` has a table `{t}` but no intentplane marker (`ipc_meta`): another application's"
        )));
    }
    if !create {
        return Err(SchemaError::Missing(format!(
            "not an intentplane store: schema `{schema}` has no `ipc_meta` table"
        )));
    }
    client.batch_execute(SCHEMA)?;
    client.execute(
        "INSERT INTO ipc_meta (key, value) VALUES ('application', $1), ('schema_version', $2)",
        &[&APPLICATION, &SCHEMA_VERSION.to_string()],
    )?;
    Ok(())
}

/// A column read leniently, as text (`::text` in the query): whatever a
/// tampered table holds, a snapshot reads it and `verify_store` judges it.
pub(super) fn txt(r: &postgres::Row, i: usize) -> String {
    r.try_get::<_, Option<String>>(i)
        .ok()
        .flatten()
        .unwrap_or_default()
}

pub(super) fn read_snapshot(client: &mut Client) -> Result<Snapshot, postgres::Error> {
    let receipts = client
        .query(
            "SELECT seq::text, prev_hash::text, hash::text, body::text, pg_typeof(body)::text
             FROM ipc_receipts ORDER BY ipc_receipts.seq",
            &[],
        )?
        .iter()
        .map(|r| {
            rows::stored_receipt(
                txt(r, 0).parse().unwrap_or(0),
                txt(r, 1),
                txt(r, 2),
                txt(r, 3),
                &txt(r, 4),
            )
        })
        .collect();
    let head = client
        .query_opt(
            "SELECT seq::text, hash::text FROM ipc_head WHERE id = 1",
            &[],
        )?
        .map(|r| (txt(&r, 0).parse().unwrap_or(0), txt(&r, 1)));
    let mut accounts = Accounts::default();
    for r in client.query(
        "SELECT mandate_id::text, amount::text, calls::text FROM ipc_budgets",
        &[],
    )? {
        accounts.budgets.insert(
            txt(&r, 0),
            // an amount that is not a number (tampered) is no receipt's
            // sum, nor is a negative count
            rows::audited_spent(txt(&r, 1).parse().ok(), txt(&r, 2).parse().ok()),
        );
    }
    for r in client.query("SELECT nonce::text FROM ipc_nonces", &[])? {
        accounts.nonces.insert(txt(&r, 0));
    }
    for r in client.query("SELECT op_hash::text FROM ipc_executions", &[])? {
        accounts.executions.insert(txt(&r, 0));
    }
    Ok(Snapshot {
        receipts,
        head,
        accounts,
    })
}
