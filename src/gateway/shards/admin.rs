//! `ipc shards`: placing the map's tenants on their shards (`init`) and
//! checking every shard against the map (`check`). Both work on the
//! stores alone (no bundle): a placement is a state entry and a receipt
//! (`"kind": "shard"`) on its shard.

use super::{DEFAULT_KEY, NS, ShardError, Standing, is_default, standing, tenant_key};
use crate::gateway::world::ShardMap;
use crate::store::{ChainProblem, Store, StoreError, verify_store};
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

/// The key listing the tenants a shard holds (a sorted array), for
/// `check`; each tenant's own entry is what a decision reads.
const INDEX_KEY: &str = "index";

/// A shard's store, opened.
pub struct Opened {
    pub location: PathBuf,
    pub store: Arc<dyn Store>,
}

impl Opened {
    pub fn name(&self) -> String {
        self.location.display().to_string()
    }
}

/// Every store of `map`, opened with `open`.
pub fn open_all(map: &ShardMap, open: super::Opener<'_>) -> Result<Vec<Opened>, ShardError> {
    map.locations()
        .into_iter()
        .map(|loc| {
            open(loc)
                .map(|store| Opened {
                    location: loc.clone(),
                    store,
                })
                .map_err(|source| ShardError::Open {
                    store: loc.display().to_string(),
                    source,
                })
        })
        .collect()
}

fn read<T>(
    s: &Opened,
    f: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<T, StoreError>,
) -> Result<T, ShardError> {
    let mut out = None;
    s.store
        .read_only(&mut |tx| {
            out = Some(f(tx)?);
            Ok(Value::Null)
        })
        .map_err(|source| ShardError::Open {
            store: s.name(),
            source,
        })?;
    out.ok_or_else(|| ShardError::Open {
        store: s.name(),
        source: StoreError::Aborted("the read returned nothing".into()),
    })
}

/// Places the map's tenants on their shards: each tenant the map names is
/// recorded as held by its shard, unless another shard of the map holds
/// it (refused: that is a move); the default shard is marked so. Each
/// placement is a receipt on its shard. Returns what was placed (`(store,
/// tenant)`, tenant `*` for the default mark); a tenant already held where
/// the map sends it is left as it is.
pub fn place(
    map: &ShardMap,
    shards: &[Opened],
    now: i64,
) -> Result<Vec<(String, String)>, ShardError> {
    for (tenant, loc) in &map.tenants {
        for other in shards.iter().filter(|s| &s.location != loc) {
            if read(other, &mut |tx| standing(tx, tenant))? == Standing::Held {
                return Err(ShardError::HeldElsewhere {
                    tenant: tenant.clone(),
                    store: loc.display().to_string(),
                    other: other.name(),
                });
            }
        }
    }
    let default = shards
        .iter()
        .find(|s| map.default.as_ref() == Some(&s.location));
    if let Some(d) = default {
        decided_on_default(map, d)?;
    }
    let mut placed = vec![];
    for s in shards {
        for tenant in map.tenants_of(&s.location) {
            match read(s, &mut |tx| standing(tx, tenant))? {
                Standing::Held => continue,
                Standing::Moved { to } | Standing::Moving { to, .. } => {
                    return Err(ShardError::NotHeld {
                        tenant: tenant.into(),
                        store: s.name(),
                        why: format!(" (it moved to `{to}`; move it back with `ipc shards move`)"),
                    });
                }
                Standing::Absent => {}
            }
            mark(s, tenant, Mark::Held, now)?;
            placed.push((s.name(), tenant.to_string()));
            // the default shard, which decides every tenant it has not
            // seen placed elsewhere, records this one as elsewhere: a
            // stale map without it is denied there
            if let Some(d) = default.filter(|d| d.location != s.location)
                && read(d, &mut |tx| standing(tx, tenant))? == Standing::Absent
            {
                mark(d, tenant, Mark::Elsewhere(&s.name()), now)?;
            }
        }
        if map.default.as_ref() == Some(&s.location) && !read(s, &mut |tx| is_default(tx))? {
            mark(s, "*", Mark::Default, now)?;
            placed.push((s.name(), "*".into()));
        }
    }
    Ok(placed)
}

/// A default shard that already decided for a tenant the map now places
/// on another shard: its budgets and operations are there, so placing it
/// afresh elsewhere would give it a second budget (a move, not a
/// placement).
fn decided_on_default(map: &ShardMap, d: &Opened) -> Result<(), ShardError> {
    // only tenants the default has not seen placed elsewhere yet: once
    // marked, a later `init` reads no receipt at all
    let mut unmarked = vec![];
    for (t, l) in map.tenants.iter().filter(|(_, l)| **l != d.location) {
        if read(d, &mut |tx| standing(tx, t))? == Standing::Absent {
            unmarked.push((t, l));
        }
    }
    if unmarked.is_empty() {
        return Ok(());
    }
    let records = d.store.receipts().map_err(|source| ShardError::Open {
        store: d.name(),
        source,
    })?;
    for (t, l) in unmarked {
        let decided = records.iter().any(|r| {
            r.body["kind"] != "shard"
                && tenant_of(&r.body, &HashMap::new()).as_deref() == Some(t.as_str())
        });
        if decided {
            return Err(ShardError::HeldElsewhere {
                tenant: t.clone(),
                store: l.display().to_string(),
                other: d.name(),
            });
        }
    }
    Ok(())
}

/// What a placement records.
enum Mark<'a> {
    /// The tenant is held here.
    Held,
    /// The tenant is held by that other shard (on the default shard).
    Elsewhere(&'a str),
    /// This is the map's default shard.
    Default,
}

/// Writes one placement (`tenant`, or `*`: the default mark), the
/// shard's index of tenants and the receipt, in one transaction.
fn mark(s: &Opened, tenant: &str, what: Mark<'_>, now: i64) -> Result<(), ShardError> {
    s.store
        .transaction(&mut |tx| {
            let change = match &what {
                Mark::Default => {
                    tx.state_put(NS, DEFAULT_KEY, &Value::Bool(true))?;
                    "default"
                }
                Mark::Elsewhere(to) => {
                    tx.state_put(
                        NS,
                        &tenant_key(tenant),
                        &json!({"status": "moved", "to": to}),
                    )?;
                    "moved"
                }
                Mark::Held => {
                    tx.state_put(NS, &tenant_key(tenant), &json!({"status": "held"}))?;
                    "held"
                }
            };
            if tenant != "*" {
                index_add(tx, tenant)?;
            }
            let mut w = crate::canonical::ObjectWriter::new();
            w.str("change", change)
                .str("kind", "shard")
                .str("tenant", tenant)
                .str("time", &crate::base::json::format_time(now));
            tx.append_receipt_jcs(&w.finish())?;
            Ok(Value::Null)
        })
        .map(|_| ())
        .map_err(|source| ShardError::Open {
            store: s.name(),
            source,
        })
}

/// Adds `tenant` to the shard's index of tenants (what `check` reads).
pub(super) fn index_add(tx: &mut dyn crate::store::Tx, tenant: &str) -> Result<(), StoreError> {
    let mut index: BTreeSet<String> = tx
        .state_get(NS, INDEX_KEY)?
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default();
    if index.insert(tenant.to_string()) {
        tx.state_put(NS, INDEX_KEY, &json!(index))?;
    }
    Ok(())
}

/// What `ipc shards check` found on one shard.
#[derive(Debug, Serialize)]
pub struct ShardReport {
    pub store: String,
    /// The head: sequence number and hash of the last receipt.
    pub head: Option<(u64, String)>,
    pub receipts: usize,
    /// Whether this is the map's default shard, and marked so.
    pub default: bool,
    /// The tenants the shard holds, as it records them.
    pub holds: Vec<String>,
    /// Each problem in words (the chain, a placement, a receipt of a
    /// tenant the shard does not hold); none: the shard is sound.
    pub problems: Vec<String>,
}

/// Checks each shard: its chain verifies (as `ipc receipts verify`), it
/// holds every tenant the map sends to it (the default shard marked so),
/// no tenant is held by two shards, and every receipt on it belongs to a
/// tenant it holds (a decision's mandate owner, a change's owner, or the
/// tenant of the operation an approval or outcome names).
pub fn check(map: &ShardMap, shards: &[Opened]) -> Vec<ShardReport> {
    let mut reports: Vec<ShardReport> = shards.iter().map(|s| check_one(map, s)).collect();
    let mut holders: HashMap<String, Vec<String>> = HashMap::new();
    for r in &reports {
        for t in &r.holds {
            holders.entry(t.clone()).or_default().push(r.store.clone());
        }
    }
    for r in &mut reports {
        for t in &r.holds {
            if let Some(h) = holders.get(t).filter(|h| h.len() > 1) {
                r.problems.push(format!(
                    "tenant `{t}` is held by {} shards: {}",
                    h.len(),
                    h.join(", ")
                ));
            }
        }
    }
    reports
}

fn check_one(map: &ShardMap, s: &Opened) -> ShardReport {
    let mut r = ShardReport {
        store: s.name(),
        head: None,
        receipts: 0,
        default: false,
        holds: vec![],
        problems: vec![],
    };
    let placed = read(s, &mut |tx| {
        let index: Vec<String> = tx
            .state_get(NS, INDEX_KEY)?
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let mut held = vec![];
        let mut moved = BTreeMap::new();
        let mut moving = vec![];
        for t in index {
            match standing(tx, &t)? {
                Standing::Held => held.push(t),
                Standing::Moved { to } => {
                    moved.insert(t, to);
                }
                Standing::Moving { to, fence } => moving.push((t, to, fence)),
                Standing::Absent => {}
            }
        }
        Ok((held, moved, moving, is_default(tx)?))
    });
    let (held, moved, moving, marked_default) = match placed {
        Ok(p) => p,
        Err(e) => {
            r.problems.push(e.to_string());
            return r;
        }
    };
    r.holds = held;
    for (t, to, fence) in &moving {
        r.problems.push(format!(
            "tenant `{t}` is being moved to `{to}` (fence {fence}), and is decided nowhere until the move ends: run `ipc shards move {t} --to {to}` again"
        ));
    }
    // a tenant being moved keeps its receipts here
    let mut owns = r.holds.clone();
    owns.extend(moving.into_iter().map(|(t, _, _)| t));
    let is_default_loc = map.default.as_ref() == Some(&s.location);
    r.default = is_default_loc && marked_default;
    if is_default_loc && !marked_default {
        r.problems.push(
            "the map's default shard is not marked as the default (`ipc shards init`)".into(),
        );
    }
    for t in map.tenants_of(&s.location) {
        if !r.holds.iter().any(|h| h == t) {
            r.problems.push(format!(
                "the map sends tenant `{t}` here, and this shard does not hold it"
            ));
        }
    }
    match s.store.snapshot() {
        Ok(snap) => {
            r.head = snap.head.clone();
            r.receipts = snap.receipts.len();
            if let Err(ps) = verify_store(&snap, None) {
                r.problems
                    .extend(ps.iter().map(|p: &ChainProblem| format!("chain: {p}")));
            }
            let records = snap.records();
            r.problems
                .extend(foreign_receipts(map, s, &records, &owns, &moved, r.default));
        }
        Err(e) => r.problems.push(e.to_string()),
    }
    r
}

/// The tenant a receipt belongs to, as far as its body says.
fn tenant_of(body: &Value, ops: &HashMap<String, String>) -> Option<String> {
    let direct = body["mandate"]["owner"]
        .as_str()
        .or_else(|| body["owner"].as_str())
        .or_else(|| body["tenant"].as_str());
    if let Some(t) = direct {
        return Some(t.to_string());
    }
    body["operation_hash"]
        .as_str()
        .and_then(|op| ops.get(op).cloned())
}

/// Receipts of tenants this shard does not hold: decided after the
/// tenant moved away, or never placed here (the default shard may hold
/// tenants it has not recorded, unless the map sends them elsewhere).
fn foreign_receipts(
    map: &ShardMap,
    s: &Opened,
    records: &[crate::store::ReceiptRecord],
    holds: &[String],
    moved: &BTreeMap<String, String>,
    default: bool,
) -> Vec<String> {
    let mut ops: HashMap<String, String> = HashMap::new();
    let mut moved_at: HashMap<String, u64> = HashMap::new();
    let mut out = vec![];
    for rec in records {
        let b = &rec.body;
        if b["kind"] == "shard" {
            // from its fence on, a tenant moved away decides nothing here
            // (until it is held here again: a fence rolled back, a move
            // back)
            if let Some(t) = b["tenant"].as_str() {
                if b["change"] == "moved" || b["change"] == "moving" {
                    moved_at.entry(t.to_string()).or_insert(rec.seq);
                } else if b["change"] == "held" || b["change"] == "moved-in" {
                    moved_at.remove(t);
                }
            }
            continue;
        }
        let Some(t) = tenant_of(b, &ops) else {
            continue;
        };
        if let Some(op) = b["operation_hash"].as_str() {
            ops.entry(op.to_string()).or_insert_with(|| t.clone());
        }
        let ok = if holds.contains(&t) {
            true
        } else if moved.contains_key(&t) {
            moved_at.get(&t).is_none_or(|at| rec.seq < *at)
        } else {
            default && map.tenants.get(&t).is_none_or(|l| l == &s.location)
        };
        // a refusal of a tenant no shard holds is written on the first
        // shard (`docs/sharding.md`): denied at authn, nothing decided
        let refused_unrouted = b["decision"] == "DENY" && b["stage"] == "authn";
        if !ok && !refused_unrouted {
            out.push(format!(
                "receipt {} belongs to tenant `{t}`, which this shard does not hold",
                rec.seq
            ));
        }
    }
    out
}
