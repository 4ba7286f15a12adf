//! Which tenant each row of a shard belongs to, for `ipc shards move`
//! (`docs/decisions/tenant-move.md`). The store's tables are not keyed by
//! tenant; the receipts say whose each mandate, operation and nonce is,
//! and the namespaces say how their keys and values name a tenant. Fail
//! closed: a budget, an execution or a state row no rule attributes
//! refuses the move (a kind of state added later is never left behind
//! silently). Used nonces and revocations only ever deny, so one whose
//! tenant is unknown is copied too.

use crate::store::{ReceiptRecord, Rows};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Namespaces whose entries name their owner in their value (or are keyed
/// by an operation hash or a mandate id the receipts attribute).
const BY_VALUE: [&str; 7] = [
    "pending",
    "mandates",
    // the tokens a replay verifies again (`gateway::replay`)
    crate::gateway::replay::KEPT_TOKENS,
    "mandates.pending",
    "outcome",
    "mcp-intent",
    "mcp-session",
];

/// How a state row is written on the new shard.
#[derive(Clone, Debug, PartialEq)]
pub enum Put {
    /// The tenant's own row, as it is.
    Value(Value),
    /// A listing shared by tenants: these elements (the tenant's) added
    /// to the new shard's, those already there kept.
    Merge(Vec<Value>),
}

/// The tenant's rows, as the move writes them.
pub type TenantRows = crate::store::Rows<Put>;

/// A row no rule attributes to a tenant: the move is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unclassified {
    pub table: String,
    pub key: String,
}

/// Whose each mandate id, operation hash, user and nonce is, as the
/// receipts (and the mandates the state holds) say.
#[derive(Default)]
struct Owners {
    ids: HashMap<String, String>,
    ops: HashMap<String, String>,
    users: HashMap<String, BTreeSet<String>>,
    nonces: HashMap<String, String>,
}

impl Owners {
    fn of(records: &[ReceiptRecord], rows: &Rows) -> Owners {
        let mut o = Owners::default();
        for r in records {
            let b = &r.body;
            if b["kind"] == "shard" && b["change"] == "moved-in" {
                o.brought(b);
                continue;
            }
            let owner = b["mandate"]["owner"].as_str().or(b["owner"].as_str());
            let Some(owner) = owner else { continue };
            let ids = b["mandate"]["ancestors"]
                .as_array()
                .into_iter()
                .flatten()
                .chain(std::iter::once(&b["mandate"]["id"]))
                .chain(std::iter::once(&b["mandate"]))
                .filter_map(Value::as_str);
            for id in ids {
                o.ids.insert(id.to_string(), owner.to_string());
            }
            if let Some(op) = b["operation_hash"].as_str() {
                o.ops.insert(op.to_string(), owner.to_string());
            }
            if let Some(u) = b["mandate"]["user"].as_str().or(b["user"].as_str()) {
                o.users
                    .entry(u.to_string())
                    .or_default()
                    .insert(owner.to_string());
            }
            for n in b["consumed"]["nonces"].as_array().into_iter().flatten() {
                if let Some(n) = n.as_str() {
                    o.nonces.insert(n.to_string(), owner.to_string());
                }
            }
        }
        for ((ns, key), v) in &rows.state {
            let Some(owner) = BY_VALUE
                .contains(&ns.as_str())
                .then(|| one_owner(v))
                .flatten()
            else {
                continue;
            };
            if ns == "mandates" || ns == crate::gateway::replay::KEPT_TOKENS {
                o.ids.insert(key.clone(), owner.clone());
            }
            // the users its mandates name (a tenant moved in has no
            // decision's receipt here to say so)
            let mut users = BTreeSet::new();
            named(v, "user", &mut users);
            for u in users {
                o.users.entry(u).or_default().insert(owner.clone());
            }
        }
        o
    }

    /// What a tenant moved in brought (its rows have no decision's
    /// receipt on this shard).
    fn brought(&mut self, b: &Value) {
        let Some(t) = b["tenant"].as_str() else {
            return;
        };
        let br = &b["brought"];
        for id in br["budgets"].as_object().into_iter().flat_map(|m| m.keys()) {
            self.ids.insert(bare(id).to_string(), t.to_string());
        }
        for op in br["executions"].as_array().into_iter().flatten() {
            if let Some(op) = op.as_str() {
                let op = bare(op);
                let op = crate::store::read_operation(op).unwrap_or(op);
                self.ops.insert(op.to_string(), t.to_string());
            }
        }
        for n in br["nonces"].as_array().into_iter().flatten() {
            if let Some(n) = n.as_str() {
                self.nonces.insert(bare(n).to_string(), t.to_string());
            }
        }
    }

    fn of_key(&self, key: &str) -> Option<&String> {
        let key = bare(key);
        let op = crate::store::read_operation(key).unwrap_or(key);
        self.ops.get(op).or_else(|| self.ids.get(key))
    }
}

/// A budget, nonce or execution key without its shadow-mode prefix
/// ([`crate::gateway::shadow::key`]): shadow's rows are the tenant's as
/// its enforced ones are.
fn bare(key: &str) -> &str {
    key.strip_prefix(crate::gateway::shadow::PREFIX)
        .unwrap_or(key)
}

/// The one tenant a value names in its `owner` fields, wherever they are;
/// `None` when it names none, or several.
fn one_owner(v: &Value) -> Option<String> {
    let mut found = BTreeSet::new();
    owners_in(v, &mut found);
    (found.len() == 1)
        .then(|| found.into_iter().next())
        .flatten()
}

fn owners_in(v: &Value, found: &mut BTreeSet<String>) {
    named(v, "owner", found)
}

/// Every string under a key `field`, wherever it is in `v`.
fn named(v: &Value, field: &str, found: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) if k == field => {
                        found.insert(s.clone());
                    }
                    _ => named(x, field, found),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| named(x, field, found)),
        _ => {}
    }
}

/// What a row is.
enum Whose {
    Tenant(String),
    /// The store's own (the shard's placements, the gateway's salt, a
    /// global registry): never copied.
    Store,
    Merge(Vec<Value>),
}

/// The rows of `rows` that belong to `tenant`, or the first row no rule
/// attributes. `records`: the shard's receipts (read after `rows`).
pub fn tenant_rows(
    tenant: &str,
    rows: &Rows,
    records: &[ReceiptRecord],
) -> Result<TenantRows, Unclassified> {
    let o = Owners::of(records, rows);
    let unclassified = |table: &str, key: &str| Unclassified {
        table: table.into(),
        key: key.into(),
    };
    let mut out = TenantRows::default();
    for (id, s) in &rows.budgets {
        match o.ids.get(bare(id)) {
            Some(t) if t == tenant => {
                out.budgets.insert(id.clone(), *s);
            }
            Some(_) => {}
            None => return Err(unclassified("budgets", id)),
        }
    }
    for (op, v) in &rows.executions {
        match o.of_key(op) {
            Some(t) if t == tenant => {
                out.executions.insert(op.clone(), v.clone());
            }
            Some(_) => {}
            None => return Err(unclassified("executions", op)),
        }
    }
    // a used nonce or a revocation only denies: one of no known tenant
    // is copied too
    for n in &rows.nonces {
        if o.nonces.get(bare(n)).is_none_or(|t| t == tenant) {
            out.nonces.insert(n.clone());
        }
    }
    for id in &rows.revocations {
        if o.ids.get(id).is_none_or(|t| t == tenant) {
            out.revocations.insert(id.clone());
        }
    }
    for ((ns, key), v) in &rows.state {
        let whose = state_owner(tenant, ns, key, v, rows, &o)
            .ok_or_else(|| unclassified(&format!("state `{ns}`"), key))?;
        let put = match whose {
            Whose::Tenant(t) if t == tenant => Put::Value(v.clone()),
            Whose::Merge(items) if !items.is_empty() => Put::Merge(items),
            _ => continue,
        };
        out.state.insert((ns.clone(), key.clone()), put);
    }
    Ok(out)
}

/// Whose the state row `(ns, key)` is; `None`: no rule says.
fn state_owner(
    tenant: &str,
    ns: &str,
    key: &str,
    v: &Value,
    rows: &Rows,
    o: &Owners,
) -> Option<Whose> {
    // the outbox's deliveries stay where they were queued: the old
    // shard's senders send them (an approval reaches the operation on its
    // new shard by its hash); the new shard queues its own
    if ns == super::NS || ns == "gateway" || ns == crate::gateway::notify::outbox::NS {
        return Some(Whose::Store);
    }
    if ["registry:", "registry+:", "registry-:"]
        .iter()
        .any(|p| ns.starts_with(p))
    {
        let (owner, _) = key.split_once('\u{1f}')?;
        return Some(if owner == "*" {
            Whose::Store
        } else {
            Whose::Tenant(owner.to_string())
        });
    }
    // the keys a mandate took under a selection's `limit`, by mandate id
    // (and claim): the mandate's tenant's
    if ns == crate::gateway::selection::BOUGHT_NS {
        let (id, _) = key.split_once('\u{1f}')?;
        return o.ids.get(bare(id)).map(|t| Whose::Tenant(t.clone()));
    }
    if ns == crate::gateway::executors::CREDENTIALS_NS {
        let owners = o.users.get(key)?;
        return (owners.len() == 1)
            .then(|| owners.iter().next().map(|t| Whose::Tenant(t.clone())))
            .flatten();
    }
    if !BY_VALUE.contains(&ns) {
        return None;
    }
    if let Some(owner) = key.strip_prefix("#index/") {
        return Some(Whose::Tenant(owner.to_string()));
    }
    if key == "#tenants" {
        let names = v.as_array()?;
        let mine = names.iter().filter(|n| n.as_str() == Some(tenant));
        return Some(Whose::Merge(mine.cloned().collect()));
    }
    if key.starts_with('#') {
        return merged_index(tenant, ns, v, rows, o);
    }
    match one_owner(v) {
        Some(t) => Some(Whose::Tenant(t)),
        None => o.of_key(key).map(|t| Whose::Tenant(t.clone())),
    }
}

/// A listing of every tenant's keys (`#index`: ids, or `[key, group]`
/// pairs): the elements whose key is the tenant's; `None` when one
/// element's key is no tenant's known.
fn merged_index(tenant: &str, ns: &str, v: &Value, rows: &Rows, o: &Owners) -> Option<Whose> {
    let mut mine = vec![];
    for item in v.as_array()? {
        let key = item
            .as_str()
            .or_else(|| item.get(0).and_then(Value::as_str))?;
        let entry = rows.state.get(&(ns.to_string(), key.to_string()));
        let owner = entry
            .and_then(one_owner)
            .or_else(|| o.of_key(key).cloned())?;
        if owner == tenant {
            mine.push(item.clone());
        }
    }
    Some(Whose::Merge(mine))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The keys a mandate took under a selection's `limit` are its
    /// tenant's (enforced and shadow alike): a move carries them, and a
    /// tenant that bought under a limit can be moved at all.
    #[test]
    fn a_selections_bought_keys_go_with_the_mandates_tenant() {
        let decision = |owner: &str, id: &str| json!({"mandate": {"owner": owner, "id": id}});
        let first = ReceiptRecord::next(None, decision("emma", "m-emma")).unwrap();
        let second =
            ReceiptRecord::next(Some((first.seq, &first.hash)), decision("noah", "m-noah"))
                .unwrap();
        let ns = crate::gateway::selection::BOUGHT_NS.to_string();
        let mut rows = Rows::default();
        for key in [
            "m-emma\u{1f}product",
            "shadow:m-emma\u{1f}product",
            "m-noah\u{1f}product",
        ] {
            rows.state.insert((ns.clone(), key.into()), json!(["P1"]));
        }
        let got = tenant_rows("emma", &rows, &[first, second]).unwrap();
        let keys: Vec<&str> = got.state.keys().map(|(_, k)| k.as_str()).collect();
        assert_eq!(keys, ["m-emma\u{1f}product", "shadow:m-emma\u{1f}product"]);
        // a mandate no receipt names: no rule says whose, the move refuses
        rows.state
            .insert((ns, "m-other\u{1f}product".into()), json!(["P2"]));
        let refused = tenant_rows("emma", &rows, &[]).unwrap_err();
        assert_eq!(refused.table, "state `selection.bought`");
    }
}
