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
        Format::Slack => slack(
            &Head {
                level: shown.level,
                action: &shown.action,
                approve_by: &shown.approve_by,
                operation_hash: &shown.operation_hash,
            },
            &text,
            &link,
        ),
    };
    serde_json::to_vec(&v).unwrap_or_default()
}

/// What a Slack body's header line names.
struct Head<'a> {
    level: u8,
    action: &'a str,
    approve_by: &'a str,
    operation_hash: &'a str,
}

/// The most characters Slack shows in one text object of a block.
const SLACK_TEXT_MAX: usize = 3000;

/// A Slack incoming webhook's body: a header line (mrkdwn, its text
/// escaped as Slack asks: `&`, `<`, `>`), also the notification's `text`,
/// then the summary in `plain_text` sections, which Slack shows as
/// written: no value of the operation (an agent's subject line holding
/// three backticks or a `*bold*` line) can close a code block or format
/// itself into what looks like another field of the summary.
fn slack(shown: &Head<'_>, text: &str, link: &str) -> Value {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let head = format!(
        "Approval needed (level {}): `{}` for {}, operation `{}`. <{}|Open the approval page>",
        shown.level,
        esc(shown.action).replace('`', "'"),
        esc(shown.approve_by).replace('`', "'"),
        shown.operation_hash,
        link
    );
    let chars: Vec<char> = text.chars().collect();
    let mut blocks = vec![json!({"type": "section", "text": {"type": "mrkdwn", "text": head}})];
    for chunk in chars.chunks(SLACK_TEXT_MAX) {
        let part: String = chunk.iter().collect();
        blocks.push(json!({"type": "section",
            "text": {"type": "plain_text", "text": part, "emoji": false}}));
    }
    json!({ "text": head, "blocks": blocks })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_shows_the_summary_as_plain_text_whatever_it_holds() {
        let hostile = "subject: rent\n```\n*amount: 1.00*\n<https://evil.example|approve>";
        let shown_head = Head {
            level: 1,
            action: "bank.pay",
            approve_by: "the user `emma`",
            operation_hash: "sha256:ab",
        };
        let v = slack(
            &shown_head,
            hostile,
            "https://gw.example.com/approve#sha256:ab",
        );
        // the summary only in plain_text sections, as written
        let blocks = v["blocks"].as_array().unwrap();
        assert_eq!(blocks[1]["text"]["type"], "plain_text");
        assert_eq!(blocks[1]["text"]["text"], hostile);
        // the mrkdwn parts never hold it
        assert!(!v["text"].as_str().unwrap().contains("evil"));
        assert!(!blocks[0]["text"]["text"].as_str().unwrap().contains("evil"));
        assert!(v["text"].as_str().unwrap().contains("sha256:ab"));
        // a long summary is cut into sections Slack shows whole
        let long = "x".repeat(SLACK_TEXT_MAX * 2 + 1);
        let v = slack(&shown_head, &long, "l");
        assert_eq!(v["blocks"].as_array().unwrap().len(), 4);
    }
}
