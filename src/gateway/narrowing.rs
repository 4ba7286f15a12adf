//! A mandate's narrowing: the trusted side may restrict a critical
//! parameter's trusted sources to a non-empty subset of those the pack
//! declares for it (`"sources": {"payment.transfer.payee_iban":
//! ["mandate.payee"]}`: only the payees the user named, not the saved
//! ones). A narrowing never adds a source and never reorders: the gateway
//! tries the declared sources in the pack's order and skips those the
//! mandate leaves out, so a list is a set. The pack needs no declaration
//! for it: every critical parameter can be narrowed, because narrowing can
//! only refuse more (see `tests/narrowing.rs`).
//!
//! Checked twice against the bundle's table: by `ipc token issue` before
//! it signs, and by the authn stage when it verifies the token (an unknown
//! action or parameter, a parameter that is not critical, an undeclared
//! source or an empty list is a DENY there).

/// `action.param` to the sources a mandate allows for it, each written as
/// the pack writes it (`mandate.payee`, `registry.beneficiaries`). Owned
/// here: a mandate carries one, and this module reads no mandate.
pub type Narrowing = std::collections::BTreeMap<String, Vec<String>>;
use crate::ir::{Action, Param, Source};

/// Why a narrowing cannot be signed or accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, miette::Diagnostic)]
pub enum NarrowingError {
    /// `--only` or `--strict` names an action the pack does not have.
    #[error("`{target}` names no action of pack `{pack}`")]
    #[diagnostic(
        code(mandate::narrowing::unknown_action),
        help("name a critical parameter as ACTION.PARAM, e.g. `payment.transfer.payee_iban`")
    )]
    UnknownAction { target: String, pack: String },
    /// A narrowing names a parameter the action does not have.
    #[error("action `{action}` has no parameter `{param}`")]
    #[diagnostic(code(mandate::narrowing::unknown_param))]
    UnknownParam { action: String, param: String },
    /// Only critical parameters have trusted sources to narrow.
    #[error("`{action}.{param}` is not critical: it has no trusted sources to narrow")]
    #[diagnostic(code(mandate::narrowing::not_critical))]
    NotCritical { action: String, param: String },
    /// A narrowing may only keep sources the pack declares for the parameter,
    /// never add one.
    #[error("`{given}` is not a source of `{action}.{param}`")]
    #[diagnostic(
        code(mandate::narrowing::undeclared_source),
        help("a mandate may only keep some of the declared sources: {declared}")
    )]
    UndeclaredSource {
        action: String,
        param: String,
        given: String,
        declared: String,
    },
    /// A parameter narrowed to no source could take no value at all.
    #[error("`{action}.{param}` is narrowed to no source")]
    #[diagnostic(
        code(mandate::narrowing::empty),
        help("keep at least one of the declared sources: {declared}")
    )]
    Empty {
        action: String,
        param: String,
        declared: String,
    },
    /// `--strict` on a parameter whose sources include no mandate claim (a key
    /// into the user's own records): there is nothing the request could name.
    #[error("`{action}.{param}` has no mandate source, so it cannot be strict")]
    #[diagnostic(
        code(mandate::narrowing::no_mandate_source),
        help("its sources are {declared}: narrow it with --only, or leave it as declared")
    )]
    NoMandateSource {
        action: String,
        param: String,
        declared: String,
    },
    /// A "strict" token that would be no stricter than a plain one would
    /// mislead its issuer.
    #[error(
        "`--strict {target}` changes nothing: no critical parameter there has a mandate source besides others"
    )]
    #[diagnostic(
        code(mandate::narrowing::nothing_to_narrow),
        help(
            "its critical values already come only from the mandate, or only from the owner's records"
        )
    )]
    NothingToNarrow { target: String },
    /// A parameter narrowed twice: which list holds would be ambiguous.
    #[error("`{target}` is narrowed twice")]
    #[diagnostic(
        code(mandate::narrowing::twice),
        help("name each parameter once (`--strict` already narrows it to its mandate sources)")
    )]
    Twice { target: String },
}

fn declared(p: &Param) -> String {
    let all: Vec<String> = p.sources.iter().map(|s| format!("`{s}`")).collect();
    all.join(", ")
}

/// The action and, unless the target is the action itself, its parameter.
fn target<'a>(
    t: &str,
    pack: &str,
    actions: &[&'a Action],
) -> Result<(&'a Action, Option<&'a Param>), NarrowingError> {
    if let Some(a) = actions.iter().find(|a| a.name == t) {
        return Ok((a, None));
    }
    let unknown = || NarrowingError::UnknownAction {
        target: crate::base::json::echo(t),
        pack: pack.to_string(),
    };
    let (action, param) = t.rsplit_once('.').ok_or_else(unknown)?;
    let a = actions
        .iter()
        .find(|a| a.name == action)
        .ok_or_else(unknown)?;
    let p =
        a.params
            .iter()
            .find(|p| p.name == param)
            .ok_or_else(|| NarrowingError::UnknownParam {
                action: a.name.clone(),
                param: crate::base::json::echo(param),
            })?;
    Ok((a, Some(p)))
}

/// The critical parameter a narrowing entry names.
fn critical_param<'a>(
    t: &str,
    pack: &str,
    actions: &[&'a Action],
) -> Result<(&'a Action, &'a Param), NarrowingError> {
    let (a, p) = target(t, pack, actions)?;
    let Some(p) = p else {
        return Err(NarrowingError::UnknownAction {
            target: crate::base::json::echo(t),
            pack: pack.to_string(),
        });
    };
    if !p.critical {
        return Err(NarrowingError::NotCritical {
            action: a.name.clone(),
            param: p.name.clone(),
        });
    }
    Ok((a, p))
}

/// Checks a narrowing against the pack's actions: each entry names a
/// critical parameter and a non-empty list of its declared sources.
pub fn check(sources: &Narrowing, pack: &str, actions: &[&Action]) -> Result<(), NarrowingError> {
    for (t, list) in sources {
        let (a, p) = critical_param(t, pack, actions)?;
        if list.is_empty() {
            return Err(NarrowingError::Empty {
                action: a.name.clone(),
                param: p.name.clone(),
                declared: declared(p),
            });
        }
        if let Some(bad) = list
            .iter()
            .find(|s| !p.sources.iter().any(|d| d.to_string() == **s))
        {
            return Err(NarrowingError::UndeclaredSource {
                action: a.name.clone(),
                param: p.name.clone(),
                given: crate::base::json::echo(bad),
                declared: declared(p),
            });
        }
    }
    Ok(())
}

/// `--strict`: each target (`ACTION.PARAM`, `ACTION`, or `*` for every
/// action of the pack) takes its critical values only from the mandate's
/// claims. A parameter named explicitly must declare a mandate source; an
/// action or `*` narrows each of its critical parameters that declares a
/// mandate source besides others, and leaves the rest as declared (a key
/// into the user's own records, like a standing order's id, has no
/// mandate source to keep); one that narrows nothing is an error.
pub fn strict(
    targets: &[String],
    pack: &str,
    actions: &[&Action],
) -> Result<Narrowing, NarrowingError> {
    let claims = |p: &Param| -> Vec<String> {
        p.sources
            .iter()
            .filter(|s| matches!(s, Source::Claim { .. }))
            .map(|s| s.to_string())
            .collect()
    };
    let mut out = Narrowing::new();
    let add = |a: &Action, p: &Param, out: &mut Narrowing| {
        out.insert(format!("{}.{}", a.name, p.name), claims(p));
    };
    for t in targets {
        let all: Vec<&Action> = if t == "*" {
            actions.to_vec()
        } else {
            match target(t, pack, actions)? {
                (a, None) => vec![a],
                (_, Some(_)) => {
                    let (a, p) = critical_param(t, pack, actions)?;
                    if claims(p).is_empty() {
                        return Err(NarrowingError::NoMandateSource {
                            action: a.name.clone(),
                            param: p.name.clone(),
                            declared: declared(p),
                        });
                    }
                    add(a, p, &mut out);
                    continue;
                }
            }
        };
        let mut narrowed = false;
        for a in all {
            for p in a.params.iter().filter(|p| p.critical) {
                let kept = claims(p).len();
                if kept > 0 && kept < p.sources.len() {
                    add(a, p, &mut out);
                    narrowed = true;
                }
            }
        }
        // a strict mandate that is not stricter would mislead its issuer
        if !narrowed {
            return Err(NarrowingError::NothingToNarrow {
                target: crate::base::json::echo(t),
            });
        }
    }
    Ok(out)
}

/// The narrowing a spec asks for (`strict` then `only`; a parameter named
/// by both, or twice by `only`, is an error), each list in the pack's
/// order without repeats, checked.
pub fn of_spec(
    strict_targets: &[String],
    only: &[(String, Vec<String>)],
    pack: &str,
    actions: &[&Action],
) -> Result<Narrowing, NarrowingError> {
    let mut out = strict(strict_targets, pack, actions)?;
    for (t, list) in only {
        if out.contains_key(t) {
            return Err(NarrowingError::Twice {
                target: crate::base::json::echo(t),
            });
        }
        out.insert(t.clone(), list.clone());
    }
    check(&out, pack, actions)?;
    for (t, list) in out.iter_mut() {
        if let Ok((_, p)) = critical_param(t, pack, actions) {
            *list = p
                .sources
                .iter()
                .map(|s| s.to_string())
                .filter(|s| list.contains(s))
                .collect();
        }
    }
    Ok(out)
}

/// The sources a mandate's narrowing allows for `action.param`, or
/// `None`: every declared one.
pub fn allowed<'m>(sources: &'m Narrowing, action: &str, param: &str) -> Option<&'m [String]> {
    if sources.is_empty() {
        return None;
    }
    sources
        .iter()
        .find(|(k, _)| {
            k.len() == action.len() + 1 + param.len()
                && k.starts_with(action)
                && k[action.len()..].starts_with('.')
                && k.ends_with(param)
        })
        .map(|(_, v)| v.as_slice())
}

/// The parameters (with their action) that claim `c` is a source of.
pub(crate) fn vouched_by<'a>(
    actions: &'a [&'a Action],
    c: &'a str,
) -> impl Iterator<Item = (&'a Action, &'a crate::ir::Param)> {
    actions.iter().flat_map(move |a| {
        a.params
            .iter()
            .filter(move |p| {
                p.sources
                    .iter()
                    .any(|s| matches!(s, Source::Claim { claim } if claim == c))
            })
            .map(move |p| (*a, p))
    })
}

/// A child's default narrowing: the parent's, and every critical
/// parameter a claim can vouch for takes its value only from the child's
/// claims (among the sources the parent allows), so that a child for the
/// landlord allows the landlord and no other saved payee. A parameter the
/// parent lets no claim vouch for keeps the parent's sources.
pub(crate) fn strict_within(parent: &Narrowing, actions: &[&Action]) -> Narrowing {
    let mut out = parent.clone();
    for a in actions {
        for p in a.params.iter().filter(|p| p.critical) {
            let declared: Vec<String> = p.sources.iter().map(|s| s.to_string()).collect();
            let allowed: Vec<String> = match allowed(parent, &a.name, &p.name) {
                Some(l) => l.to_vec(),
                None => declared,
            };
            let kept: Vec<String> = p
                .sources
                .iter()
                .filter(|s| matches!(s, Source::Claim { .. }))
                .map(|s| s.to_string())
                .filter(|s| allowed.contains(s))
                .collect();
            if !kept.is_empty() && kept.len() < allowed.len() {
                out.insert(format!("{}.{}", a.name, p.name), kept);
            }
        }
    }
    out
}
