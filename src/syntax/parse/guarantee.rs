//! `guarantee` statements: what a pack promises never happens, proven by
//! `ipc build` (src/guarantee).

use super::*;

/// A guarantee's actions (`payment.transfer`, `payment.*`, `every action`,
/// `every action with NAME: Type`) written at byte `offset` of a larger
/// file: the MCP proxy's TOML states guarantees with it.
pub fn parse_scope_at(text: &str, offset: usize) -> Result<GuaranteeScope, Vec<PackDiagnostic>> {
    // `fragment` hands over the fragment's first inner pair: the scope
    // itself (reading a scope inside it made every scope `every action`)
    fragment(text, offset, Rule::scope_fragment, |b, p| {
        match p.as_rule() {
            Rule::guarantee_scope => b.guarantee_scope(p),
            _ => GuaranteeScope::Every(Span::new(offset, offset)),
        }
    })
}

impl Builder {
    pub(super) fn guarantee(&mut self, p: Pair<'_, Rule>) -> GuaranteeDecl {
        let span: Span = p.as_span().into();
        let mut g = GuaranteeDecl {
            reason: Str {
                value: String::new(),
                span,
            },
            level: None,
            scope: GuaranteeScope::Every(span),
            when: None,
            span,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::string => g.reason = self.string(it),
                Rule::guarantee_never | Rule::guarantee_need => {
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::guarantee_scope => g.scope = self.guarantee_scope(x),
                            Rule::int => g.level = Some(self.level(x)),
                            Rule::when_clause => {
                                g.when = x
                                    .into_inner()
                                    .find(|e| e.as_rule() == Rule::expr)
                                    .map(|e| self.top_expr(e))
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        g
    }

    fn level(&mut self, p: Pair<'_, Rule>) -> (i64, Span) {
        let span: Span = p.as_span().into();
        let text = p.as_str().replace('_', "");
        match text.parse::<i64>() {
            Ok(n) => (n, span),
            Err(_) => {
                self.errors.push(PackDiagnostic::InvalidLiteral {
                    text: p.as_str().to_string(),
                    reason: "not an approval level".into(),
                    span: span.into(),
                    help: Some("approval levels are 1 (the user) and 2 (four eyes)".into()),
                });
                (0, span)
            }
        }
    }

    fn guarantee_scope(&mut self, p: Pair<'_, Rule>) -> GuaranteeScope {
        let span: Span = p.as_span().into();
        let Some(inner) = p.into_inner().next() else {
            return GuaranteeScope::Every(span);
        };
        match inner.as_rule() {
            Rule::dotted => GuaranteeScope::Action(name(inner)),
            Rule::scope_prefix => {
                let text = inner.as_str().trim_end_matches(".*").to_string();
                let s = inner.as_span();
                GuaranteeScope::Prefix(Name {
                    text,
                    span: Span::new(s.start(), s.end()),
                })
            }
            Rule::scope_with => {
                let mut n = empty_name();
                let mut ty = None;
                for x in inner.into_inner() {
                    match x.as_rule() {
                        Rule::ident => n = name(x),
                        Rule::type_expr => ty = Some(self.type_expr(x)),
                        _ => {}
                    }
                }
                GuaranteeScope::WithParam {
                    name: n,
                    ty: ty.unwrap_or_else(empty_type),
                    span,
                }
            }
            _ => GuaranteeScope::Every(span),
        }
    }
}
