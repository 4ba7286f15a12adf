//! A child mandate as the person who confirms it sees it (the approval
//! page, the command line, MCP elicitation), with the rendering every
//! approval uses ([`super`]): every value escaped, IBANs in groups of four,
//! amounts in major units with their currency, what the owner's registry
//! calls a value shown beside it, and each value marked when no registry of
//! the owner's holds it (a payee an injected document slipped in is shown
//! as such).

use super::{display, escape, fold, label};
use crate::base::Money;
use crate::base::json::format_time;
use crate::gateway::Gateway;
use crate::gateway::Mandate;
use crate::gateway::registry::Registries;
use crate::gateway::widening::Widening;
use crate::ir::{RegistryShape, Source, Type};
use crate::store::{StoreError, Tx};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// One claim of the child, as shown.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClaimShown {
    pub name: String,
    /// A set: each element is its own item.
    pub list: bool,
    /// The folded lines of each element (one element for a single value).
    pub items: Vec<Vec<String>>,
    /// What the owner's registry calls each element, if anything (escaped).
    pub names: Vec<Option<String>>,
    /// Per element: `parent` (the parent's claim holds it), `registry` (only
    /// a registry of the owner's does) or `none` (neither: it widens).
    pub origins: Vec<String>,
    /// Per element: whether a registry of the owner's that vouches for the
    /// same parameters holds it; `false` is the mark an approver looks at
    /// first (a value only the request vouches for). `None`: the claim has
    /// no registry to compare with (an account, a currency).
    pub in_registry: Vec<Option<bool>>,
}

/// A child mandate as its confirmer sees it. Every text in it is escaped;
/// [`ChildShown::text`] is the plain text, the page shows the same fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChildShown {
    pub mandate: String,
    pub parent: String,
    pub pack: String,
    pub user: String,
    pub owner: String,
    pub scopes: Vec<String>,
    pub claims: Vec<ClaimShown>,
    /// The budget in major units, with the currency claim if there is one.
    pub budget: String,
    pub calls: u64,
    pub expires_at: i64,
    pub expires: String,
    /// In plain words: what the child allows.
    pub summary: String,
    /// Not valid before (the time it was drafted).
    pub issued: String,
    /// Where each narrowed critical value may come from, in plain words.
    pub sources: Vec<SourceShown>,
    /// What widens its parent (empty: it may be issued).
    pub widens: Vec<String>,
}

/// Critical parameters of the child's narrowing that take their values
/// from the same sources, as shown: the signed `sources` in plain words
/// (`docs/decisions/child-sources-never-proposed.md`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SourceShown {
    /// `action.param` of each, escaped.
    pub params: Vec<String>,
    /// Where their values may come from, each in plain words, escaped.
    pub from: Vec<String>,
    /// Their values may come from more than a drafted child's default
    /// allows (the values it names): only a child not drafted here (issued
    /// with a key, or by an older version) can be so.
    pub wider: bool,
}

/// `child` (a child of `parent`) as its confirmer sees it, reading the
/// owner's registries in `tx`.
pub fn show(
    gw: &Gateway,
    tx: &mut dyn Tx,
    parent: &Mandate,
    child: &Mandate,
    widens: &[Widening],
) -> Result<ChildShown, StoreError> {
    let pack = gw
        .actions
        .values()
        .find(|a| a.pack.name == child.pack)
        .map(|a| &a.pack);
    let actions: Vec<&crate::ir::Action> = gw
        .actions
        .values()
        .filter(|a| a.pack.name == child.pack)
        .map(|a| &a.table.action)
        .collect();
    let regs = Registries {
        world: &gw.world,
        pack: &child.pack,
        owner: &child.owner,
    };
    let currency = pack.and_then(|p| {
        p.claims
            .iter()
            .find(|c| c.ty == Type::Currency)
            .and_then(|c| child.claims.get(&c.name))
            .and_then(Value::as_str)
    });
    let mut claims = vec![];
    for (name, v) in &child.claims {
        let ty = pack
            .and_then(|p| p.claims.iter().find(|c| &c.name == name))
            .map(|c| c.ty.clone())
            .unwrap_or(Type::Text);
        // the owner's registries that vouch beside this claim
        let mut own: Vec<&crate::ir::Registry> = vec![];
        for (_, p) in crate::gateway::narrowing::vouched_by(&actions, name) {
            for s in &p.sources {
                if let Source::Registry { registry } = s
                    && let Some(r) =
                        pack.and_then(|pk| pk.registries.iter().find(|r| &r.name == registry))
                    && !r.global
                    && matches!(r.shape, RegistryShape::Set { .. })
                    && !own.iter().any(|o| o.name == r.name)
                {
                    own.push(r);
                }
            }
        }
        let (list, members): (bool, Vec<&Value>) = match v {
            Value::Array(items) => (true, items.iter().collect()),
            one => (false, vec![one]),
        };
        let el = ty.element().clone();
        let pv = parent.claims.get(name);
        let mut shown = ClaimShown {
            name: escape(name),
            list,
            items: vec![],
            names: vec![],
            origins: vec![],
            in_registry: vec![],
        };
        for m in members {
            shown.items.push(fold(&display(&el, m, None)));
            let mut held = None;
            let mut called = None;
            if let Some(text) = m.as_str()
                && !own.is_empty()
            {
                held = Some(false);
                for r in &own {
                    if regs.member(tx, r, text, None)?.is_some() {
                        held = Some(true);
                        called = regs.entry_name(tx, r, text)?.map(|n| escape(&n));
                        break;
                    }
                }
            }
            let in_parent = match pv {
                Some(Value::Array(items)) => items.contains(m),
                Some(p) => p == m,
                None => false,
            };
            let widened = widens.iter().any(|w| {
                matches!(w, Widening::Claim { claim, value }
                    if claim == name && *value == super::shown_value(m))
            });
            shown.origins.push(
                if in_parent {
                    "parent"
                } else if widened {
                    "none"
                } else {
                    "registry"
                }
                .into(),
            );
            shown.names.push(called);
            shown.in_registry.push(held);
        }
        claims.push(shown);
    }
    let budget = match currency {
        Some(c) => format!(
            "{} {}",
            Money::from_minor(child.budget.amount).grouped(),
            escape(c)
        ),
        None => Money::from_minor(child.budget.amount).grouped(),
    };
    let mut s = ChildShown {
        mandate: escape(&child.id),
        parent: escape(&parent.id),
        pack: escape(&child.pack),
        user: escape(&child.user),
        owner: escape(&child.owner),
        scopes: child.scopes.iter().map(|s| escape(s)).collect(),
        claims,
        budget,
        calls: child.budget.calls,
        expires_at: child.expires_at,
        expires: format_time(child.expires_at),
        summary: String::new(),
        issued: format_time(child.issued_at),
        sources: narrowing(pack, &actions, parent, child),
        widens: widens.iter().map(|w| escape(&w.to_string())).collect(),
    };
    s.summary = summary(&s);
    Ok(s)
}

/// The child's narrowing in plain words: each parameter it narrows, and
/// each its parent or a drafted child's default narrows that it leaves
/// wider, grouped by where their values may come from.
fn narrowing(
    pack: Option<&crate::bundle::format::TablePack>,
    actions: &[&crate::ir::Action],
    parent: &Mandate,
    child: &Mandate,
) -> Vec<SourceShown> {
    let default = crate::gateway::narrowing::strict_within(&parent.sources, actions);
    let mut out: Vec<SourceShown> = vec![];
    let mut named = vec![];
    let mut actions = actions.to_vec();
    actions.sort_by(|a, b| a.name.cmp(&b.name));
    for a in actions {
        for p in a.params.iter().filter(|p| p.critical) {
            let key = format!("{}.{}", a.name, p.name);
            let declared: Vec<String> = p.sources.iter().map(Source::name).collect();
            let within = default.get(&key).unwrap_or(&declared);
            let Some(mine) = child
                .sources
                .get(&key)
                .or(default.get(&key).map(|_| &declared))
            else {
                continue;
            };
            let wider = mine.iter().any(|s| !within.contains(s));
            let from = p
                .sources
                .iter()
                .filter(|s| mine.contains(&s.name()))
                .map(|s| escape(&source_words(pack, s)))
                .collect();
            group(&mut out, escape(&key), from, wider);
            named.push(key);
        }
    }
    // an entry naming no critical parameter of the pack (refused at authn)
    for (key, mine) in child.sources.iter().filter(|(k, _)| !named.contains(k)) {
        let from = mine.iter().map(|s| escape(s)).collect();
        group(&mut out, escape(key), from, true);
    }
    out
}

/// Adds `param` to the group of the same sources, or a group of its own.
fn group(out: &mut Vec<SourceShown>, param: String, from: Vec<String>, wider: bool) {
    match out.iter_mut().find(|g| g.from == from && g.wider == wider) {
        Some(g) => g.params.push(param),
        None => out.push(SourceShown {
            params: vec![param],
            from,
            wider,
        }),
    }
}

/// A source in plain words: "the payee this mandate names", "any entry of
/// your registry beneficiaries".
fn source_words(pack: Option<&crate::bundle::format::TablePack>, s: &Source) -> String {
    match s {
        Source::Claim { claim } => format!("the {claim} this mandate names"),
        Source::Registry { registry } => {
            let global = pack
                .and_then(|p| p.registries.iter().find(|r| &r.name == registry))
                .is_none_or(|r| r.global);
            let whose = if global { "the" } else { "your" };
            format!("any entry of {whose} registry {registry}")
        }
        Source::Lookup(l) => format!(
            "the {} of the entry of registry {} for {}",
            l.field, l.registry, l.key
        ),
    }
}

/// "payments.write: payee DE44 5001 0517 5407 3249 31 (Landlord); ... up
/// to 1,500.00 EUR in at most 3 calls, until 2026-12-01T18:00:00Z".
fn summary(s: &ChildShown) -> String {
    let mut parts = vec![];
    for c in &s.claims {
        if c.items.is_empty() {
            continue;
        }
        let values: Vec<String> = c
            .items
            .iter()
            .zip(&c.names)
            .zip(&c.in_registry)
            .map(|((lines, name), held)| {
                let mut v = lines.concat();
                if let Some(n) = name {
                    let _ = write!(v, " ({n})");
                }
                if *held == Some(false) {
                    v.push_str(" [in no registry of yours]");
                }
                v
            })
            .collect();
        parts.push(format!("{} {}", c.name, values.join(", ")));
    }
    let scopes = if s.scopes.is_empty() {
        "nothing".to_string()
    } else {
        s.scopes.join(", ")
    };
    let what = if parts.is_empty() {
        String::new()
    } else {
        format!(" for {}", parts.join("; "))
    };
    let wider: Vec<String> = s
        .sources
        .iter()
        .filter(|w| w.wider)
        .map(|w| format!("{} from {}", w.params.join(", "), w.from.join(" or ")))
        .collect();
    let beyond = if wider.is_empty() {
        String::new()
    } else {
        format!("; BEYOND THE VALUES NAMED: {}", wider.join("; "))
    };
    format!(
        "{scopes}{what}, up to {} in at most {} calls, until {}{beyond}",
        s.budget, s.calls, s.expires
    )
}

impl ChildShown {
    /// The plain text: labels at column 0, each value's lines behind
    /// `    | ` (a set's elements behind `    - `), so that no value can
    /// write a label.
    pub fn text(&self) -> String {
        let mut t = String::new();
        label(&mut t, "mandate", &self.mandate);
        label(&mut t, "parent", &self.parent);
        label(&mut t, "pack", &self.pack);
        label(&mut t, "user", &self.user);
        label(&mut t, "owner", &self.owner);
        label(&mut t, "scopes", &self.scopes.join(", "));
        label(&mut t, "budget", &self.budget);
        label(&mut t, "calls", &self.calls.to_string());
        label(&mut t, "expires", &self.expires);
        label(&mut t, "valid from", &self.issued);
        t.push_str("claims\n");
        for c in &self.claims {
            let _ = writeln!(t, "  {}", c.name);
            if c.items.is_empty() {
                t.push_str("    (none)\n");
            }
            for (i, lines) in c.items.iter().enumerate() {
                for (j, line) in lines.iter().enumerate() {
                    let start = if c.list && j == 0 { "    - " } else { "    | " };
                    let _ = writeln!(t, "{start}{line}");
                }
                let mut notes = vec![];
                if let Some(Some(n)) = c.names.get(i) {
                    notes.push(format!("registry calls it {n}"));
                }
                match c.origins.get(i).map(String::as_str) {
                    Some("parent") => notes.push("from the parent mandate".into()),
                    Some("registry") => notes.push("from your registry".into()),
                    _ => notes.push("WIDENS: not allowed by the parent".into()),
                }
                if let Some(Some(false)) = c.in_registry.get(i) {
                    notes.push("IN NO REGISTRY OF YOURS".into());
                }
                let _ = writeln!(t, "      ({})", notes.join("; "));
            }
        }
        if !self.sources.is_empty() {
            t.push_str("values from\n");
        }
        for w in &self.sources {
            let _ = writeln!(t, "  {}", w.params.join(", "));
            for f in &w.from {
                for (j, line) in fold(f).iter().enumerate() {
                    let start = if j == 0 { "    - " } else { "    | " };
                    let _ = writeln!(t, "{start}{line}");
                }
            }
            if w.wider {
                t.push_str("      (WIDER than the values this mandate names)\n");
            }
        }
        label(&mut t, "allows", "");
        for line in fold(&self.summary) {
            let _ = writeln!(t, "    | {line}");
        }
        if !self.widens.is_empty() {
            t.push_str("widens\n");
            for w in &self.widens {
                let _ = writeln!(t, "    - {w}");
            }
        }
        t
    }
}

#[cfg(test)]
#[path = "render_child_tests.rs"]
mod tests;
