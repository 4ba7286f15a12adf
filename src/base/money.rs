//! Amounts. Inside, an amount is integer minor units (hundredths: cents);
//! outside, it is the exact decimal the caller writes and reads (`4.00`,
//! never `400`). [`Money`] is the one type that converts between the two:
//! every parser and formatter of an amount in the crate is one of its
//! methods.

use super::json::{MAX_EXACT_INTEGER, echo, kind};
use serde_json::Value;
use std::fmt;

/// An amount in minor units (hundredths).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money(i64);

/// Why a decimal text is not an amount (each reader words it its own way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoneyError {
    /// Not `[-]digits[.digits]`.
    NotDecimal,
    /// More than two decimals: an amount is never rounded.
    TooManyDecimals,
    /// Larger than the reader's bound.
    TooLarge,
}

impl Money {
    pub const fn from_minor(minor: i64) -> Money {
        Money(minor)
    }

    pub const fn minor(self) -> i64 {
        self.0
    }

    /// An amount a caller wrote, as minor units: a JSON number or a decimal
    /// string (`98.70`, `"98.70"`, `1000`); refuses more than two decimals,
    /// exponents in strings, signs other than a leading `-`, and overflow.
    /// A JSON number is read through its shortest decimal form, which is
    /// the text that was written for any amount with at most 15
    /// significant digits.
    pub fn from_json(v: &Value) -> Result<Money, String> {
        let text = match v {
            Value::String(s) => s.trim().to_string(),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    i.to_string()
                } else if let Some(f) = n.as_f64() {
                    let s = format!("{f}");
                    if s.contains('e') || s.contains("inf") || s.contains("NaN") {
                        return Err(format!("`{}` is not a plain decimal amount", echo(&s)));
                    }
                    s
                } else {
                    return Err(format!("`{n}` is out of range"));
                }
            }
            other => return Err(format!("expected an amount, found {}", kind(other))),
        };
        Money::parse(&text)
    }

    /// `"-12.3"` to -1230 minor units. At most two decimals, digits only,
    /// at most [`MAX_EXACT_INTEGER`] minor units: the inverse of
    /// [`Money`]'s `Display`.
    pub fn parse(text: &str) -> Result<Money, String> {
        Money::parse_bounded(text, MAX_EXACT_INTEGER).map_err(|e| match e {
            MoneyError::NotDecimal => format!("`{}` is not a decimal amount", echo(text)),
            MoneyError::TooManyDecimals => format!(
                "`{}` has more than two decimals; amounts are in cents",
                echo(text)
            ),
            MoneyError::TooLarge => format!("`{}` is too large", echo(text)),
        })
    }

    /// [`Money::parse`] with the bound on the magnitude of the minor units
    /// given (a pack literal may use all of `i64`) and the reason typed.
    pub fn parse_bounded(text: &str, max: u64) -> Result<Money, MoneyError> {
        let (neg, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (units, frac) = body.split_once('.').unwrap_or((body, ""));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(units) || (!frac.is_empty() && !digits(frac)) || body.ends_with('.') {
            return Err(MoneyError::NotDecimal);
        }
        if frac.len() > 2 {
            return Err(MoneyError::TooManyDecimals);
        }
        // at most two ASCII digits (checked above), padded: "5" is 50 cents
        let frac_val = frac
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(2)
            .fold(0i64, |a, b| a * 10 + i64::from(b - b'0'));
        let minor = units
            .parse::<i64>()
            .ok()
            .and_then(|u| u.checked_mul(100))
            .and_then(|u| u.checked_add(frac_val))
            .filter(|m| (*m as u64) <= max)
            .ok_or(MoneyError::TooLarge)?;
        Ok(Money(if neg { -minor } else { minor }))
    }

    /// The amount as a proposal or a tool carries it: the exact decimal as
    /// a JSON string (`"1000.01"`).
    pub fn to_json(self) -> Value {
        Value::String(self.to_string())
    }

    /// The amount as a person reads it in a message: `123456` minor units
    /// as `1,234.56`.
    pub fn grouped(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let m = self.0.unsigned_abs();
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
}

/// The exact decimal with two decimals (`1000.01`, `-0.05`): what
/// [`Money::parse`] reads back.
impl fmt::Display for Money {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.0 < 0 { "-" } else { "" };
        let m = self.0.unsigned_abs();
        write!(f, "{sign}{}.{:02}", m / 100, m % 100)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn parse_money(v: &Value) -> Result<i64, String> {
        Money::from_json(v).map(Money::minor)
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
    fn money_format() {
        let g = |m| Money::from_minor(m).grouped();
        assert_eq!(g(123456), "1,234.56");
        assert_eq!(g(5), "0.05");
        assert_eq!(g(100_000_000), "1,000,000.00");
        assert_eq!(g(-250), "-2.50");
        assert_eq!(Money::from_minor(400).to_string(), "4.00");
        assert_eq!(Money::from_minor(400).to_json(), json!("4.00"));
        assert_eq!(Money::from_minor(1000001).to_string(), "10000.01");
        assert_eq!(Money::from_minor(-5).to_string(), "-0.05");
    }

    const MAX: i64 = MAX_EXACT_INTEGER as i64;

    proptest! {
        /// format∘parse: every amount leaves as the decimal the caller's
        /// tool takes (`4.00` for 400 minor units: the units are whole
        /// currency units, two decimals) and reads back as itself, as text,
        /// as a JSON string and as a JSON number.
        #[test]
        fn format_then_parse_is_the_identity(minor in -MAX..=MAX) {
            let m = Money::from_minor(minor);
            let text = m.to_string();
            let (units, cents) = text.trim_start_matches('-').split_once('.').unwrap();
            prop_assert_eq!(cents.len(), 2);
            prop_assert_eq!(units.parse::<i64>().unwrap(), minor.abs() / 100);
            prop_assert_eq!(Money::parse(&text), Ok(m));
            prop_assert_eq!(Money::from_json(&m.to_json()), Ok(m));
            let grouped = m.grouped().replace(',', "");
            prop_assert_eq!(Money::parse(&grouped), Ok(m));
            // a JSON number carries the amount exactly up to 15 digits
            if minor.abs() < 1_000_000_000_000_000 {
                let n: Value = serde_json::from_str(&text).unwrap();
                prop_assert_eq!(Money::from_json(&n), Ok(m));
            }
        }

        /// parse∘format: a decimal with at most two decimals is read as
        /// its value and written back in the canonical two-decimal form.
        #[test]
        fn parse_then_format_is_canonical(units in 0i64..1_000_000_000_000, frac in "[0-9]{0,2}", neg: bool) {
            let text = if frac.is_empty() { format!("{units}") } else { format!("{units}.{frac}") };
            let text = if neg { format!("-{text}") } else { text };
            let m = Money::parse(&text).unwrap();
            let f: i64 = format!("{frac:0<2}").parse().unwrap();
            let minor = units * 100 + f;
            prop_assert_eq!(m.minor(), if neg { -minor } else { minor });
            prop_assert_eq!(Money::parse(&m.to_string()), Ok(m));
        }
    }
}
