//! `ipc check PATH...`: diagnostics for each pack, exit 1 on any error (or
//! any warning with `--deny-warnings`).

use super::{CheckArgs, Format};
use crate::check::{Checked, check_path};
use crate::diagnostics::{render_human_report, to_json};
use serde_json::json;
use std::io::Write;

pub fn run(args: &CheckArgs, out: &mut dyn Write) -> u8 {
    let results: Vec<Checked> = args.paths.iter().map(|p| check_path(p)).collect();
    let errors: usize = results
        .iter()
        .flat_map(|r| &r.diagnostics)
        .filter(|d| d.is_error())
        .count();
    let warnings: usize = results
        .iter()
        .flat_map(|r| &r.diagnostics)
        .filter(|d| !d.is_error())
        .count();
    let failed = errors > 0 || (args.deny_warnings && warnings > 0);
    let written = match args.format {
        Format::Human => human(&results, errors, warnings, out),
        Format::Json => {
            let doc = json!({
                "ok": !failed,
                "errors": errors,
                "warnings": warnings,
                "packs": results.iter().map(|r| json!({
                    "file": r.file,
                    "pack": r.pack.as_ref().map(|p| &p.name),
                    "actions": r.pack.as_ref().map(|p| p.actions.len()),
                    // type-checked here; `ipc build` proves them
                    "guarantees": r.pack.as_ref().map(|p| p.guarantees.iter().map(|g| json!({
                        "guarantee": g.reason,
                        "line": g.line,
                        "claim": match g.level {
                            None => "never allow".to_string(),
                            Some(n) => format!("need level {n}"),
                        },
                        "scope": g.scope,
                        "covers": g.covers.iter().map(|c| &c.action).collect::<Vec<_>>(),
                    })).collect::<Vec<_>>()),
                    "diagnostics": r.diagnostics.iter()
                        .map(|d| to_json(d, &r.file, &r.source))
                        .collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            });
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )
        }
    };
    if written.is_err() {
        return 1;
    }
    u8::from(failed)
}

fn human(
    results: &[Checked],
    errors: usize,
    warnings: usize,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let color = super::use_color();
    for r in results {
        for d in &r.diagnostics {
            write!(out, "{}", render_human_report(d, &r.file, &r.source, color))?;
            writeln!(out)?;
        }
    }
    for r in results {
        match &r.pack {
            Some(p) => writeln!(
                out,
                "ok    {} (pack `{}`, {} actions)",
                r.file,
                p.name,
                p.actions.len()
            )?,
            None => writeln!(out, "fail  {}", r.file)?,
        }
    }
    writeln!(
        out,
        "{} checked: {errors} error{}, {warnings} warning{}",
        plural(results.len(), "pack"),
        if errors == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" }
    )
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}
