//! The syntax tree of a pack file: what was written, with a byte span on
//! every node. Nothing here is checked yet; `crate::check` turns it into the
//! IR or into diagnostics.

use serde::Serialize;

/// A byte range in the pack source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }
    pub fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
}

impl From<Span> for miette::SourceSpan {
    fn from(s: Span) -> Self {
        (s.start, s.len()).into()
    }
}

impl<'i> From<pest::Span<'i>> for Span {
    fn from(s: pest::Span<'i>) -> Self {
        Span::new(s.start(), s.end())
    }
}

/// A name as written, with where it was written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    pub text: String,
    pub span: Span,
}

/// A string literal, unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Str {
    pub value: String,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct File {
    pub header: Header,
    pub items: Vec<Item>,
}

#[derive(Clone, Debug)]
pub struct Header {
    pub name: Name,
    pub version: Option<Str>,
    pub description: Option<Str>,
    /// `shadow never`: where it is written.
    pub shadow_never: Option<Span>,
}

#[derive(Clone, Debug)]
pub enum Item {
    Mandate(MandateBlock),
    Registry(RegistryDecl),
    Action(ActionDecl),
    Guarantee(GuaranteeDecl),
}

/// `guarantee "reason" never allow SCOPE when C` or
/// `guarantee "reason" SCOPE need level N when C` (`always` for no condition).
#[derive(Clone, Debug)]
pub struct GuaranteeDecl {
    pub reason: Str,
    /// `None`: never allowed; `Some(level)`: needs at least that level.
    pub level: Option<(i64, Span)>,
    pub scope: GuaranteeScope,
    /// `None` for `always`.
    pub when: Option<Expr>,
    pub span: Span,
}

/// The actions a guarantee covers, as written.
#[derive(Clone, Debug)]
pub enum GuaranteeScope {
    /// `payment.transfer`
    Action(Name),
    /// `payment.*`: every action whose name starts with `payment.`; the name
    /// holds the prefix without `.*`.
    Prefix(Name),
    /// `every action`
    Every(Span),
    /// `every action with payee_iban: Iban`
    WithParam {
        name: Name,
        ty: TypeExpr,
        span: Span,
    },
}

impl GuaranteeScope {
    pub fn span(&self) -> Span {
        match self {
            GuaranteeScope::Action(n) | GuaranteeScope::Prefix(n) => n.span,
            GuaranteeScope::Every(s) | GuaranteeScope::WithParam { span: s, .. } => *s,
        }
    }
}

#[derive(Clone, Debug)]
pub struct MandateBlock {
    pub claims: Vec<Field>,
    pub span: Span,
}

/// `name: Type`, a mandate claim or a registry record field.
#[derive(Clone, Debug)]
pub struct Field {
    pub name: Name,
    pub ty: TypeExpr,
}

#[derive(Clone, Debug)]
pub struct TypeExpr {
    pub kind: TypeExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum TypeExprKind {
    /// `Iban`, `Money`, ...
    Named(Name),
    /// `set<Iban>`, `list<Email>`
    Generic(Name, Box<TypeExpr>),
    /// `enum(open, paid)`
    Enum(Vec<Name>),
    /// `{ oldText: Text, newText: Text max_len 1000 }`
    Record(Vec<RecordField>),
    /// `selection over registry.catalogue` (a mandate claim only): the
    /// registry's name
    Selection(Name),
}

/// `name: Type options...` inside a record type: a field, with the options
/// a parameter takes (critical and its sources, normaliser, validators).
#[derive(Clone, Debug)]
pub struct RecordField {
    pub name: Name,
    pub ty: TypeExpr,
    pub options: Vec<ParamOption>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct RegistryDecl {
    pub name: Name,
    pub shape: RegistryShape,
    pub global: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum RegistryShape {
    /// `registry beneficiaries: set<Iban>`
    Set(TypeExpr),
    /// `registry invoices by Id { vendor: Id, amount: Money }`
    Keyed { key: TypeExpr, fields: Vec<Field> },
}

#[derive(Clone, Debug)]
pub struct ActionDecl {
    pub name: Name,
    pub description: Option<Str>,
    pub clauses: Vec<ActionClause>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ActionClause {
    Scope(Name, Span),
    Budget(Name, Span),
    Executor(Name, Span),
    Param(ParamDecl),
    Fact(FactDecl),
    Rule(RuleDecl),
}

#[derive(Clone, Debug)]
pub struct ParamDecl {
    pub name: Name,
    pub ty: TypeExpr,
    pub options: Vec<ParamOption>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ParamOption {
    /// `critical` or `critical from a | b`; `span` covers the keyword.
    Critical {
        sources: Vec<Path>,
        span: Span,
    },
    Normalize(Name),
    Default(Literal),
    Hint(Str),
    /// `secret`: the value reaches the executor only.
    Secret(Span),
    /// `optional`: the proposal may leave the parameter out.
    Optional(Span),
    /// `max_len 140`, `range 0.01 .. 10.00`, `pattern "..."`, `nonempty`
    Validator(ValidatorDecl),
}

#[derive(Clone, Debug)]
pub struct ValidatorDecl {
    pub name: Name,
    pub args: Vec<Literal>,
    /// `a .. b` was written (two arguments joined by `..`).
    pub is_range: bool,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct FactDecl {
    pub name: Name,
    pub expr: Expr,
    pub span: Span,
}

/// The rule kinds and operators are the IR's own: the parser produces
/// them, and the checked IR does not depend on the syntax.
pub use crate::ir::{BinOp, RuleKind};

#[derive(Clone, Debug)]
pub struct RuleDecl {
    pub kind: RuleKind,
    pub reason: Str,
    /// `None` for `always`.
    pub when: Option<Expr>,
    pub hint: Option<Str>,
    /// `by ROLE`: the role the second approver must hold (four eyes).
    pub role: Option<Str>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum ExprKind {
    Lit(LitKind),
    Now,
    List(Vec<Expr>),
    Path(Path),
    Not(Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
}

/// `mandate.payee`, `registry.vendors[registry.invoices[invoice_id].vendor].iban`, `amount`
#[derive(Clone, Debug)]
pub struct Path {
    pub head: Name,
    pub steps: Vec<PathStep>,
    pub span: Span,
}

#[derive(Clone, Debug)]
pub enum PathStep {
    Field(Name),
    Index(Box<Expr>, Span),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Literal {
    pub kind: LitKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum LitKind {
    Int(i64),
    /// Minor units (cents): `10_000.00` is `1_000_000`.
    Money(i64),
    Str(String),
    Bool(bool),
    /// Seconds.
    Duration(i64),
    List(Vec<Literal>),
}
