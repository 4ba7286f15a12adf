//! One rule for a tool a test needs and the machine lacks (cvc5,
//! PostgreSQL, Chromium, node): locally a loud skip — a `SKIPPED: no TOOL`
//! line straight to stderr, past libtest's capture, naming the tool and the
//! test — and under CI (`CI` set and not `0`/`false`: `.ci/run` sets
//! `CI=1`) a failure, because CI never skips. tests/py/tools.py is the same
//! rule for pytest.
#![allow(dead_code)]

use std::io::Write;

/// Whether this run is CI's.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false"))
}

/// `tool` is missing (`why`: what was looked for and how to install it):
/// panics under CI, otherwise prints the skip line for the current test and
/// returns, for the caller to return.
pub fn skip(tool: &str, why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    assert!(
        !in_ci(),
        "CI is set but {tool} is missing ({why}): tests never skip in CI"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED: no {tool} ({why}): `{test}` did not run"
    );
}

/// cvc5, the solver of `ipc mutate` and `ipc build --lint`: `true` when it
/// is found, else the skip.
#[cfg(feature = "solver")]
pub fn cvc5() -> bool {
    match intentplane::mutate::equiv::find_cvc5() {
        Ok(_) => true,
        Err(e) => {
            skip("cvc5", &format!("{e}; apt-get install cvc5, or set CVC5"));
            false
        }
    }
}
