//! `unused_fact`: a fact no rule (and no other fact) reads.
//!
//! Why: the gateway computes it on every proposal for nothing, and a fact
//! is usually declared to be tested: a `forbid` that was meant to use it
//! and does not is a missing control.

use super::Usage;
use crate::diagnostics::PackDiagnostic;
use crate::syntax::ast;

pub(super) fn check(file: &ast::File, usage: &Usage) -> Vec<PackDiagnostic> {
    let mut out = vec![];
    for item in &file.items {
        let ast::Item::Action(a) = item else { continue };
        for c in &a.clauses {
            if let ast::ActionClause::Fact(f) = c
                && !usage
                    .facts
                    .contains(&(a.name.text.clone(), f.name.text.clone()))
            {
                out.push(PackDiagnostic::UnusedFact {
                    name: f.name.text.clone(),
                    span: f.name.span.into(),
                });
            }
        }
    }
    out
}
