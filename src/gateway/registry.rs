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

/// Store namespace of keyed-record overrides.
pub fn record_ns(pack: &str, registry: &str) -> String {
    format!("registry:{pack}/{registry}")
}
/// Store namespace of values added to a set registry.
pub fn added_ns(pack: &str, registry: &str) -> String {
    format!("registry+:{pack}/{registry}")
}
pub fn owner_key(owner: &str, key: &str) -> String {
    format!("{owner}\u{1f}{key}")
}

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
            RegistryShape::Set { .. } => Ok(self.owned(tx, reg, owner, None)?.and_then(|r| {
                r.values
                    .iter()
                    .find(|(i, _)| i.as_deref() == Some(id))
                    .map(|(_, v)| v.clone())
            })),
            RegistryShape::Keyed { .. } => self.member(tx, reg, id, None),
        }
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
        // a lookup is by the proposal's normalised value: store the entry
        // under each spelling a normaliser can produce
        let mut keys = vec![
            entry.clone(),
            entry.trim().to_string(),
            entry.trim().to_uppercase(),
            entry.trim().to_lowercase(),
        ];
        keys.sort();
        keys.dedup();
        for k in keys {
            tx.state_put(
                &added_ns(self.pack, &reg.name),
                &owner_key(&owner, &k),
                &Value::String(entry.clone()),
            )?;
        }
        Ok(())
    }
}
