//! `ipc receipts checkpoint --world W --key K` (every shard's head signed,
//! one set) and `ipc receipts verify --world W [--checkpoint SET --key
//! PUB]` (every shard's chain, each extending its own checkpoint of the
//! set): the receipts of a sharded world (`docs/sharding.md`).

use super::Format;
use super::report::{failure, load, plural, problems_json, signing_time, write_json};
use crate::gateway::world::shard_map_of;
use crate::keys::{PublicKey, SecretKey};
use crate::store::checkpoint_set::CheckpointSet;
use crate::store::{Checkpoint, CheckpointError, verify_store};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The stores of the world's shard map, each with its name.
fn shards_of(world: &Path) -> Result<Vec<(String, PathBuf)>, Box<dyn miette::Diagnostic>> {
    let map = shard_map_of(world)
        .map_err(|e| Box::new(e) as Box<dyn miette::Diagnostic>)?
        .ok_or_else(|| {
            Box::new(super::shards::NoShards {
                world: world.display().to_string(),
            }) as Box<dyn miette::Diagnostic>
        })?;
    Ok(map
        .locations()
        .into_iter()
        .map(|l| (l.display().to_string(), l.clone()))
        .collect())
}

/// Signs every shard's head, each only if its store verifies; one set.
/// What `ipc receipts checkpoint --world` was given.
pub(super) struct SignAll<'a> {
    pub world: &'a Path,
    pub key: &'a SecretKey,
    pub now: Option<i64>,
    pub output: Option<&'a Path>,
    pub format: Format,
}

pub(super) fn checkpoint(args: &SignAll<'_>, out: &mut dyn Write) -> u8 {
    let (world, key) = (args.world, args.key);
    let shards = match shards_of(world) {
        Ok(s) => s,
        Err(e) => return failure(out, args.format, e.as_ref()),
    };
    let now = match signing_time(args.now) {
        Ok(t) => t,
        Err(e) => return failure(out, args.format, &e),
    };
    let mut set = BTreeMap::new();
    for (name, loc) in &shards {
        let snap = match load(loc) {
            Ok(s) => s,
            Err(e) => return failure(out, args.format, &e),
        };
        if let Err(problems) = verify_store(&snap, None) {
            let e = CheckpointError::Unverified {
                store: name.clone(),
                problems: plural(problems.len(), "problem"),
            };
            return failure(out, args.format, &e);
        }
        let Some((seq, hash)) = snap.last() else {
            return failure(
                out,
                args.format,
                &CheckpointError::EmptyChain {
                    store: name.clone(),
                },
            );
        };
        match Checkpoint::sign(seq, hash, now, key) {
            Ok(cp) => set.insert(name.clone(), cp),
            Err(e) => return failure(out, args.format, &e),
        };
    }
    let set = CheckpointSet::new(set);
    let Some(path) = args.output else {
        return u8::from(out.write_all(set.to_text().as_bytes()).is_err());
    };
    if let Err(e) = set.write(path) {
        return failure(out, args.format, &e);
    }
    let written = match args.format {
        Format::Human => {
            let mut text = String::new();
            for (name, cp) in &set.shards {
                text.push_str(&format!("signed {name}: record {} {}\n", cp.seq, cp.hash));
            }
            text.push_str(&format!(
                "wrote  {} ({} shards, key {})\n",
                path.display(),
                set.shards.len(),
                key.public().id()
            ));
            out.write_all(text.as_bytes())
        }
        Format::Json => write_json(
            out,
            &json!({"ok": true, "file": path.display().to_string(),
                    "set": serde_json::to_value(&set).unwrap_or_default()}),
        ),
    };
    u8::from(written.is_err())
}

/// Verifies every shard; with a set, each against its own checkpoint (a
/// shard missing from the set, or a set entry for a store the map does not
/// name, is a problem).
/// What `ipc receipts verify --world` was given.
pub(super) struct VerifyAll<'a> {
    pub world: &'a Path,
    pub checkpoint: Option<&'a Path>,
    pub key: Option<&'a Path>,
    pub format: Format,
}

pub(super) fn verify(args: &VerifyAll<'_>, out: &mut dyn Write) -> u8 {
    let world = args.world;
    let shards = match shards_of(world) {
        Ok(s) => s,
        Err(e) => return failure(out, args.format, e.as_ref()),
    };
    let set = match (args.checkpoint, args.key) {
        (Some(file), Some(key)) => match PublicKey::load(key)
            .map_err(CheckpointError::from)
            .and_then(|k| CheckpointSet::load(file, &k))
        {
            Ok(s) => Some(s),
            Err(e) => return failure(out, args.format, &e),
        },
        _ => None,
    };
    let mut rows = vec![];
    let mut ok = true;
    for (name, loc) in &shards {
        let row = verify_one(name, loc, set.as_ref());
        ok &= row["ok"] == true;
        rows.push(row);
    }
    if let Some(set) = &set {
        for name in set.shards.keys() {
            if !shards.iter().any(|(n, _)| n == name) {
                ok = false;
                rows.push(json!({"store": name, "ok": false, "problems": [
                    {"message": "the checkpoint set names a store the world's map does not"}]}));
            }
        }
    }
    let written = match args.format {
        Format::Json => write_json(out, &json!({"ok": ok, "shards": rows})),
        Format::Human => {
            let mut text = String::new();
            for r in &rows {
                let status = if r["ok"] == true { "ok  " } else { "fail" };
                text.push_str(&format!(
                    "{status}  {}: {} receipts{}\n",
                    r["store"].as_str().unwrap_or("?"),
                    r["count"].as_u64().unwrap_or(0),
                    match r["checkpoint"]["seq"].as_u64() {
                        Some(seq) => format!(", extends its checkpoint at record {seq}"),
                        None => String::new(),
                    }
                ));
                for p in r["problems"].as_array().into_iter().flatten() {
                    text.push_str(&format!("      {}\n", p["message"].as_str().unwrap_or("?")));
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

fn verify_one(name: &str, loc: &Path, set: Option<&CheckpointSet>) -> serde_json::Value {
    let snap = match load(loc) {
        Ok(s) => s,
        Err(e) => {
            return json!({"store": name, "ok": false, "problems": [{"message": e.to_string()}]});
        }
    };
    let cp = set.and_then(|s| s.shards.get(name));
    if set.is_some() && cp.is_none() {
        return json!({"store": name, "ok": false, "count": snap.receipts.len(),
            "problems": [{"message": "the checkpoint set has no checkpoint of this shard"}]});
    }
    let result = verify_store(&snap, cp.map(|c| (c.seq, c.hash.as_str())));
    json!({
        "store": name,
        "ok": result.is_ok(),
        "count": snap.receipts.len(),
        "head": snap.head.as_ref().map(|(seq, hash)| json!({"seq": seq, "hash": hash})),
        "checkpoint": cp.map(|c| json!({"seq": c.seq, "hash": c.hash, "time": c.time})),
        "problems": problems_json(result.as_ref().err()),
    })
}
