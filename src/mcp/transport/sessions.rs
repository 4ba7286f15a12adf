//! `ipc mcp --listen`: each MCP session belongs to the credential that
//! opened it. Every client passes the same gate (a token acting for the
//! session's owner), so the gate alone would let one client use another's
//! `Mcp-Session-Id`: answer the questions asked of it (a step-up accepted
//! or declined in its name), read its stream, close it. Here the session
//! id rmcp draws on `initialize` is bound to the hash of the request's
//! `Authorization` header; a request on that session with another
//! credential (compared in constant time) is answered as an unknown
//! session, as rmcp answers one (a 404), before rmcp sees it.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;

/// The header that names an MCP session.
const SESSION_ID: &str = "mcp-session-id";

/// How many bindings are kept before those of sessions rmcp no longer
/// holds are dropped.
const PRUNE_AT: usize = 256;

/// The hash of a credential (the whole `Authorization` header).
type Credential = [u8; 32];

/// Which credential opened each session.
pub struct Sessions {
    owners: Mutex<HashMap<String, Credential>>,
    /// rmcp's sessions: a binding whose session it dropped is dropped.
    manager: Arc<LocalSessionManager>,
}

impl Sessions {
    pub fn new(manager: Arc<LocalSessionManager>) -> Sessions {
        Sessions {
            owners: Mutex::default(),
            manager,
        }
    }

    /// Whether `who` opened the session `id` (an unknown session is no
    /// one's; a poisoned state, no one's either).
    fn owned_by(&self, id: &str, who: &Credential) -> bool {
        let Ok(owners) = self.owners.lock() else {
            return false;
        };
        owners
            .get(id)
            .is_some_and(|owner| bool::from(owner.ct_eq(who)))
    }

    async fn bind(&self, id: String, who: Credential) {
        let full = self.owners.lock().map_or(0, |o| o.len()) >= PRUNE_AT;
        let live: Option<HashSet<String>> = if full {
            let sessions = self.manager.sessions.read().await;
            Some(sessions.keys().map(|k| k.to_string()).collect())
        } else {
            None
        };
        if let Ok(mut owners) = self.owners.lock() {
            if let Some(live) = live {
                owners.retain(|k, _| live.contains(k));
            }
            owners.insert(id, who);
        }
    }

    fn forget(&self, id: &str) {
        if let Ok(mut owners) = self.owners.lock() {
            owners.remove(id);
        }
    }
}

fn credential(headers: &HeaderMap) -> Credential {
    let auth = headers
        .get(header::AUTHORIZATION)
        .map_or(&[][..], |v| v.as_bytes());
    Sha256::digest(auth).into()
}

fn session_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// What rmcp answers for a session it does not hold.
fn unknown_session() -> Response {
    (StatusCode::NOT_FOUND, "Not Found: Session not found").into_response()
}

/// The layer: a request on a session goes on only with the credential
/// that opened it; a session opened here is bound to its credential; a
/// session closed here is forgotten.
pub async fn bound(State(s): State<Arc<Sessions>>, req: Request, next: Next) -> Response {
    let who = credential(req.headers());
    match session_of(req.headers()) {
        Some(id) => {
            if !s.owned_by(&id, &who) {
                return unknown_session();
            }
            let closing = req.method() == Method::DELETE;
            let response = next.run(req).await;
            if closing && response.status().is_success() {
                s.forget(&id);
            }
            response
        }
        None => {
            let response = next.run(req).await;
            if let Some(id) = session_of(response.headers()) {
                s.bind(id, who).await;
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Sessions, credential};
    use axum::http::{HeaderMap, HeaderValue, header};
    use std::sync::Arc;

    fn bearer(t: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {t}")).unwrap(),
        );
        h
    }

    /// A session is its opener's: another credential, none, or a session
    /// never opened is refused; a closed one is forgotten.
    #[tokio::test]
    async fn a_session_belongs_to_the_credential_that_opened_it() {
        let s = Sessions::new(Arc::default());
        let (a, b) = (
            credential(&bearer("token-a")),
            credential(&bearer("token-b")),
        );
        s.bind("sid-1".into(), a).await;
        assert!(s.owned_by("sid-1", &a));
        assert!(!s.owned_by("sid-1", &b));
        assert!(!s.owned_by("sid-1", &credential(&HeaderMap::new())));
        assert!(!s.owned_by("sid-2", &a));
        s.forget("sid-1");
        assert!(!s.owned_by("sid-1", &a));
    }

    /// Bindings of sessions rmcp no longer holds are dropped once many.
    #[tokio::test]
    async fn bindings_of_dropped_sessions_are_pruned() {
        let s = Sessions::new(Arc::default());
        let a = credential(&bearer("token-a"));
        for i in 0..=super::PRUNE_AT {
            s.bind(format!("sid-{i}"), a).await;
        }
        assert!(s.owners.lock().unwrap().len() <= 1);
        assert!(s.owned_by(&format!("sid-{}", super::PRUNE_AT), &a));
    }
}
