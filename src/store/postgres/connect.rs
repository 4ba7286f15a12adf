//! How a [`PgStore`](super::PgStore) is configured from its URL: the password
//! refused in it and read from the environment, a default user, timeouts and
//! the session bounds; the URL redacted for messages.

use super::{PASSWORD_FILE_ENV, PgOptions, tls};
use crate::store::StoreError;
use postgres::Config;

/// The session bounds ([`PgOptions::lock_timeout`],
/// [`PgOptions::idle_in_transaction_timeout`]) added to the connection's
/// `options` (`-c name=ms`), each unless the URL's `options` set it.
fn session_bounds(c: &mut Config, options: &PgOptions) {
    let given = c.get_options().unwrap_or_default().to_string();
    let mut out = given.clone();
    for (name, d) in [
        ("lock_timeout", options.lock_timeout),
        (
            "idle_in_transaction_session_timeout",
            options.idle_in_transaction_timeout,
        ),
    ] {
        if !given.contains(name) {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(&format!("-c {name}={}", d.as_millis()));
        }
    }
    if options.read_only {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str("-c default_transaction_read_only=on");
    }
    c.options(&out);
}

/// Parses the URL (refusing a password in it) and adds the password from
/// the environment, a default user and timeouts.
pub(super) fn config(url: &str, options: &PgOptions) -> Result<(Config, tls::Tls), StoreError> {
    let shown = super::names::redact(url);
    let (rest, tls_params) = tls::split(url);
    let mut c: Config = rest
        .parse()
        .map_err(|e: postgres::Error| StoreError::Open {
            path: shown.clone(),
            reason: format!("invalid postgresql url: {}", lower(&e.to_string())),
        })?;
    if c.get_password().is_some() {
        return Err(StoreError::PasswordInUrl { url: shown });
    }
    let tls = tls::choose(&shown, &mut c, tls_params)?;
    if let Some(file) = std::env::var_os(PASSWORD_FILE_ENV) {
        let text = std::fs::read_to_string(&file).map_err(|e| StoreError::Open {
            path: shown.clone(),
            reason: format!(
                "cannot read the password file `{}` (`{PASSWORD_FILE_ENV}`): {}",
                std::path::Path::new(&file).display(),
                lower(&e.to_string())
            ),
        })?;
        let password = text.lines().next().unwrap_or("");
        c.password(password);
    } else if let Ok(p) = std::env::var("PGPASSWORD") {
        c.password(p);
    }
    if c.get_user().is_none()
        && let Some(u) = ["PGUSER", "USER"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
    {
        c.user(&u);
    }
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(options.connect_timeout);
    }
    if c.get_application_name().is_none() {
        c.application_name("ipc");
    }
    session_bounds(&mut c, options);
    Ok((c, tls))
}

pub(super) fn lower(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}
