//! `ipc shards move` run as a process: its output (human and JSON), its
//! refusals, and a kill -9 at each step of the move, after which running
//! it again leaves the tenant on exactly one shard with all its state,
//! never decided on two in between.

use crate::common;
use crate::shard_move::{Workload, check_clean, map, router, standing_on, workload};
use common::*;
use intentplane::gateway::Outcome;
use intentplane::gateway::shards::Standing;
use intentplane::store;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The world file with emma and noah on `a.db`, both placed, and emma's
/// workload done there.
fn setup() -> (TestWorld, PathBuf, Workload) {
    let w = TestWorld::new();
    let mut text = std::fs::read_to_string(&w.world_path).unwrap();
    text.push_str("[store.shards]\nemma = \"a.db\"\nnoah = \"a.db\"\n");
    let world = w.dir.path().join("sharded.toml");
    std::fs::write(&world, text).unwrap();
    let init = ipc(&["shards", "init", "--world", &path_str(&world)], None);
    assert!(init.status.success(), "{init:?}");
    let gw = router(&w, &map(&w, &[("emma", "a.db"), ("noah", "a.db")]));
    let wl = workload(&w, &gw);
    (w, world, wl)
}

fn ipc(args: &[&str], pause: Option<&str>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
    c.args(args);
    if let Some(p) = pause {
        c.env("IPC_TEST_PAUSE_AFTER", p);
    }
    c.output().unwrap()
}

fn move_args(world: &std::path::Path) -> Vec<String> {
    ["shards", "move", "emma", "--to", "b.db", "--world"]
        .iter()
        .map(|s| s.to_string())
        .chain([path_str(world)])
        .collect()
}

/// emma's decisions on the store `f`, after its seq `after`.
fn decisions_after(w: &TestWorld, f: &str, after: u64) -> Vec<Value> {
    let p = w.dir.path().join(f);
    if !p.exists() {
        return vec![];
    }
    store::open(&p, false)
        .unwrap()
        .receipts()
        .unwrap()
        .into_iter()
        .filter(|r| r.seq > after && r.body["mandate"]["owner"] == "emma")
        .map(|r| r.body)
        .collect()
}

fn head(w: &TestWorld, f: &str) -> u64 {
    store::open(&w.dir.path().join(f), false)
        .unwrap()
        .head()
        .unwrap()
        .map_or(0, |h| h.0)
}

#[test]
fn ipc_shards_move_reports_the_move_and_refuses_a_second_one() {
    let (w, world, _) = setup();
    let args = move_args(&world);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = ipc(&args, None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("moved    emma from "), "{text}");
    assert!(text.contains("old shard's fence receipt"), "{text}");
    assert!(text.contains("send `emma` to `b.db`"), "{text}");
    // again: emma is no longer held where the map sends her
    let mut json_args = args.clone();
    json_args.extend(["--format", "json"]);
    let out = ipc(&json_args, None);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["error"]["code"], "ipc::shards::move_not_held", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("moved to"),
        "{doc}"
    );
    // noah moves too, in JSON
    let mut noah: Vec<&str> = json_args.clone();
    noah[2] = "noah";
    noah[4] = "c.db";
    let out = ipc(&noah, None);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["moved"]["tenant"], "noah");
    assert_eq!(doc["moved"]["recovered"], Value::Null);
    assert!(
        doc["moved"]["to_receipt"][1]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    check_clean(&map(&w, &[("emma", "b.db"), ("noah", "c.db")]));
}

/// kill -9 after the fence, after the read and after the new shard's
/// commit: in between, emma is decided on no shard (denied on the old,
/// the new one refusing a map that sends her there until it holds her);
/// the next move ends the killed one and she ends on b.db alone, with
/// her budget.
#[test]
fn a_move_killed_at_any_step_is_ended_by_the_next_one() {
    for at in ["fence", "copy", "commit"] {
        let (w, world, wl) = setup();
        let a_before = head(&w, "a.db");
        // an instance running since before the move
        let old = router(&w, &map(&w, &[("emma", "a.db"), ("noah", "a.db")]));
        let args = move_args(&world);
        let mut child = Command::new(env!("CARGO_BIN_EXE_ipc"))
            .args(&args)
            .env("IPC_TEST_PAUSE_AFTER", at)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), format!("paused after {at}"), "{at}");
        // fenced: the running instance is denied on a.db
        assert_deny(
            &decide(&old, transfer_of("emma", 100), &wl.emma),
            "authn",
            "being moved",
        );
        if at != "commit" {
            // the new map is refused: b.db does not hold emma yet
            let mut world2 = w.world();
            world2.shards = Some(map(&w, &[("emma", "b.db"), ("noah", "a.db")]));
            assert!(
                intentplane::gateway::Gateway::sharded(&w.bundle, world2, &crate::shard_move::open)
                    .is_err()
            );
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        assert!(
            matches!(standing_on(&w, "a.db"), Standing::Moving { .. }),
            "{at}"
        );
        // `ipc shards check` names the tenant left fenced
        let check = ipc(&["shards", "check", "--world", &path_str(&world)], None);
        assert_eq!(check.status.code(), Some(1), "{at}");
        let text = String::from_utf8_lossy(&check.stdout);
        assert!(
            text.contains("tenant `emma` is being moved"),
            "{at}: {text}"
        );
        // noah is decided on a.db meanwhile
        let no = w.mandate(MandateSpec::bank("noah"));
        assert_eq!(
            decide(&old, transfer_of("noah", 100), &no).decision,
            Outcome::Allow
        );
        let a_args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = ipc(&a_args, None);
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{at}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let said = if at == "commit" {
            "had committed: finished"
        } else {
            "rolled back, moved again"
        };
        assert!(text.contains(said), "{at}: {text}");
        assert!(
            matches!(standing_on(&w, "a.db"), Standing::Moved { .. }),
            "{at}"
        );
        assert_eq!(standing_on(&w, "b.db"), Standing::Held, "{at}");
        // nothing of emma's decided on a.db since the move began: denials only
        for b in decisions_after(&w, "a.db", a_before) {
            assert_eq!(b["decision"], "DENY", "{at}: {b}");
        }
        let after = map(&w, &[("emma", "b.db"), ("noah", "a.db")]);
        check_clean(&after);
        // on b.db with her budget: 25.00 spent, the duplicate spends nothing
        let gw = router(&w, &after);
        assert_eq!(
            decide(&gw, wl.executed.clone(), &wl.emma).decision,
            Outcome::Allow
        );
        let b = store::open(&w.dir.path().join("b.db"), false).unwrap();
        let id = wl.emma["mandate"]["id"].as_str().unwrap().to_string();
        let spent = b
            .transaction(&mut |tx| Ok(json!(tx.spent(&id)?.amount)))
            .unwrap();
        assert_eq!(spent, json!(2500), "{at}");
        // a killed move voided on b.db leaves its void mark and receipt
        let voids = b
            .receipts()
            .unwrap()
            .iter()
            .filter(|r| r.body["change"] == "void")
            .count();
        assert_eq!(voids, usize::from(at != "commit"), "{at}");
    }
}
