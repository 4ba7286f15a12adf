//! Stage 8, execution: only the gateway acts. Inside the decision's store
//! transaction: the executor runs (it validates before it writes), then the
//! budget is spent, the approvals' nonces are consumed and the operation is
//! recorded, so a concurrent or repeated proposal can never run twice.
//!
//! A read (its external caller says so, [`crate::gateway::Effect`]) is
//! recorded under a key of its own execution instead of the operation
//! hash: the same read again is decided and executed again, while an
//! operation a write executed stays answered from the store.

use super::approval::operation_hash;
use super::budget::amount_of;
use super::{Run, StageResult};
use crate::gateway::executors::{self, ExecCtx};
use crate::gateway::registry::Registries;
use crate::gateway::{Deny, Stage};
use serde_json::Value;

/// An operation already executed under this mandate is answered with its
/// recorded result and not run again (idempotency).
pub(super) fn replay(r: &mut Run<'_>) -> Result<bool, super::Stop> {
    let op = operation_hash(r)?;
    r.operation_hash = Some(op.clone());
    if let Some(prev) = r.tx.executed(&r.key(&op))? {
        r.result = Some(prev);
        r.replayed = true;
        return Ok(true);
    }
    Ok(false)
}

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let (Some(a), Some(m)) = (r.action, r.mandate.clone()) else {
        return Err(Deny::new(Stage::Execution, "no action").into());
    };
    // set by the replay check; never execute under an empty hash
    let Some(op) = r.operation_hash.clone() else {
        return Err(Deny::new(Stage::Execution, "no operation hash").into());
    };
    let amount = amount_of(r)?;
    let bought = selection_limits(r, &m)?;
    let result = if r.shadow {
        // in shadow the gateway runs nothing and the caller goes on
        serde_json::json!({ "shadow": "not executed" })
    } else {
        execute(r, &m, a, &op)?
    };
    for n in &r.nonces {
        r.tx.use_nonce(&r.key(n))?;
    }
    for (key, keys) in bought {
        r.tx.state_put(
            crate::gateway::selection::BOUGHT_NS,
            &key,
            &Value::from(keys),
        )?;
    }
    spend(r, &m, amount, op, result)
}

/// Each selection with a `limit` whose key this decision takes: the keys
/// bought under it with this one, to be written with the execution; a
/// new key past the limit is a DENY (counted like a budget, in the
/// decision's transaction).
fn selection_limits(
    r: &mut Run<'_>,
    m: &crate::gateway::Mandate,
) -> Result<Vec<(String, Vec<String>)>, super::Stop> {
    let taken: Vec<(String, u64, String)> = r
        .selections
        .borrow()
        .iter()
        .filter_map(|(claim, ev)| Some((claim.clone(), ev.limit?, ev.picked.clone()?)))
        .collect();
    let mut out = vec![];
    for (claim, limit, picked) in taken {
        let key = r
            .key(&[m.id.as_str(), "\u{1f}", &claim].concat())
            .into_owned();
        let mut keys: Vec<String> =
            match r.tx.state_get(crate::gateway::selection::BOUGHT_NS, &key)? {
                Some(Value::Array(items)) => items
                    .into_iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect(),
                _ => vec![],
            };
        if keys.contains(&picked) {
            continue;
        }
        if keys.len() as u64 >= limit {
            return Err(Deny::new(
                Stage::Budget,
                format!(
                    "the mandate's selection `{claim}` allows {limit} distinct key{}: `{}` would be one more (already: {})",
                    if limit == 1 { "" } else { "s" },
                    crate::base::json::echo(&picked),
                    keys.join(", ")
                ),
            )
            .into());
        }
        keys.push(picked);
        out.push((key, keys));
    }
    Ok(out)
}

/// The executor (or the external caller's call, recorded): its result.
fn execute(
    r: &mut Run<'_>,
    m: &crate::gateway::Mandate,
    a: &crate::gateway::ActionRt,
    op: &str,
) -> Result<serde_json::Value, super::Stop> {
    // a caller that executes says what it will send: recorded as the
    // result (in the receipt, before the call); a call that cannot be built
    // leaves nothing spent
    let dispatched = match r.dispatch.filter(|_| r.gw.external) {
        Some(dispatch) => {
            let secrets = crate::gateway::secret::SecretValues::new(r.secrets.clone());
            let call = dispatch(&r.resolved, &secrets).map_err(|reason| {
                Deny::new(
                    Stage::Execution,
                    format!("the trusted values do not map onto the tool: {reason}"),
                )
            })?;
            Some(serde_json::json!({ "downstream": call }))
        }
        None => None,
    };
    let regs = Registries {
        world: &r.gw.world,
        pack: &a.table.pack,
        owner: &m.owner,
    };
    // the executor alone takes the secrets' values; an external one only
    // records the operation (in the store): the commitments, never the
    // values, which the caller gets with the decision
    let with_secrets;
    let values = if r.secrets.is_empty() || r.gw.external {
        &r.resolved
    } else {
        let mut all = r.resolved.clone();
        all.extend(r.secrets.iter().map(|(k, v)| (k.clone(), v.clone())));
        with_secrets = all;
        &with_secrets
    };
    // a gateway whose caller executes (the MCP proxy) only records
    let executor = if r.gw.external {
        "external"
    } else {
        a.table.action.executor.as_str()
    };
    let result = executors::execute(
        executor,
        &mut ExecCtx {
            tx: r.tx,
            registries: &regs,
            declared: &a.pack.registries,
            mandate: m,
            resolved: values,
            now: r.now,
            operation_hash: op,
        },
    )
    .map_err(|e| match e {
        executors::ExecError::Refused(reason) => Deny::new(Stage::Execution, reason).into(),
        executors::ExecError::Store(s) => super::Stop::Store(s),
    })?;
    Ok(dispatched.unwrap_or(result))
}

/// Spends from the mandate and its ancestors and records the execution.
fn spend(
    r: &mut Run<'_>,
    m: &crate::gateway::Mandate,
    amount: i64,
    op: String,
    result: serde_json::Value,
) -> StageResult {
    // the mandate and every ancestor: a child spends from its parent's budget
    let ancestors = r.ancestors.clone();
    let mut calls = None;
    for link in std::iter::once(m).chain(ancestors.iter()) {
        let spent = r.tx.spend(&r.key(&link.id), amount)?;
        calls.get_or_insert(spent.calls);
        // the budget stage checked before; this is the same transaction, so
        // the check holds — but never let a mistake there spend past the cap
        if spent.amount > link.budget.amount || spent.calls > link.budget.calls {
            return Err(super::Stop::Store(crate::store::StoreError::Aborted(
                "budget invariant violated".into(),
            )));
        }
    }
    // a read under its own key (the mandate's call count, raised by this
    // very call, tells its executions apart); a write under the operation
    let key = match r.effect {
        crate::gateway::Effect::Write => op,
        crate::gateway::Effect::Read => {
            let n = calls.ok_or_else(|| {
                super::Stop::Store(crate::store::StoreError::Aborted(
                    "a read spent no call".into(),
                ))
            })?;
            let key = crate::gateway::read_execution(&op, n);
            r.execution = Some(key.clone());
            key
        }
    };
    r.tx.record_execution(&r.key(&key), &result)?;
    r.spent = Some(amount);
    r.result = Some(result);
    Ok(())
}
