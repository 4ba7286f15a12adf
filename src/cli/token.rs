//! The trusted side's mandate commands: `ipc token issue` signs a mandate
//! for a user and owner (claims typed against the pack), `ipc token revoke`
//! records a revocation in the store.

use crate::base::Money;
use crate::base::json::parse_time_str;
use crate::bundle::Bundle;
use crate::gateway::MandateToken;
use crate::gateway::mandate::MandateSpec;
use crate::gateway::narrowing::NarrowingError;
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub command: TokenCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenCommand {
    /// Issue a signed mandate (prints it, or writes it with -o).
    Issue(Box<IssueArgs>),
    /// Revoke a mandate by id, in a store.
    Revoke(RevokeArgs),
    /// Issue a child mandate of a parent token, which only narrows it
    /// (`--draft`: show it as the user confirms it, issue nothing).
    Child(Box<super::child::ChildArgs>),
}

#[derive(clap::Args, Debug)]
pub struct IssueArgs {
    /// The bundle whose pack declares the claims; its signature is checked
    /// (as `ipc run` does) before its table is read.
    #[arg(long, value_name = "FILE")]
    pub bundle: PathBuf,
    /// Verify the bundle's signature with this public key (else with the
    /// world's `bundle_keys`).
    #[arg(long, value_name = "PUBFILE")]
    pub bundle_key: Option<PathBuf>,
    /// The world whose `bundle_keys` pin the bundle's signing keys.
    #[arg(long, value_name = "FILE")]
    pub world: Option<PathBuf>,
    /// Read a bundle whose signature is not checked, when no key is pinned
    /// (development only).
    #[arg(long)]
    pub allow_unsigned: bool,
    /// The issuer's secret key (from `ipc keygen`).
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,
    #[arg(long)]
    pub pack: String,
    /// The person the agent acts for.
    #[arg(long)]
    pub user: String,
    /// The tenant whose records are in scope (default: the user).
    #[arg(long)]
    pub owner: Option<String>,
    /// A scope the mandate grants (repeat).
    #[arg(long = "scope")]
    pub scopes: Vec<String>,
    /// `NAME=VALUE`; repeat a set claim's name for each member. A
    /// selection's query as JSON, or `NAME=@FILE` to read it from a file.
    #[arg(long = "claim", value_name = "NAME=VALUE")]
    pub claims: Vec<String>,
    /// Cumulative amount cap, e.g. `2000.00`.
    #[arg(long, default_value = "0")]
    pub budget: String,
    /// Cap on executed calls.
    #[arg(long, default_value_t = 100)]
    pub calls: u64,
    /// Validity in seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl: i64,
    /// Issue time (`YYYY-MM-DDTHH:MM:SSZ`); default now.
    #[arg(long)]
    pub now: Option<String>,
    /// Narrow a critical parameter to some of its declared sources:
    /// `ACTION.PARAM=SOURCE[,SOURCE]`, e.g.
    /// `payment.transfer.payee_iban=mandate.payee` (repeat).
    #[arg(long = "only", value_name = "ACTION.PARAM=SOURCES")]
    pub only: Vec<String>,
    /// Take critical values only from the mandate's claims: for
    /// `ACTION.PARAM`, `ACTION`, or every action when given no value
    /// (repeat).
    #[arg(long, value_name = "ACTION[.PARAM]", num_args = 0..=1, default_missing_value = "*")]
    pub strict: Vec<String>,
    /// Token id; default random.
    #[arg(long)]
    pub id: Option<String>,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    #[arg(long, value_name = "FILE")]
    pub store: PathBuf,
    pub id: String,
}

pub fn run(args: &TokenArgs, out: &mut dyn Write) -> u8 {
    let r = match &args.command {
        TokenCommand::Issue(a) => issue(a).and_then(|tok| {
            let text = serde_json::to_string_pretty(&tok).map_err(|e| e.to_string())?;
            match &a.output {
                Some(p) => std::fs::write(p, text + "\n").map_err(|e| {
                    IssueError::Other(format!(
                        "cannot write `{}`: {}",
                        p.display(),
                        e.to_string().to_lowercase()
                    ))
                }),
                None => writeln!(out, "{text}").map_err(|e| IssueError::Other(e.to_string())),
            }
        }),
        TokenCommand::Revoke(a) => revoke(a, out).map_err(IssueError::Other),
        TokenCommand::Child(a) => super::child::run(a, out).map_err(IssueError::Other),
    };
    match r {
        Ok(()) => 0,
        Err(IssueError::Narrowing(d)) => {
            eprint!("{}", super::bundle::render_error(&d, super::use_color()));
            1
        }
        Err(IssueError::Bundle(d)) => {
            eprint!("{}", super::bundle::render_error(&d, super::use_color()));
            1
        }
        Err(IssueError::World(d)) => {
            eprint!("{}", super::bundle::render_error(&d, super::use_color()));
            1
        }
        Err(IssueError::Selection(d)) => {
            eprint!("{}", super::bundle::render_error(&d, super::use_color()));
            1
        }
        Err(IssueError::Other(e)) => {
            eprintln!("error: {e}");
            1
        }
    }
}

pub fn now_or(t: &Option<String>) -> Result<i64, String> {
    match t {
        Some(s) => parse_time_str(s),
        None => crate::gateway::unix_now().map_err(|e| e.to_string()),
    }
}

/// Why `ipc token` failed: a narrowing the pack does not allow
/// (rendered as a diagnostic), or anything else.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum IssueError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Narrowing(#[from] NarrowingError),
    /// The bundle is not one the pinned keys signed (or cannot be read).
    #[error(transparent)]
    #[diagnostic(transparent)]
    Bundle(#[from] crate::bundle::BundleError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    World(#[from] crate::gateway::world::WorldError),
    /// A selection claim's query that does not fit its registry.
    #[error(transparent)]
    #[diagnostic(transparent)]
    Selection(#[from] crate::gateway::selection::SelectionError),
    #[error("{0}")]
    Other(String),
}

impl From<String> for IssueError {
    fn from(e: String) -> Self {
        IssueError::Other(e)
    }
}

/// The largest query file `--claim NAME=@FILE` reads.
const MAX_QUERY_FILE: u64 = 64 * 1024;

/// A claim's value as given: for a selection (`--claim product=@q.json`,
/// or the JSON inline), the query, checked here against the registry it
/// selects from (a typed diagnostic before anything is signed); a query
/// that selects everything is a warning. Any other claim as its text.
fn selection_arg(
    pack: &crate::bundle::format::TablePack,
    name: &str,
    value: &str,
) -> Result<Value, IssueError> {
    let Some(decl) = pack.claims.iter().find(|c| c.name == name) else {
        return Ok(Value::String(value.to_string()));
    };
    let crate::ir::Type::Selection(registry) = &decl.ty else {
        return Ok(Value::String(value.to_string()));
    };
    let text = match value.strip_prefix('@') {
        Some(path) => {
            let path = std::path::Path::new(path);
            match std::fs::metadata(path) {
                Ok(m) if m.len() > MAX_QUERY_FILE => {
                    return Err(format!(
                        "`{}` is larger than the {MAX_QUERY_FILE} bytes a query may have",
                        path.display()
                    )
                    .into());
                }
                _ => {}
            }
            let q = crate::base::json::read_file(path)?;
            crate::gateway::mandate::selection_claim(&q, &decl.ty, &pack.name, &pack.registries)?
        }
        None => crate::gateway::mandate::selection_claim(
            &Value::String(value.to_string()),
            &decl.ty,
            &pack.name,
            &pack.registries,
        )?,
    };
    let all = pack
        .registries
        .iter()
        .find(|r| &r.name == registry)
        .and_then(|r| crate::gateway::selection::Query::parse(&text, r, &pack.name).ok())
        .is_some_and(|q| q.selects_all());
    if all {
        let w = crate::gateway::selection::SelectionError::SelectsAll {
            claim: name.to_string(),
            registry: [pack.name.as_str(), ".", registry].concat(),
        };
        eprint!("{}", super::bundle::render_error(&w, super::use_color()));
    }
    Ok(text)
}

/// `ACTION.PARAM=SOURCE[,SOURCE]`.
fn only_arg(text: &str) -> Result<(String, Vec<String>), String> {
    let (target, list) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not ACTION.PARAM=SOURCE[,SOURCE]"))?;
    let sources = list
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    Ok((target.trim().to_string(), sources))
}

pub fn issue(a: &IssueArgs) -> Result<MandateToken, IssueError> {
    let (bundle, world) = authentic_bundle(a)?;
    let key = crate::keys::load_secret(&a.key).map_err(|e| e.to_string())?;
    let pack = bundle
        .table
        .pack(&a.pack)
        .ok_or_else(|| format!("the bundle has no pack `{}`", a.pack))?;
    let mut claims = vec![];
    for c in &a.claims {
        let (name, value) = c
            .split_once('=')
            .ok_or_else(|| format!("`{c}` is not NAME=VALUE"))?;
        let value = selection_arg(pack, name, value)?;
        claims.push((name.to_string(), value));
    }
    let spec = MandateSpec {
        user: a.user.clone(),
        owner: a.owner.clone(),
        scopes: a.scopes.clone(),
        claims,
        budget: Money::parse(a.budget.trim())?.minor(),
        calls: a.calls,
        issued_at: now_or(&a.now)?,
        ttl: a.ttl,
        id: a.id.clone(),
        only: a
            .only
            .iter()
            .map(|o| only_arg(o))
            .collect::<Result<_, _>>()?,
        strict: a.strict.clone(),
    };
    let actions = bundle.table.pack_actions(&pack.name);
    // refused up front, as a diagnostic, before anything is signed
    crate::gateway::narrowing::of_spec(&spec.strict, &spec.only, &pack.name, &actions)?;
    let token = crate::gateway::mandate::issue(&spec, pack, &actions, &key)?;
    for w in warnings(&spec, a.owner.is_some(), pack, &actions, world.as_ref()) {
        eprintln!("warning: {w}");
    }
    Ok(token)
}

/// What a signed token will be refused for that its issuer can see now
/// (#40, item 14): an owner the world holds no records of (the default,
/// the user, when `--owner` is left out), and a critical value of a
/// granted action that can come only from claims this token does not
/// carry. Warnings: the token is still written (a world may gain records).
fn warnings(
    spec: &MandateSpec,
    owner_given: bool,
    pack: &crate::bundle::format::TablePack,
    actions: &[&crate::ir::Action],
    world: Option<&crate::gateway::world::World>,
) -> Vec<String> {
    let owner = spec.owner.as_deref().unwrap_or(&spec.user);
    let mut out = vec![];
    let owned = pack.registries.iter().any(|r| !r.global);
    match world {
        Some(w) if owned && !w.may_hold_records_of(&pack.name, owner) => out.push(format!(
            "the owner `{owner}`{} has no records in the world's registries of `{}`: every value that must come from them is refused; give `--owner TENANT`",
            if owner_given { "" } else { " (the user: no `--owner` was given)" },
            pack.name
        )),
        None if owned && !owner_given => out.push(format!(
            "the owner is the user `{owner}` (no `--owner` was given); give `--world` to check that the world holds their records"
        )),
        _ => {}
    }
    let given = |c: &str| spec.claims.iter().any(|(n, _)| n == c);
    for a in actions.iter().filter(|a| spec.scopes.contains(&a.scope)) {
        for p in a.params.iter().filter(|p| p.critical) {
            let only_claims: Option<Vec<&str>> = p
                .sources
                .iter()
                .map(|s| match s {
                    crate::ir::Source::Claim { claim } => Some(claim.as_str()),
                    _ => None,
                })
                .collect();
            if let Some(claims) = only_claims
                && !claims.is_empty()
                && !claims.iter().any(|c| given(c))
            {
                out.push(format!(
                    "`{}`'s `{}` comes only from the claim{} `{}`, which this token does not carry: the action is always refused; give `--claim {}=VALUE`",
                    a.name,
                    p.name,
                    if claims.len() > 1 { "s" } else { "" },
                    claims.join("`, `"),
                    claims[0]
                ));
            }
        }
    }
    out
}

/// The bundle, once its signature is checked against the key given or the
/// world's pinned `bundle_keys` (as `ipc run` does): its table types the
/// claims and decides what `--strict` narrows, so an edited bundle must
/// never shape a signed mandate.
fn authentic_bundle(
    a: &IssueArgs,
) -> Result<(Bundle, Option<crate::gateway::world::World>), IssueError> {
    let bundle = Bundle::load(&a.bundle, None)?;
    let given = match &a.bundle_key {
        Some(p) => Some(crate::keys::load_public(p).map_err(|e| e.to_string())?),
        None => None,
    };
    let world = match &a.world {
        Some(w) => Some(crate::gateway::world::World::load(w, &bundle.table)?),
        None => None,
    };
    let pinned = world
        .as_ref()
        .map(|w| w.bundle_keys.clone())
        .unwrap_or_default();
    let path = a.bundle.display().to_string();
    bundle.authenticate(&path, given.as_ref(), &pinned, a.allow_unsigned)?;
    if given.is_none() && pinned.is_empty() {
        eprintln!(
            "warning: `{path}` is read unverified (--allow-unsigned): anyone who can write it shapes the mandate"
        );
    }
    Ok((bundle, world))
}

fn revoke(a: &RevokeArgs, out: &mut dyn Write) -> Result<(), String> {
    let store = crate::store::open(&a.store, true).map_err(|e| e.to_string())?;
    store
        .transaction(&mut |tx| {
            tx.revoke(&a.id)?;
            Ok(Value::Null)
        })
        .map_err(|e| e.to_string())?;
    writeln!(out, "revoked `{}`", a.id).map_err(|e| e.to_string())
}
