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

/// How a value of no particular type (an `Id`: an account as a bank
/// writes it) compares with a registry of a typed kind (`set<Iban>`,
/// `set<Email>`, ...): the one question a fact such as `recipient in
/// registry.sanctions` asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compared {
    /// A value of the type, up to the separators and prefixes people
    /// write around it: compared in the type's one spelling.
    Canonical(String),
    /// Plainly no value of the type: compared as written.
    AsWritten,
    /// A value of the type in a disguise (an invisible or look-alike
    /// character where a separator or a digit would be): refused, so the
    /// fact cannot be established and the proposal is denied.
    Refused(String),
}

/// `s` as it compares with a registry whose members `n` spells. The
/// guarantee "a sanctioned account is never paid" holds for every
/// spelling this folds (docs/guarantees.md, "What a guarantee assumes"):
/// - an IBAN: ASCII spaces, punctuation and an `IBAN` prefix folded
///   (`GB29-NWBK-6016-1331-9268-19`, `IBAN: GB29 NWBK …`,
///   `GB29/NWBK/…`, `GB29NWBK60161331926819.`), the checksum checked;
///   an IBAN up to invisible or full-width characters is refused;
/// - an e-mail address: a `mailto:` prefix, a `Name <…>` wrapper and a
///   final `.` folded; anything else with an `@` in it is refused;
/// - a phone number: a `tel:` prefix folded; one up to full-width digits
///   is refused;
/// - a path: its lexical spelling (`path`), or refused.
pub fn comparable(n: Normalizer, s: &str) -> Compared {
    // an address is folded first: `mailto:a@b.c` passes `email` as the
    // address `mailto:a@b.c`
    if n == Normalizer::Email {
        return loose_email(s);
    }
    match (apply(n, s), n) {
        (Ok(c), _) => Compared::Canonical(c),
        (Err(_), Normalizer::Iban) => loose_iban(s),
        (Err(_), Normalizer::Phone) => loose_phone(s),
        (Err(e), Normalizer::Path) => Compared::Refused(e),
        (Err(_), _) => Compared::AsWritten,
    }
}

/// Letters and digits only, full-width forms read as their ASCII letter
/// or digit; `None` when a non-ASCII letter or digit is left.
fn skeleton(s: &str) -> Option<String> {
    s.chars()
        .filter(|c| c.is_alphanumeric())
        .map(|c| match c as u32 {
            0xFF10..=0xFF19 | 0xFF21..=0xFF3A | 0xFF41..=0xFF5A => {
                char::from_u32(c as u32 - 0xFEE0)
            }
            _ => Some(c),
        })
        .map(|c| c.filter(char::is_ascii))
        .collect()
}

/// An IBAN is 2 letters and 2 digits first: `IBAN…` never is one, so an
/// `IBAN` prefix is folded without ambiguity.
fn iban_skeleton(skel: &str) -> Option<String> {
    iban(skel).ok().or_else(|| {
        let rest = skel.get(4..)?;
        skel[..4]
            .eq_ignore_ascii_case("IBAN")
            .then(|| iban(rest).ok())
            .flatten()
    })
}

fn loose_iban(s: &str) -> Compared {
    let Some(c) = skeleton(s).and_then(|k| iban_skeleton(&k)) else {
        return Compared::AsWritten;
    };
    if s.is_ascii() {
        Compared::Canonical(c)
    } else {
        Compared::Refused(format!(
            "`{}` is the IBAN {c} written with invisible or look-alike characters",
            echo(s)
        ))
    }
}

fn loose_email(s: &str) -> Compared {
    let t = s.trim();
    let t = strip_prefix_ignore_case(t, "mailto:").unwrap_or(t);
    let t = match (t.rfind('<'), t.strip_suffix('>')) {
        (Some(i), Some(inner)) => &inner[i + 1..],
        _ => t,
    };
    let t = t.trim().strip_suffix('.').unwrap_or(t.trim());
    match email(t) {
        Ok(c) => Compared::Canonical(c),
        Err(_) if s.contains(['@', '\u{FF20}', '\u{FE6B}']) => Compared::Refused(format!(
            "`{}` has an `@` but is no e-mail address this gateway can compare",
            echo(s)
        )),
        Err(_) => Compared::AsWritten,
    }
}

fn loose_phone(s: &str) -> Compared {
    let t = s.trim();
    let t = strip_prefix_ignore_case(t, "tel:").unwrap_or(t);
    if let Ok(c) = phone(t) {
        return Compared::Canonical(c);
    }
    match skeleton(t) {
        Some(d) if !t.is_ascii() && phone(&d).is_ok() => Compared::Refused(format!(
            "`{}` is a phone number written with look-alike digits",
            echo(s)
        )),
        _ => Compared::AsWritten,
    }
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// A path's one spelling, lexically: repeated separators and `.` removed,
/// each `..` taking away the component before it. Strict: a `..` with
/// nothing before it (the path leaves its root: `../x`, `/..`) is refused,
/// never folded into the root; so are an empty path, a backslash, a
/// leading `~` (some servers expand it to a home folder), a space at
/// either end, and control or invisible characters. Lexical only: the
/// MCP proxy resolves symbolic links for a server on this machine
/// (`mcp::config::mapping`), a remote server must itself. `/a//b/./c/../d` is `/a/b/d`,
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
    use proptest::prelude::*;

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

    #[test]
    fn an_id_spelled_as_an_iban_compares_as_the_iban() {
        let c = |s| comparable(Normalizer::Iban, s);
        let sanctioned = Compared::Canonical("GB29NWBK60161331926819".into());
        for s in [
            "GB29-NWBK-6016-1331-9268-19",
            "GB29NWBK60161331926819.",
            "GB29/NWBK/6016/1331/9268/19",
            "IBAN GB29NWBK60161331926819",
            "iban: gb29 nwbk 6016 1331 9268 19",
            "(GB29_NWBK_6016_1331_9268_19)",
        ] {
            assert_eq!(c(s), sanctioned, "{s:?}");
        }
        for s in [
            "GB29NWBK6016\u{200B}1331926819",
            "GB29 NWBK 6016 1331 9268 １9",
            "GB29\u{00A0}NWBK60161331926819",
        ] {
            assert!(matches!(c(s), Compared::Refused(_)), "{s:?}: {:?}", c(s));
        }
        for s in [
            "landlord-42",
            "GB29NWBK60161331926818",
            "acct 7",
            "GB29NWBK60161331926819 old",
        ] {
            assert_eq!(c(s), Compared::AsWritten, "{s:?}");
        }
    }

    #[test]
    fn an_id_spelled_as_an_address_number_or_path_compares_as_one() {
        let c = comparable;
        let alice = Compared::Canonical("alice@example.com".into());
        for s in [
            "mailto:Alice@Example.com",
            "Alice <alice@example.com>",
            "alice@example.com.",
        ] {
            assert_eq!(c(Normalizer::Email, s), alice, "{s:?}");
        }
        assert!(matches!(
            c(Normalizer::Email, "alice\u{FF20}example.com"),
            Compared::Refused(_)
        ));
        assert!(matches!(
            c(Normalizer::Email, "alice@exa mple.com"),
            Compared::Refused(_)
        ));
        assert_eq!(c(Normalizer::Email, "landlord-42"), Compared::AsWritten);
        assert_eq!(
            c(Normalizer::Phone, "tel:+44 20 7946 0000"),
            Compared::Canonical("+442079460000".into())
        );
        assert!(matches!(
            c(Normalizer::Phone, "+44 20 7946 ０000"),
            Compared::Refused(_)
        ));
        assert_eq!(
            c(Normalizer::Path, "/ws/./a//b"),
            Compared::Canonical("/ws/a/b".into())
        );
        assert!(matches!(c(Normalizer::Path, "..\\x"), Compared::Refused(_)));
    }

    fn mod97(s: &str) -> u32 {
        s.bytes().fold(0, |rem, c| {
            let v = if c.is_ascii_digit() {
                u32::from(c - b'0')
            } else {
                u32::from(c - b'A') + 10
            };
            if v >= 10 {
                (rem * 100 + v) % 97
            } else {
                (rem * 10 + v) % 97
            }
        })
    }

    /// A valid IBAN: a country's two letters, a BBAN, the check digits.
    fn valid_iban() -> impl Strategy<Value = String> {
        ("[A-Z]{2}", "[0-9A-Z]{11,30}").prop_map(|(cc, bban)| {
            let check = 98 - mod97(&format!("{bban}{cc}00"));
            format!("{cc}{check:02}{bban}")
        })
    }

    /// `canonical` as people write it: any case, a separator anywhere, a
    /// prefix and a final mark.
    fn spelled(
        canonical: &str,
        seps: &[&'static str],
        prefixes: &[&'static str],
    ) -> impl Strategy<Value = String> + use<> {
        let n = canonical.chars().count();
        let chars: Vec<char> = canonical.chars().collect();
        (
            proptest::collection::vec((any::<bool>(), proptest::sample::select(seps.to_vec())), n),
            proptest::sample::select(prefixes.to_vec()),
        )
            .prop_map(move |(each, prefix)| {
                let mut out = prefix.to_string();
                for (c, (upper, sep)) in chars.iter().zip(each) {
                    out.push(if upper {
                        c.to_ascii_uppercase()
                    } else {
                        c.to_ascii_lowercase()
                    });
                    out.push_str(sep);
                }
                out
            })
    }

    const INVISIBLE: [char; 5] = ['\u{200B}', '\u{00A0}', '\u{2060}', '\u{FEFF}', '\u{202E}'];

    proptest! {
        /// Every spelling `comparable` folds is the one IBAN: a registry
        /// of IBANs decides it as it decides the canonical form.
        #[test]
        fn every_folded_spelling_of_an_iban_is_the_iban(
            (iban, spelling) in valid_iban().prop_flat_map(|i| {
                let s = spelled(&i, &["", "", "", " ", "-", ".", "/", "_"], &["", "IBAN ", "iban:", "IBAN: "]);
                (Just(i), s)
            }),
            end in proptest::sample::select(vec!["", ".", " ", ")"]),
        ) {
            let v = format!("{spelling}{end}");
            prop_assert_eq!(comparable(Normalizer::Iban, &v), Compared::Canonical(iban));
        }

        /// An IBAN with an invisible or full-width character anywhere is
        /// refused: never compared as written (a miss), never folded.
        #[test]
        fn a_disguised_iban_is_refused(
            iban in valid_iban(),
            at in any::<proptest::sample::Index>(),
            invisible in proptest::sample::select(INVISIBLE.to_vec()),
            full_width in any::<bool>(),
        ) {
            let mut chars: Vec<char> = iban.chars().collect();
            let i = at.index(chars.len());
            if full_width {
                chars[i] = char::from_u32(chars[i] as u32 + 0xFEE0).unwrap();
            } else {
                chars.insert(i, invisible);
            }
            let v: String = chars.into_iter().collect();
            prop_assert!(matches!(comparable(Normalizer::Iban, &v), Compared::Refused(_)), "{:?}", v);
        }

        #[test]
        fn every_folded_spelling_of_an_address_is_the_address(
            local in "[a-z0-9][a-z0-9._+]{0,10}",
            domain in "[a-z0-9]{1,10}\\.[a-z]{2,5}",
            wrap in 0..4usize,
            upper in any::<bool>(),
        ) {
            let canonical = format!("{local}@{domain}");
            let cased = if upper { canonical.to_ascii_uppercase() } else { canonical.clone() };
            let v = match wrap {
                0 => format!("  {cased} "),
                1 => format!("mailto:{cased}"),
                2 => format!("Someone <{cased}>"),
                _ => format!("{cased}."),
            };
            prop_assert_eq!(comparable(Normalizer::Email, &v), Compared::Canonical(canonical.clone()));
            let disguised = v.replace('@', "\u{FF20}");
            prop_assert!(matches!(comparable(Normalizer::Email, &disguised), Compared::Refused(_)));
        }

        #[test]
        fn every_folded_spelling_of_a_number_is_the_number(
            number in "\\+[1-9][0-9]{6,12}",
            spelling in proptest::sample::select(vec!["", " ", "-", "."]),
            tel in any::<bool>(),
            at in any::<proptest::sample::Index>(),
        ) {
            let mut v: String = number.chars().flat_map(|c| [c.to_string(), spelling.to_string()]).collect();
            if tel { v = format!("tel:{v}"); }
            prop_assert_eq!(comparable(Normalizer::Phone, &v), Compared::Canonical(number.clone()));
            // one digit full-width: refused
            let digits: Vec<usize> = v.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
            let i = digits[at.index(digits.len())];
            let d = v[i..].chars().next().unwrap();
            let disguised = format!("{}{}{}", &v[..i], char::from_u32(d as u32 + 0xFEE0).unwrap(), &v[i + 1..]);
            prop_assert!(matches!(comparable(Normalizer::Phone, &disguised), Compared::Refused(_)));
        }

        #[test]
        fn every_folded_spelling_of_a_path_is_the_path(
            parts in proptest::collection::vec("[a-z]{1,6}", 1..5),
            detours in proptest::collection::vec(0..3usize, 1..5),
        ) {
            let canonical = format!("/{}", parts.join("/"));
            let mut v = String::new();
            for (p, d) in parts.iter().zip(detours.iter().cycle()) {
                v.push_str(match d { 0 => "/", 1 => "//./", _ => "/x/../" });
                v.push_str(p);
            }
            prop_assert_eq!(comparable(Normalizer::Path, &v), Compared::Canonical(canonical));
        }
    }
}
