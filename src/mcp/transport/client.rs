//! A downstream MCP server over Streamable HTTP: rmcp's client transport
//! on reqwest, TLS by rustls (ring) verified against the webpki roots or,
//! with `ca_file`, against that authority only; never without
//! verification. No redirect is followed (the token would go with it), no
//! proxy from the environment is used, and the bearer token goes with
//! every request. A server that cannot be reached, whose certificate does
//! not verify, or that refuses the token is a [`RemoteError`]: at
//! start-up the proxy does not start.

use crate::mcp::config::{Bearer, Remote};
use rmcp::ServiceExt;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

/// How long a TCP connection (and the TLS handshake) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long MCP's initialisation may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a remote downstream server cannot be used.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum RemoteError {
    /// A remote downstream server (`url`) cannot be reached, or does not
    /// answer MCP's initialisation over Streamable HTTP: the proxy does
    /// not start (a call to it later, once started, is refused with a
    /// receipt).
    #[error("cannot connect to the downstream server `{server}` at `{url}`: {reason}")]
    #[diagnostic(
        code(ipc::mcp::connect),
        help(
            "check that the server runs and listens at this `url` (Streamable HTTP, e.g. `https://host/mcp`)"
        )
    )]
    Connect {
        server: String,
        url: String,
        reason: String,
    },
    /// The remote server's certificate does not verify: not signed by a
    /// trusted authority (the webpki roots, or the config's `ca_file`
    /// alone when it is given), expired, or for another name. The proxy
    /// never connects without verifying.
    #[error(
        "the certificate of the downstream server `{server}` at `{url}` does not verify: {reason}"
    )]
    #[diagnostic(
        code(ipc::mcp::tls),
        help(
            "a server whose certificate a private authority signed: give that authority's certificate (PEM) as `ca_file` of the server; the certificate must name the URL's host"
        )
    )]
    Tls {
        server: String,
        url: String,
        reason: String,
    },
    /// The remote server refuses the proxy's bearer token (HTTP 401 or
    /// 403), or asks for one the config does not give.
    #[error("the downstream server `{server}` at `{url}` refuses the proxy: {reason}")]
    #[diagnostic(
        code(ipc::mcp::unauthorized),
        help(
            "give the server's bearer token as `token_file` (a file holding it) or `token_env` (a variable) of the server"
        )
    )]
    Unauthorized {
        server: String,
        url: String,
        reason: String,
    },
}

/// Connects to `remote` and completes MCP's initialisation.
pub async fn connect(
    server: &str,
    remote: &Remote,
) -> Result<RunningService<RoleClient, ()>, RemoteError> {
    let connect_err = |reason: String| RemoteError::Connect {
        server: server.to_string(),
        url: remote.url.clone(),
        reason,
    };
    // a `token_file` is read at every connection: a rotated token is
    // taken without a restart
    let token = match remote.token_now() {
        Some(Ok(t)) => Some(t),
        Some(Err(reason)) => {
            return Err(RemoteError::Unauthorized {
                server: server.to_string(),
                url: remote.url.clone(),
                reason,
            });
        }
        None => remote.token.clone(),
    };
    let http = http_client(remote).map_err(connect_err)?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(remote.url.as_str());
    if let Some(t) = &token {
        config = config.auth_header(t.expose());
    }
    let transport = StreamableHttpClientTransport::with_client(http, config);
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, ().serve(transport)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(classify(server, remote, token.as_ref(), &e)),
        Err(_) => Err(connect_err(format!(
            "no answer to MCP's initialisation within {} s",
            HANDSHAKE_TIMEOUT.as_secs()
        ))),
    }
}

/// rustls with ring: the authority of `ca_file` alone, or the webpki
/// roots.
fn tls_config(remote: &Remote) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &remote.ca {
        Some(certs) => {
            for c in certs {
                roots
                    .add(rustls::pki_types::CertificateDer::from(c.clone()))
                    .map_err(|e| format!("`ca_file`: {e}"))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

fn http_client(remote: &Remote) -> Result<reqwest::Client, String> {
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls_config(remote)?)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .https_only(remote.url.starts_with("https:"))
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        .build()
        .map_err(|e| e.to_string().to_lowercase())
}

/// A failed initialisation as a [`RemoteError`]: a certificate rustls
/// refused, a 401 or 403, or else a connection error; the reason in words
/// with the server's own text quoted and the token withheld
/// ([`super::said`]).
fn classify(
    server: &str,
    remote: &Remote,
    token: Option<&Bearer>,
    e: &(dyn Error + 'static),
) -> RemoteError {
    let tokens: Vec<&str> = remote
        .token
        .iter()
        .chain(token)
        .map(Bearer::expose)
        .collect();
    let said = super::said::describe(e, &tokens);
    let (server, url) = (server.to_string(), remote.url.clone());
    if let Some(reason) = said.tls {
        RemoteError::Tls {
            server,
            url,
            reason,
        }
    } else if said.refused {
        RemoteError::Unauthorized {
            server,
            url,
            reason: said.text,
        }
    } else {
        RemoteError::Connect {
            server,
            url,
            reason: said.text,
        }
    }
}
