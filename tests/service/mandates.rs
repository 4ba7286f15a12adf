//! Child mandates over HTTP and on the command line (issue 25, item 3):
//! `POST /v1/mandates` holds a child of a parent until its user confirms
//! it; the approval page's routes list it for her alone, take her
//! signature of its JCS and issue it with a receipt; `GET /v1/mandates`
//! hands the token over; decisions under it narrow; `ipc mandates
//! list|show|revoke` read and revoke it in the same store.
#![cfg(feature = "http")]

use super::serve_approvals::{as_approver, sign_in};
use crate::common;
use common::cli::ipc;
use common::http::*;
use common::*;
use serde_json::{Value, json};

const GYM: &str = "FR76 3000 6000 0112 3456 7890 189";

fn rent_request() -> Value {
    json!({"claims": {"payee": ["DE44 5001 0517 5407 3249 31"]},
           "scopes": ["payments.write"], "budget": "1500.00", "calls": 2})
}

/// `ipc serve` on loopback over the store `db`, with `parent` as its
/// mandate.
fn serve(w: &TestWorld, parent: &Value, db: &str) -> Server {
    launch(
        w,
        parent,
        "127.0.0.1:0",
        db,
        TOKEN,
        &[],
        std::process::Stdio::inherit(),
    )
}

#[test]
fn a_child_is_proposed_confirmed_in_the_browser_issued_and_revoked() {
    let w = TestWorld::new();
    let db = path_str(&w.dir.path().join("mandates.db"));
    let parent = w.emma();
    let s = serve(&w, &parent, &db);
    let propose = |req: &Value| {
        request(
            &s,
            "POST",
            "/v1/mandates",
            &json!({"parent": parent, "request": req}).to_string(),
            &[],
        )
    };
    // a child that widens is refused, naming what widens; nothing is held
    let mut bad = rent_request();
    bad["claims"]["payee"] = json!(["DE44 5001 0517 5407 3249 31", ATTACKER_IBAN]);
    bad["budget"] = json!("2500.00");
    let r = propose(&bad);
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::mandate::widens");
    let kinds: Vec<&str> = r.body["widens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["budget", "claim"], "{}", r.body);
    // the landlord's rent: held for emma, shown in plain words
    let r = propose(&rent_request());
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "pending");
    assert_eq!(r.body["confirm_by"], "emma");
    let id = r.body["mandate"].as_str().unwrap().to_string();
    let summary = r.body["shown"]["summary"].as_str().unwrap();
    assert!(
        summary.contains("DE44 5001 0517 5407 3249 31 (Hausverwaltung Weber (landlord))")
            && summary.contains("up to 1,500.00 EUR"),
        "{summary}"
    );
    let r = get(&s, &format!("/v1/mandates?id={id}"));
    assert_eq!(r.body["status"], "pending", "{}", r.body);
    assert!(r.body.get("token").is_none());

    // noah sees none of it and cannot confirm it
    let noah = sign_in(&s, "noah", w.key("noah"), "http://localhost").unwrap();
    let r = as_approver(&s, &noah, "GET", "/v1/approver/mandates", "");
    assert_eq!(r.body["mandates"], json!([]), "{}", r.body);
    let emma = sign_in(&s, "emma", w.key("emma"), "http://localhost").unwrap();
    let r = as_approver(&s, &emma, "GET", "/v1/approver/mandates", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let held = r.body["mandates"][0]["mandate"].clone();
    assert_eq!(held["id"], json!(id));
    let msg = intentplane::canonical::to_jcs(&held).unwrap();
    let by_noah = json!({"id": id, "signature": w.key("noah").sign(msg.as_bytes())});
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/mandates/confirm",
        &by_noah.to_string(),
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // emma's session with noah's signature: not her key
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/mandates/confirm",
        &by_noah.to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::mandate::signer");
    // her own signature issues it
    let mine = json!({"id": id, "signature": w.key("emma").sign(msg.as_bytes())});
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/mandates/confirm",
        &mine.to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let r = get(&s, &format!("/v1/mandates?id={id}"));
    assert_eq!(r.body["status"], "issued", "{}", r.body);
    let token = r.body["token"].clone();
    assert_eq!(
        token["ancestors"][0]["mandate"]["id"],
        parent["mandate"]["id"]
    );

    // decided under it: the landlord, not the gym (also emma's beneficiary)
    let under = |p: Value| post(&s, &json!({"proposal": p, "mandate": token})).body;
    let d = under(transfer(LANDLORD, json!("100.00")));
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let d = under(transfer(GYM, json!("10.00")));
    assert_eq!(d["decision"], "DENY", "{d}");
    let kinds: Vec<(Value, Value)> = get(&s, "/v1/receipts?last=50")
        .body
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["body"]["kind"] == "mandate")
        .map(|r| {
            (
                r["body"]["change"].clone(),
                r["body"]["mandate"]["id"].clone(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [(json!("proposed"), json!(id)), (json!("issued"), json!(id))]
    );

    // the command line reads the same store, and revokes
    let (b, wp) = (path_str(&w.bundle_path), path_str(&w.world_path));
    let args = [
        "--bundle", &b, "--world", &wp, "--store", &db, "--format", "json",
    ];
    let out = ipc(&[&["mandates", "list"][..], &args[..]].concat(), "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["mandates"][0]["status"], "issued", "{listed}");
    let out = ipc(&[&["mandates", "show", &id][..], &args[..]].concat(), "");
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        shown["text"]
            .as_str()
            .unwrap()
            .contains("from your registry"),
        "{shown}"
    );
    let out = ipc(&[&["mandates", "revoke", &id][..], &args[..]].concat(), "");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = under(transfer(LANDLORD, json!("1.00")));
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("authn")),
        "{d}"
    );
    let out = ipc(&["receipts", "verify", &db], "");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// For a command line: the store `db` (in the world's directory), the
/// bundle, the world, Emma's mandate as a parent and the issuer's key.
fn cli_files(w: &TestWorld, db: &str) -> (String, String, String, String, String) {
    let parent = write_mandate(w, &w.emma());
    (
        path_str(&w.dir.path().join(db)),
        path_str(&w.bundle_path),
        path_str(&w.world_path),
        path_str(&parent),
        path_str(&w.dir.path().join("issuer.key")),
    )
}

/// `ipc token child --stdio` with the gateway's options `gw` and the
/// signing key `key`: its answer to each of `lines`.
fn child_stdio(gw: &[&str], key: &str, lines: &str) -> Vec<Value> {
    let out = ipc(
        &[&["token", "child"][..], gw, &["--key", key, "--stdio"][..]].concat(),
        lines,
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The administrator's child on the command line: checked against its
/// parent (one that widens is `ipc::mandate::widens`, nothing recorded),
/// signed with the issuer's key, recorded with a receipt.
#[test]
fn ipc_mandates_issue_refuses_a_widening_child_and_records_a_narrow_one() {
    let w = TestWorld::new();
    let (db, b, wp, p, key) = cli_files(&w, "cli.db");
    let base = [
        "mandates", "issue", "--bundle", &b, "--world", &wp, "--store", &db, "--parent", &p,
        "--key", &key, "--format", "json",
    ];
    let out = ipc(
        &[
            &base[..],
            &["--claim", &format!("payee={ATTACKER_IBAN}")][..],
        ]
        .concat(),
        "",
    );
    assert!(!out.status.success());
    let e: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(e["error"]["code"], "ipc::mandate::widens", "{e}");
    let out = ipc(
        &[
            &base[..],
            &["--claim", &format!("payee={LANDLORD}"), "--budget", "50.00"][..],
        ]
        .concat(),
        "",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let issued: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(issued["token"]["mandate"]["budget"]["amount"], 5000);
    let out = ipc(
        &[
            "mandates", "list", "--bundle", &b, "--world", &wp, "--store", &db, "--format", "json",
        ],
        "",
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["mandates"].as_array().unwrap().len(), 1, "{listed}");
}

/// `ipc token child` issues the child `ipc mandates issue` does (one
/// implementation): a widening one refused, nothing recorded; a narrow one
/// printed as its token and recorded; `--draft` shows what widens; the
/// harness's `--stdio` answers one line per child, an error as a line.
#[test]
fn ipc_token_child_issues_as_mandates_issue_does() {
    let w = TestWorld::new();
    let (db, b, wp, p, key) = cli_files(&w, "child.db");
    let gw = ["--bundle", &b, "--world", &wp, "--store", &db];
    let child = |extra: &[&str]| {
        ipc(
            &[
                &["token", "child"][..],
                &gw[..],
                &["--parent", &p][..],
                extra,
            ]
            .concat(),
            "",
        )
    };
    let attacker = format!("payee={ATTACKER_IBAN}");
    let out = child(&["--key", &key, "--claim", &attacker]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("widens its parent"), "{err}");
    let out = child(&["--draft", "--format", "json", "--claim", &attacker]);
    let draft: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(draft["widens"][0]["kind"], "claim", "{draft}");
    let landlord = format!("payee={LANDLORD}");
    let out = child(&["--key", &key, "--claim", &landlord, "--budget", "50.00"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(token["mandate"]["budget"]["amount"], 5000);
    let parent_token: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let lines = format!(
        "{}\nnot json\n",
        json!({"parent": parent_token, "request": {"claims": {"payee": [LANDLORD]}, "calls": 1}})
    );
    let answers = child_stdio(&gw, &key, &lines);
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["token"]["mandate"]["budget"]["calls"], 1);
    assert!(answers[1]["error"].is_string(), "{answers:?}");
    let out = ipc(
        &[
            "mandates", "list", "--bundle", &b, "--world", &wp, "--store", &db, "--format", "json",
        ],
        "",
    );
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(listed["mandates"].as_array().unwrap().len(), 2, "{listed}");
}

/// Finding 1 of issue 39: a child's `sources` would be signed without
/// being shown (a payee "any saved beneficiary" behind a summary naming
/// the landlord). Every way a child is proposed refuses it, naming it,
/// and holds nothing: `POST /v1/mandates` and the harness's `ipc token
/// child --stdio` (the MCP tool refuses it as an unknown argument).
#[test]
fn a_child_request_naming_sources_is_refused_on_every_route() {
    let w = TestWorld::new();
    let (db, b, wp, p, key) = cli_files(&w, "sources.db");
    let parent = w.emma();
    let mut req = rent_request();
    req["sources"] =
        json!({"payment.transfer.payee_iban": ["mandate.payee", "registry.beneficiaries"]});
    let s = serve(&w, &parent, &db);
    let body = json!({"parent": parent, "request": req}).to_string();
    let r = request(&s, "POST", "/v1/mandates", &body, &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::mandate::request", "{}", r.body);
    assert!(
        r.body["error"].as_str().unwrap().contains("`sources`"),
        "{}",
        r.body
    );
    assert_eq!(get(&s, "/v1/mandates").body["mandates"], json!([]));
    drop(s);
    let parent_token: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let lines = format!(
        "{}\n{}\n",
        json!({"parent": parent_token, "request": req, "draft": true}),
        json!({"parent": parent_token, "request": req})
    );
    let answers = child_stdio(
        &["--bundle", &b, "--world", &wp, "--store", &db],
        &key,
        &lines,
    );
    assert_eq!(answers.len(), 2, "{answers:?}");
    for a in &answers {
        assert!(
            a["error"].as_str().is_some_and(|e| e.contains("`sources`")),
            "{a}"
        );
    }
}

/// Finding 8 of issue 39: a child pushed out of the listing (past 200 of
/// one parent) is still held, and confirmable by its id: `GET
/// /v1/mandates?id=` and `ipc mandates show` find it by its id too.
#[test]
fn a_held_child_past_the_listing_is_found_by_its_id() {
    let w = TestWorld::new();
    let (db, b, wp, _, _) = cli_files(&w, "flood.db");
    let parent = w.emma();
    let s = serve(&w, &parent, &db);
    let body = json!({"parent": parent, "request": rent_request()}).to_string();
    let mut ids = vec![];
    for _ in 0..=intentplane::gateway::pending::MAX_PER_MANDATE {
        let r = request(&s, "POST", "/v1/mandates", &body, &[]);
        assert_eq!(r.status, 200, "{}", r.body);
        ids.push(r.body["mandate"].as_str().unwrap().to_string());
    }
    let listed = get(&s, "/v1/mandates").body;
    let listed = listed["mandates"].as_array().unwrap();
    assert!(!listed.iter().any(|r| r["mandate"] == ids[0].as_str()));
    let r = get(&s, &format!("/v1/mandates?id={}", ids[0]));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["status"], "pending", "{}", r.body);
    drop(s);
    let out = ipc(
        &[
            "mandates", "show", &ids[0], "--bundle", &b, "--world", &wp, "--store", &db,
            "--format", "json",
        ],
        "",
    );
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["status"], "pending", "{shown}");
}
