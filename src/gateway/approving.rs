//! The trusted side's acts on a pending operation (`ipc approve`, the
//! approval page, `POST /v1/approvals*`, the MCP proxy's step-up): read it
//! while it can still be approved, submit a signed approval, decline it.
//! Each checks what the approver was shown (`render`) before anything is
//! written, and writes a receipt. The record itself, and how a decision
//! keeps it, is `pending`; this module reads it and `render` shows it, so
//! neither of those imports the other.

use super::pending::{NS, PendingOp, Submitted, decline, get, of};
use crate::store::StoreError;
use serde_json::Value;

/// Which pending operations [`crate::gateway::Gateway::pending_listing`]
/// shows.
pub struct Which<'a> {
    pub tenants: &'a crate::gateway::Tenants,
    /// Every status, not only `waiting`.
    pub all: bool,
    /// Only those this approver may approve.
    pub for_whom: Option<&'a str>,
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum PendingError {
    /// No pending operation with that hash (or one of another tenant, which a
    /// caller never sees).
    #[error("the store knows no pending operation `{hash}`")]
    #[diagnostic(
        code(ipc::approvals::unknown),
        help("approve only an operation a PENDING decision recorded: `ipc approvals list`")
    )]
    Unknown { hash: String },
    /// The operation expired (with its mandate): nothing can approve it.
    #[error("the operation `{hash}` expired at {at}")]
    #[diagnostic(
        code(ipc::approvals::expired),
        help("the agent must propose it again under a valid mandate")
    )]
    Expired { hash: String, at: String },
    /// The operation already executed; an approval would have nothing to do.
    #[error("the operation `{hash}` was already executed")]
    #[diagnostic(code(ipc::approvals::executed))]
    Executed { hash: String },
    /// The operation was declined, for good: it is no longer approvable.
    #[error("the operation `{hash}` was declined by `{by}`")]
    #[diagnostic(
        code(ipc::approvals::declined),
        help("a declined operation is refused for good: the agent must propose another")
    )]
    Declined { hash: String, by: String },
    /// Who signs may not approve or decline this operation: not its mandate's
    /// user, nor a second person the world declares for its owner (and role).
    #[error("`{who}` may not approve or decline the operation `{hash}`")]
    #[diagnostic(
        code(ipc::approvals::not_approver),
        help(
            "only the mandate's user, and for four eyes a second approver the world declares for the owner (and role), may act on it"
        )
    )]
    NotApprover { who: String, hash: String },
    /// A submitted approval that cannot count: an unknown approver, a bad
    /// signature, another operation's hash, expired.
    #[error("the approval cannot be accepted: {reason}")]
    #[diagnostic(code(ipc::approvals::invalid))]
    Invalid { reason: String },
    /// Not signable as shown: a value too long to show, or shown values
    /// that do not hash to the operation.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Render(crate::gateway::render::RenderError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Clock(#[from] crate::gateway::ClockError),
}

impl crate::gateway::Gateway {
    /// The pending operation under `hash`, if it can still be approved:
    /// known to the store, not expired, not executed.
    pub fn pending_op(&self, hash: &str) -> Result<PendingOp, PendingError> {
        if let Some(g) = self.op_shard(hash)? {
            return g.pending_op(hash);
        }
        let now = self.now()?;
        let mut found: Option<(PendingOp, bool)> = None;
        self.store.transaction(&mut |tx| {
            found = match get(tx, hash)? {
                Some(op) => {
                    let executed = tx.executed(hash)?.is_some();
                    Some((op, executed))
                }
                None => None,
            };
            Ok(Value::Null)
        })?;
        match found {
            None => Err(PendingError::Unknown { hash: hash.into() }),
            Some((_, true)) => Err(PendingError::Executed { hash: hash.into() }),
            Some((op, _)) if op.expired(now) => Err(PendingError::Expired {
                hash: hash.into(),
                at: crate::base::json::format_time(op.expires_at),
            }),
            Some((op, _)) => Ok(op),
        }
    }

    /// Every recorded operation with whether it was executed, oldest first.
    pub fn pending_ops(&self) -> Result<Vec<(PendingOp, bool)>, StoreError> {
        self.pending_ops_of(&crate::gateway::Tenants::All)
    }

    /// The recorded operations of `tenants`, with whether each executed.
    pub fn pending_ops_of(
        &self,
        tenants: &crate::gateway::Tenants,
    ) -> Result<Vec<(PendingOp, bool)>, StoreError> {
        if let Some(set) = self.shard_set() {
            let mut all = vec![];
            for s in &set.shards {
                all.append(&mut s.gw.pending_ops_of(tenants)?);
            }
            return Ok(all);
        }
        let mut out = vec![];
        self.store.transaction(&mut |tx| {
            out.clear();
            for op in of(tx, tenants)? {
                let executed = tx.executed(&op.operation_hash)?.is_some();
                out.push((op, executed));
            }
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// The pending operations a listing shows, each with its status
    /// (`waiting`, `approved`, `executed`, `expired`, `declined`): those of
    /// `which.tenants`, only the waiting ones unless `which.all`, only
    /// those `which.for_whom` may approve when given. The one listing
    /// `ipc approvals list`, `GET /v1/approvals` and the approval page
    /// read; they differ only in how they ask and print.
    pub fn pending_listing(
        &self,
        which: &Which<'_>,
    ) -> Result<Vec<(PendingOp, &'static str)>, StoreError> {
        let now = self.now()?;
        Ok(self
            .pending_ops_of(which.tenants)?
            .into_iter()
            .map(|(op, executed)| {
                let status = op.status(executed, now);
                (op, status)
            })
            .filter(|(_, s)| which.all || *s == "waiting")
            .filter(|(op, _)| {
                which
                    .for_whom
                    .is_none_or(|w| op.approvable_by(&self.world, w))
            })
            .collect())
    }

    /// `approvals` without those whose nonce an execution used up (a
    /// read's approval, once the read ran: it counts for nothing any
    /// more). On a store error all are kept: the decision checks each
    /// again, and counts none twice.
    pub fn unused_approvals(&self, approvals: Vec<Value>) -> Vec<Value> {
        let mut used: Vec<bool> = vec![];
        let read = self.store.transaction(&mut |tx| {
            used.clear();
            for a in &approvals {
                let nonce = a["approval"]["nonce"].as_str().unwrap_or_default();
                used.push(!nonce.is_empty() && tx.nonce_used(nonce)?);
            }
            Ok(Value::Null)
        });
        if read.is_err() {
            return approvals;
        }
        approvals
            .into_iter()
            .zip(used)
            .filter_map(|(a, used)| (!used).then_some(a))
            .collect()
    }

    /// Stores a signed approval for the pending operation it names, with a
    /// receipt: checked now (a known approver, a valid signature, a known
    /// and approvable operation, not expired) and again, like any
    /// approval, when the operation is proposed again. The same signed
    /// approval submitted again (a client's retry) writes nothing: it is
    /// answered with its first receipt, `already`.
    pub fn submit_approval(
        &self,
        signed: &crate::gateway::approval::SignedApproval,
    ) -> Result<Submitted, PendingError> {
        let ap = &signed.approval;
        let hash = ap.operation_hash.clone();
        if let Some(g) = self.op_shard(&hash)? {
            return g.submit_approval(signed);
        }
        let op = self.pending_op(&hash)?;
        if let Some(by) = op.declined_at(self.now()?) {
            return Err(PendingError::Declined {
                hash,
                by: by.to_string(),
            });
        }
        self.check_signed(&op, &ap.approver, ap, &signed.signature, ap.expires_at)?;
        // what the approver was shown must hash to what they signed (the
        // page and `ipc approve --submit` show this same rendering)
        crate::gateway::render::checked(self, &op)?;
        let invalid = |reason: String| PendingError::Invalid { reason };
        let value = serde_json::to_value(signed).map_err(|e| invalid(e.to_string()))?;
        let now = self.now()?;
        let mut taken: Option<Submitted> = None;
        self.store.transaction(&mut |tx| {
            taken = None;
            let Some(mut op) = get(tx, &hash)? else {
                return Err(StoreError::Aborted(format!(
                    "no pending operation `{hash}`"
                )));
            };
            // a tenant being moved (or moved) is changed on no shard here
            if let Some(why) = self.holding.refusal(tx, &op.owner)? {
                return Err(StoreError::Aborted(why));
            }
            if op.approvals.contains(&value)
                && let Some(first) = op.approval_receipts.get(&signed.signature)
            {
                taken = Some(Submitted {
                    receipt: first.clone(),
                    already: true,
                });
                return Ok(Value::Null);
            }
            // an expired approval counts for nothing: dropped, so that it
            // never stands in the way of this one
            op.approvals.retain(|a| {
                a["approval"]["expires_at"]
                    .as_i64()
                    .is_some_and(|e| now < e)
            });
            let kept = &op.approvals;
            op.approval_receipts
                .retain(|sig, _| kept.iter().any(|a| a["signature"] == sig.as_str()));
            if !op.approvals.contains(&value) {
                op.approvals.push(value.clone());
            }
            let body = approval_receipt(&self.bundle_hash, &ap.approver, "approve", &op, now, None);
            let link = tx.append_receipt_jcs(&body)?;
            let receipt = crate::gateway::ReceiptRef {
                seq: link.seq,
                hash: link.hash,
            };
            op.approval_receipts
                .insert(signed.signature.clone(), receipt.clone());
            let v = serde_json::to_value(&op).map_err(|e| StoreError::Aborted(e.to_string()))?;
            tx.state_put(NS, &hash, &v)?;
            taken = Some(Submitted {
                receipt,
                already: false,
            });
            Ok(Value::Null)
        })?;
        taken.ok_or_else(|| {
            PendingError::Store(StoreError::Aborted("the approval left no receipt".into()))
        })
    }

    /// What an approval and a decline submitted by hash must pass: signed
    /// (`message`'s JCS) by the key of `who`, a known approver who may
    /// approve `op`, and not expired.
    fn check_signed<T: serde::Serialize>(
        &self,
        op: &PendingOp,
        who: &str,
        message: &T,
        signature: &str,
        expires_at: i64,
    ) -> Result<(), PendingError> {
        let invalid = |reason: String| PendingError::Invalid { reason };
        let approver = self.world.approvers.get(who).ok_or_else(|| {
            invalid(format!(
                "`{}` is not a known approver",
                crate::base::json::echo(who)
            ))
        })?;
        let msg = crate::canonical::to_jcs(message).map_err(|e| invalid(e.to_string()))?;
        approver
            .key
            .verify(msg.as_bytes(), signature)
            .map_err(|_| invalid(format!("the signature of `{who}` does not verify")))?;
        if !op.approvable_by(&self.world, who) {
            return Err(PendingError::NotApprover {
                who: who.into(),
                hash: op.operation_hash.clone(),
            });
        }
        if self.now()? >= expires_at {
            return Err(invalid(format!("the signature of `{who}` has expired")));
        }
        Ok(())
    }

    /// A signed decline (the approval page, `POST /v1/approvals/decline`):
    /// checked like a submitted approval, then recorded as [`Self::decline`]
    /// does.
    pub fn decline_signed(
        &self,
        signed: &crate::gateway::approval::SignedDecline,
    ) -> Result<crate::gateway::ReceiptRef, PendingError> {
        let d = &signed.decline;
        if let Some(g) = self.op_shard(&d.operation_hash)? {
            return g.decline_signed(signed);
        }
        let op = self.pending_op(&d.operation_hash)?;
        self.check_signed(&op, &d.approver, d, &signed.signature, d.expires_at)?;
        self.decline(&d.operation_hash, &d.approver)
    }

    /// `who` declines the pending operation `hash` for good: recorded with
    /// a receipt in one transaction; the same operation proposed again is a
    /// DENY. Only someone who may approve it may decline it.
    pub fn decline(
        &self,
        hash: &str,
        who: &str,
    ) -> Result<crate::gateway::ReceiptRef, PendingError> {
        self.decline_until(hash, who, None)
    }

    /// [`Self::decline`], standing only until `until` (seconds since the
    /// epoch) when given: from then on the same operation is PENDING again,
    /// to be asked again (the MCP proxy's declined step-up).
    pub fn decline_until(
        &self,
        hash: &str,
        who: &str,
        until: Option<i64>,
    ) -> Result<crate::gateway::ReceiptRef, PendingError> {
        if let Some(g) = self.op_shard(hash)? {
            return g.decline_until(hash, who, until);
        }
        let op = self.pending_op(hash)?;
        if !op.approvable_by(&self.world, who) {
            return Err(PendingError::NotApprover {
                who: crate::base::json::echo(who),
                hash: hash.into(),
            });
        }
        let now = self.now()?;
        Ok(self.with_receipt(&mut |tx| {
            if let Some(why) = self.holding.refusal(tx, &op.owner)? {
                return Err(StoreError::Aborted(why));
            }
            let Some(op) = decline(tx, hash, who, until, now)? else {
                return Err(StoreError::Aborted(format!(
                    "no pending operation `{hash}`"
                )));
            };
            Ok(approval_receipt(
                &self.bundle_hash,
                who,
                "decline",
                &op,
                now,
                until,
            ))
        })?)
    }
}

impl From<crate::gateway::render::RenderError> for PendingError {
    fn from(e: crate::gateway::render::RenderError) -> Self {
        match e {
            crate::gateway::render::RenderError::Store(s) => PendingError::Store(s),
            other => PendingError::Render(other),
        }
    }
}

/// The receipt of an approver's act on a pending operation; `owner` is the
/// operation's tenant (whose callers may read the receipt), `until` when a
/// decline with an end lapses.
fn approval_receipt(
    bundle: &str,
    by: &str,
    change: &str,
    op: &PendingOp,
    now: i64,
    until: Option<i64>,
) -> crate::canonical::Jcs {
    let mut w = crate::canonical::ObjectWriter::new();
    w.str("bundle", bundle)
        .str("by", by)
        .str("change", change)
        .str("kind", "approval")
        .str("operation_hash", &op.operation_hash)
        .str("owner", &op.owner)
        .str("time", &crate::base::json::format_time(now));
    if let Some(u) = until {
        w.str("until", &crate::base::json::format_time(u));
    }
    w.finish()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::gateway::Outcome;
    use crate::gateway::testkit::{MandateSpec, TestWorld, decide, now};
    use serde_json::json;

    /// A step-up transfer of `amount` under Emma's bank mandate: PENDING.
    fn pending(gw: &crate::gateway::Gateway, m: &serde_json::Value, amount: &str) -> String {
        let p = crate::gateway::testkit::transfer("DE44 5001 0517 5407 3249 31", json!(amount));
        let d = decide(gw, p, m);
        assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
        d.operation_hash.unwrap()
    }

    /// A decline with an end is a DENY (declined by the user) until then,
    /// and PENDING again from then on; one for good stays; a standing one
    /// is never shortened by a later one with an earlier end.
    #[test]
    fn a_decline_stands_until_its_end_or_for_good() {
        let w = TestWorld::new();
        let gw = w.gateway();
        let m = w.mandate(MandateSpec::bank("emma"));
        let again = |amount: &str| {
            let p = crate::gateway::testkit::transfer("DE44 5001 0517 5407 3249 31", json!(amount));
            decide(&gw, p, &m)
        };
        // standing: now < until
        let op = pending(&gw, &m, "1500.00");
        gw.decline_until(&op, "emma", Some(now() + 60)).unwrap();
        let d = again("1500.00");
        assert_eq!(d.decision, Outcome::Deny);
        assert_eq!(
            d.reason.as_deref(),
            Some("declined by the user: `emma` declined this operation")
        );
        assert!(d.hint.as_deref().unwrap().contains("stands until"), "{d:?}");
        let op_now = gw.pending_op(&op).unwrap();
        assert_eq!(op_now.status(false, now()), "declined");
        // a later decline with an earlier end keeps the later end
        gw.decline_until(&op, "emma", Some(now() + 1)).unwrap();
        assert_eq!(gw.pending_op(&op).unwrap().declined_until, Some(now() + 60));
        // lapsed: until <= now, asked again
        let op2 = pending(&gw, &m, "1600.00");
        gw.decline_until(&op2, "emma", Some(now())).unwrap();
        let d = again("1600.00");
        assert_eq!(d.decision, Outcome::Pending, "{d:?}");
        assert_eq!(gw.pending_op(&op2).unwrap().status(false, now()), "waiting");
        // a lapsed decline is replaced by the next one, even a shorter one
        gw.decline_until(&op2, "emma", Some(now() + 5)).unwrap();
        assert_eq!(again("1600.00").decision, Outcome::Deny);
        // for good: no end, and it stays so under a later bounded one
        let op3 = pending(&gw, &m, "1700.00");
        gw.decline(&op3, "emma").unwrap();
        gw.decline_until(&op3, "emma", Some(now() + 5)).unwrap();
        let p3 = gw.pending_op(&op3).unwrap();
        assert_eq!(p3.declined_until, None);
        assert_eq!(p3.declined_at(i64::MAX), Some("emma"));
        let d = again("1700.00");
        assert_eq!(d.decision, Outcome::Deny);
        assert!(d.hint.as_deref().unwrap().contains("ask them"), "{d:?}");
    }

    /// The same signed approval submitted twice (a retry) is recorded
    /// once: the second answer is the first receipt, marked `already`,
    /// and the chain does not grow. Another signed approval (a fresh
    /// nonce) is a new act, with its receipt.
    #[test]
    fn the_same_signed_approval_submitted_twice_is_recorded_once() {
        use crate::gateway::approval::SignedApproval;
        let w = TestWorld::new();
        let gw = w.gateway();
        let m = w.mandate(MandateSpec::bank("emma"));
        let op = pending(&gw, &m, "1500.00");
        let signed: SignedApproval = serde_json::from_value(w.approve("emma", &op)).unwrap();
        let first = gw.submit_approval(&signed).unwrap();
        assert!(!first.already);
        let chain = gw.store().receipts().unwrap().len();
        let again = gw.submit_approval(&signed).unwrap();
        assert!(again.already, "{again:?}");
        assert_eq!(again.receipt, first.receipt);
        assert_eq!(gw.store().receipts().unwrap().len(), chain);
        assert_eq!(gw.pending_op(&op).unwrap().approvals.len(), 1);
        let fresh: SignedApproval = serde_json::from_value(w.approve("emma", &op)).unwrap();
        let other = gw.submit_approval(&fresh).unwrap();
        assert!(!other.already);
        assert_eq!(other.receipt.seq, first.receipt.seq + 1);
        assert_eq!(gw.store().receipts().unwrap().len(), chain + 1);
    }
}
