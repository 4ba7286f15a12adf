//! Pending operations: what an approver is asked to sign, as the gateway
//! resolved it — never the agent's copy. A PENDING decision records the
//! operation in the store, in its own transaction with its receipt: the
//! action, every resolved value with its origin, which values are new to
//! the owner (vouched for only by the request, not by the owner's records),
//! the level, who must approve, and until when (the mandate's expiry).
//! `ipc approvals list|show` read it, `ipc approve --operation H` shows it
//! before signing and refuses a hash the store does not know or that has
//! expired, and `ipc approve --decline` records a refusal: the same
//! operation proposed again is then a DENY. A decline stands for good,
//! except one given with an end ([`crate::gateway::Gateway::decline_until`]: the user's
//! "no" to a step-up asked through the MCP client), after which the
//! operation may be asked again.

use crate::store::{StoreError, Tx};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

pub(super) const NS: &str = "pending";
/// The listing's bounds (see [`super::listing`]): past them an operation
/// leaves the listing but stays approvable by its hash.
pub use super::listing::{MAX_PER_MANDATE, MAX_PER_TENANT};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingOp {
    pub operation_hash: String,
    pub pack: String,
    pub action: String,
    pub mandate: String,
    pub user: String,
    pub owner: String,
    /// The trusted values, as they would execute (secrets as commitments).
    pub resolved: Map<String, Value>,
    pub origins: Map<String, Value>,
    /// Parameters whose value only the request vouches for (a payee the
    /// user named but never paid): what an approver should look at first.
    pub new_values: Vec<String>,
    pub level: u8,
    /// Why approval is needed (the rules' reasons) and the policies.
    pub reason: String,
    pub policies: Vec<String>,
    pub approve_by: String,
    /// The roles the second approver must hold (`four_eyes ... by ROLE`).
    #[serde(default)]
    pub roles: Vec<String>,
    /// Seconds since the epoch: created, and no longer approvable after.
    pub created_at: i64,
    pub expires_at: i64,
    /// Who declined it, if anyone did.
    #[serde(default)]
    pub declined_by: Vec<String>,
    /// Until when the decline stands (seconds since the epoch); `None`: for
    /// good. See [`PendingOp::declined_at`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declined_until: Option<i64>,
    /// Signed approvals submitted for it by hash (`ipc approve --submit`,
    /// the approval page): the gateway counts them when the operation is
    /// proposed again, so the approver never needs the agent's copy.
    #[serde(default)]
    pub approvals: Vec<Value>,
    /// The receipt of each approval in `approvals`, by its signature: the
    /// same signed approval submitted again is answered with its first
    /// receipt, and writes none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approval_receipts: BTreeMap<String, crate::gateway::ReceiptRef>,
}

/// How a signed approval submitted by hash was taken
/// ([`crate::gateway::Gateway::submit_approval`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Submitted {
    /// The receipt that records it: written now, or, when `already`, the
    /// one written when it was first submitted.
    pub receipt: crate::gateway::ReceiptRef,
    /// This very signed approval had been submitted before: nothing was
    /// written again.
    pub already: bool,
}

impl PendingOp {
    pub fn expired(&self, now: i64) -> bool {
        now >= self.expires_at
    }

    /// Who declined it, if a decline stands at `now`: one without an end
    /// always, one with an end (`declined_until`) until then.
    pub fn declined_at(&self, now: i64) -> Option<&str> {
        match self.declined_until {
            Some(until) if now >= until => None,
            _ => self.declined_by.first().map(String::as_str),
        }
    }

    /// `waiting`, `executed`, `declined` or `expired`.
    pub fn status(&self, executed: bool, now: i64) -> &'static str {
        if executed {
            "executed"
        } else if self.declined_at(now).is_some() {
            "declined"
        } else if self.expired(now) {
            "expired"
        } else {
            "waiting"
        }
    }

    /// Whether `who` may approve it: its user, or, for four eyes, a second
    /// person the world authorises for its owner and every role the rules
    /// name (what the approval stage demands when the approvals count).
    pub fn approvable_by(&self, world: &crate::gateway::world::World, who: &str) -> bool {
        who == self.user
            || (self.level >= 2
                && world.approvers.get(who).is_some_and(|a| {
                    a.may_approve_for(&self.owner, None)
                        && self
                            .roles
                            .iter()
                            .all(|r| a.may_approve_for(&self.owner, Some(r)))
                }))
    }

    /// The names of those whose signed approvals were submitted for it
    /// and still count at `now` (not expired).
    pub fn approved_by(&self, now: i64) -> Vec<String> {
        self.submitted(|exp| now < exp)
    }

    /// The names of those whose submitted approvals expired at `now`
    /// (and who gave no valid one since): they count for nothing.
    pub fn expired_approvals(&self, now: i64) -> Vec<String> {
        let valid = self.approved_by(now);
        let mut names = self.submitted(|exp| now >= exp);
        names.retain(|n| !valid.contains(n));
        names
    }

    fn submitted(&self, keep: impl Fn(i64) -> bool) -> Vec<String> {
        let mut names: Vec<String> = vec![];
        for a in &self.approvals {
            let ap = &a["approval"];
            if let (Some(who), Some(exp)) = (ap["approver"].as_str(), ap["expires_at"].as_i64())
                && keep(exp)
                && !names.iter().any(|n| n == who)
            {
                names.push(who.to_string());
            }
        }
        names
    }
}

/// The DENY of an operation whose decline stands: by the mandate's user
/// (the step-up refused) or by another approver; until `until`, or for good.
pub fn declined(who: &str, user: &str, until: Option<i64>) -> crate::gateway::Deny {
    let reason = if who == user {
        format!("declined by the user: `{who}` declined this operation")
    } else {
        format!("`{who}` declined this operation")
    };
    let hint = match until {
        Some(t) => format!(
            "the decline stands until {}; the same operation may be asked again after that",
            crate::base::json::format_time(t)
        ),
        None => "the approver refused exactly this operation; ask them, or change it".into(),
    };
    crate::gateway::Deny::new(crate::gateway::Stage::Approval, reason).hint(Some(hint))
}

/// Records (or refreshes) a pending operation; `true` when it is new.
pub fn record(tx: &mut dyn Tx, op: &PendingOp) -> Result<bool, StoreError> {
    let previous = get(tx, &op.operation_hash)?;
    let new = previous.is_none();
    let mut op = op.clone();
    if let Some(p) = previous {
        op.declined_by = p.declined_by;
        op.declined_until = p.declined_until;
        op.approvals = p.approvals;
        op.approval_receipts = p.approval_receipts;
    } else {
        super::listing::add(tx, NS, &op.owner, &op.operation_hash, &op.mandate)?;
    }
    let v = serde_json::to_value(&op).map_err(|e| StoreError::Aborted(e.to_string()))?;
    tx.state_put(NS, &op.operation_hash, &v)?;
    Ok(new)
}

pub fn get(tx: &mut dyn Tx, hash: &str) -> Result<Option<PendingOp>, StoreError> {
    // the listing's keys are no operation hash
    if super::listing::is_listing_key(hash) {
        return Ok(None);
    }
    match tx.state_get(NS, hash)? {
        Some(v) if !v.is_null() => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("pending operation `{hash}`: {e}"))),
        _ => Ok(None),
    }
}

/// Every recorded operation in the listing, oldest first.
pub fn all(tx: &mut dyn Tx) -> Result<Vec<PendingOp>, StoreError> {
    of(tx, &crate::gateway::Tenants::All)
}

/// The recorded operations of `tenants` in the listing, oldest first:
/// only their indexes are read.
pub fn of(
    tx: &mut dyn Tx,
    tenants: &crate::gateway::Tenants,
) -> Result<Vec<PendingOp>, StoreError> {
    let mut out = vec![];
    for h in super::listing::keys(tx, NS, tenants)? {
        if let Some(op) = get(tx, &h)?
            && tenants.allows(&op.owner)
        {
            out.push(op);
        }
    }
    out.sort_by_key(|op| op.created_at);
    Ok(out)
}

/// Marks an operation declined by `who`, for good (`until` `None`) or
/// until `until`. A decline that still stands at `now` keeps standing at
/// least as long (one for good stays for good); one that lapsed is
/// replaced.
pub fn decline(
    tx: &mut dyn Tx,
    hash: &str,
    who: &str,
    until: Option<i64>,
    now: i64,
) -> Result<Option<PendingOp>, StoreError> {
    let Some(mut op) = get(tx, hash)? else {
        return Ok(None);
    };
    op.declined_until = match (op.declined_at(now).is_some(), op.declined_until, until) {
        (false, _, new) => new,
        (true, None, _) | (true, _, None) => None,
        (true, Some(old), Some(new)) => Some(old.max(new)),
    };
    if !op.declined_by.iter().any(|d| d == who) {
        op.declined_by.push(who.to_string());
    }
    let v = serde_json::to_value(&op).map_err(|e| StoreError::Aborted(e.to_string()))?;
    tx.state_put(NS, hash, &v)?;
    Ok(Some(op))
}
