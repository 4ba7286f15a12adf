//! Children held until their user confirms them, declined or revoked; the
//! mandate listing; the store rows behind them (`mandates.pending`, the
//! issued index).

use super::{ChildError, Draft, INDEX, Issued, NS};
use crate::base::json::{echo, format_time};
use crate::canonical::ObjectWriter;
use crate::gateway::listing;
use crate::gateway::mandate::{Mandate, MandateToken};
use crate::gateway::{Gateway, ReceiptRef};
use crate::store::{StoreError, Tx};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

impl Gateway {
    /// Holds a child that does not widen its parent until its user confirms
    /// it (`POST /v1/mandates`; the approval page lists it for her), with a
    /// receipt (`"change": "proposed"`, `via` who proposed it).
    pub fn hold_child(&self, d: &Draft, via: &str) -> Result<ReceiptRef, ChildError> {
        if self.shard_set().is_some() {
            return self.for_tenant(&d.mandate.owner)?.hold_child(d, via);
        }
        d.issuable()?;
        if listing::is_listing_key(&d.mandate.id) {
            return Err(ChildError::Request {
                reason: format!(
                    "a held mandate's id cannot start with `#`: `{}`",
                    echo(&d.mandate.id)
                ),
            });
        }
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let held = Held {
            parent: d.parent.clone(),
            mandate: d.mandate.clone(),
            created_at: now,
        };
        let stored = serde_json::to_value(&held).map_err(|e| StoreError::Backend(e.to_string()))?;
        let unsigned = MandateToken {
            mandate: d.mandate.clone(),
            key_id: String::new(),
            signature: String::new(),
            ancestors: d.parent.lineage(),
        };
        let body = self.mandate_receipt("proposed", &unsigned, via, now)?;
        let id = d.mandate.id.clone();
        self.in_tx(&d.mandate.owner, &mut |tx| {
            if tx.state_get(PENDING_NS, &id)?.is_some_and(|v| !v.is_null())
                || tx.state_get(NS, &id)?.is_some()
            {
                return Err(StoreError::Conflict(format!(
                    "mandate `{}` is already proposed",
                    echo(&id)
                )));
            }
            tx.state_put(PENDING_NS, &id, &stored)?;
            // only this tenant's index is read: another's held children
            // never slow a proposal
            listing::add(tx, PENDING_NS, &d.mandate.owner, &id, &d.parent.mandate.id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// The child `id` held for its user's confirmation, listed or not (one
    /// past the listing's bounds stays confirmable by its id).
    pub fn held_child(&self, id: &str) -> Result<Option<Held>, StoreError> {
        if let Some(set) = self.shard_set() {
            for s in &set.shards {
                if let Some(h) = s.gw.held_child(id)? {
                    return Ok(Some(h));
                }
            }
            return Ok(None);
        }
        let mut out = None;
        self.store.transaction(&mut |tx| {
            out = held_get(tx, id)?;
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// [`Gateway::held_child`], its absence an error.
    pub(super) fn held(&self, id: &str) -> Result<Held, ChildError> {
        self.held_child(id)?.ok_or_else(|| ChildError::Request {
            reason: format!("no child mandate `{}` waits for confirmation", echo(id)),
        })
    }

    /// The children waiting for their user's confirmation in the listing,
    /// oldest first.
    pub fn held_children(&self) -> Result<Vec<Held>, StoreError> {
        if let Some(set) = self.shard_set() {
            let mut all = vec![];
            for s in &set.shards {
                all.append(&mut s.gw.held_children()?);
            }
            return Ok(all);
        }
        let mut out: Vec<Held> = vec![];
        self.store.transaction(&mut |tx| {
            out.clear();
            for id in listing::keys(tx, PENDING_NS, &crate::gateway::Tenants::All)? {
                out.extend(held_get(tx, &id)?);
            }
            Ok(Value::Null)
        })?;
        out.sort_by_key(|h| h.created_at);
        Ok(out)
    }

    /// Confirms the held child `id` with a signature over its JCS by
    /// `key_id` (the user's, made in her browser): sealed
    /// ([`Gateway::seal_child`]), recorded ([`Gateway::record_child`]) and no
    /// longer held.
    pub fn confirm_child(
        &self,
        id: &str,
        key_id: &str,
        signature: &str,
        via: &str,
    ) -> Result<(MandateToken, ReceiptRef), ChildError> {
        if let Some(g) = self.id_shard(id)? {
            return g.confirm_child(id, key_id, signature, via);
        }
        let held = self.held(id)?;
        let token = self.seal_child(&held.parent, held.mandate, key_id, signature)?;
        let r = self.record_child(&token, via)?;
        Ok((token, r))
    }

    /// Declines the held child `id` (`by`: who declined), with a receipt
    /// (`"change": "declined"`).
    pub fn decline_child(&self, id: &str, by: &str) -> Result<ReceiptRef, ChildError> {
        if let Some(g) = self.id_shard(id)? {
            return g.decline_child(id, by);
        }
        let held = self.held(id)?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let unsigned = MandateToken {
            mandate: held.mandate,
            key_id: String::new(),
            signature: String::new(),
            ancestors: held.parent.lineage(),
        };
        let body = self.mandate_receipt("declined", &unsigned, by, now)?;
        let id = id.to_string();
        let owner = unsigned.mandate.owner.clone();
        self.in_tx(&owner, &mut |tx| {
            tx.state_put(PENDING_NS, &id, &Value::Null)?;
            listing::remove(tx, PENDING_NS, &owner, &id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// Revokes a recorded child mandate (and with it its own children),
    /// with a receipt (`"change": "revoked"`, `via` who revoked it). A
    /// mandate the store did not record is revoked with `ipc token revoke`.
    pub fn revoke_child(&self, id: &str, by: &str) -> Result<ReceiptRef, ChildError> {
        if let Some(g) = self.id_shard(id)? {
            return g.revoke_child(id, by);
        }
        let mut found = None;
        self.store.transaction(&mut |tx| {
            found = get(tx, id)?;
            Ok(Value::Null)
        })?;
        let issued = found.ok_or_else(|| ChildError::Request {
            reason: format!("the store records no child mandate `{}`", echo(id)),
        })?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let body = self.mandate_receipt("revoked", &issued.token, by, now)?;
        let id = id.to_string();
        self.in_tx(&issued.token.mandate.owner, &mut |tx| {
            tx.revoke(&id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// Every child mandate, held or issued: `{mandate, parent, user, owner,
    /// status, expires_at, token?}` (what `ipc mandates list` prints too).
    pub fn mandate_listing(&self) -> Result<Vec<Value>, ChildError> {
        if let Some(set) = self.shard_set() {
            let mut all = vec![];
            for s in &set.shards {
                all.append(&mut s.gw.mandate_listing()?);
            }
            return Ok(all);
        }
        let held = self.held_children()?;
        let mut out: Vec<Value> = held.iter().map(held_row).collect();
        self.store.transaction(&mut |tx| {
            out.truncate(held.len());
            for i in recorded(tx)? {
                let revoked = chain_revoked(tx, &i.token)?;
                out.push(issued_row(&i, revoked));
            }
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// One child mandate by its id, as [`Gateway::mandate_listing`] lists
    /// it: issued, or held whether the listing still shows it or not (one
    /// pushed out of its bounds is found by its id, as it is confirmed).
    pub fn mandate_row(&self, id: &str) -> Result<Option<Value>, ChildError> {
        if let Some(set) = self.shard_set() {
            for s in &set.shards {
                if let Some(r) = s.gw.mandate_row(id)? {
                    return Ok(Some(r));
                }
            }
            return Ok(None);
        }
        let mut out = None;
        self.store.transaction(&mut |tx| {
            out = match get(tx, id)? {
                Some(i) => {
                    let revoked = chain_revoked(tx, &i.token)?;
                    Some(issued_row(&i, revoked))
                }
                None => held_get(tx, id)?.as_ref().map(held_row),
            };
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// Runs `f` in a transaction and returns the receipt link it appended;
    /// refused when this shard may not change `owner`'s mandates (the
    /// tenant is being moved, or moved away).
    pub(super) fn in_tx(
        &self,
        owner: &str,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<crate::store::ChainLink, StoreError>,
    ) -> Result<ReceiptRef, ChildError> {
        let mut link = None;
        self.store.transaction(&mut |tx| {
            if let Some(why) = self.holding.refusal(tx, owner)? {
                return Err(StoreError::Aborted(why));
            }
            link = Some(f(tx)?);
            Ok(Value::Null)
        })?;
        let link = link.ok_or_else(|| StoreError::Backend("no receipt".into()))?;
        Ok(ReceiptRef {
            seq: link.seq,
            hash: link.hash,
        })
    }

    /// The receipt of a change to a child mandate: `change` (`proposed`,
    /// `issued`, `declined`, `revoked`), the mandate's hash and chain, the
    /// key that signed it (once issued), `via` (how, or by whom).
    pub(super) fn mandate_receipt(
        &self,
        change: &str,
        token: &MandateToken,
        via: &str,
        now: i64,
    ) -> Result<crate::canonical::Jcs, ChildError> {
        let m = &token.mandate;
        let hash = token
            .mandate_hash()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let ancestors: Vec<String> = token
            .ancestors
            .iter()
            .map(|a| a.mandate.id.clone())
            .collect();
        let mut mw = ObjectWriter::new();
        mw.strs("ancestors", &ancestors)
            .str("id", &m.id)
            .str("owner", &m.owner)
            .str("user", &m.user);
        let mut w = ObjectWriter::new();
        w.str("bundle", &self.bundle_hash)
            .str("change", change)
            .str("hash", &hash)
            .opt_str(
                "key_id",
                Some(token.key_id.as_str()).filter(|k| !k.is_empty()),
            )
            .str("kind", "mandate")
            .jcs("mandate", &mw.finish())
            .str("owner", &m.owner)
            .str("time", &format_time(now))
            .str("via", via);
        Ok(w.finish())
    }
}

/// A child waiting for its user's confirmation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub parent: MandateToken,
    /// Unsigned: what the user signs (the JCS of it).
    pub mandate: Mandate,
    pub created_at: i64,
}

pub(super) const PENDING_NS: &str = "mandates.pending";

/// The ids under `ns`'s one index (the recorded children's).
pub(super) fn index_all(tx: &mut dyn Tx, ns: &str) -> Result<Vec<String>, StoreError> {
    listing::names(tx, ns, INDEX)
}

/// One held child, by id (a key of the listing is none).
pub(super) fn held_get(tx: &mut dyn Tx, id: &str) -> Result<Option<Held>, StoreError> {
    if listing::is_listing_key(id) {
        return Ok(None);
    }
    match tx.state_get(PENDING_NS, id)?.filter(|v| !v.is_null()) {
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("held mandate `{}`: {e}", echo(id)))),
        None => Ok(None),
    }
}

/// A held child as the listing shows it.
pub(super) fn held_row(h: &Held) -> Value {
    json!({
        "mandate": h.mandate.id, "parent": h.parent.mandate.id, "user": h.mandate.user,
        "owner": h.mandate.owner, "status": "pending", "expires_at": h.mandate.expires_at,
    })
}

/// An issued child as the listing shows it (`revoked`: a link of its chain
/// is).
pub(super) fn issued_row(i: &Issued, revoked: bool) -> Value {
    let m = &i.token.mandate;
    json!({
        "mandate": m.id, "parent": m.parent.as_ref().map(|p| p.id.clone()), "user": m.user,
        "owner": m.owner, "status": if revoked { "revoked" } else { "issued" },
        "expires_at": m.expires_at, "via": i.via, "token": i.token,
    })
}

/// Whether `token` or one of its ancestors is revoked.
pub(super) fn chain_revoked(tx: &mut dyn Tx, token: &MandateToken) -> Result<bool, StoreError> {
    for id in token
        .ancestors
        .iter()
        .map(|a| &a.mandate.id)
        .chain(std::iter::once(&token.mandate.id))
    {
        if tx.revoked(id)? {
            return Ok(true);
        }
    }
    Ok(false)
}

pub(super) fn index_push(tx: &mut dyn Tx, ns: &str, id: &str) -> Result<(), StoreError> {
    let mut all = index_all(tx, ns)?;
    all.push(id.to_string());
    tx.state_put(ns, INDEX, &Value::from(all))
}

/// The child mandates recorded in the store, oldest first.
pub fn recorded(tx: &mut dyn Tx) -> Result<Vec<Issued>, StoreError> {
    let mut out = vec![];
    for id in index_all(tx, NS)? {
        if let Some(i) = get(tx, &id)? {
            out.push(i);
        }
    }
    Ok(out)
}

/// One recorded child mandate.
pub fn get(tx: &mut dyn Tx, id: &str) -> Result<Option<Issued>, StoreError> {
    if id == INDEX {
        return Ok(None);
    }
    // null: the tenant moved to another shard (`ipc shards move`)
    match tx.state_get(NS, id)?.filter(|v| !v.is_null()) {
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("recorded mandate `{}`: {e}", echo(id)))),
        None => Ok(None),
    }
}
