//! Values as they leave the gateway: in the caller's units and spelling,
//! never the inside's. Inside, an amount is integer minor units and a time
//! seconds since the epoch (what the operation hash, the receipts and the
//! executors take); a caller wrote `"1500.00"` and `"2026-12-01"`, and its
//! tool takes them so. A decision's answer (`ipc run`, `ipc serve`, the
//! MCP proxy's refusals, the Python module) carries its `resolved` values
//! through [`caller_values`].

use crate::base::Money;
use crate::base::json::format_time;
use crate::ir::{Action, Type};
use serde_json::{Map, Value};

/// The resolved values of `action` as the caller's tool takes them (see
/// [`caller_value`]); a name the action does not declare is left as it is.
pub fn caller_values(action: &Action, resolved: &Map<String, Value>) -> Map<String, Value> {
    resolved
        .iter()
        .map(|(k, v)| {
            let shown = match action.param(k) {
                Some(p) => caller_value(&p.ty, v),
                None => v.clone(),
            };
            (k.clone(), shown)
        })
        .collect()
}

/// One trusted value as the caller's tool takes it: an amount as its exact
/// decimal (`150000` minor units as `"1500.00"`, a string: a JSON number
/// could not carry every amount exactly), a date as `YYYY-MM-DD`, a
/// timestamp as `YYYY-MM-DDTHH:MM:SSZ`, a record field by field and a
/// list element by element; anything else, and a value not in the inside
/// form of its type (a secret's commitment), as it is.
pub fn caller_value(ty: &Type, v: &Value) -> Value {
    match (ty, v) {
        (Type::Money | Type::Date | Type::Timestamp, Value::Number(n)) => {
            let Some(i) = n.as_i64() else {
                return v.clone();
            };
            Value::String(match ty {
                Type::Money => Money::from_minor(i).to_string(),
                Type::Date => format_time(i).chars().take(10).collect(),
                _ => format_time(i),
            })
        }
        (Type::Record(fields), Value::Object(o)) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let shown = match fields.iter().find(|f| &f.name == k) {
                        Some(f) => caller_value(&f.ty, x),
                        None => x.clone(),
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        (Type::List(e) | Type::Set(e), Value::Array(items)) => {
            Value::Array(items.iter().map(|x| caller_value(e, x)).collect())
        }
        _ => v.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::FieldType;
    use serde_json::json;

    /// Amounts leave as the decimal the caller wrote, times as dates and
    /// UTC times, inside records and lists too; everything else as it is.
    #[test]
    fn values_leave_in_the_callers_units() {
        assert_eq!(
            caller_value(&Type::Money, &json!(150_000)),
            json!("1500.00")
        );
        assert_eq!(caller_value(&Type::Money, &json!(-5)), json!("-0.05"));
        assert_eq!(
            caller_value(&Type::Date, &json!(1_796_083_200)),
            json!("2026-12-01")
        );
        assert_eq!(
            caller_value(&Type::Timestamp, &json!(1_796_126_645)),
            json!("2026-12-01T12:04:05Z")
        );
        assert_eq!(caller_value(&Type::Int, &json!(7)), json!(7));
        assert_eq!(caller_value(&Type::Duration, &json!(7200)), json!(7200));
        assert_eq!(caller_value(&Type::Iban, &json!("DE44")), json!("DE44"));
        // a commitment (a secret amount) is no amount: left as it is
        let c = json!({"commitment": "sha256:00"});
        assert_eq!(caller_value(&Type::Money, &c), c);
        let line = Type::Record(vec![
            FieldType {
                name: "amount".into(),
                ty: Type::Money,
                optional: false,
            },
            FieldType {
                name: "sku".into(),
                ty: Type::Id,
                optional: false,
            },
        ]);
        assert_eq!(
            caller_value(
                &Type::List(Box::new(line)),
                &json!([{"amount": 999, "sku": "a-1"}, {"amount": 1, "sku": "b"}])
            ),
            json!([{"amount": "9.99", "sku": "a-1"}, {"amount": "0.01", "sku": "b"}])
        );
        assert_eq!(
            caller_value(&Type::Set(Box::new(Type::Money)), &json!([100, 250])),
            json!(["1.00", "2.50"])
        );
    }
}
