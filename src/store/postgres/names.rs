//! What names a PostgreSQL store: a `postgres://` URL, a registry's table.
//! Compiled without the `postgres` feature too (a world or a config names
//! one; opening it is then refused).

/// Whether a store location names PostgreSQL rather than an SQLite file.
pub fn is_url(location: &str) -> bool {
    location.starts_with("postgres://") || location.starts_with("postgresql://")
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
