//! What the agent reads: a downstream's stored outcome, an error, or a
//! refusal (a DENY or a PENDING with its stage, reason, hint and receipt,
//! the decision itself under [`DECISION_META`]).

use crate::gateway::outcome::ExternalOutcome;
use crate::gateway::{Decision, Outcome};
use rmcp::model::{CallToolResult, ContentBlock as Content};
use serde_json::Value;

/// The agent's view of a stored outcome.
pub(super) fn stored_result(o: &ExternalOutcome) -> CallToolResult {
    if let Ok(r) = serde_json::from_value::<CallToolResult>(o.result.clone()) {
        return r;
    }
    let text = o
        .result
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| o.result.to_string());
    if o.is_error {
        error_result(text)
    } else {
        CallToolResult::success(vec![Content::text(text)])
    }
}

pub(super) fn error_result(text: String) -> CallToolResult {
    CallToolResult::error(vec![Content::text(text)])
}

/// A DENY or a PENDING as the agent reads it: the stage, the reason, the
/// hint, who must approve, the receipt; the decision itself as structured
/// content.
pub(super) fn refusal(d: &Decision) -> CallToolResult {
    refusal_with(d, "")
}

pub(super) fn refusal_with(d: &Decision, extra: &str) -> CallToolResult {
    let mut text = match d.decision {
        Outcome::Pending => format!(
            "PENDING at stage `{}`: {}",
            d.stage.name(),
            d.reason.as_deref().unwrap_or("approval required")
        ),
        _ => format!(
            "DENY at stage `{}`: {}",
            d.stage.name(),
            d.reason.as_deref().unwrap_or("refused")
        ),
    };
    if let Some(h) = &d.hint {
        text.push_str(&format!("\nhint: {h}"));
    }
    if let Some(who) = &d.approve_by {
        text.push_str(&format!("\nmust be approved by: {who}"));
    }
    if !extra.is_empty() {
        text.push_str(&format!("\n{extra}"));
    }
    if let Some(r) = &d.receipt {
        text.push_str(&format!("\nreceipt #{} {}", r.seq, r.hash));
    }
    let mut r = error_result(text);
    let decision = serde_json::to_value(d).ok();
    if let Some(v) = &decision {
        let mut meta = serde_json::Map::new();
        meta.insert(DECISION_META.to_string(), v.clone());
        r.meta = Some(rmcp::model::MetaObject(meta));
    }
    r.structured_content = decision;
    r
}

/// The `_meta` key of a refusal's decision object: there for every client,
/// where `structuredContent` cannot be (a tool that declares an
/// `outputSchema`, which the decision does not match; see
/// [`readable_by_every_sdk`]).
pub const DECISION_META: &str = "intentplane/decision";

/// A refusal of a tool that declares an `outputSchema` carries no
/// `structuredContent`: an SDK that checks it against the schema (the
/// TypeScript SDK, the Inspector) would throw instead of showing the
/// reason and the hint. The decision stays in the text and in `_meta`.
pub(super) fn readable_by_every_sdk(output_schema: bool, r: &mut CallToolResult) {
    if output_schema && is_refusal(r) {
        r.structured_content = None;
    }
}

/// A result [`refusal_with`] made (its decision in `_meta`), not one a
/// downstream returned.
pub(super) fn is_refusal(r: &CallToolResult) -> bool {
    r.meta
        .as_ref()
        .is_some_and(|m| m.0.contains_key(DECISION_META))
}
