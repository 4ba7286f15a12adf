//! The config checked against what each downstream server declares
//! (`tools/list`): every configured tool exists there, every argument the
//! proxy sends is one of the tool's `inputSchema` properties, of a type
//! the schema accepts (nested: a list's items), every argument the schema
//! requires is mapped, and a passthrough of a tool the server does not
//! annotate `readOnlyHint: true` is a warning unless the config says
//! `passthrough = "unguarded"`. Each finding is a [`ConfigError`] at the
//! TOML span the mapping was written at ([`Sites`]), with a help naming
//! what the server declares.

use super::diag::{ConfigError, ConfigReport, Diag, Reported};
use super::{ArgMap, ToolConfig, ToolMode};
use crate::diagnostics::suggest;
use crate::ir::Type;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::ops::Range;

/// Where the config wrote each tool: what the diagnostics point at.
#[derive(Clone, Debug, Default)]
pub struct Sites {
    /// The config's path as shown, and its text.
    pub file: String,
    pub source: String,
    pub tools: Vec<ToolSite>,
}

#[derive(Clone, Debug)]
pub struct ToolSite {
    pub tool: String,
    /// `tool = "..."`.
    pub span: Range<usize>,
    /// A passthrough: `passthrough = ...`, and whether it is `"unguarded"`.
    pub passthrough: Option<(Range<usize>, bool)>,
    /// Each argument the proxy sends, where it is named.
    pub args: Vec<(String, Range<usize>)>,
    /// `effect = "..."`, when the config writes it (a write by choice is
    /// not suggested a read).
    pub effect: Option<Range<usize>>,
}

/// A tool as a server declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct DeclaredTool {
    pub name: String,
    pub input_schema: Map<String, Value>,
    /// `annotations.readOnlyHint`.
    pub read_only: Option<bool>,
    /// `annotations.idempotentHint`.
    pub idempotent: Option<bool>,
}

/// How a decided tool's calls are executed, as the config says
/// (`effect`), and what its server's annotations would suggest. The
/// annotations are hints the MCP specification tells clients not to
/// trust: they never change what the proxy does, only what `ipc mcp
/// --check --servers` suggests.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolEffect {
    pub server: String,
    pub tool: String,
    pub action: String,
    pub effect: crate::gateway::Effect,
    /// The server annotates the tool `readOnlyHint: true` or
    /// `idempotentHint: true` and the config leaves it a write (says no
    /// `effect`): which hint, suggesting `effect = "read"`. `None` without
    /// the server's declaration.
    pub hint: Option<Hint>,
}

/// An annotation that suggests `effect = "read"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// `readOnlyHint: true`: the server says the tool changes nothing.
    ReadOnly,
    /// `idempotentHint: true` (and not read-only): the server says a
    /// second identical call changes nothing more.
    Idempotent,
}

impl Hint {
    /// The annotation's name in `tools/list`.
    pub fn annotation(self) -> &'static str {
        match self {
            Hint::ReadOnly => "readOnlyHint",
            Hint::Idempotent => "idempotentHint",
        }
    }
}

/// Each decided tool's effect (the config's), in the config's order, with
/// the hint of its server's annotations when `offered` holds its
/// declaration (`--check --servers`) and the config does not say
/// `effect` itself.
pub fn effects(
    sites: &Sites,
    tools: &[ToolConfig],
    offered: Option<&HashMap<String, Vec<DeclaredTool>>>,
) -> Vec<ToolEffect> {
    tools
        .iter()
        .filter_map(|t| {
            let ToolMode::Action { action, effect, .. } = &t.mode else {
                return None;
            };
            let decl = offered
                .and_then(|o| o.get(&t.server))
                .and_then(|list| list.iter().find(|d| d.name == t.tool));
            let chosen = sites
                .tools
                .iter()
                .any(|s| s.tool == t.tool && s.effect.is_some());
            let hint = match decl {
                _ if !effect.is_write() || chosen => None,
                Some(d) if d.read_only == Some(true) => Some(Hint::ReadOnly),
                Some(d) if d.idempotent == Some(true) => Some(Hint::Idempotent),
                _ => None,
            };
            Some(ToolEffect {
                server: t.server.clone(),
                tool: t.tool.clone(),
                action: action.clone(),
                effect: *effect,
                hint,
            })
        })
        .collect()
}

fn sp(r: &Range<usize>) -> miette::SourceSpan {
    (r.start, r.end.saturating_sub(r.start)).into()
}

fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join(", ")
    }
}

/// Every mismatch between the configured tools and the servers'
/// declarations (`offered`: server name to its `tools/list`). A server
/// absent from `offered` is not checked.
pub fn check(
    sites: &Sites,
    tools: &[ToolConfig],
    offered: &HashMap<String, Vec<DeclaredTool>>,
) -> ConfigReport {
    let mut out = vec![];
    for t in tools {
        let Some(site) = sites.tools.iter().find(|s| s.tool == t.tool) else {
            continue;
        };
        let Some(list) = offered.get(&t.server) else {
            continue;
        };
        let Some(decl) = list.iter().find(|d| d.name == t.tool) else {
            let names = list.iter().map(|d| d.name.as_str());
            out.push(ConfigError::UndeclaredTool {
                server: t.server.clone(),
                tool: t.tool.clone(),
                span: sp(&site.span),
                help: suggest(&t.tool, names.clone())
                    .or_else(|| Some(format!("`{}` declares {}", t.server, listed(names)))),
            });
            continue;
        };
        out.extend(check_tool(site, t, decl));
    }
    ConfigReport {
        items: out
            .into_iter()
            .map(|e| Reported {
                file: sites.file.clone(),
                source: sites.source.clone(),
                diag: Diag::Config(e),
            })
            .collect(),
    }
}

/// One tool against its declaration.
pub fn check_tool(site: &ToolSite, t: &ToolConfig, decl: &DeclaredTool) -> Vec<ConfigError> {
    let mut out = vec![];
    let params = match &t.mode {
        ToolMode::Passthrough => {
            if let Some((span, unguarded)) = &site.passthrough
                && !unguarded
                && decl.read_only != Some(true)
            {
                out.push(ConfigError::PassthroughWrites {
                    tool: t.tool.clone(),
                    span: sp(span),
                });
            }
            return out;
        }
        ToolMode::Action { params, .. } => params,
    };
    let schema = &decl.input_schema;
    let props = schema.get("properties").and_then(Value::as_object);
    let declared = || {
        props
            .map(|p| listed(p.keys().map(String::as_str)))
            .unwrap_or_else(|| "no arguments".into())
    };
    for (_, m) in params {
        let arg = m.arg();
        let span = site
            .args
            .iter()
            .find(|(a, _)| a == arg)
            .map(|(_, s)| s.clone())
            .unwrap_or(site.span.clone());
        let Some(prop) = props.and_then(|p| p.get(arg)) else {
            if props.is_none() && schema.get("additionalProperties") != Some(&Value::Bool(false)) {
                // a schema that names no properties takes anything
                continue;
            }
            out.push(ConfigError::UndeclaredArg {
                tool: t.tool.clone(),
                arg: arg.to_string(),
                span: sp(&span),
                help: props
                    .and_then(|p| suggest(arg, p.keys().map(String::as_str)))
                    .map(|s| format!("{s}; `{}` declares {}", t.tool, declared()))
                    .or_else(|| Some(format!("`{}` declares {}", t.tool, declared()))),
            });
            continue;
        };
        let (ty, as_text) = match m {
            ArgMap::Arg { ty, as_text, .. } | ArgMap::Const { ty, as_text, .. } => (ty, *as_text),
        };
        if let Err(theirs) = fits(ty, as_text, prop) {
            out.push(ConfigError::ArgType {
                tool: t.tool.clone(),
                arg: arg.to_string(),
                ours: wire_kind(ty, as_text),
                theirs,
                span: sp(&span),
                help: Some(format!(
                    "the server declares `{arg}` as {}",
                    crate::base::json::echo(&Value::Object(trimmed(prop)).to_string())
                )),
            });
        }
    }
    for r in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !params.iter().any(|(_, m)| m.arg() == r) {
            out.push(ConfigError::RequiredArg {
                tool: t.tool.clone(),
                arg: r.to_string(),
                span: sp(&site.span),
                help: Some(format!(
                    "map a parameter onto it (`arg = \"{r}\"`, or `[tools.params.{r}]` for the parameter of the same name), or fix it with `value = ...`"
                )),
            });
        }
    }
    out
}

/// A property's schema without its description (what a help shows).
fn trimmed(prop: &Value) -> Map<String, Value> {
    let mut m = prop.as_object().cloned().unwrap_or_default();
    m.remove("description");
    m.remove("title");
    m
}

/// The JSON a parameter of this type is sent as, in words.
fn wire_kind(ty: &Type, as_text: bool) -> String {
    match json_type(ty, as_text) {
        "array" if ty.is_record() => format!("an array of objects {}", ty.element()),
        "array" => format!("an array of {}", json_type(ty.element(), false)),
        "object" => format!("an object {ty}"),
        "integer" => "an integer".into(),
        k => format!("a {k}"),
    }
}

/// The JSON Schema type a value of `ty` is sent as.
fn json_type(ty: &Type, as_text: bool) -> &'static str {
    match ty {
        Type::Money if as_text => "string",
        Type::Money => "number",
        Type::Int | Type::Duration => "integer",
        Type::Bool => "boolean",
        Type::List(_) | Type::Set(_) => "array",
        Type::Record(_) => "object",
        _ => "string",
    }
}

/// Whether the schema accepts what the proxy sends for `ty`; `Err` names
/// what the schema declares.
pub fn fits(ty: &Type, as_text: bool, schema: &Value) -> Result<(), String> {
    let Some(obj) = schema.as_object() else {
        // `true` (or anything that is not an object) accepts every value
        return if schema == &Value::Bool(false) {
            Err("no value at all".into())
        } else {
            Ok(())
        };
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(branches) = obj.get(key).and_then(Value::as_array) {
            let errs: Vec<String> = branches
                .iter()
                .filter_map(|b| fits(ty, as_text, b).err())
                .collect();
            if errs.len() == branches.len() && !branches.is_empty() {
                return Err(format!("one of {}", errs.join(", ")));
            }
        }
    }
    if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
        for b in all {
            fits(ty, as_text, b)?;
        }
    }
    let ours = json_type(ty, as_text);
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() {
        let ok = types
            .iter()
            .any(|t| *t == ours || (*t == "number" && ours == "integer"));
        if !ok {
            return Err(types
                .iter()
                .map(|t| match *t {
                    "integer" | "array" | "object" => format!("an {t}"),
                    t => format!("a {t}"),
                })
                .collect::<Vec<_>>()
                .join(" or "));
        }
    }
    if let (Type::Enum(variants), Some(allowed)) = (ty, obj.get("enum").and_then(Value::as_array))
        && let Some(v) = variants
            .iter()
            .find(|v| !allowed.iter().any(|a| a.as_str() == Some(v.as_str())))
    {
        return Err(format!(
            "one of {}, not `{v}`",
            allowed
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if ours == "array"
        && let Some(items) = obj.get("items")
    {
        fits(ty.element(), false, items).map_err(|e| format!("an array of {e}"))?;
    }
    if let Type::Record(fields) = ty {
        fits_record(fields, obj)?;
    }
    Ok(())
}

/// A record against an object schema, field by field: every field ours is
/// one the schema declares (when it names its properties, or allows no
/// other), of a type it accepts, nested; every field the schema requires
/// is one ours always has.
fn fits_record(fields: &[crate::ir::FieldType], obj: &Map<String, Value>) -> Result<(), String> {
    let props = obj.get("properties").and_then(Value::as_object);
    let closed = obj.get("additionalProperties") == Some(&Value::Bool(false));
    let declares = || {
        props
            .map(|p| listed(p.keys().map(String::as_str)))
            .unwrap_or_else(|| "no field".into())
    };
    for f in fields {
        match props.and_then(|p| p.get(&f.name)) {
            Some(schema) => fits(&f.ty, false, schema)
                .map_err(|e| format!("an object whose `{}` is {e}", f.name))?,
            None if props.is_some() || closed => {
                return Err(format!(
                    "an object without a field `{}` (it declares {})",
                    f.name,
                    declares()
                ));
            }
            None => {}
        }
    }
    for r in obj
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        match fields.iter().find(|f| f.name == r) {
            Some(f) if !f.optional => {}
            Some(_) => return Err(format!("an object whose `{r}` is required, not optional")),
            None => return Err(format!("an object that requires `{r}`")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A server's annotations suggest `effect = "read"` only on a tool the
    /// config leaves a write without saying so; they decide nothing.
    #[test]
    fn annotations_only_suggest_a_read_where_the_config_says_nothing() {
        use crate::gateway::Effect;
        let tool = |name: &str, effect| ToolConfig {
            server: "s".into(),
            tool: name.into(),
            mode: ToolMode::Action {
                action: format!("p.{name}"),
                params: vec![],
                effect,
            },
            base: None,
        };
        let site = |name: &str, written: bool| ToolSite {
            tool: name.into(),
            span: 0..1,
            passthrough: None,
            args: vec![],
            effect: written.then_some(0..1),
        };
        let decl = |name: &str, read_only, idempotent| DeclaredTool {
            name: name.into(),
            input_schema: Map::new(),
            read_only,
            idempotent,
        };
        let tools = vec![
            tool("ro", Effect::Write),
            tool("idem", Effect::Write),
            tool("chosen", Effect::Write),
            tool("read", Effect::Read),
            tool("plain", Effect::Write),
        ];
        let sites = Sites {
            tools: vec![
                site("ro", false),
                site("idem", false),
                site("chosen", true),
                site("read", true),
                site("plain", false),
            ],
            ..Sites::default()
        };
        let offered = HashMap::from([(
            "s".to_string(),
            vec![
                decl("ro", Some(true), Some(true)),
                decl("idem", Some(false), Some(true)),
                decl("chosen", Some(true), None),
                decl("read", Some(true), None),
                decl("plain", None, Some(false)),
            ],
        )]);
        let hints: Vec<(String, Effect, Option<Hint>)> = effects(&sites, &tools, Some(&offered))
            .into_iter()
            .map(|e| (e.tool, e.effect, e.hint))
            .collect();
        assert_eq!(
            hints,
            vec![
                ("ro".into(), Effect::Write, Some(Hint::ReadOnly)),
                ("idem".into(), Effect::Write, Some(Hint::Idempotent)),
                ("chosen".into(), Effect::Write, None),
                ("read".into(), Effect::Read, None),
                ("plain".into(), Effect::Write, None),
            ]
        );
        // without the servers' declarations, no hint at all
        assert!(
            effects(&sites, &tools, None)
                .iter()
                .all(|e| e.hint.is_none())
        );
    }

    #[test]
    fn types_fit_their_json_schema() {
        assert!(fits(&Type::Text, false, &json!({"type": "string"})).is_ok());
        assert!(fits(&Type::Int, false, &json!({"type": "number"})).is_ok());
        assert!(fits(&Type::Money, true, &json!({"type": "string"})).is_ok());
        assert_eq!(
            fits(&Type::Money, false, &json!({"type": "string"})),
            Err("a string".into())
        );
        assert!(fits(&Type::Bool, false, &json!({"type": ["boolean", "null"]})).is_ok());
        let list = Type::List(Box::new(Type::Text));
        assert!(
            fits(
                &list,
                false,
                &json!({"type": "array", "items": {"type": "string"}})
            )
            .is_ok()
        );
        assert_eq!(
            fits(
                &list,
                false,
                &json!({"type": "array", "items": {"type": "object"}})
            ),
            Err("an array of an object".into())
        );
        assert!(
            fits(
                &Type::Text,
                false,
                &json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
            )
            .is_ok()
        );
        assert!(
            fits(
                &Type::Int,
                false,
                &json!({"anyOf": [{"type": "string"}, {"type": "null"}]})
            )
            .is_err()
        );
        let e = Type::Enum(vec!["a".into(), "b".into()]);
        assert!(
            fits(
                &e,
                false,
                &json!({"type": "string", "enum": ["a", "b", "c"]})
            )
            .is_ok()
        );
        assert!(fits(&e, false, &json!({"type": "string", "enum": ["a"]})).is_err());
        assert!(fits(&Type::Text, false, &json!({})).is_ok());
    }

    /// The shape of `edit_file`'s `edits` as the filesystem server declares it.
    fn edits_schema() -> Value {
        json!({"type": "array", "items": {
            "type": "object",
            "properties": {"oldText": {"type": "string"}, "newText": {"type": "string"}},
            "required": ["oldText", "newText"],
            "additionalProperties": false
        }})
    }

    fn record(fields: &[(&str, Type, bool)]) -> Type {
        Type::List(Box::new(Type::Record(
            fields
                .iter()
                .map(|(n, t, o)| crate::ir::FieldType {
                    name: n.to_string(),
                    ty: t.clone(),
                    optional: *o,
                })
                .collect(),
        )))
    }

    #[test]
    fn records_are_compared_field_by_field() {
        let ours = record(&[
            ("oldText", Type::Text, false),
            ("newText", Type::Text, false),
        ]);
        assert_eq!(fits(&ours, false, &edits_schema()), Ok(()));
        // a field the server does not declare
        let typo = record(&[
            ("oldText", Type::Text, false),
            ("new_text", Type::Text, false),
        ]);
        let e = fits(&typo, false, &edits_schema()).unwrap_err();
        assert!(
            e.contains("without a field `new_text`") && e.contains("`newText`"),
            "{e}"
        );
        // a field the server requires, missing or optional in ours
        let short = record(&[("oldText", Type::Text, false)]);
        assert!(
            fits(&short, false, &edits_schema())
                .unwrap_err()
                .contains("requires `newText`")
        );
        let opt = record(&[
            ("oldText", Type::Text, false),
            ("newText", Type::Text, true),
        ]);
        assert!(
            fits(&opt, false, &edits_schema())
                .unwrap_err()
                .contains("required, not optional")
        );
        // a nested type mismatch
        let num = record(&[
            ("oldText", Type::Text, false),
            ("newText", Type::Int, false),
        ]);
        let e = fits(&num, false, &edits_schema()).unwrap_err();
        assert!(e.contains("`newText` is a string"), "{e}");
        // an object where the server takes a string, and the other way round
        assert!(
            fits(
                &ours,
                false,
                &json!({"type": "array", "items": {"type": "string"}})
            )
            .is_err()
        );
        assert!(fits(&Type::List(Box::new(Type::Text)), false, &edits_schema()).is_err());
        // a nested record inside a record
        let inner = Type::Record(vec![crate::ir::FieldType {
            name: "owner".into(),
            ty: Type::Email,
            optional: false,
        }]);
        let outer = Type::Record(vec![crate::ir::FieldType {
            name: "meta".into(),
            ty: inner,
            optional: false,
        }]);
        let schema = |t: &str| {
            json!({"type": "object", "properties": {"meta": {"type": "object",
                "properties": {"owner": {"type": t}}}}})
        };
        assert_eq!(fits(&outer, false, &schema("string")), Ok(()));
        let e = fits(&outer, false, &schema("integer")).unwrap_err();
        assert!(
            e.contains("`meta` is an object whose `owner` is an integer"),
            "{e}"
        );
    }
}
