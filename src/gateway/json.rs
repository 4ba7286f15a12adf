//! Reading what the agent sends: JSON with no duplicate keys anywhere (the
//! attacker must not be able to show one value to a check and another to
//! the executor), bounded in size and depth, and exact decimal amounts.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Largest proposal line accepted, in bytes.
pub const MAX_LINE: usize = 1 << 20;

/// Parses JSON refusing duplicate object keys at any depth. serde_json's
/// recursion limit (128) bounds the depth.
pub fn parse_strict(text: &str) -> Result<Value, String> {
    if text.len() > MAX_LINE {
        return Err(format!(
            "input of {} bytes is larger than the {MAX_LINE} bytes allowed",
            text.len()
        ));
    }
    parse_no_duplicates(text).map_err(|e| e.to_lowercase())
}

/// [`parse_strict`] without the size bound, and with serde_json's message
/// as is (a duplicate is `` duplicate key `KEY` at line L column C ``):
/// for text intentplane wrote itself and reads back, such as receipt
/// bodies in `ipc receipts verify`, which may be larger than a line.
pub fn parse_no_duplicates(text: &str) -> Result<Value, String> {
    let mut de = serde_json::Deserializer::from_str(text);
    let v = de
        .deserialize_any(StrictVisitor)
        .map_err(|e| e.to_string())?;
    de.end().map_err(|e| e.to_string())?;
    Ok(v)
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("a number that is not finite"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = vec![];
        while let Some(v) = seq.next_element_seed(Strict)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(k) = map.next_key::<String>()? {
            if out.contains_key(&k) {
                return Err(de::Error::custom(format!("duplicate key `{k}`")));
            }
            let v = map.next_value_seed(Strict)?;
            out.insert(k, v);
        }
        Ok(Value::Object(out))
    }
}

struct Strict;

impl<'de> de::DeserializeSeed<'de> for Strict {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

/// An amount as minor units (cents). Accepts a JSON number or a decimal
/// string (`98.70`, `"98.70"`, `1000`); refuses more than two decimals,
/// exponents in strings, signs other than a leading `-`, and overflow. A
/// JSON number is read through its shortest decimal form, which is the text
/// that was written for any amount with at most 15 significant digits.
pub fn parse_money(v: &Value) -> Result<i64, String> {
    let text = match v {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.to_string()
            } else if let Some(f) = n.as_f64() {
                let s = format!("{f}");
                if s.contains('e') || s.contains("inf") || s.contains("NaN") {
                    return Err(format!("`{s}` is not a plain decimal amount"));
                }
                s
            } else {
                return Err(format!("`{n}` is out of range"));
            }
        }
        other => return Err(format!("expected an amount, found {}", kind(other))),
    };
    parse_decimal_minor(&text)
}

/// `"-12.3"` to -1230. At most two decimals, digits only.
pub fn parse_decimal_minor(text: &str) -> Result<i64, String> {
    let (neg, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (units, frac) = body.split_once('.').unwrap_or((body, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(units) || (!frac.is_empty() && !digits(frac)) || body.ends_with('.') {
        return Err(format!("`{text}` is not a decimal amount"));
    }
    if frac.len() > 2 {
        return Err(format!(
            "`{text}` has more than two decimals; amounts are in cents"
        ));
    }
    let frac_val: i64 = format!("{frac:0<2}").parse().unwrap_or(0);
    let minor = units
        .parse::<i64>()
        .ok()
        .and_then(|u| u.checked_mul(100))
        .and_then(|u| u.checked_add(frac_val))
        .filter(|m| (*m as u64) <= crate::canonical::MAX_EXACT_INTEGER)
        .ok_or_else(|| format!("`{text}` is too large"))?;
    Ok(if neg { -minor } else { minor })
}

/// What kind of JSON value this is, for messages.
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Seconds since the epoch from `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM:SSZ` (or
/// `+00:00`), or an integer.
pub fn parse_time(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .ok_or_else(|| format!("`{n}` is not a whole number of seconds")),
        Value::String(s) => parse_time_str(s),
        other => Err(format!("expected a date or time, found {}", kind(other))),
    }
}

pub fn parse_time_str(s: &str) -> Result<i64, String> {
    let bad = || format!("`{s}` is not a date (YYYY-MM-DD) or UTC time (YYYY-MM-DDTHH:MM:SSZ)");
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = s.get(r).ok_or_else(bad)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse::<i64>().map_err(|_| bad())
        } else {
            Err(bad())
        }
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return Err(bad());
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(bad());
    }
    let mut secs = days_from_civil(y, m, d) * 86_400;
    if b.len() > 10 {
        let rest = &s[10..];
        let ok_tail =
            rest.len() == 10 && rest.ends_with('Z') || rest.len() == 15 && rest.ends_with("+00:00");
        if !ok_tail || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
            return Err(bad());
        }
        let (hh, mm, ss) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if hh > 23 || mm > 59 || ss > 59 {
            return Err(bad());
        }
        secs += hh * 3600 + mm * 60 + ss;
    }
    Ok(secs)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-29T18:40:00Z` from seconds since the epoch.
pub fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn duplicate_keys_are_refused_at_any_depth() {
        assert!(
            parse_strict(r#"{"a":1,"a":2}"#)
                .unwrap_err()
                .contains("duplicate key `a`")
        );
        assert!(parse_strict(r#"{"x":{"args":{"p":1,"p":2}}}"#).is_err());
        assert!(parse_strict(r#"[{"k":1},{"k":2}]"#).is_ok());
    }

    #[test]
    fn money_is_exact() {
        assert_eq!(parse_money(&json!(98.70)), Ok(9870));
        assert_eq!(parse_money(&json!("98.70")), Ok(9870));
        assert_eq!(parse_money(&json!(1000)), Ok(100000));
        assert_eq!(parse_money(&json!(0.1)), Ok(10));
        assert!(parse_money(&json!(98.705)).is_err());
        assert!(parse_money(&json!("1e3")).is_err());
        assert!(parse_money(&json!(1e300)).is_err());
        assert!(parse_money(&json!("12,50")).is_err());
        assert!(parse_money(&json!("")).is_err());
        assert!(parse_money(&json!("5.")).is_err());
        assert!(parse_money(&json!("99999999999999999999")).is_err());
        assert_eq!(parse_money(&json!("-5")), Ok(-500));
        assert!(parse_money(&json!(true)).is_err());
    }

    #[test]
    fn times_round_trip() {
        for s in [
            "1970-01-01T00:00:00Z",
            "2026-11-29T18:40:00Z",
            "2000-02-29T23:59:59Z",
        ] {
            assert_eq!(format_time(parse_time_str(s).unwrap()), s);
        }
        assert_eq!(parse_time_str("2026-11-29").unwrap() % 86_400, 0);
        assert!(parse_time_str("2026-02-30").is_err());
        assert!(parse_time_str("2026-11-29T25:00:00Z").is_err());
        assert!(parse_time_str("2026-11-29T10:00:00+02:00").is_err());
        assert!(parse_time_str("２０２６-11-29").is_err());
    }
}
