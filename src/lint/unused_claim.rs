//! `unused_claim`: a mandate claim that no source, key or fact reads.
//!
//! Why: every mandate carries it for nothing, and most often it is the
//! trace of a typo elsewhere (a source that names a sibling claim).

use super::Usage;
use crate::diagnostics::PackDiagnostic;
use crate::syntax::ast;

pub(super) fn check(file: &ast::File, usage: &Usage) -> Vec<PackDiagnostic> {
    let mut out = vec![];
    for item in &file.items {
        if let ast::Item::Mandate(m) = item {
            for c in &m.claims {
                if !usage.claims.contains(&c.name.text) {
                    out.push(PackDiagnostic::UnusedClaim {
                        name: c.name.text.clone(),
                        span: c.name.span.into(),
                    });
                }
            }
        }
    }
    out
}
