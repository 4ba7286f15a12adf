//! The compiler's driver, from pack paths to a bundle: check every pack,
//! read its hand-written policies, generate and validate Cedar, hash.
//! Nothing is produced when anything fails. It sits on the compiler's
//! side: the bundle format (`crate::bundle`) names nothing of it.

use crate::bundle::{Bundle, BundleError};
use crate::check::{Checked, check_path};
use crate::codegen::{self, CedarFile, PackInput, Problem};
use crate::diagnostics::PackDiagnostic;
use std::path::{Path, PathBuf};

/// A `.cedar` file is hand-written; larger than this it is not.
const MAX_CEDAR_LEN: u64 = 1024 * 1024;

/// Everything a build found, and the bundle when there is no error.
#[derive(Debug)]
pub struct BuildReport {
    /// The checker's results, one per path (warnings included).
    pub checked: Vec<Checked>,
    /// Errors found after checking: Cedar generation and validation,
    /// hand-written policies.
    pub problems: Vec<Problem>,
    /// An error of the bundle itself (its canonical encoding).
    pub failure: Option<BundleError>,
    /// `Some` only when there is no error at all.
    pub bundle: Option<Bundle>,
}

impl BuildReport {
    pub fn errors(&self) -> usize {
        self.checked
            .iter()
            .flat_map(|c| &c.diagnostics)
            .filter(|d| d.is_error())
            .count()
            + self.problems.len()
            + usize::from(self.failure.is_some())
    }
    pub fn warnings(&self) -> usize {
        self.checked
            .iter()
            .flat_map(|c| &c.diagnostics)
            .filter(|d| !d.is_error())
            .count()
    }

    /// The checker's diagnostics (errors only, or warnings too) and the
    /// build's problems, rendered for a person, one block each. The
    /// bundle's own failure is left to the caller, which may have its own.
    pub fn render_human(&self, errors_only: bool, color: bool) -> String {
        let mut text = String::new();
        for c in &self.checked {
            for d in c
                .diagnostics
                .iter()
                .filter(|d| !errors_only || d.is_error())
            {
                text.push_str(&crate::diagnostics::render_human_report(
                    d, &c.file, &c.source, color,
                ));
                text.push('\n');
            }
        }
        for p in &self.problems {
            text.push_str(&p.render(color));
            text.push('\n');
        }
        text
    }
}

/// Builds a bundle from pack folders or files.
pub fn build(paths: &[PathBuf]) -> BuildReport {
    build_with(paths, vec![])
}

/// Builds a bundle from pack folders or files and packs checked elsewhere
/// (the MCP proxy's inline tools, checked from its TOML), which have no
/// hand-written policies.
pub fn build_with(paths: &[PathBuf], extra: Vec<Checked>) -> BuildReport {
    let from_files = paths.len();
    let mut checked: Vec<Checked> = paths.iter().map(|p| check_path(p)).collect();
    checked.extend(extra);
    let mut report = BuildReport {
        checked,
        problems: vec![],
        failure: None,
        bundle: None,
    };
    if report.checked.iter().any(Checked::has_errors) {
        return report;
    }
    let mut inputs = vec![];
    for (i, c) in report.checked.iter().enumerate() {
        let Some(pack) = &c.pack else { continue };
        let custom = match i < from_files {
            false => None,
            true => match read_custom(&c.file) {
                Ok(x) => x,
                Err(p) => {
                    report.problems.push(*p);
                    continue;
                }
            },
        };
        inputs.push(PackInput {
            pack: pack.clone(),
            source: c.source.clone(),
            custom,
        });
    }
    if !report.problems.is_empty() {
        return report;
    }
    match codegen::generate(&inputs) {
        Err(problems) => report.problems = problems,
        Ok(generated) => match Bundle::from_generated(generated) {
            Ok(b) => report.bundle = Some(b),
            Err(e) => report.failure = Some(e),
        },
    }
    report
}

/// The pack's `.cedar` file, when there is one.
fn read_custom(pack_file: &str) -> Result<Option<CedarFile>, Box<Problem>> {
    let path = codegen::custom_policy_path(Path::new(pack_file));
    let file = path.display().to_string();
    let io = |reason: String| {
        Box::new(Problem {
            file: file.clone(),
            source: String::new(),
            diagnostic: PackDiagnostic::Io {
                path: file.clone(),
                reason,
            },
        })
    };
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e.to_string().to_lowercase())),
    };
    if meta.is_dir() {
        return Err(io("is a folder".into()));
    }
    if meta.len() > MAX_CEDAR_LEN {
        return Err(io(format!(
            "{} bytes is larger than the {MAX_CEDAR_LEN} bytes a policy file may have",
            meta.len()
        )));
    }
    let bytes = std::fs::read(&path).map_err(|e| io(e.to_string().to_lowercase()))?;
    let text = String::from_utf8(bytes).map_err(|_| io("not valid utf-8".into()))?;
    Ok(Some(CedarFile { file, text }))
}
