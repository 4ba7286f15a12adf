//! Parameters: types, trusted sources, normalisers, validators, defaults.
//!
//! The invariant enforced here: a critical parameter names at least one
//! trusted source, every source resolves and has the parameter's type, and a
//! lookup is keyed only by values that are themselves trusted (no cycles).

use super::Cx;
use crate::diagnostics::{PackDiagnostic, suggest};
use crate::ir::{
    self, Key, Lookup, NORMALIZERS, Normalizer, Param, Source, Type, VALIDATORS, Validator, Value,
};
use crate::syntax::ast::{self, LitKind, ParamOption, PathStep, Span};
use std::collections::{HashMap, HashSet};

/// A key reference found while resolving sources, for the trust and cycle
/// checks once all parameters are known.
struct KeyUse {
    from: String,
    key_param: String,
    span: Span,
}

impl Cx {
    pub(crate) fn params(&mut self, a: &ast::ActionDecl) -> Vec<Param> {
        let decls: Vec<&ast::ParamDecl> = a
            .clauses
            .iter()
            .filter_map(|c| match c {
                ast::ActionClause::Param(p) => Some(p),
                _ => None,
            })
            .collect();
        // types first: sources may be keyed by parameters declared later
        let mut types: HashMap<String, Type> = HashMap::new();
        let mut first_span: HashMap<String, Span> = HashMap::new();
        let mut unique = vec![];
        for d in &decls {
            if let Some(first) = first_span.get(&d.name.text) {
                let first = *first;
                self.duplicate("parameter", &d.name, first);
                continue;
            }
            first_span.insert(d.name.text.clone(), d.name.span);
            let ty = self.resolve_type(&d.ty);
            types.insert(d.name.text.clone(), ty.clone().unwrap_or(Type::Text));
            unique.push((*d, ty));
        }
        let critical: HashSet<String> = unique
            .iter()
            .filter(|(d, _)| {
                d.options.iter().any(
                    |o| matches!(o, ParamOption::Critical { sources, .. } if !sources.is_empty()),
                )
            })
            .map(|(d, _)| d.name.text.clone())
            .collect();

        let mut keys: Vec<KeyUse> = vec![];
        let mut out = vec![];
        for (d, ty) in unique {
            let p = self.param(a, d, ty, &types, &mut keys);
            out.push(p);
        }
        for k in &keys {
            if types.contains_key(&k.key_param) && !critical.contains(&k.key_param) {
                self.err(PackDiagnostic::UntrustedKey {
                    param: k.key_param.clone(),
                    span: k.span.into(),
                });
            }
        }
        self.lookup_cycles(&keys);
        out
    }

    fn param(
        &mut self,
        a: &ast::ActionDecl,
        d: &ast::ParamDecl,
        ty: Option<Type>,
        types: &HashMap<String, Type>,
        keys: &mut Vec<KeyUse>,
    ) -> Param {
        let known_ty = ty.is_some();
        let ty = ty.unwrap_or(Type::Text);
        let mut p = Param {
            name: d.name.text.clone(),
            ty: ty.clone(),
            critical: false,
            sources: vec![],
            normalize: None,
            validators: vec![],
            default: None,
            hint: None,
            secret: false,
            optional: false,
            fields: vec![],
            line: self.line(d.span.start),
        };
        let mut seen: HashSet<&'static str> = HashSet::new();
        let mut secret_span: Option<Span> = None;
        let mut default_span = None;
        for o in &d.options {
            let (opt, span) = match o {
                ParamOption::Critical { span, .. } => ("critical", *span),
                ParamOption::Normalize(n) => ("normalize", n.span),
                ParamOption::Default(l) => ("default", l.span),
                ParamOption::Hint(s) => ("hint", s.span),
                ParamOption::Secret(s) => ("secret", *s),
                ParamOption::Optional(s) => ("optional", *s),
                ParamOption::Validator(_) => ("", Span::default()),
            };
            if !opt.is_empty() && !seen.insert(opt) {
                self.err(PackDiagnostic::RepeatedOption {
                    param: d.name.text.clone(),
                    option: opt,
                    span: span.into(),
                });
                continue;
            }
            match o {
                ParamOption::Critical { span, .. } if known_ty && ty.is_record() => {
                    self.err(PackDiagnostic::CriticalRecord {
                        param: d.name.text.clone(),
                        span: (*span).into(),
                    });
                }
                ParamOption::Critical { sources, span } => {
                    p.critical = true;
                    if sources.is_empty() {
                        self.err(PackDiagnostic::CriticalWithoutSource {
                            param: d.name.text.clone(),
                            span: d.name.span.to(*span).into(),
                        });
                    }
                    for s in sources {
                        if let Some(src) = self.source(a, &p.name, &ty, known_ty, s, types, keys) {
                            p.sources.push(src);
                        }
                    }
                }
                ParamOption::Normalize(n) => {
                    if let Some(norm) = self.normalizer(n, &ty, known_ty) {
                        p.normalize = Some(norm);
                    }
                }
                ParamOption::Default(l) => {
                    default_span = Some(l.span);
                    match literal_value(&l.kind) {
                        Some(v) if !known_ty || value_fits(&v, &ty) => p.default = Some(v),
                        Some(v) => self.err(PackDiagnostic::DefaultType {
                            param: d.name.text.clone(),
                            expected: ty.to_string(),
                            found: value_kind(&v),
                            span: l.span.into(),
                        }),
                        None => {}
                    }
                }
                ParamOption::Hint(s) => p.hint = Some(s.value.clone()),
                ParamOption::Secret(s) => {
                    p.secret = true;
                    secret_span = Some(*s);
                }
                ParamOption::Optional(_) => p.optional = true,
                ParamOption::Validator(v) => {
                    if let Some(val) = self.validator(v, &ty, known_ty) {
                        p.validators.push(val);
                    }
                }
            }
        }
        if known_ty && ty.is_record() {
            p.fields = self.record_fields(a, d, &ty, types, keys);
        }
        if let Some(s) = secret_span {
            self.secret(d, &p, s);
        }
        // an empty collection vouches for nothing, so it may be the default
        // of a critical list (an absent `cc` is no recipient at all)
        let empty_collection = matches!(&p.default, Some(Value::List(v)) if v.is_empty());
        if p.critical
            && !empty_collection
            && let Some(s) = default_span
        {
            self.err(PackDiagnostic::CriticalDefault {
                param: d.name.text.clone(),
                span: s.into(),
            });
        }
        p
    }

    /// The normaliser `n` names, if there is one (else an error); an error
    /// too when it does not apply to the parameter's type.
    fn normalizer(&mut self, n: &ast::Name, ty: &Type, known_ty: bool) -> Option<Normalizer> {
        let Some((_, norm)) = NORMALIZERS.iter().find(|(s, _)| *s == n.text) else {
            self.err(PackDiagnostic::UnknownNormalizer {
                name: n.text.clone(),
                known: NORMALIZERS
                    .iter()
                    .map(|(s, _)| *s)
                    .collect::<Vec<_>>()
                    .join(", "),
                span: n.span.into(),
            });
            return None;
        };
        if known_ty && !norm.applies_to(ty) {
            self.err(PackDiagnostic::NormalizerType {
                name: n.text.clone(),
                ty: ty.to_string(),
                applies: norm.applies_to_text().into(),
                span: n.span.into(),
            });
        }
        Some(*norm)
    }

    /// A secret is a value the user gives (a new password), never one a
    /// source vouches for, and it is text the executor takes as it is.
    fn secret(&mut self, d: &ast::ParamDecl, p: &Param, span: Span) {
        let reason = if p.critical {
            Some(
                "a critical parameter's value comes from a trusted source; it is not a secret the user gives",
            )
        } else if !matches!(p.ty, Type::Text) {
            Some("only a `Text` parameter can be secret")
        } else {
            None
        };
        if let Some(reason) = reason {
            self.err(PackDiagnostic::InvalidSecret {
                param: d.name.text.clone(),
                reason,
                span: span.into(),
            });
        }
    }

    /// The fields of a record parameter (or of a list of records), each
    /// checked as a parameter is: its sources, normaliser, validators.
    fn record_fields(
        &mut self,
        a: &ast::ActionDecl,
        d: &ast::ParamDecl,
        ty: &Type,
        types: &HashMap<String, Type>,
        keys: &mut Vec<KeyUse>,
    ) -> Vec<Param> {
        let written = match &d.ty.kind {
            ast::TypeExprKind::Record(fs) => fs,
            ast::TypeExprKind::Generic(_, inner) => match &inner.kind {
                ast::TypeExprKind::Record(fs) => fs,
                _ => return vec![],
            },
            _ => return vec![],
        };
        let mut out = vec![];
        for ft in ty.record_fields() {
            let Some(f) = written.iter().find(|f| f.name.text == ft.name) else {
                continue;
            };
            let mut options = vec![];
            for o in &f.options {
                let refused = match o {
                    ParamOption::Default(l) => Some(("default", l.span)),
                    ParamOption::Secret(s) => Some(("secret", *s)),
                    _ => None,
                };
                match refused {
                    Some((option, span)) => self.err(PackDiagnostic::FieldOption {
                        field: format!("{}.{}", d.name.text, f.name.text),
                        option,
                        span: span.into(),
                    }),
                    None => options.push(o.clone()),
                }
            }
            // checked under its place's name (`entities.name`: what the
            // diagnostics say, and whose lookups the cycle check follows)
            let decl = ast::ParamDecl {
                name: ast::Name {
                    text: format!("{}.{}", d.name.text, f.name.text),
                    span: f.name.span,
                },
                ty: f.ty.clone(),
                options,
                span: f.span,
            };
            let mut field = self.param(a, &decl, Some(ft.ty.clone()), types, keys);
            field.name = ft.name.clone();
            out.push(field);
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn source(
        &mut self,
        a: &ast::ActionDecl,
        param: &str,
        ty: &Type,
        known_ty: bool,
        s: &ast::Path,
        types: &HashMap<String, Type>,
        keys: &mut Vec<KeyUse>,
    ) -> Option<Source> {
        let (src, src_ty, membership) = match s.head.text.as_str() {
            "mandate" => {
                let [PathStep::Field(c)] = s.steps.as_slice() else {
                    return self.invalid_source(s);
                };
                let claim_ty = self.claim_type(c)?;
                // a selection vouches for one of the keys it returns
                if let Type::Selection(r) = &claim_ty {
                    let key = match self.registries.get(r).map(|(reg, _)| &reg.shape) {
                        Some(ir::RegistryShape::Keyed { key, .. }) => key.clone(),
                        // reported where the claim is declared
                        _ => return None,
                    };
                    return self.source_gives(
                        Source::Claim {
                            claim: c.text.clone(),
                        },
                        key,
                        param,
                        ty,
                        known_ty,
                        s,
                    );
                }
                (
                    Source::Claim {
                        claim: c.text.clone(),
                    },
                    claim_ty.clone(),
                    claim_ty.is_collection(),
                )
            }
            "registry" => match s.steps.as_slice() {
                [PathStep::Field(r)] => {
                    let reg = self.registry_of(r)?;
                    (
                        Source::Registry {
                            registry: r.text.clone(),
                        },
                        reg.member_type().clone(),
                        false,
                    )
                }
                [PathStep::Field(_), PathStep::Index(..), PathStep::Field(_)] => {
                    let (l, fty) = self.source_lookup(a, param, s, types, keys)?;
                    let membership = fty.is_collection();
                    (Source::Lookup(l), fty, membership)
                }
                _ => return self.invalid_source(s),
            },
            _ => return self.invalid_source(s),
        };
        let gives = if membership {
            src_ty.element().clone()
        } else {
            src_ty.clone()
        };
        self.source_gives(src, gives, param, ty, known_ty, s)
    }

    /// `src`, which gives values of type `gives`, when that is the
    /// parameter's (element) type.
    fn source_gives(
        &mut self,
        src: Source,
        gives: Type,
        param: &str,
        ty: &Type,
        known_ty: bool,
        s: &ast::Path,
    ) -> Option<Source> {
        if known_ty && gives != *ty.element() {
            self.err(PackDiagnostic::SourceTypeMismatch {
                param: param.to_string(),
                expected: ty.element().to_string(),
                found: gives.to_string(),
                span: s.span.into(),
            });
            return None;
        }
        Some(src)
    }

    fn invalid_source<T>(&mut self, s: &ast::Path) -> Option<T> {
        self.err(PackDiagnostic::InvalidSource {
            text: path_text(s),
            span: s.span.into(),
        });
        None
    }

    pub(crate) fn claim_type(&mut self, c: &ast::Name) -> Option<Type> {
        match self.claims.get(&c.text) {
            Some((t, _)) => Some(t.clone()),
            None => {
                let help = suggest(&c.text, self.claims.keys().map(String::as_str));
                self.err(PackDiagnostic::UnknownClaim {
                    name: c.text.clone(),
                    span: c.span.into(),
                    help,
                });
                None
            }
        }
    }

    pub(crate) fn registry_of(&mut self, r: &ast::Name) -> Option<ir::Registry> {
        match self.registries.get(&r.text) {
            Some((reg, _)) => Some(reg.clone()),
            None => {
                let help = suggest(&r.text, self.registries.keys().map(String::as_str));
                self.err(PackDiagnostic::UnknownRegistry {
                    name: r.text.clone(),
                    span: r.span.into(),
                    help,
                });
                None
            }
        }
    }

    /// The field type of a keyed registry, with diagnostics.
    pub(crate) fn registry_field(&mut self, reg: &ir::Registry, field: &ast::Name) -> Option<Type> {
        match &reg.shape {
            ir::RegistryShape::Set { .. } => {
                self.err(PackDiagnostic::UnknownField {
                    registry: reg.name.clone(),
                    field: field.text.clone(),
                    span: field.span.into(),
                    help: Some(format!(
                        "`{}` is a set of values: use `registry.{}` for membership",
                        reg.name, reg.name
                    )),
                });
                None
            }
            ir::RegistryShape::Keyed { fields, .. } => match reg.field(&field.text) {
                Some(t) => Some(t.clone()),
                None => {
                    let help = suggest(&field.text, fields.iter().map(|f| f.name.as_str()))
                        .or_else(|| {
                            Some(format!(
                                "its fields: {}",
                                fields
                                    .iter()
                                    .map(|f| f.name.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ))
                        });
                    self.err(PackDiagnostic::UnknownField {
                        registry: reg.name.clone(),
                        field: field.text.clone(),
                        span: field.span.into(),
                        help,
                    });
                    None
                }
            },
        }
    }

    /// `registry.R[KEY].FIELD` as a source; KEY is a parameter, a claim or
    /// another such lookup.
    fn source_lookup(
        &mut self,
        a: &ast::ActionDecl,
        param: &str,
        s: &ast::Path,
        types: &HashMap<String, Type>,
        keys: &mut Vec<KeyUse>,
    ) -> Option<(Lookup, Type)> {
        let [
            PathStep::Field(r),
            PathStep::Index(key, _),
            PathStep::Field(f),
        ] = s.steps.as_slice()
        else {
            return self.invalid_source(s);
        };
        let reg = self.registry_of(r)?;
        let fty = self.registry_field(&reg, f);
        let (key_ir, key_ty) = match &key.kind {
            ast::ExprKind::Path(kp) if kp.head.text == "mandate" || kp.head.text == "registry" => {
                if kp.head.text == "mandate" {
                    let [PathStep::Field(c)] = kp.steps.as_slice() else {
                        return self.invalid_source(kp);
                    };
                    let t = self.claim_type(c)?;
                    (
                        Key::Claim {
                            claim: c.text.clone(),
                        },
                        t,
                    )
                } else {
                    let (inner, t) = self.source_lookup(a, param, kp, types, keys)?;
                    (
                        Key::Lookup {
                            lookup: Box::new(inner),
                        },
                        t,
                    )
                }
            }
            ast::ExprKind::Path(kp) if kp.steps.is_empty() => match types.get(&kp.head.text) {
                Some(t) => {
                    keys.push(KeyUse {
                        from: param.to_string(),
                        key_param: kp.head.text.clone(),
                        span: kp.span,
                    });
                    (
                        Key::Param {
                            param: kp.head.text.clone(),
                        },
                        t.clone(),
                    )
                }
                None => {
                    self.err(PackDiagnostic::UnknownName {
                        name: kp.head.text.clone(),
                        action: a.name.text.clone(),
                        span: kp.head.span.into(),
                        help: suggest(&kp.head.text, types.keys().map(String::as_str)),
                    });
                    return None;
                }
            },
            _ => {
                self.err(PackDiagnostic::InvalidSource {
                    text: "[...]".into(),
                    span: key.span.into(),
                });
                return None;
            }
        };
        if let ir::RegistryShape::Keyed { key: want, .. } = &reg.shape
            && *want != key_ty
        {
            self.err(PackDiagnostic::TypeMismatch {
                message: format!("`{}` is keyed by {want}, this key is {key_ty}", reg.name),
                span: key.span.into(),
                label: format!("{key_ty}"),
                help: None,
            });
            return None;
        }
        let fty = fty?;
        Some((
            Lookup {
                registry: r.text.clone(),
                key: key_ir,
                field: f.text.clone(),
            },
            fty,
        ))
    }

    /// Parameters whose lookups are keyed by each other, in a cycle.
    fn lookup_cycles(&mut self, keys: &[KeyUse]) {
        let mut graph: HashMap<&str, Vec<&KeyUse>> = HashMap::new();
        for k in keys {
            graph.entry(k.from.as_str()).or_default().push(k);
        }
        let mut reported: HashSet<String> = HashSet::new();
        let mut starts: Vec<&str> = graph.keys().copied().collect();
        starts.sort_unstable();
        for start in starts {
            // depth-first search for a path back to `start`
            let mut stack: Vec<(&str, Vec<&KeyUse>)> = vec![(start, vec![])];
            let mut visited: HashSet<&str> = HashSet::new();
            while let Some((node, path)) = stack.pop() {
                for k in graph.get(node).map(Vec::as_slice).unwrap_or(&[]) {
                    let mut p = path.clone();
                    p.push(k);
                    if k.key_param == start {
                        let mut names: Vec<String> = p.iter().map(|k| k.from.clone()).collect();
                        names.push(start.to_string());
                        let mut canon = names.clone();
                        canon.sort();
                        canon.dedup();
                        if reported.insert(canon.join(",")) {
                            self.err(PackDiagnostic::LookupCycle {
                                cycle: names
                                    .iter()
                                    .map(|n| format!("`{n}`"))
                                    .collect::<Vec<_>>()
                                    .join(" -> "),
                                span: k.span.into(),
                            });
                        }
                    } else if visited.insert(k.key_param.as_str()) {
                        stack.push((k.key_param.as_str(), p));
                    }
                }
            }
        }
    }

    fn validator(
        &mut self,
        v: &ast::ValidatorDecl,
        ty: &Type,
        known_ty: bool,
    ) -> Option<Validator> {
        let name = v.name.text.as_str();
        if !VALIDATORS.contains(&name) {
            let mut known = VALIDATORS.join(", ");
            if let Some(s) = suggest(name, VALIDATORS.iter().copied()) {
                known = format!("{known} ({s})");
            }
            self.err(PackDiagnostic::UnknownValidator {
                name: name.to_string(),
                known,
                span: v.name.span.into(),
            });
            return None;
        }
        let (fits, applies) = match name {
            "range" => (
                matches!(ty, Type::Int | Type::Money | Type::Duration),
                "Int, Money and Duration",
            ),
            "min_len" | "max_len" | "pattern" => (
                ty.is_stringy() && !matches!(ty, Type::Enum(_)),
                "text types",
            ),
            "min_items" | "max_items" => (ty.is_collection(), "list<T> and set<T>"),
            _ => (
                (ty.is_stringy() && !matches!(ty, Type::Enum(_))) || ty.is_collection(),
                "text types and collections",
            ),
        };
        if known_ty && !fits {
            self.err(PackDiagnostic::ValidatorType {
                name: name.to_string(),
                ty: ty.to_string(),
                applies: applies.into(),
                span: v.name.span.into(),
            });
            return None;
        }
        let bad = |cx: &mut Cx, reason: &str, help: Option<String>| {
            cx.err(PackDiagnostic::ValidatorArgs {
                name: name.to_string(),
                reason: reason.to_string(),
                span: v.span.into(),
                help,
            });
            None
        };
        let count = |args: &[ast::Literal]| match args {
            [
                ast::Literal {
                    kind: LitKind::Int(n),
                    ..
                },
            ] if *n >= 0 => Some(*n as u64),
            _ => None,
        };
        match name {
            "range" => {
                let bound = |l: &ast::Literal| match (&l.kind, ty) {
                    (LitKind::Money(m), Type::Money) => Some(*m),
                    (LitKind::Int(i), Type::Int) => Some(*i),
                    (LitKind::Duration(d), Type::Duration) => Some(*d),
                    _ => None,
                };
                match (v.is_range, v.args.as_slice()) {
                    (true, [lo, hi]) => match (bound(lo), bound(hi)) {
                        (Some(min), Some(max)) if min <= max => Some(Validator::Range { min, max }),
                        (Some(_), Some(_)) => bad(self, "the lower bound is above the upper", None),
                        _ => bad(
                            self,
                            &format!("bounds must be {ty} literals"),
                            (*ty == Type::Money).then(|| {
                                "amounts are written with two decimals: `0.01 .. 10_000.00`".into()
                            }),
                        ),
                    },
                    _ => bad(self, "expects `range MIN .. MAX`", None),
                }
            }
            "min_len" | "max_len" => match count(&v.args) {
                Some(len) if name == "min_len" => Some(Validator::MinLen { len }),
                Some(len) => Some(Validator::MaxLen { len }),
                None => bad(self, "expects one whole number", None),
            },
            "min_items" | "max_items" => match count(&v.args) {
                Some(c) if name == "min_items" => Some(Validator::MinItems { count: c }),
                Some(c) => Some(Validator::MaxItems { count: c }),
                None => bad(self, "expects one whole number", None),
            },
            "pattern" => match v.args.as_slice() {
                [
                    ast::Literal {
                        kind: LitKind::Str(re),
                        ..
                    },
                ] => match regex::Regex::new(&format!("^(?:{re})$")) {
                    Ok(_) => Some(Validator::Pattern { regex: re.clone() }),
                    Err(e) => {
                        let msg = e.to_string();
                        let last = msg.lines().last().unwrap_or("invalid").to_lowercase();
                        bad(self, &format!("invalid regular expression: {last}"), None)
                    }
                },
                _ => bad(self, "expects one quoted regular expression", None),
            },
            _ => {
                if v.args.is_empty() {
                    Some(Validator::NonEmpty)
                } else {
                    bad(self, "takes no argument", None)
                }
            }
        }
    }
}

pub(crate) fn path_text(p: &ast::Path) -> String {
    let mut s = p.head.text.clone();
    for st in &p.steps {
        match st {
            PathStep::Field(n) => {
                s.push('.');
                s.push_str(&n.text);
            }
            PathStep::Index(..) => s.push_str("[...]"),
        }
    }
    s
}

pub(crate) fn literal_value(l: &LitKind) -> Option<Value> {
    Some(match l {
        LitKind::Int(i) => Value::Int(*i),
        LitKind::Money(m) => Value::Money(*m),
        LitKind::Str(s) => Value::Str(s.clone()),
        LitKind::Bool(b) => Value::Bool(*b),
        LitKind::Duration(d) => Value::Duration(*d),
        LitKind::List(items) => Value::List(
            items
                .iter()
                .map(|i| literal_value(&i.kind))
                .collect::<Option<_>>()?,
        ),
    })
}

fn value_kind(v: &Value) -> String {
    match v {
        Value::Int(_) => "Int".into(),
        Value::Money(_) => "Money".into(),
        Value::Str(_) => "a string".into(),
        Value::Bool(_) => "Bool".into(),
        Value::Duration(_) => "Duration".into(),
        Value::List(_) => "a list".into(),
    }
}

/// Whether a literal value can stand for a value of this type.
pub(crate) fn value_fits(v: &Value, ty: &Type) -> bool {
    match (v, ty) {
        (Value::Int(_), Type::Int | Type::Date | Type::Timestamp) => true,
        (Value::Money(_), Type::Money) => true,
        (Value::Bool(_), Type::Bool) => true,
        (Value::Duration(_), Type::Duration) => true,
        (Value::Str(s), Type::Enum(vs)) => vs.contains(s),
        (Value::Str(_), t) => t.is_stringy(),
        (Value::List(items), Type::List(t) | Type::Set(t)) => {
            items.iter().all(|i| value_fits(i, t))
        }
        _ => false,
    }
}
