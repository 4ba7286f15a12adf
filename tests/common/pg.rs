//! PostgreSQL for the conformance tests. `IPC_TEST_PG` names a server
//! (`postgres://USER@HOST:PORT/DB`, no password: `scripts/test` starts a
//! throwaway cluster that trusts local connections and sets it; a server
//! that wants a password gets it from `PGPASSWORD`). Each test
//! gets a schema of its own, dropped at the end. Without a server the PG
//! half of a test is skipped by the rule of `tools.rs`: a loud
//! `SKIPPED: no PostgreSQL` line, and a failure under CI.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

pub const ENV: &str = "IPC_TEST_PG";

/// The server's URL, or `None` after the loud skip line.
pub fn server() -> Option<String> {
    match std::env::var(ENV) {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            super::tools::skip(
                "PostgreSQL",
                &format!(
                    "{ENV} is not set; scripts/test starts a throwaway cluster when initdb is installed"
                ),
            );
            None
        }
    }
}

/// A schema of its own on the test server; dropped with the value.
pub struct Schema {
    /// The store URL: the server's, with this schema as the search path.
    pub url: String,
    pub name: String,
    server: String,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// `CREATE {kind}` of a name of this process's own (`{prefix}PID_N{suffix}`)
/// on the test server: the server and the name, or `None` (skipped)
/// without a server.
fn create(kind: &str, prefix: &str, suffix: &str) -> Option<(String, String)> {
    let server = server()?;
    let name = format!(
        "{prefix}{}_{}{suffix}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    admin(&server)
        .batch_execute(&format!("CREATE {kind} {name}"))
        .unwrap();
    Some((server, name))
}

/// A fresh, empty schema, or `None` (skipped) without a server.
pub fn fresh() -> Option<Schema> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let (server, name) = create("SCHEMA", "ipc_t", &format!("_{nanos}"))?;
    let sep = if server.contains('?') { '&' } else { '?' };
    Some(Schema {
        url: format!("{server}{sep}options=-csearch_path%3D{name}"),
        name,
        server,
    })
}

/// A plain client on the server (to set up and tamper); the password, if
/// the server wants one, from `PGPASSWORD` as for the store.
pub fn admin(server: &str) -> postgres::Client {
    try_admin(server).unwrap_or_else(|e| panic!("cannot connect to {ENV} `{server}`: {e}"))
}

fn try_admin(server: &str) -> Result<postgres::Client, postgres::Error> {
    let mut config: postgres::Config = server.parse()?;
    if let Ok(p) = std::env::var("PGPASSWORD") {
        config.password(p);
    }
    config.connect(postgres::NoTls)
}

impl Schema {
    /// Runs SQL in this schema (tampering, setting up a foreign schema).
    pub fn sql(&self, sql: &str) {
        let mut c = admin(&self.server);
        c.batch_execute(&format!("SET search_path TO {}; {sql}", self.name))
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // never a panic here: this may run while a failed test unwinds
        if let Ok(mut c) = try_admin(&self.server) {
            let _ = c.batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
        }
    }
}

/// The test server's TLS: the folder of its authority (`ca.pem`) and of
/// an authority that signed nothing there (`other-ca.pem`), from
/// `IPC_TEST_PG_TLS` (`scripts/pg-cluster` makes both when `openssl` is
/// installed); `None` after a loud skip line (never in CI).
pub fn tls_dir() -> Option<std::path::PathBuf> {
    server()?;
    match std::env::var("IPC_TEST_PG_TLS") {
        Ok(d) if !d.is_empty() => Some(std::path::PathBuf::from(d)),
        _ => {
            super::tools::skip(
                "PostgreSQL TLS",
                "IPC_TEST_PG_TLS is not set; scripts/pg-cluster makes an authority when openssl is installed",
            );
            None
        }
    }
}

/// The folder of PostgreSQL's programs (`initdb`, `pg_ctl`): `PG_BIN`,
/// else what `pg_config --bindir` says (the installed version, whichever
/// it is), as scripts/pg-cluster finds them; `None` without either.
pub fn bindir() -> Option<std::path::PathBuf> {
    if let Ok(b) = std::env::var("PG_BIN")
        && !b.is_empty()
    {
        return Some(b.into());
    }
    let out = std::process::Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !dir.trim().is_empty()).then(|| dir.trim().into())
}

/// A database of its own on the test server (a shard of its own:
/// `tests/gateway/chain_shards.rs`); dropped with the value.
pub struct Database {
    /// The store URL: the server's, with this database.
    pub url: String,
    pub name: String,
    server: String,
}

/// A fresh, empty database, or `None` (skipped) without a server.
pub fn fresh_database() -> Option<Database> {
    let (server, name) = create("DATABASE", "ipc_d", "")?;
    // the server's URL with this database's name in place of its own
    let (base, query) = match server.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (server.as_str(), String::new()),
    };
    let prefix = base.rsplit_once('/').map(|(p, _)| p).unwrap_or(base);
    Some(Database {
        url: format!("{prefix}/{name}{query}"),
        name,
        server,
    })
}

impl Drop for Database {
    fn drop(&mut self) {
        if let Ok(mut c) = try_admin(&self.server) {
            let _ = c.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}
