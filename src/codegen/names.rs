//! Spelling names and strings for Cedar: when to quote, how to escape, and
//! how a rule's reason becomes a readable policy id.

/// Identifiers Cedar's policy grammar reserves (never valid after `.`).
const POLICY_RESERVED: &[&str] = &[
    "true", "false", "if", "then", "else", "in", "is", "like", "has",
];

/// Words with a meaning in the Cedar schema grammar; quoted there to be safe.
const SCHEMA_WORDS: &[&str] = &[
    "namespace",
    "entity",
    "action",
    "type",
    "appliesTo",
    "principal",
    "resource",
    "context",
    "tags",
    "enum",
    "Set",
    "Long",
    "String",
    "Bool",
    "Boolean",
    "Record",
    "Entity",
    "Extension",
];

/// An ASCII identifier (`[A-Za-z_][A-Za-z0-9_]*`).
pub(crate) fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn reserved(s: &str) -> bool {
    POLICY_RESERVED.contains(&s) || s.starts_with("__cedar")
}

/// Why a pack name cannot be a Cedar namespace, if it cannot.
pub(crate) fn namespace_problem(name: &str) -> Option<&'static str> {
    if !is_ident(name) {
        Some("a cedar namespace is an ascii identifier")
    } else if reserved(name) || SCHEMA_WORDS.contains(&name) {
        Some("it is a cedar keyword, and the pack name becomes the cedar namespace")
    } else {
        None
    }
}

/// An attribute name as declared in the schema: bare when safe, else quoted.
pub(crate) fn schema_attr(name: &str) -> String {
    if is_ident(name) && !reserved(name) && !SCHEMA_WORDS.contains(&name) {
        name.to_string()
    } else {
        cedar_string(name)
    }
}

/// Reading an attribute of a record expression: `x.name`, or `x["name"]`
/// when `name` is not an identifier Cedar accepts after a dot.
pub(crate) fn attr_access(base: &str, name: &str) -> String {
    if is_ident(name) && !reserved(name) {
        format!("{base}.{name}")
    } else {
        format!("{base}[{}]", cedar_string(name))
    }
}

/// A Cedar string literal (also used for annotation values).
pub(crate) fn cedar_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Text for a `//` comment: one line, no control characters.
pub(crate) fn comment_text(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// A readable id fragment: lower-case ASCII letters and digits joined by
/// `-`, at most 48 characters. Empty when nothing usable is left.
pub(crate) fn slug(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    if out.len() > 48 {
        out.truncate(48);
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs() {
        assert_eq!(slug("hard cap"), "hard-cap");
        assert_eq!(
            slug("  Another account's standing order!"),
            "another-account-s-standing-order"
        );
        assert_eq!(slug("€€"), "");
        assert!(slug(&"x ".repeat(100)).len() <= 48);
    }

    #[test]
    fn quoting() {
        assert_eq!(attr_access("context", "amount"), "context.amount");
        assert_eq!(attr_access("context", "like"), "context[\"like\"]");
        assert_eq!(schema_attr("type"), "\"type\"");
        assert_eq!(schema_attr("amount"), "amount");
        assert_eq!(
            cedar_string("a\"b\\c\nd\u{1}é"),
            "\"a\\\"b\\\\c\\nd\\u{1}é\""
        );
        assert!(namespace_problem("if").is_some());
        assert!(namespace_problem("bank").is_none());
    }
}
