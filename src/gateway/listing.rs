//! A listing kept in the store's state, per tenant (the store has no
//! scan): in a namespace, `#tenants` names the tenants with an index, and
//! `#index/OWNER` holds that tenant's entries, oldest first, each `[key,
//! group]` (the group: the mandate of a pending operation, the parent of a
//! held child). Adding an entry reads and rewrites only its tenant's index,
//! kept within [`bound`]; another tenant's entries are never read. An index
//! from before (`#index`, every tenant in one) is still read by the
//! listings, never written: what it lists stays listed until it is
//! settled. Every key of the listing starts with `#`, no entry's key does.

use crate::gateway::Tenants;
use crate::store::{StoreError, Tx};
use serde_json::Value;

/// The one index of every tenant, from before the per-tenant indexes.
pub(crate) const LEGACY_INDEX: &str = "#index";
/// The tenants (owners) with an index of their own.
const TENANTS: &str = "#tenants";
/// Per tenant, `#index/OWNER`.
const TENANT_INDEX: &str = "#index/";

/// Whether `key` is one of the listing's own keys, never an entry.
pub(crate) fn is_listing_key(key: &str) -> bool {
    key.starts_with('#')
}

/// Adds `key` (of `owner`, in `group`) to its tenant's index, kept within
/// [`bound`]: past it, entries leave the listing (never the store).
pub(crate) fn add(
    tx: &mut dyn Tx,
    ns: &str,
    owner: &str,
    key: &str,
    group: &str,
) -> Result<(), StoreError> {
    let mut index = tenant_index(tx, ns, owner)?;
    if index.is_empty() {
        let mut tenants = names(tx, ns, TENANTS)?;
        if !tenants.iter().any(|t| t == owner) {
            tenants.push(owner.to_string());
            tx.state_put(ns, TENANTS, &Value::from(tenants))?;
        }
    }
    index.push((key.to_string(), group.to_string()));
    bound(&mut index, group);
    put_index(tx, ns, owner, index)
}

/// Takes `key` off `owner`'s index (settled: confirmed, declined).
pub(crate) fn remove(tx: &mut dyn Tx, ns: &str, owner: &str, key: &str) -> Result<(), StoreError> {
    let mut index = tenant_index(tx, ns, owner)?;
    let before = index.len();
    index.retain(|(k, _)| k != key);
    if index.len() == before {
        return Ok(());
    }
    put_index(tx, ns, owner, index)
}

/// The keys listed for `tenants`, the old index's first (every tenant's:
/// the caller keeps those of `tenants`), then each tenant's, oldest first;
/// only those indexes are read.
pub(crate) fn keys(
    tx: &mut dyn Tx,
    ns: &str,
    tenants: &Tenants,
) -> Result<Vec<String>, StoreError> {
    let owners: Vec<String> = match tenants {
        Tenants::All => names(tx, ns, TENANTS)?,
        Tenants::Only(set) => set.iter().cloned().collect(),
        Tenants::Unrouted(_) => vec![],
    };
    let mut out = names(tx, ns, LEGACY_INDEX)?;
    for owner in owners {
        out.extend(tenant_index(tx, ns, &owner)?.into_iter().map(|(k, _)| k));
    }
    Ok(out)
}

/// Most entries one tenant's index keeps, and most of one group (a
/// pending operation's mandate, a held child's parent) in it (an index is
/// rewritten on each new entry of its tenant). Past a bound the oldest of
/// that tenant, or of that group, leaves the listing but stays reachable
/// by its key: one agent's flood pushes out only its own mandate's
/// entries, never another tenant's, nor another mandate's of its tenant
/// while that one stays within its bound.
pub const MAX_PER_TENANT: usize = 1_000;
pub const MAX_PER_MANDATE: usize = 200;

/// Keeps one tenant's index within its bounds after `group` added one:
/// that group's oldest leaves first, then the tenant's oldest.
pub(crate) fn bound(index: &mut Vec<(String, String)>, group: &str) {
    if index.iter().filter(|(_, g)| g == group).count() > MAX_PER_MANDATE
        && let Some(i) = index.iter().position(|(_, g)| g == group)
    {
        index.remove(i);
    }
    if index.len() > MAX_PER_TENANT {
        let cut = index.len() - MAX_PER_TENANT;
        index.drain(..cut);
    }
}

/// A list of names kept under `key`.
pub(crate) fn names(tx: &mut dyn Tx, ns: &str, key: &str) -> Result<Vec<String>, StoreError> {
    Ok(match tx.state_get(ns, key)? {
        Some(Value::Array(items)) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => vec![],
    })
}

/// One tenant's index: `(key, group)`, oldest first.
fn tenant_index(
    tx: &mut dyn Tx,
    ns: &str,
    owner: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    Ok(match tx.state_get(ns, &format!("{TENANT_INDEX}{owner}"))? {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(|v| match v.as_array().map(Vec::as_slice) {
                Some([Value::String(k), Value::String(g)]) => Some((k.clone(), g.clone())),
                _ => None,
            })
            .collect(),
        _ => vec![],
    })
}

fn put_index(
    tx: &mut dyn Tx,
    ns: &str,
    owner: &str,
    index: Vec<(String, String)>,
) -> Result<(), StoreError> {
    let v: Vec<Value> = index
        .into_iter()
        .map(|(k, g)| Value::from(vec![k, g]))
        .collect();
    tx.state_put(ns, &format!("{TENANT_INDEX}{owner}"), &Value::from(v))
}
