//! How a [`PgStore`](super::PgStore) reaches its server: in clear on a
//! Unix socket or the loopback interface, over TLS with the server's
//! certificate checked anywhere else (rustls, through
//! `tokio-postgres-rustls`).
//!
//! The URL's `sslmode` takes libpq's names, of which two are accepted:
//!
//! - `verify-full` with `sslrootcert=FILE` (the PEM certificate(s) of the
//!   authority that signed the server's): TLS, the chain checked against
//!   those roots only and the server's name against the host the URL
//!   names (`hostaddr` may give its address);
//! - `disable`: in clear, stated explicitly (a private network, a tunnel).
//!
//! `require`, `prefer`, `allow` and `verify-ca` are refused: the first three
//! encrypt (or not) without checking who answers, so a machine in the
//! middle reads the store's traffic (receipts, budgets, the password);
//! `verify-ca` accepts any server the authority ever certified. Without
//! `sslmode`, a URL whose hosts are all Unix sockets or loopback addresses
//! connects in clear, as before; one naming any other host is refused
//! ([`StoreError::PlaintextRemote`]) rather than sent in clear.

use crate::store::StoreError;
use percent_encoding::percent_decode_str;
use postgres::config::{Config, Host, SslMode};
use std::net::IpAddr;
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector a store uses.
#[derive(Clone)]
pub(super) enum Tls {
    Off,
    Verified(MakeRustlsConnect),
}

/// `sslmode` and `sslrootcert` as the URL gave them (the client library
/// knows neither `verify-full` nor `sslrootcert`, so they are taken out of
/// the URL before it parses the rest).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Params {
    mode: Option<String>,
    rootcert: Option<String>,
}

/// The URL without `sslmode` and `sslrootcert`, and their values.
pub(super) fn split(url: &str) -> (String, Params) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Params::default());
    };
    let mut params = Params::default();
    let mut kept = vec![];
    for kv in query.split('&') {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let value = || percent_decode_str(v).decode_utf8_lossy().into_owned();
        match k {
            "sslmode" => params.mode = Some(value()),
            "sslrootcert" => params.rootcert = Some(value()),
            _ => kept.push(kv),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    (url, params)
}

fn loopback(host: &Host) -> bool {
    match host {
        Host::Unix(_) => true,
        Host::Tcp(h) => {
            h == "localhost"
                || h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .is_ok_and(|a| a.is_loopback())
        }
    }
}

/// The first host the connection may reach that is neither a Unix
/// socket nor a loopback address, if any.
fn remote(config: &Config) -> Option<String> {
    let addr = config
        .get_hostaddrs()
        .iter()
        .find(|a| !a.is_loopback())
        .map(IpAddr::to_string);
    addr.or_else(|| {
        config.get_hosts().iter().find_map(|h| match h {
            Host::Tcp(name) if !loopback(h) => Some(name.clone()),
            _ => None,
        })
    })
}

/// Chooses the connector for `config` from the URL's TLS parameters, and
/// sets the client's `sslmode` to match; `shown` is the URL for messages.
pub(super) fn choose(shown: &str, config: &mut Config, params: Params) -> Result<Tls, StoreError> {
    let refuse = |reason: String| StoreError::Tls {
        store: shown.to_string(),
        reason,
    };
    match params.mode.as_deref() {
        Some("verify-full") => {
            let file = params.rootcert.ok_or_else(|| {
                refuse("`sslmode=verify-full` needs `sslrootcert=FILE`, the authority's certificate (PEM) to check the server's against".into())
            })?;
            if config
                .get_hosts()
                .iter()
                .any(|h| matches!(h, Host::Unix(_)))
            {
                return Err(refuse(
                    "a Unix socket carries no TLS: name the server by its host name for `sslmode=verify-full`".into(),
                ));
            }
            let connector = connector(&file).map_err(refuse)?;
            config.ssl_mode(SslMode::Require);
            Ok(Tls::Verified(connector))
        }
        Some("disable") => {
            if params.rootcert.is_some() {
                return Err(refuse(
                    "`sslrootcert` with `sslmode=disable`: say which one is meant".into(),
                ));
            }
            config.ssl_mode(SslMode::Disable);
            Ok(Tls::Off)
        }
        Some(mode @ ("require" | "prefer" | "allow" | "verify-ca")) => Err(refuse(format!(
            "`sslmode={mode}` does not check the server's name against its certificate: anyone in the path could answer as the store"
        ))),
        Some(mode) => Err(refuse(format!("unknown `sslmode={mode}`"))),
        None => {
            if params.rootcert.is_some() {
                return Err(refuse("`sslrootcert` without `sslmode=verify-full`".into()));
            }
            if let Some(host) = remote(config) {
                return Err(StoreError::PlaintextRemote {
                    store: shown.to_string(),
                    host,
                });
            }
            config.ssl_mode(SslMode::Disable);
            Ok(Tls::Off)
        }
    }
}

/// A TLS connector that trusts only the certificates in `file` (PEM).
fn connector(file: &str) -> Result<MakeRustlsConnect, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(file)
        .and_then(|certs| certs.collect::<Result<_, _>>())
        .map_err(|e| format!("cannot read `sslrootcert` `{file}`: {e}"))?;
    if certs.is_empty() {
        return Err(format!("`sslrootcert` `{file}` holds no certificate"));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| format!("`sslrootcert` `{file}`: {e}"))?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chosen(url: &str) -> Result<(String, bool), StoreError> {
        let (rest, params) = split(url);
        let mut config: Config = rest.parse().expect("the rest parses");
        let tls = choose(url, &mut config, params)?;
        Ok((rest, matches!(tls, Tls::Verified(_))))
    }

    #[test]
    fn the_tls_parameters_are_taken_out_of_the_url() {
        let (rest, p) = split(
            "postgres://ipc@db/x?options=-csearch_path%3Dipc&sslmode=verify-full&sslrootcert=%2Fetc%2Fca%20x.pem",
        );
        assert_eq!(rest, "postgres://ipc@db/x?options=-csearch_path%3Dipc");
        assert_eq!(p.mode.as_deref(), Some("verify-full"));
        assert_eq!(p.rootcert.as_deref(), Some("/etc/ca x.pem"));
        assert_eq!(split("postgres://a@b/c").0, "postgres://a@b/c");
        assert_eq!(
            split("postgres://a@b/c?sslmode=disable").0,
            "postgres://a@b/c"
        );
    }

    #[test]
    fn a_remote_host_in_clear_is_refused_unless_disable_is_explicit() {
        for url in [
            "postgres://ipc@db.internal/intentplane",
            "postgres://ipc@10.0.0.5:5432/intentplane",
            "postgres://ipc@localhost/x?hostaddr=10.0.0.5",
            "postgres://ipc@127.0.0.1,db.internal/x",
        ] {
            let e = chosen(url).unwrap_err();
            assert!(
                matches!(e, StoreError::PlaintextRemote { .. }),
                "{url}: {e}"
            );
        }
        for url in [
            "postgres://ipc@127.0.0.1:5432/x",
            "postgres://ipc@localhost/x",
            "postgres://ipc@[::1]:5432/x",
            "postgres://ipc@localhost/x?host=/run/postgresql",
            "postgres://ipc@db.internal/x?sslmode=disable",
        ] {
            assert!(!chosen(url).unwrap().1, "{url}");
        }
    }

    #[test]
    fn only_verify_full_with_a_root_certificate_is_tls() {
        for (url, needle) in [
            ("postgres://ipc@db/x?sslmode=require", "does not check"),
            ("postgres://ipc@db/x?sslmode=prefer", "does not check"),
            ("postgres://ipc@db/x?sslmode=verify-ca", "does not check"),
            (
                "postgres://ipc@db/x?sslmode=verify-full",
                "needs `sslrootcert",
            ),
            (
                "postgres://ipc@db/x?sslmode=maybe",
                "unknown `sslmode=maybe`",
            ),
            ("postgres://ipc@db/x?sslrootcert=/x.pem", "without `sslmode"),
            (
                "postgres://ipc@db/x?sslmode=disable&sslrootcert=/x.pem",
                "say which",
            ),
            (
                "postgres://ipc@db/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
                "cannot read `sslrootcert` `/nonexistent/ca.pem`",
            ),
            (
                "postgres://ipc@db/x?host=/run/postgresql&sslmode=verify-full&sslrootcert=/x.pem",
                "unix socket carries no tls",
            ),
        ] {
            let e = chosen(url).unwrap_err();
            assert!(matches!(e, StoreError::Tls { .. }), "{url}: {e}");
            assert!(
                e.to_string()
                    .to_lowercase()
                    .contains(&needle.to_lowercase()),
                "{url}: {e}"
            );
        }
    }

    #[test]
    fn a_root_file_without_a_certificate_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("empty.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let url = format!(
            "postgres://ipc@db/x?sslmode=verify-full&sslrootcert={}",
            file.display()
        );
        let e = chosen(&url).unwrap_err();
        assert!(e.to_string().contains("holds no certificate"), "{e}");
    }
}
