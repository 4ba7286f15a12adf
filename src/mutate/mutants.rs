//! Mutant generation on Cedar's typed syntax tree (`pst`): each mutant is
//! one policy of an action rewritten (or removed), never a text edit.
//!
//! Operators, per policy: a forbid removed (an approval rule removed); an
//! approval guard dropped (`context.approval_level < N` left out: the rule
//! applies at every level, no approval lifts it); the condition removed (a
//! permit's or a forbid's; an approval rule keeps its guard); each conjunct
//! dropped; each comparison's boundary shifted (`>` ↔ `>=`, `<` ↔ `<=`);
//! each integer threshold nudged by ±1; the effect flipped. Mutants whose
//! policy is identical to another one's of the same policy are dropped.

use crate::bundle::format::CTX_APPROVAL_LEVEL;
use cedar_policy::pst::{self, BinaryOp, Clause, Effect, Expr, Literal, Var};
use cedar_policy::{Policy, PolicySet};
use serde::Serialize;
use std::collections::HashSet;
use std::sync::Arc;

/// How a mutant was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Operator {
    /// A forbid removed.
    RemoveForbid,
    /// An approval rule (step-up, four eyes) removed.
    RemoveApprovalRule,
    /// The `context.approval_level < N` conjunct dropped.
    DropApprovalGuard,
    /// The condition removed (an approval rule keeps its guard).
    RemoveCondition,
    /// One conjunct of a condition dropped.
    DropConjunct,
    /// `>` ↔ `>=`, `<` ↔ `<=`.
    ShiftBoundary,
    /// An integer threshold plus or minus one.
    NudgeThreshold,
    /// `permit` ↔ `forbid`.
    FlipEffect,
}

impl Operator {
    pub fn name(self) -> &'static str {
        match self {
            Operator::RemoveForbid => "remove-forbid",
            Operator::RemoveApprovalRule => "remove-approval-rule",
            Operator::DropApprovalGuard => "drop-approval-guard",
            Operator::RemoveCondition => "remove-condition",
            Operator::DropConjunct => "drop-conjunct",
            Operator::ShiftBoundary => "shift-boundary",
            Operator::NudgeThreshold => "nudge-threshold",
            Operator::FlipEffect => "flip-effect",
        }
    }
}

/// One mutant of one action's policy set.
#[derive(Clone, Debug)]
pub struct Mutant {
    /// `<action>#<n>`, n from 1 in generation order (stable for a bundle).
    pub id: String,
    pub action: String,
    /// The policy it changes.
    pub policy_id: String,
    /// The policy's `@source` (`<pack>/<file>:<line>`).
    pub source: String,
    pub operator: Operator,
    /// What changed, in Cedar.
    pub description: String,
    /// The rewritten policy; `None` when it was removed.
    pub policy: Option<Policy>,
    /// The action's policies with the mutation applied.
    pub set: PolicySet,
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum MutantError {
    /// A policy cannot be read as a Cedar syntax tree to mutate.
    #[error("cannot read policy `{policy}` as a syntax tree: {reason}")]
    #[diagnostic(code(ipc::mutate::pst))]
    Pst { policy: String, reason: String },
    /// A mutated syntax tree does not make a Cedar policy.
    #[error("cannot build a mutant of policy `{policy}`: {reason}")]
    #[diagnostic(code(ipc::mutate::build))]
    Build { policy: String, reason: String },
}

/// `context.approval_level < N`: the guard of an approval rule.
pub fn is_guard(e: &Expr) -> bool {
    matches!(e, Expr::BinaryOp { op: BinaryOp::Less, left, right }
        if matches!(left.as_ref(), Expr::GetAttr { expr, attr }
            if matches!(expr.as_ref(), Expr::Var(Var::Context)) && attr.as_str() == CTX_APPROVAL_LEVEL)
        && matches!(right.as_ref(), Expr::Literal(Literal::Long(_))))
}

/// The conjuncts of `a && b && ...`, left to right.
pub fn conjuncts(e: &Arc<Expr>) -> Vec<Arc<Expr>> {
    match e.as_ref() {
        Expr::BinaryOp {
            op: BinaryOp::And,
            left,
            right,
        } => {
            let mut v = conjuncts(left);
            v.extend(conjuncts(right));
            v
        }
        _ => vec![e.clone()],
    }
}

/// `a && b && ...` (left-associative, as Cedar parses it); `None` if empty.
pub fn conjoin(parts: &[Arc<Expr>]) -> Option<Arc<Expr>> {
    let mut it = parts.iter();
    let first = it.next()?.clone();
    Some(it.fold(first, |acc, e| {
        Arc::new(Expr::BinaryOp {
            op: BinaryOp::And,
            left: acc,
            right: e.clone(),
        })
    }))
}

fn clause_expr(c: &Clause) -> &Arc<Expr> {
    match c {
        Clause::When(e) | Clause::Unless(e) => e,
    }
}

fn with_expr(c: &Clause, e: Arc<Expr>) -> Clause {
    match c {
        Clause::When(_) => Clause::When(e),
        Clause::Unless(_) => Clause::Unless(e),
    }
}

/// Whether a policy carries an approval guard in one of its `when` clauses.
pub fn has_guard(clauses: &[Clause]) -> bool {
    clauses.iter().any(|c| match c {
        Clause::When(e) => conjuncts(e).iter().any(|x| is_guard(x)),
        Clause::Unless(_) => false,
    })
}

/// Every rewrite of `e` that changes one comparison node.
fn comparison_rewrites(e: &Arc<Expr>) -> Vec<(Operator, String, Arc<Expr>)> {
    let mut out = vec![];
    if let Expr::BinaryOp { op, left, right } = e.as_ref() {
        let shifted = match op {
            BinaryOp::Less => Some(BinaryOp::LessEq),
            BinaryOp::LessEq => Some(BinaryOp::Less),
            BinaryOp::Greater => Some(BinaryOp::GreaterEq),
            BinaryOp::GreaterEq => Some(BinaryOp::Greater),
            _ => None,
        };
        if let Some(new_op) = shifted {
            let n = Arc::new(Expr::BinaryOp {
                op: new_op,
                left: left.clone(),
                right: right.clone(),
            });
            out.push((Operator::ShiftBoundary, format!("`{e}` → `{n}`"), n.clone()));
            for (side_left, lit) in [(true, left), (false, right)] {
                let Expr::Literal(Literal::Long(v)) = lit.as_ref() else {
                    continue;
                };
                for nv in [v.checked_add(1), v.checked_sub(1)].into_iter().flatten() {
                    let l = Arc::new(Expr::Literal(Literal::Long(nv)));
                    let n = Arc::new(Expr::BinaryOp {
                        op: *op,
                        left: if side_left { l.clone() } else { left.clone() },
                        right: if side_left { right.clone() } else { l },
                    });
                    out.push((
                        Operator::NudgeThreshold,
                        format!("`{e}` → `{n}`"),
                        n.clone(),
                    ));
                }
            }
        }
        // children
        for (d, o, nl) in comparison_rewrites(left) {
            out.push((
                d,
                o,
                Arc::new(Expr::BinaryOp {
                    op: *op,
                    left: nl,
                    right: right.clone(),
                }),
            ));
        }
        for (d, o, nr) in comparison_rewrites(right) {
            out.push((
                d,
                o,
                Arc::new(Expr::BinaryOp {
                    op: *op,
                    left: left.clone(),
                    right: nr,
                }),
            ));
        }
        return out;
    }
    match e.as_ref() {
        Expr::UnaryOp { op, expr } => {
            for (d, o, n) in comparison_rewrites(expr) {
                out.push((d, o, Arc::new(Expr::UnaryOp { op: *op, expr: n })));
            }
        }
        Expr::IfThenElse {
            cond,
            then_expr,
            else_expr,
        } => {
            let parts = [cond, then_expr, else_expr];
            for k in 0..3 {
                for (d, o, n) in comparison_rewrites(parts[k]) {
                    let mut p: Vec<Arc<Expr>> = parts.iter().map(|x| (*x).clone()).collect();
                    p[k] = n;
                    out.push((
                        d,
                        o,
                        Arc::new(Expr::IfThenElse {
                            cond: p[0].clone(),
                            then_expr: p[1].clone(),
                            else_expr: p[2].clone(),
                        }),
                    ));
                }
            }
        }
        _ => {}
    }
    out
}

/// A candidate: the operator, its description and the rewritten policy
/// (`None`: removed).
type Candidate = (Operator, String, Option<pst::Template>);

fn candidates(tpl: &pst::Template) -> Vec<Candidate> {
    let clauses = tpl.clauses().clone();
    let guarded = has_guard(&clauses);
    let mut out: Vec<Candidate> = vec![];
    let with_clauses = |cs: Vec<Clause>| -> pst::Template {
        // the clauses come from a valid policy: no slot, no unknown
        tpl.clone()
            .try_with_clauses(cs.clone())
            .unwrap_or_else(|_| tpl.clone())
    };

    if tpl.effect == Effect::Forbid {
        if guarded {
            out.push((
                Operator::RemoveApprovalRule,
                "approval rule removed".into(),
                None,
            ));
        } else {
            out.push((Operator::RemoveForbid, "forbid removed".into(), None));
        }
    }

    if guarded {
        let mut cs = vec![];
        for c in &clauses {
            let kept: Vec<Arc<Expr>> = conjuncts(clause_expr(c))
                .into_iter()
                .filter(|x| !matches!(c, Clause::When(_)) || !is_guard(x))
                .collect();
            if let Some(e) = conjoin(&kept) {
                cs.push(with_expr(c, e));
            }
        }
        out.push((
            Operator::DropApprovalGuard,
            "approval guard dropped: no approval lifts the rule".into(),
            Some(with_clauses(cs)),
        ));
    }

    // condition removed: an approval rule keeps only its guard
    let guards: Vec<Arc<Expr>> = clauses
        .iter()
        .filter(|c| matches!(c, Clause::When(_)))
        .flat_map(|c| conjuncts(clause_expr(c)))
        .filter(|x| is_guard(x))
        .collect();
    let non_guard = clauses
        .iter()
        .map(|c| match c {
            Clause::When(e) => conjuncts(e).into_iter().filter(|x| !is_guard(x)).count(),
            Clause::Unless(_) => 1,
        })
        .sum::<usize>();
    if non_guard > 0 {
        let cs: Vec<Clause> = conjoin(&guards).map(Clause::When).into_iter().collect();
        out.push((
            Operator::RemoveCondition,
            if guarded {
                "condition removed: the approval is always required".into()
            } else {
                "condition removed".into()
            },
            Some(with_clauses(cs)),
        ));
    }

    // each conjunct dropped (each clause, when there are several)
    for (ci, c) in clauses.iter().enumerate() {
        let parts = conjuncts(clause_expr(c));
        let droppable: Vec<usize> = (0..parts.len())
            .filter(|&k| !(matches!(c, Clause::When(_)) && is_guard(&parts[k])))
            .collect();
        if droppable.len() >= 2 {
            for &k in &droppable {
                let kept: Vec<Arc<Expr>> = parts
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != k)
                    .map(|(_, x)| x.clone())
                    .collect();
                let mut cs = clauses.clone();
                if let Some(e) = conjoin(&kept) {
                    cs[ci] = with_expr(c, e);
                }
                out.push((
                    Operator::DropConjunct,
                    format!("conjunct `{}` dropped", parts[k]),
                    Some(with_clauses(cs)),
                ));
            }
        }
        if clauses.len() >= 2 {
            let mut cs = clauses.clone();
            cs.remove(ci);
            out.push((
                Operator::DropConjunct,
                format!("clause `{c}` dropped"),
                Some(with_clauses(cs)),
            ));
        }
    }

    // comparisons: boundaries and thresholds
    for (ci, c) in clauses.iter().enumerate() {
        for (op, d, e) in comparison_rewrites(clause_expr(c)) {
            let mut cs = clauses.clone();
            cs[ci] = with_expr(c, e);
            out.push((op, d, Some(with_clauses(cs))));
        }
    }

    let mut flipped = tpl.clone();
    flipped.effect = match tpl.effect {
        Effect::Permit => Effect::Forbid,
        Effect::Forbid => Effect::Permit,
    };
    out.push((
        Operator::FlipEffect,
        format!("effect flipped to `{}`", flipped.effect),
        Some(flipped),
    ));
    out
}

/// The mutants of one action, given its policies in bundle order.
pub fn generate(action: &str, policies: &[Policy]) -> Result<Vec<Mutant>, MutantError> {
    let mut out = vec![];
    for (i, policy) in policies.iter().enumerate() {
        let pid = policy.id().to_string();
        let pst_err = |reason: String| MutantError::Pst {
            policy: pid.clone(),
            reason,
        };
        let tpl = match policy.to_pst().map_err(|e| pst_err(e.to_string()))? {
            pst::Policy::Static(sp) => sp.body().clone(),
            // linked template policies are not generated by packs
            pst::Policy::Linked(_) => continue,
        };
        let source = policy.annotation("source").unwrap_or("-").to_string();
        let original = tpl.to_string();
        let mut seen: HashSet<String> = HashSet::new();
        for (operator, description, new) in candidates(&tpl) {
            let build = |reason: String| MutantError::Build {
                policy: pid.clone(),
                reason,
            };
            let mutated = match new {
                None => None,
                Some(t) => {
                    let text = t.to_string();
                    if text == original || !seen.insert(text) {
                        continue;
                    }
                    let sp = pst::StaticPolicy::try_from(t).map_err(|e| build(e.to_string()))?;
                    Some(
                        Policy::from_pst(pst::Policy::Static(sp))
                            .map_err(|e| build(e.to_string()))?,
                    )
                }
            };
            let mut set = PolicySet::new();
            for (j, p) in policies.iter().enumerate() {
                let p = if j == i {
                    mutated.clone()
                } else {
                    Some(p.clone())
                };
                if let Some(p) = p {
                    set.add(p).map_err(|e| build(e.to_string()))?;
                }
            }
            out.push(Mutant {
                id: format!("{action}#{}", out.len() + 1),
                action: action.to_string(),
                policy_id: pid.clone(),
                source: source.clone(),
                operator,
                description,
                policy: mutated,
                set,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cedar_policy::PolicyId;

    fn parse(id: &str, text: &str) -> Policy {
        Policy::parse(Some(PolicyId::new(id)), text).expect("policy")
    }

    #[test]
    fn approval_rule_mutants() {
        let permit = parse("p", "permit(principal, action, resource);");
        let rule = parse(
            "r",
            "@source(\"bank/pack.ipc:30\")\nforbid(principal, action, resource) when { context.amount > 100000 && context.approval_level < 1 };",
        );
        let ms = generate("payment.transfer", &[permit, rule]).expect("mutants");
        let ops: Vec<(&str, &str)> = ms
            .iter()
            .map(|m| (m.operator.name(), m.description.as_str()))
            .collect();
        assert!(ops.contains(&("remove-approval-rule", "approval rule removed")));
        assert!(ops.iter().any(|(o, _)| *o == "drop-approval-guard"));
        assert!(ops.contains(&(
            "shift-boundary",
            "`context.amount > 100000` → `context.amount >= 100000`"
        )));
        assert!(ops.contains(&(
            "nudge-threshold",
            "`context.approval_level < 1` → `context.approval_level < 2`"
        )));
        assert!(ops.iter().filter(|(o, _)| *o == "flip-effect").count() == 2);
        let removed = ms
            .iter()
            .find(|m| m.operator == Operator::RemoveApprovalRule)
            .expect("removed");
        assert_eq!(removed.set.policies().count(), 1);
        assert_eq!(removed.source, "bank/pack.ipc:30");
        assert!(ms.iter().all(|m| m.id.starts_with("payment.transfer#")));
    }
}
