//! Type expressions (`Iban`, `set<Email>`, `enum(open, paid)`) to IR types.

use super::Cx;
use crate::diagnostics::{PackDiagnostic, suggest};
use crate::ir::{FieldType, SCALAR_TYPES, Type};
use crate::syntax::ast::{ParamOption, TypeExpr, TypeExprKind};
use std::collections::HashMap;

impl Cx {
    /// Resolves a written type; `None` (with a diagnostic) when it is wrong.
    pub(crate) fn resolve_type(&mut self, t: &TypeExpr) -> Option<Type> {
        match &t.kind {
            TypeExprKind::Named(n) => {
                if let Some((_, ty)) = SCALAR_TYPES.iter().find(|(s, _)| *s == n.text) {
                    return Some(ty.clone());
                }
                self.unknown_type(&n.text, t);
                None
            }
            TypeExprKind::Generic(g, arg) => {
                let inner = self.resolve_type(arg)?;
                if inner.is_collection() {
                    self.err(PackDiagnostic::TypeMismatch {
                        message: format!("a collection holds single values, not {inner}"),
                        span: arg.span.into(),
                        label: "nested collection".into(),
                        help: None,
                    });
                    return None;
                }
                match g.text.as_str() {
                    "set" => Some(Type::Set(Box::new(inner))),
                    "list" => Some(Type::List(Box::new(inner))),
                    other => {
                        self.unknown_type(&format!("{other}<...>"), t);
                        None
                    }
                }
            }
            TypeExprKind::Selection(_) => {
                self.err(PackDiagnostic::SelectionNotHere {
                    span: t.span.into(),
                });
                None
            }
            TypeExprKind::Enum(vs) => {
                let mut seen = HashMap::new();
                let mut out = vec![];
                for v in vs {
                    if let Some(first) = seen.get(&v.text) {
                        let first = *first;
                        self.duplicate("enum variant", v, first);
                        continue;
                    }
                    seen.insert(v.text.clone(), v.span);
                    out.push(v.text.clone());
                }
                Some(Type::Enum(out))
            }
            TypeExprKind::Record(fields) => {
                if fields.is_empty() {
                    self.err(PackDiagnostic::TypeMismatch {
                        message: "a record has at least one field".into(),
                        span: t.span.into(),
                        label: "no fields".into(),
                        help: None,
                    });
                    return None;
                }
                let mut seen = HashMap::new();
                let mut out = vec![];
                let mut ok = true;
                for f in fields {
                    if let Some(first) = seen.get(&f.name.text) {
                        let first = *first;
                        self.duplicate("record field", &f.name, first);
                        ok = false;
                        continue;
                    }
                    seen.insert(f.name.text.clone(), f.name.span);
                    let Some(ty) = self.resolve_type(&f.ty) else {
                        ok = false;
                        continue;
                    };
                    let optional = f
                        .options
                        .iter()
                        .any(|o| matches!(o, ParamOption::Optional(_)));
                    out.push(FieldType {
                        name: f.name.text.clone(),
                        ty,
                        optional,
                    });
                }
                ok.then_some(Type::Record(out))
            }
        }
    }

    /// A type for a single value (a claim, a registry's values, keys and
    /// fields, a guarantee's parameter): a record is refused there.
    pub(crate) fn resolve_value_type(&mut self, t: &TypeExpr, what: &'static str) -> Option<Type> {
        let ty = self.resolve_type(t)?;
        if ty.is_record() {
            self.err(PackDiagnostic::RecordNotHere {
                what,
                span: t.span.into(),
            });
            return None;
        }
        Some(ty)
    }

    fn unknown_type(&mut self, name: &str, t: &TypeExpr) {
        let names: Vec<&str> = SCALAR_TYPES.iter().map(|(n, _)| *n).collect();
        let mut known = names.join(", ");
        if let Some(s) = suggest(name, names.iter().copied()) {
            known = format!("{known} ({s})");
        }
        self.err(PackDiagnostic::UnknownType {
            name: name.to_string(),
            known,
            span: t.span.into(),
        });
    }
}
