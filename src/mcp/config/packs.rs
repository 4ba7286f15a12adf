//! The packs pass: the bundle, built now from `packs` (with the inline
//! pack lowered from the TOML and checked, `lower.rs`) through
//! `crate::compile::build_with`, the inline pack's guarantees proven; or a
//! bundle file, authenticated once the world is read ([`authenticate`]).

use super::ctx::{Diags, Dir, sp};
use super::diag::{ConfigError, Diag, Reported};
use super::file::{ConfigFile, S, ToolFile};
use super::lower::Lowering;
use crate::bundle::Bundle;
use crate::check::Checked as CheckedPack;
use crate::diagnostics::PackDiagnostic;
use crate::gateway::world::World;
use std::path::PathBuf;

/// A bundle and the file it was read from (`None`: built now).
pub(super) type Loaded = (Bundle, Option<PathBuf>);

/// The bundle: packs built now (with the inline pack checked from the
/// TOML), or a bundle file. Also the inline pack's name.
pub(super) fn bundle(
    cfg: &ConfigFile,
    inline: &[&S<ToolFile>],
    dir: &Dir,
    d: &mut Diags,
) -> Option<(Loaded, Option<String>)> {
    match (cfg.packs.as_ref(), &cfg.bundle) {
        (Some(_), Some(b)) => {
            d.err(ConfigError::Packs {
                message: "`packs` and `bundle` are both given".into(),
                span: sp(b.span()),
            });
            None
        }
        (None, Some(b)) => {
            if let Some(t) = inline.first() {
                d.err(ConfigError::Tool {
                    tool: t.get_ref().tool.get_ref().clone(),
                    message: "an inline tool needs packs built at start-up; a signed bundle cannot be extended".into(),
                    span: sp(t.span()),
                    help: Some("declare the action in a pack, or give `packs = [...]` instead of `bundle`".into()),
                });
                return None;
            }
            let path = dir.existing(d, "bundle", b, None)?;
            match Bundle::load(&path, None) {
                Ok(bundle) => Some(((bundle, Some(path)), None)),
                Err(e) => {
                    d.load_err("bundle", e.to_string(), b.span());
                    None
                }
            }
        }
        (packs, None) => {
            let packs = packs.map(|p| p.get_ref().as_slice()).unwrap_or_default();
            built(cfg, packs, inline, dir, d)
        }
    }
}

/// The pack folders (or files) `packs` names, each reported when missing.
fn pack_paths(packs: &[S<String>], dir: &Dir, d: &mut Diags) -> (Vec<PathBuf>, bool) {
    let mut paths = vec![];
    let mut missing = false;
    for p in packs {
        let path = dir.rel(p.get_ref());
        let file = if path.is_dir() {
            path.join(crate::check::PACK_FILE)
        } else {
            path.clone()
        };
        if !file.is_file() {
            missing = true;
            d.err(ConfigError::MissingFile {
                what: if path.is_dir() { "pack file" } else { "pack folder" },
                path: file.display().to_string(),
                span: sp(p.span()),
                help: Some(format!(
                    "a pack is a folder holding `{}` (or a `.ipc` file); the path is relative to the config's folder",
                    crate::check::PACK_FILE
                )),
            });
        }
        paths.push(path);
    }
    (paths, missing)
}

/// `[pack]` and the inline tools lowered to one pack and checked (none
/// when the config has neither), and that pack's name.
fn inline_pack(
    cfg: &ConfigFile,
    inline: &[&S<ToolFile>],
    d: &mut Diags,
) -> (Vec<CheckedPack>, Option<String>) {
    if cfg.pack.is_none() && inline.is_empty() {
        return (vec![], None);
    }
    let source = d.source.clone();
    let mut low = Lowering::new(&source);
    let ast = low.file(cfg.pack.as_ref(), inline);
    let name = Some(ast.header.name.text.clone());
    for e in std::mem::take(&mut low.config) {
        d.err(e);
    }
    let syntax = std::mem::take(&mut low.syntax);
    let lowered_ok = syntax.is_empty();
    for s in syntax {
        d.pack(s);
    }
    let mut extra = vec![];
    if lowered_ok {
        extra.push(crate::check::check_ast(&d.file, &d.source, &ast));
    }
    (extra, name)
}

/// The packs built now, with the inline pack.
fn built(
    cfg: &ConfigFile,
    packs: &[S<String>],
    inline: &[&S<ToolFile>],
    dir: &Dir,
    d: &mut Diags,
) -> Option<(Loaded, Option<String>)> {
    let (paths, missing) = pack_paths(packs, dir, d);
    let (extra, inline_name) = inline_pack(cfg, inline, d);
    if missing || d.has_errors() {
        // still check what can be checked
        for c in &extra {
            for p in c.diagnostics.clone() {
                d.pack(p);
            }
        }
        return None;
    }
    if paths.is_empty() && extra.is_empty() {
        d.err(ConfigError::Packs {
            message: "no packs, no bundle and no inline tool".into(),
            span: sp(0..0),
        });
        return None;
    }
    let from_files = paths.len();
    let report = crate::compile::build_with(&paths, extra);
    for c in &report.checked {
        for p in &c.diagnostics {
            d.push(Reported {
                file: c.file.clone(),
                source: c.source.clone(),
                diag: Diag::Pack(p.clone()),
            });
        }
    }
    for p in &report.problems {
        d.push(Reported {
            file: p.file.clone(),
            source: p.source.clone(),
            diag: Diag::Pack(p.diagnostic.clone()),
        });
    }
    if let Some(e) = &report.failure {
        d.err(ConfigError::Load {
            what: "bundle",
            message: e.to_string(),
            span: None,
            help: None,
        });
    }
    if let Some(b) = &report.bundle {
        let inline = report.checked.get(from_files..).unwrap_or_default();
        if !guarantees(b, inline, d) {
            return None;
        }
    }
    report.bundle.map(|b| ((b, None), inline_name))
}

/// The inline pack's guarantees, proven as `ipc build` proves a pack's
/// (the packs' own are `ipc build`'s); false when one is broken.
fn guarantees(b: &Bundle, inline: &[CheckedPack], d: &mut Diags) -> bool {
    let inputs = crate::guarantee::inputs(inline);
    if !crate::guarantee::any(&inputs) {
        return true;
    }
    let proofs = crate::guarantee::prove(b, &inputs);
    let problems = crate::guarantee::problems(&proofs, &inputs);
    let broken = !problems.is_empty();
    for (proof, mut p) in problems {
        // no scenario is printed here: the help has it
        if let (PackDiagnostic::GuaranteeViolated { help, action, .. }, Some(s)) =
            (&mut p.diagnostic, &proof.scenario)
        {
            *help = Some(format!(
                "add the missing rule to `{action}`; the counterexample, as a scenario: {s}"
            ));
        }
        d.push(Reported {
            file: p.file,
            source: p.source,
            diag: Diag::Pack(p.diagnostic),
        });
    }
    !broken
}

/// A bundle file authenticated: signed by `bundle_key` or by a key of the
/// world's `bundle_keys`.
pub(super) fn authenticate(
    cfg: &ConfigFile,
    bundle: &Loaded,
    world: &World,
    dir: &Dir,
    d: &mut Diags,
) -> Option<()> {
    let (Some(b), Some(p)) = (&cfg.bundle, &bundle.1) else {
        return Some(());
    };
    let key = match &cfg.bundle_key {
        Some(k) => {
            let path = dir.existing(d, "bundle key", k, None)?;
            match crate::keys::load_public(&path) {
                Ok(k) => Some(k),
                Err(e) => {
                    d.load_err("bundle key", e.to_string(), k.span());
                    return None;
                }
            }
        }
        None => None,
    };
    if let Err(e) = bundle.0.authenticate(
        &p.display().to_string(),
        key.as_ref(),
        &world.bundle_keys,
        false,
    ) {
        d.load_err("bundle", e.to_string(), b.span());
        return None;
    }
    Some(())
}
