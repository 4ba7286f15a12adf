//! `ipc mcp` as a process across restarts: the session is durable. Each
//! test writes a config over the bank pack in a temporary folder (its own
//! store and demo-server state), starts `ipc mcp --config` as a child
//! process with an rmcp client on its stdio, and stops it (SIGKILL where
//! the test says so) and starts it again on the same config and store.
//! What the downstream executed is read from the demo server's state file.
// needs a part of the default features: the test is off without it
#![cfg(feature = "mcp")]

use crate::common::mcp::text;
use intentplane::gateway::approval::SignedApproval;
use intentplane::store::Store;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const IPC: &str = env!("CARGO_BIN_EXE_ipc");
const LANDLORD: &str = "DE44500105175407324931";

pub(crate) struct Env {
    dir: tempfile::TempDir,
    /// The store's location: an SQLite file in `dir`, or a PostgreSQL URL.
    store: String,
    /// The PostgreSQL schema, dropped with the test.
    #[cfg(feature = "postgres")]
    _pg: Option<crate::common::pg::Schema>,
}

#[cfg(feature = "postgres")]
impl Drop for Env {
    /// The schema is dropped off the async workers.
    fn drop(&mut self) {
        if let Some(pg) = self._pg.take() {
            tokio::task::block_in_place(|| drop(pg));
        }
    }
}

/// The store a test runs on.
#[derive(Clone, Copy)]
pub(crate) enum On {
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Env {
    /// A config with `budget` (major units) and the demo server started
    /// with `extra` arguments, on an SQLite file.
    pub(crate) fn new(budget: &str, extra: &[&str]) -> Env {
        Self::on(On::Sqlite, budget, extra).expect("an SQLite store")
    }

    /// [`Env::new`] on the store `on`; `None` (skipped, loudly) for
    /// PostgreSQL without `IPC_TEST_PG`.
    pub(crate) fn on(on: On, budget: &str, extra: &[&str]) -> Option<Env> {
        let dir = tempfile::tempdir().unwrap();
        let (store, pg) = match on {
            On::Sqlite => (
                dir.path().join("intentplane.db").display().to_string(),
                None,
            ),
            #[cfg(feature = "postgres")]
            On::Postgres => {
                let s = tokio::task::block_in_place(crate::common::pg::fresh)?;
                (s.url.clone(), Some(s))
            }
        };
        #[cfg(not(feature = "postgres"))]
        let _: Option<()> = pg;
        let env = Env {
            dir,
            store,
            #[cfg(feature = "postgres")]
            _pg: pg,
        };
        std::fs::create_dir_all(env.path().join("approvals")).unwrap();
        env.write_config(budget, extra);
        Some(env)
    }

    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    pub(crate) fn config(&self) -> PathBuf {
        self.path().join("intentplane.toml")
    }

    fn write_config(&self, budget: &str, extra: &[&str]) {
        let r = env!("CARGO_MANIFEST_DIR");
        let t = self.path().display();
        let mut args = vec![
            "\"demo\"".to_string(),
            "\"mcp-server\"".into(),
            "\"--state\"".into(),
            format!("\"{t}/state.json\""),
        ];
        args.extend(extra.iter().map(|a| format!("\"{a}\"")));
        let text = format!(
            r#"packs = ["{r}/packs/bank"]
world = "{r}/examples/mcp/world.toml"
store = "{store}"

[[servers]]
name = "demo"
command = "ipc"
args = [{args}]

[session]
user = "emma"
scopes = ["payments.write"]
budget = "{budget}"
calls = 50
ttl = 3600
issuer_key = "{r}/examples/mcp/keys/issuer.key"
user_key = "{r}/examples/mcp/keys/emma.key"
approvals_dir = "{t}/approvals"
[session.claims]
account = "emma-checking"
currency = "EUR"

[[tools]]
server = "demo"
tool = "send_money"
action = "payment.transfer"
[tools.params.from_account]
claim = "account"
[tools.params.payee_iban]
arg = "recipient"
[tools.params.amount]
scale = 100
[tools.params.currency]
[tools.params.subject]

[[tools]]
server = "demo"
tool = "read_inbox"
passthrough = "unguarded"
"#,
            args = args.join(", "),
            store = self.store,
        );
        std::fs::write(self.config(), text).unwrap();
    }

    /// `ipc mcp --config` (and `extra` flags) with a client on its stdio.
    async fn start(&self, extra: &[&str]) -> Running {
        let mut cmd = tokio::process::Command::new(IPC);
        cmd.arg("mcp")
            .arg("--config")
            .arg(self.config())
            .args(extra)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let client = match ().serve((stdout, stdin)).await {
            Ok(c) => c,
            Err(e) => panic!(
                "the proxy does not answer ({e}): {}",
                stderr_of(&mut child).await
            ),
        };
        Running { child, client }
    }

    /// The downstream's executed calls of `send_money`.
    pub(crate) fn sent(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.path().join("state.json")).unwrap_or_default();
        let st: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        st["calls"]
            .as_array()
            .map(|c| {
                c.iter()
                    .filter(|c| c["tool"] == "send_money")
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `f` on the store, opened, used and closed off the async workers
    /// (PostgreSQL's client runs a runtime of its own, which cannot start
    /// inside another's).
    fn with_store<T>(&self, f: impl FnOnce(&dyn Store) -> T) -> T {
        tokio::task::block_in_place(|| {
            let store = intentplane::store::open(Path::new(&self.store), false).unwrap();
            f(store.as_ref())
        })
    }

    pub(crate) fn receipts(&self, kind: &str) -> Vec<Value> {
        self.all_receipts()
            .into_iter()
            .filter(|b| b["kind"] == kind)
            .collect()
    }

    fn all_receipts(&self) -> Vec<Value> {
        self.with_store(|s| s.receipts().unwrap())
            .into_iter()
            .map(|r| r.body)
            .collect()
    }

    /// Whether each of these mandates is revoked in the store.
    fn revoked(&self, ids: &[&str]) -> Vec<bool> {
        let mut revoked = vec![];
        self.with_store(|s| {
            s.transaction(&mut |tx| {
                revoked = ids
                    .iter()
                    .map(|id| tx.revoked(id))
                    .collect::<Result<_, _>>()?;
                Ok(Value::Null)
            })
        })
        .unwrap();
        revoked
    }

    /// The whole store verifies.
    fn verifies(&self) -> bool {
        self.with_store(|s| intentplane::store::verify_store(&s.snapshot().unwrap(), None).is_ok())
    }
}

struct Running {
    child: tokio::process::Child,
    client: RunningService<RoleClient, ()>,
}

impl Running {
    async fn call(&self, a: Map<String, Value>) -> CallToolResult {
        let call = self
            .client
            .call_tool(CallToolRequestParams::new("send_money").with_arguments(a));
        tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect(
                "the proxy answers within 30 s (a call sent to the hanging downstream never does)",
            )
            .expect("the call gets a result")
    }

    /// Closes the client and waits for the proxy to exit; its stderr.
    async fn stop(self) -> String {
        let Running { mut child, client } = self;
        let _ = client.cancel().await;
        let _ = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
        stderr_of(&mut child).await
    }

    /// SIGKILL, no warning; its stderr.
    async fn kill(self) -> String {
        let Running { mut child, client } = self;
        child.start_kill().unwrap();
        let _ = child.wait().await;
        drop(client);
        stderr_of(&mut child).await
    }
}

pub(crate) async fn stderr_of(child: &mut tokio::process::Child) -> String {
    use tokio::io::AsyncReadExt;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = tokio::time::timeout(Duration::from_secs(5), e.read_to_string(&mut s)).await;
    }
    s
}

pub(crate) fn pay(amount: f64, subject: &str) -> Map<String, Value> {
    json!({"recipient": LANDLORD, "amount": amount, "currency": "EUR", "subject": subject})
        .as_object()
        .cloned()
        .unwrap()
}

fn op_of(r: &CallToolResult) -> Option<String> {
    let op = r.structured_content.as_ref()?;
    op["operation_hash"].as_str().map(str::to_string)
}

/// A passthrough's receipt is written, not synced, before its result is
/// returned: the proxy killed right after the answer loses none of them
/// (only a crash of the machine could lose such a tail, never a
/// decision), and the chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_answered_before_a_sigkill_keeps_its_receipt() {
    let env = Env::new("1000.00", &[]);
    let p = env.start(&[]).await;
    for _ in 0..3 {
        let r = p
            .client
            .call_tool(CallToolRequestParams::new("read_inbox"))
            .await
            .expect("the read gets a result");
        assert_ne!(r.is_error, Some(true), "{}", text(&r));
    }
    p.kill().await;
    assert_eq!(env.receipts("passthrough").len(), 3);
    assert!(env.verifies());
}

/// The proxy is killed after the decision committed and the downstream
/// executed, before the downstream answered: started again on the same
/// config and store, the agent's retry is "outcome not recorded yet ... ask
/// the user"
/// and the downstream is never called a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_sigkill_is_never_sent_again_after_a_restart() {
    cut_off_by_sigkill(On::Sqlite).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_sigkill_is_never_sent_again_after_a_restart_postgres() {
    cut_off_by_sigkill(On::Postgres).await;
}

async fn cut_off_by_sigkill(on: On) {
    let Some(env) = Env::on(on, "1000.00", &["--hang-on", "send_money"]) else {
        return;
    };
    let first = env.start(&[]).await;
    let a = pay(30.0, "rent, cut off");
    let client = first.client.peer().clone();
    let call = {
        let a = a.clone();
        tokio::spawn(async move {
            client
                .call_tool(CallToolRequestParams::new("send_money").with_arguments(a))
                .await
        })
    };
    // the decision committed and the downstream executed: it hangs now
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while env.sent().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the downstream never got the call"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().await;
    let answered = tokio::time::timeout(Duration::from_secs(10), call).await;
    assert!(
        !matches!(answered, Ok(Ok(Ok(_)))),
        "the killed proxy never answered"
    );
    for round in 0..2 {
        let again = env.start(&[]).await;
        let r = again.call(a.clone()).await;
        assert_eq!(r.is_error, Some(true), "round {round}: {}", text(&r));
        assert!(
            text(&r).contains("outcome not recorded yet") && text(&r).contains("ask the user"),
            "round {round}: {}",
            text(&r)
        );
        let stderr = again.stop().await;
        assert!(stderr.contains("session continued"), "{stderr}");
        assert_eq!(env.sent().len(), 1, "round {round}: sent a second time");
    }
    // one session, started once
    assert_eq!(env.receipts("session").len(), 1);
}

/// The budget is the session's, not the process's: 700.00 under a
/// 1,000.00 budget, then 700.00 after each of three restarts (two of them
/// SIGKILL), then the 300.00 left: never more than the budget executed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_holds_across_restarts() {
    budget_across_restarts(On::Sqlite).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_holds_across_restarts_postgres() {
    budget_across_restarts(On::Postgres).await;
}

async fn budget_across_restarts(on: On) {
    let Some(env) = Env::on(on, "1000.00", &[]) else {
        return;
    };
    let mut ops = vec![];
    for round in 0..4 {
        let p = env.start(&[]).await;
        let r = p.call(pay(700.0, &format!("round {round}"))).await;
        if round == 0 {
            assert_ne!(r.is_error, Some(true), "{}", text(&r));
        } else {
            assert_eq!(r.is_error, Some(true), "round {round}: {}", text(&r));
            assert!(
                text(&r).contains("DENY at stage `budget`"),
                "round {round}: {}",
                text(&r)
            );
        }
        ops.extend(op_of(&r));
        if round % 2 == 0 {
            p.kill().await;
        } else {
            p.stop().await;
        }
    }
    let p = env.start(&[]).await;
    let r = p.call(pay(300.0, "the rest")).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    let r = p.call(pay(0.01, "one cent too many")).await;
    assert!(text(&r).contains("DENY at stage `budget`"), "{}", text(&r));
    p.stop().await;
    let total: f64 = env
        .sent()
        .iter()
        .map(|c| c["args"]["amount"].as_f64().unwrap())
        .sum();
    assert_eq!(env.sent().len(), 2);
    assert!(total <= 1000.0, "{total}");
    // every decision was under the same mandate
    let mandates: std::collections::BTreeSet<String> = env
        .all_receipts()
        .into_iter()
        .filter_map(|b| b["mandate"]["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(mandates.len(), 1, "{mandates:?}");
}

/// A step-up left PENDING, approved out of band while the proxy was down:
/// the same call after the restart is the same operation, and executes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_survives_a_restart() {
    pending_across_restarts(On::Sqlite).await;
}

/// (the step-up reads the pending operation to show it: off the async
/// workers, as every store call)
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pending_approval_survives_a_restart_postgres() {
    pending_across_restarts(On::Postgres).await;
}

async fn pending_across_restarts(on: On) {
    let Some(env) = Env::on(on, "5000.00", &[]) else {
        return;
    };
    let a = pay(1500.0, "deposit");
    let p = env.start(&[]).await;
    // this client declares no elicitation: the step-up stays pending
    let r = p.call(a.clone()).await;
    assert_eq!(r.is_error, Some(true));
    let op = op_of(&r).expect("the pending operation's hash");
    p.kill().await;
    let key = intentplane::keys::load_secret(&PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/mcp/keys/emma.key"
    )))
    .unwrap();
    let expires = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
        + 600;
    let signed = SignedApproval::issue("emma", &op, expires, &key).unwrap();
    std::fs::write(
        env.path().join("approvals/deposit.json"),
        serde_json::to_string(&signed).unwrap(),
    )
    .unwrap();
    let p = env.start(&[]).await;
    let r = p.call(a).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    p.stop().await;
    assert_eq!(env.sent().len(), 1);
    assert_eq!(env.sent()[0]["args"]["amount"], json!(1500.0));
}

/// A new session only when the declared content changes or when asked,
/// and the previous mandate is then revoked in the store, with a receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_revokes_the_previous_one() {
    let env = Env::new("1000.00", &[]);
    let p = env.start(&[]).await;
    let r = p.call(pay(700.0, "first")).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    p.stop().await;
    let first = env.receipts("session");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0]["reason"], "first");
    let a = first[0]["mandates"][0].as_str().unwrap().to_string();

    // the same content: continued (the budget is spent)
    let p = env.start(&[]).await;
    let r = p.call(pay(700.0, "second")).await;
    assert!(text(&r).contains("DENY at stage `budget`"), "{}", text(&r));
    p.stop().await;
    assert_eq!(env.receipts("session").len(), 1);

    // another budget: a new session, the old mandate revoked
    env.write_config("2000.00", &[]);
    let p = env.start(&[]).await;
    let r = p.call(pay(700.0, "second")).await;
    assert_ne!(r.is_error, Some(true), "{}", text(&r));
    let stderr = p.stop().await;
    assert!(stderr.contains("new session"), "{stderr}");
    let s = env.receipts("session");
    assert_eq!(s.len(), 2);
    assert_eq!(s[1]["reason"], "changed");
    assert_eq!(s[1]["revoked"], json!([a]));
    let b = s[1]["mandates"][0].as_str().unwrap().to_string();
    assert_ne!(a, b);

    // asked for: another one, the second revoked
    let p = env.start(&["--new-session"]).await;
    p.stop().await;
    let s = env.receipts("session");
    assert_eq!(s.len(), 3);
    assert_eq!(s[2]["reason"], "asked");
    assert_eq!(s[2]["revoked"], json!([b]));
    assert_eq!(env.revoked(&[&a, &b]), [true, true]);
    assert!(env.verifies());
}
