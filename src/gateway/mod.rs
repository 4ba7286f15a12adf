//! The gateway: decides on one proposal at a time, in nine stages (authn,
//! contract, provenance, delegation, budget, policy, approval, execution,
//! receipt; one module each under `stages/`). Any failure is a DENY with
//! the stage, a reason the agent can read and, where the user can fix it,
//! a hint. Every outcome is a receipt.
//!
//! A decision runs inside one store transaction: the reads (budget, used
//! nonces, registry overrides) and the writes (execution, budget, nonces,
//! receipt) commit together, so concurrent gateways never both spend the
//! last euro, and a crash leaves all or nothing.

pub mod answer;
pub mod approval;
pub mod approving;
pub mod chain;
pub mod envelope;
pub mod executors;
pub mod facts;
mod listing;
pub mod mandate;
pub mod narrowing;
pub mod normalize;
pub mod notify;
pub mod outcome;
pub mod pending;
pub mod registry;
pub mod render;
pub mod replay;
pub mod secret;
pub mod selection;
pub mod shadow;
pub mod shards;
mod stages;
pub mod tenants;
/// A test world — the shipped packs built into a bundle, fresh issuer and
/// approver keys, the packs' registries, a fixed clock — and the helpers
/// the tests share, for unit tests, integration tests and examples. Only in
/// test builds and with the `testkit` feature (which the crate's
/// dev-dependency on itself enables): it panics, as test code does.
#[cfg(any(test, feature = "testkit"))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken fixture panics
pub mod testkit;
pub mod trusted;
pub mod widening;
pub mod world;

use crate::bundle::Bundle;
use crate::bundle::format::{TableAction, TablePack};
use crate::store::{Store, StoreError, Tx};
use cedar_policy::{EntityUid, PolicySet};

use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use world::World;

pub use chain::{ChildError, ChildRequest, Draft, Widening};
pub use mandate::{Budget, Mandate, MandateToken, ParentRef};
pub use stages::{Consumed, receipt_body};
pub use tenants::Tenants;

/// What a caller hands the gateway for one decision: the agent's proposal
/// (untrusted, exactly `{"action", "args"}`), the mandate token and any
/// approvals (from the trusted side).
#[derive(Clone, Debug, Default)]
pub struct Input {
    pub proposal: Value,
    pub mandate: Option<Value>,
    pub approvals: Vec<Value>,
    /// Set when the line could not even be read as a proposal: the
    /// decision is a DENY (contract) with this reason, and still a receipt.
    pub malformed: Option<String>,
}

/// How a caller that executes externally ([`Gateway::execute_externally`])
/// makes its call from an ALLOW's values (see
/// [`Ask::dispatching`]): given the resolved values (secrets as
/// commitments) and the secrets' clear values, what the receipt records of
/// the call, or why it cannot be made.
pub type Dispatch<'a> =
    &'a dyn Fn(&Map<String, Value>, &secret::SecretValues) -> Result<Value, String>;

/// What [`Gateway::decide_all`] is asked: the inputs, each with the
/// tenants its caller may act for, and the two choices a caller may make
/// (who executes, what to record first). A new choice is a field here,
/// not another entry point.
#[derive(Clone)]
pub struct Ask<'a> {
    pub inputs: Vec<(&'a Input, &'a Tenants)>,
    /// The caller executes externally and records its call in the
    /// decision (the MCP proxy), with the effect it declares for it;
    /// `None`: the gateway's own executors run.
    pub dispatch: Option<Dispatching<'a>>,
    /// Outcomes of calls answered earlier, recorded first in the same
    /// transaction.
    pub outcomes: &'a [(String, outcome::ExternalOutcome)],
}

impl<'a> Ask<'a> {
    /// One input, for any tenant.
    pub fn one(input: &'a Input) -> Self {
        Self::batch(std::slice::from_ref(input))
    }

    /// Several inputs, for any tenant (`ipc run`, `ipc serve --stdio`).
    pub fn batch(inputs: &'a [Input]) -> Self {
        Self::of(inputs.iter().map(|i| (i, &Tenants::All)).collect())
    }

    /// Inputs each for a caller who may act only for some tenants (`ipc
    /// serve --listen`): a mandate of another owner is a DENY (authn).
    pub fn of(inputs: Vec<(&'a Input, &'a Tenants)>) -> Self {
        Ask {
            inputs,
            dispatch: None,
            outcomes: &[],
        }
    }

    /// The caller executes, building its call with `call`; what the call
    /// does is `effect` (see [`Effect`]: a read is executed again at each
    /// call that is allowed, never answered from the store).
    pub fn dispatching(mut self, call: Dispatch<'a>, effect: Effect) -> Self {
        self.dispatch = Some(Dispatching { call, effect });
        self
    }

    pub fn after(mut self, outcomes: &'a [(String, outcome::ExternalOutcome)]) -> Self {
        self.outcomes = outcomes;
        self
    }
}

/// What executing an operation does to the world, as the trusted caller
/// that executes it declares it (`ipc mcp`'s config: `effect = "read"` on
/// a mapped tool; never the agent, never a server's annotation).
///
/// A **write** (the default) executes at most once: the operation is
/// recorded under its hash, and the same operation again is answered
/// from the store. A **read** is decided afresh by every stage at each
/// call and, when allowed, executed again: each execution is recorded
/// under its own key ([`read_execution`]), never under the operation
/// hash, so a read never answers a later call from the store. An
/// operation a write already executed is still answered from the store
/// when it comes as a read (a read never weakens a write's exactly-once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    #[default]
    Write,
    Read,
}

impl Effect {
    /// As the config and a receipt spell it.
    pub fn name(self) -> &'static str {
        match self {
            Effect::Write => "write",
            Effect::Read => "read",
        }
    }

    pub fn is_write(&self) -> bool {
        *self == Effect::Write
    }
}

pub use crate::store::{read_execution, read_operation};

/// A caller that executes externally: how it builds its call, and what
/// the call does.
#[derive(Clone, Copy)]
pub struct Dispatching<'a> {
    pub call: Dispatch<'a>,
    pub effect: Effect,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Outcome {
    Allow,
    Pending,
    Deny,
    /// Shadow mode ([`shadow`]): recorded, not enforced; the decision
    /// that would have been taken is [`Decision::would_be`].
    Shadow,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    Authn,
    Contract,
    Provenance,
    Delegation,
    Budget,
    Policy,
    Approval,
    Execution,
    Receipt,
}

impl Outcome {
    /// As a decision's JSON spells it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Allow => "ALLOW",
            Outcome::Pending => "PENDING",
            Outcome::Deny => "DENY",
            Outcome::Shadow => "SHADOW",
        }
    }
}

impl Stage {
    pub fn name(self) -> &'static str {
        match self {
            Stage::Authn => "authn",
            Stage::Contract => "contract",
            Stage::Provenance => "provenance",
            Stage::Delegation => "delegation",
            Stage::Budget => "budget",
            Stage::Policy => "policy",
            Stage::Approval => "approval",
            Stage::Execution => "execution",
            Stage::Receipt => "receipt",
        }
    }
}

/// A DENY: which stage, why, and what the user can do about it.
#[derive(Clone, Debug, PartialEq)]
pub struct Deny {
    pub stage: Stage,
    pub reason: String,
    pub hint: Option<String>,
}

impl Deny {
    pub fn new(stage: Stage, reason: impl Into<String>) -> Self {
        Deny {
            stage,
            reason: reason.into(),
            hint: None,
        }
    }
    pub fn hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

/// The gateway's answer.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Decision {
    pub decision: Outcome,
    pub stage: Stage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// The values used (the trusted spelling, never the agent's), by param,
    /// in the gateway's form (amounts in minor units, times in seconds):
    /// what the operation hash, the receipt and the executors take. Not in
    /// the answer, which carries [`Decision::shown`] under this name.
    #[serde(skip)]
    pub resolved: Map<String, Value>,
    /// `resolved` as the caller's tool takes it (an amount `"1500.00"`,
    /// never `150000`; a date `"2026-12-01"`): the answer's `resolved`
    /// ([`answer::caller_values`]).
    #[serde(rename = "resolved", skip_serializing_if = "Map::is_empty")]
    pub shown: Map<String, Value>,
    /// Where each value came from (`mandate.payee`, `registry.vendors[...]`,
    /// `proposal` for a non-critical value).
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub origins: Map<String, Value>,
    /// The approval level the policy requires.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation_hash: Option<String>,
    /// For PENDING: who must approve.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approve_by: Option<String>,
    /// Who approved (ALLOW after an approval).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvers: Vec<String>,
    /// The policies that determined the decision.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// The executor's result (ALLOW).
    /// The mandate's selections this decision evaluated, by claim: the
    /// query's and the rows' hashes, the keys returned, the key taken
    /// ([`selection::Evaluated::to_receipt`]).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub selections: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// ALLOW of an operation already executed: nothing ran again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
    /// `read` for an operation its caller declared a read (see
    /// [`Effect`]); absent for a write.
    #[serde(skip_serializing_if = "Effect::is_write")]
    pub effect: Effect,
    /// An executed read: the key its execution and outcome are recorded
    /// under ([`read_execution`]), another at each call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub execution: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<ReceiptRef>,
    /// A SHADOW decision: the decision enforcement would have taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_be: Option<shadow::WouldBe>,
    /// The clear values of `secret` parameters, for the caller that
    /// executes: set only on an ALLOW that dispatched an operation of a
    /// gateway executing externally; never serialised.
    #[serde(skip)]
    pub secrets: secret::SecretValues,
}

impl Decision {
    /// A DENY (stage receipt) that no receipt records: the answer for an
    /// input whose decision the store could not write at all.
    pub fn unrecorded(reason: &str) -> Decision {
        stages::deny_decision(None, Deny::new(Stage::Receipt, reason))
    }

    /// The unrecorded DENY of an input whose batch failed with `e`: after
    /// a commit of unknown outcome it may have committed (a retry of a
    /// write that did is answered from the store), else nothing of it did.
    pub fn unrecorded_after(e: &GatewayError) -> Decision {
        if matches!(e, GatewayError::Store(StoreError::CommitUnknown(_))) {
            Decision::unrecorded(
                "the store lost the connection during this line's commit: it may have committed; send it again (a write that committed is answered from the store)",
            )
        } else {
            Decision::unrecorded(
                "the store failed: this line was not decided and nothing of it was committed",
            )
        }
    }
}

#[derive(Clone, Debug, Serialize, serde::Deserialize, PartialEq)]
pub struct ReceiptRef {
    pub seq: u64,
    pub hash: String,
}

/// One action, ready to evaluate: its table entry and its own policies.
#[derive(Clone)]
pub(crate) struct ActionRt {
    pub table: TableAction,
    pub pack: TablePack,
    pub policies: PolicySet,
    pub cedar_action: EntityUid,
    /// Parsed once: Cedar's parser is costly on the decision path.
    pub principal_type: cedar_policy::EntityTypeName,
    pub resource_type: cedar_policy::EntityTypeName,
}

/// The system clock reads before 1970 (or past what seconds can hold):
/// nothing is decided, issued or approved at a time that is not known.
#[derive(Debug, Clone, thiserror::Error, miette::Diagnostic)]
#[error("the system clock cannot be read: {reason}")]
#[diagnostic(
    code(ipc::clock),
    help("set the machine's clock (NTP); nothing is decided without the time")
)]
pub struct ClockError {
    pub reason: String,
}

impl From<ClockError> for StoreError {
    fn from(e: ClockError) -> Self {
        StoreError::Aborted(e.to_string())
    }
}

/// Seconds since the epoch by the system clock.
pub fn unix_now() -> Result<i64, ClockError> {
    seconds_since_epoch(std::time::SystemTime::now())
}

/// A store error after which nothing of a batch is decided again nor
/// answered: the store cannot be reached, or a commit's outcome is unknown
/// (see [`Gateway::decide_all`]).
fn undecided(e: &StoreError) -> bool {
    matches!(e, StoreError::Open { .. } | StoreError::CommitUnknown(_))
}

fn seconds_since_epoch(t: std::time::SystemTime) -> Result<i64, ClockError> {
    let d = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| ClockError {
            reason: "it reads before 1970".into(),
        })?;
    i64::try_from(d.as_secs()).map_err(|_| ClockError {
        reason: "it reads past the year 292 billion".into(),
    })
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum GatewayError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Clock(#[from] ClockError),
    /// An action of the bundle cannot be prepared at start-up (its policies do
    /// not load for Cedar, a `pattern` does not compile).
    #[error("cannot prepare action `{action}`: {reason}")]
    #[diagnostic(code(ipc::gateway::prepare))]
    Prepare { action: String, reason: String },
    /// The bundle has no such action (a test or a tool names one it lacks).
    #[error("the bundle has no action `{action}`")]
    #[diagnostic(code(ipc::gateway::unknown_action))]
    UnknownAction { action: String },
    /// `[pg_registries]` reads registries from database tables, which only a
    /// PostgreSQL store has.
    #[error(
        "the world reads registries from database tables ({tables}), but the store is not postgresql"
    )]
    #[diagnostic(
        code(ipc::gateway::registry_tables),
        help(
            "give a `postgres://` store (`--store` or `store` in the world), or registry files under `[registries]`"
        )
    )]
    RegistryTables { tables: String },
    /// The world's `[enforce]` puts in shadow mode a pack whose author
    /// forbade it (`shadow never` in the pack, carried in the signed
    /// bundle): a tenant in shadow runs every pack in shadow.
    #[error("pack {packs} may never run in shadow mode, and the world's `[enforce]` puts it there")]
    #[diagnostic(
        code(ipc::gateway::shadow_forbidden),
        help(
            "enforce the pack: remove it from `[enforce.packs]`, or put in shadow only other packs (by name, under `[enforce.packs]`) rather than a whole tenant"
        )
    )]
    ShadowForbidden { packs: String },
}

/// The operation hash: `sha256:` and the hex SHA-256 of the canonical
/// encoding of the mandate id, the bundle hash, the action and the resolved
/// values. What an approval signs.
pub fn operation_hash(
    mandate_id: &str,
    bundle_hash: &str,
    action: &str,
    resolved: &Map<String, Value>,
) -> Result<String, crate::canonical::CanonicalError> {
    let mut w = crate::canonical::ObjectWriter::new();
    w.str("action", action)
        .str("bundle", bundle_hash)
        .str("mandate", mandate_id)
        .map("resolved", resolved)?;
    Ok(w.finish().hash())
}

/// Refuses a world that runs in shadow a pack marked `shadow never`.
fn shadow_allowed(bundle: &Bundle, world: &World) -> Result<(), GatewayError> {
    let names: Vec<String> = bundle.packs.iter().map(|p| p.name.clone()).collect();
    let forbidden: Vec<String> = world
        .shadow
        .packs_in_shadow(&names)
        .into_iter()
        .filter(|n| bundle.packs.iter().any(|p| &p.name == *n && p.shadow_never))
        .map(|n| format!("`{n}`"))
        .collect();
    if forbidden.is_empty() {
        Ok(())
    } else {
        Err(GatewayError::ShadowForbidden {
            packs: forbidden.join(", "),
        })
    }
}

fn type_name(t: &str) -> Result<cedar_policy::EntityTypeName, String> {
    t.parse()
        .map_err(|e: cedar_policy::ParseErrors| format!("entity type `{t}`: {e}"))
}

pub struct Gateway {
    pub(crate) bundle_hash: String,
    pub(crate) actions: HashMap<String, ActionRt>,
    pub(crate) world: World,
    pub(crate) store: Arc<dyn Store>,
    /// Token signature to the whole token and its verified mandate:
    /// verification is the costliest step, and a token is used many times.
    /// A hit counts only when the presented token equals the cached one.
    pub(crate) verified: Mutex<HashMap<String, (Value, chain::Verified)>>,
    /// Compiled `pattern` validators, anchored.
    pub(crate) regexes: HashMap<String, regex::Regex>,
    /// Every action executes elsewhere (see [`Gateway::execute_externally`]).
    pub(crate) external: bool,
    /// The names of the parameters any action declares `secret`, sorted:
    /// what a receipt never keeps in clear, wherever it appears in a line.
    pub(crate) secret_params: Vec<String>,
    /// What each decision checks of its tenant's placement (a shard's
    /// gateway: [`shards::Holding`]).
    pub(crate) holding: shards::Holding,
    /// The shards this gateway routes to (a router: its own `store`
    /// refuses everything), see [`shards`].
    pub(crate) shards: Option<Arc<shards::ShardSet>>,
}

impl Gateway {
    pub fn new(bundle: &Bundle, world: World, store: Arc<dyn Store>) -> Result<Self, GatewayError> {
        shadow_allowed(bundle, &world)?;
        if let Some(tables) = world.registry_tables_listed()
            && !store.registry_tables()
        {
            return Err(GatewayError::RegistryTables { tables });
        }
        let cedar = bundle.cedar().map_err(|e| GatewayError::Prepare {
            action: "*".into(),
            reason: e.to_string(),
        })?;
        let mut actions = HashMap::new();
        let mut regexes = HashMap::new();
        for ta in &bundle.table.actions {
            let prep = |reason: String| GatewayError::Prepare {
                action: ta.action.name.clone(),
                reason,
            };
            let set = cedar
                .by_action
                .get(&ta.action.name)
                .cloned()
                .ok_or_else(|| prep("no policies in the bundle".into()))?;
            for p in ta.action.params.iter().flat_map(crate::ir::Param::walk) {
                for v in &p.validators {
                    if let crate::ir::Validator::Pattern { regex } = v {
                        let re = regex::Regex::new(&format!("^(?:{regex})$"))
                            .map_err(|e| prep(e.to_string()))?;
                        regexes.insert(regex.clone(), re);
                    }
                }
            }
            let cedar_action: EntityUid = ta
                .cedar_action
                .parse()
                .map_err(|e: cedar_policy::ParseErrors| prep(e.to_string()))?;
            let pack = bundle
                .table
                .pack(&ta.pack)
                .ok_or_else(|| prep(format!("pack `{}` missing from the table", ta.pack)))?
                .clone();
            actions.insert(
                ta.action.name.clone(),
                ActionRt {
                    table: ta.clone(),
                    principal_type: type_name(&pack.principal_type).map_err(&prep)?,
                    resource_type: type_name(&pack.resource_type).map_err(&prep)?,
                    pack,
                    policies: set,
                    cedar_action,
                },
            );
        }
        let mut secret_params: Vec<String> = bundle
            .table
            .actions
            .iter()
            .flat_map(|a| a.action.params.iter())
            .filter(|p| p.secret)
            .map(|p| p.name.clone())
            .collect();
        secret_params.sort();
        secret_params.dedup();
        Ok(Gateway {
            bundle_hash: bundle.hash.clone(),
            actions,
            world,
            store,
            verified: Mutex::new(HashMap::new()),
            regexes,
            external: false,
            secret_params,
            holding: shards::Holding::Any,
            shards: None,
        })
    }

    /// The same bundle and policies (including any replaced with
    /// [`Gateway::with_policies`]) over another world and store: cheaper
    /// than [`Gateway::new`], which parses and validates the Cedar again.
    /// The scenario runner and the mutation tester build one gateway per
    /// test this way.
    pub fn fork(&self, world: World, store: Arc<dyn Store>) -> Gateway {
        Gateway {
            bundle_hash: self.bundle_hash.clone(),
            actions: self.actions.clone(),
            world,
            store,
            verified: Mutex::new(HashMap::new()),
            regexes: self.regexes.clone(),
            external: self.external,
            secret_params: self.secret_params.clone(),
            holding: shards::Holding::Any,
            shards: None,
        }
    }

    /// Every action's executor replaced by `external`: an ALLOW commits the
    /// decision (budget, nonces, receipt) and records the operation as
    /// dispatched with its resolved values, and the caller executes (the MCP
    /// proxy, whose downstream tool acts). The in-process executors of the
    /// packs' simulated systems never run for such a gateway, so nothing is
    /// done twice.
    pub fn execute_externally(mut self) -> Self {
        self.external = true;
        if let Some(set) = self.shards.as_mut().and_then(Arc::get_mut) {
            for s in &mut set.shards {
                s.gw.external = true;
            }
        }
        self
    }

    /// Replaces the Cedar policies evaluated for one action (mutation
    /// testing runs the scenarios against weakened policy sets). The bundle
    /// hash is unchanged: this is for testing, never for serving.
    pub fn with_policies(&mut self, action: &str, set: PolicySet) -> Result<(), GatewayError> {
        let a = self
            .actions
            .get_mut(action)
            .ok_or_else(|| GatewayError::UnknownAction {
                action: action.to_string(),
            })?;
        a.policies = set;
        Ok(())
    }

    /// The declared type of an action's parameter.
    pub fn param_type(&self, action: &str, param: &str) -> Option<crate::ir::Type> {
        self.actions
            .get(action)
            .and_then(|a| a.table.action.param(param))
            .map(|p| p.ty.clone())
    }

    /// The Cedar policies evaluated for one action.
    pub fn policies(&self, action: &str) -> Option<&PolicySet> {
        self.actions.get(action).map(|a| &a.policies)
    }

    /// A registry as the bundle declares it (for the trusted side's changes).
    /// The pack rule behind a policy id an action's decision names.
    pub fn rule(&self, action: &str, policy_id: &str) -> Option<&crate::ir::Rule> {
        self.actions
            .get(action)
            .and_then(|a| a.table.rule_of(policy_id))
    }

    pub fn registry(&self, pack: &str, name: &str) -> Option<&crate::ir::Registry> {
        self.actions
            .values()
            .find(|a| a.pack.name == pack)
            .and_then(|a| a.pack.registries.iter().find(|r| r.name == name))
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn bundle_hash(&self) -> &str {
        &self.bundle_hash
    }

    /// The time decisions are taken at: the world's fixed clock, or now;
    /// an error when the system clock cannot be read (never a made-up
    /// time: a clock at 0 would let nothing expire).
    pub fn now(&self) -> Result<i64, ClockError> {
        match self.world.clock {
            Some(t) => Ok(t),
            None => unix_now(),
        }
    }

    /// Decides on one input, in its own transaction: [`Self::decide_all`]
    /// for one input of any tenant, nothing dispatched.
    pub fn decide(&self, input: &Input) -> Result<Decision, GatewayError> {
        let mut out = Vec::with_capacity(1);
        self.decide_all(Ask::one(input), &mut out)?;
        Ok(out
            .pop()
            .unwrap_or_else(|| Decision::unrecorded("no decision")))
    }

    /// The one way to ask for decisions: `ask`'s inputs decided in order,
    /// in one transaction (group commit), each pushed onto `out` once it is
    /// durable; none is reported before it is. [`Ask`] says, besides the
    /// inputs, whom each is for, whether the caller executes externally
    /// (`dispatch`) and which outcomes of earlier calls to record first.
    ///
    /// A store error on one decision never takes the others with it: the
    /// batch's transaction rolled back, each input is decided again in a
    /// transaction of its own, and one whose own transaction fails too is a
    /// DENY (stage receipt) whose receipt is written in a fresh transaction
    /// that holds nothing else (see [`Gateway::deny_store_failure`]). A
    /// store that cannot be reached (`StoreError::Open`) or cannot even
    /// write that receipt is an `Err`: `out` then holds the decisions
    /// committed before the failure (those of the first inputs, in order),
    /// and the inputs after them were not decided; the caller retries them
    /// (`ipc serve --stdio` answers the first and decides the others again).
    /// So is a commit whose outcome is unknown (`StoreError::CommitUnknown`:
    /// the connection lost during `COMMIT`, a failover): the inputs after
    /// the answered ones may have committed, and are neither answered (never
    /// an ALLOW) nor decided again here; a retry of a write that committed
    /// is answered from the store by its operation hash.
    ///
    /// With `dispatch`, an ALLOW that dispatches gets `dispatch`'s record
    /// of the call as its result (`{"downstream": ...}`), in the decision's
    /// transaction, so the receipt says what will be sent before it is; a
    /// call that cannot be built is a DENY at the execution stage, before
    /// anything is spent.
    ///
    /// With `outcomes` (see [`Self::record_outcomes`]), they are recorded
    /// first, in the decision's transaction: one durable commit for both,
    /// so that an outcome written after the agent's answer never costs the
    /// next call a commit of its own (the MCP proxy). Their receipts are
    /// returned, or `None` when they were not recorded: the transaction
    /// that held them failed (an outcome the store refused, a store error),
    /// and the inputs were decided alone, exactly as without outcomes; the
    /// caller records them another way. An outcome never changes a decision.
    pub fn decide_all(
        &self,
        ask: Ask<'_>,
        out: &mut Vec<Decision>,
    ) -> Result<Option<Vec<ReceiptRef>>, GatewayError> {
        if let Some(s) = &self.shards {
            return s.decide_all(ask, out);
        }
        if !ask.outcomes.is_empty() {
            match self.decide_recording(&ask.inputs, ask.dispatch, ask.outcomes) {
                Ok((mut d, links)) => {
                    out.append(&mut d);
                    return Ok(Some(links));
                }
                // it may have committed: nothing decided again
                Err(GatewayError::Store(e @ StoreError::CommitUnknown(_))) => {
                    return Err(GatewayError::Store(e));
                }
                Err(_) => {}
            }
            self.decide_falling_back_into(&ask.inputs, ask.dispatch, out)?;
            return Ok(None);
        }
        self.decide_falling_back_into(&ask.inputs, ask.dispatch, out)?;
        Ok(Some(vec![]))
    }

    /// The inputs decided as [`Self::decide_all`] decides them, each
    /// input's end reported on its own: its decision, the error of the
    /// batch that did not decide it, or `None` (the batch came back short).
    /// Over shards, a shard that fails ends its own inputs only
    /// ([`shards::ShardSet::decide_each`]); over one store, the inputs
    /// after those committed get the error.
    pub fn decide_each(&self, ask: Ask<'_>) -> Vec<shards::Each> {
        if let Some(s) = &self.shards {
            return s.decide_each(ask);
        }
        let len = ask.inputs.len();
        let mut out = vec![];
        let result = self.decide_all(ask, &mut out);
        let mut each: Vec<shards::Each> = out.into_iter().map(|d| Some(Ok(d))).collect();
        let rest = match result {
            Ok(_) => None,
            Err(e) => Some(Arc::new(e)),
        };
        while each.len() < len {
            each.push(rest.clone().map(Err));
        }
        each
    }

    /// The inputs decided in one transaction, and on a store error each
    /// again alone (see [`Self::decide_all`]), pushed onto `out` as they
    /// commit.
    fn decide_falling_back_into(
        &self,
        inputs: &[(&Input, &Tenants)],
        dispatch: Option<Dispatching<'_>>,
        out: &mut Vec<Decision>,
    ) -> Result<(), GatewayError> {
        // a store that cannot be reached (`Open`: the database down, its
        // session lost) decides nothing: the caller is told so and retries;
        // nor does a commit whose outcome is unknown (`CommitUnknown`: the
        // connection lost during `COMMIT`): the batch may have committed,
        // so none of it is decided again nor answered (never an ALLOW, no
        // DENY receipt beside a committed ALLOW), and a retry is answered
        // from the store by its operation hash; any other store error is
        // this batch's, decided input by input
        let first = match self.decide_recording(inputs, dispatch, &[]) {
            Ok((mut d, _)) => {
                out.append(&mut d);
                return Ok(());
            }
            Err(GatewayError::Store(e)) if !undecided(&e) => e,
            Err(e) => return Err(e),
        };
        if let [(input, _)] = inputs {
            out.push(self.deny_store_failure(input, &first)?);
            return Ok(());
        }
        for one in inputs {
            match self.decide_recording(std::slice::from_ref(one), dispatch, &[]) {
                Ok((mut d, _)) => out.append(&mut d),
                Err(GatewayError::Store(e)) if !undecided(&e) => {
                    out.push(self.deny_store_failure(one.0, &e)?)
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The DENY of an input whose decision the store refused (its
    /// transaction rolled back, nothing of it committed), with a receipt of
    /// its own. The reason names the store error's code, not its text (a
    /// database's message may quote what it refused).
    fn deny_store_failure(&self, input: &Input, e: &StoreError) -> Result<Decision, GatewayError> {
        let code = miette::Diagnostic::code(e)
            .map(|c| c.to_string())
            .unwrap_or_else(|| "ipc::store::backend".into());
        let deny = Deny::new(
            Stage::Receipt,
            format!("the store refused this decision (`{code}`): nothing of it was committed"),
        );
        let action = input
            .proposal
            .get("action")
            .and_then(Value::as_str)
            .filter(|a| self.actions.contains_key(*a))
            .map(str::to_string);
        let now = self.now()?;
        let mut d = stages::deny_decision(action, deny);
        let mut link = None;
        self.store.transaction(&mut |tx: &mut dyn Tx| {
            link = Some(stages::append_receipt_alone(self, tx, input, &d, now)?);
            Ok(Value::Null)
        })?;
        d.receipt = link.map(|l| ReceiptRef {
            seq: l.seq,
            hash: l.hash,
        });
        Ok(d)
    }

    /// Empties the cache of verified tokens after a transaction that did
    /// not commit: a token verified in it was kept in it (for `ipc
    /// replay`), and is kept again by the next decision that verifies it.
    fn forget_verified(&self) {
        if let Ok(mut m) = self.verified.lock() {
            m.clear();
        }
    }

    /// The inputs decided in one transaction, each for the tenants its
    /// caller may act for, with `dispatch` for a gateway that executes
    /// externally; the `outcomes` recorded first in the same transaction
    /// (any of them refused fails it all), with their receipts.
    fn decide_recording(
        &self,
        inputs: &[(&Input, &Tenants)],
        dispatch: Option<Dispatching<'_>>,
        outcomes: &[(String, outcome::ExternalOutcome)],
    ) -> Result<(Vec<Decision>, Vec<ReceiptRef>), GatewayError> {
        let now = self.now()?;
        let mut out: Vec<Decision> = vec![];
        let mut links: Vec<ReceiptRef> = vec![];
        let committed = self.store.transaction_linked(&mut |tx: &mut dyn Tx| {
            out.clear();
            links.clear();
            for (op, o) in outcomes {
                let body = self.outcome_change(tx, op, o, now)?;
                let l = tx.append_receipt_jcs(&body)?;
                links.push(ReceiptRef {
                    seq: l.seq,
                    hash: l.hash,
                });
            }
            for (input, tenants) in inputs {
                let d = stages::run(self, tx, input, tenants, now, dispatch)?;
                out.push(d);
            }
            Ok(Value::Null)
        });
        let (_, relinks) = committed.inspect_err(|_| self.forget_verified())?;
        // each decision reports its receipt where it was committed
        if !relinks.is_empty() {
            let moved: HashMap<&str, &crate::store::ChainLink> = relinks
                .iter()
                .map(|r| (r.seen.hash.as_str(), &r.committed))
                .collect();
            let decided = out.iter_mut().filter_map(|d| d.receipt.as_mut());
            for r in decided.chain(links.iter_mut()) {
                if let Some(link) = moved.get(r.hash.as_str()) {
                    r.seq = link.seq;
                    r.hash = link.hash.clone();
                }
            }
        }
        Ok((out, links))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    /// `Outcome::name` and `Stage::name` are the spellings of a decision's
    /// JSON (serde's), both ways: stories and scenarios read them with
    /// serde and print them with `name`.
    #[test]
    fn names_are_the_serde_spellings() {
        use super::{Outcome, Stage};
        for o in [Outcome::Allow, Outcome::Pending, Outcome::Deny] {
            assert_eq!(serde_json::to_value(o).unwrap(), json!(o.name()));
            assert_eq!(
                serde_json::from_value::<Outcome>(json!(o.name())).unwrap(),
                o
            );
        }
        for st in [
            Stage::Authn,
            Stage::Contract,
            Stage::Provenance,
            Stage::Delegation,
            Stage::Budget,
            Stage::Policy,
            Stage::Approval,
            Stage::Execution,
            Stage::Receipt,
        ] {
            assert_eq!(serde_json::to_value(st).unwrap(), json!(st.name()));
            assert_eq!(
                serde_json::from_value::<Stage>(json!(st.name())).unwrap(),
                st
            );
        }
    }

    /// A clock before the epoch is an error, not 0 (at 0 nothing expires).
    #[test]
    fn a_clock_before_the_epoch_is_an_error() {
        use std::time::{Duration, UNIX_EPOCH};
        assert!(super::seconds_since_epoch(UNIX_EPOCH - Duration::from_secs(1)).is_err());
        assert_eq!(
            super::seconds_since_epoch(UNIX_EPOCH + Duration::from_secs(7)).unwrap(),
            7
        );
        assert!(super::unix_now().unwrap() > 1_700_000_000);
    }

    /// Written directly, the operation hash is still the hash of the
    /// canonical form of `{mandate, bundle, action, resolved}`.
    #[test]
    fn operation_hash_is_the_hash_of_the_canonical_operation() {
        let mut resolved = Map::new();
        resolved.insert("z".into(), json!(["b", "a"]));
        resolved.insert("amount".into(), json!(120_050));
        resolved.insert("payee".into(), json!("Ünïcode \"q\""));
        let expected = crate::canonical::hash_of(&json!({
            "mandate": "m-1",
            "bundle": "sha256:bb",
            "action": "payment.transfer",
            "resolved": resolved,
        }))
        .unwrap();
        let got = super::operation_hash("m-1", "sha256:bb", "payment.transfer", &resolved).unwrap();
        assert_eq!(got, expected);
        resolved.insert("amount".into(), json!(120_051));
        let other =
            super::operation_hash("m-1", "sha256:bb", "payment.transfer", &resolved).unwrap();
        assert_ne!(other, expected);
    }
}
