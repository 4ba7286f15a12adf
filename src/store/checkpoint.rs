//! Signed checkpoints of a receipt chain: the head (sequence number and
//! hash) at one moment, signed with an Ed25519 key, in a small file meant
//! to be kept somewhere the store's writers cannot reach.
//!
//! ```text
//! { "format": "intentplane-checkpoint/1",
//!   "seq": 12,
//!   "hash": "sha256:<hex>",
//!   "time": "2026-11-27T18:40:00Z",
//!   "signature": {"key_id": "<16 hex>", "sig": "<base64>"} }
//! ```
//!
//! The signature is over the canonical JSON (RFC 8785) of `{format, hash,
//! key_id, seq, time}`. A record's hash covers every record before it
//! (through `prev_hash`), so a chain that verifies and holds the signed
//! hash at the signed sequence number extends the checkpoint: nothing up
//! to it was deleted, edited or rewritten since. The key that verifies a
//! checkpoint is given by the trusted side; the file's `key_id` only names
//! the key it claims, for a readable error.
//!
//! A store has no identity of its own: the signed hash binds a checkpoint
//! to one chain, so a checkpoint of another store fails as a mismatch (or
//! as a truncation, when the other chain is shorter).

use crate::canonical::{CanonicalError, MAX_EXACT_INTEGER, to_jcs};
use crate::keys::{KeyError, PublicKey, SecretKey};
use miette::Diagnostic;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use thiserror::Error;

/// The format this version reads and writes.
pub const FORMAT: &str = "intentplane-checkpoint/1";

/// A checkpoint file is a few hundred bytes; anything larger is not one.
const MAX_CHECKPOINT_FILE: u64 = 64 * 1024;

#[derive(Debug, Error, Diagnostic)]
pub enum CheckpointError {
    /// The checkpoint file cannot be read.
    #[error("cannot read checkpoint `{path}`: {reason}")]
    #[diagnostic(code(ipc::receipts::checkpoint_io))]
    Io { path: String, reason: String },

    /// The file is not a checkpoint of `ipc receipts checkpoint` (or of
    /// another format version).
    #[error("`{path}` is not a receipts checkpoint: {reason}")]
    #[diagnostic(
        code(ipc::receipts::checkpoint_format),
        help("checkpoints come from `ipc receipts checkpoint STORE --key KEY`")
    )]
    Format { path: String, reason: String },

    /// The checkpoint names another signing key than the one given to verify
    /// it with; the verifying key always comes from the command line.
    #[error("checkpoint `{path}` names the signing key `{signed_by}`, not the given key `{given}`")]
    #[diagnostic(
        code(ipc::receipts::checkpoint_wrong_key),
        help(
            "verify with the public half of the key that signs your checkpoints, kept on the trusted side"
        )
    )]
    WrongKey {
        path: String,
        signed_by: String,
        given: String,
    },

    /// The checkpoint's signature does not verify: it was edited after
    /// signing.
    #[error("the signature of checkpoint `{path}` does not verify with key `{key_id}`")]
    #[diagnostic(
        code(ipc::receipts::checkpoint_signature),
        help("the checkpoint was altered after it was signed; do not trust it")
    )]
    BadSignature { path: String, key_id: String },

    /// The checkpoint cannot be written.
    #[error("cannot write checkpoint `{path}`: {reason}")]
    #[diagnostic(code(ipc::receipts::checkpoint_write))]
    Write { path: String, reason: String },

    /// A store without receipts has no head to sign.
    #[error("the chain of `{store}` is empty: there is nothing to checkpoint")]
    #[diagnostic(code(ipc::receipts::empty_chain))]
    EmptyChain { store: String },

    /// `ipc receipts checkpoint` signs only a store that verifies: signing a
    /// tampered chain would vouch for it.
    #[error("refusing to checkpoint `{store}`: the store does not verify ({problems})")]
    #[diagnostic(
        code(ipc::receipts::unverified),
        help(
            "a checkpoint vouches for the chain as it is; see `ipc receipts verify` for each problem"
        )
    )]
    Unverified { store: String, problems: String },

    #[error(transparent)]
    #[diagnostic(transparent)]
    Key(#[from] KeyError),

    #[error(transparent)]
    #[diagnostic(transparent)]
    Canonical(#[from] CanonicalError),
}

/// A signed checkpoint, as in its file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Checkpoint {
    pub format: String,
    /// The sequence number of the record checkpointed (the head's).
    pub seq: u64,
    /// That record's hash.
    pub hash: String,
    /// When the checkpoint was signed (RFC 3339, UTC).
    pub time: String,
    pub signature: CheckpointSignature,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSignature {
    /// [`PublicKey::id`] of the signing key (signed too).
    pub key_id: String,
    /// Base64 Ed25519 signature over the canonical JSON of the content.
    pub sig: String,
}

/// What the signature covers (field names in canonical order).
#[derive(Serialize)]
struct Signed<'a> {
    format: &'a str,
    hash: &'a str,
    key_id: &'a str,
    seq: u64,
    time: &'a str,
}

impl Checkpoint {
    /// Signs the record `seq` with hash `hash` at time `now` (seconds
    /// since the epoch).
    pub fn sign(seq: u64, hash: &str, now: i64, key: &SecretKey) -> Result<Self, CheckpointError> {
        let mut cp = Checkpoint {
            format: FORMAT.to_string(),
            seq,
            hash: hash.to_string(),
            time: crate::base::json::format_time(now),
            signature: CheckpointSignature {
                key_id: key.public().id(),
                sig: String::new(),
            },
        };
        cp.signature.sig = key.sign(cp.signed_text()?.as_bytes());
        Ok(cp)
    }

    fn signed_text(&self) -> Result<String, CanonicalError> {
        to_jcs(&Signed {
            format: &self.format,
            hash: &self.hash,
            key_id: &self.signature.key_id,
            seq: self.seq,
            time: &self.time,
        })
    }

    /// Reads a checkpoint and checks it with the trusted side's key:
    /// format, content, then the signature.
    pub fn load(path: &Path, key: &PublicKey) -> Result<Self, CheckpointError> {
        let shown = path.display().to_string();
        let cp = Self::from_text(&shown, &read_small(path)?)?;
        cp.verify(&shown, key)?;
        Ok(cp)
    }

    /// Parses a checkpoint's text and checks its content (not the
    /// signature: see [`Checkpoint::verify`]).
    pub fn from_text(path: &str, text: &str) -> Result<Self, CheckpointError> {
        let format = |reason: String| CheckpointError::Format {
            path: path.to_string(),
            reason,
        };
        let value = crate::base::json::parse_strict(text).map_err(format)?;
        let cp: Checkpoint =
            serde_json::from_value(value).map_err(|e| format(e.to_string().to_lowercase()))?;
        if cp.format != FORMAT {
            return Err(format(format!(
                "format `{}`, expected `{FORMAT}`",
                cp.format.escape_debug()
            )));
        }
        if cp.seq == 0 || cp.seq > MAX_EXACT_INTEGER {
            return Err(format(format!("`seq` {} is not a record's", cp.seq)));
        }
        let hex = cp.hash.strip_prefix("sha256:").unwrap_or("");
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(format(format!(
                "`hash` `{}` is not `sha256:` and 64 lower-case hex digits",
                cp.hash.escape_debug()
            )));
        }
        Ok(cp)
    }

    /// Checks the signature with the trusted side's key.
    pub fn verify(&self, path: &str, key: &PublicKey) -> Result<(), CheckpointError> {
        if self.signature.key_id != key.id() {
            return Err(CheckpointError::WrongKey {
                path: path.to_string(),
                signed_by: self.signature.key_id.escape_debug().to_string(),
                given: key.id(),
            });
        }
        let msg = self.signed_text()?;
        key.verify(msg.as_bytes(), &self.signature.sig)
            .map_err(|e| match e {
                KeyError::SignatureEncoding { reason } => CheckpointError::Format {
                    path: path.to_string(),
                    reason: format!("`signature.sig` is not a signature: {reason}"),
                },
                _ => CheckpointError::BadSignature {
                    path: path.to_string(),
                    key_id: key.id(),
                },
            })
    }

    /// The file's text: pretty JSON and a newline.
    pub fn to_text(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Writes the file whole or not at all (a temporary file in the same
    /// folder, synced, then renamed over `path`).
    pub fn write(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomic(path, &self.to_text())
    }
}

/// Writes `text` to `path` whole or not at all (a temporary file in the
/// same folder, synced, then renamed over `path`).
pub(crate) fn write_atomic(path: &Path, text: &str) -> Result<(), CheckpointError> {
    let err = |e: std::io::Error| CheckpointError::Write {
        path: path.display().to_string(),
        reason: e.to_string().to_lowercase(),
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(err)?;
    tmp.write_all(text.as_bytes()).map_err(err)?;
    tmp.as_file().sync_all().map_err(err)?;
    tmp.persist(path).map_err(|e| err(e.error))?;
    Ok(())
}

fn read_small(path: &Path) -> Result<String, CheckpointError> {
    read_bounded(path, MAX_CHECKPOINT_FILE)
}

/// A file of at most `max` bytes of UTF-8 text.
pub(crate) fn read_bounded(path: &Path, max: u64) -> Result<String, CheckpointError> {
    let shown = path.display().to_string();
    let io = |reason: String| CheckpointError::Io {
        path: shown.clone(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| io(e.to_string().to_lowercase()))?;
    if meta.is_dir() {
        return Err(io("is a folder".into()));
    }
    if meta.len() > max {
        return Err(CheckpointError::Format {
            path: shown.clone(),
            reason: format!("{} bytes is too large for a checkpoint", meta.len()),
        });
    }
    let bytes = std::fs::read(path).map_err(|e| io(e.to_string().to_lowercase()))?;
    String::from_utf8(bytes).map_err(|_| CheckpointError::Format {
        path: shown.clone(),
        reason: "not utf-8 text".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH: &str = "sha256:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn a_checkpoint_round_trips_and_verifies() {
        let k = SecretKey::from_seed(&[3; 32]);
        let cp = Checkpoint::sign(12, HASH, 1_764_268_800, &k).unwrap();
        assert_eq!(cp.time, "2025-11-27T18:40:00Z");
        let back = Checkpoint::from_text("cp", &cp.to_text()).unwrap();
        assert_eq!(back, cp);
        back.verify("cp", &k.public()).unwrap();
    }

    #[test]
    fn wrong_key_tampering_and_malformed_content_are_refused() {
        let k = SecretKey::from_seed(&[3; 32]);
        let other = SecretKey::from_seed(&[4; 32]);
        let cp = Checkpoint::sign(12, HASH, 0, &k).unwrap();
        assert!(matches!(
            cp.verify("cp", &other.public()),
            Err(CheckpointError::WrongKey { .. })
        ));
        // signed by another key that claims to be `k`
        let mut forged = Checkpoint::sign(12, HASH, 0, &other).unwrap();
        forged.signature.key_id = k.public().id();
        assert!(matches!(
            forged.verify("cp", &k.public()),
            Err(CheckpointError::BadSignature { .. })
        ));
        for edit in [
            |c: &mut Checkpoint| c.seq = 13,
            |c: &mut Checkpoint| c.hash = c.hash.replace("00", "01"),
            |c: &mut Checkpoint| c.time = "2030-01-01T00:00:00Z".into(),
        ] {
            let mut t = cp.clone();
            edit(&mut t);
            assert!(
                matches!(
                    t.verify("cp", &k.public()),
                    Err(CheckpointError::BadSignature { .. })
                ),
                "{t:?}"
            );
        }
        let text = cp.to_text();
        for bad in [
            "not json".to_string(),
            text.replace("\"seq\": 12", "\"seq\": 12, \"seq\": 11"),
            text.replace("\"seq\": 12", "\"seq\": 0"),
            text.replace("intentplane-checkpoint/1", "intentplane-checkpoint/2"),
            text.replace("\"time\"", "\"extra\": 1, \"time\""),
            text.replace(HASH, "sha256:ABC"),
        ] {
            assert!(
                matches!(
                    Checkpoint::from_text("cp", &bad),
                    Err(CheckpointError::Format { .. })
                ),
                "{bad}"
            );
        }
        let mut t = cp.clone();
        t.signature.sig = "!!".into();
        assert!(matches!(
            t.verify("cp", &k.public()),
            Err(CheckpointError::Format { .. })
        ));
    }
}
