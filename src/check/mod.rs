//! Syntax tree to checked IR. Every error the language can have is found
//! here (or in the parser) and reported as a [`PackDiagnostic`] with a span;
//! the IR is only returned when there is no error.
//!
//! Submodules: `types` (type expressions), `params` (parameters, sources,
//! normalisers, validators), `expr` (facts and rule conditions).

mod expr;
mod guarantee;
mod params;
mod types;

use crate::diagnostics::{PackDiagnostic, suggest};
use crate::ir::{self, Claim, Pack, Registry, RegistryShape};
use crate::syntax::ast::{self, Span};
use std::collections::HashMap;
use std::path::Path;

/// The outcome of checking one pack file.
#[derive(Debug)]
pub struct Checked {
    /// The file name used in diagnostics.
    pub file: String,
    /// The text checked (empty when it could not be read).
    pub source: String,
    /// `Some` only when there is no error (warnings allowed).
    pub pack: Option<Pack>,
    pub diagnostics: Vec<PackDiagnostic>,
}

impl Checked {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.is_error())
    }
}

/// The file a pack folder holds its spec in.
pub const PACK_FILE: &str = "pack.ipc";

/// Checks a pack given as a folder (holding `pack.ipc`) or a file. Any I/O
/// problem is a diagnostic, never a panic.
pub fn check_path(path: &Path) -> Checked {
    let file_path = if path.is_dir() {
        path.join(PACK_FILE)
    } else {
        path.to_path_buf()
    };
    let file = file_path.display().to_string();
    let io_error = |reason: String| Checked {
        file: file.clone(),
        source: String::new(),
        pack: None,
        diagnostics: vec![PackDiagnostic::Io {
            path: file.clone(),
            reason,
        }],
    };
    match std::fs::metadata(&file_path) {
        Ok(m) if m.len() > crate::syntax::MAX_SOURCE_LEN as u64 => {
            return io_error(format!(
                "{} bytes is larger than the {} bytes a pack file may have",
                m.len(),
                crate::syntax::MAX_SOURCE_LEN
            ));
        }
        Ok(m) if m.is_dir() => return io_error("is a folder".into()),
        Ok(_) => {}
        Err(e) => {
            let reason = if path.is_dir() {
                format!("the folder has no `{PACK_FILE}`")
            } else {
                e.to_string().to_lowercase()
            };
            return io_error(reason);
        }
    }
    let bytes = match std::fs::read(&file_path) {
        Ok(b) => b,
        Err(e) => return io_error(e.to_string().to_lowercase()),
    };
    check_bytes(&file, &bytes)
}

/// Checks raw bytes (which may not be UTF-8).
pub fn check_bytes(file: &str, bytes: &[u8]) -> Checked {
    match std::str::from_utf8(bytes) {
        Ok(text) => check_text(file, text),
        Err(e) => {
            let at = e.valid_up_to();
            // show the valid prefix so the span has something to point into
            let shown = String::from_utf8_lossy(bytes).into_owned();
            let start = String::from_utf8_lossy(&bytes[..at]).len();
            Checked {
                file: file.to_string(),
                source: shown,
                pack: None,
                diagnostics: vec![PackDiagnostic::NotUtf8 {
                    span: (start, 1).into(),
                }],
            }
        }
    }
}

/// Checks pack text. `file` names it in diagnostics and annotations.
pub fn check_text(file: &str, source: &str) -> Checked {
    let mut out = Checked {
        file: file.to_string(),
        source: source.to_string(),
        pack: None,
        diagnostics: vec![],
    };
    match crate::syntax::parse(source) {
        Ok(ast) => check_ast(file, source, &ast),
        Err(d) => {
            out.diagnostics = d;
            out
        }
    }
}

/// Checks a syntax tree whose spans point into `source`: the pack
/// language's parser makes one, and so does the MCP proxy's TOML front-end
/// (src/mcp/config), which gets the same checks, diagnostics and lints.
pub fn check_ast(file: &str, source: &str, ast: &ast::File) -> Checked {
    let mut out = Checked {
        file: file.to_string(),
        source: source.to_string(),
        pack: None,
        diagnostics: vec![],
    };
    let mut cx = Cx::new(source);
    let pack = cx.pack(file, ast);
    out.diagnostics = cx.errors;
    // lints only on a pack that checks: an unresolved source would make
    // every claim it names look unused
    if !out.has_errors() {
        out.diagnostics.extend(crate::lint::run(ast, &pack));
    }
    if !out.has_errors() {
        out.pack = Some(pack);
    }
    out
}

/// Checking context: the diagnostics so far and the pack-level names.
pub(crate) struct Cx {
    /// The text checked (a guarantee names the facts it adds by their text).
    source: String,
    line_starts: Vec<usize>,
    pub(crate) errors: Vec<PackDiagnostic>,
    claims: HashMap<String, (ir::Type, Span)>,
    registries: HashMap<String, (Registry, Span)>,
}

impl Cx {
    fn new(source: &str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        Cx {
            source: source.to_string(),
            line_starts,
            errors: vec![],
            claims: HashMap::new(),
            registries: HashMap::new(),
        }
    }

    pub(crate) fn err(&mut self, d: PackDiagnostic) {
        self.errors.push(d);
    }

    /// 1-based line of a byte offset.
    pub(crate) fn line(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i + 1,
            Err(i) => i,
        }
    }

    fn pack(&mut self, file: &str, f: &ast::File) -> Pack {
        let mut pack = Pack {
            name: f.header.name.text.clone(),
            version: f
                .header
                .version
                .as_ref()
                .map(|v| v.value.clone())
                .unwrap_or_else(|| "0.0.0".into()),
            description: f
                .header
                .description
                .as_ref()
                .map(|d| d.value.clone())
                .unwrap_or_default(),
            file: file.to_string(),
            claims: vec![],
            registries: vec![],
            actions: vec![],
            guarantees: vec![],
            shadow_never: f.header.shadow_never.is_some(),
        };
        // names first, so that order of declaration does not matter
        let mut selections: Vec<(String, ast::Name)> = vec![];
        for item in &f.items {
            match item {
                ast::Item::Mandate(m) => {
                    for c in &m.claims {
                        if let Some((_, first)) = self.claims.get(&c.name.text) {
                            let first = *first;
                            self.duplicate("mandate claim", &c.name, first);
                            continue;
                        }
                        // a selection's registry is resolved once every
                        // registry is known (below)
                        let ty = match &c.ty.kind {
                            ast::TypeExprKind::Selection(r) => {
                                selections.push((c.name.text.clone(), r.clone()));
                                ir::Type::Selection(r.text.clone())
                            }
                            _ => self
                                .resolve_value_type(&c.ty, "a mandate claim")
                                .unwrap_or(ir::Type::Text),
                        };
                        self.claims
                            .insert(c.name.text.clone(), (ty.clone(), c.name.span));
                        pack.claims.push(Claim {
                            name: c.name.text.clone(),
                            ty,
                        });
                    }
                }
                ast::Item::Registry(r) => {
                    if let Some((_, first)) = self.registries.get(&r.name.text) {
                        let first = *first;
                        self.duplicate("registry", &r.name, first);
                        continue;
                    }
                    let reg = self.registry(r);
                    self.registries
                        .insert(r.name.text.clone(), (reg.clone(), r.name.span));
                    pack.registries.push(reg);
                }
                ast::Item::Action(_) | ast::Item::Guarantee(_) => {}
            }
        }
        for (claim, r) in selections {
            self.selection(&claim, &r);
        }
        let mut seen: HashMap<String, Span> = HashMap::new();
        for item in &f.items {
            if let ast::Item::Action(a) = item {
                if let Some(first) = seen.get(&a.name.text) {
                    let first = *first;
                    self.duplicate("action", &a.name, first);
                    continue;
                }
                seen.insert(a.name.text.clone(), a.name.span);
                pack.actions.push(self.action(a));
            }
        }
        // after every action: a guarantee covers the actions in its scope,
        // wherever they are declared
        for item in &f.items {
            if let ast::Item::Guarantee(g) = item {
                let checked = self.guarantee(g, &mut pack.actions);
                pack.guarantees.extend(checked);
            }
        }
        pack
    }

    pub(crate) fn duplicate(&mut self, kind: &'static str, name: &ast::Name, first: Span) {
        self.err(PackDiagnostic::Duplicate {
            kind,
            name: name.text.clone(),
            span: name.span.into(),
            first: first.into(),
        });
    }

    /// A claim `selection over registry.R`: `R` must be a keyed registry
    /// of the pack.
    fn selection(&mut self, _claim: &str, r: &ast::Name) {
        let Some(reg) = self.registry_of(r) else {
            return;
        };
        if !matches!(reg.shape, RegistryShape::Keyed { .. }) {
            self.err(PackDiagnostic::SelectionNotKeyed {
                registry: r.text.clone(),
                span: r.span.into(),
            });
        }
    }

    fn registry(&mut self, r: &ast::RegistryDecl) -> Registry {
        let shape = match &r.shape {
            ast::RegistryShape::Set(t) => {
                let ty = self
                    .resolve_value_type(t, "a registry")
                    .unwrap_or(ir::Type::Text);
                match ty {
                    ir::Type::Set(e) | ir::Type::List(e) => RegistryShape::Set { element: *e },
                    other => {
                        self.err(PackDiagnostic::TypeMismatch {
                            message: format!("a registry of values is a set, not {other}"),
                            span: t.span.into(),
                            label: "not a set".into(),
                            help: Some(format!(
                                "write `set<{other}>`, or `by KEY {{ ... }}` for records"
                            )),
                        });
                        RegistryShape::Set { element: other }
                    }
                }
            }
            ast::RegistryShape::Keyed { key, fields } => {
                let key_ty = self
                    .resolve_value_type(key, "a registry key")
                    .unwrap_or(ir::Type::Id);
                if key_ty.is_collection() {
                    self.err(PackDiagnostic::TypeMismatch {
                        message: format!("a record key is a single value, not {key_ty}"),
                        span: key.span.into(),
                        label: "not a key type".into(),
                        help: None,
                    });
                }
                let mut out: Vec<Claim> = vec![];
                let mut spans: HashMap<String, Span> = HashMap::new();
                for f in fields {
                    if let Some(first) = spans.get(&f.name.text) {
                        let first = *first;
                        self.duplicate("field", &f.name, first);
                        continue;
                    }
                    spans.insert(f.name.text.clone(), f.name.span);
                    let ty = self
                        .resolve_value_type(&f.ty, "a registry field")
                        .unwrap_or(ir::Type::Text);
                    out.push(Claim {
                        name: f.name.text.clone(),
                        ty,
                    });
                }
                RegistryShape::Keyed {
                    key: key_ty,
                    fields: out,
                }
            }
        };
        Registry {
            name: r.name.text.clone(),
            global: r.global,
            shape,
        }
    }

    fn action(&mut self, a: &ast::ActionDecl) -> ir::Action {
        let mut scope: Option<(String, Span)> = None;
        let mut budget: Option<(ast::Name, Span)> = None;
        let mut executor: Option<(String, Span)> = None;
        let action_name = a.name.text.clone();
        let once =
            |cx: &mut Cx, slot_first: Option<Span>, clause: &'static str, span: Span| -> bool {
                if let Some(first) = slot_first {
                    cx.err(PackDiagnostic::RepeatedClause {
                        action: action_name.clone(),
                        clause,
                        span: span.into(),
                        first: first.into(),
                    });
                    false
                } else {
                    true
                }
            };
        for c in &a.clauses {
            match c {
                ast::ActionClause::Scope(n, s)
                    if once(self, scope.as_ref().map(|x| x.1), "scope", *s) =>
                {
                    scope = Some((n.text.clone(), *s));
                }
                ast::ActionClause::Budget(n, s)
                    if once(self, budget.as_ref().map(|x| x.1), "budget", *s) =>
                {
                    budget = Some((n.clone(), *s));
                }
                ast::ActionClause::Executor(n, s)
                    if once(self, executor.as_ref().map(|x| x.1), "executor", *s) =>
                {
                    if !ir::EXECUTORS.contains(&n.text.as_str()) {
                        self.err(PackDiagnostic::UnknownExecutor {
                            name: n.text.clone(),
                            known: ir::EXECUTORS.join(", "),
                            span: n.span.into(),
                        });
                    }
                    executor = Some((n.text.clone(), *s));
                }
                _ => {}
            }
        }
        if scope.is_none() {
            self.err(PackDiagnostic::MissingClause {
                action: a.name.text.clone(),
                clause: "scope",
                span: a.name.span.into(),
                help: Some(
                    "delegation checks that the mandate grants the action's scope, e.g. `scope payments.write`"
                        .into(),
                ),
            });
        }
        if executor.is_none() {
            self.err(PackDiagnostic::MissingClause {
                action: a.name.text.clone(),
                clause: "executor",
                span: a.name.span.into(),
                help: Some(format!(
                    "name what carries the action out: one of {}",
                    ir::EXECUTORS.join(", ")
                )),
            });
        }

        let params = self.params(a);
        let param_types: HashMap<&str, &ir::Type> =
            params.iter().map(|p| (p.name.as_str(), &p.ty)).collect();

        if let Some((n, _)) = &budget {
            match param_types.get(n.text.as_str()) {
                None => self.err(PackDiagnostic::UnknownName {
                    name: n.text.clone(),
                    action: a.name.text.clone(),
                    span: n.span.into(),
                    help: suggest(&n.text, param_types.keys().copied()),
                }),
                Some(t) if **t != ir::Type::Money => self.err(PackDiagnostic::BudgetNotMoney {
                    param: n.text.clone(),
                    ty: t.to_string(),
                    span: n.span.into(),
                }),
                _ => {}
            }
        }

        let (facts, rules) = self.facts_and_rules(a, &params);
        ir::Action {
            name: a.name.text.clone(),
            description: a
                .description
                .as_ref()
                .map(|d| d.value.clone())
                .unwrap_or_default(),
            scope: scope.map(|s| s.0).unwrap_or_default(),
            budget: budget.map(|b| b.0.text),
            executor: executor.map(|e| e.0).unwrap_or_default(),
            params,
            facts,
            rules,
            line: self.line(a.span.start),
        }
    }
}
