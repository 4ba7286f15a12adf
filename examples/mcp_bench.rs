//! The MCP proxy's overhead per tool call: the same rmcp client calls the
//! demo server's `send_money` directly (`ipc demo mcp-server` as a child
//! process) and through `ipc mcp` (which starts its own demo server and
//! decides every call: nine stages, a durable SQLite store, the decision's
//! receipt and the outcome's receipt). Calls alternate between the two, each
//! a new operation (ALLOW, below the step-up threshold). Prints median and
//! p99 of each and the overhead at the median.
//!
//!   cargo run --release --example mcp_bench -- <path/to/ipc> [CALLS]
//!   (scripts/bench-mcp builds and runs it)

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn config(root: &Path, tmp: &Path) -> String {
    let r = root.display();
    let t = tmp.display();
    format!(
        r#"packs = ["{r}/packs/bank"]
world = "{r}/examples/mcp/world.toml"
store = "{t}/intentplane.db"

[[servers]]
name = "demo"
command = "ipc"
args = ["demo", "mcp-server"]

[session]
user = "emma"
scopes = ["payments.write"]
budget = "1000000.00"
calls = 1000000
ttl = 86400
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
"#
    )
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut argv = std::env::args().skip(1);
    let ipc = PathBuf::from(argv.next().ok_or("usage: mcp_bench <ipc> [CALLS]")?);
    let calls: usize = argv.next().map(|n| n.parse()).transpose()?.unwrap_or(2000);
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir()?;
    std::fs::create_dir_all(tmp.path().join("approvals"))?;
    let cfg = tmp.path().join("intentplane.toml");
    std::fs::write(&cfg, config(&root, tmp.path()))?;

    let mut direct_cmd = tokio::process::Command::new(&ipc);
    direct_cmd.args(["demo", "mcp-server"]);
    let direct = ().serve(TokioChildProcess::new(direct_cmd)?).await?;
    let mut proxy_cmd = tokio::process::Command::new(&ipc);
    proxy_cmd.arg("mcp").arg("--config").arg(&cfg);
    let proxied = ().serve(TokioChildProcess::new(proxy_cmd)?).await?;

    let args = |i: usize| -> Map<String, Value> {
        json!({"recipient": "DE44500105175407324931", "amount": 1.0,
               "currency": "EUR", "subject": format!("bench {i}")})
        .as_object()
        .cloned()
        .unwrap_or_default()
    };
    let warmup = 50;
    let (mut d_times, mut p_times) = (vec![], vec![]);
    for i in 0..warmup + calls {
        let t = Instant::now();
        let r = direct
            .call_tool(CallToolRequestParams::new("send_money").with_arguments(args(i)))
            .await?;
        let d = t.elapsed();
        if r.is_error == Some(true) {
            return Err(format!("direct call {i} failed: {r:?}").into());
        }
        let t = Instant::now();
        let r = proxied
            .call_tool(CallToolRequestParams::new("send_money").with_arguments(args(i)))
            .await?;
        let p = t.elapsed();
        if r.is_error == Some(true) {
            return Err(format!("proxied call {i} failed: {r:?}").into());
        }
        if i >= warmup {
            d_times.push(d);
            p_times.push(p);
        }
    }
    d_times.sort();
    p_times.sort();
    let (dm, d99) = (pct(&d_times, 0.5), pct(&d_times, 0.99));
    let (pm, p99) = (pct(&p_times, 0.5), pct(&p_times, 0.99));
    println!("calls per path: {calls} (after {warmup} warm-up), SQLite store synchronous = FULL");
    println!(
        "direct  (client -> demo server):            median {:.3} ms  p99 {:.3} ms",
        ms(dm),
        ms(d99)
    );
    println!(
        "proxied (client -> ipc mcp -> demo server):  median {:.3} ms  p99 {:.3} ms",
        ms(pm),
        ms(p99)
    );
    println!(
        "overhead of the proxy per call: median {:.3} ms  p99 {:.3} ms",
        ms(pm) - ms(dm),
        ms(p99) - ms(d99)
    );
    let _ = direct.cancel().await;
    let _ = proxied.cancel().await;
    Ok(())
}
