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
//!
//! [`Gateway::widenings`]: super::Gateway::widenings
//! [`Gateway::draft_child`]: super::Gateway::draft_child
//! [`Gateway::propose_child`]: super::Gateway::propose_child
//! [`Gateway::seal_child`]: super::Gateway::seal_child
//! [`Gateway::issue_child`]: super::Gateway::issue_child
//! [`Gateway::record_child`]: super::Gateway::record_child
//! [`Gateway::decide`]: super::Gateway::decide

mod held;
mod issue;
mod verify;

pub use super::widening::Widening;
pub use held::{Held, get, recorded};

use super::mandate::{Mandate, MandateToken};
use crate::base::Money;
use crate::canonical::to_jcs;
use crate::store::StoreError;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
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

#[cfg(test)]
#[path = "chain_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "chain_held_tests.rs"]
mod held_tests;
