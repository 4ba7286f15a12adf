//! `selection_over_agent_data` (an error): a selection over a registry
//! that an action of the same pack writes (its executor changes the
//! registry's records: `ap.change_iban` a vendor, `ap.pay_invoice` an
//! invoice, `bank.standing_order` a standing order).
//!
//! Why: a selection lets the gateway check the agent's choice against the
//! system of record; over records the agent's own allowed actions shape,
//! the agent could first make a record match the user's criterion ("the
//! cheapest", "the one paid last"), then pick it. A selection is over
//! records the agent cannot write.

use crate::diagnostics::PackDiagnostic;
use crate::ir::{EXECUTOR_WRITES, Pack, Type};
use crate::syntax::ast;

pub(super) fn check(file: &ast::File, pack: &Pack) -> Vec<PackDiagnostic> {
    let mut out = vec![];
    for item in &file.items {
        let ast::Item::Mandate(m) = item else {
            continue;
        };
        for c in &m.claims {
            let Some(Type::Selection(r)) = pack.claim(&c.name.text).map(|c| &c.ty) else {
                continue;
            };
            let writer = pack.actions.iter().find(|a| {
                EXECUTOR_WRITES
                    .iter()
                    .any(|(e, reg)| *e == a.executor && reg == r)
            });
            if let Some(a) = writer {
                out.push(PackDiagnostic::SelectionOverAgentData {
                    claim: c.name.text.clone(),
                    registry: r.clone(),
                    action: a.name.clone(),
                    span: c.ty.span.into(),
                });
            }
        }
    }
    out
}
