//! Stage 7, approval: a level above 0 needs people. The operation hash binds
//! an approval to the exact operation (mandate, bundle, action, resolved
//! values); each approval is checked for signature, hash, expiry, single
//! use (a read's used approval counts for nothing: each execution of a
//! read is approved anew) and approver. Step-up (1) is the mandate's user;
//! four eyes (2) is the user and a different person, with a different key,
//! whom the world authorises for the mandate's owner (and for the role a
//! `four_eyes ... by ROLE` rule names). Not enough: PENDING with the hash.

use super::{Run, StageResult, Stop};
use crate::canonical::to_jcs;
use crate::gateway::approval::SignedApproval;
use crate::gateway::{Deny, Stage};

fn deny(reason: String) -> Deny {
    Deny::new(Stage::Approval, reason)
}

/// `sha256:` over the canonical encoding of what is about to execute.
pub(crate) fn operation_hash(r: &Run<'_>) -> Result<String, Deny> {
    let (Some(a), Some(m)) = (r.action, r.mandate.as_ref()) else {
        return Err(deny("no action".into()));
    };
    crate::gateway::operation_hash(&m.id, &r.gw.bundle_hash, &a.table.action.name, &r.resolved)
        .map_err(|e| deny(e.to_string()))
}

/// The roles the rules demanding four eyes name (among the policies that
/// matched): the second approver must hold each of them.
pub(crate) fn four_eyes_roles(a: &crate::gateway::ActionRt, policies: &[String]) -> Vec<String> {
    let mut roles: Vec<String> = policies
        .iter()
        .filter_map(|id| a.table.rule_of(id))
        .filter(|rule| rule.kind.level() == 2)
        .filter_map(|rule| rule.role.clone())
        .collect();
    roles.sort_unstable();
    roles.dedup();
    roles
}

pub(super) fn run(r: &mut Run<'_>) -> StageResult {
    let op = match &r.operation_hash {
        Some(h) => h.clone(),
        None => {
            let h = operation_hash(r)?;
            r.operation_hash = Some(h.clone());
            h
        }
    };
    let Some(m) = r.mandate.clone() else {
        return Err(deny("no mandate".into()).into());
    };
    // an operation an approver declined is refused, not asked again, while
    // the decline stands (only an operation that needs approval can have
    // been declined)
    // and the approvals submitted to the store for it (by hash, from the
    // trusted side) count like those the caller brings
    let pending = if r.level > 0 {
        crate::gateway::pending::get(r.tx, &op)?
    } else {
        None
    };
    if let Some(p) = &pending
        && let Some(who) = p.declined_at(r.now)
    {
        return Err(crate::gateway::pending::declined(who, &m.user, p.declined_until).into());
    }
    let stored: &[serde_json::Value] = pending.as_ref().map_or(&[], |p| &p.approvals);
    let Some(a) = r.action else {
        return Err(deny("no action".into()).into());
    };
    let roles = four_eyes_roles(a, &r.policies);
    let mut user_ok = false;
    let mut other: Option<String> = None;
    // the user's key id (a hash of the key), computed at the first
    // approval by another person, once
    let mut user_key: Option<Option<String>> = None;
    // an expired approval counts for nothing and never stands in the way of
    // a valid one: one kept in the store is passed over, one the caller
    // brings is refused only if the valid ones are not enough
    let mut expired: Option<String> = None;
    let brought = r.input.approvals.len();
    for (i, raw) in r.input.approvals.iter().chain(stored).enumerate() {
        let sa: SignedApproval = serde_json::from_value(raw.clone()).map_err(|e| {
            deny(format!(
                "malformed approval: {}",
                e.to_string().to_lowercase()
            ))
        })?;
        let ap = &sa.approval;
        if i >= brought && r.now >= ap.expires_at {
            continue;
        }
        let Some(approver) = r.gw.world.approvers.get(&ap.approver) else {
            return Err(deny(format!(
                "`{}` is not a known approver",
                crate::base::json::echo(&ap.approver)
            ))
            .into());
        };
        let msg = to_jcs(ap).map_err(|e| deny(e.to_string()))?;
        approver
            .key
            .verify(msg.as_bytes(), &sa.signature)
            .map_err(|_| {
                deny(format!(
                    "invalid signature on the approval by `{}`",
                    ap.approver
                ))
            })?;
        if ap.operation_hash != op {
            return Err(deny(format!(
                "the approval by `{}` is for another operation",
                ap.approver
            ))
            .hint(Some(format!("approve the operation `{op}`")))
            .into());
        }
        if r.now >= ap.expires_at {
            expired.get_or_insert_with(|| ap.approver.clone());
            continue;
        }
        if r.tx.nonce_used(&ap.nonce)? || r.nonces.contains(&ap.nonce) {
            // a read's approval was for one execution, which used it: it
            // counts for nothing now, and the read is asked again (a
            // write's is never asked again: executed, it is answered from
            // the store before this stage)
            if r.effect == crate::gateway::Effect::Read {
                continue;
            }
            return Err(deny(format!(
                "the approval by `{}` was already used",
                ap.approver
            ))
            .into());
        }
        r.nonces.push(ap.nonce.clone());
        if ap.approver == m.user {
            user_ok = true;
        } else if r.level >= 2 {
            // a second pair of eyes: another person of this tenant (below
            // four eyes, anyone else's approval counts for nothing)
            let gw = r.gw;
            let user_key =
                user_key.get_or_insert_with(|| gw.world.approvers.get(&m.user).map(|u| u.key.id()));
            if user_key.as_deref() == Some(approver.key.id().as_str()) {
                return Err(deny(format!(
                    "the approval by `{}` is signed with the user's own key",
                    ap.approver
                ))
                .into());
            }
            let allowed = approver.may_approve_for(&m.owner, None)
                && roles
                    .iter()
                    .all(|role| approver.may_approve_for(&m.owner, Some(role)));
            if !allowed {
                let as_role = if roles.is_empty() {
                    String::new()
                } else {
                    format!(" as `{}`", roles.join("` and `"))
                };
                return Err(deny(format!(
                    "`{}` may not approve for `{}`{as_role}",
                    ap.approver, m.owner
                ))
                .hint(Some(format!(
                    "the second approver must be declared for the owner `{}`{as_role} in the world's `[approvers]`",
                    m.owner
                )))
                .into());
            }
            if other.is_none() {
                other = Some(ap.approver.clone());
            }
        }
        if !r.approvers.contains(&ap.approver) {
            r.approvers.push(ap.approver.clone());
        }
    }
    let granted = match (user_ok, &other) {
        (true, Some(_)) => 2,
        (true, None) => 1,
        _ => 0,
    };
    if granted >= r.level {
        return Ok(());
    }
    if let Some(who) = expired {
        return Err(deny(format!("the approval by `{who}` has expired"))
            .hint(Some(format!("approve the operation `{op}` again")))
            .into());
    }
    let level = r.level;
    let why: Vec<String> = r
        .policies
        .iter()
        .filter_map(|id| a.table.rule_of(id))
        .filter(|rule| rule.kind.level() > 0)
        .map(|rule| rule.reason.clone())
        .collect();
    let second = match roles.as_slice() {
        [] => format!("a second person of `{}`", m.owner),
        rs => format!(
            "a second person of `{}` with the role {}",
            m.owner,
            rs.iter()
                .map(|r| format!("`{r}`"))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    };
    let approve_by = match (level, user_ok) {
        (1, _) => format!("the user `{}`", m.user),
        (_, true) => format!("{second} besides `{}`", m.user),
        _ => format!("the user `{}` and {second}", m.user),
    };
    Err(Stop::Pending {
        reason: format!(
            "needs approval level {level} ({})",
            if why.is_empty() {
                "policy".to_string()
            } else {
                why.join("; ")
            }
        ),
        approve_by,
    })
}

#[cfg(test)]
#[path = "tests/approval.rs"]
mod tests;
