//! `ipc shards move`: a tenant moved from its shard to another, its
//! decisions fenced meanwhile (`docs/decisions/tenant-move.md`).
//!
//! 1. **Fence** (old shard, one transaction): the tenant becomes
//!    `moving` under a fresh fence id, with a receipt; every decision for
//!    it there is denied at authn from then on.
//! 2. **Read**: the old shard's rows and receipts, the tenant's rows
//!    picked out ([`super::attribute`], fail closed).
//! 3. **Commit** (new shard, one transaction; the commit point): refused
//!    when the new shard holds the tenant or voided the fence; the rows
//!    written, the tenant held under the fence, and a receipt naming the
//!    old shard's fence receipt (seq and hash) and what it brought.
//! 4. **Finish** (old shard): the tenant becomes `moved` to the new shard,
//!    with a receipt naming the new shard's.
//!
//! An error before step 3 restores the tenant on the old shard. After a
//! crash the next `ipc shards move` of the tenant asks the new shard,
//! which arbitrates: held under the fence, the move committed and is
//! finished; else the fence is voided there (a late step 3 can never
//! commit) and the tenant restored on the old shard.

use super::admin::{Opened, index_add};
use super::attribute::{Put, TenantRows, Unclassified, tenant_rows};
use super::{NS, Standing, standing, tenant_key};
use crate::gateway::world::ShardMap;
use crate::store::{StoreError, Tx};
use serde::Serialize;
use serde_json::{Value, json};

/// A move that cannot be made, or did not end.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum MoveError {
    /// The map sends the tenant nowhere, or to a shard that does not hold
    /// it: only a tenant held where the map sends it is moved.
    #[error("tenant `{tenant}` is not held where the map sends it (`{store}`){why}")]
    #[diagnostic(
        code(ipc::shards::move_not_held),
        help("`ipc shards check --world WORLD` shows where each tenant is held")
    )]
    NotHeld {
        tenant: String,
        store: String,
        why: String,
    },
    /// The tenant would move to the shard it is on, or to one that already
    /// holds it.
    #[error("tenant `{tenant}` is already held by `{store}`")]
    #[diagnostic(
        code(ipc::shards::move_held),
        help("nothing to move; if the map sends it elsewhere, send it to `{store}`")
    )]
    AlreadyThere { tenant: String, store: String },
    /// A row of the old shard that no rule attributes to a tenant: moving
    /// would leave it behind, or take another tenant's.
    #[error("cannot tell whose row `{key}` of {table} on `{store}` is: the move is refused")]
    #[diagnostic(
        code(ipc::shards::unclassified),
        help(
            "the tenant stays on its shard, decidable; a kind of state this version does not know how to attribute cannot be moved yet"
        )
    )]
    Unclassified {
        store: String,
        table: String,
        key: String,
    },
    /// An earlier move of the tenant did not end, to a shard the map does
    /// not name: it is ended there first.
    #[error("tenant `{tenant}` is still being moved to `{to}` by an earlier move that did not end")]
    #[diagnostic(
        code(ipc::shards::move_unfinished),
        help("run `ipc shards move {tenant} --to {to}` to end it (finished or rolled back)")
    )]
    Unfinished { tenant: String, to: String },
    /// The fence changed under the move (another move of the same tenant
    /// ended it, or the new shard voided it): nothing more is written.
    #[error("the move of tenant `{tenant}` lost its fence ({why})")]
    #[diagnostic(
        code(ipc::shards::move_fence),
        help("run the move again: it ends the earlier one first")
    )]
    Fence { tenant: String, why: String },
    /// A shard failed during the move. The tenant is on exactly one shard:
    /// `stage` says which, or that it is fenced until the move is run again.
    #[error("the move of tenant `{tenant}` failed on `{store}` ({stage}): {source}")]
    #[diagnostic(
        code(ipc::shards::move_store),
        help(
            "run `ipc shards move` again with the same tenant: it asks the new shard whether the move committed, then finishes it or puts the tenant back"
        )
    )]
    Store {
        tenant: String,
        store: String,
        stage: String,
        #[source]
        source: Box<StoreError>,
    },
}

/// A step of the move, for a caller that pauses or fails there (tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The fence committed on the old shard.
    Fence,
    /// The tenant's rows read, before the new shard's commit.
    Copy,
    /// The new shard committed, before the old one is finished.
    Commit,
}

impl Step {
    pub fn name(self) -> &'static str {
        match self {
            Step::Fence => "fence",
            Step::Copy => "copy",
            Step::Commit => "commit",
        }
    }
}

/// What an earlier move that had not ended became.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Recovered {
    /// It had committed on the new shard: finished.
    Finished,
    /// It had not: voided on the new shard, the tenant back on the old.
    RolledBack,
}

/// A move done.
#[derive(Clone, Debug, Serialize)]
pub struct Moved {
    pub tenant: String,
    pub from: String,
    pub to: String,
    pub fence: String,
    /// Rows copied (budgets, nonces, executions, revocations, state).
    pub rows: usize,
    /// The old shard's fence receipt, named by the first on the new one.
    pub from_receipt: (u64, String),
    /// The new shard's moved-in receipt.
    pub to_receipt: (u64, String),
    /// An earlier move of the tenant found unfinished, and what it became.
    pub recovered: Option<Recovered>,
}

/// The fence of one move: who, from where to where.
struct Fence<'a> {
    tenant: &'a str,
    from: &'a Opened,
    to: &'a Opened,
    id: String,
    now: i64,
}

impl Fence<'_> {
    fn err(&self, s: &Opened, stage: &str) -> impl Fn(StoreError) -> MoveError {
        let (tenant, store, stage) = (self.tenant.to_string(), s.name(), stage.to_string());
        move |source| MoveError::Store {
            tenant: tenant.clone(),
            store: store.clone(),
            stage: stage.clone(),
            source: Box::new(source),
        }
    }
}

/// Moves `tenant` from the shard the map sends it to onto `to` (opened:
/// one of `shards`, or a store the map does not name yet). `step` is
/// called after each step; an `Err` from it is a failure there (tests).
pub fn move_tenant(
    map: &ShardMap,
    shards: &[Opened],
    tenant: &str,
    to: &Opened,
    now: i64,
    step: &mut dyn FnMut(Step) -> Result<(), String>,
) -> Result<Moved, MoveError> {
    let from = from_shard(map, shards, tenant)?;
    if from.location == to.location {
        return Err(MoveError::AlreadyThere {
            tenant: tenant.into(),
            store: to.name(),
        });
    }
    let mut recovered = None;
    // the default shard holds the tenants the map does not name
    let on_default = !map.tenants.contains_key(tenant);
    let why = match read_standing(from, tenant)? {
        Standing::Moved { to } => Some(format!(
            ": it moved to `{to}` (send it there in the map: `{tenant} = \"{to}\"`)"
        )),
        Standing::Absent if !on_default => {
            Some(": it was never placed there (`ipc shards init`)".into())
        }
        _ => None,
    };
    if let Some(why) = why {
        return Err(MoveError::NotHeld {
            tenant: tenant.into(),
            store: from.name(),
            why,
        });
    }
    if let Standing::Moving { to: target, fence } = read_standing(from, tenant)? {
        if target != to.name() {
            return Err(MoveError::Unfinished {
                tenant: tenant.into(),
                to: target,
            });
        }
        let f = Fence {
            tenant,
            from,
            to,
            id: fence,
            now,
        };
        let r = recover(&f)?;
        if let Some(done) = r.1 {
            return Ok(done);
        }
        recovered = Some(r.0);
    }
    let mut moved = move_held(from, to, tenant, now, on_default, step)?;
    moved.recovered = recovered;
    Ok(moved)
}

/// The shard the map sends `tenant` to.
fn from_shard<'s>(
    map: &ShardMap,
    shards: &'s [Opened],
    tenant: &str,
) -> Result<&'s Opened, MoveError> {
    let loc = map.route(tenant);
    shards
        .iter()
        .find(|s| Some(&s.location) == loc)
        .ok_or_else(|| MoveError::NotHeld {
            tenant: tenant.into(),
            store: "no shard".into(),
            why: ": the map names no shard for it, and no default".into(),
        })
}

fn read_standing(s: &Opened, tenant: &str) -> Result<Standing, MoveError> {
    let mut out = Standing::Absent;
    s.store
        .read_only(&mut |tx| {
            out = standing(tx, tenant)?;
            Ok(Value::Null)
        })
        .map_err(|source| MoveError::Store {
            tenant: tenant.into(),
            store: s.name(),
            stage: "reading where the tenant stands".into(),
            source: Box::new(source),
        })?;
    Ok(out)
}

/// Steps 1–4 for a tenant held on `from`.
fn move_held(
    from: &Opened,
    to: &Opened,
    tenant: &str,
    now: i64,
    on_default: bool,
    step: &mut dyn FnMut(Step) -> Result<(), String>,
) -> Result<Moved, MoveError> {
    if read_standing(to, tenant)? == Standing::Held {
        return Err(MoveError::AlreadyThere {
            tenant: tenant.into(),
            store: to.name(),
        });
    }
    let id = crate::gateway::approval::random_id().map_err(|e| MoveError::Store {
        tenant: tenant.into(),
        store: from.name(),
        stage: "choosing a fence".into(),
        source: Box::new(StoreError::Aborted(e.to_string())),
    })?;
    let f = Fence {
        tenant,
        from,
        to,
        id,
        now,
    };
    let fenced = fence(&f, on_default)?;
    // until the new shard is asked to commit, a failure puts the tenant back
    let rows = step(Step::Fence)
        .map_err(|e| injected(&f, "after the fence", e))
        .and_then(|()| read_rows(&f))
        .and_then(|rows| {
            step(Step::Copy)
                .map_err(|e| injected(&f, "after the read", e))
                .map(|()| rows)
        });
    let rows = match rows {
        Ok(r) => r,
        Err(e) => {
            restore(&f)?;
            return Err(e);
        }
    };
    let moved_in = match commit(&f, &rows, &fenced) {
        Ok(link) => link,
        Err(e) => {
            // the commit's outcome may be unknown: the new shard decides
            recover(&f)?;
            return Err(e);
        }
    };
    step(Step::Commit).map_err(|e| injected(&f, "after the commit", e))?;
    finish(&f, &moved_in)?;
    Ok(Moved {
        tenant: tenant.into(),
        from: from.name(),
        to: to.name(),
        fence: f.id.clone(),
        rows: rows.len(),
        from_receipt: fenced,
        to_receipt: moved_in,
        recovered: None,
    })
}

fn injected(f: &Fence<'_>, stage: &str, e: String) -> MoveError {
    MoveError::Store {
        tenant: f.tenant.into(),
        store: f.from.name(),
        stage: stage.into(),
        source: Box::new(StoreError::Aborted(e)),
    }
}

/// A shard receipt's body: `change` and `fields`, with the kind, tenant
/// and time.
fn receipt(f: &Fence<'_>, change: &str, fields: Value) -> Value {
    let mut body = json!({
        "change": change,
        "fence": f.id,
        "kind": "shard",
        "tenant": f.tenant,
        "time": crate::base::json::format_time(f.now),
    });
    if let (Some(b), Value::Object(more)) = (body.as_object_mut(), fields) {
        b.extend(more);
    }
    body
}

fn link_of(v: &Value) -> (u64, String) {
    (
        v["seq"].as_u64().unwrap_or(0),
        v["hash"].as_str().unwrap_or_default().to_string(),
    )
}

/// Step 1: the tenant fenced on the old shard; returns the fence
/// receipt's seq and hash.
fn fence(f: &Fence<'_>, on_default: bool) -> Result<(u64, String), MoveError> {
    let v = f
        .from
        .store
        .transaction(&mut |tx| {
            let held = match standing(tx, f.tenant)? {
                Standing::Held => true,
                Standing::Absent => on_default && super::is_default(tx)?,
                _ => false,
            };
            if !held {
                return Err(StoreError::Aborted(
                    "the tenant is no longer held here".into(),
                ));
            }
            tx.state_put(
                NS,
                &tenant_key(f.tenant),
                &json!({"status": "moving", "to": f.to.name(), "fence": f.id}),
            )?;
            // a default shard's tenant was in no index: `check` reads it
            index_add(tx, f.tenant)?;
            let r = tx.append_receipt(&receipt(f, "moving", json!({"to": f.to.name()})))?;
            Ok(json!({"seq": r.seq, "hash": r.hash}))
        })
        .map_err(f.err(f.from, "fencing the tenant"))?;
    Ok(link_of(&v))
}

/// Step 2: the old shard's rows of the tenant, read after the fence.
fn read_rows(f: &Fence<'_>) -> Result<TenantRows, MoveError> {
    let rows = f
        .from
        .store
        .rows()
        .map_err(f.err(f.from, "reading the rows"))?;
    let entry = rows.state.get(&(NS.to_string(), tenant_key(f.tenant)));
    if entry.and_then(|e| e["fence"].as_str()) != Some(f.id.as_str()) {
        return Err(MoveError::Fence {
            tenant: f.tenant.into(),
            why: "the old shard no longer holds it under this move's fence".into(),
        });
    }
    let records = f
        .from
        .store
        .receipts()
        .map_err(f.err(f.from, "reading the receipts"))?;
    tenant_rows(f.tenant, &rows, &records).map_err(|Unclassified { table, key }| {
        MoveError::Unclassified {
            store: f.from.name(),
            table,
            key,
        }
    })
}

/// The new shard's record of a fence: `"committed"` (the move landed
/// here) or `"void"` (it never will). Kept for good, whatever the tenant
/// does later (moves on from here), so that the arbiter's answer never
/// changes.
fn fence_key(fence: &str) -> String {
    format!("fence/{fence}")
}

/// Step 3, the commit point: on the new shard, the rows, the tenant held
/// under the fence, and the moved-in receipt.
fn commit(
    f: &Fence<'_>,
    rows: &TenantRows,
    fenced: &(u64, String),
) -> Result<(u64, String), MoveError> {
    let v =
        f.to.store
            .transaction(&mut |tx| {
                if tx.state_get(NS, &fence_key(&f.id))?.is_some() {
                    return Err(StoreError::Aborted("the fence was voided here".into()));
                }
                tx.state_put(NS, &fence_key(&f.id), &json!("committed"))?;
                if standing(tx, f.tenant)? == Standing::Held {
                    return Err(StoreError::Aborted(
                        "the tenant is already held here".into(),
                    ));
                }
                let brought = write_rows(tx, rows)?;
                tx.state_put(
                    NS,
                    &tenant_key(f.tenant),
                    &json!({"status": "held", "fence": f.id, "from": f.from.name()}),
                )?;
                index_add(tx, f.tenant)?;
                let body = receipt(
                    f,
                    "moved-in",
                    json!({"brought": brought, "from": f.from.name(), "from_seq": fenced.0,
                       "from_hash": fenced.1, "rows": rows.len()}),
                );
                let r = tx.append_receipt(&body)?;
                Ok(json!({"seq": r.seq, "hash": r.hash}))
            })
            .map_err(f.err(f.to, "copying to the new shard"))?;
    Ok(link_of(&v))
}

/// The tenant's rows written in `tx`; returns what its receipt lists
/// (what the new shard's audit accounts for): budgets added as `[amount,
/// calls]`, nonces and executions recorded. A budget already above the
/// old shard's is refused (values only grow).
fn write_rows(tx: &mut dyn Tx, rows: &TenantRows) -> Result<Value, StoreError> {
    let mut budgets = serde_json::Map::new();
    for (id, s) in &rows.budgets {
        let now = tx.spent(id)?;
        let (Some(amount), Some(calls)) = (
            s.amount.checked_sub(now.amount),
            s.calls.checked_sub(now.calls),
        ) else {
            return Err(StoreError::Aborted(format!(
                "the new shard's budget of `{id}` is above the old shard's"
            )));
        };
        if calls == 0 && amount != 0 {
            return Err(StoreError::Aborted(format!(
                "the budget of `{id}` spent without a call"
            )));
        }
        for n in 0..calls {
            tx.spend(id, if n == 0 { amount } else { 0 })?;
        }
        if calls > 0 {
            budgets.insert(id.clone(), json!([amount, calls]));
        }
    }
    let mut nonces = vec![];
    for n in &rows.nonces {
        if !tx.nonce_used(n)? {
            tx.use_nonce(n)?;
            nonces.push(n.clone());
        }
    }
    let mut executions = vec![];
    for (op, result) in &rows.executions {
        if tx.executed(op)?.is_none() {
            tx.record_execution(op, result)?;
            executions.push(op.clone());
        }
    }
    for id in &rows.revocations {
        if !tx.revoked(id)? {
            tx.revoke(id)?;
        }
    }
    for ((ns, key), put) in &rows.state {
        let v = match put {
            Put::Value(v) => v.clone(),
            Put::Merge(items) => {
                let mut now = match tx.state_get(ns, key)? {
                    Some(Value::Array(a)) => a,
                    _ => vec![],
                };
                for i in items {
                    if !now.contains(i) {
                        now.push(i.clone());
                    }
                }
                Value::Array(now)
            }
        };
        tx.state_put(ns, key, &v)?;
    }
    Ok(json!({"budgets": budgets, "executions": executions, "nonces": nonces}))
}

/// Step 4: the old shard marks the tenant moved, and takes its pending
/// operations and child mandates off its own listings (the router looks
/// them up on every shard: they are answered by the new one only).
fn finish(f: &Fence<'_>, moved_in: &(u64, String)) -> Result<(), MoveError> {
    let rows = read_rows(f)?;
    f.from
        .store
        .transaction(&mut |tx| {
            match standing(tx, f.tenant)? {
                Standing::Moving { fence, .. } if fence == f.id => {}
                _ => return Err(StoreError::Aborted("the fence is gone".into())),
            }
            retire(tx, f.tenant, &rows)?;
            tx.state_put(
                NS,
                &tenant_key(f.tenant),
                &json!({"status": "moved", "to": f.to.name(), "fence": f.id}),
            )?;
            tx.append_receipt(&receipt(
                f,
                "moved",
                json!({"to": f.to.name(), "to_seq": moved_in.0, "to_hash": moved_in.1}),
            ))?;
            Ok(Value::Null)
        })
        .map_err(f.err(
            f.from,
            "marking the tenant moved (the move committed: run it again to finish)",
        ))?;
    Ok(())
}

/// The namespaces whose entries the router looks up on every shard.
const LISTED: [&str; 3] = ["pending", "mandates", "mandates.pending"];

/// The tenant's listed entries on the old shard emptied (null, as a
/// settled entry), its index emptied, its items taken off shared ones.
fn retire(tx: &mut dyn Tx, tenant: &str, rows: &TenantRows) -> Result<(), StoreError> {
    let own_index = format!("#index/{tenant}");
    for ((ns, key), put) in &rows.state {
        if !LISTED.contains(&ns.as_str()) {
            continue;
        }
        let v = match put {
            Put::Value(_) if *key == own_index => Value::Array(vec![]),
            Put::Value(_) => Value::Null,
            Put::Merge(items) => match tx.state_get(ns, key)? {
                Some(Value::Array(mut a)) => {
                    a.retain(|i| !items.contains(i));
                    Value::Array(a)
                }
                _ => continue,
            },
        };
        tx.state_put(ns, key, &v)?;
    }
    Ok(())
}

/// The tenant held on the old shard again, its fence lifted (the new
/// shard never committed it, or voided it).
fn restore(f: &Fence<'_>) -> Result<(), MoveError> {
    f.from
        .store
        .transaction(&mut |tx| {
            match standing(tx, f.tenant)? {
                Standing::Moving { fence, .. } if fence == f.id => {}
                _ => return Err(StoreError::Aborted("the fence is gone".into())),
            }
            tx.state_put(NS, &tenant_key(f.tenant), &json!({"status": "held"}))?;
            tx.append_receipt(&receipt(f, "held", json!({"reason": "move rolled back"})))?;
            Ok(Value::Null)
        })
        .map_err(f.err(
            f.from,
            "putting the tenant back (it stays fenced: run the move again)",
        ))?;
    Ok(())
}

/// An unfinished move ended, as the new shard says: committed there
/// (finished now; the move is returned), or voided there and rolled back.
fn recover(f: &Fence<'_>) -> Result<(Recovered, Option<Moved>), MoveError> {
    let v =
        f.to.store
            .transaction(&mut |tx| {
                match tx.state_get(NS, &fence_key(&f.id))? {
                    Some(v) if v == "committed" => return Ok(Value::Bool(true)),
                    Some(_) => {}
                    None => {
                        tx.state_put(NS, &fence_key(&f.id), &json!("void"))?;
                        tx.append_receipt(&receipt(f, "void", json!({"from": f.from.name()})))?;
                    }
                }
                Ok(Value::Bool(false))
            })
            .map_err(f.err(f.to, "asking the new shard whether the move committed"))?;
    if v != Value::Bool(true) {
        restore(f)?;
        return Ok((Recovered::RolledBack, None));
    }
    let (moved_in, fenced, rows) = moved_in_receipt(f)?;
    finish(f, &moved_in)?;
    let done = Moved {
        tenant: f.tenant.into(),
        from: f.from.name(),
        to: f.to.name(),
        fence: f.id.clone(),
        rows,
        from_receipt: fenced,
        to_receipt: moved_in,
        recovered: Some(Recovered::Finished),
    };
    Ok((Recovered::Finished, Some(done)))
}

/// The new shard's moved-in receipt of this fence: its link, the old
/// shard's fence receipt it names, and the rows it brought.
type MovedIn = ((u64, String), (u64, String), usize);

fn moved_in_receipt(f: &Fence<'_>) -> Result<MovedIn, MoveError> {
    let records =
        f.to.store
            .receipts()
            .map_err(f.err(f.to, "reading the new shard's receipts"))?;
    let r = records
        .iter()
        .rev()
        .find(|r| r.body["change"] == "moved-in" && r.body["fence"] == f.id.as_str())
        .ok_or_else(|| MoveError::Fence {
            tenant: f.tenant.into(),
            why: "the new shard holds the tenant under this fence without its receipt".into(),
        })?;
    let b = &r.body;
    Ok((
        (r.seq, r.hash.clone()),
        (
            b["from_seq"].as_u64().unwrap_or(0),
            b["from_hash"].as_str().unwrap_or_default().to_string(),
        ),
        b["rows"].as_u64().unwrap_or(0) as usize,
    ))
}
