//! The nine stages, in order. Each module holds one stage and its unit
//! tests; `run` threads a [`Run`] through them and turns the first DENY, a
//! PENDING or an ALLOW into a receipt and a [`Decision`].

mod approval;
mod authn;
mod budget;
mod contract;
mod delegation;
mod execution;
mod policy;
mod provenance;
mod receipt;

pub(crate) use receipt::append_alone as append_receipt_alone;
pub use receipt::{Consumed, body as receipt_body};

use super::{
    ActionRt, Decision, Deny, Effect, Gateway, Input, Mandate, Outcome, ReceiptRef, Stage,
};
use crate::store::{StoreError, Tx};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A proposal argument after the contract stage: a typed value (already
/// normalised), a reference the gateway must resolve, or a list of them.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Arg {
    Val(Value),
    Ref(String),
    List(Vec<Arg>),
    /// An object's fields, in the order the proposal wrote them.
    Record(Vec<(String, Arg)>),
}

/// The state of one decision as it moves through the stages.
pub(crate) struct Run<'a> {
    pub gw: &'a Gateway,
    pub tx: &'a mut dyn Tx,
    pub now: i64,
    pub input: &'a Input,
    /// The tenants the caller may act for (authn refuses a mandate of
    /// another owner).
    pub tenants: &'a crate::gateway::Tenants,
    pub mandate: Option<Arc<Mandate>>,
    /// The mandate's ancestors, root first (a child mandate's chain;
    /// empty for a root), verified by authn.
    pub ancestors: Arc<[Mandate]>,
    pub action: Option<&'a ActionRt>,
    pub args: BTreeMap<&'a str, Arg>,
    pub resolved: Map<String, Value>,
    /// The values of `secret` parameters, for the executor only; `resolved`
    /// holds their commitments.
    pub secrets: Map<String, Value>,
    pub origins: Map<String, Value>,
    pub facts: Map<String, Value>,
    /// The level the policy requires.
    pub level: u8,
    pub policies: Vec<String>,
    pub operation_hash: Option<String>,
    pub approvers: Vec<String>,
    /// Nonces of the approvals used, consumed on execution.
    pub nonces: Vec<String>,
    /// The amount the execution spent from the mandate's budget: set once
    /// the operation executed (not on a replay), recorded in the receipt.
    pub spent: Option<i64>,
    pub result: Option<Value>,
    pub replayed: bool,
    /// The external caller's call, recorded as the result of an ALLOW
    /// (see [`crate::gateway::Gateway::decide_all`] with a dispatch).
    pub dispatch: Option<crate::gateway::Dispatch<'a>>,
    /// What the external caller's call does: a read is executed again at
    /// each allowed call (a gateway executing in process only writes).
    pub effect: Effect,
    /// An executed read's key ([`crate::gateway::read_execution`]).
    pub execution: Option<String>,
    /// In shadow mode ([`crate::gateway::shadow`]): known once authn
    /// verified the mandate (its tenant) and the contract the action (its
    /// pack); budgets, nonces and executions then under keys of their own.
    pub shadow: bool,
    /// The mandate's selections the action reads, evaluated once by the
    /// provenance stage ([`crate::gateway::selection`]), by claim.
    pub selections: std::cell::RefCell<BTreeMap<String, crate::gateway::selection::Evaluated>>,
}

impl Run<'_> {
    /// The key a budget, nonce or execution is kept under by this
    /// decision: its own, or in shadow mode the shadow one.
    pub(crate) fn key<'k>(&self, key: &'k str) -> std::borrow::Cow<'k, str> {
        if self.shadow {
            crate::gateway::shadow::key(key).into()
        } else {
            key.into()
        }
    }

    /// Whether what is known so far puts this decision in shadow.
    fn in_shadow(&self) -> bool {
        self.gw.world.shadow.applies(
            self.mandate.as_deref().map(|m| m.owner.as_str()),
            self.action.map(|a| a.table.pack.as_str()),
        )
    }
}

/// What a stage returns: go on, stop with a DENY or a PENDING, or a store
/// failure (which aborts the transaction).
pub(crate) enum Stop {
    Deny(Deny),
    Pending { reason: String, approve_by: String },
    Store(StoreError),
}

impl From<Deny> for Stop {
    fn from(d: Deny) -> Self {
        Stop::Deny(d)
    }
}
impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Store(e)
    }
}

pub(crate) type StageResult = Result<(), Stop>;

pub(crate) fn run(
    gw: &Gateway,
    tx: &mut dyn Tx,
    input: &Input,
    tenants: &crate::gateway::Tenants,
    now: i64,
    dispatch: Option<crate::gateway::Dispatching<'_>>,
) -> Result<Decision, StoreError> {
    // only a call made outside can be a read: the packs' own executors
    // write, once
    let effect = match dispatch {
        Some(d) if gw.external => d.effect,
        _ => Effect::Write,
    };
    let mut r = Run {
        gw,
        tx,
        now,
        input,
        tenants,
        mandate: None,
        ancestors: Arc::from(Vec::new()),
        action: None,
        args: BTreeMap::new(),
        resolved: Map::new(),
        secrets: Map::new(),
        origins: Map::new(),
        facts: Map::new(),
        level: 0,
        policies: vec![],
        operation_hash: None,
        approvers: vec![],
        nonces: vec![],
        spent: None,
        result: None,
        replayed: false,
        dispatch: dispatch.map(|d| d.call),
        effect,
        execution: None,
        shadow: false,
        selections: Default::default(),
    };
    let outcome = pipeline(&mut r);
    let mut d = match outcome {
        Ok(()) => {
            // the caller that executes needs the secrets' values: only
            // for an operation dispatched now, never on a replay
            let secrets = if gw.external && !r.replayed {
                crate::gateway::secret::SecretValues::new(std::mem::take(&mut r.secrets))
            } else {
                Default::default()
            };
            Decision {
                decision: Outcome::Allow,
                stage: Stage::Execution,
                reason: None,
                hint: None,
                secrets,
                ..base(&mut r)
            }
        }
        Err(Stop::Deny(deny)) => {
            let mut d = base(&mut r);
            d.decision = Outcome::Deny;
            d.stage = deny.stage;
            d.reason = Some(deny.reason);
            d.hint = deny.hint;
            d
        }
        Err(Stop::Pending { reason, approve_by }) => {
            let mut d = base(&mut r);
            d.decision = Outcome::Pending;
            d.stage = Stage::Approval;
            d.reason = Some(reason);
            d.approve_by = Some(approve_by);
            // in shadow nobody is asked: the call goes on
            if !r.shadow {
                record_pending(&mut r, &d)?;
            }
            d
        }
        Err(Stop::Store(e)) => return Err(e),
    };
    if r.shadow {
        shadowed(&mut d);
    }
    let rec = receipt::append(&mut r, &d)?;
    d.receipt = Some(ReceiptRef {
        seq: rec.seq,
        hash: rec.hash,
    });
    Ok(d)
}

fn pipeline(r: &mut Run<'_>) -> StageResult {
    if let Some(e) = &r.input.malformed {
        return Err(Deny::new(Stage::Contract, e.clone()).into());
    }
    authn::run(r)?;
    // authn verified the mandate: its tenant may be in shadow; the
    // contract names the action: its pack may be (even when it refuses)
    r.shadow = r.in_shadow();
    let contract = contract::run(r);
    r.shadow = r.in_shadow();
    contract?;
    provenance::run(r)?;
    delegation::run(r)?;
    if execution::replay(r)? {
        return Ok(());
    }
    budget::run(r)?;
    policy::run(r)?;
    approval::run(r)?;
    execution::run(r)
}

/// A decision taken in shadow: answered SHADOW, with what enforcement
/// would have decided; nothing for a caller to execute with.
fn shadowed(d: &mut Decision) {
    d.would_be = Some(crate::gateway::shadow::WouldBe {
        decision: d.decision,
        stage: d.stage,
        reason: d.reason.clone(),
        level: d.level,
    });
    d.decision = Outcome::Shadow;
    d.secrets = Default::default();
}

/// The decision's common part, moved out of the finished run (only the
/// receipt, which reads the decision, comes after).
fn base(r: &mut Run<'_>) -> Decision {
    let resolved = std::mem::take(&mut r.resolved);
    let shown = match r.action {
        Some(a) => crate::gateway::answer::caller_values(&a.table.action, &resolved),
        None => Map::new(),
    };
    Decision {
        decision: Outcome::Deny,
        stage: Stage::Receipt,
        action: r.action.map(|a| a.table.action.name.clone()),
        reason: None,
        hint: None,
        resolved,
        shown,
        origins: std::mem::take(&mut r.origins),
        // a level is known once the operation is (provenance passed)
        level: r.action.and(r.operation_hash.as_ref()).map(|_| r.level),
        operation_hash: r.operation_hash.take(),
        approve_by: None,
        approvers: std::mem::take(&mut r.approvers),
        policies: std::mem::take(&mut r.policies),
        result: r.result.take(),
        selections: r
            .selections
            .borrow()
            .iter()
            .map(|(k, s)| (k.clone(), s.to_receipt()))
            .collect(),
        replayed: r.replayed,
        effect: r.effect,
        execution: r.execution.take(),
        receipt: None,
        would_be: None,
        secrets: Default::default(),
    }
}

/// The critical values the approver is warned about (NEW): a value the
/// owner's records could have vouched for (the parameter has a registry
/// source) that only the request did, and that is in none of the owner's
/// records for that parameter. A value the request named and the owner's
/// registry also holds (the landlord's IBAN, named in the mandate and a
/// saved beneficiary) is not news; neither is an account or currency only a
/// mandate can give.
fn new_to_owner(
    r: &mut Run<'_>,
    m: &Mandate,
    a: &ActionRt,
    d: &Decision,
) -> Result<Vec<String>, StoreError> {
    let from_request = |o: &Value| match o {
        Value::String(s) => s.starts_with("mandate."),
        Value::Array(items) => items
            .iter()
            .any(|i| i.as_str().is_some_and(|s| s.starts_with("mandate."))),
        _ => false,
    };
    // the lookups read the operation's own values (keys by parameter);
    // the run's own are put back whatever the outcome
    let saved = std::mem::replace(&mut r.resolved, d.resolved.clone());
    let out = unknown_to_owner(r, m, a, d, from_request);
    r.resolved = saved;
    out
}

fn unknown_to_owner(
    r: &mut Run<'_>,
    m: &Mandate,
    a: &ActionRt,
    d: &Decision,
    from_request: impl Fn(&Value) -> bool,
) -> Result<Vec<String>, StoreError> {
    let mut out = vec![];
    for (k, o) in &d.origins {
        let Some(p) = a.table.action.param(k) else {
            continue;
        };
        let records: Vec<&crate::ir::Source> = p
            .sources
            .iter()
            .filter(|s| !matches!(s, crate::ir::Source::Claim { .. }))
            .collect();
        if !p.critical || records.is_empty() || !from_request(o) {
            continue;
        }
        let values = match d.resolved.get(k) {
            Some(Value::Array(items)) => items.clone(),
            Some(v) => vec![v.clone()],
            None => vec![],
        };
        let mut known = true;
        for v in &values {
            let mut hit = false;
            for s in &records {
                if provenance::vouched_by(r, m, p, s, v)?.is_some() {
                    hit = true;
                    break;
                }
            }
            known &= hit;
        }
        if !known {
            out.push(k.clone());
        }
    }
    Ok(out)
}

/// Records a PENDING decision's operation for the approvers (see
/// [`crate::gateway::pending`]), in the decision's transaction.
fn record_pending(r: &mut Run<'_>, d: &Decision) -> Result<(), StoreError> {
    // (the mandate cloned: the lookups below borrow the run)
    let (Some(a), Some(m), Some(op)) = (r.action, r.mandate.clone(), &d.operation_hash) else {
        return Ok(());
    };
    let new_values = new_to_owner(r, &m, a, d)?;
    let new = crate::gateway::pending::record(
        r.tx,
        &crate::gateway::pending::PendingOp {
            operation_hash: op.clone(),
            pack: a.table.pack.clone(),
            action: a.table.action.name.clone(),
            mandate: m.id.clone(),
            user: m.user.clone(),
            owner: m.owner.clone(),
            resolved: d.resolved.clone(),
            origins: d.origins.clone(),
            new_values,
            level: d.level.unwrap_or(0),
            reason: d.reason.clone().unwrap_or_default(),
            policies: d.policies.clone(),
            approve_by: d.approve_by.clone().unwrap_or_default(),
            roles: approval::four_eyes_roles(a, &d.policies),
            created_at: r.now,
            expires_at: m.expires_at,
            declined_by: vec![],
            declined_until: None,
            approvals: vec![],
            approval_receipts: Default::default(),
        },
    )?;
    // the approvers told, once per target: the outbox's rows commit with
    // this decision (`gateway::notify`)
    if new {
        crate::gateway::notify::outbox::enqueue(r.tx, &r.gw.world.notify.targets, op)?;
    }
    Ok(())
}

/// A DENY decision outside any run (a line that is not even JSON).
pub(crate) fn deny_decision(action: Option<String>, deny: Deny) -> Decision {
    Decision {
        decision: Outcome::Deny,
        stage: deny.stage,
        action,
        reason: Some(deny.reason),
        hint: deny.hint,
        resolved: Map::new(),
        shown: Map::new(),
        origins: Map::new(),
        level: None,
        operation_hash: None,
        approve_by: None,
        approvers: vec![],
        policies: vec![],
        result: None,
        selections: Map::new(),
        replayed: false,
        effect: Effect::Write,
        execution: None,
        receipt: None,
        would_be: None,
        secrets: Default::default(),
    }
}
