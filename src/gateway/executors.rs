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

pub fn execute(name: &str, c: &mut ExecCtx<'_, '_>) -> Result<Value, ExecError> {
    let op_id = c
        .operation_hash
        .trim_start_matches("sha256:")
        .chars()
        .take(12)
        .collect::<String>();
    match name {
        "bank.transfer" => {
            let entry = json!({
                "transfer_id": format!("TX-{op_id}"),
                "from": s(c, "from_account")?,
                "to": s(c, "payee_iban")?,
                "amount": amount(c, "amount")?,
                "currency": s(c, "currency")?,
                "subject": s(c, "subject")?,
            });
            Ok(entry)
        }
        "bank.standing_order" => {
            let id = s(c, "order_id")?.to_string();
            let reg = declared(c, "standing_orders")?;
            let mut rec = c
                .registries
                .record(c.tx, reg, &id)?
                .ok_or_else(|| ExecError::Refused(format!("no standing order `{id}`")))?;
            rec.insert("iban".into(), json!(s(c, "payee_iban")?));
            if let Some(a) = c.resolved.get("amount") {
                rec.insert("amount".into(), a.clone());
            }
            c.registries.put_record(c.tx, reg, &id, rec.clone())?;
            Ok(json!({"standing_order": id, "now": rec}))
        }
        "bank.update_user" | "bank.update_password" => {
            let changed: Vec<&String> = c
                .resolved
                .iter()
                .filter(|(_, v)| v.as_str().is_some_and(|s| !s.is_empty()))
                .map(|(k, _)| k)
                .collect();
            let entry = json!({"account_change": name, "fields": changed});
            Ok(entry)
        }
        "ap.change_iban" => {
            let vendor = s(c, "vendor_id")?.to_string();
            let reg = declared(c, "vendors")?;
            let mut rec = c
                .registries
                .record(c.tx, reg, &vendor)?
                .ok_or_else(|| ExecError::Refused(format!("no vendor `{vendor}`")))?;
            let old = rec.get("iban").cloned();
            rec.insert("iban".into(), json!(s(c, "new_iban")?));
            rec.insert("iban_changed_at".into(), json!(c.now));
            c.registries.put_record(c.tx, reg, &vendor, rec)?;
            Ok(json!({"vendor": vendor, "old_iban": old, "new_iban": s(c, "new_iban")?}))
        }
        "ap.pay_invoice" => {
            let inv = s(c, "invoice_id")?.to_string();
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
            c.registries.put_record(c.tx, reg, &inv, rec)?;
            let entry = json!({
                "payment_id": format!("PAY-{op_id}"),
                "invoice": inv,
                "to": s(c, "payee_iban")?,
                "amount": amount(c, "amount")?,
            });
            Ok(entry)
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
            Ok(entry)
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
            Ok(Value::Object(entry))
        }
        "code.merge" => {
            let entry = json!({
                "merged": s(c, "commit")?,
                "into": s(c, "branch")?,
                "repo": s(c, "repo")?,
            });
            Ok(entry)
        }
        "external" => Ok(json!({"execute_with": c.resolved})),
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
    use crate::gateway::mandate::Budget;
    use crate::gateway::world::World;
    use crate::store::Store;
    use crate::store::memory::MemoryStore;

    /// An executor named by an action without the parameters it needs is
    /// refused, and writes nothing.
    #[test]
    fn a_missing_parameter_is_refused_not_run_empty() {
        let store = MemoryStore::new();
        let world = World::empty();
        let regs = Registries {
            world: &world,
            pack: "bank",
            owner: "emma",
        };
        let m = Mandate {
            id: "m".into(),
            pack: "bank".into(),
            user: "emma".into(),
            owner: "emma".into(),
            scopes: vec![],
            claims: Map::new(),
            budget: Budget {
                amount: 0,
                calls: 1,
            },
            issued_at: 0,
            expires_at: 1,
        };
        let mut resolved = Map::new();
        resolved.insert("from_account".into(), json!("emma-checking"));
        store
            .transaction(&mut |tx| {
                let mut c = ExecCtx {
                    tx,
                    registries: &regs,
                    declared: &[],
                    mandate: &m,
                    resolved: &resolved,
                    now: 0,
                    operation_hash: "sha256:00",
                };
                match execute("bank.transfer", &mut c) {
                    Err(ExecError::Refused(e)) => assert!(e.contains("`payee_iban`"), "{e}"),
                    other => panic!("not refused: {other:?}"),
                }
                Ok(Value::Null)
            })
            .unwrap();
    }
}
