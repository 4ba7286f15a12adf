//! The shape of `intentplane.toml`, as serde reads it: every value keeps
//! its span (`toml::Spanned`) so that each later diagnostic points at the
//! line and column it is about, and every table refuses unknown keys.

use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

pub(super) type S<T> = Spanned<T>;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigFile {
    /// Pack folders (or files), built at start-up.
    #[serde(default)]
    pub packs: Option<S<Vec<S<String>>>>,
    /// A bundle file from `ipc build`, instead of `packs`.
    pub bundle: Option<S<String>>,
    /// The public key the bundle must be signed with.
    pub bundle_key: Option<S<String>>,
    /// The world file (keys, approvers, registries, store).
    pub world: Option<S<String>>,
    /// Overrides the world's store (default: `intentplane.db` next to the
    /// config).
    pub store: Option<S<String>>,
    /// `false`: the whole session in shadow mode (every pack; decisions
    /// recorded, calls forwarded whatever they would have been).
    pub enforce: Option<S<bool>>,
    #[serde(default)]
    pub servers: Vec<S<ServerFile>>,
    pub session: Option<S<SessionFile>>,
    /// The inline pack: what inline tools need besides their parameters.
    pub pack: Option<S<InlinePackFile>>,
    #[serde(default)]
    pub tools: Vec<S<ToolFile>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerFile {
    pub name: S<String>,
    pub command: Option<S<String>>,
    /// Each argument expands `${VAR}` as `env` does (`${CONFIG_DIR}`: the
    /// config file's folder).
    #[serde(default)]
    pub args: Vec<S<String>>,
    /// Values expand `${VAR}` from the proxy's environment (an unset one
    /// is an error; `${CONFIG_DIR}` is always the config file's folder,
    /// whatever the environment says); `$$` is a `$`.
    #[serde(default)]
    pub env: BTreeMap<String, S<String>>,
    /// Variables of the proxy's environment forwarded as they are.
    #[serde(default)]
    pub env_pass: Vec<S<String>>,
    /// Expands `${VAR}` as `env` does; a relative folder is the config's.
    pub cwd: Option<S<String>>,
    /// A remote server over Streamable HTTP, instead of `command`.
    pub url: Option<S<String>>,
    /// With `url`: a file holding the bearer token (relative to the config).
    pub token_file: Option<S<String>>,
    /// With `url`: the environment variable holding the bearer token.
    pub token_env: Option<S<String>>,
    /// With an `https://` `url`: the PEM certificate(s) of the private
    /// authority the server's certificate is signed by.
    pub ca_file: Option<S<String>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct SessionFile {
    /// An existing signed mandate token (JSON file).
    pub token: Option<S<String>>,
    pub user: Option<S<String>>,
    pub owner: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub claims: BTreeMap<S<String>, S<toml::Value>>,
    /// Cumulative amount cap in major units (`"2000.00"` or `2000`).
    pub budget: Option<S<toml::Value>>,
    pub calls: Option<u64>,
    /// Validity in seconds (default one hour).
    pub ttl: Option<S<i64>>,
    pub issuer_key: Option<S<String>>,
    pub user_key: Option<S<String>>,
    pub approvals_dir: Option<S<String>>,
    /// How long a step-up the user declined through the client stands, in
    /// seconds (default 600); then the same operation may be asked again.
    pub decline_for: Option<S<i64>>,
    /// Offer the agent `intentplane_request_mandate`: the user's request
    /// becomes a child mandate of this session's, confirmed by the user.
    pub mandate_requests: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct InlinePackFile {
    pub name: S<String>,
    pub version: Option<S<String>>,
    pub description: Option<S<String>>,
    /// Claim name to type (`payee = "set<Iban>"`).
    #[serde(default)]
    pub mandate: BTreeMap<S<String>, S<String>>,
    #[serde(default)]
    pub registries: BTreeMap<S<String>, S<RegistryFile>>,
    /// What the inline tools promise, proven when the config is loaded
    /// (docs/guarantees.md): the pack language's `guarantee` as a table.
    #[serde(default)]
    pub guarantees: Vec<S<GuaranteeFile>>,
}

/// `[[pack.guarantees]]`: `reason`, `actions` (`payment.transfer`,
/// `payment.*`, `every action with NAME: Type`), `never = true` or
/// `level = N`, and `when = "..."` or `always = true`.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct GuaranteeFile {
    pub reason: S<String>,
    pub actions: S<String>,
    pub never: Option<S<bool>>,
    pub level: Option<S<i64>>,
    pub when: Option<S<String>>,
    pub always: Option<S<bool>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RegistryFile {
    /// A set registry: `type = "set<Email>"`.
    #[serde(rename = "type")]
    pub ty: Option<S<String>>,
    /// A keyed registry: the key type, with `fields`.
    pub key: Option<S<String>>,
    #[serde(default)]
    pub fields: BTreeMap<S<String>, S<String>>,
    #[serde(default)]
    pub global: bool,
    /// The records (JSON, as in a world's registry folder).
    pub file: S<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct ToolFile {
    pub server: S<String>,
    pub tool: S<String>,
    /// `true`, or `"unguarded"`: forwarded as is, on purpose even when the
    /// server does not declare the tool read-only.
    pub passthrough: Option<S<PassthroughFile>>,
    pub action: Option<S<String>>,
    /// `"read"` or `"write"` (the default): whether a decided call is sent
    /// again at each call or executed once (a retry answered from the
    /// store).
    pub effect: Option<S<String>>,
    // inline declaration
    pub description: Option<S<String>>,
    pub scope: Option<S<String>>,
    pub executor: Option<S<String>>,
    pub budget_param: Option<S<String>>,
    #[serde(default)]
    pub params: BTreeMap<S<String>, S<ParamFile>>,
    #[serde(default)]
    pub facts: BTreeMap<S<String>, S<String>>,
    #[serde(default)]
    pub rules: Vec<S<RuleFile>>,
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct ParamFile {
    // mapping
    pub arg: Option<S<String>>,
    pub scale: Option<S<i64>>,
    pub format: Option<S<String>>,
    pub value: Option<S<toml::Value>>,
    pub claim: Option<S<String>>,
    // inline declaration
    #[serde(rename = "type")]
    pub ty: Option<S<String>>,
    pub critical: Option<S<bool>>,
    pub sources: Option<S<Vec<S<String>>>>,
    pub normalize: Option<S<String>>,
    pub hint: Option<S<String>>,
    pub default: Option<S<toml::Value>>,
    pub secret: Option<S<bool>>,
    /// The tool may be called without it (then it is not sent).
    pub optional: Option<S<bool>>,
    pub max_len: Option<S<i64>>,
    pub min_len: Option<S<i64>>,
    pub range: Option<S<Vec<S<toml::Value>>>>,
    pub pattern: Option<S<String>>,
    pub nonempty: Option<S<bool>>,
    pub min_items: Option<S<i64>>,
    pub max_items: Option<S<i64>>,
    /// A record's fields (`type = "list<{ path: Path, text: Text }>"`):
    /// each field's options, as a parameter's (`critical`, `sources`,
    /// `normalize`, validators, `hint`); its type is in the record type.
    #[serde(default)]
    pub fields: BTreeMap<S<String>, S<ParamFile>>,
}

impl ParamFile {
    /// Whether this says something only an inline declaration says.
    pub fn declares(&self) -> bool {
        self.ty.is_some()
            || self.critical.is_some()
            || self.sources.is_some()
            || self.normalize.is_some()
            || self.hint.is_some()
            || self.default.is_some()
            || self.secret.is_some()
            || self.optional.is_some()
            || self.max_len.is_some()
            || self.min_len.is_some()
            || self.range.is_some()
            || self.pattern.is_some()
            || self.nonempty.is_some()
            || self.min_items.is_some()
            || self.max_items.is_some()
            || !self.fields.is_empty()
    }
}

/// `passthrough = true | false | "unguarded"`.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(untagged)]
pub(super) enum PassthroughFile {
    On(bool),
    Word(String),
}

impl ToolFile {
    /// Forwarded as is (`passthrough = true` or `"unguarded"`).
    pub fn is_passthrough(&self) -> bool {
        self.passthrough
            .as_ref()
            .is_some_and(|p| !matches!(p.get_ref(), PassthroughFile::On(false)))
    }

    /// An inline declaration (a new action), rather than a mapping onto an
    /// action of a pack.
    pub fn is_inline(&self) -> bool {
        self.scope.is_some()
            || self.executor.is_some()
            || self.budget_param.is_some()
            || self.description.is_some()
            || !self.facts.is_empty()
            || !self.rules.is_empty()
            || self.params.values().any(|p| p.get_ref().declares())
    }
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleFile {
    /// `forbid`, `step_up` or `four_eyes`.
    pub kind: S<String>,
    pub reason: S<String>,
    /// A condition in the pack language (`amount > 1_000.00`).
    pub when: Option<S<String>>,
    pub always: Option<S<bool>>,
    pub hint: Option<S<String>>,
    /// Four eyes: the role the second approver must hold.
    pub by: Option<S<String>>,
}
