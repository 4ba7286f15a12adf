//! From `intentplane.toml` to a [`Setup`]: the driver of the loader's
//! passes, each a module of its own reporting into one [`Diags`]: servers
//! (`servers.rs`), tool names and modes (`tools.rs`), the bundle (packs
//! built at start-up through check → codegen → bundle, the inline tools
//! checked from the TOML as one more pack, or a bundle file: `packs.rs`),
//! the world (`world.rs`), the session's mandates (`session.rs`) and each
//! tool's mapping (`tools.rs`, `args.rs`). Every problem found is
//! collected; the load goes as far as it can so that one run reports them
//! all.

use super::ctx::{Diags, Dir, sp};
use super::declared::Sites;
use super::diag::{ConfigError, ConfigReport, Diag, Reported};
use super::file::{ConfigFile, S, ToolFile};
use super::{ServerConfig, SessionConfig, Setup, ToolConfig};
use super::{packs, servers, session, tools, world};
use crate::bundle::Bundle;
use crate::gateway::shards::Holding;
use crate::gateway::world::World;
use std::path::{Path, PathBuf};

/// The store's file when neither the config nor the world names one, next
/// to the config.
pub const DEFAULT_STORE: &str = "intentplane.db";
/// A config larger than this is not a config.
const MAX_CONFIG_LEN: u64 = 1024 * 1024;

/// Everything [`Setup`] holds except the open store: what `--check`
/// builds.
pub struct Checked {
    pub config_path: PathBuf,
    pub servers: Vec<ServerConfig>,
    pub tools: Vec<ToolConfig>,
    pub bundle: Bundle,
    pub world: World,
    /// The store `load` opens (an SQLite file or a `postgres://` URL).
    pub store_path: PathBuf,
    /// The session tenant's placement check when the store is its shard.
    pub holding: crate::gateway::shards::Holding,
    pub session: SessionConfig,
    /// Where each tool was written (for the check against the servers).
    pub sites: Sites,
}

/// Loads and checks the config, then opens the store.
pub fn load(path: &Path) -> Result<Setup, ConfigReport> {
    let (report, setup) = load_with_report(path);
    match setup {
        Some(s) if !report.has_errors() => Ok(s),
        _ => Err(report),
    }
}

/// [`load`], with the warnings of a config that loads.
pub fn load_with_report(path: &Path) -> (ConfigReport, Option<Setup>) {
    let (mut report, checked) = check(path);
    let Some(c) = checked else {
        return (report, None);
    };
    let opened = crate::store::open(&c.store_path, true).and_then(|store| {
        placed(&store, &c.holding, &c.session.token)?;
        Ok(store)
    });
    match opened {
        Ok(store) => (
            report,
            Some(Setup {
                config_path: c.config_path,
                servers: c.servers,
                tools: c.tools,
                bundle: c.bundle,
                world: c.world,
                store,
                session: c.session,
                sites: c.sites,
                holding: c.holding,
            }),
        ),
        Err(e) => {
            let file = path.display().to_string();
            let source = std::fs::read_to_string(path).unwrap_or_default();
            report.items.push(Reported {
                file,
                source,
                diag: Diag::Config(ConfigError::Load {
                    what: "store",
                    message: format!("`{}`: {e}", c.store_path.display()),
                    span: None,
                    help: None,
                }),
            });
            (report, None)
        }
    }
}

/// Everything [`load`] checks, without opening the store or starting
/// anything: the report, and what was built when there is no error.
pub fn check(path: &Path) -> (ConfigReport, Option<Checked>) {
    let mut d = Diags::new(path.display().to_string());
    let out = run(path, &Dir::of(path), &mut d);
    let out = if d.has_errors() { None } else { out };
    (d.report, out)
}

/// The passes in order, each reporting into `d`.
fn run(path: &Path, dir: &Dir, d: &mut Diags) -> Option<Checked> {
    let cfg = read(path, d)?;
    let servers = servers::servers(&cfg, dir, d);
    tools::names(&cfg, d);
    let inline: Vec<&S<ToolFile>> = cfg
        .tools
        .iter()
        .filter(|t| t.get_ref().passthrough.is_none() && t.get_ref().is_inline())
        .collect();
    let (bundle, inline_pack) = packs::bundle(&cfg, &inline, dir, d)?;
    let mut world = world::world(&cfg, &bundle, inline_pack.as_deref(), dir, d)?;
    packs::authenticate(&cfg, &bundle, &world, dir, d)?;
    let bundle = bundle.0;
    let (used, actions) = tools::actions(&cfg, &bundle, d);
    let session = session::session(&cfg, &bundle, &used, &actions, &mut world, dir, d);
    let (tools, sites) = tools::tools(&cfg, &servers, &actions, session.as_ref(), d);
    let session = session?;
    let (store_path, holding) = store_path(&cfg, &world, dir, &session.token, d)?;
    Some(Checked {
        config_path: path.to_path_buf(),
        servers,
        tools,
        bundle,
        world,
        store_path,
        holding,
        session,
        sites,
    })
}

/// The config's text (kept in `d` for every diagnostic after) parsed.
fn read(path: &Path, d: &mut Diags) -> Option<ConfigFile> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_CONFIG_LEN => {
            d.err(ConfigError::Read {
                path: d.file.clone(),
                reason: format!(
                    "{} bytes is larger than a config may be ({MAX_CONFIG_LEN})",
                    m.len()
                ),
                help: None,
            });
            return None;
        }
        _ => {}
    }
    d.source = match std::fs::read_to_string(path) {
        Ok(s) => s,
        Err(e) => {
            let help = (e.kind() == std::io::ErrorKind::NotFound && path.is_relative()).then(|| {
                let here = std::env::current_dir()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|_| "the current folder".into());
                format!(
                    "a relative `--config` is looked for in the folder `ipc mcp` was started from, here `{here}`; an MCP client starts it from a folder of its own: give the config's absolute path"
                )
            });
            d.err(ConfigError::Read {
                path: d.file.clone(),
                reason: e.to_string().to_lowercase(),
                help,
            });
            return None;
        }
    };
    match toml::from_str(&d.source) {
        Ok(c) => Some(c),
        Err(e) => {
            let message = e.message().trim_end_matches('\n').to_string();
            let help = message.starts_with("unknown field").then(|| {
                "a misspelt key is never ignored; the keys are listed in docs/mcp.md, section \"MCP proxy configuration\"".to_string()
            });
            d.err(ConfigError::Toml {
                message,
                span: e.span().map(sp),
                help,
            });
            None
        }
    }
}

/// The store `load` opens: the config's `store`, else the world's, else
/// [`DEFAULT_STORE`] beside the config.
fn store_path(
    cfg: &ConfigFile,
    world: &World,
    dir: &Dir,
    token: &serde_json::Value,
    d: &mut Diags,
) -> Option<(PathBuf, Holding)> {
    let one = |p: PathBuf| Some((p, Holding::Any));
    match (&cfg.store, &world.store, &world.shards) {
        (Some(s), _, _) => one(match s.get_ref() {
            u if crate::store::postgres::is_url(u) => PathBuf::from(u),
            f => dir.rel(f),
        }),
        (None, _, Some(map)) => {
            // the session is one tenant's: the proxy opens its shard only
            let owner = token["mandate"]["owner"].as_str().unwrap_or_default();
            let Some(loc) = map.route(owner) else {
                d.err(ConfigError::Load {
                    what: "store",
                    message: format!(
                        "the world's `[store.shards]` names no shard for the session's tenant `{}`, and no default",
                        crate::base::json::echo(owner)
                    ),
                    span: cfg.world.as_ref().map(|w| sp(w.span())),
                    help: Some("add the tenant to the map and place it with `ipc shards init`".into()),
                });
                return None;
            };
            let default = map.default.as_ref() == Some(loc) && !map.tenants.contains_key(owner);
            Some((loc.clone(), Holding::Shard { default }))
        }
        (None, Some(w), None) => one(w.clone()),
        (None, None, None) => one(dir.0.join(DEFAULT_STORE)),
    }
}

/// Refuses a shard that does not hold the session's tenant (a stale map).
fn placed(
    store: &std::sync::Arc<dyn crate::store::Store>,
    holding: &Holding,
    token: &serde_json::Value,
) -> Result<(), crate::store::StoreError> {
    let owner = token["mandate"]["owner"].as_str().unwrap_or_default();
    let mut why = None;
    store.read_only(&mut |tx| {
        why = holding.refusal(tx, owner)?;
        Ok(serde_json::Value::Null)
    })?;
    match why {
        Some(w) => Err(crate::store::StoreError::Aborted(w)),
        None => Ok(()),
    }
}
