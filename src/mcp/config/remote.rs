//! A `[[servers]]` entry with `url`: a remote MCP server over Streamable
//! HTTP, checked when the config is loaded so that `ipc mcp --check`
//! already says what `ipc mcp` would refuse at start-up.
//!
//! - `url`: `https://...`; plain `http://` only to a loopback address
//!   (`127.0.0.0/8`, `[::1]`, `localhost`), where nothing crosses a
//!   network; no user or password in it.
//! - `token_file` (relative to the config) or `token_env` (a variable of
//!   the proxy's environment): the bearer token, read now; a missing file,
//!   an empty one, an unset variable stop the proxy from starting.
//! - `ca_file`: the PEM certificate(s) of a private authority, for an
//!   `https://` URL: the server's certificate must be signed by it (and
//!   only by it). Without it, the webpki roots. There is no option to skip
//!   the verification.

use super::diag::ConfigError;
use super::file::{S, ServerFile};
use super::{Bearer, Remote};
use std::path::Path;

/// Longest token accepted (what a header may reasonably carry).
const MAX_TOKEN: usize = 8 * 1024;

fn sp<T>(s: &S<T>) -> miette::SourceSpan {
    let r = s.span();
    (r.start, r.end.saturating_sub(r.start)).into()
}

/// The remote server `sf` declares (its `url` is `url`), or every problem
/// found with it.
pub(super) fn remote(
    dir: &Path,
    name: &str,
    sf: &ServerFile,
    url: &S<String>,
) -> Result<Remote, Vec<ConfigError>> {
    let mut errs = vec![];
    // `None`: not a URL the proxy connects to (said once, below)
    let https = match check_url(url.get_ref()) {
        Ok(https) => Some(https),
        Err((message, help)) => {
            errs.push(ConfigError::ServerUrl {
                server: name.into(),
                message,
                span: sp(url),
                help: Some(help),
            });
            None
        }
    };
    let token = token(dir, name, sf, &mut errs);
    let ca = match (&sf.ca_file, https) {
        (None, _) | (Some(_), None) => None,
        (Some(f), Some(false)) => {
            errs.push(ConfigError::CaFile {
                server: name.into(),
                message: "`ca_file` is for an `https://` URL".into(),
                span: sp(f),
                help: Some("use `https://`, or remove `ca_file`".into()),
            });
            None
        }
        (Some(f), Some(true)) => match read_certs(&dir.join(f.get_ref())) {
            Ok(certs) => Some(certs),
            Err(message) => {
                errs.push(ConfigError::CaFile {
                    server: name.into(),
                    message,
                    span: sp(f),
                    help: Some(
                        "the PEM certificate(s) (`-----BEGIN CERTIFICATE-----`) of the authority that signed the server's certificate, relative to the config".into(),
                    ),
                });
                None
            }
        },
    };
    if !errs.is_empty() {
        return Err(errs);
    }
    Ok(Remote {
        url: url.get_ref().clone(),
        token,
        token_file: sf
            .token_file
            .as_ref()
            .map(|f| std::path::absolute(dir.join(f.get_ref())).unwrap_or(dir.join(f.get_ref()))),
        ca,
    })
}

/// The bearer token of `token_file` or `token_env`, read now; a problem
/// pushed onto `errs`.
fn token(dir: &Path, name: &str, sf: &ServerFile, errs: &mut Vec<ConfigError>) -> Option<Bearer> {
    match (&sf.token_file, &sf.token_env) {
        (Some(f), Some(_)) => {
            errs.push(ConfigError::ServerToken {
                server: name.into(),
                message: "has both `token_file` and `token_env`".into(),
                span: sp(f),
                help: Some("give the token one way: a file, or a variable".into()),
            });
            None
        }
        (Some(f), None) => {
            let path = dir.join(f.get_ref());
            match read_token_file(&path) {
                Ok(t) => Some(t),
                Err((message, help)) => {
                    errs.push(ConfigError::ServerToken {
                        server: name.into(),
                        message,
                        span: sp(f),
                        help: Some(help.into()),
                    });
                    None
                }
            }
        }
        (None, Some(var)) if super::environ::BASE.contains(&var.get_ref().as_str()) => {
            errs.push(ConfigError::ServerToken {
                server: name.into(),
                message: format!(
                    "`token_env` names `{}`, which every stdio server is given",
                    var.get_ref()
                ),
                span: sp(var),
                help: Some("hold the token in a variable of its own (`CRM_MCP_TOKEN`)".into()),
            });
            None
        }
        (None, Some(var)) => match std::env::var(var.get_ref()) {
            Ok(text) => match token_of(&text) {
                Ok(t) => Some(t),
                Err(p) => {
                    errs.push(ConfigError::ServerToken {
                        server: name.into(),
                        message: format!("the variable `{}` {p}", var.get_ref()),
                        span: sp(var),
                        help: Some(TOKEN_HELP.into()),
                    });
                    None
                }
            },
            Err(_) => {
                errs.push(ConfigError::Env {
                    server: name.into(),
                    var: var.get_ref().clone(),
                    span: sp(var),
                    help: Some(format!(
                        "set `{}` to the server's bearer token in the environment `ipc mcp` runs in (an unset variable is never read as empty)",
                        var.get_ref()
                    )),
                });
                None
            }
        },
        (None, None) => None,
    }
}

impl Remote {
    /// The token `token_file` holds now (`None` without a `token_file`):
    /// read at every connection, so that a token rotated in the file is
    /// taken without a restart. `Err` says in words why it cannot be used.
    pub fn token_now(&self) -> Option<Result<Bearer, String>> {
        let path = self.token_file.as_ref()?;
        Some(read_token_file(path).map_err(|(message, _)| message))
    }
}

const TOKEN_HELP: &str =
    "it holds the server's bearer token alone, sent as `Authorization: Bearer TOKEN`";

/// The token a `token_file` holds, read now (at load, and again when the
/// server refuses the one read before); else why not, and a help. A file
/// other users may read or change is refused, as its token is not the
/// proxy's alone.
pub(crate) fn read_token_file(path: &Path) -> Result<Bearer, (String, &'static str)> {
    let shown = path.display();
    if let Some(mode) = crate::keys::open_to_others(path) {
        return Err((
            format!("other users can read or change the token file `{shown}` (mode {mode:o})"),
            "`chmod 600` it: the token file must be readable and writable by the proxy's user only",
        ));
    }
    let mut text = String::new();
    let read = std::fs::File::open(path).and_then(|f| {
        use std::io::Read;
        // bounded: a file much longer than a token is not one
        f.take(8 * MAX_TOKEN as u64).read_to_string(&mut text)
    });
    if let Err(e) = read {
        return Err((
            format!(
                "cannot read the token file `{shown}`: {}",
                e.to_string().to_lowercase()
            ),
            "write the server's bearer token to this file (relative to the config), readable by you only (`chmod 600`)",
        ));
    }
    token_of(&text).map_err(|p| (format!("the token file `{shown}` {p}"), TOKEN_HELP))
}

/// A token as a file or variable holds it: surrounding whitespace (the
/// file's last newline) dropped; it must be there and fit in a header.
fn token_of(text: &str) -> Result<Bearer, &'static str> {
    let t = text.trim();
    if t.is_empty() {
        Err("is empty")
    } else if t.len() > MAX_TOKEN {
        Err("holds more than 8 KiB")
    } else if !t.bytes().all(|b| b.is_ascii_graphic()) {
        Err("holds characters a header cannot carry (a token is printable ASCII without spaces)")
    } else {
        Ok(Bearer(t.to_string()))
    }
}

/// Whether the URL is `https` (`Ok(true)`) or a loopback `http`
/// (`Ok(false)`); else why not, and a help.
fn check_url(url: &str) -> Result<bool, (String, String)> {
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        (
            format!("`{}` is not a URL: {e}", crate::base::json::echo(url)),
            "write the server's endpoint, e.g. `https://mcp.example.com/mcp`".to_string(),
        )
    })?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err((
            "the URL holds a user or a password".into(),
            "give the token in `token_file` or `token_env`, never in the URL".into(),
        ));
    }
    match parsed.scheme() {
        "https" => Ok(true),
        "http" if is_loopback(&parsed) => Ok(false),
        "http" => Err((
            format!(
                "plain `http://` to `{}`, which is not a loopback address",
                parsed.host_str().unwrap_or("")
            ),
            "use `https://` (the token and every call would cross the network in clear); plain `http://` is only for `127.0.0.1`, `[::1]` or `localhost`".into(),
        )),
        other => Err((
            format!("`{other}://` is not a Streamable HTTP URL"),
            "use `https://` (or `http://` to a loopback address)".into(),
        )),
    }
}

/// A loopback host: `localhost`, `127.0.0.0/8` or `[::1]`.
fn is_loopback(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    }
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The certificates of a PEM file (at least one), as DER.
fn read_certs(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| format!("cannot read `{shown}`: {}", e.to_string().to_lowercase()))?;
    let certs: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(&pem)
        .map(|c| c.map(|c| c.to_vec()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("`{shown}` is not PEM: {e}"))?;
    if certs.is_empty() {
        return Err(format!("`{shown}` holds no certificate"));
    }
    // each must be one a root store takes
    let mut roots = rustls::RootCertStore::empty();
    for c in &certs {
        roots
            .add(CertificateDer::from(c.clone()))
            .map_err(|e| format!("`{shown}`: {e}"))?;
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::check_url;

    /// Every problem of a remote server is said at once: a `ca_file` on a
    /// plain `http://` URL was left unsaid when the token had a problem
    /// too (one more round of `ipc mcp --check` to find it).
    #[test]
    fn a_ca_file_on_plain_http_is_said_beside_a_token_problem() {
        let sf: super::ServerFile = toml::from_str(
            "name = \"bank\"\nurl = \"http://127.0.0.1:9/mcp\"\ntoken_file = \"t\"\ntoken_env = \"T\"\nca_file = \"ca.pem\"\n",
        )
        .unwrap();
        let url = sf.url.clone().unwrap();
        let errs = super::remote(std::path::Path::new("."), "bank", &sf, &url).unwrap_err();
        let codes: Vec<String> = errs
            .iter()
            .map(|e| miette::Diagnostic::code(e).unwrap().to_string())
            .collect();
        assert_eq!(
            codes,
            ["ipc::mcp::server_token", "ipc::mcp::ca_file"],
            "{errs:?}"
        );
        // a URL that is not one is said once, without its `ca_file`
        let sf: super::ServerFile =
            toml::from_str("name = \"bank\"\nurl = \"ftp://x/\"\nca_file = \"ca.pem\"\n").unwrap();
        let url = sf.url.clone().unwrap();
        let errs = super::remote(std::path::Path::new("."), "bank", &sf, &url).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
    }

    /// A base variable, which every stdio server is given, is no place
    /// for a token (issue #39, finding 2).
    #[test]
    fn a_token_env_naming_a_base_variable_is_refused() {
        let sf: super::ServerFile = toml::from_str(
            "name = \"bank\"\nurl = \"https://mcp.example.com/mcp\"\ntoken_env = \"HOME\"\n",
        )
        .unwrap();
        let url = sf.url.clone().unwrap();
        let errs = super::remote(std::path::Path::new("."), "bank", &sf, &url).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].to_string().contains("every stdio server is given"),
            "{errs:?}"
        );
    }

    #[test]
    fn only_https_or_loopback_http() {
        for ok in [
            "https://mcp.example.com/mcp",
            "https://10.0.0.1:8443/mcp",
            "http://127.0.0.1:8080/mcp",
            "http://127.1.2.3/mcp",
            "http://localhost:9/mcp",
            "http://LOCALHOST/mcp",
            "http://[::1]:9/mcp",
            // the URL parser's spelling of 127.0.0.1
            "http://0x7f000001/mcp",
            "http://127.1/mcp",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        assert_eq!(check_url("https://a.example/mcp"), Ok(true));
        assert_eq!(check_url("http://127.0.0.1/mcp"), Ok(false));
        for bad in [
            "http://mcp.example.com/mcp",
            "http://10.0.0.1/mcp",
            "http://localhost.example.com/mcp",
            "http://127.0.0.1.example.com/mcp",
            "http://[::ffff:10.0.0.1]/mcp",
            // names a resolver may send anywhere, and a mapped address
            // (not what `::1` is)
            "http://127.0.0.1.nip.io/mcp",
            "http://localhost./mcp",
            "http://[::ffff:127.0.0.1]/mcp",
            "http://[::]/mcp",
            "http://0.0.0.0/mcp",
            "https://user:pw@mcp.example.com/mcp",
            "https://token@mcp.example.com/mcp",
            "ftp://mcp.example.com/",
            "file:///etc/passwd",
            "mcp.example.com/mcp",
            "",
        ] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}
