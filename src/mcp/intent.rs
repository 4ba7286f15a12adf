//! Intent capture in `ipc mcp`: the agent's one tool of its own,
//! [`TOOL`] (`intentplane_request_mandate`), whose arguments are the claims
//! the agent read from the user's request. The proxy shows them to the
//! user through elicitation (each value, its normalised spelling, where it
//! comes from and whether a registry of the user holds it, and in plain
//! words what the mandate would allow); the user ticks the values to grant
//! and accepts, or declines. On acceptance the proxy issues a child
//! mandate of the session's mandate (the ceiling the administrator set in
//! `[session]`) holding exactly the ticked values, records it in the store
//! with a receipt (`"kind": "mandate"`), and decides the session's later
//! calls of that pack under it.
//!
//! - A value the user did not see and tick never enters the mandate: the
//!   form has one checkbox per value shown, none ticked by default, and
//!   the answer is read back against the very text shown (in the
//!   2026-07-28 era the sealed state binds the hash of that text).
//! - The agent has no argument or tool to accept: only the client's
//!   elicitation answer does. A client that cannot elicit is told why.
//! - The child is kept under the session's record in the store (namespace
//!   [`INTENT_NS`]): a restart of the proxy with the same session
//!   continues it; a new session (whose mandates revoke the old ones) does
//!   not.

use crate::base::json::format_time;
use crate::bundle::Bundle;
use crate::gateway::chain::{ChildRequest, Draft, Widening};
use crate::gateway::mandate::MandateToken;
use crate::gateway::render::escape;
use crate::ir::Type;
use crate::store::StoreError;
use rmcp::model::{ElicitRequestParams, ElicitationSchema, Tool};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The name of the proxy's own tool.
pub const TOOL: &str = "intentplane_request_mandate";

/// Where the session's child mandates are kept in the store's state, by
/// config path and pack.
pub const INTENT_NS: &str = "mcp-intent";

/// The prefix of each checkbox of the confirmation form (`grant_1`, …).
const GRANT: &str = "grant_";

/// The keys of the tool's arguments.
const KEYS: [&str; 6] = ["pack", "claims", "scopes", "budget", "calls", "expires_at"];

/// One value the agent asks for, as the user is shown it (from the
/// draft's rendering, `gateway::render::child`).
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub claim: String,
    /// The canonical value (what enters the child).
    pub value: Value,
    /// The value as the rendering shows it (escaped).
    pub shown: String,
    /// What the owner's registry calls it (escaped).
    pub name: Option<String>,
    /// `parent`, `registry` or `none` (it widens: no child may hold it).
    pub origin: String,
    /// Whether a registry of the owner's holds it (`None`: no registry to
    /// compare with).
    pub in_registry: Option<bool>,
}

impl Item {
    /// Whether a child of the session's mandate may hold it.
    pub fn grantable(&self) -> bool {
        self.origin != "none"
    }
}

/// The JSON Schema of one claim value of type `ty` (an element type).
fn value_schema(ty: &Type) -> Value {
    match ty {
        Type::Money => {
            json!({"type": ["string", "number"], "description": "an amount in major units, e.g. \"1500.00\""})
        }
        Type::Int | Type::Duration => json!({"type": "integer"}),
        Type::Bool => json!({"type": "boolean"}),
        Type::Date | Type::Timestamp => {
            json!({"type": "string", "description": "a UTC time, e.g. \"2026-12-01T18:00:00Z\""})
        }
        Type::Enum(vs) => json!({"type": "string", "enum": vs}),
        _ => json!({"type": "string"}),
    }
}

/// The tool as the agent sees it: its arguments shaped from the claims of
/// the session's packs (`parents`: `(pack, token)`).
pub fn tool(bundle: &Bundle, parents: &[(String, Value)]) -> Tool {
    let mut claims = Map::new();
    let mut scopes: Vec<String> = vec![];
    for (pack, token) in parents {
        let Some(tp) = bundle.table.pack(pack) else {
            continue;
        };
        for c in &tp.claims {
            let one = value_schema(c.ty.element());
            let s = if c.ty.is_collection() {
                json!({"type": "array", "items": one, "description": format!("`{}` ({}): every value the user named", c.name, c.ty)})
            } else {
                let mut one = one;
                if let Some(o) = one.as_object_mut() {
                    o.insert(
                        "description".into(),
                        json!(format!("`{}` ({})", c.name, c.ty)),
                    );
                }
                one
            };
            claims.insert(c.name.clone(), s);
        }
        if let Ok(t) = serde_json::from_value::<MandateToken>(token.clone()) {
            for s in t.mandate.scopes {
                if !scopes.contains(&s) {
                    scopes.push(s);
                }
            }
        }
    }
    let mut properties = Map::new();
    if parents.len() > 1 {
        let packs: Vec<&String> = parents.iter().map(|(p, _)| p).collect();
        properties.insert("pack".into(), json!({"type": "string", "enum": packs, "description": "the pack whose actions the request is for"}));
    }
    properties.insert(
        "claims".into(),
        json!({"type": "object", "properties": claims, "additionalProperties": false,
               "description": "the values the user named in the request (payees, recipients, amounts, ...), as the user wrote them"}),
    );
    properties.insert("scopes".into(), json!({"type": "array", "items": {"type": "string", "enum": scopes}, "description": "what the agent may do for this request (default: every scope of the session)"}));
    properties.insert("budget".into(), json!({"type": ["string", "number"], "description": "the most the request may spend in all, in major units (\"1500.00\")"}));
    properties.insert("calls".into(), json!({"type": "integer", "minimum": 1, "description": "how many actions the request may take"}));
    properties.insert("expires_at".into(), json!({"type": "string", "description": "until when, a UTC time (\"2026-12-01T18:00:00Z\"); default: the session's expiry"}));
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": if parents.len() > 1 { json!(["pack", "claims"]) } else { json!(["claims"]) },
        "additionalProperties": false,
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => Map::new(),
    };
    Tool::new(
        TOOL,
        "Ask the user for a mandate for their current request: give the values the user named \
         (payees, recipients, amounts, a budget, an expiry). The user is shown them and decides \
         which to grant; the tools are then decided under what the user granted.",
        Arc::new(schema),
    )
}

/// Reads the agent's arguments: the pack (`pack`, or the session's only
/// one), its parent (the session's mandate of that pack) and the child
/// request. Every key must be one of the tool's (no `sources`, no key to
/// accept with).
pub fn parse(
    parents: &[(String, Value)],
    args: &Map<String, Value>,
) -> Result<(String, MandateToken, ChildRequest), String> {
    if let Some(k) = args.keys().find(|k| !KEYS.contains(&k.as_str())) {
        return Err(format!(
            "unknown argument `{}` (the arguments are {})",
            crate::base::json::echo(k),
            KEYS.join(", ")
        ));
    }
    let pack = match args.get("pack") {
        Some(Value::String(p)) => p.clone(),
        Some(_) => return Err("`pack` is not a string".into()),
        None => match parents {
            [(p, _)] => p.clone(),
            _ => return Err("`pack` is required: the session covers several packs".into()),
        },
    };
    let Some((_, token)) = parents.iter().find(|(p, _)| *p == pack) else {
        return Err(format!(
            "the session has no mandate for pack `{}`",
            crate::base::json::echo(&pack)
        ));
    };
    let parent: MandateToken = serde_json::from_value(token.clone())
        .map_err(|e| format!("the session's mandate cannot be read: {e}"))?;
    let mut wire = args.clone();
    wire.remove("pack");
    let req = ChildRequest::from_json(&Value::Object(wire)).map_err(|e| e.to_string())?;
    Ok((pack, parent, req))
}

/// The values of the claims the request names, as the draft shows them.
pub fn items(draft: &Draft, req: &ChildRequest) -> Vec<Item> {
    let named: Vec<&String> = req.claims.iter().map(|(k, _)| k).collect();
    let mut out = vec![];
    for ((name, v), shown) in draft.mandate.claims.iter().zip(&draft.shown.claims) {
        if !named.contains(&name) {
            continue;
        }
        let values: Vec<&Value> = match v {
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for (i, value) in values.into_iter().enumerate() {
            out.push(Item {
                claim: name.clone(),
                value: value.clone(),
                shown: shown.items.get(i).map(|l| l.concat()).unwrap_or_default(),
                name: shown.names.get(i).cloned().flatten(),
                origin: shown
                    .origins
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| "none".into()),
                in_registry: shown.in_registry.get(i).copied().flatten(),
            });
        }
    }
    out
}

/// The claims of one value (not a set) the request names whose value the
/// user did not tick (or could not: it widens). A child without such a
/// claim holds the session's value of it, which the user was not shown as
/// this request's, so the answer grants nothing; `Err` says why.
pub fn single_unticked(draft: &Draft, req: &ChildRequest, granted: &[Item]) -> Result<(), String> {
    let missing = req.claims.iter().map(|(k, _)| k).find(|k| {
        !draft.mandate.claims.get(*k).is_some_and(Value::is_array)
            && !granted.iter().any(|g| &&g.claim == k)
    });
    match missing {
        None => Ok(()),
        Some(k) => Err(format!(
            "`{}` holds one value and it was not granted: a mandate without it would hold the session's value of it, which was not shown; grant it, or ask again without it",
            crate::base::json::echo(k)
        )),
    }
}

/// A widening other than a claim value: the request cannot be issued
/// whatever the user ticks.
pub fn beyond_claims(draft: &Draft) -> Vec<Widening> {
    draft
        .widens
        .iter()
        .filter(|w| !matches!(w, Widening::Claim { .. }))
        .cloned()
        .collect()
}

/// What the user is shown: the draft as every confirmer sees it
/// (`gateway::render::child`: each value, its origin, whether a registry
/// of theirs holds it, what it allows in plain words), then the values
/// offered for ticking, each with its checkbox's key, and how to answer.
pub fn message(draft: &Draft, items: &[Item]) -> String {
    let mut t = String::from("The agent asks for a mandate for your request\n");
    t.push_str(&draft.shown.text());
    t.push_str("to grant (tick each value you asked for; a value not ticked is not granted)\n");
    let mut n = 0;
    for it in items.iter().filter(|i| i.grantable()) {
        n += 1;
        t.push_str(&format!(
            "  {GRANT}{n}: {}\n    | {}\n",
            escape(&it.claim),
            it.title()
        ));
    }
    if n == 0 {
        t.push_str("    (none)\n");
    }
    let refused: Vec<&Item> = items.iter().filter(|i| !i.grantable()).collect();
    if !refused.is_empty() {
        t.push_str("cannot be granted (neither the session's mandate nor a registry of yours holds it; add it in your records first if you meant it)\n");
        for it in refused {
            t.push_str(&format!("  {}\n    | {}\n", escape(&it.claim), it.title()));
        }
    }
    t.push_str(
        "Accept to grant exactly the values you ticked, with the scopes, budget and expiry above; decline to grant nothing.",
    );
    t
}

impl Item {
    /// The value, what the registry calls it, and the mark of a value no
    /// registry of the user's holds.
    fn title(&self) -> String {
        let mut t = self.shown.clone();
        if let Some(n) = &self.name {
            t.push_str(&format!(" ({n})"));
        }
        if self.in_registry == Some(false) {
            t.push_str(" - NOT in any registry of yours");
        }
        t
    }
}

/// The confirmation form: one checkbox per value, none ticked.
pub fn form(items: &[Item], message: String) -> Result<ElicitRequestParams, String> {
    let mut b = ElicitationSchema::builder();
    for (i, it) in items.iter().filter(|i| i.grantable()).enumerate() {
        let title = format!("grant {} {}", it.claim, it.title());
        b = b.bool_property(format!("{GRANT}{}", i + 1), |s| {
            s.title(title).with_default(false)
        });
    }
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: b.build().map_err(|e| e.to_string())?,
    })
}

/// The items the user ticked, from the form's answer: every key one of
/// the form's, every value a boolean (anything else refuses the answer).
pub fn granted(items: &[Item], content: Option<&Value>) -> Result<Vec<Item>, String> {
    let offered: Vec<&Item> = items.iter().filter(|i| i.grantable()).collect();
    let empty = Map::new();
    let answer = match content {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err("the answer is not an object".into()),
    };
    let mut ticked = vec![false; offered.len()];
    for (k, v) in answer {
        let i = k
            .strip_prefix(GRANT)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=offered.len()).contains(n))
            .ok_or_else(|| {
                format!(
                    "the answer holds `{}`, which the form did not ask",
                    crate::base::json::echo(k)
                )
            })?;
        match v {
            Value::Bool(b) => ticked[i - 1] = *b,
            _ => return Err(format!("the answer to `{k}` is not true or false")),
        }
    }
    Ok(offered
        .into_iter()
        .zip(ticked)
        .filter(|(_, t)| *t)
        .map(|(i, _)| i.clone())
        .collect())
}

/// The store key of a config's child mandate for `pack`.
pub fn key(slot: &str, pack: &str) -> String {
    format!("{slot}\n{pack}")
}

/// A child mandate kept in the store: its parent's id and the token.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Kept {
    parent: String,
    token: Value,
}

/// The child mandates granted in the session `session` continues (read
/// from the store): per pack, the last one granted whose parent is the
/// session's mandate of that pack. One that has expired or been revoked
/// since is continued too, as the running proxy keeps it: the pack's
/// calls are denied under it (with receipts) until the user grants
/// another, never decided under the session's wider mandate again because
/// the proxy restarted.
pub fn resume(
    store: &dyn crate::store::Store,
    config: &std::path::Path,
    session: &crate::mcp::config::SessionConfig,
) -> Result<std::collections::HashMap<String, Value>, crate::mcp::session::SessionError> {
    let mut out = std::collections::HashMap::new();
    if !session.mandate_requests {
        return Ok(out);
    }
    let slot = crate::mcp::session::slot(config);
    store.transaction(&mut |tx| {
        out.clear();
        for (pack, parent) in &session.mandates {
            let Ok(parent) = serde_json::from_value::<MandateToken>(parent.clone()) else {
                continue;
            };
            let Some(v) = tx.state_get(INTENT_NS, &key(&slot, pack))? else {
                continue;
            };
            // an unreadable record refuses the start: skipping it would
            // decide the pack's calls under the session's wider mandate
            let kept = serde_json::from_value::<Kept>(v).map_err(|e| {
                StoreError::Backend(format!(
                    "the child mandate kept for pack `{}` cannot be read: {e}",
                    crate::base::json::echo(pack)
                ))
            })?;
            if kept.parent == parent.mandate.id {
                out.insert(pack.clone(), kept.token);
            }
        }
        Ok(Value::Null)
    })?;
    Ok(out)
}

/// What the receipt of a request records of a value.
fn item_json(it: &Item) -> Value {
    json!({"claim": it.claim, "value": it.value})
}

/// Records the user's answer to a request, in one transaction: on
/// acceptance the child `child` is kept for the session (the previous
/// child of the pack revoked) with a receipt (`"kind": "mandate"`,
/// `"change": "grant"`); on a decline, a receipt (`"change": "decline"`)
/// and nothing else. `shown` is the hash of the text the user was shown.
#[allow(clippy::too_many_arguments)]
pub fn record(
    store: &dyn crate::store::Store,
    config: &std::path::Path,
    now: i64,
    pack: &str,
    items: &[Item],
    parent: &MandateToken,
    granted: &[Item],
    child: Option<&Value>,
    shown: &str,
) -> Result<crate::gateway::ReceiptRef, StoreError> {
    let slot = crate::mcp::session::slot(config);
    let k = key(&slot, pack);
    let declined: Vec<Value> = items
        .iter()
        .filter(|i| !granted.contains(i))
        .map(item_json)
        .collect();
    let child_id = child
        .and_then(|c| c.get("mandate"))
        .and_then(|m| m.get("id"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut body = json!({
        "kind": "mandate",
        "change": if child.is_some() { "grant" } else { "decline" },
        "config": slot,
        "pack": pack,
        "parent": parent.mandate.id,
        "user": parent.mandate.user,
        "granted": granted.iter().map(item_json).collect::<Vec<_>>(),
        "not_granted": declined,
        "shown": shown,
        "time": format_time(now),
    });
    if let (Some(id), Some(o)) = (&child_id, body.as_object_mut()) {
        o.insert("mandate".into(), json!(id));
    }
    let jcs =
        crate::canonical::Jcs::from_value(&body).map_err(|e| StoreError::Aborted(e.to_string()))?;
    let mut link = None;
    store.transaction(&mut |tx| {
        if let Some(c) = child {
            if let Some(v) = tx.state_get(INTENT_NS, &k)?
                && let Ok(old) = serde_json::from_value::<Kept>(v)
                && let Some(id) = old
                    .token
                    .get("mandate")
                    .and_then(|m| m.get("id"))
                    .and_then(Value::as_str)
            {
                tx.revoke(id)?;
            }
            let kept = serde_json::to_value(Kept {
                parent: parent.mandate.id.clone(),
                token: c.clone(),
            })
            .map_err(|e| StoreError::Aborted(e.to_string()))?;
            tx.state_put(INTENT_NS, &k, &kept)?;
        }
        link = Some(tx.append_receipt_jcs(&jcs)?);
        Ok(Value::Null)
    })?;
    link.map(|l| crate::gateway::ReceiptRef {
        seq: l.seq,
        hash: l.hash,
    })
    .ok_or_else(|| StoreError::Aborted("the transaction left no receipt".into()))
}
