//! A parent token verified, and what a child would widen: the claims an
//! action reads beyond its sources, the registries that vouch for a claim,
//! the strictest narrowing within a parent.

use super::{ChildError, MAX_DEPTH, Verified, Widening};
use crate::base::json::echo;
use crate::bundle::format::TablePack;
use crate::canonical::to_jcs;
use crate::gateway::Gateway;
use crate::gateway::mandate::{Mandate, MandateToken};
use crate::gateway::registry::Registries;
use crate::ir::{Action, Expr, Key, Source};
use crate::store::{StoreError, Tx};
use serde_json::Value;
use std::sync::Arc;

pub(super) fn parent_err(reason: impl Into<String>) -> ChildError {
    ChildError::Parent {
        reason: reason.into(),
    }
}

/// Whether expression `e` reads claim `c`.
pub(super) fn reads_claim(e: &Expr, c: &str) -> bool {
    match e {
        Expr::Claim { name } | Expr::Selection { claim: name, .. } => name == c,
        Expr::Lookup { key, .. } => reads_claim(key, c),
        Expr::List { items } => items.iter().any(|i| reads_claim(i, c)),
        Expr::Not { expr } => reads_claim(expr, c),
        Expr::Binary { lhs, rhs, .. } => reads_claim(lhs, c) || reads_claim(rhs, c),
        Expr::Lit { .. } | Expr::Param { .. } | Expr::Fact { .. } | Expr::Now => false,
        Expr::Registry { .. } => false,
    }
}

pub(super) fn key_reads_claim(k: &Key, c: &str) -> bool {
    match k {
        Key::Claim { claim } => claim == c,
        Key::Param { .. } => false,
        Key::Lookup { lookup } => key_reads_claim(&lookup.key, c),
    }
}

/// Whether claim `c` is read anywhere but as a direct source of a
/// parameter: by a fact, or as the key of a lookup.
pub(super) fn read_beyond_sources(actions: &[&Action], c: &str) -> bool {
    actions.iter().any(|a| {
        a.facts.iter().any(|f| reads_claim(&f.expr, c))
            || a.params.iter().any(|p| {
                p.sources
                    .iter()
                    .any(|s| matches!(s, Source::Lookup(l) if key_reads_claim(&l.key, c)))
            })
    })
}

/// The owner's registries (never a global one) that the parent lets vouch
/// for every parameter claim `c` vouches for, per parameter: a value of
/// the claim is within the parent when, for every such parameter, one of
/// its registries holds it. `None`: the claim vouches for no parameter, or
/// is read elsewhere (a fact, a lookup key), so only the parent's own
/// values are within it.
pub(crate) fn registries_for<'a>(
    parent: &Mandate,
    pack: &'a TablePack,
    actions: &[&'a Action],
    c: &str,
) -> Option<Vec<Vec<&'a crate::ir::Registry>>> {
    if read_beyond_sources(actions, c) {
        return None;
    }
    let mut per_param = vec![];
    for (a, p) in crate::gateway::narrowing::vouched_by(actions, c) {
        let allowed = crate::gateway::narrowing::allowed(&parent.sources, &a.name, &p.name);
        let regs: Vec<&crate::ir::Registry> = p
            .sources
            .iter()
            .filter(|s| allowed.is_none_or(|l| l.contains(&s.to_string())))
            .filter_map(|s| match s {
                Source::Registry { registry } => {
                    pack.registries.iter().find(|r| &r.name == registry)
                }
                _ => None,
            })
            .filter(|r| !r.global)
            .collect();
        per_param.push(regs);
    }
    (!per_param.is_empty()).then_some(per_param)
}

/// A claim value as registries compare it.
pub(super) fn text_of(v: &Value) -> Option<&str> {
    v.as_str()
}

impl Gateway {
    /// The pack of this bundle named `name`, and its actions.
    pub(super) fn pack_of(&self, name: &str) -> Option<(&TablePack, Vec<&Action>)> {
        let pack = self
            .actions
            .values()
            .find(|a| a.pack.name == name)
            .map(|a| &a.pack)?;
        let actions = self
            .actions
            .values()
            .filter(|a| a.pack.name == name)
            .map(|a| &a.table.action)
            .collect();
        Some((pack, actions))
    }

    /// Verifies a token and its whole chain: each signature with a key of
    /// the world (an issuer key; for a child also its parent's user's key),
    /// each link naming the one before by id and hash, every mandate for a
    /// pack of this bundle with declared claims (made canonical) and a
    /// valid narrowing. Nothing here reads the store: expiry, revocation and
    /// narrowing against registries are the stages' (and
    /// [`Gateway::draft_child`]'s).
    pub fn verify_token(&self, token: &MandateToken) -> Result<Verified, String> {
        if token.ancestors.len() > MAX_DEPTH {
            return Err(format!(
                "the mandate carries {} ancestors, more than {MAX_DEPTH}",
                token.ancestors.len()
            ));
        }
        let n = token.ancestors.len();
        let mut links: Vec<Mandate> = Vec::with_capacity(n + 1);
        let mut prev: Option<(String, String)> = None;
        for (i, t) in token
            .ancestors
            .iter()
            .chain(std::iter::once(token))
            .enumerate()
        {
            if i < n && !t.ancestors.is_empty() {
                return Err("an ancestor token carries ancestors of its own".into());
            }
            let msg = to_jcs(&t.mandate).map_err(|e| e.to_string())?;
            let key = match self.world.mandate_keys.get(&t.key_id) {
                Some(k) => k,
                None => {
                    // a child may be signed by its parent's user
                    let user_key = links.last().and_then(|p| {
                        self.world
                            .approvers
                            .get(&p.user)
                            .filter(|a| a.key.id() == t.key_id && t.mandate.user == p.user)
                    });
                    match user_key {
                        Some(a) => &a.key,
                        None => {
                            return Err(format!(
                                "mandate `{}` signed by unknown key `{}`",
                                echo(&t.mandate.id),
                                t.key_id
                            ));
                        }
                    }
                }
            };
            key.verify(msg.as_bytes(), &t.signature).map_err(|_| {
                if i == n {
                    "invalid mandate signature".to_string()
                } else {
                    format!(
                        "invalid signature of the ancestor `{}`",
                        echo(&t.mandate.id)
                    )
                }
            })?;
            let hash = format!("sha256:{}", crate::canonical::sha256_hex(msg.as_bytes()));
            match (&prev, &t.mandate.parent) {
                (None, None) => {}
                (None, Some(p)) => {
                    return Err(format!(
                        "mandate `{}` names the parent `{}`, whose token it does not carry",
                        echo(&t.mandate.id),
                        echo(&p.id)
                    ));
                }
                (Some(_), None) => {
                    return Err(format!(
                        "mandate `{}` is carried as a child but names no parent",
                        echo(&t.mandate.id)
                    ));
                }
                (Some((id, h)), Some(p)) => {
                    if &p.id != id || &p.hash != h {
                        return Err(format!(
                            "mandate `{}` names the parent `{}` ({}), not the token it carries",
                            echo(&t.mandate.id),
                            echo(&p.id),
                            echo(&p.hash)
                        ));
                    }
                }
            }
            let mut m = t.mandate.clone();
            let Some((pack, actions)) = self.pack_of(&m.pack) else {
                return Err(format!(
                    "mandate for pack `{}`, which this gateway's bundle does not hold",
                    echo(&m.pack)
                ));
            };
            m.canonicalize_claims(pack)
                .map_err(|e| format!("invalid mandate: {e}"))?;
            if !m.sources.is_empty() {
                crate::gateway::narrowing::check(&m.sources, &m.pack, &actions)
                    .map_err(|e| format!("invalid mandate narrowing: {e}"))?;
            }
            prev = Some((m.id.clone(), hash));
            links.push(m);
        }
        let mandate = links.pop().ok_or("no mandate")?;
        Ok(Verified {
            mandate: Arc::new(mandate),
            ancestors: links.into(),
        })
    }

    /// What `child` asks for beyond `parent` (empty: it only narrows),
    /// reading the owner's registries inside `tx`.
    pub fn widenings(
        &self,
        tx: &mut dyn Tx,
        parent: &Mandate,
        child: &Mandate,
    ) -> Result<Vec<Widening>, StoreError> {
        let mut w = vec![];
        for (field, p, c) in [
            ("pack", &parent.pack, &child.pack),
            ("user", &parent.user, &child.user),
            ("owner", &parent.owner, &child.owner),
        ] {
            if p != c {
                w.push(Widening::Identity {
                    field: field.into(),
                    parent: p.clone(),
                    child: c.clone(),
                });
            }
        }
        for s in &child.scopes {
            if !parent.scopes.contains(s) {
                w.push(Widening::Scope { scope: s.clone() });
            }
        }
        if child.budget.amount > parent.budget.amount {
            w.push(Widening::Budget {
                child: child.budget.amount,
                parent: parent.budget.amount,
            });
        }
        if child.budget.calls > parent.budget.calls {
            w.push(Widening::Calls {
                child: child.budget.calls,
                parent: parent.budget.calls,
            });
        }
        if child.expires_at > parent.expires_at {
            w.push(Widening::Expiry {
                child: child.expires_at,
                parent: parent.expires_at,
            });
        }
        for (param, allowed) in &parent.sources {
            match child.sources.get(param) {
                None => w.push(Widening::Sources {
                    param: param.clone(),
                    source: "every declared source".into(),
                }),
                Some(list) => {
                    for s in list.iter().filter(|s| !allowed.contains(s)) {
                        w.push(Widening::Sources {
                            param: param.clone(),
                            source: s.clone(),
                        });
                    }
                }
            }
        }
        let Some((pack, actions)) = self.pack_of(&child.pack) else {
            return Ok(w);
        };
        let regs = Registries {
            world: &self.world,
            pack: &pack.name,
            owner: &parent.owner,
        };
        for (name, cv) in &child.claims {
            let pv = parent.claims.get(name);
            let within_parent = |v: &Value| match pv {
                Some(Value::Array(items)) => items.contains(v),
                Some(p) => p == v,
                None => false,
            };
            let members: Vec<&Value> = match cv {
                Value::Array(items) => items.iter().collect(),
                one => vec![one],
            };
            let via = registries_for(parent, pack, &actions, name);
            for v in members {
                if within_parent(v) {
                    continue;
                }
                let held = match (&via, text_of(v)) {
                    (Some(per_param), Some(text)) => {
                        let mut all = true;
                        for regs_of_param in per_param {
                            let mut one = false;
                            for reg in regs_of_param {
                                if regs.member(tx, reg, text, None)?.is_some() {
                                    one = true;
                                    break;
                                }
                            }
                            if !one {
                                all = false;
                                break;
                            }
                        }
                        all
                    }
                    _ => false,
                };
                if !held {
                    w.push(Widening::Claim {
                        claim: name.clone(),
                        value: crate::gateway::render::shown_value(v),
                    });
                }
            }
        }
        for (name, pv) in &parent.claims {
            if !pv.is_array() && !child.claims.contains_key(name) {
                w.push(Widening::Dropped {
                    claim: name.clone(),
                });
            }
        }
        Ok(w)
    }

    /// The parent token verified, and usable at `now` in `tx`: not expired,
    /// no link revoked.
    pub(super) fn usable_parent(
        &self,
        tx: &mut dyn Tx,
        parent: &MandateToken,
        now: i64,
    ) -> Result<Result<Verified, String>, StoreError> {
        let v = match self.verify_token(parent) {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        for m in v.links() {
            if now >= m.expires_at {
                return Ok(Err(format!("mandate `{}` has expired", echo(&m.id))));
            }
            if tx.revoked(&m.id)? {
                return Ok(Err(format!("mandate `{}` has been revoked", echo(&m.id))));
            }
        }
        Ok(Ok(v))
    }
}
