//! The proxy's durable session: the mandates `[session]` issues are kept in
//! the store under the config's path (a session record), and every start
//! of `ipc mcp` with the same config and store continues them: the same
//! mandate ids, hence the same budget spent and call count, the same
//! pending approvals and the same idempotency (the operation hash binds the
//! mandate id), until they expire. A new session starts only when the
//! session's declared content changes (its fingerprint), when the record's
//! mandates expired, or when asked (`ipc mcp --new-session`); the previous
//! mandates are then revoked in the store, with a receipt
//! (`"kind": "session"`), never forgotten. A session from a `token` file is
//! that token's: nothing is recorded (its id is already stable).
//!
//! The fingerprint is the hash (JCS) of what the mandates declare, without
//! what each issuance draws anew (id, issue and expiry time): the bundle,
//! and per pack the verifying key, the user, owner, scopes, claims, budget,
//! call cap, narrowing and the validity (ttl); and the actions the tools
//! declare reads (`effect = "read"`), when there are any: a tool turned
//! into a read starts a session whose operations no write executed yet, so
//! none of its calls is answered from a write's record.

use crate::base::json::format_time;
use crate::canonical::ObjectWriter;
use crate::gateway::mandate::MandateToken;
use crate::mcp::config::SessionConfig;
use crate::store::{Store, StoreError, Tx};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::path::Path;

/// Where session records are kept in the store's state, by config path.
pub const SESSION_NS: &str = "mcp-session";

/// How a start of the proxy came to its session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The mandate is a token read from a file: nothing to continue.
    Given,
    /// The stored session goes on.
    Continued {
        mandates: Vec<String>,
        started_at: i64,
        expires_at: i64,
        /// A mandate of it was revoked (`ipc token revoke`): every call is
        /// refused until a new session is asked for; a restart never
        /// undoes a revocation.
        revoked: bool,
    },
    /// A new session (its mandates) replaces the revoked ones, if any.
    New {
        mandates: Vec<String>,
        revoked: Vec<String>,
        why: Why,
    },
}

/// Why a new session was started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// No session was recorded for this config in this store.
    First,
    /// The session's declared content (`[session]`, the bundle, the keys)
    /// changed.
    Changed,
    /// The recorded session's mandates expired.
    Expired,
    /// `--new-session`.
    Asked,
}

impl Why {
    pub fn as_str(self) -> &'static str {
        match self {
            Why::First => "first",
            Why::Changed => "changed",
            Why::Expired => "expired",
            Why::Asked => "asked",
        }
    }
}

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum SessionError {
    /// `--new-session` with a session read from `token`: a given token is
    /// used as it is, and nothing is issued.
    #[error(
        "the session's mandate is the token given in `[session] token`: `--new-session` issues none"
    )]
    #[diagnostic(
        code(ipc::mcp::new_session_token),
        help(
            "revoke the token (`ipc token revoke ID`) and issue another (`ipc token issue`), or issue the session from `[session]` (`user`, `scopes`, `issuer_key`, ...)"
        )
    )]
    Token,
    /// The durable session's record in the store cannot be read: the proxy
    /// refuses to start rather than silently start a new session.
    #[error("the session record of `{slot}` in the store cannot be read: {reason}")]
    #[diagnostic(
        code(ipc::mcp::session_record),
        help("the store's `mcp-session` state is written by `ipc mcp` only; check the store")
    )]
    Record { slot: String, reason: String },
    /// A mandate of the durable session cannot be read back.
    #[error("a mandate of the session cannot be read: {reason}")]
    #[diagnostic(code(ipc::mcp::session_mandate))]
    Mandate { reason: String },
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
}

/// The session as the store keeps it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Record {
    fingerprint: String,
    /// `(pack, signed token)`, as [`SessionConfig::mandates`].
    mandates: Vec<(String, Value)>,
    started_at: i64,
    /// The earliest expiry of its mandates.
    expires_at: i64,
}

fn parse(token: &Value) -> Result<MandateToken, SessionError> {
    serde_json::from_value(token.clone()).map_err(|e| SessionError::Mandate {
        reason: e.to_string(),
    })
}

/// The session's declared content, hashed: the bundle and each mandate
/// without its id, issue and expiry times (its validity instead).
pub fn fingerprint(
    bundle_hash: &str,
    mandates: &[(String, Value)],
    reads: &[String],
) -> Result<String, SessionError> {
    let mut declared = vec![];
    for (pack, token) in mandates {
        let t = parse(token)?;
        let mut m = serde_json::to_value(&t.mandate).map_err(|e| SessionError::Mandate {
            reason: e.to_string(),
        })?;
        if let Some(o) = m.as_object_mut() {
            for k in ["id", "issued_at", "expires_at"] {
                o.remove(k);
            }
        }
        declared.push(json!({
            "pack": pack,
            "key_id": t.key_id,
            "ttl": t.mandate.expires_at.saturating_sub(t.mandate.issued_at),
            "mandate": m,
        }));
    }
    let mut content = json!({"bundle": bundle_hash, "mandates": declared});
    // the actions whose calls are sent again (`effect = "read"`): a
    // session of writes only keeps the fingerprint it had before reads
    // existed
    if !reads.is_empty() {
        let mut reads = reads.to_vec();
        reads.sort_unstable();
        reads.dedup();
        content["reads"] = json!(reads);
    }
    crate::canonical::hash_of(&content).map_err(|e| SessionError::Mandate {
        reason: e.to_string(),
    })
}

/// The key a config's session is recorded under: its canonical path.
pub fn slot(config: &Path) -> String {
    std::fs::canonicalize(config)
        .unwrap_or_else(|_| config.to_path_buf())
        .display()
        .to_string()
}

fn ids(mandates: &[(String, Value)]) -> Result<Vec<String>, SessionError> {
    mandates
        .iter()
        .map(|(_, t)| parse(t).map(|t| t.mandate.id))
        .collect()
}

/// A new session `new` recorded in `tx` in place of `previous` (whose
/// mandates are revoked), with its `session` receipt (`issued`: the new
/// mandates' ids).
fn record_new(
    tx: &mut dyn Tx,
    slot: &str,
    bundle_hash: &str,
    previous: Option<&Record>,
    new: &Record,
    issued: &[String],
    why: Why,
) -> Result<Start, StoreError> {
    let revoked = match previous {
        Some(p) => ids(&p.mandates).map_err(|e| StoreError::Aborted(e.to_string()))?,
        None => vec![],
    };
    for id in &revoked {
        tx.revoke(id)?;
    }
    let record = serde_json::to_value(new).map_err(|e| StoreError::Aborted(e.to_string()))?;
    tx.state_put(SESSION_NS, slot, &record)?;
    let mut w = ObjectWriter::new();
    w.str("bundle", bundle_hash)
        .str("change", "start")
        .str("config", slot)
        .str("fingerprint", &new.fingerprint)
        .str("kind", "session")
        .strs("mandates", issued)
        .str("reason", why.as_str())
        .strs("revoked", &revoked)
        .str("time", &format_time(new.started_at));
    tx.append_receipt_jcs(&w.finish())?;
    Ok(Start::New {
        mandates: issued.to_vec(),
        revoked,
        why,
    })
}

/// Continues the session recorded for `config` in `store`, or records
/// `session`'s freshly issued mandates as a new one (`fresh`:
/// `--new-session`), revoking the previous; `now` is the gateway's time;
/// `reads`: the actions the config's tools declare `effect = "read"`.
/// On return `session` holds the mandates to decide under.
pub fn resume(
    store: &dyn Store,
    bundle_hash: &str,
    now: i64,
    config: &Path,
    session: &mut SessionConfig,
    reads: &[String],
    fresh: bool,
) -> Result<Start, SessionError> {
    if !session.issued {
        return if fresh {
            Err(SessionError::Token)
        } else {
            Ok(Start::Given)
        };
    }
    let slot = slot(config);
    let fingerprint = fingerprint(bundle_hash, &session.mandates, reads)?;
    let issued = ids(&session.mandates)?;
    let mut expires_at = i64::MAX;
    for (_, t) in &session.mandates {
        expires_at = expires_at.min(parse(t)?.mandate.expires_at);
    }
    let new = Record {
        fingerprint: fingerprint.clone(),
        mandates: session.mandates.clone(),
        started_at: now,
        expires_at,
    };
    let mut start: Option<(Start, Record)> = None;
    let mut unreadable: Option<String> = None;
    store.transaction(&mut |tx| {
        start = None;
        unreadable = None;
        let previous = match tx.state_get(SESSION_NS, &slot)? {
            None | Some(Value::Null) => None,
            Some(v) => match serde_json::from_value::<Record>(v) {
                Ok(r) => Some(r),
                Err(e) => {
                    unreadable = Some(e.to_string());
                    return Ok(Value::Null);
                }
            },
        };
        let why = match &previous {
            None => Why::First,
            Some(_) if fresh => Why::Asked,
            Some(p) if p.fingerprint != fingerprint => Why::Changed,
            Some(p) if now >= p.expires_at => Why::Expired,
            Some(p) => {
                let mandates = ids(&p.mandates).map_err(|e| StoreError::Aborted(e.to_string()))?;
                let mut revoked = false;
                for id in &mandates {
                    revoked |= tx.revoked(id)?;
                }
                start = Some((
                    Start::Continued {
                        mandates,
                        started_at: p.started_at,
                        expires_at: p.expires_at,
                        revoked,
                    },
                    p.clone(),
                ));
                return Ok(Value::Null);
            }
        };
        start = Some((
            record_new(
                tx,
                &slot,
                bundle_hash,
                previous.as_ref(),
                &new,
                &issued,
                why,
            )?,
            new.clone(),
        ));
        Ok(Value::Null)
    })?;
    if let Some(reason) = unreadable {
        return Err(SessionError::Record { slot, reason });
    }
    let (start, record) = start.ok_or_else(|| SessionError::Record {
        slot: slot.clone(),
        reason: "the transaction left no session".into(),
    })?;
    session.token = record
        .mandates
        .first()
        .map(|(_, t)| t.clone())
        .unwrap_or(Value::Null);
    session.mandates = record.mandates;
    Ok(start)
}

/// One line for the operator (on stderr: stdout is the MCP channel).
pub fn describe(start: &Start) -> Option<String> {
    let list = |ids: &[String]| {
        ids.iter()
            .map(|i| format!("`{i}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match start {
        Start::Given => None,
        Start::Continued {
            mandates,
            started_at,
            expires_at,
            revoked,
        } => Some(format!(
            "session continued: mandate {} (started {}, expires {}){}; `--new-session` starts another",
            list(mandates),
            format_time(*started_at),
            format_time(*expires_at),
            if *revoked {
                ", REVOKED: every call is refused"
            } else {
                ""
            }
        )),
        Start::New {
            mandates,
            revoked,
            why,
        } => {
            let because = match why {
                Why::First => "no session recorded for this config".to_string(),
                Why::Changed => "the session's declared content changed".to_string(),
                Why::Expired => "the previous session expired".to_string(),
                Why::Asked => "`--new-session`".to_string(),
            };
            let old = if revoked.is_empty() {
                String::new()
            } else {
                format!("; revoked {}", list(revoked))
            };
            Some(format!(
                "new session: mandate {} ({because}){old}",
                list(mandates)
            ))
        }
    }
}
