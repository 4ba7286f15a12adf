//! `ipc test PACK... [--format human|json] [--filter SUBSTRING]`: build the
//! packs into one bundle in memory and run every scenario file of each pack
//! (`<pack>/scenarios/*.json`, see docs/scenarios.md). Prints a pass / fail
//! table and a summary; exit 1 on any failure, any test that could not
//! run, any invalid scenario file, a pack that does not build, or when no
//! test ran at all.

use super::Format;
use crate::compile::build;
use crate::gateway::Gateway;
use crate::gateway::world::World;
use crate::scenarios::{PackResult, Status, run_pack};
use crate::store::memory::MemoryStore;
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct TestArgs {
    /// Pack folders (holding `pack.ipc` and `scenarios/`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Run only the tests whose name contains this text.
    #[arg(long, value_name = "SUBSTRING")]
    pub filter: Option<String>,
}

pub fn run(args: &TestArgs, out: &mut dyn Write) -> u8 {
    let color = super::use_color();
    let report = build(&args.paths);
    let Some(bundle) = report.bundle.clone() else {
        let mut text = report.render_human(true, color);
        if let Some(e) = &report.failure {
            text.push_str(&format!("{e}\n"));
        }
        let n = report.errors();
        let _ = match args.format {
            Format::Human => writeln!(
                out,
                "{text}no test ran: the packs do not build ({n} error{})",
                if n == 1 { "" } else { "s" }
            ),
            Format::Json => writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&json!({
                    "ok": false, "error": format!("the packs do not build ({n} errors)"),
                    "packs": [],
                }))
                .unwrap_or_default()
            ),
        };
        return 1;
    };
    let base = match Gateway::new(&bundle, World::empty(), Arc::new(MemoryStore::new())) {
        Ok(g) => g,
        Err(e) => {
            let _ = writeln!(out, "no test ran: {e}");
            return 1;
        }
    };
    let factory = |w: World, s| Ok(base.fork(w, s));
    let mut packs: Vec<PackResult> = vec![];
    for (path, checked) in args.paths.iter().zip(&report.checked) {
        let Some(pack) = &checked.pack else { continue };
        packs.push(run_pack(
            path,
            &pack.name,
            &bundle.table,
            &factory,
            args.filter.as_deref(),
        ));
    }
    let tests: usize = packs.iter().map(PackResult::tests).sum();
    let passed: usize = packs.iter().map(|p| p.count(Status::Pass)).sum();
    let failed: usize = packs.iter().map(|p| p.count(Status::Fail)).sum();
    let errors: usize = packs.iter().map(|p| p.count(Status::Error)).sum();
    let invalid: usize = packs.iter().map(PackResult::invalid_files).sum();
    let ok = tests > 0 && packs.iter().all(PackResult::ok);
    let res = match args.format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "ok": ok,
                "packs": packs,
                "summary": {"tests": tests, "passed": passed, "failed": failed,
                            "errors": errors, "invalid_files": invalid},
            }))
            .unwrap_or_default()
        ),
        Format::Human => write!(
            out,
            "{}",
            human(&packs, tests, passed, failed, errors, invalid, ok)
        ),
    };
    if res.is_err() {
        return 1;
    }
    u8::from(!ok)
}

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

fn file_name(f: &str) -> String {
    std::path::Path::new(f)
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| f.to_string())
}

fn human(
    packs: &[PackResult],
    tests: usize,
    passed: usize,
    failed: usize,
    errors: usize,
    invalid: usize,
    ok: bool,
) -> String {
    let mut rows: Vec<[String; 6]> = vec![];
    for p in packs {
        for s in &p.suites {
            for t in &s.tests {
                rows.push([
                    p.pack.clone(),
                    file_name(&s.file),
                    cut(&t.name, 64),
                    cut(&t.expected, 44),
                    cut(&t.got, 44),
                    match t.status {
                        Status::Pass => "PASS",
                        Status::Fail => "FAIL",
                        Status::Error => "ERROR",
                    }
                    .to_string(),
                ]);
            }
        }
    }
    let header = ["pack", "file", "test", "expected", "got", "result"].map(str::to_string);
    let mut w = [0usize; 6];
    for r in std::iter::once(&header).chain(rows.iter()) {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |r: &[String; 6]| {
        let mut s = String::new();
        for (i, c) in r.iter().enumerate() {
            if i == 5 {
                s.push_str(c);
            } else {
                s.push_str(c);
                s.push_str(&" ".repeat(w[i] - c.chars().count() + 2));
            }
        }
        s.push('\n');
        s
    };
    let mut out = String::new();
    if !rows.is_empty() {
        out.push_str(&line(&header));
        for r in &rows {
            out.push_str(&line(r));
        }
    }
    // the details of everything that did not pass
    let mut details = String::new();
    for p in packs {
        if let Some(e) = &p.error {
            details.push_str(&format!("error  {}: {e}\n", p.pack));
        }
        if p.suites.is_empty() && p.error.is_none() {
            details.push_str(&format!(
                "note   {}: no scenario files in {}/scenarios\n",
                p.pack, p.path
            ));
        }
        for s in &p.suites {
            if let Some(e) = &s.error {
                details.push_str(&format!("invalid  {e}\n"));
            }
            for t in &s.tests {
                match t.status {
                    Status::Pass => {}
                    Status::Fail => {
                        details.push_str(&format!(
                            "FAIL   {} / {} / {}\n",
                            p.pack,
                            file_name(&s.file),
                            t.name
                        ));
                        if let Some(f) = &t.failure {
                            for pr in &f.problems {
                                details.push_str(&format!("       step {}: {pr}\n", f.step));
                            }
                        }
                    }
                    Status::Error => {
                        details.push_str(&format!(
                            "ERROR  {} / {} / {}: {}\n",
                            p.pack,
                            file_name(&s.file),
                            t.name,
                            t.error.as_deref().unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }
    if !details.is_empty() {
        out.push('\n');
        out.push_str(&details);
    }
    let per_pack: Vec<String> = packs
        .iter()
        .map(|p| format!("{} {}/{}", p.pack, p.count(Status::Pass), p.tests()))
        .collect();
    out.push_str(&format!(
        "\n{}  {tests} test{}: {passed} passed, {failed} failed, {errors} error{}, {invalid} invalid file{} ({})\n",
        if ok { "ok" } else { "FAILED" },
        if tests == 1 { "" } else { "s" },
        if errors == 1 { "" } else { "s" },
        if invalid == 1 { "" } else { "s" },
        per_pack.join(", ")
    ));
    if tests == 0 {
        out.push_str("no test ran\n");
    }
    out
}
