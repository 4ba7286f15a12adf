//! One broken pack per diagnostic under tests/fixtures/check/: each must
//! report the diagnostic its file name names (`CODE.ipc` or
//! `CODE__variant.ipc`), and the rendered diagnostics are snapshotted under
//! snapshots/check/. Adding a fixture adds a test.

use intentplane::check::check_bytes;
use intentplane::diagnostics::{line_col, render_human};

#[test]
fn every_fixture_reports_its_diagnostic() {
    insta::with_settings!({
        snapshot_path => "../../snapshots/check",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::glob!("../fixtures/check", "*.ipc", |path| {
            let bytes = std::fs::read(path).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let code = format!("ipc::{}", stem.split("__").next().unwrap());
            let file = format!("fixtures/check/{name}");
            let checked = check_bytes(&file, &bytes);
            let codes: Vec<String> = checked.diagnostics.iter().map(|d| d.code_str()).collect();
            assert!(
                codes.contains(&code),
                "{name}: expected {code}, got {codes:?}"
            );
            // a fixture with an error never yields a pack
            if checked.has_errors() {
                assert!(checked.pack.is_none(), "{name}: errors but a pack was produced");
            }
            let rendered: Vec<String> = checked
                .diagnostics
                .iter()
                .map(|d| render_human(d, &file, &checked.source))
                .collect();
            insta::assert_snapshot!(rendered.join("\n"));
        });
    });
}

/// The diagnostics that cannot have a fixture under tests/fixtures/check/
/// (one `.ipc` file checked alone), each with the reason and the test that
/// covers it instead.
const NO_FIXTURE: &[(&str, &str)] = &[
    (
        "guarantee_unproven",
        "the solver's answer, not the checker's: `ipc build` only (tests/compiler/guarantees.rs)",
    ),
    (
        "guarantee_violated",
        "the solver's counterexample, not the checker's: `ipc build` only (tests/compiler/guarantees.rs)",
    ),
    (
        "cedar_syntax",
        "needs a `policy.cedar` beside the pack: tests/compiler/codegen.rs, bundle.rs",
    ),
    (
        "cedar_validation",
        "needs a `policy.cedar` beside the pack, or a broken code generator: tests/compiler/codegen.rs (custom_bad_validation, generated_validation_failure)",
    ),
    (
        "codegen_internal",
        "an IR the checker should have refused, built by hand in tests/compiler/codegen.rs",
    ),
    (
        "duplicate_action",
        "two packs of one build: tests/compiler/codegen.rs",
    ),
    (
        "duplicate_pack",
        "two packs of one build: tests/compiler/codegen.rs",
    ),
    (
        "io",
        "a file that cannot be read is not a fixture: tests/compiler/cli.rs (check_missing)",
    ),
    (
        "reserved_name",
        "raised by code generation on a pack that checks: tests/compiler/codegen.rs",
    ),
];

/// Every diagnostic code of `PackDiagnostic` (read from src/diagnostics.rs)
/// has a fixture, or is on [`NO_FIXTURE`] with its reason; the list names
/// only codes that exist and have no fixture, and every fixture names a code.
#[test]
fn every_diagnostic_has_a_fixture_or_a_named_exception() {
    let root = env!("CARGO_MANIFEST_DIR");
    let source = std::fs::read_to_string(format!("{root}/src/diagnostics.rs")).unwrap();
    let mut codes: Vec<&str> = source
        .split("code(ipc::")
        .skip(1)
        .map(|rest| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap()
        })
        .collect();
    codes.sort();
    codes.dedup();
    assert!(
        codes.len() > 40,
        "the codes were not found in src/diagnostics.rs: {codes:?}"
    );
    let mut fixtures: Vec<String> = std::fs::read_dir(format!("{root}/tests/fixtures/check"))
        .unwrap()
        .map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.trim_end_matches(".ipc")
                .split("__")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    fixtures.sort();
    fixtures.dedup();
    let excepted = |c: &str| NO_FIXTURE.iter().any(|(e, _)| *e == c);
    let uncovered: Vec<&&str> = codes
        .iter()
        .filter(|c| !fixtures.iter().any(|f| f == *c) && !excepted(c))
        .collect();
    assert!(
        uncovered.is_empty(),
        "diagnostics without a fixture under tests/fixtures/check/ (add one, or add the code to NO_FIXTURE with the reason): {uncovered:?}"
    );
    for (code, reason) in NO_FIXTURE {
        assert!(
            codes.contains(code),
            "NO_FIXTURE names `{code}`, which is not a code"
        );
        assert!(
            !fixtures.iter().any(|f| f == code),
            "`{code}` has a fixture now: remove it from NO_FIXTURE"
        );
        assert!(!reason.is_empty(), "`{code}`: no reason");
    }
    for f in &fixtures {
        assert!(
            codes.contains(&f.as_str()),
            "the fixture `{f}` names no diagnostic code"
        );
    }
}

#[test]
fn a_syntax_error_points_at_the_failure() {
    let src = "pack p\naction a {\n  scope s\n  executor external\n  param x: Money\n  forbid \"r\" when x >\n}\n";
    let checked = intentplane::check::check_text("t.ipc", src);
    let d = &checked.diagnostics[0];
    assert_eq!(d.code_str(), "ipc::syntax");
    let json = intentplane::diagnostics::to_json(d, "t.ipc", src);
    // the `}` on line 7 is where an expression was expected
    assert_eq!((json.labels[0].line, json.labels[0].column), (7, 1));
    assert!(json.message.contains("an expression"), "{}", json.message);
}

#[test]
fn line_col_counts_characters() {
    let s = "ab\néé x";
    assert_eq!(line_col(s, 0), (1, 1));
    assert_eq!(line_col(s, 3), (2, 1));
    // `x` is after two two-byte characters and a space
    assert_eq!(line_col(s, 8), (2, 4));
    assert_eq!(line_col(s, 999), (2, 5));
}
