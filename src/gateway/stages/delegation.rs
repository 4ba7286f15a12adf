//! Stage 4, delegation: the mandate grants the action's scope.

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
    Ok(())
}

#[cfg(test)]
#[path = "tests/delegation.rs"]
mod tests;
