//! Every diagnostic `ipc check` can report, one variant each.
//!
//! Each variant's doc comment says what it catches and why it matters for a
//! security gateway. Variants carry spans only; the source text is attached
//! when the diagnostic is rendered ([`render_human`], [`render_json`]), so
//! the same value renders for a terminal, for a snapshot and as JSON.

use miette::{Diagnostic, SourceSpan};
use serde::Serialize;
use thiserror::Error;

/// The list of things a `ipc check` run can say about one pack file.
#[derive(Debug, Error, Diagnostic, Clone, PartialEq)]
pub enum PackDiagnostic {
    /// The file could not be read: missing, a folder without `pack.ipc`,
    /// not UTF-8, or too large to be a pack.
    #[error("cannot read `{path}`: {reason}")]
    #[diagnostic(code(ipc::io))]
    Io { path: String, reason: String },

    /// The text is not valid UTF-8; pack files are text.
    #[error("the file is not valid UTF-8")]
    #[diagnostic(
        code(ipc::not_utf8),
        help("pack files must be UTF-8 text; the first invalid byte is marked")
    )]
    NotUtf8 {
        #[label("invalid byte here")]
        span: SourceSpan,
    },

    /// The file does not follow the grammar (grammar/pack.pest).
    #[error("syntax error: expected {expected}")]
    #[diagnostic(code(ipc::syntax))]
    Syntax {
        expected: String,
        #[label("{found}")]
        span: SourceSpan,
        found: String,
        #[help]
        help: Option<String>,
    },

    /// Brackets nested so deep that the file cannot be a pack; refused
    /// before parsing so that no input can exhaust the stack.
    #[error("nesting deeper than {limit} levels")]
    #[diagnostic(
        code(ipc::too_deep),
        help("a pack condition never needs this much nesting; split it into facts")
    )]
    TooDeep {
        limit: usize,
        #[label("too deep here")]
        span: SourceSpan,
    },

    /// A number literal that does not fit, or money with more than two
    /// decimals: amounts are integer minor units, never rounded silently.
    #[error("invalid literal `{text}`: {reason}")]
    #[diagnostic(code(ipc::invalid_literal))]
    InvalidLiteral {
        text: String,
        reason: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// Two things of the same kind share a name; the second one would
    /// silently shadow the first.
    #[error("duplicate {kind} `{name}`")]
    #[diagnostic(code(ipc::duplicate), help("rename or remove one of them"))]
    Duplicate {
        kind: &'static str,
        name: String,
        #[label("defined again here")]
        span: SourceSpan,
        #[label("first defined here")]
        first: SourceSpan,
    },

    /// A type name the language does not know.
    #[error("unknown type `{name}`")]
    #[diagnostic(
        code(ipc::unknown_type),
        help("known types: {known}; generics: set<T>, list<T>; enums: enum(a, b)")
    )]
    UnknownType {
        name: String,
        known: String,
        #[label("not a type")]
        span: SourceSpan,
    },

    /// A critical parameter with no trusted source would accept any value
    /// the agent proposes: exactly the hole intentplane exists to close.
    #[error("critical parameter `{param}` has no trusted source")]
    #[diagnostic(
        code(ipc::critical_without_source),
        help(
            "name where its legitimate values live: `critical from mandate.CLAIM | registry.NAME`"
        )
    )]
    CriticalWithoutSource {
        param: String,
        #[label("critical, but from nowhere")]
        span: SourceSpan,
    },

    /// A path that starts with `mandate.` names a claim the mandate block
    /// does not declare.
    #[error("unknown mandate claim `{name}`")]
    #[diagnostic(code(ipc::unknown_claim))]
    UnknownClaim {
        name: String,
        #[label("not declared in `mandate {{ ... }}`")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A path that starts with `registry.` names an undeclared registry.
    #[error("unknown registry `{name}`")]
    #[diagnostic(code(ipc::unknown_registry))]
    UnknownRegistry {
        name: String,
        #[label("no `registry {name}` in this pack")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A registry lookup reads a field its records do not have.
    #[error("registry `{registry}` has no field `{field}`")]
    #[diagnostic(code(ipc::unknown_field))]
    UnknownField {
        registry: String,
        field: String,
        #[label("unknown field")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A name in a source, a budget clause or a rule is neither a parameter
    /// nor a fact of the action.
    #[error("unknown name `{name}` in action `{action}`")]
    #[diagnostic(code(ipc::unknown_name))]
    UnknownName {
        name: String,
        action: String,
        #[label("not a parameter or fact of this action")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A registry lookup keyed by a parameter the agent controls freely
    /// lets the agent pick the record, and so the "trusted" value.
    #[error("lookup keyed by `{param}`, which is not trusted")]
    #[diagnostic(
        code(ipc::untrusted_key),
        help(
            "make `{param}` critical with its own trusted source, so that the key itself is vouched for"
        )
    )]
    UntrustedKey {
        param: String,
        #[label("the agent chooses this key")]
        span: SourceSpan,
    },

    /// Parameters whose sources are lookups keyed by each other never
    /// resolve from anything trusted.
    #[error("lookup cycle: {cycle}")]
    #[diagnostic(
        code(ipc::lookup_cycle),
        help(
            "at least one parameter in a cycle must come from the mandate or a registry directly"
        )
    )]
    LookupCycle {
        cycle: String,
        #[label("this key depends on itself")]
        span: SourceSpan,
    },

    /// A source whose values have another type than the parameter can
    /// never match, or matches by accident after a conversion.
    #[error("type mismatch: `{param}` is {expected}, but this source gives {found}")]
    #[diagnostic(code(ipc::source_type_mismatch))]
    SourceTypeMismatch {
        param: String,
        expected: String,
        found: String,
        #[label("gives {found}")]
        span: SourceSpan,
    },

    /// A source path of a form that cannot vouch for a value.
    #[error("`{text}` is not a trusted source")]
    #[diagnostic(
        code(ipc::invalid_source),
        help(
            "a source is `mandate.CLAIM`, `registry.NAME` (membership) or `registry.NAME[KEY].FIELD` (lookup)"
        )
    )]
    InvalidSource {
        text: String,
        #[label("not a source")]
        span: SourceSpan,
    },

    /// A normaliser the gateway does not implement.
    #[error("unknown normaliser `{name}`")]
    #[diagnostic(code(ipc::unknown_normalizer), help("known normalisers: {known}"))]
    UnknownNormalizer {
        name: String,
        known: String,
        #[label("not a normaliser")]
        span: SourceSpan,
    },

    /// A normaliser applied to a type it does not handle.
    #[error("normaliser `{name}` does not apply to {ty}")]
    #[diagnostic(code(ipc::normalizer_type), help("`{name}` applies to {applies}"))]
    NormalizerType {
        name: String,
        ty: String,
        applies: String,
        #[label("wrong type for this normaliser")]
        span: SourceSpan,
    },

    /// A validator the gateway does not implement.
    #[error("unknown validator `{name}`")]
    #[diagnostic(code(ipc::unknown_validator), help("known validators: {known}"))]
    UnknownValidator {
        name: String,
        known: String,
        #[label("not a validator")]
        span: SourceSpan,
    },

    /// A validator on a type it cannot check (`max_len` on Money, ...).
    #[error("validator `{name}` does not apply to {ty}")]
    #[diagnostic(code(ipc::validator_type), help("`{name}` applies to {applies}"))]
    ValidatorType {
        name: String,
        ty: String,
        applies: String,
        #[label("wrong type for this validator")]
        span: SourceSpan,
    },

    /// A validator with arguments it cannot use: a reversed range, a bad
    /// regular expression, a missing bound.
    #[error("invalid arguments for validator `{name}`: {reason}")]
    #[diagnostic(code(ipc::validator_args))]
    ValidatorArgs {
        name: String,
        reason: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// An executor name the gateway does not provide.
    #[error("unknown executor `{name}`")]
    #[diagnostic(code(ipc::unknown_executor), help("known executors: {known}"))]
    UnknownExecutor {
        name: String,
        known: String,
        #[label("no such executor")]
        span: SourceSpan,
    },

    /// An expression whose operand types do not fit its operator.
    #[error("type mismatch: {message}")]
    #[diagnostic(code(ipc::type_mismatch))]
    TypeMismatch {
        message: String,
        #[label("{label}")]
        span: SourceSpan,
        label: String,
        #[help]
        help: Option<String>,
    },

    /// A rule condition that is not a boolean.
    #[error("a condition must be Bool, this is {found}")]
    #[diagnostic(code(ipc::condition_not_bool))]
    ConditionNotBool {
        found: String,
        #[label("{found}")]
        span: SourceSpan,
    },

    /// A string compared with an enum that has no such variant: the rule
    /// could never match.
    #[error("`{value}` is not a variant of {ty}")]
    #[diagnostic(code(ipc::unknown_variant))]
    UnknownVariant {
        value: String,
        ty: String,
        #[label("never equal")]
        span: SourceSpan,
    },

    /// Rules are compiled to Cedar and see only parameters and facts;
    /// registries and claims are read by the gateway into facts.
    #[error("a rule cannot read `{root}` directly")]
    #[diagnostic(
        code(ipc::rule_reads_store),
        help("declare a fact in the action (`fact NAME = ...`) and use its name in the rule")
    )]
    RuleReadsStore {
        root: String,
        #[label("declare a fact for this")]
        span: SourceSpan,
    },

    /// The budget parameter is what the gateway adds up per mandate; only
    /// money can be added up.
    #[error("budget parameter `{param}` is {ty}, not Money")]
    #[diagnostic(code(ipc::budget_not_money))]
    BudgetNotMoney {
        param: String,
        ty: String,
        #[label("not Money")]
        span: SourceSpan,
    },

    /// Every action needs a scope: delegation checks that the mandate
    /// grants it, so an action without one could never be delegated safely.
    #[error("action `{action}` has no {clause}")]
    #[diagnostic(code(ipc::missing_clause))]
    MissingClause {
        action: String,
        clause: &'static str,
        #[label("add `{clause} ...` to this action")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A clause given twice in one action (two scopes, two executors...).
    #[error("action `{action}` has more than one `{clause}`")]
    #[diagnostic(code(ipc::repeated_clause), help("keep one"))]
    RepeatedClause {
        action: String,
        clause: &'static str,
        #[label("again here")]
        span: SourceSpan,
        #[label("first here")]
        first: SourceSpan,
    },

    /// A default value of another type than its parameter.
    #[error("default for `{param}` is {found}, expected {expected}")]
    #[diagnostic(code(ipc::default_type))]
    DefaultType {
        param: String,
        expected: String,
        found: String,
        #[label("wrong type")]
        span: SourceSpan,
    },

    /// A critical parameter with a default would let the gateway fill in a
    /// value nobody vouched for.
    #[error("critical parameter `{param}` cannot have a default")]
    #[diagnostic(
        code(ipc::critical_default),
        help(
            "a critical value must come from the proposal and match a trusted source; only a critical list may default to `[]`"
        )
    )]
    CriticalDefault {
        param: String,
        #[label("remove this default")]
        span: SourceSpan,
    },

    /// `critical` on a record (or a list of records): a registry or a
    /// claim holds single values, never a whole object, so nothing could
    /// vouch for it; the fields whose values matter are critical instead,
    /// and then every element's field must come from a trusted source.
    #[error("`{param}` is a record: its fields are critical, not the record")]
    #[diagnostic(
        code(ipc::critical_record),
        help(
            "mark the fields that must come from a trusted source: `{{ path: Path critical from registry.workspace, text: Text }}`"
        )
    )]
    CriticalRecord {
        param: String,
        #[label("on the record")]
        span: SourceSpan,
    },

    /// An option a record field cannot take: a `default` (the gateway
    /// would add to the object a value the agent did not send) or `secret`
    /// (a secret is a whole `Text` parameter, committed on its own).
    #[error("a record field cannot be `{option}`: `{field}`")]
    #[diagnostic(
        code(ipc::field_option),
        help(
            "declare the field `optional` to let the object leave it out; a secret is a parameter of its own"
        )
    )]
    FieldOption {
        field: String,
        option: &'static str,
        #[label("not on a field")]
        span: SourceSpan,
    },

    /// A record type where only single values are held: a mandate claim, a
    /// registry's values, keys or fields, a guarantee's parameter.
    #[error("a record type describes a parameter's value; {what} holds single values")]
    #[diagnostic(
        code(ipc::record_not_here),
        help(
            "records are for parameters: `param edits: list<{{ oldText: Text, newText: Text }}>`"
        )
    )]
    RecordNotHere {
        what: &'static str,
        #[label("a record")]
        span: SourceSpan,
    },

    /// `selection over registry.R` where `R` is a set registry: a
    /// selection's query compares the fields of records and returns their
    /// keys, so it needs a keyed registry (`registry R by Id { ... }`).
    #[error("a selection is over a keyed registry; `{registry}` is a set")]
    #[diagnostic(
        code(ipc::selection_not_keyed),
        help(
            "declare it `registry {registry} by Id {{ field: Type, ... }}`, with the fields a query compares"
        )
    )]
    SelectionNotKeyed {
        registry: String,
        #[label("not keyed")]
        span: SourceSpan,
    },

    /// A selection over a registry an action of the pack writes (its
    /// executor changes the registry's records): the agent could shape a
    /// record to match the user's criterion, then pick it. An error, not a
    /// warning: the point of a selection is a record the agent cannot
    /// write.
    #[error("the selection `{claim}` is over `{registry}`, which action `{action}` writes")]
    #[diagnostic(
        code(ipc::selection_over_agent_data),
        help(
            "select over a registry no action of the pack writes (the shop's catalogue, the user's order history)"
        )
    )]
    SelectionOverAgentData {
        claim: String,
        registry: String,
        action: String,
        #[label("over records the agent can change")]
        span: SourceSpan,
    },

    /// `selection over registry.R` anywhere but as a mandate claim's type:
    /// a selection is what the issuer signs, evaluated by the gateway, and
    /// no parameter, registry or field holds one.
    #[error(
        "a selection is the type of a mandate claim only, never of a parameter, a registry or a field"
    )]
    #[diagnostic(
        code(ipc::selection_not_here),
        help(
            "declare it in `mandate {{ ... }}` and vouch for a parameter with `critical from mandate.NAME`"
        )
    )]
    SelectionNotHere {
        #[label("a selection")]
        span: SourceSpan,
    },

    /// `by ROLE` on a rule other than `four_eyes`: only the second pair of
    /// eyes has a role (a step-up is the user herself; a forbid no one lifts).
    #[error("`by` names the role of the second approver, which only `four_eyes` has")]
    #[diagnostic(
        code(ipc::role_not_four_eyes),
        help("remove `by ...`, or make the rule `four_eyes`")
    )]
    RoleNotFourEyes {
        kind: &'static str,
        #[label("on a `{kind}` rule")]
        span: SourceSpan,
    },

    /// `secret` where it cannot hold: on a critical parameter (a trusted
    /// value is not the user's secret) or on a non-text one.
    #[error("`{param}` cannot be secret: {reason}")]
    #[diagnostic(code(ipc::invalid_secret), help("remove `secret`"))]
    InvalidSecret {
        param: String,
        reason: &'static str,
        #[label("here")]
        span: SourceSpan,
    },

    /// A rule or fact that reads a secret parameter: it would see only the
    /// commitment, and a policy on a secret would put it in Cedar's hands.
    #[error("`{param}` is secret: rules and facts cannot read it")]
    #[diagnostic(
        code(ipc::secret_read),
        help("check a secret with validators (`min_len`, `pattern`) instead")
    )]
    SecretRead {
        param: String,
        #[label("read here")]
        span: SourceSpan,
    },

    /// A rule or fact that reads an `optional` parameter: a proposal that
    /// leaves it out has no value for it, and a condition on a missing
    /// value would be decided by how absence is read, not by the pack.
    #[error("`{param}` is optional: rules and facts cannot read it")]
    #[diagnostic(
        code(ipc::optional_read),
        help(
            "give it a default instead of `optional` (not on a critical parameter), or make it required"
        )
    )]
    OptionalRead {
        param: String,
        #[label("read here")]
        span: SourceSpan,
    },

    /// A parameter whose name says it is a password, a secret or a token,
    /// and which is not `secret`: its value would stay in the receipts.
    #[error("`{param}` looks like a secret but is not marked `secret`")]
    #[diagnostic(
        code(ipc::secret_not_marked),
        severity(Warning),
        help("add `secret`, so that receipts and decisions hold a commitment, never the value")
    )]
    SecretNotMarked {
        param: String,
        #[label("its value would be kept in the receipts")]
        span: SourceSpan,
    },

    /// A parameter option given twice (`normalize` twice, two `critical`).
    #[error("`{option}` given twice for `{param}`")]
    #[diagnostic(code(ipc::repeated_option), help("keep one"))]
    RepeatedOption {
        param: String,
        option: &'static str,
        #[label("again here")]
        span: SourceSpan,
    },

    /// A claim nothing reads: likely a typo in a source, or dead weight in
    /// every mandate.
    #[error("mandate claim `{name}` is never used")]
    #[diagnostic(
        code(ipc::unused_claim),
        severity(Warning),
        help("use it as a source, in a fact, or remove it")
    )]
    UnusedClaim {
        name: String,
        #[label("unused")]
        span: SourceSpan,
    },

    /// A registry nothing reads.
    #[error("registry `{name}` is never used")]
    #[diagnostic(
        code(ipc::unused_registry),
        severity(Warning),
        help("use it as a source, in a fact, or remove it")
    )]
    UnusedRegistry {
        name: String,
        #[label("unused")]
        span: SourceSpan,
    },

    /// A fact no rule reads: the gateway would compute it for nothing, and a
    /// rule may have been meant to use it.
    #[error("fact `{name}` is never used")]
    #[diagnostic(
        code(ipc::unused_fact),
        severity(Warning),
        help("use it in a rule, or remove it")
    )]
    UnusedFact {
        name: String,
        #[label("unused")]
        span: SourceSpan,
    },

    // ---- guarantees ------------------------------------------------------
    /// A guarantee whose scope names no action of the pack: it would be
    /// proven over nothing, and so promise nothing.
    #[error("guarantee `{reason}` covers no action: {scope}")]
    #[diagnostic(code(ipc::guarantee_covers_nothing))]
    GuaranteeCoversNothing {
        reason: String,
        scope: String,
        #[label("no action of the pack is here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A guarantee's approval level the gateway has no such level for.
    #[error("`need level {level}` is not an approval level")]
    #[diagnostic(
        code(ipc::guarantee_level),
        help(
            "approval levels are 1 (the user approves) and 2 (four eyes); for no approval at all write `never allow`"
        )
    )]
    GuaranteeLevel {
        level: i64,
        #[label("not 1 or 2")]
        span: SourceSpan,
    },

    /// A guarantee that does not hold: for some input the gateway's Cedar
    /// decision breaks it. The build fails; the help is the counterexample
    /// as a scenario to add.
    #[error("guarantee `{reason}` does not hold for `{action}`: {decision}")]
    #[diagnostic(code(ipc::guarantee_violated))]
    GuaranteeViolated {
        reason: String,
        action: String,
        decision: String,
        #[label("violated for `{action}`")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// The solver gave no answer for a guarantee (time limit, crash, no
    /// cvc5): it is not proven, and the build fails.
    #[error("guarantee `{reason}` is not proven for `{action}`: {message}")]
    #[diagnostic(
        code(ipc::guarantee_unproven),
        help(
            "`ipc build` proves guarantees with cvc5: install it (`apt-get install cvc5`, or `pip install intentplane`, whose `ipc` finds the `intentplane-cvc5` beside it) or set `CVC5` to its path"
        )
    )]
    GuaranteeUnproven {
        reason: String,
        action: String,
        message: String,
        #[label("not proven")]
        span: SourceSpan,
    },

    // ---- code generation (`ipc build`) --------------------------------
    /// Two packs in one build with the same name: their Cedar namespaces
    /// would merge.
    #[error("pack `{name}` is given twice")]
    #[diagnostic(
        code(ipc::duplicate_pack),
        help("the first is `{first_file}`; each pack in a bundle needs its own name")
    )]
    DuplicatePack {
        name: String,
        first_file: String,
        #[label("again here")]
        span: SourceSpan,
    },

    /// A proposal names an action without its pack, so two packs of one
    /// bundle cannot share an action name.
    #[error("action `{action}` is also defined by pack `{other}`")]
    #[diagnostic(
        code(ipc::duplicate_action),
        help(
            "a proposal names only the action, so the gateway could not tell them apart; rename one"
        )
    )]
    DuplicateActionAcrossPacks {
        action: String,
        other: String,
        #[label("defined again here")]
        span: SourceSpan,
    },

    /// A name the generated Cedar uses itself (a context attribute, a
    /// Cedar keyword as namespace).
    #[error("`{name}` cannot be used here: {reason}")]
    #[diagnostic(code(ipc::reserved_name), help("rename it"))]
    ReservedName {
        name: String,
        reason: String,
        #[label("reserved in the generated cedar")]
        span: SourceSpan,
    },

    /// Cedar's strict validator refused a policy; no bundle is written.
    #[error("policy `{policy}` fails cedar validation: {message}")]
    #[diagnostic(code(ipc::cedar_validation))]
    CedarValidation {
        policy: String,
        message: String,
        #[label("{label}")]
        span: SourceSpan,
        label: String,
        #[help]
        help: Option<String>,
    },

    /// A `policy.cedar` that does not parse, or holds what a bundle cannot.
    #[error("cedar error: {message}")]
    #[diagnostic(code(ipc::cedar_syntax))]
    CedarSyntax {
        message: String,
        #[label("{label}")]
        span: SourceSpan,
        label: String,
        #[help]
        help: Option<String>,
    },

    /// The IR holds something the checker should have refused; a bug.
    #[error("cannot generate cedar: {message}")]
    #[diagnostic(
        code(ipc::codegen_internal),
        help("this is a bug in ipc; please report it together with the pack")
    )]
    CodegenInternal {
        message: String,
        #[label("while compiling this")]
        span: SourceSpan,
    },
}

impl PackDiagnostic {
    pub fn is_error(&self) -> bool {
        !matches!(self.severity(), Some(miette::Severity::Warning))
    }

    /// The diagnostic's code, as printed (`ipc::syntax`).
    pub fn code_str(&self) -> String {
        self.code().map(|c| c.to_string()).unwrap_or_default()
    }
}

/// A did-you-mean line from a list of candidate names.
pub fn suggest<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let best = candidates
        .into_iter()
        .map(|c| (strsim_distance(name, c), c))
        .filter(|(d, c)| *d <= 2.max(c.len() / 3))
        .min_by_key(|(d, _)| *d)?;
    Some(format!("did you mean `{}`?", best.1))
}

/// Levenshtein distance; small inputs only (names).
fn strsim_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Renders one diagnostic for a person, without colour (stable for
/// snapshots and logs).
pub fn render_human(diag: &PackDiagnostic, file: &str, source: &str) -> String {
    render_human_report(diag, file, source, false)
}

/// Renders with or without ANSI colour.
pub fn render_human_report<D>(diag: &D, file: &str, source: &str, color: bool) -> String
where
    D: Diagnostic + Clone + Send + Sync + 'static,
{
    let report = miette::Report::new(diag.clone())
        .with_source_code(miette::NamedSource::new(file, source.to_string()));
    let theme = if color {
        miette::GraphicalTheme::unicode()
    } else {
        miette::GraphicalTheme::unicode_nocolor()
    };
    let handler = miette::GraphicalReportHandler::new_themed(theme).with_width(100);
    let mut out = String::new();
    if handler
        .render_report(&mut out, report.as_ref() as &dyn Diagnostic)
        .is_err()
    {
        return format!("{diag}\n");
    }
    out
}

/// One diagnostic as data: what `--format json` prints.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct JsonDiagnostic {
    pub file: String,
    pub code: String,
    pub severity: &'static str,
    pub message: String,
    pub help: Option<String>,
    pub labels: Vec<JsonLabel>,
}

#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct JsonLabel {
    pub label: Option<String>,
    pub offset: usize,
    pub length: usize,
    /// 1-based.
    pub line: usize,
    /// 1-based, in characters.
    pub column: usize,
}

/// 1-based line and character column of a byte offset (clamped to the text).
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
    let column = source[line_start..offset].chars().count() + 1;
    (line, column)
}

pub fn to_json<D: Diagnostic + ?Sized>(diag: &D, file: &str, source: &str) -> JsonDiagnostic {
    let is_error = !matches!(diag.severity(), Some(miette::Severity::Warning));
    let labels = diag
        .labels()
        .map(|it| {
            it.map(|l| {
                let (line, column) = line_col(source, l.offset());
                JsonLabel {
                    label: l.label().map(str::to_string),
                    offset: l.offset(),
                    length: l.len(),
                    line,
                    column,
                }
            })
            .collect()
        })
        .unwrap_or_default();
    JsonDiagnostic {
        file: file.to_string(),
        code: diag.code().map(|c| c.to_string()).unwrap_or_default(),
        severity: if is_error { "error" } else { "warning" },
        message: diag.to_string(),
        help: diag.help().map(|h| h.to_string()),
        labels,
    }
}
