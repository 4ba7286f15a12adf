//! The MCP proxy's overhead per tool call: the same rmcp client calls the
//! demo server's `send_money` directly (`ipc demo mcp-server` as a child
//! process) and through `ipc mcp` (which starts its own demo server and
//! decides every call: nine stages, a durable SQLite store, the decision's
//! receipt and the outcome's receipt). Calls alternate between the two, each
//! a new operation (ALLOW, below the step-up threshold). Then the same for a
//! passthrough (`list_vendors`: forwarded, its receipt written). Prints
//! median and p99 of each and the overhead at the median.
//!
//!   cargo run --release --example mcp_bench -- <path/to/ipc> [CALLS]
//!   (scripts/bench-mcp builds and runs it)
//!   IDLE_US=1000 ...   the client pauses that long before every call (an
//!                      agent's think time): what a call costs a proxy
//!                      that idled, not one kept busy back to back

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
tool = "list_vendors"
passthrough = true

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

/// User plus system CPU seconds of a process, all its threads (Linux's
/// `/proc`; `None` elsewhere).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // USER_HZ: 100 on every Linux build that matters here
    Some(ticks / 100.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Calls made on each path before the measured ones.
const WARMUP: usize = 50;

/// Calls `call(i)` on the direct and the proxied client alternately,
/// `calls` times each after [`WARMUP`], each after `idle` if given; the
/// sorted times of each.
async fn measure(
    direct: &Client,
    proxied: &Client,
    calls: usize,
    idle: Option<Duration>,
    call: &dyn Fn(usize) -> CallToolRequestParams,
) -> Result<(Vec<Duration>, Vec<Duration>), Box<dyn std::error::Error>> {
    let (mut d_times, mut p_times) = (vec![], vec![]);
    for i in 0..WARMUP + calls {
        let mut times = [Duration::ZERO; 2];
        for (k, client) in [direct, proxied].into_iter().enumerate() {
            if let Some(pause) = idle {
                // the client's whole thread sleeps: nothing of it runs
                std::thread::sleep(pause);
            }
            let t = Instant::now();
            let r = client.call_tool(call(i)).await?;
            times[k] = t.elapsed();
            if r.is_error == Some(true) {
                let path = ["direct", "proxied"][k];
                return Err(format!("{path} call {i} failed: {r:?}").into());
            }
        }
        if i >= WARMUP {
            d_times.push(times[0]);
            p_times.push(times[1]);
        }
    }
    d_times.sort();
    p_times.sort();
    Ok((d_times, p_times))
}

/// `IDLE_US`: the pause before every call, if any.
fn idle() -> Result<Option<Duration>, Box<dyn std::error::Error>> {
    match std::env::var("IDLE_US") {
        Err(_) => Ok(None),
        Ok(us) if us.is_empty() => Ok(None),
        Ok(us) => {
            let us: u64 = us
                .parse()
                .map_err(|e| format!("IDLE_US `{us}` is not a number of microseconds: {e}"))?;
            Ok(Some(Duration::from_micros(us)))
        }
    }
}

fn report(what: &str, d_times: &[Duration], p_times: &[Duration]) {
    let (dm, d99) = (pct(d_times, 0.5), pct(d_times, 0.99));
    let (pm, p99) = (pct(p_times, 0.5), pct(p_times, 0.99));
    println!("{what}");
    println!(
        "  direct  (client -> demo server):            median {:.3} ms  p99 {:.3} ms",
        ms(dm),
        ms(d99)
    );
    println!(
        "  proxied (client -> ipc mcp -> demo server):  median {:.3} ms  p99 {:.3} ms",
        ms(pm),
        ms(p99)
    );
    println!(
        "  overhead of the proxy per call: median {:.3} ms  p99 {:.3} ms",
        ms(pm) - ms(dm),
        ms(p99) - ms(d99)
    );
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
    let proxy_transport = TokioChildProcess::new(proxy_cmd)?;
    let proxy_pid = proxy_transport.id();
    let proxied = ().serve(proxy_transport).await?;

    let args = |i: usize| -> Map<String, Value> {
        json!({"recipient": "DE44500105175407324931", "amount": 1.0,
               "currency": "EUR", "subject": format!("bench {i}")})
        .as_object()
        .cloned()
        .unwrap_or_default()
    };
    let send = |i: usize| CallToolRequestParams::new("send_money").with_arguments(args(i));
    let list = |_: usize| CallToolRequestParams::new("list_vendors");
    let idle = idle()?;
    let pause = idle.map_or(String::new(), |d| {
        format!(", {} µs idle before each", d.as_micros())
    });
    println!(
        "calls per path: {calls} (after {WARMUP} warm-up{pause}), SQLite store synchronous = FULL"
    );
    for (what, call) in [
        (
            "guarded write (send_money)",
            &send as &dyn Fn(usize) -> CallToolRequestParams,
        ),
        ("passthrough (list_vendors)", &list),
    ] {
        let cpu_before = proxy_pid.and_then(cpu_seconds);
        let (d, p) = measure(&direct, &proxied, calls, idle, call).await?;
        let cpu = cpu_before.zip(proxy_pid.and_then(cpu_seconds));
        report(what, &d, &p);
        if let Some((before, after)) = cpu {
            let per_call = (after - before) / (calls + WARMUP) as f64 * 1000.0;
            println!("  CPU of the proxy process per call: {per_call:.3} ms");
        }
    }
    let _ = direct.cancel().await;
    let _ = proxied.cancel().await;
    Ok(())
}
