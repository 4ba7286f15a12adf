//! A tool's arguments to a gateway proposal, and a decision's trusted
//! values back to the tool's arguments. Exact both ways: an amount is
//! converted with the gateway's own decimal handling
//! (`base::Money::from_json`), never through arithmetic on floats, and
//! a value that cannot be converted exactly is refused, never rounded.
//!
//! Amounts leave the proxy as the tool takes them. A JSON number is the
//! shortest decimal of the amount (`400` minor units with `scale = 100` is
//! the number `4.0` on the wire, `410` is `4.1`): serde_json without
//! arbitrary precision cannot write `4.00`, and the value is the same
//! number. A tool that wants the text `"4.00"` says `format = "string"`.

use super::{ArgMap, DownstreamCall, ToolConfig, ToolMode};
use crate::base::Money;
use crate::base::json::{echo, format_time, kind};
use crate::gateway::secret::{SecretValues, is_commitment};
use crate::ir::Type;
use serde_json::{Map, Number, Value, json};

/// The scales an amount may be written with: minor units per unit the
/// tool speaks (100: the tool says 4.00 for 400 cents; 1: it says 400).
pub const SCALES: &[u32] = &[1, 10, 100];

pub(super) fn to_proposal(t: &ToolConfig, args: &Map<String, Value>) -> Result<Value, String> {
    let ToolMode::Action { action, params, .. } = &t.mode else {
        return Err(format!(
            "tool `{}` is passed through: it makes no proposal",
            t.tool
        ));
    };
    // an argument no parameter reads is refused, never dropped: the agent
    // sent something it expected to matter; one the config fills is the
    // config's, never the agent's
    for k in args.keys() {
        match params.iter().find(|(_, m)| m.arg() == k) {
            Some((_, ArgMap::Arg { .. })) => {}
            Some((param, ArgMap::Const { .. })) => {
                return Err(format!(
                    "argument `{}` is filled by intentplane from the config (parameter `{param}`): leave it out",
                    echo(k)
                ));
            }
            None => {
                return Err(format!(
                    "argument `{}` of tool `{}` is not mapped in the proxy's config, so the gateway cannot decide it: leave it out, or map it in the config's `[[tools]]` for `{}` (`[tools.params.NAME] arg = \"{}\"`)",
                    echo(k),
                    t.tool,
                    t.tool,
                    echo(k)
                ));
            }
        }
    }
    let mut out = Map::new();
    for (param, m) in params {
        match m {
            ArgMap::Const { value, .. } => {
                out.insert(param.clone(), value.clone());
            }
            ArgMap::Arg {
                arg,
                scale,
                as_text,
                optional,
                ty,
            } => {
                let Some(v) = args.get(arg) else {
                    if *optional {
                        continue;
                    }
                    return Err(format!("argument `{arg}` is missing"));
                };
                let v = match scale {
                    Some(s) => Money::from_minor(
                        minor_from_tool(v, *s, *as_text).map_err(|e| format!("`{arg}`: {e}"))?,
                    )
                    .to_json(),
                    None if has_path(ty) => match &t.base {
                        Some(base) => resolve_paths(v, ty, base)
                            .map_err(|e| format!("`{}`: {e}", echo(arg)))?,
                        None => v.clone(),
                    },
                    None => v.clone(),
                };
                out.insert(param.clone(), v);
            }
        }
    }
    Ok(json!({"action": action, "args": out}))
}

/// Whether a value of `ty` holds a path: itself, an element, a field.
fn has_path(ty: &Type) -> bool {
    match ty {
        Type::Path => true,
        Type::List(e) | Type::Set(e) => has_path(e),
        Type::Record(fs) => fs.iter().any(|f| has_path(&f.ty)),
        _ => false,
    }
}

/// A path (each of a list of them, each path field of a record) as the
/// server would open it, for a server on this machine: normalised strictly
/// on its own first (so `../x` is refused, never resolved above the
/// folder), a relative one put under `base`, the server's working
/// directory; then its symbolic links resolved (`resolve_links`), so that
/// the gateway's containment check and the server's write see the same
/// file. Anything that is not text is left to the gateway's type check.
fn resolve_paths(v: &Value, ty: &Type, base: &std::path::Path) -> Result<Value, String> {
    match (ty, v) {
        (Type::List(e) | Type::Set(e), Value::Array(items)) => items
            .iter()
            .map(|i| resolve_paths(i, e, base))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        (Type::Record(fs), Value::Object(o)) => {
            let mut out = Map::new();
            for (k, x) in o {
                let x = match fs.iter().find(|f| &f.name == k) {
                    Some(f) => resolve_paths(x, &f.ty, base).map_err(|e| format!(".{k}: {e}"))?,
                    None => x.clone(),
                };
                out.insert(k.clone(), x);
            }
            Ok(Value::Object(out))
        }
        (Type::Path, Value::String(p)) => {
            let lexical = crate::gateway::normalize::path(p)?;
            let joined = match lexical.as_str() {
                abs if abs.starts_with('/') => abs.to_string(),
                "." => base.display().to_string(),
                rel => format!("{}/{rel}", base.display().to_string().trim_end_matches('/')),
            };
            resolve_links(std::path::Path::new(&joined)).map(Value::String)
        }
        _ => Ok(v.clone()),
    }
}

/// `path` with the symbolic links of its longest existing part resolved
/// (`realpath`), the part that does not exist yet appended as it is: a
/// file to be written through `ws/link/new.txt`, where `link` points out of
/// the trusted folder, is decided as the file it really is. A link that
/// cannot be resolved (dangling: the server would create its target, or
/// unreadable) is refused. What is left is checked against the trusted
/// folders by the gateway; between that check and the server's write the
/// folder could still change (docs/mcp-real-servers.md says what a server
/// must do itself).
fn resolve_links(path: &std::path::Path) -> Result<String, String> {
    let mut rest = vec![];
    let mut cur = path;
    loop {
        match std::fs::canonicalize(cur) {
            Ok(real) => {
                let full = rest.iter().rev().fold(real, |p, c| p.join(c));
                return full.to_str().map(str::to_string).ok_or_else(|| {
                    format!(
                        "`{}` resolves to a path that is not UTF-8",
                        echo(&path.display().to_string())
                    )
                });
            }
            Err(_) if cur.symlink_metadata().is_ok() => {
                return Err(format!(
                    "`{}` goes through `{}`, a link or folder that cannot be resolved",
                    echo(&path.display().to_string()),
                    echo(&cur.display().to_string())
                ));
            }
            Err(_) => match (cur.parent(), cur.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    cur = parent;
                }
                _ => return Ok(path.display().to_string()),
            },
        }
    }
}

pub(super) fn downstream_call(
    t: &ToolConfig,
    resolved: &Map<String, Value>,
    secrets: &SecretValues,
) -> Result<DownstreamCall, String> {
    let ToolMode::Action { params, .. } = &t.mode else {
        return Err(format!(
            "tool `{}` is passed through: it has no decision",
            t.tool
        ));
    };
    let mut arguments = Map::new();
    let mut recorded = Map::new();
    for (param, m) in params {
        let (arg, scale, ty, as_text, optional) = match m {
            ArgMap::Arg {
                arg,
                scale,
                ty,
                as_text,
                optional,
            } => (arg, scale, ty, as_text, *optional),
            ArgMap::Const {
                arg,
                scale,
                ty,
                as_text,
                ..
            } => (arg, scale, ty, as_text, false),
        };
        let Some(v) = resolved.get(param) else {
            if optional {
                continue;
            }
            return Err(format!("the decision has no value for `{param}`"));
        };
        // a secret goes to the tool as the value its commitment binds, and
        // is recorded as the commitment; a commitment is never a tool's
        // argument (fail closed when the value is missing)
        if is_commitment(v) {
            let clear = secrets
                .get(param)
                .ok_or_else(|| format!("the value of the secret `{param}` is not available"))?;
            arguments.insert(arg.clone(), tool_value(param, clear, *scale, ty, *as_text)?);
            recorded.insert(arg.clone(), v.clone());
            continue;
        }
        let v = tool_value(param, v, *scale, ty, *as_text)?;
        recorded.insert(arg.clone(), v.clone());
        arguments.insert(arg.clone(), v);
    }
    Ok(DownstreamCall {
        server: t.server.clone(),
        tool: t.tool.clone(),
        arguments,
        recorded,
    })
}

/// A trusted value in the tool's units and spelling: an amount at the
/// tool's scale, a Date as `YYYY-MM-DD`, a Timestamp as
/// `YYYY-MM-DDTHH:MM:SSZ`, anything else as it is.
fn tool_value(
    param: &str,
    v: &Value,
    scale: Option<u32>,
    ty: &Type,
    as_text: bool,
) -> Result<Value, String> {
    Ok(match (scale, ty) {
        (Some(s), _) => {
            let minor = v
                .as_i64()
                .ok_or_else(|| format!("`{param}` is {}, not an amount", kind(v)))?;
            minor_to_tool(minor, s, as_text).map_err(|e| format!("`{param}`: {e}"))?
        }
        // a record goes out as the object it came in as, each field in the
        // tool's spelling
        (None, Type::Record(fs)) => {
            let Value::Object(o) = v else {
                return Err(format!("`{param}` is {}, not an object", kind(v)));
            };
            let mut out = Map::new();
            for (k, x) in o {
                let x = match fs.iter().find(|f| &f.name == k) {
                    Some(f) => tool_value(&format!("{param}.{k}"), x, None, &f.ty, false)?,
                    None => x.clone(),
                };
                out.insert(k.clone(), x);
            }
            Value::Object(out)
        }
        (None, Type::List(e) | Type::Set(e)) if e.is_record() => {
            let Value::Array(items) = v else {
                return Err(format!("`{param}` is {}, not a list", kind(v)));
            };
            Value::Array(
                items
                    .iter()
                    .map(|x| tool_value(param, x, None, e, false))
                    .collect::<Result<_, _>>()?,
            )
        }
        (None, Type::Date | Type::Timestamp) => {
            let secs = v
                .as_i64()
                .ok_or_else(|| format!("`{param}` is {}, not a time", kind(v)))?;
            let text = format_time(secs);
            match ty {
                Type::Date => Value::String(text.chars().take(10).collect()),
                _ => Value::String(text),
            }
        }
        _ => v.clone(),
    })
}

pub(super) fn undeclared_argument<'a>(
    t: &'a ToolConfig,
    downstream: &Map<String, Value>,
) -> Option<&'a str> {
    let ToolMode::Action { params, .. } = &t.mode else {
        return None;
    };
    if downstream.get("additionalProperties") != Some(&Value::Bool(false)) {
        return None;
    }
    let props = downstream.get("properties").and_then(Value::as_object);
    params
        .iter()
        .map(|(_, m)| m.arg())
        .find(|a| !props.is_some_and(|p| p.contains_key(*a)))
}

pub(super) fn advertised_schema(
    t: &ToolConfig,
    downstream: &Map<String, Value>,
) -> Map<String, Value> {
    let ToolMode::Action { params, .. } = &t.mode else {
        return downstream.clone();
    };
    let agent = |name: &str| {
        params
            .iter()
            .find(|(_, m)| m.from_agent() && m.arg() == name)
            .map(|(_, m)| m)
    };
    let mut out = downstream.clone();
    if let Some(Value::Object(props)) = out.get_mut("properties") {
        props.retain(|k, _| agent(k).is_some());
    }
    if let Some(Value::Array(required)) = out.get_mut("required") {
        required.retain(|r| {
            r.as_str()
                .and_then(agent)
                .is_some_and(|m| !matches!(m, ArgMap::Arg { optional: true, .. }))
        });
    }
    out
}

/// A tool's amount in minor units: `scale` minor units per unit written.
/// A number (or, with `format = "string"`, a decimal string), not
/// negative, with no more decimals than the scale allows.
pub fn minor_from_tool(v: &Value, scale: u32, as_text: bool) -> Result<i64, String> {
    match (v, as_text) {
        (Value::Number(_), false) | (Value::String(_), true) => {}
        (other, false) => return Err(format!("expected a number, found {}", kind(other))),
        (other, true) => {
            return Err(format!(
                "expected an amount as a string, found {}",
                kind(other)
            ));
        }
    }
    // the gateway's exact reading: hundredths of the written value
    let hundredths = Money::from_json(v)?.minor();
    if hundredths < 0 {
        return Err("an amount cannot be negative".into());
    }
    let scaled = hundredths
        .checked_mul(i64::from(scale))
        .ok_or_else(|| "the amount is too large".to_string())?;
    if scaled % 100 != 0 {
        return Err(format!(
            "`{}` has more decimals than {} allows",
            echo(&v.to_string()),
            decimals_name(scale)
        ));
    }
    Ok(scaled / 100)
}

/// Minor units as the tool writes them: a number (shortest decimal), or
/// the text with exactly the scale's decimals. Refused when the number
/// would not read back as exactly this amount.
pub fn minor_to_tool(minor: i64, scale: u32, as_text: bool) -> Result<Value, String> {
    if minor < 0 {
        return Err("an amount cannot be negative".into());
    }
    let text = decimal_text(minor, scale)?;
    if as_text {
        return Ok(Value::String(text));
    }
    if scale == 1 {
        return Ok(Value::from(minor));
    }
    let n = text
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .ok_or_else(|| format!("`{text}` is not a number"))?;
    let v = Value::Number(n);
    // the float's shortest decimal must be the amount itself
    if minor_from_tool(&v, scale, false) != Ok(minor) {
        return Err(format!(
            "`{text}` cannot be sent exactly as a JSON number; use `format = \"string\"`"
        ));
    }
    Ok(v)
}

/// `minor` with the scale's decimals: 400 is `4.00` at scale 100, `40.0`
/// at scale 10, `400` at scale 1.
fn decimal_text(minor: i64, scale: u32) -> Result<String, String> {
    match scale {
        100 => Ok(Money::from_minor(minor).to_string()),
        1 => Ok(minor.to_string()),
        10 => Ok(format!("{}.{}", minor / 10, minor % 10)),
        other => Err(format!("scale {other} is not one of 1, 10, 100")),
    }
}

fn decimals_name(scale: u32) -> &'static str {
    match scale {
        1 => "a whole number",
        10 => "one decimal",
        _ => "two decimals",
    }
}
