//! Stage 4, delegation: the mandate grants the action's scope, and a
//! child mandate's whole chain does: every link grants it, and each link
//! only narrows the one before (see [`crate::gateway::chain`]), read
//! against the owner's registries in this decision's transaction.

use super::{Run, StageResult};
use crate::gateway::{Deny, Stage};

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let (Some(m), Some(a)) = (&r.mandate, r.action) else {
        return Err(Deny::new(Stage::Delegation, "no mandate or action").into());
    };
    let scope = &a.table.action.scope;
    if !m.scopes.iter().any(|s| s == scope) {
        return Err(Deny::new(
            Stage::Delegation,
            format!("the mandate does not grant the scope `{scope}`"),
        )
        .hint(Some(format!(
            "the user can grant `{scope}` in a new mandate"
        )))
        .into());
    }
    if r.ancestors.is_empty() {
        return Ok(());
    }
    let child = m.clone();
    let ancestors = r.ancestors.clone();
    if let Some(a) = ancestors
        .iter()
        .find(|a| !a.scopes.iter().any(|s| s == scope))
    {
        return Err(Deny::new(
            Stage::Delegation,
            format!(
                "the parent mandate `{}` does not grant the scope `{scope}`",
                crate::base::json::echo(&a.id)
            ),
        )
        .into());
    }
    let links: Vec<&crate::gateway::Mandate> = ancestors
        .iter()
        .chain(std::iter::once(child.as_ref()))
        .collect();
    for pair in links.windows(2) {
        let w = r.gw.widenings(r.tx, pair[0], pair[1])?;
        if !w.is_empty() {
            return Err(Deny::new(
                Stage::Delegation,
                format!(
                    "the mandate `{}` widens its parent `{}`: {}",
                    crate::base::json::echo(&pair[1].id),
                    crate::base::json::echo(&pair[0].id),
                    crate::gateway::chain::describe(&w)
                ),
            )
            .hint(Some(
                "a child only narrows its parent: the user can confirm a narrower one".into(),
            ))
            .into());
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests/delegation.rs"]
mod tests;
