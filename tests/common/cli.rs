//! Running the `ipc` binary of this build in a test.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// `ipc ARGS` with `stdin` as its standard input; a broken pipe (a command
/// that exits before reading) is part of what a test checks, not a failure.
pub fn ipc(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// The JSON lines of a command's standard output.
pub fn lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `ipc run` (`mode` "run") or `ipc serve --stdio` (`mode` "serve") of the
/// test world's bundle and world on `store`, with `mandate` (a file) for
/// the lines that carry none, over `stdin`.
pub fn decide_lines(
    mode: &str,
    w: &intentplane::gateway::testkit::TestWorld,
    store: &str,
    mandate: &std::path::Path,
    stdin: &str,
) -> Output {
    let (b, wp, mp) = (
        w.bundle_path.display().to_string(),
        w.world_path.display().to_string(),
        mandate.display().to_string(),
    );
    let mut args = vec![mode];
    if mode == "serve" {
        // the test world fixes the clock (deterministic expiry)
        args.extend(["--stdio", "--allow-frozen-clock"]);
    }
    args.extend([
        "--bundle",
        &b,
        "--world",
        &wp,
        "--store",
        store,
        "--mandate",
        &mp,
    ]);
    ipc(&args, stdin)
}
