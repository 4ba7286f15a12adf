//! Property tests: no input makes the parser or checker panic, and every
//! span a diagnostic reports lies inside the input.

use intentplane::check::{check_bytes, check_text};
use miette::Diagnostic;
use proptest::prelude::*;

fn assert_spans_inside(source: &str, checked: &intentplane::check::Checked) {
    for d in &checked.diagnostics {
        if let Some(labels) = d.labels() {
            for l in labels {
                assert!(
                    l.offset() + l.len() <= source.len(),
                    "span {}+{} outside input of {} bytes: {d:?}",
                    l.offset(),
                    l.len(),
                    source.len()
                );
            }
        }
    }
}

const BANK: &str = include_str!("../../packs/bank/pack.ipc");

/// Fragments an edit may insert: tokens of the language and near misses.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    "<",
    ">",
    ":",
    ",",
    "|",
    ".",
    "..",
    "\"",
    "==",
    "!=",
    ">=",
    " and ",
    " or ",
    " not ",
    " in ",
    "param ",
    "fact ",
    "forbid ",
    "step_up ",
    "four_eyes ",
    "critical ",
    "from ",
    "registry.",
    "mandate.",
    "now",
    "1_000.00",
    "0.001",
    "7 days",
    "42",
    "99999999999999999999",
    "set<",
    "list<",
    "enum(a, b)",
    "\n",
    "é",
    "\u{202e}",
    "//",
    "x",
    "normalize iban ",
    "range 1 .. 2 ",
    "max_len 3 ",
    "always",
    "when ",
    "global",
    "by Id { a: Id }",
];

#[derive(Debug, Clone)]
enum Edit {
    Delete(usize, usize),
    Insert(usize, usize),
    Replace(usize, char),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1usize..40).prop_map(|(a, n)| Edit::Delete(a, n)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(a, t)| Edit::Insert(a, t)),
        (any::<usize>(), any::<char>()).prop_map(|(a, c)| Edit::Replace(a, c)),
    ]
}

fn apply(src: &str, edits: &[Edit]) -> String {
    let mut s: Vec<char> = src.chars().collect();
    for e in edits {
        let len = s.len().max(1);
        match e {
            Edit::Delete(at, n) => {
                let at = at % len;
                let end = (at + n).min(s.len());
                if at < end {
                    s.drain(at..end);
                }
            }
            Edit::Insert(at, t) => {
                let at = at % (s.len() + 1);
                for (i, c) in TOKENS[*t].chars().enumerate() {
                    s.insert(at + i, c);
                }
            }
            Edit::Replace(at, c) => {
                if !s.is_empty() {
                    let at = at % s.len();
                    s[at] = *c;
                }
            }
        }
    }
    s.into_iter().collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let checked = check_bytes("fuzz.ipc", &bytes);
        assert_spans_inside(&checked.source, &checked);
        // garbage is never a pack unless it parses and checks
        if checked.pack.is_some() {
            prop_assert!(!checked.has_errors());
        }
    }

    #[test]
    fn edits_of_a_valid_pack_never_panic(edits in proptest::collection::vec(edit(), 1..6)) {
        let src = apply(BANK, &edits);
        let checked = check_text("bank.ipc", &src);
        assert_spans_inside(&src, &checked);
        prop_assert_eq!(checked.pack.is_some(), !checked.has_errors());
    }

    #[test]
    fn token_soup_never_panics(toks in proptest::collection::vec(0..TOKENS.len(), 0..80)) {
        let mut src = String::from("pack p\n");
        for t in toks {
            src.push_str(TOKENS[t]);
        }
        let checked = check_text("soup.ipc", &src);
        assert_spans_inside(&src, &checked);
    }
}

#[test]
fn deep_nesting_is_refused_not_overflowed() {
    let src = format!(
        "pack p\naction a {{ scope s executor external param x: Int forbid \"r\" when {}x > 1{} }}",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    let checked = check_text("deep.ipc", &src);
    assert_eq!(checked.diagnostics[0].code_str(), "ipc::too_deep");
}

#[test]
fn long_flat_inputs_finish() {
    // many conjuncts within the limit: linear, not exponential
    let cond = vec!["x > 1"; 100].join(" and ");
    let src = format!(
        "pack p\naction a {{ scope s executor external param x: Int forbid \"r\" when {cond} }}"
    );
    let checked = check_text("long.ipc", &src);
    assert!(checked.diagnostics.is_empty(), "{:?}", checked.diagnostics);
}

#[test]
fn long_chains_are_refused_not_overflowed() {
    let cond = vec!["x > 1"; 5_000].join(" and ");
    let src = format!(
        "pack p\naction a {{ scope s executor external param x: Int forbid \"r\" when {cond} }}"
    );
    let checked = check_text("long.ipc", &src);
    assert_eq!(checked.diagnostics[0].code_str(), "ipc::too_deep");
    let nots = "not ".repeat(10_000);
    let src = format!(
        "pack p\naction a {{ scope s executor external param x: Bool forbid \"r\" when {nots} x }}"
    );
    assert_eq!(
        check_text("nots.ipc", &src).diagnostics[0].code_str(),
        "ipc::too_deep"
    );
    let sum = vec!["x"; 3_000].join(" + ");
    let src = format!(
        "pack p\naction a {{ scope s executor external param x: Int forbid \"r\" when {sum} > 1 }}"
    );
    assert_eq!(
        check_text("sum.ipc", &src).diagnostics[0].code_str(),
        "ipc::too_deep"
    );
}
