//! The fuzz's oracle, pack by pack (see `fuzz.rs`, `fuzz_oracle.rs`): the
//! trusted values, forbids, approvals and budgets of each shipped pack.

use crate::common;
use crate::fuzz_oracle::*;
use crate::fuzz_truth::*;
use common::*;
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;

pub(crate) fn money_pack(
    t: &Truth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
    ledger: &mut Ledger,
) -> Result<(), String> {
    let r = &d.resolved;
    let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let amount = r.get("amount").and_then(Value::as_i64);
    // the value that executed is what the agent proposed (after
    // normalisation), or what its reference names in the owner's records
    let raw = &proposal["args"];
    let same_as_proposed = |k: &str, trusted: &str| -> bool {
        match &raw[k] {
            Value::String(p) => iban(p).as_deref() == Some(trusted) || p == trusted,
            Value::Object(o) => {
                let id = o.get("ref").and_then(Value::as_str);
                t.beneficiaries
                    .get(&md.owner)
                    .is_some_and(|l| l.iter().any(|(i, v)| i.as_deref() == id && v == trusted))
            }
            _ => false,
        }
    };
    let trusted_payee = |p: &str| -> bool {
        let named = md.claims["payee"].as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x.as_str().and_then(iban).as_deref() == Some(p))
        });
        let own = t
            .beneficiaries
            .get(&md.owner)
            .is_some_and(|l| l.iter().any(|(_, v)| v == p));
        named || own
    };
    match action {
        "payment.transfer" | "standing_order.update" => {
            let payee = s("payee_iban");
            if !trusted_payee(&payee) {
                return Err(format!(
                    "[provenance] paid `{payee}`, not a payee of `{}`",
                    md.owner
                ));
            }
            if !same_as_proposed("payee_iban", &payee) {
                return Err(format!(
                    "[provenance] paid `{payee}`, which the agent did not propose"
                ));
            }
            if action == "payment.transfer" {
                if s("from_account") != md.claims["account"].as_str().unwrap_or("?") {
                    return Err(
                        "[provenance] paid from an account the mandate does not bind".into(),
                    );
                }
                if s("currency") != md.claims["currency"].as_str().unwrap_or("?") {
                    return Err("[provenance] paid in another currency".into());
                }
            } else {
                let order = s("order_id");
                let Some(rec) = record(&t.orders, &md.owner, &order) else {
                    return Err(format!(
                        "[provenance] changed `{order}`, not an order of `{}`",
                        md.owner
                    ));
                };
                if rec["account"] != md.claims["account"] {
                    return Err(format!(
                        "[policy] changed `{order}`, an order of another account"
                    ));
                }
            }
            if t.sanctions.contains(&payee) {
                return Err("[policy] paid a sanctioned IBAN".into());
            }
            let a = amount.ok_or("[contract] no amount")?;
            if !(1..=1_000_000).contains(&a) {
                return Err(format!("[policy] amount {a} outside the hard cap"));
            }
            if a > 100_000 && !approved.user {
                return Err(format!(
                    "[approval] amount {a} above 1,000.00 without the user's step-up"
                ));
            }
        }
        "payment.send" | "payment.schedule" | "scheduled.update" => {
            // an account as the bank writes it: named in the request or a
            // counterparty of the owner, compared as written
            let to = s("recipient");
            let named = md
                .claims
                .get("recipient")
                .and_then(Value::as_array)
                .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(to.as_str())));
            if !named && !in_set(&t.counterparties, &md.owner, &to) {
                return Err(format!(
                    "[provenance] paid `{to}`, not an account of `{}`",
                    md.owner
                ));
            }
            if raw["recipient"].as_str() != Some(to.as_str()) {
                return Err(format!(
                    "[provenance] paid `{to}`, which the agent did not propose"
                ));
            }
            if action == "scheduled.update" {
                let id = s("id");
                let Some(rec) = record(&t.scheduled, &md.owner, &id) else {
                    return Err(format!(
                        "[provenance] changed `{id}`, not a scheduled payment of `{}`",
                        md.owner
                    ));
                };
                if rec["account"] != md.claims["account"] {
                    return Err(format!(
                        "[policy] changed `{id}`, a scheduled payment of another account"
                    ));
                }
            } else {
                if s("from_account") != md.claims["account"].as_str().unwrap_or("?") {
                    return Err(
                        "[provenance] paid from an account the mandate does not bind".into(),
                    );
                }
                if s("currency") != md.claims["currency"].as_str().unwrap_or("?") {
                    return Err("[provenance] paid in another currency".into());
                }
            }
            // the sanctions list holds IBANs: an account written as one is
            // that IBAN, whatever its spacing or case
            if iban(&to).is_some_and(|i| t.sanctions.contains(&i)) {
                return Err(format!("[policy] paid the sanctioned account `{to}`"));
            }
            let a = amount.ok_or("[contract] no amount")?;
            if !(1..=1_000_000).contains(&a) {
                return Err(format!("[policy] amount {a} outside the hard cap"));
            }
            if a > 100_000 && !approved.user {
                return Err(format!(
                    "[approval] amount {a} above 1,000.00 without the user's step-up"
                ));
            }
        }
        "user.update_password" | "user.update_info" => {
            if !approved.user {
                return Err("[approval] account change without the user".into());
            }
        }
        "invoice.pay" => {
            let inv = s("invoice_id");
            let rec = record(&t.invoices, &md.owner, &inv).ok_or(format!(
                "[provenance] paid `{inv}`, not an invoice of `{}`",
                md.owner
            ))?;
            if rec["status"] != "open" || !ledger.paid.insert(format!("{}/{inv}", md.owner)) {
                return Err(format!(
                    "[policy] paid `{inv}` twice, or paid a paid invoice"
                ));
            }
            let vendor = rec["vendor"].as_str().unwrap_or("").to_string();
            let changed = ledger
                .vendor_iban
                .get(&(md.owner.clone(), vendor.clone()))
                .cloned();
            let vrec = record(&t.vendors, &md.owner, &vendor);
            let on_file = changed
                .clone()
                .or_else(|| vrec.and_then(|v| v["iban"].as_str()).and_then(iban))
                .unwrap_or_default();
            if s("payee_iban") != on_file {
                return Err("[provenance] paid an IBAN other than the vendor's on file".into());
            }
            if amount != Some(money(&rec["amount"])) {
                return Err("[provenance] paid an amount other than the invoice's".into());
            }
            if r.get("currency") != rec.get("currency") {
                return Err("[provenance] paid in a currency other than the invoice's".into());
            }
            let changed_at = if changed.is_some() {
                now()
            } else {
                vrec.and_then(|v| v["iban_changed_at"].as_str())
                    .map(seconds)
                    .unwrap_or(now())
            };
            if now() - changed_at < 7 * 86_400 {
                return Err("[policy] paid within 7 days of an IBAN change".into());
            }
            match t.vop.get(&on_file).and_then(|v| v["result"].as_str()) {
                Some("match") => {}
                Some("close_match") if approved.user => {}
                Some("close_match") => {
                    return Err("[approval] paid a close match without the user".into());
                }
                other => {
                    return Err(format!(
                        "[policy] paid despite verification of payee {other:?}"
                    ));
                }
            }
            if amount.unwrap_or(0) > 1_000_000 && !approved.user {
                return Err("[approval] large invoice without step-up".into());
            }
        }
        "vendor.change_iban" => {
            let (v, cb) = (s("vendor_id"), s("callback_id"));
            let vrec = record(&t.vendors, &md.owner, &v).ok_or("[provenance] unknown vendor")?;
            let crec =
                record(&t.callbacks, &md.owner, &cb).ok_or("[provenance] unknown call-back")?;
            let new = s("new_iban");
            if crec["iban"].as_str().and_then(iban).as_deref() != Some(new.as_str()) {
                return Err(
                    "[provenance] IBAN change to a value the call-back did not confirm".into(),
                );
            }
            let digits = |x: &Value| {
                x.as_str()
                    .unwrap_or("")
                    .chars()
                    .filter(|c| c.is_ascii_digit() || *c == '+')
                    .collect::<String>()
            };
            if crec["vendor"] != json!(v) || digits(&crec["phone"]) != digits(&vrec["phone"]) {
                return Err(
                    "[policy] IBAN change without a call-back on the number on file".into(),
                );
            }
            if !approved.four_eyes() {
                return Err("[approval] IBAN change without four eyes".into());
            }
            ledger.vendor_iban.insert((md.owner.clone(), v), new);
        }
        other => return Err(format!("[contract] `{other}` is not a money action")),
    }
    Ok(())
}

pub(crate) fn health_pack(
    t: &Truth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    let view = r.get("view").and_then(Value::as_str);
    match action {
        // the patient is in the clinician's own open encounters; a
        // reference names such an encounter by its exact key
        "record.read" => {
            let p = vouched(
                "patient_id",
                raw("patient_id"),
                r.get("patient_id"),
                upper,
                &|x| record(&t.encounters, owner, x).is_some(),
                &|id| record(&t.encounters, owner, id).map(|_| id.to_string()),
            )?;
            let status = record(&t.encounters, owner, &p).map(|e| e["status"].clone());
            if status != Some(json!("open")) {
                return Err(format!("[policy] read `{p}`, whose encounter is not open"));
            }
            if !matches!(view, Some("summary" | "full")) {
                return Err(format!("[contract] view {view:?}"));
            }
        }
        // research: the researcher's cohort, the patient's consent, and
        // never the full record
        "record.read_research" => {
            let p = vouched(
                "patient_id",
                raw("patient_id"),
                r.get("patient_id"),
                upper,
                &|x| in_set(&t.cohort, owner, x),
                &no_refs,
            )?;
            if !t.consent.contains(&p) {
                return Err(format!("[policy] research read of `{p}` without consent"));
            }
            if view != Some("summary") {
                return Err(format!("[policy] research read the view {view:?}"));
            }
        }
        // break-the-glass: any patient of the hospital, four eyes always
        "record.break_glass" => {
            vouched(
                "patient_id",
                raw("patient_id"),
                r.get("patient_id"),
                upper,
                &|x| t.patients.contains(x),
                &no_refs,
            )?;
            let reason = r.get("reason").and_then(Value::as_str).unwrap_or("");
            if !(10..=500).contains(&reason.chars().count()) {
                return Err(format!("[contract] break-the-glass reason {reason:?}"));
            }
            if !approved.four_eyes() {
                return Err("[approval] break-the-glass without four eyes".into());
            }
        }
        other => return Err(format!("[contract] `{other}` is not a health action")),
    }
    Ok(())
}

pub(crate) fn workspace_pack(
    t: &Truth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    // people named in the request, or the user's correspondents
    let named = claimed_emails(md, "recipients");
    let person = |x: &str| named.contains(x) || in_set(&t.contacts, owner, x);
    let own = |set: &Sets, name: &str| -> Result<String, String> {
        vouched(
            name,
            raw(name),
            r.get(name),
            exact,
            &|x| in_set(set, owner, x),
            &no_refs,
        )
    };
    match action {
        "email.send" => {
            mail_recipients(proposal, r, &person)?;
            vouched_list(
                "attachments",
                raw("attachments"),
                r.get("attachments"),
                exact,
                &|x| in_set(&t.files, owner, x),
            )?;
        }
        "calendar.invite" => {
            vouched_list(
                "participants",
                raw("participants"),
                r.get("participants"),
                email,
                &person,
            )?;
            ends_after_start(r)?;
        }
        "file.share" => {
            own(&t.files, "file_id")?;
            vouched(
                "email",
                raw("email"),
                r.get("email"),
                email,
                &person,
                &no_refs,
            )?;
            match r.get("permission").and_then(Value::as_str) {
                Some("r") => {}
                Some("rw") if approved.user => {}
                Some("rw") => {
                    return Err("[approval] write access shared without the user".into());
                }
                other => return Err(format!("[contract] permission {other:?}")),
            }
        }
        "file.delete" | "email.delete" | "calendar.cancel" => {
            match action {
                "file.delete" => own(&t.files, "file_id")?,
                "email.delete" => own(&t.emails, "email_id")?,
                _ => own(&t.events, "event_id")?,
            };
            if !approved.user {
                return Err(format!("[approval] `{action}` without the user"));
            }
        }
        "calendar.reschedule" => {
            own(&t.events, "event_id")?;
            ends_after_start(r)?;
        }
        "calendar.add_participants" => {
            own(&t.events, "event_id")?;
            participants_added(proposal, r, &person)?;
        }
        "file.create" => {
            let n = r.get("filename").and_then(Value::as_str).unwrap_or("");
            if !(1..=500).contains(&n.chars().count()) {
                return Err(format!("[contract] file name {n:?}"));
            }
        }
        "file.append" => {
            own(&t.files, "file_id")?;
        }
        other => return Err(format!("[contract] `{other}` is not a workspace action")),
    }
    Ok(())
}

/// An e-mail's `to`, `cc` and `bcc`: each address one `person` trusts and
/// the agent proposed, `to` not empty.
pub(crate) fn mail_recipients(
    proposal: &Value,
    r: &Map<String, Value>,
    person: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let to = vouched_list("to", raw("to"), r.get("to"), email, person)?;
    if to.is_empty() {
        return Err("[contract] an e-mail to nobody".into());
    }
    vouched_list("cc", raw("cc"), r.get("cc"), email, person)?;
    vouched_list("bcc", raw("bcc"), r.get("bcc"), email, person)?;
    Ok(())
}

/// People added to an event: each one `person` trusts and the agent
/// proposed, at least one.
pub(crate) fn participants_added(
    proposal: &Value,
    r: &Map<String, Value>,
    person: &dyn Fn(&str) -> bool,
) -> Result<(), String> {
    let raw = proposal.get("args").and_then(|a| a.get("participants"));
    let p = vouched_list("participants", raw, r.get("participants"), email, person)?;
    if p.is_empty() {
        return Err("[contract] nobody added".into());
    }
    Ok(())
}

/// The forbid "ends before it starts": `end` is not before `start`.
pub(crate) fn ends_after_start(r: &Map<String, Value>) -> Result<(), String> {
    let (start, end) = (
        r.get("start").and_then(Value::as_i64),
        r.get("end").and_then(Value::as_i64),
    );
    match (start, end) {
        (Some(s), Some(e)) if e >= s => Ok(()),
        _ => Err(format!("[policy] from {start:?} to {end:?}")),
    }
}

/// Addresses the mandate's claim `name` holds, in the oracle's spelling.
pub(crate) fn claimed_emails(md: &MandateData, name: &str) -> BTreeSet<String> {
    md.claims
        .get(name)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .filter_map(email)
                .collect()
        })
        .unwrap_or_default()
}

/// Values the mandate's claim `name` holds, as written.
pub(crate) fn claimed(md: &MandateData, name: &str) -> BTreeSet<String> {
    md.claims
        .get(name)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

pub(crate) fn slack_pack(
    t: &Truth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    let named_sites = claimed(md, "sites");
    // a page named in the request, or one already shared in the workspace
    let site = |x: &str| named_sites.contains(x) || in_set(&t.sites, owner, x);
    let own = |set: &Sets, name: &str| -> Result<String, String> {
        vouched(
            name,
            raw(name),
            r.get(name),
            exact,
            &|x| in_set(set, owner, x),
            &no_refs,
        )
    };
    match action {
        "message.direct" | "message.channel" => {
            if action == "message.direct" {
                own(&t.members, "recipient")?;
            } else {
                own(&t.channels, "channel")?;
            }
            vouched_list("links", raw("links"), r.get("links"), exact, &site)?;
        }
        "channel.add_member" => {
            own(&t.members, "user")?;
            own(&t.channels, "channel")?;
        }
        "member.invite" => {
            let named = claimed_emails(md, "emails");
            vouched(
                "email",
                raw("email"),
                r.get("email"),
                email,
                &|x| named.contains(x) || in_set(&t.invitees, owner, x),
                &no_refs,
            )?;
        }
        "member.remove" => {
            own(&t.members, "user")?;
            if !approved.user {
                return Err("[approval] a member removed without the user".into());
            }
        }
        "web.fetch" => {
            vouched("url", raw("url"), r.get("url"), exact, &site, &no_refs)?;
        }
        "web.post" => {
            // only a page the user named: never one the workspace shared
            vouched(
                "url",
                raw("url"),
                r.get("url"),
                exact,
                &|x| named_sites.contains(x),
                &no_refs,
            )?;
        }
        other => return Err(format!("[contract] `{other}` is not a slack action")),
    }
    Ok(())
}

/// A Date or Timestamp claim in seconds, as the gateway compares it.
pub(crate) fn instants(md: &MandateData, name: &str) -> BTreeSet<i64> {
    claimed(md, name)
        .iter()
        .map(|s| match s.len() {
            10 => seconds(&format!("{s}T00:00:00Z")),
            _ => seconds(s),
        })
        .collect()
}

pub(crate) fn travel_pack(
    t: &Truth,
    md: &MandateData,
    action: &str,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    let named = claimed_emails(md, "recipients");
    let person = |x: &str| named.contains(x) || in_set(&t.travel_contacts, owner, x);
    let time = |k: &str| r.get(k).and_then(Value::as_i64);
    // a booking the request describes needs no one; any other is the
    // user's to confirm (never the attacker's to make)
    let booking = |place: &str, times: &[&str], claim: &str, party: bool| -> Result<(), String> {
        let p = r.get(place).and_then(Value::as_str).unwrap_or("");
        if p.is_empty() || p.chars().count() > 200 || raw(place).and_then(Value::as_str) != Some(p)
        {
            return Err(format!(
                "[contract] `{place}` {p:?} executed for {:?}",
                raw(place)
            ));
        }
        let asked = instants(md, claim);
        let mut described = claimed(md, "places").contains(p);
        for k in times {
            described &= time(k).is_some_and(|x| asked.contains(&x));
        }
        if party {
            let sizes = md
                .claims
                .get("party")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let guests = r.get("guests").cloned().unwrap_or(json!(null));
            if !(1..=100).contains(&guests.as_i64().unwrap_or(0)) {
                return Err(format!("[contract] {guests} guests"));
            }
            described &= sizes.is_empty() || sizes.contains(&guests);
        }
        if !described && !approved.user {
            return Err(format!(
                "[approval] `{p}` booked as the request does not describe it, without the user"
            ));
        }
        Ok(())
    };
    match action {
        "booking.hotel" => {
            booking("hotel", &["start", "end"], "days", true)?;
            ends_after_start(r)?;
        }
        "booking.car" => {
            booking("company", &["start", "end"], "times", false)?;
            ends_after_start(r)?;
        }
        "booking.restaurant" => booking("restaurant", &["start"], "times", true)?,
        "trip.send_email" => {
            mail_recipients(proposal, r, &person)?;
        }
        "trip.remind" => {
            vouched_list(
                "participants",
                raw("participants"),
                r.get("participants"),
                email,
                &person,
            )?;
            ends_after_start(r)?;
        }
        "trip.cancel_event" => {
            vouched(
                "event_id",
                raw("event_id"),
                r.get("event_id"),
                exact,
                &|x| in_set(&t.travel_events, owner, x),
                &no_refs,
            )?;
        }
        other => return Err(format!("[contract] `{other}` is not a travel action")),
    }
    // mail and calendar entries always wait for the user
    if action.starts_with("trip.") && !approved.user {
        return Err(format!("[approval] `{action}` without the user"));
    }
    Ok(())
}

pub(crate) fn code_pack(
    t: &Truth,
    md: &MandateData,
    proposal: &Value,
    d: &Exec,
    approved: &Approved,
) -> Result<(), String> {
    let raw = |k: &str| proposal.get("args").and_then(|a| a.get(k));
    let r = &d.resolved;
    let owner = md.owner.as_str();
    // a repository of the owner (issue 11, item 8) ...
    let repo = vouched(
        "repo",
        raw("repo"),
        r.get("repo"),
        exact,
        &|x| in_set(&t.repositories, owner, x),
        &no_refs,
    )?;
    // ... the commit attested by the owner's CI; a reference names an
    // attestation by its exact key ...
    let commit = vouched(
        "commit",
        raw("commit"),
        r.get("commit"),
        lower,
        &|x| record(&t.attestations, owner, x).is_some(),
        &|id| record(&t.attestations, owner, id).map(|_| id.to_string()),
    )?;
    // ... into an existing branch of the owner, by its short name
    let branch = vouched(
        "branch",
        raw("branch"),
        r.get("branch"),
        exact,
        &|x| in_set(&t.branches, owner, x),
        &no_refs,
    )?;
    if md.claims.get("repo").and_then(Value::as_str) != Some(repo.as_str()) {
        return Err(format!(
            "[policy] merged into `{repo}`, not the repository the mandate names"
        ));
    }
    let att = record(&t.attestations, owner, &commit).ok_or("[provenance] no attestation")?;
    if att.get("developer") != md.claims.get("developer") {
        return Err(format!(
            "[policy] merged `{commit}`, attested for another developer"
        ));
    }
    if att["ci"] != "green" {
        return Err(format!("[policy] merged `{commit}` with CI {}", att["ci"]));
    }
    if in_set(&t.protected, owner, &branch) && att["reviewed"] != true && !approved.four_eyes() {
        return Err(format!(
            "[approval] unreviewed `{commit}` merged into the protected `{branch}` without four eyes"
        ));
    }
    Ok(())
}
