//! Stage 5, budget: the cumulative amount and number of executed calls per
//! mandate. Checked here and enforced again when the spend is written, in
//! the same transaction.

use super::{Run, StageResult};
use crate::gateway::{Deny, Stage};

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let Some(m) = &r.mandate else {
        return Err(Deny::new(Stage::Budget, "no mandate").into());
    };
    let spent = r.tx.spent(&m.id)?;
    if spent.calls >= m.budget.calls {
        return Err(Deny::new(
            Stage::Budget,
            format!("the mandate's {} calls are used up", m.budget.calls),
        )
        .hint(Some("the user can issue a new mandate".into()))
        .into());
    }
    let amount = amount_of(r)?;
    if amount > 0 && spent.amount.saturating_add(amount) > m.budget.amount {
        return Err(Deny::new(
            Stage::Budget,
            format!(
                "over the mandate's budget: {} already spent of {}, this needs {}",
                money(spent.amount),
                money(m.budget.amount),
                money(amount)
            ),
        )
        .hint(Some(
            "no approval raises a budget: the user can issue a new mandate".into(),
        ))
        .into());
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

/// `123456` minor units as `1,234.56`.
pub fn money(minor: i64) -> String {
    let sign = if minor < 0 { "-" } else { "" };
    let m = minor.unsigned_abs();
    let units = (m / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{sign}{grouped}.{:02}", m % 100)
}

#[cfg(test)]
mod tests {
    #[test]
    fn money_format() {
        assert_eq!(super::money(123456), "1,234.56");
        assert_eq!(super::money(5), "0.05");
        assert_eq!(super::money(100_000_000), "1,000,000.00");
        assert_eq!(super::money(-250), "-2.50");
    }
}

#[cfg(test)]
#[path = "tests/budget.rs"]
mod stage_tests;
