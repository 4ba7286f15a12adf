//! Checked IR to Cedar: the schema, the policies and the runtime table.
//!
//! [`generate`] takes the checked packs (with their source text, to point
//! diagnostics at lines, and their optional hand-written `policy.cedar`)
//! and returns everything a bundle holds except its hash — or the list of
//! problems, each located in a pack file or a `.cedar` file. Every policy is
//! validated against the generated schema in Cedar's strict mode; nothing is
//! returned without a schema.
//!
//! Submodules: `names` (quoting, escaping, ids), `schema`, `expr` (rule
//! conditions), `table` (the runtime table's types).

mod expr;
mod names;
pub mod schema;
/// The runtime table, the bundle's vocabulary (`crate::bundle::format`).
use crate::diagnostics::{JsonDiagnostic, PackDiagnostic};
use crate::ir::{self, RuleKind};
use cedar_policy::{
    ActionConstraint, EntityUid, Policy, PolicyId, PolicySet, Schema, ValidationMode, Validator,
};
use expr::CExpr;
use miette::{Diagnostic, SourceSpan};
use names::cedar_string;

use crate::bundle::format::{Generated, PackInfo, PolicyEntry, Table, TableAction, TablePack};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::bundle::format::{CTX_APPROVAL_LEVEL, CTX_NOW, CTX_PROVENANCE};
/// Principal entity type in each pack's namespace.
pub const PRINCIPAL_TYPE: &str = "User";
/// Resource entity type (the mandate's owner) in each pack's namespace.
pub const RESOURCE_TYPE: &str = "Tenant";

/// A condition over an action's context (parameters, facts) as Cedar: how
/// `ipc build` states a guarantee to the solver.
pub fn cedar_condition(e: &ir::Expr) -> Result<String, String> {
    expr::translate(e)
        .map(|c| c.render())
        .map_err(|expr::Untranslatable(m)| m)
}

/// One checked pack to compile.
#[derive(Clone, Debug)]
pub struct PackInput {
    pub pack: ir::Pack,
    /// The pack's text, so that diagnostics point at its lines.
    pub source: String,
    /// Its hand-written policies, if any.
    pub custom: Option<CedarFile>,
}

/// A hand-written Cedar policy file.
#[derive(Clone, Debug)]
pub struct CedarFile {
    /// As shown in diagnostics.
    pub file: String,
    pub text: String,
}

/// Where the hand-written policies of a pack live: `policy.cedar` next to a
/// `pack.ipc`, `NAME.cedar` next to any other `NAME.ipc`.
pub fn custom_policy_path(pack_file: &Path) -> PathBuf {
    if pack_file
        .file_name()
        .is_some_and(|n| n == crate::check::PACK_FILE)
    {
        pack_file.with_file_name("policy.cedar")
    } else {
        pack_file.with_extension("cedar")
    }
}

/// A diagnostic with the file it points into.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    pub file: String,
    pub source: String,
    pub diagnostic: PackDiagnostic,
}

impl Problem {
    pub fn render(&self, color: bool) -> String {
        crate::diagnostics::render_human_report(&self.diagnostic, &self.file, &self.source, color)
    }
    pub fn to_json(&self) -> JsonDiagnostic {
        crate::diagnostics::to_json(&self.diagnostic, &self.file, &self.source)
    }
    /// 1-based line of the first label.
    pub fn line(&self) -> Option<usize> {
        let label = self.diagnostic.labels()?.next()?;
        Some(crate::diagnostics::line_col(&self.source, label.offset()).0)
    }
}

/// `<pack name>/<file name>`: how annotations name a pack's files, so that
/// a bundle never depends on the directory it was built from.
pub(crate) fn file_label(pack: &str, file: &str) -> String {
    let base = Path::new(file)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| file.to_string());
    format!("{pack}/{base}")
}

/// The byte span of a 1-based line, without its indentation.
pub(crate) fn line_span(source: &str, line: usize) -> SourceSpan {
    let mut start = 0;
    for (i, l) in source.split_inclusive('\n').enumerate() {
        if i + 1 == line {
            let trimmed = l.trim_start();
            let indent = l.len() - trimmed.len();
            return (start + indent, trimmed.trim_end().len()).into();
        }
        start += l.len();
    }
    (0, 0).into()
}

/// The line of the `pack` header (after any leading comments).
fn header_line(source: &str) -> usize {
    source
        .lines()
        .position(|l| l.trim_start().starts_with("pack"))
        .map(|i| i + 1)
        .unwrap_or(1)
}

fn line_of(text: &str, offset: usize) -> usize {
    crate::diagnostics::line_col(text, offset).0
}

/// Where a policy came from, for diagnostics.
#[derive(Clone, Debug)]
enum Origin {
    /// A line of the pack file.
    Pack { input: usize, line: usize },
    /// A span of the pack's `.cedar` file.
    Cedar {
        input: usize,
        offset: usize,
        len: usize,
    },
}

/// Which actions a policy is listed under in the table.
#[derive(Clone, Debug)]
enum Applies {
    Generated {
        pack: String,
        action: String,
        rule: Option<usize>,
    },
    Custom(ActionConstraint),
}

struct Pending {
    entry: PolicyEntry,
    origin: Origin,
    /// What is validated (hand-written ones keep their file positions).
    policy: Policy,
    applies: Applies,
}

/// Compiles checked packs. Packs are ordered by name, so the result does
/// not depend on the order they were given in.
pub fn generate(inputs: &[PackInput]) -> Result<Generated, Vec<Problem>> {
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by(|&a, &b| inputs[a].pack.name.cmp(&inputs[b].pack.name));

    let mut problems = precheck(inputs, &order);
    if !problems.is_empty() {
        return Err(problems);
    }

    let mut schema_text =
        String::from("// generated by ipc from the checked packs: one namespace per pack\n");
    for &i in &order {
        let p = &inputs[i].pack;
        schema_text.push('\n');
        schema::write_namespace(p, &file_label(&p.name, &p.file), &mut schema_text);
    }
    let schema = match Schema::from_cedarschema_str(&schema_text) {
        Ok((s, _warnings)) => s,
        Err(e) => {
            let (span, label) = first_label(&e).unwrap_or(((0, 0).into(), "here".into()));
            return Err(vec![Problem {
                file: "<generated cedar schema>".into(),
                source: schema_text.clone(),
                diagnostic: PackDiagnostic::CodegenInternal {
                    message: format!("the generated schema does not parse: {e} ({label})"),
                    span,
                },
            }]);
        }
    };

    let mut pending: Vec<Pending> = vec![];
    for &i in &order {
        generated_policies(i, &inputs[i], &mut pending, &mut problems);
        if let Some(c) = &inputs[i].custom {
            custom_policies(i, &inputs[i], c, &mut pending, &mut problems);
        }
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (k, p) in pending.iter().enumerate() {
        if let Some(&first) = seen.get(&p.entry.id) {
            let (file, source, span) = locate(inputs, &p.origin);
            problems.push(Problem {
                file,
                source,
                diagnostic: PackDiagnostic::CedarSyntax {
                    message: format!("policy id `{}` is used twice", p.entry.id),
                    span,
                    label: "this policy".into(),
                    help: Some(format!(
                        "`{}` already names the policy from {}; give this one another `@id`",
                        p.entry.id, pending[first].entry.source
                    )),
                },
            });
        } else {
            seen.insert(p.entry.id.clone(), k);
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }

    let mut set = PolicySet::new();
    for p in &pending {
        if let Err(e) = set.add(p.policy.clone()) {
            let (file, source, span) = locate(inputs, &p.origin);
            problems.push(Problem {
                file,
                source,
                diagnostic: PackDiagnostic::CodegenInternal {
                    message: format!("cannot add policy `{}`: {e}", p.entry.id),
                    span,
                },
            });
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let result = Validator::new(schema).validate(&set, ValidationMode::Strict);
    for e in result.validation_errors() {
        let id = e.policy_id().to_string();
        let Some(p) = pending.iter().find(|p| p.entry.id == id) else {
            continue;
        };
        problems.push(validation_problem(inputs, p, e));
    }
    if !problems.is_empty() {
        return Err(problems);
    }

    let table = build_table(inputs, &order, &pending).map_err(|e| vec![*e])?;
    Ok(Generated {
        packs: order
            .iter()
            .map(|&i| PackInfo {
                name: inputs[i].pack.name.clone(),
                version: inputs[i].pack.version.clone(),
                description: inputs[i].pack.description.clone(),
                shadow_never: inputs[i].pack.shadow_never,
            })
            .collect(),
        schema: schema_text,
        policies: pending.into_iter().map(|p| p.entry).collect(),
        table,
    })
}

/// Names the generated Cedar cannot hold: duplicate packs, an action in two
/// packs, a pack named like a Cedar keyword, a parameter or fact named like
/// a context attribute the generator adds.
fn precheck(inputs: &[PackInput], order: &[usize]) -> Vec<Problem> {
    let mut problems = vec![];
    let mut packs: HashMap<&str, usize> = HashMap::new();
    let mut actions: HashMap<&str, &str> = HashMap::new();
    for &i in order {
        let input = &inputs[i];
        let p = &input.pack;
        let at = |_line: usize, d: PackDiagnostic| Problem {
            file: p.file.clone(),
            source: input.source.clone(),
            diagnostic: d,
        };
        let header = line_span(&input.source, header_line(&input.source));
        if let Some(&first) = packs.get(p.name.as_str()) {
            problems.push(at(
                0,
                PackDiagnostic::DuplicatePack {
                    name: p.name.clone(),
                    first_file: inputs[first].pack.file.clone(),
                    span: header,
                },
            ));
            continue;
        }
        packs.insert(&p.name, i);
        if let Some(reason) = names::namespace_problem(&p.name) {
            problems.push(at(
                0,
                PackDiagnostic::ReservedName {
                    name: p.name.clone(),
                    reason: reason.into(),
                    span: header,
                },
            ));
        }
        for a in &p.actions {
            if let Some(other) = actions.get(a.name.as_str()) {
                problems.push(at(
                    a.line,
                    PackDiagnostic::DuplicateActionAcrossPacks {
                        action: a.name.clone(),
                        other: other.to_string(),
                        span: line_span(&input.source, a.line),
                    },
                ));
            } else {
                actions.insert(&a.name, &p.name);
            }
            let names = a
                .params
                .iter()
                .map(|x| (&x.name, x.line))
                .chain(a.facts.iter().map(|f| (&f.name, f.line)));
            for (name, line) in names {
                if [CTX_PROVENANCE, CTX_APPROVAL_LEVEL, CTX_NOW].contains(&name.as_str()) {
                    problems.push(at(
                        line,
                        PackDiagnostic::ReservedName {
                            name: name.clone(),
                            reason: format!(
                                "`context.{name}` is an attribute the gateway fills in itself"
                            ),
                            span: line_span(&input.source, line),
                        },
                    ));
                }
            }
        }
    }
    problems
}

fn scope_head(effect: &str, ns: &str, action: &str) -> String {
    format!(
        "{effect} (\n  principal,\n  action == {ns}::Action::{},\n  resource\n)",
        cedar_string(action)
    )
}

/// One permit per action, one forbid per rule.
fn generated_policies(
    input_ix: usize,
    input: &PackInput,
    pending: &mut Vec<Pending>,
    problems: &mut Vec<Problem>,
) {
    let p = &input.pack;
    let label = file_label(&p.name, &p.file);
    for a in &p.actions {
        let mut ids: HashSet<String> = HashSet::new();
        let permit_id = format!("{}/{}/permit", p.name, a.name);
        ids.insert(permit_id.clone());
        let source = format!("{label}:{}", a.line);
        let text = format!(
            "@id({})\n@source({})\n{};\n",
            cedar_string(&permit_id),
            cedar_string(&source),
            scope_head("permit", &p.name, &a.name)
        );
        push_generated(
            input_ix,
            input,
            PolicyEntry {
                id: permit_id,
                source,
                text,
            },
            a.line,
            Applies::Generated {
                pack: p.name.clone(),
                action: a.name.clone(),
                rule: None,
            },
            pending,
            problems,
        );
        for (r_ix, r) in a.rules.iter().enumerate() {
            let cond = match &r.when {
                Some(w) => match expr::translate(w) {
                    Ok(c) => Some(c),
                    Err(expr::Untranslatable(message)) => {
                        problems.push(Problem {
                            file: p.file.clone(),
                            source: input.source.clone(),
                            diagnostic: PackDiagnostic::CodegenInternal {
                                message,
                                span: line_span(&input.source, r.line),
                            },
                        });
                        continue;
                    }
                },
                None => None,
            };
            let level = r.kind.level();
            let guard = (level > 0).then(|| {
                CExpr::bin(
                    expr::CBin::Lt,
                    CExpr::context(CTX_APPROVAL_LEVEL),
                    CExpr::long(i64::from(level)),
                )
            });
            let when = match (cond, guard) {
                (Some(c), Some(g)) => Some(CExpr::and(c, g)),
                (Some(c), None) => Some(c),
                (None, Some(g)) => Some(g),
                (None, None) => None,
            };
            let base = {
                let s = names::slug(&r.reason);
                let s = if s.is_empty() {
                    format!("line-{}", r.line)
                } else {
                    s
                };
                format!("{}/{}/{}/{s}", p.name, a.name, r.kind.keyword())
            };
            let mut id = base.clone();
            let mut n = 2;
            while ids.contains(&id) {
                id = format!("{base}-{n}");
                n += 1;
            }
            ids.insert(id.clone());
            let source = format!("{label}:{}", r.line);
            let mut text = format!(
                "@id({})\n@source({})\n@reason({})\n",
                cedar_string(&id),
                cedar_string(&source),
                cedar_string(&r.reason)
            );
            if r.kind != RuleKind::Forbid {
                text.push_str(&format!("@level(\"{level}\")\n"));
            }
            text.push_str(&scope_head("forbid", &p.name, &a.name));
            match when {
                Some(w) => text.push_str(&format!("\nwhen {{ {} }};\n", w.render())),
                None => text.push_str(";\n"),
            }
            push_generated(
                input_ix,
                input,
                PolicyEntry { id, source, text },
                r.line,
                Applies::Generated {
                    pack: p.name.clone(),
                    action: a.name.clone(),
                    rule: Some(r_ix),
                },
                pending,
                problems,
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn push_generated(
    input_ix: usize,
    input: &PackInput,
    entry: PolicyEntry,
    line: usize,
    applies: Applies,
    pending: &mut Vec<Pending>,
    problems: &mut Vec<Problem>,
) {
    match Policy::parse(Some(PolicyId::new(&entry.id)), &entry.text) {
        Ok(policy) => pending.push(Pending {
            entry,
            origin: Origin::Pack {
                input: input_ix,
                line,
            },
            policy,
            applies,
        }),
        Err(e) => problems.push(Problem {
            file: input.pack.file.clone(),
            source: input.source.clone(),
            diagnostic: PackDiagnostic::CodegenInternal {
                message: format!("generated policy `{}` does not parse: {e}", entry.id),
                span: line_span(&input.source, line),
            },
        }),
    }
}

/// A pack's hand-written policies: parsed as one file (so positions are
/// file positions), each given an id (`@id`, or `<pack>/custom/<n>`) and a
/// `@source` annotation.
fn custom_policies(
    input_ix: usize,
    input: &PackInput,
    c: &CedarFile,
    pending: &mut Vec<Pending>,
    problems: &mut Vec<Problem>,
) {
    let pack = &input.pack.name;
    let at = |d: PackDiagnostic| Problem {
        file: c.file.clone(),
        source: c.text.clone(),
        diagnostic: d,
    };
    let set = match PolicySet::from_str(&c.text) {
        Ok(s) => s,
        Err(errs) => {
            for e in errs.iter() {
                let (span, label) = first_label(e).unwrap_or(((0, 0).into(), "here".into()));
                problems.push(at(PackDiagnostic::CedarSyntax {
                    message: e.to_string(),
                    span,
                    label,
                    help: e.help().map(|h| h.to_string()),
                }));
            }
            return;
        }
    };
    if set.num_of_templates() > 0 {
        let offset = ["?principal", "?resource"]
            .iter()
            .filter_map(|s| c.text.find(s))
            .min()
            .unwrap_or(0);
        problems.push(at(PackDiagnostic::CedarSyntax {
            message: "templates are not supported in a pack's policies".into(),
            span: (offset, 0).into(),
            label: "a template slot".into(),
            help: Some(
                "the gateway evaluates static policies only; name the entities instead".into(),
            ),
        }));
        return;
    }
    let mut policies: Vec<&Policy> = set.policies().collect();
    // the parser numbers policies policy0, policy1, ... in file order
    policies.sort_by_key(|p| {
        p.id()
            .to_string()
            .trim_start_matches("policy")
            .parse::<usize>()
            .unwrap_or(usize::MAX)
    });
    let base = file_label(pack, &c.file);
    let mut cursor = 0;
    for (n, p) in policies.iter().enumerate() {
        let text = p.to_cedar().unwrap_or_default();
        let found = c
            .text
            .get(cursor..)
            .and_then(|rest| rest.find(text.as_str()))
            .map(|o| o + cursor);
        let (offset, len) = match found {
            Some(o) => {
                cursor = o + text.len();
                (o, text.len())
            }
            None => (0, 0),
        };
        let line = line_of(&c.text, offset);
        let id = p
            .annotation("id")
            .map(str::to_string)
            .unwrap_or_else(|| format!("{pack}/custom/{}", n + 1));
        let source = format!("{base}:{line}");
        let mut stored = String::new();
        if p.annotation("id").is_none() {
            stored.push_str(&format!("@id({})\n", cedar_string(&id)));
        }
        if p.annotation("source").is_none() {
            stored.push_str(&format!("@source({})\n", cedar_string(&source)));
        }
        stored.push_str(text.trim_end());
        stored.push('\n');
        if let Err(e) = Policy::parse(Some(PolicyId::new(&id)), &stored) {
            problems.push(at(PackDiagnostic::CodegenInternal {
                message: format!("the annotated policy `{id}` does not parse: {e}"),
                span: (offset, len).into(),
            }));
            continue;
        }
        pending.push(Pending {
            entry: PolicyEntry {
                id: id.clone(),
                source,
                text: stored,
            },
            origin: Origin::Cedar {
                input: input_ix,
                offset,
                len,
            },
            policy: p.new_id(PolicyId::new(&id)),
            applies: Applies::Custom(p.action_constraint()),
        });
    }
}

/// The file, its text and the span a policy's diagnostics point at.
fn locate(inputs: &[PackInput], origin: &Origin) -> (String, String, SourceSpan) {
    match *origin {
        Origin::Pack { input, line } => {
            let i = &inputs[input];
            (
                i.pack.file.clone(),
                i.source.clone(),
                line_span(&i.source, line),
            )
        }
        Origin::Cedar { input, offset, len } => match &inputs[input].custom {
            Some(c) => (c.file.clone(), c.text.clone(), (offset, len).into()),
            None => (String::new(), String::new(), (0, 0).into()),
        },
    }
}

fn first_label(d: &dyn Diagnostic) -> Option<(SourceSpan, String)> {
    let l = d.labels()?.next()?;
    Some((
        (l.offset(), l.len()).into(),
        l.label().unwrap_or("here").to_string(),
    ))
}

fn validation_problem(
    inputs: &[PackInput],
    p: &Pending,
    e: &cedar_policy::ValidationError,
) -> Problem {
    let full = e.to_string();
    // Cedar says "for policy `ID`, ..."; the diagnostic names the policy
    let message = full
        .strip_prefix(&format!("for policy `{}`, ", p.entry.id))
        .unwrap_or(&full)
        .to_string();
    let cedar_help = e.help().map(|h| h.to_string());
    match &p.origin {
        Origin::Pack { .. } => {
            let (file, source, span) = locate(inputs, &p.origin);
            let snippet = e.labels().and_then(|mut ls| ls.next()).and_then(|l| {
                p.entry
                    .text
                    .get(l.offset()..l.offset() + l.len())
                    .map(str::to_string)
            });
            let mut help = vec![];
            if let Some(s) = snippet {
                help.push(format!("in the generated cedar: `{s}`"));
            }
            help.extend(cedar_help);
            Problem {
                file,
                source,
                diagnostic: PackDiagnostic::CedarValidation {
                    policy: p.entry.id.clone(),
                    message,
                    span,
                    label: "the policy compiled from this line".into(),
                    help: (!help.is_empty()).then(|| help.join("\n")),
                },
            }
        }
        Origin::Cedar { .. } => {
            let (file, source, whole) = locate(inputs, &p.origin);
            let (span, label) = first_label(e).unwrap_or((whole, "in this policy".into()));
            Problem {
                file,
                source,
                diagnostic: PackDiagnostic::CedarValidation {
                    policy: p.entry.id.clone(),
                    message,
                    span,
                    label,
                    help: cedar_help,
                },
            }
        }
    }
}

fn build_table(
    inputs: &[PackInput],
    order: &[usize],
    pending: &[Pending],
) -> Result<Table, Box<Problem>> {
    let mut packs = vec![];
    let mut actions = vec![];
    for &i in order {
        let input = &inputs[i];
        let p = &input.pack;
        packs.push(TablePack {
            name: p.name.clone(),
            claims: p.claims.clone(),
            registries: p.registries.clone(),
            principal_type: format!("{}::{PRINCIPAL_TYPE}", p.name),
            resource_type: format!("{}::{RESOURCE_TYPE}", p.name),
        });
        let label = file_label(&p.name, &p.file);
        for a in &p.actions {
            let cedar_action = format!("{}::Action::{}", p.name, cedar_string(&a.name));
            let uid = EntityUid::from_str(&cedar_action).map_err(|e| {
                Box::new(Problem {
                    file: p.file.clone(),
                    source: input.source.clone(),
                    diagnostic: PackDiagnostic::CodegenInternal {
                        message: format!("`{cedar_action}` is not a cedar entity: {e}"),
                        span: line_span(&input.source, a.line),
                    },
                })
            })?;
            let mut policy_ids = vec![];
            let mut rule_policy_ids = vec![String::new(); a.rules.len()];
            for x in pending {
                let applies = match &x.applies {
                    Applies::Generated { pack, action, rule } => {
                        let mine = *pack == p.name && *action == a.name;
                        if mine
                            && let Some(r) = rule
                            && let Some(slot) = rule_policy_ids.get_mut(*r)
                        {
                            *slot = x.entry.id.clone();
                        }
                        mine
                    }
                    Applies::Custom(ActionConstraint::Any) => true,
                    Applies::Custom(ActionConstraint::Eq(u)) => *u == uid,
                    // no action groups in the schema: `in` is membership
                    Applies::Custom(ActionConstraint::In(us)) => us.contains(&uid),
                };
                if applies {
                    policy_ids.push(x.entry.id.clone());
                }
            }
            actions.push(TableAction {
                pack: p.name.clone(),
                cedar_action,
                source: format!("{label}:{}", a.line),
                action: a.clone(),
                policy_ids,
                rule_policy_ids,
            });
        }
    }
    Ok(Table { packs, actions })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_of_lines() {
        let src = "a\n  bb  \nccc";
        assert_eq!(line_span(src, 2), (4, 2).into());
        assert_eq!(line_span(src, 3), (9, 3).into());
        assert_eq!(line_span(src, 9), (0, 0).into());
        assert_eq!(header_line("// c\n\npack x"), 3);
    }

    #[test]
    fn custom_paths() {
        assert_eq!(
            custom_policy_path(Path::new("packs/bank/pack.ipc")),
            PathBuf::from("packs/bank/policy.cedar")
        );
        assert_eq!(
            custom_policy_path(Path::new("x/demo.ipc")),
            PathBuf::from("x/demo.cedar")
        );
    }
}
