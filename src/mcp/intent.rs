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
use crate::bundle::format::TablePack;
use crate::gateway::Gateway;
use crate::gateway::mandate::MandateToken;
use crate::gateway::registry::Registries;
use crate::gateway::render::escape;
use crate::ir::{Source, Type};
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

/// One value the agent proposes, as the user is shown it.
#[derive(Clone, Debug, PartialEq)]
pub struct Item {
    pub claim: String,
    /// The claim's element type.
    pub ty: Type,
    /// The canonical value (what enters the mandate).
    pub value: Value,
    /// The value as a person reads it (escaped, one line).
    pub shown: String,
    /// The registries of the owner that hold it, with what they call it.
    pub held_by: Vec<(String, Option<String>)>,
    /// The owner's registries that could vouch for the same parameters
    /// (consulted, whether they hold it or not).
    pub consulted: Vec<String>,
}

/// A proposed child mandate, parsed, typed and normalised.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub pack: String,
    pub items: Vec<Item>,
    /// `None`: the parent's.
    pub scopes: Option<Vec<String>>,
    /// Minor units; `None`: the parent's.
    pub budget: Option<i64>,
    pub calls: Option<u64>,
    pub expires_at: Option<i64>,
}

/// The JSON Schema of one claim value of type `ty` (an element type).
fn value_schema(ty: &Type) -> Value {
    match ty {
        Type::Money => json!({"type": ["string", "number"], "description": "an amount in major units, e.g. \"1500.00\""}),
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

/// The registries of `pack` that vouch, beside the claim `claim`, for a
/// parameter the claim vouches for.
fn sibling_registries(bundle: &Bundle, pack: &str, claim: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    for a in bundle.table.actions.iter().filter(|a| a.pack == pack) {
        for p in &a.action.params {
            let by_claim = p
                .sources
                .iter()
                .any(|s| matches!(s, Source::Claim { claim: c } if c == claim));
            if !by_claim {
                continue;
            }
            for s in &p.sources {
                if let Source::Registry { registry } = s
                    && !out.contains(registry)
                {
                    out.push(registry.clone());
                }
            }
        }
    }
    out
}

/// One value as one line for a person (escaped).
fn show_value(ty: &Type, v: &Value, currency: Option<&str>) -> String {
    match (ty, v) {
        (Type::Money, Value::Number(n)) => match n.as_i64() {
            Some(m) => {
                let g = crate::base::Money::from_minor(m).grouped();
                match currency {
                    Some(c) => format!("{g} {}", escape(c)),
                    None => g,
                }
            }
            None => escape(&v.to_string()),
        },
        (Type::Date | Type::Timestamp, Value::Number(n)) => {
            n.as_i64().map_or_else(|| v.to_string(), format_time)
        }
        (Type::Iban, Value::String(s))
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit()) =>
        {
            s.as_bytes()
                .chunks(4)
                .map(|c| String::from_utf8_lossy(c).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        }
        (_, Value::String(s)) => escape(s),
        _ => escape(&v.to_string()),
    }
}

/// The pack's claim `name` of the session's mandate for `pack`, if any
/// (the currency the amounts are in).
fn parent_claim<'a>(parent: &'a MandateToken, name: &str) -> Option<&'a str> {
    parent.mandate.claims.get(name).and_then(Value::as_str)
}

/// Reads the agent's arguments into a [`Request`]: every key known, every
/// claim declared by the pack and typed, in its canonical spelling, each
/// value once. `parents` are the session's `(pack, token)`.
pub fn parse(
    gw: &Gateway,
    bundle: &Bundle,
    parents: &[(String, Value)],
    args: &Map<String, Value>,
) -> Result<(Request, MandateToken), String> {
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
    let tp: &TablePack = bundle
        .table
        .pack(&pack)
        .ok_or_else(|| format!("the bundle has no pack `{pack}`"))?;
    let claims = match args.get("claims") {
        Some(Value::Object(m)) => m.clone(),
        None => Map::new(),
        Some(_) => return Err("`claims` is not an object".into()),
    };
    let currency = parent_claim(&parent, "currency");
    let mut items: Vec<Item> = vec![];
    for (name, v) in &claims {
        let decl = tp.claims.iter().find(|c| &c.name == name).ok_or_else(|| {
            format!(
                "pack `{pack}` declares no claim `{}` (its claims: {})",
                crate::base::json::echo(name),
                tp.claims
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?;
        let el = decl.ty.element();
        let values: Vec<&Value> = match (decl.ty.is_collection(), v) {
            (true, Value::Array(items)) => items.iter().collect(),
            (true, one) => vec![one],
            (false, Value::Array(_)) => {
                return Err(format!("claim `{name}` is a single value, not a list"));
            }
            (false, one) => vec![one],
        };
        let consulted = sibling_registries(bundle, &pack, name);
        for one in values {
            let text_number = match (el, one) {
                (Type::Money, Value::String(s)) => {
                    crate::base::Money::parse(s.trim()).map(|m| Value::from(m.minor()))
                }
                (Type::Money, Value::Number(_)) => crate::base::Money::from_json(one).map(|m| Value::from(m.minor())),
                _ => crate::gateway::world::typed_value(one, el),
            };
            let value = text_number.map_err(|e| format!("claim `{name}`: {e}"))?;
            if items.iter().any(|i| &i.claim == name && i.value == value) {
                continue;
            }
            let shown = show_value(el, &value, currency);
            items.push(Item {
                claim: name.clone(),
                ty: el.clone(),
                value,
                shown,
                held_by: vec![],
                consulted: consulted.clone(),
            });
        }
    }
    held_by(gw, tp, &parent.mandate.owner, &mut items).map_err(|e| e.to_string())?;
    let scopes = match args.get("scopes") {
        None => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|s| {
                    s.as_str()
                        .map(str::to_string)
                        .ok_or("`scopes` holds a value that is not a string".to_string())
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => return Err("`scopes` is not a list".into()),
    };
    let budget = match args.get("budget") {
        None => None,
        Some(Value::String(s)) => Some(
            crate::base::Money::parse(s.trim())
                .map_err(|e| format!("budget: {e}"))?
                .minor(),
        ),
        Some(v @ Value::Number(_)) => Some(
            crate::base::Money::from_json(v)
                .map_err(|e| format!("budget: {e}"))?
                .minor(),
        ),
        Some(_) => return Err("`budget` is not an amount".into()),
    };
    if budget.is_some_and(|b| b < 0) {
        return Err("the budget cannot be negative".into());
    }
    let calls = match args.get("calls") {
        None => None,
        Some(v) => Some(
            v.as_u64()
                .filter(|n| *n > 0)
                .ok_or("`calls` is not a whole number above 0")?,
        ),
    };
    let expires_at = match args.get("expires_at") {
        None => None,
        Some(v) => {
            Some(crate::base::json::parse_time(v).map_err(|e| format!("expires_at: {e}"))?)
        }
    };
    Ok((
        Request {
            pack,
            items,
            scopes,
            budget,
            calls,
            expires_at,
        },
        parent,
    ))
}

/// Which of the owner's registries hold each item (read in one
/// transaction).
fn held_by(
    gw: &Gateway,
    tp: &TablePack,
    owner: &str,
    items: &mut [Item],
) -> Result<(), StoreError> {
    let regs = Registries {
        world: gw.world(),
        pack: &tp.name,
        owner,
    };
    let mut found: Vec<Vec<(String, Option<String>)>> = vec![];
    gw.store().transaction(&mut |tx| {
        found.clear();
        for it in items.iter() {
            let text = match &it.value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            let mut row = vec![];
            for r in &it.consulted {
                let Some(reg) = tp.registries.iter().find(|x| &x.name == r) else {
                    continue;
                };
                if let Some(entry) = regs.member(tx, reg, &text, None)? {
                    let name = if matches!(reg.shape, crate::ir::RegistryShape::Set { .. }) {
                        regs.entry_name(tx, reg, &entry)?
                    } else {
                        regs.record(tx, reg, &entry)?
                            .and_then(|m| m.get("name").and_then(Value::as_str).map(str::to_string))
                    };
                    row.push((r.clone(), name.map(|n| escape(&n))));
                }
            }
            found.push(row);
        }
        Ok(Value::Null)
    })?;
    for (it, f) in items.iter_mut().zip(found) {
        it.held_by = f;
    }
    Ok(())
}

impl Item {
    /// Where the value comes from, and whether the user's records know it.
    pub fn origin(&self) -> String {
        let records = if self.held_by.is_empty() {
            if self.consulted.is_empty() {
                "no registry of yours could hold it".to_string()
            } else {
                format!(
                    "NOT in any registry of yours (checked: {})",
                    self.consulted
                        .iter()
                        .map(|r| format!("registry.{r}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        } else {
            self.held_by
                .iter()
                .map(|(r, n)| match n {
                    Some(n) => format!("in registry.{r} as {n}"),
                    None => format!("in registry.{r}"),
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        format!("the agent's reading of your request; {records}")
    }

    /// The checkbox's title: the claim and the value, and what the
    /// registries call it.
    fn title(&self) -> String {
        let name = self
            .held_by
            .iter()
            .find_map(|(_, n)| n.clone())
            .map(|n| format!(" ({n})"))
            .unwrap_or_default();
        let new = if self.held_by.is_empty() && !self.consulted.is_empty() {
            " - NOT in your records"
        } else {
            ""
        };
        format!("grant {} {}{name}{new}", self.claim, self.shown)
    }
}

/// What the user is shown: the request, each value with its checkbox's
/// key, its normalised value and its origin, the plain words (`plain`:
/// what the mandate would allow), and how to answer. Labels start a line;
/// every value line starts with four spaces and `| ` (as in
/// `gateway::render`), so no value can imitate a label.
pub fn message(req: &Request, parent: &MandateToken, plain: &str) -> String {
    let mut t = String::new();
    let m = &parent.mandate;
    t.push_str("The agent asks for a mandate for your request\n");
    t.push_str(&format!(
        "for          {} (records of {}), pack {}\n",
        escape(&m.user),
        escape(&m.owner),
        escape(&req.pack)
    ));
    t.push_str(&format!("within       the session's mandate {}\n", escape(&m.id)));
    t.push_str("it allows\n");
    for line in plain.lines() {
        t.push_str(&format!("    | {}\n", escape(line)));
    }
    t.push_str("values (tick each one to grant; an unticked value is not granted)\n");
    if req.items.is_empty() {
        t.push_str("    (none)\n");
    }
    for (i, it) in req.items.iter().enumerate() {
        t.push_str(&format!("  {GRANT}{}: {}\n", i + 1, escape(&it.claim)));
        t.push_str(&format!("    | {}\n", it.shown));
        t.push_str(&format!("    | origin: {}\n", it.origin()));
    }
    let scopes = req.scopes.clone().unwrap_or_else(|| m.scopes.clone());
    t.push_str(&format!(
        "scopes       {}\n",
        scopes
            .iter()
            .map(|s| escape(s))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let currency = parent_claim(parent, "currency");
    t.push_str(&format!(
        "budget       {}, {} calls\n",
        show_value(
            &Type::Money,
            &Value::from(req.budget.unwrap_or(m.budget.amount)),
            currency
        ),
        req.calls.unwrap_or(m.budget.calls)
    ));
    t.push_str(&format!(
        "until        {}\n",
        format_time(req.expires_at.unwrap_or(m.expires_at))
    ));
    t.push_str(
        "Accept to grant exactly the values you ticked, with these scopes, budget and expiry; decline to grant nothing.",
    );
    t
}

/// The confirmation form: one checkbox per value, none ticked.
pub fn form(req: &Request, message: String) -> Result<ElicitRequestParams, String> {
    let mut b = ElicitationSchema::builder();
    for (i, it) in req.items.iter().enumerate() {
        let title = it.title();
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
pub fn granted(req: &Request, content: Option<&Value>) -> Result<Vec<Item>, String> {
    let empty = Map::new();
    let answer = match content {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err("the answer is not an object".into()),
    };
    let mut ticked = vec![false; req.items.len()];
    for (k, v) in answer {
        let i = k
            .strip_prefix(GRANT)
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| (1..=req.items.len()).contains(n))
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
    Ok(req
        .items
        .iter()
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
/// session's mandate of that pack, unexpired at `now` and not revoked.
pub fn resume(
    store: &dyn crate::store::Store,
    now: i64,
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
            let Ok(kept) = serde_json::from_value::<Kept>(v) else {
                continue;
            };
            let Ok(child) = serde_json::from_value::<MandateToken>(kept.token.clone()) else {
                continue;
            };
            if kept.parent == parent.mandate.id
                && child.mandate.expires_at > now
                && !tx.revoked(&child.mandate.id)?
            {
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
    req: &Request,
    parent: &MandateToken,
    granted: &[Item],
    child: Option<&Value>,
    shown: &str,
) -> Result<crate::gateway::ReceiptRef, StoreError> {
    let slot = crate::mcp::session::slot(config);
    let k = key(&slot, &req.pack);
    let declined: Vec<Value> = req
        .items
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
        "pack": req.pack,
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
    let jcs = crate::canonical::Jcs::from_value(&body)
        .map_err(|e| StoreError::Aborted(e.to_string()))?;
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

/// The child of `parent` for `req` holding exactly the `granted` values
/// (a claim the request names holds only what was granted of it; one it
/// does not name stays the parent's), signed with `key`; and what it
/// allows in plain words.
pub fn issue_child(
    bundle: &Bundle,
    parent: &MandateToken,
    req: &Request,
    granted: &[Item],
    now: i64,
    key: &crate::keys::SecretKey,
) -> Result<(Value, String), String> {
    let tp = bundle
        .table
        .pack(&req.pack)
        .ok_or_else(|| format!("the bundle has no pack `{}`", req.pack))?;
    let mut claims = parent.mandate.claims.clone();
    for it in &req.items {
        let collection = tp
            .claims
            .iter()
            .any(|c| c.name == it.claim && c.ty.is_collection());
        if collection {
            claims.insert(it.claim.clone(), Value::Array(vec![]));
        } else {
            claims.remove(&it.claim);
        }
    }
    for it in granted {
        match claims.get_mut(&it.claim) {
            Some(Value::Array(items)) => items.push(it.value.clone()),
            _ => {
                claims.insert(it.claim.clone(), it.value.clone());
            }
        }
    }
    let m = &parent.mandate;
    let mandate = crate::gateway::mandate::Mandate {
        id: format!(
            "m-{}",
            crate::gateway::approval::random_id().map_err(|e| e.to_string())?
        ),
        pack: m.pack.clone(),
        user: m.user.clone(),
        owner: m.owner.clone(),
        scopes: req.scopes.clone().unwrap_or_else(|| m.scopes.clone()),
        claims,
        budget: crate::gateway::mandate::Budget {
            amount: req.budget.unwrap_or(m.budget.amount),
            calls: req.calls.unwrap_or(m.budget.calls),
        },
        issued_at: now,
        expires_at: req.expires_at.unwrap_or(m.expires_at),
        sources: m.sources.clone(),
    };
    let plain = plain_words(&mandate, granted);
    let token = MandateToken::sign(mandate, key).map_err(|e| e.to_string())?;
    let v = serde_json::to_value(token).map_err(|e| e.to_string())?;
    Ok((v, plain))
}

/// What a mandate allows, in a sentence.
fn plain_words(m: &crate::gateway::mandate::Mandate, granted: &[Item]) -> String {
    let currency = m.claims.get("currency").and_then(Value::as_str);
    let values = if granted.is_empty() {
        "no value of the request".to_string()
    } else {
        granted
            .iter()
            .map(|g| format!("{} {}", g.claim, g.shown))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{} for {values}, up to {} in {} calls until {}",
        m.scopes.join(", "),
        show_value(&Type::Money, &Value::from(m.budget.amount), currency),
        m.budget.calls,
        format_time(m.expires_at)
    )
}
