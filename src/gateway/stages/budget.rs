//! Stage 5, budget: the cumulative amount and number of executed calls per
//! mandate, and for a child mandate per ancestor too (each execution spends
//! from every link of the chain). Checked here and enforced again when the spend is written, in
//! the same transaction.

use super::{Run, StageResult};
use crate::base::Money;
use crate::gateway::{Deny, Stage};

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let Some(m) = &r.mandate else {
        return Err(Deny::new(Stage::Budget, "no mandate").into());
    };
    let m = m.clone();
    let ancestors = r.ancestors.clone();
    let amount = amount_of(r)?;
    // the mandate's own budget, and every ancestor's: children together
    // never spend more than their parent
    for (i, link) in std::iter::once(m.as_ref())
        .chain(ancestors.iter().rev())
        .enumerate()
    {
        let whose = if i == 0 {
            "the mandate's".to_string()
        } else {
            format!(
                "the parent mandate `{}`'s",
                crate::base::json::echo(&link.id)
            )
        };
        let spent = r.tx.spent(&r.key(&link.id))?;
        if spent.calls >= link.budget.calls {
            return Err(Deny::new(
                Stage::Budget,
                format!("{whose} {} calls are used up", link.budget.calls),
            )
            .hint(Some("the user can issue a new mandate".into()))
            .into());
        }
        if amount > 0 && spent.amount.saturating_add(amount) > link.budget.amount {
            return Err(Deny::new(
                Stage::Budget,
                format!(
                    "over {whose} budget: {} already spent of {}, this needs {}",
                    Money::from_minor(spent.amount).grouped(),
                    Money::from_minor(link.budget.amount).grouped(),
                    Money::from_minor(amount).grouped()
                ),
            )
            .hint(Some(
                "no approval raises a budget: the user can issue a new mandate".into(),
            ))
            .into());
        }
    }
    Ok(())
}

/// The amount this action spends (its budget parameter), 0 for an action
/// without one. A budget parameter without an integer value is a DENY,
/// never a spend of 0 (fail closed).
pub(super) fn amount_of(r: &Run<'_>) -> Result<i64, Deny> {
    let Some(a) = r.action else { return Ok(0) };
    let Some(p) = &a.table.action.budget else {
        return Ok(0);
    };
    let Some(v) = r.resolved.get(p).and_then(|v| v.as_i64()) else {
        return Err(Deny::new(
            Stage::Budget,
            format!("the budget parameter `{p}` has no amount: nothing is spent unaccounted"),
        ));
    };
    if v < 0 {
        return Err(Deny::new(Stage::Budget, format!("`{p}` is negative")));
    }
    Ok(v)
}

#[cfg(test)]
#[path = "tests/budget.rs"]
mod stage_tests;
