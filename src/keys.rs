//! Ed25519 keys: generation, key files, signing and strict verification.
//!
//! Key files are small JSON documents:
//! secret `{"alg":"ed25519","secret":"<base64 32-byte seed>","public":"<base64>"}`
//! (written with mode 0600), public `{"alg":"ed25519","public":"<base64>"}`.
//! Signatures travel as standard base64 of the 64 signature bytes. Bundles
//! are signed with these keys; the gateway reuses them for mandate tokens
//! and approvals.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use miette::Diagnostic;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The only algorithm key files may name.
pub const ALG: &str = "ed25519";

/// Key files are tiny; anything larger is not one.
const MAX_KEY_FILE: u64 = 4096;

#[derive(Debug, Error, Diagnostic, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The key file cannot be read.
    #[error("cannot read `{path}`: {reason}")]
    #[diagnostic(code(ipc::key::io))]
    Io { path: String, reason: String },

    /// The file is not a key file of `ipc keygen` (JSON with `alg`, `public`
    /// and, for a secret key, `secret`).
    #[error("`{path}` is not a key file: {reason}")]
    #[diagnostic(
        code(ipc::key::format),
        help(
            "key files come from `ipc keygen`: `{{\"alg\":\"ed25519\",\"public\":\"...\"}}`, plus `\"secret\"` for a secret key"
        )
    )]
    Format { path: String, reason: String },

    /// A key of another algorithm: only Ed25519 is supported.
    #[error("`{path}` holds a `{alg}` key; only `ed25519` is supported")]
    #[diagnostic(code(ipc::key::algorithm))]
    Algorithm { path: String, alg: String },

    /// A field of the key file is not valid base64 of the right length.
    #[error("`{path}`: `{field}` is not a valid {what}: {reason}")]
    #[diagnostic(code(ipc::key::encoding))]
    Encoding {
        path: String,
        field: &'static str,
        what: &'static str,
        reason: String,
    },

    /// A secret key file whose `public` is not the public key of its `secret`:
    /// signatures made with it would not verify under the key it names.
    #[error("`{path}`: the public key does not belong to the secret key")]
    #[diagnostic(
        code(ipc::key::mismatch),
        help(
            "the file was edited or assembled from two keys; generate a new pair with `ipc keygen`"
        )
    )]
    Mismatch { path: String },

    /// A public key of small order, which would accept forged signatures:
    /// refused whatever signed with it.
    #[error(
        "`{path}`: the public key is weak (a small-order point) and would accept forged signatures"
    )]
    #[diagnostic(code(ipc::key::weak))]
    WeakKey { path: String },

    /// The operating system's random source failed: no key is made from
    /// anything weaker.
    #[error("cannot gather randomness for a new key: {reason}")]
    #[diagnostic(code(ipc::key::random))]
    Random { reason: String },

    /// `ipc keygen` never overwrites a key file.
    #[error("`{path}` already exists; refusing to overwrite it")]
    #[diagnostic(
        code(ipc::key::exists),
        help("choose another name, or remove the old key first if you really mean to replace it")
    )]
    Exists { path: String },

    /// `ipc keygen` cannot write the key file.
    #[error("cannot write `{path}`: {reason}")]
    #[diagnostic(code(ipc::key::write))]
    Write { path: String, reason: String },

    /// A signature that is not base64 of 64 bytes.
    #[error("the signature is not valid: {reason}")]
    #[diagnostic(code(ipc::key::signature_encoding))]
    SignatureEncoding { reason: String },

    /// A signature that does not verify (`verify_strict`) with the key.
    #[error("the signature does not verify with key `{key_id}`")]
    #[diagnostic(code(ipc::key::bad_signature))]
    BadSignature { key_id: String },
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretFile {
    alg: String,
    secret: String,
    public: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PublicFile {
    alg: String,
    public: String,
}

/// An Ed25519 signing key. Its `Debug` form never shows the secret.
#[derive(Clone)]
pub struct SecretKey {
    signing: SigningKey,
}

/// An Ed25519 verifying key.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    verifying: VerifyingKey,
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretKey")
            .field("id", &self.public().id())
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PublicKey").field("id", &self.id()).finish()
    }
}

impl SecretKey {
    /// A new key from the operating system's random source.
    pub fn generate() -> Result<Self, KeyError> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random {
            reason: e.to_string().to_lowercase(),
        })?;
        Ok(Self::from_seed(&seed))
    }

    /// A key from its 32-byte seed (deterministic; for tests and imports).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        SecretKey {
            signing: SigningKey::from_bytes(seed),
        }
    }

    /// Reads a secret key file and checks that its public half matches.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let text = read_small(path)?;
        let file: SecretFile = serde_json::from_str(&text).map_err(|e| KeyError::Format {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        check_alg(&shown, &file.alg)?;
        let seed: [u8; 32] = decode_fixed(&shown, "secret", "32-byte base64 seed", &file.secret)?;
        let key = Self::from_seed(&seed);
        let public = PublicKey::from_base64_at(&shown, &file.public)?;
        if public != key.public() {
            return Err(KeyError::Mismatch { path: shown });
        }
        Ok(key)
    }

    pub fn public(&self) -> PublicKey {
        PublicKey {
            verifying: self.signing.verifying_key(),
        }
    }

    /// Signs a message; the signature in standard base64.
    pub fn sign(&self, msg: &[u8]) -> String {
        let sig: Signature = self.signing.sign(msg);
        B64.encode(sig.to_bytes())
    }

    /// The secret key file's text.
    pub fn to_file_json(&self) -> String {
        let file = SecretFile {
            alg: ALG.into(),
            secret: B64.encode(self.signing.to_bytes()),
            public: self.public().to_base64(),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default() + "\n"
    }

    /// Writes `NAME.key` (mode 0600) and `NAME.pub`; refuses to overwrite
    /// either. Returns the two paths.
    pub fn write_pair(&self, name: &Path) -> Result<(PathBuf, PathBuf), KeyError> {
        let secret_path = with_suffix(name, ".key");
        let public_path = with_suffix(name, ".pub");
        for p in [&secret_path, &public_path] {
            if p.exists() {
                return Err(KeyError::Exists {
                    path: p.display().to_string(),
                });
            }
        }
        write_new(&secret_path, &self.to_file_json(), true)?;
        if let Err(e) = write_new(&public_path, &self.public().to_file_json(), false) {
            // do not leave half a pair behind
            let _ = std::fs::remove_file(&secret_path);
            return Err(e);
        }
        Ok((secret_path, public_path))
    }
}

impl PublicKey {
    /// Reads a public key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let shown = path.display().to_string();
        let text = read_small(path)?;
        let file: PublicFile = serde_json::from_str(&text).map_err(|e| KeyError::Format {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        check_alg(&shown, &file.alg)?;
        Self::from_base64_at(&shown, &file.public)
    }

    /// A key from the base64 of its 32 bytes.
    pub fn from_base64(b64: &str) -> Result<Self, KeyError> {
        Self::from_base64_at("<key>", b64)
    }

    fn from_base64_at(path: &str, b64: &str) -> Result<Self, KeyError> {
        let bytes: [u8; 32] = decode_fixed(path, "public", "32-byte base64 public key", b64)?;
        let verifying = VerifyingKey::from_bytes(&bytes).map_err(|e| KeyError::Encoding {
            path: path.into(),
            field: "public",
            what: "ed25519 public key",
            reason: e.to_string().to_lowercase(),
        })?;
        if verifying.is_weak() {
            return Err(KeyError::WeakKey { path: path.into() });
        }
        Ok(PublicKey { verifying })
    }

    pub fn to_base64(&self) -> String {
        B64.encode(self.verifying.to_bytes())
    }

    /// A short, stable name for the key: the first 16 hex digits of the
    /// SHA-256 of its 32 bytes.
    pub fn id(&self) -> String {
        let mut h = crate::canonical::sha256_hex(self.verifying.as_bytes());
        h.truncate(16);
        h
    }

    /// Verifies a base64 signature with `verify_strict` (no malleable or
    /// small-order signatures).
    pub fn verify(&self, msg: &[u8], sig_b64: &str) -> Result<(), KeyError> {
        let bytes = B64
            .decode(sig_b64.trim())
            .map_err(|e| KeyError::SignatureEncoding {
                reason: format!("not base64 ({e})").to_lowercase(),
            })?;
        let sig = Signature::from_slice(&bytes).map_err(|_| KeyError::SignatureEncoding {
            reason: format!("{} bytes, expected 64", bytes.len()),
        })?;
        self.verifying
            .verify_strict(msg, &sig)
            .map_err(|_| KeyError::BadSignature { key_id: self.id() })
    }

    /// The public key file's text.
    pub fn to_file_json(&self) -> String {
        let file = PublicFile {
            alg: ALG.into(),
            public: self.to_base64(),
        };
        serde_json::to_string_pretty(&file).unwrap_or_default() + "\n"
    }
}

/// Reads a secret key file (see [`SecretKey::load`]).
pub fn load_secret(path: &Path) -> Result<SecretKey, KeyError> {
    SecretKey::load(path)
}

/// Reads a public key file (see [`PublicKey::load`]).
pub fn load_public(path: &Path) -> Result<PublicKey, KeyError> {
    PublicKey::load(path)
}

/// The permission bits (`mode & 0o077`) with which users other than its
/// owner may read or change a secret file (a bearer token), if any: such
/// a file is not a secret any more. `None` too when the file's mode
/// cannot be read (its reader says why it cannot read it).
#[cfg(unix)]
pub fn open_to_others(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    (mode & 0o077 != 0).then_some(mode)
}

/// Permission bits are Unix's: nothing to check elsewhere.
#[cfg(not(unix))]
pub fn open_to_others(_: &Path) -> Option<u32> {
    None
}

fn with_suffix(name: &Path, suffix: &str) -> PathBuf {
    let mut s = name.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

fn read_small(path: &Path) -> Result<String, KeyError> {
    let shown = path.display().to_string();
    let io = |e: std::io::Error| KeyError::Io {
        path: shown.clone(),
        reason: e.to_string().to_lowercase(),
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        return Err(KeyError::Io {
            path: shown,
            reason: "is a folder".into(),
        });
    }
    if meta.len() > MAX_KEY_FILE {
        return Err(KeyError::Format {
            path: shown,
            reason: format!("{} bytes is too large for a key file", meta.len()),
        });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    String::from_utf8(bytes).map_err(|_| KeyError::Format {
        path: shown,
        reason: "not utf-8 text".into(),
    })
}

fn check_alg(path: &str, alg: &str) -> Result<(), KeyError> {
    if alg == ALG {
        Ok(())
    } else {
        Err(KeyError::Algorithm {
            path: path.into(),
            alg: alg.into(),
        })
    }
}

fn decode_fixed<const N: usize>(
    path: &str,
    field: &'static str,
    what: &'static str,
    b64: &str,
) -> Result<[u8; N], KeyError> {
    let enc = |reason: String| KeyError::Encoding {
        path: path.into(),
        field,
        what,
        reason,
    };
    let bytes = B64
        .decode(b64.trim())
        .map_err(|e| enc(format!("not base64 ({e})").to_lowercase()))?;
    let len = bytes.len();
    bytes
        .try_into()
        .map_err(|_| enc(format!("{len} bytes, expected {N}")))
}

fn write_new(path: &Path, text: &str, secret: bool) -> Result<(), KeyError> {
    let shown = path.display().to_string();
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(if secret { 0o600 } else { 0o644 });
    }
    #[cfg(not(unix))]
    let _ = secret;
    let mut f = opts.open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            KeyError::Exists {
                path: shown.clone(),
            }
        } else {
            KeyError::Write {
                path: shown.clone(),
                reason: e.to_string().to_lowercase(),
            }
        }
    })?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(|e| KeyError::Write {
            path: shown,
            reason: e.to_string().to_lowercase(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_and_verify_round_trip() {
        let k = SecretKey::from_seed(&[7; 32]);
        let sig = k.sign(b"hello");
        k.public().verify(b"hello", &sig).unwrap();
        assert!(matches!(
            k.public().verify(b"hellO", &sig),
            Err(KeyError::BadSignature { .. })
        ));
        let other = SecretKey::from_seed(&[8; 32]);
        assert!(other.public().verify(b"hello", &sig).is_err());
        assert!(matches!(
            k.public().verify(b"hello", "not base64!"),
            Err(KeyError::SignatureEncoding { .. })
        ));
        assert!(matches!(
            k.public().verify(b"hello", &B64.encode([1u8; 10])),
            Err(KeyError::SignatureEncoding { .. })
        ));
    }

    #[test]
    fn key_files_round_trip_and_refuse_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let name = dir.path().join("ops");
        let k = SecretKey::generate().unwrap();
        let (sk, pk) = k.write_pair(&name).unwrap();
        assert!(sk.ends_with("ops.key") && pk.ends_with("ops.pub"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&sk).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let loaded = load_secret(&sk).unwrap();
        let public = load_public(&pk).unwrap();
        assert_eq!(loaded.public(), public);
        assert_eq!(public.id().len(), 16);
        assert!(matches!(k.write_pair(&name), Err(KeyError::Exists { .. })));
        // a secret file is not a public file
        assert!(matches!(load_public(&sk), Err(KeyError::Format { .. })));
        // a secret file whose public half was swapped
        let forged = k.to_file_json().replace(
            &k.public().to_base64(),
            &SecretKey::from_seed(&[1; 32]).public().to_base64(),
        );
        let p = dir.path().join("forged.key");
        std::fs::write(&p, forged).unwrap();
        assert!(matches!(load_secret(&p), Err(KeyError::Mismatch { .. })));
        let p = dir.path().join("rsa.pub");
        std::fs::write(&p, r#"{"alg":"rsa","public":"AAAA"}"#).unwrap();
        assert!(matches!(load_public(&p), Err(KeyError::Algorithm { .. })));
        assert!(matches!(
            load_public(&dir.path().join("missing.pub")),
            Err(KeyError::Io { .. })
        ));
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let k = SecretKey::from_seed(&[9; 32]);
        let secret_b64 = B64.encode([9u8; 32]);
        assert!(!format!("{k:?}").contains(&secret_b64));
    }
}
