//! What a target is sent for one pending operation: the approver's
//! rendering ([`crate::gateway::render`], the text they will sign, secrets
//! as their commitments), the operation hash, the level and a link to the
//! approval page, as the generic JSON body or a Slack incoming webhook's.

use super::config::{Format, Target};
use crate::gateway::render::Shown;
use serde_json::{Value, json};

/// The version of the JSON body (`"version"`).
pub const VERSION: u64 = 1;

/// The link to the approval page for `operation_hash`.
pub fn link(page: &str, operation_hash: &str) -> String {
    format!("{page}#{operation_hash}")
}

/// The body's bytes for `target`.
pub fn body(target: &Target, shown: &Shown, page: &str, idempotency_key: &str) -> Vec<u8> {
    let link = link(page, &shown.operation_hash);
    let text = shown.text();
    let v = match target.format {
        Format::Json => json!({
            "type": "ipc.pending",
            "version": VERSION,
            "idempotency_key": idempotency_key,
            "operation_hash": shown.operation_hash,
            "level": shown.level,
            "level_text": shown.level_text,
            "approve_by": shown.approve_by,
            "pack": shown.pack,
            "action": shown.action,
            "owner": shown.owner,
            "user": shown.user,
            "expires_at": shown.expires,
            "approval_page": link,
            "summary": text,
        }),
        Format::Slack => slack(shown, &text, &link),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// A Slack incoming webhook's body: a header line and the summary in a
/// code block (its text escaped as Slack's mrkdwn asks: `&`, `<`, `>`).
fn slack(shown: &Shown, text: &str, link: &str) -> Value {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let head = format!(
        "Approval needed (level {}): `{}` for {}. <{}|Open the approval page>",
        shown.level,
        esc(&shown.action),
        esc(&shown.approve_by),
        link
    );
    json!({
        "text": format!("{head}\n```\n{}```", esc(text)),
    })
}
