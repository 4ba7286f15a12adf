//! Normalisers: the one spelling a value is compared in. Each refuses what
//! it cannot normalise unambiguously (invisible characters, look-alikes,
//! full-width digits) rather than guessing, so a disguised value never
//! equals a trusted one by accident — and never differs from it by a trick
//! either: the comparison is on the canonical form.

use crate::base::json::echo;
use crate::ir::Normalizer;

pub fn apply(n: Normalizer, s: &str) -> Result<String, String> {
    match n {
        Normalizer::Iban => iban(s),
        Normalizer::Email => email(s),
        Normalizer::Phone => phone(s),
        Normalizer::Lower => plain(s).map(|t| t.to_ascii_lowercase()),
        Normalizer::Upper => plain(s).map(|t| t.to_ascii_uppercase()),
        Normalizer::Trim => plain(s).map(str::to_string),
        Normalizer::Path => path(s),
    }
}

/// A path's one spelling, lexically: repeated separators and `.` removed,
/// each `..` taking away the component before it. Strict: a `..` with
/// nothing before it (the path leaves its root: `../x`, `/..`) is refused,
/// never folded into the root; so are an empty path, a backslash, a
/// leading `~` (some servers expand it to a home folder), a space at
/// either end, and control or invisible characters. Lexical only: a
/// symbolic link is the server's to resolve. `/a//b/./c/../d` is `/a/b/d`,
/// `./notes/todo.md` is `notes/todo.md`, `.` is `.`.
pub fn path(s: &str) -> Result<String, String> {
    let refuse = |why: &str| {
        Err(format!(
            "`{}` is not a path this gateway accepts: {why}",
            echo(s)
        ))
    };
    if s.is_empty() {
        return refuse("it is empty");
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_control() || crate::base::json::invisible(*c))
    {
        return refuse(&format!("it contains U+{:04X}", c as u32));
    }
    if s.contains('\\') {
        return refuse("it contains a backslash (the separator is `/`)");
    }
    if s.starts_with(char::is_whitespace) || s.ends_with(char::is_whitespace) {
        return refuse("it starts or ends with a space");
    }
    if s.starts_with('~') {
        return refuse("it starts with `~`: write the folder out");
    }
    let absolute = s.starts_with('/');
    let mut parts: Vec<&str> = vec![];
    for c in s.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return refuse("it leaves its root (`..` above where it starts)");
                }
            }
            c => parts.push(c),
        }
    }
    let joined = parts.join("/");
    Ok(match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    })
}

/// A normalised path and each folder it is inside, nearest first:
/// `/a/b` gives `/a/b`, `/a`, `/`; `a/b` gives `a/b`, `a`.
pub fn path_and_parents(p: &str) -> Vec<String> {
    let mut out = vec![p.to_string()];
    let mut cur = p;
    while let Some(i) = cur.rfind('/') {
        cur = if i == 0 { "/" } else { &cur[..i] };
        if out.last().map(String::as_str) == Some(cur) {
            break;
        }
        out.push(cur.to_string());
    }
    out
}

/// The text `lower`, `upper` and `trim` work on: ASCII spaces and tabs
/// trimmed from both ends; a control character, a non-ASCII space (no-break,
/// ideographic) or an invisible mark anywhere is refused, never trimmed or
/// folded. Case is then folded for ASCII letters only: any other character
/// is compared as it is, so a look-alike (`Ρ-1001` with a Greek Rho) or a
/// letter whose Unicode case mapping changes the text (`ß` to `SS`) never
/// becomes the value it imitates.
fn plain(s: &str) -> Result<&str, String> {
    let t = s.trim_matches([' ', '\t']);
    if let Some(c) = t.chars().find(|c| {
        c.is_control() || (c.is_whitespace() && *c != ' ') || crate::base::json::invisible(*c)
    }) {
        return Err(format!(
            "`{}` contains U+{:04X}, which is refused rather than removed",
            echo(s),
            c as u32
        ));
    }
    Ok(t)
}

/// Spaces removed, upper-case, ISO 13616 shape and mod-97 checksum.
pub fn iban(s: &str) -> Result<String, String> {
    if let Some(c) = s.chars().find(|c| !c.is_ascii()) {
        return Err(format!(
            "`{}` is not an IBAN: it contains the non-ASCII character U+{:04X}",
            echo(s),
            c as u32
        ));
    }
    // ASCII (checked above): byte by byte, sized once
    let mut compact = String::with_capacity(s.len());
    compact.extend(
        s.bytes()
            .filter(|b| *b != b' ')
            .map(|b| char::from(b.to_ascii_uppercase())),
    );
    let b = compact.as_bytes();
    let shape = (15..=34).contains(&b.len())
        && b[..2].iter().all(u8::is_ascii_uppercase)
        && b[2..4].iter().all(u8::is_ascii_digit)
        && b[4..].iter().all(u8::is_ascii_alphanumeric);
    if !shape {
        return Err(format!("`{}` is not an IBAN", echo(s)));
    }
    let rearranged = compact[4..].bytes().chain(compact[..4].bytes());
    let mut rem: u32 = 0;
    for c in rearranged {
        let v = if c.is_ascii_digit() {
            u32::from(c - b'0')
        } else {
            u32::from(c - b'A') + 10
        };
        rem = if v >= 10 {
            (rem * 100 + v) % 97
        } else {
            (rem * 10 + v) % 97
        };
    }
    if rem != 1 {
        return Err(format!("`{}` is not a valid IBAN: wrong checksum", echo(s)));
    }
    Ok(compact)
}

/// Trimmed, lower-case, ASCII only: an internationalised look-alike
/// (`аlice@…` with a Cyrillic `а`), a zero-width or bidi character is
/// refused, not folded.
pub fn email(s: &str) -> Result<String, String> {
    let t = s.trim();
    if let Some(c) = t.chars().find(|c| !c.is_ascii() || c.is_ascii_control()) {
        return Err(format!(
            "`{}` is not an accepted e-mail address: it contains U+{:04X}",
            echo(t),
            c as u32
        ));
    }
    let lower = t.to_ascii_lowercase();
    let mut parts = lower.split('@');
    let (Some(local), Some(domain), None) = (parts.next(), parts.next(), parts.next()) else {
        return Err(format!("`{}` is not an e-mail address", echo(t)));
    };
    let ok_domain = domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && domain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if local.is_empty() || !ok_domain || lower.contains(' ') {
        return Err(format!("`{}` is not an e-mail address", echo(t)));
    }
    Ok(lower)
}

/// `+` and digits only; spaces, dots, dashes and brackets dropped.
pub fn phone(s: &str) -> Result<String, String> {
    let mut out = String::new();
    for (i, c) in s.trim().chars().enumerate() {
        match c {
            '0'..='9' => out.push(c),
            '+' if i == 0 => out.push(c),
            ' ' | '.' | '-' | '(' | ')' => {}
            _ => return Err(format!("`{}` is not a phone number", echo(s))),
        }
    }
    if out.trim_start_matches('+').len() < 5 {
        return Err(format!("`{}` is not a phone number", echo(s)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iban_forms() {
        let good = "DE89370400440532013000";
        assert_eq!(iban("DE89 3704 0044 0532 0130 00").unwrap(), good);
        assert_eq!(iban("de89370400440532013000").unwrap(), good);
        assert!(iban("DE89370400440532013001").is_err()); // checksum
        assert!(iban("DE89 3704 0044 0532 0130 0\u{200B}0").is_err()); // zero-width
        assert!(iban("DE89３７04 0044 0532 0130 00").is_err()); // full-width digits
        assert!(iban("\u{202E}DE89370400440532013000").is_err()); // bidi
        assert!(iban("").is_err());
    }

    #[test]
    fn email_forms() {
        assert_eq!(email(" Alice@Example.COM ").unwrap(), "alice@example.com");
        assert!(email("аlice@example.com").is_err()); // Cyrillic a
        assert!(email("alice@exаmple.com").is_err());
        assert!(email("alice@example.com\u{200D}").is_err());
        assert!(email("a@b@c.com").is_err());
        assert!(email("alice@localhost").is_err());
    }

    /// Issue #11, item 9: the text normalisers refuse what they used to
    /// fold (Unicode spaces trimmed, Unicode case mapped).
    #[test]
    fn text_normalisers_refuse_rather_than_fold() {
        use Normalizer::{Lower, Trim, Upper};
        assert_eq!(apply(Upper, " p-1001\t").unwrap(), "P-1001");
        assert_eq!(apply(Lower, "ABC").unwrap(), "abc");
        assert_eq!(apply(Trim, "  main ").unwrap(), "main");
        for n in [Lower, Upper, Trim] {
            for bad in [
                "\u{a0}p-1001\u{3000}",
                "p-10\u{200b}01",
                "\u{202e}p-1001",
                "p-1001\n",
                "p\u{0}1",
                "p-1001\u{feff}",
            ] {
                let e = apply(n, bad).unwrap_err();
                assert!(e.contains("refused rather than removed"), "{bad:?}: {e}");
                assert!(!e.contains(['\u{a0}', '\u{200b}', '\u{202e}', '\n', '\u{0}']));
            }
        }
        // only ASCII letters change case: a look-alike stays what it is
        assert_eq!(apply(Upper, "ρ-1001").unwrap(), "ρ-1001");
        assert_eq!(apply(Upper, "straße").unwrap(), "STRAßE");
        assert_eq!(apply(Lower, "İD").unwrap(), "İd");
    }

    #[test]
    fn phone_forms() {
        assert_eq!(phone("+49 (30) 123-456").unwrap(), "+4930123456");
        assert!(phone("+49 30 CALL ME").is_err());
    }
}
