//! Reading registries for one mandate: the owner's records (or the global
//! ones), as loaded from the world, overlaid with the changes the trusted
//! side and the executors made in the store (an invoice marked paid, a
//! beneficiary the user added, a vendor's new IBAN). Every read goes through
//! the current store transaction, so a decision sees a consistent state.
//! A registry the world keeps in a database table (`[pg_registries]`) is
//! read from that table, through the same transaction.

use super::normalize;
use super::world::{Records, World};
use crate::ir::{self, Normalizer, RegistryShape};
use crate::store::{StoreError, Tx};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Store namespace of keyed-record overrides.
pub fn record_ns(pack: &str, registry: &str) -> String {
    // concatenated, not `format!`ted: several per decision
    ["registry:", pack, "/", registry].concat()
}
/// Store namespace of values added to a set registry.
pub fn added_ns(pack: &str, registry: &str) -> String {
    ["registry+:", pack, "/", registry].concat()
}
/// Store namespace of values removed from a set registry (a value of the
/// world's file the owner took out).
pub fn removed_ns(pack: &str, registry: &str) -> String {
    ["registry-:", pack, "/", registry].concat()
}
pub fn owner_key(owner: &str, key: &str) -> String {
    [owner, "\u{1f}", key].concat()
}

/// A keyed registry's records, by key, as a selection reads them.
pub type Rows = BTreeMap<String, Map<String, Value>>;

pub struct Registries<'a> {
    pub world: &'a World,
    pub pack: &'a str,
    pub owner: &'a str,
}

impl Registries<'_> {
    fn owner_of(&self, reg: &ir::Registry) -> &str {
        if reg.global { "*" } else { self.owner }
    }

    /// The owner's records: from the registry's table inside `tx` (only
    /// the record under `key` when one is given, for a keyed registry), or
    /// as the world loaded them.
    fn owned(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        owner: &str,
        key: Option<&str>,
    ) -> Result<Option<Cow<'_, Records>>, StoreError> {
        if let Some(table) = self.world.table_of(self.pack, &reg.name) {
            let keyed = matches!(reg.shape, RegistryShape::Keyed { .. });
            let rows = tx.registry_rows(table, owner, keyed, key)?;
            let records = super::world::records_from_rows(reg, owner, rows)
                .map_err(|e| StoreError::Backend(format!("registry table `{table}`: {e}")))?;
            return Ok(Some(Cow::Owned(records)));
        }
        Ok(self
            .world
            .records(self.pack, &reg.name, owner)
            .map(Cow::Borrowed))
    }

    /// The trusted spelling of `value` if it is a member of the registry
    /// (a key, for a keyed registry), comparing under `norm`.
    pub fn member(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        value: &str,
        norm: Option<Normalizer>,
    ) -> Result<Option<String>, StoreError> {
        let owner = self.owner_of(reg);
        // entries are stored in the canonical form of their type (world
        // load, `add_value`): under that same normaliser they compare as
        // they are
        let direct = norm.is_none() || norm == reg.member_type().canonical_normalizer();
        let same = |entry: &str| match norm {
            Some(n) if !direct => normalize::apply(n, entry).is_ok_and(|e| e == value),
            _ => entry == value,
        };
        match &reg.shape {
            RegistryShape::Set { .. } => {
                if let Some(r) = self.owned(tx, reg, owner, None)?
                    && let Some((_, v)) = r.values.iter().find(|(_, v)| same(v))
                    && !self.removed(tx, reg, v)?
                {
                    return Ok(Some(v.clone()));
                }
                let added =
                    tx.state_get(&added_ns(self.pack, &reg.name), &owner_key(owner, value))?;
                // stored under its usual spellings (see `add_value`); the
                // entry itself is compared like any other
                Ok(match added {
                    Some(Value::String(entry)) if same(&entry) => Some(entry),
                    _ => None,
                })
            }
            RegistryShape::Keyed { .. } => {
                let over =
                    tx.state_get(&record_ns(self.pack, &reg.name), &owner_key(owner, value))?;
                if let Some(o) = over {
                    return Ok((!o.is_null()).then(|| value.to_string()));
                }
                Ok(self
                    .owned(tx, reg, owner, direct.then_some(value))?
                    .and_then(|r| {
                        if direct {
                            r.keyed.get_key_value(value).map(|(k, _)| k.clone())
                        } else {
                            r.keyed.keys().find(|k| same(k)).cloned()
                        }
                    }))
            }
        }
    }

    /// The value a `{"ref": id}` names in this registry, for this owner.
    pub fn by_ref(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        let owner = self.owner_of(reg);
        match &reg.shape {
            RegistryShape::Set { .. } => {
                let found = self.owned(tx, reg, owner, None)?.and_then(|r| {
                    r.values
                        .iter()
                        .find(|(i, _)| i.as_deref() == Some(id))
                        .map(|(_, v)| v.clone())
                });
                match found {
                    Some(v) if !self.removed(tx, reg, &v)? => Ok(Some(v)),
                    _ => Ok(None),
                }
            }
            RegistryShape::Keyed { .. } => self.member(tx, reg, id, None),
        }
    }

    /// What the owner calls an entry (canonical spelling) of a set
    /// registry, for a person: its record's `name`, else its `id` (an
    /// entry added at run time has neither).
    pub fn entry_name(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        entry: &str,
    ) -> Result<Option<String>, StoreError> {
        let owner = self.owner_of(reg);
        Ok(self.owned(tx, reg, owner, None)?.and_then(|r| {
            r.values
                .iter()
                .find(|(_, v)| v == entry)
                .and_then(|(id, v)| r.names.get(v).cloned().or_else(|| id.clone()))
        }))
    }

    /// The record under `key` (keyed registries), overrides applied.
    pub fn record(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        key: &str,
    ) -> Result<Option<Map<String, Value>>, StoreError> {
        let owner = self.owner_of(reg);
        if let Some(o) = tx.state_get(&record_ns(self.pack, &reg.name), &owner_key(owner, key))? {
            return Ok(match o {
                Value::Object(m) => Some(m),
                _ => None,
            });
        }
        Ok(self
            .owned(tx, reg, owner, Some(key))?
            .and_then(|r| r.keyed.get(key).cloned()))
    }

    /// Every record of a keyed registry for this owner (or the global
    /// ones), overrides applied (a deleted record left out), as a
    /// selection reads it: from the registry's table inside `tx` or as the
    /// world loaded it, then the store's overrides. More than `max`
    /// records (in the source or among the overrides) is an error: the
    /// caller refuses rather than read without bound.
    pub fn all_records(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        max: usize,
    ) -> Result<Result<Rows, String>, StoreError> {
        let owner = self.owner_of(reg);
        let too_many = || {
            format!(
                "`{}.{}` holds more than {max} records: a selection reads at most {max}",
                self.pack, reg.name
            )
        };
        let mut out = match self.owned(tx, reg, owner, None)? {
            Some(r) if r.keyed.len() > max => return Ok(Err(too_many())),
            Some(r) => r.keyed.clone(),
            None => BTreeMap::new(),
        };
        let prefix = owner_key(owner, "");
        let over = tx.state_list(
            &record_ns(self.pack, &reg.name),
            &prefix,
            max.saturating_add(1),
        )?;
        if over.len() > max {
            return Ok(Err(too_many()));
        }
        for (k, v) in over {
            let Some(key) = k.strip_prefix(&prefix) else {
                continue;
            };
            match v {
                Value::Object(m) => {
                    out.insert(key.to_string(), m);
                }
                _ => {
                    out.remove(key);
                }
            }
        }
        if out.len() > max {
            return Ok(Err(too_many()));
        }
        Ok(Ok(out))
    }

    /// Writes a keyed record override (executors, the trusted side).
    pub fn put_record(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        key: &str,
        record: Map<String, Value>,
    ) -> Result<(), StoreError> {
        let owner = self.owner_of(reg).to_string();
        tx.state_put(
            &record_ns(self.pack, &reg.name),
            &owner_key(&owner, key),
            &Value::Object(record),
        )
    }

    /// Whether the owner removed this entry (canonical spelling) of a set
    /// registry from the world's starting state.
    fn removed(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        entry: &str,
    ) -> Result<bool, StoreError> {
        let owner = self.owner_of(reg);
        Ok(matches!(
            tx.state_get(&removed_ns(self.pack, &reg.name), &owner_key(owner, entry))?,
            Some(Value::Bool(true))
        ))
    }

    /// Removes a value (canonical spelling) from a set registry: from the
    /// world's starting state and from what was added in the store.
    pub fn remove_value(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        entry: &str,
    ) -> Result<(), StoreError> {
        let owner = self.owner_of(reg).to_string();
        tx.state_put(
            &removed_ns(self.pack, &reg.name),
            &owner_key(&owner, entry),
            &Value::Bool(true),
        )?;
        for k in spellings(entry) {
            tx.state_put(
                &added_ns(self.pack, &reg.name),
                &owner_key(&owner, &k),
                &Value::Null,
            )?;
        }
        Ok(())
    }

    /// Removes the record under `key` from a keyed registry.
    pub fn delete_record(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        key: &str,
    ) -> Result<(), StoreError> {
        let owner = self.owner_of(reg).to_string();
        tx.state_put(
            &record_ns(self.pack, &reg.name),
            &owner_key(&owner, key),
            &Value::Null,
        )
    }

    /// Adds a value to a set registry (the trusted side: the user confirms
    /// a new payee in her bank app).
    pub fn add_value(
        &self,
        tx: &mut dyn Tx,
        reg: &ir::Registry,
        value: &str,
    ) -> Result<(), StoreError> {
        let owner = self.owner_of(reg).to_string();
        let entry = match reg.member_type().canonical_normalizer() {
            Some(n) => normalize::apply(n, value)
                .map_err(|e| StoreError::Aborted(format!("cannot add `{value}`: {e}")))?,
            None => value.to_string(),
        };
        // added again after a removal
        tx.state_put(
            &removed_ns(self.pack, &reg.name),
            &owner_key(&owner, &entry),
            &Value::Null,
        )?;
        // a lookup is by the proposal's normalised value: store the entry
        // under each spelling a normaliser can produce
        for k in spellings(&entry) {
            tx.state_put(
                &added_ns(self.pack, &reg.name),
                &owner_key(&owner, &k),
                &Value::String(entry.clone()),
            )?;
        }
        Ok(())
    }
}

/// The spellings a normaliser can give an entry (`lower`, `upper`, `trim`
/// fold ASCII only): what a proposal's value may be looked up under.
fn spellings(entry: &str) -> Vec<String> {
    let t = entry.trim_matches([' ', '\t']);
    let mut keys = vec![
        entry.to_string(),
        t.to_string(),
        t.to_ascii_uppercase(),
        t.to_ascii_lowercase(),
    ];
    keys.sort();
    keys.dedup();
    keys
}
