//! `ipc build PACK... -o FILE [--sign KEYFILE]`: check the packs, generate
//! and validate Cedar, write one bundle. Exit 1 and no file on any error.

use super::Format;
use super::bundle::{error_json, render_error};
use crate::bundle::{Bundle, BundleError};
use crate::compile::{BuildReport, build};
use crate::guarantee;
use crate::keys::SecretKey;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BuildArgs {
    /// Pack folders (holding `pack.ipc`) or pack files.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Where to write the bundle.
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
    /// Sign the bundle with this secret key file (from `ipc keygen`).
    #[arg(long, value_name = "KEYFILE")]
    pub sign: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Also run the solver-backed lint (cvc5) on the generated policies: a
    /// forbid that can error, a rule that never matches, an approval rule a
    /// forbid makes unreachable, a permit that always allows. Findings are
    /// warnings; with `--deny-warnings` they fail the build.
    #[arg(long)]
    pub lint: bool,
    /// Fail on lint findings (with `--lint`).
    #[arg(long, requires = "lint")]
    pub deny_warnings: bool,
}

pub fn run(args: &BuildArgs, out: &mut dyn Write) -> u8 {
    let color = super::use_color();
    let key = match signing_key(args, out, color) {
        Ok(key) => key,
        Err(code) => return code,
    };
    let report = build(&args.paths);
    let packs = guarantee::inputs(&report.checked);
    // every guarantee proven before anything is written
    let proofs = match &report.bundle {
        Some(b) if guarantee::any(&packs) => guarantee::prove(b, &packs),
        _ => vec![],
    };
    let broken: Vec<(&guarantee::Proof, crate::codegen::Problem)> =
        guarantee::problems(&proofs, &packs);
    let (written, failure) = write_bundle(args, &report, &broken, key.as_ref());
    #[cfg(not(feature = "solver"))]
    if args.lint {
        return super::feature_off("ipc build --lint", "solver");
    }
    let lint = match (&written, args.lint) {
        (Some(b), true) => Some(solver_lint(b)),
        _ => None,
    };
    let lint_findings = match &lint {
        Some(Ok(f)) => f.len(),
        _ => 0,
    };
    let errors =
        report.errors() + broken.len() + usize::from(failure.is_some() && report.failure.is_none());
    let built = Built {
        args,
        report: &report,
        proofs: &proofs,
        broken: &broken,
        failure,
        written,
        lint,
        errors,
        warnings: report.warnings(),
    };
    let result = match args.format {
        Format::Human => write!(out, "{}", built.human(color)),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&built.json()).unwrap_or_default()
        ),
    };
    let lint_failed =
        args.deny_warnings && (lint_findings > 0 || matches!(built.lint, Some(Err(_))));
    if result.is_err() || built.written.is_none() || lint_failed {
        1
    } else {
        0
    }
}

/// The key of `--sign`, if given; a key that does not load is reported
/// and is the exit code 1.
fn signing_key(
    args: &BuildArgs,
    out: &mut dyn Write,
    color: bool,
) -> Result<Option<SecretKey>, u8> {
    let Some(p) = &args.sign else {
        return Ok(None);
    };
    match SecretKey::load(p) {
        Ok(k) => Ok(Some(k)),
        Err(e) => {
            let _ = match args.format {
                Format::Human => write!(out, "{}", render_error(&e, color)),
                Format::Json => writeln!(
                    out,
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "ok": false, "output": null, "errors": 1, "warnings": 0,
                        "diagnostics": [error_json(&e)],
                    }))
                    .unwrap_or_default()
                ),
            };
            Err(1)
        }
    }
}

/// The bundle, signed with `key`, written to `--output` when the build
/// has one and no guarantee is broken; else the error that stopped it.
fn write_bundle(
    args: &BuildArgs,
    report: &BuildReport,
    broken: &[(&guarantee::Proof, crate::codegen::Problem)],
    key: Option<&SecretKey>,
) -> (Option<Bundle>, Option<BundleError>) {
    let mut failure: Option<BundleError> = report.failure.clone();
    let mut written: Option<Bundle> = None;
    if let Some(mut b) = report.bundle.clone().filter(|_| broken.is_empty()) {
        if let Some(k) = key {
            b.sign(k);
        }
        match b.write(&args.output) {
            Ok(()) => written = Some(b),
            Err(e) => failure = Some(e),
        }
    }
    (written, failure)
}

/// What a build found and did, to report.
struct Built<'b> {
    args: &'b BuildArgs,
    report: &'b BuildReport,
    proofs: &'b [guarantee::Proof],
    broken: &'b [(&'b guarantee::Proof, crate::codegen::Problem)],
    failure: Option<BundleError>,
    written: Option<Bundle>,
    lint: Option<Result<Vec<LintFinding>, String>>,
    errors: usize,
    warnings: usize,
}

impl Built<'_> {
    fn human(&self, color: bool) -> String {
        let mut text = self.report.render_human(false, color);
        text.push_str(&guarantee::render_human(self.proofs, self.broken, color));
        if let Some(e) = &self.failure {
            text.push_str(&render_error(e, color));
            text.push('\n');
        }
        match &self.lint {
            Some(Ok(findings)) => {
                for f in findings {
                    text.push_str(&format!(
                        "warning[ipc::lint::{}]: {} ({}, policy `{}` at {})\n",
                        f.code, f.message, f.action, f.policy_id, f.source
                    ));
                }
                text.push_str(&format!(
                    "lint: {} finding{}\n",
                    findings.len(),
                    if findings.len() == 1 { "" } else { "s" }
                ));
            }
            Some(Err(e)) => text.push_str(&format!("lint not run: {e}\n")),
            None => {}
        }
        text.push_str(&self.human_outcome());
        text
    }

    /// The last lines: what was written, or why nothing was.
    fn human_outcome(&self) -> String {
        let (errors, warnings) = (self.errors, self.warnings);
        match &self.written {
            Some(b) => {
                let signed = match &b.signature {
                    Some(s) => format!(", signed with key {}", s.key_id),
                    None => String::new(),
                };
                format!(
                    "wrote {}: {} pack{}, {} action{}, {} polic{}{signed}\nhash  {}\n",
                    self.args.output.display(),
                    b.packs.len(),
                    if b.packs.len() == 1 { "" } else { "s" },
                    b.table.actions.len(),
                    if b.table.actions.len() == 1 { "" } else { "s" },
                    b.policies.len(),
                    if b.policies.len() == 1 { "y" } else { "ies" },
                    b.hash
                )
            }
            None => format!(
                "no bundle written: {errors} error{}, {warnings} warning{}\n",
                if errors == 1 { "" } else { "s" },
                if warnings == 1 { "" } else { "s" }
            ),
        }
    }

    fn json(&self) -> serde_json::Value {
        let mut diags: Vec<serde_json::Value> = vec![];
        for c in &self.report.checked {
            for d in &c.diagnostics {
                diags.push(json!(crate::diagnostics::to_json(d, &c.file, &c.source)));
            }
        }
        for p in &self.report.problems {
            diags.push(json!(p.to_json()));
        }
        for (_, p) in self.broken {
            diags.push(json!(p.to_json()));
        }
        if let Some(e) = &self.failure {
            diags.push(error_json(e));
        }
        let written = &self.written;
        json!({
            "ok": written.is_some(),
            "output": written.as_ref().map(|_| self.args.output.display().to_string()),
            "hash": written.as_ref().map(|b| b.hash.clone()),
            "signed_by": written.as_ref().and_then(|b| b.signature.as_ref().map(|s| s.key_id.clone())),
            "packs": written.as_ref().map(|b| b.packs.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
            "actions": written.as_ref().map(|b| b.table.actions.len()),
            "policies": written.as_ref().map(|b| b.policies.len()),
            "errors": self.errors,
            "warnings": self.warnings,
            "diagnostics": diags,
            "guarantees": self.proofs,
            "lint": match &self.lint {
                Some(Ok(f)) => json!(f),
                Some(Err(e)) => json!({"not_run": e}),
                None => serde_json::Value::Null,
            },
        })
    }
}

/// The solver-backed lint over every action of a built bundle.
#[cfg(not(feature = "solver"))]
fn solver_lint(_: &Bundle) -> Result<Vec<LintFinding>, String> {
    Err("the solver is left out of this build".into())
}

/// A finding of the solver-backed lint.
#[cfg(feature = "solver")]
type LintFinding = crate::mutate::equiv::LintFinding;

/// What the solver-backed lint would find (never made without the solver:
/// `--lint` is refused first).
#[cfg(not(feature = "solver"))]
#[derive(serde::Serialize)]
#[allow(dead_code)]
struct LintFinding {
    code: String,
    message: String,
    action: String,
    policy_id: String,
    source: String,
}

/// The solver-backed lint over every action of a built bundle.
#[cfg(feature = "solver")]
fn solver_lint(b: &Bundle) -> Result<Vec<LintFinding>, String> {
    let cedar = b.cedar().map_err(|e| e.to_string())?;
    let mut prover =
        crate::mutate::equiv::Prover::new(cedar.schema.clone()).map_err(|e| e.to_string())?;
    let mut out = vec![];
    for a in &b.table.actions {
        if let Some(set) = cedar.by_action.get(&a.action.name) {
            out.extend(prover.lint(a, set)?);
        }
    }
    Ok(out)
}
