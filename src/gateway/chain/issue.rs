//! A child mandate drafted against its parent, shown, proposed, sealed,
//! issued, checked and recorded (a receipt each).

use super::held::{PENDING_NS, held_get, index_push};
use super::verify::parent_err;
use super::{ChildError, ChildRequest, Draft, Issued, NS, Widening};
use crate::base::json::{echo, format_time};
use crate::gateway::listing;
use crate::gateway::mandate::{Budget, Mandate, MandateToken, ParentRef};
use crate::gateway::narrowing::strict_within;
use crate::gateway::{Gateway, ReceiptRef};
use crate::keys::SecretKey;
use crate::store::StoreError;
use serde_json::Value;

impl Gateway {
    /// The child `req` asks for, typed against the pack and named after
    /// `parent`, with what widens and its rendering; nothing signed, nothing
    /// stored. A parent that does not verify, has expired or is revoked, and
    /// a request that does not type, are errors; a child that widens is a
    /// [`Draft`] whose `widens` says how (the person asked sees it).
    pub fn draft_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
    ) -> Result<Draft, ChildError> {
        self.draft_child_at(parent, req, None)
    }

    /// [`Self::draft_child`], issued from `issued_at` when given (the time
    /// the user was first shown it, carried by the proxy's sealed state to
    /// the second round, so the form is the one shown), never after now.
    pub fn draft_child_at(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
        issued_at: Option<i64>,
    ) -> Result<Draft, ChildError> {
        if self.shard_set().is_some() {
            return self
                .for_tenant(&parent.mandate.owner)?
                .draft_child_at(parent, req, issued_at);
        }
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let issued = issued_at.map_or(now, |t| t.min(now));
        let bad = |reason: String| ChildError::Request { reason };
        let pm = &parent.mandate;
        let Some((pack, actions)) = self.pack_of(&pm.pack) else {
            return Err(parent_err(format!(
                "pack `{}` is not in this gateway's bundle",
                echo(&pm.pack)
            )));
        };
        let mut claims = crate::gateway::mandate::typed_claims(&req.claims, pack).map_err(bad)?;
        for d in &pack.claims {
            if claims.contains_key(&d.name) {
                continue;
            }
            if d.ty.is_collection() {
                claims.insert(d.name.clone(), Value::Array(vec![]));
            } else if let Some(v) = pm.claims.get(&d.name) {
                claims.insert(d.name.clone(), v.clone());
            }
        }
        let expires_at = req.expires_at.unwrap_or(pm.expires_at);
        if expires_at <= now {
            return Err(bad(format!(
                "the expiry {} has already passed",
                format_time(expires_at)
            )));
        }
        let sources = strict_within(&pm.sources, &actions);
        let id = match &req.id {
            Some(id) => id.clone(),
            None => crate::gateway::mandate::new_id().map_err(bad)?,
        };
        let hash = parent
            .mandate_hash()
            .map_err(|e| parent_err(e.to_string()))?;
        let mut child = Mandate {
            id,
            pack: pm.pack.clone(),
            user: pm.user.clone(),
            owner: pm.owner.clone(),
            scopes: if req.scopes.is_empty() {
                pm.scopes.clone()
            } else {
                req.scopes.clone()
            },
            claims,
            budget: Budget {
                amount: req.budget.unwrap_or(pm.budget.amount),
                calls: req.calls.unwrap_or(pm.budget.calls),
            },
            issued_at: issued,
            expires_at,
            sources,
            parent: Some(ParentRef {
                id: pm.id.clone(),
                hash,
            }),
        };
        child.canonicalize_claims(pack).map_err(bad)?;
        let mut out: Option<(Vec<Widening>, crate::gateway::render::child::ChildShown)> = None;
        let mut refused: Option<String> = None;
        self.store.transaction(&mut |tx| {
            let v = match self.usable_parent(tx, parent, now)? {
                Ok(v) => v,
                Err(e) => {
                    refused = Some(e);
                    return Ok(Value::Null);
                }
            };
            let widens = self.widenings(tx, &v.mandate, &child)?;
            let shown = crate::gateway::render::child::show(self, tx, &v.mandate, &child, &widens)?;
            out = Some((widens, shown));
            Ok(Value::Null)
        })?;
        if let Some(e) = refused {
            return Err(parent_err(e));
        }
        let (widens, shown) = out.ok_or_else(|| parent_err("not checked"))?;
        Ok(Draft {
            parent: parent.clone(),
            mandate: child,
            widens,
            shown,
        })
    }

    /// `child` (a child of `parent`, unsigned or not) as its confirmer sees
    /// it now, with what widens.
    pub fn show_child(
        &self,
        parent: &MandateToken,
        child: &Mandate,
    ) -> Result<crate::gateway::render::child::ChildShown, ChildError> {
        if self.shard_set().is_some() {
            return self
                .for_tenant(&parent.mandate.owner)?
                .show_child(parent, child);
        }
        let v = self.verify_token(parent).map_err(parent_err)?;
        let mut out = None;
        self.store.transaction(&mut |tx| {
            let widens = self.widenings(tx, &v.mandate, child)?;
            out = Some(crate::gateway::render::child::show(
                self, tx, &v.mandate, child, &widens,
            )?);
            Ok(Value::Null)
        })?;
        out.ok_or_else(|| parent_err("not shown"))
    }

    /// [`Gateway::draft_child`], refusing a child that widens its parent
    /// (`ipc::mandate::widens`).
    pub fn propose_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
    ) -> Result<Draft, ChildError> {
        let d = self.draft_child(parent, req)?;
        d.issuable()?;
        Ok(d)
    }

    /// A child signed elsewhere (the user's browser): the signature over
    /// the JCS of `child` by `key_id` checked with a key that may sign it
    /// (an issuer key, or the parent's user's), the chain verified, the
    /// parent usable and the child within it. Returns the child token,
    /// carrying its ancestors.
    pub fn seal_child(
        &self,
        parent: &MandateToken,
        child: Mandate,
        key_id: &str,
        signature: &str,
    ) -> Result<MandateToken, ChildError> {
        let token = MandateToken {
            mandate: child,
            key_id: key_id.to_string(),
            signature: signature.to_string(),
            ancestors: parent.lineage(),
        };
        self.check_child(&token)?;
        Ok(token)
    }

    /// The child `req` asks for, signed with `key` (an issuer key, or the
    /// parent's user's): [`Gateway::propose_child`] then
    /// [`Gateway::seal_child`].
    pub fn issue_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
        key: &SecretKey,
    ) -> Result<MandateToken, ChildError> {
        let d = self.propose_child(parent, req)?;
        let msg = d.signing_text()?;
        let sig = key.sign(msg.as_bytes());
        self.seal_child(parent, d.mandate, &key.public().id(), &sig)
    }

    /// Checks a child token as the gateway will at a decision: its chain
    /// verifies (signatures, keys, links), no link has expired or is
    /// revoked, and each link narrows the one before.
    pub fn check_child(&self, token: &MandateToken) -> Result<(), ChildError> {
        if self.shard_set().is_some() {
            return self.for_tenant(&token.mandate.owner)?.check_child(token);
        }
        let child_id = token.mandate.id.clone();
        if token.ancestors.is_empty() || token.mandate.parent.is_none() {
            return Err(ChildError::Request {
                reason: format!("mandate `{}` names no parent", echo(&child_id)),
            });
        }
        let v = self.verify_token(token).map_err(|reason| {
            // the last link's signature or key: the signer's fault
            if reason.starts_with("invalid mandate signature")
                || reason.starts_with(&format!("mandate `{}` signed by", echo(&child_id)))
            {
                ChildError::Signer {
                    child: child_id.clone(),
                    reason,
                }
            } else {
                parent_err(reason)
            }
        })?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let mut result: Result<(), ChildError> = Ok(());
        self.store.transaction(&mut |tx| {
            result = Ok(());
            let links: Vec<&Mandate> = v.links().collect();
            for m in &links[..links.len() - 1] {
                if now >= m.expires_at {
                    result = Err(parent_err(format!("mandate `{}` has expired", echo(&m.id))));
                    return Ok(Value::Null);
                }
                if tx.revoked(&m.id)? {
                    result = Err(parent_err(format!(
                        "mandate `{}` has been revoked",
                        echo(&m.id)
                    )));
                    return Ok(Value::Null);
                }
            }
            for pair in links.windows(2) {
                let w = self.widenings(tx, pair[0], pair[1])?;
                if !w.is_empty() {
                    result = Err(ChildError::Widens {
                        parent: pair[0].id.clone(),
                        widens: w,
                    });
                    return Ok(Value::Null);
                }
            }
            Ok(Value::Null)
        })?;
        result
    }

    /// Records an issued child in the store (`ipc mandates list|show`)
    /// with a receipt (`"kind": "mandate", "change": "issued"`): who signed
    /// it, its parent chain, its hash, how it was confirmed (`via`: `http`,
    /// `cli`, `mcp`).
    pub fn record_child(&self, token: &MandateToken, via: &str) -> Result<ReceiptRef, ChildError> {
        if self.shard_set().is_some() {
            return self
                .for_tenant(&token.mandate.owner)?
                .record_child(token, via);
        }
        self.check_child(token)?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let issued = Issued {
            token: token.clone(),
            via: via.to_string(),
            recorded_at: now,
        };
        let stored =
            serde_json::to_value(&issued).map_err(|e| StoreError::Backend(e.to_string()))?;
        let body = self.mandate_receipt("issued", token, via, now)?;
        let id = token.mandate.id.clone();
        let owner = token.mandate.owner.clone();
        self.in_tx(&owner, &mut |tx| {
            if tx.state_get(NS, &id)?.is_some() {
                return Err(StoreError::Conflict(format!(
                    "mandate `{}` is already recorded",
                    echo(&id)
                )));
            }
            tx.state_put(NS, &id, &stored)?;
            index_push(tx, NS, &id)?;
            // a held proposal of it is confirmed now
            if held_get(tx, &id)?.is_some() {
                tx.state_put(PENDING_NS, &id, &Value::Null)?;
                listing::remove(tx, PENDING_NS, &owner, &id)?;
            }
            tx.append_receipt_jcs(&body)
        })
    }
}
