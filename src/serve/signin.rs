//! The approver's sign-in on the approval page: single-use challenges,
//! the login message their key signs, and the sessions that follow
//! (`Authorization: Approver TOKEN`), held in the page's state. The page's
//! routes (`page`) and the child-mandate routes (`mandates`) both read a
//! session through [`signed_in`]; neither imports the other for it.

use super::common::{AppState, Shared, error};
use super::listen::Peer;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::Response;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a login signature is for: a login message is never an approval
/// (its fields differ, and approvals refuse unknown fields).
pub(crate) const LOGIN_PURPOSE: &str = "ipc approver login";
pub(super) const CHALLENGE_TTL: Duration = Duration::from_secs(120);
pub(super) const SESSION_TTL: Duration = Duration::from_secs(900);
/// Most challenges, and most sessions, held at once (expired ones are
/// dropped first): a flood of sign-ins costs bounded memory.
pub(super) const MAX_HELD: usize = 4096;

/// What the approver's key signs to sign in (the JCS of it).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Login {
    pub approver: String,
    pub challenge: String,
    /// The page's origin (`location.origin`): a signature made for a page
    /// on another origin does not sign in here.
    pub origin: String,
    pub purpose: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SignedLogin {
    pub(super) login: Login,
    pub(super) signature: String,
}

/// Outstanding challenges one client address holds for one approver
/// name, and in all; past a bound the client's own oldest is evicted.
pub(super) const PER_NAME: usize = 4;
pub(super) const PER_ADDRESS: usize = 32;

pub(super) struct Challenge {
    approver: String,
    peer: Peer,
    /// Order of issue (the oldest has the smallest).
    seq: u64,
    until: Instant,
}

/// The outstanding challenges, bounded per approver name and client
/// address, per address and in all, so that no flood of sign-ins pushes
/// out the challenge of an approver signing in from elsewhere. Every
/// operation is logarithmic but the one evicting when all are held
/// (linear in the addresses): a flood costs the lock little.
#[derive(Default)]
pub(super) struct Challenges {
    held: HashMap<String, Challenge>,
    /// By order of issue, which is the order of expiry (one TTL).
    order: BTreeMap<u64, String>,
    /// Per address, its challenges by order of issue.
    by_peer: HashMap<Peer, BTreeMap<u64, String>>,
    next: u64,
}

impl Challenges {
    /// Holds `c` for `approver`, asked from `peer`. The expired go first;
    /// then, past a bound, the client's own oldest: of those it holds for
    /// that name ([`PER_NAME`]), of those it holds in all
    /// ([`PER_ADDRESS`]); and when [`MAX_HELD`] are held, the oldest of the
    /// address holding the most. A client that floods pushes out its own
    /// challenges: another's only once every address holds as few as that
    /// one, so an approver asking from an address of their own keeps theirs
    /// unless the flood comes from thousands of addresses (or, behind a
    /// proxy, from the same one).
    ///
    /// No bound counts one name across addresses: anyone may ask in any
    /// name, and such a bound would let them push out the approver's own.
    fn hold(&mut self, c: String, approver: &str, peer: Peer, now: Instant) {
        while let Some((_, k)) = self.order.first_key_value() {
            if self.held.get(k).is_some_and(|h| h.until > now) {
                break;
            }
            let k = k.clone();
            self.take(&k);
        }
        let own: Vec<&String> = self
            .by_peer
            .get(&peer)
            .map(|m| {
                m.values()
                    .filter(|k| self.held.get(*k).is_some_and(|h| h.approver == approver))
                    .collect()
            })
            .unwrap_or_default();
        if own.len() >= PER_NAME
            && let Some(k) = own.first().map(|k| (*k).clone())
        {
            self.take(&k);
        }
        let first_of = |m: &BTreeMap<u64, String>| m.first_key_value().map(|(_, k)| k.clone());
        if let Some(m) = self.by_peer.get(&peer)
            && m.len() >= PER_ADDRESS
            && let Some(k) = first_of(m)
        {
            self.take(&k);
        }
        while self.held.len() >= MAX_HELD {
            // the address holding the most; of two, the one asking longest
            let heaviest = self
                .by_peer
                .values()
                .max_by_key(|m| (m.len(), std::cmp::Reverse(m.keys().next().copied())));
            let Some(k) = heaviest.and_then(first_of) else {
                break;
            };
            self.take(&k);
        }
        self.next += 1;
        let seq = self.next;
        self.order.insert(seq, c.clone());
        self.by_peer.entry(peer).or_default().insert(seq, c.clone());
        self.held.insert(
            c,
            Challenge {
                approver: approver.to_string(),
                peer,
                until: now + CHALLENGE_TTL,
                seq,
            },
        );
    }

    /// Removes a challenge (used, expired or evicted).
    fn take(&mut self, c: &str) -> Option<Challenge> {
        let h = self.held.remove(c)?;
        self.order.remove(&h.seq);
        if let Some(m) = self.by_peer.get_mut(&h.peer) {
            m.remove(&h.seq);
            if m.is_empty() {
                self.by_peer.remove(&h.peer);
            }
        }
        Some(h)
    }
}

/// Challenges and sessions, in memory (a restart signs everyone out).
#[derive(Default)]
pub(crate) struct Sessions {
    /// Challenge to the approver it was issued to, whence, until when.
    challenges: Mutex<Challenges>,
    /// SHA-256 of a session token to (approver, until).
    sessions: Mutex<HashMap<[u8; 32], (String, Instant)>>,
}

/// Inserts with expiry, dropping expired entries when full; `false` when
/// still full.
fn hold<K: std::hash::Hash + Eq>(
    m: &Mutex<HashMap<K, (String, Instant)>>,
    k: K,
    who: &str,
    ttl: Duration,
) -> bool {
    let now = Instant::now();
    let mut m = m.lock().unwrap_or_else(|e| e.into_inner());
    if m.len() >= MAX_HELD {
        m.retain(|_, (_, until)| *until > now);
    }
    if m.len() >= MAX_HELD {
        return false;
    }
    m.insert(k, (who.to_string(), now + ttl));
    true
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Sessions {
    /// A challenge for `approver`, asked from `peer`. One for a name that
    /// is no approver of this gateway (`known` false) is not held: it
    /// signs nobody in, and costs nothing.
    pub(super) fn challenge(
        &self,
        approver: &str,
        known: bool,
        peer: Peer,
    ) -> Result<String, crate::gateway::approval::RandomError> {
        let c = crate::gateway::approval::random_id()?;
        if known {
            let mut m = self.challenges.lock().unwrap_or_else(|e| e.into_inner());
            m.hold(c.clone(), approver, peer, Instant::now());
        }
        Ok(c)
    }

    /// The approver a challenge was issued to, if still valid; used up.
    pub(super) fn take_challenge(&self, c: &str) -> Option<String> {
        let mut m = self.challenges.lock().unwrap_or_else(|e| e.into_inner());
        m.take(c)
            .filter(|h| h.until > Instant::now())
            .map(|h| h.approver)
    }

    /// A session token for `approver` (256 bits from the OS), or `None`
    /// when too many are open; an error without randomness.
    pub(super) fn open(
        &self,
        approver: &str,
    ) -> Result<Option<String>, crate::gateway::approval::RandomError> {
        let token = format!(
            "{}{}",
            crate::gateway::approval::random_id()?,
            crate::gateway::approval::random_id()?
        );
        Ok(hold(&self.sessions, digest(&token), approver, SESSION_TTL).then_some(token))
    }

    fn approver(&self, token: &str) -> Option<String> {
        let m = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&digest(token))
            .filter(|(_, until)| *until > Instant::now())
            .map(|(who, _)| who.clone())
    }

    pub(super) fn close(&self, token: &str) {
        let mut m = self.sessions.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(&digest(token));
    }
}

/// The approval page's state: the service's, and the challenges and
/// approver sessions only this router reads.
#[derive(Clone)]
pub(super) struct Page {
    app: Shared,
    pub(super) sessions: Arc<Sessions>,
}

impl Page {
    pub(super) fn new(app: Shared) -> Page {
        Page {
            app,
            sessions: Arc::default(),
        }
    }
}

impl std::ops::Deref for Page {
    type Target = AppState;
    fn deref(&self) -> &AppState {
        &self.app
    }
}

/// The approver of a request's `Authorization: Approver TOKEN`, or the
/// 401 that says there is none.
pub(super) fn signed_in(st: &Page, h: &HeaderMap) -> Result<String, Box<Response>> {
    let token = h
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("approver"))
        .map(|(_, t)| t.trim());
    match token.and_then(|t| st.sessions.approver(t)) {
        Some(who) => Ok(who),
        None => {
            st.metrics.refused("approver_session");
            Err(Box::new(error(
                StatusCode::UNAUTHORIZED,
                "sign in first: `Authorization: Approver TOKEN` from `/v1/approver/session`",
            )))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const HERE: Peer = Peer(None);

    #[test]
    fn a_challenge_is_single_use_and_bound_to_its_approver() {
        let s = Sessions::default();
        let c = s.challenge("emma", true, HERE).unwrap();
        assert_eq!(s.take_challenge(&c).as_deref(), Some("emma"));
        assert_eq!(s.take_challenge(&c), None);
        // a name no approver has gets a challenge that is not held
        let c = s.challenge("nobody", false, HERE).unwrap();
        assert_eq!(s.take_challenge(&c), None);
        let t = s.open("emma").unwrap().unwrap();
        assert_eq!(s.approver(&t).as_deref(), Some("emma"));
        assert_eq!(s.approver("not-a-token"), None);
        s.close(&t);
        assert_eq!(s.approver(&t), None);
    }

    fn peer(i: u32) -> Peer {
        Peer::of(std::net::IpAddr::V4(std::net::Ipv4Addr::from(
            0x0a00_0000 + i,
        )))
    }

    /// Issue #21, item 6: 4,096 challenges asked in 0.7 s locked every
    /// approver out. Now a flood from other addresses, in other names and
    /// in the approver's own name, never pushes out the challenge of an
    /// approver who asked from an address of their own, nor stops a new
    /// one; and the memory held stays bounded.
    #[test]
    fn a_flood_of_challenges_does_not_lock_an_approver_out() {
        let s = Sessions::default();
        let emma_at = peer(1);
        let names = ["cfo", "noah", "clerk", "emma"];
        let flood = |n: u32| {
            for i in 0..n {
                let name = names[(i % 4) as usize];
                s.challenge(name, true, peer(100 + i % 300)).unwrap();
            }
        };
        flood(1000);
        let mine = s.challenge("emma", true, emma_at).unwrap();
        flood(4096);
        {
            let m = s.challenges.lock().unwrap();
            assert!(m.held.len() <= MAX_HELD);
            for h in m.held.values() {
                let same = |o: &&Challenge| o.peer == h.peer;
                assert!(m.held.values().filter(same).count() <= PER_ADDRESS);
                let pair = |o: &&Challenge| o.peer == h.peer && o.approver == h.approver;
                assert!(m.held.values().filter(pair).count() <= PER_NAME);
            }
        }
        assert_eq!(s.take_challenge(&mine).as_deref(), Some("emma"));
        // and after the flood, a new one is held too
        let again = s.challenge("emma", true, emma_at).unwrap();
        flood(4096);
        assert_eq!(s.take_challenge(&again).as_deref(), Some("emma"));
        // one address alone floods only itself (many names, one address)
        let lone = s.challenge("cfo", true, peer(2)).unwrap();
        for i in 0..4096 {
            s.challenge(names[i % 4], true, peer(3)).unwrap();
        }
        let m = s.challenges.lock().unwrap();
        assert!(m.held.values().filter(|h| h.peer == peer(3)).count() <= PER_ADDRESS);
        drop(m);
        assert_eq!(s.take_challenge(&lone).as_deref(), Some("cfo"));
        // all held: a flood from 200 addresses (32 each, to the brim)
        // pushes out its own, never the approver's single one
        let mine = s.challenge("emma", true, emma_at).unwrap();
        for i in 0..(MAX_HELD as u32 + 2000) {
            let name = format!("approver-{}", i % 64);
            s.challenge(&name, true, peer(1000 + i % 200)).unwrap();
        }
        {
            let m = s.challenges.lock().unwrap();
            assert_eq!(m.held.len(), MAX_HELD);
            assert_eq!(m.order.len(), MAX_HELD);
            assert_eq!(
                m.by_peer.values().map(BTreeMap::len).sum::<usize>(),
                MAX_HELD
            );
        }
        assert_eq!(s.take_challenge(&mine).as_deref(), Some("emma"));
    }

    /// An IPv6 client is bounded by its /64, and IPv4-mapped is IPv4.
    #[test]
    fn peers_are_grouped_by_host() {
        let a: std::net::IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: std::net::IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: std::net::IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(Peer::of(a), Peer::of(b));
        assert_ne!(Peer::of(a), Peer::of(c));
        let m: std::net::IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(Peer::of(m), peer(1));
    }

    /// Sessions stay bounded too.
    #[test]
    fn a_flood_of_sessions_is_bounded() {
        let s = Sessions::default();
        let held: Vec<String> = (0..MAX_HELD)
            .filter_map(|_| s.open("emma").unwrap())
            .collect();
        assert_eq!(held.len(), MAX_HELD);
        assert_eq!(s.open("emma").unwrap(), None, "full of live sessions");
    }
}
