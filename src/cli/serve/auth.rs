//! The bearer token: read from a file, compared in constant time, re-read
//! when the file changes (another inode, size or modification time), when
//! a presented token does not match (a change the file's times did not
//! show), and on SIGHUP. Rotation is writing the new token to a temporary
//! file and renaming it over the old one: the old token stops working at
//! the next request.

use super::ServeError;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
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

struct Cached {
    /// SHA-256 of the token; `None` while the file cannot be used (every
    /// request is refused: fail closed).
    digest: Option<[u8; 32]>,
    stamp: Option<Stamp>,
}

pub(crate) struct TokenFile {
    path: PathBuf,
    cached: Mutex<Cached>,
}

/// Reads and checks the token in `path`.
fn read_token(path: &Path) -> Result<[u8; 32], ServeError> {
    let err = |reason: String| ServeError::TokenFile {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string().to_lowercase()))?;
    let token = text.trim();
    if token.len() < MIN_TOKEN {
        return Err(err(format!(
            "the token is shorter than {MIN_TOKEN} characters"
        )));
    }
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(err(
            "the token holds spaces or characters a header cannot carry".into(),
        ));
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
        let d = read_token(path)?;
        if let Ok(m) = std::fs::metadata(path) {
            use std::os::unix::fs::PermissionsExt;
            let mode = m.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                eprintln!(
                    "warning: other users can read the token file `{}` (mode {mode:o}): `chmod 600` it",
                    path.display()
                );
            }
        }
        Ok(TokenFile {
            path: path.to_path_buf(),
            cached: Mutex::new(Cached {
                digest: Some(d),
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
        match read_token(&self.path) {
            Ok(d) => c.digest = Some(d),
            Err(e) => {
                if c.digest.is_some() {
                    eprintln!("error: {e}; every request is refused until it is fixed");
                }
                c.digest = None;
            }
        }
    }

    /// Whether `presented` is the token, compared in constant time (over
    /// the SHA-256 of both, so lengths do not leak either).
    pub(crate) fn check(&self, presented: &[u8]) -> bool {
        let d = digest(presented);
        let now = stamp(&self.path);
        let mut c = self.lock();
        if now != c.stamp {
            self.reload_locked(&mut c);
        }
        if matches(&c, &d) {
            return true;
        }
        // a miss: the file may have changed within its time's granularity
        self.reload_locked(&mut c);
        matches(&c, &d)
    }
}

fn matches(c: &Cached, d: &[u8; 32]) -> bool {
    c.digest.is_some_and(|t| bool::from(t.ct_eq(d)))
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
        assert!(t.check(b"first-token-0123456789"));
        assert!(!t.check(b"first-token-012345678"));
        let tmp = dir.path().join("token.new");
        std::fs::write(&tmp, "second-token-0123456789").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        assert!(!t.check(b"first-token-0123456789"));
        assert!(t.check(b"second-token-0123456789"));
        std::fs::write(&p, "short").unwrap();
        assert!(!t.check(b"second-token-0123456789"));
        assert!(!t.check(b"short"));
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
