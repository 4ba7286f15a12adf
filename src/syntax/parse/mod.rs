//! Text to syntax tree: pest does the grammar, this module builds the
//! [`ast`](super::ast) and turns pest's errors into diagnostics that point at
//! the failure and list what was expected.

use super::ast::*;
use crate::base::money::{Money, MoneyError};
use crate::diagnostics::PackDiagnostic;
use pest::Parser;
use pest::iterators::Pair;

mod action;
mod decl;
mod errors;
mod expr;
mod guarantee;
pub use guarantee::parse_scope_at;

use errors::{check_depth, syntax_error};

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/pack.pest"]
struct PackParser;

/// Deepest bracket nesting accepted; bounds the parser's recursion so no
/// input can overflow the stack.
pub const MAX_DEPTH: usize = 48;
/// Deepest expression tree accepted (a chain of `n` operands counts `n`);
/// bounds every later recursive walk (checker, code generation, drop).
pub const MAX_EXPR_DEPTH: usize = 128;
/// Largest pack file accepted, in bytes.
pub const MAX_SOURCE_LEN: usize = 4 * 1024 * 1024;
/// Bounds pest's work on pathological inputs (no input can hang `ipc check`).
const CALL_LIMIT: usize = 50_000_000;

/// Parses a pack file. Every problem found is returned; on success the
/// vector of literal errors is empty.
pub fn parse(source: &str) -> Result<File, Vec<PackDiagnostic>> {
    if source.len() > MAX_SOURCE_LEN {
        return Err(vec![PackDiagnostic::Io {
            path: "<input>".into(),
            reason: format!(
                "{} bytes is larger than the {} bytes a pack file may have",
                source.len(),
                MAX_SOURCE_LEN
            ),
        }]);
    }
    if let Some(d) = check_depth(source) {
        return Err(vec![d]);
    }
    pest::set_call_limit(std::num::NonZeroUsize::new(CALL_LIMIT));
    let mut pairs = PackParser::parse(Rule::file, source).map_err(|e| vec![syntax_error(e)])?;
    let file = pairs.next().ok_or_else(|| {
        vec![PackDiagnostic::Syntax {
            expected: "a pack".into(),
            span: (0, 0).into(),
            found: "empty input".into(),
            help: None,
        }]
    })?;
    let mut b = Builder { errors: vec![] };
    let ast = b.file(file);
    if b.errors.is_empty() {
        Ok(ast)
    } else {
        Err(b.errors)
    }
}

/// One expression written at byte `offset` of a larger file (a string
/// value in the MCP proxy's TOML): its spans point into that file.
pub fn parse_expr_at(text: &str, offset: usize) -> Result<Expr, Vec<PackDiagnostic>> {
    fragment(text, offset, Rule::expr_fragment, |b, p| b.top_expr(p))
}

/// One type (`Iban`, `set<Email>`) written at byte `offset` of a larger file.
pub fn parse_type_at(text: &str, offset: usize) -> Result<TypeExpr, Vec<PackDiagnostic>> {
    fragment(text, offset, Rule::type_fragment, |b, p| b.type_expr(p))
}

/// One path (`mandate.payee`, `registry.vendors[vendor].iban`) written at
/// byte `offset` of a larger file.
pub fn parse_path_at(text: &str, offset: usize) -> Result<Path, Vec<PackDiagnostic>> {
    fragment(text, offset, Rule::path_fragment, |b, p| b.path(p))
}

/// Parses `text` with a fragment rule as if it stood at `offset`: the text
/// is preceded by that many spaces (which the grammar skips), so every span
/// the builder records is already a span of the larger file.
fn fragment<T>(
    text: &str,
    offset: usize,
    rule: Rule,
    build: impl FnOnce(&mut Builder, Pair<'_, Rule>) -> T,
) -> Result<T, Vec<PackDiagnostic>> {
    if text.len() > MAX_SOURCE_LEN || offset > MAX_SOURCE_LEN {
        return Err(vec![PackDiagnostic::Syntax {
            expected: "a shorter text".into(),
            span: (offset, 0).into(),
            found: "too long".into(),
            help: None,
        }]);
    }
    let padded = format!("{}{text}", " ".repeat(offset));
    if let Some(d) = check_depth(&padded) {
        return Err(vec![d]);
    }
    pest::set_call_limit(std::num::NonZeroUsize::new(CALL_LIMIT));
    let mut pairs = PackParser::parse(rule, &padded).map_err(|e| vec![syntax_error(e)])?;
    let inner = pairs
        .next()
        .and_then(|top| top.into_inner().next())
        .ok_or_else(|| {
            vec![PackDiagnostic::Syntax {
                expected: "a value".into(),
                span: (offset, text.len()).into(),
                found: "nothing".into(),
                help: None,
            }]
        })?;
    let mut b = Builder { errors: vec![] };
    let out = build(&mut b, inner);
    if b.errors.is_empty() {
        Ok(out)
    } else {
        Err(b.errors)
    }
}

/// Reserved words (kept in step with `keyword` in grammar/pack.pest).
pub const KEYWORDS: &[&str] = &[
    "action",
    "always",
    "and",
    "budget",
    "by",
    "critical",
    "default",
    "executor",
    "fact",
    "forbid",
    "four_eyes",
    "from",
    "global",
    "hint",
    "in",
    "mandate",
    "normalize",
    "not",
    "now",
    "or",
    "pack",
    "param",
    "registry",
    "scope",
    "step_up",
    "true",
    "false",
    "when",
    "version",
    "enum",
];

struct Builder {
    errors: Vec<PackDiagnostic>,
}

fn name(p: Pair<'_, Rule>) -> Name {
    Name {
        text: p.as_str().to_string(),
        span: p.as_span().into(),
    }
}

fn last_named(p: Pair<'_, Rule>, rule: Rule) -> Option<Name> {
    p.into_inner()
        .filter(|x| x.as_rule() == rule)
        .map(name)
        .last()
}

fn empty_name() -> Name {
    Name {
        text: String::new(),
        span: Span::default(),
    }
}

fn empty_type() -> TypeExpr {
    TypeExpr {
        kind: TypeExprKind::Named(empty_name()),
        span: Span::default(),
    }
}

fn empty_expr(span: Span) -> Expr {
    Expr {
        kind: ExprKind::Lit(LitKind::Bool(false)),
        span,
    }
}
