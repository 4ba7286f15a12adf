//! `ipc serve --stdio` decides the lines in flight in groups, one durable
//! commit per group (issue #26, item 2), and answers a line only once its
//! receipt is committed: killed mid-stream, every answer it wrote has its
//! receipt in the store, each the receipt of its own line, in order.

use crate::common;
use common::counting::Counting;
use common::http::{serve_cmd, write_mandate};
use common::*;
use intentplane::base::Money;
use intentplane::store::{Store, sqlite::SqliteStore, verify_chain};
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::process::Stdio;
use std::sync::Arc;

/// A mandate for `n` transfers.
fn many(w: &TestWorld, n: u64) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 1_000_000_000;
    s.calls = n;
    w.mandate(s)
}

/// The amount of line `i`, in cents, each distinct (none a replay).
fn cents(i: usize) -> i64 {
    100 + i as i64
}

fn line(i: usize) -> String {
    let c = cents(i);
    transfer(LANDLORD, json!(format!("{}.{:02}", c / 100, c % 100))).to_string()
}

/// The answers of `out`: its complete lines (a line cut by a kill is not
/// an answer the caller can read).
fn answers(out: &[u8]) -> Vec<Value> {
    let end = out.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    out[..end]
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect()
}

/// Each answer is an ALLOW of its own line (the amount of line `i`), and
/// its receipt is in `store`, the very receipt (same hash) that records
/// that line.
fn each_answer_has_its_receipt(answers: &[Value], store: &dyn Store) {
    let recs = store.receipts().unwrap();
    verify_chain(&recs, store.head().unwrap()).unwrap();
    for (i, d) in answers.iter().enumerate() {
        assert_eq!(d["decision"], "ALLOW", "line {i}: {d}");
        assert_eq!(
            d["resolved"]["amount"],
            Money::from_minor(cents(i)).to_json(),
            "answer {i} of another line"
        );
        let seq = d["receipt"]["seq"].as_u64().unwrap();
        let rec = recs
            .iter()
            .find(|r| r.seq == seq)
            .unwrap_or_else(|| panic!("answer {i}: receipt #{seq} is not in the store"));
        assert_eq!(
            Value::from(rec.hash.clone()),
            d["receipt"]["hash"],
            "line {i}"
        );
        assert_eq!(rec.body["resolved"]["amount"], cents(i), "line {i}");
    }
}

/// Lines that arrive together are decided in a few transactions, not one
/// each (before: one commit per line), and answered in order.
#[test]
fn the_lines_in_flight_are_decided_in_groups() {
    let w = TestWorld::new();
    const N: usize = 300;
    let m = many(&w, N as u64);
    let store = Arc::new(Counting::open(&w.dir.path().join("groups.db")));
    let gw = w.gateway_with(store.clone());
    let input: String = (0..N).map(|i| line(i) + "\n").collect();
    let mut out = vec![];
    let code = intentplane::cli::serve::stdio::serve_lines(
        &gw,
        Some(&m),
        std::io::Cursor::new(input.into_bytes()),
        &mut out,
    );
    assert_eq!(code, 0);
    let ds = answers(&out);
    assert_eq!(ds.len(), N);
    each_answer_has_its_receipt(&ds, store.as_ref());
    // all the lines were there at once: groups of up to 256
    let commits = store.commits();
    assert!(
        commits * 10 <= N,
        "{commits} commits for {N} lines waiting together"
    );
}

/// `kill -9` mid-stream: every answer written is committed, each with the
/// receipt of its own line; the chain verifies.
#[test]
fn killed_mid_stream_every_answer_written_has_its_receipt() {
    let w = TestWorld::new();
    const N: usize = 2000;
    let m = write_mandate(&w, &many(&w, N as u64));
    let db = w.dir.path().join("killed.db");
    let mut child = serve_cmd(&w, &m)
        .args(["--stdio", "--store", &path_str(&db)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        for i in 0..N {
            // the server is killed before it reads them all
            if stdin.write_all((line(i) + "\n").as_bytes()).is_err() {
                return;
            }
        }
    });
    let mut stdout = child.stdout.take().unwrap();
    let mut out = vec![];
    let mut buf = [0u8; 4096];
    // read until some answers came, then kill it at once
    while out.iter().filter(|b| **b == b'\n').count() < 50 {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "the server ended early");
        out.extend_from_slice(&buf[..n]);
    }
    child.kill().unwrap();
    // what it wrote before it died
    stdout.read_to_end(&mut out).unwrap();
    child.wait().unwrap();
    writer.join().unwrap();
    let ds = answers(&out);
    assert!(ds.len() >= 50 && ds.len() < N, "{} answers", ds.len());
    let store = SqliteStore::open(&db).unwrap();
    each_answer_has_its_receipt(&ds, &store);
}

/// Hostile lines among valid ones (JSON that does not parse, a line over
/// the size limit, bytes that are not UTF-8): each is answered with a
/// DENY that has its receipt, in its place, and the lines after it are
/// decided as always; the exit code is 0 (nothing failed).
#[test]
fn a_hostile_line_in_a_group_is_denied_in_its_place() {
    let w = TestWorld::new();
    let m = many(&w, 10);
    let store = Arc::new(Counting::open(&w.dir.path().join("hostile.db")));
    let gw = w.gateway_with(store.clone());
    let huge = format!(
        "{{\"pad\": \"{}\"}}",
        "x".repeat(intentplane::base::json::MAX_LINE + 1)
    );
    let mut input: Vec<u8> = vec![];
    for l in [
        line(0).into_bytes(),
        b"{not json".to_vec(),
        huge.into_bytes(),
        vec![b'{', 0xff, 0xfe, b'}'],
        line(1).into_bytes(),
    ] {
        input.extend(l);
        input.push(b'\n');
    }
    let mut out = vec![];
    let code = intentplane::cli::serve::stdio::serve_lines(
        &gw,
        Some(&m),
        std::io::Cursor::new(input),
        &mut out,
    );
    assert_eq!(code, 0);
    let ds = answers(&out);
    assert_eq!(ds.len(), 5, "{ds:#?}");
    each_answer_has_its_receipt(&ds[..1], store.as_ref());
    assert_eq!(ds[4]["decision"], "ALLOW", "{}", ds[4]);
    assert_eq!(
        ds[4]["resolved"]["amount"],
        Money::from_minor(cents(1)).to_json()
    );
    let recs = store.receipts().unwrap();
    for d in &ds[1..4] {
        assert_eq!(d["decision"], "DENY", "{d}");
        let seq = d["receipt"]["seq"].as_u64().unwrap();
        let rec = recs.iter().find(|r| r.seq == seq).unwrap();
        assert_eq!(Value::from(rec.hash.clone()), d["receipt"]["hash"]);
    }
    // in the order of the lines
    let seqs: Vec<u64> = ds
        .iter()
        .map(|d| d["receipt"]["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
}

/// `--ready`: once the gateway is loaded, one line `{"ready": true,
/// "bundle": HASH}` before any decision, then the decisions as always; a
/// gateway that cannot start writes nothing on stdout (its diagnostic on
/// stderr, exit 1), so a caller waiting for that line never mistakes one
/// for the other.
#[test]
fn ready_is_announced_once_loaded_and_never_by_a_failed_start() {
    let w = TestWorld::new();
    let m = write_mandate(&w, &many(&w, 2));
    let db = w.dir.path().join("ready.db");
    let mut child = serve_cmd(&w, &m)
        .args(["--stdio", "--ready", "--store", &path_str(&db)])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all((line(0) + "\n").as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let lines = answers(&out.stdout);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let hash = intentplane::bundle::Bundle::load(&w.bundle_path, None)
        .unwrap()
        .hash;
    assert_eq!(lines[0], json!({"ready": true, "bundle": hash}));
    assert_eq!(lines[1]["decision"], "ALLOW", "{}", lines[1]);
    // no store: refused before anything on stdout
    let out = serve_cmd(&w, &m)
        .args(["--stdio", "--ready"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("ipc::serve::no_store"));
    // `--ready` is for `--stdio` only
    let out = serve_cmd(&w, &m).args(["--ready"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
