//! The trusted side's changes to an owner's records at run time: a payee
//! the user confirms in her bank app, a vendor record the owner corrects, a
//! beneficiary removed. A change goes through the store, in one transaction
//! with its receipt (`"kind": "registry"` in the chain, beside the
//! decisions), and takes effect for the next decision; the world's files
//! stay the starting state.
//!
//! Only the trusted side calls this (`ipc registry`, the owner's HTTP
//! route, scenario steps): it is never reachable from a proposal. Over
//! HTTP (`POST /v1/registry`) a change is an [`OwnerChange`] signed by a
//! key the world declares for that owner (`[owners.NAME] keys`), for one
//! gateway (its `audience`, the world's `gateway_id`), with an expiry at
//! most [`MAX_OWNER_CHANGE_LIFETIME`] ahead and a single-use nonce: the
//! agent host's bearer token alone can never change records.

use super::registry::Registries;
use super::world::typed_value;
use super::{Gateway, ReceiptRef, normalize};
use crate::base::json::format_time;
use crate::canonical::{Jcs, ObjectWriter};
use crate::ir::RegistryShape;
use crate::store::StoreError;
use serde::{Deserialize, Serialize};
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

/// An owner's change to its own records, as its key signs it (the JCS of
/// this struct). Its fields (`owner`, `pack`, ...) are none of an
/// approval's or a decline's, so no signature passes for another kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnerChange {
    pub owner: String,
    pub pack: String,
    pub registry: String,
    /// `add` or `remove`.
    pub change: Verb,
    /// The value (set registry) or the key (keyed registry).
    pub value: String,
    /// A keyed registry's record (`add` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<Map<String, Value>>,
    /// The gateway the change is for: the world's `gateway_id`. Another
    /// gateway (staging, another deployment with its own store and nonces)
    /// refuses it.
    pub audience: String,
    /// Seconds since the epoch: refused from then on, and refused when it
    /// is more than [`MAX_OWNER_CHANGE_LIFETIME`] ahead.
    pub expires_at: i64,
    /// Single use: a request seen once is refused again.
    pub nonce: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    Add,
    Remove,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedOwnerChange {
    pub change: OwnerChange,
    /// Ed25519 over the JCS encoding of `change`, base64.
    pub signature: String,
}

impl SignedOwnerChange {
    pub fn sign(
        change: OwnerChange,
        key: &crate::keys::SecretKey,
    ) -> Result<Self, crate::canonical::CanonicalError> {
        let msg = crate::canonical::to_jcs(&change)?;
        Ok(SignedOwnerChange {
            signature: key.sign(msg.as_bytes()),
            change,
        })
    }
}

/// Longest nonce accepted in an owner's change.
const MAX_NONCE: usize = 128;

/// How far ahead of the gateway's clock an owner's change may expire, in
/// seconds (15 minutes). An owner signs a change just before sending it:
/// this covers a retry and clock skew. A change signed to last longer is a
/// bearer instrument until its nonce is used: leaked or kept, it re-adds
/// a payee the owner has removed since. Approvals are bounded the same way
/// (ten minutes on the page).
pub const MAX_OWNER_CHANGE_LIFETIME: i64 = 15 * 60;

impl RegistryChange {
    /// The change `add`/`remove VALUE [record]` means for a registry that
    /// is `keyed` or not (what `ipc registry` and the HTTP route take).
    pub fn from_request(
        keyed: bool,
        verb: Verb,
        value: &str,
        record: Option<Map<String, Value>>,
        registry: &str,
    ) -> Result<RegistryChange, String> {
        match (keyed, verb, record) {
            (true, Verb::Add, Some(record)) => Ok(RegistryChange::Put {
                key: value.to_string(),
                record,
            }),
            (true, Verb::Add, None) => Err(format!(
                "`{registry}` is keyed: give the record with `--record '{{...}}'`"
            )),
            (true, Verb::Remove, _) => Ok(RegistryChange::Delete {
                key: value.to_string(),
            }),
            (false, _, Some(_)) => Err("`--record` is for keyed registries".into()),
            (false, Verb::Add, None) => Ok(RegistryChange::Add {
                value: Value::String(value.to_string()),
            }),
            (false, Verb::Remove, None) => Ok(RegistryChange::Remove {
                value: Value::String(value.to_string()),
            }),
        }
    }

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
    /// The change names a registry the pack does not declare.
    #[error("pack `{pack}` declares no registry `{registry}`")]
    #[diagnostic(code(ipc::registry::unknown))]
    UnknownRegistry { pack: String, registry: String },
    /// A global registry has one owner, `*`: a change names another.
    #[error("`{registry}` is global: its only owner is `*`, not `{owner}`")]
    #[diagnostic(
        code(ipc::registry::owner),
        help("give `--owner '*'` for a global registry")
    )]
    GlobalOwner { registry: String, owner: String },
    /// A registry kept per owner: `*` names no owner of it.
    #[error("`{registry}` is kept per owner: `*` is not an owner")]
    #[diagnostic(
        code(ipc::registry::owner),
        help("name the owner (tenant) whose record this is")
    )]
    NotGlobal { registry: String },
    /// A change that does not fit the registry's shape: a record for a set
    /// registry, a bare value for a keyed one.
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
    /// The value or record does not fit the registry's declaration (type,
    /// canonical spelling, declared fields).
    #[error("invalid value for `{registry}`: {reason}")]
    #[diagnostic(code(ipc::registry::value))]
    Value { registry: String, reason: String },
    /// An owner's change over HTTP without a valid signature of a key the
    /// world declares for that owner; a bearer token alone changes nothing.
    #[error("no key of the owner `{owner}` signed this change")]
    #[diagnostic(
        code(ipc::registry::unauthenticated),
        help(
            "an owner's change is signed with a key the world declares under `[owners.{owner}] keys`"
        )
    )]
    NotOwner { owner: String },
    /// The signed change's `expires_at` has passed.
    #[error("the change expired at {at}")]
    #[diagnostic(
        code(ipc::registry::expired),
        help("sign the change again with a later `expires_at`")
    )]
    Expired { at: String },
    /// A signed change valid for longer than the gateway allows: it would stay
    /// a bearer instrument until its nonce is used.
    #[error("the change expires at {at}, more than {max} seconds ahead")]
    #[diagnostic(
        code(ipc::registry::lifetime),
        help("sign the change just before sending it, with an expiry at most 15 minutes ahead")
    )]
    TooLong { at: String, max: i64 },
    /// A change signed for another gateway (staging, another deployment with
    /// its own store of used nonces).
    #[error("the change is for the gateway `{audience}`, not this one (`{gateway}`)")]
    #[diagnostic(
        code(ipc::registry::audience),
        help("sign the change with `audience` set to this gateway's `gateway_id`")
    )]
    Audience { audience: String, gateway: String },
    /// The world names no `gateway_id`: a signed change has no audience to
    /// match, so none is applied.
    #[error("this gateway has no `gateway_id`: it applies no signed change")]
    #[diagnostic(
        code(ipc::registry::audience),
        help("set `gateway_id = \"NAME\"` in the world; owners sign their changes for that name")
    )]
    NoGatewayId,
    /// The change's nonce was used before: each signed change applies once.
    #[error("the nonce `{nonce}` was already used: a change is accepted once")]
    #[diagnostic(
        code(ipc::registry::replayed),
        help("sign each change with a fresh random nonce")
    )]
    Replayed { nonce: String },
    /// The signed change's body is not well formed.
    #[error("invalid change: {reason}")]
    #[diagnostic(code(ipc::registry::request))]
    Request { reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Clock(#[from] crate::gateway::ClockError),
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
        if self.shard_set().is_some() {
            return self
                .for_tenant(owner)?
                .change_registry(pack, registry, owner, change, by);
        }
        self.apply_change(pack, registry, owner, change, by, None)
    }

    /// An owner's signed change (`POST /v1/registry`): a key the world
    /// declares for that owner signed it, for this gateway (`audience` is
    /// the world's `gateway_id`), it has not expired and expires at most
    /// [`MAX_OWNER_CHANGE_LIFETIME`] ahead, and its nonce is new (used up in the change's own transaction); then it is
    /// applied as [`Self::change_registry`] does, `by` the owner.
    pub fn change_registry_signed(
        &self,
        signed: &SignedOwnerChange,
    ) -> Result<ReceiptRef, TrustedError> {
        let c = &signed.change;
        if self.shard_set().is_some() {
            return self.for_tenant(&c.owner)?.change_registry_signed(signed);
        }
        let not_owner = || TrustedError::NotOwner {
            owner: crate::base::json::echo(&c.owner),
        };
        let keys = self.world.owner_keys.get(&c.owner).ok_or_else(not_owner)?;
        let msg = crate::canonical::to_jcs(c).map_err(|e| TrustedError::Request {
            reason: e.to_string(),
        })?;
        if !keys
            .iter()
            .any(|k| k.verify(msg.as_bytes(), &signed.signature).is_ok())
        {
            return Err(not_owner());
        }
        // for this gateway only: a change signed for another (staging, a
        // second deployment with its own store of used nonces) is refused
        match &self.world.gateway_id {
            None => return Err(TrustedError::NoGatewayId),
            Some(id) if *id != c.audience => {
                return Err(TrustedError::Audience {
                    audience: crate::base::json::echo(&c.audience),
                    gateway: id.clone(),
                });
            }
            Some(_) => {}
        }
        let now = self.now()?;
        if now >= c.expires_at {
            return Err(TrustedError::Expired {
                at: format_time(c.expires_at),
            });
        }
        if c.expires_at.saturating_sub(now) > MAX_OWNER_CHANGE_LIFETIME {
            return Err(TrustedError::TooLong {
                at: format_time(c.expires_at),
                max: MAX_OWNER_CHANGE_LIFETIME,
            });
        }
        if c.nonce.is_empty() || c.nonce.len() > MAX_NONCE {
            return Err(TrustedError::Request {
                reason: format!("the nonce is 1 to {MAX_NONCE} characters"),
            });
        }
        let keyed = self
            .registry(&c.pack, &c.registry)
            .is_some_and(|r| matches!(r.shape, RegistryShape::Keyed { .. }));
        let change =
            RegistryChange::from_request(keyed, c.change, &c.value, c.record.clone(), &c.registry)
                .map_err(|reason| TrustedError::Request { reason })?;
        self.apply_change(
            &c.pack,
            &c.registry,
            &c.owner,
            &change,
            &c.owner,
            Some(&format!("registry:{}", c.nonce)),
        )
    }

    /// [`Self::change_registry`], using up `nonce` (if any) in the same
    /// transaction: a nonce already used refuses the change.
    fn apply_change(
        &self,
        pack: &str,
        registry: &str,
        owner: &str,
        change: &RegistryChange,
        by: &str,
        nonce: Option<&str>,
    ) -> Result<ReceiptRef, TrustedError> {
        let reg = self.owned_registry(pack, registry, owner)?;
        // the change, checked and in canonical form, before the transaction
        let checked = Checked::new(&reg, registry, change)?;
        let now = self.now()?;
        let target = Target {
            pack,
            registry,
            owner,
            by,
            change: change.name(),
            now,
        };
        let mut replayed = false;
        let link = self.with_receipt(&mut |tx| {
            // a tenant being moved (or moved) is changed on no shard here
            if owner != "*"
                && let Some(why) = self.holding.refusal(tx, owner)?
            {
                return Err(StoreError::Aborted(why));
            }
            if let Some(n) = nonce {
                if tx.nonce_used(n)? {
                    replayed = true;
                    return Err(StoreError::Aborted("replayed".into()));
                }
                tx.use_nonce(n)?;
            }
            self.write_checked(tx, &target, &reg, &checked)
        });
        match link {
            Err(_) if replayed => Err(TrustedError::Replayed {
                nonce: nonce
                    .map(|n| n.trim_start_matches("registry:").to_string())
                    .unwrap_or_default(),
            }),
            other => Ok(other?),
        }
    }

    /// The registry `pack` declares as `registry`, if `owner` may hold
    /// records in it: `*` for a global registry, a tenant for any other.
    fn owned_registry(
        &self,
        pack: &str,
        registry: &str,
        owner: &str,
    ) -> Result<crate::ir::Registry, TrustedError> {
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
        Ok(reg)
    }

    /// Writes a checked change to the store and returns its receipt's body.
    fn write_checked(
        &self,
        tx: &mut dyn crate::store::Tx,
        t: &Target<'_>,
        reg: &crate::ir::Registry,
        checked: &Checked,
    ) -> Result<Jcs, StoreError> {
        let regs = Registries {
            world: &self.world,
            pack: t.pack,
            owner: t.owner,
        };
        let mut w = ObjectWriter::new();
        w.str("bundle", &self.bundle_hash)
            .str("by", t.by)
            .str("change", t.change);
        match checked {
            Checked::Set { text, add } => {
                if *add {
                    regs.add_value(tx, reg, text)?;
                } else {
                    regs.remove_value(tx, reg, text)?;
                }
                w.str("kind", "registry")
                    .str("owner", t.owner)
                    .str("pack", t.pack)
                    .str("registry", t.registry)
                    .str("time", &format_time(t.now))
                    .str("value", text);
            }
            Checked::Keyed { key, record } => {
                match record {
                    Some(r) => regs.put_record(tx, reg, key, r.clone())?,
                    None => regs.delete_record(tx, reg, key)?,
                }
                w.str("key", key)
                    .str("kind", "registry")
                    .str("owner", t.owner);
                w.str("pack", t.pack);
                w.value(
                    "record",
                    &record.clone().map(Value::Object).unwrap_or(Value::Null),
                )
                .map_err(|e| StoreError::Aborted(e.to_string()))?;
                w.str("registry", t.registry)
                    .str("time", &format_time(t.now));
            }
        }
        Ok(w.finish())
    }

    /// One change of the trusted side and its receipt, in one transaction:
    /// `change` writes to the store and returns the receipt's body.
    pub(crate) fn with_receipt(
        &self,
        change: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<Jcs, StoreError>,
    ) -> Result<ReceiptRef, StoreError> {
        self.with_receipt_as(false, change)
    }

    /// [`Gateway::with_receipt`], committed with
    /// [`Store::transaction_written`](crate::store::Store::transaction_written)
    /// when `written` (a record of a call the gateway did not decide).
    pub(crate) fn with_receipt_as(
        &self,
        written: bool,
        change: &mut dyn FnMut(&mut dyn crate::store::Tx) -> Result<Jcs, StoreError>,
    ) -> Result<ReceiptRef, StoreError> {
        let mut link = None;
        let mut body = |tx: &mut dyn crate::store::Tx| {
            let body = change(tx)?;
            let l = tx.append_receipt_jcs(&body)?;
            link = Some(ReceiptRef {
                seq: l.seq,
                hash: l.hash,
            });
            Ok(Value::Null)
        };
        if written {
            self.store.transaction_written(&mut body)?;
        } else {
            self.store.transaction(&mut body)?;
        }
        link.ok_or_else(|| StoreError::Aborted("the change left no receipt".into()))
    }
}

/// Where a registry change goes, who makes it and when: its receipt's
/// fields besides the value.
struct Target<'t> {
    pack: &'t str,
    registry: &'t str,
    owner: &'t str,
    by: &'t str,
    change: &'static str,
    now: i64,
}

/// A registry change, checked against the registry's shape and in
/// canonical form.
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

impl Checked {
    /// `change` checked against `reg`'s shape (named `registry` in errors).
    fn new(
        reg: &crate::ir::Registry,
        registry: &str,
        change: &RegistryChange,
    ) -> Result<Self, TrustedError> {
        let bad = |reason: String| TrustedError::Value {
            registry: registry.into(),
            reason,
        };
        let shape_err = |shape| TrustedError::Shape {
            registry: registry.into(),
            shape,
            change: change.name(),
        };
        Ok(match (&reg.shape, change) {
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
            ) => Checked::Keyed {
                key: canonical_key(key_ty, key).map_err(bad)?,
                record: Some(checked_record(fields, record).map_err(bad)?),
            },
            (RegistryShape::Keyed { key: key_ty, .. }, RegistryChange::Delete { key }) => {
                Checked::Keyed {
                    key: canonical_key(key_ty, key).map_err(bad)?,
                    record: None,
                }
            }
            (RegistryShape::Set { .. }, _) => return Err(shape_err("set")),
            (RegistryShape::Keyed { .. }, _) => return Err(shape_err("keyed")),
        })
    }
}

/// A keyed registry's record with every declared field, each typed and in
/// canonical form, and no other.
fn checked_record(
    fields: &[crate::ir::Claim],
    record: &Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let mut clean = Map::new();
    for f in fields {
        let v = record
            .get(&f.name)
            .ok_or_else(|| format!("the record has no field `{}`", f.name))?;
        clean.insert(
            f.name.clone(),
            typed_value(v, &f.ty).map_err(|e| format!("field `{}`: {e}", f.name))?,
        );
    }
    if let Some(extra) = record
        .keys()
        .find(|k| !fields.iter().any(|f| &f.name == *k))
    {
        return Err(format!("the record has an undeclared field `{extra}`"));
    }
    Ok(clean)
}

/// A keyed registry's key in its canonical spelling (an IBAN key without
/// spaces), as the world's files store them.
fn canonical_key(key_ty: &crate::ir::Type, key: &str) -> Result<String, String> {
    match key_ty.canonical_normalizer() {
        Some(n) => normalize::apply(n, key).map_err(|e| format!("key: {e}")),
        None => Ok(key.to_string()),
    }
}
