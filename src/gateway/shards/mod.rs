//! Shard routing (`docs/sharding.md`, `docs/decisions/shard-routing.md`):
//! a world whose `[store.shards]` maps tenants to stores runs one gateway
//! per store (a *shard*), and a router in front of them that sends each
//! decision to the shard of its mandate's owner. Each shard keeps its own
//! chain, head lock and group commit; a tenant's budgets, nonces,
//! executions, pending operations and registry changes all live on its
//! shard, so every check of its decisions reads every decision before it.
//!
//! **Invariant:** a tenant is decided on one shard only. Each shard
//! records the tenants it holds (state namespace [`NS`], written by `ipc
//! shards init`); a router refuses to start when its map sends a tenant to
//! a shard that does not hold it, and every decision on a shard checks,
//! in its own transaction, that the shard holds its tenant (a stale map,
//! a tenant moved away): a DENY at authn otherwise, never a decision.

use super::world::{ShardMap, World};
use super::{Ask, Decision, Gateway, GatewayError, ReceiptRef, Tenants};
use crate::bundle::Bundle;
use crate::store::{Store, StoreError, Tx};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub mod admin;
pub mod attribute;
mod follow;
pub mod moving;

/// The state namespace where a shard records its tenants.
pub const NS: &str = "shards";
/// The key marking the map's default shard (every tenant not named).
pub(crate) const DEFAULT_KEY: &str = "default";

pub(crate) fn tenant_key(tenant: &str) -> String {
    format!("tenant/{tenant}")
}

/// What a shard's gateway checks of each decision's tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Holding {
    /// Not sharded: the one store holds every tenant (`store = "..."`).
    #[default]
    Any,
    /// A shard: the tenant must be held here; `default`: this is the
    /// map's default shard, which holds every tenant it has not seen
    /// moved away.
    Shard { default: bool },
}

/// Where a tenant stands on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    Held,
    /// Moved to another shard (`ipc shards move`): never decided here.
    Moved {
        to: String,
    },
    /// Being moved to another shard (`ipc shards move` fenced it):
    /// never decided here, nor anywhere, until the move ends.
    Moving {
        to: String,
        fence: String,
    },
    /// Never placed here.
    Absent,
}

/// The tenant's standing on the shard of `tx`.
pub fn standing(tx: &mut dyn Tx, tenant: &str) -> Result<Standing, StoreError> {
    Ok(match tx.state_get(NS, &tenant_key(tenant))? {
        Some(v) if v["status"] == "held" => Standing::Held,
        Some(v) if v["status"] == "moved" => Standing::Moved {
            to: v["to"].as_str().unwrap_or("?").to_string(),
        },
        Some(v) if v["status"] == "moving" => Standing::Moving {
            to: v["to"].as_str().unwrap_or("?").to_string(),
            fence: v["fence"].as_str().unwrap_or("?").to_string(),
        },
        _ => Standing::Absent,
    })
}

pub(crate) fn is_default(tx: &mut dyn Tx) -> Result<bool, StoreError> {
    Ok(tx
        .state_get(NS, DEFAULT_KEY)?
        .is_some_and(|v| v == Value::Bool(true)))
}

impl Holding {
    /// Why the shard of `tx` may not decide for `tenant`, or `None` when
    /// it may: read in the decision's own transaction, so that a move
    /// committed before it is seen.
    pub(crate) fn refusal(
        &self,
        tx: &mut dyn Tx,
        tenant: &str,
    ) -> Result<Option<String>, StoreError> {
        let Holding::Shard { default } = self else {
            return Ok(None);
        };
        let t = crate::base::json::echo(tenant);
        Ok(match standing(tx, tenant)? {
            Standing::Held => None,
            Standing::Moved { to } => Some(format!(
                "tenant `{t}` has moved off this shard (to `{}`): this instance's shard map is stale",
                crate::base::json::echo(&to)
            )),
            Standing::Moving { to, .. } => Some(format!(
                "tenant `{t}` is being moved to another shard (`{}`): its decisions resume there when the move is done",
                crate::base::json::echo(&to)
            )),
            Standing::Absent if *default && is_default(tx)? => None,
            Standing::Absent => Some(format!(
                "this shard does not hold tenant `{t}`: the shard map is stale or wrong"
            )),
        })
    }
}

/// A shard map that cannot be served.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ShardError {
    /// A shard's store cannot be opened.
    #[error("shard `{store}`: {source}")]
    #[diagnostic(code(ipc::shards::open))]
    Open {
        store: String,
        #[source]
        source: StoreError,
    },
    /// The map sends a tenant to a shard that does not hold it: a stale
    /// map, a typo, or a new tenant not placed yet. Deciding there would
    /// give the tenant a second budget.
    #[error("the shard map sends tenant `{tenant}` to `{store}`, which does not hold it{why}")]
    #[diagnostic(
        code(ipc::shards::not_held),
        help(
            "place new tenants with `ipc shards init --world WORLD`; a tenant held elsewhere is moved with `ipc shards move`, never mapped by hand"
        )
    )]
    NotHeld {
        tenant: String,
        store: String,
        why: String,
    },
    /// The map's default shard was not made the default.
    #[error("the shard map's default `{store}` is not marked as the default shard")]
    #[diagnostic(
        code(ipc::shards::not_default),
        help("run `ipc shards init --world WORLD` once, with the map that names it")
    )]
    NotDefault { store: String },
    /// `ipc shards init` asked to place a tenant another shard holds.
    #[error("tenant `{tenant}` is already held by `{other}`: it cannot be placed on `{store}` too")]
    #[diagnostic(
        code(ipc::shards::held_elsewhere),
        help("move it with `ipc shards move {tenant} --to {store}`, or map it back to `{other}`")
    )]
    HeldElsewhere {
        tenant: String,
        store: String,
        other: String,
    },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Gateway(Box<GatewayError>),
}

impl From<GatewayError> for ShardError {
    fn from(e: GatewayError) -> Self {
        ShardError::Gateway(Box::new(e))
    }
}

/// One shard: where its store is, and the gateway deciding on it.
pub struct Shard {
    /// As the map names it (a URL carries no password).
    pub location: PathBuf,
    pub gw: Gateway,
}

impl Shard {
    pub fn name(&self) -> String {
        self.location.display().to_string()
    }
}

/// The shards of a world, and its map.
pub struct ShardSet {
    pub shards: Vec<Shard>,
    pub map: ShardMap,
    /// Tenants moved (`ipc shards move`) since this map was read, to the
    /// shard of the set that now holds them ([`follow`]).
    follow: std::sync::RwLock<std::collections::HashMap<String, usize>>,
}

/// Opens a shard's store (the caller's choice: waiting for PostgreSQL, or
/// not creating a missing file).
pub type Opener<'a> = &'a dyn Fn(&Path) -> Result<Arc<dyn Store>, StoreError>;

impl ShardSet {
    /// Every store of `map`, opened with `open`, each with its gateway.
    fn open(
        bundle: &Bundle,
        world: &World,
        map: &ShardMap,
        open: Opener<'_>,
    ) -> Result<ShardSet, ShardError> {
        let mut shards = vec![];
        for loc in map.locations() {
            let store = open(loc).map_err(|source| ShardError::Open {
                store: loc.display().to_string(),
                source,
            })?;
            let mut gw = Gateway::new(bundle, world.clone(), store)?;
            gw.holding = Holding::Shard {
                default: map.default.as_ref() == Some(loc),
            };
            shards.push(Shard {
                location: loc.clone(),
                gw,
            });
        }
        Ok(ShardSet {
            shards,
            map: map.clone(),
            follow: Default::default(),
        })
    }

    /// Refuses a map that sends a tenant to a shard not holding it, or
    /// names a default shard not marked so.
    fn check_placed(&self) -> Result<(), ShardError> {
        for s in &self.shards {
            let tenants = self.map.tenants_of(&s.location);
            let default = self.map.default.as_ref() == Some(&s.location);
            let mut out: Result<(), ShardError> = Ok(());
            s.gw.store
                .read_only(&mut |tx| {
                    out = Ok(());
                    for t in &tenants {
                        let why = match standing(tx, t)? {
                            Standing::Held => continue,
                            Standing::Moved { to } => format!(
                                " (it moved to `{to}`: the map must send it there, `{t} = \"{to}\"`)"
                            ),
                            Standing::Moving { to, .. } => format!(
                                " (it is being moved to `{to}`: run `ipc shards move {t} --to {to}` again to finish the move)"
                            ),
                            Standing::Absent => String::new(),
                        };
                        out = Err(ShardError::NotHeld {
                            tenant: t.to_string(),
                            store: s.name(),
                            why,
                        });
                        return Ok(Value::Null);
                    }
                    if default && !is_default(tx)? {
                        out = Err(ShardError::NotDefault { store: s.name() });
                    }
                    Ok(Value::Null)
                })
                .map_err(|source| ShardError::Open {
                    store: s.name(),
                    source,
                })?;
            out?;
        }
        Ok(())
    }

    /// The index of the shard `tenant` is decided on.
    pub fn route(&self, tenant: &str) -> Option<usize> {
        if let Some(j) = self.followed(tenant) {
            return Some(j);
        }
        let loc = self.map.route(tenant)?;
        self.shards.iter().position(|s| &s.location == loc)
    }

    /// The shard `tenant` is decided on, or why there is none.
    pub fn of_tenant(&self, tenant: &str) -> Result<&Gateway, StoreError> {
        self.route(tenant)
            .map(|i| &self.shards[i].gw)
            .ok_or_else(|| StoreError::Unrouted {
                what: format!(
                    "tenant `{}` (no shard in the map, and no default)",
                    crate::base::json::echo(tenant)
                ),
            })
    }

    /// Where a decision without a routable tenant is written: the first
    /// shard in the map's order (the one of the first tenant by name, or
    /// the default).
    fn refusals(&self) -> usize {
        0
    }

    /// The shard index of one input, or the refusal to write on the
    /// [`Self::refusals`] shard. An input without a readable owner (no
    /// mandate, a malformed one) goes to that shard as it is: its
    /// pipeline denies it before reading any state.
    fn route_input(&self, input: &super::Input) -> Result<usize, Option<String>> {
        let Some(owner) = owner_of(input) else {
            return Err(None);
        };
        self.route(owner).ok_or_else(|| {
            Some(format!(
                "no shard holds tenant `{}`: the world's shard map names none for it, and no default",
                crate::base::json::echo(owner)
            ))
        })
    }

    /// The index of the shard `input` is decided on: its tenant's, or the
    /// refusals' shard ([`Self::refusals`]) when no shard holds it.
    #[cfg(feature = "http")]
    pub(crate) fn shard_of(&self, input: &super::Input) -> usize {
        self.route_input(input).unwrap_or_else(|_| self.refusals())
    }

    /// [`Gateway::decide_all`] over the shards: each input decided on its
    /// tenant's shard, the shards' batches side by side (one transaction,
    /// one group commit per shard), the decisions pushed in input order.
    /// On an error, `out` holds the decisions of the longest prefix of
    /// inputs decided, as for one store.
    pub(crate) fn decide_all(
        &self,
        ask: Ask<'_>,
        out: &mut Vec<Decision>,
    ) -> Result<Option<Vec<ReceiptRef>>, GatewayError> {
        let len = ask.inputs.len();
        let (groups, results) = self.decide_groups(ask)?;
        merge(&groups, results, len, out)
    }

    /// The inputs decided as [`Self::decide_all`] decides them, each
    /// input's end reported on its own (the HTTP service's decider, which
    /// answers each caller): its decision, the error of its shard's batch,
    /// or `None` when its shard's batch came back short. A shard that fails
    /// (its database failing over) ends its own inputs only: what the other
    /// shards committed beside them is answered, not reported as an error.
    pub(crate) fn decide_each(&self, ask: Ask<'_>) -> Vec<Each> {
        let len = ask.inputs.len();
        let (groups, results) = match self.decide_groups(ask) {
            Ok(r) => r,
            Err(e) => {
                let e = Arc::new(e);
                return (0..len).map(|_| Some(Err(e.clone()))).collect();
            }
        };
        let mut slots: Vec<Each> = (0..len).map(|_| None).collect();
        for (g, (decided, r)) in groups.iter().zip(results) {
            let done = decided.len().min(g.len());
            for (i, d) in g.iter().zip(decided) {
                slots[*i] = Some(Ok(d));
            }
            if let Err(e) = r {
                let e = Arc::new(e);
                for i in &g[done..] {
                    slots[*i] = Some(Err(e.clone()));
                }
            }
        }
        slots
    }

    /// The inputs grouped by shard (those no shard holds on the refusals'
    /// shard), and each group's decisions and how its batch ended, in the
    /// shards' order.
    fn decide_groups(
        &self,
        ask: Ask<'_>,
    ) -> Result<(Vec<Vec<usize>>, Vec<ShardResult>), GatewayError> {
        let n = self.shards.len();
        let mut groups: Vec<Vec<usize>> = vec![vec![]; n];
        let mut unrouted: Vec<Option<Tenants>> = vec![None; ask.inputs.len()];
        for (i, (input, _)) in ask.inputs.iter().enumerate() {
            match self.route_input(input) {
                Ok(k) => groups[k].push(i),
                Err(why) => {
                    groups[self.refusals()].push(i);
                    unrouted[i] = why.map(Tenants::Unrouted);
                }
            }
        }
        let busy = groups.iter().filter(|g| !g.is_empty()).count();
        if !ask.outcomes.is_empty() && busy > 1 {
            return Err(StoreError::Unrouted {
                what: "recording outcomes beside decisions of several shards".into(),
            }
            .into());
        }
        let sub = |g: &Vec<usize>| Ask {
            inputs: g
                .iter()
                .map(|&i| {
                    (
                        ask.inputs[i].0,
                        unrouted[i].as_ref().unwrap_or(ask.inputs[i].1),
                    )
                })
                .collect(),
            dispatch: ask.dispatch,
            outcomes: ask.outcomes,
        };
        let mut results: Vec<ShardResult> = Vec::with_capacity(n);
        if busy > 1 && ask.dispatch.is_none() {
            // no dispatch, no outcomes (refused above): each shard's ask
            // is its inputs alone
            let lists: Vec<Vec<(&super::Input, &Tenants)>> =
                groups.iter().map(|g| sub(g).inputs).collect();
            std::thread::scope(|scope| {
                let handles: Vec<_> = lists
                    .into_iter()
                    .zip(&self.shards)
                    .map(|(inputs, s)| {
                        scope.spawn(move || {
                            let mut v = vec![];
                            if inputs.is_empty() {
                                return (v, Ok(Some(vec![])));
                            }
                            let r = s.gw.decide_all(Ask::of(inputs), &mut v);
                            (v, r)
                        })
                    })
                    .collect();
                for h in handles {
                    results.push(h.join().unwrap_or_else(|_| {
                        (
                            vec![],
                            Err(StoreError::Aborted("a shard's decider panicked".into()).into()),
                        )
                    }));
                }
            });
        } else {
            for (g, s) in groups.iter().zip(&self.shards) {
                let mut v = vec![];
                let r = if g.is_empty() {
                    Ok(Some(vec![]))
                } else {
                    s.gw.decide_all(sub(g), &mut v)
                };
                results.push((v, r));
            }
        }
        if ask.dispatch.is_none() && ask.outcomes.is_empty() {
            self.follow_moves(&ask, &groups, &mut results);
        }
        Ok((groups, results))
    }
}

/// The tenant an input is decided for: its mandate's owner, or for a
/// child mandate its root's (a child naming another owner widens its
/// parent: denied on the root's shard).
fn owner_of(input: &super::Input) -> Option<&str> {
    let token = input.mandate.as_ref();
    let root = token
        .and_then(|t| t.get("ancestors"))
        .and_then(|a| a.get(0))
        .or(token);
    root.and_then(|m| m.get("mandate"))
        .and_then(|m| m.get("owner"))
        .and_then(Value::as_str)
}

/// One shard's decisions, and how its batch ended.
pub(super) type ShardResult = (Vec<Decision>, Result<Option<Vec<ReceiptRef>>, GatewayError>);

/// One input's end in [`ShardSet::decide_each`]: its decision, the error
/// of the batch that did not decide it, or `None` (the batch came back
/// short: nothing decided).
pub type Each = Option<Result<Decision, Arc<GatewayError>>>;

/// The shards' decisions back in input order (see
/// [`ShardSet::decide_all`]).
fn merge(
    groups: &[Vec<usize>],
    results: Vec<ShardResult>,
    len: usize,
    out: &mut Vec<Decision>,
) -> Result<Option<Vec<ReceiptRef>>, GatewayError> {
    let mut slots: Vec<Option<Decision>> = (0..len).map(|_| None).collect();
    let mut first_err = None;
    let mut links = vec![];
    for (g, (decided, r)) in groups.iter().zip(results) {
        for (i, d) in g.iter().zip(decided) {
            slots[*i] = Some(d);
        }
        match r {
            Ok(Some(mut l)) => links.append(&mut l),
            Ok(None) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    for d in slots {
        match d {
            Some(d) => out.push(d),
            None => break,
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(Some(links)),
    }
}

impl Gateway {
    /// A gateway over the shards `world.shards` names: one gateway per
    /// store, opened with `open`, behind a router whose own store refuses
    /// everything ([`crate::store::unrouted`]), so that work not routed
    /// to a tenant's shard fails rather than lands anywhere. Refuses a
    /// map that sends a tenant to a shard not holding it.
    pub fn sharded(bundle: &Bundle, world: World, open: Opener<'_>) -> Result<Gateway, ShardError> {
        let Some(map) = world.shards.clone() else {
            return Err(GatewayError::from(StoreError::Unrouted {
                what: "a world without `[store.shards]`".into(),
            })
            .into());
        };
        let set = ShardSet::open(bundle, &world, &map, open)?;
        set.check_placed()?;
        Self::router(set)
    }

    /// The router over opened shards (`ipc shards` opens them itself).
    fn router(set: ShardSet) -> Result<Gateway, ShardError> {
        let first = set.shards.first().ok_or_else(|| {
            ShardError::from(GatewayError::from(StoreError::Unrouted {
                what: "a shard map without shards".into(),
            }))
        })?;
        let mut router = first.gw.fork(
            first.gw.world.clone(),
            Arc::new(crate::store::unrouted::Unrouted),
        );
        router.external = first.gw.external;
        router.shards = Some(Arc::new(set));
        Ok(router)
    }

    /// This gateway deciding on one shard: each decision checks that the
    /// shard holds its tenant (the MCP proxy, whose session is one
    /// tenant's, opens only that tenant's shard).
    pub fn with_holding(mut self, holding: Holding) -> Gateway {
        self.holding = holding;
        self
    }

    /// The shards behind this gateway, when it routes.
    pub fn shard_set(&self) -> Option<&ShardSet> {
        self.shards.as_deref()
    }

    /// The gateway deciding for `tenant`: its shard's, or this one when
    /// not sharded.
    pub fn for_tenant(&self, tenant: &str) -> Result<&Gateway, StoreError> {
        match &self.shards {
            Some(s) => s.of_tenant(tenant),
            None => Ok(self),
        }
    }

    /// The shard holding the pending operation `hash` (the first shard
    /// when none does: it answers that it knows no such operation), or
    /// `None` when this gateway does not route.
    pub(crate) fn op_shard(&self, hash: &str) -> Result<Option<&Gateway>, StoreError> {
        let Some(set) = &self.shards else {
            return Ok(None);
        };
        for s in &set.shards {
            let mut found = false;
            s.gw.store.read_only(&mut |tx| {
                found = super::pending::get(tx, hash)?.is_some();
                Ok(Value::Null)
            })?;
            if found {
                return Ok(Some(&s.gw));
            }
        }
        Ok(set.shards.first().map(|s| &s.gw))
    }

    /// The shard recording the child mandate `id`, issued or held (the
    /// first shard when none does: it answers that it knows none), or
    /// `None` when this gateway does not route.
    pub(crate) fn id_shard(&self, id: &str) -> Result<Option<&Gateway>, super::ChildError> {
        let Some(set) = &self.shards else {
            return Ok(None);
        };
        for s in &set.shards {
            if s.gw.mandate_row(id)?.is_some() {
                return Ok(Some(&s.gw));
            }
        }
        Ok(set.shards.first().map(|s| &s.gw))
    }

    /// Every store this gateway decides on, with its name: the one store,
    /// or each shard's.
    pub fn stores(&self) -> Vec<(String, &Gateway)> {
        match &self.shards {
            Some(s) => s.shards.iter().map(|sh| (sh.name(), &sh.gw)).collect(),
            None => vec![(String::new(), self)],
        }
    }
}
