//! `ipc replay --store S --bundle NEW [--world W]`: the recorded proposals
//! of a store decided again with another bundle, read-only, and what would
//! change (see `gateway::replay`). Exit 1 when any proposal would be newly
//! allowed (or at a lower approval level), 0 otherwise, 2 when the replay
//! cannot run.

use super::Format;
use super::report::{error_json, plural, write_json};
use crate::bundle::Bundle;
use crate::gateway::replay::{ReplayError, Report, Side};
use crate::gateway::world::World;
use miette::Diagnostic;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The recorded store (an SQLite file or a `postgres://` URL), only
    /// ever read; default: the world's `store`.
    #[arg(long, value_name = "FILE|URL")]
    pub store: Option<PathBuf>,
    /// The bundle to decide the recorded proposals with.
    #[arg(long, value_name = "FILE")]
    pub bundle: PathBuf,
    /// The world: keys, approvers, registries (its `clock` is ignored:
    /// each proposal is decided at its receipt's time).
    #[arg(long, value_name = "FILE")]
    pub world: Option<PathBuf>,
    /// Verify the bundle's signature with this public key (else with the
    /// world's `bundle_keys`).
    #[arg(long, value_name = "PUBFILE")]
    pub bundle_key: Option<PathBuf>,
    /// Replay with a bundle whose signature is not checked, when no key is
    /// pinned.
    #[arg(long)]
    pub allow_unsigned: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

type Boxed = Box<dyn Diagnostic + Send + Sync>;

pub fn run(args: &ReplayArgs, out: &mut dyn Write) -> u8 {
    let (report, store) = match replay(args) {
        Ok(r) => r,
        Err(e) => {
            match args.format {
                Format::Json => {
                    let _ = write_json(out, &error_json(e.as_ref()));
                }
                Format::Human => eprint!("{}", super::bundle::render_error(e.as_ref(), false)),
            }
            return 2;
        }
    };
    let written = match args.format {
        Format::Json => {
            let mut doc = serde_json::to_value(&report).unwrap_or_default();
            if let Some(m) = doc.as_object_mut() {
                m.insert("ok".into(), (report.newly_allowed == 0).into());
                m.insert("store".into(), store.into());
            }
            write_json(out, &doc)
        }
        Format::Human => out.write_all(human(&report, &store).as_bytes()),
    };
    if written.is_err() {
        return 2;
    }
    u8::from(report.newly_allowed > 0)
}

fn replay(args: &ReplayArgs) -> Result<(Report, String), Boxed> {
    let boxed = |e: ReplayError| Box::new(e) as Boxed;
    let key = match &args.bundle_key {
        Some(p) => Some(crate::keys::load_public(p).map_err(|e| Box::new(e) as Boxed)?),
        None => None,
    };
    let bundle = Bundle::load(&args.bundle, None).map_err(|e| Box::new(e) as Boxed)?;
    let world = match &args.world {
        Some(w) => World::load(w, &bundle.table).map_err(|e| Box::new(e) as Boxed)?,
        None => World::empty(),
    };
    let path = args.bundle.display().to_string();
    bundle
        .authenticate(&path, key.as_ref(), &world.bundle_keys, args.allow_unsigned)
        .map_err(|e| Box::new(e) as Boxed)?;
    let store = match (&args.store, &world.store, &world.shards) {
        (Some(s), _, _) => s.clone(),
        (None, _, Some(_)) => return Err(boxed(ReplayError::Sharded)),
        (None, Some(s), None) => s.clone(),
        (None, None, None) => return Err(boxed(ReplayError::NoStore)),
    };
    let recorded = crate::store::recorded::open_read_only(&store).map_err(|e| boxed(e.into()))?;
    let report =
        crate::gateway::replay::replay(&bundle, &world, recorded.as_ref()).map_err(boxed)?;
    let shown = crate::store::postgres::redact(&store.display().to_string());
    Ok((report, shown))
}

fn side(s: &Side) -> String {
    match s.level {
        Some(l) if s.decision != "DENY" => format!("{} (level {l})", s.decision),
        _ => s.decision.clone(),
    }
}

/// The report as text: the counts, each transition by action, stage and
/// reason, what was not replayable.
fn human(r: &Report, store: &str) -> String {
    let upto = r
        .head
        .as_ref()
        .and_then(|h| h.get("seq"))
        .map(|s| format!(" up to receipt {s}"))
        .unwrap_or_default();
    let mut t = format!("replay of `{store}`{upto} with bundle {}\n", r.bundle);
    t.push_str(&format!(
        "{}: {} decided again ({} unchanged, {} changed, {} newly allowed), {} not replayable\n",
        plural(r.decisions as usize, "recorded decision"),
        r.replayed,
        r.unchanged,
        r.changed,
        r.newly_allowed,
        r.not_replayable.values().sum::<u64>(),
    ));
    let mut action = None;
    for tr in &r.transitions {
        if action != Some(&tr.action) {
            action = Some(&tr.action);
            t.push_str(&format!(
                "\n{}\n",
                tr.action.as_deref().unwrap_or("(no action)")
            ));
        }
        let mark = match (tr.loosens, tr.from.decision == "ALLOW") {
            (true, false) => "  NEWLY ALLOWED",
            (true, true) => "  LOWER APPROVAL LEVEL",
            _ => "",
        };
        t.push_str(&format!(
            "  {:>6}  {} -> {}  at {}{}{mark}\n",
            tr.count,
            side(&tr.from),
            side(&tr.to),
            tr.to.stage,
            tr.to
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
        ));
    }
    if !r.not_replayable.is_empty() {
        t.push_str("\nnot replayable\n");
        for (why, n) in &r.not_replayable {
            t.push_str(&format!("  {n:>6}  {why}\n"));
        }
    }
    if !r.changes_refused.is_empty() {
        t.push_str("\nregistry changes the new bundle refuses\n");
        for (why, n) in &r.changes_refused {
            t.push_str(&format!("  {n:>6}  {why}\n"));
        }
    }
    t.push_str(&format!(
        "\napplied in place: {}, {}\n",
        plural(r.registry_changes as usize, "registry change"),
        plural(r.revocations as usize, "revocation"),
    ));
    t
}
