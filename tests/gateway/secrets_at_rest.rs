//! Issue #21, item 1: no receipt, decision or output holds a secret in
//! clear, for any line, well-formed or not.
//!
//! Reproduced on 0e4128b: a line holding `new_password` refused at the
//! contract stage (a duplicate key, an envelope key spelled `approval`, an
//! action spelled wrong) kept the password in clear in its receipt, read
//! back by `ipc receipts show` and `GET /v1/receipts`.
//!
//! The property: random malformed lines carry a marker under each name an
//! action of the bundle declares `secret` (read from the bundle's table),
//! and under misspellings of it; every byte of the SQLite store (the
//! database, its `-wal` and `-shm`), every decision, and the stdout and
//! stderr of `ipc run`, `ipc serve --stdio` and `ipc receipts show` are
//! searched for the marker. The marker holds `"` and `\`, so that its
//! JSON-escaped forms differ from it; what is searched is its alphanumeric
//! core, which each of those forms keeps.

use crate::common;
#[cfg(feature = "http")]
use common::cli::{decide_lines, ipc};
use common::*;
use intentplane::bundle::Bundle;
use proptest::prelude::*;
#[cfg(feature = "http")]
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};
use std::path::Path;
use std::sync::Arc;

/// Each secret parameter of the bundle: (its action, its name).
fn secrets(b: &Bundle) -> Vec<(String, String)> {
    b.table
        .actions
        .iter()
        .flat_map(|a| {
            a.action
                .params
                .iter()
                .filter(|p| p.secret)
                .map(|p| (a.action.name.clone(), p.name.clone()))
        })
        .collect()
}

/// Every action with a non-secret parameter: (action, parameter).
fn others(b: &Bundle) -> Vec<(String, String)> {
    b.table
        .actions
        .iter()
        .filter_map(|a| {
            a.action
                .params
                .iter()
                .find(|p| !p.secret)
                .map(|p| (a.action.name.clone(), p.name.clone()))
        })
        .collect()
}

/// One line: the shape, the secret (action, name), another action and one
/// of its parameters, the marker's unique core.
#[derive(Clone, Debug)]
struct Case {
    shape: usize,
    secret: (String, String),
    other: (String, String),
    core: String,
}

const SHAPES: usize = 19;

fn marker(core: &str) -> String {
    format!("{core}\"\\p")
}

fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// Three misspellings of a name: another case, a suffix, a letter dropped.
fn misspell(name: &str, which: usize) -> String {
    match which % 3 {
        0 => name.to_uppercase(),
        1 => format!("{name}_"),
        _ => {
            let mut c: Vec<char> = name.chars().collect();
            if c.len() > 2 {
                c.remove(2);
            }
            c.into_iter().collect()
        }
    }
}

impl Case {
    fn line(&self) -> String {
        let (a, n) = (lit(&self.secret.0), lit(&self.secret.1));
        let (x, p) = (lit(&self.other.0), lit(&self.other.1));
        let m = lit(&marker(&self.core));
        let wrong_action = lit(&misspell(&self.secret.0, self.core.len()));
        let wrong_name = lit(&misspell(&self.secret.1, self.core.len() + 1));
        match self.shape {
            0 => format!(r#"{{"action":{a},"args":{{{n}:{m},{n}:{m}}}}}"#),
            1 => format!(r#"{{"action":{a},"action":{a},"args":{{{n}:{m}}}}}"#),
            2 => {
                let k = ["approval", "mandates", "Proposal", "proposals"][self.core.len() % 4];
                format!(r#"{{"proposal":{{"action":{a},"args":{{{n}:{m}}}}},"{k}":[]}}"#)
            }
            3 => format!(r#"{{"action":{wrong_action},"args":{{{n}:{m}}}}}"#),
            4 => format!(r#"{{"action":{a},"args":{{{n}:[{m}]}}}}"#),
            5 => format!(r#"{{"action":{a},"args":{{{n}:{{"ref":{m}}}}}}}"#),
            6 => format!(r#"{{"action":{a},"args":{{{n}:{m}}},"extra":{{{n}:{m}}}}}"#),
            7 => format!(r#"{{"action":{a},"args":{{{wrong_name}:{m}}}}}"#),
            8 => format!(r#"{{"action":{x},"args":{{{p}:{{{n}:{m}}}}}}}"#),
            9 => format!(r#"{{"action":{x},"args":{{{p}:[[{{"deep":{{{n}:{m}}}}}]]}}}}"#),
            10 => format!(r#"{{"action":{a},"args":{{{n}:{m}"#),
            11 => format!(
                r#"{{"action":{a},"args":{{{n}:{}}}}}"#,
                lit(&format!("{}\u{0}", marker(&self.core)))
            ),
            12 => format!(r#"{{"proposal":{{"action":{a},"args":{{{n}:{m}}}}},"approvals":{{}}}}"#),
            13 => format!(r#"{{"action":{a},"args":{{{n}:{m}}}}}"#),
            14 => format!(r#"[{{"action":{a},"args":{{{n}:{m}}}}}]"#),
            15 => format!(r#"{{"action":{x},"args":{{{n}:{m}}}}}"#),
            16 => format!(
                r#"{{"proposal":{{"action":{a},"args":{{{n}:{m}}}}},"mandate":"not a token"}}"#
            ),
            17 => lit(&format!("{}={}", self.secret.1, marker(&self.core))),
            _ => format!(r#"{{"action":{a},"args":{{{n}:{m},{wrong_name}:{m},"x":{{{n}:{m}}}}}}}"#),
        }
    }
}

fn case(b: &Bundle) -> impl Strategy<Value = Case> {
    let (s, o) = (secrets(b), others(b));
    (
        0..SHAPES,
        proptest::sample::select(s),
        proptest::sample::select(o),
        "[0-9]{4}[a-z]{6}",
    )
        .prop_map(|(shape, secret, other, tail)| Case {
            shape,
            secret,
            other,
            // never hex, never a word the gateway writes
            core: format!("Zmq{tail}"),
        })
}

/// Where `core` occurs in `bytes`, if anywhere: the place and around it.
fn leak(bytes: &[u8], core: &str) -> Option<String> {
    let c = core.as_bytes();
    bytes.windows(c.len()).position(|w| w == c).map(|i| {
        let from = i.saturating_sub(80);
        let to = (i + c.len() + 80).min(bytes.len());
        String::from_utf8_lossy(&bytes[from..to]).to_string()
    })
}

/// Every file of `dir` whose name starts with `prefix` (the database, its
/// `-wal` and `-shm`), searched for each core.
fn files_hold_none(dir: &Path, prefix: &str, cores: &[String]) -> Result<usize, String> {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with(prefix) {
            continue;
        }
        n += 1;
        let bytes = std::fs::read(e.path()).unwrap();
        for core in cores {
            if let Some(at) = leak(&bytes, core) {
                return Err(format!("{name} holds the secret `{core}`: …{at}…"));
            }
        }
    }
    Ok(n)
}

#[test]
fn the_shipped_bundle_declares_secrets() {
    let w = TestWorld::new();
    let s = secrets(&w.bundle);
    assert!(
        s.iter()
            .any(|(a, n)| a == "user.update_password" && n == "new_password"),
        "{s:?}"
    );
}

/// The property, in process, on a SQLite store: each case decides a few
/// random lines, then every decision, the receipts as read back, and every
/// byte of the store's files are searched.
#[test]
fn no_line_leaves_a_secret_in_the_store_or_a_decision() {
    let w = TestWorld::new();
    let m = w.emma();
    let cases = std::env::var("IPC_SECRET_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(case(&w.bundle), 1..6);
    let result = runner.run(&strategy, |batch| {
        let dir = tempfile::tempdir().unwrap();
        let store = intentplane::store::sqlite::SqliteStore::open(dir.path().join("s.db"))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let gw = w.gateway_with(Arc::new(store));
        let cores: Vec<String> = batch.iter().map(|c| c.core.clone()).collect();
        for c in &batch {
            let input = intentplane::cli::gateway::parse_line(&c.line(), Some(&m));
            let d = gw
                .decide(&input)
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(d.receipt.is_some(), "{d:?}");
            let text = serde_json::to_string(&d).unwrap();
            prop_assert!(
                leak(text.as_bytes(), &c.core).is_none(),
                "{}: {text}",
                c.line()
            );
        }
        let recs = serde_json::to_string(&gw.store().receipts().unwrap()).unwrap();
        for core in &cores {
            prop_assert!(leak(recs.as_bytes(), core).is_none(), "{recs}");
        }
        let snap = gw.store().snapshot().unwrap();
        prop_assert!(
            intentplane::store::verify_store(&snap, None).is_ok(),
            "the chain verifies"
        );
        drop(gw);
        let n = files_hold_none(dir.path(), "s.db", &cores).map_err(TestCaseError::fail)?;
        prop_assert!(n >= 1);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[cfg(feature = "http")]
/// The same lines (a fixed sample of every shape) through `ipc run`,
/// `ipc serve --stdio` and `ipc serve --listen`: their stdout and stderr,
/// `ipc receipts show`, the HTTP answers and `GET /v1/receipts`, and the
/// store's files hold no marker; each line has its decision.
#[test]
fn no_line_leaves_a_secret_in_the_outputs_of_run_and_serve() {
    let w = TestWorld::new();
    let mut runner = TestRunner::deterministic();
    let strategy = case(&w.bundle);
    let mut batch: Vec<Case> = vec![];
    for shape in 0..SHAPES {
        for _ in 0..2 {
            let mut c = strategy.new_tree(&mut runner).unwrap().current();
            c.shape = shape;
            batch.push(c);
        }
    }
    let input: String = batch.iter().map(|c| c.line() + "\n").collect();
    let cores: Vec<String> = batch.iter().map(|c| c.core.clone()).collect();
    let mpath = w.dir.path().join("m.json");
    std::fs::write(&mpath, w.emma().to_string()).unwrap();
    for (mode, prefix) in [("run", "run.db"), ("serve", "serve.db")] {
        let db = path_str(&w.dir.path().join(prefix));
        let out = decide_lines(mode, &w, &db, &mpath, &input);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).lines().count(),
            batch.len(),
            "{mode}: one decision per line"
        );
        let show = ipc(&["receipts", "show", &db, "--format", "json"], "");
        assert!(show.status.success());
        let human = ipc(&["receipts", "show", &db], "");
        let verify = ipc(&["receipts", "verify", &db], "");
        assert!(
            verify.status.success(),
            "{}",
            String::from_utf8_lossy(&verify.stdout)
        );
        for o in [&out, &show, &human, &verify] {
            for bytes in [&o.stdout, &o.stderr] {
                for core in &cores {
                    assert!(
                        leak(bytes, core).is_none(),
                        "{mode}: {:?}",
                        leak(bytes, core)
                    );
                }
            }
        }
        let n = files_hold_none(w.dir.path(), prefix, &cores).unwrap_or_else(|e| panic!("{e}"));
        assert!(n >= 1);
    }
    // and over HTTP: each line posted as it is, then `GET /v1/receipts`
    let db = path_str(&w.dir.path().join("http.db"));
    let log = w.dir.path().join("http.stderr");
    let s = common::http::launch(
        &w,
        &w.emma(),
        "127.0.0.1:0",
        &db,
        "t0ken-for-the-test",
        &[],
        std::fs::File::create(&log).unwrap().into(),
    );
    for c in &batch {
        let r = common::http::request(&s, "POST", "/v1/decide", &c.line(), &[]);
        let text = r.body.to_string();
        assert!(leak(text.as_bytes(), &c.core).is_none(), "{text}");
    }
    let r = common::http::get(&s, "/v1/receipts?last=1000");
    assert_eq!(r.status, 200);
    let text = r.body.to_string();
    assert!(text.contains("secret:withheld"), "{text}");
    drop(s);
    let stderr = std::fs::read(&log).unwrap();
    for core in &cores {
        assert!(leak(text.as_bytes(), core).is_none(), "{text}");
        assert!(leak(&stderr, core).is_none());
    }
    files_hold_none(w.dir.path(), "http.db", &cores).unwrap_or_else(|e| panic!("{e}"));
}

/// What a refused line's receipt keeps: its shape and the values the
/// schema attributes to a declared parameter, the salted hash and length
/// of what came, and for a line that did not parse nothing but those.
#[test]
fn a_refused_line_keeps_its_shape_and_a_salted_hash() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let m = w.emma();
    // an action spelled wrong: the values are withheld, the keys stay
    let line =
        r#"{"action":"user.updat_password","args":{"new_password":"Zmq0000aaaaaa-long","n":7}}"#;
    let d = gw
        .decide(&intentplane::cli::gateway::parse_line(line, Some(&m)))
        .unwrap();
    assert_deny(&d, "contract", "unknown action");
    let recs = gw.store().receipts().unwrap();
    let body = &recs.last().unwrap().body;
    assert_eq!(body["proposal"]["action"], "user.updat_password");
    assert_eq!(body["proposal"]["args"]["new_password"], "secret:withheld");
    assert_eq!(body["proposal"]["args"]["n"], 7, "a number is kept");
    let withheld = &body["proposal_withheld"];
    assert!(
        withheld["hash"]
            .as_str()
            .unwrap()
            .starts_with("salted:sha256:"),
        "{body}"
    );
    // the hash is not the bare SHA-256 of what came
    let text = intentplane::canonical::value_to_jcs(&serde_json::from_str(line).unwrap()).unwrap();
    assert_eq!(withheld["bytes"], text.len());
    assert_ne!(
        withheld["hash"].as_str().unwrap(),
        intentplane::canonical::sha256_tagged(&sha2_digest(text.as_bytes()))
    );
    // a transfer refused for an unknown parameter keeps its declared values
    let mut p = transfer(LANDLORD, serde_json::json!("1.00"));
    p["args"]["memo"] = serde_json::json!("Zmq1111bbbbbb");
    let d = decide(&gw, p, &m);
    assert_deny(&d, "contract", "unknown parameter `memo`");
    let recs = gw.store().receipts().unwrap();
    let body = &recs.last().unwrap().body;
    assert_eq!(body["proposal"]["args"]["payee_iban"], LANDLORD);
    assert_eq!(body["proposal"]["args"]["memo"], "secret:withheld");
    // a duplicate key: not parsed, nothing kept but the length and hash
    let dup = r#"{"action":"user.update_password","args":{"new_password":"a","new_password":"Zmq2222cccccc"}}"#;
    let d = gw
        .decide(&intentplane::cli::gateway::parse_line(dup, Some(&m)))
        .unwrap();
    assert_deny(&d, "contract", "duplicate key `new_password`");
    let recs = gw.store().receipts().unwrap();
    let body = &recs.last().unwrap().body;
    assert_eq!(body["proposal"], "secret:withheld");
    assert_eq!(body["proposal_withheld"]["bytes"], dup.len());
    // a well-formed transfer is kept as it came, with no hash beside it
    let d = decide(&gw, transfer(LANDLORD, serde_json::json!("1.00")), &m);
    assert!(d.receipt.is_some());
    let recs = gw.store().receipts().unwrap();
    let body = &recs.last().unwrap().body;
    assert_eq!(
        body["proposal"],
        transfer(LANDLORD, serde_json::json!("1.00"))
    );
    assert!(body.get("proposal_withheld").is_none());
}

fn sha2_digest(b: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(b).to_vec()
}

// ---- item 2: a secret echoed by the executor ------------------------------

/// Reproduced on 0e4128b: a downstream that echoes a password holding `"`
/// and `\` inside JSON text had the echo stored JSON-escaped (the scrub
/// looked for the clear text only), and the outcome receipt's
/// `result_hash` was the bare SHA-256 of the answer. Now the answer of a
/// call that carried a secret is not stored, the agent's copy is scrubbed
/// in every JSON encoding, and the hash is salted.
#[test]
fn an_echoed_secret_is_never_stored_and_its_hash_is_salted() {
    use intentplane::gateway::outcome::{ExternalOutcome, hash_any};
    let w = TestWorld::new();
    let dir = tempfile::tempdir().unwrap();
    let store = intentplane::store::sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap();
    let gw = w.gateway_with(Arc::new(store)).execute_externally();
    let m = w.emma();
    let core = "Zmq7777dddddd-horse";
    let password = format!("q\"u\\{core}");
    let proposal = serde_json::json!({"action": "user.update_password",
        "args": {"new_password": password}});
    let d = decide(&gw, proposal.clone(), &m);
    let op = d.operation_hash.clone().unwrap();
    let d = gw
        .decide(&input(proposal, &m, vec![w.approve("emma", &op)]))
        .unwrap();
    assert_eq!(d.decision, intentplane::gateway::Outcome::Allow, "{d:#?}");
    // the tool's answer: the echo in clear, and inside JSON text, escaped
    // once and twice
    let echo = serde_json::json!({"status": "changed", "echo": password});
    let text = echo.to_string();
    let answer = serde_json::json!({
        "structuredContent": echo,
        "content": [{"type": "text", "text": text},
                    {"type": "text", "text": serde_json::json!({"inner": text}).to_string()}],
    });
    let shown = d.secrets.scrub(&answer);
    let shown_text = shown.to_string();
    assert!(leak(shown_text.as_bytes(), core).is_none(), "{shown_text}");
    assert!(shown_text.contains("changed"));
    gw.record_outcome(
        &op,
        &ExternalOutcome {
            executor: "mcp:bank/change_password".into(),
            is_error: false,
            result: shown.clone(),
        },
    )
    .unwrap();
    let recs = gw.store().receipts().unwrap();
    let outcome = &recs.last().unwrap().body;
    assert_eq!(outcome["kind"], "outcome");
    let rh = outcome["result_hash"].as_str().unwrap();
    assert_ne!(rh, hash_any(&shown), "salted, not the bare hash");
    assert!(rh.starts_with("salted:sha256:"), "{outcome}");
    let stored = gw.outcome(&op).unwrap().unwrap();
    assert!(!stored.is_error);
    assert!(
        stored
            .result
            .to_string()
            .contains(intentplane::gateway::outcome::WITHHELD_ANSWER),
        "{stored:?}"
    );
    // nowhere in the store's files, in any encoding
    drop(gw);
    let n =
        files_hold_none(dir.path(), "s.db", &[core.to_string()]).unwrap_or_else(|e| panic!("{e}"));
    assert!(n >= 1);
}
