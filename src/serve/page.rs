//! The approval page: a small web page (HTML, JS and CSS compiled into the
//! binary) where an approver signs in with their own Ed25519 key, sees the
//! operations they may approve as a person reads them, and approves or
//! declines. Every signature is made in the browser (WebCrypto); the
//! secret key never reaches the server.
//!
//! Sign-in: `POST /v1/approver/challenge {"approver"}` returns a random
//! single-use challenge (two minutes); the page signs the JCS of a
//! [`Login`] (approver, challenge, the page's origin, a fixed purpose) and
//! `POST /v1/approver/session` checks it against the world's key for that
//! approver, and returns a session token (fifteen minutes) the page keeps
//! in memory and sends as `Authorization: Approver TOKEN`. No cookie: a
//! browser never sends the token by itself, so no cross-site request can
//! use it. A session reads and acts only on the operations its approver
//! may approve ([`PendingOp::approvable_by`]), and an approval or decline
//! it submits must be signed by that same approver.
//!
//! These routes, and only they, accept a browser's requests from this
//! server's own origin (their router's guard); the agent host's bearer
//! token is neither needed nor accepted for them.

use super::common::{
    Route, build, coded_error, decline_signed, error, json_body, json_ok, read_json, read_store,
    submit_signed,
};
pub(crate) use super::listen::Peer;
use super::signin::{CHALLENGE_TTL, LOGIN_PURPOSE, SESSION_TTL, SignedLogin};
pub(super) use super::signin::{Page, signed_in};
use crate::gateway::approval::{SignedApproval, SignedDecline};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{Next, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

const INDEX_HTML: &str = include_str!("page/index.html");
const APP_JS: &str = include_str!("page/app.js");
const APP_CSS: &str = include_str!("page/app.css");

/// Nothing but this server's own script, style and requests; no frames,
/// forms, plugins, inline code or other origins.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The page's routes.
pub(super) fn routes() -> Vec<Route<Page>> {
    vec![
        Route::get("/approve", index),
        Route::get("/approve/app.js", app_js),
        Route::get("/approve/app.css", app_css),
        Route::get("/favicon.ico", favicon),
        Route::post("/v1/approver/challenge", challenge),
        Route::post("/v1/approver/session", session),
        Route::get("/v1/approver/operations", operations),
        Route::post("/v1/approver/approve", approve),
        Route::post("/v1/approver/decline", decline),
        Route::post("/v1/approver/logout", logout),
        Route::get("/v1/approver/mandates", super::mandates::waiting),
        Route::post("/v1/approver/mandates/confirm", super::mandates::confirm),
        Route::post("/v1/approver/mandates/decline", super::mandates::decline),
    ]
}

/// The page's router behind its check.
pub(super) fn router(page: Page) -> Router {
    build(routes())
        .method_not_allowed_fallback(super::api::method_not_allowed)
        .layer(from_fn_with_state(page.clone(), guard))
        .with_state(page)
}

/// The approval page: only this server's own origin; the approver's
/// session (checked by each route) is the identity, not the bearer token.
async fn guard(State(st): State<Page>, req: Request, next: Next) -> Response {
    if !same_origin(req.headers()) {
        st.metrics.refused("origin");
        return error(
            StatusCode::FORBIDDEN,
            "the approval page's routes answer only this server's own page",
        );
    }
    json_body(&st, req, next).await
}

/// The origin this request's page has: its `Origin` header (the guard
/// checked that it is this server's), else `http://HOST`.
fn origin(h: &HeaderMap) -> String {
    if let Some(o) = h.get(header::ORIGIN).and_then(|v| v.to_str().ok()) {
        return o.to_string();
    }
    let host = h
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    format!("http://{host}")
}

/// Whether a browser request comes from this server's own page: no
/// `Origin` or one naming the `Host` it was sent to (which the guard
/// checked against the served names), and no cross-site fetch metadata.
fn same_origin(h: &HeaderMap) -> bool {
    let site_ok = h
        .get("sec-fetch-site")
        .is_none_or(|v| v.as_bytes() == b"none" || v.as_bytes() == b"same-origin");
    let origin_ok = match h.get(header::ORIGIN).map(|v| v.to_str()) {
        None => true,
        Some(Err(_)) => false,
        Some(Ok(o)) => {
            let host = h
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            !host.is_empty()
                && ["http://", "https://"].iter().any(|scheme| {
                    o.len() == scheme.len() + host.len()
                        && o[..scheme.len()].eq_ignore_ascii_case(scheme)
                        && o[scheme.len()..].eq_ignore_ascii_case(host)
                })
        }
    };
    site_ok && origin_ok
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

/// `GET /favicon.ico`: no icon (204). A browser asks for it on every
/// load of the page; left to the API's router it was a 403 counted as a
/// refused `origin`, the counter an operator alerts on.
async fn favicon() -> Response {
    let mut r = StatusCode::NO_CONTENT.into_response();
    let h = r.headers_mut();
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=86400"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// `POST /v1/approver/challenge {"approver"}`: a challenge to sign.
async fn challenge(
    State(st): State<Page>,
    peer: Option<axum::Extension<Peer>>,
    body: Body,
) -> Response {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Ask {
        approver: String,
    }
    let ask: Ask = match read_json(&st, body).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let known = st.gw.world().approvers.contains_key(&ask.approver);
    let peer = peer.map_or(Peer(None), |p| p.0);
    match st.sessions.challenge(&ask.approver, known, peer) {
        Ok(c) => json_ok(
            &st,
            &json!({"challenge": c, "purpose": LOGIN_PURPOSE,
                "expires_in": CHALLENGE_TTL.as_secs()}),
        ),
        Err(e) => coded_error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    }
}

/// `POST /v1/approver/session {"login", "signature"}`: a session for the
/// approver whose key signed the challenge.
async fn session(State(st): State<Page>, headers: HeaderMap, body: Body) -> Response {
    let s: SignedLogin = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    let l = &s.login;
    let refused = |why: &str| {
        st.metrics.refused("approver_login");
        error(StatusCode::UNAUTHORIZED, format!("sign-in refused: {why}"))
    };
    if l.purpose != LOGIN_PURPOSE {
        return refused(&format!("the purpose is `{LOGIN_PURPOSE}`"));
    }
    if l.origin != origin(&headers) {
        return refused("the signed origin is not this page's");
    }
    // used up whatever follows: one signature attempt per challenge
    if st.sessions.take_challenge(&l.challenge).as_deref() != Some(l.approver.as_str()) {
        return refused("unknown or expired challenge (ask for a new one)");
    }
    let Some(approver) = st.gw.world().approvers.get(&l.approver) else {
        return refused("not an approver of this gateway");
    };
    let Ok(msg) = crate::canonical::to_jcs(l) else {
        return refused("the login cannot be encoded");
    };
    if approver.key.verify(msg.as_bytes(), &s.signature).is_err() {
        return refused("the signature is not by this approver's key");
    }
    match st.sessions.open(&l.approver) {
        Ok(Some(token)) => json_ok(
            &st,
            &json!({"session": token, "approver": l.approver,
                "expires_in": SESSION_TTL.as_secs()}),
        ),
        Ok(None) => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many sessions at once: try again later",
        ),
        Err(e) => coded_error(StatusCode::INTERNAL_SERVER_ERROR, &e),
    }
}

/// `GET /v1/approver/operations`: the operations the signed-in approver
/// may approve (waiting, and those declined or expired), as the page shows
/// them; none of anyone else's.
async fn operations(State(st): State<Page>, headers: HeaderMap) -> Response {
    let who = match signed_in(&st, &headers) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    read_store(&st, "the approvals", move |gw| {
        let now = gw.now()?;
        let which = crate::gateway::approving::Which {
            tenants: &crate::gateway::Tenants::All,
            all: true,
            for_whom: Some(&who),
        };
        let mut shown: Vec<serde_json::Value> = vec![];
        for (op, status) in gw.pending_listing(&which)? {
            // the one rendering (`gateway::render`), as JSON: the page
            // puts each of its texts into the document as text
            let view = crate::gateway::render::show(gw, &op, now)?;
            let mut v = serde_json::to_value(&view).unwrap_or(serde_json::Value::Null);
            v["status"] = json!(status);
            // the pack's own words for the action, the card's title
            v["description"] = json!(
                gw.actions
                    .get(&op.action)
                    .map(|a| crate::gateway::render::escape(&a.table.action.description))
                    .unwrap_or_default()
            );
            v["approvable"] = json!(view.refusal.is_none());
            shown.push(v);
        }
        // shadow mode said on the page: what is in it is not waiting here
        let shadow = &gw.world.shadow;
        Ok(json!({"approver": who, "now": now, "operations": shown,
            "shadow": {"tenants": shadow.tenants, "packs": shadow.packs}}))
    })
    .await
}

/// Refuses an act signed as someone other than the session's approver.
fn same_approver(st: &Page, session: &str, signed_as: &str) -> Result<(), Box<Response>> {
    if session == signed_as {
        return Ok(());
    }
    st.metrics.refused("approver_mismatch");
    Err(Box::new(error(
        StatusCode::FORBIDDEN,
        format!(
            "signed in as `{session}`: an approval or decline is signed as `{session}` too, not `{}`",
            crate::base::json::echo(signed_as)
        ),
    )))
}

/// `POST /v1/approver/approve`: the signed-in approver's signed approval.
async fn approve(State(st): State<Page>, headers: HeaderMap, body: Body) -> Response {
    let who = match signed_in(&st, &headers) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let signed: SignedApproval = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(r) = same_approver(&st, &who, &signed.approval.approver) {
        return *r;
    }
    submit_signed(&st, signed, &all()).await
}

/// `POST /v1/approver/decline`: the signed-in approver's signed decline.
async fn decline(State(st): State<Page>, headers: HeaderMap, body: Body) -> Response {
    let who = match signed_in(&st, &headers) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let signed: SignedDecline = match read_json(&st, body).await {
        Ok(s) => s,
        Err(r) => return r,
    };
    if let Err(r) = same_approver(&st, &who, &signed.decline.approver) {
        return *r;
    }
    decline_signed(&st, signed, &all()).await
}

/// The session is the identity on the page: its approver acts only on
/// what [`PendingOp::approvable_by`] lets them, whatever tenant.
fn all() -> std::sync::Arc<crate::gateway::Tenants> {
    std::sync::Arc::new(crate::gateway::Tenants::All)
}

/// `POST /v1/approver/logout`: ends the session.
async fn logout(State(st): State<Page>, headers: HeaderMap) -> Response {
    if let Some((_, t)) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
    {
        st.sessions.close(t.trim());
    }
    json_ok(&st, &json!({"ok": true}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::pending::PendingOp;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    /// Every field of a child as shown (`render_child.rs`, which renders
    /// every field of the signed mandate) is on the page: a field added to
    /// the rendering and left off the page fails here.
    #[test]
    fn the_page_shows_every_field_of_a_shown_child() {
        use crate::gateway::testkit::{LANDLORD, TestWorld};
        let tw = TestWorld::new();
        let gw = tw.gateway();
        let parent = serde_json::from_value(tw.emma()).unwrap();
        let req = crate::gateway::ChildRequest {
            claims: vec![("payee".into(), serde_json::json!(LANDLORD))],
            ..Default::default()
        };
        let shown = serde_json::to_value(gw.draft_child(&parent, &req).unwrap().shown).unwrap();
        let fields = |v: &serde_json::Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect()
        };
        // `expires_at` is `expires`, the same time in words
        for k in fields(&shown).iter().filter(|k| *k != "expires_at") {
            assert!(
                APP_JS.contains(&format!("s.{k}")),
                "the page leaves out `{k}`"
            );
        }
        for k in fields(&shown["sources"][0]) {
            assert!(
                APP_JS.contains(&format!("g.{k}")),
                "the page leaves out `sources.{k}`"
            );
        }
    }

    #[test]
    fn only_this_servers_origin_is_same_origin() {
        let host = ("host", "127.0.0.1:8787");
        assert!(same_origin(&headers(&[host])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "http://127.0.0.1:8787"),
            ("sec-fetch-site", "same-origin")
        ])));
        assert!(same_origin(&headers(&[
            host,
            ("origin", "https://127.0.0.1:8787")
        ])));
        for bad in [
            vec![host, ("origin", "http://127.0.0.1:8788")],
            vec![host, ("origin", "http://evil.example.com")],
            vec![host, ("origin", "http://127.0.0.1:8787.evil.example.com")],
            vec![host, ("origin", "null")],
            vec![host, ("origin", "ftp://127.0.0.1:8787")],
            vec![("origin", "http://")],
            vec![host, ("sec-fetch-site", "cross-site")],
            vec![host, ("sec-fetch-site", "same-site")],
        ] {
            assert!(!same_origin(&headers(&bad)), "{bad:?}");
        }
    }

    #[test]
    fn the_listing_is_scoped_to_the_owner_and_role() {
        let w = crate::gateway::testkit::TestWorld::new();
        let world = w.world();
        let op = PendingOp {
            operation_hash: "sha256:00".into(),
            pack: "ap".into(),
            action: "vendor.change_iban".into(),
            mandate: "m".into(),
            user: "clerk".into(),
            owner: "acme".into(),
            resolved: Default::default(),
            origins: Default::default(),
            new_values: vec![],
            level: 2,
            reason: String::new(),
            policies: vec![],
            approve_by: String::new(),
            roles: vec!["treasury".into()],
            created_at: 0,
            expires_at: 1,
            declined_by: vec![],
            declined_until: None,
            approvals: vec![],
            approval_receipts: Default::default(),
        };
        assert!(op.approvable_by(&world, "clerk"));
        assert!(op.approvable_by(&world, "cfo"));
        // noah holds the role, at another tenant; emma is no one here
        assert!(!op.approvable_by(&world, "noah"));
        assert!(!op.approvable_by(&world, "emma"));
    }
}
