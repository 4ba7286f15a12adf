//! One broken pack per diagnostic under tests/fixtures/check/: each must
//! report the diagnostic its file name names (`CODE.ipc` or
//! `CODE__variant.ipc`), and the rendered diagnostics are snapshotted under
//! snapshots/check/. Adding a fixture adds a test.

use intentplane::check::check_bytes;
use intentplane::diagnostics::{line_col, render_human};

#[test]
fn every_fixture_reports_its_diagnostic() {
    insta::with_settings!({
        snapshot_path => "../snapshots/check",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::glob!("fixtures/check/*.ipc", |path| {
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

/// The codes the fixtures cover: at least 20 distinct diagnostics.
#[test]
fn fixtures_cover_at_least_twenty_diagnostics() {
    let mut codes: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/check"))
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
    codes.sort();
    codes.dedup();
    assert!(
        codes.len() >= 20,
        "only {} distinct diagnostics: {codes:?}",
        codes.len()
    );
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
