//! Declarations: the file and its header, strings, the mandate block and
//! its claims, types, registries.

use super::*;

impl Builder {
    pub(super) fn file(&mut self, p: Pair<'_, Rule>) -> File {
        let mut inner = p.into_inner();
        let header = inner
            .next()
            .map(|h| self.header(h))
            .unwrap_or_else(|| Header {
                name: Name {
                    text: String::new(),
                    span: Span::default(),
                },
                version: None,
                description: None,
                shadow_never: None,
            });
        let mut items = vec![];
        for it in inner {
            match it.as_rule() {
                Rule::mandate_block => items.push(Item::Mandate(self.mandate(it))),
                Rule::registry_decl => items.push(Item::Registry(self.registry(it))),
                Rule::action_decl => items.push(Item::Action(self.action(it))),
                Rule::guarantee_decl => items.push(Item::Guarantee(self.guarantee(it))),
                _ => {}
            }
        }
        File { header, items }
    }

    pub(super) fn header(&mut self, p: Pair<'_, Rule>) -> Header {
        let mut h = Header {
            name: Name {
                text: String::new(),
                span: p.as_span().into(),
            },
            version: None,
            description: None,
            shadow_never: None,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident => h.name = name(it),
                Rule::version_clause => {
                    h.version = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::string)
                        .map(|s| self.string(s))
                }
                Rule::string => h.description = Some(self.string(it)),
                Rule::shadow_clause => h.shadow_never = Some(it.as_span().into()),
                _ => {}
            }
        }
        h
    }

    pub(super) fn string(&mut self, p: Pair<'_, Rule>) -> Str {
        let span: Span = p.as_span().into();
        let raw = p.into_inner().next().map(|x| x.as_str()).unwrap_or("");
        let mut value = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('"') => value.push('"'),
                    Some('\\') => value.push('\\'),
                    Some(other) => {
                        self.errors.push(PackDiagnostic::InvalidLiteral {
                            text: format!("\\{other}"),
                            reason: "unknown escape".into(),
                            span: span.into(),
                            help: Some("escapes are \\n, \\t, \\\" and \\\\".into()),
                        });
                    }
                    None => {}
                }
            } else {
                value.push(c);
            }
        }
        Str { value, span }
    }

    pub(super) fn mandate(&mut self, p: Pair<'_, Rule>) -> MandateBlock {
        let span = p.as_span().into();
        let claims = p
            .into_inner()
            .filter(|x| x.as_rule() == Rule::claim)
            .map(|c| self.field(c))
            .collect();
        MandateBlock { claims, span }
    }

    pub(super) fn field(&mut self, p: Pair<'_, Rule>) -> Field {
        let mut n = None;
        let mut ty = None;
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident | Rule::word => n = Some(name(it)),
                Rule::type_expr => ty = Some(self.type_expr(it)),
                _ => {}
            }
        }
        Field {
            name: n.unwrap_or_else(empty_name),
            ty: ty.unwrap_or_else(empty_type),
        }
    }

    pub(super) fn type_expr(&mut self, p: Pair<'_, Rule>) -> TypeExpr {
        let span: Span = p.as_span().into();
        let Some(inner) = p.into_inner().next() else {
            return empty_type();
        };
        let kind = match inner.as_rule() {
            Rule::enum_type => TypeExprKind::Enum(
                inner
                    .into_inner()
                    .filter(|x| x.as_rule() == Rule::enum_variant)
                    .map(name)
                    .collect(),
            ),
            Rule::record_type => TypeExprKind::Record(
                inner
                    .into_inner()
                    .filter(|x| x.as_rule() == Rule::record_field)
                    .map(|f| self.record_field(f))
                    .collect(),
            ),
            Rule::selection_type => TypeExprKind::Selection(
                inner
                    .into_inner()
                    .find(|x| x.as_rule() == Rule::word)
                    .map(name)
                    .unwrap_or_else(empty_name),
            ),
            Rule::generic_type => {
                let mut it = inner.into_inner();
                let g = it.next().map(name).unwrap_or_else(empty_name);
                let arg = it
                    .next()
                    .map(|t| self.type_expr(t))
                    .unwrap_or_else(empty_type);
                TypeExprKind::Generic(g, Box::new(arg))
            }
            _ => TypeExprKind::Named(
                inner
                    .into_inner()
                    .next()
                    .map(name)
                    .unwrap_or_else(empty_name),
            ),
        };
        TypeExpr { kind, span }
    }

    pub(super) fn registry(&mut self, p: Pair<'_, Rule>) -> RegistryDecl {
        let span = p.as_span().into();
        let mut n = empty_name();
        let mut shape = RegistryShape::Set(empty_type());
        let mut global = false;
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident => n = name(it),
                Rule::registry_set => {
                    if let Some(t) = it.into_inner().next() {
                        shape = RegistryShape::Set(self.type_expr(t));
                    }
                }
                Rule::registry_keyed => {
                    let mut key = empty_type();
                    let mut fields = vec![];
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::type_expr => key = self.type_expr(x),
                            Rule::field => fields.push(self.field(x)),
                            _ => {}
                        }
                    }
                    shape = RegistryShape::Keyed { key, fields };
                }
                Rule::global_flag => global = true,
                _ => {}
            }
        }
        RegistryDecl {
            name: n,
            shape,
            global,
            span,
        }
    }
}
