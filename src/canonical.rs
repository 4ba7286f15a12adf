//! Canonical encoding and hashing: the one way intentplane turns a value
//! into bytes before hashing or signing it (bundles here; mandates,
//! approvals, operation hashes and receipts in the gateway).
//!
//! The encoding is the JSON Canonicalization Scheme (RFC 8785, through
//! `serde_jcs`): object keys sorted, no insignificant whitespace, numbers in
//! their shortest IEEE-754 form. That last rule means an integer beyond
//! ±(2^53 − 1) would be rounded before hashing, so two different values
//! could share a hash; [`to_jcs`] refuses such integers instead.

use miette::Diagnostic;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use thiserror::Error;

/// The largest integer magnitude that canonical JSON encodes exactly.
pub use crate::base::json::MAX_EXACT_INTEGER;

#[derive(Debug, Error, Diagnostic, Clone, PartialEq, Eq)]
pub enum CanonicalError {
    /// The value has no JSON form (a map with non-string keys, ...).
    #[error("cannot encode the value as json: {reason}")]
    #[diagnostic(code(ipc::canonical::encode))]
    Encode { reason: String },

    /// An integer that canonical JSON would round: hashing it would let two
    /// different values share a hash.
    #[error(
        "the integer `{value}` at `{path}` is beyond ±(2^53 - 1) and has no exact canonical encoding"
    )]
    #[diagnostic(
        code(ipc::canonical::inexact_integer),
        help("keep integers within ±9007199254740991 (for money: ±90,071,992,547,409.91)")
    )]
    InexactInteger { value: String, path: String },
}

/// The RFC 8785 canonical JSON text of a value.
pub fn to_jcs<T: Serialize + ?Sized>(v: &T) -> Result<String, CanonicalError> {
    let value = serde_json::to_value(v).map_err(|e| CanonicalError::Encode {
        reason: e.to_string(),
    })?;
    value_to_jcs(&value)
}

/// The canonical text of a JSON value already in memory.
///
/// Written directly rather than through `serde_jcs`, which produces the
/// same text (a property test checks it) about 40 times slower: this is on
/// the gateway's decision path, twice per decision (the operation hash and
/// the receipt). Strings are escaped as ECMAScript's `JSON.stringify` does,
/// object keys sorted by UTF-16 code units, numbers in ECMAScript's
/// shortest form (`ryu-js`, the formatter `serde_jcs` uses).
pub fn value_to_jcs(value: &Value) -> Result<String, CanonicalError> {
    let mut out = String::with_capacity(256);
    if write_jcs(value, &mut out).is_err() {
        // name the offending value
        check_integers(value, &mut String::from("$"))?;
        return Err(CanonicalError::Encode {
            reason: "a number has no canonical form".into(),
        });
    }
    Ok(out)
}

fn write_jcs(v: &Value, out: &mut String) -> Result<(), ()> {
    use std::fmt::Write;
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                if i.unsigned_abs() > MAX_EXACT_INTEGER {
                    return Err(());
                }
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                if u > MAX_EXACT_INTEGER {
                    return Err(());
                }
                let _ = write!(out, "{u}");
            } else {
                let f = n.as_f64().ok_or(())?;
                if !f.is_finite() {
                    return Err(());
                }
                if f == 0.0 {
                    out.push('0');
                } else {
                    out.push_str(ryu_js::Buffer::new().format_finite(f));
                }
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_jcs(item, out)?;
            }
            out.push(']');
        }
        Value::Object(map) => write_object(map, out)?,
    }
    Ok(())
}

fn write_object(map: &serde_json::Map<String, Value>, out: &mut String) -> Result<(), ()> {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    if map.keys().all(|k| k.is_ascii()) {
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    } else {
        entries.sort_unstable_by(|a, b| key_order(a.0, b.0));
    }
    out.push('{');
    for (i, (k, item)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_jcs(item, out)?;
    }
    out.push('}');
    Ok(())
}

/// A string as `JSON.stringify` writes it (its canonical form), appended
/// to `out`: runs that need no escape are copied whole.
pub fn write_string(s: &str, out: &mut String) {
    use std::fmt::Write;
    out.push('"');
    if !needs_escape(s.as_bytes()) {
        // the common case: nothing to escape
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            0x08 => "\\b",
            0x0c => "\\f",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..0x20 => "",
            _ => continue,
        };
        // `i` is at an ASCII byte, hence at a char boundary
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Whether a string holds a byte `JSON.stringify` escapes (a control
/// character, `"` or `\\`), eight bytes at a time: this runs over every
/// string of every receipt and operation hash.
fn needs_escape(b: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // some byte of `w` is below `n` (n <= 128; Bit Twiddling Hacks,
    // "determine if a word has a byte less than n")
    let below = |w: u64, n: u64| w.wrapping_sub(ONES * n) & !w & HIGH != 0;
    let mut words = b.chunks_exact(8);
    for c in &mut words {
        let mut w8 = [0u8; 8];
        w8.copy_from_slice(c);
        let w = u64::from_le_bytes(w8);
        if below(w, 0x20)
            || below(w ^ (ONES * u64::from(b'"')), 1)
            || below(w ^ (ONES * u64::from(b'\\')), 1)
        {
            return true;
        }
    }
    words
        .remainder()
        .iter()
        .any(|&b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Object keys in canonical order: by UTF-16 code units (byte order is the
/// same for ASCII keys, the common case).
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    if a.is_ascii() && b.is_ascii() {
        a.cmp(b)
    } else {
        a.encode_utf16().cmp(b.encode_utf16())
    }
}

/// Canonical JSON text (RFC 8785), only ever made by this module: what the
/// gateway hashes and stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Jcs(String);

impl Jcs {
    /// The canonical text of a JSON value.
    pub fn from_value(value: &Value) -> Result<Self, CanonicalError> {
        value_to_jcs(value).map(Jcs)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
    pub fn into_string(self) -> String {
        self.0
    }
    /// `sha256:<hex>` of the text.
    pub fn hash(&self) -> String {
        sha256_tagged(Sha256::digest(self.0.as_bytes()).as_slice())
    }
}

/// Writes a canonical JSON object field by field, without building a
/// [`Value`] first (the receipt and the operation hash on the decision
/// path). The caller gives the keys in canonical order; debug builds check.
pub struct ObjectWriter {
    out: String,
    last: Option<&'static str>,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    pub fn new() -> Self {
        Self::with_capacity(1024)
    }

    /// A writer with room for `bytes` of text (a receipt is over 1 KiB, a
    /// nested object a few dozen bytes: growing or over-allocating costs).
    pub fn with_capacity(bytes: usize) -> Self {
        let mut out = String::with_capacity(bytes);
        out.push('{');
        ObjectWriter { out, last: None }
    }

    fn key(&mut self, key: &'static str) -> &mut String {
        if let Some(last) = self.last {
            debug_assert!(
                key_order(last, key).is_lt(),
                "key `{key}` written after `{last}`"
            );
            self.out.push(',');
        }
        self.last = Some(key);
        // the writer's keys are the code's own names: nothing to escape
        debug_assert!(!needs_escape(key.as_bytes()), "key `{key}` needs escaping");
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        &mut self.out
    }

    /// A field holding any JSON value.
    pub fn value(&mut self, key: &'static str, v: &Value) -> Result<&mut Self, CanonicalError> {
        if write_jcs(v, self.key(key)).is_err() {
            check_integers(v, &mut format!("$.{key}"))?;
            return Err(CanonicalError::Encode {
                reason: "a number has no canonical form".into(),
            });
        }
        Ok(self)
    }

    /// A field holding a JSON object given as a map.
    pub fn map(
        &mut self,
        key: &'static str,
        m: &serde_json::Map<String, Value>,
    ) -> Result<&mut Self, CanonicalError> {
        let out = self.key(key);
        if write_object(m, out).is_err() {
            for (k, v) in m {
                check_integers(v, &mut format!("$.{key}.{k}"))?;
            }
            return Err(CanonicalError::Encode {
                reason: "a number has no canonical form".into(),
            });
        }
        Ok(self)
    }

    pub fn str(&mut self, key: &'static str, s: &str) -> &mut Self {
        write_string(s, self.key(key));
        self
    }

    /// A string, or `null` for `None`.
    pub fn opt_str(&mut self, key: &'static str, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => self.str(key, s),
            None => self.raw(key, "null"),
        }
    }

    pub fn strs(&mut self, key: &'static str, items: &[String]) -> &mut Self {
        let out = self.key(key);
        out.push('[');
        for (i, s) in items.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            write_string(s, out);
        }
        out.push(']');
        self
    }

    pub fn bool(&mut self, key: &'static str, b: bool) -> &mut Self {
        self.raw(key, if b { "true" } else { "false" })
    }

    /// An unsigned integer (refused beyond 2^53 - 1), or `null`.
    pub fn opt_uint(
        &mut self,
        key: &'static str,
        n: Option<u64>,
    ) -> Result<&mut Self, CanonicalError> {
        match n {
            Some(n) if n > MAX_EXACT_INTEGER => Err(CanonicalError::InexactInteger {
                value: n.to_string(),
                path: format!("$.{key}"),
            }),
            Some(n) => {
                use std::fmt::Write;
                let _ = write!(self.key(key), "{n}");
                Ok(self)
            }
            None => Ok(self.raw(key, "null")),
        }
    }

    /// A field whose value is already canonical text.
    pub fn jcs(&mut self, key: &'static str, v: &Jcs) -> &mut Self {
        self.key(key).push_str(&v.0);
        self
    }

    fn raw(&mut self, key: &'static str, text: &str) -> &mut Self {
        self.key(key).push_str(text);
        self
    }

    pub fn finish(mut self) -> Jcs {
        self.out.push('}');
        Jcs(self.out)
    }
}

/// Lower-case hex SHA-256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(64);
    push_hex(Sha256::digest(bytes).as_slice(), &mut out);
    out
}

/// `sha256:` and the lower-case hex of a finished SHA-256 digest.
pub fn sha256_tagged(digest: &[u8]) -> String {
    let mut out = String::with_capacity(71);
    out.push_str("sha256:");
    push_hex(digest, &mut out);
    out
}

/// Lower-case hex of some bytes, appended to `out`.
fn push_hex(bytes: &[u8], out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 15)]));
    }
}

/// JSON text read the way RFC 8785 reads it, every number a double: an
/// integer beyond ±(2^53 − 1) becomes the double it denotes. That is how
/// [`value_to_jcs`] wrote it: a double such as `1e17` is written without
/// an exponent (`100000000000000000`), which a plain read takes for an
/// integer with no exact canonical form. Canonical text read with this
/// and written again is the same text (a property test), so receipt
/// bodies read back hash as they were written.
pub fn read_json(text: &str) -> Result<Value, serde_json::Error> {
    let mut v: Value = serde_json::from_str(text)?;
    widen_integers(&mut v);
    Ok(v)
}

/// Integers beyond ±(2^53 − 1) to doubles, in place (the depth is bounded
/// by serde_json's recursion limit on the text just read).
fn widen_integers(v: &mut Value) {
    match v {
        Value::Number(n) => {
            let inexact = n.as_u64().is_some_and(|u| u > MAX_EXACT_INTEGER)
                || n.as_i64()
                    .is_some_and(|i| i.unsigned_abs() > MAX_EXACT_INTEGER);
            if inexact && let Some(f) = n.as_f64().and_then(serde_json::Number::from_f64) {
                *n = f;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(widen_integers),
        Value::Object(m) => m.values_mut().for_each(widen_integers),
        Value::Null | Value::Bool(_) | Value::String(_) => {}
    }
}

/// `sha256:<hex>` of the canonical encoding of a value.
pub fn hash_of<T: Serialize + ?Sized>(v: &T) -> Result<String, CanonicalError> {
    Ok(Jcs(to_jcs(v)?).hash())
}

/// Whether `v` has an exact canonical encoding: every integer within
/// ±(2^53 − 1). `root` names `v` in the error (`$.proposal`).
pub fn check_exact(v: &Value, root: &str) -> Result<(), CanonicalError> {
    check_integers(v, &mut root.to_string())
}

fn check_integers(v: &Value, path: &mut String) -> Result<(), CanonicalError> {
    match v {
        Value::Number(n) => {
            let inexact = match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => i.unsigned_abs() > MAX_EXACT_INTEGER,
                (None, Some(u)) => u > MAX_EXACT_INTEGER,
                // a float is exact by definition
                (None, None) => false,
            };
            if inexact {
                return Err(CanonicalError::InexactInteger {
                    value: n.to_string(),
                    path: path.clone(),
                });
            }
            Ok(())
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                check_integers(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Object(map) => {
            for (k, item) in map {
                let len = path.len();
                path.push('.');
                path.push_str(k);
                check_integers(item, path)?;
                path.truncate(len);
            }
            Ok(())
        }
        Value::Null | Value::Bool(_) | Value::String(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(MAX_EXACT_INTEGER as i64)..=(MAX_EXACT_INTEGER as i64)).prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| serde_json::Number::from_f64(f)
                    .map(Value::Number)
                    .unwrap_or(Value::Null)),
            any::<String>().prop_map(Value::String),
            "[\\u{0}-\\u{2f}\\u{7f}-\\u{a0}\\u{2028}\\u{d7ff}\\u{e000}\\u{10ffff}]{0,8}"
                .prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The byte a string is escaped for, the obvious way.
    fn escapes(b: &[u8]) -> bool {
        b.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\')
    }

    /// Every byte value, at every place of a word and of the tail after
    /// the words, is seen by the word-at-a-time test as by the obvious one.
    #[test]
    fn every_escaped_byte_is_found_wherever_it_is() {
        for len in 0..=20 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    for filler in [b'a', 0x7f, 0xff, b' ', b'!', b'#', b'[', b']'] {
                        let mut b = vec![filler; len];
                        b[at] = byte;
                        assert_eq!(needs_escape(&b), escapes(&b), "{b:?}");
                    }
                }
            }
        }
    }

    proptest! {
        /// Any bytes: the word-at-a-time test agrees with the obvious one,
        /// and a string is written as `serde_json` writes it (which
        /// escapes as `JSON.stringify` does for these bytes).
        #[test]
        fn escape_test_agrees(b in proptest::collection::vec(any::<u8>(), 0..64), s in ".{0,40}") {
            prop_assert_eq!(needs_escape(&b), escapes(&b));
            let mut out = String::new();
            write_string(&s, &mut out);
            prop_assert_eq!(out, serde_json::to_string(&s).unwrap());
        }

        /// The fast writer is byte for byte what `serde_jcs` writes.
        #[test]
        fn same_text_as_serde_jcs(v in arb_json()) {
            prop_assert_eq!(value_to_jcs(&v).unwrap(), serde_jcs::to_string(&v).unwrap());
        }

        /// Canonical text read back and written again is the same text:
        /// `ipc receipts verify` refuses a stored body that is not its own
        /// canonical form, so a body the gateway wrote must never be
        /// taken for one.
        #[test]
        fn canonical_text_reads_back_to_itself(v in arb_json()) {
            let text = value_to_jcs(&v).unwrap();
            let back = read_json(&text).unwrap();
            prop_assert_eq!(value_to_jcs(&back).unwrap(), text);
        }

        /// An object written field by field is the canonical text of the
        /// same object built as a value.
        #[test]
        fn object_writer_is_canonical(
            a in arb_json(),
            m in prop::collection::btree_map(any::<String>(), arb_json(), 0..6),
            s in any::<String>(),
            list in prop::collection::vec(any::<String>(), 0..4),
            n in prop::option::of(0..=MAX_EXACT_INTEGER),
            flag in any::<bool>(),
        ) {
            let map: serde_json::Map<String, Value> = m.into_iter().collect();
            let mut w = ObjectWriter::new();
            w.value("a", &a).unwrap()
                .strs("a_list", &list)
                .bool("b", flag)
                .map("m", &map).unwrap()
                .opt_uint("n", n).unwrap()
                .opt_str("o", None)
                .str("s", &s);
            let v = json!({"a": a, "a_list": list, "b": flag, "m": map, "n": n, "o": null, "s": s});
            prop_assert_eq!(w.finish().into_string(), value_to_jcs(&v).unwrap());
        }
    }

    /// The case the property found: a double written without exponent
    /// beyond 2^53 is read back as that double, not as an integer that has
    /// no exact canonical form; an integer spelled so is read the same way.
    #[test]
    fn large_doubles_read_back_as_doubles() {
        let v = json!([1.0694069464974614e17, -1e17, 1e300, 9007199254740991_u64]);
        let text = value_to_jcs(&v).unwrap();
        assert_eq!(
            text,
            "[106940694649746140,-100000000000000000,1e+300,9007199254740991]"
        );
        assert!(value_to_jcs(&serde_json::from_str(&text).unwrap()).is_err());
        assert_eq!(value_to_jcs(&read_json(&text).unwrap()).unwrap(), text);
        // not the shortest form of its double: read, but written otherwise
        assert_eq!(
            value_to_jcs(&read_json("106940694649746141").unwrap()).unwrap(),
            "106940694649746140"
        );
    }

    #[test]
    fn keys_are_sorted_and_whitespace_dropped() {
        let v = json!({"b": 1, "a": [true, null, "x"], "c": {"z": 1.5, "y": -2}});
        assert_eq!(
            to_jcs(&v).unwrap(),
            r#"{"a":[true,null,"x"],"b":1,"c":{"y":-2,"z":1.5}}"#
        );
    }

    #[test]
    fn large_integers_are_refused_not_rounded() {
        let ok = json!({"n": MAX_EXACT_INTEGER});
        assert!(to_jcs(&ok).is_ok());
        let bad = json!({"list": [1, {"n": MAX_EXACT_INTEGER + 2}]});
        let err = to_jcs(&bad).unwrap_err();
        assert_eq!(
            err,
            CanonicalError::InexactInteger {
                value: "9007199254740993".into(),
                path: "$.list[1].n".into()
            }
        );
        assert!(to_jcs(&json!(i64::MIN)).is_err());
    }

    #[test]
    fn sha256_of_known_input() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hash_of(&json!({"b": 2, "a": 1})).unwrap(),
            format!("sha256:{}", sha256_hex(br#"{"a":1,"b":2}"#))
        );
    }
}
