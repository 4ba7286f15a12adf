//! What every pass of the loader is given: the config's folder ([`Dir`],
//! against which every relative path of the config is resolved) and the
//! diagnostics collected so far ([`Diags`]).

use super::diag::{ConfigError, ConfigReport, Diag, Reported};
use super::file::S;
use crate::diagnostics::PackDiagnostic;
use crate::keys::SecretKey;
use std::path::{Path, PathBuf};

pub(super) type Span = std::ops::Range<usize>;

pub(super) fn sp(r: Span) -> miette::SourceSpan {
    (r.start, r.end.saturating_sub(r.start)).into()
}

/// The diagnostics of one load, each at the config's file and text (the
/// text is empty until the file is read).
pub(super) struct Diags {
    pub file: String,
    pub source: String,
    pub report: ConfigReport,
}

impl Diags {
    pub fn new(file: String) -> Self {
        Diags {
            file,
            source: String::new(),
            report: ConfigReport::default(),
        }
    }

    pub fn err(&mut self, e: ConfigError) {
        self.report.items.push(Reported {
            file: self.file.clone(),
            source: self.source.clone(),
            diag: Diag::Config(e),
        });
    }

    /// A checker's diagnostic of the inline pack (it points into the TOML).
    pub fn pack(&mut self, d: PackDiagnostic) {
        self.report.items.push(Reported {
            file: self.file.clone(),
            source: self.source.clone(),
            diag: Diag::Pack(d),
        });
    }

    /// A diagnostic of another file (a pack's).
    pub fn push(&mut self, r: Reported) {
        self.report.items.push(r);
    }

    pub fn load_err(&mut self, what: &'static str, message: String, span: Span) {
        self.err(ConfigError::Load {
            what,
            message,
            span: Some(sp(span)),
            help: None,
        });
    }

    pub fn errors(&self) -> usize {
        self.report.errors()
    }

    pub fn has_errors(&self) -> bool {
        self.report.has_errors()
    }
}

/// The config file's folder.
pub(super) struct Dir(pub PathBuf);

impl Dir {
    /// The folder of the config at `path` (`.` for a bare file name).
    pub fn of(path: &Path) -> Self {
        Dir(path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf())
    }

    /// A path the config names, relative to the config's folder.
    pub fn rel(&self, p: &str) -> PathBuf {
        self.0.join(p)
    }

    /// The config file's folder, absolute: what `${CONFIG_DIR}` expands to.
    pub fn absolute(&self) -> String {
        std::path::absolute(&self.0)
            .unwrap_or_else(|_| self.0.clone())
            .display()
            .to_string()
    }

    /// The path when it exists, else a diagnostic at its span.
    pub fn existing(
        &self,
        d: &mut Diags,
        what: &'static str,
        s: &S<String>,
        help: Option<String>,
    ) -> Option<PathBuf> {
        let p = self.rel(s.get_ref());
        if p.exists() {
            Some(p)
        } else {
            d.err(ConfigError::MissingFile {
                what,
                path: p.display().to_string(),
                span: sp(s.span()),
                help,
            });
            None
        }
    }

    /// A secret key the config names.
    pub fn secret(&self, d: &mut Diags, what: &'static str, k: &S<String>) -> Option<SecretKey> {
        let path = self.existing(
            d,
            what,
            k,
            Some("generate one with `ipc keygen NAME`".into()),
        )?;
        match crate::keys::load_secret(&path) {
            Ok(key) => Some(key),
            Err(e) => {
                d.load_err(what, e.to_string(), k.span());
                None
            }
        }
    }
}

/// A TOML value as JSON (dates as their text).
pub(super) fn to_json(v: &toml::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}
