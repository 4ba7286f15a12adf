//! Facts and rule conditions: name resolution and typing.
//!
//! Facts are computed by the gateway and may read the mandate and the
//! registries; rules become Cedar and see only parameters, facts, `now` and
//! literals. Money never compares with a bare integer: `amount > 1000` is an
//! error (is it 1000 cents or 1000.00?), `amount > 1_000.00` is not.

use super::Cx;
use super::params::literal_value;
use crate::diagnostics::{PackDiagnostic, suggest};
use crate::ir::{self, BinOp, Expr, Type, Value};
use crate::syntax::ast::{self, ExprKind, LitKind, PathStep};
use std::collections::HashMap;

/// The type of an expression while checking: a string literal fits any
/// text type (and is checked against enums), an empty list fits any list.
#[derive(Clone, Debug, PartialEq)]
enum Ty {
    T(Type),
    StrLit(String),
    EmptyList,
    /// A whole registry (only valid on the right of `in`); its member type.
    Registry(Type),
    /// Already reported; suppresses follow-on errors.
    Err,
}

impl Ty {
    fn describe(&self) -> String {
        match self {
            Ty::T(t) => t.to_string(),
            Ty::StrLit(_) => "a string".into(),
            Ty::EmptyList => "an empty list".into(),
            Ty::Registry(t) => format!("a registry of {t}"),
            Ty::Err => "?".into(),
        }
    }
}

struct Scope<'a> {
    action: &'a str,
    params: HashMap<&'a str, &'a Type>,
    /// Secret parameters: no rule or fact reads them.
    secrets: Vec<&'a str>,
    /// Optional parameters: no rule or fact reads them either.
    optionals: Vec<&'a str>,
    facts: HashMap<String, Type>,
    /// Facts declared later in the action (for a better message).
    later_facts: Vec<String>,
    in_rule: bool,
}

impl Cx {
    /// A guarantee's condition in one action it covers: typed as a fact is
    /// (it may read parameters, facts, the mandate and the registries; the
    /// guarantee's checker turns each read of the latter into a fact the
    /// gateway computes), and Bool.
    pub(super) fn guarantee_condition(&mut self, e: &ast::Expr, a: &ir::Action) -> Expr {
        let scope = Scope {
            action: &a.name,
            params: a.params.iter().map(|p| (p.name.as_str(), &p.ty)).collect(),
            secrets: a
                .params
                .iter()
                .filter(|p| p.secret)
                .map(|p| p.name.as_str())
                .collect(),
            optionals: a
                .params
                .iter()
                .filter(|p| p.optional)
                .map(|p| p.name.as_str())
                .collect(),
            facts: a
                .facts
                .iter()
                .map(|f| (f.name.clone(), f.ty.clone()))
                .collect(),
            later_facts: vec![],
            in_rule: false,
        };
        let (x, ty) = self.expr(e, &scope);
        if !matches!(ty, Ty::T(Type::Bool) | Ty::Err) {
            self.err(PackDiagnostic::ConditionNotBool {
                found: ty.describe(),
                span: e.span.into(),
            });
        }
        x
    }

    pub(crate) fn facts_and_rules(
        &mut self,
        a: &ast::ActionDecl,
        params: &[ir::Param],
    ) -> (Vec<ir::Fact>, Vec<ir::Rule>) {
        let fact_decls: Vec<&ast::FactDecl> = a
            .clauses
            .iter()
            .filter_map(|c| match c {
                ast::ActionClause::Fact(f) => Some(f),
                _ => None,
            })
            .collect();
        let mut scope = Scope {
            action: &a.name.text,
            params: params.iter().map(|p| (p.name.as_str(), &p.ty)).collect(),
            secrets: params
                .iter()
                .filter(|p| p.secret)
                .map(|p| p.name.as_str())
                .collect(),
            optionals: params
                .iter()
                .filter(|p| p.optional)
                .map(|p| p.name.as_str())
                .collect(),
            facts: HashMap::new(),
            later_facts: fact_decls.iter().map(|f| f.name.text.clone()).collect(),
            in_rule: false,
        };
        let mut facts = vec![];
        let mut fact_spans: HashMap<String, ast::Span> = HashMap::new();
        for f in &fact_decls {
            scope.later_facts.retain(|n| *n != f.name.text);
            if let Some(first) = fact_spans.get(&f.name.text) {
                let first = *first;
                self.duplicate("fact", &f.name, first);
                continue;
            }
            if params.iter().any(|p| p.name == f.name.text) {
                let first = a
                    .clauses
                    .iter()
                    .find_map(|c| match c {
                        ast::ActionClause::Param(pd) if pd.name.text == f.name.text => {
                            Some(pd.name.span)
                        }
                        _ => None,
                    })
                    .unwrap_or_default();
                self.duplicate("name (parameter and fact)", &f.name, first);
                continue;
            }
            fact_spans.insert(f.name.text.clone(), f.name.span);
            let (e, ty) = self.expr(&f.expr, &scope);
            let ty = match ty {
                Ty::T(t) => t,
                Ty::StrLit(_) => Type::Text,
                Ty::Err => Type::Bool,
                other => {
                    self.err(PackDiagnostic::TypeMismatch {
                        message: format!("a fact is a value, not {}", other.describe()),
                        span: f.expr.span.into(),
                        label: other.describe(),
                        help: Some("test membership with `VALUE in registry.NAME`".into()),
                    });
                    Type::Bool
                }
            };
            scope.facts.insert(f.name.text.clone(), ty.clone());
            facts.push(ir::Fact {
                name: f.name.text.clone(),
                ty,
                expr: e,
                line: self.line(f.span.start),
            });
        }
        scope.in_rule = true;
        let mut rules = vec![];
        for c in &a.clauses {
            let ast::ActionClause::Rule(r) = c else {
                continue;
            };
            let when = r.when.as_ref().map(|w| {
                let (e, ty) = self.expr(w, &scope);
                if !matches!(ty, Ty::T(Type::Bool) | Ty::Err) {
                    self.err(PackDiagnostic::ConditionNotBool {
                        found: ty.describe(),
                        span: w.span.into(),
                    });
                }
                e
            });
            if let Some(role) = &r.role
                && r.kind != ir::RuleKind::FourEyes
            {
                self.err(PackDiagnostic::RoleNotFourEyes {
                    kind: r.kind.keyword(),
                    span: role.span.into(),
                });
            }
            rules.push(ir::Rule {
                kind: r.kind,
                reason: r.reason.value.clone(),
                when,
                hint: r.hint.as_ref().map(|h| h.value.clone()),
                role: r.role.as_ref().map(|x| x.value.clone()),
                line: self.line(r.span.start),
            });
        }
        (facts, rules)
    }

    fn expr(&mut self, e: &ast::Expr, s: &Scope<'_>) -> (Expr, Ty) {
        match &e.kind {
            ExprKind::Lit(l) => {
                let ty = match l {
                    ast::LitKind::Int(_) => Ty::T(Type::Int),
                    ast::LitKind::Money(_) => Ty::T(Type::Money),
                    ast::LitKind::Str(v) => Ty::StrLit(v.clone()),
                    ast::LitKind::Bool(_) => Ty::T(Type::Bool),
                    ast::LitKind::Duration(_) => Ty::T(Type::Duration),
                    ast::LitKind::List(_) => Ty::EmptyList,
                };
                let value = literal_value(l).unwrap_or(Value::Bool(false));
                (Expr::Lit { value }, ty)
            }
            ExprKind::Now => (Expr::Now, Ty::T(Type::Timestamp)),
            ExprKind::List(items) => {
                let mut out = vec![];
                let mut elem: Option<Ty> = None;
                for it in items {
                    let (x, t) = self.expr(it, s);
                    out.push(x);
                    elem = match (elem, t) {
                        (None, t) => Some(t),
                        (Some(Ty::Err), _) | (_, Ty::Err) => Some(Ty::Err),
                        (Some(a), b) => match unify(&a, &b) {
                            Some(u) => Some(u),
                            None => {
                                self.err(PackDiagnostic::TypeMismatch {
                                    message: format!(
                                        "a list mixes {} and {}",
                                        a.describe(),
                                        b.describe()
                                    ),
                                    span: it.span.into(),
                                    label: b.describe(),
                                    help: None,
                                });
                                Some(Ty::Err)
                            }
                        },
                    };
                }
                let ty = match elem {
                    None => Ty::EmptyList,
                    Some(Ty::Err) => Ty::Err,
                    Some(Ty::T(t)) => Ty::T(Type::List(Box::new(t))),
                    Some(Ty::StrLit(_)) => Ty::T(Type::List(Box::new(Type::Text))),
                    Some(_) => Ty::Err,
                };
                (Expr::List { items: out }, ty)
            }
            ExprKind::Path(p) => self.path_expr(p, s),
            ExprKind::Not(inner) => {
                let (x, t) = self.expr(inner, s);
                self.want_bool(&t, inner, "`not`");
                (Expr::Not { expr: Box::new(x) }, Ty::T(Type::Bool))
            }
            ExprKind::Binary(op, l, r) => {
                let (lx, lt) = self.expr(l, s);
                let (rx, rt) = self.expr(r, s);
                let ty = self.binary(*op, e, (&lt, l), (&rt, r));
                (
                    Expr::Binary {
                        op: *op,
                        lhs: Box::new(lx),
                        rhs: Box::new(rx),
                    },
                    ty,
                )
            }
        }
    }

    fn want_bool(&mut self, t: &Ty, e: &ast::Expr, what: &str) {
        if !matches!(t, Ty::T(Type::Bool) | Ty::Err) {
            self.err(PackDiagnostic::TypeMismatch {
                message: format!("{what} needs Bool, found {}", t.describe()),
                span: e.span.into(),
                label: t.describe(),
                help: None,
            });
        }
    }

    fn binary(
        &mut self,
        op: BinOp,
        whole: &ast::Expr,
        (lt, l): (&Ty, &ast::Expr),
        (rt, r): (&Ty, &ast::Expr),
    ) -> Ty {
        if matches!(lt, Ty::Err) || matches!(rt, Ty::Err) {
            return match op {
                BinOp::Add | BinOp::Sub => Ty::Err,
                _ => Ty::T(Type::Bool),
            };
        }
        let mismatch = |cx: &mut Cx, help: Option<String>| {
            cx.err(PackDiagnostic::TypeMismatch {
                message: format!(
                    "cannot apply `{}` to {} and {}",
                    op.symbol(),
                    lt.describe(),
                    rt.describe()
                ),
                span: whole.span.into(),
                label: format!("{} {} {}", lt.describe(), op.symbol(), rt.describe()),
                help,
            });
        };
        // Money against Int: which side is the mistake. An amount written
        // without decimals (`amount > 1000`) is the common one; an amount
        // literal against a value that is a whole number (`count > 1000.00`,
        // `a: Int`) is the opposite one, and its help says so
        let money_help = || {
            let money_literal = |e: &ast::Expr| matches!(e.kind, ExprKind::Lit(LitKind::Money(_)));
            match (lt, rt) {
                (Ty::T(Type::Int), Ty::T(Type::Money)) if money_literal(r) => Some(
                    "the left side is a whole number (`Int`), not an amount: compare it with a whole number (`1000`), or declare it `Money`".to_string(),
                ),
                (Ty::T(Type::Money), Ty::T(Type::Int)) if money_literal(l) => Some(
                    "the right side is a whole number (`Int`), not an amount: compare it with a whole number (`1000`), or declare it `Money`".to_string(),
                ),
                (Ty::T(Type::Money), Ty::T(Type::Int)) | (Ty::T(Type::Int), Ty::T(Type::Money)) => {
                    Some("amounts are written with two decimals: `1_000.00`".to_string())
                }
                _ => None,
            }
        };
        match op {
            BinOp::And | BinOp::Or => {
                self.want_bool(lt, l, &format!("`{}`", op.symbol()));
                self.want_bool(rt, r, &format!("`{}`", op.symbol()));
                Ty::T(Type::Bool)
            }
            BinOp::Eq | BinOp::Ne => {
                if self.enum_variant_check(lt, rt, l, r).is_none() && unify(lt, rt).is_none() {
                    mismatch(self, money_help());
                }
                Ty::T(Type::Bool)
            }
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => {
                let ok = match (lt, rt) {
                    (Ty::T(a), Ty::T(b)) => {
                        a.is_numeric() && (a == b || (a.is_time() && b.is_time()))
                    }
                    _ => false,
                };
                if !ok {
                    mismatch(self, money_help());
                }
                Ty::T(Type::Bool)
            }
            BinOp::In => {
                let elem = match rt {
                    Ty::T(Type::List(t) | Type::Set(t)) => Some(Ty::T((**t).clone())),
                    Ty::Registry(t) => Some(Ty::T(t.clone())),
                    Ty::EmptyList => Some(lt.clone()),
                    _ => None,
                };
                // an `Id` (an account as a bank writes it: an IBAN, another
                // bank's number, a name) may be looked up in a registry of a
                // type with a canonical spelling (IBAN, e-mail, phone): the
                // gateway compares it in that spelling when it has one
                let id_in_typed = matches!(lt, Ty::T(Type::Id))
                    && matches!(rt, Ty::Registry(t) if t.canonical_normalizer().is_some());
                match elem {
                    Some(_) if id_in_typed => {}
                    Some(el) => {
                        if self.enum_variant_check(lt, &el, l, r).is_none()
                            && unify(lt, &el).is_none()
                        {
                            mismatch(self, None);
                        }
                    }
                    None => mismatch(
                        self,
                        Some("the right side of `in` is a list, a set or a registry".into()),
                    ),
                }
                Ty::T(Type::Bool)
            }
            BinOp::Add | BinOp::Sub => {
                let (Ty::T(a), Ty::T(b)) = (lt, rt) else {
                    mismatch(self, None);
                    return Ty::Err;
                };
                let out = match (op, a, b) {
                    (_, Type::Int, Type::Int) => Some(Type::Int),
                    (_, Type::Money, Type::Money) => Some(Type::Money),
                    (_, Type::Duration, Type::Duration) => Some(Type::Duration),
                    (_, t, Type::Duration) if t.is_time() => Some(Type::Timestamp),
                    (BinOp::Add, Type::Duration, t) if t.is_time() => Some(Type::Timestamp),
                    (BinOp::Sub, x, y) if x.is_time() && y.is_time() => Some(Type::Duration),
                    _ => None,
                };
                match out {
                    Some(t) => Ty::T(t),
                    None => {
                        mismatch(self, money_help());
                        Ty::Err
                    }
                }
            }
        }
    }

    /// A string literal compared with an enum must be one of its variants.
    /// `Some(())` when it reported (or checked) the pair.
    fn enum_variant_check(&mut self, a: &Ty, b: &Ty, ae: &ast::Expr, be: &ast::Expr) -> Option<()> {
        let (vs, lit, span) = match (a, b) {
            (Ty::T(Type::Enum(vs)), Ty::StrLit(s)) => (vs, s, be.span),
            (Ty::StrLit(s), Ty::T(Type::Enum(vs))) => (vs, s, ae.span),
            _ => return None,
        };
        if !vs.contains(lit) {
            self.err(PackDiagnostic::UnknownVariant {
                value: lit.clone(),
                ty: Type::Enum(vs.clone()).to_string(),
                span: span.into(),
            });
        }
        Some(())
    }

    fn path_expr(&mut self, p: &ast::Path, s: &Scope<'_>) -> (Expr, Ty) {
        let root = p.head.text.as_str();
        if (root == "mandate" || root == "registry") && s.in_rule {
            self.err(PackDiagnostic::RuleReadsStore {
                root: root.into(),
                span: p.span.into(),
            });
            return (
                Expr::Lit {
                    value: Value::Bool(false),
                },
                Ty::Err,
            );
        }
        let fail = (
            Expr::Lit {
                value: Value::Bool(false),
            },
            Ty::Err,
        );
        match root {
            "mandate" => {
                let [PathStep::Field(c)] = p.steps.as_slice() else {
                    self.bad_path(p, "a mandate claim is read as `mandate.CLAIM`");
                    return fail;
                };
                match self.claim_type(c) {
                    // the keys it returns, as the gateway evaluates it
                    Some(Type::Selection(r)) => match self.registries.get(&r) {
                        Some((reg, _)) => {
                            let key = reg.member_type().clone();
                            (
                                Expr::Selection {
                                    claim: c.text.clone(),
                                    registry: r,
                                },
                                Ty::Registry(key),
                            )
                        }
                        None => fail,
                    },
                    Some(t) => (
                        Expr::Claim {
                            name: c.text.clone(),
                        },
                        Ty::T(t),
                    ),
                    None => fail,
                }
            }
            "registry" => match p.steps.as_slice() {
                [PathStep::Field(r)] => match self.registry_of(r) {
                    Some(reg) => (
                        Expr::Registry {
                            name: r.text.clone(),
                        },
                        Ty::Registry(reg.member_type().clone()),
                    ),
                    None => fail,
                },
                [
                    PathStep::Field(r),
                    PathStep::Index(key, _),
                    PathStep::Field(f),
                ] => {
                    let Some(reg) = self.registry_of(r) else {
                        return fail;
                    };
                    let fty = self.registry_field(&reg, f);
                    let (kx, kt) = self.expr(key, s);
                    if let ir::RegistryShape::Keyed { key: want, .. } = &reg.shape
                        && !matches!(kt, Ty::Err)
                        && unify(&kt, &Ty::T(want.clone())).is_none()
                    {
                        self.err(PackDiagnostic::TypeMismatch {
                            message: format!(
                                "`{}` is keyed by {want}, this key is {}",
                                reg.name,
                                kt.describe()
                            ),
                            span: key.span.into(),
                            label: kt.describe(),
                            help: None,
                        });
                    }
                    match fty {
                        Some(t) => (
                            Expr::Lookup {
                                registry: r.text.clone(),
                                key: Box::new(kx),
                                field: f.text.clone(),
                            },
                            Ty::T(t),
                        ),
                        None => fail,
                    }
                }
                _ => {
                    self.bad_path(
                        p,
                        "a registry is read as `registry.NAME` or `registry.NAME[KEY].FIELD`",
                    );
                    fail
                }
            },
            name => {
                if !p.steps.is_empty() {
                    self.bad_path(p, "parameters and facts have no fields");
                    return fail;
                }
                if let Some(t) = s.params.get(name) {
                    if s.secrets.contains(&name) {
                        self.err(PackDiagnostic::SecretRead {
                            param: name.to_string(),
                            span: p.span.into(),
                        });
                        return fail;
                    }
                    if s.optionals.contains(&name) {
                        self.err(PackDiagnostic::OptionalRead {
                            param: name.to_string(),
                            span: p.span.into(),
                        });
                        return fail;
                    }
                    return (Expr::Param { name: name.into() }, Ty::T((*t).clone()));
                }
                if let Some(t) = s.facts.get(name) {
                    return (Expr::Fact { name: name.into() }, Ty::T(t.clone()));
                }
                let help = if s.later_facts.iter().any(|f| f == name) {
                    Some(format!(
                        "facts are computed in order: declare `{name}` before the fact that uses it"
                    ))
                } else {
                    suggest(
                        name,
                        s.params
                            .keys()
                            .copied()
                            .chain(s.facts.keys().map(String::as_str)),
                    )
                };
                self.err(PackDiagnostic::UnknownName {
                    name: name.into(),
                    action: s.action.into(),
                    span: p.head.span.into(),
                    help,
                });
                fail
            }
        }
    }

    fn bad_path(&mut self, p: &ast::Path, help: &str) {
        self.err(PackDiagnostic::TypeMismatch {
            message: format!("`{}` cannot be read this way", super::params::path_text(p)),
            span: p.span.into(),
            label: "invalid path".into(),
            help: Some(help.into()),
        });
    }
}

/// The common type of two operands of `==`, or `None` when they never compare.
fn unify(a: &Ty, b: &Ty) -> Option<Ty> {
    match (a, b) {
        (Ty::T(x), Ty::T(y)) if x == y => Some(a.clone()),
        (Ty::T(x), Ty::T(y)) if x.is_time() && y.is_time() => Some(Ty::T(Type::Timestamp)),
        (Ty::T(x), Ty::StrLit(_)) | (Ty::StrLit(_), Ty::T(x)) if x.is_stringy() => {
            Some(Ty::T(x.clone()))
        }
        (Ty::StrLit(_), Ty::StrLit(_)) => Some(Ty::T(Type::Text)),
        (Ty::T(x), Ty::EmptyList) | (Ty::EmptyList, Ty::T(x)) if x.is_collection() => {
            Some(Ty::T(x.clone()))
        }
        (Ty::T(Type::List(x)), Ty::T(Type::Set(y)))
        | (Ty::T(Type::Set(x)), Ty::T(Type::List(y)))
            if x == y =>
        {
            Some(Ty::T(Type::Set(x.clone())))
        }
        _ => None,
    }
}
