//! The runtime bundle: one JSON file the gateway runs from.
//!
//! ```text
//! { "format": "intentplane-bundle/1",
//!   "packs": [{name, version, description}],          sorted by name
//!   "schema": "<cedar schema text>",
//!   "policies": [{id, source, text}],                 bundle order
//!   "table": {packs: [...], actions: [...]},          see format.rs
//!   "hash": "sha256:<hex>",
//!   "signature": {key_id, sig} }                      only when signed
//! ```
//!
//! `hash` is the SHA-256 of the RFC 8785 encoding of everything except
//! `hash` and `signature`; `signature` is an Ed25519 signature over the
//! bytes of the `hash` string. The file is written deterministically (same
//! packs → byte-identical file: no timestamps, no absolute paths, packs in
//! name order). [`Bundle::load`] checks the format, the hash, the internal
//! references and, given a key, the signature; [`Bundle::cedar`] turns a
//! loaded bundle into the Cedar schema and policy sets the gateway uses.

pub mod format;
pub mod invariants;

pub use format::{Generated, PackInfo, PolicyEntry, Table, TableAction, TablePack};

use crate::canonical::{self, CanonicalError};
use crate::keys::{KeyError, PublicKey, SecretKey};
use cedar_policy::{Policy, PolicyId, PolicySet, Schema, ValidationMode, Validator};
use miette::Diagnostic;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::Path;
use thiserror::Error;

/// The format this version reads and writes.
pub const FORMAT: &str = "intentplane-bundle/1";

/// A bundle file is generated text; anything larger is not one.
pub const MAX_BUNDLE_LEN: u64 = 64 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    pub format: String,
    pub packs: Vec<PackInfo>,
    pub schema: String,
    pub policies: Vec<PolicyEntry>,
    pub table: Table,
    pub hash: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<BundleSignature>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BundleSignature {
    /// [`PublicKey::id`] of the signing key.
    pub key_id: String,
    /// Base64 Ed25519 signature over the bytes of the `hash` string.
    pub sig: String,
}

/// What the hash covers.
#[derive(Serialize)]
struct Content<'a> {
    format: &'a str,
    packs: &'a [PackInfo],
    schema: &'a str,
    policies: &'a [PolicyEntry],
    table: &'a Table,
}

#[derive(Debug, Error, Diagnostic, Clone, PartialEq)]
pub enum BundleError {
    /// The bundle file cannot be read (missing, a folder, no permission).
    #[error("cannot read `{path}`: {reason}")]
    #[diagnostic(code(ipc::bundle::io))]
    Io { path: String, reason: String },

    /// `ipc build` cannot write the bundle. It writes a temporary file and
    /// renames it, so a failed write never leaves a partial bundle behind.
    #[error("cannot write `{path}`: {reason}")]
    #[diagnostic(code(ipc::bundle::write))]
    Write { path: String, reason: String },

    /// The file is not JSON: not a bundle at all (a pack file, a key, a
    /// truncated download).
    #[error("`{path}` is not json: {reason}")]
    #[diagnostic(
        code(ipc::bundle::not_json),
        help("a bundle is the file `ipc build` writes")
    )]
    NotJson { path: String, reason: String },

    /// JSON, but not shaped like a bundle (no `format`, no `table`, ...).
    #[error("`{path}` is not an intentplane bundle: {reason}")]
    #[diagnostic(
        code(ipc::bundle::not_a_bundle),
        help("a bundle is the file `ipc build` writes")
    )]
    NotABundle { path: String, reason: String },

    /// A bundle of another format version: this `ipc` reads
    /// `intentplane-bundle/1` only (CHANGELOG.md) and never guesses at another.
    #[error("`{path}` has format `{found}`, this ipc reads `{expected}`")]
    #[diagnostic(
        code(ipc::bundle::format),
        help("rebuild the bundle with this version of `ipc build`")
    )]
    Format {
        path: String,
        found: String,
        expected: &'static str,
    },

    /// The content no longer hashes to the recorded `hash`: the file was
    /// edited after `ipc build`. Nothing in it is trusted.
    #[error(
        "`{path}` has been modified: its content hashes to `{actual}`, but it records `{expected}`"
    )]
    #[diagnostic(
        code(ipc::bundle::hash_mismatch),
        help("never edit a bundle; rebuild it from the packs with `ipc build`")
    )]
    HashMismatch {
        path: String,
        expected: String,
        actual: String,
    },

    /// A bundle whose parts do not fit together: a policy id the table names
    /// but the bundle lacks, a table that does not deserialise.
    #[error("`{path}` is malformed: {reason}")]
    #[diagnostic(code(ipc::bundle::malformed))]
    Malformed { path: String, reason: String },

    /// A key was given to verify the bundle with, but the bundle carries no
    /// signature.
    #[error("`{path}` is not signed, but a key was given to verify it with")]
    #[diagnostic(
        code(ipc::bundle::unsigned),
        help("sign it with `ipc build --sign KEYFILE`, or load it without a key")
    )]
    Unsigned { path: String },

    /// The bundle is signed, by another key than the one given.
    #[error("`{path}` is signed by key `{signed_by}`, not by the given key `{given}`")]
    #[diagnostic(code(ipc::bundle::wrong_key))]
    WrongKey {
        path: String,
        signed_by: String,
        given: String,
    },

    /// The signature does not verify over the recorded hash: the hash or the
    /// signature was altered after signing.
    #[error("the signature of `{path}` does not verify with key `{key_id}`: {reason}")]
    #[diagnostic(
        code(ipc::bundle::bad_signature),
        help("the hash or the signature was altered after signing; do not trust this bundle")
    )]
    BadSignature {
        path: String,
        key_id: String,
        reason: String,
    },

    /// The table breaks what `ipc build` guarantees (a critical parameter
    /// without a source, a lookup keyed by an untrusted value, a rule whose
    /// policy is not evaluated, ...), checked at every load, signed or not: a
    /// bundle edited and re-hashed is refused even with a valid hash.
    #[error("`{path}` breaks an invariant of every built bundle: {reason}")]
    #[diagnostic(
        code(ipc::bundle::invariant),
        help(
            "the table was edited after `ipc build`: rebuild the bundle from its packs, and do not run this one"
        )
    )]
    Invariant { path: String, reason: String },
    /// No key is pinned to check the bundle's signature against
    /// (`--bundle-key`, the world's `bundle_keys`): the gateway refuses to run a
    /// bundle anyone could have written, unless `--allow-unsigned` says so.
    #[error("`{path}` would run without its signature checked: no bundle key is pinned")]
    #[diagnostic(
        code(ipc::bundle::key_required),
        help(
            "pin the key your bundles are signed with: `bundle_keys = [\"bundle.pub\"]` in the world, or `--bundle-key FILE`; `--allow-unsigned` runs an unverified bundle, for development only"
        )
    )]
    KeyRequired { path: String },
    /// The bundle is signed by a key the world does not pin in `bundle_keys`.
    #[error(
        "`{path}` is signed by key `{signed_by}`, which is not one of the world's `bundle_keys`"
    )]
    #[diagnostic(
        code(ipc::bundle::untrusted_key),
        help(
            "sign the bundle with a pinned key (`ipc build --sign`), or add its public key to `bundle_keys` if you trust it"
        )
    )]
    UntrustedKey { path: String, signed_by: String },
    /// The bundle's Cedar schema or policies do not parse or validate.
    #[error("the bundle's cedar does not load: {reason}")]
    #[diagnostic(code(ipc::bundle::cedar))]
    Cedar { reason: String },

    #[error(transparent)]
    #[diagnostic(transparent)]
    Canonical(#[from] CanonicalError),
}

/// The Cedar side of a loaded bundle: built once at gateway start-up.
#[derive(Clone, Debug)]
pub struct CedarBundle {
    pub schema: Schema,
    /// Every policy, with its real policy id.
    pub policies: PolicySet,
    /// Per action name, only the policies listed for it in the table.
    pub by_action: BTreeMap<String, PolicySet>,
}

impl Bundle {
    /// Wraps generated Cedar and table, and computes the hash.
    pub fn from_generated(g: Generated) -> Result<Self, BundleError> {
        let mut b = Bundle {
            format: FORMAT.into(),
            packs: g.packs,
            schema: g.schema,
            policies: g.policies,
            table: g.table,
            hash: String::new(),
            signature: None,
        };
        b.hash = b.content_hash()?;
        Ok(b)
    }

    /// `sha256:<hex>` over the canonical encoding of the content.
    pub fn content_hash(&self) -> Result<String, BundleError> {
        Ok(canonical::hash_of(&Content {
            format: &self.format,
            packs: &self.packs,
            schema: &self.schema,
            policies: &self.policies,
            table: &self.table,
        })?)
    }

    /// Signs the hash (replacing any earlier signature).
    pub fn sign(&mut self, key: &SecretKey) {
        self.signature = Some(BundleSignature {
            key_id: key.public().id(),
            sig: key.sign(self.hash.as_bytes()),
        });
    }

    /// The file's text: pretty JSON in field order, ending with a newline.
    pub fn to_json(&self) -> Result<String, BundleError> {
        serde_json::to_string_pretty(self)
            .map(|s| s + "\n")
            .map_err(|e| BundleError::Malformed {
                path: "<bundle>".into(),
                reason: e.to_string(),
            })
    }

    /// Writes the file atomically (a temporary file, then a rename), so a
    /// failed write never leaves a partial bundle.
    pub fn write(&self, path: &Path) -> Result<(), BundleError> {
        let shown = path.display().to_string();
        let werr = |e: std::io::Error| BundleError::Write {
            path: shown.clone(),
            reason: e.to_string().to_lowercase(),
        };
        let text = self.to_json()?;
        let mut tmp_name = path.as_os_str().to_os_string();
        tmp_name.push(format!(".tmp-{}", std::process::id()));
        let tmp = std::path::PathBuf::from(tmp_name);
        let result = std::fs::File::create(&tmp)
            .and_then(|mut f| {
                f.write_all(text.as_bytes())?;
                f.sync_all()
            })
            .and_then(|()| std::fs::rename(&tmp, path));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            return Err(werr(e));
        }
        Ok(())
    }

    /// Reads and verifies a bundle file: format, hash, internal references
    /// and — when a key is given — the signature (a key given for an
    /// unsigned bundle is an error).
    pub fn load(path: &Path, key: Option<&PublicKey>) -> Result<Self, BundleError> {
        let shown = path.display().to_string();
        let io = |reason: String| BundleError::Io {
            path: shown.clone(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| io(e.to_string().to_lowercase()))?;
        if meta.is_dir() {
            return Err(io("is a folder".into()));
        }
        if meta.len() > MAX_BUNDLE_LEN {
            return Err(io(format!(
                "{} bytes is larger than a bundle may be ({MAX_BUNDLE_LEN})",
                meta.len()
            )));
        }
        let bytes = std::fs::read(path).map_err(|e| io(e.to_string().to_lowercase()))?;
        Self::from_bytes(&bytes, &shown, key)
    }

    /// [`Bundle::load`] on bytes already read; `path` names them in errors.
    pub fn from_bytes(
        bytes: &[u8],
        path: &str,
        key: Option<&PublicKey>,
    ) -> Result<Self, BundleError> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| BundleError::NotJson {
            path: path.into(),
            reason: e.to_string(),
        })?;
        let not_bundle = |reason: &str| BundleError::NotABundle {
            path: path.into(),
            reason: reason.into(),
        };
        let Value::Object(obj) = &value else {
            return Err(not_bundle("the top level is not an object"));
        };
        match obj.get("format") {
            Some(Value::String(f)) if f == FORMAT => {}
            Some(Value::String(f)) => {
                return Err(BundleError::Format {
                    path: path.into(),
                    found: f.clone(),
                    expected: FORMAT,
                });
            }
            _ => return Err(not_bundle("it has no `format` field")),
        }
        let Some(Value::String(recorded)) = obj.get("hash") else {
            return Err(BundleError::Malformed {
                path: path.into(),
                reason: "it has no `hash` field".into(),
            });
        };
        let mut content = obj.clone();
        content.remove("hash");
        content.remove("signature");
        let actual = format!(
            "sha256:{}",
            canonical::sha256_hex(canonical::value_to_jcs(&Value::Object(content))?.as_bytes())
        );
        if actual != *recorded {
            return Err(BundleError::HashMismatch {
                path: path.into(),
                expected: recorded.clone(),
                actual,
            });
        }
        let bundle: Bundle = serde_json::from_value(value).map_err(|e| BundleError::Malformed {
            path: path.into(),
            reason: e.to_string(),
        })?;
        bundle.check_references(path)?;
        invariants::check(&bundle.table).map_err(|reason| BundleError::Invariant {
            path: path.into(),
            reason,
        })?;
        if let Some(k) = key {
            bundle.verify_signature(path, k)?;
        }
        Ok(bundle)
    }

    /// Checks the signature against the keys the gateway pins: the one
    /// given (`--bundle-key`), else the world's `bundle_keys` (signed by
    /// any of them). With no key pinned, only `allow_unsigned` lets the
    /// bundle run, unverified; otherwise this is a refusal to start.
    pub fn authenticate(
        &self,
        path: &str,
        given: Option<&PublicKey>,
        pinned: &std::collections::HashMap<String, PublicKey>,
        allow_unsigned: bool,
    ) -> Result<(), BundleError> {
        if let Some(k) = given {
            return self.verify_signature(path, k);
        }
        if !pinned.is_empty() {
            let Some(sig) = &self.signature else {
                return Err(BundleError::Unsigned { path: path.into() });
            };
            let Some(k) = pinned.get(&sig.key_id) else {
                return Err(BundleError::UntrustedKey {
                    path: path.into(),
                    signed_by: sig.key_id.clone(),
                });
            };
            return self.verify_signature(path, k);
        }
        if allow_unsigned {
            Ok(())
        } else {
            Err(BundleError::KeyRequired { path: path.into() })
        }
    }

    /// Checks the signature with a key (the hash is assumed verified).
    pub fn verify_signature(&self, path: &str, key: &PublicKey) -> Result<(), BundleError> {
        let Some(sig) = &self.signature else {
            return Err(BundleError::Unsigned { path: path.into() });
        };
        if sig.key_id != key.id() {
            return Err(BundleError::WrongKey {
                path: path.into(),
                signed_by: sig.key_id.clone(),
                given: key.id(),
            });
        }
        key.verify(self.hash.as_bytes(), &sig.sig).map_err(|e| {
            let reason = match e {
                KeyError::BadSignature { .. } => "it was not made over this hash".to_string(),
                other => other.to_string(),
            };
            BundleError::BadSignature {
                path: path.into(),
                key_id: key.id(),
                reason,
            }
        })
    }

    /// Every policy id the table names exists, ids are unique, and each
    /// action has one policy id per rule.
    fn check_references(&self, path: &str) -> Result<(), BundleError> {
        let bad = |reason: String| BundleError::Malformed {
            path: path.into(),
            reason,
        };
        let mut ids: HashSet<&str> = HashSet::new();
        for p in &self.policies {
            if !ids.insert(&p.id) {
                return Err(bad(format!("policy id `{}` appears twice", p.id)));
            }
        }
        for a in &self.table.actions {
            if a.rule_policy_ids.len() != a.action.rules.len() {
                return Err(bad(format!(
                    "action `{}` has {} rules but {} rule policy ids",
                    a.action.name,
                    a.action.rules.len(),
                    a.rule_policy_ids.len()
                )));
            }
            for id in a.policy_ids.iter().chain(&a.rule_policy_ids) {
                if !ids.contains(id.as_str()) {
                    return Err(bad(format!(
                        "action `{}` names policy `{id}`, which the bundle does not hold",
                        a.action.name
                    )));
                }
            }
            if self.table.pack(&a.pack).is_none() {
                return Err(bad(format!(
                    "action `{}` belongs to pack `{}`, which the table does not list",
                    a.action.name, a.pack
                )));
            }
        }
        Ok(())
    }

    /// The Cedar schema and policy sets (with the real policy ids), strictly
    /// validated again: the gateway calls this once at start-up.
    pub fn cedar(&self) -> Result<CedarBundle, BundleError> {
        let cerr = |reason: String| BundleError::Cedar { reason };
        let (schema, _warnings) = Schema::from_cedarschema_str(&self.schema)
            .map_err(|e| cerr(format!("the schema does not parse: {e}")))?;
        let mut all = PolicySet::new();
        let mut parsed: BTreeMap<&str, Policy> = BTreeMap::new();
        for p in &self.policies {
            let policy = Policy::parse(Some(PolicyId::new(&p.id)), &p.text)
                .map_err(|e| cerr(format!("policy `{}` does not parse: {e}", p.id)))?;
            all.add(policy.clone())
                .map_err(|e| cerr(format!("policy `{}`: {e}", p.id)))?;
            parsed.insert(&p.id, policy);
        }
        let result = Validator::new(schema.clone()).validate(&all, ValidationMode::Strict);
        if let Some(e) = result.validation_errors().next() {
            return Err(cerr(format!("strict validation fails: {e}")));
        }
        let mut by_action = BTreeMap::new();
        for a in &self.table.actions {
            let mut set = PolicySet::new();
            for id in &a.policy_ids {
                let p = parsed.get(id.as_str()).ok_or_else(|| {
                    cerr(format!(
                        "action `{}` names unknown policy `{id}`",
                        a.action.name
                    ))
                })?;
                set.add(p.clone())
                    .map_err(|e| cerr(format!("policy `{id}`: {e}")))?;
            }
            // a rule is a forbid (approval rules are guarded forbids), and
            // an action is allowed only through a permit of its own
            if let Some(id) = a.rule_policy_ids.iter().find(|id| {
                parsed
                    .get(id.as_str())
                    .is_none_or(|p| p.effect() != cedar_policy::Effect::Forbid)
            }) {
                return Err(cerr(format!(
                    "action `{}`: the policy `{id}` of a rule is not a forbid",
                    a.action.name
                )));
            }
            if !set
                .policies()
                .any(|p| p.effect() == cedar_policy::Effect::Permit)
            {
                return Err(cerr(format!(
                    "action `{}` has no permit policy",
                    a.action.name
                )));
            }
            by_action.insert(a.action.name.clone(), set);
        }
        Ok(CedarBundle {
            schema,
            policies: all,
            by_action,
        })
    }
}
