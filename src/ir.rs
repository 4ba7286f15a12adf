//! The checked IR: what a pack means, independent of how it was written.
//!
//! Everything here has been checked by `crate::check`: every name resolves,
//! every critical parameter has a trusted source, every expression is typed.
//! Code generation (Cedar) and the runtime table are built from this alone,
//! so a second front-end (the MCP proxy's TOML) only has to produce it.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A rule's kind, and the approval level it demands. The IR's own
/// vocabulary: each front-end (the pack language, the MCP proxy's TOML)
/// lowers its syntax to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum RuleKind {
    Forbid,
    StepUp,
    FourEyes,
}

impl RuleKind {
    pub fn keyword(self) -> &'static str {
        match self {
            RuleKind::Forbid => "forbid",
            RuleKind::StepUp => "step_up",
            RuleKind::FourEyes => "four_eyes",
        }
    }
    /// The approval level a rule of this kind demands (0 for a forbid,
    /// which no approval lifts).
    pub fn level(self) -> u8 {
        match self {
            RuleKind::Forbid => 0,
            RuleKind::StepUp => 1,
            RuleKind::FourEyes => 2,
        }
    }
}

/// A binary operator of a typed expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinOp {
    Or,
    And,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    In,
    Add,
    Sub,
}

impl BinOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Or => "or",
            BinOp::And => "and",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::In => "in",
            BinOp::Add => "+",
            BinOp::Sub => "-",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "of", rename_all = "snake_case")]
pub enum Type {
    Text,
    Int,
    /// Integer minor units (cents).
    Money,
    Bool,
    /// Seconds since the Unix epoch, at midnight UTC.
    Date,
    /// Seconds since the Unix epoch.
    Timestamp,
    /// Seconds.
    Duration,
    Iban,
    Email,
    Id,
    Currency,
    Phone,
    Url,
    /// A file-system path, normalised lexically and strictly (`path`):
    /// as a critical parameter, a registry or claim of paths vouches for
    /// it when it is one of them or inside one of them.
    Path,
    Enum(Vec<String>),
    List(Box<Type>),
    Set(Box<Type>),
    /// `{ field: Type, ... }`: a JSON object with exactly these fields (an
    /// optional one may be absent), in this order. A parameter only (a
    /// claim or a registry holds no record); its fields' sources,
    /// normalisers and validators are the parameter's `fields`.
    Record(Vec<FieldType>),
    /// `selection over registry.R` (a mandate claim only): the claim's
    /// value is a query the gateway evaluates over the keyed registry `R`
    /// (its name here); a critical value it vouches for is one of the keys
    /// the query returns ([`crate::gateway::selection`]).
    Selection(String),
}

/// One field of a record type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldType {
    pub name: String,
    pub ty: Type,
    /// The object may leave it out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// The scalar type names the language knows, as written.
pub const SCALAR_TYPES: &[(&str, Type)] = &[
    ("Text", Type::Text),
    ("Int", Type::Int),
    ("Money", Type::Money),
    ("Bool", Type::Bool),
    ("Date", Type::Date),
    ("Timestamp", Type::Timestamp),
    ("Duration", Type::Duration),
    ("Iban", Type::Iban),
    ("Email", Type::Email),
    ("Id", Type::Id),
    ("Currency", Type::Currency),
    ("Phone", Type::Phone),
    ("Url", Type::Url),
    ("Path", Type::Path),
];

impl Type {
    /// Represented as a string at run time (and in Cedar).
    pub fn is_stringy(&self) -> bool {
        matches!(
            self,
            Type::Text
                | Type::Iban
                | Type::Email
                | Type::Id
                | Type::Currency
                | Type::Phone
                | Type::Url
                | Type::Path
                | Type::Enum(_)
        )
    }
    /// Ordered and represented as a 64-bit integer.
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            Type::Int | Type::Money | Type::Date | Type::Timestamp | Type::Duration
        )
    }
    pub fn is_time(&self) -> bool {
        matches!(self, Type::Date | Type::Timestamp)
    }
    pub fn is_collection(&self) -> bool {
        matches!(self, Type::List(_) | Type::Set(_))
    }
    /// A record, or a collection of records.
    pub fn is_record(&self) -> bool {
        matches!(self.element(), Type::Record(_))
    }
    /// The record's fields (or its elements' for a list of records).
    pub fn record_fields(&self) -> &[FieldType] {
        match self.element() {
            Type::Record(fs) => fs,
            _ => &[],
        }
    }
    /// The normaliser that gives a value of this type (or of its elements)
    /// its one canonical spelling, when the pack names none: registry
    /// values are stored in it, proposals compared in it.
    pub fn canonical_normalizer(&self) -> Option<Normalizer> {
        match self.element() {
            Type::Iban => Some(Normalizer::Iban),
            Type::Email => Some(Normalizer::Email),
            Type::Phone => Some(Normalizer::Phone),
            Type::Path => Some(Normalizer::Path),
            _ => None,
        }
    }

    /// The element type of a collection, or the type itself.
    pub fn element(&self) -> &Type {
        match self {
            Type::List(t) | Type::Set(t) => t,
            t => t,
        }
    }
}

impl fmt::Display for Type {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Type::Enum(vs) => write!(f, "enum({})", vs.join(", ")),
            Type::List(t) => write!(f, "list<{t}>"),
            Type::Set(t) => write!(f, "set<{t}>"),
            Type::Record(fs) => {
                f.write_str("{ ")?;
                for (i, x) in fs.iter().enumerate() {
                    let sep = if i + 1 < fs.len() { "," } else { "" };
                    let opt = if x.optional { " optional" } else { "" };
                    write!(f, "{}: {}{opt}{sep} ", x.name, x.ty)?;
                }
                f.write_str("}")
            }
            Type::Selection(r) => write!(f, "selection over registry.{r}"),
            other => {
                let name = SCALAR_TYPES
                    .iter()
                    .find(|(_, t)| t == other)
                    .map(|(n, _)| *n)
                    .unwrap_or("?");
                f.write_str(name)
            }
        }
    }
}

/// A literal value, after parsing (money already in minor units).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum Value {
    Int(i64),
    Money(i64),
    Str(String),
    Bool(bool),
    Duration(i64),
    List(Vec<Value>),
}

impl Value {
    /// The runtime form of a literal, as the gateway handles values: money
    /// and durations as integers, lists as arrays.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Int(i) | Value::Money(i) | Value::Duration(i) => serde_json::Value::from(*i),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::List(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_json).collect())
            }
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Pack {
    pub name: String,
    pub version: String,
    pub description: String,
    /// The pack file, as given to the checker (for annotations).
    pub file: String,
    pub claims: Vec<Claim>,
    pub registries: Vec<Registry>,
    pub actions: Vec<Action>,
    /// What the pack promises for every input, each proven by `ipc build`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guarantees: Vec<Guarantee>,
    /// `shadow never`: no gateway may run this pack in shadow mode.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow_never: bool,
}

/// `guarantee "reason" never allow ...` / `... need level N ...`, checked:
/// the actions it covers now, each with its condition over what the
/// action's Cedar context holds (parameters, facts, and the facts the
/// checker added for the registry reads of the condition).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Guarantee {
    pub reason: String,
    /// `None`: never allowed, at any approval level; `Some(n)`: not
    /// allowed below approval level `n`.
    pub level: Option<u8>,
    /// The actions it names, as written (`payment.*`).
    pub scope: String,
    pub covers: Vec<Covered>,
    /// 1-based line of the `guarantee` keyword.
    pub line: usize,
}

/// One action a guarantee covers, and its condition there (`None`: always).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Covered {
    pub action: String,
    pub when: Option<Expr>,
}

impl Pack {
    pub fn claim(&self, name: &str) -> Option<&Claim> {
        self.claims.iter().find(|c| c.name == name)
    }
    pub fn registry(&self, name: &str) -> Option<&Registry> {
        self.registries.iter().find(|r| r.name == name)
    }
    pub fn action(&self, name: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub name: String,
    pub ty: Type,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Registry {
    pub name: String,
    /// `false`: records are scoped to the mandate's owner (tenant).
    pub global: bool,
    pub shape: RegistryShape,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistryShape {
    /// A set of values; a source means membership.
    Set { element: Type },
    /// Records by key; a source means the key exists, a lookup reads a field.
    Keyed { key: Type, fields: Vec<Claim> },
}

impl Registry {
    /// The type of the values membership is tested against.
    pub fn member_type(&self) -> &Type {
        match &self.shape {
            RegistryShape::Set { element } => element,
            RegistryShape::Keyed { key, .. } => key,
        }
    }
    pub fn field(&self, name: &str) -> Option<&Type> {
        match &self.shape {
            RegistryShape::Keyed { fields, .. } => {
                fields.iter().find(|f| f.name == name).map(|f| &f.ty)
            }
            RegistryShape::Set { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Action {
    pub name: String,
    pub description: String,
    pub scope: String,
    /// The Money parameter added up per mandate.
    pub budget: Option<String>,
    pub executor: String,
    pub params: Vec<Param>,
    pub facts: Vec<Fact>,
    pub rules: Vec<Rule>,
    /// 1-based line of the `action` keyword.
    pub line: usize,
}

impl Action {
    pub fn param(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }
    pub fn fact(&self, name: &str) -> Option<&Fact> {
        self.facts.iter().find(|p| p.name == name)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Param {
    pub name: String,
    pub ty: Type,
    pub critical: bool,
    /// Tried in order; the first that vouches for the value is its origin.
    pub sources: Vec<Source>,
    pub normalize: Option<Normalizer>,
    pub validators: Vec<Validator>,
    /// A parameter with a default may be left out of a proposal.
    pub default: Option<Value>,
    /// Shown to the agent when the value is refused (where the user can fix it).
    pub hint: Option<String>,
    /// `secret`: only the executor sees the value; receipts, decisions and
    /// the operation hash hold a salted commitment to it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub secret: bool,
    /// `optional`: the proposal may leave it out, and then it is absent
    /// (not sent, not in the Cedar context); a critical one, when given,
    /// must come from its trusted sources like any other.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
    /// For a record (or a list of records): one entry per field of the
    /// record type, in its order, each with the field's own critical flag,
    /// sources, normaliser and validators (never a default or a secret).
    /// Every element's critical field must come from a trusted source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<Param>,
    pub line: usize,
}

impl Param {
    /// Whether a trusted source must vouch for it: a critical parameter,
    /// or a record with a critical field (at any depth).
    pub fn vouched(&self) -> bool {
        self.critical || self.fields.iter().any(Param::vouched)
    }
    /// The field of a record parameter.
    pub fn field(&self, name: &str) -> Option<&Param> {
        self.fields.iter().find(|f| f.name == name)
    }
    /// This parameter and every field inside it, depth first.
    pub fn walk(&self) -> Vec<&Param> {
        let mut out = vec![self];
        for f in &self.fields {
            out.extend(f.walk());
        }
        out
    }
    /// The normaliser the gateway applies: the pack's, or the type's
    /// canonical one.
    pub fn normalizer(&self) -> Option<Normalizer> {
        self.normalize.or_else(|| self.ty.canonical_normalizer())
    }
}

/// Where a critical value must come from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// The mandate's claim: equal to it, or a member of it if it is a set.
    Claim { claim: String },
    /// A member of the registry (of this owner unless global); for a keyed
    /// registry, an existing key.
    Registry { registry: String },
    /// Equal to a field of a record found by a trusted key.
    Lookup(Lookup),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lookup {
    pub registry: String,
    pub key: Key,
    pub field: String,
}

/// What a source lookup is keyed by; always trusted (checked).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Key {
    Param { param: String },
    Claim { claim: String },
    Lookup { lookup: Box<Lookup> },
}

impl Source {
    /// The source's name (`mandate.payee`, `registry.beneficiaries`, a
    /// lookup's path), as a value's origin records it: concatenated, not
    /// formatted, since the gateway names one per critical value of every
    /// decision. [`Display`](fmt::Display) writes the same.
    pub fn name(&self) -> String {
        match self {
            Source::Claim { claim } => ["mandate.", claim].concat(),
            Source::Registry { registry } => ["registry.", registry].concat(),
            Source::Lookup(l) => l.to_string(),
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "registry.{}[{}].{}", self.registry, self.key, self.field)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Param { param } => f.write_str(param),
            Key::Claim { claim } => write!(f, "mandate.{claim}"),
            Key::Lookup { lookup } => write!(f, "{lookup}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Normalizer {
    /// Strip spaces, upper-case, verify the mod-97 checksum.
    Iban,
    /// Trim, NFKC, lower-case; refuse invisible and mixed-script characters.
    Email,
    /// Keep `+` and digits.
    Phone,
    Lower,
    Upper,
    Trim,
    /// `.`, `..` and repeated separators resolved lexically; a path that
    /// leaves its root (`../x`, `/..`) refused, never folded.
    Path,
}

/// Normaliser names, as written, with the types each applies to.
pub const NORMALIZERS: &[(&str, Normalizer)] = &[
    ("iban", Normalizer::Iban),
    ("email", Normalizer::Email),
    ("phone", Normalizer::Phone),
    ("lower", Normalizer::Lower),
    ("upper", Normalizer::Upper),
    ("trim", Normalizer::Trim),
    ("path", Normalizer::Path),
];

impl Normalizer {
    pub fn name(self) -> &'static str {
        NORMALIZERS
            .iter()
            .find(|(_, n)| *n == self)
            .map(|(s, _)| *s)
            .unwrap_or("?")
    }
    /// Whether it applies to values (or elements) of this type.
    pub fn applies_to(self, t: &Type) -> bool {
        let t = t.element();
        match self {
            Normalizer::Iban => *t == Type::Iban,
            Normalizer::Email => *t == Type::Email,
            Normalizer::Phone => *t == Type::Phone,
            Normalizer::Path => *t == Type::Path,
            Normalizer::Lower | Normalizer::Upper | Normalizer::Trim => {
                t.is_stringy() && !matches!(t, Type::Enum(_))
            }
        }
    }
    pub fn applies_to_text(self) -> &'static str {
        match self {
            Normalizer::Iban => "Iban",
            Normalizer::Email => "Email",
            Normalizer::Phone => "Phone",
            Normalizer::Path => "Path",
            _ => "text types (Text, Id, Iban, Email, Currency, Phone, Url, Path)",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Validator {
    /// Inclusive bounds, in the parameter's unit (minor units for Money).
    Range {
        min: i64,
        max: i64,
    },
    MinLen {
        len: u64,
    },
    MaxLen {
        len: u64,
    },
    Pattern {
        regex: String,
    },
    MinItems {
        count: u64,
    },
    MaxItems {
        count: u64,
    },
    NonEmpty,
}

/// Validator names, as written.
pub const VALIDATORS: &[&str] = &[
    "range",
    "min_len",
    "max_len",
    "pattern",
    "min_items",
    "max_items",
    "nonempty",
];

/// The executors the gateway provides. `external`: the gateway decides and
/// returns the resolved values; the caller (an MCP downstream tool, a
/// benchmark's runtime) executes with them.
pub const EXECUTORS: &[&str] = &[
    "bank.transfer",
    "bank.standing_order",
    "bank.update_user",
    "bank.update_password",
    "ap.change_iban",
    "ap.pay_invoice",
    "health.read_record",
    "workspace.send_email",
    "workspace.invite",
    "workspace.share_file",
    "workspace.delete",
    "code.merge",
    "external",
];

/// The registries each executor of [`EXECUTORS`] writes (its records'
/// changes, in the store), by registry name: what a selection must not be
/// over (`selection_over_agent_data`). Kept by hand beside the executors'
/// `declared(c, "...")` writes in `gateway::executors`.
pub const EXECUTOR_WRITES: &[(&str, &str)] = &[
    ("bank.standing_order", "standing_orders"),
    ("ap.change_iban", "vendors"),
    ("ap.pay_invoice", "invoices"),
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fact {
    pub name: String,
    pub ty: Type,
    pub expr: Expr,
    pub line: usize,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rule {
    pub kind: RuleKind,
    pub reason: String,
    /// `None`: always.
    pub when: Option<Expr>,
    pub hint: Option<String>,
    /// `four_eyes ... by ROLE`: the role the second approver must hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    pub line: usize,
}

/// A typed expression. Facts may read the mandate and registries; rule
/// conditions only parameters, facts, `now` and literals (they become Cedar).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Expr {
    Lit {
        value: Value,
    },
    Param {
        name: String,
    },
    Fact {
        name: String,
    },
    Claim {
        name: String,
    },
    Now,
    /// A whole registry; only as the right side of `in`.
    Registry {
        name: String,
    },
    /// The keys a selection claim (`mandate.S`, `S: selection over
    /// registry.R`) returns, as the gateway evaluates it for the decision;
    /// only as the right side of `in`.
    Selection {
        claim: String,
        registry: String,
    },
    /// `registry.R[KEY].FIELD`
    Lookup {
        registry: String,
        key: Box<Expr>,
        field: String,
    },
    List {
        items: Vec<Expr>,
    },
    Not {
        expr: Box<Expr>,
    },
    Binary {
        op: BinOp,
        lhs: Box<Expr>,
        rhs: Box<Expr>,
    },
}
