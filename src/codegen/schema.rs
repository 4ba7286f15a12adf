//! The Cedar schema: one namespace per pack, `User` (principal) and
//! `Tenant` (resource: the mandate's owner), one action per pack action
//! whose context holds its parameters, its facts, the provenance of each
//! critical value, the approval level and the time.

use super::names::{cedar_string, comment_text, schema_attr};
use super::{CTX_APPROVAL_LEVEL, CTX_NOW, CTX_PROVENANCE, PRINCIPAL_TYPE, RESOURCE_TYPE};
use crate::ir::{self, Type};
use std::fmt::Write;

/// The Cedar type of a value of this IR type.
pub fn cedar_type(t: &Type) -> String {
    match t {
        Type::Bool => "Bool".into(),
        Type::List(e) | Type::Set(e) => format!("Set<{}>", cedar_type(e)),
        // a record is a Cedar record, a list of records a set of them
        Type::Record(fs) => {
            let attrs: Vec<String> = fs
                .iter()
                .map(|f| {
                    let q = if f.optional { "?" } else { "" };
                    format!("{}{q}: {}", schema_attr(&f.name), cedar_type(&f.ty))
                })
                .collect();
            format!("{{ {} }}", attrs.join(", "))
        }
        t if t.is_numeric() => "Long".into(),
        _ => "String".into(),
    }
}

/// The context record of an action, attribute by attribute, in order:
/// parameters, facts, then `provenance` (when a parameter is critical),
/// `approval_level` and `now`. Types are Cedar schema types.
pub fn context_attributes(a: &ir::Action) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vec![];
    for p in &a.params {
        out.push((p.name.clone(), cedar_type(&p.ty)));
    }
    for f in &a.facts {
        out.push((f.name.clone(), cedar_type(&f.ty)));
    }
    // a record with critical fields has one origin too: those of its fields
    let critical: Vec<&ir::Param> = a.params.iter().filter(|p| p.vouched()).collect();
    if !critical.is_empty() {
        let mut rec = String::from("{\n");
        for p in critical {
            let q = if p.optional { "?" } else { "" };
            let _ = writeln!(rec, "        {}{q}: String,", schema_attr(&p.name));
        }
        rec.push_str("      }");
        out.push((CTX_PROVENANCE.into(), rec));
    }
    out.push((CTX_APPROVAL_LEVEL.into(), "Long".into()));
    out.push((CTX_NOW.into(), "Long".into()));
    out
}

/// Appends one pack's namespace to the schema text.
pub(crate) fn write_namespace(p: &ir::Pack, file_label: &str, out: &mut String) {
    let _ = writeln!(out, "// pack {} {}", p.name, comment_text(&p.version));
    let _ = writeln!(out, "namespace {} {{", p.name);
    let _ = writeln!(out, "  entity {PRINCIPAL_TYPE};");
    let _ = writeln!(out, "  entity {RESOURCE_TYPE};");
    for a in &p.actions {
        out.push('\n');
        let desc = if a.description.is_empty() {
            String::new()
        } else {
            format!("{} ", comment_text(&a.description))
        };
        let _ = writeln!(out, "  // {desc}({file_label}:{})", a.line);
        let _ = writeln!(out, "  action {} appliesTo {{", cedar_string(&a.name));
        let _ = writeln!(out, "    principal: [{PRINCIPAL_TYPE}],");
        let _ = writeln!(out, "    resource: [{RESOURCE_TYPE}],");
        let _ = writeln!(out, "    context: {{");
        for (name, ty) in context_attributes(a) {
            // an optional parameter may be absent from the context
            let q = if a.params.iter().any(|p| p.optional && p.name == name) {
                "?"
            } else {
                ""
            };
            let _ = writeln!(out, "      {}{q}: {ty},", schema_attr(&name));
        }
        let _ = writeln!(out, "    }},");
        let _ = writeln!(out, "  }};");
    }
    let _ = writeln!(out, "}}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types() {
        assert_eq!(cedar_type(&Type::Money), "Long");
        assert_eq!(cedar_type(&Type::Enum(vec!["a".into()])), "String");
        assert_eq!(
            cedar_type(&Type::List(Box::new(Type::Set(Box::new(Type::Date))))),
            "Set<Set<Long>>"
        );
        assert_eq!(cedar_type(&Type::Bool), "Bool");
        let rec = Type::Record(vec![
            ir::FieldType {
                name: "path".into(),
                ty: Type::Path,
                optional: false,
            },
            ir::FieldType {
                name: "size".into(),
                ty: Type::Int,
                optional: true,
            },
        ]);
        assert_eq!(
            cedar_type(&Type::List(Box::new(rec))),
            "Set<{ path: String, size?: Long }>"
        );
    }
}
