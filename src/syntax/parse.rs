//! Text to syntax tree: pest does the grammar, this module builds the
//! [`ast`](super::ast) and turns pest's errors into diagnostics that point at
//! the failure and list what was expected.

use super::ast::*;
use crate::base::money::{Money, MoneyError};
use crate::diagnostics::PackDiagnostic;
use pest::Parser;
use pest::iterators::Pair;

mod guarantee;
pub use guarantee::parse_scope_at;

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

/// Refuses inputs nested deeper than [`MAX_DEPTH`] before pest sees them.
fn check_depth(source: &str) -> Option<PackDiagnostic> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut in_comment = false;
    let mut prev = '\0';
    for (i, c) in source.char_indices() {
        if in_comment {
            if c == '\n' {
                in_comment = false;
            }
        } else if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' || c == '\n' {
                in_string = false;
            }
        } else {
            match c {
                '"' => in_string = true,
                '/' if prev == '/' => in_comment = true,
                '(' | '[' | '{' | '<' => {
                    depth += 1;
                    if depth > MAX_DEPTH {
                        return Some(PackDiagnostic::TooDeep {
                            limit: MAX_DEPTH,
                            span: (i, c.len_utf8()).into(),
                        });
                    }
                }
                ')' | ']' | '}' | '>' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        prev = if in_comment { '\0' } else { c };
    }
    None
}

/// What a grammar rule is called in an error message.
fn describe(rule: Rule) -> Option<&'static str> {
    Some(match rule {
        Rule::EOI => "end of file",
        Rule::pack_header | Rule::kw_pack => "`pack NAME`",
        Rule::ident | Rule::word | Rule::path_head => "a name",
        Rule::dotted => "a dotted name",
        Rule::string => "a quoted string",
        Rule::type_expr | Rule::named_type | Rule::generic_type => "a type",
        Rule::enum_type | Rule::kw_enum => "`enum(...)`",
        Rule::enum_variant => "an enum variant",
        Rule::mandate_block | Rule::kw_mandate => "`mandate`",
        Rule::registry_decl | Rule::kw_registry => "`registry`",
        Rule::action_decl | Rule::kw_action => "`action`",
        Rule::claim => "a claim `name: Type`",
        Rule::field => "a field `name: Type`",
        Rule::registry_set => "`: Type`",
        Rule::registry_keyed | Rule::kw_by => "`by KeyType { ... }`",
        Rule::role_clause => "`by ROLE`",
        Rule::secret_clause | Rule::kw_secret => "`secret`",
        Rule::global_flag | Rule::kw_global => "`global`",
        Rule::scope_clause | Rule::kw_scope => "`scope`",
        Rule::budget_clause | Rule::kw_budget => "`budget`",
        Rule::executor_clause | Rule::kw_executor => "`executor`",
        Rule::param_decl | Rule::kw_param => "`param`",
        Rule::fact_decl | Rule::kw_fact => "`fact`",
        Rule::rule_decl | Rule::rule_kind => "a rule (`forbid`, `step_up`, `four_eyes`)",
        Rule::kw_forbid => "`forbid`",
        Rule::kw_step_up => "`step_up`",
        Rule::kw_four_eyes => "`four_eyes`",
        Rule::critical_clause | Rule::kw_critical => "`critical`",
        Rule::kw_from => "`from`",
        Rule::source => "a source",
        Rule::normalize_clause | Rule::kw_normalize => "`normalize`",
        Rule::default_clause | Rule::kw_default => "`default`",
        Rule::hint_clause | Rule::kw_hint => "`hint`",
        Rule::validator => "a validator",
        Rule::validator_args => "validator arguments",
        Rule::when_clause | Rule::kw_when => "`when`",
        Rule::always | Rule::kw_always => "`always`",
        Rule::expr
        | Rule::or_expr
        | Rule::and_expr
        | Rule::not_expr
        | Rule::cmp_expr
        | Rule::sum_expr => "an expression",
        Rule::cmp_op | Rule::kw_in => "a comparison",
        Rule::add_op => "`+` or `-`",
        Rule::kw_and => "`and`",
        Rule::kw_or => "`or`",
        Rule::not_op | Rule::kw_not => "`not`",
        Rule::literal => "a literal",
        Rule::money => "an amount",
        Rule::int => "a number",
        Rule::duration => "a duration",
        Rule::duration_unit => "a duration unit (days, hours, minutes, seconds)",
        Rule::boolean => "`true` or `false`",
        Rule::list_lit => "a list",
        Rule::path => "a name or path",
        Rule::field_step => "`.field`",
        Rule::index_step => "`[key]`",
        Rule::now | Rule::kw_now => "`now`",
        Rule::version_clause | Rule::kw_version => "`version`",
        Rule::guarantee_decl | Rule::kw_guarantee => "`guarantee`",
        Rule::guarantee_never | Rule::kw_never => "`never allow ACTIONS`",
        Rule::guarantee_need | Rule::kw_need => "`need level N`",
        Rule::kw_allow => "`allow`",
        Rule::kw_level => "`level`",
        Rule::guarantee_scope | Rule::scope_prefix => {
            "the actions (`payment.transfer`, `payment.*`, `every action with NAME: Type`)"
        }
        Rule::scope_with | Rule::scope_every | Rule::kw_every => "`every action`",
        Rule::kw_with => "`with NAME: Type`",
        _ => return None,
    })
}

fn syntax_error(e: pest::error::Error<Rule>) -> PackDiagnostic {
    use pest::error::{ErrorVariant, InputLocation};
    let (start, end) = match e.location {
        InputLocation::Pos(p) => (p, p),
        InputLocation::Span((s, t)) => (s, t),
    };
    let line = e.line();
    let found_text: String = {
        // the text at the failure position, up to the end of the word
        let col = match e.line_col {
            pest::error::LineColLocation::Pos((_, c)) => c,
            pest::error::LineColLocation::Span((_, c), _) => c,
        };
        let rest: Vec<char> = line.chars().skip(col.saturating_sub(1)).collect();
        let word = |c: &char| c.is_alphanumeric() || *c == '_';
        match rest.first() {
            Some(c) if word(c) => rest.iter().take_while(|c| word(c)).take(24).collect(),
            Some(c) if !c.is_whitespace() => c.to_string(),
            _ => String::new(),
        }
    };
    let found = if found_text.is_empty() {
        "unexpected here".to_string()
    } else {
        format!("unexpected `{found_text}`")
    };
    let len = if end > start {
        end - start
    } else {
        found_text.len()
    };
    let mut expected: Vec<&str> = match &e.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            positives.iter().filter_map(|r| describe(*r)).collect()
        }
        ErrorVariant::CustomError { .. } => vec![],
    };
    expected.sort_unstable();
    expected.dedup();
    let expected = match expected.len() {
        0 => "something else".to_string(),
        1 => expected[0].to_string(),
        n => format!("{} or {}", expected[..n - 1].join(", "), expected[n - 1]),
    };
    let help = (!found_text.is_empty()
        && KEYWORDS.contains(&found_text.trim_matches(|c: char| !c.is_alphanumeric() && c != '_')))
    .then(|| format!("`{found_text}` is a keyword and cannot be used as a name"));
    PackDiagnostic::Syntax {
        expected,
        span: (start, len).into(),
        found,
        help,
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

impl Builder {
    fn file(&mut self, p: Pair<'_, Rule>) -> File {
        let mut inner = p.into_inner();
        let header = inner
            .next()
            .map(|h| self.header(h))
            .unwrap_or_else(|| Header {
                name: Name {
                    text: String::new(),
                    span: Span::default(),
                },
                version: None,
                description: None,
            });
        let mut items = vec![];
        for it in inner {
            match it.as_rule() {
                Rule::mandate_block => items.push(Item::Mandate(self.mandate(it))),
                Rule::registry_decl => items.push(Item::Registry(self.registry(it))),
                Rule::action_decl => items.push(Item::Action(self.action(it))),
                Rule::guarantee_decl => items.push(Item::Guarantee(self.guarantee(it))),
                _ => {}
            }
        }
        File { header, items }
    }

    fn header(&mut self, p: Pair<'_, Rule>) -> Header {
        let mut h = Header {
            name: Name {
                text: String::new(),
                span: p.as_span().into(),
            },
            version: None,
            description: None,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident => h.name = name(it),
                Rule::version_clause => {
                    h.version = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::string)
                        .map(|s| self.string(s))
                }
                Rule::string => h.description = Some(self.string(it)),
                _ => {}
            }
        }
        h
    }

    fn string(&mut self, p: Pair<'_, Rule>) -> Str {
        let span: Span = p.as_span().into();
        let raw = p.into_inner().next().map(|x| x.as_str()).unwrap_or("");
        let mut value = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some('n') => value.push('\n'),
                    Some('t') => value.push('\t'),
                    Some('"') => value.push('"'),
                    Some('\\') => value.push('\\'),
                    Some(other) => {
                        self.errors.push(PackDiagnostic::InvalidLiteral {
                            text: format!("\\{other}"),
                            reason: "unknown escape".into(),
                            span: span.into(),
                            help: Some("escapes are \\n, \\t, \\\" and \\\\".into()),
                        });
                    }
                    None => {}
                }
            } else {
                value.push(c);
            }
        }
        Str { value, span }
    }

    fn mandate(&mut self, p: Pair<'_, Rule>) -> MandateBlock {
        let span = p.as_span().into();
        let claims = p
            .into_inner()
            .filter(|x| x.as_rule() == Rule::claim)
            .map(|c| self.field(c))
            .collect();
        MandateBlock { claims, span }
    }

    fn field(&mut self, p: Pair<'_, Rule>) -> Field {
        let mut n = None;
        let mut ty = None;
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident | Rule::word => n = Some(name(it)),
                Rule::type_expr => ty = Some(self.type_expr(it)),
                _ => {}
            }
        }
        Field {
            name: n.unwrap_or_else(empty_name),
            ty: ty.unwrap_or_else(empty_type),
        }
    }

    fn type_expr(&mut self, p: Pair<'_, Rule>) -> TypeExpr {
        let span: Span = p.as_span().into();
        let Some(inner) = p.into_inner().next() else {
            return empty_type();
        };
        let kind = match inner.as_rule() {
            Rule::enum_type => TypeExprKind::Enum(
                inner
                    .into_inner()
                    .filter(|x| x.as_rule() == Rule::enum_variant)
                    .map(name)
                    .collect(),
            ),
            Rule::record_type => TypeExprKind::Record(
                inner
                    .into_inner()
                    .filter(|x| x.as_rule() == Rule::record_field)
                    .map(|f| self.record_field(f))
                    .collect(),
            ),
            Rule::generic_type => {
                let mut it = inner.into_inner();
                let g = it.next().map(name).unwrap_or_else(empty_name);
                let arg = it
                    .next()
                    .map(|t| self.type_expr(t))
                    .unwrap_or_else(empty_type);
                TypeExprKind::Generic(g, Box::new(arg))
            }
            _ => TypeExprKind::Named(
                inner
                    .into_inner()
                    .next()
                    .map(name)
                    .unwrap_or_else(empty_name),
            ),
        };
        TypeExpr { kind, span }
    }

    fn registry(&mut self, p: Pair<'_, Rule>) -> RegistryDecl {
        let span = p.as_span().into();
        let mut n = empty_name();
        let mut shape = RegistryShape::Set(empty_type());
        let mut global = false;
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident => n = name(it),
                Rule::registry_set => {
                    if let Some(t) = it.into_inner().next() {
                        shape = RegistryShape::Set(self.type_expr(t));
                    }
                }
                Rule::registry_keyed => {
                    let mut key = empty_type();
                    let mut fields = vec![];
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::type_expr => key = self.type_expr(x),
                            Rule::field => fields.push(self.field(x)),
                            _ => {}
                        }
                    }
                    shape = RegistryShape::Keyed { key, fields };
                }
                Rule::global_flag => global = true,
                _ => {}
            }
        }
        RegistryDecl {
            name: n,
            shape,
            global,
            span,
        }
    }

    fn action(&mut self, p: Pair<'_, Rule>) -> ActionDecl {
        let span = p.as_span().into();
        let mut a = ActionDecl {
            name: empty_name(),
            description: None,
            clauses: vec![],
            span,
        };
        for it in p.into_inner() {
            let cspan: Span = it.as_span().into();
            match it.as_rule() {
                Rule::dotted => a.name = name(it),
                Rule::string => a.description = Some(self.string(it)),
                Rule::scope_clause => {
                    if let Some(n) = last_named(it, Rule::dotted) {
                        a.clauses.push(ActionClause::Scope(n, cspan))
                    }
                }
                Rule::budget_clause => {
                    if let Some(n) = last_named(it, Rule::ident) {
                        a.clauses.push(ActionClause::Budget(n, cspan))
                    }
                }
                Rule::executor_clause => {
                    if let Some(n) = last_named(it, Rule::dotted) {
                        a.clauses.push(ActionClause::Executor(n, cspan))
                    }
                }
                Rule::param_decl => a.clauses.push(ActionClause::Param(self.param(it))),
                Rule::fact_decl => {
                    let mut n = empty_name();
                    let mut e = None;
                    for x in it.into_inner() {
                        match x.as_rule() {
                            Rule::ident => n = name(x),
                            Rule::expr => e = Some(self.top_expr(x)),
                            _ => {}
                        }
                    }
                    a.clauses.push(ActionClause::Fact(FactDecl {
                        name: n,
                        expr: e.unwrap_or_else(|| empty_expr(cspan)),
                        span: cspan,
                    }));
                }
                Rule::rule_decl => a.clauses.push(ActionClause::Rule(self.rule(it))),
                _ => {}
            }
        }
        a
    }

    fn param(&mut self, p: Pair<'_, Rule>) -> ParamDecl {
        let span = p.as_span().into();
        let mut d = ParamDecl {
            name: empty_name(),
            ty: empty_type(),
            options: vec![],
            span,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::ident => d.name = name(it),
                Rule::type_expr => d.ty = self.type_expr(it),
                _ => d.options.extend(self.param_option(it)),
            }
        }
        d
    }

    fn record_field(&mut self, p: Pair<'_, Rule>) -> RecordField {
        let span = p.as_span().into();
        let mut f = RecordField {
            name: empty_name(),
            ty: empty_type(),
            options: vec![],
            span,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::word => f.name = name(it),
                Rule::type_expr => f.ty = self.type_expr(it),
                _ => f.options.extend(self.param_option(it)),
            }
        }
        f
    }

    /// One option of a parameter or a record field.
    fn param_option(&mut self, it: Pair<'_, Rule>) -> Option<ParamOption> {
        let ospan: Span = it.as_span().into();
        match it.as_rule() {
            Rule::critical_clause => {
                let mut kw = ospan;
                let mut sources = vec![];
                for x in it.into_inner() {
                    match x.as_rule() {
                        Rule::kw_critical => kw = x.as_span().into(),
                        Rule::source => {
                            let sp: Span = x.as_span().into();
                            if self.too_deep(&x, sp) {
                                continue;
                            }
                            if let Some(pp) = x.into_inner().next() {
                                sources.push(self.path(pp))
                            }
                        }
                        _ => {}
                    }
                }
                Some(ParamOption::Critical { sources, span: kw })
            }
            Rule::normalize_clause => last_named(it, Rule::ident).map(ParamOption::Normalize),
            Rule::default_clause => {
                let l = it.into_inner().find(|x| x.as_rule() == Rule::literal)?;
                Some(ParamOption::Default(self.literal(l)))
            }
            Rule::hint_clause => {
                let s = it.into_inner().find(|x| x.as_rule() == Rule::string)?;
                Some(ParamOption::Hint(self.string(s)))
            }
            Rule::secret_clause => Some(ParamOption::Secret(it.as_span().into())),
            Rule::optional_clause => Some(ParamOption::Optional(it.as_span().into())),
            Rule::validator => {
                let mut v = ValidatorDecl {
                    name: empty_name(),
                    args: vec![],
                    is_range: false,
                    span: ospan,
                };
                for x in it.into_inner() {
                    match x.as_rule() {
                        Rule::ident => v.name = name(x),
                        Rule::validator_args => {
                            for l in x.into_inner() {
                                v.args.push(self.literal(l));
                            }
                            v.is_range = v.args.len() == 2;
                        }
                        _ => {}
                    }
                }
                Some(ParamOption::Validator(v))
            }
            _ => None,
        }
    }

    fn rule(&mut self, p: Pair<'_, Rule>) -> RuleDecl {
        let span: Span = p.as_span().into();
        let mut r = RuleDecl {
            kind: RuleKind::Forbid,
            reason: Str {
                value: String::new(),
                span,
            },
            when: None,
            hint: None,
            role: None,
            span,
        };
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::rule_kind => {
                    r.kind = match it.as_str() {
                        "step_up" => RuleKind::StepUp,
                        "four_eyes" => RuleKind::FourEyes,
                        _ => RuleKind::Forbid,
                    }
                }
                Rule::string => r.reason = self.string(it),
                Rule::role_clause => {
                    r.role = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::word)
                        .map(|w| Str {
                            value: w.as_str().to_string(),
                            span: w.as_span().into(),
                        })
                }
                Rule::when_clause => {
                    r.when = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::expr)
                        .map(|e| self.top_expr(e))
                }
                Rule::hint_clause => {
                    r.hint = it
                        .into_inner()
                        .find(|x| x.as_rule() == Rule::string)
                        .map(|s| self.string(s))
                }
                _ => {}
            }
        }
        r
    }

    /// An expression at the top of a fact or rule: refused (with a
    /// diagnostic) when its tree would be deeper than [`MAX_EXPR_DEPTH`].
    fn top_expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span: Span = p.as_span().into();
        if self.too_deep(&p, span) {
            return empty_expr(span);
        }
        self.expr(p)
    }

    fn too_deep(&mut self, p: &Pair<'_, Rule>, span: Span) -> bool {
        if tree_depth(p) > MAX_EXPR_DEPTH {
            self.errors.push(PackDiagnostic::TooDeep {
                limit: MAX_EXPR_DEPTH,
                span: span.into(),
            });
            return true;
        }
        false
    }

    fn expr(&mut self, p: Pair<'_, Rule>) -> Expr {
        let span: Span = p.as_span().into();
        match p.as_rule() {
            Rule::expr => match p.into_inner().next() {
                Some(x) => self.expr(x),
                None => empty_expr(span),
            },
            Rule::or_expr | Rule::and_expr => {
                let op = if p.as_rule() == Rule::or_expr {
                    BinOp::Or
                } else {
                    BinOp::And
                };
                let operands: Vec<Expr> = p
                    .into_inner()
                    .filter(|x| !matches!(x.as_rule(), Rule::kw_or | Rule::kw_and))
                    .map(|x| self.expr(x))
                    .collect();
                fold_left(op, operands, span)
            }
            Rule::not_expr => {
                let mut nots = vec![];
                let mut inner = None;
                for x in p.into_inner() {
                    if x.as_rule() == Rule::not_op {
                        nots.push(Span::from(x.as_span()));
                    } else {
                        inner = Some(self.expr(x));
                    }
                }
                let mut e = inner.unwrap_or_else(|| empty_expr(span));
                for s in nots.into_iter().rev() {
                    let sp = s.to(e.span);
                    e = Expr {
                        kind: ExprKind::Not(Box::new(e)),
                        span: sp,
                    };
                }
                e
            }
            Rule::cmp_expr => {
                let mut it = p.into_inner();
                let lhs = it
                    .next()
                    .map(|x| self.expr(x))
                    .unwrap_or_else(|| empty_expr(span));
                match (it.next(), it.next()) {
                    (Some(op), Some(rhs)) => {
                        let op = match op.as_str() {
                            "==" => BinOp::Eq,
                            "!=" => BinOp::Ne,
                            "<=" => BinOp::Le,
                            ">=" => BinOp::Ge,
                            "<" => BinOp::Lt,
                            ">" => BinOp::Gt,
                            _ => BinOp::In,
                        };
                        let rhs = self.expr(rhs);
                        Expr {
                            kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                            span,
                        }
                    }
                    _ => lhs,
                }
            }
            Rule::sum_expr => {
                let mut it = p.into_inner();
                let mut e = it
                    .next()
                    .map(|x| self.expr(x))
                    .unwrap_or_else(|| empty_expr(span));
                while let (Some(op), Some(rhs)) = (it.next(), it.next()) {
                    let op = if op.as_str() == "+" {
                        BinOp::Add
                    } else {
                        BinOp::Sub
                    };
                    let rhs = self.expr(rhs);
                    let sp = e.span.to(rhs.span);
                    e = Expr {
                        kind: ExprKind::Binary(op, Box::new(e), Box::new(rhs)),
                        span: sp,
                    };
                }
                e
            }
            Rule::literal
            | Rule::duration
            | Rule::money
            | Rule::int
            | Rule::string
            | Rule::boolean => {
                let l = self.literal(p);
                lit_to_expr(l)
            }
            Rule::now => Expr {
                kind: ExprKind::Now,
                span,
            },
            Rule::list_lit => Expr {
                kind: ExprKind::List(p.into_inner().map(|x| self.expr(x)).collect()),
                span,
            },
            Rule::path => Expr {
                kind: ExprKind::Path(self.path(p)),
                span,
            },
            _ => empty_expr(span),
        }
    }

    fn path(&mut self, p: Pair<'_, Rule>) -> Path {
        let span = p.as_span().into();
        let mut head = empty_name();
        let mut steps = vec![];
        for it in p.into_inner() {
            match it.as_rule() {
                Rule::path_head => head = name(it),
                Rule::field_step => {
                    if let Some(n) = last_named(it, Rule::word) {
                        steps.push(PathStep::Field(n))
                    }
                }
                Rule::index_step => {
                    let s: Span = it.as_span().into();
                    if let Some(e) = it.into_inner().next() {
                        let e = self.expr(e);
                        steps.push(PathStep::Index(Box::new(e), s))
                    }
                }
                _ => {}
            }
        }
        Path { head, steps, span }
    }

    fn literal(&mut self, p: Pair<'_, Rule>) -> Literal {
        let span: Span = p.as_span().into();
        let inner = if p.as_rule() == Rule::literal {
            match p.into_inner().next() {
                Some(x) => x,
                None => {
                    return Literal {
                        kind: LitKind::Bool(false),
                        span,
                    };
                }
            }
        } else {
            p
        };
        let text = inner.as_str();
        let kind = match inner.as_rule() {
            Rule::int => LitKind::Int(self.int(text, span)),
            Rule::money => LitKind::Money(self.money(text, span)),
            Rule::boolean => LitKind::Bool(text == "true"),
            Rule::string => LitKind::Str(self.string(inner).value),
            Rule::duration => {
                let mut it = inner.into_inner();
                let n = it.next().map(|x| self.int(x.as_str(), span)).unwrap_or(0);
                let unit = it.next().map(|x| x.as_str()).unwrap_or("seconds");
                let mult = match unit.trim_end_matches('s') {
                    "day" => 86_400,
                    "hour" => 3_600,
                    "minute" => 60,
                    _ => 1,
                };
                LitKind::Duration(n.checked_mul(mult).unwrap_or_else(|| {
                    self.errors.push(PackDiagnostic::InvalidLiteral {
                        text: text.to_string(),
                        reason: "duration too large".into(),
                        span: span.into(),
                        help: None,
                    });
                    0
                }))
            }
            Rule::list_lit => {
                let mut items = vec![];
                for e in inner.into_inner() {
                    // a list literal in a literal position holds literals only
                    let ex = self.expr(e);
                    match ex.kind {
                        ExprKind::Lit(k) => items.push(Literal {
                            kind: k,
                            span: ex.span,
                        }),
                        _ => self.errors.push(PackDiagnostic::InvalidLiteral {
                            text: "[...]".into(),
                            reason: "a list here may hold literals only".into(),
                            span: ex.span.into(),
                            help: None,
                        }),
                    }
                }
                LitKind::List(items)
            }
            _ => LitKind::Bool(false),
        };
        Literal { kind, span }
    }

    fn int(&mut self, text: &str, span: Span) -> i64 {
        let digits: String = text.chars().filter(|c| *c != '_').collect();
        digits.parse::<i64>().unwrap_or_else(|_| {
            self.errors.push(PackDiagnostic::InvalidLiteral {
                text: text.to_string(),
                reason: "does not fit in a 64-bit integer".into(),
                span: span.into(),
                help: None,
            });
            0
        })
    }

    /// `10_000.00` to 1_000_000 minor units; more than two decimals is an
    /// error, never a rounding.
    fn money(&mut self, text: &str, span: Span) -> i64 {
        let clean: String = text.chars().filter(|c| *c != '_').collect();
        let (reason, help) = match Money::parse_bounded(&clean, i64::MAX.unsigned_abs()) {
            Ok(m) => return m.minor(),
            Err(MoneyError::TooManyDecimals) => (
                "an amount has at most two decimals",
                Some("amounts are minor units (cents); write `12.34`".into()),
            ),
            Err(MoneyError::TooLarge) => ("amount does not fit in 64-bit minor units", None),
            Err(MoneyError::NotDecimal) => ("not a decimal amount", None),
        };
        self.errors.push(PackDiagnostic::InvalidLiteral {
            text: text.to_string(),
            reason: reason.into(),
            span: span.into(),
            help,
        });
        0
    }
}

/// The depth of the syntax tree a pair will build: a chain of `n` operands
/// adds `n` levels. Recurses over pest pairs only, whose depth the bracket
/// limit already bounds.
fn tree_depth(p: &Pair<'_, Rule>) -> usize {
    let children: Vec<Pair<'_, Rule>> = p.clone().into_inner().collect();
    let deepest = children.iter().map(tree_depth).max().unwrap_or(0);
    let chain = match p.as_rule() {
        Rule::or_expr | Rule::and_expr | Rule::sum_expr | Rule::not_expr => children
            .iter()
            .filter(|c| !matches!(c.as_rule(), Rule::kw_and | Rule::kw_or | Rule::add_op))
            .count(),
        _ => 1,
    };
    deepest + chain
}

fn fold_left(op: BinOp, operands: Vec<Expr>, span: Span) -> Expr {
    let mut it = operands.into_iter();
    let Some(mut e) = it.next() else {
        return empty_expr(span);
    };
    for rhs in it {
        let sp = e.span.to(rhs.span);
        e = Expr {
            kind: ExprKind::Binary(op, Box::new(e), Box::new(rhs)),
            span: sp,
        };
    }
    e
}

fn lit_to_expr(l: Literal) -> Expr {
    let span = l.span;
    match l.kind {
        LitKind::List(items) => Expr {
            kind: ExprKind::List(items.into_iter().map(lit_to_expr).collect()),
            span,
        },
        k => Expr {
            kind: ExprKind::Lit(k),
            span,
        },
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
