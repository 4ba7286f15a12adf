//! The solver's values as a scenario writes them: money in units, dates
//! and times as text within what a scenario can set, a well-formed value
//! of the type where the solver's is not one. Shared by the scenario
//! (`scenario`) and the world it needs written (`world`).

use crate::base::json::format_time;
use crate::base::money::Money;
use crate::ir::Type;
use serde_json::Value;

/// The clock of a scenario when the counterexample's own is not a
/// plausible time.
pub(super) const DEFAULT_CLOCK: i64 = 1_795_000_000; // 2026-11-18

/// The largest amount a scenario can write, in minor units.
pub(super) const MAX_MINOR: i64 = crate::base::json::MAX_EXACT_INTEGER as i64;

/// A well-formed value of a type, for when the solver's is not one.
pub(super) fn sample(ty: &Type) -> Value {
    match ty {
        Type::Iban => "DE89370400440532013000".into(),
        Type::Email => "someone@example.com".into(),
        Type::Phone => "+4930123456".into(),
        Type::Currency => "EUR".into(),
        Type::Url => "https://example.com/".into(),
        Type::Enum(vs) => vs.first().cloned().unwrap_or_default().into(),
        Type::Id => "id-1".into(),
        _ => "x".into(),
    }
}

pub(super) fn canonical(ty: &Type, s: &str) -> Option<String> {
    match ty.canonical_normalizer() {
        Some(n) => crate::gateway::normalize::apply(n, s).ok(),
        None => Some(s.to_string()),
    }
}

/// The solver's value as the caller's tool would send it, or a
/// well-formed one of the type.
pub(super) fn as_given(ty: &Type, v: &Value) -> Value {
    match (ty, v) {
        (Type::Money, Value::Number(n)) => n
            .as_i64()
            .map(|m| Value::String(Money::from_minor(m.clamp(-MAX_MINOR, MAX_MINOR)).to_string()))
            .unwrap_or_else(|| v.clone()),
        (Type::Date, Value::Number(n)) => {
            let s = n
                .as_i64()
                .filter(|s| plausible(*s))
                .unwrap_or(DEFAULT_CLOCK);
            Value::String(format_time(s)[..10].to_string())
        }
        (Type::Timestamp, Value::Number(n)) => {
            let s = n
                .as_i64()
                .filter(|s| plausible(*s))
                .unwrap_or(DEFAULT_CLOCK);
            Value::String(format_time(s))
        }
        (Type::List(e) | Type::Set(e), Value::Array(items)) => {
            Value::Array(items.iter().map(|x| as_given(e, x)).collect())
        }
        (Type::Record(fs), Value::Object(o)) => Value::Object(
            o.iter()
                .map(|(k, x)| match fs.iter().find(|f| &f.name == k) {
                    Some(f) => (k.clone(), as_given(&f.ty, x)),
                    None => (k.clone(), x.clone()),
                })
                .collect(),
        ),
        (Type::Enum(vs), Value::String(s)) if !vs.contains(s) => sample(ty),
        (Type::Currency, Value::String(s))
            if !(s.len() == 3 && s.chars().all(|c| c.is_ascii_uppercase())) =>
        {
            sample(ty)
        }
        (Type::Id | Type::Text, Value::String(s))
            if s.is_empty() || s.chars().any(|c| c.is_control() || c == '\u{7f}') =>
        {
            sample(&Type::Id)
        }
        (t, Value::String(s)) if t.canonical_normalizer().is_some() => match canonical(t, s) {
            Some(c) => Value::String(c),
            None => sample(t),
        },
        _ => v.clone(),
    }
}

/// Between 2000 and 2100: a time a scenario can be set at.
pub(super) fn plausible(secs: i64) -> bool {
    (946_684_800..4_102_444_800).contains(&secs)
}
