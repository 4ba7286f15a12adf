//! What `run`, `serve`, `token`, `approve` and `registry` share: loading a
//! bundle, a world and a store into a gateway (or the MCP proxy's gateway
//! from its `intentplane.toml`: `--config`), and reading input lines.

use crate::base::json::MAX_LINE;
use crate::bundle::Bundle;
use crate::gateway::Gateway;
pub use crate::gateway::envelope::{malformed, parse_line};
use crate::gateway::world::World;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use miette::Diagnostic;
use serde_json::Value;
use std::io::BufRead;
use std::path::PathBuf;
use std::sync::Arc;

/// How long `ipc serve` waits at start for a PostgreSQL store to be
/// reachable.
pub const STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

#[derive(clap::Args, Debug, Clone)]
pub struct GatewayArgs {
    /// The bundle (from `ipc build`).
    #[arg(long, value_name = "FILE", required_unless_present = "config")]
    pub bundle: Option<PathBuf>,
    /// The MCP proxy's configuration (`intentplane.toml`) instead of a
    /// bundle, a world and a store (`ipc approve`, `ipc approvals`,
    /// `ipc registry` only): the very gateway `ipc mcp --config` runs (its
    /// packs and inline tools built the same way, its world, its store),
    /// so tools declared inline are approved and their registries changed
    /// like any pack's.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["bundle", "bundle_key", "allow_unsigned", "world", "store"]
    )]
    pub config: Option<PathBuf>,
    /// Verify the bundle's signature with this public key (else with the
    /// world's `bundle_keys`).
    #[arg(long, value_name = "PUBFILE")]
    pub bundle_key: Option<PathBuf>,
    /// Run a bundle whose signature is not checked, when no key is pinned
    /// (development only; the gateway refuses to start otherwise).
    #[arg(long)]
    pub allow_unsigned: bool,
    /// The world: keys, approvers, registries, clock, store (TOML).
    #[arg(long, value_name = "FILE")]
    pub world: Option<PathBuf>,
    /// The store: an SQLite file or a `postgres://USER@HOST/DB` URL (no
    /// password in it); overrides the world's. Without either, the command
    /// refuses to start (`ipc::serve::no_store`) unless `--ephemeral` asks
    /// for an in-memory store that ends with the process.
    #[arg(long, value_name = "FILE|URL")]
    pub store: Option<PathBuf>,
    /// Whether running without a store is allowed: `ipc run` and `ipc
    /// serve` set it from `--ephemeral` (and then warn); every command
    /// refuses to start without a store otherwise.
    #[arg(skip = false)]
    pub ephemeral_ok: bool,
    /// Whether a world with a fixed `clock` may be run: `ipc run` (a
    /// replay: true), `ipc serve` only with `--allow-frozen-clock`.
    #[arg(skip = true)]
    pub frozen_clock_ok: bool,
    /// Whether a fixed clock is announced on stderr (`--allow-frozen-clock`).
    #[arg(skip)]
    pub announce_frozen_clock: bool,
    /// A PostgreSQL store that cannot be reached is tried again for up to
    /// [`STORE_WAIT`] (`ipc serve`), see `store::open_waiting`.
    #[arg(skip)]
    pub wait_for_store: bool,
}

/// A world with a fixed clock given to a long-running command.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error(
    "the world fixes the clock at `{at}`: `ipc serve` would decide every request at that time, so no mandate, approval or signed change would ever expire"
)]
#[diagnostic(
    code(ipc::serve::frozen_clock),
    help(
        "remove `clock` from the world to run on the system clock, or give `--allow-frozen-clock` to serve a fixed time on purpose (development and replays only)"
    )
)]
pub struct FrozenClock {
    pub at: String,
}

/// No store given to a command that must keep its state (`ipc run`,
/// `ipc serve`, and the commands of the trusted side).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error(
    "no store: the gateway would forget approvals, budgets and executed operations when it stops"
)]
#[diagnostic(
    code(ipc::serve::no_store),
    help(
        "give `--store FILE` (or `store = \"FILE\"` in the world), or `--ephemeral` to run on an in-memory store on purpose"
    )
)]
pub struct NoStore;

/// Neither a bundle nor a proxy configuration (clap requires one).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("no gateway: give `--bundle FILE` or `--config intentplane.toml`")]
#[diagnostic(code(ipc::gateway::no_bundle))]
pub struct NoBundle;

/// `--config` given to a command that decides.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("`--config` loads the MCP proxy's gateway for the trusted side only")]
#[diagnostic(
    code(ipc::gateway::config_not_here),
    help(
        "`ipc approve`, `ipc approvals` and `ipc registry` take `--config`; the proxy's calls are decided by `ipc mcp --config`"
    )
)]
pub struct ConfigNotHere;

/// A loading failure, rendered by the caller.
pub type LoadError = Box<dyn Diagnostic + Send + Sync>;

/// [`load_trusted`], its error printed on stderr (the trusted side's
/// commands: `ipc approvals`, `ipc mandates`).
pub(super) fn load_trusted_or_report(args: &GatewayArgs) -> Option<Gateway> {
    match load_trusted(args) {
        Ok(gw) => Some(gw),
        Err(e) => {
            eprint!("{}", super::bundle::render_error(e.as_ref(), false));
            None
        }
    }
}

/// The gateway of the trusted side's commands (`ipc approve`,
/// `ipc approvals`, `ipc registry`): from a bundle, or from the MCP
/// proxy's configuration (`--config`), which loads exactly what `ipc mcp`
/// runs: the same bundle hash (packs and inline tools build to the same
/// bytes), world and store. It decides nothing here.
pub fn load_trusted(args: &GatewayArgs) -> Result<Gateway, LoadError> {
    match &args.config {
        #[cfg(not(feature = "mcp"))]
        Some(_) => Err(Box::new(super::FeatureOff {
            what: "--config",
            feature: "mcp",
        })),
        #[cfg(feature = "mcp")]
        Some(config) => {
            let setup = crate::mcp::config::load(config).map_err(|r| Box::new(r) as LoadError)?;
            let holding = setup.holding;
            if let Some(line) = setup.world.shadow.startup_line() {
                crate::base::log::warn("shadow_mode", &line);
            }
            Gateway::new(&setup.bundle, setup.world, setup.store)
                .map(|g| g.with_holding(holding).execute_externally())
                .map_err(|e| Box::new(e) as LoadError)
        }
        None => load(args),
    }
}

/// The gateway of a command that decides (`ipc run`, `ipc serve`): from a
/// bundle only; the proxy's configuration is `ipc mcp`'s to decide with.
pub fn load(args: &GatewayArgs) -> Result<Gateway, LoadError> {
    if args.config.is_some() {
        return Err(Box::new(ConfigNotHere));
    }
    let Some(bundle_path) = &args.bundle else {
        return Err(Box::new(NoBundle));
    };
    let key = match &args.bundle_key {
        Some(p) => Some(crate::keys::load_public(p).map_err(|e| Box::new(e) as LoadError)?),
        None => None,
    };
    // format, hash and the table's invariants first; the signature once the
    // world (which pins the bundle keys) is read
    let bundle = Bundle::load(bundle_path, None).map_err(|e| Box::new(e) as LoadError)?;
    let world = match &args.world {
        Some(w) => World::load(w, &bundle.table).map_err(|e| Box::new(e) as LoadError)?,
        None => World::empty(),
    };
    if let Some(c) = world.clock {
        let at = crate::base::json::format_time(c);
        if !args.frozen_clock_ok {
            return Err(Box::new(FrozenClock { at }));
        }
        if args.announce_frozen_clock {
            crate::base::log::warn(
                "frozen_clock",
                &format!(
                    "the world fixes the clock at `{at}` (--allow-frozen-clock): nothing expires while this runs"
                ),
            );
        }
    }
    bundle
        .authenticate(
            &bundle_path.display().to_string(),
            key.as_ref(),
            &world.bundle_keys,
            args.allow_unsigned,
        )
        .map_err(|e| Box::new(e) as LoadError)?;
    if key.is_none() && world.bundle_keys.is_empty() {
        crate::base::log::warn(
            "unsigned_bundle",
            &format!(
                "`{}` runs unverified (--allow-unsigned): anyone who can write it decides what is allowed",
                bundle_path.display()
            ),
        );
    }
    if let Some(line) = world.shadow.startup_line() {
        crate::base::log::warn("shadow_mode", &line);
    }
    if let Some(map) = world.shards.clone() {
        return sharded(args, &bundle, world, &map);
    }
    let store_path = args.store.clone().or_else(|| world.store.clone());
    let store: Arc<dyn Store> = match store_path {
        Some(p) if args.wait_for_store => crate::store::open_waiting(&p, true, STORE_WAIT)
            .map_err(|e| Box::new(e) as LoadError)?,
        Some(p) => crate::store::open(&p, true).map_err(|e| Box::new(e) as LoadError)?,
        None if !args.ephemeral_ok => return Err(Box::new(NoStore)),
        None => {
            crate::base::log::warn(
                "no_store",
                "no store (`--store` or the world's `store`): approvals, budgets and idempotency last only as long as this process",
            );
            Arc::new(MemoryStore::new())
        }
    };
    Gateway::new(&bundle, world, store).map_err(|e| Box::new(e) as LoadError)
}

/// `--store` given with a world whose stores are sharded.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error(
    "the world's stores are sharded (`[store.shards]`): `--store` would put every tenant on one store"
)]
#[diagnostic(
    code(ipc::shards::store_given),
    help(
        "leave `--store` out: each tenant is decided on its shard; to read one shard's receipts, give its store to `ipc receipts`"
    )
)]
pub struct StoreOverShards;

/// The router over the world's shards (`gateway::shards`), each store
/// opened as `--store` would be.
fn sharded(
    args: &GatewayArgs,
    bundle: &Bundle,
    world: World,
    map: &crate::gateway::world::ShardMap,
) -> Result<Gateway, LoadError> {
    if args.store.is_some() {
        return Err(Box::new(StoreOverShards));
    }
    let open = |p: &std::path::Path| {
        if args.wait_for_store {
            crate::store::open_waiting(p, true, STORE_WAIT)
        } else {
            crate::store::open(p, true)
        }
    };
    crate::base::log::info(
        "shards",
        &format!(
            "intentplane: {} shards, {} tenants named in the map{}",
            map.locations().len(),
            map.tenants.len(),
            if map.default.is_some() {
                ", and a default"
            } else {
                ""
            }
        ),
    );
    Gateway::sharded(bundle, world, &open).map_err(|e| Box::new(e) as LoadError)
}

/// Loads the gateway and the default mandate a command was given; any
/// failure is printed on stderr, and `None` returned.
pub fn load_with_mandate(
    args: &GatewayArgs,
    mandate: &Option<PathBuf>,
) -> Option<(Gateway, Option<Value>)> {
    let gw = match load(args) {
        Ok(g) => g,
        Err(e) => {
            eprint!("{}", super::bundle::render_error(e.as_ref(), false));
            return None;
        }
    };
    let mandate = match mandate {
        Some(p) => match read_json(p) {
            Ok(v) => Some(v),
            Err(e) => {
                crate::base::log::error("mandate", &e.to_string());
                return None;
            }
        },
        None => None,
    };
    Some((gw, mandate))
}

/// One line of input.
pub enum Line {
    Text(String),
    /// Not a line the gateway can read (too long, not UTF-8): a DENY for
    /// that line, and the input goes on.
    Bad(String),
}

/// The next line of `r` (without its line ending), reading at most
/// [`MAX_LINE`] bytes of it into memory; `None` at the end of the input. An
/// I/O error is returned, so that a failing input ends the command instead
/// of being retried forever.
pub fn next_line(r: &mut dyn BufRead) -> std::io::Result<Option<Line>> {
    let mut buf: Vec<u8> = vec![];
    let mut too_long = false;
    let mut seen = false;
    loop {
        let (used, ended) = {
            let avail = r.fill_buf()?;
            if avail.is_empty() {
                break;
            }
            seen = true;
            let (part, used, ended) = match avail.iter().position(|b| *b == b'\n') {
                Some(i) => (&avail[..i], i + 1, true),
                None => (avail, avail.len(), false),
            };
            if !too_long {
                buf.extend_from_slice(part);
                if buf.len() > MAX_LINE {
                    too_long = true;
                    buf = vec![];
                }
            }
            (used, ended)
        };
        r.consume(used);
        if ended {
            break;
        }
    }
    if !seen {
        return Ok(None);
    }
    if too_long {
        return Ok(Some(Line::Bad(format!(
            "a line longer than {MAX_LINE} bytes"
        ))));
    }
    if buf.last() == Some(&b'\r') {
        buf.pop();
    }
    Ok(Some(match String::from_utf8(buf) {
        Ok(s) => Line::Text(s),
        Err(_) => Line::Bad("the line is not UTF-8 text".into()),
    }))
}

/// Reads a JSON file (a mandate token, an approval).
pub fn read_json(path: &std::path::Path) -> Result<Value, String> {
    crate::base::json::read_file(path)
}
