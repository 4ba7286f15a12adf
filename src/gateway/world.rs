//! The world: everything trusted the gateway decides from, besides the
//! bundle. Read from a TOML file:
//!
//! ```toml
//! clock = "2026-11-29T18:40:00Z"      # optional: a fixed time (scenarios)
//! mandate_keys = ["keys/issuer.pub"]  # verifying keys for mandate tokens
//! bundle_keys = ["keys/bundle.pub"]   # a bundle must be signed by one of them
//! store = "state.db"                  # optional: SQLite file or `postgres://` URL (default: memory)
//!
//! [approvers]                         # who may approve, and their keys
//! emma = "keys/emma.pub"              # approves only as a mandate's user
//! [approvers.cfo]                     # also a second pair of eyes:
//! key = "keys/cfo.pub"
//! owners = ["acme"]                   #   for these tenants (owners)
//! roles = ["treasury"]                #   holding these roles
//!
//! [owners.emma]                       # keys that sign an owner's own record
//! keys = ["keys/emma.pub"]            #   changes (`POST /v1/registry`)
//!
//! [registries]                        # per pack: a folder of <registry>.json
//! bank = "packs/bank/registries"
//!
//! [pg_registries.ap]                  # per pack: registries kept in tables of
//! vendors = "erp.ipc_vendors"         # the PostgreSQL store's database
//!
//! approval_page = "https://gw.example.com/approve"
//! [[notify]]                          # webhooks told of each new pending
//! url = "https://hooks.example.com/ipc"  # operation (`notify/config.rs`)
//! secret_file = "notify.secret"
//! ```
//!
//! A registry named under `[pg_registries.PACK]` is read from that table
//! (`name` or `schema.name`) inside each decision's transaction, instead
//! of from its JSON file: a set registry's table has the columns `owner`,
//! `value` and `id` (may be NULL), a keyed registry's `owner`, `key` and
//! `record` (a JSON object with the declared fields, as in the file). A
//! view over a company's own tables serves. Rows are checked as file
//! records are, at every read; such a world needs a PostgreSQL store.
//!
//! Paths are relative to the world file. A registry file maps an owner (a
//! tenant) to its records; a global registry uses the owner `"*"`. A set
//! registry's records are values, or `{"id": ..., "value": ..., "name"?: ...}`
//! objects a proposal may name with `{"ref": id}` (the `name`, else the
//! `id`, is what an approver is shown beside the value); a keyed registry's records are an
//! object from key to record.

use crate::base::json::{kind, parse_time_str};
use crate::bundle::format::Table;
use crate::ir::{self, RegistryShape, Type};
use crate::keys::PublicKey;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum WorldError {
    /// The world file cannot be read.
    #[error("cannot read world `{path}`: {reason}")]
    #[diagnostic(code(ipc::world::read))]
    Read { path: String, reason: String },
    /// The world file is not valid TOML of the world's shape (an unknown key,
    /// a wrong type, an unreadable key file it names, two approvers sharing one
    /// key).
    #[error("invalid world `{path}`: {reason}")]
    #[diagnostic(code(ipc::world::invalid))]
    Invalid { path: String, reason: String },
    /// A registry file does not fit its declaration in the pack: not JSON, a
    /// value of the wrong type or not in its canonical form, a record with
    /// undeclared or missing fields.
    #[error("invalid registry file `{path}`: {reason}")]
    #[diagnostic(code(ipc::world::registry))]
    Registry { path: String, reason: String },
    /// A registry the pack declares has no file in the world's folder for that
    /// pack: a missing sanctions list is never an empty one (write `{}` for a
    /// registry meant to be empty).
    #[error("registry file `{path}` is missing: pack `{pack}` declares the registry `{registry}`")]
    #[diagnostic(
        code(ipc::world::missing_registry),
        help(
            "a missing registry is never read as an empty one; if it is meant to be empty, write `{{}}` to the file"
        )
    )]
    MissingRegistry {
        path: String,
        pack: String,
        registry: String,
    },
    /// A pack of the bundle declares registries, and the world names no folder
    /// for them.
    #[error("the world names no registry folder for pack `{pack}`, which declares {registries}")]
    #[diagnostic(
        code(ipc::world::missing_registries),
        help("add `{pack} = \"path/to/registries\"` under `[registries]` in the world")
    )]
    MissingRegistries { pack: String, registries: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Key(#[from] crate::keys::KeyError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Notify(#[from] crate::gateway::notify::NotifyError),
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct WorldFile {
    clock: Option<String>,
    /// This gateway's name, the audience an owner's signed change names
    /// (`docs/decisions/owner-change-audience.md`).
    gateway_id: Option<String>,
    #[serde(default)]
    mandate_keys: Vec<PathBuf>,
    #[serde(default)]
    bundle_keys: Vec<PathBuf>,
    store: Option<toml::Value>,
    #[serde(default)]
    approvers: BTreeMap<String, ApproverEntry>,
    #[serde(default)]
    owners: BTreeMap<String, OwnerFile>,
    #[serde(default)]
    registries: BTreeMap<String, PathBuf>,
    #[serde(default)]
    pg_registries: BTreeMap<String, BTreeMap<String, String>>,
    /// `[enforce]`: tenants and packs in shadow mode (`false`).
    enforce: Option<super::shadow::EnforceFile>,
    /// The approval page's URL, which notifications link to.
    approval_page: Option<String>,
    #[serde(default)]
    notify: Vec<crate::gateway::notify::config::TargetFile>,
}

/// `[store]` as a table: the shards (`docs/sharding.md`).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ShardsFile {
    default: Option<PathBuf>,
    #[serde(default)]
    shards: BTreeMap<String, PathBuf>,
}

/// The world's stores when they are sharded (`[store.shards]`): each
/// tenant (a mandate's `owner`) to the store that holds it, and the store
/// of every tenant not named (`default`). A location is an SQLite file
/// (relative to the world) or a `postgres://` URL, as `store` is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardMap {
    pub tenants: BTreeMap<String, PathBuf>,
    pub default: Option<PathBuf>,
}

impl ShardMap {
    /// The store `tenant` is decided on: its own, else the default.
    pub fn route(&self, tenant: &str) -> Option<&PathBuf> {
        self.tenants.get(tenant).or(self.default.as_ref())
    }

    /// Every store the map names, once each, in order (the default last
    /// unless a tenant names it too).
    pub fn locations(&self) -> Vec<&PathBuf> {
        let mut out: Vec<&PathBuf> = vec![];
        let mut all: Vec<&PathBuf> = self.tenants.values().collect();
        all.sort();
        all.extend(self.default.as_ref());
        for l in all {
            if !out.contains(&l) {
                out.push(l);
            }
        }
        out
    }

    /// The tenants the map names for `location`.
    pub fn tenants_of(&self, location: &Path) -> Vec<&str> {
        self.tenants
            .iter()
            .filter(|(_, l)| l.as_path() == location)
            .map(|(t, _)| t.as_str())
            .collect()
    }
}

/// The world file's text.
fn read_text(path: &Path) -> Result<String, WorldError> {
    std::fs::read_to_string(path).map_err(|e| WorldError::Read {
        path: path.display().to_string(),
        reason: e.to_string().to_lowercase(),
    })
}

/// The shard map of the world file at `path` (its `[store]` alone, read
/// without a bundle: `ipc shards`); `None` when it names one store or
/// none.
pub fn shard_map_of(path: &Path) -> Result<Option<ShardMap>, WorldError> {
    let p = path.display().to_string();
    let text = read_text(path)?;
    let mut t: toml::Table = toml::from_str(&text).map_err(|e| WorldError::Invalid {
        path: p.clone(),
        reason: e.message().to_lowercase(),
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    match t.remove("store") {
        Some(v) => Ok(store_entry(v, base)
            .map_err(|reason| WorldError::Invalid { path: p, reason })?
            .1),
        None => Ok(None),
    }
}

/// `store = "..."` or `[store]` with shards: one store, or the map; a
/// location relative to the world's folder `base` unless it is a URL.
fn store_entry(v: toml::Value, base: &Path) -> Result<(Option<PathBuf>, Option<ShardMap>), String> {
    let at = |s: PathBuf| match s.to_str() {
        Some(u) if crate::store::postgres::is_url(u) => s,
        _ => base.join(s),
    };
    match v {
        toml::Value::String(s) => Ok((Some(at(PathBuf::from(s))), None)),
        toml::Value::Table(t) => {
            let f: ShardsFile = toml::Value::Table(t)
                .try_into()
                .map_err(|e: toml::de::Error| format!("`[store]`: {}", e.message()))?;
            if f.shards.is_empty() && f.default.is_none() {
                return Err(
                    "`[store]` names no store: give `[store.shards]` (tenant = store) or `default`"
                        .into(),
                );
            }
            if let Some(t) = f
                .shards
                .keys()
                .find(|t| t.trim().is_empty() || t.trim() != *t)
            {
                return Err(format!(
                    "`[store.shards]`: `{}` is no tenant name (empty, or spaces around it)",
                    crate::base::json::echo(t)
                ));
            }
            let tenants = f.shards.into_iter().map(|(t, l)| (t, at(l))).collect();
            Ok((
                None,
                Some(ShardMap {
                    tenants,
                    default: f.default.map(at),
                }),
            ))
        }
        other => Err(format!(
            "`store` is a {}: give a file or URL (`store = \"...\"`) or a `[store]` table of shards",
            other.type_str()
        )),
    }
}

/// An approver in the world file: a key file alone (approves only as a
/// mandate's user), or a key with the owners and roles it may approve for.
#[derive(Deserialize, Debug)]
#[serde(untagged)]
enum ApproverEntry {
    Key(PathBuf),
    Full(ApproverFile),
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct ApproverFile {
    key: PathBuf,
    #[serde(default)]
    owners: Vec<String>,
    #[serde(default)]
    roles: Vec<String>,
}

/// An owner (tenant) in the world file: the keys its own changes to its
/// records are signed with.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct OwnerFile {
    keys: Vec<PathBuf>,
}

/// A person who may approve: their verifying key, and the tenants (owners)
/// and roles for which they count as the second pair of eyes. Anyone with
/// a key approves as the user of their own mandates (step-up).
#[derive(Clone, Debug)]
pub struct Approver {
    pub key: PublicKey,
    pub owners: Vec<String>,
    pub roles: Vec<String>,
}

impl Approver {
    /// Only a key: approves as a mandate's user, never for anyone else.
    pub fn user(key: PublicKey) -> Self {
        Approver {
            key,
            owners: vec![],
            roles: vec![],
        }
    }
    /// May be the second pair of eyes for `owner`, with `role` if one is
    /// required.
    pub fn may_approve_for(&self, owner: &str, role: Option<&str>) -> bool {
        self.owners.iter().any(|o| o == owner)
            && role.is_none_or(|r| self.roles.iter().any(|x| x == r))
    }
}

/// One registry's records for one owner.
#[derive(Clone, Debug, Default)]
pub struct Records {
    /// Set registries: `(ref id, value)`.
    pub values: Vec<(Option<String>, String)>,
    /// Keyed registries: key to record.
    pub keyed: BTreeMap<String, Map<String, Value>>,
    /// Set registries: what the owner calls an entry (`"name"` of its
    /// record), by value; shown to approvers beside the value.
    pub names: HashMap<String, String>,
}

#[derive(Clone, Debug)]
pub struct World {
    pub clock: Option<i64>,
    /// This gateway's name (`gateway_id`): an owner's signed change is
    /// applied only by the gateway it names. `None`: no signed change is.
    pub gateway_id: Option<String>,
    /// By key id.
    pub mandate_keys: HashMap<String, PublicKey>,
    /// Keys a bundle may be signed with, by key id.
    pub bundle_keys: HashMap<String, PublicKey>,
    pub approvers: HashMap<String, Approver>,
    /// The public key file each approver of the world file was read from,
    /// as a path from here: words only (an approver is told which secret
    /// key to sign with), never a decision.
    pub approver_key_files: HashMap<String, PathBuf>,
    /// Owner (tenant) to the keys that sign its record changes.
    pub owner_keys: HashMap<String, Vec<PublicKey>>,
    pub store: Option<PathBuf>,
    /// `[store.shards]`: the stores by tenant, in place of `store`.
    pub shards: Option<ShardMap>,
    /// `(pack, registry)` to owner (`"*"` for global) to records.
    pub registries: HashMap<String, HashMap<String, HashMap<String, Records>>>,
    /// Registries read from tables of the store's database: pack to
    /// registry to table name.
    pub registry_tables: HashMap<String, HashMap<String, String>>,
    /// `[enforce]`: what runs in shadow mode (nothing by default).
    pub shadow: super::shadow::Shadow,
    /// `[[notify]]`: whom a new pending operation is sent to.
    pub notify: crate::gateway::notify::Notify,
}

impl World {
    /// The registry tables the world names (`[pg_registries]`), sorted and
    /// quoted for a message; `None` when it names none.
    pub fn registry_tables_listed(&self) -> Option<String> {
        let mut tables: Vec<String> = self
            .registry_tables
            .values()
            .flat_map(|m| m.values().map(|t| format!("`{t}`")))
            .collect();
        tables.sort();
        (!tables.is_empty()).then(|| tables.join(", "))
    }

    /// An empty world: no keys, no registries, system clock.
    pub fn empty() -> Self {
        World {
            clock: None,
            gateway_id: None,
            mandate_keys: HashMap::new(),
            bundle_keys: HashMap::new(),
            approvers: HashMap::new(),
            approver_key_files: HashMap::new(),
            owner_keys: HashMap::new(),
            store: None,
            shards: None,
            registries: HashMap::new(),
            registry_tables: HashMap::new(),
            shadow: Default::default(),
            notify: Default::default(),
        }
    }

    /// Loads a world file and the registries it names, checking every
    /// registry against its declaration in the bundle's table.
    pub fn load(path: &Path, table: &Table) -> Result<Self, WorldError> {
        let p = path.display().to_string();
        let text = read_text(path)?;
        let wf: WorldFile = toml::from_str(&text).map_err(|e| WorldError::Invalid {
            path: p.clone(),
            reason: e.message().to_lowercase(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let mut w = World::empty();
        if let Some(c) = &wf.clock {
            w.clock = Some(parse_time_str(c).map_err(|reason| WorldError::Invalid {
                path: p.clone(),
                reason: format!("clock: {reason}"),
            })?);
        }
        if let Some(id) = &wf.gateway_id {
            let ok = !id.is_empty()
                && id.len() <= 128
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c));
            if !ok {
                return Err(WorldError::Invalid {
                    path: p.clone(),
                    reason: "gateway_id: 1 to 128 characters of ASCII letters, digits and `-_.:`"
                        .into(),
                });
            }
            w.gateway_id = Some(id.clone());
        }
        for k in &wf.mandate_keys {
            let key = crate::keys::load_public(&base.join(k))?;
            w.mandate_keys.insert(key.id(), key);
        }
        for k in &wf.bundle_keys {
            let key = crate::keys::load_public(&base.join(k))?;
            w.bundle_keys.insert(key.id(), key);
        }
        for (name, entry) in &wf.approvers {
            let (file, a) = match entry {
                ApproverEntry::Key(k) => (
                    base.join(k),
                    Approver::user(crate::keys::load_public(&base.join(k))?),
                ),
                ApproverEntry::Full(f) => (
                    base.join(&f.key),
                    Approver {
                        key: crate::keys::load_public(&base.join(&f.key))?,
                        owners: f.owners.clone(),
                        roles: f.roles.clone(),
                    },
                ),
            };
            w.approvers.insert(name.clone(), a);
            w.approver_key_files.insert(name.clone(), file);
        }
        for (owner, f) in &wf.owners {
            let keys = f
                .keys
                .iter()
                .map(|k| crate::keys::load_public(&base.join(k)))
                .collect::<Result<Vec<_>, _>>()?;
            w.owner_keys.insert(owner.clone(), keys);
        }
        w.notify =
            crate::gateway::notify::Notify::read(&wf.notify, wf.approval_page.as_deref(), base)?;
        w.check_approver_keys()
            .map_err(|reason| WorldError::Invalid {
                path: p.clone(),
                reason,
            })?;
        // a `postgres://` URL is taken as written; a file is relative to
        // the world
        if let Some(v) = wf.store {
            (w.store, w.shards) = store_entry(v, base).map_err(|reason| WorldError::Invalid {
                path: p.clone(),
                reason,
            })?;
        }
        if let Some(e) = &wf.enforce {
            if let Some(pack) = e.packs().find(|pack| table.pack(pack).is_none()) {
                return Err(WorldError::Invalid {
                    path: p.clone(),
                    reason: format!("enforce: pack `{pack}` is not in the bundle"),
                });
            }
            w.shadow = e.shadow();
        }
        for (pack, tables) in &wf.pg_registries {
            let Some(tp) = table.pack(pack) else {
                return Err(WorldError::Invalid {
                    path: p.clone(),
                    reason: format!("pg_registries for `{pack}`, which is not in the bundle"),
                });
            };
            for (reg, name) in tables {
                if !tp.registries.iter().any(|r| &r.name == reg) {
                    return Err(WorldError::Invalid {
                        path: p.clone(),
                        reason: format!(
                            "pg_registries: pack `{pack}` declares no registry `{reg}`"
                        ),
                    });
                }
                if crate::store::postgres::quote_table(name).is_none() {
                    return Err(WorldError::Invalid {
                        path: p.clone(),
                        reason: format!(
                            "pg_registries: `{name}` is not a table name (`name` or `schema.name`: letters, digits, `_`)"
                        ),
                    });
                }
                w.registry_tables
                    .entry(pack.clone())
                    .or_default()
                    .insert(reg.clone(), name.clone());
            }
        }
        for (pack, dir) in &wf.registries {
            if table.pack(pack).is_none() {
                return Err(WorldError::Invalid {
                    path: p.clone(),
                    reason: format!("registries for `{pack}`, which is not in the bundle"),
                });
            }
            w.load_registries(pack, &base.join(dir), table)?;
        }
        // every pack that trusts records must be given them
        for tp in &table.packs {
            let from_files: Vec<&ir::Registry> = tp
                .registries
                .iter()
                .filter(|r| w.table_of(&tp.name, &r.name).is_none())
                .collect();
            if !from_files.is_empty() && !wf.registries.contains_key(&tp.name) {
                let names: Vec<String> =
                    from_files.iter().map(|r| format!("`{}`", r.name)).collect();
                return Err(WorldError::MissingRegistries {
                    pack: tp.name.clone(),
                    registries: names.join(", "),
                });
            }
        }
        Ok(w)
    }

    /// Loads one pack's registries from a folder of `<registry>.json`,
    /// checking each against its declaration in the bundle's table (a world
    /// built in code, as the scenario runner does, uses this too).
    pub fn load_registries(
        &mut self,
        pack: &str,
        dir: &Path,
        table: &Table,
    ) -> Result<(), WorldError> {
        let Some(tp) = table.pack(pack) else {
            return Err(WorldError::Invalid {
                path: dir.display().to_string(),
                reason: format!("registries for `{pack}`, which is not in the bundle"),
            });
        };
        for reg in &tp.registries {
            if self.table_of(pack, &reg.name).is_some() {
                continue;
            }
            let file = dir.join(format!("{}.json", reg.name));
            // a missing file is not an empty registry: an empty sanctions
            // list or list of protected branches would let through what it
            // exists to stop, so an empty registry is written explicitly
            if !file.is_file() {
                return Err(WorldError::MissingRegistry {
                    path: file.display().to_string(),
                    pack: pack.to_string(),
                    registry: reg.name.clone(),
                });
            }
            self.load_registry_file(pack, reg, &file)?;
        }
        Ok(())
    }

    /// Loads one registry of a pack from one file, checked against its
    /// declaration (the MCP proxy's TOML names a file per registry).
    pub fn load_registry_file(
        &mut self,
        pack: &str,
        reg: &ir::Registry,
        file: &Path,
    ) -> Result<(), WorldError> {
        let recs = load_registry(file, reg)?;
        self.registries
            .entry(pack.to_string())
            .or_default()
            .insert(reg.name.clone(), recs);
        Ok(())
    }

    /// Adds one owner's records, written as in a registry file, to a
    /// registry already loaded (a scenario file's own records): a set's
    /// values join the owner's, a record replaces the one under its key.
    pub fn add_records(
        &mut self,
        pack: &str,
        reg: &ir::Registry,
        owner: &str,
        recs: Value,
    ) -> Result<(), String> {
        let new = checked_owner_records(reg, owner, recs)?;
        let have = self
            .registries
            .entry(pack.to_string())
            .or_default()
            .entry(reg.name.clone())
            .or_default()
            .entry(owner.to_string())
            .or_default();
        for v in new.values {
            if !have.values.iter().any(|h| h.1 == v.1) {
                have.values.push(v);
            }
        }
        have.names.extend(new.names);
        have.keyed.extend(new.keyed);
        Ok(())
    }

    /// Two names never share one key: four eyes are two people, and a
    /// person with two names would be both.
    pub fn check_approver_keys(&self) -> Result<(), String> {
        let mut by_key: BTreeMap<String, &str> = BTreeMap::new();
        let mut names: Vec<&String> = self.approvers.keys().collect();
        names.sort();
        for name in names {
            let id = self.approvers[name].key.id();
            if let Some(first) = by_key.insert(id.clone(), name) {
                return Err(format!(
                    "approvers `{first}` and `{name}` share one key (`{id}`): four eyes must be two people"
                ));
            }
        }
        Ok(())
    }

    /// The table a registry is read from, if it is kept in the database.
    pub fn table_of(&self, pack: &str, registry: &str) -> Option<&str> {
        self.registry_tables
            .get(pack)
            .and_then(|m| m.get(registry))
            .map(String::as_str)
    }

    /// Whether this world may hold records of `owner` for `pack`: some
    /// registry file names the owner, or the pack's registries live in
    /// tables (not read here). `false` says a mandate's owner is likely
    /// wrong (`--owner` left to default to the user), and a refusal says so.
    pub fn may_hold_records_of(&self, pack: &str, owner: &str) -> bool {
        self.registry_tables
            .get(pack)
            .is_some_and(|t| !t.is_empty())
            || self
                .registries
                .get(pack)
                .is_some_and(|m| m.values().any(|owners| owners.contains_key(owner)))
    }

    pub fn records(&self, pack: &str, registry: &str, owner: &str) -> Option<&Records> {
        self.registries
            .get(pack)
            .and_then(|m| m.get(registry))
            .and_then(|m| m.get(owner))
    }
}

fn load_registry(file: &Path, reg: &ir::Registry) -> Result<HashMap<String, Records>, WorldError> {
    let path = file.display().to_string();
    let bad = |reason: String| WorldError::Registry {
        path: path.clone(),
        reason,
    };
    let text = std::fs::read_to_string(file).map_err(|e| bad(e.to_string().to_lowercase()))?;
    let v = crate::base::json::parse_strict(&text).map_err(bad)?;
    let Value::Object(owners) = v else {
        return Err(bad("expected an object from owner to records".into()));
    };
    let mut out = HashMap::new();
    for (owner, recs) in owners {
        let r = checked_owner_records(reg, &owner, recs).map_err(&bad)?;
        out.insert(owner, r);
    }
    Ok(out)
}

/// One owner's records, checked against the declaration: the owner (`*`
/// for a global registry, and only then) and every value or record.
fn checked_owner_records(reg: &ir::Registry, owner: &str, recs: Value) -> Result<Records, String> {
    if reg.global != (owner == "*") {
        return Err(if reg.global {
            format!(
                "`{}` is global: its only owner is `*`, not `{owner}`",
                reg.name
            )
        } else {
            format!("`{}` is per owner: `*` is not an owner", reg.name)
        });
    }
    owner_records(reg, owner, recs)
}

/// The rows of one owner in a registry table as records, checked as the
/// records of a registry file are.
pub fn records_from_rows(
    reg: &ir::Registry,
    owner: &str,
    rows: Vec<crate::store::RegistryRow>,
) -> Result<Records, String> {
    let recs = match &reg.shape {
        RegistryShape::Set { element } => Value::Array(
            rows.into_iter()
                .map(|row| {
                    // a text column: a number-typed element is read as JSON
                    let value = match element {
                        Type::Int | Type::Duration | Type::Bool => {
                            serde_json::from_str(&row.key).unwrap_or(Value::String(row.key))
                        }
                        _ => Value::String(row.key),
                    };
                    match row.id {
                        Some(id) => serde_json::json!({"id": id, "value": value}),
                        None => value,
                    }
                })
                .collect(),
        ),
        RegistryShape::Keyed { .. } => Value::Object(
            rows.into_iter()
                .map(|row| (row.key, row.record.unwrap_or(Value::Null)))
                .collect(),
        ),
    };
    owner_records(reg, owner, recs)
}

/// One owner's records of a registry, checked against its declaration.
fn owner_records(reg: &ir::Registry, owner: &str, recs: Value) -> Result<Records, String> {
    let mut r = Records::default();
    match (&reg.shape, recs) {
        (RegistryShape::Set { element }, Value::Array(items)) => {
            for it in items {
                let (id, val, name) = match it {
                    Value::Object(mut o) => {
                        let id = o.remove("id");
                        let val = o.remove("value");
                        let name = match o.remove("name") {
                            None => None,
                            Some(Value::String(n)) => Some(n),
                            Some(_) => return Err("a set entry's `name` is a string".into()),
                        };
                        if !o.is_empty() {
                            return Err("a set entry has only `id`, `value` and `name`".into());
                        }
                        match (id, val) {
                            (Some(Value::String(i)), Some(v)) => (Some(i), v, name),
                            _ => {
                                return Err("a set entry needs a string `id` and a `value`".into());
                            }
                        }
                    }
                    v => (None, v, None),
                };
                let text = scalar_text(&val, element)?;
                if let Some(n) = name {
                    r.names.insert(text.clone(), n);
                }
                r.values.push((id, text));
            }
        }
        (
            RegistryShape::Keyed {
                fields,
                key: key_ty,
            },
            Value::Object(records),
        ) => {
            for (key, rec) in records {
                let key = match key_ty.canonical_normalizer() {
                    Some(n) => crate::gateway::normalize::apply(n, &key)?,
                    None => key,
                };
                let Value::Object(rec) = rec else {
                    return Err(format!("record `{key}` is not an object"));
                };
                let mut clean = Map::new();
                for f in fields {
                    let Some(v) = rec.get(&f.name) else {
                        return Err(format!("record `{key}` has no field `{}`", f.name));
                    };
                    clean.insert(
                        f.name.clone(),
                        typed_value(v, &f.ty)
                            .map_err(|e| format!("record `{key}`, field `{}`: {e}", f.name))?,
                    );
                }
                if let Some(extra) = rec.keys().find(|k| !fields.iter().any(|f| &f.name == *k)) {
                    return Err(format!("record `{key}` has an undeclared field `{extra}`"));
                }
                r.keyed.insert(key, clean);
            }
        }
        (_, other) => {
            return Err(format!(
                "records of `{owner}` are {}, expected {}",
                kind(&other),
                if matches!(reg.shape, RegistryShape::Set { .. }) {
                    "a list"
                } else {
                    "an object"
                }
            ));
        }
    }
    Ok(r)
}

/// A registry value as its text (set registries hold scalars).
fn scalar_text(v: &Value, ty: &Type) -> Result<String, String> {
    match typed_value(v, ty)? {
        Value::String(s) => Ok(s),
        other => Ok(other.to_string()),
    }
}

/// A registry field value in its runtime form: Money and times as integers.
pub fn typed_value(v: &Value, ty: &Type) -> Result<Value, String> {
    use crate::base::Money;
    use crate::base::json::parse_time;
    Ok(match ty {
        Type::Money => Value::from(Money::from_json(v)?.minor()),
        Type::Date | Type::Timestamp => Value::from(parse_time(v)?),
        Type::Int | Type::Duration => match v.as_i64() {
            Some(i) => Value::from(i),
            None => return Err(format!("expected a whole number, found {}", kind(v))),
        },
        Type::Bool => match v {
            Value::Bool(_) => v.clone(),
            _ => return Err(format!("expected a boolean, found {}", kind(v))),
        },
        Type::Enum(vs) => match v.as_str() {
            Some(s) if vs.iter().any(|x| x == s) => v.clone(),
            _ => return Err(format!("expected one of {}", vs.join(", "))),
        },
        Type::List(e) | Type::Set(e) => match v {
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|i| typed_value(i, e))
                    .collect::<Result<_, _>>()?,
            ),
            _ => return Err(format!("expected a list, found {}", kind(v))),
        },
        _ => match v {
            Value::String(s) => match ty.canonical_normalizer() {
                Some(n) => Value::String(crate::gateway::normalize::apply(n, s)?),
                None => v.clone(),
            },
            _ => return Err(format!("expected a string, found {}", kind(v))),
        },
    })
}
