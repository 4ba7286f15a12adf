//! Reading what the agent sends: JSON with no duplicate keys anywhere (the
//! attacker must not be able to show one value to a check and another to
//! the executor), bounded in size and depth; times; how a value is echoed
//! in a message. Amounts are [`crate::base::money`].

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// The largest integer a JSON number (an IEEE double) holds exactly,
/// 2^53 - 1: larger integers are refused wherever they would be hashed,
/// signed or read back as an amount.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// Largest proposal line accepted, in bytes.
pub const MAX_LINE: usize = 1 << 20;

/// Parses JSON refusing duplicate object keys at any depth, and any number
/// whose value as read would differ from the decimal written (see
/// [`check_numbers`]). serde_json's recursion limit (128) bounds the depth.
pub fn parse_strict(text: &str) -> Result<Value, String> {
    if text.len() > MAX_LINE {
        return Err(format!(
            "input of {} bytes is larger than the {MAX_LINE} bytes allowed",
            text.len()
        ));
    }
    let v = parse_no_duplicates(text).map_err(|e| format!("invalid json: {}", e.to_lowercase()))?;
    check_numbers(text)?;
    Ok(v)
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

/// Every number of `text` (JSON that parsed) that is read as a float — one
/// with a fraction or an exponent, or an integer beyond 64 bits — must be
/// exactly the decimal written: its text, as a decimal, equals the shortest
/// decimal of the float it is read as. `98.70`, `0.1` and `1e3` are; a
/// number with more significant digits than a float holds
/// (`1000.00000000000001`, read as 1000) is refused instead of being
/// silently rounded, so everything downstream reads the value the caller
/// wrote — an amount with a third decimal is refused, never rounded.
pub fn check_numbers(text: &str) -> Result<(), String> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i < b.len() && matches!(b[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                let tok = &text[start..i];
                if !number_is_exact(tok) {
                    return Err(format!(
                        "the number `{tok}` has more digits than a JSON number holds \
                         exactly; send it as a string (`\"{tok}\"`)"
                    ));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}

/// Whether the float serde_json reads `tok` as is exactly the decimal
/// `tok` (integers within 64 bits are read exactly, as integers).
fn number_is_exact(tok: &str) -> bool {
    let integer = !tok.contains(['.', 'e', 'E']);
    if integer && (tok.parse::<i64>().is_ok() || tok.parse::<u64>().is_ok()) {
        return true;
    }
    let Ok(f) = tok.parse::<f64>() else {
        return false;
    };
    if !f.is_finite() {
        return false;
    }
    match (decimal(tok), decimal(&format!("{f:e}"))) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    }
}

/// A decimal number as (negative, significant digits without leading or
/// trailing zeros, exponent of the last digit); zero is `(false, "", 0)`.
fn decimal(tok: &str) -> Option<(bool, String, i64)> {
    let (neg, rest) = match tok.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, tok),
    };
    let (mant, exp) = match rest.find(['e', 'E']) {
        Some(k) => (&rest[..k], rest[k + 1..].parse::<i64>().ok()?),
        None => (rest, 0),
    };
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if !(int.bytes().all(|c| c.is_ascii_digit()) && frac.bytes().all(|c| c.is_ascii_digit())) {
        return None;
    }
    let digits = format!("{int}{frac}");
    let mut exp = exp.checked_sub(i64::try_from(frac.len()).ok()?)?;
    let lead = digits.trim_start_matches('0');
    let sig = lead.trim_end_matches('0');
    if sig.is_empty() {
        return Some((false, String::new(), 0));
    }
    exp = exp.checked_add(i64::try_from(lead.len() - sig.len()).ok()?)?;
    Some((neg, sig.to_string(), exp))
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

/// A value as a message shows it (a DENY reason, a hint, an error): every
/// character that could hide or disguise text — controls, newlines, NUL,
/// bidi and zero-width marks, non-ASCII spaces, combining marks — written
/// as an escape (`\u{202e}`), backslashes doubled, and at most 80
/// characters. A reason the agent reads, or a person reads in a log, never
/// carries an invisible character or a line break of the attacker's.
pub fn echo(s: &str) -> String {
    echo_within(s, 80)
}

/// [`echo`], cut at `max` characters instead of 80 (a downstream server's
/// error text, quoted by the MCP proxy's `transport::said`).
pub fn echo_within(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(4 * max));
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('\u{2026}');
            break;
        }
        match c {
            '\\' => out.push_str("\\\\"),
            ' ' => out.push(' '),
            c if c.is_ascii_graphic() => out.push(c),
            c if c.is_ascii() || c.is_whitespace() || c.is_control() || invisible(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.extend(c.escape_debug()),
        }
    }
    out
}

/// Characters that render as nothing (or change how the text around them
/// renders) without being controls or spaces.
pub(crate) fn invisible(c: char) -> bool {
    matches!(c as u32,
        0xAD | 0x34F | 0x61C | 0x115F..=0x1160 | 0x17B4..=0x17B5 | 0x180B..=0x180F
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0x3164 | 0xFE00..=0xFE0F
        | 0xFEFF | 0xFFA0 | 0xFFF0..=0xFFFB | 0xE0000..=0xE0FFF)
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
    let bad = || {
        format!(
            "`{}` is not a date (YYYY-MM-DD) or UTC time (YYYY-MM-DDTHH:MM:SSZ)",
            echo(s)
        )
    };
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
    let (h, min, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
    if !(0..=9999).contains(&y) {
        return format!("{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{sec:02}Z");
    }
    // the common case, digit by digit (a receipt's time, on every
    // decision: `format!` costs a microsecond)
    let mut out = String::with_capacity(20);
    for (n, after) in [
        (y / 100, ""),
        (y % 100, "-"),
        (m, "-"),
        (d, "T"),
        (h, ":"),
        (min, ":"),
        (sec, "Z"),
    ] {
        out.push(char::from(b'0' + (n / 10) as u8));
        out.push(char::from(b'0' + (n % 10) as u8));
        out.push_str(after);
    }
    out
}

/// A JSON file read strictly ([`parse_strict`]: duplicate keys refused);
/// the error names the file.
pub fn read_file(path: &std::path::Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "cannot read `{}`: {}",
            path.display(),
            e.to_string().to_lowercase()
        )
    })?;
    parse_strict(&text).map_err(|e| format!("`{}`: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::Money;
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

    /// Issue #11, item 3: a JSON number is never rounded on its way in.
    #[test]
    fn numbers_are_read_from_their_decimal_text() {
        for bad in [
            r#"{"amount": 1000.00000000000001}"#,
            r#"{"amount": 1000.0099999999999999}"#,
            r#"[0.1000000000000000055511151231257827]"#,
            r#"[18446744073709551616]"#,
            r#"[-9223372036854775809]"#,
            r#"[1.00000000000000000000000000001e2]"#,
        ] {
            let e = parse_strict(bad).unwrap_err();
            assert!(e.contains("send it as a string"), "{bad}: {e}");
        }
        for good in [
            r#"{"amount": 98.70}"#,
            r#"[0.1, 1e3, 1E+2, -0.0, 0e-999, 12345678901234567890, -9223372036854775808]"#,
            r#"{"s": "1000.00000000000001 \\\" 1.0000000000000000001"}"#,
            r#"[1000.01, 5e-324, 1.7976931348623157e308]"#,
        ] {
            assert!(parse_strict(good).is_ok(), "{good}");
        }
        // what is accepted is the value written
        let money = |v: &Value| Money::from_json(v).map(Money::minor);
        assert_eq!(money(&parse_strict("1000.01").unwrap()), Ok(100_001));
        assert!(money(&parse_strict("1000.019").unwrap()).is_err());
    }

    /// Issue #11, item 9: no value is echoed with a character that hides.
    #[test]
    fn echoed_values_show_every_hidden_character() {
        let e = echo("DE89\u{202e}37\u{200b}04\n00\u{0}44\u{a0}05\u{3000}x\\u{41}");
        assert_eq!(
            e,
            "DE89\\u{202e}37\\u{200b}04\\u{a}00\\u{0}44\\u{a0}05\\u{3000}x\\\\u{41}"
        );
        assert!(e.chars().all(|c| c.is_ascii_graphic() || c == ' '));
        assert_eq!(echo("Zoë Müller"), "Zoë Müller");
        assert_eq!(
            echo(&"a".repeat(100)),
            format!("{}\u{2026}", "a".repeat(80))
        );
        let reason = Money::from_json(&json!("1\u{202e}0")).unwrap_err();
        assert!(!reason.contains('\u{202e}'), "{reason}");
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

    /// Times are written digit by digit for years 0000 to 9999, and as
    /// before (`format!`) outside them.
    #[test]
    fn times_outside_four_digit_years_keep_their_spelling() {
        assert_eq!(format_time(-62_167_219_200), "0000-01-01T00:00:00Z");
        assert_eq!(format_time(-62_167_219_201), "-001-12-31T23:59:59Z");
        assert_eq!(format_time(253_402_300_799), "9999-12-31T23:59:59Z");
        assert_eq!(format_time(253_402_300_800), "10000-01-01T00:00:00Z");
    }

    proptest::proptest! {
        /// Any time of a four-digit year reads back as itself.
        #[test]
        fn every_four_digit_time_round_trips(secs in -62_167_219_200i64..253_402_300_800) {
            let s = format_time(secs);
            proptest::prop_assert_eq!(s.len(), 20);
            proptest::prop_assert_eq!(parse_time_str(&s), Ok(secs));
        }
    }
}
