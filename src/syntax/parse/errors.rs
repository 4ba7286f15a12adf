//! Errors before the tree: inputs nested too deep, and pest's errors as a
//! `syntax` diagnostic with the expected tokens in words.

use super::*;

/// Refuses inputs nested deeper than [`MAX_DEPTH`] before pest sees them.
pub(super) fn check_depth(source: &str) -> Option<PackDiagnostic> {
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

pub(super) fn syntax_error(e: pest::error::Error<Rule>) -> PackDiagnostic {
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
