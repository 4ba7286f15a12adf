//! `ipc shards init --world W` (places the map's tenants on their shards),
//! `ipc shards check --world W` (every shard's chain, placements and
//! receipts against the map, and its head; exit 1 on any problem) and
//! `ipc shards move TENANT --to URL --world W`. All read the world's
//! `[store.shards]` only: no bundle.

use super::Format;
use crate::gateway::shards::admin::{self, Opened};
use crate::gateway::shards::moving;
use crate::gateway::world::{ShardMap, shard_map_of};
use clap::Subcommand;
use miette::Diagnostic;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ShardsArgs {
    #[command(subcommand)]
    pub command: ShardsCommand,
}

#[derive(Subcommand, Debug)]
pub enum ShardsCommand {
    /// Place each tenant the world's `[store.shards]` names on its shard
    /// (and mark the default shard), with a receipt on that shard; refuses
    /// a tenant another shard of the map holds. Run once for a new map,
    /// and again for each tenant added to it.
    Init(ShardsWorldArgs),
    /// Check every shard of the world's map: its chain verifies, it holds
    /// the tenants the map sends to it, no tenant is held twice, and every
    /// receipt on it belongs to a tenant it holds; prints each head.
    Check(ShardsWorldArgs),
    /// Move a tenant to another shard: its decisions fenced meanwhile, its
    /// budgets, nonces, executions, pending operations, state, registry
    /// changes and child mandates copied, the old shard left marking it
    /// moved. Run again after a failure: it ends the unfinished move
    /// first. Then send the tenant to URL in the world's map.
    Move(ShardsMoveArgs),
}

#[derive(clap::Args, Debug)]
pub struct ShardsMoveArgs {
    /// The tenant (a mandate's `owner`).
    pub tenant: String,
    /// The store to move it to, as the map would name it (a file relative
    /// to the world, or a `postgres://` URL).
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The world whose `[store.shards]` sends the tenant to its shard now.
    #[arg(long, value_name = "FILE")]
    pub world: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct ShardsWorldArgs {
    /// The world whose `[store.shards]` names the shards.
    #[arg(long, value_name = "FILE")]
    pub world: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

/// A world without shards given to `ipc shards`.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("the world `{world}` names no shards")]
#[diagnostic(
    code(ipc::shards::none),
    help("add a `[store.shards]` table (tenant = store) and optionally `[store] default = STORE`")
)]
pub struct NoShards {
    pub world: String,
}

pub fn run(args: &ShardsArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        ShardsCommand::Init(a) => init(a, out),
        ShardsCommand::Check(a) => check(a, out),
        ShardsCommand::Move(a) => move_tenant(a, out),
    }
}

fn fail(format: Format, out: &mut dyn Write, e: &dyn Diagnostic) -> u8 {
    match format {
        Format::Json => {
            let doc = json!({"ok": false, "error": {
                "code": e.code().map(|c| c.to_string()),
                "message": e.to_string(),
                "help": e.help().map(|h| h.to_string()),
            }});
            let _ = writeln!(out, "{doc}");
        }
        Format::Human => eprint!("{}", super::bundle::render_error(e, false)),
    }
    1
}

/// The map and every shard's store (opened as they are; `init` may create
/// a new SQLite file or schema, `check` only opens existing ones).
fn open(world: &Path, create: bool) -> Result<(ShardMap, Vec<Opened>), Box<dyn Diagnostic>> {
    let map = shard_map_of(world)
        .map_err(|e| Box::new(e) as Box<dyn Diagnostic>)?
        .ok_or_else(|| {
            Box::new(NoShards {
                world: world.display().to_string(),
            }) as Box<dyn Diagnostic>
        })?;
    let shards = admin::open_all(&map, &|p| crate::store::open(p, create))
        .map_err(|e| Box::new(e) as Box<dyn Diagnostic>)?;
    Ok((map, shards))
}

fn init(args: &ShardsWorldArgs, out: &mut dyn Write) -> u8 {
    let (map, shards) = match open(&args.world, true) {
        Ok(x) => x,
        Err(e) => return fail(args.format, out, e.as_ref()),
    };
    let now = match crate::gateway::unix_now() {
        Ok(n) => n,
        Err(e) => return fail(args.format, out, &e),
    };
    let placed = match admin::place(&map, &shards, now) {
        Ok(p) => p,
        Err(e) => return fail(args.format, out, &e),
    };
    let written = match args.format {
        Format::Json => {
            let doc = json!({"ok": true, "placed": placed.iter()
                .map(|(s, t)| json!({"store": s, "tenant": t})).collect::<Vec<_>>()});
            writeln!(out, "{doc}")
        }
        Format::Human => {
            let mut text = String::new();
            for (s, t) in &placed {
                if t == "*" {
                    text.push_str(&format!("default  {s}\n"));
                } else {
                    text.push_str(&format!("placed   {t} on {s}\n"));
                }
            }
            text.push_str(&format!(
                "{} placed; {} shards hold the map's tenants\n",
                placed.len(),
                shards.len()
            ));
            out.write_all(text.as_bytes())
        }
    };
    u8::from(written.is_err())
}

fn check(args: &ShardsWorldArgs, out: &mut dyn Write) -> u8 {
    let (map, shards) = match open(&args.world, false) {
        Ok(x) => x,
        Err(e) => return fail(args.format, out, e.as_ref()),
    };
    let reports = admin::check(&map, &shards);
    let ok = reports.iter().all(|r| r.problems.is_empty());
    let written = match args.format {
        Format::Json => writeln!(out, "{}", json!({"ok": ok, "shards": reports})),
        Format::Human => {
            let mut text = String::new();
            for r in &reports {
                let status = if r.problems.is_empty() {
                    "ok  "
                } else {
                    "fail"
                };
                let head = match &r.head {
                    Some((seq, hash)) => format!("head {seq} {hash}"),
                    None => "empty chain".into(),
                };
                let holds = if r.holds.is_empty() {
                    "no tenant".to_string()
                } else {
                    r.holds.join(", ")
                };
                let default = if r.default { " (default)" } else { "" };
                text.push_str(&format!(
                    "{status}  {}{default}: {} receipts, {head}; holds {holds}\n",
                    r.store, r.receipts
                ));
                for p in &r.problems {
                    text.push_str(&format!("      {p}\n"));
                }
            }
            out.write_all(text.as_bytes())
        }
    };
    if written.is_err() {
        return 1;
    }
    u8::from(!ok)
}

fn move_tenant(args: &ShardsMoveArgs, out: &mut dyn Write) -> u8 {
    let (map, shards) = match open(&args.world, false) {
        Ok(x) => x,
        Err(e) => return fail(args.format, out, e.as_ref()),
    };
    let base = args.world.parent().unwrap_or(Path::new("."));
    let to_loc = if crate::store::postgres::is_url(&args.to) {
        PathBuf::from(&args.to)
    } else {
        base.join(&args.to)
    };
    // a store the map names already is the one opened; a new one may be
    // created (an SQLite file, a PostgreSQL schema)
    let opened;
    let to = match shards.iter().find(|s| s.location == to_loc) {
        Some(s) => s,
        None => match crate::store::open(&to_loc, true) {
            Ok(store) => {
                opened = Opened {
                    location: to_loc.clone(),
                    store,
                };
                &opened
            }
            Err(source) => {
                let e = crate::gateway::shards::ShardError::Open {
                    store: to_loc.display().to_string(),
                    source,
                };
                return fail(args.format, out, &e);
            }
        },
    };
    let now = match crate::gateway::unix_now() {
        Ok(n) => n,
        Err(e) => return fail(args.format, out, &e),
    };
    let moved = moving::move_tenant(&map, &shards, &args.tenant, to, now, &mut pause);
    let m = match moved {
        Ok(m) => m,
        Err(e) => return fail(args.format, out, &e),
    };
    let written = match args.format {
        Format::Json => writeln!(out, "{}", json!({"ok": true, "moved": m})),
        Format::Human => {
            let mut text = String::new();
            match m.recovered {
                Some(moving::Recovered::Finished) => {
                    text.push_str("an earlier move had committed: finished\n")
                }
                Some(moving::Recovered::RolledBack) => {
                    text.push_str("an earlier move had not committed: rolled back, moved again\n")
                }
                None => {}
            }
            text.push_str(&format!(
                "moved    {} from {} to {} ({} rows)\n         old shard's fence receipt {} {}\n         new shard's first receipt {} {}\nsend `{}` to `{}` in the world's `[store.shards]`\n",
                m.tenant, m.from, m.to, m.rows, m.from_receipt.0, m.from_receipt.1,
                m.to_receipt.0, m.to_receipt.1, m.tenant, args.to
            ));
            out.write_all(text.as_bytes())
        }
    };
    u8::from(written.is_err())
}

/// Test builds only: `IPC_TEST_PAUSE_AFTER=fence|copy|commit` stops the
/// move after that step (the kill -9 tests), saying so on stderr.
fn pause(step: moving::Step) -> Result<(), String> {
    if cfg!(debug_assertions)
        && std::env::var("IPC_TEST_PAUSE_AFTER").is_ok_and(|s| s == step.name())
    {
        eprintln!("paused after {}", step.name());
        loop {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
    }
    Ok(())
}
