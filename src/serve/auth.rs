//! The bearer tokens: read from a file, compared in constant time, re-read
//! when the file changes (another inode, size or modification time), when
//! a presented token does not match (a change the file's times did not
//! show), and on SIGHUP. Rotation is writing the new file to a temporary
//! file and renaming it over the old one: a token no longer in it stops
//! working at the next request.
//!
//! Each token is bound to the tenants (owners) it may act for, one token
//! a line:
//!
//! ```text
//! # token (or sha256:HEX of it)   tenants
//! 3q2+7w...                       acme
//! sha256:9f86d08...               globex,initech
//! Zm9vYmFy...                     *
//! ```
//!
//! `*` is an operator: every tenant. A file holding one token alone (the
//! format before tenants) is that token as an operator's: it always
//! decided for everyone, and a deployment with one caller keeps working;
//! in a file of several lines every line names its tenants.

use super::ServeError;
use crate::gateway::Tenants;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use subtle::ConstantTimeEq;

/// Shortest token accepted from the file.
const MIN_TOKEN: usize = 16;

/// What identifies one version of the file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        ino: m.ino(),
        len: m.len(),
        modified: m.modified().ok(),
    })
}

/// The tokens of one version of the file: SHA-256 of each, and its
/// tenants.
type Tokens = Vec<([u8; 32], Arc<Tenants>)>;

struct Cached {
    /// `None` while the file cannot be used (every request is refused:
    /// fail closed).
    tokens: Option<Tokens>,
    stamp: Option<Stamp>,
}

pub(crate) struct TokenFile {
    path: PathBuf,
    cached: Mutex<Cached>,
}

/// Reads and checks the tokens in `path`.
fn read_tokens(path: &Path) -> Result<Tokens, ServeError> {
    let err = |reason: String| ServeError::TokenFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string().to_lowercase()))?;
    parse(&text).map_err(err)
}

/// The tokens a file's text holds, or why it cannot be used.
fn parse(text: &str) -> Result<Tokens, String> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .collect();
    if lines.is_empty() {
        return Err("the file holds no token".into());
    }
    let alone = lines.len() == 1;
    let mut out: Tokens = vec![];
    for (n, line) in lines {
        let mut fields = line.split_ascii_whitespace();
        let token = fields.next().unwrap_or("");
        let tenants = match (fields.next(), fields.next()) {
            (None, _) if alone => Tenants::All,
            (None, _) => {
                return Err(format!(
                    "line {n}: a token without its tenants (`TOKEN acme,globex`, or `TOKEN *` for an operator)"
                ));
            }
            (Some(_), Some(_)) => {
                return Err(format!(
                    "line {n}: a token and its tenants, separated by commas without spaces"
                ));
            }
            (Some("*"), None) => Tenants::All,
            (Some(list), None) => {
                let names: BTreeSet<String> = list.split(',').map(str::to_string).collect();
                if names.iter().any(|t| t.is_empty() || t == "*") {
                    return Err(format!(
                        "line {n}: `{list}` is not a list of tenants (`acme,globex`, or `*` alone)"
                    ));
                }
                Tenants::Only(names)
            }
        };
        let d = token_digest(token).map_err(|reason| format!("line {n}: {reason}"))?;
        if out.iter().any(|(o, _)| *o == d) {
            return Err(format!("line {n}: the same token twice"));
        }
        out.push((d, Arc::new(tenants)));
    }
    Ok(out)
}

/// The SHA-256 of a token as the file gives it: the token, or
/// `sha256:HEX` of it (the file then holds no secret).
fn token_digest(token: &str) -> Result<[u8; 32], String> {
    if let Some(h) = token.strip_prefix("sha256:") {
        let mut d = [0u8; 32];
        return hex::decode_to_slice(h, &mut d).map(|()| d).map_err(|_| {
            "`sha256:` is followed by the 64 hex digits of the token's SHA-256".into()
        });
    }
    if token.len() < MIN_TOKEN {
        return Err(format!("the token is shorter than {MIN_TOKEN} characters"));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the token holds characters a header cannot carry".into());
    }
    Ok(digest(token.as_bytes()))
}

fn digest(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

impl TokenFile {
    /// Loads the token; a file that cannot be used stops the server from
    /// starting.
    pub(crate) fn open(path: &Path) -> Result<TokenFile, ServeError> {
        let st = stamp(path);
        let d = read_tokens(path)?;
        if let Some(mode) = crate::keys::open_to_others(path) {
            crate::base::log::warn(
                "token_file",
                &format!(
                    "other users can read the token file `{}` (mode {mode:o}): `chmod 600` it",
                    path.display()
                ),
            );
        }
        Ok(TokenFile {
            path: path.to_path_buf(),
            cached: Mutex::new(Cached {
                tokens: Some(d),
                stamp: st,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the file again (SIGHUP, a change, a miss). A file that cannot
    /// be used any more refuses every request until it is fixed.
    pub(crate) fn reload(&self) {
        let mut c = self.lock();
        self.reload_locked(&mut c);
    }

    fn reload_locked(&self, c: &mut Cached) {
        c.stamp = stamp(&self.path);
        match read_tokens(&self.path) {
            Ok(d) => c.tokens = Some(d),
            Err(e) => {
                if c.tokens.is_some() {
                    crate::base::log::error(
                        "token_file",
                        &format!("{e}; every request is refused until it is fixed"),
                    );
                }
                c.tokens = None;
            }
        }
    }

    /// The tenants of `presented`, if it is one of the tokens: compared
    /// in constant time with every one (over the SHA-256 of both, so
    /// lengths do not leak, nor which line matched).
    pub(crate) fn check(&self, presented: &[u8]) -> Option<Arc<Tenants>> {
        let d = digest(presented);
        let now = stamp(&self.path);
        let mut c = self.lock();
        if now != c.stamp {
            self.reload_locked(&mut c);
        }
        if let Some(t) = matches(&c, &d) {
            return Some(t);
        }
        // a miss: the file may have changed within its time's granularity
        self.reload_locked(&mut c);
        matches(&c, &d)
    }
}

fn matches(c: &Cached, d: &[u8; 32]) -> Option<Arc<Tenants>> {
    let mut found = None;
    for (t, tenants) in c.tokens.iter().flatten() {
        if bool::from(t.ct_eq(d)) {
            found = Some(tenants.clone());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::TokenFile;

    #[test]
    fn a_rotated_token_replaces_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "first-token-0123456789\n").unwrap();
        let t = TokenFile::open(&p).unwrap();
        assert!(t.check(b"first-token-0123456789").is_some());
        assert!(t.check(b"first-token-012345678").is_none());
        let tmp = dir.path().join("token.new");
        std::fs::write(&tmp, "second-token-0123456789").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        assert!(t.check(b"first-token-0123456789").is_none());
        assert!(t.check(b"second-token-0123456789").is_some());
        std::fs::write(&p, "short").unwrap();
        assert!(t.check(b"second-token-0123456789").is_none());
        assert!(t.check(b"short").is_none());
    }

    /// Issue #21, item 4: each token is bound to its tenants; a single
    /// token alone (the old file) is an operator's; in a file of several
    /// every line names its tenants.
    #[test]
    fn tokens_are_bound_to_their_tenants() {
        use super::{Tenants, parse};
        use sha2::Digest;
        let hashed = hex::encode(sha2::Sha256::digest(b"globex-token-0123456789"));
        let text = format!(
            "# callers\nacme-token-0123456789 acme\n\nsha256:{hashed} globex,initech\nops-token-0123456789abc *\n"
        );
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("tokens");
        std::fs::write(&p, &text).unwrap();
        let t = TokenFile::open(&p).unwrap();
        let only = |names: &[&str]| Tenants::Only(names.iter().map(|n| n.to_string()).collect());
        assert_eq!(*t.check(b"acme-token-0123456789").unwrap(), only(&["acme"]));
        assert_eq!(
            *t.check(b"globex-token-0123456789").unwrap(),
            only(&["globex", "initech"])
        );
        assert_eq!(*t.check(b"ops-token-0123456789abc").unwrap(), Tenants::All);
        assert!(
            t.check(hashed.as_bytes()).is_none(),
            "the digest is no token"
        );
        assert!(t.check(format!("sha256:{hashed}").as_bytes()).is_none());
        assert_eq!(
            *parse("old-single-token-0123\n").unwrap()[0].1,
            Tenants::All
        );
        for bad in [
            "a-token-0123456789\nb-token-0123456789 acme\n",
            "a-token-0123456789 acme globex\n",
            "a-token-0123456789 acme,,globex\n",
            "a-token-0123456789 acme,*\n",
            "short acme\n",
            "sha256:abcd acme\n",
            "a-token-0123456789 acme\na-token-0123456789 globex\n",
            "# nothing\n",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_short_token_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("token");
        std::fs::write(&p, "abc").unwrap();
        assert!(TokenFile::open(&p).is_err());
        assert!(TokenFile::open(&dir.path().join("missing")).is_err());
    }
}
