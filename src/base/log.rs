//! The lines a long-running process writes on stderr, through one
//! function ([`line`]), in the format chosen once at start ([`set_format`]):
//!
//! - [`Format::Plain`] (every command's default): `warning: TEXT`,
//!   `error: TEXT` or `TEXT`, as a command has always written them;
//! - [`Format::Text`] (`ipc serve --listen`): the same, after an RFC 3339
//!   UTC timestamp (`2026-12-03T23:18:49.123Z warning: ...`);
//! - [`Format::Json`] (`ipc serve --listen --log-format json`): one JSON
//!   object a line, `{"ts", "level", "event", "message"?, ...fields}`, for
//!   whoever ships logs. The fields are the caller's: never an argument's
//!   value, never a secret.
//!
//! Events of [`Level::Event`] (a decision, an HTTP request) are written in
//! the JSON format only: the text log holds what an operator reads.

use serde_json::{Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// How the lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Plain,
    Text,
    Json,
}

/// What a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// One record of what happened (a decision, a request): JSON only.
    Event,
    /// Start-up, shutdown, a reload.
    Info,
    Warning,
    Error,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Event | Level::Info => "info",
            Level::Warning => "warning",
            Level::Error => "error",
        }
    }
}

static FORMAT: AtomicU8 = AtomicU8::new(0);

/// Chooses the format of every line written from now on.
pub fn set_format(f: Format) {
    let n = match f {
        Format::Plain => 0,
        Format::Text => 1,
        Format::Json => 2,
    };
    FORMAT.store(n, Ordering::Relaxed);
}

/// The format chosen.
pub fn format() -> Format {
    match FORMAT.load(Ordering::Relaxed) {
        1 => Format::Text,
        2 => Format::Json,
        _ => Format::Plain,
    }
}

/// Writes one line on stderr (in one write, so that threads do not
/// interleave theirs); nothing when it is an event and the format is
/// not JSON.
pub fn line(level: Level, event: &str, message: &str, fields: &[(&str, Value)]) {
    if let Some(text) = render(format(), now_millis(), level, event, message, fields) {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(text.as_bytes());
        let _ = err.flush();
    }
}

/// A start-up, shutdown or reload line.
pub fn info(event: &str, message: &str) {
    line(Level::Info, event, message, &[]);
}

pub fn warn(event: &str, message: &str) {
    line(Level::Warning, event, message, &[]);
}

pub fn error(event: &str, message: &str) {
    line(Level::Error, event, message, &[]);
}

/// The line `line` writes at `millis` (since the epoch), with its newline.
pub fn render(
    format: Format,
    millis: i64,
    level: Level,
    event: &str,
    message: &str,
    fields: &[(&str, Value)],
) -> Option<String> {
    let prefix = match level {
        Level::Warning => "warning: ",
        Level::Error => "error: ",
        Level::Event | Level::Info => "",
    };
    match format {
        Format::Plain | Format::Text if level == Level::Event => None,
        Format::Plain => Some(format!("{prefix}{message}\n")),
        Format::Text => Some(format!("{} {prefix}{message}\n", timestamp(millis))),
        Format::Json => {
            let mut o = Map::new();
            o.insert("ts".into(), Value::String(timestamp(millis)));
            o.insert("level".into(), Value::String(level.name().into()));
            o.insert("event".into(), Value::String(event.into()));
            if !message.is_empty() {
                o.insert("message".into(), Value::String(message.into()));
            }
            for (k, v) in fields {
                o.insert((*k).to_string(), v.clone());
            }
            Some(format!("{}\n", Value::Object(o)))
        }
    }
}

/// RFC 3339 in UTC, to the millisecond: `2026-12-03T23:18:49.123Z`.
pub fn timestamp(millis: i64) -> String {
    let secs = super::json::format_time(millis.div_euclid(1000));
    let frac = millis.rem_euclid(1000);
    match secs.strip_suffix('Z') {
        Some(s) => format!("{s}.{frac:03}Z"),
        None => secs,
    }
}

/// Now, in milliseconds since the epoch (0 if the clock reads before it:
/// a log line's time is for reading, never for deciding).
fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::{Format, Level, render, timestamp};
    use serde_json::{Value, json};

    #[test]
    fn timestamps_are_rfc3339_utc_to_the_millisecond() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_796_339_929_007), "2026-12-03T23:18:49.007Z");
    }

    #[test]
    fn each_format_writes_its_line() {
        let at = 1_796_339_929_007;
        let r = |f, l| render(f, at, l, "store", "the store is down", &[("n", json!(1))]);
        assert_eq!(
            r(Format::Plain, Level::Warning).as_deref(),
            Some("warning: the store is down\n")
        );
        assert_eq!(
            r(Format::Text, Level::Error).as_deref(),
            Some("2026-12-03T23:18:49.007Z error: the store is down\n")
        );
        assert_eq!(r(Format::Text, Level::Event), None);
        assert_eq!(r(Format::Plain, Level::Event), None);
        let j: Value = serde_json::from_str(&r(Format::Json, Level::Event).unwrap()).unwrap();
        assert_eq!(
            j,
            json!({"ts": "2026-12-03T23:18:49.007Z", "level": "info", "event": "store", "message": "the store is down", "n": 1})
        );
    }
}
