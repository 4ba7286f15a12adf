//! `ipc mutate PACK... [--format human|json] [--lint]`: mutation testing of
//! each pack's policies against its scenarios (see `crate::mutate`). Exit 1
//! when a mutant survives without a proof of equivalence (or is unproven),
//! when a pack does not build or its scenarios do not pass.

use super::Format;
#[cfg(feature = "solver")]
use crate::compile::build;
#[cfg(feature = "solver")]
use crate::mutate::equiv::Prover;
#[cfg(feature = "solver")]
use crate::mutate::{PackReport, PackScenarios, Solver, mutate_pack, report};
#[cfg(feature = "solver")]
use std::io::IsTerminal;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MutateArgs {
    /// Pack folders (holding `pack.ipc` and `scenarios/`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Also run the solver-backed lint: a forbid that can error, a rule that
    /// never matches, an approval rule a forbid makes unreachable, a permit
    /// that always allows.
    #[arg(long)]
    pub lint: bool,
}

#[cfg(not(feature = "solver"))]
pub fn run(_: &MutateArgs, _: &mut dyn Write) -> u8 {
    super::feature_off("ipc mutate", "solver")
}

#[cfg(feature = "solver")]
pub fn run(args: &MutateArgs, out: &mut dyn Write) -> u8 {
    let tty = std::io::stderr().is_terminal();
    let mut reports: Vec<PackReport> = vec![];
    let mut errors: Vec<String> = vec![];
    for path in &args.paths {
        match one(path, args.lint, tty) {
            Ok(r) => reports.push(r),
            Err(e) => errors.push(e),
        }
    }
    let ok = errors.is_empty() && reports.iter().all(PackReport::ok);
    let written = match args.format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&report::json(&reports, &errors)).unwrap_or_default()
        ),
        Format::Human => {
            let mut text = String::new();
            for r in &reports {
                text.push_str(&report::human(r));
                text.push('\n');
            }
            for e in &errors {
                text.push_str(&format!("error: {e}\n"));
            }
            let total: usize = reports.iter().map(|r| r.mutants.len()).sum();
            let good: usize = reports
                .iter()
                .flat_map(|r| &r.mutants)
                .filter(|m| m.status.ok())
                .count();
            text.push_str(&format!(
                "{}: {good}/{total} mutants killed or proved equivalent over {} pack{}{}\n",
                if ok { "ok" } else { "FAILED" },
                reports.len(),
                if reports.len() == 1 { "" } else { "s" },
                if errors.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", {} error{}",
                        errors.len(),
                        if errors.len() == 1 { "" } else { "s" }
                    )
                }
            ));
            out.write_all(text.as_bytes())
        }
    };
    if written.is_err() {
        return 1;
    }
    u8::from(!ok)
}

#[cfg(feature = "solver")]
fn one(path: &std::path::Path, lint: bool, tty: bool) -> Result<PackReport, String> {
    let shown = path.display().to_string();
    let built = build(std::slice::from_ref(&path.to_path_buf()));
    let Some(bundle) = built.bundle else {
        return Err(format!(
            "`{shown}` does not build ({} errors): run `ipc check {shown}`",
            built.errors().max(1)
        ));
    };
    let pack = bundle
        .packs
        .first()
        .map(|p| p.name.clone())
        .ok_or_else(|| format!("`{shown}` holds no pack"))?;
    let mut runner = PackScenarios::load(&bundle, &pack, path)
        .map_err(|e| format!("the scenarios of `{shown}` cannot run: {e}"))?;
    let cedar = bundle.cedar().map_err(|e| e.to_string())?;
    let mut prover;
    let mut solver = match Prover::new(cedar.schema.clone()) {
        Ok(p) => {
            prover = p;
            Solver::Available(&mut prover)
        }
        Err(e) => Solver::Unavailable(e.to_string()),
    };
    let mut progress = |done: usize, total: usize| {
        if tty {
            eprint!("\rmutate {pack}: {done}/{total}");
            if done == total {
                eprint!("\r\x1b[K");
            }
        }
    };
    // the checked pack: its guarantees judge the survivors
    let checked = built
        .checked
        .iter()
        .filter_map(|c| c.pack.as_ref())
        .find(|p| p.name == pack);
    mutate_pack(
        &bundle,
        &pack,
        checked,
        &mut runner,
        &mut solver,
        lint,
        &mut progress,
    )
    .map_err(|e| e.to_string())
}
