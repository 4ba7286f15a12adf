//! Stage 3, provenance: every critical value equals a trusted value of this
//! mandate's owner — a mandate claim, a member of a registry, or a field of
//! a record found by a trusted key — tried in the order the pack lists its
//! sources. A `{"ref": id}` is resolved here against the owner's registry,
//! never trusted as given; a record of another tenant is simply not found.
//! The resolved value is the trusted spelling, and its origin is recorded.

use super::{Arg, Run, StageResult};
use crate::gateway::registry::Registries;
use crate::gateway::{Deny, Mandate, Stage, normalize};
use crate::ir::{Key, Lookup, Normalizer, Param, Source};
use crate::store::StoreError;
use serde_json::Value;

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let Some(a) = r.action else {
        return Err(Deny::new(Stage::Provenance, "no action").into());
    };
    let Some(m) = r.mandate.clone() else {
        return Err(Deny::new(Stage::Provenance, "no mandate").into());
    };
    let decl = &a.table.action;
    select(r, &m)?;
    // critical parameters keyed by others come after their keys
    let mut pending: Vec<&Param> = decl.params.iter().filter(|p| p.vouched()).collect();
    while !pending.is_empty() {
        let before = pending.len();
        let mut i = 0;
        while i < pending.len() {
            let p = pending[i];
            if keys_of(p).iter().all(|k| r.resolved.contains_key(*k)) {
                resolve_param(r, &m, p)?;
                pending.remove(i);
            } else {
                i += 1;
            }
        }
        if pending.len() == before {
            return Err(Deny::new(Stage::Provenance, "circular lookups").into());
        }
    }
    // the agent's own values, moved (the arguments are not read again)
    for p in decl.params.iter().filter(|p| !p.vouched()) {
        let Some(value) = r.args.remove(p.name.as_str()).and_then(plain) else {
            continue;
        };
        // a secret reaches the executor only: everything else sees its
        // commitment (the decision, the receipt, the operation hash)
        let value = match value {
            Value::String(v) if p.secret => {
                let c = crate::gateway::secret::commitment(r.tx, &m.id, &p.name, &v)?;
                r.secrets.insert(p.name.clone(), Value::String(v));
                Value::String(c)
            }
            other => other,
        };
        r.resolved.insert(p.name.clone(), value);
        r.origins
            .insert(p.name.clone(), Value::String("proposal".into()));
    }
    Ok(())
}

/// Evaluates, once for the decision, every selection of the mandate the
/// action reads (a parameter's source, a fact's `in mandate.S`): over the
/// registry as the gateway reads it now. A selection the mandate does not
/// carry is left out (it vouches for nothing; a fact reading it cannot be
/// established). One that cannot be evaluated, or returns nothing,
/// refuses, with the query shown.
fn select(r: &mut Run<'_>, m: &Mandate) -> StageResult {
    let Some(a) = r.action else {
        return Err(Deny::new(Stage::Provenance, "no action").into());
    };
    let regs = Registries {
        world: &r.gw.world,
        pack: &a.table.pack,
        owner: &m.owner,
    };
    for c in &a.pack.claims {
        let crate::ir::Type::Selection(registry) = &c.ty else {
            continue;
        };
        let Some(q) = m.claims.get(&c.name) else {
            continue;
        };
        if !reads_selection(&a.table.action, &c.name) {
            continue;
        }
        let Some(reg) = a.pack.registries.iter().find(|x| &x.name == registry) else {
            return Err(Deny::new(
                Stage::Provenance,
                format!("the selection `{}` names no registry of the pack", c.name),
            )
            .into());
        };
        // the query as the user signed it, for a refusal only
        let shown = || {
            let q = crate::canonical::value_to_jcs(q).unwrap_or_else(|_| q.to_string());
            crate::base::json::echo(&q)
        };
        let ev = match crate::gateway::selection::evaluate(&regs, r.tx, reg, q, r.now)? {
            Ok(ev) => ev,
            Err(why) => {
                return Err(Deny::new(
                    Stage::Provenance,
                    format!(
                        "the mandate's selection `{}` cannot be evaluated: {why} (query {})",
                        c.name,
                        shown()
                    ),
                )
                .into());
            }
        };
        if ev.result.is_empty() {
            return Err(Deny::new(
                Stage::Provenance,
                format!(
                    "no record of `{}` matches the mandate's `{}` (query {})",
                    ev.registry,
                    c.name,
                    shown()
                ),
            )
            .into());
        }
        r.selections.borrow_mut().insert(c.name.clone(), ev);
    }
    Ok(())
}

/// Whether the action reads the selection `claim`: as a source of one of
/// its parameters (or fields), or in a fact.
fn reads_selection(a: &crate::ir::Action, claim: &str) -> bool {
    fn expr(e: &crate::ir::Expr, claim: &str) -> bool {
        use crate::ir::Expr;
        match e {
            Expr::Selection { claim: c, .. } => c == claim,
            Expr::Lookup { key, .. } => expr(key, claim),
            Expr::List { items } => items.iter().any(|i| expr(i, claim)),
            Expr::Not { expr: x } => expr(x, claim),
            Expr::Binary { lhs, rhs, .. } => expr(lhs, claim) || expr(rhs, claim),
            _ => false,
        }
    }
    let source = |p: &Param| {
        p.walk().iter().any(|q| {
            q.sources
                .iter()
                .any(|s| matches!(s, Source::Claim { claim: c } if c == claim))
        })
    };
    a.params.iter().any(source) || a.facts.iter().any(|f| expr(&f.expr, claim))
}

/// An argument no source vouches for, as JSON (a reference only stands
/// for a critical value, so there is none here).
fn plain(a: Arg) -> Option<Value> {
    match a {
        Arg::Val(v) => Some(v),
        Arg::List(items) => Some(Value::Array(items.into_iter().filter_map(plain).collect())),
        Arg::Record(fields) => Some(Value::Object(
            fields
                .into_iter()
                .filter_map(|(k, a)| plain(a).map(|v| (k, v)))
                .collect(),
        )),
        Arg::Ref(_) => None,
    }
}

/// Parameters this one's lookups are keyed by (its fields' too).
fn keys_of(p: &Param) -> Vec<&str> {
    fn walk<'a>(k: &'a Key, out: &mut Vec<&'a str>) {
        match k {
            Key::Param { param } => out.push(param),
            Key::Lookup { lookup } => walk(&lookup.key, out),
            Key::Claim { .. } => {}
        }
    }
    // over the parameter and its fields without collecting them: this
    // runs for every critical parameter of every decision
    fn param<'a>(p: &'a Param, out: &mut Vec<&'a str>) {
        for s in &p.sources {
            if let Source::Lookup(l) = s {
                walk(&l.key, out);
            }
        }
        for f in &p.fields {
            param(f, out);
        }
    }
    let mut out = vec![];
    param(p, &mut out);
    out
}

fn resolve_param(r: &mut Run<'_>, m: &Mandate, p: &Param) -> StageResult {
    let arg = match r.args.remove(p.name.as_str()) {
        Some(a) => a,
        // an optional parameter left out has no value to vouch for
        None if p.optional => return Ok(()),
        None => Arg::List(vec![]),
    };
    if p.ty.is_record() {
        let (v, o) = resolve_fields(r, m, p, arg, &p.name)?;
        r.resolved.insert(p.name.clone(), v);
        r.origins.insert(p.name.clone(), o);
        return Ok(());
    }
    match arg {
        Arg::List(items) => {
            let mut vals = vec![];
            let mut origins = vec![];
            for it in &items {
                let (v, o) = resolve_one(r, m, p, &p.name, it)?;
                if !vals.contains(&v) || matches!(p.ty, crate::ir::Type::List(_)) {
                    vals.push(v);
                    origins.push(Value::String(o));
                }
            }
            r.resolved.insert(p.name.clone(), Value::Array(vals));
            r.origins.insert(p.name.clone(), Value::Array(origins));
        }
        one => {
            let (v, o) = resolve_one(r, m, p, &p.name, &one)?;
            r.resolved.insert(p.name.clone(), v);
            r.origins.insert(p.name.clone(), Value::String(o));
        }
    }
    Ok(())
}

/// A record argument (or a list of them) in its trusted form, and the
/// origins of its critical fields in the same shape: each critical field
/// of every element resolved against the field's sources (a single
/// element that none vouches for refuses the whole proposal), every other
/// field as the proposal gave it, normalised. `label` names the place in
/// a refusal (`edits[2].path`).
fn resolve_fields(
    r: &mut Run<'_>,
    m: &Mandate,
    p: &Param,
    arg: Arg,
    label: &str,
) -> Result<(Value, Value), Deny> {
    match arg {
        Arg::List(items) => {
            let set = matches!(p.ty, crate::ir::Type::Set(_));
            let (mut vals, mut origins) = (vec![], vec![]);
            // the trusted elements deduplicated by their canonical text
            // (objects equal whatever their fields' order): comparing every
            // pair would be quadratic in the size of the proposal
            let mut seen = std::collections::HashSet::new();
            for (i, it) in items.into_iter().enumerate() {
                let (v, o) = resolve_fields(r, m, p, it, &format!("{label}[{i}]"))?;
                let fresh = !set
                    || seen.insert(crate::canonical::value_to_jcs(&v).map_err(|e| {
                        Deny::new(Stage::Provenance, format!("`{label}[{i}]`: {e}"))
                    })?);
                if fresh {
                    vals.push(v);
                    origins.push(o);
                }
            }
            Ok((Value::Array(vals), Value::Array(origins)))
        }
        Arg::Record(fields) => {
            let (mut vals, mut origins) = (serde_json::Map::new(), serde_json::Map::new());
            for (k, a) in fields {
                let Some(fp) = p.field(&k) else {
                    return Err(Deny::new(
                        Stage::Provenance,
                        format!("`{label}.{k}` has no declaration"),
                    ));
                };
                let here = format!("{label}.{k}");
                if fp.ty.is_record() {
                    let (v, o) = resolve_fields(r, m, fp, a, &here)?;
                    vals.insert(k.clone(), v);
                    if fp.vouched() {
                        origins.insert(k, o);
                    }
                } else if fp.critical {
                    // vouched for under its place's name (the refusal says
                    // which element), with the field's sources
                    let (v, o) = match a {
                        Arg::List(items) => {
                            let (mut vs, mut os) = (vec![], vec![]);
                            for it in &items {
                                let (v, o) = resolve_one(r, m, fp, &here, it)?;
                                vs.push(v);
                                os.push(Value::String(o));
                            }
                            (Value::Array(vs), Value::Array(os))
                        }
                        one => {
                            let (v, o) = resolve_one(r, m, fp, &here, &one)?;
                            (v, Value::String(o))
                        }
                    };
                    vals.insert(k.clone(), v);
                    origins.insert(k, o);
                } else if let Some(v) = plain(a) {
                    vals.insert(k, v);
                }
            }
            Ok((Value::Object(vals), Value::Object(origins)))
        }
        Arg::Val(_) | Arg::Ref(_) => Err(Deny::new(
            Stage::Provenance,
            format!("`{label}` is not a record"),
        )),
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::String(s) => crate::base::json::echo(s),
        other => other.to_string(),
    }
}

/// The trusted value and its origin, or a DENY naming every source tried.
/// `label` is the value's place: the parameter's name, or a record
/// field's place (`edits[2].path`), which no mandate narrows.
fn resolve_one(
    r: &mut Run<'_>,
    m: &Mandate,
    p: &Param,
    label: &str,
    arg: &Arg,
) -> Result<(Value, String), Deny> {
    let Some(a) = r.action else {
        return Err(Deny::new(Stage::Provenance, "no action"));
    };
    let regs = Registries {
        world: &r.gw.world,
        pack: &a.table.pack,
        owner: &m.owner,
    };
    let store = |e: crate::store::StoreError| Deny::new(Stage::Provenance, e.to_string());
    // the sources this mandate lets vouch for the value, in the pack's order
    let allowed = crate::gateway::narrowing::allowed(&m.sources, &a.table.action.name, label);
    let sources: Vec<&Source> = match allowed {
        None => p.sources.iter().collect(),
        Some(keep) => p
            .sources
            .iter()
            .filter(|s| keep.iter().any(|k| *k == s.to_string()))
            .collect(),
    };
    // a reference names a record of one of the registry sources
    let value = match arg {
        Arg::Val(v) => v.clone(),
        Arg::Ref(id) => {
            let mut found = None;
            for s in &sources {
                if let Source::Registry { registry } = s
                    && let Some(reg) = a.pack.registries.iter().find(|x| &x.name == registry)
                    && let Some(v) = regs.by_ref(r.tx, reg, id).map_err(store)?
                {
                    found = Some((Value::String(v), format!("registry.{registry}")));
                    break;
                }
            }
            match found {
                Some((v, origin)) => {
                    return Ok((
                        v,
                        format!("{origin} (ref `{}`)", crate::base::json::echo(id)),
                    ));
                }
                None => {
                    return Err(Deny::new(
                        Stage::Provenance,
                        format!(
                            "`{}`: the reference `{}` names none of your records",
                            label,
                            crate::base::json::echo(id)
                        ),
                    )
                    .hint(p.hint.clone()));
                }
            }
        }
        Arg::List(_) | Arg::Record(_) => {
            return Err(Deny::new(Stage::Provenance, "nested value"));
        }
    };
    for s in &sources {
        if let Some(trusted) = vouched_by(r, m, p, s, &value).map_err(store)? {
            return Ok((trusted, s.name()));
        }
    }
    let tried: Vec<String> = sources.iter().map(|s| s.to_string()).collect();
    if allowed.is_some() {
        return Err(narrowed_deny(p, label, &value, &tried));
    }
    Err(Deny::new(
        Stage::Provenance,
        format!(
            "`{}` `{}` is not from a trusted source: not in {}{}",
            label,
            show(&value),
            tried.join(", nor in "),
            owner_unknown(r, m, &sources)
        ),
    )
    .hint(p.hint.clone()))
}

/// Words for a refusal whose owner's registries were tried while the world
/// holds no record of that owner at all: the mandate names the owner,
/// and the likely mistake is a token issued without `--owner`.
fn owner_unknown(r: &Run<'_>, m: &Mandate, sources: &[&Source]) -> String {
    let Some(a) = r.action else {
        return String::new();
    };
    let owned = sources.iter().any(|s| {
        let registry = match s {
            Source::Registry { registry } => registry,
            Source::Lookup(l) => &l.registry,
            Source::Claim { .. } => return false,
        };
        a.pack
            .registries
            .iter()
            .any(|x| &x.name == registry && !x.global)
    });
    if !owned || r.gw.world.may_hold_records_of(&a.table.pack, &m.owner) {
        return String::new();
    }
    format!(
        " (the mandate's owner `{}` has no records in this world's registries of `{}`: was the token issued for another `--owner`?)",
        m.owner, a.table.pack
    )
}

/// The trusted spelling `s` vouches for `value` with, if it does: a claim
/// or a registry member it equals under the parameter's normaliser, the
/// field of the record a lookup reads; a path by a trusted path it is, or
/// lies inside of (the value is normalised, so it names no `..` and each
/// parent is a folder it lies in).
pub(super) fn vouched_by(
    r: &mut Run<'_>,
    m: &Mandate,
    p: &Param,
    s: &Source,
    value: &Value,
) -> Result<Option<Value>, StoreError> {
    if let (crate::ir::Type::Path, Some(text)) = (p.ty.element(), value.as_str()) {
        for dir in normalize::path_and_parents(text) {
            if vouches(r, m, p, s, &Value::String(dir))?.is_some() {
                return Ok(Some(value.clone()));
            }
        }
        return Ok(None);
    }
    vouches(r, m, p, s, value)
}

fn vouches(
    r: &mut Run<'_>,
    m: &Mandate,
    p: &Param,
    s: &Source,
    value: &Value,
) -> Result<Option<Value>, StoreError> {
    let norm = p.normalizer();
    let Some(a) = r.action else {
        return Ok(None);
    };
    let regs = Registries {
        world: &r.gw.world,
        pack: &a.table.pack,
        owner: &m.owner,
    };
    Ok(match s {
        // a selection vouches for a key it returned for this decision
        Source::Claim { claim } if r.selections.borrow().contains_key(claim) => {
            let mut sel = r.selections.borrow_mut();
            sel.get_mut(claim).and_then(|ev| {
                // keys are text: a number key compares as its text (as a
                // registry membership does) and stays the value given
                let hit = match value {
                    Value::String(_) => {
                        let keys =
                            Value::Array(ev.result.iter().cloned().map(Value::String).collect());
                        matches(&keys, value, norm)?
                    }
                    other => {
                        let text = other.to_string();
                        ev.result.contains(&text).then(|| other.clone())?
                    }
                };
                ev.picked = Some(match &hit {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                Some(hit)
            })
        }
        // a selection not evaluated (the mandate does not carry it)
        // vouches for nothing
        Source::Claim { claim }
            if a.pack
                .claims
                .iter()
                .any(|c| &c.name == claim && matches!(c.ty, crate::ir::Type::Selection(_))) =>
        {
            None
        }
        Source::Claim { claim } => m.claims.get(claim).and_then(|c| matches(c, value, norm)),
        Source::Registry { registry } => {
            match (
                a.pack.registries.iter().find(|x| &x.name == registry),
                value.as_str(),
            ) {
                (Some(reg), Some(text)) => regs.member(r.tx, reg, text, norm)?.map(Value::String),
                (Some(reg), None) => regs
                    .member(r.tx, reg, &value.to_string(), None)?
                    .map(|_| value.clone()),
                (None, _) => None,
            }
        }
        Source::Lookup(l) => lookup(r, m, &regs, l)?.and_then(|field| matches(&field, value, norm)),
    })
}

/// The refusal of a value under a mandate that narrows the parameter's
/// sources: the value may well be in a source the pack declares, but not
/// in one this mandate allows; the user can name it in the request.
fn narrowed_deny(p: &Param, label: &str, value: &Value, tried: &[String]) -> Deny {
    let hint = if tried.iter().any(|s| s.starts_with("mandate.")) {
        Some(format!(
            "this mandate takes `{}` only from {}: the user can name the value in the request",
            label,
            tried.join(", ")
        ))
    } else {
        p.hint.clone()
    };
    Deny::new(
        Stage::Provenance,
        format!(
            "`{}` `{}` is not from a source this mandate allows: not in {}",
            label,
            show(value),
            tried.join(", nor in ")
        ),
    )
    .hint(hint)
}

/// The trusted value `v` equals (or, for a collection, the member of it
/// that `v` equals), comparing strings under the normaliser.
fn matches(trusted: &Value, v: &Value, norm: Option<Normalizer>) -> Option<Value> {
    match trusted {
        Value::Array(items) => items.iter().find_map(|t| matches(t, v, norm)),
        Value::String(t) => {
            let tn = match norm {
                Some(n) => normalize::apply(n, t).ok()?,
                None => t.clone(),
            };
            (v.as_str() == Some(tn.as_str())).then(|| Value::String(t.clone()))
        }
        other => (other == v).then(|| other.clone()),
    }
}

/// The value of `registry.R[KEY].FIELD` for this owner, if the record exists.
fn lookup(
    r: &mut Run<'_>,
    m: &Mandate,
    regs: &Registries<'_>,
    l: &Lookup,
) -> Result<Option<Value>, crate::store::StoreError> {
    let key = match &l.key {
        Key::Param { param } => r.resolved.get(param).cloned(),
        Key::Claim { claim } => m.claims.get(claim).cloned(),
        Key::Lookup { lookup: inner } => lookup(r, m, regs, inner)?,
    };
    let Some(key) = key else { return Ok(None) };
    let key = match key {
        Value::String(s) => s,
        other => other.to_string(),
    };
    let Some(a) = r.action else { return Ok(None) };
    let Some(reg) = a.pack.registries.iter().find(|x| x.name == l.registry) else {
        return Ok(None);
    };
    Ok(regs
        .record(r.tx, reg, &key)?
        .and_then(|rec| rec.get(&l.field).cloned()))
}

#[cfg(test)]
#[path = "tests/provenance.rs"]
mod tests;
