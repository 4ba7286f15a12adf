//! From `intentplane.toml` to a [`Setup`]: servers, tools, the bundle
//! (packs built at start-up through check → codegen → bundle, the inline
//! tools checked from the TOML as one more pack), the world, the session's
//! mandates and each tool's mapping. Every problem found is collected; the
//! load goes as far as it can so that one run reports them all.

use super::declared::{Sites, ToolSite};
use super::diag::{ConfigError, ConfigReport, Diag, Reported};
use super::file::{ConfigFile, ParamFile, PassthroughFile, S, ToolFile};
use super::lower::{Lowering, sorted};
use super::mapping::SCALES;
use super::{ArgMap, ServerConfig, SessionConfig, Setup, ToolConfig, ToolMode, Transport};
use crate::bundle::{Bundle, TableAction};
use crate::diagnostics::{PackDiagnostic, suggest};
use crate::gateway::mandate::MandateSpec;
use crate::gateway::world::{Approver, World};
use crate::gateway::{Effect, MandateToken};
use crate::ir::{RegistryShape, Type};
use crate::keys::SecretKey;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The store's file when neither the config nor the world names one, next
/// to the config.
pub const DEFAULT_STORE: &str = "intentplane.db";
/// A config larger than this is not a config.
const MAX_CONFIG_LEN: u64 = 1024 * 1024;

/// `effect = "read" | "write"`, as the config spells it.
fn parse_effect(word: &str) -> Option<Effect> {
    [Effect::Read, Effect::Write]
        .into_iter()
        .find(|e| e.name() == word)
}

/// Everything [`Setup`] holds except the open store: what `--check`
/// builds.
pub struct Checked {
    pub config_path: PathBuf,
    pub servers: Vec<ServerConfig>,
    pub tools: Vec<ToolConfig>,
    pub bundle: Bundle,
    pub world: World,
    /// The store `load` opens (an SQLite file or a `postgres://` URL).
    pub store_path: PathBuf,
    pub session: SessionConfig,
    /// Where each tool was written (for the check against the servers).
    pub sites: Sites,
}

/// Loads and checks the config, then opens the store.
pub fn load(path: &Path) -> Result<Setup, ConfigReport> {
    let (report, setup) = load_with_report(path);
    match setup {
        Some(s) if !report.has_errors() => Ok(s),
        _ => Err(report),
    }
}

/// [`load`], with the warnings of a config that loads.
pub fn load_with_report(path: &Path) -> (ConfigReport, Option<Setup>) {
    let (mut report, checked) = check(path);
    let Some(c) = checked else {
        return (report, None);
    };
    match crate::store::open(&c.store_path, true) {
        Ok(store) => (
            report,
            Some(Setup {
                config_path: c.config_path,
                servers: c.servers,
                tools: c.tools,
                bundle: c.bundle,
                world: c.world,
                store,
                session: c.session,
                sites: c.sites,
            }),
        ),
        Err(e) => {
            let file = path.display().to_string();
            let source = std::fs::read_to_string(path).unwrap_or_default();
            report.items.push(Reported {
                file,
                source,
                diag: Diag::Config(ConfigError::Load {
                    what: "store",
                    message: format!("`{}`: {e}", c.store_path.display()),
                    span: None,
                    help: None,
                }),
            });
            (report, None)
        }
    }
}

/// Everything [`load`] checks, without opening the store or starting
/// anything: the report, and what was built when there is no error.
pub fn check(path: &Path) -> (ConfigReport, Option<Checked>) {
    let mut l = Loader {
        path: path.to_path_buf(),
        dir: path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf(),
        file: path.display().to_string(),
        source: String::new(),
        report: ConfigReport::default(),
    };
    let out = l.run();
    let out = if l.report.has_errors() { None } else { out };
    (l.report, out)
}

struct Loader {
    path: PathBuf,
    dir: PathBuf,
    file: String,
    source: String,
    report: ConfigReport,
}

type Span = std::ops::Range<usize>;

fn sp(r: Span) -> miette::SourceSpan {
    (r.start, r.end.saturating_sub(r.start)).into()
}

/// `${VAR}` expanded from `lookup` (`$$` is a `$`, any other `$` kept);
/// `Err` names the variable that is not set (empty: an unclosed `${`).
pub(super) fn expand_env(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('{') {
            let Some(end) = r.find('}') else {
                return Err(String::new());
            };
            let name = &r[..end];
            let valid =
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(String::new());
            }
            out.push_str(&lookup(name).ok_or_else(|| name.to_string())?);
            rest = &r[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `key` set to `value` in an environment, in place of any value before.
fn set(env: &mut Vec<(String, String)>, key: &str, value: String) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_string(), value));
}

/// A TOML value as JSON (dates as their text).
fn to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(to_json).collect()),
        toml::Value::Table(t) => {
            Value::Object(t.iter().map(|(k, v)| (k.clone(), to_json(v))).collect())
        }
    }
}

impl Loader {
    fn err(&mut self, e: ConfigError) {
        self.report.items.push(Reported {
            file: self.file.clone(),
            source: self.source.clone(),
            diag: Diag::Config(e),
        });
    }

    fn pack_diag(&mut self, d: crate::diagnostics::PackDiagnostic) {
        self.report.items.push(Reported {
            file: self.file.clone(),
            source: self.source.clone(),
            diag: Diag::Pack(d),
        });
    }

    /// A path the config names, relative to the config's folder.
    fn rel(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    /// The config file's folder, absolute: what `${CONFIG_DIR}` expands to.
    fn config_dir(&self) -> String {
        std::path::absolute(&self.dir)
            .unwrap_or_else(|_| self.dir.clone())
            .display()
            .to_string()
    }

    /// A server's `args`, `env` or `cwd` value with each `${VAR}` expanded
    /// from the proxy's environment (`$$` is a `$`); `${CONFIG_DIR}` is the
    /// config's folder whatever the environment says, so that an example
    /// runs from wherever it is checked out. An unset variable is an error
    /// here, never an empty string.
    fn expand(&mut self, server: &str, v: &S<String>) -> Option<String> {
        let dir = self.config_dir();
        let lookup = |name: &str| {
            if name == "CONFIG_DIR" {
                Some(dir.clone())
            } else {
                std::env::var(name).ok()
            }
        };
        match expand_env(v.get_ref(), lookup) {
            Ok(value) => Some(value),
            Err(var) => {
                self.err(ConfigError::Env {
                    server: server.to_string(),
                    help: Some(if var.is_empty() {
                        "write a variable as `${NAME}`, and a `$` as `$$`".into()
                    } else {
                        format!("set `{var}` in the environment `ipc mcp` runs in (an unset variable is never read as empty)")
                    }),
                    var,
                    span: sp(v.span()),
                });
                None
            }
        }
    }

    /// The path when it exists, else a diagnostic at its span.
    fn existing(
        &mut self,
        what: &'static str,
        s: &S<String>,
        help: Option<String>,
    ) -> Option<PathBuf> {
        let p = self.rel(s.get_ref());
        if p.exists() {
            Some(p)
        } else {
            self.err(ConfigError::MissingFile {
                what,
                path: p.display().to_string(),
                span: sp(s.span()),
                help,
            });
            None
        }
    }

    fn run(&mut self) -> Option<Checked> {
        match std::fs::metadata(&self.path) {
            Ok(m) if m.len() > MAX_CONFIG_LEN => {
                self.err(ConfigError::Read {
                    path: self.file.clone(),
                    reason: format!(
                        "{} bytes is larger than a config may be ({MAX_CONFIG_LEN})",
                        m.len()
                    ),
                    help: None,
                });
                return None;
            }
            _ => {}
        }
        self.source = match std::fs::read_to_string(&self.path) {
            Ok(s) => s,
            Err(e) => {
                let help = (e.kind() == std::io::ErrorKind::NotFound && self.path.is_relative())
                    .then(|| {
                        let here = std::env::current_dir()
                            .map(|d| d.display().to_string())
                            .unwrap_or_else(|_| "the current folder".into());
                        format!(
                            "a relative `--config` is looked for in the folder `ipc mcp` was started from, here `{here}`; an MCP client starts it from a folder of its own: give the config's absolute path"
                        )
                    });
                self.err(ConfigError::Read {
                    path: self.file.clone(),
                    reason: e.to_string().to_lowercase(),
                    help,
                });
                return None;
            }
        };
        let cfg: ConfigFile = match toml::from_str(&self.source) {
            Ok(c) => c,
            Err(e) => {
                let message = e.message().trim_end_matches('\n').to_string();
                let help = message.starts_with("unknown field").then(|| {
                    "a misspelt key is never ignored; the keys are listed in docs/mcp.md, section \"MCP proxy configuration\"".to_string()
                });
                self.err(ConfigError::Toml {
                    message,
                    span: e.span().map(sp),
                    help,
                });
                return None;
            }
        };
        let servers = self.servers(&cfg);
        self.tool_names(&cfg);
        let inline: Vec<&S<ToolFile>> = cfg
            .tools
            .iter()
            .filter(|t| t.get_ref().passthrough.is_none() && t.get_ref().is_inline())
            .collect();
        let (bundle, inline_pack) = self.bundle(&cfg, &inline)?;
        let mut world = self.world(&cfg, &bundle, inline_pack.as_deref())?;
        if let (Some(b), Some(p)) = (&cfg.bundle, &bundle.1) {
            let key = match &cfg.bundle_key {
                Some(k) => {
                    let path = self.existing("bundle key", k, None)?;
                    match crate::keys::load_public(&path) {
                        Ok(k) => Some(k),
                        Err(e) => {
                            self.load_err("bundle key", e.to_string(), k.span());
                            return None;
                        }
                    }
                }
                None => None,
            };
            if let Err(e) = bundle.0.authenticate(
                &p.display().to_string(),
                key.as_ref(),
                &world.bundle_keys,
                false,
            ) {
                self.load_err("bundle", e.to_string(), b.span());
                return None;
            }
        }
        let bundle = bundle.0;
        // which pack each decided tool's action belongs to
        let mut used_packs: Vec<String> = vec![];
        let mut actions: Vec<(&S<ToolFile>, &TableAction)> = vec![];
        for t in &cfg.tools {
            let tf = t.get_ref();
            if tf.is_passthrough() {
                continue;
            }
            let Some(a) =
                &tf.action
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
                    self.err(ConfigError::UnknownAction {
                        action: a.get_ref().clone(),
                        span: sp(a.span()),
                        help,
                    });
                }
            }
        }
        let session = self.session(&cfg, &bundle, &used_packs, &actions, &mut world);
        let mut tools = vec![];
        let mut sites = Sites {
            file: self.file.clone(),
            source: self.source.clone(),
            tools: vec![],
        };
        let mut decided = vec![];
        for t in &cfg.tools {
            let tf = t.get_ref();
            let base = servers.iter().find_map(|s| match &s.transport {
                Transport::Stdio { cwd, .. } if &s.name == tf.server.get_ref() => {
                    Some(std::path::absolute(cwd).unwrap_or_else(|_| cwd.clone()))
                }
                _ => None,
            });
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
                let claims = session.as_ref().and_then(|s| {
                    s.mandates
                        .iter()
                        .find(|(p, _)| p == &ta.pack)
                        .and_then(|(_, tok)| tok.get("mandate")?.get("claims").cloned())
                });
                let mut args = HashMap::new();
                // a word that is none is reported by `tool_names`
                let effect = tf
                    .effect
                    .as_ref()
                    .and_then(|e| parse_effect(e.get_ref()))
                    .unwrap_or_default();
                decided.push((t, ta.action.name.clone(), effect));
                if let Some(params) = self.mapping(tf, ta, claims.as_ref(), &mut args) {
                    site.args = args.into_iter().collect();
                    sites.tools.push(site);
                    tools.push(ToolConfig {
                        server: tf.server.get_ref().clone(),
                        tool: tf.tool.get_ref().clone(),
                        mode: ToolMode::Action {
                            action: ta.action.name.clone(),
                            params,
                            effect,
                        },
                        base,
                    });
                }
            }
        }
        self.effects_agree(&decided);
        let store_path = match (&cfg.store, &world.store) {
            (Some(s), _) => match s.get_ref() {
                u if crate::store::postgres::is_url(u) => PathBuf::from(u),
                f => self.rel(f),
            },
            (None, Some(w)) => w.clone(),
            (None, None) => self.dir.join(DEFAULT_STORE),
        };
        Some(Checked {
            config_path: self.path.clone(),
            servers,
            tools,
            bundle,
            world,
            store_path,
            session: session?,
            sites,
        })
    }

    fn load_err(&mut self, what: &'static str, message: String, span: Span) {
        self.err(ConfigError::Load {
            what,
            message,
            span: Some(sp(span)),
            help: None,
        });
    }

    fn servers(&mut self, cfg: &ConfigFile) -> Vec<ServerConfig> {
        let named = super::environ::Named::of(cfg);
        let mut out = vec![];
        let mut seen: HashMap<String, Span> = HashMap::new();
        for s in &cfg.servers {
            let sf = s.get_ref();
            let name = sf.name.get_ref().clone();
            if let Some(first) = seen.get(&name) {
                let first = first.clone();
                self.err(ConfigError::Duplicate {
                    kind: "server",
                    name,
                    span: sp(sf.name.span()),
                    first: sp(first),
                });
                continue;
            }
            seen.insert(name.clone(), sf.name.span());
            let transport = match (&sf.command, &sf.url) {
                (Some(c), None) => {
                    if let Some(at) = sf
                        .token_file
                        .as_ref()
                        .or(sf.token_env.as_ref())
                        .or(sf.ca_file.as_ref())
                    {
                        self.err(ConfigError::Server {
                            name,
                            message: "`token_file`, `token_env` and `ca_file` are for a `url`, not a command".into(),
                            span: sp(at.span()),
                        });
                        continue;
                    }
                    let cwd = match &sf.cwd {
                        Some(d) => {
                            let Some(text) = self.expand(&name, d) else {
                                continue;
                            };
                            let d = S::new(d.span(), text);
                            match self.existing("working directory", &d, None) {
                                Some(p) => p,
                                None => continue,
                            }
                        }
                        None => self.dir.clone(),
                    };
                    let Some(args) = sf
                        .args
                        .iter()
                        .map(|a| self.expand(&name, a))
                        .collect::<Option<Vec<_>>>()
                    else {
                        continue;
                    };
                    // a command with a `/` is a path relative to the
                    // config; a bare name (`ipc`, `npx`) is kept as is
                    let command = c.get_ref().clone();
                    if command.contains('/') && self.existing("command", c, None).is_none() {
                        continue;
                    }
                    Transport::Stdio {
                        // absolute: the child starts in its `cwd`, where a
                        // path relative to the proxy's folder is not
                        command: if command.contains('/') {
                            let p = self.rel(&command);
                            std::path::absolute(&p).unwrap_or(p).display().to_string()
                        } else {
                            command
                        },
                        args,
                        env: match self.server_env(&name, sf, &named) {
                            Some(e) => e,
                            None => continue,
                        },
                        cwd,
                    }
                }
                (None, Some(u)) => {
                    if !sf.args.is_empty()
                        || !sf.env.is_empty()
                        || !sf.env_pass.is_empty()
                        || sf.cwd.is_some()
                    {
                        self.err(ConfigError::Server {
                            name,
                            message: "`args`, `env` and `cwd` are for a command, not a URL".into(),
                            span: sp(s.span()),
                        });
                        continue;
                    }
                    match super::remote::remote(&self.dir, &name, sf, u) {
                        Ok(r) => Transport::Http(r),
                        Err(errs) => {
                            for e in errs {
                                self.err(e);
                            }
                            continue;
                        }
                    }
                }
                (c, _) => {
                    self.err(ConfigError::Server {
                        name,
                        message: if c.is_some() {
                            "has both `command` and `url`".into()
                        } else {
                            "has neither `command` nor `url`".into()
                        },
                        span: sp(s.span()),
                    });
                    continue;
                }
            };
            out.push(ServerConfig {
                name: sf.name.get_ref().clone(),
                transport,
            });
        }
        out
    }

    /// A server's whole environment (`environ.rs`): the base variables
    /// the proxy's environment sets, then `env_pass` forwarded from it (a
    /// variable another server names is refused), then `env` expanded
    /// ([`Self::expand`]) and a value that starts with `./` or `../`
    /// resolved against the config's folder. An unset variable is an
    /// error here, never an empty string.
    fn server_env(
        &mut self,
        server: &str,
        sf: &super::file::ServerFile,
        named: &super::environ::Named,
    ) -> Option<Vec<(String, String)>> {
        let mut out = super::environ::base();
        let mut ok = true;
        for var in &sf.env_pass {
            let name = var.get_ref();
            if let Some(owner) = named.owner_for(name, server) {
                self.err(ConfigError::EnvSecret {
                    server: server.to_string(),
                    var: name.clone(),
                    owner: owner.to_string(),
                    span: sp(var.span()),
                });
                ok = false;
                continue;
            }
            match std::env::var(name) {
                Ok(v) => set(&mut out, name, v),
                Err(_) => {
                    self.err(ConfigError::Env {
                        server: server.to_string(),
                        var: name.clone(),
                        span: sp(var.span()),
                        help: Some(
                            "`env_pass` forwards variables the proxy is started with: set it, or remove it from the list".into(),
                        ),
                    });
                    ok = false;
                }
            }
        }
        for (k, v) in &sf.env {
            match self.expand(server, v) {
                Some(value) => {
                    let value = if value.starts_with("./") || value.starts_with("../") {
                        self.rel(&value).display().to_string()
                    } else {
                        value
                    };
                    set(&mut out, k, value);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// Each tool: a declared server, a name given once, exactly one mode.
    fn tool_names(&mut self, cfg: &ConfigFile) {
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
                self.err(ConfigError::UnknownServer {
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
                self.err(ConfigError::Duplicate {
                    kind: "tool",
                    name: name.clone(),
                    span: sp(tf.tool.span()),
                    first: sp(first),
                });
            }
            seen.insert(name.clone(), tf.tool.span());
            if let Some(p) = &tf.passthrough
                && let PassthroughFile::Word(w) = p.get_ref()
                && w != "unguarded"
            {
                self.err(ConfigError::Tool {
                    tool: name.clone(),
                    message: format!("`passthrough = \"{}\"` is not a passthrough", crate::base::json::echo(w)),
                    span: sp(p.span()),
                    help: Some("`passthrough = true` for a read-only tool, `passthrough = \"unguarded\"` to pass one that writes on purpose".into()),
                });
                continue;
            }
            if let Some(e) = &tf.effect {
                self.effect_word(&name, tf, e);
            }
            match &tf.passthrough {
                Some(p)
                    if tf.is_passthrough()
                        && (tf.action.is_some() || tf.is_inline() || !tf.params.is_empty()) =>
                {
                    self.err(ConfigError::Tool {
                        tool: name,
                        message: "a passthrough tool is forwarded as is: it has no action or parameters".into(),
                        span: sp(p.span()),
                        help: Some("remove `passthrough` to have the gateway decide every call, or remove the action".into()),
                    });
                }
                _ if tf.is_passthrough() => {}
                _ if tf.action.is_none() && !tf.is_inline() => self.err(ConfigError::Tool {
                    tool: name,
                    message: "neither `passthrough = true` nor an `action`".into(),
                    span: sp(t.span()),
                    help: Some("a read-only tool: `passthrough = true`; otherwise `action = \"pack.action\"` with its `[tools.params.P]`, or an inline declaration".into()),
                }),
                _ => {}
            }
        }
    }

    /// A tool's `effect = "..."`: a word of [`Effect`]'s, and only on a
    /// tool whose calls are decided.
    fn effect_word(&mut self, name: &str, tf: &ToolFile, e: &S<String>) {
        let word = e.get_ref();
        if parse_effect(word).is_none() {
            let close = suggest(word, ["read", "write"]);
            self.err(ConfigError::Effect {
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
            self.err(ConfigError::Effect {
                tool: name.to_string(),
                message: "a passthrough tool is forwarded as is: it has no `effect`".into(),
                span: sp(e.span()),
                help: Some("remove `effect`, or remove `passthrough` and map the tool onto an action, so that the gateway decides each call".into()),
            });
        }
    }

    /// One action mapped as a read by one tool and as a write by another:
    /// an error at the later tool's `effect` (or its `tool`).
    fn effects_agree(&mut self, decided: &[(&S<ToolFile>, String, Effect)]) {
        let mut first: HashMap<&str, (&S<ToolFile>, Effect)> = HashMap::new();
        for (t, action, effect) in decided {
            match first.get(action.as_str()) {
                Some((other, theirs)) if theirs != effect => {
                    let tf = t.get_ref();
                    let span = tf.effect.as_ref().map_or(tf.tool.span(), |e| e.span());
                    let other = other.get_ref().tool.get_ref();
                    self.err(ConfigError::Effect {
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

    /// The bundle: packs built now (with the inline pack checked from the
    /// TOML), or a bundle file. Also the inline pack's name.
    #[allow(clippy::type_complexity)]
    fn bundle(
        &mut self,
        cfg: &ConfigFile,
        inline: &[&S<ToolFile>],
    ) -> Option<((Bundle, Option<PathBuf>), Option<String>)> {
        let packs = cfg.packs.as_ref();
        match (packs, &cfg.bundle) {
            (Some(_), Some(b)) => {
                self.err(ConfigError::Packs {
                    message: "`packs` and `bundle` are both given".into(),
                    span: sp(b.span()),
                });
                None
            }
            (None, Some(b)) => {
                if let Some(t) = inline.first() {
                    self.err(ConfigError::Tool {
                        tool: t.get_ref().tool.get_ref().clone(),
                        message: "an inline tool needs packs built at start-up; a signed bundle cannot be extended".into(),
                        span: sp(t.span()),
                        help: Some("declare the action in a pack, or give `packs = [...]` instead of `bundle`".into()),
                    });
                    return None;
                }
                let path = self.existing("bundle", b, None)?;
                match Bundle::load(&path, None) {
                    Ok(bundle) => Some(((bundle, Some(path)), None)),
                    Err(e) => {
                        self.load_err("bundle", e.to_string(), b.span());
                        None
                    }
                }
            }
            (packs, None) => {
                let mut paths = vec![];
                let mut missing = false;
                for p in packs.map(|p| p.get_ref().as_slice()).unwrap_or_default() {
                    let path = self.rel(p.get_ref());
                    let file = if path.is_dir() {
                        path.join(crate::check::PACK_FILE)
                    } else {
                        path.clone()
                    };
                    if !file.is_file() {
                        missing = true;
                        self.err(ConfigError::MissingFile {
                            what: if path.is_dir() { "pack file" } else { "pack folder" },
                            path: file.display().to_string(),
                            span: sp(p.span()),
                            help: Some(format!(
                                "a pack is a folder holding `{}` (or a `.ipc` file); the path is relative to the config's folder",
                                crate::check::PACK_FILE
                            )),
                        });
                    }
                    paths.push(path);
                }
                let mut extra = vec![];
                let mut inline_name = None;
                if cfg.pack.is_some() || !inline.is_empty() {
                    let source = self.source.clone();
                    let mut low = Lowering::new(&source);
                    let ast = low.file(cfg.pack.as_ref(), inline);
                    inline_name = Some(ast.header.name.text.clone());
                    for e in std::mem::take(&mut low.config) {
                        self.err(e);
                    }
                    let syntax = std::mem::take(&mut low.syntax);
                    let lowered_ok = syntax.is_empty();
                    for d in syntax {
                        self.pack_diag(d);
                    }
                    if lowered_ok {
                        extra.push(crate::check::check_ast(&self.file, &self.source, &ast));
                    }
                }
                if missing || self.report.has_errors() {
                    // still check what can be checked
                    for c in &extra {
                        for d in c.diagnostics.clone() {
                            self.pack_diag(d);
                        }
                    }
                    return None;
                }
                if paths.is_empty() && extra.is_empty() {
                    self.err(ConfigError::Packs {
                        message: "no packs, no bundle and no inline tool".into(),
                        span: sp(0..0),
                    });
                    return None;
                }
                let from_files = paths.len();
                let report = crate::compile::build_with(&paths, extra);
                for c in &report.checked {
                    for d in &c.diagnostics {
                        self.report.items.push(Reported {
                            file: c.file.clone(),
                            source: c.source.clone(),
                            diag: Diag::Pack(d.clone()),
                        });
                    }
                }
                for p in &report.problems {
                    self.report.items.push(Reported {
                        file: p.file.clone(),
                        source: p.source.clone(),
                        diag: Diag::Pack(p.diagnostic.clone()),
                    });
                }
                if let Some(e) = &report.failure {
                    self.err(ConfigError::Load {
                        what: "bundle",
                        message: e.to_string(),
                        span: None,
                        help: None,
                    });
                }
                // the inline pack's guarantees, proven as `ipc build`
                // proves a pack's (the packs' own are `ipc build`'s)
                if let Some(b) = &report.bundle {
                    let inline = report.checked.get(from_files..).unwrap_or_default();
                    let inputs = crate::guarantee::inputs(inline);
                    if crate::guarantee::any(&inputs) {
                        let proofs = crate::guarantee::prove(b, &inputs);
                        let problems = crate::guarantee::problems(&proofs, &inputs);
                        let broken = !problems.is_empty();
                        for (proof, mut p) in problems {
                            // no scenario is printed here: the help has it
                            if let (
                                PackDiagnostic::GuaranteeViolated { help, action, .. },
                                Some(s),
                            ) = (&mut p.diagnostic, &proof.scenario)
                            {
                                *help = Some(format!(
                                    "add the missing rule to `{action}`; the counterexample, as a scenario: {s}"
                                ));
                            }
                            self.report.items.push(Reported {
                                file: p.file,
                                source: p.source,
                                diag: Diag::Pack(p.diagnostic),
                            });
                        }
                        if broken {
                            return None;
                        }
                    }
                }
                report.bundle.map(|b| ((b, None), inline_name))
            }
        }
    }

    /// The world file (without the inline pack, whose registries the TOML
    /// names one file each), then the inline pack's registries.
    fn world(
        &mut self,
        cfg: &ConfigFile,
        bundle: &(Bundle, Option<PathBuf>),
        inline: Option<&str>,
    ) -> Option<World> {
        let table = &bundle.0.table;
        let mut world = match &cfg.world {
            Some(w) => {
                let path = self.existing("world", w, None)?;
                let mut without = table.clone();
                without.packs.retain(|p| Some(p.name.as_str()) != inline);
                match World::load(&path, &without) {
                    Ok(world) => world,
                    Err(e) => {
                        let help = miette::Diagnostic::help(&e).map(|h| h.to_string());
                        self.err(ConfigError::Load {
                            what: "world",
                            message: e.to_string(),
                            span: Some(sp(w.span())),
                            help,
                        });
                        return None;
                    }
                }
            }
            None => World::empty(),
        };
        if let (Some(name), Some(p)) = (inline, &cfg.pack) {
            let tp = table.pack(name)?;
            for (rname, r) in sorted(&p.get_ref().registries) {
                let Some(reg) = tp.registries.iter().find(|x| &x.name == rname.get_ref()) else {
                    continue;
                };
                let file = &r.get_ref().file;
                let Some(path) = self.existing("registry file", file, Some(
                    "a missing registry is never read as an empty one; if it is meant to be empty, write `{}` to the file".into(),
                )) else {
                    continue;
                };
                if let Err(e) = world.load_registry_file(name, reg, &path) {
                    self.load_err("registry", e.to_string(), file.span());
                } else if reg.shape
                    == (RegistryShape::Set {
                        element: Type::Path,
                    })
                {
                    self.paths_from_config(&mut world, name, &reg.name, file.span());
                }
            }
        }
        Some(world)
    }

    /// A `set<Path>` registry of the config: each relative folder is the
    /// config's (`workspace` is `<config folder>/workspace`), as every
    /// relative path in a config is, so that an example's trusted folder
    /// lives beside it wherever it is checked out; a folder that exists is
    /// named by its real path, as a stdio server's paths are decided.
    fn paths_from_config(&mut self, world: &mut World, pack: &str, registry: &str, span: Span) {
        let dir = self.config_dir();
        let Some(owners) = world
            .registries
            .get_mut(pack)
            .and_then(|m| m.get_mut(registry))
        else {
            return;
        };
        for records in owners.values_mut() {
            for (_, value) in records.values.iter_mut() {
                let lexical = match value.starts_with('/') {
                    true => crate::gateway::normalize::path(value),
                    false => crate::gateway::normalize::path(&format!("{dir}/{value}")),
                };
                // an existing folder as the server's paths are resolved
                // (`mapping::resolve_links`): its real path
                let real = lexical.map(|abs| {
                    std::fs::canonicalize(&abs)
                        .ok()
                        .and_then(|p| p.to_str().map(str::to_string))
                        .unwrap_or(abs)
                });
                match real {
                    Ok(abs) => {
                        if let Some(n) = records.names.remove(value.as_str()) {
                            records.names.insert(abs.clone(), n);
                        }
                        *value = abs;
                    }
                    Err(e) => {
                        self.load_err("registry", e, span.clone());
                        return;
                    }
                }
            }
        }
    }

    /// The session's mandates: read from `token`, or issued now, one per
    /// pack the tools use; the issuer's key verifies them and the user's
    /// key approves as the user.
    fn session(
        &mut self,
        cfg: &ConfigFile,
        bundle: &Bundle,
        used: &[String],
        actions: &[(&S<ToolFile>, &TableAction)],
        world: &mut World,
    ) -> Option<SessionConfig> {
        let Some(s) = &cfg.session else {
            self.err(ConfigError::Session {
                message: "no `[session]`".into(),
                span: sp(0..0),
                help: Some("the session's mandate: `[session]` with `user`, `scopes`, `claims`, `budget` and `issuer_key`, or `token = \"mandate.json\"`".into()),
            });
            return None;
        };
        let sf = s.get_ref();
        let session_span = s.span();
        let mut mandates: Vec<(String, Value)> = vec![];
        let user: String;
        let mut issuer_key: Option<SecretKey> = None;
        if let Some(t) = &sf.token {
            if sf.user.is_some()
                || sf.issuer_key.is_some()
                || !sf.claims.is_empty()
                || sf.budget.is_some()
                || !sf.scopes.is_empty()
            {
                self.err(ConfigError::Session {
                    message: "`token` and the fields that issue one are both given".into(),
                    span: sp(t.span()),
                    help: Some("use an existing token (`token`), or issue one at start-up (`user`, `scopes`, `claims`, `budget`, `issuer_key`), not both".into()),
                });
                return None;
            }
            let path = self.existing("token", t, None)?;
            let tok = crate::base::json::read_file(&path).and_then(|v| {
                serde_json::from_value::<MandateToken>(v.clone())
                    .map(|m| (v, m))
                    .map_err(|e| e.to_string())
            });
            let (value, parsed) = match tok {
                Ok(x) => x,
                Err(e) => {
                    self.err(ConfigError::Session {
                        message: e,
                        span: sp(t.span()),
                        help: None,
                    });
                    return None;
                }
            };
            if let Some(other) = used.iter().find(|p| **p != parsed.mandate.pack) {
                self.err(ConfigError::Session {
                    message: format!("the token covers pack `{}`, but a tool is an action of pack `{other}`", parsed.mandate.pack),
                    span: sp(t.span()),
                    help: Some("a mandate covers one pack: issue the session's mandates from the config instead".into()),
                });
                return None;
            }
            // refused now rather than at every call
            let now = match world.clock.map_or_else(crate::gateway::unix_now, Ok) {
                Ok(t) => t,
                Err(e) => {
                    self.err(clock_error(e));
                    return None;
                }
            };
            let problem = match world.mandate_keys.get(&parsed.key_id) {
                None => Some(format!(
                    "the token is signed by key `{}`, which is not among the world's `mandate_keys`",
                    parsed.key_id
                )),
                Some(key) => {
                    let msg = crate::canonical::to_jcs(&parsed.mandate).map_err(|e| e.to_string());
                    match msg.and_then(|m| {
                        key.verify(m.as_bytes(), &parsed.signature)
                            .map_err(|e| e.to_string())
                    }) {
                        Err(_) => Some("the token's signature does not verify".into()),
                        Ok(()) if parsed.mandate.expires_at <= now => {
                            Some(format!("the token `{}` has expired", parsed.mandate.id))
                        }
                        Ok(()) => None,
                    }
                }
            };
            if let Some(message) = problem {
                self.err(ConfigError::Session {
                    message,
                    span: sp(t.span()),
                    help: Some("issue a new one with `ipc token issue`, signed by a key the world lists under `mandate_keys`".into()),
                });
                return None;
            }
            user = parsed.mandate.user.clone();
            mandates.push((parsed.mandate.pack.clone(), value));
        } else {
            let Some(u) = &sf.user else {
                self.err(ConfigError::Session {
                    message: "no `user` (or `token`)".into(),
                    span: sp(session_span),
                    help: Some("`user = \"emma\"`: the person the agent acts for".into()),
                });
                return None;
            };
            user = u.get_ref().clone();
            let Some(k) = &sf.issuer_key else {
                self.err(ConfigError::Session {
                    message: "no `issuer_key` to sign the session's mandate".into(),
                    span: sp(session_span),
                    help: Some("`issuer_key = \"keys/issuer.key\"` (from `ipc keygen`)".into()),
                });
                return None;
            };
            let key = self.secret("issuer key", k)?;
            let budget = match &sf.budget {
                None => 0,
                Some(b) => {
                    let text = match b.get_ref() {
                        toml::Value::String(s) => s.trim().to_string(),
                        toml::Value::Integer(i) => i.to_string(),
                        toml::Value::Float(f) => format!("{f}"),
                        other => format!("{other}"),
                    };
                    match crate::base::Money::parse(&text).map(crate::base::Money::minor) {
                        Ok(m) if m >= 0 => m,
                        Ok(_) => {
                            self.err(ConfigError::Session {
                                message: "the budget cannot be negative".into(),
                                span: sp(b.span()),
                                help: None,
                            });
                            return None;
                        }
                        Err(e) => {
                            self.err(ConfigError::Session {
                                message: format!("budget: {e}"),
                                span: sp(b.span()),
                                help: Some(
                                    "an amount in major units: `budget = \"2000.00\"`".into(),
                                ),
                            });
                            return None;
                        }
                    }
                }
            };
            // a budget is per mandate: two packs with budgeted tools would
            // each get the whole session budget
            let budgeted: Vec<&str> = used
                .iter()
                .filter(|p| {
                    actions
                        .iter()
                        .any(|(_, a)| &a.pack == *p && a.action.budget.is_some())
                })
                .map(String::as_str)
                .collect();
            if budgeted.len() > 1 && budget > 0 {
                self.err(ConfigError::Session {
                    message: format!("tools of packs {} both spend the budget, and a mandate covers one pack", budgeted.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(" and ")),
                    span: sp(sf.budget.as_ref().map(|b| b.span()).unwrap_or(session_span)),
                    help: Some("the session's budget would be counted once per pack: keep the budgeted tools in one pack".into()),
                });
                return None;
            }
            // every claim goes to the packs that declare it
            let mut ok = true;
            for name in sf.claims.keys() {
                let all: Vec<&str> = bundle
                    .table
                    .packs
                    .iter()
                    .flat_map(|tp| tp.claims.iter().map(|c| c.name.as_str()))
                    .collect();
                if !all.contains(&name.get_ref().as_str()) {
                    self.err(ConfigError::Session {
                        message: format!("no pack declares the claim `{}`", name.get_ref()),
                        span: sp(name.span()),
                        help: suggest(name.get_ref(), all.iter().copied())
                            .or_else(|| Some(format!("the claims are: {}", all.join(", ")))),
                    });
                    ok = false;
                }
            }
            if !ok {
                return None;
            }
            let now = match crate::gateway::unix_now() {
                Ok(t) => t,
                Err(e) => {
                    self.err(clock_error(e));
                    return None;
                }
            };
            let ttl = sf.ttl.as_ref().map(|t| *t.get_ref()).unwrap_or(3600);
            let targets: Vec<String> = if used.is_empty() {
                bundle
                    .table
                    .packs
                    .iter()
                    .take(1)
                    .map(|p| p.name.clone())
                    .collect()
            } else {
                used.to_vec()
            };
            for pack in &targets {
                let Some(tp) = bundle.table.pack(pack) else {
                    continue;
                };
                let mut claims = vec![];
                for (name, v) in &sf.claims {
                    if !tp.claims.iter().any(|c| &c.name == name.get_ref()) {
                        continue;
                    }
                    match to_json(v.get_ref()) {
                        Value::Array(items) => {
                            claims.extend(items.into_iter().map(|i| (name.get_ref().clone(), i)))
                        }
                        one => claims.push((name.get_ref().clone(), one)),
                    }
                }
                let spec = MandateSpec {
                    user: user.clone(),
                    owner: sf.owner.clone(),
                    scopes: sf.scopes.clone(),
                    claims,
                    budget,
                    calls: sf.calls.unwrap_or(100),
                    issued_at: now,
                    ttl,
                    id: None,
                    only: vec![],
                    strict: vec![],
                };
                match crate::gateway::mandate::issue(&spec, tp, &[], &key) {
                    Ok(tok) => match serde_json::to_value(&tok) {
                        Ok(v) => mandates.push((pack.clone(), v)),
                        Err(e) => {
                            self.err(ConfigError::Session {
                                message: e.to_string(),
                                span: sp(session_span),
                                help: None,
                            });
                            return None;
                        }
                    },
                    Err(e) => {
                        self.err(ConfigError::Session {
                            message: format!("pack `{pack}`: {e}"),
                            span: sp(session_span),
                            help: None,
                        });
                        return None;
                    }
                }
            }
            // the proxy issued the mandates: its issuer verifies them
            let public = key.public();
            world.mandate_keys.insert(public.id(), public);
            issuer_key = Some(key);
        }
        let user_key = match &sf.user_key {
            Some(k) => {
                let key = self.secret("user key", k)?;
                match world.approvers.get(&user) {
                    Some(a) if a.key.id() != key.public().id() => {
                        self.err(ConfigError::Session {
                            message: format!(
                                "the world's approver `{user}` has another key than `user_key`"
                            ),
                            span: sp(k.span()),
                            help: Some("the user approves with one key: make them the same".into()),
                        });
                        return None;
                    }
                    Some(_) => {}
                    None => {
                        world
                            .approvers
                            .insert(user.clone(), Approver::user(key.public()));
                        if let Err(e) = world.check_approver_keys() {
                            self.err(ConfigError::Session {
                                message: e,
                                span: sp(k.span()),
                                help: None,
                            });
                            return None;
                        }
                    }
                }
                Some(key)
            }
            None => None,
        };
        let approvals_dir = match &sf.approvals_dir {
            Some(d) => {
                let p = self.existing(
                    "approvals folder",
                    d,
                    Some("create the folder where `ipc approve` output is dropped".into()),
                )?;
                Some(p)
            }
            None => None,
        };
        let decline_for = match &sf.decline_for {
            Some(d) if *d.get_ref() < 0 => {
                self.err(ConfigError::Session {
                    message: "`decline_for` cannot be negative".into(),
                    span: sp(d.span()),
                    help: Some("seconds a declined step-up stands: `decline_for = 600`".into()),
                });
                return None;
            }
            Some(d) => *d.get_ref(),
            None => super::DEFAULT_DECLINE_FOR,
        };
        let mandate_requests = match &sf.mandate_requests {
            Some(r) if *r.get_ref() && issuer_key.is_none() => {
                self.err(ConfigError::Session {
                    message: "`mandate_requests` needs a session the proxy issues: a `token` session has no key to sign a child mandate".into(),
                    span: sp(r.span()),
                    help: Some("issue the session from `[session]` (`user`, `scopes`, `issuer_key`, ...) instead of `token`".into()),
                });
                return None;
            }
            Some(r) => *r.get_ref(),
            None => false,
        };
        let token = mandates
            .first()
            .map(|(_, t)| t.clone())
            .unwrap_or(Value::Null);
        Some(SessionConfig {
            token,
            mandates,
            user,
            user_key,
            approvals_dir,
            issued: sf.token.is_none(),
            decline_for,
            issuer_key,
            mandate_requests,
        })
    }

    fn secret(&mut self, what: &'static str, k: &S<String>) -> Option<SecretKey> {
        let path = self.existing(what, k, Some("generate one with `ipc keygen NAME`".into()))?;
        match crate::keys::load_secret(&path) {
            Ok(key) => Some(key),
            Err(e) => {
                self.load_err(what, e.to_string(), k.span());
                None
            }
        }
    }

    /// Each parameter of the action from a tool argument or a constant;
    /// `None` (with diagnostics) when the mapping is wrong.
    fn mapping(
        &mut self,
        tf: &ToolFile,
        ta: &TableAction,
        claims: Option<&Value>,
        args: &mut HashMap<String, Span>,
    ) -> Option<Vec<(String, ArgMap)>> {
        let action = &ta.action;
        let errors_before = self.report.errors();
        let mut out: Vec<(String, ArgMap)> = vec![];
        let entries = sorted(&tf.params);
        for (pname, p) in &entries {
            let Some(param) = action.param(pname.get_ref()) else {
                self.err(ConfigError::UnknownParam {
                    param: pname.get_ref().clone(),
                    action: action.name.clone(),
                    span: sp(pname.span()),
                    help: suggest(
                        pname.get_ref(),
                        action.params.iter().map(|x| x.name.as_str()),
                    ),
                });
                continue;
            };
            if let Some(m) = self.arg_map(
                pname,
                p.get_ref(),
                &param.ty,
                param.default.is_some() || param.optional,
                claims,
                args,
            ) {
                out.push((param.name.clone(), m));
            }
        }
        let tool_span = tf
            .action
            .as_ref()
            .map(|a| a.span())
            .unwrap_or(tf.tool.span());
        for param in &action.params {
            if entries.iter().any(|(n, _)| n.get_ref() == &param.name)
                || param.default.is_some()
                || param.optional
            {
                continue;
            }
            self.err(ConfigError::UnmappedParam {
                param: param.name.clone(),
                action: action.name.clone(),
                span: sp(tool_span.clone()),
                help: Some(format!(
                    "add `[tools.params.{}]`: from the tool argument of the same name (an empty table), `arg = \"NAME\"`, `claim = \"CLAIM\"` or `value = ...`",
                    param.name
                )),
            });
        }
        (self.report.errors() == errors_before).then_some(out)
    }

    fn arg_map(
        &mut self,
        pname: &S<String>,
        pf: &ParamFile,
        ty: &Type,
        optional: bool,
        claims: Option<&Value>,
        args: &mut HashMap<String, Span>,
    ) -> Option<ArgMap> {
        let param = pname.get_ref().clone();
        let mapping_err =
            |message: String, span: Span, help: Option<String>| ConfigError::Mapping {
                param: param.clone(),
                message,
                span: sp(span),
                help,
            };
        if let (Some(v), Some(_)) = (&pf.value, &pf.claim) {
            self.err(mapping_err(
                "`value` and `claim` are two sources of the same argument: give one".into(),
                v.span(),
                None,
            ));
            return None;
        }
        // a value the config fills: the proxy sends it under `arg`, with
        // the parameter's `scale` and `format`, as it sends the agent's
        let fixed = if let Some(v) = &pf.value {
            let json = to_json(v.get_ref());
            if let Err(e) = crate::gateway::world::typed_value(&json, ty) {
                self.err(mapping_err(
                    format!("the constant is not {ty}: {e}"),
                    v.span(),
                    None,
                ));
                return None;
            }
            Some(json)
        } else if let Some(c) = &pf.claim {
            // no mandate: the session's own error says why
            let claims = claims?;
            match claims.get(c.get_ref()) {
                Some(Value::Array(_)) => {
                    self.err(mapping_err(format!("claim `{}` is a set: a constant is one value", c.get_ref()), c.span(), Some("map the parameter to a tool argument; the gateway checks it against the claim".into())));
                    return None;
                }
                Some(v) => Some(v.clone()),
                None => {
                    let names: Vec<String> = claims
                        .as_object()
                        .map(|o| o.keys().cloned().collect())
                        .unwrap_or_default();
                    self.err(mapping_err(
                        format!("the session's mandate has no claim `{}`", c.get_ref()),
                        c.span(),
                        suggest(c.get_ref(), names.iter().map(String::as_str))
                            .or_else(|| Some("give it under `[session.claims]`".into())),
                    ));
                    return None;
                }
            }
        } else {
            None
        };
        let arg = pf
            .arg
            .as_ref()
            .map(|a| a.get_ref().clone())
            .unwrap_or_else(|| param.clone());
        let arg_span = pf.arg.as_ref().map(|a| a.span()).unwrap_or(pname.span());
        if let Some(first) = args.get(&arg) {
            let first = first.clone();
            self.err(ConfigError::ArgTwice {
                arg,
                span: sp(arg_span),
                first: sp(first),
            });
            return None;
        }
        args.insert(arg.clone(), arg_span);
        let scale = match (&pf.scale, ty) {
            (None, Type::Money) => {
                self.err(ConfigError::Scale {
                    param,
                    message: "a Money parameter needs a `scale`".into(),
                    span: sp(pname.span()),
                    help: Some("`scale = 100` when the tool says 4.00 for 400 cents, `scale = 1` when it says 400".into()),
                });
                return None;
            }
            // an amount inside a record has no scale to be written at
            (None, t) if t.is_record() && money_inside(t) => {
                self.err(ConfigError::Scale {
                    param,
                    message: "a record field of type Money has no `scale`: the tool's amounts inside an object cannot be converted".into(),
                    span: sp(pname.span()),
                    help: Some("declare the field as the tool writes it (`Text` with a `pattern`, or `Int` in minor units)".into()),
                });
                return None;
            }
            (None, _) => None,
            (Some(s), Type::Money) => match u32::try_from(*s.get_ref())
                .ok()
                .filter(|x| SCALES.contains(x))
            {
                Some(x) => Some(x),
                None => {
                    self.err(ConfigError::Scale {
                        param,
                        message: format!("scale {} is not one of 1, 10, 100", s.get_ref()),
                        span: sp(s.span()),
                        help: Some("the minor units (cents) per unit the tool writes: 100 for 4.00, 1 for 400".into()),
                    });
                    return None;
                }
            },
            (Some(s), other) => {
                self.err(ConfigError::Scale {
                    param,
                    message: format!("`scale` converts amounts, and this parameter is {other}"),
                    span: sp(s.span()),
                    help: Some("remove `scale`, or map an amount (a Money parameter)".into()),
                });
                return None;
            }
        };
        let as_text = match &pf.format {
            None => false,
            Some(f) if scale.is_some() && (f.get_ref() == "string" || f.get_ref() == "number") => {
                f.get_ref() == "string"
            }
            Some(f) => {
                self.err(mapping_err(
                    format!("`format = \"{}\"` is not a format of this parameter", f.get_ref()),
                    f.span(),
                    Some("an amount is written by the tool as a `\"number\"` (default) or a `\"string\"`".into()),
                ));
                return None;
            }
        };
        Some(match fixed {
            Some(value) => ArgMap::Const {
                value,
                arg,
                scale,
                ty: ty.clone(),
                as_text,
            },
            None => ArgMap::Arg {
                arg,
                scale,
                ty: ty.clone(),
                as_text,
                optional,
            },
        })
    }
}

/// The system clock cannot be read: nothing is issued or checked at time 0
/// (a mandate issued then would be dated before anything it meets).
fn clock_error(e: crate::gateway::ClockError) -> ConfigError {
    ConfigError::Load {
        what: "clock",
        message: e.to_string(),
        span: None,
        help: Some("set the machine's clock (NTP); the proxy starts only with the time".into()),
    }
}

/// Whether a Money value lies inside a record type (at any depth).
fn money_inside(t: &Type) -> bool {
    match t {
        Type::Money => true,
        Type::List(e) | Type::Set(e) => money_inside(e),
        Type::Record(fs) => fs.iter().any(|f| money_inside(&f.ty)),
        _ => false,
    }
}
