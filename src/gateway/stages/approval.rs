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
use crate::gateway::world::Approver;
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
    let pending = pending(r, &op, &m)?;
    let stored: &[serde_json::Value] = pending.as_ref().map_or(&[], |p| &p.approvals);
    let Some(a) = r.action else {
        return Err(deny("no action".into()).into());
    };
    let roles = four_eyes_roles(a, &r.policies);
    let mut tally = Tally::default();
    let input = r.input;
    let brought = input.approvals.len();
    for (i, raw) in input.approvals.iter().chain(stored).enumerate() {
        let seen = Seen {
            op: &op,
            mandate: &m,
            roles: &roles,
            stored: i >= brought,
        };
        count(r, &seen, &mut tally, raw)?;
    }
    if tally.granted() >= r.level {
        return Ok(());
    }
    if let Some(who) = tally.expired {
        return Err(deny(format!("the approval by `{who}` has expired"))
            .hint(Some(format!("approve the operation `{op}` again")))
            .into());
    }
    Err(not_enough(r, a, &m, &roles, tally.user_ok))
}

/// The operation's pending record, if it needs approval: an operation an
/// approver declined is refused, not asked again, while the decline stands
/// (only an operation that needs approval can have been declined); the
/// approvals submitted to the store for it (by hash, from the trusted side)
/// count like those the caller brings.
fn pending(
    r: &mut Run<'_>,
    op: &str,
    m: &crate::gateway::Mandate,
) -> Result<Option<crate::gateway::pending::PendingOp>, Stop> {
    let pending = if r.level > 0 {
        crate::gateway::pending::get(r.tx, op)?
    } else {
        None
    };
    if let Some(p) = &pending
        && let Some(who) = p.declined_at(r.now)
    {
        return Err(crate::gateway::pending::declined(who, &m.user, p.declined_until).into());
    }
    Ok(pending)
}

/// What the approvals counted so far grant.
#[derive(Default)]
struct Tally {
    /// The mandate's user approved.
    user_ok: bool,
    /// The first other person whose approval counts (four eyes).
    other: Option<String>,
    /// The user's key id (a hash of the key), computed at the first
    /// approval by another person, once.
    user_key: Option<Option<String>>,
    /// An expired approval counts for nothing and never stands in the way
    /// of a valid one: one kept in the store is passed over, one the caller
    /// brings is refused only if the valid ones are not enough.
    expired: Option<String>,
}

impl Tally {
    fn granted(&self) -> u8 {
        match (self.user_ok, &self.other) {
            (true, Some(_)) => 2,
            (true, None) => 1,
            _ => 0,
        }
    }
}

/// What an approval is checked against.
struct Seen<'s> {
    op: &'s str,
    mandate: &'s crate::gateway::Mandate,
    roles: &'s [String],
    /// Kept in the store (not brought by the caller).
    stored: bool,
}

/// Checks one approval and counts it in `tally`.
fn count(
    r: &mut Run<'_>,
    seen: &Seen<'_>,
    tally: &mut Tally,
    raw: &serde_json::Value,
) -> Result<(), Stop> {
    let sa: SignedApproval = serde_json::from_value(raw.clone()).map_err(|e| {
        deny(format!(
            "malformed approval: {}",
            e.to_string().to_lowercase()
        ))
    })?;
    let ap = &sa.approval;
    if seen.stored && r.now >= ap.expires_at {
        return Ok(());
    }
    let approver = verified(r.gw, &sa, seen.op)?;
    if r.now >= ap.expires_at {
        tally.expired.get_or_insert_with(|| ap.approver.clone());
        return Ok(());
    }
    if r.tx.nonce_used(&r.key(&ap.nonce))? || r.nonces.contains(&ap.nonce) {
        // a read's approval was for one execution, which used it: it
        // counts for nothing now, and the read is asked again (a
        // write's is never asked again: executed, it is answered from
        // the store before this stage)
        if r.effect == crate::gateway::Effect::Read {
            return Ok(());
        }
        return Err(deny(format!(
            "the approval by `{}` was already used",
            ap.approver
        ))
        .into());
    }
    r.nonces.push(ap.nonce.clone());
    if ap.approver == seen.mandate.user {
        tally.user_ok = true;
    } else if r.level >= 2 {
        // a second pair of eyes: another person of this tenant (below
        // four eyes, anyone else's approval counts for nothing)
        second_eyes(r.gw, seen, tally, &ap.approver, approver)?;
        if tally.other.is_none() {
            tally.other = Some(ap.approver.clone());
        }
    }
    if !r.approvers.contains(&ap.approver) {
        r.approvers.push(ap.approver.clone());
    }
    Ok(())
}

/// The approval's approver, known to the world, whose signature it bears,
/// for the operation `op`.
fn verified<'g>(
    gw: &'g crate::gateway::Gateway,
    sa: &SignedApproval,
    op: &str,
) -> Result<&'g Approver, Stop> {
    let ap = &sa.approval;
    let Some(approver) = gw.world.approvers.get(&ap.approver) else {
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
    Ok(approver)
}

/// Refuses a second approver who signs with the user's own key, or whom
/// the world does not authorise for the mandate's owner (and the roles).
fn second_eyes(
    gw: &crate::gateway::Gateway,
    seen: &Seen<'_>,
    tally: &mut Tally,
    name: &str,
    approver: &Approver,
) -> Result<(), Stop> {
    let m = seen.mandate;
    let user_key = tally
        .user_key
        .get_or_insert_with(|| gw.world.approvers.get(&m.user).map(|u| u.key.id()));
    if user_key.as_deref() == Some(approver.key.id().as_str()) {
        return Err(deny(format!(
            "the approval by `{name}` is signed with the user's own key"
        ))
        .into());
    }
    let allowed = approver.may_approve_for(&m.owner, None)
        && seen
            .roles
            .iter()
            .all(|role| approver.may_approve_for(&m.owner, Some(role)));
    if !allowed {
        let as_role = if seen.roles.is_empty() {
            String::new()
        } else {
            format!(" as `{}`", seen.roles.join("` and `"))
        };
        return Err(deny(format!(
            "`{name}` may not approve for `{}`{as_role}",
            m.owner
        ))
        .hint(Some(format!(
            "the second approver must be declared for the owner `{}`{as_role} in the world's `[approvers]`",
            m.owner
        )))
        .into());
    }
    Ok(())
}

/// PENDING: the level needed, the rules that ask for it, and who must
/// approve.
fn not_enough(
    r: &Run<'_>,
    a: &crate::gateway::ActionRt,
    m: &crate::gateway::Mandate,
    roles: &[String],
    user_ok: bool,
) -> Stop {
    let level = r.level;
    let why: Vec<String> = r
        .policies
        .iter()
        .filter_map(|id| a.table.rule_of(id))
        .filter(|rule| rule.kind.level() > 0)
        .map(|rule| rule.reason.clone())
        .collect();
    let second = match roles {
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
    Stop::Pending {
        reason: format!(
            "needs approval level {level} ({})",
            if why.is_empty() {
                "policy".to_string()
            } else {
                why.join("; ")
            }
        ),
        approve_by,
    }
}

#[cfg(test)]
#[path = "tests/approval.rs"]
mod tests;
