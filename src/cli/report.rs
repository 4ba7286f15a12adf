//! What the receipts commands share to report: a store's snapshot, a
//! problem list as JSON, a failure as a diagnostic or a JSON document.

use super::Format;
use crate::store::{ChainProblem, Snapshot, StoreError};
use miette::Diagnostic;
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;

/// The time a checkpoint is signed at: `at` when given, else now; an
/// error when the system clock cannot be read (never a checkpoint signed
/// at the epoch).
pub(super) fn signing_time(at: Option<i64>) -> Result<i64, crate::gateway::ClockError> {
    match at {
        Some(t) => Ok(t),
        None => crate::gateway::unix_now(),
    }
}

/// The receipts, head marker and accounts of a store (a file, or a
/// `postgres://` URL).
pub(super) fn load(path: &Path) -> Result<Snapshot, StoreError> {
    crate::store::open(path, false)?.snapshot()
}

/// Each problem as its JSON form plus its `message`.
pub(super) fn problems_json(problems: Option<&Vec<ChainProblem>>) -> Vec<Value> {
    problems
        .into_iter()
        .flatten()
        .map(|p| {
            let mut v = serde_json::to_value(p).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("message".into(), json!(p.to_string()));
            }
            v
        })
        .collect()
}

pub(super) fn write_json(out: &mut dyn Write, doc: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(doc).unwrap_or_default()
    )
}

pub(super) fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The command cannot run (a store that cannot be read, a key or a
/// checkpoint refused): a diagnostic on stderr (human) or a JSON document
/// on stdout; exit 1.
pub(super) fn failure(out: &mut dyn Write, format: Format, e: &dyn Diagnostic) -> u8 {
    match format {
        Format::Json => {
            let _ = write_json(out, &error_json(e));
        }
        Format::Human => render(e),
    }
    1
}

/// `{"ok": false, "error": {"code", "message"}}`.
pub(super) fn error_json(e: &dyn Diagnostic) -> Value {
    json!({
        "ok": false,
        "error": {
            "code": e.code().map(|c| c.to_string()),
            "message": e.to_string(),
        },
    })
}

/// A diagnostic on stderr.
pub(super) fn render(e: &dyn Diagnostic) {
    let theme = if super::use_color() {
        miette::GraphicalTheme::unicode()
    } else {
        miette::GraphicalTheme::unicode_nocolor()
    };
    let mut text = String::new();
    let handler = miette::GraphicalReportHandler::new_themed(theme).with_width(100);
    if handler.render_report(&mut text, e).is_err() {
        text = format!("error: {e}\n");
    }
    eprint!("{text}");
}
