//! `guarantee` statements: the actions each covers, its approval level, and
//! its condition typed in every covered action.
//!
//! A guarantee's condition may read what a fact reads (the mandate, the
//! registries). Cedar sees only the action's context, so each part of the
//! condition that reads the mandate or a registry (`payee_iban in
//! registry.sanctions`) becomes a fact of every covered action, named by its
//! text, which the gateway computes as it computes the pack's own facts: the
//! proof is then over the decision the gateway actually makes, also for an
//! action whose author forgot the rule.

use super::Cx;
use crate::diagnostics::{PackDiagnostic, suggest};
use crate::ir::{self, BinOp, Expr};
use crate::syntax::ast::{self, ExprKind, GuaranteeScope};

impl Cx {
    pub(super) fn guarantee(
        &mut self,
        g: &ast::GuaranteeDecl,
        actions: &mut [ir::Action],
    ) -> Option<ir::Guarantee> {
        let errors_before = self.errors.len();
        let level = match g.level {
            None => None,
            Some((n, span)) => match u8::try_from(n) {
                Ok(l @ 1..=2) => Some(l),
                _ => {
                    self.err(PackDiagnostic::GuaranteeLevel {
                        level: n,
                        span: span.into(),
                    });
                    None
                }
            },
        };
        let (scope, covered) = self.covered(g, actions);
        if covered.is_empty() {
            return None;
        }
        let mut covers = vec![];
        for i in covered {
            let before = self.errors.len();
            let when = match &g.when {
                None => None,
                Some(w) => {
                    let x = self.guarantee_condition(w, &actions[i]);
                    if self.errors.len() > before {
                        self.scope_help(before, g, &actions[i]);
                        // the same mistake would be reported for every
                        // action of the scope: once is enough
                        break;
                    }
                    let mut added = vec![];
                    let x = self.hoist(w, x, &actions[i].facts, &mut added);
                    let line = self.line(g.span.start);
                    for (name, ty, expr) in added {
                        if actions[i].fact(&name).is_none() {
                            actions[i].facts.push(ir::Fact {
                                name,
                                ty,
                                expr,
                                line,
                            });
                        }
                    }
                    Some(x)
                }
            };
            covers.push(ir::Covered {
                action: actions[i].name.clone(),
                when,
            });
        }
        if self.errors.len() > errors_before {
            return None;
        }
        Some(ir::Guarantee {
            reason: g.reason.value.clone(),
            level,
            scope,
            covers,
            line: self.line(g.span.start),
        })
    }

    /// A name the condition reads that a covered action lacks: say that the
    /// scope covers it, and how to cover only the actions that have it.
    fn scope_help(&mut self, from: usize, g: &ast::GuaranteeDecl, a: &ir::Action) {
        for d in &mut self.errors[from..] {
            if let PackDiagnostic::UnknownName { name, help, .. } = d {
                *help = Some(format!(
                    "guarantee `{}` covers `{}`, which has no parameter or fact `{name}`; to cover only the actions that have it, write `every action with {name}: TYPE`",
                    g.reason.value, a.name
                ));
            }
        }
    }

    /// The scope as written and the indices of the actions it covers.
    fn covered(&mut self, g: &ast::GuaranteeDecl, actions: &[ir::Action]) -> (String, Vec<usize>) {
        let names = || actions.iter().map(|a| a.name.as_str());
        let (text, found, help): (String, Vec<usize>, Option<String>) = match &g.scope {
            GuaranteeScope::Action(n) => (
                n.text.clone(),
                actions
                    .iter()
                    .position(|a| a.name == n.text)
                    .into_iter()
                    .collect(),
                suggest(&n.text, names()),
            ),
            GuaranteeScope::Prefix(n) => {
                let prefix = format!("{}.", n.text);
                (
                    format!("{}.*", n.text),
                    (0..actions.len())
                        .filter(|&i| actions[i].name.starts_with(&prefix))
                        .collect(),
                    Some(format!(
                        "`{}.*` covers the actions named `{}…`; the pack's are {}",
                        n.text,
                        prefix,
                        action_list(actions)
                    )),
                )
            }
            GuaranteeScope::Every(_) => ("every action".into(), (0..actions.len()).collect(), None),
            GuaranteeScope::WithParam { name, ty, .. } => {
                let Some(want) = self.resolve_value_type(ty, "a guarantee's parameter") else {
                    return (String::new(), vec![]);
                };
                let with_name: Vec<String> = actions
                    .iter()
                    .filter_map(|a| {
                        a.param(&name.text)
                            .map(|p| format!("`{}` ({})", a.name, p.ty))
                    })
                    .collect();
                (
                    format!("every action with {}: {want}", name.text),
                    (0..actions.len())
                        .filter(|&i| actions[i].param(&name.text).is_some_and(|p| p.ty == want))
                        .collect(),
                    Some(if with_name.is_empty() {
                        format!("no action has a parameter `{}`", name.text)
                    } else {
                        format!(
                            "`{}` is a parameter of {}, of another type",
                            name.text,
                            with_name.join(", ")
                        )
                    }),
                )
            }
        };
        if found.is_empty() {
            self.err(PackDiagnostic::GuaranteeCoversNothing {
                reason: g.reason.value.clone(),
                scope: format!("`{text}`"),
                span: g.scope.span().into(),
                help,
            });
        }
        (text, found)
    }

    /// The condition with each read of the mandate or a registry (a claim,
    /// a record's field, `VALUE in registry.R`) replaced by a fact: the
    /// action's own fact when one computes exactly that expression (so the
    /// proof sees the very value its rules read), else a new one, collected
    /// in `added` (name, type, expression).
    fn hoist(
        &self,
        src: &ast::Expr,
        x: Expr,
        facts: &[ir::Fact],
        added: &mut Vec<(String, ir::Type, Expr)>,
    ) -> Expr {
        if reads_store(&x)
            && let Some(f) = facts.iter().find(|f| f.expr == x)
        {
            return Expr::Fact {
                name: f.name.clone(),
            };
        }
        let ty = match &x {
            Expr::Binary {
                op: BinOp::In, rhs, ..
            } if matches!(**rhs, Expr::Registry { .. } | Expr::Selection { .. }) => {
                Some(ir::Type::Bool)
            }
            Expr::Claim { name } => self.claims.get(name).map(|c| c.0.clone()),
            Expr::Lookup {
                registry, field, ..
            } => self
                .registries
                .get(registry)
                .and_then(|r| r.0.field(field).cloned()),
            _ => None,
        };
        if let Some(ty) = ty {
            let name = self.fact_name(src.span);
            if !added.iter().any(|(n, ..)| *n == name) {
                added.push((name.clone(), ty, x));
            }
            return Expr::Fact { name };
        }
        match (&src.kind, x) {
            (ExprKind::Binary(_, l, r), Expr::Binary { op, lhs, rhs }) => Expr::Binary {
                op,
                lhs: Box::new(self.hoist(l, *lhs, facts, added)),
                rhs: Box::new(self.hoist(r, *rhs, facts, added)),
            },
            (ExprKind::Not(inner), Expr::Not { expr }) => Expr::Not {
                expr: Box::new(self.hoist(inner, *expr, facts, added)),
            },
            (ExprKind::List(srcs), Expr::List { items }) if srcs.len() == items.len() => {
                Expr::List {
                    items: srcs
                        .iter()
                        .zip(items)
                        .map(|(s, x)| self.hoist(s, x, facts, added))
                        .collect(),
                }
            }
            (_, x) => x,
        }
    }

    /// A fact's name from its text: whitespace folded, so that two
    /// guarantees writing the same read share one fact. No name the pack
    /// can declare has a space or a dot, so it never meets one.
    fn fact_name(&self, span: ast::Span) -> String {
        let text = self.source.get(span.start..span.end).unwrap_or_default();
        text.split_whitespace().collect::<Vec<_>>().join(" ")
    }
}

fn action_list(actions: &[ir::Action]) -> String {
    let names: Vec<String> = actions.iter().map(|a| format!("`{}`", a.name)).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Whether an expression reads the mandate or a registry (which only the
/// gateway can compute).
fn reads_store(e: &Expr) -> bool {
    match e {
        Expr::Claim { .. }
        | Expr::Registry { .. }
        | Expr::Selection { .. }
        | Expr::Lookup { .. } => true,
        Expr::Lit { .. } | Expr::Param { .. } | Expr::Fact { .. } | Expr::Now => false,
        Expr::List { items } => items.iter().any(reads_store),
        Expr::Not { expr } => reads_store(expr),
        Expr::Binary { lhs, rhs, .. } => reads_store(lhs) || reads_store(rhs),
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::{Expr, Type};

    const PACK: &str = r#"pack p
registry blocked: set<Iban> global
action pay.a "A" {
  scope s
  executor external
  param payee_iban: Iban
  fact blocked_payee = payee_iban in registry.blocked
  forbid "blocked" when blocked_payee
}
action pay.b "B, which forgot the rule" {
  scope s
  executor external
  param payee_iban: Iban
}
action other.c "C, out of scope" {
  scope s
  executor external
  param payee_iban: Id
}
guarantee "never blocked" never allow every action with payee_iban: Iban when payee_iban in registry.blocked
"#;

    /// The read of the registry is the action's own fact where it has one,
    /// a fact the gateway computes where it has none; an action out of
    /// scope is left alone.
    #[test]
    fn registry_reads_become_facts_of_the_covered_actions() {
        let c = crate::check::check_text("p.ipc", PACK);
        let pack = c.pack.expect("checks");
        let g = &pack.guarantees[0];
        let covered: Vec<&str> = g.covers.iter().map(|c| c.action.as_str()).collect();
        assert_eq!(covered, ["pay.a", "pay.b"]);
        assert_eq!(
            g.covers[0].when,
            Some(Expr::Fact {
                name: "blocked_payee".into()
            })
        );
        let name = "payee_iban in registry.blocked";
        assert_eq!(g.covers[1].when, Some(Expr::Fact { name: name.into() }));
        let b = pack.action("pay.b").unwrap();
        let f = b.fact(name).expect("the gateway computes it for pay.b");
        assert_eq!(f.ty, Type::Bool);
        assert_eq!(f.expr, pack.action("pay.a").unwrap().facts[0].expr);
        assert!(pack.action("pay.a").unwrap().fact(name).is_none());
        assert!(pack.action("other.c").unwrap().facts.is_empty());
    }

    /// A selection's membership (`x in mandate.S`) is a read the gateway
    /// computes, hoisted to a fact like a registry's membership: the
    /// action's own fact when it computes exactly that, else a new one.
    #[test]
    fn selection_reads_become_facts_of_the_covered_actions() {
        const SEL: &str = r#"pack p
mandate { product: selection over registry.catalogue }
registry catalogue by Id { price: Money } global
action buy.a "A" {
  scope s
  executor external
  param product_id: Id critical from registry.catalogue
  fact picked = product_id in mandate.product
  step_up "not picked" when not picked
}
action buy.b "B" {
  scope s
  executor external
  param product_id: Id critical from registry.catalogue
}
guarantee "outside the selection the user decides"
  buy.* need level 1 when not (product_id in mandate.product)
"#;
        let c = crate::check::check_text("p.ipc", SEL);
        let pack = c.pack.expect("checks");
        let g = &pack.guarantees[0];
        let not = |name: &str| {
            Some(Expr::Not {
                expr: Box::new(Expr::Fact { name: name.into() }),
            })
        };
        assert_eq!(g.covers[0].when, not("picked"));
        let name = "product_id in mandate.product";
        assert_eq!(g.covers[1].when, not(name));
        let f = pack.action("buy.b").unwrap().fact(name).expect("added");
        assert_eq!(f.ty, Type::Bool);
        assert_eq!(f.expr, pack.action("buy.a").unwrap().facts[0].expr);
    }
}
