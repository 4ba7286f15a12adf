//! What the checker guarantees about a pack, checked again on the table a
//! bundle carries, every time a bundle is loaded. A hash only proves that
//! the file is what its hash says; whoever can write the file can also
//! recompute the hash. Whatever a bundle's signature, the gateway refuses
//! a table the compiler could never have produced — one that would weaken
//! provenance, which Cedar's validation cannot see.
//!
//! Each check below names the invariant it keeps; any failure is an
//! `ipc::bundle::invariant` error naming the action and the parameter.

use crate::bundle::format::{Table, TableAction, TablePack};
use crate::ir::{Key, Lookup, Param, RegistryShape, Source, Type};

/// Every invariant, over every action of the table.
pub fn check(table: &Table) -> Result<(), String> {
    for a in &table.actions {
        let Some(pack) = table.pack(&a.pack) else {
            return Err(format!(
                "action `{}` belongs to pack `{}`, which the table does not list",
                a.action.name, a.pack
            ));
        };
        let at = |reason: String| format!("action `{}`: {reason}", a.action.name);
        for p in a.action.params.iter().flat_map(Param::walk) {
            fields_match_record(p).map_err(&at)?;
            critical_has_source(p).map_err(&at)?;
            no_default_on_critical(p).map_err(&at)?;
            secret_is_not_critical(p).map_err(&at)?;
            normalizer_fits(p).map_err(&at)?;
            for s in &p.sources {
                source_resolves(pack, a, p, s).map_err(&at)?;
            }
        }
        budget_is_money(a).map_err(&at)?;
        every_rule_is_evaluated(a).map_err(&at)?;
    }
    Ok(())
}

/// A record's fields are exactly its type's, in order and of the same
/// types, and a record is never critical itself: a table that dropped a
/// critical field's entry would let the field through unvouched.
fn fields_match_record(p: &Param) -> Result<(), String> {
    let want = p.ty.record_fields();
    let same = want.len() == p.fields.len()
        && want
            .iter()
            .zip(&p.fields)
            .all(|(t, f)| t.name == f.name && t.ty == f.ty && t.optional == f.optional);
    if !same {
        return Err(format!(
            "parameter `{}`: its fields are not those of its record type",
            p.name
        ));
    }
    if p.critical && p.ty.is_record() {
        return Err(format!("record `{}` is critical itself", p.name));
    }
    Ok(())
}

/// A critical parameter names at least one trusted source, and only a
/// critical one names any: a parameter flipped to non-critical with its
/// sources left in place is an edited table (the compiler writes sources
/// only under `critical from`), and a critical one without a source would
/// accept no value or, worse, be read as vouched for.
fn critical_has_source(p: &Param) -> Result<(), String> {
    match (p.critical, p.sources.is_empty()) {
        (true, true) => Err(format!(
            "critical parameter `{}` has no trusted source",
            p.name
        )),
        (false, false) => Err(format!(
            "parameter `{}` names trusted sources but is not critical",
            p.name
        )),
        _ => Ok(()),
    }
}

/// A critical parameter has no default: a value nobody vouched for is never
/// filled in by the gateway. (An empty collection vouches for nothing and
/// may be the default of a critical list: an absent `cc` is no recipient.)
fn no_default_on_critical(p: &Param) -> Result<(), String> {
    let empty = matches!(&p.default, Some(crate::ir::Value::List(v)) if v.is_empty());
    if p.critical && p.default.is_some() && !empty {
        return Err(format!("critical parameter `{}` has a default", p.name));
    }
    Ok(())
}

/// A secret is a value the user gives, never a critical one: a table that
/// marks a critical parameter secret would hide the trusted value's origin.
fn secret_is_not_critical(p: &Param) -> Result<(), String> {
    if p.secret && (p.critical || p.ty != Type::Text) {
        return Err(format!(
            "parameter `{}` is secret but critical or not text",
            p.name
        ));
    }
    Ok(())
}

/// A parameter's normaliser applies to its type (an IBAN is compared as an
/// IBAN, never as free text).
fn normalizer_fits(p: &Param) -> Result<(), String> {
    match p.normalize {
        Some(n) if !n.applies_to(&p.ty) => Err(format!(
            "parameter `{}` of type {} has the normaliser `{}`",
            p.name,
            p.ty,
            n.name()
        )),
        _ => Ok(()),
    }
}

/// Every source names a claim or registry the pack declares, and every
/// lookup is keyed by a trusted value: a critical parameter, a claim, or
/// another such lookup — never by a value the agent chose freely.
fn source_resolves(pack: &TablePack, a: &TableAction, p: &Param, s: &Source) -> Result<(), String> {
    match s {
        Source::Claim { claim } => {
            if !pack.claims.iter().any(|c| &c.name == claim) {
                return Err(format!(
                    "parameter `{}` is vouched for by claim `{claim}`, which pack `{}` does not declare",
                    p.name, pack.name
                ));
            }
        }
        Source::Registry { registry } => {
            if !pack.registries.iter().any(|r| &r.name == registry) {
                return Err(format!(
                    "parameter `{}` is vouched for by registry `{registry}`, which pack `{}` does not declare",
                    p.name, pack.name
                ));
            }
        }
        Source::Lookup(l) => lookup_resolves(pack, a, p, l)?,
    }
    Ok(())
}

fn lookup_resolves(pack: &TablePack, a: &TableAction, p: &Param, l: &Lookup) -> Result<(), String> {
    let Some(reg) = pack.registries.iter().find(|r| r.name == l.registry) else {
        return Err(format!(
            "parameter `{}` reads registry `{}`, which pack `{}` does not declare",
            p.name, l.registry, pack.name
        ));
    };
    if !matches!(reg.shape, RegistryShape::Keyed { .. }) || reg.field(&l.field).is_none() {
        return Err(format!(
            "parameter `{}` reads `{l}`, which registry `{}` does not hold",
            p.name, reg.name
        ));
    }
    match &l.key {
        Key::Param { param } => match a.action.param(param) {
            Some(k) if k.critical => Ok(()),
            Some(_) => Err(format!(
                "parameter `{}` reads `{l}`, keyed by `{param}`, which is not critical",
                p.name
            )),
            None => Err(format!(
                "parameter `{}` reads `{l}`, keyed by `{param}`, which the action does not have",
                p.name
            )),
        },
        Key::Claim { claim } => {
            if pack.claims.iter().any(|c| &c.name == claim) {
                Ok(())
            } else {
                Err(format!(
                    "parameter `{}` reads `{l}`, keyed by claim `{claim}`, which pack `{}` does not declare",
                    p.name, pack.name
                ))
            }
        }
        Key::Lookup { lookup } => lookup_resolves(pack, a, p, lookup),
    }
}

/// The budgeted parameter exists and is an amount.
fn budget_is_money(a: &TableAction) -> Result<(), String> {
    match &a.action.budget {
        None => Ok(()),
        Some(b) => match a.action.param(b) {
            Some(p) if p.ty == Type::Money => Ok(()),
            _ => Err(format!(
                "the budget parameter `{b}` is not an amount parameter"
            )),
        },
    }
}

/// Every rule's policy is among the policies evaluated for the action (a
/// rule left out of the action's set would never forbid anything), and
/// the action has policies at all.
fn every_rule_is_evaluated(a: &TableAction) -> Result<(), String> {
    if a.policy_ids.is_empty() {
        return Err("no policy is evaluated for it".into());
    }
    if let Some(id) = a
        .rule_policy_ids
        .iter()
        .find(|id| !a.policy_ids.contains(id))
    {
        return Err(format!(
            "the policy `{id}` of one of its rules is not evaluated for it"
        ));
    }
    Ok(())
}
