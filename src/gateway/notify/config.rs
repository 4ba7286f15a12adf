//! The world's `[[notify]]` targets and its `approval_page`, read and
//! checked when the world loads: a target that is not HTTPS, that names a
//! loopback, private or link-local address without `allow_private`, or
//! whose secret or authority cannot be read refuses the world (and so the
//! start of every command that loads it).
//!
//! ```toml
//! approval_page = "https://gw.example.com/approve"
//!
//! [[notify]]
//! name = "ops"                          # optional: the URL's host
//! url = "https://hooks.example.com/ipc"
//! format = "json"                       # or "slack"
//! secret_file = "notify.secret"         # the HMAC key (16 bytes or more)
//! # ca_file = "ca.pem"                  # a private authority, alone
//! # allow_private = false               # loopback, private, link-local
//! # concurrency = 4                     # deliveries in flight at once
//! # max_attempts = 8                    # then the delivery is failed
//! # timeout_secs = 10                   # per attempt
//! ```

use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The defaults of a target.
pub const CONCURRENCY: usize = 4;
pub const MAX_ATTEMPTS: u32 = 8;
pub const TIMEOUT_SECS: u64 = 10;
/// The shortest HMAC key taken, in bytes.
pub const MIN_SECRET: usize = 16;

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum NotifyError {
    /// A `[[notify]]` target's `url` is not an `https://` URL with a host
    /// (or holds a user name or password): a pending operation's summary
    /// never goes in clear, nor with credentials in a URL.
    #[error("`[[notify]]` `{name}`: `{url}` is not an https url: {reason}")]
    #[diagnostic(
        code(ipc::notify::url),
        help(
            "give `url = \"https://host/path\"`; put no credentials in it (the deliveries are signed with `secret_file`)"
        )
    )]
    Url {
        name: String,
        url: String,
        reason: String,
    },
    /// A `[[notify]]` target names a loopback, private, link-local or
    /// unspecified address (or `localhost`), or one its name resolves to
    /// when it is sent: refused unless the target says `allow_private =
    /// true`, so that a webhook cannot be pointed at the gateway's own
    /// network by mistake.
    #[error("`[[notify]]` `{name}`: `{host}` is not allowed: {reason}")]
    #[diagnostic(
        code(ipc::notify::not_allowed),
        help(
            "a receiver on this machine or a private network: add `allow_private = true` to the target"
        )
    )]
    NotAllowed {
        name: String,
        host: String,
        reason: String,
    },
    /// A `[[notify]]` target's `secret_file` cannot be read, or holds fewer
    /// than 16 bytes: every delivery is signed with it, none goes unsigned.
    #[error("`[[notify]]` `{name}`: the secret file `{path}` {reason}")]
    #[diagnostic(
        code(ipc::notify::secret),
        help(
            "write at least 16 random bytes to it: `head -c 32 /dev/urandom | base64 > notify.secret; chmod 600 notify.secret`"
        )
    )]
    Secret {
        name: String,
        path: String,
        reason: String,
    },
    /// A `[[notify]]` target's `ca_file` cannot be read as PEM certificates
    /// (checked when the sender starts).
    #[error("`[[notify]]` `{name}`: the `ca_file` `{path}` {reason}")]
    #[diagnostic(code(ipc::notify::ca_file))]
    CaFile {
        name: String,
        path: String,
        reason: String,
    },
    /// The `[[notify]]` entries are not of their shape: an unknown key or
    /// format, two targets of one name, a bound of 0, or no
    /// `approval_page` (each delivery links to it).
    #[error("`[[notify]]`: {reason}")]
    #[diagnostic(code(ipc::notify::invalid))]
    Invalid { reason: String },
}

/// The body a target is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The generic JSON body (docs/notifications.md).
    Json,
    /// A Slack incoming webhook's `{"text": ...}`.
    Slack,
}

/// An HMAC key, never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct HookKey(Vec<u8>);

impl HookKey {
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        HookKey(b"0123456789abcdef".to_vec())
    }

    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for HookKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookKey(***)")
    }
}

/// One `[[notify]]` target, checked.
#[derive(Clone, Debug)]
pub struct Target {
    /// Unique among the world's targets; the idempotency key's tail.
    pub name: String,
    pub url: String,
    pub host: String,
    pub format: Format,
    pub secret: HookKey,
    /// `ca_file`, as a path from here (read when the sender starts).
    pub ca_file: Option<PathBuf>,
    pub allow_private: bool,
    pub concurrency: usize,
    pub max_attempts: u32,
    pub timeout: Duration,
}

/// The world's targets and the approval page they link to.
#[derive(Clone, Debug, Default)]
pub struct Notify {
    pub targets: Vec<Target>,
    /// `approval_page`: the approval page's absolute URL.
    pub page: Option<String>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(crate) struct TargetFile {
    name: Option<String>,
    url: String,
    #[serde(default)]
    format: Option<String>,
    secret_file: PathBuf,
    ca_file: Option<PathBuf>,
    #[serde(default)]
    allow_private: bool,
    concurrency: Option<usize>,
    max_attempts: Option<u32>,
    timeout_secs: Option<u64>,
}

impl Notify {
    /// The entries of a world file (`base`: its folder), checked.
    pub(crate) fn read(
        files: &[TargetFile],
        page: Option<&str>,
        base: &Path,
    ) -> Result<Notify, NotifyError> {
        let invalid = |reason: String| NotifyError::Invalid { reason };
        if files.is_empty() {
            return Ok(Notify {
                targets: vec![],
                page: page.map(str::to_string),
            });
        }
        let page = match page {
            Some(p) if p.starts_with("https://") || p.starts_with("http://") => p.to_string(),
            Some(p) => {
                return Err(invalid(format!(
                    "`approval_page` `{}` is no http(s) url",
                    crate::base::json::echo(p)
                )));
            }
            None => {
                return Err(invalid(
                    "the world names no `approval_page` (`approval_page = \"https://host/approve\"`), which every delivery links to".into(),
                ));
            }
        };
        let mut targets: Vec<Target> = vec![];
        for f in files {
            let t = target(f, base)?;
            if targets.iter().any(|o| o.name == t.name) {
                return Err(invalid(format!(
                    "two targets are named `{}`: give each its own `name`",
                    t.name
                )));
            }
            targets.push(t);
        }
        Ok(Notify {
            targets,
            page: Some(page),
        })
    }

    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }
}

fn target(f: &TargetFile, base: &Path) -> Result<Target, NotifyError> {
    let shown = f.name.clone().unwrap_or_else(|| f.url.clone());
    let host = https_host(&f.url).map_err(|reason| NotifyError::Url {
        name: shown.clone(),
        url: crate::base::json::echo(&f.url),
        reason,
    })?;
    let name = f.name.clone().unwrap_or_else(|| host.clone());
    let name_ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let invalid = |reason: String| NotifyError::Invalid { reason };
    if !name_ok {
        return Err(invalid(format!(
            "`{}` is no target name (1 to 64 ASCII letters, digits and `-_.`)",
            crate::base::json::echo(&name)
        )));
    }
    if !f.allow_private
        && let Some(reason) = private_host(&host)
    {
        return Err(NotifyError::NotAllowed { name, host, reason });
    }
    let format = match f.format.as_deref() {
        None | Some("json") => Format::Json,
        Some("slack") => Format::Slack,
        Some(other) => {
            return Err(invalid(format!(
                "`{name}`: format `{}` is neither `json` nor `slack`",
                crate::base::json::echo(other)
            )));
        }
    };
    let bound = |v: Option<u64>, default: u64, what: &str| match v {
        Some(0) => Err(invalid(format!("`{name}`: `{what}` is at least 1"))),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    let concurrency = bound(
        f.concurrency.map(|n| n as u64),
        CONCURRENCY as u64,
        "concurrency",
    )?;
    let max_attempts = bound(
        f.max_attempts.map(u64::from),
        MAX_ATTEMPTS.into(),
        "max_attempts",
    )?;
    let timeout = bound(f.timeout_secs, TIMEOUT_SECS, "timeout_secs")?;
    Ok(Target {
        secret: secret(&name, &base.join(&f.secret_file))?,
        ca_file: f.ca_file.as_ref().map(|c| base.join(c)),
        name,
        url: f.url.clone(),
        host,
        format,
        allow_private: f.allow_private,
        concurrency: usize::try_from(concurrency.min(256)).unwrap_or(CONCURRENCY),
        max_attempts: u32::try_from(max_attempts.min(100)).unwrap_or(MAX_ATTEMPTS),
        timeout: Duration::from_secs(timeout.min(300)),
    })
}

/// The key of a secret file: its bytes without the trailing newline.
fn secret(name: &str, path: &Path) -> Result<HookKey, NotifyError> {
    let err = |reason: String| NotifyError::Secret {
        name: name.to_string(),
        path: path.display().to_string(),
        reason,
    };
    let mut bytes = std::fs::read(path)
        .map_err(|e| err(format!("cannot be read: {}", e.to_string().to_lowercase())))?;
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.len() < MIN_SECRET {
        return Err(err(format!(
            "holds {} bytes, fewer than {MIN_SECRET}",
            bytes.len()
        )));
    }
    Ok(HookKey(bytes))
}

/// The host of an `https://` URL, lowercase (an IPv6 literal without its
/// brackets), or why it is not one.
pub fn https_host(url: &str) -> Result<String, String> {
    let Some(rest) = url.strip_prefix("https://") else {
        return Err("only `https://` is sent to".into());
    };
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("it holds spaces or control characters".into());
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("it holds a user name or password".into());
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default().to_string(),
        None => authority.split(':').next().unwrap_or_default().to_string(),
    };
    let ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.:".contains(c));
    if !ok {
        return Err("it names no host".into());
    }
    Ok(host.to_ascii_lowercase())
}

/// Why `host` is not allowed without `allow_private`, if it is not.
pub fn private_host(host: &str) -> Option<String> {
    if host == "localhost" || host.ends_with(".localhost") {
        return Some("it is this machine".into());
    }
    let ip: IpAddr = host.parse().ok()?;
    private_ip(ip).then(|| "a loopback, private, link-local or unspecified address".into())
}

/// Loopback, private (RFC 1918, unique local), link-local, unspecified,
/// shared (100.64/10) or an IPv4-mapped one of those.
pub fn private_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (o[0] == 100 && (o[1] & 0xc0) == 64)
                || o[0] == 0
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return private_ip(IpAddr::V4(v4));
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_with_a_host_and_no_credentials() {
        assert_eq!(
            https_host("https://Hooks.Example.com:8443/x?y").unwrap(),
            "hooks.example.com"
        );
        assert_eq!(https_host("https://[::1]:9/").unwrap(), "::1");
        for bad in [
            "http://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "https:///path",
            "https://a b/",
            "ftp://x/",
        ] {
            assert!(https_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn private_addresses_need_allowing() {
        for h in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "169.254.169.254",
            "::1",
            "fd00::1",
            "localhost",
            "0.0.0.0",
            "100.64.0.1",
            "::ffff:127.0.0.1",
        ] {
            assert!(private_host(h).is_some(), "{h}");
        }
        for h in ["hooks.slack.com", "8.8.8.8", "2001:4860::1"] {
            assert!(private_host(h).is_none(), "{h}");
        }
    }
}
