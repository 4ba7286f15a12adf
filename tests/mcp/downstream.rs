//! Issue #20, item 2: what the MCP proxy sends a downstream tool is what
//! the decision's receipt recorded. A config maps one tool with every kind
//! of mapping (rename, scale, format, claim, value, default, secret); the
//! demo server records the arguments of every call as it received them
//! (`--record`); each call's received arguments are compared with the
//! ALLOW receipt's `result.downstream` (values and hash, the secret as its
//! commitment). Item 7: every receipt kind of the proxy's store reads as
//! what it is in `ipc receipts show`.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use intentplane::gateway::Outcome;
use intentplane::mcp::proxy::Proxy;
use intentplane::store::Store;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServiceExt, model::ClientConfig};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const IPC: &str = env!("CARGO_BIN_EXE_ipc");
const PIN: &str = "4711-Tr0ub4dor";

fn repo(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(p)
        .display()
        .to_string()
}

/// The config: `schedule_transfer` declared inline, each parameter mapped
/// by one kind.
fn config(dir: &Path, record: &Path) -> PathBuf {
    let text = format!(
        r#"
packs = ["{packs}"]
world = "{world}"

[[servers]]
name = "demo"
command = "{ipc}"
args = ["demo", "mcp-server", "--record", "{record}"]

[session]
user = "emma"
scopes = ["payments.write"]
budget = "50000.00"
issuer_key = "{key}"
[session.claims]
account = "emma-checking"
currency = "EUR"

[pack]
name = "sched"
[pack.mandate]
account = "Id"

[[tools]]
server = "demo"
tool = "read_inbox"
passthrough = true

[[tools]]
server = "demo"
tool = "schedule_transfer"
scope = "payments.write"
budget_param = "amount"
[tools.params.account]
type = "Id"
claim = "account"
[tools.params.payee]
type = "Iban"
normalize = "iban"
arg = "iban"
[tools.params.amount]
type = "Money"
scale = 100
[tools.params.fee]
type = "Money"
scale = 100
format = "string"
[tools.params.via]
type = "Text"
value = "mcp"
arg = "channel"
[tools.params.priority]
type = "Int"
default = 3
[tools.params.pin]
type = "Text"
secret = true
[tools.params.note]
type = "Text"
default = ""
"#,
        packs = repo("packs/bank"),
        world = repo("examples/mcp/world.toml"),
        key = repo("examples/mcp/keys/issuer.key"),
        ipc = IPC,
        record = record.display(),
    );
    let path = dir.join("intentplane.toml");
    std::fs::write(&path, text).unwrap();
    path
}

struct Harness {
    _dir: tempfile::TempDir,
    record: PathBuf,
    store_path: PathBuf,
    store: Arc<dyn Store>,
    client: RunningService<RoleClient, ClientConfig>,
    proxy: Proxy,
}

async fn harness() -> Harness {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("received.txt");
    let path = config(dir.path(), &record);
    let setup = match intentplane::mcp::config::load(&path) {
        Ok(s) => s,
        Err(report) => panic!("{report}"),
    };
    let store = setup.store.clone();
    let proxy = Proxy::start(setup).await.expect("the proxy starts");
    let (a, b) = tokio::io::duplex(1 << 20);
    tokio::spawn(proxy.clone().serve_on(a));
    let client = ClientConfig::default()
        .serve(b)
        .await
        .expect("client connects");
    Harness {
        store_path: dir.path().join("intentplane.db"),
        _dir: dir,
        record,
        store,
        client,
        proxy,
    }
}

impl Harness {
    async fn call(&self, tool: &str, a: Value) -> CallToolResult {
        self.client
            .call_tool(
                CallToolRequestParams::new(tool.to_string())
                    .with_arguments(a.as_object().cloned().unwrap()),
            )
            .await
            .expect("the call gets a result")
    }

    /// `(tool, the arguments' JSON text as the downstream received it)`.
    fn received(&self) -> Vec<(String, String)> {
        std::fs::read_to_string(&self.record)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (t, j) = l.split_once('\t').unwrap();
                (t.to_string(), j.to_string())
            })
            .collect()
    }

    /// The chain, once the outcomes the proxy answered with are written
    /// (in the background, after the answer).
    fn receipts(&self) -> Vec<Value> {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(self.proxy.flush())
        });
        self.store
            .receipts()
            .unwrap()
            .into_iter()
            .map(|r| r.body)
            .collect()
    }
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = match v {
        Value::Object(m) => m.keys().cloned().collect(),
        Value::Array(a) => a.iter().map(|x| x.as_str().unwrap().to_string()).collect(),
        _ => panic!("{v}"),
    };
    k.sort();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_downstream_receives_is_what_the_receipt_records() {
    let h = harness().await;
    // the agent is shown only what it gives: not the claim, not the
    // constant; what has a default is not required
    let tools = h.client.list_all_tools().await.unwrap();
    let t = tools
        .iter()
        .find(|t| t.name == "schedule_transfer")
        .unwrap();
    let schema = Value::Object((*t.input_schema).clone());
    assert_eq!(
        keys(&schema["properties"]),
        ["amount", "fee", "iban", "note", "pin", "priority"],
        "{schema}"
    );
    assert_eq!(
        keys(&schema["required"]),
        ["amount", "fee", "iban", "pin"],
        "{schema}"
    );
    // an agent that sets what the config fills is refused, nothing sent
    let r = h
        .call(
            "schedule_transfer",
            json!({"account": "mallory", "iban": "DE44 5001 0517 5407 3249 31",
                   "amount": 1, "fee": "0.00", "pin": PIN}),
        )
        .await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("filled by intentplane"), "{}", text(&r));
    assert!(h.received().is_empty());

    let calls = [
        // the default left out, the optional note given
        json!({"iban": "de44 5001 0517 5407 3249 31", "amount": 12.5, "fee": "1.50",
               "pin": PIN, "note": "rent"}),
        // the default given, an integer amount, no note
        json!({"iban": "DE44500105175407324931", "amount": 1200, "fee": "0.05",
               "pin": PIN, "priority": 7}),
    ];
    for c in &calls {
        let r = h.call("schedule_transfer", c.clone()).await;
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
    }
    let received = h.received();
    assert_eq!(received.len(), 2, "{received:?}");
    let allows: Vec<Value> = h
        .receipts()
        .into_iter()
        .filter(|b| b["decision"] == "ALLOW")
        .collect();
    assert_eq!(allows.len(), 2);
    for ((tool, raw), (allow, call)) in received.iter().zip(allows.iter().zip(&calls)) {
        assert_eq!(tool, "schedule_transfer");
        let got: Map<String, Value> = serde_json::from_str(raw).unwrap();
        let down = &allow["result"]["downstream"];
        assert_eq!(down["tool"], "schedule_transfer");
        assert_eq!(down["server"], "demo");
        // every kind, as the tool takes it
        assert_eq!(got["account"], "emma-checking", "claim, sent: {raw}");
        assert_eq!(got["channel"], "mcp", "value, sent under its arg: {raw}");
        assert!(got.get("via").is_none(), "{raw}");
        assert_eq!(got["iban"], "DE44500105175407324931", "rename: {raw}");
        let amount = call["amount"].as_f64().unwrap();
        assert_eq!(got["amount"].as_f64(), Some(amount), "scale: {raw}");
        assert_eq!(got["fee"], call["fee"], "format string: {raw}");
        let priority = call.get("priority").cloned().unwrap_or(json!(3));
        assert_eq!(got["priority"], priority, "default: {raw}");
        assert_eq!(got["pin"], PIN, "secret, the value itself: {raw}");
        assert_eq!(got["note"], call.get("note").cloned().unwrap_or(json!("")));
        // the receipt records exactly that, the secret as its commitment
        let commitment = down["arguments"]["pin"].as_str().unwrap();
        assert!(commitment.starts_with("secret:sha256:"), "{commitment}");
        assert_eq!(allow["resolved"]["pin"], commitment);
        let mut as_recorded = got.clone();
        as_recorded.insert("pin".into(), json!(commitment));
        let as_recorded = Value::Object(as_recorded);
        assert_eq!(
            intentplane::canonical::value_to_jcs(&as_recorded).unwrap(),
            intentplane::canonical::value_to_jcs(&down["arguments"]).unwrap(),
            "received {raw}"
        );
        assert_eq!(
            down["arguments_hash"],
            intentplane::canonical::hash_of(&as_recorded).unwrap()
        );
        // the commitment stands for exactly the value the tool received
        let mandate = allow["mandate"]["id"].as_str().unwrap().to_string();
        let mut c = String::new();
        h.store
            .transaction(&mut |tx| {
                c = intentplane::gateway::secret::commitment(tx, &mandate, "pin", PIN)?;
                Ok(Value::Null)
            })
            .unwrap();
        assert_eq!(c, commitment);
    }
    // the clear value is nowhere in the store
    let dump = format!("{:?}", h.store.snapshot().unwrap());
    assert!(!dump.contains(PIN));
    drop(h.proxy);
}

/// A call the mapping cannot build is a DENY at the execution stage,
/// before anything is spent, and nothing is dispatched.
#[test]
fn a_call_that_cannot_be_built_is_denied_before_anything_is_spent() {
    use intentplane::gateway::testkit::{TestWorld, input, transfer};
    let tw = TestWorld::new();
    let gw = tw.gateway().execute_externally();
    let proposal = transfer("DE44 5001 0517 5407 3249 31", json!("40.00"));
    let refuse = |_: &Map<String, Value>, _: &intentplane::gateway::secret::SecretValues| {
        Err::<Value, String>("no such tool".into())
    };
    let dispatched = |i: &intentplane::gateway::Input, d: intentplane::gateway::Dispatch<'_>| {
        let mut out = vec![];
        gw.decide_all(
            intentplane::gateway::Ask::one(i).dispatching(d, intentplane::gateway::Effect::Write),
            &mut out,
        )
        .unwrap();
        out.pop().unwrap()
    };
    let d = dispatched(&input(proposal.clone(), &tw.emma(), vec![]), &refuse);
    assert_eq!(d.decision, Outcome::Deny, "{d:#?}");
    assert_eq!(d.stage.name(), "execution");
    assert!(d.reason.unwrap().contains("no such tool"));
    // the same operation then executes (it was not recorded as executed)
    let record = |r: &Map<String, Value>, _: &intentplane::gateway::secret::SecretValues| {
        Ok(json!({"arguments": r}))
    };
    let d = dispatched(&input(proposal, &tw.emma(), vec![]), &record);
    assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
    assert!(!d.replayed);
    assert_eq!(
        d.result.unwrap()["downstream"]["arguments"]["amount"],
        json!(4000)
    );
}

/// Item 7: the proxy's receipts (refused, passthrough, decision, outcome)
/// read as what they are, in both formats; booleans are booleans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_receipt_of_the_proxy_reads_as_what_it_is() {
    let h = harness().await;
    h.call("delete_file", json!({"path": "/etc"})).await;
    h.call("read_inbox", json!({})).await;
    let r = h
        .call(
            "schedule_transfer",
            json!({"iban": "DE44500105175407324931", "amount": 3, "fee": "0.10", "pin": PIN}),
        )
        .await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    let recs = h.receipts();
    let kind = |k: &str| recs.iter().find(|b| b["kind"] == k).unwrap().clone();
    assert_eq!(kind("passthrough")["is_error"], json!(false));
    assert_eq!(kind("outcome")["is_error"], json!(false));
    let store = h.store_path.display().to_string();
    drop(h.client);
    let out = std::process::Command::new(IPC)
        .args(["receipts", "show", &store])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["seq", "kind", "subject", "detail", "hash"]
    );
    let row = |n: usize| {
        lines[n + 1]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    // the first receipt is the durable session's start
    assert!(
        lines[1].split_whitespace().nth(1) == Some("session") && lines[1].contains("start (first)"),
        "{stdout}"
    );
    assert!(
        row(1).starts_with("2 refused delete_file not listed in the config "),
        "{stdout}"
    );
    assert!(
        row(2).starts_with("3 passthrough demo/read_inbox ok "),
        "{stdout}"
    );
    assert!(
        row(3).starts_with("4 ALLOW schedule_transfer execution "),
        "{stdout}"
    );
    assert!(
        row(4).starts_with("5 outcome mcp:demo/schedule_transfer ok, operation "),
        "{stdout}"
    );
    assert!(!stdout.contains(" - "), "{stdout}");
    let out = std::process::Command::new(IPC)
        .args(["receipts", "show", &store, "--format", "json"])
        .output()
        .unwrap();
    let doc: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    let kinds: Vec<&str> = doc
        .iter()
        .map(|r| r["summary"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["session", "refused", "passthrough", "ALLOW", "outcome"]
    );
    assert_eq!(doc[2]["summary"]["subject"], "demo/read_inbox");
    assert_eq!(doc[2]["summary"]["detail"], "ok");
    assert_eq!(doc[1]["summary"]["detail"], "not listed in the config");
}

/// Item 7: a registry change and an approver's decline read as what they
/// are too.
#[test]
fn registry_and_approval_receipts_read_as_what_they_are() {
    use intentplane::gateway::testkit::{TestWorld, decide, transfer};
    use intentplane::gateway::trusted::RegistryChange;
    let tw = TestWorld::new();
    let path = tw.dir.path().join("store.db");
    let store: Arc<dyn Store> =
        Arc::new(intentplane::store::sqlite::SqliteStore::open(&path).unwrap());
    let gw = tw.gateway_with(store);
    let iban = "DE02 1203 0000 0000 2020 51";
    gw.change_registry(
        "bank",
        "beneficiaries",
        "emma",
        &RegistryChange::Add { value: json!(iban) },
        "emma",
    )
    .unwrap();
    let d = decide(&gw, transfer(iban, json!("1200.00")), &tw.emma());
    assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    gw.decline(d.operation_hash.as_deref().unwrap(), "emma")
        .unwrap();
    drop(gw);
    let out = std::process::Command::new(IPC)
        .args(["receipts", "show", &path.display().to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<String> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert!(
        rows[1].starts_with(
            "1 registry bank.beneficiaries add DE02120300000000202051 by emma (owner emma) "
        ),
        "{stdout}"
    );
    assert!(
        rows[2].starts_with("2 PENDING payment.transfer approval: "),
        "{stdout}"
    );
    assert!(
        rows[3].starts_with("3 approval operation ") && rows[3].contains(" decline by emma "),
        "{stdout}"
    );
}

/// The demo's `send_money` as the agent sees it through the proxy: the
/// account the session's claim fills is neither shown nor required, the
/// subject (a default) not required; a closed schema that lacks an
/// argument the proxy sends is found at start-up.
#[test]
fn the_advertised_schema_is_what_the_agent_gives() {
    let tools = intentplane::mcp::testkit::demo_tools();
    let t = tools.iter().find(|t| t.tool == "send_money").unwrap();
    let down = intentplane::demo::mcp_server::tools()
        .into_iter()
        .find(|d| d.name == "send_money")
        .unwrap();
    assert!(
        down.input_schema["required"]
            .as_array()
            .unwrap()
            .contains(&json!("from_account"))
    );
    let shown = Value::Object(t.advertised_schema(&down.input_schema));
    assert_eq!(
        keys(&shown["properties"]),
        ["amount", "currency", "recipient", "subject"]
    );
    assert_eq!(
        keys(&shown["required"]),
        ["amount", "currency", "recipient"]
    );
    assert_eq!(t.undeclared_argument(&down.input_schema), None);
    let mut closed = (*down.input_schema).clone();
    closed.insert("additionalProperties".into(), json!(false));
    assert_eq!(t.undeclared_argument(&closed), None);
    closed["properties"]
        .as_object_mut()
        .unwrap()
        .remove("from_account");
    assert_eq!(t.undeclared_argument(&closed), Some("from_account"));
}
