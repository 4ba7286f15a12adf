//! One rendering of a pending operation for the person who approves it,
//! used by every place a human signs: `ipc approvals list|show`,
//! `ipc approve`, the approval page (`GET /v1/approver/operations`) and MCP
//! elicitation (both protocol eras). What is shown is what is signed:
//!
//! - every value is escaped ([`escape`]): controls, DEL, ESC, newlines,
//!   tabs, bidi controls, zero-width and other invisible characters are
//!   shown as `\n`, `\u{202e}`, …; a literal backslash as `\\`; a leading
//!   or trailing space as `\u{20}`. An escaped value is one line of
//!   visible characters;
//! - labels cannot be imitated: a label starts a line at column 0, a
//!   parameter's header at column 2, and every line of a value starts with
//!   four spaces and `| ` (or `- ` for each element of a list): no value
//!   can start a line, so none can write a label;
//! - long values are folded into lines of at most [`FOLD`] characters,
//!   never cut; a value longer than [`MAX_VALUE_CHARS`] is not approvable,
//!   with a reason that says so;
//! - amounts are in major units with their currency, IBANs in groups of
//!   four, times as UTC dates; what the owner's registry calls a trusted
//!   value (a beneficiary's or vendor's name) is shown beside it;
//! - [`parse`] reads the text back into the operation's fields (the
//!   canonical values, e.g. the IBAN without its spaces), and
//!   [`Shown::check`] recomputes the operation hash from exactly those
//!   fields ([`crate::gateway::operation_hash`]): the side that signs
//!   refuses when it differs from the hash it would sign.

use crate::base::json::format_time;
use crate::gateway::Gateway;
use crate::gateway::pending::PendingOp;
use crate::gateway::registry::Registries;
use crate::ir::{Key, RegistryShape, Source, Type};
use crate::store::{StoreError, Tx};
use serde::Serialize;
use serde_json::{Map, Value};
use std::fmt::Write as _;

#[path = "render_child.rs"]
pub mod child;

/// The longest value (in characters; a list's elements together) an
/// approver is shown and may approve.
pub const MAX_VALUE_CHARS: usize = 4_096;
/// The widest line of a value, in characters (escapes are never split).
pub const FOLD: usize = 64;
/// What is shown of a value too long to approve.
const TOO_LONG_SHOWN: usize = 256;
/// Labels are padded to this width.
const LABEL: usize = 12;
/// The start of each line of a scalar value.
const LINE: &str = "    | ";
/// The start of each element of a list.
const ITEM: &str = "    - ";
/// An empty list.
const NONE: &str = "    (none)";
/// A value its type does not describe, shown as its JSON.
const JSON: &str = "\\json ";

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RenderError {
    /// A value too long to show whole cannot be approved: no one signs what they
    /// cannot read.
    #[error(
        "the value of `{param}` is {chars} characters long, more than the {max} an approver can be shown: this operation cannot be approved"
    )]
    #[diagnostic(
        code(ipc::approvals::too_long),
        help(
            "no one signs what they cannot read: decline it, and let the agent propose the operation with a shorter value"
        )
    )]
    TooLong {
        param: String,
        chars: usize,
        max: usize,
    },
    /// The fields shown do not hash back to the operation (a record edited in
    /// the store, or recorded under another bundle): nothing is signed.
    #[error(
        "the pending operation `{hash}` shows values whose operation hash is `{shown}`: refused to sign"
    )]
    #[diagnostic(
        code(ipc::approvals::mismatch),
        help(
            "the stored record does not match its hash (edited, or recorded under another bundle): nothing was signed; let the agent propose the operation again"
        )
    )]
    Mismatch { hash: String, shown: String },
    /// The shown text of an operation does not read back into its fields.
    #[error("the operation `{hash}` cannot be read back from what is shown: {reason}")]
    #[diagnostic(code(ipc::approvals::unreadable))]
    Unreadable { hash: String, reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
}

/// One value as it is shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Field {
    pub name: String,
    /// A list or set: each element is its own item.
    pub list: bool,
    /// The folded lines of each element (one element for a scalar).
    pub items: Vec<Vec<String>>,
    /// What the owner's registry calls each element, if anything.
    pub names: Vec<Option<String>>,
    /// The origin(s) in full, as the receipt records them (escaped).
    pub origin: String,
    /// `proposal`, `mandate` or `registry`.
    pub origin_kind: String,
    /// The origin as a person reads it: `the agent's proposal`,
    /// `mandate.payee`, `registry.beneficiaries (ref landlord)`.
    pub source: String,
    /// Only the request vouches for it (not the owner's records).
    pub new: bool,
    /// A secret: shown as its commitment.
    pub secret: bool,
    /// Characters of the value (a list's elements together).
    pub chars: usize,
    pub too_long: bool,
}

/// A rule that asked for approval.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RuleShown {
    pub policy: String,
    pub rule: String,
    pub reason: String,
    pub level: u8,
    pub role: Option<String>,
}

/// A pending operation as the approver sees it. Every text in it is
/// escaped; [`Shown::text`] is the plain text, the page shows the same
/// fields from its JSON.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Shown {
    pub operation_hash: String,
    pub bundle: String,
    pub pack: String,
    pub action: String,
    pub mandate: String,
    pub user: String,
    pub owner: String,
    pub level: u8,
    pub level_text: String,
    pub why: Vec<String>,
    pub rules: Vec<RuleShown>,
    pub approve_by: String,
    /// Whose approvals count (not expired).
    pub approved_by: Vec<String>,
    /// Whose submitted approvals expired (they count for nothing).
    pub expired_approvals: Vec<String>,
    pub declined_by: Vec<String>,
    pub created: String,
    pub expires_at: i64,
    pub expires: String,
    pub values: Vec<Field>,
    /// Why it cannot be approved, if it cannot (a value too long to show).
    pub refusal: Option<String>,
    #[serde(skip)]
    too_long: Option<(String, usize)>,
}

/// The operation's fields, as read back from its text.
#[derive(Clone, Debug, PartialEq)]
pub struct Parsed {
    pub operation_hash: String,
    pub bundle: String,
    pub action: String,
    pub mandate: String,
    pub resolved: Map<String, Value>,
}

/// `s` as one line of visible characters (see the module's doc).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let last = s.chars().count().saturating_sub(1);
    for (i, c) in s.chars().enumerate() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' ' if i == 0 || i == last => out.push_str("\\u{20}"),
            ' ' => out.push(' '),
            c if c.is_ascii_graphic() => out.push(c),
            c if c.is_ascii()
                || c.is_control()
                || c.is_whitespace()
                || crate::base::json::invisible(c)
                || c.escape_debug().nth(1).is_some() =>
            {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The text [`escape`] made `s` from.
pub fn unescape(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('u') => {
                if it.next() != Some('{') {
                    return Err("`\\u` without `{`".into());
                }
                let hex: String = it.by_ref().take_while(|c| *c != '}').collect();
                let ch = u32::from_str_radix(&hex, 16)
                    .ok()
                    .filter(|_| !hex.is_empty() && hex.len() <= 6)
                    .and_then(char::from_u32)
                    .ok_or_else(|| format!("`\\u{{{hex}}}` is not a character"))?;
                out.push(ch);
            }
            other => return Err(format!("an unknown escape `\\{}`", other.unwrap_or(' '))),
        }
    }
    Ok(out)
}

/// `s` cut into lines of at most [`FOLD`] characters, never inside an
/// escape, after a space where one is in the line's last two thirds, and
/// after each `\n` (the text's own line breaks).
fn fold(s: &str) -> Vec<String> {
    // atoms: one character, or one escape
    let mut atoms: Vec<&str> = vec![];
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        let len = if c == '\\' {
            match rest[1..].chars().next() {
                Some('u') => rest.find('}').map_or(rest.len(), |i| i + 1),
                Some(n) => 1 + n.len_utf8(),
                None => 1,
            }
        } else {
            c.len_utf8()
        };
        atoms.push(&rest[..len]);
        rest = &rest[len..];
    }
    let mut lines = vec![];
    let mut cur: Vec<&str> = vec![];
    let mut width = 0;
    for a in atoms {
        let w = a.chars().count();
        if width + w > FOLD && !cur.is_empty() {
            let cut = cur
                .iter()
                .rposition(|x| *x == " ")
                .filter(|i| *i >= FOLD / 3)
                .map_or(cur.len(), |i| i + 1);
            let tail = cur.split_off(cut);
            lines.push(cur.concat());
            width = tail.iter().map(|x| x.chars().count()).sum();
            cur = tail;
        }
        cur.push(a);
        width += w;
        // the text's own line ends where it has one: shown as `\n`, and
        // what follows on a line of its own (behind the value's prefix)
        if a == "\\n" {
            lines.push(std::mem::take(&mut cur).concat());
            width = 0;
        }
    }
    if !cur.is_empty() || lines.is_empty() {
        lines.push(cur.concat());
    }
    lines
}

/// A value of type `ty` as one line (before folding), and back.
fn display(ty: &Type, v: &Value, currency: Option<&str>) -> String {
    let typed = match (ty, v) {
        (Type::Money, Value::Number(n)) => n.as_i64().map(|m| match currency {
            Some(c) => format!(
                "{} {}",
                crate::base::Money::from_minor(m).grouped(),
                escape(c)
            ),
            None => crate::base::Money::from_minor(m).grouped(),
        }),
        (Type::Date, Value::Number(n)) => n.as_i64().map(|t| {
            let full = format_time(t);
            if t.rem_euclid(86_400) == 0 {
                full[..full.len().min(10)].to_string()
            } else {
                full
            }
        }),
        (Type::Timestamp, Value::Number(n)) => n.as_i64().map(format_time),
        (Type::Int, Value::Number(n)) => n.as_i64().map(|i| i.to_string()),
        (Type::Duration, Value::Number(n)) => n.as_i64().map(|i| format!("{i} s")),
        (Type::Bool, Value::Bool(b)) => Some(b.to_string()),
        (Type::Iban, Value::String(s)) => Some(
            if !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
            {
                s.as_bytes()
                    .chunks(4)
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            } else {
                escape(s).replace(' ', "\\u{20}")
            },
        ),
        (
            Type::Text
            | Type::Email
            | Type::Id
            | Type::Currency
            | Type::Phone
            | Type::Url
            | Type::Path
            | Type::Enum(_),
            Value::String(s),
        ) => Some(escape(s)),
        _ => None,
    };
    match typed {
        Some(t) if read(ty, &t).as_ref() == Ok(v) => t,
        _ => format!("{JSON}{}", escape(&v.to_string())),
    }
}

/// The value a [`display`]ed line stands for.
fn read(ty: &Type, text: &str) -> Result<Value, String> {
    if let Some(json) = text.strip_prefix(JSON) {
        return serde_json::from_str(&unescape(json)?).map_err(|e| e.to_string());
    }
    let int = |s: &str| {
        s.parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("`{s}` is not a whole number"))
    };
    match ty {
        Type::Money => {
            let number = text.split(' ').next().unwrap_or("").replace(',', "");
            crate::base::Money::parse(number.trim()).map(|m| Value::from(m.minor()))
        }
        Type::Date | Type::Timestamp => crate::base::json::parse_time_str(text).map(Value::from),
        Type::Int => int(text),
        Type::Duration => int(text.strip_suffix(" s").unwrap_or(text)),
        Type::Bool => match text {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("`{text}` is not true or false")),
        },
        Type::Iban => unescape(&text.replace(' ', "")).map(Value::String),
        Type::List(_) | Type::Set(_) => Err("a list shown as one value".into()),
        _ => unescape(text).map(Value::String),
    }
}

fn chars_of(v: &Value) -> usize {
    match v {
        Value::String(s) => s.chars().count(),
        Value::Array(items) => items.iter().map(chars_of).sum(),
        other => other.to_string().chars().count(),
    }
}

/// A value shown only in part: too long to approve.
fn cut(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(s.chars().take(TOO_LONG_SHOWN).collect()),
        Value::Array(items) => {
            let mut left = TOO_LONG_SHOWN;
            let mut out = vec![];
            for i in items {
                if left == 0 {
                    break;
                }
                let c = chars_of(i);
                if c <= left {
                    out.push(i.clone());
                    left -= c;
                } else {
                    out.push(cut(i));
                    left = 0;
                }
            }
            Value::Array(out)
        }
        other => other.clone(),
    }
}

/// The origins of a parameter, one per element for a list.
fn origins_of(op: &PendingOp, param: &str) -> Vec<String> {
    match op.origins.get(param) {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        // a record's (or a list of records'): its critical fields' origins, once
        Some(v) => {
            let mut out: Vec<String> = vec![];
            nested_origins(v, &mut out);
            out
        }
        None => vec![],
    }
}

fn nested_origins(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if !out.contains(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| nested_origins(i, out)),
        Value::Object(m) => m.values().for_each(|i| nested_origins(i, out)),
        _ => {}
    }
}

/// An origin without the `(ref `id`)` the proposal named it by.
fn source_of(origin: &str) -> &str {
    origin.split(" (ref `").next().unwrap_or(origin)
}

/// An origin as a person reads it.
fn human_source(origins: &[String]) -> String {
    if origins.is_empty() {
        return "the agent's proposal".into();
    }
    let mut parts: Vec<String> = vec![];
    for o in origins {
        let s = match o.as_str() {
            "proposal" => "the agent's proposal".to_string(),
            // as the receipt writes it, without the agent-facing backticks
            // around the reference the proposal named it by
            o => escape(&o.replace(" (ref `", " (ref ").replace("`)", ")")),
        };
        if !parts.contains(&s) {
            parts.push(s);
        }
    }
    parts.join("; ")
}

/// What the owner's registry calls `value` of `param`, if it came from a
/// registry record with a name (a keyed record's `name` field; a set
/// entry's `name`, else its `id`).
fn registry_name(
    gw: &Gateway,
    tx: &mut dyn Tx,
    op: &PendingOp,
    param: &str,
    origin: &str,
    value: &Value,
) -> Result<Option<String>, StoreError> {
    let Some(a) = gw.actions.get(&op.action) else {
        return Ok(None);
    };
    let Some(p) = a.table.action.param(param) else {
        return Ok(None);
    };
    let origin = source_of(origin);
    let Some(source) = p.sources.iter().find(|s| s.to_string() == origin) else {
        return Ok(None);
    };
    let regs = Registries {
        world: &gw.world,
        pack: &a.table.pack,
        owner: &op.owner,
    };
    let reg_of = |name: &str| a.pack.registries.iter().find(|r| r.name == name);
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let named = |rec: Option<Map<String, Value>>| {
        rec.and_then(|r| r.get("name").and_then(Value::as_str).map(str::to_string))
    };
    Ok(match source {
        Source::Claim { .. } => None,
        Source::Registry { registry } => match reg_of(registry) {
            Some(reg) if matches!(reg.shape, RegistryShape::Set { .. }) => {
                regs.entry_name(tx, reg, &text(value))?
            }
            Some(reg) => named(regs.record(tx, reg, &text(value))?),
            None => None,
        },
        Source::Lookup(l) => {
            // the record the value was read from: its key from the
            // operation's own values (a claim's key is not in the record)
            match (
                lookup_key(&regs, tx, &a.pack.registries, op, &l.key)?,
                reg_of(&l.registry),
            ) {
                (Some(k), Some(reg)) => named(regs.record(tx, reg, &k)?),
                _ => None,
            }
        }
    }
    .map(|n| escape(&n)))
}

/// The key a lookup reads its record under, from the operation's values.
fn lookup_key(
    regs: &Registries<'_>,
    tx: &mut dyn Tx,
    registries: &[crate::ir::Registry],
    op: &PendingOp,
    k: &Key,
) -> Result<Option<String>, StoreError> {
    let text = |v: Value| match v {
        Value::String(s) => s,
        other => other.to_string(),
    };
    Ok(match k {
        Key::Param { param } => op.resolved.get(param).cloned().map(text),
        Key::Claim { .. } => None,
        Key::Lookup { lookup } => {
            let inner = lookup_key(regs, tx, registries, op, &lookup.key)?;
            match (inner, registries.iter().find(|r| r.name == lookup.registry)) {
                (Some(inner), Some(reg)) => regs
                    .record(tx, reg, &inner)?
                    .and_then(|r| r.get(&lookup.field).cloned())
                    .map(text),
                _ => None,
            }
        }
    })
}

/// A rule's reason from the bundle, else the stored one, without the
/// agent-facing backticks.
fn plain(s: &str) -> String {
    escape(&s.replace('`', ""))
}

/// The pending operation `op` as the approver sees it, at `now`.
pub fn show(gw: &Gateway, op: &PendingOp, now: i64) -> Result<Shown, StoreError> {
    // a router reads the operation on the shard that holds it
    let gw = gw.op_shard(&op.operation_hash)?.unwrap_or(gw);
    let mut names: Vec<Vec<Option<String>>> = vec![];
    gw.store.transaction(&mut |tx| {
        names.clear();
        for (k, v) in &op.resolved {
            let origins = origins_of(op, k);
            let mut row = vec![];
            match v {
                Value::Array(items) => {
                    for (i, item) in items.iter().enumerate() {
                        let o = origins.get(i).or(origins.first());
                        row.push(match o {
                            Some(o) => registry_name(gw, tx, op, k, o, item)?,
                            None => None,
                        });
                    }
                }
                v => row.push(match origins.first() {
                    Some(o) => registry_name(gw, tx, op, k, o, v)?,
                    None => None,
                }),
            }
            names.push(row);
        }
        Ok(Value::Null)
    })?;
    Ok(shown_with(gw, op, now, names))
}

fn shown_with(gw: &Gateway, op: &PendingOp, now: i64, names: Vec<Vec<Option<String>>>) -> Shown {
    let param = |k: &str| {
        gw.actions
            .get(&op.action)
            .and_then(|a| a.table.action.param(k))
    };
    let ty_of = |k: &str| param(k).map_or(Type::Text, |p| p.ty.clone());
    let currency = op
        .resolved
        .iter()
        .find(|(k, _)| ty_of(k) == Type::Currency)
        .and_then(|(_, v)| v.as_str())
        .map(str::to_string);
    let mut too_long = None;
    let values: Vec<Field> = op
        .resolved
        .iter()
        .zip(names.into_iter().chain(std::iter::repeat(vec![])))
        .map(|((k, v), names)| {
            let ty = ty_of(k);
            let chars = chars_of(v);
            let long = chars > MAX_VALUE_CHARS;
            if long && too_long.is_none() {
                too_long = Some((k.clone(), chars));
            }
            let shown = if long { cut(v) } else { v.clone() };
            let (list, items) = match (&ty, &shown) {
                (Type::List(e) | Type::Set(e), Value::Array(xs)) => (
                    true,
                    xs.iter()
                        .map(|x| fold(&display(e, x, currency.as_deref())))
                        .collect(),
                ),
                _ => (
                    false,
                    vec![fold(&display(&ty, &shown, currency.as_deref()))],
                ),
            };
            let origins = origins_of(op, k);
            let origin_kind = origins
                .first()
                .and_then(|o| o.split('.').next())
                .unwrap_or("proposal")
                .to_string();
            Field {
                name: escape(k).replace(' ', "\\u{20}"),
                list,
                items,
                names,
                origin: if origins.is_empty() {
                    "proposal".into()
                } else {
                    escape(&origins.join(", "))
                },
                origin_kind: escape(&origin_kind),
                source: human_source(&origins),
                new: op.new_values.contains(k),
                secret: param(k).is_some_and(|p| p.secret),
                chars,
                too_long: long,
            }
        })
        .collect();
    let rules: Vec<RuleShown> = op
        .policies
        .iter()
        .filter_map(|id| gw.rule(&op.action, id).map(|r| (id, r)))
        .filter(|(_, r)| r.kind.level() > 0)
        .map(|(id, r)| RuleShown {
            policy: escape(id),
            rule: r.kind.keyword().replace('_', "-"),
            reason: plain(&r.reason),
            level: r.kind.level(),
            role: r.role.as_deref().map(escape),
        })
        .collect();
    let why = if rules.is_empty() {
        vec![plain(&op.reason)]
    } else {
        rules
            .iter()
            .map(|r| {
                let role = r
                    .role
                    .as_ref()
                    .map_or(String::new(), |x| format!(", by role {x}"));
                format!("{} ({} rule{role}, policy {})", r.reason, r.rule, r.policy)
            })
            .collect()
    };
    let user = escape(&op.user);
    let owner = escape(&op.owner);
    let second = {
        let roles: Vec<String> = op.roles.iter().map(|r| escape(r)).collect();
        if roles.is_empty() {
            format!("a second person of {owner}")
        } else {
            format!(
                "a second person of {owner} with the role {}",
                roles.join(" and ")
            )
        }
    };
    let approve_by = match op.level {
        0 | 1 => format!("{user} (the mandate's user)"),
        _ => format!("{user} (the mandate's user) and {second}"),
    };
    let level_text = match op.level {
        1 => "step-up: the user approves".to_string(),
        2 => "four eyes: the user and a second person".to_string(),
        n => format!("level {n}"),
    };
    let refusal = too_long.as_ref().map(|(p, chars)| {
        RenderError::TooLong {
            param: escape(p),
            chars: *chars,
            max: MAX_VALUE_CHARS,
        }
        .to_string()
    });
    Shown {
        operation_hash: escape(&op.operation_hash),
        bundle: escape(gw.bundle_hash()),
        pack: escape(&op.pack),
        action: escape(&op.action),
        mandate: escape(&op.mandate),
        user,
        owner,
        level: op.level,
        level_text,
        why,
        rules,
        approve_by,
        approved_by: op.approved_by(now).iter().map(|n| escape(n)).collect(),
        expired_approvals: op
            .expired_approvals(now)
            .iter()
            .map(|n| escape(n))
            .collect(),
        declined_by: op.declined_by.iter().map(|n| escape(n)).collect(),
        created: format_time(op.created_at),
        expires_at: op.expires_at,
        expires: format_time(op.expires_at),
        values,
        refusal,
        too_long,
    }
}

fn label(t: &mut String, k: &str, v: &str) {
    let _ = writeln!(t, "{k:<LABEL$}{v}");
}

impl Shown {
    /// The plain text: what `ipc approve` and `ipc approvals show` print
    /// and elicitation asks with.
    pub fn text(&self) -> String {
        let mut t = String::new();
        label(&mut t, "operation", &self.operation_hash);
        if let Some(r) = &self.refusal {
            label(&mut t, "REFUSED", r);
        }
        label(&mut t, "action", &self.action);
        label(&mut t, "pack", &self.pack);
        let whom = if self.owner == self.user {
            self.user.clone()
        } else {
            format!("{} of {}", self.user, self.owner)
        };
        label(&mut t, "for", &whom);
        label(&mut t, "mandate", &self.mandate);
        label(
            &mut t,
            "level",
            &format!("{}, {}", self.level, self.level_text),
        );
        for w in &self.why {
            label(&mut t, "why", w);
        }
        label(&mut t, "approval by", &self.approve_by);
        if !self.approved_by.is_empty() {
            label(&mut t, "approved by", &self.approved_by.join(", "));
        }
        if !self.expired_approvals.is_empty() {
            label(
                &mut t,
                "expired",
                &format!(
                    "the approval of {} expired (it counts for nothing)",
                    self.expired_approvals.join(", ")
                ),
            );
        }
        if !self.declined_by.is_empty() {
            label(&mut t, "declined by", &self.declined_by.join(", "));
        }
        label(&mut t, "expires", &self.expires);
        label(&mut t, "bundle", &self.bundle);
        label(&mut t, "values", &self.values.len().to_string());
        for f in &self.values {
            let mut head = format!("  {}  from {}", f.name, f.source);
            if !f.list
                && let Some(Some(n)) = f.names.first()
            {
                let _ = write!(head, ": {n}");
            }
            if f.new {
                head.push_str("  NEW: not among the owner's records");
            }
            if f.secret {
                head.push_str("  (a secret: shown as its commitment)");
            }
            let _ = writeln!(t, "{head}");
            if f.list && f.items.is_empty() {
                let _ = writeln!(t, "{NONE}");
            }
            for (i, item) in f.items.iter().enumerate() {
                for (j, line) in item.iter().enumerate() {
                    let start = if f.list && j == 0 { ITEM } else { LINE };
                    let _ = writeln!(t, "{start}{line}");
                }
                // an element's registry name on a line of its own, six
                // spaces in: never read back as part of a value
                if let (true, Some(Some(n))) = (f.list, f.names.get(i)) {
                    let _ = writeln!(t, "      ({n})");
                }
            }
            if f.too_long {
                let _ = writeln!(
                    t,
                    "    ({} characters in all: too long to be shown whole, so it cannot be approved)",
                    f.chars
                );
            }
        }
        t
    }

    /// Whether it may be approved: refused when a value is too long to show.
    pub fn approvable(&self) -> Result<(), RenderError> {
        match &self.too_long {
            Some((param, chars)) => Err(RenderError::TooLong {
                param: escape(param),
                chars: *chars,
                max: MAX_VALUE_CHARS,
            }),
            None => Ok(()),
        }
    }

    /// What the signer does before signing `hash`: approvable, and the
    /// operation hash recomputed from the fields read back from the text
    /// shown (the signer's own bundle) is `hash`.
    pub fn check(&self, gw: &Gateway, hash: &str) -> Result<(), RenderError> {
        self.approvable()?;
        let unreadable = |reason: String| RenderError::Unreadable {
            hash: hash.to_string(),
            reason,
        };
        let p = parse(&self.text(), &|action, param| gw.param_type(action, param))
            .map_err(unreadable)?;
        let shown = crate::gateway::operation_hash(&p.mandate, &p.bundle, &p.action, &p.resolved)
            .map_err(|e| unreadable(e.to_string()))?;
        if shown != hash || p.operation_hash != hash || p.bundle != gw.bundle_hash() {
            return Err(RenderError::Mismatch {
                hash: hash.to_string(),
                shown,
            });
        }
        Ok(())
    }
}

/// Shows `op` and checks that it may be signed (see [`Shown::check`]).
pub fn checked(gw: &Gateway, op: &PendingOp) -> Result<Shown, RenderError> {
    let s = show(gw, op, gw.now().map_err(StoreError::from)?)?;
    s.check(gw, &op.operation_hash)?;
    Ok(s)
}

/// The operation's fields from its [`Shown::text`]; `ty` gives each
/// parameter's type (`None`: text).
pub fn parse(text: &str, ty: &dyn Fn(&str, &str) -> Option<Type>) -> Result<Parsed, String> {
    struct Param {
        name: String,
        list: bool,
        empty_list: bool,
        items: Vec<String>,
    }
    let mut fields: Map<String, Value> = Map::new();
    let mut params: Vec<Param> = vec![];
    let mut in_values = false;
    for line in text.split('\n') {
        if let Some(rest) = line.strip_prefix("    ") {
            let p = params.last_mut().ok_or("a value line outside a value")?;
            if rest.starts_with("  (") {
                // an element's registry name
                continue;
            }
            if rest.starts_with('(') && rest.ends_with(')') && !rest.starts_with("(none") {
                return Err("a value is not shown whole".into());
            }
            if rest == "(none)" {
                if !p.items.is_empty() {
                    return Err("`(none)` after elements".into());
                }
                p.list = true;
                p.empty_list = true;
            } else if let Some(c) = rest.strip_prefix("- ") {
                if p.empty_list || (!p.list && !p.items.is_empty()) {
                    return Err(format!("`{}` mixes a list and a value", p.name));
                }
                p.list = true;
                p.items.push(c.to_string());
            } else if let Some(c) = rest.strip_prefix("| ") {
                if p.empty_list {
                    return Err(format!("`{}` mixes a list and a value", p.name));
                }
                match p.items.last_mut() {
                    Some(last) => last.push_str(c),
                    None if !p.list => p.items.push(c.to_string()),
                    None => return Err("a continuation before the first element".into()),
                }
            } else {
                return Err("a value line that is neither `| ` nor `- `".into());
            }
        } else if let Some(rest) = line.strip_prefix("  ") {
            if !in_values {
                return Err("a parameter before `values`".into());
            }
            let name = unescape(rest.split(' ').next().unwrap_or(""))?;
            if name.is_empty() || params.iter().any(|p| p.name == name) {
                return Err(format!(
                    "the parameter `{}` is empty or repeated",
                    escape(&name)
                ));
            }
            params.push(Param {
                name,
                list: false,
                empty_list: false,
                items: vec![],
            });
        } else if !line.is_empty() {
            let (k, v) = match (line.get(..LABEL), line.get(LABEL..)) {
                (Some(k), Some(v)) => (k.trim_end(), v),
                _ => (line.trim_end(), ""),
            };
            if in_values {
                return Err(format!("the label `{}` after the values", escape(k)));
            }
            match k {
                "operation" | "bundle" | "action" | "mandate" => {
                    if fields.contains_key(k) {
                        return Err(format!("`{k}` twice"));
                    }
                    fields.insert(k.to_string(), Value::String(unescape(v)?));
                }
                "values" => in_values = true,
                _ => {}
            }
        }
    }
    let get = |k: &str| {
        fields
            .get(k)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("no `{k}`"))
    };
    let action = get("action")?;
    let mut resolved = Map::new();
    for p in params {
        let t = ty(&action, &p.name).unwrap_or(Type::Text);
        let v = match (&t, p.list) {
            (Type::List(e) | Type::Set(e), true) => Value::Array(
                p.items
                    .iter()
                    .map(|i| read(e, i))
                    .collect::<Result<_, _>>()?,
            ),
            (_, true) => return Err(format!("`{}` is shown as a list", p.name)),
            (_, false) => match p.items.as_slice() {
                [one] => read(&t, one)?,
                _ => return Err(format!("`{}` has no value", p.name)),
            },
        };
        resolved.insert(p.name, v);
    }
    Ok(Parsed {
        operation_hash: get("operation")?,
        bundle: get("bundle")?,
        action,
        mandate: get("mandate")?,
        resolved,
    })
}

/// A claim value as a [`Widening::Claim`] names it: a string escaped, any
/// other value as its JSON, escaped.
pub(crate) fn shown_value(v: &Value) -> String {
    match v {
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
