//! Parent and child mandates. A mandate may name a parent
//! ([`Mandate::parent`]); a child only narrows it:
//!
//! - the same pack, user and owner;
//! - scopes a subset of the parent's;
//! - every claim value one the parent's claim holds, or (for a claim that
//!   only vouches for critical parameters, never read by a fact or a
//!   lookup) one that a registry of the owner holds which the parent lets
//!   vouch for every parameter the claim vouches for;
//! - a budget and a number of calls no larger than the parent's, and
//!   counted against the parent's as well as its own (the budget stage
//!   reads and the execution spends every link);
//! - an expiry no later than the parent's;
//! - a narrowing of sources at least as narrow as the parent's.
//!
//! The child token carries its ancestors' tokens ([`MandateToken::ancestors`],
//! `docs/decisions/mandate-chains.md`); the authn stage verifies every
//! signature and link of the chain, expiry and revocation of every link
//! (a revoked parent revokes its children), the delegation stage checks
//! that each link narrows the one before ([`Gateway::widenings`]).
//!
//! Who signs a child: an issuer key of the world (`mandate_keys`), or the
//! key of the parent's user in the world's `[approvers]` (she confirms her
//! own narrowing, as she signs approvals). No other key: never another
//! approver's, never a user's key for a root mandate.
//!
//! The library API, for the HTTP service, the command line and the MCP
//! proxy: [`Gateway::draft_child`] (a request typed into an unsigned child,
//! with what widens and its rendering, [`Draft`]), [`Gateway::propose_child`]
//! (the same, refusing a child that widens), [`Gateway::seal_child`] (a
//! signature made elsewhere, e.g. in the browser, checked and attached),
//! [`Gateway::issue_child`] (signed with a key held here) and
//! [`Gateway::record_child`] (kept in the store, with a receipt). A
//! decision under a chain is an ordinary [`Gateway::decide`] with the child
//! token as the mandate.

use super::listing;
use super::mandate::{Budget, Mandate, MandateToken, Narrowing, ParentRef};
use super::registry::Registries;
use super::{Gateway, ReceiptRef};
use crate::base::Money;
use crate::base::json::{echo, format_time};
use crate::bundle::format::TablePack;
use crate::canonical::{ObjectWriter, to_jcs};
use crate::ir::{Action, Expr, Key, Source};
use crate::keys::SecretKey;
use crate::store::{StoreError, Tx};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The most ancestors a token may carry.
pub const MAX_DEPTH: usize = 8;

/// Store namespace of issued child mandates (by id) and their index.
pub(crate) const NS: &str = "mandates";
const INDEX: &str = "#index";

/// What a child mandate is asked to hold. Whatever is left out is the
/// parent's (scopes, budget, calls, expiry, single claims), except a set
/// claim, which is then empty (a child holds only the payees it names).
/// Its narrowing is never asked for: every critical value a claim can vouch
/// for comes only from the child's claims ([`strict_within`];
/// `docs/decisions/child-sources-never-proposed.md`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChildRequest {
    /// `(claim, value)`; a set claim's name repeated for each member
    /// (as [`super::mandate::MandateSpec::claims`]).
    pub claims: Vec<(String, Value)>,
    /// Empty: the parent's.
    pub scopes: Vec<String>,
    /// Minor units.
    pub budget: Option<i64>,
    pub calls: Option<u64>,
    /// Seconds since the epoch.
    pub expires_at: Option<i64>,
    /// Default: random.
    pub id: Option<String>,
}

/// The request as JSON (`POST /v1/mandates`, an MCP tool's arguments):
/// `claims` an object (a set claim's members as an array), `scopes` an
/// array, `budget` an amount in major units (`"1500.00"`), `calls` a
/// number, `expires_at` an RFC 3339 time or seconds since the epoch. No
/// `sources`: see [`ChildRequest`].
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRequest {
    #[serde(default)]
    claims: Map<String, Value>,
    #[serde(default)]
    scopes: Vec<String>,
    budget: Option<Value>,
    calls: Option<u64>,
    expires_at: Option<Value>,
}

/// Why a child request may not name `sources`.
pub const SOURCES_REFUSED: &str = "`sources` cannot be proposed: a child's critical values come only from the values it names (its user confirms those, never a narrowing); a wider mandate is the administrator's (`ipc token issue --only`)";

impl ChildRequest {
    /// Reads the JSON form (see the fields of the wire form in the module
    /// source: `claims`, `scopes`, `budget` in major units, `calls`,
    /// `expires_at`); an unknown field is refused, `sources` with its reason.
    pub fn from_json(v: &Value) -> Result<ChildRequest, ChildError> {
        let bad = |reason: String| ChildError::Request { reason };
        if v.get("sources").is_some() {
            return Err(bad(SOURCES_REFUSED.into()));
        }
        let w: WireRequest =
            serde_json::from_value(v.clone()).map_err(|e| bad(e.to_string().to_lowercase()))?;
        let mut claims = vec![];
        for (k, v) in w.claims {
            match v {
                Value::Array(items) => claims.extend(items.into_iter().map(|i| (k.clone(), i))),
                one => claims.push((k, one)),
            }
        }
        let budget = match &w.budget {
            None => None,
            Some(b) => Some(
                Money::from_json(b)
                    .map_err(|e| bad(format!("budget: {e}")))?
                    .minor(),
            ),
        };
        let expires_at = match &w.expires_at {
            None => None,
            Some(t) => Some(
                crate::base::json::parse_time(t).map_err(|e| bad(format!("expires_at: {e}")))?,
            ),
        };
        Ok(ChildRequest {
            claims,
            scopes: w.scopes,
            budget,
            calls: w.calls,
            expires_at,
            id: None,
        })
    }
}

/// One way a child asks for more than its parent allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Widening {
    /// Another pack, user or owner than the parent's.
    Identity {
        field: String,
        parent: String,
        child: String,
    },
    /// A scope the parent does not grant.
    Scope {
        scope: String,
    },
    /// A claim value neither the parent's claim nor a registry of the owner
    /// (one the parent lets vouch) holds; `value` as JSON, escaped.
    Claim {
        claim: String,
        value: String,
    },
    /// A single claim the parent has and the child leaves out (a fact that
    /// reads it could no longer be established the parent's way).
    Dropped {
        claim: String,
    },
    Budget {
        child: i64,
        parent: i64,
    },
    Calls {
        child: u64,
        parent: u64,
    },
    Expiry {
        child: i64,
        parent: i64,
    },
    /// A source the parent's narrowing does not allow for a parameter.
    Sources {
        param: String,
        source: String,
    },
}

impl std::fmt::Display for Widening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Widening::Identity {
                field,
                parent,
                child,
            } => write!(
                f,
                "{field} `{}` is not the parent's `{}`",
                echo(child),
                echo(parent)
            ),
            Widening::Scope { scope } => {
                write!(f, "scope `{}` is not granted by the parent", echo(scope))
            }
            Widening::Claim { claim, value } => write!(
                f,
                "claim `{claim}` value `{value}` is neither the parent's nor in a registry of the owner that the parent allows"
            ),
            Widening::Dropped { claim } => {
                write!(f, "claim `{claim}` of the parent is left out")
            }
            Widening::Budget { child, parent } => write!(
                f,
                "budget {} is more than the parent's {}",
                Money::from_minor(*child).grouped(),
                Money::from_minor(*parent).grouped()
            ),
            Widening::Calls { child, parent } => {
                write!(f, "{child} calls are more than the parent's {parent}")
            }
            Widening::Expiry { child, parent } => write!(
                f,
                "expiry {} is later than the parent's {}",
                format_time(*child),
                format_time(*parent)
            ),
            Widening::Sources { param, source } => write!(
                f,
                "source `{}` of `{}` is not allowed by the parent",
                echo(source),
                echo(param)
            ),
        }
    }
}

/// The widenings, as one text.
pub fn describe(w: &[Widening]) -> String {
    w.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ChildError {
    /// A child mandate asks for more than its parent allows: it is never
    /// issued (and one forged is a DENY at the delegation stage).
    #[error("the child mandate widens its parent `{parent}`: {}", describe(.widens))]
    #[diagnostic(
        code(ipc::mandate::widens),
        help(
            "a child only narrows its parent: ask for a subset of its scopes and claims, a smaller budget, an earlier expiry, or ask the administrator for a wider parent"
        )
    )]
    Widens {
        parent: String,
        widens: Vec<Widening>,
    },
    /// The parent token cannot be the parent of anything: it does not verify
    /// (signature, key, chain), is for another bundle, has expired or has been
    /// revoked.
    #[error("the parent mandate cannot be used: {reason}")]
    #[diagnostic(code(ipc::mandate::parent))]
    Parent { reason: String },
    /// The child request does not fit the pack (an undeclared claim, a value of
    /// the wrong type, an unknown field, an expiry already past).
    #[error("invalid child mandate request: {reason}")]
    #[diagnostic(code(ipc::mandate::request))]
    Request { reason: String },
    /// The key that signed the child may not sign it, or the signature does
    /// not verify: only an issuer key of the world or the key of the parent's
    /// user signs a child.
    #[error("the child mandate `{child}` is not signed by a key that may sign it: {reason}")]
    #[diagnostic(
        code(ipc::mandate::signer),
        help(
            "sign the child with the key of the parent's user (her key in the world's `[approvers]`) or an issuer key of the world (`mandate_keys`)"
        )
    )]
    Signer { child: String, reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
}

/// A token verified with its whole chain: its mandate and its ancestors'
/// (root first), claims in canonical form.
#[derive(Clone, Debug)]
pub struct Verified {
    pub mandate: Arc<Mandate>,
    pub ancestors: Arc<[Mandate]>,
}

impl Verified {
    /// Root first, the token's own mandate last.
    pub fn links(&self) -> impl Iterator<Item = &Mandate> {
        self.ancestors
            .iter()
            .chain(std::iter::once(self.mandate.as_ref()))
    }
}

/// A child request typed into an unsigned child mandate, checked against
/// its parent: what widens (empty: it may be issued) and how it is shown
/// to the person who confirms it.
#[derive(Clone, Debug)]
pub struct Draft {
    /// The parent token, as given.
    pub parent: MandateToken,
    /// The child, unsigned: what its signer signs (the JCS of it).
    pub mandate: Mandate,
    pub widens: Vec<Widening>,
    pub shown: super::render::child::ChildShown,
}

impl Draft {
    /// The bytes to sign: the JCS of the child mandate.
    pub fn signing_text(&self) -> Result<String, ChildError> {
        to_jcs(&self.mandate).map_err(|e| ChildError::Request {
            reason: e.to_string(),
        })
    }
    /// `Err(Widens)` when the child widens its parent.
    pub fn issuable(&self) -> Result<(), ChildError> {
        if self.widens.is_empty() {
            Ok(())
        } else {
            Err(ChildError::Widens {
                parent: self.parent.mandate.id.clone(),
                widens: self.widens.clone(),
            })
        }
    }
}

/// A child mandate recorded in the store (`ipc mandates list|show`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Issued {
    pub token: MandateToken,
    /// How it was confirmed (`http`, `cli`, `mcp`).
    pub via: String,
    pub recorded_at: i64,
}

fn parent_err(reason: impl Into<String>) -> ChildError {
    ChildError::Parent {
        reason: reason.into(),
    }
}

/// Whether expression `e` reads claim `c`.
fn reads_claim(e: &Expr, c: &str) -> bool {
    match e {
        Expr::Claim { name } => name == c,
        Expr::Lookup { key, .. } => reads_claim(key, c),
        Expr::List { items } => items.iter().any(|i| reads_claim(i, c)),
        Expr::Not { expr } => reads_claim(expr, c),
        Expr::Binary { lhs, rhs, .. } => reads_claim(lhs, c) || reads_claim(rhs, c),
        Expr::Lit { .. } | Expr::Param { .. } | Expr::Fact { .. } | Expr::Now => false,
        Expr::Registry { .. } => false,
    }
}

fn key_reads_claim(k: &Key, c: &str) -> bool {
    match k {
        Key::Claim { claim } => claim == c,
        Key::Param { .. } => false,
        Key::Lookup { lookup } => key_reads_claim(&lookup.key, c),
    }
}

/// Whether claim `c` is read anywhere but as a direct source of a
/// parameter: by a fact, or as the key of a lookup.
fn read_beyond_sources(actions: &[&Action], c: &str) -> bool {
    actions.iter().any(|a| {
        a.facts.iter().any(|f| reads_claim(&f.expr, c))
            || a.params.iter().any(|p| {
                p.sources
                    .iter()
                    .any(|s| matches!(s, Source::Lookup(l) if key_reads_claim(&l.key, c)))
            })
    })
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

/// The owner's registries (never a global one) that the parent lets vouch
/// for every parameter claim `c` vouches for, per parameter: a value of
/// the claim is within the parent when, for every such parameter, one of
/// its registries holds it. `None`: the claim vouches for no parameter, or
/// is read elsewhere (a fact, a lookup key), so only the parent's own
/// values are within it.
pub(crate) fn registries_for<'a>(
    parent: &Mandate,
    pack: &'a TablePack,
    actions: &[&'a Action],
    c: &str,
) -> Option<Vec<Vec<&'a crate::ir::Registry>>> {
    if read_beyond_sources(actions, c) {
        return None;
    }
    let mut per_param = vec![];
    for (a, p) in vouched_by(actions, c) {
        let allowed = super::narrowing::allowed(&parent.sources, &a.name, &p.name);
        let regs: Vec<&crate::ir::Registry> = p
            .sources
            .iter()
            .filter(|s| allowed.is_none_or(|l| l.contains(&s.to_string())))
            .filter_map(|s| match s {
                Source::Registry { registry } => {
                    pack.registries.iter().find(|r| &r.name == registry)
                }
                _ => None,
            })
            .filter(|r| !r.global)
            .collect();
        per_param.push(regs);
    }
    (!per_param.is_empty()).then_some(per_param)
}

/// A child's default narrowing: the parent's, and every critical
/// parameter a claim can vouch for takes its value only from the child's
/// claims (among the sources the parent allows), so that a child for the
/// landlord allows the landlord and no other saved payee. A parameter the
/// parent lets no claim vouch for keeps the parent's sources.
pub(crate) fn strict_within(parent: &Mandate, actions: &[&Action]) -> Narrowing {
    let mut out = parent.sources.clone();
    for a in actions {
        for p in a.params.iter().filter(|p| p.critical) {
            let declared: Vec<String> = p.sources.iter().map(|s| s.to_string()).collect();
            let allowed: Vec<String> =
                match super::narrowing::allowed(&parent.sources, &a.name, &p.name) {
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

/// A claim value as a [`Widening::Claim`] names it: a string escaped, any
/// other value as its JSON, escaped.
pub(crate) fn shown_value(v: &Value) -> String {
    match v {
        Value::String(s) => super::render::escape(s),
        other => super::render::escape(&other.to_string()),
    }
}

/// A claim value as registries compare it.
fn text_of(v: &Value) -> Option<&str> {
    v.as_str()
}

impl Gateway {
    /// The pack of this bundle named `name`, and its actions.
    fn pack_of(&self, name: &str) -> Option<(&TablePack, Vec<&Action>)> {
        let pack = self
            .actions
            .values()
            .find(|a| a.pack.name == name)
            .map(|a| &a.pack)?;
        let actions = self
            .actions
            .values()
            .filter(|a| a.pack.name == name)
            .map(|a| &a.table.action)
            .collect();
        Some((pack, actions))
    }

    /// Verifies a token and its whole chain: each signature with a key of
    /// the world (an issuer key; for a child also its parent's user's key),
    /// each link naming the one before by id and hash, every mandate for a
    /// pack of this bundle with declared claims (made canonical) and a
    /// valid narrowing. Nothing here reads the store: expiry, revocation and
    /// narrowing against registries are the stages' (and
    /// [`Gateway::draft_child`]'s).
    pub fn verify_token(&self, token: &MandateToken) -> Result<Verified, String> {
        if token.ancestors.len() > MAX_DEPTH {
            return Err(format!(
                "the mandate carries {} ancestors, more than {MAX_DEPTH}",
                token.ancestors.len()
            ));
        }
        let n = token.ancestors.len();
        let mut links: Vec<Mandate> = Vec::with_capacity(n + 1);
        let mut prev: Option<(String, String)> = None;
        for (i, t) in token
            .ancestors
            .iter()
            .chain(std::iter::once(token))
            .enumerate()
        {
            if i < n && !t.ancestors.is_empty() {
                return Err("an ancestor token carries ancestors of its own".into());
            }
            let msg = to_jcs(&t.mandate).map_err(|e| e.to_string())?;
            let key = match self.world.mandate_keys.get(&t.key_id) {
                Some(k) => k,
                None => {
                    // a child may be signed by its parent's user
                    let user_key = links.last().and_then(|p| {
                        self.world
                            .approvers
                            .get(&p.user)
                            .filter(|a| a.key.id() == t.key_id && t.mandate.user == p.user)
                    });
                    match user_key {
                        Some(a) => &a.key,
                        None => {
                            return Err(format!(
                                "mandate `{}` signed by unknown key `{}`",
                                echo(&t.mandate.id),
                                t.key_id
                            ));
                        }
                    }
                }
            };
            key.verify(msg.as_bytes(), &t.signature).map_err(|_| {
                if i == n {
                    "invalid mandate signature".to_string()
                } else {
                    format!(
                        "invalid signature of the ancestor `{}`",
                        echo(&t.mandate.id)
                    )
                }
            })?;
            let hash = format!("sha256:{}", crate::canonical::sha256_hex(msg.as_bytes()));
            match (&prev, &t.mandate.parent) {
                (None, None) => {}
                (None, Some(p)) => {
                    return Err(format!(
                        "mandate `{}` names the parent `{}`, whose token it does not carry",
                        echo(&t.mandate.id),
                        echo(&p.id)
                    ));
                }
                (Some(_), None) => {
                    return Err(format!(
                        "mandate `{}` is carried as a child but names no parent",
                        echo(&t.mandate.id)
                    ));
                }
                (Some((id, h)), Some(p)) => {
                    if &p.id != id || &p.hash != h {
                        return Err(format!(
                            "mandate `{}` names the parent `{}` ({}), not the token it carries",
                            echo(&t.mandate.id),
                            echo(&p.id),
                            echo(&p.hash)
                        ));
                    }
                }
            }
            let mut m = t.mandate.clone();
            let Some((pack, actions)) = self.pack_of(&m.pack) else {
                return Err(format!(
                    "mandate for pack `{}`, which this gateway's bundle does not hold",
                    echo(&m.pack)
                ));
            };
            m.canonicalize_claims(pack)
                .map_err(|e| format!("invalid mandate: {e}"))?;
            if !m.sources.is_empty() {
                super::narrowing::check(&m.sources, &m.pack, &actions)
                    .map_err(|e| format!("invalid mandate narrowing: {e}"))?;
            }
            prev = Some((m.id.clone(), hash));
            links.push(m);
        }
        let mandate = links.pop().ok_or("no mandate")?;
        Ok(Verified {
            mandate: Arc::new(mandate),
            ancestors: links.into(),
        })
    }

    /// What `child` asks for beyond `parent` (empty: it only narrows),
    /// reading the owner's registries inside `tx`.
    pub fn widenings(
        &self,
        tx: &mut dyn Tx,
        parent: &Mandate,
        child: &Mandate,
    ) -> Result<Vec<Widening>, StoreError> {
        let mut w = vec![];
        for (field, p, c) in [
            ("pack", &parent.pack, &child.pack),
            ("user", &parent.user, &child.user),
            ("owner", &parent.owner, &child.owner),
        ] {
            if p != c {
                w.push(Widening::Identity {
                    field: field.into(),
                    parent: p.clone(),
                    child: c.clone(),
                });
            }
        }
        for s in &child.scopes {
            if !parent.scopes.contains(s) {
                w.push(Widening::Scope { scope: s.clone() });
            }
        }
        if child.budget.amount > parent.budget.amount {
            w.push(Widening::Budget {
                child: child.budget.amount,
                parent: parent.budget.amount,
            });
        }
        if child.budget.calls > parent.budget.calls {
            w.push(Widening::Calls {
                child: child.budget.calls,
                parent: parent.budget.calls,
            });
        }
        if child.expires_at > parent.expires_at {
            w.push(Widening::Expiry {
                child: child.expires_at,
                parent: parent.expires_at,
            });
        }
        for (param, allowed) in &parent.sources {
            match child.sources.get(param) {
                None => w.push(Widening::Sources {
                    param: param.clone(),
                    source: "every declared source".into(),
                }),
                Some(list) => {
                    for s in list.iter().filter(|s| !allowed.contains(s)) {
                        w.push(Widening::Sources {
                            param: param.clone(),
                            source: s.clone(),
                        });
                    }
                }
            }
        }
        let Some((pack, actions)) = self.pack_of(&child.pack) else {
            return Ok(w);
        };
        let regs = Registries {
            world: &self.world,
            pack: &pack.name,
            owner: &parent.owner,
        };
        for (name, cv) in &child.claims {
            let pv = parent.claims.get(name);
            let within_parent = |v: &Value| match pv {
                Some(Value::Array(items)) => items.contains(v),
                Some(p) => p == v,
                None => false,
            };
            let members: Vec<&Value> = match cv {
                Value::Array(items) => items.iter().collect(),
                one => vec![one],
            };
            let via = registries_for(parent, pack, &actions, name);
            for v in members {
                if within_parent(v) {
                    continue;
                }
                let held = match (&via, text_of(v)) {
                    (Some(per_param), Some(text)) => {
                        let mut all = true;
                        for regs_of_param in per_param {
                            let mut one = false;
                            for reg in regs_of_param {
                                if regs.member(tx, reg, text, None)?.is_some() {
                                    one = true;
                                    break;
                                }
                            }
                            if !one {
                                all = false;
                                break;
                            }
                        }
                        all
                    }
                    _ => false,
                };
                if !held {
                    w.push(Widening::Claim {
                        claim: name.clone(),
                        value: shown_value(v),
                    });
                }
            }
        }
        for (name, pv) in &parent.claims {
            if !pv.is_array() && !child.claims.contains_key(name) {
                w.push(Widening::Dropped {
                    claim: name.clone(),
                });
            }
        }
        Ok(w)
    }

    /// The parent token verified, and usable at `now` in `tx`: not expired,
    /// no link revoked.
    fn usable_parent(
        &self,
        tx: &mut dyn Tx,
        parent: &MandateToken,
        now: i64,
    ) -> Result<Result<Verified, String>, StoreError> {
        let v = match self.verify_token(parent) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        for m in v.links() {
            if now >= m.expires_at {
                return Ok(Err(format!("mandate `{}` has expired", echo(&m.id))));
            }
            if tx.revoked(&m.id)? {
                return Ok(Err(format!("mandate `{}` has been revoked", echo(&m.id))));
            }
        }
        Ok(Ok(v))
    }

    /// The child `req` asks for, typed against the pack and named after
    /// `parent`, with what widens and its rendering; nothing signed, nothing
    /// stored. A parent that does not verify, has expired or is revoked, and
    /// a request that does not type, are errors; a child that widens is a
    /// [`Draft`] whose `widens` says how (the person asked sees it).
    pub fn draft_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
    ) -> Result<Draft, ChildError> {
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let bad = |reason: String| ChildError::Request { reason };
        let pm = &parent.mandate;
        let Some((pack, actions)) = self.pack_of(&pm.pack) else {
            return Err(parent_err(format!(
                "pack `{}` is not in this gateway's bundle",
                echo(&pm.pack)
            )));
        };
        let mut claims = super::mandate::typed_claims(&req.claims, pack).map_err(bad)?;
        for d in &pack.claims {
            if claims.contains_key(&d.name) {
                continue;
            }
            if d.ty.is_collection() {
                claims.insert(d.name.clone(), Value::Array(vec![]));
            } else if let Some(v) = pm.claims.get(&d.name) {
                claims.insert(d.name.clone(), v.clone());
            }
        }
        let expires_at = req.expires_at.unwrap_or(pm.expires_at);
        if expires_at <= now {
            return Err(bad(format!(
                "the expiry {} has already passed",
                format_time(expires_at)
            )));
        }
        let sources = strict_within(pm, &actions);
        let id = match &req.id {
            Some(id) => id.clone(),
            None => super::mandate::new_id().map_err(bad)?,
        };
        let hash = parent
            .mandate_hash()
            .map_err(|e| parent_err(e.to_string()))?;
        let mut child = Mandate {
            id,
            pack: pm.pack.clone(),
            user: pm.user.clone(),
            owner: pm.owner.clone(),
            scopes: if req.scopes.is_empty() {
                pm.scopes.clone()
            } else {
                req.scopes.clone()
            },
            claims,
            budget: Budget {
                amount: req.budget.unwrap_or(pm.budget.amount),
                calls: req.calls.unwrap_or(pm.budget.calls),
            },
            issued_at: now,
            expires_at,
            sources,
            parent: Some(ParentRef {
                id: pm.id.clone(),
                hash,
            }),
        };
        child.canonicalize_claims(pack).map_err(bad)?;
        let mut out: Option<(Vec<Widening>, super::render::child::ChildShown)> = None;
        let mut refused: Option<String> = None;
        self.store.transaction(&mut |tx| {
            let v = match self.usable_parent(tx, parent, now)? {
                Ok(v) => v,
                Err(e) => {
                    refused = Some(e);
                    return Ok(Value::Null);
                }
            };
            let widens = self.widenings(tx, &v.mandate, &child)?;
            let shown = super::render::child::show(self, tx, &v.mandate, &child, &widens)?;
            out = Some((widens, shown));
            Ok(Value::Null)
        })?;
        if let Some(e) = refused {
            return Err(parent_err(e));
        }
        let (widens, shown) = out.ok_or_else(|| parent_err("not checked"))?;
        Ok(Draft {
            parent: parent.clone(),
            mandate: child,
            widens,
            shown,
        })
    }

    /// `child` (a child of `parent`, unsigned or not) as its confirmer sees
    /// it now, with what widens.
    pub fn show_child(
        &self,
        parent: &MandateToken,
        child: &Mandate,
    ) -> Result<super::render::child::ChildShown, ChildError> {
        let v = self.verify_token(parent).map_err(parent_err)?;
        let mut out = None;
        self.store.transaction(&mut |tx| {
            let widens = self.widenings(tx, &v.mandate, child)?;
            out = Some(super::render::child::show(
                self, tx, &v.mandate, child, &widens,
            )?);
            Ok(Value::Null)
        })?;
        out.ok_or_else(|| parent_err("not shown"))
    }

    /// [`Gateway::draft_child`], refusing a child that widens its parent
    /// (`ipc::mandate::widens`).
    pub fn propose_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
    ) -> Result<Draft, ChildError> {
        let d = self.draft_child(parent, req)?;
        d.issuable()?;
        Ok(d)
    }

    /// A child signed elsewhere (the user's browser): the signature over
    /// the JCS of `child` by `key_id` checked with a key that may sign it
    /// (an issuer key, or the parent's user's), the chain verified, the
    /// parent usable and the child within it. Returns the child token,
    /// carrying its ancestors.
    pub fn seal_child(
        &self,
        parent: &MandateToken,
        child: Mandate,
        key_id: &str,
        signature: &str,
    ) -> Result<MandateToken, ChildError> {
        let token = MandateToken {
            mandate: child,
            key_id: key_id.to_string(),
            signature: signature.to_string(),
            ancestors: parent.lineage(),
        };
        self.check_child(&token)?;
        Ok(token)
    }

    /// The child `req` asks for, signed with `key` (an issuer key, or the
    /// parent's user's): [`Gateway::propose_child`] then
    /// [`Gateway::seal_child`].
    pub fn issue_child(
        &self,
        parent: &MandateToken,
        req: &ChildRequest,
        key: &SecretKey,
    ) -> Result<MandateToken, ChildError> {
        let d = self.propose_child(parent, req)?;
        let msg = d.signing_text()?;
        let sig = key.sign(msg.as_bytes());
        self.seal_child(parent, d.mandate, &key.public().id(), &sig)
    }

    /// Checks a child token as the gateway will at a decision: its chain
    /// verifies (signatures, keys, links), no link has expired or is
    /// revoked, and each link narrows the one before.
    pub fn check_child(&self, token: &MandateToken) -> Result<(), ChildError> {
        let child_id = token.mandate.id.clone();
        if token.ancestors.is_empty() || token.mandate.parent.is_none() {
            return Err(ChildError::Request {
                reason: format!("mandate `{}` names no parent", echo(&child_id)),
            });
        }
        let v = self.verify_token(token).map_err(|reason| {
            // the last link's signature or key: the signer's fault
            if reason.starts_with("invalid mandate signature")
                || reason.starts_with(&format!("mandate `{}` signed by", echo(&child_id)))
            {
                ChildError::Signer {
                    child: child_id.clone(),
                    reason,
                }
            } else {
                parent_err(reason)
            }
        })?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let mut result: Result<(), ChildError> = Ok(());
        self.store.transaction(&mut |tx| {
            result = Ok(());
            let links: Vec<&Mandate> = v.links().collect();
            for m in &links[..links.len() - 1] {
                if now >= m.expires_at {
                    result = Err(parent_err(format!("mandate `{}` has expired", echo(&m.id))));
                    return Ok(Value::Null);
                }
                if tx.revoked(&m.id)? {
                    result = Err(parent_err(format!(
                        "mandate `{}` has been revoked",
                        echo(&m.id)
                    )));
                    return Ok(Value::Null);
                }
            }
            for pair in links.windows(2) {
                let w = self.widenings(tx, pair[0], pair[1])?;
                if !w.is_empty() {
                    result = Err(ChildError::Widens {
                        parent: pair[0].id.clone(),
                        widens: w,
                    });
                    return Ok(Value::Null);
                }
            }
            Ok(Value::Null)
        })?;
        result
    }

    /// Records an issued child in the store (`ipc mandates list|show`)
    /// with a receipt (`"kind": "mandate", "change": "issued"`): who signed
    /// it, its parent chain, its hash, how it was confirmed (`via`: `http`,
    /// `cli`, `mcp`).
    pub fn record_child(&self, token: &MandateToken, via: &str) -> Result<ReceiptRef, ChildError> {
        self.check_child(token)?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let issued = Issued {
            token: token.clone(),
            via: via.to_string(),
            recorded_at: now,
        };
        let stored =
            serde_json::to_value(&issued).map_err(|e| StoreError::Backend(e.to_string()))?;
        let body = self.mandate_receipt("issued", token, via, now)?;
        let id = token.mandate.id.clone();
        let owner = token.mandate.owner.clone();
        self.in_tx(&mut |tx| {
            if tx.state_get(NS, &id)?.is_some() {
                return Err(StoreError::Conflict(format!(
                    "mandate `{}` is already recorded",
                    echo(&id)
                )));
            }
            tx.state_put(NS, &id, &stored)?;
            index_push(tx, NS, &id)?;
            // a held proposal of it is confirmed now
            if held_get(tx, &id)?.is_some() {
                tx.state_put(PENDING_NS, &id, &Value::Null)?;
                listing::remove(tx, PENDING_NS, &owner, &id)?;
            }
            tx.append_receipt_jcs(&body)
        })
    }

    /// Holds a child that does not widen its parent until its user confirms
    /// it (`POST /v1/mandates`; the approval page lists it for her), with a
    /// receipt (`"change": "proposed"`, `via` who proposed it).
    pub fn hold_child(&self, d: &Draft, via: &str) -> Result<ReceiptRef, ChildError> {
        d.issuable()?;
        if listing::is_listing_key(&d.mandate.id) {
            return Err(ChildError::Request {
                reason: format!(
                    "a held mandate's id cannot start with `#`: `{}`",
                    echo(&d.mandate.id)
                ),
            });
        }
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let held = Held {
            parent: d.parent.clone(),
            mandate: d.mandate.clone(),
            created_at: now,
        };
        let stored = serde_json::to_value(&held).map_err(|e| StoreError::Backend(e.to_string()))?;
        let unsigned = MandateToken {
            mandate: d.mandate.clone(),
            key_id: String::new(),
            signature: String::new(),
            ancestors: d.parent.lineage(),
        };
        let body = self.mandate_receipt("proposed", &unsigned, via, now)?;
        let id = d.mandate.id.clone();
        self.in_tx(&mut |tx| {
            if tx.state_get(PENDING_NS, &id)?.is_some_and(|v| !v.is_null())
                || tx.state_get(NS, &id)?.is_some()
            {
                return Err(StoreError::Conflict(format!(
                    "mandate `{}` is already proposed",
                    echo(&id)
                )));
            }
            tx.state_put(PENDING_NS, &id, &stored)?;
            // only this tenant's index is read: another's held children
            // never slow a proposal
            listing::add(tx, PENDING_NS, &d.mandate.owner, &id, &d.parent.mandate.id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// The child `id` held for its user's confirmation, listed or not (one
    /// past the listing's bounds stays confirmable by its id).
    pub fn held_child(&self, id: &str) -> Result<Option<Held>, StoreError> {
        let mut out = None;
        self.store.transaction(&mut |tx| {
            out = held_get(tx, id)?;
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// [`Gateway::held_child`], its absence an error.
    fn held(&self, id: &str) -> Result<Held, ChildError> {
        self.held_child(id)?.ok_or_else(|| ChildError::Request {
            reason: format!("no child mandate `{}` waits for confirmation", echo(id)),
        })
    }

    /// The children waiting for their user's confirmation in the listing,
    /// oldest first.
    pub fn held_children(&self) -> Result<Vec<Held>, StoreError> {
        let mut out: Vec<Held> = vec![];
        self.store.transaction(&mut |tx| {
            out.clear();
            for id in listing::keys(tx, PENDING_NS, &super::Tenants::All)? {
                out.extend(held_get(tx, &id)?);
            }
            Ok(Value::Null)
        })?;
        out.sort_by_key(|h| h.created_at);
        Ok(out)
    }

    /// Confirms the held child `id` with a signature over its JCS by
    /// `key_id` (the user's, made in her browser): sealed
    /// ([`Gateway::seal_child`]), recorded ([`Gateway::record_child`]) and no
    /// longer held.
    pub fn confirm_child(
        &self,
        id: &str,
        key_id: &str,
        signature: &str,
        via: &str,
    ) -> Result<(MandateToken, ReceiptRef), ChildError> {
        let held = self.held(id)?;
        let token = self.seal_child(&held.parent, held.mandate, key_id, signature)?;
        let r = self.record_child(&token, via)?;
        Ok((token, r))
    }

    /// Declines the held child `id` (`by`: who declined), with a receipt
    /// (`"change": "declined"`).
    pub fn decline_child(&self, id: &str, by: &str) -> Result<ReceiptRef, ChildError> {
        let held = self.held(id)?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let unsigned = MandateToken {
            mandate: held.mandate,
            key_id: String::new(),
            signature: String::new(),
            ancestors: held.parent.lineage(),
        };
        let body = self.mandate_receipt("declined", &unsigned, by, now)?;
        let id = id.to_string();
        let owner = unsigned.mandate.owner.clone();
        self.in_tx(&mut |tx| {
            tx.state_put(PENDING_NS, &id, &Value::Null)?;
            listing::remove(tx, PENDING_NS, &owner, &id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// Revokes a recorded child mandate (and with it its own children),
    /// with a receipt (`"change": "revoked"`, `via` who revoked it). A
    /// mandate the store did not record is revoked with `ipc token revoke`.
    pub fn revoke_child(&self, id: &str, by: &str) -> Result<ReceiptRef, ChildError> {
        let mut found = None;
        self.store.transaction(&mut |tx| {
            found = get(tx, id)?;
            Ok(Value::Null)
        })?;
        let issued = found.ok_or_else(|| ChildError::Request {
            reason: format!("the store records no child mandate `{}`", echo(id)),
        })?;
        let now = self.now().map_err(|e| StoreError::Aborted(e.to_string()))?;
        let body = self.mandate_receipt("revoked", &issued.token, by, now)?;
        let id = id.to_string();
        self.in_tx(&mut |tx| {
            tx.revoke(&id)?;
            tx.append_receipt_jcs(&body)
        })
    }

    /// Every child mandate, held or issued: `{mandate, parent, user, owner,
    /// status, expires_at, token?}` (what `ipc mandates list` prints too).
    pub fn mandate_listing(&self) -> Result<Vec<Value>, ChildError> {
        let held = self.held_children()?;
        let mut out: Vec<Value> = held.iter().map(held_row).collect();
        self.store.transaction(&mut |tx| {
            out.truncate(held.len());
            for i in recorded(tx)? {
                let revoked = chain_revoked(tx, &i.token)?;
                out.push(issued_row(&i, revoked));
            }
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// One child mandate by its id, as [`Gateway::mandate_listing`] lists
    /// it: issued, or held whether the listing still shows it or not (one
    /// pushed out of its bounds is found by its id, as it is confirmed).
    pub fn mandate_row(&self, id: &str) -> Result<Option<Value>, ChildError> {
        let mut out = None;
        self.store.transaction(&mut |tx| {
            out = match get(tx, id)? {
                Some(i) => {
                    let revoked = chain_revoked(tx, &i.token)?;
                    Some(issued_row(&i, revoked))
                }
                None => held_get(tx, id)?.as_ref().map(held_row),
            };
            Ok(Value::Null)
        })?;
        Ok(out)
    }

    /// Runs `f` in a transaction and returns the receipt link it appended.
    fn in_tx(
        &self,
        f: &mut dyn FnMut(&mut dyn Tx) -> Result<crate::store::ChainLink, StoreError>,
    ) -> Result<ReceiptRef, ChildError> {
        let mut link = None;
        self.store.transaction(&mut |tx| {
            link = Some(f(tx)?);
            Ok(Value::Null)
        })?;
        let link = link.ok_or_else(|| StoreError::Backend("no receipt".into()))?;
        Ok(ReceiptRef {
            seq: link.seq,
            hash: link.hash,
        })
    }

    /// The receipt of a change to a child mandate: `change` (`proposed`,
    /// `issued`, `declined`, `revoked`), the mandate's hash and chain, the
    /// key that signed it (once issued), `via` (how, or by whom).
    fn mandate_receipt(
        &self,
        change: &str,
        token: &MandateToken,
        via: &str,
        now: i64,
    ) -> Result<crate::canonical::Jcs, ChildError> {
        let m = &token.mandate;
        let hash = token
            .mandate_hash()
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        let ancestors: Vec<String> = token
            .ancestors
            .iter()
            .map(|a| a.mandate.id.clone())
            .collect();
        let mut mw = ObjectWriter::new();
        mw.strs("ancestors", &ancestors)
            .str("id", &m.id)
            .str("owner", &m.owner)
            .str("user", &m.user);
        let mut w = ObjectWriter::new();
        w.str("bundle", &self.bundle_hash)
            .str("change", change)
            .str("hash", &hash)
            .opt_str(
                "key_id",
                Some(token.key_id.as_str()).filter(|k| !k.is_empty()),
            )
            .str("kind", "mandate")
            .jcs("mandate", &mw.finish())
            .str("owner", &m.owner)
            .str("time", &format_time(now))
            .str("via", via);
        Ok(w.finish())
    }
}

/// A child waiting for its user's confirmation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Held {
    pub parent: MandateToken,
    /// Unsigned: what the user signs (the JCS of it).
    pub mandate: Mandate,
    pub created_at: i64,
}

const PENDING_NS: &str = "mandates.pending";

/// The ids under `ns`'s one index (the recorded children's).
fn index_all(tx: &mut dyn Tx, ns: &str) -> Result<Vec<String>, StoreError> {
    listing::names(tx, ns, INDEX)
}

/// One held child, by id (a key of the listing is none).
fn held_get(tx: &mut dyn Tx, id: &str) -> Result<Option<Held>, StoreError> {
    if listing::is_listing_key(id) {
        return Ok(None);
    }
    match tx.state_get(PENDING_NS, id)?.filter(|v| !v.is_null()) {
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("held mandate `{}`: {e}", echo(id)))),
        None => Ok(None),
    }
}

/// A held child as the listing shows it.
fn held_row(h: &Held) -> Value {
    json!({
        "mandate": h.mandate.id, "parent": h.parent.mandate.id, "user": h.mandate.user,
        "owner": h.mandate.owner, "status": "pending", "expires_at": h.mandate.expires_at,
    })
}

/// An issued child as the listing shows it (`revoked`: a link of its chain
/// is).
fn issued_row(i: &Issued, revoked: bool) -> Value {
    let m = &i.token.mandate;
    json!({
        "mandate": m.id, "parent": m.parent.as_ref().map(|p| p.id.clone()), "user": m.user,
        "owner": m.owner, "status": if revoked { "revoked" } else { "issued" },
        "expires_at": m.expires_at, "via": i.via, "token": i.token,
    })
}

/// Whether `token` or one of its ancestors is revoked.
fn chain_revoked(tx: &mut dyn Tx, token: &MandateToken) -> Result<bool, StoreError> {
    for id in token
        .ancestors
        .iter()
        .map(|a| &a.mandate.id)
        .chain(std::iter::once(&token.mandate.id))
    {
        if tx.revoked(id)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn index_push(tx: &mut dyn Tx, ns: &str, id: &str) -> Result<(), StoreError> {
    let mut all = index_all(tx, ns)?;
    all.push(id.to_string());
    tx.state_put(ns, INDEX, &Value::from(all))
}

/// The child mandates recorded in the store, oldest first.
pub fn recorded(tx: &mut dyn Tx) -> Result<Vec<Issued>, StoreError> {
    let mut out = vec![];
    for id in index_all(tx, NS)? {
        if let Some(i) = get(tx, &id)? {
            out.push(i);
        }
    }
    Ok(out)
}

/// One recorded child mandate.
pub fn get(tx: &mut dyn Tx, id: &str) -> Result<Option<Issued>, StoreError> {
    if id == INDEX {
        return Ok(None);
    }
    match tx.state_get(NS, id)? {
        Some(v) => serde_json::from_value(v)
            .map(Some)
            .map_err(|e| StoreError::Backend(format!("recorded mandate `{}`: {e}", echo(id)))),
        None => Ok(None),
    }
}

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "chain_held_tests.rs"]
mod held_tests;
