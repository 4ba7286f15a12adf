//! Stage 6, policy: compute the action's facts, then ask Cedar, over the
//! action's own policies, at approval levels 0, 1 and 2. The decision is the
//! smallest level that permits; none permits: DENY. Any Cedar evaluation
//! error is a DENY (a forbid that errors must never fail open).

use super::{Run, StageResult};
use crate::bundle::format::{CTX_APPROVAL_LEVEL, CTX_NOW, CTX_PROVENANCE};
use crate::gateway::facts::{Env, eval};
use crate::gateway::registry::Registries;
use crate::gateway::{Deny, Stage};
use cedar_policy::{
    Authorizer, Context, Decision as CedarDecision, Entities, EntityId, EntityUid, Request,
    RestrictedExpression,
};
use serde_json::Value;

fn deny(reason: String) -> Deny {
    Deny::new(Stage::Policy, reason)
}

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let (Some(a), Some(m)) = (r.action, r.mandate.clone()) else {
        return Err(deny("no action".into()).into());
    };
    // facts, in declaration order
    let regs = Registries {
        world: &r.gw.world,
        pack: &a.table.pack,
        owner: &m.owner,
    };
    for f in &a.table.action.facts {
        let env = Env {
            resolved: &r.resolved,
            facts: &r.facts,
            claims: &m.claims,
            now: r.now,
            registries: &regs,
            declared: &a.pack.registries,
            selections: &r.selections,
        };
        let v = eval(&f.expr, &env, r.tx)
            .map_err(|e| deny(format!("cannot establish fact `{}`: {e}", f.name)))?;
        r.facts.insert(f.name.clone(), v);
    }

    // the context at one level, built afresh for each level tried (a
    // clone costs as much, and most decisions stop at the first level)
    let context = |level: u8| -> Result<Context, Deny> {
        let mut pairs: Vec<(String, RestrictedExpression)> =
            Vec::with_capacity(r.resolved.len() + r.facts.len() + 3);
        for (k, v) in r.resolved.iter().chain(r.facts.iter()) {
            pairs.push((
                k.clone(),
                to_cedar(v).map_err(|e| deny(format!("`{k}`: {e}")))?,
            ));
        }
        let critical: Vec<(String, RestrictedExpression)> = a
            .table
            .action
            .params
            .iter()
            .filter(|p| p.vouched())
            .map(|p| {
                let origin = match r.origins.get(&p.name) {
                    // a single value's, as it is (the common case: no list
                    // of the origins to build)
                    Some(Value::String(s)) => s.clone(),
                    // every origin in it (a list's, a record's fields'), once
                    Some(v) => {
                        let mut o: Vec<&str> = vec![];
                        origin_strings(v, &mut o);
                        o.sort_unstable();
                        o.dedup();
                        o.join(", ")
                    }
                    None => String::new(),
                };
                (p.name.clone(), RestrictedExpression::new_string(origin))
            })
            .collect();
        if !critical.is_empty() {
            let rec = RestrictedExpression::new_record(critical)
                .map_err(|e| deny(format!("provenance record: {e}")))?;
            pairs.push((CTX_PROVENANCE.into(), rec));
        }
        pairs.push((CTX_NOW.into(), RestrictedExpression::new_long(r.now)));
        pairs.push((
            CTX_APPROVAL_LEVEL.into(),
            RestrictedExpression::new_long(i64::from(level)),
        ));
        Context::from_pairs(pairs).map_err(|e| deny(format!("context: {e}")))
    };

    let principal =
        EntityUid::from_type_name_and_id(a.principal_type.clone(), EntityId::new(&m.user));
    let resource =
        EntityUid::from_type_name_and_id(a.resource_type.clone(), EntityId::new(&m.owner));
    let authorizer = Authorizer::new();
    let entities = Entities::empty();
    let mut last_forbids: Vec<String> = vec![];
    for level in 0..=2u8 {
        let context = context(level)?;
        let request = Request::new(
            principal.clone(),
            a.cedar_action.clone(),
            resource.clone(),
            context,
            None,
        )
        .map_err(|e| deny(format!("request: {e}")))?;
        let resp = authorizer.is_authorized(&request, &a.policies, &entities);
        let errors: Vec<String> = resp.diagnostics().errors().map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            return Err(deny(format!("policy evaluation error: {}", errors.join("; "))).into());
        }
        let reasons: Vec<String> = resp
            .diagnostics()
            .reason()
            .map(|p| AsRef::<str>::as_ref(p).to_string())
            .collect();
        if resp.decision() == CedarDecision::Allow {
            r.level = level;
            // the permit, and the approval rules that demanded this level
            r.policies = last_forbids.clone();
            r.policies.extend(reasons);
            return Ok(());
        }
        last_forbids = reasons;
    }
    // no level permits: the forbids that still hold at level 2 explain why
    r.policies = last_forbids.clone();
    let rules: Vec<&crate::ir::Rule> = last_forbids
        .iter()
        .filter_map(|id| a.table.rule_of(id))
        .collect();
    let reason = if rules.is_empty() {
        if last_forbids.is_empty() {
            "no policy permits this action".to_string()
        } else {
            format!("forbidden by {}", last_forbids.join(", "))
        }
    } else {
        format!(
            "forbidden: {}",
            rules
                .iter()
                .map(|r| r.reason.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        )
    };
    let hint = rules
        .iter()
        .find_map(|r| r.hint.clone())
        .or_else(|| Some("no approval can lift this: it is forbidden whoever approves".into()));
    Err(deny(reason).hint(hint).into())
}

/// A resolved value or fact as a Cedar value.
pub(crate) fn to_cedar(v: &Value) -> Result<RestrictedExpression, String> {
    Ok(match v {
        Value::String(s) => RestrictedExpression::new_string(s.clone()),
        Value::Bool(b) => RestrictedExpression::new_bool(*b),
        Value::Number(n) => RestrictedExpression::new_long(
            n.as_i64()
                .ok_or_else(|| format!("`{n}` is not a whole number"))?,
        ),
        Value::Array(items) => RestrictedExpression::new_set(
            items.iter().map(to_cedar).collect::<Result<Vec<_>, _>>()?,
        ),
        Value::Null => return Err("no value".into()),
        Value::Object(o) => RestrictedExpression::new_record(
            o.iter()
                .map(|(k, v)| Ok((k.clone(), to_cedar(v)?)))
                .collect::<Result<Vec<_>, String>>()?,
        )
        .map_err(|e| e.to_string())?,
    })
}

/// The origin strings in a parameter's origins: one, a list's, a record's.
fn origin_strings<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| origin_strings(i, out)),
        Value::Object(m) => m.values().for_each(|i| origin_strings(i, out)),
        _ => {}
    }
}

#[cfg(test)]
#[path = "tests/policy.rs"]
mod tests;
