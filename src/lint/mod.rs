//! Warnings: things that are not wrong, but likely a mistake. One module per
//! lint, each a function from the syntax tree and the IR to diagnostics.
//! `ipc check --deny-warnings` turns them into errors.

mod secret_not_marked;
mod selection_over_agent_data;
mod unused_claim;
mod unused_fact;
mod unused_registry;

use crate::diagnostics::PackDiagnostic;
use crate::ir::{self, Expr, Key, Lookup, Pack, Source};
use crate::syntax::ast;
use std::collections::HashSet;

/// Runs every lint.
pub fn run(file: &ast::File, pack: &Pack) -> Vec<PackDiagnostic> {
    let usage = Usage::of(pack);
    let mut out = vec![];
    out.extend(unused_claim::check(file, &usage));
    out.extend(unused_registry::check(file, &usage));
    out.extend(unused_fact::check(file, &usage));
    out.extend(secret_not_marked::check(file, pack));
    out.extend(selection_over_agent_data::check(file, pack));
    out
}

/// What the pack reads: claims, registries, and facts per action.
#[derive(Default)]
pub(crate) struct Usage {
    pub claims: HashSet<String>,
    pub registries: HashSet<String>,
    /// `(action, fact)` pairs read by a rule or another fact.
    pub facts: HashSet<(String, String)>,
}

impl Usage {
    fn of(pack: &Pack) -> Usage {
        let mut u = Usage::default();
        for a in &pack.actions {
            for p in a.params.iter().flat_map(crate::ir::Param::walk) {
                for s in &p.sources {
                    match s {
                        Source::Claim { claim } => {
                            u.claims.insert(claim.clone());
                        }
                        Source::Registry { registry } => {
                            u.registries.insert(registry.clone());
                        }
                        Source::Lookup(l) => u.lookup(l),
                    }
                }
            }
            for f in &a.facts {
                u.expr(&a.name, &f.expr);
            }
            for r in &a.rules {
                if let Some(w) = &r.when {
                    u.expr(&a.name, w);
                }
            }
        }
        // a selection the pack reads reads its registry
        for c in &pack.claims {
            if let ir::Type::Selection(r) = &c.ty
                && u.claims.contains(&c.name)
            {
                u.registries.insert(r.clone());
            }
        }
        u
    }

    fn lookup(&mut self, l: &Lookup) {
        self.registries.insert(l.registry.clone());
        match &l.key {
            Key::Claim { claim } => {
                self.claims.insert(claim.clone());
            }
            Key::Lookup { lookup } => self.lookup(lookup),
            Key::Param { .. } => {}
        }
    }

    fn expr(&mut self, action: &str, e: &ir::Expr) {
        match e {
            Expr::Claim { name } => {
                self.claims.insert(name.clone());
            }
            Expr::Registry { name } => {
                self.registries.insert(name.clone());
            }
            Expr::Selection { claim, registry } => {
                self.claims.insert(claim.clone());
                self.registries.insert(registry.clone());
            }
            Expr::Fact { name } => {
                self.facts.insert((action.to_string(), name.clone()));
            }
            Expr::Lookup { registry, key, .. } => {
                self.registries.insert(registry.clone());
                self.expr(action, key);
            }
            Expr::List { items } => items.iter().for_each(|i| self.expr(action, i)),
            Expr::Not { expr } => self.expr(action, expr),
            Expr::Binary { lhs, rhs, .. } => {
                self.expr(action, lhs);
                self.expr(action, rhs);
            }
            Expr::Lit { .. } | Expr::Param { .. } | Expr::Now => {}
        }
    }
}
