//! `unused_registry`: a registry that no source, key or fact reads.
//!
//! Why: a registry is a system of record the gateway must be wired to; one
//! nobody reads is either dead configuration or a source someone forgot.

use super::Usage;
use crate::diagnostics::PackDiagnostic;
use crate::syntax::ast;

pub(super) fn check(file: &ast::File, usage: &Usage) -> Vec<PackDiagnostic> {
    file.items
        .iter()
        .filter_map(|item| match item {
            ast::Item::Registry(r) if !usage.registries.contains(&r.name.text) => {
                Some(PackDiagnostic::UnusedRegistry {
                    name: r.name.text.clone(),
                    span: r.name.span.into(),
                })
            }
            _ => None,
        })
        .collect()
}
