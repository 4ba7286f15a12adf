//! Mandate selections: a claim whose value is a query over a keyed
//! registry (`product: selection over registry.catalogue`), written by the
//! issuer from the user's words and signed in the mandate; the gateway
//! evaluates it over the registry as it reads it for the decision, and a
//! critical value it vouches for must be one of the keys it returns
//! ([decision](../../docs/decisions/mandate-selections.md)).
//!
//! The query language is closed: a conjunction of `[field, op, literal]`,
//! an optional extremum (`pick`), an optional count of distinct keys the
//! mandate may buy under it (`limit`). No pattern, no substring:
//! `contains_word` is a whole word, ASCII case-folded. [`Query::parse`]
//! is the one validation, used at `ipc token issue` and again when a
//! signed mandate is verified (a malformed query is a DENY at authn).

use crate::ir::{Registry, RegistryShape, Type};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The most rows a selection reads: a registry with more is refused (the
/// decision is a DENY), so a decision's work stays bounded.
pub const MAX_ROWS: usize = 10_000;

/// Store namespace of the keys a mandate took under a selection's
/// `limit`: by `<mandate id>\u{1f}<claim>` (with shadow mode's prefix in
/// shadow), the keys so far.
pub const BOUGHT_NS: &str = "selection.bought";
/// The most conditions a query's `where` holds.
pub const MAX_CONDITIONS: usize = 32;
/// The longest literal text (bytes) a condition compares with.
pub const MAX_LITERAL: usize = 256;
/// The most keys a receipt lists of a selection's result (the count is
/// always recorded).
pub const RESULT_SHOWN: usize = 100;
/// The largest `limit` a query may set.
pub const MAX_LIMIT: u64 = 10_000;

const DAY: i64 = 86_400;

/// A query that does not fit the registry it selects from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
pub enum SelectionError {
    /// A selection's query is malformed, or names a field, an operator or
    /// a literal the registry's declaration does not allow: refused when
    /// the mandate is issued (`ipc token issue --claim product=@q.json`),
    /// and a DENY at authn if a signed mandate carries one anyway.
    #[error("the selection over `{registry}` is invalid: {reason}")]
    #[diagnostic(
        code(ipc::mandate::selection_invalid),
        help(
            "a query is {{\"where\": [[field, op, literal], ...], \"pick\": {{\"min\"|\"max\": field}}, \"limit\": N}}: ops `== != < <= > >=` on Int, Money, Date, Timestamp, Duration; `== !=` and `contains_word` on text; a Date may be compared with \"today\" or \"today - N days\""
        )
    )]
    Invalid { registry: String, reason: String },

    /// A selection with no `where` and no `pick`: every record of the
    /// registry is acceptable, so it checks nothing the registry as a
    /// source would not. A warning of `ipc token issue` (the query is the
    /// issuer's, not the pack's): usually a criterion left out.
    #[error("the selection `{claim}` selects every record of `{registry}`")]
    #[diagnostic(
        code(ipc::mandate::selection_selects_all),
        severity(Warning),
        help(
            "write the user's criterion as `where` conditions or a `pick`, or leave the claim out"
        )
    )]
    SelectsAll { claim: String, registry: String },
}

/// A comparison of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    /// A whole word of the field's text, ASCII case-folded.
    ContainsWord,
}

/// The operators as a query writes them.
const OPS: [(&str, Op); 7] = [
    ("==", Op::Eq),
    ("!=", Op::Ne),
    ("<", Op::Lt),
    ("<=", Op::Le),
    (">", Op::Gt),
    (">=", Op::Ge),
    ("contains_word", Op::ContainsWord),
];

impl Op {
    fn parse(s: &str) -> Option<Op> {
        OPS.iter().find(|(t, _)| *t == s).map(|(_, op)| *op)
    }
    fn text(self) -> &'static str {
        OPS.iter()
            .find(|(_, op)| *op == self)
            .map(|(t, _)| *t)
            .unwrap_or("?")
    }
    fn ordered(self) -> bool {
        matches!(self, Op::Lt | Op::Le | Op::Gt | Op::Ge)
    }
}

/// A condition's literal, in the runtime form of the field's type (money
/// in minor units, times in seconds), or the gateway's day.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Value(Value),
    /// `"today"` / `"today - N days"`: midnight UTC of the gateway's clock,
    /// N days before.
    Today {
        days_before: i64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub field: String,
    pub op: Op,
    pub literal: Literal,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Pick {
    Min(String),
    Max(String),
}

/// A checked query.
#[derive(Clone, Debug, PartialEq)]
pub struct Query {
    pub conditions: Vec<Condition>,
    pub pick: Option<Pick>,
    /// Distinct keys the mandate may buy under it.
    pub limit: Option<u64>,
}

/// The keyed registry's fields, or the error for a set registry.
fn fields_of<'r>(
    reg: &'r Registry,
    invalid: &dyn Fn(String) -> SelectionError,
) -> Result<&'r [crate::ir::Claim], SelectionError> {
    match &reg.shape {
        RegistryShape::Keyed { fields, .. } => Ok(fields),
        RegistryShape::Set { .. } => Err(invalid("the registry is not keyed".into())),
    }
}

impl Query {
    /// Checks `v` against the registry's declaration: every field one of
    /// its fields, each operator allowed for the field's type, each literal
    /// of the field's type (an amount as `Money` reads it), `pick` a
    /// numeric or time field.
    pub fn parse(v: &Value, reg: &Registry, pack: &str) -> Result<Query, SelectionError> {
        let invalid = |reason: String| SelectionError::Invalid {
            registry: [pack, ".", &reg.name].concat(),
            reason,
        };
        let fields = fields_of(reg, &invalid)?;
        let Value::Object(o) = v else {
            return Err(invalid(format!(
                "a query is a JSON object, not {}",
                crate::base::json::kind(v)
            )));
        };
        if let Some(k) = o
            .keys()
            .find(|k| !["where", "pick", "limit"].contains(&k.as_str()))
        {
            return Err(invalid(format!(
                "unknown key `{}` (a query has `where`, `pick` and `limit`)",
                crate::base::json::echo(k)
            )));
        }
        let field_ty = |name: &Value, at: &str| -> Result<(String, Type), SelectionError> {
            let Some(name) = name.as_str() else {
                return Err(invalid(format!("{at}: a field is named by a string")));
            };
            match fields.iter().find(|f| f.name == name) {
                Some(f) => Ok((f.name.clone(), f.ty.clone())),
                None => Err(invalid(format!(
                    "{at}: `{}` is not a field of `{}` (its fields: {})",
                    crate::base::json::echo(name),
                    reg.name,
                    fields
                        .iter()
                        .map(|f| f.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))),
            }
        };
        let mut conditions = vec![];
        match o.get("where") {
            None => {}
            Some(Value::Array(items)) => {
                if items.len() > MAX_CONDITIONS {
                    return Err(invalid(format!(
                        "`where` has {} conditions, at most {MAX_CONDITIONS}",
                        items.len()
                    )));
                }
                for (i, c) in items.iter().enumerate() {
                    let at = format!("`where[{i}]`");
                    let Some([f, op, lit]) = c.as_array().map(Vec::as_slice) else {
                        return Err(invalid(format!(
                            "{at}: a condition is `[field, op, literal]`"
                        )));
                    };
                    let (field, ty) = field_ty(f, &at)?;
                    let op = op.as_str().and_then(Op::parse).ok_or_else(|| {
                        invalid(format!(
                            "{at}: unknown operator {} (`==`, `!=`, `<`, `<=`, `>`, `>=`, `contains_word`)",
                            op
                        ))
                    })?;
                    let literal = literal(&ty, op, lit)
                        .map_err(|e| invalid(format!("{at} on `{field}` ({ty}): {e}")))?;
                    conditions.push(Condition { field, op, literal });
                }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "`where` is a list of conditions, not {}",
                    crate::base::json::kind(other)
                )));
            }
        }
        let pick = match o.get("pick") {
            None => None,
            Some(Value::Object(p)) if p.len() == 1 => {
                let (how, f) = p
                    .iter()
                    .next()
                    .ok_or_else(|| invalid("empty `pick`".into()))?;
                let (field, ty) = field_ty(f, "`pick`")?;
                if !ty.is_numeric() {
                    return Err(invalid(format!(
                        "`pick`: `{field}` is {ty}; only a number, an amount or a time has a minimum"
                    )));
                }
                match how.as_str() {
                    "min" => Some(Pick::Min(field)),
                    "max" => Some(Pick::Max(field)),
                    other => {
                        return Err(invalid(format!(
                            "`pick`: `{}` is neither `min` nor `max`",
                            crate::base::json::echo(other)
                        )));
                    }
                }
            }
            Some(_) => {
                return Err(invalid(
                    "`pick` is `{\"min\": field}` or `{\"max\": field}`".into(),
                ));
            }
        };
        let limit = match o.get("limit") {
            None => None,
            Some(n) => match n.as_u64() {
                Some(n) if (1..=MAX_LIMIT).contains(&n) => Some(n),
                _ => {
                    return Err(invalid(format!(
                        "`limit` is a whole number from 1 to {MAX_LIMIT}, not {n}"
                    )));
                }
            },
        };
        Ok(Query {
            conditions,
            pick,
            limit,
        })
    }

    /// Selects nothing narrower than the whole registry.
    pub fn selects_all(&self) -> bool {
        self.conditions.is_empty() && self.pick.is_none()
    }

    /// The keys of `rows` the query returns, in key order: the rows every
    /// condition holds for, then those whose `pick` field is the extremum
    /// (ties all kept). `now`: the gateway's clock (for `today`). A row
    /// whose field does not have its declared form is an error (the
    /// decision is a DENY), never a silent miss.
    pub fn eval(
        &self,
        rows: &BTreeMap<String, Map<String, Value>>,
        now: i64,
    ) -> Result<Vec<String>, String> {
        let today = now.div_euclid(DAY).saturating_mul(DAY);
        let mut hits: Vec<(&String, &Map<String, Value>)> = vec![];
        for (k, row) in rows {
            let mut all = true;
            for c in &self.conditions {
                if !c.holds(k, row, today)? {
                    all = false;
                    break;
                }
            }
            if all {
                hits.push((k, row));
            }
        }
        let Some(pick) = &self.pick else {
            return Ok(hits.into_iter().map(|(k, _)| k.clone()).collect());
        };
        let (field, max) = match pick {
            Pick::Min(f) => (f, false),
            Pick::Max(f) => (f, true),
        };
        let mut best: Option<i64> = None;
        let mut out = vec![];
        for (k, row) in hits {
            let v = int_field(k, row, field)?;
            let better = match best {
                None => true,
                Some(b) => (max && v > b) || (!max && v < b),
            };
            if better {
                best = Some(v);
                out.clear();
            }
            if best == Some(v) {
                out.push(k.clone());
            }
        }
        Ok(out)
    }
}

fn int_field(key: &str, row: &Map<String, Value>, field: &str) -> Result<i64, String> {
    row.get(field).and_then(Value::as_i64).ok_or_else(|| {
        format!(
            "record `{}` has no number in `{field}`",
            crate::base::json::echo(key)
        )
    })
}

impl Condition {
    fn holds(&self, key: &str, row: &Map<String, Value>, today: i64) -> Result<bool, String> {
        let Some(v) = row.get(&self.field) else {
            return Err(format!(
                "record `{}` has no field `{}`",
                crate::base::json::echo(key),
                self.field
            ));
        };
        let lit = match &self.literal {
            Literal::Value(l) => l.clone(),
            Literal::Today { days_before } => {
                Value::from(today.saturating_sub(days_before.saturating_mul(DAY)))
            }
        };
        Ok(match self.op {
            Op::Eq => *v == lit,
            Op::Ne => *v != lit,
            Op::ContainsWord => match (v.as_str(), lit.as_str()) {
                (Some(text), Some(word)) => contains_word(text, word),
                _ => return Err(format!("field `{}` is not text", self.field)),
            },
            op => {
                let (Some(a), Some(b)) = (v.as_i64(), lit.as_i64()) else {
                    return Err(format!(
                        "record `{}` has no number in `{}`",
                        crate::base::json::echo(key),
                        self.field
                    ));
                };
                match op {
                    Op::Lt => a < b,
                    Op::Le => a <= b,
                    Op::Gt => a > b,
                    _ => a >= b,
                }
            }
        })
    }
}

/// Whether `word` is one of the words of `text` (maximal runs of ASCII
/// letters and digits), ASCII case-folded.
pub fn contains_word(text: &str, word: &str) -> bool {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| !w.is_empty() && w.eq_ignore_ascii_case(word))
}

/// A condition's literal, checked against the field's type and operator.
fn literal(ty: &Type, op: Op, lit: &Value) -> Result<Literal, String> {
    if let Value::String(s) = lit
        && s.len() > MAX_LITERAL
    {
        return Err(format!("a literal has at most {MAX_LITERAL} bytes"));
    }
    if op == Op::ContainsWord {
        if !ty.is_stringy() || matches!(ty, Type::Enum(_)) {
            return Err("`contains_word` compares text only".into());
        }
        return match lit.as_str() {
            Some(w) if !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric()) => {
                Ok(Literal::Value(lit.clone()))
            }
            _ => Err(format!(
                "`contains_word` takes one word of ASCII letters and digits, not {lit}"
            )),
        };
    }
    if op.ordered() && !ty.is_numeric() {
        return Err(format!(
            "`{}` compares numbers, amounts and times only",
            op.text()
        ));
    }
    if *ty == Type::Date
        && let Some(s) = lit.as_str()
        && let Some(days_before) = today(s)?
    {
        return Ok(Literal::Today { days_before });
    }
    match ty {
        Type::Selection(_) | Type::Record(_) | Type::List(_) | Type::Set(_) => {
            Err("this field cannot be compared".into())
        }
        t => crate::gateway::world::typed_value(lit, t)
            .map(Literal::Value)
            .map_err(|e| format!("literal {lit}: {e}")),
    }
}

/// `today` → `Some(0)`, `today - N days` → `Some(N)`; any other text is
/// no such form (`None`: read as a date).
fn today(s: &str) -> Result<Option<i64>, String> {
    let Some(rest) = s.strip_prefix("today") else {
        return Ok(None);
    };
    let rest = rest.trim();
    if rest.is_empty() {
        return Ok(Some(0));
    }
    let bad = || {
        format!(
            "`{}` is `today` or `today - N days`",
            crate::base::json::echo(s)
        )
    };
    let n = rest.strip_prefix('-').ok_or_else(bad)?.trim();
    let n = n
        .strip_suffix("days")
        .or_else(|| n.strip_suffix("day"))
        .ok_or_else(bad)?
        .trim();
    match n.parse::<i64>() {
        Ok(d) if (0..=36_600).contains(&d) && n.chars().all(|c| c.is_ascii_digit()) => Ok(Some(d)),
        _ => Err(bad()),
    }
}

/// One selection as a decision evaluated it: what its receipt records.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluated {
    /// `pack.registry`.
    pub registry: String,
    /// `sha256:` of the JCS of the query as signed.
    pub query_hash: String,
    /// `sha256:` of the JCS of the rows read (key to record).
    pub rows_hash: String,
    /// Every key returned, in key order.
    pub result: Vec<String>,
    pub limit: Option<u64>,
    /// The key the decision took under the selection (the critical value
    /// it vouched for, or the value a fact found in it).
    pub picked: Option<String>,
}

impl Evaluated {
    /// The receipt's record of it: the result cut at [`RESULT_SHOWN`] keys,
    /// with their count.
    pub fn to_receipt(&self) -> Value {
        let mut o = Map::new();
        o.insert("query_hash".into(), Value::String(self.query_hash.clone()));
        o.insert("registry".into(), Value::String(self.registry.clone()));
        o.insert("rows_hash".into(), Value::String(self.rows_hash.clone()));
        o.insert(
            "result".into(),
            Value::Array(
                self.result
                    .iter()
                    .take(RESULT_SHOWN)
                    .map(|k| Value::String(k.clone()))
                    .collect(),
            ),
        );
        if self.result.len() > RESULT_SHOWN {
            o.insert("result_count".into(), Value::from(self.result.len()));
        }
        if let Some(p) = &self.picked {
            o.insert("picked".into(), Value::String(p.clone()));
        }
        Value::Object(o)
    }
}

/// Evaluates the selection `claim` (its signed query `q`) over the keyed
/// registry `reg` as `regs` reads it inside `tx`, at the gateway's clock
/// `now`. `Ok(Err(reason))`: the decision refuses (a registry over the
/// bound, a malformed query or row); `Err`: the store failed.
pub fn evaluate(
    regs: &super::registry::Registries<'_>,
    tx: &mut dyn crate::store::Tx,
    reg: &Registry,
    q: &Value,
    now: i64,
) -> Result<Result<Evaluated, String>, crate::store::StoreError> {
    let query = match Query::parse(q, reg, regs.pack) {
        Ok(query) => query,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let rows = match regs.all_records(tx, reg, MAX_ROWS)? {
        Ok(rows) => rows,
        Err(why) => return Ok(Err(why)),
    };
    let hashes = crate::canonical::hash_of(q)
        .and_then(|qh| crate::canonical::hash_of(&rows).map(|rh| (qh, rh)));
    let (query_hash, rows_hash) = match hashes {
        Ok(h) => h,
        Err(e) => return Ok(Err(format!("cannot hash the selection: {e}"))),
    };
    let result = match query.eval(&rows, now) {
        Ok(r) => r,
        Err(e) => return Ok(Err(e)),
    };
    Ok(Ok(Evaluated {
        registry: [regs.pack, ".", &reg.name].concat(),
        query_hash,
        rows_hash,
        result,
        limit: query.limit,
        picked: None,
    }))
}

#[cfg(test)]
#[path = "selection_tests.rs"]
mod tests;
