//! What names a PostgreSQL store: a `postgres://` URL (and how one is
//! shown, its password hidden), a registry's table.
//! Compiled without the `postgres` feature too (a world or a config names
//! one; opening it is then refused).

/// Whether a store location names PostgreSQL rather than an SQLite file.
pub fn is_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
}

/// The URL with any password in it (user info or a `password=`
/// parameter) replaced by `***` (for messages).
pub fn redact(url: &str) -> String {
    let Some(start) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[start..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let authority = &rest[..end];
    let mut out = match authority.rfind('@') {
        Some(at) => match authority[..at].find(':') {
            Some(colon) => format!(
                "{}{}:***{}",
                &url[..start],
                &authority[..colon],
                &url[start + at..]
            ),
            None => url.to_string(),
        },
        None => url.to_string(),
    };
    if let Some(q) = out.find('?') {
        let params: Vec<String> = out[q + 1..]
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k == "password" => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{}?{}", &out[..q], params.join("&"));
    }
    out
}

/// A table name as SQL: `name` or `schema.name`, each part an unquoted
/// identifier (letters, digits, `_`), written quoted; `None` otherwise.
pub fn quote_table(name: &str) -> Option<String> {
    let ident = |p: &str| {
        let mut c = p.chars();
        matches!(c.next(), Some(f) if f.is_ascii_alphabetic() || f == '_')
            && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
            && p.len() <= 63
    };
    let parts: Vec<&str> = name.split('.').collect();
    if parts.is_empty() || parts.len() > 2 || !parts.iter().all(|p| ident(p)) {
        return None;
    }
    Some(
        parts
            .iter()
            .map(|p| format!("\"{p}\""))
            .collect::<Vec<_>>()
            .join("."),
    )
}
