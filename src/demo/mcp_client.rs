//! `ipc demo mcp`: a scripted MCP client (rmcp) playing an agent that
//! follows the "we changed banks" e-mail, against `ipc mcp` started on a
//! copy of `examples/mcp/intentplane.toml` whose store and demo-server state
//! are in a temporary folder (so the demo can be run again and again).
//!
//! The user behind the client confirms the first step-up and declines the
//! second.

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, ErrorData as McpError, ServiceExt};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The user: answers confirmations from a script, remembers what was shown.
#[derive(Clone)]
struct ScriptedUser {
    answers: Arc<Mutex<Vec<ElicitationAction>>>,
    shown: Arc<Mutex<Vec<(String, String)>>>,
}

impl ClientHandler for ScriptedUser {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::builder().enable_elicitation().build(),
            Implementation::new("ipc-demo-mcp", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, McpError> {
        let message = match &request {
            ElicitRequestParams::FormElicitationParams { message, .. } => message.clone(),
            _ => String::new(),
        };
        let action = self
            .answers
            .lock()
            .ok()
            .and_then(|mut a| (!a.is_empty()).then(|| a.remove(0)))
            .unwrap_or(ElicitationAction::Decline);
        let said = match action {
            ElicitationAction::Accept => "accept",
            ElicitationAction::Decline => "decline",
            _ => "cancel",
        };
        if let Ok(mut s) = self.shown.lock() {
            s.push((message, said.to_string()));
        }
        let accepted = matches!(action, ElicitationAction::Accept);
        let mut r = ElicitResult::new(action);
        if accepted {
            r = r.with_content(json!({}));
        }
        Ok(r)
    }
}

/// One step of the script and what came back.
struct Step {
    what: &'static str,
    tool: &'static str,
    args: Value,
    result: CallToolResult,
    asked: Option<(String, String)>,
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The config with every relative path made absolute (against the
/// config's folder), the store and the demo server's state in `tmp`.
pub fn rebase_config(config: &Path, tmp: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(config)
        .map_err(|e| format!("cannot read `{}`: {e}", config.display()))?;
    let mut t: toml::Table =
        toml::from_str(&text).map_err(|e| format!("invalid `{}`: {e}", config.display()))?;
    let dir = config
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    let abs = |v: &mut toml::Value| {
        if let Some(s) = v.as_str()
            && Path::new(s).is_relative()
        {
            *v = toml::Value::String(dir.join(s).display().to_string());
        }
    };
    if let Some(packs) = t.get_mut("packs").and_then(|p| p.as_array_mut()) {
        packs.iter_mut().for_each(abs);
    }
    for k in ["world", "bundle", "bundle_key"] {
        if let Some(v) = t.get_mut(k) {
            abs(v);
        }
    }
    t.insert(
        "store".into(),
        toml::Value::String(tmp.join("intentplane.db").display().to_string()),
    );
    if let Some(s) = t.get_mut("session").and_then(|s| s.as_table_mut()) {
        for k in ["issuer_key", "user_key", "token"] {
            if let Some(v) = s.get_mut(k) {
                abs(v);
            }
        }
        s.insert(
            "approvals_dir".into(),
            toml::Value::String(tmp.join("approvals").display().to_string()),
        );
    }
    if let Some(regs) = t
        .get_mut("pack")
        .and_then(|p| p.get_mut("registries"))
        .and_then(|r| r.as_table_mut())
    {
        for (_, r) in regs.iter_mut() {
            if let Some(f) = r.get_mut("file") {
                abs(f);
            }
        }
    }
    if let Some(servers) = t.get_mut("servers").and_then(|s| s.as_array_mut()) {
        for s in servers {
            let Some(s) = s.as_table_mut() else { continue };
            let name = s
                .get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("demo")
                .to_string();
            if let Some(args) = s.get_mut("args").and_then(|a| a.as_array_mut())
                && args.first().and_then(|a| a.as_str()) == Some("demo")
            {
                args.push(toml::Value::String("--state".into()));
                args.push(toml::Value::String(
                    tmp.join(format!("{name}-state.json")).display().to_string(),
                ));
            }
            s.insert("cwd".into(), toml::Value::String(dir.display().to_string()));
        }
    }
    let _ = std::fs::create_dir_all(tmp.join("approvals"));
    toml::to_string(&t).map_err(|e| e.to_string())
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Plays the script; returns the exit code.
pub fn run(config: &Path, json_out: bool, out: &mut dyn std::io::Write) -> Result<u8, String> {
    let tmp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cfg = tmp.path().join("intentplane.toml");
    std::fs::write(&cfg, rebase_config(config, tmp.path())?).map_err(|e| e.to_string())?;
    let ipc = std::env::current_exe().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let user = ScriptedUser {
        answers: Arc::new(Mutex::new(vec![
            ElicitationAction::Accept,
            ElicitationAction::Decline,
        ])),
        shown: Arc::new(Mutex::new(vec![])),
    };
    let (steps, state) = rt.block_on(play(&ipc, &cfg, tmp.path(), &user))?;
    let executed: Vec<Value> = state["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["tool"] == "send_money")
        .collect();
    let written = if json_out {
        write_json(out, &steps, &executed)
    } else {
        write_human(out, &steps, &executed)
    };
    written.map_err(|e| e.to_string())?;
    // the story holds: one payment, to the landlord, in the trusted spelling
    let ok = executed.len() == 1
        && executed[0]["args"]["recipient"]
            .as_str()
            .is_some_and(|r| r.replace(' ', "") == "DE44500105175407324931" && !r.contains("de44"));
    Ok(u8::from(!ok))
}

/// The agent's calls: what it does, the tool, the arguments.
fn script() -> Vec<(&'static str, &'static str, Value)> {
    vec![
        ("the agent reads the inbox", "read_inbox", json!({})),
        (
            "it follows the e-mail: 1,200.00 to the IBAN in the e-mail",
            "send_money",
            json!({"recipient": super::mcp_server::ATTACKER_IBAN, "amount": 1200.00, "currency": "EUR", "subject": "Rent December"}),
        ),
        ("it looks the landlord up", "list_vendors", json!({})),
        (
            "1,200.00 to the landlord on file, spelled its own way (the user confirms)",
            "send_money",
            json!({"recipient": "de44 5001 0517 5407 3249 31", "amount": 1200.00, "currency": "EUR", "subject": "Rent December"}),
        ),
        (
            "1,500.00 more to the landlord (the user declines)",
            "send_money",
            json!({"recipient": "DE44500105175407324931", "amount": 1500.00, "currency": "EUR", "subject": "Rent January"}),
        ),
        (
            "12,000.00: above the hard cap (10,000.00) and the session's budget",
            "send_money",
            json!({"recipient": "DE44500105175407324931", "amount": 12000.00, "currency": "EUR", "subject": "Deposit"}),
        ),
        (
            "3,900.00: beyond what is left of the session's budget",
            "send_money",
            json!({"recipient": "DE44500105175407324931", "amount": 3900.00, "currency": "EUR", "subject": "Deposit"}),
        ),
        (
            "a tool the config does not list",
            "delete_file",
            json!({"path": "/home/emma/contract.pdf"}),
        ),
    ]
}

/// Starts `ipc mcp` on `cfg`, plays the script as `user`, and returns each
/// step and the demo server's state (in `tmp`) after the last.
async fn play(
    ipc: &Path,
    cfg: &Path,
    tmp: &Path,
    user: &ScriptedUser,
) -> Result<(Vec<Step>, Value), String> {
    let mut cmd = tokio::process::Command::new(ipc);
    cmd.arg("mcp").arg("--config").arg(cfg);
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start `ipc mcp`: {e}"))?;
    let client = user
        .clone()
        .serve(transport)
        .await
        .map_err(|e| format!("`ipc mcp` does not answer: {e}"))?;
    let mut steps = vec![];
    for (what, tool, a) in script() {
        let before = user.shown.lock().map(|s| s.len()).unwrap_or(0);
        let result = client
            .call_tool(CallToolRequestParams::new(tool).with_arguments(args(a.clone())))
            .await
            .map_err(|e| format!("`{tool}` failed: {e}"))?;
        let asked = user.shown.lock().ok().and_then(|s| s.get(before).cloned());
        steps.push(Step {
            what,
            tool,
            args: a,
            result,
            asked,
        });
    }
    let _ = client.cancel().await;
    let state: Value = std::fs::read_to_string(tmp.join("demo-state.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    Ok((steps, state))
}

fn write_json(
    out: &mut dyn std::io::Write,
    steps: &[Step],
    executed: &[Value],
) -> std::io::Result<()> {
    let doc = json!({
        "demo": "mcp",
        "steps": steps.iter().map(|s| json!({
            "step": s.what,
            "tool": s.tool,
            "args": s.args,
            "is_error": s.result.is_error.unwrap_or(false),
            "text": text(&s.result),
            "asked": s.asked.as_ref().map(|(m, a)| json!({"shown": m, "answer": a})),
        })).collect::<Vec<_>>(),
        "executed_by_the_bank": executed,
    });
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    )
}

fn write_human(
    out: &mut dyn std::io::Write,
    steps: &[Step],
    executed: &[Value],
) -> std::io::Result<()> {
    writeln!(
        out,
        "An MCP client's agent follows the \"we changed banks\" e-mail through `ipc mcp`:\n"
    )?;
    for (i, s) in steps.iter().enumerate() {
        write_step(out, i + 1, s)?;
    }
    writeln!(out, "What the bank actually executed:")?;
    for c in executed {
        writeln!(out, "   send_money {}", c["args"])?;
    }
    Ok(())
}

/// Step `n`: what the agent did, what the user was asked and answered,
/// and what came back (its first 400 characters).
fn write_step(out: &mut dyn std::io::Write, n: usize, s: &Step) -> std::io::Result<()> {
    writeln!(out, "{n}. {}", s.what)?;
    writeln!(out, "   → {} {}", s.tool, s.args)?;
    if let Some((m, a)) = &s.asked {
        writeln!(out, "   the user is asked:")?;
        for line in m.lines() {
            writeln!(out, "   │ {line}")?;
        }
        writeln!(out, "   the user answers: {a}")?;
    }
    let mark = if s.result.is_error == Some(true) {
        "✗"
    } else {
        "✓"
    };
    let t = text(&s.result);
    let shown: String = t.chars().take(400).collect();
    for (j, line) in shown.lines().enumerate() {
        let lead = if j == 0 { mark } else { " " };
        writeln!(out, "   {lead} {line}")?;
    }
    writeln!(out)
}
