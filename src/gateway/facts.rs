//! Computing facts: the gateway-side expressions of a pack (they may read
//! the mandate and the registries; rules, compiled to Cedar, then read the
//! facts). A missing record or an overflow is an error, and an error is a
//! DENY: a fact that cannot be established never counts as false.

use super::normalize::{self, Compared};
use super::registry::Registries;
use super::selection::Evaluated;
use crate::ir::{BinOp, Expr};
use crate::store::Tx;
use serde_json::{Map, Value};
use std::cell::RefCell;
use std::collections::BTreeMap;

pub struct Env<'a> {
    pub resolved: &'a Map<String, Value>,
    pub facts: &'a Map<String, Value>,
    pub claims: &'a Map<String, Value>,
    pub now: i64,
    pub registries: &'a Registries<'a>,
    pub declared: &'a [crate::ir::Registry],
    /// The mandate's selections as the provenance stage evaluated them
    /// for this decision, by claim; a fact that finds a value in one marks
    /// it picked (what the receipt records).
    pub selections: &'a RefCell<BTreeMap<String, Evaluated>>,
}

pub fn eval(e: &Expr, env: &Env<'_>, tx: &mut dyn Tx) -> Result<Value, String> {
    Ok(match e {
        Expr::Lit { value } => value.to_json(),
        Expr::Param { name } => env
            .resolved
            .get(name)
            .cloned()
            .ok_or_else(|| format!("parameter `{name}` is not resolved"))?,
        Expr::Fact { name } => env
            .facts
            .get(name)
            .cloned()
            .ok_or_else(|| format!("fact `{name}` is not computed"))?,
        Expr::Claim { name } => env
            .claims
            .get(name)
            .cloned()
            .ok_or_else(|| format!("the mandate has no claim `{name}`"))?,
        Expr::Now => Value::from(env.now),
        Expr::Registry { name } => {
            return Err(format!("registry `{name}` used as a value"));
        }
        Expr::Selection { claim, .. } => {
            return Err(format!("the selection `{claim}` used as a value"));
        }
        Expr::Lookup {
            registry,
            key,
            field,
        } => {
            let k = eval(key, env, tx)?;
            let k = match k {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let reg = declared(env, registry)?;
            let rec = env
                .registries
                .record(tx, reg, &k)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| {
                    format!(
                        "no record `{}` in `{registry}`",
                        crate::base::json::echo(&k)
                    )
                })?;
            rec.get(field)
                .cloned()
                .ok_or_else(|| format!("record `{k}` of `{registry}` has no `{field}`"))?
        }
        Expr::List { items } => Value::Array(
            items
                .iter()
                .map(|i| eval(i, env, tx))
                .collect::<Result<_, _>>()?,
        ),
        Expr::Not { expr } => Value::Bool(!boolean(&eval(expr, env, tx)?)?),
        Expr::Binary { op, lhs, rhs } => binary(*op, lhs, rhs, env, tx)?,
    })
}

fn declared<'a>(env: &Env<'a>, name: &str) -> Result<&'a crate::ir::Registry, String> {
    env.declared
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| format!("unknown registry `{name}`"))
}

fn boolean(v: &Value) -> Result<bool, String> {
    v.as_bool().ok_or_else(|| format!("`{v}` is not a boolean"))
}

fn int(v: &Value) -> Result<i64, String> {
    v.as_i64().ok_or_else(|| format!("`{v}` is not a number"))
}

fn binary(
    op: BinOp,
    lhs: &Expr,
    rhs: &Expr,
    env: &Env<'_>,
    tx: &mut dyn Tx,
) -> Result<Value, String> {
    match op {
        BinOp::And => {
            let l = boolean(&eval(lhs, env, tx)?)?;
            return Ok(Value::Bool(l && boolean(&eval(rhs, env, tx)?)?));
        }
        BinOp::Or => {
            let l = boolean(&eval(lhs, env, tx)?)?;
            return Ok(Value::Bool(l || boolean(&eval(rhs, env, tx)?)?));
        }
        BinOp::In => {
            let l = eval(lhs, env, tx)?;
            if let Expr::Selection { claim, .. } = rhs {
                // a mandate without the selection selects nothing
                if !env.claims.contains_key(claim) {
                    return Ok(Value::Bool(false));
                }
                let mut sel = env.selections.borrow_mut();
                let Some(s) = sel.get_mut(claim) else {
                    return Err(format!(
                        "the mandate's selection `{claim}` was not evaluated"
                    ));
                };
                // keys are text, as a registry membership compares them
                let key = match &l {
                    Value::String(k) => k.clone(),
                    other => other.to_string(),
                };
                let hit = s.result.contains(&key);
                if hit && s.picked.is_none() {
                    s.picked = Some(key);
                }
                return Ok(Value::Bool(hit));
            }
            if let Expr::Registry { name } = rhs {
                let reg = declared(env, name)?;
                let text = match &l {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                let norm = reg.member_type().canonical_normalizer();
                // a value of the registry's type is already in its canonical
                // spelling; an `Id` (an account as a bank writes it) is
                // compared in that spelling when it is one up to separators
                // and prefixes, as written when it is no IBAN, e-mail or
                // phone at all, and refused when it is one in a disguise
                // (the fact cannot be established: a DENY)
                let text = match norm.map(|n| normalize::comparable(n, &text)) {
                    Some(Compared::Canonical(canonical)) => canonical,
                    Some(Compared::Refused(why)) => {
                        return Err(format!("cannot compare it with `{name}`: {why}"));
                    }
                    Some(Compared::AsWritten) | None => text,
                };
                let hit = env
                    .registries
                    .member(tx, reg, &text, norm)
                    .map_err(|e| e.to_string())?;
                return Ok(Value::Bool(hit.is_some()));
            }
            let r = eval(rhs, env, tx)?;
            let Value::Array(items) = r else {
                return Err("`in` needs a list on its right".into());
            };
            return Ok(Value::Bool(items.contains(&l)));
        }
        _ => {}
    }
    let l = eval(lhs, env, tx)?;
    let r = eval(rhs, env, tx)?;
    Ok(match op {
        BinOp::Eq => Value::Bool(l == r),
        BinOp::Ne => Value::Bool(l != r),
        BinOp::Lt => Value::Bool(int(&l)? < int(&r)?),
        BinOp::Le => Value::Bool(int(&l)? <= int(&r)?),
        BinOp::Gt => Value::Bool(int(&l)? > int(&r)?),
        BinOp::Ge => Value::Bool(int(&l)? >= int(&r)?),
        BinOp::Add => Value::from(
            int(&l)?
                .checked_add(int(&r)?)
                .ok_or("arithmetic overflow")?,
        ),
        BinOp::Sub => Value::from(
            int(&l)?
                .checked_sub(int(&r)?)
                .ok_or("arithmetic overflow")?,
        ),
        BinOp::And | BinOp::Or | BinOp::In => Value::Null,
    })
}
