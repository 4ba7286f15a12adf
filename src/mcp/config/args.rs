//! The argument pass: each parameter of a decided tool's action from a
//! tool argument ([`ArgMap::Arg`]) or a constant the config fills
//! ([`ArgMap::Const`], from `value` or a session `claim`), with its
//! `scale` and `format`.

use super::ArgMap;
use super::ctx::{Diags, Span, sp, to_json};
use super::diag::ConfigError;
use super::file::{ParamFile, S, ToolFile};
use super::lower::sorted;
use super::mapping::SCALES;
use crate::bundle::TableAction;
use crate::diagnostics::suggest;
use crate::ir::Type;
use serde_json::Value;
use std::collections::HashMap;

/// Each parameter of the action from a tool argument or a constant;
/// `None` (with diagnostics) when the mapping is wrong. `args` gets each
/// tool argument's span.
pub(super) fn mapping(
    tf: &ToolFile,
    ta: &TableAction,
    claims: Option<&Value>,
    args: &mut HashMap<String, Span>,
    d: &mut Diags,
) -> Option<Vec<(String, ArgMap)>> {
    let action = &ta.action;
    let errors_before = d.errors();
    let mut out: Vec<(String, ArgMap)> = vec![];
    let entries = sorted(&tf.params);
    for (pname, p) in &entries {
        let Some(param) = action.param(pname.get_ref()) else {
            d.err(ConfigError::UnknownParam {
                param: pname.get_ref().clone(),
                action: action.name.clone(),
                span: sp(pname.span()),
                help: suggest(
                    pname.get_ref(),
                    action.params.iter().map(|x| x.name.as_str()),
                ),
            });
            continue;
        };
        let optional = param.default.is_some() || param.optional;
        let m = Param {
            name: pname,
            file: p.get_ref(),
            ty: &param.ty,
            optional,
        };
        if let Some(m) = m.map(claims, args, d) {
            out.push((param.name.clone(), m));
        }
    }
    let tool_span = tf
        .action
        .as_ref()
        .map(|a| a.span())
        .unwrap_or(tf.tool.span());
    for param in &action.params {
        if entries.iter().any(|(n, _)| n.get_ref() == &param.name)
            || param.default.is_some()
            || param.optional
        {
            continue;
        }
        d.err(ConfigError::UnmappedParam {
            param: param.name.clone(),
            action: action.name.clone(),
            span: sp(tool_span.clone()),
            help: Some(format!(
                "add `[tools.params.{}]`: from the tool argument of the same name (an empty table), `arg = \"NAME\"`, `claim = \"CLAIM\"` or `value = ...`",
                param.name
            )),
        });
    }
    (d.errors() == errors_before).then_some(out)
}

/// One `[tools.params.P]` and the action's parameter it maps.
struct Param<'a> {
    name: &'a S<String>,
    file: &'a ParamFile,
    ty: &'a Type,
    optional: bool,
}

impl Param<'_> {
    fn mapping_err(&self, message: String, span: Span, help: Option<String>) -> ConfigError {
        ConfigError::Mapping {
            param: self.name.get_ref().clone(),
            message,
            span: sp(span),
            help,
        }
    }

    fn map(
        &self,
        claims: Option<&Value>,
        args: &mut HashMap<String, Span>,
        d: &mut Diags,
    ) -> Option<ArgMap> {
        let pf = self.file;
        if let (Some(v), Some(_)) = (&pf.value, &pf.claim) {
            d.err(self.mapping_err(
                "`value` and `claim` are two sources of the same argument: give one".into(),
                v.span(),
                None,
            ));
            return None;
        }
        let fixed = self.fixed(claims, d)?;
        let arg = pf
            .arg
            .as_ref()
            .map(|a| a.get_ref().clone())
            .unwrap_or_else(|| self.name.get_ref().clone());
        let arg_span = pf
            .arg
            .as_ref()
            .map(|a| a.span())
            .unwrap_or(self.name.span());
        if let Some(first) = args.get(&arg) {
            let first = first.clone();
            d.err(ConfigError::ArgTwice {
                arg,
                span: sp(arg_span),
                first: sp(first),
            });
            return None;
        }
        args.insert(arg.clone(), arg_span);
        let scale = self.scale(d)?;
        let as_text = self.as_text(scale, d)?;
        let ty = self.ty.clone();
        Some(match fixed {
            Some(value) => ArgMap::Const {
                value,
                arg,
                scale,
                ty,
                as_text,
            },
            None => ArgMap::Arg {
                arg,
                scale,
                ty,
                as_text,
                optional: self.optional,
            },
        })
    }

    /// A value the config fills (`Some(Some(..))`): the proxy sends it
    /// under `arg`, with the parameter's `scale` and `format`, as it sends
    /// the agent's. `Some(None)`: the agent gives it; `None`: an error.
    fn fixed(&self, claims: Option<&Value>, d: &mut Diags) -> Option<Option<Value>> {
        let (pf, ty) = (self.file, self.ty);
        if let Some(v) = &pf.value {
            let json = to_json(v.get_ref());
            if let Err(e) = crate::gateway::world::typed_value(&json, ty) {
                d.err(self.mapping_err(format!("the constant is not {ty}: {e}"), v.span(), None));
                return None;
            }
            return Some(Some(json));
        }
        let Some(c) = &pf.claim else {
            return Some(None);
        };
        // no mandate: the session's own error says why
        let claims = claims?;
        match claims.get(c.get_ref()) {
            Some(Value::Array(_)) => {
                d.err(self.mapping_err(format!("claim `{}` is a set: a constant is one value", c.get_ref()), c.span(), Some("map the parameter to a tool argument; the gateway checks it against the claim".into())));
                None
            }
            Some(v) => Some(Some(v.clone())),
            None => {
                let names: Vec<String> = claims
                    .as_object()
                    .map(|o| o.keys().cloned().collect())
                    .unwrap_or_default();
                d.err(
                    self.mapping_err(
                        format!("the session's mandate has no claim `{}`", c.get_ref()),
                        c.span(),
                        suggest(c.get_ref(), names.iter().map(String::as_str))
                            .or_else(|| Some("give it under `[session.claims]`".into())),
                    ),
                );
                None
            }
        }
    }

    /// The `scale` of an amount (`Some(None)`: none, not an amount).
    fn scale(&self, d: &mut Diags) -> Option<Option<u32>> {
        let param = self.name.get_ref().clone();
        let pname = self.name;
        match (&self.file.scale, self.ty) {
            (None, Type::Money) => {
                d.err(ConfigError::Scale {
                    param,
                    message: "a Money parameter needs a `scale`".into(),
                    span: sp(pname.span()),
                    help: Some("`scale = 100` when the tool says 4.00 for 400 cents, `scale = 1` when it says 400".into()),
                });
                None
            }
            // an amount inside a record has no scale to be written at
            (None, t) if t.is_record() && money_inside(t) => {
                d.err(ConfigError::Scale {
                    param,
                    message: "a record field of type Money has no `scale`: the tool's amounts inside an object cannot be converted".into(),
                    span: sp(pname.span()),
                    help: Some("declare the field as the tool writes it (`Text` with a `pattern`, or `Int` in minor units)".into()),
                });
                None
            }
            (None, _) => Some(None),
            (Some(s), Type::Money) => match u32::try_from(*s.get_ref())
                .ok()
                .filter(|x| SCALES.contains(x))
            {
                Some(x) => Some(Some(x)),
                None => {
                    d.err(ConfigError::Scale {
                        param,
                        message: format!("scale {} is not one of 1, 10, 100", s.get_ref()),
                        span: sp(s.span()),
                        help: Some("the minor units (cents) per unit the tool writes: 100 for 4.00, 1 for 400".into()),
                    });
                    None
                }
            },
            (Some(s), other) => {
                d.err(ConfigError::Scale {
                    param,
                    message: format!("`scale` converts amounts, and this parameter is {other}"),
                    span: sp(s.span()),
                    help: Some("remove `scale`, or map an amount (a Money parameter)".into()),
                });
                None
            }
        }
    }

    /// Whether the tool writes the amount as a string (`format`).
    fn as_text(&self, scale: Option<u32>, d: &mut Diags) -> Option<bool> {
        match &self.file.format {
            None => Some(false),
            Some(f) if scale.is_some() && (f.get_ref() == "string" || f.get_ref() == "number") => {
                Some(f.get_ref() == "string")
            }
            Some(f) => {
                d.err(self.mapping_err(
                    format!("`format = \"{}\"` is not a format of this parameter", f.get_ref()),
                    f.span(),
                    Some("an amount is written by the tool as a `\"number\"` (default) or a `\"string\"`".into()),
                ));
                None
            }
        }
    }
}

/// Whether a Money value lies inside a record type (at any depth).
fn money_inside(t: &Type) -> bool {
    match t {
        Type::Money => true,
        Type::List(e) | Type::Set(e) => money_inside(e),
        Type::Record(fs) => fs.iter().any(|f| money_inside(&f.ty)),
        _ => false,
    }
}
