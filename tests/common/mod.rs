//! The test world for the integration tests: the library's
//! `gateway::testkit` (the `testkit` feature, which the crate's
//! dev-dependency on itself turns on for tests and examples).

pub use intentplane::gateway::testkit::*;
pub mod chain;
pub mod cli;
pub mod counting;
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod tools;

/// `from` copied into `to`, folders and files: a shipped pack or example
/// into a test's own folder, as it is.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// A transfer of `cents` from `tenant`'s own account (emma or noah) to a
/// payee of its registries.
pub fn transfer_of(tenant: &str, cents: i64) -> serde_json::Value {
    let iban = if tenant == "emma" {
        LANDLORD
    } else {
        "NL91ABNA0417164300"
    };
    serde_json::json!({"action": "payment.transfer", "args": {
        "from_account": format!("{tenant}-checking"), "payee_iban": iban,
        "amount": format!("{}.{:02}", cents / 100, cents % 100), "currency": "EUR"}})
}

/// The owners of the decisions on the store at `p` (`-` for a decision
/// without a mandate), shard placements left out.
pub fn decision_owners(p: &std::path::Path) -> Vec<String> {
    intentplane::store::open(p, false)
        .unwrap()
        .receipts()
        .unwrap()
        .iter()
        .filter(|r| r.body["kind"] != "shard")
        .map(|r| {
            r.body["mandate"]["owner"]
                .as_str()
                .unwrap_or("-")
                .to_string()
        })
        .collect()
}
