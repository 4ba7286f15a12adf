//! The trusted side's changes to an owner's records at run time: a payee
//! the user confirms in her bank app, a vendor record the owner corrects, a
//! beneficiary removed. A change goes through the store, in one transaction
//! with its receipt (`"kind": "registry"` in the chain, beside the
//! decisions), and takes effect for the next decision; the world's files
//! stay the starting state.
//!
//! Only the trusted side calls this (`ipc registry`, the owner's HTTP
//! route, scenario steps): it is never reachable from a proposal.

use super::registry::Registries;
use super::world::typed_value;
use super::{Gateway, ReceiptRef, normalize};
use crate::canonical::{Jcs, ObjectWriter};
use crate::gateway::json::format_time;
use crate::ir::RegistryShape;
use crate::store::StoreError;
use serde_json::{Map, Value};

/// One change to a registry.
#[derive(Clone, Debug, PartialEq)]
pub enum RegistryChange {
    /// A value added to a set registry.
    Add { value: Value },
    /// A value removed from a set registry (from the world's file or an
    /// earlier addition).
    Remove { value: Value },
    /// A record written to a keyed registry, replacing any under that key.
    Put {
        key: String,
        record: Map<String, Value>,
    },
    /// The record under a key removed from a keyed registry.
    Delete { key: String },
}

impl RegistryChange {
    fn name(&self) -> &'static str {
        match self {
            RegistryChange::Add { .. } => "add",
            RegistryChange::Remove { .. } => "remove",
            RegistryChange::Put { .. } => "put",
            RegistryChange::Delete { .. } => "delete",
        }
    }
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum TrustedError {
    #[error("pack `{pack}` declares no registry `{registry}`")]
    #[diagnostic(code(ipc::registry::unknown))]
    UnknownRegistry { pack: String, registry: String },
    #[error("`{registry}` is global: its only owner is `*`, not `{owner}`")]
    #[diagnostic(
        code(ipc::registry::owner),
        help("give `--owner '*'` for a global registry")
    )]
    GlobalOwner { registry: String, owner: String },
    #[error("`{registry}` is kept per owner: `*` is not an owner")]
    #[diagnostic(
        code(ipc::registry::owner),
        help("name the owner (tenant) whose record this is")
    )]
    NotGlobal { registry: String },
    #[error("`{registry}` is a {shape} registry: `{change}` does not apply to it")]
    #[diagnostic(
        code(ipc::registry::shape),
        help(
            "a set registry takes `add` and `remove` of a value; a keyed one `add KEY --record JSON` and `remove KEY`"
        )
    )]
    Shape {
        registry: String,
        shape: &'static str,
        change: &'static str,
    },
    #[error("invalid value for `{registry}`: {reason}")]
    #[diagnostic(code(ipc::registry::value))]
    Value { registry: String, reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
}

impl Gateway {
    /// Applies one change to `owner`'s records in `registry` of `pack`, and
    /// appends its receipt in the same transaction; `by` names who made it
    /// (the owner, the user, an operator). Values are checked against the
    /// registry's declaration and stored in their canonical spelling.
    pub fn change_registry(
        &self,
        pack: &str,
        registry: &str,
        owner: &str,
        change: &RegistryChange,
        by: &str,
    ) -> Result<ReceiptRef, TrustedError> {
        let reg = self
            .registry(pack, registry)
            .ok_or_else(|| TrustedError::UnknownRegistry {
                pack: pack.into(),
                registry: registry.into(),
            })?
            .clone();
        if reg.global && owner != "*" {
            return Err(TrustedError::GlobalOwner {
                registry: registry.into(),
                owner: owner.into(),
            });
        }
        if !reg.global && owner == "*" {
            return Err(TrustedError::NotGlobal {
                registry: registry.into(),
            });
        }
        let bad = |reason: String| TrustedError::Value {
            registry: registry.into(),
            reason,
        };
        let shape_err = |shape| TrustedError::Shape {
            registry: registry.into(),
            shape,
            change: change.name(),
        };
        // the change, checked and in canonical form, before the transaction
        enum Checked {
            Set {
                text: String,
                add: bool,
            },
            Keyed {
                key: String,
                record: Option<Map<String, Value>>,
            },
        }
        let checked = match (&reg.shape, change) {
            (RegistryShape::Set { element }, RegistryChange::Add { value })
            | (RegistryShape::Set { element }, RegistryChange::Remove { value }) => {
                let text = match typed_value(value, element).map_err(bad)? {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                Checked::Set {
                    text,
                    add: matches!(change, RegistryChange::Add { .. }),
                }
            }
            (
                RegistryShape::Keyed {
                    key: key_ty,
                    fields,
                },
                RegistryChange::Put { key, record },
            ) => {
                let key = canonical_key(key_ty, key).map_err(bad)?;
                let mut clean = Map::new();
                for f in fields {
                    let v = record
                        .get(&f.name)
                        .ok_or_else(|| bad(format!("the record has no field `{}`", f.name)))?;
                    clean.insert(
                        f.name.clone(),
                        typed_value(v, &f.ty)
                            .map_err(|e| bad(format!("field `{}`: {e}", f.name)))?,
                    );
                }
                if let Some(extra) = record
                    .keys()
                    .find(|k| !fields.iter().any(|f| &f.name == *k))
                {
                    return Err(bad(format!("the record has an undeclared field `{extra}`")));
                }
                Checked::Keyed {
                    key,
                    record: Some(clean),
                }
            }
            (RegistryShape::Keyed { key: key_ty, .. }, RegistryChange::Delete { key }) => {
                Checked::Keyed {
                    key: canonical_key(key_ty, key).map_err(bad)?,
                    record: None,
                }
            }
            (RegistryShape::Set { .. }, _) => return Err(shape_err("set")),
            (RegistryShape::Keyed { .. }, _) => return Err(shape_err("keyed")),
        };
        let now = self.now();
        let link = self.with_receipt(&mut |tx| {
            let regs = Registries {
                world: &self.world,
                pack,
                owner,
            };
            let mut w = ObjectWriter::new();
            w.str("bundle", &self.bundle_hash)
                .str("by", by)
                .str("change", change.name());
            match &checked {
                Checked::Set { text, add } => {
                    if *add {
                        regs.add_value(tx, &reg, text)?;
                    } else {
                        regs.remove_value(tx, &reg, text)?;
                    }
                    w.str("kind", "registry")
                        .str("owner", owner)
                        .str("pack", pack)
                        .str("registry", registry)
                        .str("time", &format_time(now))
                        .str("value", text);
                }
                Checked::Keyed { key, record } => {
                    match record {
                        Some(r) => regs.put_record(tx, &reg, key, r.clone())?,
                        None => regs.delete_record(tx, &reg, key)?,
                    }
                    w.str("key", key)
                        .str("kind", "registry")
                        .str("owner", owner);
                    w.str("pack", pack);
                    w.value(
                        "record",
                        &record.clone().map(Value::Object).unwrap_or(Value::Null),
                    )
                    .map_err(|e| StoreError::Aborted(e.to_string()))?;
                    w.str("registry", registry).str("time", &format_time(now));
                }
            }
            Ok(w.finish())
        })?;
        Ok(link)
    }

    /// One change of the trusted side and its receipt, in one transaction:
    /// `change` writes to the store and returns the receipt's body.
    pub(crate) fn with_receipt(
        &self,
        change: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<Jcs, StoreError>,
    ) -> Result<ReceiptRef, StoreError> {
        let mut link = None;
        self.store.transaction(&mut |tx| {
            let body = change(tx)?;
            let l = tx.append_receipt_jcs(&body)?;
            link = Some(ReceiptRef {
                seq: l.seq,
                hash: l.hash,
            });
            Ok(Value::Null)
        })?;
        link.ok_or_else(|| StoreError::Aborted("the change left no receipt".into()))
    }
}

/// A keyed registry's key in its canonical spelling (an IBAN key without
/// spaces), as the world's files store them.
fn canonical_key(key_ty: &crate::ir::Type, key: &str) -> Result<String, String> {
    match key_ty.canonical_normalizer() {
        Some(n) => normalize::apply(n, key).map_err(|e| format!("key: {e}")),
        None => Ok(key.to_string()),
    }
}
