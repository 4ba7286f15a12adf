//! Stage 2, contract: the proposal is exactly `{"action", "args"}`; the
//! action is one of the mandate's pack; the arguments are exactly the
//! action's parameters (no unknown key, none missing unless it has a
//! default), each of its type, normalised, and within its validators.

use super::{Arg, Run, StageResult};
use crate::base::Money;
use crate::base::json::{kind, parse_time};
use crate::gateway::{Deny, Stage, normalize};
use crate::ir::{self, Param, Source, Type, Validator};
use serde_json::Value;

/// Longest text accepted in any argument, in characters.
const MAX_TEXT: usize = 100_000;
/// Most elements in a list argument.
const MAX_ITEMS: usize = 1_000;

fn deny(reason: String) -> Deny {
    Deny::new(Stage::Contract, reason)
}

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let Value::Object(obj) = &r.input.proposal else {
        return Err(deny(format!(
            "a proposal is an object `{{\"action\": ..., \"args\": {{...}}}}`, not {}",
            kind(&r.input.proposal)
        ))
        .into());
    };
    if let Some(k) = obj.keys().find(|k| *k != "action" && *k != "args") {
        return Err(deny(format!(
            "unexpected key `{k}` in the proposal: only `action` and `args` are accepted"
        ))
        .into());
    }
    let Some(Value::String(name)) = obj.get("action") else {
        return Err(deny("the proposal has no `action` string".into()).into());
    };
    let Some(Value::Object(args)) = obj.get("args") else {
        return Err(deny("the proposal has no `args` object".into()).into());
    };
    // an integer no hash can hold exactly is refused wherever it is, before
    // anything reads it (it would otherwise reach the operation hash)
    crate::canonical::check_exact(&r.input.proposal, "$").map_err(|e| deny(e.to_string()))?;
    let pack = r.mandate.as_ref().map(|m| m.pack.as_str()).unwrap_or("");
    let action = match r.gw.actions.get(name.as_str()) {
        Some(a) if a.table.pack == pack => a,
        _ => {
            return Err(deny(format!(
                "unknown action `{}`",
                crate::base::json::echo(name)
            ))
            .into());
        }
    };
    r.action = Some(action);
    let decl = &action.table.action;
    // the action known, its maps are sized once: a value and an origin
    // per parameter at most (provenance), every fact (policy)
    r.resolved = serde_json::Map::with_capacity(decl.params.len());
    r.origins = serde_json::Map::with_capacity(decl.params.len());
    r.facts = serde_json::Map::with_capacity(decl.facts.len());
    if let Some(k) = args.keys().find(|k| decl.param(k).is_none()) {
        return Err(deny(format!(
            "unknown parameter `{}` for `{name}`",
            crate::base::json::echo(k)
        ))
        .into());
    }
    for p in &decl.params {
        let arg = match args.get(&p.name) {
            None => match &p.default {
                // a collection's default is a list of values, like a given list
                Some(ir::Value::List(items)) => {
                    Arg::List(items.iter().map(|i| Arg::Val(i.to_json())).collect())
                }
                Some(d) => Arg::Val(d.to_json()),
                // left out, it stays out: not resolved, not sent
                None if p.optional => continue,
                None => {
                    return Err(deny(format!("missing parameter `{}`", p.name)).into());
                }
            },
            Some(v) => parse_arg(p, v, &r.gw.regexes).map_err(|e| deny(refusal(p, e)))?,
        };
        validate(p, &arg, &r.gw.regexes).map_err(|e| deny(refusal(p, e)))?;
        r.args.insert(p.name.as_str(), arg);
    }
    Ok(())
}

/// Why a value is refused, naming the parameter; a secret's value is
/// never echoed (a `pattern` refusal would show it).
fn refusal(p: &Param, e: String) -> String {
    // inside a record: `edits[2].newText`: why
    if e.starts_with(['[', '.', ':']) {
        return match e.split_once(": ") {
            Some((path, why)) => format!("`{}{path}`: {why}", p.name),
            None => format!("`{}`: {e}", p.name),
        };
    }
    if p.secret && !e.starts_with("longer than") && !e.starts_with("shorter than") {
        format!(
            "`{}`: the value does not meet the parameter's rules",
            p.name
        )
    } else {
        format!("`{}`: {e}", p.name)
    }
}

type Regexes = std::collections::HashMap<String, regex::Regex>;

/// `prefix` (`[2]`, `.path`) before an error from inside a record.
fn at(prefix: &str, e: String) -> String {
    if e.starts_with(['[', '.', ':']) {
        format!("{prefix}{e}")
    } else {
        format!("{prefix}: {e}")
    }
}

fn parse_arg(p: &Param, v: &Value, rx: &Regexes) -> Result<Arg, String> {
    match &p.ty {
        Type::List(el) | Type::Set(el) => {
            let Value::Array(items) = v else {
                return Err(format!("expected a list, found {}", kind(v)));
            };
            if items.len() > MAX_ITEMS {
                return Err(format!("more than {MAX_ITEMS} elements"));
            }
            let mut out: Vec<Arg> = vec![];
            // a set of records is deduplicated by each element's text:
            // comparing every pair of near-equal objects is quadratic in
            // the size of the proposal
            let mut seen = std::collections::HashSet::new();
            for (i, it) in items.iter().enumerate() {
                let a = parse_value(p, el, it, rx).map_err(|e| match el.as_ref() {
                    Type::Record(_) => at(&format!("[{i}]"), e),
                    _ => e,
                })?;
                let fresh = match &p.ty {
                    Type::List(_) => true,
                    _ if el.is_record() => seen.insert(arg_key(&a)),
                    _ => !out.contains(&a),
                };
                if fresh {
                    out.push(a);
                }
            }
            Ok(Arg::List(out))
        }
        t => parse_value(p, t, v, rx),
    }
}

/// An argument as text, equal exactly when the arguments are (a record's
/// fields in their order, as [`Arg`]'s equality has them).
fn arg_key(a: &Arg) -> String {
    fn write(a: &Arg, out: &mut String) {
        match a {
            Arg::Val(v) => out.push_str(&v.to_string()),
            Arg::Ref(id) => {
                out.push('#');
                crate::canonical::write_string(id, out);
            }
            Arg::List(items) => {
                out.push('[');
                for (i, it) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(it, out);
                }
                out.push(']');
            }
            Arg::Record(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    crate::canonical::write_string(k, out);
                    out.push(':');
                    write(v, out);
                }
                out.push('}');
            }
        }
    }
    let mut out = String::new();
    write(a, &mut out);
    out
}

/// One value of the parameter's type (an element of a list of it).
fn parse_value(p: &Param, ty: &Type, v: &Value, rx: &Regexes) -> Result<Arg, String> {
    match ty {
        Type::Record(fields) => parse_record(p, fields, v, rx),
        t => parse_scalar(p, t, v),
    }
}

/// An object with exactly the record's fields (an optional one may be
/// absent), each parsed, normalised and validated as a parameter is. An
/// error starts with the field's path (`.path: ...`), which the caller
/// puts after the parameter's name.
fn parse_record(
    p: &Param,
    fields: &[ir::FieldType],
    v: &Value,
    rx: &Regexes,
) -> Result<Arg, String> {
    let Value::Object(obj) = v else {
        return Err(format!(": expected an object, found {}", kind(v)));
    };
    if let Some(k) = obj.keys().find(|k| !fields.iter().any(|f| &f.name == *k)) {
        return Err(format!(
            ": unknown field `{}` (the fields are {})",
            crate::base::json::echo(k),
            fields
                .iter()
                .map(|f| format!("`{}`", f.name))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if let Some(f) = fields
        .iter()
        .find(|f| !f.optional && !obj.contains_key(&f.name))
    {
        return Err(format!(": missing field `{}`", f.name));
    }
    let mut out = Vec::with_capacity(obj.len());
    for (k, fv) in obj {
        // the table's invariants keep one declaration per field; fail
        // closed if it is missing all the same
        let Some(fp) = p.field(k) else {
            return Err(format!(": field `{k}` has no declaration"));
        };
        let nested = |e: String| at(&format!(".{k}"), e);
        let a = parse_arg(fp, fv, rx).map_err(nested)?;
        validate(fp, &a, rx).map_err(nested)?;
        out.push((k.clone(), a));
    }
    Ok(Arg::Record(out))
}

/// Whether a `{"ref": id}` may stand for a value of this parameter: only a
/// critical one with a registry source, resolved by the gateway.
fn accepts_ref(p: &Param) -> bool {
    p.critical
        && p.sources
            .iter()
            .any(|s| matches!(s, Source::Registry { .. }))
}

fn parse_scalar(p: &Param, ty: &Type, v: &Value) -> Result<Arg, String> {
    if let Value::Object(o) = v {
        return match (o.len(), o.get("ref")) {
            (1, Some(Value::String(id))) if accepts_ref(p) => {
                storable(id)?;
                Ok(Arg::Ref(id.clone()))
            }
            (1, Some(_)) if accepts_ref(p) => Err("a `ref` is a string id".into()),
            _ if accepts_ref(p) => Err("an object here must be exactly `{\"ref\": ID}`".into()),
            _ => Err(format!("expected {ty}, found an object")),
        };
    }
    let val = match ty {
        Type::Money => Value::from(Money::from_json(v)?.minor()),
        Type::Int => match v.as_i64() {
            Some(i) if v.is_i64() || v.is_u64() => Value::from(i),
            _ => return Err(format!("expected a whole number, found {}", kind(v))),
        },
        Type::Duration => match v.as_i64() {
            Some(i) if v.is_i64() || v.is_u64() => Value::from(i),
            _ => {
                return Err(format!(
                    "expected a duration as a whole number of seconds (two hours is 7200), found {}",
                    kind(v)
                ));
            }
        },
        Type::Bool => match v {
            Value::Bool(_) => v.clone(),
            _ => return Err(format!("expected true or false, found {}", kind(v))),
        },
        Type::Date | Type::Timestamp => Value::from(parse_time(v)?),
        Type::Enum(vs) => match v.as_str() {
            Some(s) if vs.iter().any(|x| x == s) => v.clone(),
            Some(s) => {
                return Err(format!(
                    "`{}` is not one of {}",
                    crate::base::json::echo(s),
                    vs.join(", ")
                ));
            }
            None => {
                return Err(format!(
                    "expected one of {}, found {}",
                    vs.join(", "),
                    kind(v)
                ));
            }
        },
        _ => {
            let Some(s) = v.as_str() else {
                return Err(format!("expected {ty} (a string), found {}", kind(v)));
            };
            storable(s)?;
            // the parameter's own limit first: a 100,001-character subject
            // is refused for its `max_len 140`, not for the global bound
            let limit = p
                .validators
                .iter()
                .filter_map(|v| match v {
                    Validator::MaxLen { len } => usize::try_from(*len).ok(),
                    _ => None,
                })
                .fold(MAX_TEXT, usize::min);
            if s.chars().nth(limit).is_some() {
                return Err(format!("longer than {limit} characters"));
            }
            match p.normalizer() {
                Some(n) => Value::String(normalize::apply(n, s)?),
                None => Value::String(s.to_string()),
            }
        }
    };
    Ok(Arg::Val(val))
}

/// A text every store keeps as it is: PostgreSQL's `text` cannot hold
/// U+0000 (the statement fails and aborts its transaction), so a NUL is
/// refused here, on every store alike, before any lookup or write sees it.
/// Rust strings are valid UTF-8 (a lone surrogate never parses), so NUL is
/// the one character a store cannot take.
fn storable(s: &str) -> Result<(), String> {
    if s.contains('\0') {
        return Err(
            "holds a NUL character (`\\u{0}`, U+0000), which is never a valid value".into(),
        );
    }
    Ok(())
}

fn validate(p: &Param, arg: &Arg, regexes: &Regexes) -> Result<(), String> {
    for v in &p.validators {
        match (v, arg) {
            (Validator::MinItems { count }, Arg::List(items)) if (items.len() as u64) < *count => {
                return Err(format!("fewer than {count} elements"));
            }
            (Validator::MaxItems { count }, Arg::List(items)) if (items.len() as u64) > *count => {
                return Err(format!("more than {count} elements"));
            }
            (Validator::NonEmpty, Arg::List(items)) if items.is_empty() => {
                return Err("must not be empty".into());
            }
            (_, Arg::List(items)) => {
                for it in items {
                    check_scalar(v, it, regexes)?;
                }
            }
            _ => check_scalar(v, arg, regexes)?,
        }
    }
    Ok(())
}

fn check_scalar(
    v: &Validator,
    arg: &Arg,
    regexes: &std::collections::HashMap<String, regex::Regex>,
) -> Result<(), String> {
    // a reference is resolved to a trusted value: validators apply to values
    let Arg::Val(val) = arg else { return Ok(()) };
    match v {
        Validator::Range { min, max } => {
            if let Some(n) = val.as_i64()
                && (n < *min || n > *max)
            {
                return Err(format!("{n} is outside {min} ..= {max}"));
            }
        }
        Validator::MinLen { len } | Validator::MaxLen { len } => {
            if let Some(s) = val.as_str() {
                let n = s.chars().count() as u64;
                if matches!(v, Validator::MinLen { .. }) && n < *len {
                    return Err(format!("shorter than {len} characters"));
                }
                if matches!(v, Validator::MaxLen { .. }) && n > *len {
                    return Err(format!("longer than {len} characters"));
                }
            }
        }
        Validator::Pattern { regex } => {
            if let Some(s) = val.as_str() {
                let ok = regexes.get(regex).is_some_and(|re| re.is_match(s));
                if !ok {
                    return Err(format!(
                        "`{}` does not match `{regex}`",
                        crate::base::json::echo(s)
                    ));
                }
            }
        }
        Validator::NonEmpty => {
            if val.as_str().is_some_and(str::is_empty) {
                return Err("must not be empty".into());
            }
        }
        Validator::MinItems { .. } | Validator::MaxItems { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/contract.rs"]
mod tests;
