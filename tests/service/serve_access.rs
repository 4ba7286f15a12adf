//! `ipc serve`: who may call it: the bearer token (rotated in its file),
//! browsers and rebound hosts refused, and (issue #21) tenants' tokens, floods
//! of pending operations and of challenges.

// needs a part of the default features: the test is off without it
#![cfg(feature = "http")]

use crate::common;
use common::http::*;
use common::*;
use serde_json::{Value, json};

use crate::serve_approvals::*;
use crate::serve_kit::*;

#[test]
fn no_token_or_a_wrong_one_gets_nothing() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let no_auth = [("Authorization", None)];
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &transfer(LANDLORD, json!("6.00")).to_string(),
        &no_auth,
    );
    assert_eq!(r.status, 401);
    assert!(r.headers.contains("www-authenticate: bearer"));
    assert!(r.body["error"].as_str().unwrap().contains("Bearer"));
    for path in ["/v1/health", "/v1/receipts", "/metrics", "/nope"] {
        let r = request(&s, "GET", path, "", &no_auth);
        assert_eq!(r.status, 401, "{path}");
        assert!(r.body.get("ok").is_none() && r.body.get("bundle").is_none());
    }
    let wrong = [("Authorization", Some("Bearer test-token-0123456789abcdeX"))];
    let r = request(
        &s,
        "POST",
        "/v1/decide",
        &transfer(LANDLORD, json!("6.00")).to_string(),
        &wrong,
    );
    assert_eq!(r.status, 401);
    let basic = [("Authorization", Some("Basic dGVzdA=="))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &basic).status, 401);
    // nothing was decided, nothing appended
    assert!(receipts(&s, "last=10").is_empty());
}

#[test]
fn a_token_rotated_in_the_file_is_honoured() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    assert_eq!(get(&s, "/v1/health").status, 200);
    let new = "rotated-token-9876543210fedcba";
    let tmp = s.token_file.with_extension("new");
    std::fs::write(&tmp, new).unwrap();
    std::fs::rename(&tmp, &s.token_file).unwrap();
    let auth = format!("Bearer {new}");
    let with_new = [("Authorization", Some(auth.as_str()))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &with_new).status, 200);
    assert_eq!(get(&s, "/v1/health").status, 401, "the old token is gone");
}

#[test]
fn browsers_and_rebound_hosts_are_refused() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let port = s.addr.rsplit(':').next().unwrap().to_string();
    let p = transfer(LANDLORD, json!("7.00")).to_string();
    let evil = format!("evil.example.com:{port}");
    for (headers, status) in [
        (vec![("Host", Some(evil.as_str()))], 421),
        (vec![("Host", Some("localhost:1"))], 421),
        (vec![("Host", None)], 421),
        (vec![("Origin", Some("http://localhost"))], 403),
        (vec![("Origin", Some("null"))], 403),
        (vec![("Sec-Fetch-Site", Some("cross-site"))], 403),
        (vec![("Content-Type", Some("text/plain"))], 415),
        (vec![("Content-Type", None)], 415),
    ] {
        let r = request(&s, "POST", "/v1/decide", &p, &headers);
        assert_eq!(r.status, status, "{headers:?}: {}", r.body);
    }
    // the names of this server are accepted, with or without the port
    let local = format!("127.0.0.1:{port}");
    let ok = [("Host", Some(local.as_str()))];
    assert_eq!(request(&s, "GET", "/v1/health", "", &ok).status, 200);
    // an empty body: a 400 in words about the request, not about lines
    // (#40, item 20), and nothing decided
    for empty in ["", " \n"] {
        let r = request(&s, "POST", "/v1/decide", empty, &[]);
        assert_eq!(r.status, 400, "{}", r.body);
        let e = r.body["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("the request's body is empty") && !e.contains("line"),
            "{e}"
        );
    }
    assert!(
        receipts(&s, "last=10").is_empty(),
        "nothing refused was decided"
    );

    // behind a proxy: its Host, and only it
    let w2 = TestWorld::new();
    let s2 = start(
        &w2,
        &w2.emma(),
        "127.0.0.1:0",
        &["--allowed-host", "gw.example.com"],
    );
    let proxied = [("Host", Some("gw.example.com"))];
    assert_eq!(request(&s2, "GET", "/v1/health", "", &proxied).status, 200);
    assert_eq!(get(&s2, "/v1/health").status, 421);
}

// ---- issue #21: tenants, floods, fallbacks ------------------------------

pub(crate) const EMMA_TOKEN: &str = "emma-tenant-token-0123456789";
pub(crate) const NOAH_TOKEN: &str = "noah-tenant-token-0123456789";
pub(crate) const OPS_TOKEN: &str = "operator-token-0123456789ab";

/// Replaces the server's token file (a rename: the server reads it again
/// at the next request).
pub(crate) fn rewrite_tokens(s: &Server, text: &str) {
    let tmp = s.token_file.with_extension("new");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, &s.token_file).unwrap();
}

pub(crate) fn as_token(s: &Server, token: &str, method: &str, path: &str, body: &str) -> Resp {
    let auth = format!("Bearer {token}");
    request(s, method, path, body, &[("Authorization", Some(&auth))])
}

/// A distinct PENDING (a password change needs a step-up) under `mandate`.
pub(crate) fn pending_for(s: &Server, token: &str, mandate: &Value, i: usize) -> String {
    let p = json!({"action": "user.update_password",
        "args": {"new_password": format!("a long new password {i}")}});
    let body = json!({"proposal": p, "mandate": mandate}).to_string();
    let d = as_token(s, token, "POST", "/v1/decide", &body).body;
    assert_eq!(d["decision"], "PENDING", "{d}");
    d["operation_hash"].as_str().unwrap().to_string()
}

pub(crate) fn listed(s: &Server, token: &str, query: &str) -> Vec<String> {
    let r = as_token(s, token, "GET", &format!("/v1/approvals{query}"), "");
    assert_eq!(r.status, 200, "{}", r.body);
    r.body["operations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["operation_hash"].as_str().unwrap().to_string())
        .collect()
}

/// Issue #21, item 4: one bearer token showed every tenant's operations
/// and receipts and decided for any mandate. Now each token is bound to
/// its tenants: emma's token cannot decide for noah's mandate (a DENY at
/// authn, with a receipt noah's side sees), nor list, read, approve or
/// decline noah's operations; an operator's (`*`) sees both.
#[test]
fn a_tenants_token_cannot_see_decide_or_approve_anothers() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    rewrite_tokens(
        &s,
        &format!("{EMMA_TOKEN} emma\n{NOAH_TOKEN} noah\n{OPS_TOKEN} *\n"),
    );
    // the old single token is gone with the file it was in
    assert_eq!(get(&s, "/v1/approvals").status, 401);
    let emma_m = w.emma();
    let noah_m = w.mandate(MandateSpec::bank("noah"));
    let op_e = pending_for(&s, EMMA_TOKEN, &emma_m, 1);
    let op_n = pending_for(&s, NOAH_TOKEN, &noah_m, 2);
    // emma's token deciding with noah's mandate: a DENY, with its receipt
    let p = json!({"action": "user.update_password",
        "args": {"new_password": "a long new password 3"}});
    let body = json!({"proposal": p, "mandate": noah_m}).to_string();
    let d = as_token(&s, EMMA_TOKEN, "POST", "/v1/decide", &body).body;
    assert_eq!(d["decision"], "DENY", "{d}");
    assert_eq!(d["stage"], "authn", "{d}");
    assert!(
        d["reason"]
            .as_str()
            .unwrap()
            .contains("not for the mandate's owner `noah`"),
        "{d}"
    );
    let denied_seq = d["receipt"]["seq"].clone();
    assert!(denied_seq.is_u64(), "{d}");
    // listings: each tenant its own; `for=` does not widen them
    assert_eq!(listed(&s, EMMA_TOKEN, ""), vec![op_e.clone()]);
    assert_eq!(listed(&s, EMMA_TOKEN, "?for=noah"), Vec::<String>::new());
    assert_eq!(listed(&s, NOAH_TOKEN, ""), vec![op_n.clone()]);
    let all = listed(&s, OPS_TOKEN, "");
    assert!(all.contains(&op_e) && all.contains(&op_n), "{all:?}");
    // receipts: only the tenant's own, and where the page's scan ended
    let owners = |token: &str| -> (Vec<Value>, Vec<Value>) {
        let r = as_token(&s, token, "GET", "/v1/receipts?last=100", "");
        assert_eq!(r.status, 200, "{}", r.body);
        let rs = r.body.as_array().unwrap().clone();
        if token != OPS_TOKEN {
            assert!(r.headers.contains("ipc-scanned-through: "), "{}", r.headers);
        }
        (
            rs.iter()
                .map(|x| x["body"]["mandate"]["owner"].clone())
                .collect(),
            rs.iter().map(|x| x["seq"].clone()).collect(),
        )
    };
    let (o, seqs) = owners(EMMA_TOKEN);
    assert!(!o.is_empty() && o.iter().all(|x| x == "emma"), "{o:?}");
    assert!(
        !seqs.contains(&denied_seq),
        "emma's side tried; the mandate is noah's"
    );
    let (o, seqs) = owners(NOAH_TOKEN);
    assert!(!o.is_empty() && o.iter().all(|x| x == "noah"), "{o:?}");
    assert!(
        seqs.contains(&denied_seq),
        "noah's side sees the try on its mandate"
    );
    let (o, _) = owners(OPS_TOKEN);
    assert!(o.contains(&json!("emma")) && o.contains(&json!("noah")));
    // approving or declining noah's operation with emma's token: unknown
    // to it (even signed by noah, its user), and nothing recorded
    let approval = w.approve("noah", &op_n).to_string();
    let r = as_token(&s, EMMA_TOKEN, "POST", "/v1/approvals", &approval);
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(r.body["code"], "ipc::approvals::unknown");
    let decline = w.decline("noah", &op_n).to_string();
    let r = as_token(&s, EMMA_TOKEN, "POST", "/v1/approvals/decline", &decline);
    assert_eq!(r.status, 404, "{}", r.body);
    let r = as_token(&s, NOAH_TOKEN, "GET", "/v1/approvals", "");
    assert!(
        r.body["operations"][0]["approvals"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert!(
        r.body["operations"][0]["declined_by"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // noah's own token may
    let r = as_token(&s, NOAH_TOKEN, "POST", "/v1/approvals", &approval);
    assert_eq!(r.status, 200, "{}", r.body);
    // the approval's receipt is noah's tenant's, not emma's
    let (_, seqs) = owners(EMMA_TOKEN);
    assert!(!seqs.contains(&r.body["receipt"]["seq"]));
    let rs = as_token(&s, NOAH_TOKEN, "GET", "/v1/receipts?last=1", "").body;
    assert_eq!(rs[0]["body"]["kind"], "approval");
    assert_eq!(rs[0]["body"]["owner"], "noah");
    // the counters are every tenant's: an operator's
    assert_eq!(as_token(&s, EMMA_TOKEN, "GET", "/metrics", "").status, 403);
    assert_eq!(as_token(&s, OPS_TOKEN, "GET", "/metrics", "").status, 200);
    // a token in the file, bound to no tenant it names, decides nothing
    rewrite_tokens(&s, &format!("{EMMA_TOKEN} acme\n{OPS_TOKEN} *\n"));
    assert!(listed(&s, EMMA_TOKEN, "").is_empty());
    let body = json!({"proposal": p, "mandate": emma_m}).to_string();
    let d = as_token(&s, EMMA_TOKEN, "POST", "/v1/decide", &body).body;
    assert_eq!(
        (d["decision"].clone(), d["stage"].clone()),
        (json!("DENY"), json!("authn"))
    );
    // a file that cannot be read as tokens refuses everyone (fail closed)
    rewrite_tokens(&s, &format!("{EMMA_TOKEN}\n{OPS_TOKEN} *\n"));
    assert_eq!(as_token(&s, OPS_TOKEN, "GET", "/v1/health", "").status, 401);
}

/// Issue #21, item 4: the pending index was one list of 1,000, so one
/// agent's 1,000 PENDING proposals pushed another tenant's waiting
/// operation out of its approvers' listing. Now each tenant has its own,
/// and one mandate at most `MAX_PER_MANDATE` of its tenant's: a flood of
/// 1,050 PENDING from one mandate pushes out neither noah's operation nor
/// one of another of emma's mandates. (The operator's single token of the
/// old file format reads every tenant's.)
#[test]
fn a_flood_of_pending_from_one_mandate_hides_no_other_operation() {
    use intentplane::gateway::pending::{MAX_PER_MANDATE, MAX_PER_TENANT};
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let noah_m = w.mandate(MandateSpec::bank("noah"));
    let op_n = pending_for(&s, TOKEN, &noah_m, 0);
    let other = w.emma();
    let op_other = pending_for(&s, TOKEN, &other, 1);
    let flooding = w.emma();
    for i in 0..MAX_PER_TENANT + 50 {
        pending_for(&s, TOKEN, &flooding, 10 + i);
    }
    let all = listed(&s, TOKEN, "");
    assert!(all.contains(&op_n), "noah's operation was pushed out");
    assert!(all.contains(&op_other), "another mandate's was pushed out");
    assert_eq!(all.len(), 2 + MAX_PER_MANDATE, "the flood keeps its newest");
    assert_eq!(listed(&s, TOKEN, "?for=noah"), vec![op_n.clone()]);
}

/// Issue #21, item 6: 4,096 unauthenticated challenges in 0.7 s locked
/// every approver out (503) for two minutes. Now a flood in other names
/// (known approvers and not) and in emma's own name, from the address she
/// signs in from too, neither refuses her a challenge nor pushes out the
/// one she holds: she signs in.
#[test]
fn a_flood_of_challenges_does_not_lock_an_approver_out() {
    let w = TestWorld::new();
    let s = start(&w, &w.emma(), "127.0.0.1:0", &[]);
    let no_token = [("Authorization", None)];
    let ask = |who: &str| {
        let r = request(
            &s,
            "POST",
            "/v1/approver/challenge",
            &json!({"approver": who}).to_string(),
            &no_token,
        );
        assert_eq!(r.status, 200, "{who}: {}", r.body);
        r.body["challenge"].as_str().unwrap().to_string()
    };
    let names = ["cfo", "noah", "clerk", "maria", "nobody", "x"];
    let flood = |n: usize| {
        for i in 0..n {
            ask(names[i % names.len()]);
        }
    };
    flood(100);
    let mine = ask("emma");
    flood(4096);
    let login = json!({"approver": "emma", "challenge": mine,
        "origin": "http://localhost", "purpose": "ipc approver login"});
    let sig = w
        .key("emma")
        .sign(intentplane::canonical::to_jcs(&login).unwrap().as_bytes());
    let body = json!({"login": login, "signature": sig}).to_string();
    let r = request(&s, "POST", "/v1/approver/session", &body, &no_token);
    assert_eq!(r.status, 200, "{}", r.body);
    // and after it, a fresh sign-in works as well
    assert!(sign_in(&s, "emma", w.key("emma"), "http://localhost").is_ok());
}
