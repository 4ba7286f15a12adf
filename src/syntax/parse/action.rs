//! Actions: their clauses, parameters (with their options and record
//! fields) and rules.

use super::*;

impl Builder {
    pub(super) fn action(&mut self, p: Pair<'_, Rule>) -> ActionDecl {
        let span = p.as_span().into();
        let mut a = ActionDecl {
            name: empty_name(),
            description: None,
            clauses: vec![],
            span,
        };
        for it in p.into_inner() {
            let cspan: Span = it.as_span().into();
            match it.as_rule() {
                Rule::dotted => a.name = name(it),
                Rule::string => a.description = Some(self.string(it)),
                Rule::scope_clause => {
                    if let Some(n) = last_named(it, Rule::dotted) {
                        a.clauses.push(ActionClause::Scope(n, cspan))
                    }
                }
                Rule::budget_clause => {
                    if let Some(n) = last_named(it, Rule::ident) {
                        a.clauses.push(ActionClause::Budget(n, cspan))
                    }
                }
                Rule::executor_clause => {
                    if let Some(n) = last_named(it, Rule::dotted) {
                        a.clauses.push(ActionClause::Executor(n, cspan))
                    }
                }
                Rule::param_decl => a.clauses.push(ActionClause::Param(self.param(it))),
                Rule::fact_decl => {
                    let mut n = empty_name();
                    let mut e = None;
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::ident => n = name(x),
                            Rule::expr => e = Some(self.top_expr(x)),
                            _ => {}
                        }
                    }
                    a.clauses.push(ActionClause::Fact(FactDecl {
                        name: n,
                        expr: e.unwrap_or_else(|| empty_expr(cspan)),
                        span: cspan,
                    }));
                }
                Rule::rule_decl => a.clauses.push(ActionClause::Rule(self.rule(it))),
                _ => {}
            }
        }
        a
    }

    pub(super) fn param(&mut self, p: Pair<'_, Rule>) -> ParamDecl {
        let (name, ty, options, span) = self.typed_with_options(p, Rule::ident);
        ParamDecl {
            name,
            ty,
            options,
            span,
        }
    }

    pub(super) fn record_field(&mut self, p: Pair<'_, Rule>) -> RecordField {
        let (name, ty, options, span) = self.typed_with_options(p, Rule::word);
        RecordField {
            name,
            ty,
            options,
            span,
        }
    }

    /// A parameter's or a record field's parts: its name (a `name_rule`),
    /// type, options and span.
    fn typed_with_options(
        &mut self,
        p: Pair<'_, Rule>,
        name_rule: Rule,
    ) -> (Name, TypeExpr, Vec<ParamOption>, Span) {
        let span = p.as_span().into();
        let (mut n, mut ty, mut options) = (empty_name(), empty_type(), vec![]);
        for it in p.into_inner() {
            match it.as_rule() {
                r if r == name_rule => n = name(it),
                Rule::type_expr => ty = self.type_expr(it),
                _ => options.extend(self.param_option(it)),
            }
        }
        (n, ty, options, span)
    }

    /// One option of a parameter or a record field.
    pub(super) fn param_option(&mut self, it: Pair<'_, Rule>) -> Option<ParamOption> {
        let ospan: Span = it.as_span().into();
        match it.as_rule() {
            Rule::critical_clause => {
                let mut kw = ospan;
                let mut sources = vec![];
                for x in it.into_inner() {
                    match x.as_rule() {
                        Rule::kw_critical => kw = x.as_span().into(),
                        Rule::source => {
                            let sp: Span = x.as_span().into();
                            if self.too_deep(&x, sp) {
                                continue;
                            }
                            if let Some(pp) = x.into_inner().next() {
                                sources.push(self.path(pp))
                            }
                        }
                        _ => {}
                    }
                }
                Some(ParamOption::Critical { sources, span: kw })
            }
            Rule::normalize_clause => last_named(it, Rule::ident).map(ParamOption::Normalize),
            Rule::default_clause => {
                let l = it.into_inner().find(|x| x.as_rule() == Rule::literal)?;
                Some(ParamOption::Default(self.literal(l)))
            }
            Rule::hint_clause => {
                let s = it.into_inner().find(|x| x.as_rule() == Rule::string)?;
                Some(ParamOption::Hint(self.string(s)))
            }
            Rule::secret_clause => Some(ParamOption::Secret(it.as_span().into())),
            Rule::optional_clause => Some(ParamOption::Optional(it.as_span().into())),
            Rule::validator => {
                let mut v = ValidatorDecl {
                    name: empty_name(),
                    args: vec![],
                    is_range: false,
                    span: ospan,
                };
                for x in it.into_inner() {
                    match x.as_rule() {
                        Rule::ident => v.name = name(x),
                        Rule::validator_args => {
                            for l in x.into_inner() {
                                v.args.push(self.literal(l));
                            }
                            v.is_range = v.args.len() == 2;
                        }
                        _ => {}
                    }
                }
                Some(ParamOption::Validator(v))
            }
            _ => None,
        }
    }

    pub(super) fn rule(&mut self, p: Pair<'_, Rule>) -> RuleDecl {
        let span: Span = p.as_span().into();
        let mut r = RuleDecl {
            kind: RuleKind::Forbid,
            reason: Str {
                value: String::new(),
                span,
            },
            when: None,
            hint: None,
            role: None,
            span,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::rule_kind => {
                    r.kind = match it.as_str() {
                        "step_up" => RuleKind::StepUp,
                        "four_eyes" => RuleKind::FourEyes,
                        _ => RuleKind::Forbid,
                    }
                }
                Rule::string => r.reason = self.string(it),
                Rule::role_clause => {
                    r.role = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::word)
                        .map(|w| Str {
                            value: w.as_str().to_string(),
                            span: w.as_span().into(),
                        })
                }
                Rule::when_clause => {
                    r.when = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::expr)
                        .map(|e| self.top_expr(e))
                }
                Rule::hint_clause => {
                    r.hint = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::string)
                        .map(|s| self.string(s))
                }
                _ => {}
            }
        }
        r
    }
}
