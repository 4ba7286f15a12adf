//! What `intentplane.toml` can be told: [`ConfigError`] for the config's
//! own mistakes (each with the TOML span and a help), and [`ConfigReport`],
//! which holds them together with the checker's diagnostics of the packs
//! and of the inline tools (those point into the pack files and into the
//! TOML respectively), rendered as `ipc check` renders its own.

use crate::diagnostics::{JsonDiagnostic, PackDiagnostic, render_human_report, to_json};
use miette::{Diagnostic, SourceSpan};
use thiserror::Error;

/// A mistake of the configuration itself; one variant per kind, each
/// pointing into the TOML.
#[derive(Debug, Error, Diagnostic, Clone, PartialEq)]
pub enum ConfigError {
    /// The file cannot be read. A relative path that is not there names
    /// the folder it was looked for in (a client starts the proxy from a
    /// folder of its own).
    #[error("cannot read `{path}`: {reason}")]
    #[diagnostic(code(ipc::mcp::read))]
    Read {
        path: String,
        reason: String,
        #[help]
        help: Option<String>,
    },

    /// Not TOML, a key the config does not have (`deny_unknown_fields`:
    /// a misspelt key is never silently ignored), or a value of the wrong
    /// kind.
    #[error("{message}")]
    #[diagnostic(code(ipc::mcp::toml))]
    Toml {
        message: String,
        #[label("here")]
        span: Option<SourceSpan>,
        #[help]
        help: Option<String>,
    },

    /// Something the config names is not there: a pack folder, a key, the
    /// world, a registry file, a token, a working directory.
    #[error("{what} `{path}` does not exist")]
    #[diagnostic(code(ipc::mcp::missing_file))]
    MissingFile {
        what: &'static str,
        path: String,
        #[label("named here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A name declared twice (a server, a tool, a tool argument).
    #[error("{kind} `{name}` is declared twice")]
    #[diagnostic(code(ipc::mcp::duplicate))]
    Duplicate {
        kind: &'static str,
        name: String,
        #[label("again here")]
        span: SourceSpan,
        #[label("first here")]
        first: SourceSpan,
    },

    /// Where the actions come from is not exactly one of `packs` (built at
    /// start-up) and `bundle` (from `ipc build`).
    #[error("{message}")]
    #[diagnostic(
        code(ipc::mcp::packs),
        help(
            "build the packs at start-up (`packs = [\"../../packs/bank\"]`) or run a bundle from `ipc build` (`bundle = \"app.bundle\"`), not both"
        )
    )]
    Packs {
        message: String,
        #[label("here")]
        span: SourceSpan,
    },

    /// A tool names a server no `[[servers]]` declares.
    #[error("unknown server `{name}`")]
    #[diagnostic(code(ipc::mcp::unknown_server))]
    UnknownServer {
        name: String,
        #[label("no `[[servers]]` has this name")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A server that is not exactly one of a command (stdio) or a URL.
    #[error("server `{name}`: {message}")]
    #[diagnostic(
        code(ipc::mcp::server),
        help(
            "give `command` (and `args`, `env`, `cwd`) for a child process on stdio, or `url` for streamable HTTP"
        )
    )]
    Server {
        name: String,
        message: String,
        #[label("this server")]
        span: SourceSpan,
    },

    /// A tool mapped onto an action the bundle does not have.
    #[error("unknown action `{action}`")]
    #[diagnostic(code(ipc::mcp::unknown_action))]
    UnknownAction {
        action: String,
        #[label("not an action of the packs")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A tool that is neither passed through nor decided, or is both; an
    /// inline tool where no pack is built.
    #[error("tool `{tool}`: {message}")]
    #[diagnostic(code(ipc::mcp::tool))]
    Tool {
        tool: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// `[tools.params.P]` for a parameter the action does not have.
    #[error("action `{action}` has no parameter `{param}`")]
    #[diagnostic(code(ipc::mcp::unknown_param))]
    UnknownParam {
        param: String,
        action: String,
        #[label("not a parameter of `{action}`")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A parameter without a default that no tool argument or constant
    /// fills: every call would be refused.
    #[error("parameter `{param}` of `{action}` is not mapped")]
    #[diagnostic(code(ipc::mcp::unmapped_param))]
    UnmappedParam {
        param: String,
        action: String,
        #[label("this tool")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// Two parameters read the same tool argument.
    #[error("tool argument `{arg}` is mapped twice")]
    #[diagnostic(
        code(ipc::mcp::arg_twice),
        help(
            "one tool argument gives one parameter; map the other parameter to its own argument or a constant"
        )
    )]
    ArgTwice {
        arg: String,
        #[label("again here")]
        span: SourceSpan,
        #[label("first here")]
        first: SourceSpan,
    },

    /// A scale that is not 1, 10 or 100, on a parameter that is not
    /// Money, or Money without a scale.
    #[error("parameter `{param}`: {message}")]
    #[diagnostic(code(ipc::mcp::scale))]
    Scale {
        param: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A mapping that contradicts itself or the action: a constant of the
    /// wrong type, a claim the mandate does not have, `value` with `arg`.
    #[error("parameter `{param}`: {message}")]
    #[diagnostic(code(ipc::mcp::mapping))]
    Mapping {
        param: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A tool's `effect` that is neither `"read"` nor `"write"`; an
    /// `effect` on a passthrough (forwarded without a decision: nothing is
    /// executed once or again); or one action that one tool maps as a read
    /// and another as a write (the same operation would be sent again
    /// through one and answered from the store through the other).
    #[error("tool `{tool}`: {message}")]
    #[diagnostic(code(ipc::mcp::effect))]
    Effect {
        tool: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// The inline declaration lacks what the pack language requires and
    /// the TOML must say (a parameter's type, a rule's kind).
    #[error("{message}")]
    #[diagnostic(code(ipc::mcp::inline))]
    Inline {
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// The session's mandate cannot be issued or read.
    #[error("session: {message}")]
    #[diagnostic(code(ipc::mcp::session))]
    Session {
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A configured tool the server does not declare (`tools/list`).
    #[error("server `{server}` declares no tool `{tool}`")]
    #[diagnostic(code(ipc::mcp::undeclared_tool))]
    UndeclaredTool {
        server: String,
        tool: String,
        #[label("not in the server's `tools/list`")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A mapped argument the tool's `inputSchema` does not declare: the
    /// server would refuse every call (`-32602`) or ignore the value.
    #[error("tool `{tool}` declares no argument `{arg}`")]
    #[diagnostic(code(ipc::mcp::undeclared_arg))]
    UndeclaredArg {
        tool: String,
        arg: String,
        #[label("not in the tool's `inputSchema`")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A mapped argument whose type is not the one the tool declares.
    #[error("tool `{tool}`: argument `{arg}` is {ours} here, and the server declares {theirs}")]
    #[diagnostic(code(ipc::mcp::arg_type))]
    ArgType {
        tool: String,
        arg: String,
        ours: String,
        theirs: String,
        #[label("mapped here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// An argument the tool requires that the config does not send.
    #[error("tool `{tool}` requires the argument `{arg}`, which the config does not map")]
    #[diagnostic(code(ipc::mcp::required_arg))]
    RequiredArg {
        tool: String,
        arg: String,
        #[label("this tool")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A passthrough of a tool the server does not annotate
    /// `readOnlyHint: true`: it may write, and nothing decides its calls.
    #[error("tool `{tool}` is passed through, and the server does not declare it read-only")]
    #[diagnostic(
        code(ipc::mcp::passthrough_writes),
        severity(Warning),
        help(
            "map it onto an action so that the gateway decides its calls, or write `passthrough = \"unguarded\"` to pass it through on purpose"
        )
    )]
    PassthroughWrites {
        tool: String,
        #[label("no `readOnlyHint: true` on this tool")]
        span: SourceSpan,
    },

    /// A `${VAR}` in a server's `env` that the proxy's environment does
    /// not set (never an empty string), or a variable `env_pass` names
    /// that is not set.
    #[error("server `{server}`: the environment variable `{var}` is not set")]
    #[diagnostic(code(ipc::mcp::env))]
    Env {
        server: String,
        var: String,
        #[label("needed here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// `env_pass` names a variable that is another server's secret: the
    /// variable a remote server's `token_env` names, or one a `${VAR}` in
    /// another server's `env`, `args` or `cwd` reads. A stdio server is
    /// never given another server's secret, whatever its `env_pass` says
    /// (docs/decisions/mcp-server-environment.md).
    #[error("server `{server}`: `env_pass` forwards `{var}`, a secret of the server `{owner}`")]
    #[diagnostic(
        code(ipc::mcp::env_secret),
        help(
            "remove `{var}` from `env_pass`; if this server must have it, name it in its own `env` (`NAME = \"${{{var}}}\"`)"
        )
    )]
    EnvSecret {
        server: String,
        var: String,
        owner: String,
        #[label("another server's")]
        span: SourceSpan,
    },

    /// A remote server's `url` the proxy does not connect to: not a URL,
    /// not `https://` (plain `http://` is only for a loopback address,
    /// where nothing crosses a network), or with a user or password in it
    /// (the token goes in `token_file` or `token_env`, never in the URL).
    #[error("server `{server}`: {message}")]
    #[diagnostic(code(ipc::mcp::server_url))]
    ServerUrl {
        server: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A remote server's bearer token cannot be had: its `token_file` is
    /// missing, unreadable, readable or writable by other users (mode
    /// `0600` is the rule), empty or holds what a header cannot carry;
    /// `token_env` names a variable every stdio server is given; or both
    /// `token_file` and `token_env` are given. The proxy does not
    /// start without it (never a call without the token the config asks
    /// for).
    #[error("server `{server}`: {message}")]
    #[diagnostic(code(ipc::mcp::server_token))]
    ServerToken {
        server: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// A remote server's `ca_file` cannot be used: missing, unreadable,
    /// without a PEM certificate, or given for a plain `http://` URL.
    #[error("server `{server}`: {message}")]
    #[diagnostic(code(ipc::mcp::ca_file))]
    CaFile {
        server: String,
        message: String,
        #[label("here")]
        span: SourceSpan,
        #[help]
        help: Option<String>,
    },

    /// The world, the bundle or the store cannot be loaded.
    #[error("{what}: {message}")]
    #[diagnostic(code(ipc::mcp::load))]
    Load {
        what: &'static str,
        message: String,
        #[label("loaded from here")]
        span: Option<SourceSpan>,
        #[help]
        help: Option<String>,
    },
}

/// A diagnostic of either front-end.
#[derive(Debug, Clone, PartialEq)]
pub enum Diag {
    Config(ConfigError),
    Pack(PackDiagnostic),
}

/// One diagnostic with the file it points into.
#[derive(Debug, Clone)]
pub struct Reported {
    pub file: String,
    pub source: String,
    pub diag: Diag,
}

impl Reported {
    pub fn is_error(&self) -> bool {
        match &self.diag {
            Diag::Config(d) => !matches!(d.severity(), Some(miette::Severity::Warning)),
            Diag::Pack(d) => d.is_error(),
        }
    }
    pub fn code(&self) -> String {
        match &self.diag {
            Diag::Config(d) => d.code().map(|c| c.to_string()).unwrap_or_default(),
            Diag::Pack(d) => d.code_str(),
        }
    }
    pub fn render(&self, color: bool) -> String {
        match &self.diag {
            Diag::Config(d) => render_human_report(d, &self.file, &self.source, color),
            Diag::Pack(d) if self.in_toml() => {
                render_human_report(&InToml(d.clone()), &self.file, &self.source, color)
            }
            Diag::Pack(d) => render_human_report(d, &self.file, &self.source, color),
        }
    }
    pub fn to_json(&self) -> JsonDiagnostic {
        match &self.diag {
            Diag::Config(d) => to_json(d, &self.file, &self.source),
            Diag::Pack(d) if self.in_toml() => {
                to_json(&InToml(d.clone()), &self.file, &self.source)
            }
            Diag::Pack(d) => to_json(d, &self.file, &self.source),
        }
    }
    /// A pack diagnostic found in the config's inline tools (its spans
    /// are the TOML's), not in a pack file the config names.
    fn in_toml(&self) -> bool {
        self.file.ends_with(".toml")
    }
}

/// A pack diagnostic of a config's inline tools, with its help in the
/// TOML's spelling where the pack language's would mislead (#40, item 12):
/// everything else is the pack diagnostic's own.
#[derive(Debug, Clone)]
struct InToml(PackDiagnostic);

impl InToml {
    fn toml_help(&self) -> Option<&'static str> {
        match self.0.code_str().as_str() {
            "ipc::critical_without_source" => Some(
                "name where its legitimate values live: `sources = [\"mandate:CLAIM\", \"registry:NAME\"]` in this `[tools.params.NAME]` table",
            ),
            _ => None,
        }
    }
}

impl std::fmt::Display for InToml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for InToml {}

impl miette::Diagnostic for InToml {
    fn code<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        self.0.code()
    }
    fn severity(&self) -> Option<miette::Severity> {
        self.0.severity()
    }
    fn help<'a>(&'a self) -> Option<Box<dyn std::fmt::Display + 'a>> {
        match self.toml_help() {
            Some(h) => Some(Box::new(h)),
            None => self.0.help(),
        }
    }
    fn labels(&self) -> Option<Box<dyn Iterator<Item = miette::LabeledSpan> + '_>> {
        self.0.labels()
    }
    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.0.source_code()
    }
}

/// Everything loading a config found, in the order found.
#[derive(Debug, Clone, Default)]
pub struct ConfigReport {
    pub items: Vec<Reported>,
}

impl ConfigReport {
    pub fn errors(&self) -> usize {
        self.items.iter().filter(|r| r.is_error()).count()
    }
    pub fn warnings(&self) -> usize {
        self.items.len() - self.errors()
    }
    pub fn has_errors(&self) -> bool {
        self.errors() > 0
    }
    /// Every diagnostic rendered for a person, one block each.
    pub fn render_human(&self, color: bool) -> String {
        let mut out = String::new();
        for r in &self.items {
            out.push_str(&r.render(color));
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for ConfigReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render_human(false))
    }
}

impl std::error::Error for ConfigReport {}
impl Diagnostic for ConfigReport {}
