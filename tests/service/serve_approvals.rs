//! `ipc serve`: approvals over HTTP: listed and submitted by hash, the
//! approval page and its origin, an approver signed in with their key, an
//! owner changing its records with its own signature.

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};

use crate::serve_kit::*;

/// Issue #15, item 2 over HTTP: the approver lists what waits for them and
/// submits a signed approval by its hash; the agent's next identical
/// proposal executes without carrying any approval. A decline refuses
/// the operation for good.
#[test]
fn approvals_are_listed_and_submitted_by_hash() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let p = transfer(LANDLORD, json!("1500.00"));
    let d = post(&s, &p).body;
    assert_eq!(d["decision"], "PENDING");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let r = get(&s, "/v1/approvals?for=emma");
    assert_eq!(r.status, 200, "{}", r.body);
    let ops = r.body["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["operation_hash"], json!(op));
    assert_eq!(ops[0]["resolved"]["amount"], 150_000);
    assert_eq!(ops[0]["origins"]["payee_iban"], "registry.beneficiaries");
    // not for someone who may not approve it
    let r = get(&s, "/v1/approvals?for=lead_bo");
    assert!(r.body["operations"].as_array().unwrap().is_empty());
    assert_eq!(get(&s, "/v1/approvals?who=emma").status, 400);
    // an approval for an operation the store does not know: 404
    let stray = w.approve("emma", "sha256:00");
    let r = request(&s, "POST", "/v1/approvals", &stray.to_string(), &[]);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::unknown");
    // a forged one (another name over emma's signature): 400
    let mut forged = w.approve("noah", &op);
    forged["approval"]["approver"] = json!("emma");
    let r = request(&s, "POST", "/v1/approvals", &forged.to_string(), &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    // the real one, by hash; the same proposal, with no approval, executes
    let approval = w.approve("emma", &op).to_string();
    let r = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body.get("already"), None, "{}", r.body);
    // the same signed approval again (a client's retry): answered with the
    // first receipt, marked, and no second receipt written (#40.20)
    let chain = receipts(&s, "last=1000").len();
    let again = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(again.status, 200, "{}", again.body);
    assert_eq!(again.body["already"], json!(true), "{}", again.body);
    assert_eq!(again.body["receipt"], r.body["receipt"]);
    assert_eq!(receipts(&s, "last=1000").len(), chain);
    let d = post(&s, &p).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    assert_eq!(d["approvers"], json!(["emma"]));
    // once executed, it is no longer something to approve
    let late = request(&s, "POST", "/v1/approvals", &approval, &[]);
    assert_eq!(late.status, 409, "{}", late.body);
    assert_eq!(late.body["code"], "ipc::approvals::executed");
    assert!(
        get(&s, "/v1/approvals").body["operations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // a declined operation is then refused
    let pw =
        json!({"action": "user.update_password", "args": {"new_password": "a long new password"}});
    let d = post(&s, &pw).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op2 = d["operation_hash"].as_str().unwrap().to_string();
    // the agent host's token alone declines nothing: the decline is signed
    let unsigned = json!({"operation_hash": op2, "approver": "emma"}).to_string();
    let r = request(&s, "POST", "/v1/approvals/decline", &unsigned, &[]);
    assert_eq!(r.status, 400, "{}", r.body);
    let mut forged = w.decline("noah", &op2);
    forged["decline"]["approver"] = json!("emma");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &forged.to_string(),
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // an approval's signature is no decline's
    let mut as_decline = w.approve("emma", &op2);
    as_decline["decline"] = as_decline["approval"].take();
    as_decline.as_object_mut().unwrap().remove("approval");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &as_decline.to_string(),
        &[],
    );
    assert_eq!(r.status, 400, "{}", r.body);
    // someone who may not approve it may not decline it either
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &w.decline("noah", &op2).to_string(),
        &[],
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::not_approver");
    let r = request(
        &s,
        "POST",
        "/v1/approvals/decline",
        &w.decline("emma", &op2).to_string(),
        &[],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let d = post(&s, &pw).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("approval"))
    );
    // without the token: nothing
    let r = request(&s, "GET", "/v1/approvals", "", &[("Authorization", None)]);
    assert_eq!(r.status, 401);
}

/// Signs `who` in on the approval page's API with `key`: the challenge,
/// the signed login (origin `origin`), and the session token, or the
/// refusal's status.
pub(crate) fn sign_in(
    s: &Server,
    who: &str,
    key: &intentplane::keys::SecretKey,
    origin: &str,
) -> Result<String, u16> {
    let page = [("Authorization", None)];
    let c = request(
        s,
        "POST",
        "/v1/approver/challenge",
        &json!({"approver": who}).to_string(),
        &page,
    );
    assert_eq!(c.status, 200, "{}", c.body);
    let login = json!({"approver": who, "challenge": c.body["challenge"],
        "origin": origin, "purpose": "ipc approver login"});
    let msg = intentplane::canonical::to_jcs(&login).unwrap();
    let body = json!({"login": login, "signature": key.sign(msg.as_bytes())});
    let r = request(s, "POST", "/v1/approver/session", &body.to_string(), &page);
    match r.status {
        200 => Ok(r.body["session"].as_str().unwrap().to_string()),
        other => Err(other),
    }
}

/// A request on the page's API with an approver session (no bearer token).
pub(crate) fn as_approver(s: &Server, session: &str, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Approver {session}");
    request(s, method, path, body, &[("Authorization", Some(&auth))])
}

/// Issue #15, item 3: the page is served without the agent's token, under
/// a strict Content-Security-Policy; only this server's own origin may
/// call the page's routes, and every other route still refuses browsers.
#[test]
fn the_approval_page_is_served_and_only_its_own_origin_may_call_it() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let host = format!("127.0.0.1:{port}");
    let own = format!("http://{host}");
    let no_token = ("Authorization", None);
    let r = request(
        &s,
        "GET",
        "/approve",
        "",
        &[no_token, ("Host", Some(&host))],
    );
    assert_eq!(r.status, 200);
    assert!(
        r.headers.contains("content-type: text/html"),
        "{}",
        r.headers
    );
    assert!(
        r.headers
            .contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{}",
        r.headers
    );
    assert!(
        !r.body.as_str().unwrap().contains("<script>"),
        "no inline script"
    );
    for asset in ["/approve/app.js", "/approve/app.css"] {
        let r = request(&s, "GET", asset, "", &[no_token]);
        assert_eq!(r.status, 200, "{asset}");
        assert!(r.headers.contains("x-content-type-options: nosniff"));
    }
    let ask = json!({"approver": "emma"}).to_string();
    let same = [
        no_token,
        ("Host", Some(host.as_str())),
        ("Origin", Some(own.as_str())),
        ("Sec-Fetch-Site", Some("same-origin")),
    ];
    let r = request(&s, "POST", "/v1/approver/challenge", &ask, &same);
    assert_eq!(r.status, 200, "{}", r.body);
    let evil_port = format!("http://127.0.0.1:{}", port.parse::<u32>().unwrap() + 1);
    for headers in [
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some("http://evil.example.com")),
        ],
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some(evil_port.as_str())),
        ],
        vec![
            no_token,
            ("Host", Some(host.as_str())),
            ("Origin", Some("null")),
        ],
        vec![no_token, ("Sec-Fetch-Site", Some("cross-site"))],
        // DNS rebinding: the Origin matches the Host, which is not served
        vec![
            no_token,
            ("Host", Some("evil.example.com")),
            ("Origin", Some("http://evil.example.com")),
        ],
    ] {
        let r = request(&s, "POST", "/v1/approver/challenge", &ask, &headers);
        assert!(
            matches!(r.status, 403 | 421),
            "{headers:?}: {} {}",
            r.status,
            r.body
        );
        let r = request(&s, "GET", "/approve", "", &headers);
        assert!(matches!(r.status, 403 | 421), "{headers:?}: {}", r.status);
    }
    // the agent's routes still refuse even the page's own origin
    let p = transfer(LANDLORD, json!("7.00")).to_string();
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &p,
        &[
            ("Origin", Some(own.as_str())),
            ("Host", Some(host.as_str())),
        ],
    );
    assert_eq!(r.status, 403);
    let r = request(
        &s,
        "GET",
        "/v1/approvals",
        "",
        &[
            ("Origin", Some(own.as_str())),
            ("Host", Some(host.as_str())),
        ],
    );
    assert_eq!(r.status, 403);
}

/// Issue #40, item 18: a browser asks for `/favicon.ico` with every load of
/// the page; the API's router refused it (403) and counted a refused
/// `origin`, the counter an operator alerts on. Now it is the page's: no
/// content, nothing counted; another site's request for it is refused.
#[test]
fn the_browsers_icon_request_is_answered_and_not_counted_as_refused() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let host = format!("127.0.0.1:{port}");
    // as Chromium asks for it: an image, same origin, no token, no Origin
    let browser = [
        ("Authorization", None),
        ("Content-Type", None),
        ("Host", Some(host.as_str())),
        ("Sec-Fetch-Site", Some("same-origin")),
        ("Sec-Fetch-Mode", Some("no-cors")),
        ("Sec-Fetch-Dest", Some("image")),
    ];
    for _ in 0..3 {
        let r = request(&s, "GET", "/favicon.ico", "", &browser);
        assert_eq!(r.status, 204, "{}", r.body);
    }
    let text = get(&s, "/metrics").body.as_str().unwrap().to_string();
    assert!(!text.contains("ipc_http_refused_total{"), "{text}");
    let r = request(
        &s,
        "GET",
        "/favicon.ico",
        "",
        &[
            ("Authorization", None),
            ("Sec-Fetch-Site", Some("cross-site")),
        ],
    );
    assert_eq!(r.status, 403);
    let text = get(&s, "/metrics").body.as_str().unwrap().to_string();
    assert!(
        text.contains("ipc_http_refused_total{reason=\"origin\"} 1"),
        "{text}"
    );
}

/// Sign-in is a challenge signed by the approver's key; a session sees and
/// acts on the operations its approver may approve, nothing else, and
/// signs as itself only. The agent's bearer token opens none of it.
#[test]
fn an_approver_signs_in_with_their_key_and_acts_only_on_their_operations() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let d = post(&s, &transfer(LANDLORD, json!("1500.00"))).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    let op = d["operation_hash"].as_str().unwrap().to_string();
    let origin = "http://localhost";
    // a key that is not the approver's does not sign in
    assert_eq!(sign_in(&s, "emma", w.key("noah"), origin), Err(401));
    assert_eq!(sign_in(&s, "nobody", w.key("noah"), origin), Err(401));
    // a login signed for another origin does not sign in here
    assert_eq!(
        sign_in(&s, "emma", w.key("emma"), "http://evil.example.com"),
        Err(401)
    );
    // a challenge is used once, and only by the approver it was issued to
    let c = request(
        &s,
        "POST",
        "/v1/approver/challenge",
        &json!({"approver": "noah"}).to_string(),
        &[],
    );
    let login = json!({"approver": "emma", "challenge": c.body["challenge"],
        "origin": origin, "purpose": "ipc approver login"});
    let sig = w
        .key("emma")
        .sign(intentplane::canonical::to_jcs(&login).unwrap().as_bytes());
    let body = json!({"login": login, "signature": sig}).to_string();
    assert_eq!(
        request(&s, "POST", "/v1/approver/session", &body, &[]).status,
        401
    );
    let emma = sign_in(&s, "emma", w.key("emma"), origin).unwrap();
    let noah = sign_in(&s, "noah", w.key("noah"), origin).unwrap();

    // no session, a made-up one, or the agent's bearer token: nothing
    let r = request(&s, "GET", "/v1/approver/operations", "", &[]);
    assert_eq!(r.status, 401, "the bearer token is no approver session");
    assert_eq!(
        as_approver(&s, "0123456789abcdef", "GET", "/v1/approver/operations", "").status,
        401
    );

    let r = as_approver(&s, &emma, "GET", "/v1/approver/operations", "");
    assert_eq!(r.status, 200, "{}", r.body);
    let ops = r.body["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1);
    let shown = &ops[0];
    assert_eq!(shown["operation_hash"], json!(op));
    assert_eq!(shown["status"], "waiting");
    let value = |name: &str| {
        shown["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(value("amount")["items"], json!([["1,500.00 EUR"]]));
    assert_eq!(
        value("payee_iban")["items"],
        json!([["DE44 5001 0517 5407 3249 31"]])
    );
    assert_eq!(value("payee_iban")["origin_kind"], "registry");
    assert_eq!(value("payee_iban")["origin"], "registry.beneficiaries");
    assert_eq!(value("currency")["origin_kind"], "mandate");
    // a saved payee and the mandate's own currency are not news
    assert_eq!(value("payee_iban")["new"], false);
    assert_eq!(value("currency")["new"], false);
    assert_eq!(shown["level"], 1);
    assert!(!shown["rules"].as_array().unwrap().is_empty(), "{shown}");
    assert!(shown["rules"][0]["policy"].as_str().is_some());
    let r = as_approver(&s, &noah, "GET", "/v1/approver/operations", "");
    assert!(
        r.body["operations"].as_array().unwrap().is_empty(),
        "{}",
        r.body
    );

    // signed as someone else than the session: refused
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // noah's own approval of emma's operation: not his to approve
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/approve",
        &w.approve("noah", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::not_approver");
    let r = as_approver(
        &s,
        &noah,
        "POST",
        "/v1/approver/decline",
        &w.decline("noah", &op).to_string(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    // emma's approval under emma's session, then the proposal executes
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let d = post(&s, &transfer(LANDLORD, json!("1500.00"))).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let r = as_approver(&s, &emma, "GET", "/v1/approver/operations", "");
    assert_eq!(r.body["operations"][0]["status"], "executed");

    // a signed decline from the page: recorded, then the operation is refused
    let pw =
        json!({"action": "user.update_password", "args": {"new_password": "a long new password"}});
    let d = post(&s, &pw).body;
    let op2 = d["operation_hash"].as_str().unwrap().to_string();
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/decline",
        &w.decline("emma", &op2).to_string(),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let receipts = receipts(&s, "last=5");
    assert!(
        receipts
            .iter()
            .any(|x| x["body"]["change"] == "decline" && x["body"]["by"] == "emma"),
        "{receipts:?}"
    );
    let r = as_approver(
        &s,
        &emma,
        "POST",
        "/v1/approver/approve",
        &w.approve("emma", &op2).to_string(),
    );
    assert_eq!(
        r.status, 409,
        "a declined operation is no longer approvable: {}",
        r.body
    );
    assert_eq!(r.body["code"], "ipc::approvals::declined");
    let d = post(&s, &pw).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("approval"))
    );
    // signing out ends the session
    assert_eq!(
        as_approver(&s, &emma, "POST", "/v1/approver/logout", "{}").status,
        200
    );
    assert_eq!(
        as_approver(&s, &emma, "GET", "/v1/approver/operations", "").status,
        401
    );
}

/// Issue #15, item 4 over HTTP: `POST /v1/registry` takes a change signed
/// by a key the world declares for that owner; the next decision sees it
/// and the chain holds its receipt. Another owner's key, the bearer token
/// alone, a replay and an expired change are refused.
#[test]
fn an_owner_changes_its_records_over_http_with_its_own_signature() {
    use intentplane::gateway::trusted::{OwnerChange, SignedOwnerChange, Verb};
    let w = TestWorld::new();
    let mut world = std::fs::read_to_string(&w.world_path).unwrap();
    world.push_str("[owners.emma]\nkeys = [\"emma.pub\"]\n[owners.noah]\nkeys = [\"noah.pub\"]\n");
    std::fs::write(&w.world_path, world).unwrap();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let supplier = || transfer(SUPPLIER, json!("98.70"));
    let d = post(&s, &supplier()).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("provenance")),
        "{d}"
    );
    let change = |owner: &str, expires_at: i64, nonce: &str| OwnerChange {
        owner: owner.into(),
        pack: "bank".into(),
        registry: "beneficiaries".into(),
        change: Verb::Add,
        value: "DE02 1203 0000 0000 2020 51".into(),
        record: None,
        audience: GATEWAY_ID.into(),
        expires_at,
        nonce: nonce.into(),
    };
    let signed = |c: OwnerChange, key: &str| {
        serde_json::to_string(&SignedOwnerChange::sign(c, w.key(key)).unwrap()).unwrap()
    };
    let send = |body: &str, auth: Option<&str>| {
        request(&s, "POST", "/v1/registry", body, &[("Authorization", auth)])
    };
    let bearer = format!("Bearer {TOKEN}");
    let later = now() + 600;
    // the agent's token alone: no signature, nothing changes
    let unsigned = json!({"change": change("emma", later, "n1"), "signature": ""}).to_string();
    assert_eq!(send(&unsigned, Some(&bearer)).status, 403);
    // another owner's key (noah signs a change to emma's records)
    let r = send(&signed(change("emma", later, "n2"), "noah"), Some(&bearer));
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::unauthenticated");
    // an owner the world declares no key for
    let r = send(&signed(change("acme", later, "n3"), "clerk"), None);
    assert_eq!(r.status, 403, "{}", r.body);
    // expired
    let r = send(&signed(change("emma", now() - 1, "n4"), "emma"), None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::expired");
    assert_eq!(
        post(&s, &supplier()).body["decision"],
        "DENY",
        "nothing refused changed anything"
    );
    // emma's own signed change, without the bearer token
    let good = signed(change("emma", later, "n5"), "emma");
    let r = send(&good, None);
    assert_eq!(r.status, 200, "{}", r.body);
    let seq = r.body["receipt"]["seq"].as_u64().unwrap();
    let d = post(&s, &supplier()).body;
    assert_eq!(d["decision"], "ALLOW", "{d}");
    let chain = receipts(&s, "last=10");
    let rec = chain.iter().find(|x| x["seq"] == seq).unwrap();
    assert_eq!(rec["body"]["kind"], "registry");
    assert_eq!(rec["body"]["by"], "emma");
    assert_eq!(rec["body"]["value"], SUPPLIER);
    // replayed: refused, even after the value was removed again
    let r = send(&good, None);
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::registry::replayed");
    let mut remove = change("emma", later, "n6");
    remove.change = Verb::Remove;
    assert_eq!(send(&signed(remove, "emma"), None).status, 200);
    assert_eq!(send(&good, None).status, 409);
    let d = post(&s, &supplier()).body;
    assert_eq!(d["decision"], "DENY", "{d}");
    // a tampered change (another value under emma's signature)
    let mut tampered: Value =
        serde_json::from_str(&signed(change("emma", later, "n7"), "emma")).unwrap();
    tampered["change"]["value"] = json!(ATTACKER_IBAN);
    assert_eq!(send(&tampered.to_string(), None).status, 403);
    // a browser page may not send it
    let r = request(
        &s,
        "POST",
        "/v1/registry",
        &signed(change("emma", later, "n8"), "emma"),
        &[("Origin", Some("http://localhost"))],
    );
    assert_eq!(r.status, 403);
}
