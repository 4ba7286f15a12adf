//! The world pass: the world file (read without the inline pack), then the
//! inline pack's registries, one file each as the TOML names them.

use super::ctx::{Diags, Dir, Span, sp};
use super::diag::ConfigError;
use super::file::ConfigFile;
use super::lower::sorted;
use super::packs::Loaded;
use crate::gateway::world::World;
use crate::ir::{RegistryShape, Type};

/// The world file (without the inline pack, whose registries the TOML
/// names one file each), then the inline pack's registries.
pub(super) fn world(
    cfg: &ConfigFile,
    bundle: &Loaded,
    inline: Option<&str>,
    dir: &Dir,
    d: &mut Diags,
) -> Option<World> {
    let table = &bundle.0.table;
    let mut world = match &cfg.world {
        Some(w) => {
            let path = dir.existing(d, "world", w, None)?;
            let mut without = table.clone();
            without.packs.retain(|p| Some(p.name.as_str()) != inline);
            match World::load(&path, &without) {
                Ok(world) => world,
                Err(e) => {
                    let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
                    d.err(ConfigError::Load {
                        what: "world",
                        message: e.to_string(),
                        span: Some(sp(w.span())),
                        help,
                    });
                    return None;
                }
            }
        }
        None => World::empty(),
    };
    // `enforce = false`: the session's every pack in shadow
    if cfg.enforce.as_ref().is_some_and(|e| !*e.get_ref()) {
        world.shadow.packs = table.packs.iter().map(|p| p.name.clone()).collect();
    }
    if let (Some(name), Some(p)) = (inline, &cfg.pack) {
        let tp = table.pack(name)?;
        for (rname, r) in sorted(&p.get_ref().registries) {
            let Some(reg) = tp.registries.iter().find(|x| &x.name == rname.get_ref()) else {
                continue;
            };
            let file = &r.get_ref().file;
            let Some(path) = dir.existing(d, "registry file", file, Some(
                "a missing registry is never read as an empty one; if it is meant to be empty, write `{}` to the file".into(),
            )) else {
                continue;
            };
            if let Err(e) = world.load_registry_file(name, reg, &path) {
                d.load_err("registry", e.to_string(), file.span());
            } else if reg.shape
                == (RegistryShape::Set {
                    element: Type::Path,
                })
            {
                paths_from_config(&mut world, name, &reg.name, file.span(), dir, d);
            }
        }
    }
    Some(world)
}

/// A `set<Path>` registry of the config: each relative folder is the
/// config's (`workspace` is `<config folder>/workspace`), as every
/// relative path in a config is, so that an example's trusted folder
/// lives beside it wherever it is checked out; a folder that exists is
/// named by its real path, as a stdio server's paths are decided.
fn paths_from_config(
    world: &mut World,
    pack: &str,
    registry: &str,
    span: Span,
    dir: &Dir,
    d: &mut Diags,
) {
    let abs = dir.absolute();
    let Some(owners) = world
        .registries
        .get_mut(pack)
        .and_then(|m| m.get_mut(registry))
    else {
        return;
    };
    for records in owners.values_mut() {
        for (_, value) in records.values.iter_mut() {
            let lexical = match value.starts_with('/') {
                true => crate::gateway::normalize::path(value),
                false => crate::gateway::normalize::path(&format!("{abs}/{value}")),
            };
            // an existing folder as the server's paths are resolved
            // (`mapping::resolve_links`): its real path
            let real = lexical.map(|abs| {
                std::fs::canonicalize(&abs)
                    .ok()
                    .and_then(|p| p.to_str().map(str::to_string))
                    .unwrap_or(abs)
            });
            match real {
                Ok(abs) => {
                    if let Some(n) = records.names.remove(value.as_str()) {
                        records.names.insert(abs.clone(), n);
                    }
                    *value = abs;
                }
                Err(e) => {
                    d.load_err("registry", e, span.clone());
                    return;
                }
            }
        }
    }
}
