//! A counterexample as a scenario file to add to the pack (docs/scenarios.md):
//! the proposal in the pack's units (money as `1000.01`, dates as
//! `2026-12-01`), a mandate that vouches for its critical values, a value
//! of the pack's own registry data wherever the counterexample needs a
//! member (a sanctioned payee), and the decision the guarantee demands. On
//! the pack as it is the scenario fails, with the decision the solver found;
//! once the pack keeps the guarantee it passes.
//!
//! What the world must hold that a scenario cannot set (a fact over a
//! record, the provenance of a value) is said in the test's `description`.

use super::PackGuarantees;
use super::values::{DEFAULT_CLOCK, MAX_MINOR, as_given, canonical, plausible};
use super::world::Records;
use crate::base::json::format_time;
use crate::base::money::Money;
use crate::bundle::format::{CTX_APPROVAL_LEVEL, CTX_NOW, TableAction};
use crate::ir::{self, BinOp, Expr, Source, Type};
use crate::mutate::equiv::Counterexample;
use serde_json::{Map, Value, json};

/// The pack's registry data: `registries/NAME.json`, owner to values or
/// records, as `World::load_registries` reads it.
struct Data<'a> {
    p: &'a PackGuarantees<'a>,
}

impl Data<'_> {
    fn file(&self, registry: &str) -> Option<Map<String, Value>> {
        let dir = self.p.dir.as_ref()?;
        let v =
            crate::base::json::read_file(&dir.join("registries").join(format!("{registry}.json")))
                .ok()?;
        v.as_object().cloned()
    }

    /// Every registry file of the pack: name to owner to records.
    fn all(&self) -> Map<String, Value> {
        self.p
            .pack
            .registries
            .iter()
            .filter_map(|r| Some((r.name.clone(), Value::Object(self.file(&r.name)?))))
            .collect()
    }

    /// A member of a registry (a value, or a record's key), with its owner.
    fn member(&self, registry: &str) -> Option<(String, String)> {
        let f = self.file(registry)?;
        for (owner, recs) in f {
            let first = match &recs {
                Value::Array(a) => a.first().and_then(Value::as_str).map(str::to_string),
                Value::Object(o) => o.keys().next().cloned(),
                _ => None,
            };
            if let Some(v) = first {
                return Some((owner, v));
            }
        }
        None
    }

    fn members(&self, registry: &str) -> Vec<String> {
        let Some(f) = self.file(registry) else {
            return vec![];
        };
        f.values()
            .flat_map(|recs| match recs {
                Value::Array(a) => a
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect(),
                Value::Object(o) => o.keys().cloned().collect::<Vec<_>>(),
                _ => vec![],
            })
            .collect()
    }

    /// A member of one of `prm`'s source registries that `registry` holds
    /// (`inside`) or does not, with its owner: a value the parameter's own
    /// source vouches for and a membership read says yes or no to.
    fn source_member(
        &self,
        prm: &ir::Param,
        registry: &str,
        inside: bool,
    ) -> Option<(String, String)> {
        let held = self.members(registry);
        prm.sources.iter().find_map(|s| match s {
            Source::Registry { registry } => {
                let f = self.file(registry)?;
                f.into_iter().find_map(|(owner, recs)| {
                    let values: Vec<String> = match recs {
                        Value::Array(a) => a
                            .iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect(),
                        Value::Object(o) => o.keys().cloned().collect(),
                        _ => vec![],
                    };
                    values
                        .into_iter()
                        .find(|v| held.contains(v) == inside)
                        .map(|v| (owner.clone(), v))
                })
            }
            _ => None,
        })
    }

    /// Some owner of the pack's records, for a mandate's user.
    fn some_owner(&self) -> Option<String> {
        for r in &self.p.pack.registries {
            if r.global {
                continue;
            }
            if let Some(f) = self.file(&r.name)
                && let Some(o) = f.keys().next()
            {
                return Some(o.clone());
            }
        }
        None
    }
}

/// `` `edits.path` must come from registry.workspace `` for each critical
/// field of a record (at any depth), under its place's name.
fn critical_fields(place: &str, fields: &[ir::Param], notes: &mut Vec<String>) {
    for f in fields {
        let here = format!("{place}.{}", f.name);
        if f.critical {
            notes.push(must_come_from(&here, f));
        }
        critical_fields(&here, &f.fields, notes);
    }
}

/// `` `PLACE` must come from registry.a | mandate.b ``.
fn must_come_from(place: &str, p: &ir::Param) -> String {
    let from: Vec<String> = p
        .sources
        .iter()
        .map(crate::mutate::equiv::source_name)
        .collect();
    format!("`{place}` must come from {}", from.join(" | "))
}

/// A registry member as the parameter takes it: one member of a list
/// or set parameter is a list of one.
fn member_value(ty: &Type, m: String) -> Value {
    match ty {
        Type::List(_) | Type::Set(_) => Value::Array(vec![Value::String(m)]),
        _ => Value::String(m),
    }
}

/// The value made to pass the parameter's length and item-count
/// validators, which the solver does not model: a text padded or cut, a
/// list grown by repeating its first item or cut.
fn fit(prm: &ir::Param, value: Value) -> Value {
    let mut value = value;
    for v in &prm.validators {
        value = match (v, value) {
            (ir::Validator::MinLen { len }, Value::String(s)) => {
                let missing = (*len as usize).saturating_sub(s.chars().count());
                Value::String(format!("{s}{}", "x".repeat(missing)))
            }
            (ir::Validator::MaxLen { len }, Value::String(s)) => {
                Value::String(s.chars().take(*len as usize).collect())
            }
            (ir::Validator::NonEmpty, Value::String(s)) if s.is_empty() => {
                Value::String("x".into())
            }
            (ir::Validator::MinItems { count }, Value::Array(mut xs)) => {
                if let Some(first) = xs.first().cloned() {
                    while xs.len() < *count as usize {
                        xs.push(first.clone());
                    }
                }
                Value::Array(xs)
            }
            (ir::Validator::MaxItems { count }, Value::Array(mut xs)) => {
                xs.truncate(*count as usize);
                Value::Array(xs)
            }
            (_, other) => other,
        };
    }
    value
}

/// The counterexample's times (its date and timestamp parameters and its
/// clock) moved together by one offset when any lies outside what a
/// scenario can write, so that their order and distances, which the rules
/// compare, survive (`end < start` stays so); when they span more than the
/// writable century, a day apart each in the same order (distances lost).
fn shift_times(a: &ir::Action, ctx: &mut Map<String, Value>) {
    let mut names: Vec<String> = a
        .params
        .iter()
        .filter(|p| matches!(p.ty, Type::Date | Type::Timestamp))
        .map(|p| p.name.clone())
        .collect();
    names.push(CTX_NOW.to_string());
    let times: Vec<i64> = names
        .iter()
        .filter_map(|n| ctx.get(n).and_then(Value::as_i64))
        .collect();
    let (Some(&lo), Some(&hi)) = (times.iter().min(), times.iter().max()) else {
        return;
    };
    if times.iter().all(|t| plausible(*t)) {
        return;
    }
    let offset = DEFAULT_CLOCK.saturating_sub(lo);
    let together = plausible(hi.saturating_add(offset));
    // too far apart to move together: a day apart each, in order
    let mut distinct = times.clone();
    distinct.sort_unstable();
    distinct.dedup();
    let moved = |t: i64| -> i64 {
        if together {
            t.saturating_add(offset)
        } else {
            let rank = distinct.iter().position(|x| *x == t).unwrap_or(0) as i64;
            DEFAULT_CLOCK + rank * 86_400
        }
    };
    for n in &names {
        if let Some(t) = ctx.get(n).and_then(Value::as_i64) {
            ctx.insert(n.clone(), Value::from(moved(t)));
        }
    }
}

/// `PARAM in registry.R` (a fact's or a guarantee's membership read).
fn membership(e: &Expr) -> Option<(&str, &str)> {
    match e {
        Expr::Binary {
            op: BinOp::In,
            lhs,
            rhs,
        } => match (&**lhs, &**rhs) {
            (Expr::Param { name }, Expr::Registry { name: r }) => Some((name, r)),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn scenario(
    p: &PackGuarantees<'_>,
    action: &TableAction,
    g: &ir::Guarantee,
    example: &Counterexample,
    decision: &str,
) -> Value {
    let data = Data { p };
    let a = &action.action;
    let mut ctx = example.context.as_object().cloned().unwrap_or_default();
    shift_times(a, &mut ctx);
    let mut owner: Option<String> = None;
    let mut args = Map::new();
    let mut claims = Map::new();
    let mut notes: Vec<String> = vec![];
    let mut records = Records {
        pack: p.pack,
        data: data.all(),
        added: Map::new(),
        owner: data.some_owner().unwrap_or_else(|| "user".into()),
    };
    // membership the counterexample needs: a member of the pack's data, or
    // a value that is none
    let mut wanted: Vec<(&str, &str, bool)> = vec![];
    for f in &a.facts {
        if let (Some((param, reg)), Some(Value::Bool(b))) = (membership(&f.expr), ctx.get(&f.name))
        {
            wanted.push((param, reg, *b));
        }
    }
    for prm in &a.params {
        let Some(v) = ctx.get(&prm.name) else {
            continue;
        };
        let mut value = wanted_value(&data, prm, v, &wanted, &mut owner, &mut notes);
        if value.is_none() && prm.critical {
            value = trusted_value(&data, prm, &mut owner);
        }
        let value = fit(
            prm,
            value.unwrap_or_else(|| as_given(&prm.ty, &spendable(a, prm, v))),
        );
        if let Some(o) = &owner {
            records.owner = o.clone();
        }
        let looked_up =
            prm.critical && written_where_looked_up(&mut records, prm, &value, &args, &claims);
        if prm.critical {
            vouch(&data, prm, &value, looked_up, &mut claims, &mut notes);
        }
        if !prm.critical {
            // a record's critical fields: every element's from its sources
            critical_fields(&prm.name, &prm.fields, &mut notes);
        }
        // a secret is proposed like any value (the scenario runner keeps
        // it out of receipts, as the gateway does)
        args.insert(prm.name.clone(), value);
    }
    // the pack's own facts the counterexample sets, other than membership
    for f in &a.facts {
        if membership(&f.expr).is_some() {
            continue;
        }
        if let Some(v) = ctx.get(&f.name)
            && !records.make_fact(&f.expr, v, &args, &mut claims)
        {
            notes.push(format!("fact `{}` = {v}", f.name));
        }
    }
    let user = owner
        .or_else(|| data.some_owner())
        .unwrap_or_else(|| "user".into());
    let now = ctx
        .get(CTX_NOW)
        .and_then(Value::as_i64)
        .filter(|s| plausible(*s))
        .unwrap_or(DEFAULT_CLOCK);
    let mut mandate = json!({
        "user": user,
        "scopes": [a.scope],
        "claims": claims,
        "calls": 10,
    });
    if let Some(b) = &a.budget
        && let Some(Value::Number(n)) = ctx.get(b)
        && let Some(m) = n.as_i64()
    {
        mandate["budget"] = Value::String(Money::from_minor(m.clamp(0, MAX_MINOR)).to_string());
    }
    let test = scenario_test(a, g, &ctx, decision, &user, args, &notes);
    let mut file = json!({
        "pack": p.pack.name,
        "clock": format_time(now),
        "mandates": {"guarantee": mandate},
        "tests": [test],
    });
    if !records.added.is_empty() {
        file["registries"] = Value::Object(records.added);
    }
    file
}

/// `m`, a member of `registry.reg`, as parameter `prm` takes it: in the
/// registry's canonical spelling.
fn registry_member(data: &Data<'_>, prm: &ir::Param, reg: &str, m: String) -> Value {
    let ty = data
        .p
        .pack
        .registry(reg)
        .map(|x| x.member_type().clone())
        .unwrap_or(Type::Text);
    member_value(&prm.ty, canonical(&ty, &m).unwrap_or(m))
}

/// The value of `prm` that the memberships the counterexample wants
/// (`wanted`: parameter, registry, member or not) give it: a member of the
/// pack's data (a critical one from its own source first), a critical
/// value from its own source that the registry does not hold, or the
/// counterexample's value `v`; `None` when no membership names `prm`.
/// What the world must also give goes to `notes`.
fn wanted_value(
    data: &Data<'_>,
    prm: &ir::Param,
    v: &Value,
    wanted: &[(&str, &str, bool)],
    owner: &mut Option<String>,
    notes: &mut Vec<String>,
) -> Option<Value> {
    let mut value = None;
    for (param, reg, member) in wanted {
        if *param != prm.name {
            continue;
        }
        let members = data.members(reg);
        if *member {
            let found = match prm.critical {
                true => data.source_member(prm, reg, true),
                false => None,
            };
            if let Some((o, m)) = found.or_else(|| data.member(reg)) {
                value = Some(registry_member(data, prm, reg, m));
                if o != "*" {
                    owner.get_or_insert(o);
                }
            } else {
                notes.push(format!("`{}` must be in `registry.{reg}`", prm.name));
            }
        } else if let Some((o, m)) = prm
            .critical
            .then(|| data.source_member(prm, reg, false))
            .flatten()
        {
            // a critical value from its own source that the
            // membership's registry does not hold
            value = Some(registry_member(data, prm, reg, m));
            if o != "*" {
                owner.get_or_insert(o);
            }
        } else {
            let v = as_given(&prm.ty, v);
            if v.as_str().is_some_and(|s| members.iter().any(|m| m == s)) {
                notes.push(format!("`{}` must not be in `registry.{reg}`", prm.name));
            }
            value = Some(v);
        }
    }
    value
}

/// A critical value from its trusted source: a registry's member from the
/// pack's data (else `None`: the mandate claim that vouches, [`vouch`]).
fn trusted_value(data: &Data<'_>, prm: &ir::Param, owner: &mut Option<String>) -> Option<Value> {
    for s in &prm.sources {
        match s {
            Source::Registry { registry } => {
                if let Some((o, m)) = data.member(registry) {
                    let value = registry_member(data, prm, registry, m);
                    if o != "*" {
                        owner.get_or_insert(o);
                    }
                    return Some(value);
                }
            }
            Source::Claim { .. } | Source::Lookup(_) => {}
        }
    }
    None
}

/// Who vouches for the critical `value` of `prm`: a registry of the pack's
/// data holding it (or the record it was `looked_up` in), else the mandate
/// claim among its sources, which is given the value (added to it, for a
/// collection); with neither, what the world must give goes to `notes`.
fn vouch(
    data: &Data<'_>,
    prm: &ir::Param,
    value: &Value,
    looked_up: bool,
    claims: &mut Map<String, Value>,
    notes: &mut Vec<String>,
) {
    let from_registry = looked_up
        || prm.sources.iter().any(|s| match s {
            Source::Registry { registry } => value.as_str().is_some_and(|v| {
                data.members(registry)
                    .iter()
                    .any(|m| canonical(&prm.ty, m).as_deref() == Some(v) || m == v)
            }),
            _ => false,
        });
    let claim = prm.sources.iter().find_map(|s| match s {
        Source::Claim { claim } => Some(claim.clone()),
        _ => None,
    });
    match claim {
        Some(c) if !from_registry => {
            let collection = data.p.pack.claim(&c).is_some_and(|x| x.ty.is_collection());
            if collection {
                let e = claims.entry(c).or_insert_with(|| Value::Array(vec![]));
                if let Value::Array(xs) = e {
                    match value {
                        Value::Array(items) => xs.extend(items.iter().cloned()),
                        one => xs.push(one.clone()),
                    }
                }
            } else {
                claims.insert(c, value.clone());
            }
        }
        Some(_) => {}
        None if !from_registry => notes.push(must_come_from(&prm.name, prm)),
        None => {}
    }
}

/// The scenario's one test: the proposal, what the guarantee expects of
/// it (and the user's approval, when level 1 is what lets it through), and
/// how it was found, with what the world must also give (`notes`).
fn scenario_test(
    a: &ir::Action,
    g: &ir::Guarantee,
    ctx: &Map<String, Value>,
    decision: &str,
    user: &str,
    args: Map<String, Value>,
    notes: &[String],
) -> Value {
    let expect = match g.level {
        None => json!({"decision": "DENY", "stage": "policy"}),
        Some(n) => json!({"decision": "PENDING", "level": n}),
    };
    let mut test = json!({
        "name": format!("guarantee: {} ({})", g.reason, a.name),
        "mandate": "guarantee",
        "proposal": {"action": a.name, "args": args},
    });
    // allowed at level 1 only: the user's approval is what lets it through
    if g.level.is_none()
        && ctx.get(CTX_APPROVAL_LEVEL).and_then(Value::as_i64) == Some(1)
        && decision == "PENDING level 1"
    {
        test["approvals"] = json!([user]);
    }
    test["expect"] = expect;
    let mut description = format!(
        "found by the proof of the guarantee: the pack decides {decision} where `{}` says {}",
        g.reason,
        match g.level {
            None => "never".to_string(),
            Some(n) => format!("level {n} is needed"),
        }
    );
    if !notes.is_empty() {
        description.push_str(&format!("; the world must also give: {}", notes.join(", ")));
    }
    test["description"] = Value::String(description);
    test
}

/// The amount an action spends is never negative: the budget stage
/// refuses one before the policy decides.
fn spendable(a: &ir::Action, prm: &ir::Param, v: &Value) -> Value {
    match v.as_i64() {
        Some(m) if a.budget.as_deref() == Some(prm.name.as_str()) => Value::from(m.max(0)),
        _ => v.clone(),
    }
}

/// A value whose trusted source is a lookup (`registry.R[KEY].FIELD`),
/// written into that record under the key the proposal uses; whether it
/// was.
fn written_where_looked_up(
    records: &mut Records<'_>,
    prm: &ir::Param,
    value: &Value,
    args: &Map<String, Value>,
    claims: &Map<String, Value>,
) -> bool {
    for s in &prm.sources {
        let Source::Lookup(l) = s else { continue };
        let Some(key) = records.source_key(&l.key, args, claims) else {
            continue;
        };
        records.set_field(&l.registry, &key, &l.field, value.clone());
        return true;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    /// A counterexample over a list of records: its critical fields are
    /// named as what the world must give (every element's from its
    /// sources), and the solver's record is kept as the tool sends it.
    #[test]
    fn a_records_critical_fields_are_what_the_world_must_give() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mutate/records");
        let checked = crate::check::check_path(&dir);
        let pack = checked.pack.expect("the records fixture checks");
        let report = crate::compile::build(&[PathBuf::from(&dir)]);
        let bundle = report.bundle.expect("the records fixture builds");
        let action = bundle.table.action("memory.relate").expect("memory.relate");
        let g = ir::Guarantee {
            reason: "no secret notes".into(),
            level: None,
            scope: "memory.relate".into(),
            covers: vec![],
            line: 1,
        };
        let example = Counterexample {
            principal: String::new(),
            action: String::new(),
            resource: String::new(),
            context: json!({
                "relations": [{"from": "x", "to": "y", "relationType": "knows"}],
                "note": "secret",
            }),
        };
        let p = PackGuarantees {
            pack: &pack,
            file: String::new(),
            source: String::new(),
            dir: Some(dir),
        };
        let s = scenario(&p, action, &g, &example, "ALLOW");
        let test = &s["tests"][0];
        assert_eq!(
            test["proposal"]["args"]["relations"],
            json!([{"from": "x", "to": "y", "relationType": "knows"}])
        );
        let d = test["description"].as_str().unwrap();
        assert!(
            d.contains("`relations.from` must come from registry.entities")
                && d.contains("`relations.to` must come from registry.entities"),
            "{d}"
        );
        assert!(!d.contains("relationType"), "{d}");
    }
}
