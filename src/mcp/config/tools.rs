//! The tools pass: each `[[tools]]` named once, on a declared server, in
//! exactly one mode ([`names`]); each decided tool's action found in the
//! bundle ([`actions`]); then each tool as a [`ToolConfig`] with its
//! arguments mapped (`args.rs`) and where it was written ([`Sites`]).

use super::ctx::{Diags, Span, sp};
use super::declared::{Sites, ToolSite};
use super::diag::ConfigError;
use super::file::{ConfigFile, PassthroughFile, S, ToolFile};
use super::{ServerConfig, SessionConfig, ToolConfig, ToolMode, Transport};
use crate::bundle::{Bundle, TableAction};
use crate::diagnostics::suggest;
use crate::gateway::Effect;
use std::collections::HashMap;
use std::path::PathBuf;

/// A decided tool and the action it is mapped onto.
pub(super) type Decided<'a> = (&'a S<ToolFile>, &'a TableAction);

/// `effect = "read" | "write"`, as the config spells it.
fn parse_effect(word: &str) -> Option<Effect> {
    [Effect::Read, Effect::Write]
        .into_iter()
        .find(|e| e.name() == word)
}

/// Each tool: a declared server, a name given once, exactly one mode.
pub(super) fn names(cfg: &ConfigFile, d: &mut Diags) {
    let mut seen: HashMap<String, Span> = HashMap::new();
    let declared: Vec<&str> = cfg
        .servers
        .iter()
        .map(|s| s.get_ref().name.get_ref().as_str())
        .collect();
    for t in &cfg.tools {
        let tf = t.get_ref();
        let server = tf.server.get_ref();
        if !declared.contains(&server.as_str()) {
            d.err(ConfigError::UnknownServer {
                name: server.clone(),
                span: sp(tf.server.span()),
                help: suggest(server, declared.iter().copied()).or_else(|| {
                    Some(format!("declare it: `[[servers]]` with `name = \"{server}\"` and a `command` or `url`"))
                }),
            });
        }
        let name = tf.tool.get_ref().clone();
        if let Some(first) = seen.get(&name) {
            let first = first.clone();
            d.err(ConfigError::Duplicate {
                kind: "tool",
                name: name.clone(),
                span: sp(tf.tool.span()),
                first: sp(first),
            });
        }
        seen.insert(name.clone(), tf.tool.span());
        mode(t, name, d);
    }
}

/// A tool's mode: a passthrough, or decided (an action, or inline).
fn mode(t: &S<ToolFile>, name: String, d: &mut Diags) {
    let tf = t.get_ref();
    if let Some(p) = &tf.passthrough
        && let PassthroughFile::Word(w) = p.get_ref()
        && w != "unguarded"
    {
        d.err(ConfigError::Tool {
            tool: name.clone(),
            message: format!("`passthrough = \"{}\"` is not a passthrough", crate::base::json::echo(w)),
            span: sp(p.span()),
            help: Some("`passthrough = true` for a read-only tool, `passthrough = \"unguarded\"` to pass one that writes on purpose".into()),
        });
        return;
    }
    if let Some(e) = &tf.effect {
        effect_word(&name, tf, e, d);
    }
    match &tf.passthrough {
        Some(p)
            if tf.is_passthrough()
                && (tf.action.is_some() || tf.is_inline() || !tf.params.is_empty()) =>
        {
            d.err(ConfigError::Tool {
                tool: name,
                message: "a passthrough tool is forwarded as is: it has no action or parameters".into(),
                span: sp(p.span()),
                help: Some("remove `passthrough` to have the gateway decide every call, or remove the action".into()),
            });
        }
        _ if tf.is_passthrough() => {}
        _ if tf.action.is_none() && !tf.is_inline() => d.err(ConfigError::Tool {
            tool: name,
            message: "neither `passthrough = true` nor an `action`".into(),
            span: sp(t.span()),
            help: Some("a read-only tool: `passthrough = true`; otherwise `action = \"pack.action\"` with its `[tools.params.P]`, or an inline declaration".into()),
        }),
        _ => {}
    }
}

/// A tool's `effect = "..."`: a word of [`Effect`]'s, and only on a
/// tool whose calls are decided.
fn effect_word(name: &str, tf: &ToolFile, e: &S<String>, d: &mut Diags) {
    let word = e.get_ref();
    if parse_effect(word).is_none() {
        let close = suggest(word, ["read", "write"]);
        d.err(ConfigError::Effect {
            tool: name.to_string(),
            message: format!(
                "`effect = \"{}\"` is neither `\"read\"` nor `\"write\"`",
                crate::base::json::echo(word)
            ),
            span: sp(e.span()),
            help: Some(format!(
                "{}`effect = \"read\"` sends every allowed call again (its answer may change), `\"write\"` (the default) executes once and answers a retry from the store",
                close.map(|c| format!("{c} ")).unwrap_or_default()
            )),
        });
    } else if tf.is_passthrough() {
        d.err(ConfigError::Effect {
            tool: name.to_string(),
            message: "a passthrough tool is forwarded as is: it has no `effect`".into(),
            span: sp(e.span()),
            help: Some("remove `effect`, or remove `passthrough` and map the tool onto an action, so that the gateway decides each call".into()),
        });
    }
}

/// Each decided tool's action in the bundle, and the packs those actions
/// belong to, in the order the tools first use them.
pub(super) fn actions<'a>(
    cfg: &'a ConfigFile,
    bundle: &'a Bundle,
    d: &mut Diags,
) -> (Vec<String>, Vec<Decided<'a>>) {
    let mut used_packs: Vec<String> = vec![];
    let mut actions: Vec<Decided<'a>> = vec![];
    for t in &cfg.tools {
        let tf = t.get_ref();
        if tf.is_passthrough() {
            continue;
        }
        let Some(a) = &tf
            .action
            .as_ref()
            .or(if tf.is_inline() { Some(&tf.tool) } else { None })
        else {
            continue;
        };
        match bundle.table.action(a.get_ref()) {
            Some(ta) => {
                if !used_packs.contains(&ta.pack) {
                    used_packs.push(ta.pack.clone());
                }
                actions.push((t, ta));
            }
            None => {
                let names = bundle.table.actions.iter().map(|x| x.action.name.as_str());
                let help = suggest(a.get_ref(), names).or_else(|| {
                    Some(format!(
                        "the packs have: {}",
                        bundle
                            .table
                            .actions
                            .iter()
                            .map(|x| format!("`{}`", x.action.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                });
                d.err(ConfigError::UnknownAction {
                    action: a.get_ref().clone(),
                    span: sp(a.span()),
                    help,
                });
            }
        }
    }
    (used_packs, actions)
}

/// Every tool whose mapping holds, and where each was written.
pub(super) fn tools(
    cfg: &ConfigFile,
    servers: &[ServerConfig],
    actions: &[Decided<'_>],
    session: Option<&SessionConfig>,
    d: &mut Diags,
) -> (Vec<ToolConfig>, Sites) {
    let mut tools = vec![];
    let mut sites = Sites {
        file: d.file.clone(),
        source: d.source.clone(),
        tools: vec![],
    };
    let mut decided = vec![];
    for t in &cfg.tools {
        let tf = t.get_ref();
        let base = base(servers, tf);
        let mut site = ToolSite {
            tool: tf.tool.get_ref().clone(),
            span: tf.tool.span(),
            passthrough: None,
            args: vec![],
            effect: tf.effect.as_ref().map(|e| e.span()),
        };
        if tf.is_passthrough() {
            site.passthrough = tf.passthrough.as_ref().map(|p| {
                (
                    p.span(),
                    matches!(p.get_ref(), PassthroughFile::Word(w) if w == "unguarded"),
                )
            });
            tools.push(ToolConfig {
                server: tf.server.get_ref().clone(),
                tool: tf.tool.get_ref().clone(),
                mode: ToolMode::Passthrough,
                base,
            });
            sites.tools.push(site);
        } else if let Some((_, ta)) = actions.iter().find(|(x, _)| std::ptr::eq(*x, t)) {
            // a word that is none is reported by `names`
            let effect = tf
                .effect
                .as_ref()
                .and_then(|e| parse_effect(e.get_ref()))
                .unwrap_or_default();
            decided.push((t, ta.action.name.clone(), effect));
            if let Some(tool) = mapped(tf, ta, effect, base, &mut site, session, d) {
                sites.tools.push(site);
                tools.push(tool);
            }
        }
    }
    effects_agree(&decided, d);
    (tools, sites)
}

/// The folder of the stdio server a tool is on (its paths are resolved
/// there).
fn base(servers: &[ServerConfig], tf: &ToolFile) -> Option<PathBuf> {
    servers.iter().find_map(|s| match &s.transport {
        Transport::Stdio { cwd, .. } if &s.name == tf.server.get_ref() => {
            Some(std::path::absolute(cwd).unwrap_or_else(|_| cwd.clone()))
        }
        _ => None,
    })
}

/// A decided tool with its arguments mapped onto the action's parameters
/// (`args.rs`), the claims a constant may name being the mandate's of the
/// action's pack.
fn mapped(
    tf: &ToolFile,
    ta: &TableAction,
    effect: Effect,
    base: Option<PathBuf>,
    site: &mut ToolSite,
    session: Option<&SessionConfig>,
    d: &mut Diags,
) -> Option<ToolConfig> {
    let claims = session.and_then(|s| {
        s.mandates
            .iter()
            .find(|(p, _)| p == &ta.pack)
            .and_then(|(_, tok)| tok.get("mandate")?.get("claims").cloned())
    });
    let mut args = HashMap::new();
    let params = super::args::mapping(tf, ta, claims.as_ref(), &mut args, d)?;
    site.args = args.into_iter().collect();
    Some(ToolConfig {
        server: tf.server.get_ref().clone(),
        tool: tf.tool.get_ref().clone(),
        mode: ToolMode::Action {
            action: ta.action.name.clone(),
            params,
            effect,
        },
        base,
    })
}

/// One action mapped as a read by one tool and as a write by another:
/// an error at the later tool's `effect` (or its `tool`).
fn effects_agree(decided: &[(&S<ToolFile>, String, Effect)], d: &mut Diags) {
    let mut first: HashMap<&str, (&S<ToolFile>, Effect)> = HashMap::new();
    for (t, action, effect) in decided {
        match first.get(action.as_str()) {
            Some((other, theirs)) if theirs != effect => {
                let tf = t.get_ref();
                let span = tf.effect.as_ref().map_or(tf.tool.span(), |e| e.span());
                let other = other.get_ref().tool.get_ref();
                d.err(ConfigError::Effect {
                    tool: tf.tool.get_ref().clone(),
                    message: format!(
                        "the action `{action}` is a {} here and a {} for the tool `{other}`",
                        effect.name(),
                        theirs.name()
                    ),
                    span: sp(span),
                    help: Some(
                        "give both tools the same `effect`: else the same operation would be sent again through one tool and answered from the store through the other".into(),
                    ),
                });
            }
            Some(_) => {}
            None => {
                first.insert(action, (t, *effect));
            }
        }
    }
}
