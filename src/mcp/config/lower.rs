//! The inline tools of `intentplane.toml` lowered to the pack language's
//! syntax tree, with every span pointing into the TOML: `crate::check`
//! then checks them as it checks a pack file (same rules, same
//! diagnostics, same lints), and the bundle is built from both.
//!
//! A `type`, a `when` condition, a fact and a source (`"registry:contacts"`,
//! `"mandate:payee"`, or a path as the pack language writes it) are parsed
//! with the pack language's own parser, at the offset of the TOML string.

use super::diag::ConfigError;
use super::file::{GuaranteeFile, InlinePackFile, ParamFile, RuleFile, S, ToolFile};
use crate::diagnostics::PackDiagnostic;
use crate::ir::RuleKind;
use crate::syntax::ast::*;
use std::collections::BTreeMap;
use std::ops::Range;

/// The inline pack's name when the TOML has no `[pack]`.
pub const DEFAULT_PACK: &str = "mcp";
/// The executor of an inline action: the proxy carries it out by calling
/// the downstream tool.
pub const INLINE_EXECUTOR: &str = "external";

/// Lowers `[pack]` and the inline tools to one pack file. Problems the TOML
/// alone shows (a parameter without a type, an unknown rule kind, a
/// fragment that does not parse) are returned beside it.
pub(super) struct Lowering<'a> {
    source: &'a str,
    pub config: Vec<ConfigError>,
    pub syntax: Vec<PackDiagnostic>,
}

fn span(r: Range<usize>) -> Span {
    Span::new(r.start, r.end)
}

impl<'a> Lowering<'a> {
    pub fn new(source: &'a str) -> Self {
        Lowering {
            source,
            config: vec![],
            syntax: vec![],
        }
    }

    /// Where a TOML string's text starts in the file: after its opening
    /// quote. Spans are exact when the text is written as is; after an
    /// escape (`\"`) they drift by the escape's extra characters, so
    /// conditions with quotes are best written as literal strings
    /// (`when = 'subject == "urgent"'`).
    fn content_offset(&self, s: &S<String>) -> usize {
        let r = s.span();
        let raw = self.source.get(r.start..r.end).unwrap_or("");
        ["\"\"\"", "'''", "\"", "'"]
            .iter()
            .find(|q| raw.starts_with(**q))
            .map(|q| r.start + q.len())
            .unwrap_or(r.start)
    }

    fn name(&self, s: &S<String>) -> Name {
        Name {
            text: s.get_ref().clone(),
            span: span(s.span()),
        }
    }

    fn str(&self, s: &S<String>) -> Str {
        Str {
            value: s.get_ref().clone(),
            span: span(s.span()),
        }
    }

    fn ty(&mut self, s: &S<String>) -> Option<TypeExpr> {
        match crate::syntax::parse_type_at(s.get_ref(), self.content_offset(s)) {
            Ok(t) => Some(t),
            Err(d) => {
                self.syntax.extend(d);
                None
            }
        }
    }

    fn expr(&mut self, s: &S<String>) -> Option<Expr> {
        match crate::syntax::parse_expr_at(s.get_ref(), self.content_offset(s)) {
            Ok(e) => Some(e),
            Err(d) => {
                self.syntax.extend(d);
                None
            }
        }
    }

    /// `registry:contacts` and `mandate:payee` (the product's spelling) are
    /// `registry.contacts` and `mandate.payee`; any other path is read as
    /// the pack language writes it.
    fn source_path(&mut self, s: &S<String>) -> Option<Path> {
        let text = s.get_ref();
        let text = match text.split_once(':') {
            Some((head, rest)) => format!("{head}.{rest}"),
            None => text.clone(),
        };
        match crate::syntax::parse_path_at(&text, self.content_offset(s)) {
            Ok(p) => Some(p),
            Err(d) => {
                self.syntax.extend(d);
                None
            }
        }
    }

    /// A TOML value as a literal of the pack language (an amount written
    /// with a fraction is Money in minor units, as `10_000.00` is).
    fn literal(&mut self, v: &S<toml::Value>) -> Option<Literal> {
        let sp = span(v.span());
        let kind = match v.get_ref() {
            toml::Value::String(s) => LitKind::Str(s.clone()),
            toml::Value::Integer(i) => LitKind::Int(*i),
            toml::Value::Boolean(b) => LitKind::Bool(*b),
            toml::Value::Float(f) => match crate::base::Money::parse(&format!("{f}")) {
                Ok(m) => LitKind::Money(m.minor()),
                Err(reason) => {
                    self.syntax.push(PackDiagnostic::InvalidLiteral {
                        text: format!("{f}"),
                        reason,
                        span: sp.into(),
                        help: None,
                    });
                    return None;
                }
            },
            toml::Value::Array(items) => {
                let mut out = vec![];
                for it in items {
                    out.push(self.literal(&S::new(sp.start..sp.end, it.clone()))?);
                }
                LitKind::List(out)
            }
            other => {
                self.config.push(ConfigError::Inline {
                    message: format!("a {} is not a literal", other.type_str()),
                    span: sp.into(),
                    help: Some("write a string, a number, a boolean or a list".into()),
                });
                return None;
            }
        };
        Some(Literal { kind, span: sp })
    }

    /// The inline pack: `[pack]` (claims, registries) and every inline tool
    /// as an action.
    pub fn file(&mut self, pack: Option<&S<InlinePackFile>>, tools: &[&S<ToolFile>]) -> File {
        let header = match pack {
            Some(p) => Header {
                name: self.name(&p.get_ref().name),
                version: p.get_ref().version.as_ref().map(|v| self.str(v)),
                description: p.get_ref().description.as_ref().map(|v| self.str(v)),
                shadow_never: None,
            },
            None => Header {
                name: Name {
                    text: DEFAULT_PACK.into(),
                    span: tools.first().map(|t| span(t.span())).unwrap_or_default(),
                },
                version: None,
                description: None,
                shadow_never: None,
            },
        };
        let mut items = vec![];
        if let Some(p) = pack {
            let p = p.get_ref();
            if !p.mandate.is_empty() {
                let mut claims = vec![];
                for (name, ty) in sorted(&p.mandate) {
                    if let Some(ty) = self.ty(ty) {
                        claims.push(Field {
                            name: self.name(name),
                            ty,
                        });
                    }
                }
                items.push(Item::Mandate(MandateBlock {
                    claims,
                    span: Span::default(),
                }));
            }
            for (name, r) in sorted(&p.registries) {
                let reg = r.get_ref();
                let shape = match (&reg.ty, &reg.key) {
                    (Some(t), None) if reg.fields.is_empty() => self.ty(t).map(RegistryShape::Set),
                    (None, Some(k)) => {
                        let key = self.ty(k);
                        let mut fields = vec![];
                        for (f, t) in sorted(&reg.fields) {
                            if let Some(ty) = self.ty(t) {
                                fields.push(Field {
                                    name: self.name(f),
                                    ty,
                                });
                            }
                        }
                        key.map(|key| RegistryShape::Keyed { key, fields })
                    }
                    _ => {
                        self.config.push(ConfigError::Inline {
                            message: format!("registry `{}` needs either `type` or `key` with `fields`", name.get_ref()),
                            span: span(r.span()).into(),
                            help: Some("a set of values: `type = \"set<Iban>\"`; records by key: `key = \"Id\"` and `fields = { iban = \"Iban\" }`".into()),
                        });
                        None
                    }
                };
                if let Some(shape) = shape {
                    items.push(Item::Registry(RegistryDecl {
                        name: self.name(name),
                        shape,
                        global: reg.global,
                        span: span(r.span()),
                    }));
                }
            }
        }
        for t in tools {
            items.push(Item::Action(self.action(t)));
        }
        for g in pack.map(|p| &p.get_ref().guarantees).into_iter().flatten() {
            if let Some(g) = self.guarantee(g) {
                items.push(Item::Guarantee(g));
            }
        }
        File { header, items }
    }

    /// `[[pack.guarantees]]` as the pack language's `guarantee`.
    fn guarantee(&mut self, g: &S<GuaranteeFile>) -> Option<GuaranteeDecl> {
        let gf = g.get_ref();
        let never = gf.never.as_ref().is_some_and(|n| *n.get_ref());
        let level = match (never, &gf.level) {
            (true, None) => None,
            (false, Some(l)) => Some((*l.get_ref(), span(l.span()))),
            _ => {
                self.config.push(ConfigError::Inline {
                    message: "a guarantee has exactly one of `never = true` and `level = N`".into(),
                    span: span(g.span()).into(),
                    help: Some("e.g. `never = true` (no approval lifts it) or `level = 1` (the user approves)".into()),
                });
                return None;
            }
        };
        let always = gf.always.as_ref().is_some_and(|a| *a.get_ref());
        let when = match (&gf.when, always) {
            (Some(w), false) => Some(self.expr(w)?),
            (None, true) => None,
            _ => {
                self.config.push(ConfigError::Inline {
                    message: "a guarantee has exactly one of `when` and `always = true`".into(),
                    span: span(g.span()).into(),
                    help: Some("e.g. `when = \"payee_iban in registry.blocked\"`".into()),
                });
                return None;
            }
        };
        let scope = match crate::syntax::parse_scope_at(
            gf.actions.get_ref(),
            self.content_offset(&gf.actions),
        ) {
            Ok(s) => s,
            Err(d) => {
                self.syntax.extend(d);
                return None;
            }
        };
        Some(GuaranteeDecl {
            reason: self.str(&gf.reason),
            level,
            scope,
            when,
            span: span(g.span()),
        })
    }

    fn action(&mut self, t: &S<ToolFile>) -> ActionDecl {
        let tf = t.get_ref();
        let name = tf.action.as_ref().unwrap_or(&tf.tool);
        let name = self.name(name);
        let mut clauses = vec![];
        if let Some(s) = &tf.scope {
            clauses.push(ActionClause::Scope(self.name(s), span(s.span())));
        }
        if let Some(b) = &tf.budget_param {
            clauses.push(ActionClause::Budget(self.name(b), span(b.span())));
        }
        match &tf.executor {
            Some(e) => clauses.push(ActionClause::Executor(self.name(e), span(e.span()))),
            None => clauses.push(ActionClause::Executor(
                Name {
                    text: INLINE_EXECUTOR.into(),
                    span: name.span,
                },
                name.span,
            )),
        }
        for (pname, p) in sorted(&tf.params) {
            if let Some(decl) = self.param(pname, p) {
                clauses.push(ActionClause::Param(decl));
            }
        }
        for (fname, e) in sorted(&tf.facts) {
            if let Some(expr) = self.expr(e) {
                clauses.push(ActionClause::Fact(FactDecl {
                    name: self.name(fname),
                    expr,
                    span: span(fname.span()).to(span(e.span())),
                }));
            }
        }
        for r in &tf.rules {
            if let Some(rule) = self.rule(r) {
                clauses.push(ActionClause::Rule(rule));
            }
        }
        ActionDecl {
            description: tf.description.as_ref().map(|d| self.str(d)),
            clauses,
            span: span(t.span()),
            name,
        }
    }

    fn param(&mut self, name: &S<String>, p: &S<ParamFile>) -> Option<ParamDecl> {
        let pf = p.get_ref();
        let Some(ty) = &pf.ty else {
            self.config.push(ConfigError::Inline {
                message: format!("inline parameter `{}` has no type", name.get_ref()),
                span: span(name.span()).into(),
                help: Some(
                    "an inline tool declares each parameter's type, e.g. `type = \"Iban\"` or `type = \"Money\"`"
                        .into(),
                ),
            });
            return None;
        };
        let mut ty = self.ty(ty)?;
        self.record_fields(&mut ty, &pf.fields);
        Some(ParamDecl {
            name: self.name(name),
            ty,
            options: self.options(name, pf),
            span: span(name.span()).to(span(p.span())),
        })
    }

    /// `[tools.params.P.fields.F]`: each field's options onto the field of
    /// the record type (`type = "list<{ F: Type, ... }>"`), nested fields
    /// onto the nested record.
    fn record_fields(&mut self, ty: &mut TypeExpr, fields: &BTreeMap<S<String>, S<ParamFile>>) {
        if fields.is_empty() {
            return;
        }
        let record = match &mut ty.kind {
            TypeExprKind::Generic(_, inner) => match &mut inner.kind {
                TypeExprKind::Record(fs) => Some(fs),
                _ => None,
            },
            TypeExprKind::Record(fs) => Some(fs),
            _ => None,
        };
        let Some(record) = record else {
            if let Some((first, _)) = fields.iter().next() {
                self.config.push(ConfigError::Inline {
                    message: "`fields` describe a record, and this type is not one".into(),
                    span: span(first.span()).into(),
                    help: Some(
                        "a record type is written `{ path: Path, text: Text }`, a list of them `list<{ ... }>`"
                            .into(),
                    ),
                });
            }
            return;
        };
        for (fname, fp) in sorted(fields) {
            let Some(f) = record.iter_mut().find(|f| f.name.text == *fname.get_ref()) else {
                let names: Vec<&str> = record.iter().map(|f| f.name.text.as_str()).collect();
                self.config.push(ConfigError::Inline {
                    message: format!("the record has no field `{}`", fname.get_ref()),
                    span: span(fname.span()).into(),
                    help: crate::diagnostics::suggest(fname.get_ref(), names.iter().copied())
                        .or_else(|| Some(format!("its fields: {}", names.join(", ")))),
                });
                continue;
            };
            let fpf = fp.get_ref();
            let mapping = [
                ("type", fpf.ty.as_ref().map(|x| x.span())),
                ("arg", fpf.arg.as_ref().map(|x| x.span())),
                ("scale", fpf.scale.as_ref().map(|x| x.span())),
                ("format", fpf.format.as_ref().map(|x| x.span())),
                ("value", fpf.value.as_ref().map(|x| x.span())),
                ("claim", fpf.claim.as_ref().map(|x| x.span())),
            ];
            for (key, at) in mapping {
                if let Some(at) = at {
                    self.config.push(ConfigError::Inline {
                        message: format!("a record field takes no `{key}`"),
                        span: span(at).into(),
                        help: Some(
                            "a field's type is written in the record type, and a record goes to the tool as the object the agent sent"
                                .into(),
                        ),
                    });
                }
            }
            let options = self.options(fname, fpf);
            f.options.extend(options);
            self.record_fields(&mut f.ty, &fpf.fields);
        }
    }

    /// A parameter's (or a record field's) options, as the pack language
    /// writes them after its type.
    fn options(&mut self, name: &S<String>, pf: &ParamFile) -> Vec<ParamOption> {
        let mut options = vec![];
        let critical = pf.critical.as_ref().map(|c| *c.get_ref());
        if critical == Some(true) || pf.sources.is_some() {
            if critical == Some(false) {
                self.config.push(ConfigError::Inline {
                    message: format!("parameter `{}` has sources but `critical = false`", name.get_ref()),
                    span: pf.critical.as_ref().map(|c| span(c.span())).unwrap_or_default().into(),
                    help: Some("sources are where a critical value must come from: remove them, or `critical = true`".into()),
                });
            }
            let mut sources = vec![];
            if let Some(list) = &pf.sources {
                for s in list.get_ref() {
                    sources.extend(self.source_path(s));
                }
            }
            let sp = pf
                .critical
                .as_ref()
                .map(|c| span(c.span()))
                .or(pf.sources.as_ref().map(|s| span(s.span())))
                .unwrap_or_else(|| span(name.span()));
            options.push(ParamOption::Critical { sources, span: sp });
        }
        if let Some(n) = &pf.normalize {
            options.push(ParamOption::Normalize(self.name(n)));
        }
        if let Some(d) = &pf.default {
            options.extend(self.literal(d).map(ParamOption::Default));
        }
        if let Some(h) = &pf.hint {
            options.push(ParamOption::Hint(self.str(h)));
        }
        if let Some(s) = &pf.secret
            && *s.get_ref()
        {
            options.push(ParamOption::Secret(span(s.span())));
        }
        if let Some(o) = &pf.optional
            && *o.get_ref()
        {
            options.push(ParamOption::Optional(span(o.span())));
        }
        let validator = |n: &str, args: Vec<Literal>, is_range: bool, sp: Span| {
            ParamOption::Validator(ValidatorDecl {
                name: Name {
                    text: n.into(),
                    span: sp,
                },
                args,
                is_range,
                span: sp,
            })
        };
        for (n, v) in [
            ("max_len", &pf.max_len),
            ("min_len", &pf.min_len),
            ("min_items", &pf.min_items),
            ("max_items", &pf.max_items),
        ] {
            if let Some(v) = v {
                let sp = span(v.span());
                let arg = Literal {
                    kind: LitKind::Int(*v.get_ref()),
                    span: sp,
                };
                options.push(validator(n, vec![arg], false, sp));
            }
        }
        if let Some(r) = &pf.range {
            let mut args = vec![];
            for v in r.get_ref() {
                args.extend(self.literal(v));
            }
            options.push(validator("range", args, true, span(r.span())));
        }
        if let Some(pat) = &pf.pattern {
            let sp = span(pat.span());
            let arg = Literal {
                kind: LitKind::Str(pat.get_ref().clone()),
                span: sp,
            };
            options.push(validator("pattern", vec![arg], false, sp));
        }
        if let Some(ne) = &pf.nonempty
            && *ne.get_ref()
        {
            options.push(validator("nonempty", vec![], false, span(ne.span())));
        }
        options
    }

    fn rule(&mut self, r: &S<RuleFile>) -> Option<RuleDecl> {
        let rf = r.get_ref();
        let kind = match rf.kind.get_ref().as_str() {
            "forbid" => RuleKind::Forbid,
            "step_up" => RuleKind::StepUp,
            "four_eyes" => RuleKind::FourEyes,
            other => {
                self.config.push(ConfigError::Inline {
                    message: format!("unknown rule kind `{other}`"),
                    span: span(rf.kind.span()).into(),
                    help: Some("a rule is `forbid`, `step_up` or `four_eyes`".into()),
                });
                return None;
            }
        };
        let always = rf.always.as_ref().is_some_and(|a| *a.get_ref());
        let when = match (&rf.when, always) {
            (Some(w), false) => Some(self.expr(w)?),
            (None, true) => None,
            _ => {
                self.config.push(ConfigError::Inline {
                    message: "a rule has exactly one of `when` and `always = true`".into(),
                    span: span(r.span()).into(),
                    help: Some("e.g. `when = \"amount > 1_000.00\"`".into()),
                });
                return None;
            }
        };
        Some(RuleDecl {
            kind,
            reason: self.str(&rf.reason),
            when,
            hint: rf.hint.as_ref().map(|h| self.str(h)),
            role: rf.by.as_ref().map(|b| self.str(b)),
            span: span(r.span()),
        })
    }
}

/// A TOML table's entries in the order they were written.
pub(super) fn sorted<V>(m: &std::collections::BTreeMap<S<String>, V>) -> Vec<(&S<String>, &V)> {
    let mut v: Vec<(&S<String>, &V)> = m.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}
