//! `[[notify]]` (issue 41, item 3): each new pending operation delivered
//! once per target to a local HTTPS receiver, signed, retried with the
//! same idempotency key, never holding up a decision, with bounded
//! concurrency, across a kill -9 of `ipc serve`; a target that is not
//! HTTPS or not allowed refuses the start.

#![cfg(feature = "notify")]

use crate::common;
use crate::notify_receiver::{Got, Mode, Receiver};
use common::*;
use intentplane::gateway::notify::Running;
use intentplane::gateway::{Gateway, Outcome};
use serde_json::{Value, json};
use std::sync::Arc;

const SECRET: &str = "test-notify-secret-0123456789";
const PAGE: &str = "https://gw.example.com/approve";

/// One target of the world: name, url, format, concurrency.
struct T<'a>(&'a str, &'a str, &'a str, usize);

/// Gives the world `targets` (with the receiver's authority, private
/// addresses allowed) and the approval page.
fn with_targets(w: &TestWorld, ca: &std::path::Path, targets: &[T<'_>]) {
    std::fs::write(w.dir.path().join("notify.secret"), format!("{SECRET}\n")).unwrap();
    let mut text = format!("approval_page = \"{PAGE}\"\n");
    text.push_str(&std::fs::read_to_string(&w.world_path).unwrap());
    for T(name, url, format, n) in targets {
        text.push_str(&format!(
            "\n[[notify]]\nname = \"{name}\"\nurl = \"{url}\"\nformat = \"{format}\"\nsecret_file = \"notify.secret\"\nca_file = \"{}\"\nallow_private = true\nconcurrency = {n}\ntimeout_secs = 120\n",
            ca.display()
        ));
    }
    std::fs::write(&w.world_path, text).unwrap();
}

/// A mandate for many transfers.
fn many(w: &TestWorld) -> Value {
    let mut s = MandateSpec::bank("emma");
    s.budget = 100_000_000;
    s.calls = 5_000;
    w.mandate(s)
}

/// A transfer that needs approval, distinct for each `i`.
fn big(i: usize) -> Value {
    transfer(
        LANDLORD,
        json!(format!("{}.{:02}", 1500 + i / 100, i % 100)),
    )
}

fn pending(gw: &Gateway, p: Value, m: &Value) -> String {
    let d = decide(gw, p, m);
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    d.operation_hash.unwrap()
}

fn sender(gw: &Arc<Gateway>) -> Running {
    intentplane::gateway::notify::start(gw.clone())
        .unwrap()
        .expect("a sender for the world's targets")
}

/// HMAC-SHA256 written out over SHA-256 (RFC 2104), independent of the
/// gateway's.
fn hmac_hex(key: &[u8], msg: &[u8]) -> String {
    use sha2::Digest;
    let mut k = [0u8; 64];
    k[..key.len()].copy_from_slice(key);
    let pad = |b: u8| k.iter().map(|x| x ^ b).collect::<Vec<u8>>();
    let inner = sha2::Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    let outer = sha2::Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    hex::encode(outer)
}

/// The signature header checked against the body, as a receiver does.
fn signed(g: &Got) -> bool {
    let h = &g.headers["x-ipc-signature"];
    let (t, v1) = h.split_once(',').unwrap();
    let t = t.strip_prefix("t=").unwrap();
    let v1 = v1.strip_prefix("v1=").unwrap();
    let mut msg = format!("{t}.").into_bytes();
    msg.extend(&g.body);
    hmac_hex(SECRET.as_bytes(), &msg) == v1
}

fn body(g: &Got) -> Value {
    serde_json::from_slice(&g.body).unwrap()
}

#[test]
fn a_pending_operation_is_delivered_signed_once_per_target() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    let slack_url = format!("{}?slack", r.url);
    with_targets(
        &w,
        &r.ca_file,
        &[
            T("ops", &r.url, "json", 4),
            T("chat", &slack_url, "slack", 4),
        ],
    );
    let gw = Arc::new(w.gateway());
    let m = many(&w);
    let op = pending(&gw, big(0), &m);
    // proposed again: still one delivery per target
    assert_eq!(pending(&gw, big(0), &m), op);
    // a secret parameter: shown as its commitment, never in clear
    let pw =
        json!({"action": "user.update_password", "args": {"new_password": "a long new password"}});
    let op2 = pending(&gw, pw, &w.emma());
    let s = sender(&gw);
    assert!(
        r.wait_for(60, |r| r.delivered().len() == 4),
        "{:?}",
        r.got()
    );
    // nothing more comes
    std::thread::sleep(std::time::Duration::from_millis(600));
    let got = r.got();
    assert_eq!(got.len(), 4, "{got:?}");
    for g in &got {
        assert!(signed(g), "{g:?}");
        assert!(!String::from_utf8_lossy(&g.body).contains("a long new password"));
    }
    let ops: Vec<&Got> = got
        .iter()
        .filter(|g| g.headers["idempotency-key"] == format!("{op}:ops"))
        .collect();
    assert_eq!(ops.len(), 1, "{got:?}");
    let b = body(ops[0]);
    let rec = gw.pending_op(&op).unwrap();
    let shown = intentplane::gateway::render::checked(&gw, &rec).unwrap();
    assert_eq!(b["summary"], json!(shown.text()));
    assert_eq!(b["operation_hash"], json!(op));
    assert_eq!(b["level"], json!(1));
    assert_eq!(b["approval_page"], json!(format!("{PAGE}#{op}")));
    assert_eq!(b["type"], json!("ipc.pending"));
    let chat = got
        .iter()
        .find(|g| g.headers["idempotency-key"] == format!("{op2}:chat"))
        .expect("the slack target's delivery");
    let text = body(chat)["text"].as_str().unwrap().to_string();
    assert!(text.contains(&op2) && text.contains(PAGE), "{text}");
    let counted: u64 = s
        .stats
        .outcomes()
        .iter()
        .filter(|o| o.1 == "delivered")
        .map(|o| o.2)
        .sum();
    assert_eq!(counted, 4);
    s.stop();
}

/// The Python verification snippet of docs/notifications.md, as written,
/// accepts a real delivery and refuses it with one byte changed.
#[test]
fn the_docs_python_snippet_verifies_a_delivery() {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        return common::tools::skip("python3", "the docs' verification snippet");
    }
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 1)]);
    let gw = Arc::new(w.gateway());
    pending(&gw, big(3), &many(&w));
    let s = sender(&gw);
    assert!(r.wait_for(60, |r| r.delivered().len() == 1));
    s.stop();
    let g = &r.got()[0];
    let doc = std::fs::read_to_string(root().join("docs/notifications.md")).unwrap();
    let start = doc.find("## Verifying a delivery").unwrap();
    let code = doc[start..].split("```python\n").nth(1).unwrap();
    let code = code.split("```").next().unwrap();
    let dir = w.dir.path();
    std::fs::write(dir.join("body"), &g.body).unwrap();
    std::fs::write(dir.join("tampered"), [g.body.as_slice(), b" "].concat()).unwrap();
    let script = format!(
        "{code}\nimport sys\nsecret = open(sys.argv[1], 'rb').read().rstrip(b'\\n')\nfor f in sys.argv[3:]:\n    print(verify(secret, sys.argv[2], open(f, 'rb').read()))\n"
    );
    std::fs::write(dir.join("verify.py"), script).unwrap();
    let out = std::process::Command::new("python3")
        .arg(dir.join("verify.py"))
        .arg(dir.join("notify.secret"))
        .arg(&g.headers["x-ipc-signature"])
        .arg(dir.join("body"))
        .arg(dir.join("tampered"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(said, "True\nFalse\n");
}

#[test]
fn a_failing_receiver_is_tried_again_with_the_same_key() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Fail);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 2)]);
    let gw = Arc::new(w.gateway());
    let op = pending(&gw, big(1), &many(&w));
    let s = sender(&gw);
    assert!(r.wait_for(60, |r| !r.got().is_empty()));
    r.set(Mode::Ok);
    assert!(
        r.wait_for(60, |r| r.delivered().len() == 1),
        "{:?}",
        r.got()
    );
    let got = r.got();
    assert!(got.len() >= 2 && got[0].status == 503, "{got:?}");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(g.headers["idempotency-key"], format!("{op}:ops"));
        assert_eq!(g.headers["x-ipc-attempt"], (i + 1).to_string());
        assert!(signed(g));
    }
    let outcomes = s.stats.outcomes();
    assert!(
        outcomes.iter().any(|o| o.1 == "retried" && o.2 >= 1),
        "{outcomes:?}"
    );
    s.stop();
}

/// A receiver that never answers holds its own deliveries, never a
/// decision: every decision completes while it holds the requests.
#[test]
fn a_hanging_receiver_slows_no_decision() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Hang);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 2)]);
    let gw = Arc::new(w.gateway());
    let m = many(&w);
    for i in 0..3 {
        pending(&gw, big(i), &m);
    }
    let s = sender(&gw);
    assert!(r.wait_for(60, |r| r.holding() == 2));
    for i in 3..30 {
        pending(&gw, big(i), &m);
        let d = decide(&gw, transfer(LANDLORD, json!(format!("1.{i:02}"))), &m);
        assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    }
    // still held: the decisions did not wait for it
    assert_eq!(r.holding(), 2);
    assert!(r.delivered().is_empty());
    r.set(Mode::Ok);
    assert!(
        r.wait_for(120, |r| r.delivered().len() == 30),
        "{}",
        r.got().len()
    );
    assert!(r.max_concurrent() <= 2);
    s.stop();
}

#[test]
fn a_burst_of_1000_pending_is_delivered_with_bounded_concurrency() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 4)]);
    let gw = Arc::new(w.gateway());
    let m = many(&w);
    for i in 0..1000 {
        pending(&gw, big(i), &m);
    }
    let s = sender(&gw);
    // what the sender holds (a body per delivery in flight) never passes
    // the bound, sampled all along
    let most = std::cell::Cell::new(0);
    assert!(
        r.wait_for(300, |r| {
            most.set(most.get().max(s.stats.in_flight()));
            r.delivered().len() >= 1000
        }),
        "{} delivered",
        r.delivered().len()
    );
    assert!(most.get() <= 4, "{}", most.get());
    let mut keys: Vec<String> = r
        .got()
        .iter()
        .map(|g| g.headers["idempotency-key"].clone())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 1000);
    assert!(r.max_concurrent() <= 4, "{}", r.max_concurrent());
    assert!(s.stats.in_flight() <= 4);
    s.stop();
}

/// Starts `ipc serve --listen` on `db` with the sender held while `hold`
/// exists (the tests' build only).
fn serve_held(w: &TestWorld, db: &std::path::Path, hold: &std::path::Path) -> common::http::Server {
    use std::io::BufRead;
    let m = common::http::write_mandate(w, &many(w));
    let token_file = w.dir.path().join("token");
    std::fs::write(&token_file, format!("{}\n", common::http::TOKEN)).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut child = common::http::serve_cmd(w, &m)
        .env("IPC_TEST_NOTIFY_HOLD", hold)
        .args(["--store", &path_str(db), "--listen", "127.0.0.1:0"])
        .args(["--auth-token-file", &path_str(&token_file)])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap()
        .to_string();
    common::http::Server {
        child,
        addr,
        unix: false,
        token_file,
        token: common::http::TOKEN.to_string(),
    }
}

/// Killed (SIGKILL) after the PENDING committed and before anything was
/// sent, the next process sends it, under the same key.
#[test]
fn a_gateway_killed_between_commit_and_send_sends_after_restart() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 4)]);
    let db = w.dir.path().join("state.db");
    let hold = w.dir.path().join("hold");
    std::fs::write(&hold, "").unwrap();
    let mut s = serve_held(&w, &db, &hold);
    let d = common::http::post(&s, &big(7)).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(r.got().is_empty());
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    std::fs::remove_file(&hold).unwrap();
    let _again = serve_held(&w, &db, &hold);
    assert!(
        r.wait_for(60, |r| r.delivered().len() == 1),
        "{:?}",
        r.got()
    );
    let got = r.got();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["idempotency-key"], format!("{op}:ops"));
    assert!(signed(&got[0]));
}

/// A world whose target is not HTTPS, or names a private address
/// without `allow_private`, refuses the start.
#[test]
fn a_target_not_https_or_not_allowed_refuses_the_start() {
    for (url, allow, code) in [
        ("http://hooks.example.com/ipc", "", "ipc::notify::url"),
        ("https://127.0.0.1:9/ipc", "", "ipc::notify::not_allowed"),
        ("https://10.0.0.8/ipc", "", "ipc::notify::not_allowed"),
    ] {
        let w = TestWorld::new();
        std::fs::write(w.dir.path().join("notify.secret"), format!("{SECRET}\n")).unwrap();
        let mut text = format!("approval_page = \"{PAGE}\"\n");
        text.push_str(&std::fs::read_to_string(&w.world_path).unwrap());
        text.push_str(&format!(
            "\n[[notify]]\nurl = \"{url}\"\nsecret_file = \"notify.secret\"\n{allow}"
        ));
        std::fs::write(&w.world_path, text).unwrap();
        let m = common::http::write_mandate(&w, &w.emma());
        let out = common::http::serve_cmd(&w, &m)
            .args(["--stdio", "--ephemeral"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {err}");
        assert!(err.contains(code), "{url}: {err}");
        assert!(out.stdout.is_empty());
    }
}

/// Two instances on one PostgreSQL store, each with its sender: every
/// pending operation is delivered, and once (a claimed row is not sent by
/// the other instance).
#[cfg(feature = "postgres")]
#[test]
fn two_instances_on_postgresql_deliver_each_operation_once() {
    let Some(pg) = common::pg::fresh() else {
        return;
    };
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 4)]);
    let open = || intentplane::store::open(std::path::Path::new(&pg.url), true).unwrap();
    let a = Arc::new(w.gateway_with(open()));
    let b = Arc::new(w.gateway_with(open()));
    let (sa, sb) = (sender(&a), sender(&b));
    let m = many(&w);
    for i in 0..50 {
        pending(if i % 2 == 0 { &a } else { &b }, big(i), &m);
    }
    assert!(
        r.wait_for(120, |r| r.delivered().len() >= 50),
        "{}",
        r.got().len()
    );
    std::thread::sleep(std::time::Duration::from_millis(600));
    let got = r.got();
    let mut keys: Vec<&str> = got
        .iter()
        .map(|g| g.headers["idempotency-key"].as_str())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 50);
    assert_eq!(got.len(), 50, "a row was sent twice");
    sa.stop();
    sb.stop();
}

/// `ipc run` sends nothing: its rows wait in the outbox, and `ipc notify
/// drain` sends them.
#[test]
fn ipc_run_leaves_the_outbox_to_notify_drain() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 2)]);
    let db = path_str(&w.dir.path().join("state.db"));
    let m = common::http::write_mandate(&w, &many(&w));
    let ipc = |args: &[&str], input: &str| {
        use std::io::Write;
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(args)
            .args([
                "--bundle",
                &path_str(&w.bundle_path),
                "--world",
                &path_str(&w.world_path),
            ])
            .args(["--store", &db])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        c.wait_with_output().unwrap()
    };
    let lines = format!("{}\n{}\n", big(1), big(2));
    let run = ipc(&["run", "--mandate", &path_str(&m)], &lines);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&run.stdout)
            .matches("PENDING")
            .count(),
        2
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(r.got().is_empty());
    let drain = ipc(&["notify", "drain", "--format", "json"], "");
    let said: Value = serde_json::from_slice(&drain.stdout).unwrap_or(Value::Null);
    assert_eq!(
        said,
        json!({"delivered": 2, "failed": 0, "waiting": 0}),
        "{}",
        String::from_utf8_lossy(&drain.stderr)
    );
    assert_eq!(drain.status.code(), Some(0));
    assert_eq!(r.delivered().len(), 2);
    // nothing left: a second drain sends nothing
    let again = ipc(&["notify", "drain", "--format", "json"], "");
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap()["delivered"],
        0
    );
    assert_eq!(r.got().len(), 2);
}

/// A sharded world: each tenant's pending operation is written to its
/// shard's outbox, and the one sender of `ipc serve` drains every shard.
#[test]
fn a_sharded_world_delivers_from_every_shard() {
    let w = TestWorld::new();
    let r = Receiver::start(w.dir.path(), Mode::Ok);
    with_targets(&w, &r.ca_file, &[T("ops", &r.url, "json", 2)]);
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str("\n[store.shards]\nemma = \"a.db\"\nnoah = \"b.db\"\n");
    std::fs::write(&w.world_path, text).unwrap();
    let init = std::process::Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["shards", "init", "--world", &path_str(&w.world_path)])
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );
    let s = common::http::launch(
        &w,
        &many(&w),
        "127.0.0.1:0",
        "",
        common::http::TOKEN,
        &[],
        std::process::Stdio::null(),
    );
    let mut noah = MandateSpec::bank("noah");
    noah.budget = 100_000_000;
    let noah = w.mandate(noah);
    let mut ops = vec![];
    for (p, m) in [
        (transfer_of("emma", 150_000), None),
        (transfer_of("noah", 900_000), Some(noah)),
    ] {
        let mut req = json!({ "proposal": p });
        if let Some(m) = m {
            req["mandate"] = m;
        }
        let d = common::http::post(&s, &req).body;
        assert_eq!(d["decision"], "PENDING", "{d}");
        ops.push(format!("{}:ops", d["operation_hash"].as_str().unwrap()));
    }
    assert!(
        r.wait_for(60, |r| r.delivered().len() == 2),
        "{:?}",
        r.got()
    );
    let mut keys: Vec<String> = r
        .got()
        .iter()
        .map(|g| g.headers["idempotency-key"].clone())
        .collect();
    keys.sort();
    ops.sort();
    assert_eq!(keys, ops);
}
