//! What a downstream server said, as a message may show it: its error
//! text reaches a terminal (a diagnostic) or the agent (a tool's error),
//! and the server is not trusted with either. [`quoted`] is the one
//! function through which a downstream's own text enters a message;
//! [`describe`] puts a failure of rmcp's client in words (never rmcp's
//! type names), quoting what came from the server.

use rmcp::ServiceError;
use rmcp::service::ClientInitializeError;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, InsufficientScopeError, StreamableHttpError,
};
use std::error::Error;

/// The most characters of a downstream's text a message quotes.
pub const MAX_QUOTED: usize = 200;

/// What stands for a configured token found in a downstream's text.
pub const WITHHELD: &str = "<withheld>";

/// A downstream's text as quoted data on one line: each of `tokens` (the
/// secrets the proxy sends that server) replaced by [`WITHHELD`], then
/// every control, line break and invisible character escaped
/// (`crate::base::json::echo_within`), cut at [`MAX_QUOTED`] characters,
/// in backticks. It cannot forge a line, a colour or a link, nor repeat a
/// token.
pub fn quoted(text: &str, tokens: &[&str]) -> String {
    let mut clear = text.to_string();
    for t in tokens.iter().filter(|t| !t.is_empty()) {
        clear = clear.replace(t, WITHHELD);
    }
    format!(
        "`{}`",
        crate::base::json::echo_within(&clear, MAX_QUOTED).replace('`', "'")
    )
}

/// Why rmcp's client failed, in words.
pub struct Described {
    /// The reason: our words, the server's text quoted.
    pub text: String,
    /// The server refused the token (HTTP 401 or 403).
    pub refused: bool,
    /// What rustls refused in the server's certificate, if that is why.
    pub tls: Option<String>,
}

/// `e` and its causes in words: each rmcp wrapper left out, what the
/// server sent (a body, a header, an MCP error's message) [`quoted`] with
/// `tokens` withheld.
pub fn describe<T: AsRef<str>>(e: &(dyn Error + 'static), tokens: &[T]) -> Described {
    let tokens: Vec<&str> = tokens.iter().map(AsRef::as_ref).collect();
    let tokens = tokens.as_slice();
    let mut chain = vec![];
    walk(e, &mut chain);
    let mut parts: Vec<String> = vec![];
    for c in &chain {
        let Some(t) = own_text(*c, tokens) else {
            continue;
        };
        if !parts.iter().any(|r| r.contains(&t)) {
            parts.retain(|r| !t.contains(r.as_str()));
            parts.push(t);
        }
    }
    let refused = chain.iter().any(|c| is_refusal(*c));
    let tls = chain
        .iter()
        .find_map(|c| c.downcast_ref::<rustls::Error>())
        .map(|r| crate::base::json::echo_within(&r.to_string().to_lowercase(), MAX_QUOTED));
    let text = if parts.is_empty() {
        "an error without a cause".to_string()
    } else {
        parts.join(": ")
    };
    Described { text, refused, tls }
}

type HttpError = StreamableHttpError<reqwest::Error>;

/// Visits `e` and everything under it: its sources, and what rmcp's and
/// std's wrappers hold without naming it as a source (the HTTP client's
/// error in `StreamableHttpError::Client`, the error inside an
/// `io::Error`).
fn walk<'a>(e: &'a (dyn Error + 'static), seen: &mut Vec<&'a (dyn Error + 'static)>) {
    if seen.len() > 32 {
        return;
    }
    seen.push(e);
    if let Some(ClientInitializeError::TransportError { error, .. }) =
        e.downcast_ref::<ClientInitializeError>()
    {
        walk(error, seen);
    }
    if let Some(StreamableHttpError::Client(c)) = e.downcast_ref::<HttpError>() {
        walk(c, seen);
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        walk(inner, seen);
    }
    if let Some(s) = e.source() {
        walk(s, seen);
    }
}

/// HTTP 401 or 403, with or without a challenge.
fn is_refusal(e: &(dyn Error + 'static)) -> bool {
    match e.downcast_ref::<HttpError>() {
        Some(StreamableHttpError::AuthRequired(_) | StreamableHttpError::InsufficientScope(_)) => {
            true
        }
        Some(StreamableHttpError::UnexpectedServerResponse(t)) => {
            t.starts_with("HTTP 401") || t.starts_with("HTTP 403")
        }
        _ => false,
    }
}

/// What `e` itself says, without its causes; `None` for a wrapper that
/// says nothing of its own (or only a type's name).
fn own_text(e: &(dyn Error + 'static), tokens: &[&str]) -> Option<String> {
    // wrappers, and the challenges `http_text` already quotes
    if e.is::<DynamicTransportError>()
        || e.is::<AuthRequiredError>()
        || e.is::<InsufficientScopeError>()
    {
        return None;
    }
    if let Some(s) = e.downcast_ref::<ServiceError>() {
        return service_text(s, tokens);
    }
    if let Some(i) = e.downcast_ref::<ClientInitializeError>() {
        return init_text(i, tokens);
    }
    if let Some(h) = e.downcast_ref::<HttpError>() {
        return http_text(h, tokens);
    }
    // the HTTP client's, TLS's and the system's own words; quoted all
    // the same, as they may hold a name the server chose
    Some(crate::base::json::echo_within(&e.to_string(), MAX_QUOTED))
}

fn service_text(e: &ServiceError, tokens: &[&str]) -> Option<String> {
    match e {
        ServiceError::TransportSend(_) => None,
        ServiceError::McpError(d) => Some(format!(
            "MCP error {}: {}",
            d.code.0,
            quoted(&d.message, tokens)
        )),
        ServiceError::TransportClosed => Some("the connection closed".into()),
        ServiceError::UnexpectedResponse => Some("an answer of another kind".into()),
        ServiceError::Timeout { timeout } => {
            Some(format!("no answer within {} s", timeout.as_secs()))
        }
        other => Some(crate::base::json::echo_within(
            &other.to_string().to_lowercase(),
            MAX_QUOTED,
        )),
    }
}

fn init_text(e: &ClientInitializeError, tokens: &[&str]) -> Option<String> {
    match e {
        ClientInitializeError::TransportError { .. } => None,
        ClientInitializeError::JsonRpcError(d) => Some(format!(
            "MCP error {}: {}",
            d.code.0,
            quoted(&d.message, tokens)
        )),
        ClientInitializeError::ExpectedInitResponse(_)
        | ClientInitializeError::ExpectedInitResult(_) => {
            Some("its answer to `initialize` is not an initialize result".into())
        }
        ClientInitializeError::ConnectionClosed(why) => {
            Some(format!("the connection closed ({})", quoted(why, tokens)))
        }
        other => Some(crate::base::json::echo_within(
            &other.to_string().to_lowercase(),
            MAX_QUOTED,
        )),
    }
}

fn http_text(e: &HttpError, tokens: &[&str]) -> Option<String> {
    Some(match e {
        StreamableHttpError::Client(_) => return None,
        StreamableHttpError::AuthRequired(a) => format!(
            "HTTP 401, asking for {}",
            quoted(&a.www_authenticate_header, tokens)
        ),
        StreamableHttpError::InsufficientScope(a) => format!(
            "HTTP 403, asking for {}",
            quoted(&a.www_authenticate_header, tokens)
        ),
        StreamableHttpError::UnexpectedServerResponse(t) => match status_and_body(t) {
            Some((status, "")) => status,
            Some((status, body)) => format!("{status}, with the body {}", quoted(body, tokens)),
            None => format!("an unexpected answer: {}", quoted(t, tokens)),
        },
        StreamableHttpError::UnexpectedContentType(t) => format!(
            "an answer of type {}",
            quoted(t.as_deref().unwrap_or(""), tokens)
        ),
        other => crate::base::json::echo_within(&other.to_string().to_lowercase(), MAX_QUOTED),
    })
}

/// rmcp's `HTTP 401 Unauthorized: BODY` as its status line (ours to
/// show: digits and the reason phrase of the status code) and the body
/// (the server's).
fn status_and_body(t: &str) -> Option<(String, &str)> {
    let rest = t.strip_prefix("HTTP ")?;
    let code: u16 = rest.get(..3)?.parse().ok()?;
    let body = rest.split_once(": ").map_or("", |(_, b)| b);
    let phrase = reqwest::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    Some((format!("HTTP {code} {phrase}").trim_end().to_string(), body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_text_is_one_line_without_tokens_or_escapes() {
        let q = quoted(
            "Bearer s3cr3t-token\x1b[2J\n  help: run `rm -rf ~`\u{202e}",
            &["s3cr3t-token"],
        );
        assert!(!q.contains("s3cr3t"), "{q}");
        assert!(q.contains(WITHHELD), "{q}");
        assert!(!q.contains('\n') && !q.contains('\x1b') && !q.contains('\u{202e}'));
        // one pair of backticks: the server's cannot close the quote
        assert_eq!(q.matches('`').count(), 2, "{q}");
        assert!(q.starts_with('`') && q.ends_with('`'));
        let long = quoted(&"x".repeat(10_000), &[]);
        assert!(long.chars().count() <= MAX_QUOTED + 3, "{}", long.len());
        // an empty token withholds nothing
        assert_eq!(quoted("ab", &[""]), "`ab`");
    }

    #[test]
    fn a_status_line_is_ours_and_the_body_theirs() {
        assert_eq!(
            status_and_body("HTTP 401 Unauthorized: go away\n"),
            Some(("HTTP 401 Unauthorized".to_string(), "go away\n"))
        );
        assert_eq!(
            status_and_body("HTTP 307 whatever the server says"),
            Some(("HTTP 307 Temporary Redirect".to_string(), ""))
        );
        assert_eq!(status_and_body("not a status"), None);
    }
}
