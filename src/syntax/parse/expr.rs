//! Expressions, paths and literals, with the depth limit that keeps every
//! later walk of an expression from overflowing the stack.

use super::*;

impl Builder {
    /// An expression at the top of a fact or rule: refused (with a
    /// diagnostic) when its tree would be deeper than [`MAX_EXPR_DEPTH`].
    pub(super) fn top_expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span: Span = p.as_span().into();
        if self.too_deep(&p, span) {
            return empty_expr(span);
        }
        self.expr(p)
    }

    pub(super) fn too_deep(&mut self, p: &Pair<'_, Rule>, span: Span) -> bool {
        if tree_depth(p) > MAX_EXPR_DEPTH {
            self.errors.push(PackDiagnostic::TooDeep {
                limit: MAX_EXPR_DEPTH,
                span: span.into(),
            });
            return true;
        }
        false
    }

    pub(super) fn expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span: Span = p.as_span().into();
        match p.as_rule() {
            Rule::expr => match p.into_inner().next() {
                Some(x) => self.expr(x),
                None => empty_expr(span),
            },
            Rule::or_expr | Rule::and_expr => {
                let op = if p.as_rule() == Rule::or_expr {
                    BinOp::Or
                } else {
                    BinOp::And
                };
                let operands: Vec<Expr> = p
                    .into_inner()
                    .filter(|x| !matches!(x.as_rule(), Rule::kw_or | Rule::kw_and))
                    .map(|x| self.expr(x))
                    .collect();
                fold_left(op, operands, span)
            }
            Rule::not_expr => {
                let mut nots = vec![];
                let mut inner = None;
                for x in p.into_inner() {
                    if x.as_rule() == Rule::not_op {
                        nots.push(Span::from(x.as_span()));
                    } else {
                        inner = Some(self.expr(x));
                    }
                }
                let mut e = inner.unwrap_or_else(|| empty_expr(span));
                for s in nots.into_iter().rev() {
                    let sp = s.to(e.span);
                    e = Expr {
                        kind: ExprKind::Not(Box::new(e)),
                        span: sp,
                    };
                }
                e
            }
            Rule::cmp_expr => {
                let mut it = p.into_inner();
                let lhs = it
                    .next()
                    .map(|x| self.expr(x))
                    .unwrap_or_else(|| empty_expr(span));
                match (it.next(), it.next()) {
                    (Some(op), Some(rhs)) => {
                        let op = match op.as_str() {
                            "==" => BinOp::Eq,
                            "!=" => BinOp::Ne,
                            "<=" => BinOp::Le,
                            ">=" => BinOp::Ge,
                            "<" => BinOp::Lt,
                            ">" => BinOp::Gt,
                            _ => BinOp::In,
                        };
                        let rhs = self.expr(rhs);
                        Expr {
                            kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                            span,
                        }
                    }
                    _ => lhs,
                }
            }
            Rule::sum_expr => {
                let mut it = p.into_inner();
                let mut e = it
                    .next()
                    .map(|x| self.expr(x))
                    .unwrap_or_else(|| empty_expr(span));
                while let (Some(op), Some(rhs)) = (it.next(), it.next()) {
                    let op = if op.as_str() == "+" {
                        BinOp::Add
                    } else {
                        BinOp::Sub
                    };
                    let rhs = self.expr(rhs);
                    let sp = e.span.to(rhs.span);
                    e = Expr {
                        kind: ExprKind::Binary(op, Box::new(e), Box::new(rhs)),
                        span: sp,
                    };
                }
                e
            }
            Rule::literal
            | Rule::duration
            | Rule::money
            | Rule::int
            | Rule::string
            | Rule::boolean => {
                let l = self.literal(p);
                lit_to_expr(l)
            }
            Rule::now => Expr {
                kind: ExprKind::Now,
                span,
            },
            Rule::list_lit => Expr {
                kind: ExprKind::List(p.into_inner().map(|x| self.expr(x)).collect()),
                span,
            },
            Rule::path => Expr {
                kind: ExprKind::Path(self.path(p)),
                span,
            },
            _ => empty_expr(span),
        }
    }

    pub(super) fn path(&mut self, p: Pair<'_, Rule>) -> Path {
        let span = p.as_span().into();
        let mut head = empty_name();
        let mut steps = vec![];
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::path_head => head = name(it),
                Rule::field_step => {
                    if let Some(n) = last_named(it, Rule::word) {
                        steps.push(PathStep::Field(n))
                    }
                }
                Rule::index_step => {
                    let s: Span = it.as_span().into();
                    if let Some(e) = it.into_inner().next() {
                        let e = self.expr(e);
                        steps.push(PathStep::Index(Box::new(e), s))
                    }
                }
                _ => {}
            }
        }
        Path { head, steps, span }
    }

    pub(super) fn literal(&mut self, p: Pair<'_, Rule>) -> Literal {
        let span: Span = p.as_span().into();
        let inner = if p.as_rule() == Rule::literal {
            match p.into_inner().next() {
                Some(x) => x,
                None => {
                    return Literal {
                        kind: LitKind::Bool(false),
                        span,
                    };
                }
            }
        } else {
            p
        };
        let text = inner.as_str();
        let kind = match inner.as_rule() {
            Rule::int => LitKind::Int(self.int(text, span)),
            Rule::money => LitKind::Money(self.money(text, span)),
            Rule::boolean => LitKind::Bool(text == "true"),
            Rule::string => LitKind::Str(self.string(inner).value),
            Rule::duration => {
                let mut it = inner.into_inner();
                let n = it.next().map(|x| self.int(x.as_str(), span)).unwrap_or(0);
                let unit = it.next().map(|x| x.as_str()).unwrap_or("seconds");
                let mult = match unit.trim_end_matches('s') {
                    "day" => 86_400,
                    "hour" => 3_600,
                    "minute" => 60,
                    _ => 1,
                };
                LitKind::Duration(n.checked_mul(mult).unwrap_or_else(|| {
                    self.errors.push(PackDiagnostic::InvalidLiteral {
                        text: text.to_string(),
                        reason: "duration too large".into(),
                        span: span.into(),
                        help: None,
                    });
                    0
                }))
            }
            Rule::list_lit => {
                let mut items = vec![];
                for e in inner.into_inner() {
                    // a list literal in a literal position holds literals only
                    let ex = self.expr(e);
                    match ex.kind {
                        ExprKind::Lit(k) => items.push(Literal {
                            kind: k,
                            span: ex.span,
                        }),
                        _ => self.errors.push(PackDiagnostic::InvalidLiteral {
                            text: "[...]".into(),
                            reason: "a list here may hold literals only".into(),
                            span: ex.span.into(),
                            help: None,
                        }),
                    }
                }
                LitKind::List(items)
            }
            _ => LitKind::Bool(false),
        };
        Literal { kind, span }
    }

    pub(super) fn int(&mut self, text: &str, span: Span) -> i64 {
        let digits: String = text.chars().filter(|c| *c != '_').collect();
        digits.parse::<i64>().unwrap_or_else(|_| {
            self.errors.push(PackDiagnostic::InvalidLiteral {
                text: text.to_string(),
                reason: "does not fit in a 64-bit integer".into(),
                span: span.into(),
                help: None,
            });
            0
        })
    }

    /// `10_000.00` to 1_000_000 minor units; more than two decimals is an
    /// error, never a rounding.
    pub(super) fn money(&mut self, text: &str, span: Span) -> i64 {
        let clean: String = text.chars().filter(|c| *c != '_').collect();
        let (reason, help) = match Money::parse_bounded(&clean, i64::MAX.unsigned_abs()) {
            Ok(m) => return m.minor(),
            Err(MoneyError::TooManyDecimals) => (
                "an amount has at most two decimals",
                Some("amounts are minor units (cents); write `12.34`".into()),
            ),
            Err(MoneyError::TooLarge) => ("amount does not fit in 64-bit minor units", None),
            Err(MoneyError::NotDecimal) => ("not a decimal amount", None),
        };
        self.errors.push(PackDiagnostic::InvalidLiteral {
            text: text.to_string(),
            reason: reason.into(),
            span: span.into(),
            help,
        });
        0
    }
}

/// The depth of the syntax tree a pair will build: a chain of `n` operands
/// adds `n` levels. Recurses over pest pairs only, whose depth the bracket
/// limit already bounds.
fn tree_depth(p: &Pair<'_, Rule>) -> usize {
    let children: Vec<Pair<'_, Rule>> = p.clone().into_inner().collect();
    let deepest = children.iter().map(tree_depth).max().unwrap_or(0);
    let chain = match p.as_rule() {
        Rule::or_expr | Rule::and_expr | Rule::sum_expr | Rule::not_expr => children
            .iter()
            .filter(|c| !matches!(c.as_rule(), Rule::kw_and | Rule::kw_or | Rule::add_op))
            .count(),
        _ => 1,
    };
    deepest + chain
}

fn fold_left(op: BinOp, operands: Vec<Expr>, span: Span) -> Expr {
    let mut it = operands.into_iter();
    let Some(mut e) = it.next() else {
        return empty_expr(span);
    };
    for rhs in it {
        let sp = e.span.to(rhs.span);
        e = Expr {
            kind: ExprKind::Binary(op, Box::new(e), Box::new(rhs)),
            span: sp,
        };
    }
    e
}

fn lit_to_expr(l: Literal) -> Expr {
    let span = l.span;
    match l.kind {
        LitKind::List(items) => Expr {
            kind: ExprKind::List(items.into_iter().map(lit_to_expr).collect()),
            span,
        },
        k => Expr {
            kind: ExprKind::Lit(k),
            span,
        },
    }
}
