//! Executors: the only code that acts, on simulated systems of record kept
//! in the store (a ledger, an ERP, an EHR, a mailbox, a repository). Each
//! validates everything before it writes, so a refusal leaves no trace
//! but its receipt. An executor that only records (a ledger line, an
//! outbox message, an access log entry) returns the entry: the execution
//! stage stores it under the operation hash, in the same transaction, and
//! that table is the simulated log (one write, not two copies). `external` acts on nothing: the caller (an MCP
//! downstream tool, a benchmark's runtime) executes with the resolved
//! values the decision returns.

use super::mandate::Mandate;
use super::registry::Registries;
use crate::store::{StoreError, Tx};
use serde_json::{Map, Value, json};

pub struct ExecCtx<'a, 'b> {
    pub tx: &'a mut dyn Tx,
    pub registries: &'a Registries<'b>,
    pub declared: &'a [crate::ir::Registry],
    pub mandate: &'a Mandate,
    pub resolved: &'a Map<String, Value>,
    pub now: i64,
    pub operation_hash: &'a str,
}

#[derive(Debug)]
pub enum ExecError {
    /// The system of record refuses (an invoice already paid...).
    Refused(String),
    Store(StoreError),
}

impl From<StoreError> for ExecError {
    fn from(e: StoreError) -> Self {
        ExecError::Store(e)
    }
}

/// A text parameter the executor needs. A pack whose action lacks it (an
/// executor named for another contract) is refused here, never run with an
/// empty value.
fn s<'a>(c: &'a ExecCtx<'_, '_>, k: &str) -> Result<&'a str, ExecError> {
    c.resolved
        .get(k)
        .and_then(Value::as_str)
        .ok_or_else(|| ExecError::Refused(format!("the executor needs a text parameter `{k}`")))
}

/// An amount parameter the executor needs.
fn amount(c: &ExecCtx<'_, '_>, k: &str) -> Result<i64, ExecError> {
    c.resolved
        .get(k)
        .and_then(Value::as_i64)
        .ok_or_else(|| ExecError::Refused(format!("the executor needs an amount parameter `{k}`")))
}

/// A JSON object of these fields, in this order, sized once (`json!`
/// grows its map field by field: a ledger entry on every transfer).
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// What an executor will do, decided before anything is written: the
/// records it changes and its result.
struct Plan<'r> {
    writes: Vec<(&'r crate::ir::Registry, String, Map<String, Value>)>,
    /// Other state of the simulated system (namespace, key, value).
    state: Vec<(&'static str, String, Value)>,
    result: Value,
}

impl<'r> Plan<'r> {
    fn result(result: Value) -> Self {
        Plan {
            writes: vec![],
            state: vec![],
            result,
        }
    }
}

/// The simulated bank's credential store: per user, a salted SHA-256 of
/// the password (what a real system keeps instead of the password).
pub const CREDENTIALS_NS: &str = "bank.credentials";

/// Runs an executor in two steps: [`plan`] reads and validates everything
/// (every parameter it needs, every record, the system of record's own
/// checks) and may refuse; only then are its writes applied. An executor
/// cannot write before it has validated, because planning has no write to
/// make: a refusal leaves nothing behind but the receipt.
pub fn execute(name: &str, c: &mut ExecCtx<'_, '_>) -> Result<Value, ExecError> {
    let p = plan(name, c)?;
    for (reg, key, record) in p.writes {
        c.registries.put_record(c.tx, reg, &key, record)?;
    }
    for (ns, key, value) in p.state {
        c.tx.state_put(ns, &key, &value)?;
    }
    Ok(p.result)
}

fn plan<'r>(name: &str, c: &mut ExecCtx<'r, '_>) -> Result<Plan<'r>, ExecError> {
    // the hash's first 12 characters, borrowed
    let hex = c.operation_hash.trim_start_matches("sha256:");
    let op_id = hex.char_indices().nth(12).map_or(hex, |(i, _)| &hex[..i]);
    match name {
        "bank.transfer" => {
            let entry = object([
                ("transfer_id", Value::String(["TX-", op_id].concat())),
                ("from", s(c, "from_account")?.into()),
                ("to", s(c, "payee_iban")?.into()),
                ("amount", amount(c, "amount")?.into()),
                ("currency", s(c, "currency")?.into()),
                ("subject", s(c, "subject")?.into()),
            ]);
            Ok(Plan::result(entry))
        }
        "bank.standing_order" => {
            let id = s(c, "order_id")?.to_string();
            let iban = s(c, "payee_iban")?.to_string();
            let reg = declared(c, "standing_orders")?;
            let mut rec = c
                .registries
                .record(c.tx, reg, &id)?
                .ok_or_else(|| ExecError::Refused(format!("no standing order `{id}`")))?;
            rec.insert("iban".into(), json!(iban));
            if let Some(a) = c.resolved.get("amount") {
                rec.insert("amount".into(), a.clone());
            }
            let result = json!({"standing_order": id, "now": rec});
            Ok(Plan {
                writes: vec![(reg, id, rec)],
                state: vec![],
                result,
            })
        }
        "bank.update_password" => {
            // the one place the new password is seen: kept as a salted hash
            use sha2::{Digest, Sha256};
            let password = s(c, "new_password")?;
            let mut salt = [0u8; 16];
            getrandom::fill(&mut salt)
                .map_err(|e| ExecError::Refused(format!("no randomness: {e}")))?;
            let mut h = Sha256::new();
            h.update(salt);
            h.update(password.as_bytes());
            let verifier = json!({"salt": hex::encode(salt), "sha256": hex::encode(h.finalize())});
            Ok(Plan {
                writes: vec![],
                state: vec![(CREDENTIALS_NS, c.mandate.user.clone(), verifier)],
                result: json!({"account_change": name, "fields": ["new_password"]}),
            })
        }
        "bank.update_user" => {
            let changed: Vec<&String> = c
                .resolved
                .iter()
                .filter(|(_, v)| v.as_str().is_some_and(|s| !s.is_empty()))
                .map(|(k, _)| k)
                .collect();
            let entry = json!({"account_change": name, "fields": changed});
            Ok(Plan::result(entry))
        }
        "ap.change_iban" => {
            let vendor = s(c, "vendor_id")?.to_string();
            let new_iban = s(c, "new_iban")?.to_string();
            let reg = declared(c, "vendors")?;
            let mut rec = c
                .registries
                .record(c.tx, reg, &vendor)?
                .ok_or_else(|| ExecError::Refused(format!("no vendor `{vendor}`")))?;
            let old = rec.get("iban").cloned();
            rec.insert("iban".into(), json!(new_iban));
            rec.insert("iban_changed_at".into(), json!(c.now));
            let result = json!({"vendor": vendor, "old_iban": old, "new_iban": new_iban});
            Ok(Plan {
                writes: vec![(reg, vendor, rec)],
                state: vec![],
                result,
            })
        }
        "ap.pay_invoice" => {
            let inv = s(c, "invoice_id")?.to_string();
            let entry = object([
                ("payment_id", Value::String(["PAY-", op_id].concat())),
                ("invoice", Value::String(inv.clone())),
                ("to", s(c, "payee_iban")?.into()),
                ("amount", amount(c, "amount")?.into()),
            ]);
            let reg = declared(c, "invoices")?;
            let mut rec = c
                .registries
                .record(c.tx, reg, &inv)?
                .ok_or_else(|| ExecError::Refused(format!("no invoice `{inv}`")))?;
            // the ERP's own check, inside the transaction: paid once
            if rec.get("status").and_then(Value::as_str) != Some("open") {
                return Err(ExecError::Refused(format!("invoice `{inv}` is not open")));
            }
            rec.insert("status".into(), json!("paid"));
            Ok(Plan {
                writes: vec![(reg, inv, rec)],
                state: vec![],
                result: entry,
            })
        }
        "health.read_record" => {
            let view = c
                .resolved
                .get("view")
                .and_then(Value::as_str)
                .unwrap_or("summary");
            let entry = json!({
                "patient": s(c, "patient_id")?,
                "view": view,
                "record": format!("(simulated {view} record of {})", s(c, "patient_id")?),
            });
            Ok(Plan::result(entry))
        }
        "workspace.send_email"
        | "workspace.invite"
        | "workspace.share_file"
        | "workspace.delete" => {
            let mut entry = Map::new();
            entry.insert("kind".into(), json!(name));
            for (k, v) in c.resolved.iter() {
                entry.insert(k.clone(), v.clone());
            }
            Ok(Plan::result(Value::Object(entry)))
        }
        "code.merge" => {
            let entry = json!({
                "merged": s(c, "commit")?,
                "into": s(c, "branch")?,
                "repo": s(c, "repo")?,
            });
            Ok(Plan::result(entry))
        }
        "external" => Ok(Plan::result(json!({"execute_with": c.resolved}))),
        other => Err(ExecError::Refused(format!("no executor `{other}`"))),
    }
}

fn declared<'a>(c: &ExecCtx<'a, '_>, name: &str) -> Result<&'a crate::ir::Registry, ExecError> {
    c.declared
        .iter()
        .find(|r| r.name == name)
        .ok_or_else(|| ExecError::Refused(format!("the pack declares no registry `{name}`")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::Jcs;
    use crate::gateway::mandate::Budget;
    use crate::gateway::testkit::TestWorld;
    use crate::store::memory::MemoryStore;
    use crate::store::{ChainLink, Spent, Store};

    /// A transaction that counts the writes made through it.
    struct Counting<'a> {
        inner: &'a mut dyn Tx,
        writes: usize,
    }

    impl Tx for Counting<'_> {
        fn spent(&mut self, m: &str) -> Result<Spent, StoreError> {
            self.inner.spent(m)
        }
        fn spend(&mut self, m: &str, a: i64) -> Result<Spent, StoreError> {
            self.writes += 1;
            self.inner.spend(m, a)
        }
        fn nonce_used(&mut self, n: &str) -> Result<bool, StoreError> {
            self.inner.nonce_used(n)
        }
        fn use_nonce(&mut self, n: &str) -> Result<(), StoreError> {
            self.writes += 1;
            self.inner.use_nonce(n)
        }
        fn executed(&mut self, op: &str) -> Result<Option<Value>, StoreError> {
            self.inner.executed(op)
        }
        fn record_execution(&mut self, op: &str, r: &Value) -> Result<(), StoreError> {
            self.writes += 1;
            self.inner.record_execution(op, r)
        }
        fn revoked(&mut self, t: &str) -> Result<bool, StoreError> {
            self.inner.revoked(t)
        }
        fn revoke(&mut self, t: &str) -> Result<(), StoreError> {
            self.writes += 1;
            self.inner.revoke(t)
        }
        fn state_get(&mut self, ns: &str, k: &str) -> Result<Option<Value>, StoreError> {
            self.inner.state_get(ns, k)
        }
        fn state_put(&mut self, ns: &str, k: &str, v: &Value) -> Result<(), StoreError> {
            self.writes += 1;
            self.inner.state_put(ns, k, v)
        }
        fn append_receipt_jcs(&mut self, body: &Jcs) -> Result<ChainLink, StoreError> {
            self.writes += 1;
            self.inner.append_receipt_jcs(body)
        }
        fn registry_rows(
            &mut self,
            t: &str,
            o: &str,
            keyed: bool,
            key: Option<&str>,
        ) -> Result<Vec<crate::store::RegistryRow>, StoreError> {
            self.inner.registry_rows(t, o, keyed, key)
        }
    }

    fn obj(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!("an object literal"),
        }
    }

    /// Issue #11, item 7: every executor validates everything before its
    /// first write. For each executor, the complete parameters execute (and
    /// those that change a system of record write); then, with each needed
    /// parameter left out in turn, the executor refuses having written
    /// nothing.
    #[test]
    fn a_refusal_leaves_no_trace() {
        let tw = TestWorld::new();
        let world = tw.world();
        // (executor, pack, owner, complete parameters, writes when it runs)
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            Map<String, Value>,
            bool,
        );
        let cases: Vec<Case> = vec![
            (
                "bank.transfer",
                "bank",
                "emma",
                obj(json!({"from_account": "emma-checking",
                "payee_iban": "DE44500105175407324931", "amount": 100, "currency": "EUR",
                "subject": "rent"})),
                false,
            ),
            (
                "bank.standing_order",
                "bank",
                "emma",
                obj(json!({"order_id": "SO-rent",
                "payee_iban": "DE44500105175407324931", "amount": 120_000})),
                true,
            ),
            (
                "ap.change_iban",
                "ap",
                "acme",
                obj(json!({"vendor_id": "V-PAPER",
                "new_iban": "DE02100500000024290661"})),
                true,
            ),
            (
                "ap.pay_invoice",
                "ap",
                "acme",
                obj(json!({"invoice_id": "INV-1003",
                "payee_iban": "DE02100500000024290661", "amount": 31_040})),
                true,
            ),
            (
                "health.read_record",
                "health",
                "dr-lee",
                obj(json!({"patient_id": "P-1001",
                "view": "summary"})),
                false,
            ),
            (
                "code.merge",
                "code",
                "payments-api",
                obj(json!({"repo": "payments-api",
                "commit": "a".repeat(40), "branch": "main"})),
                false,
            ),
        ];
        for (name, pack, owner, full, writes) in cases {
            let decl = tw
                .bundle
                .table
                .pack(pack)
                .map(|p| p.registries.clone())
                .unwrap();
            let regs = Registries {
                world: &world,
                pack,
                owner,
            };
            let m = Mandate {
                id: "m".into(),
                pack: pack.into(),
                user: owner.into(),
                owner: owner.into(),
                scopes: vec![],
                claims: Map::new(),
                budget: Budget {
                    amount: 0,
                    calls: 1,
                },
                issued_at: 0,
                expires_at: 1,
                sources: Default::default(),
                parent: None,
            };
            let needed: Vec<String> = full
                .keys()
                // optional to these executors: a read's view, an order's amount
                .filter(|k| *k != "view" && !(name == "bank.standing_order" && *k == "amount"))
                .cloned()
                .collect();
            let mut variants = vec![(None, full.clone())];
            for k in &needed {
                let mut less = full.clone();
                less.remove(k);
                variants.push((Some(k.clone()), less));
            }
            for (missing, resolved) in variants {
                let store = MemoryStore::new();
                store
                    .transaction(&mut |tx| {
                        let mut counting = Counting {
                            inner: tx,
                            writes: 0,
                        };
                        let got = execute(
                            name,
                            &mut ExecCtx {
                                tx: &mut counting,
                                registries: &regs,
                                declared: &decl,
                                mandate: &m,
                                resolved: &resolved,
                                now: 0,
                                operation_hash: "sha256:00",
                            },
                        );
                        match (&missing, got) {
                            (None, Ok(_)) => assert_eq!(
                                counting.writes > 0,
                                writes,
                                "{name}: writes of a complete execution"
                            ),
                            (None, Err(e)) => panic!("{name} refused complete parameters: {e:?}"),
                            (Some(k), Err(ExecError::Refused(e))) => {
                                assert!(e.contains(&format!("`{k}`")), "{name}: {e}");
                                assert_eq!(counting.writes, 0, "{name} without `{k}` wrote");
                            }
                            (Some(k), other) => panic!("{name} without `{k}`: {other:?}"),
                        }
                        Ok(Value::Null)
                    })
                    .unwrap();
            }
        }
    }
}
