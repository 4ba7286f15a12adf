//! Issue #24: the MCP proxy in front of servers it did not write. Item 1:
//! every configured tool checked against what the server declares
//! (`ipc mcp --check --servers`, and at start-up), each mismatch a
//! diagnostic at the TOML line with a help naming what the server
//! declares; a restarted server whose declaration changed has the tool
//! refused with a receipt. Item 6: a server's `env` (`${VAR}`,
//! `env_pass`, relative paths). Item 3: the `Path` type's normaliser
//! (properties) and its trusted folders through the gateway.
// needs a part of the default features: the test is off without it
#![cfg(all(feature = "mcp", feature = "demo"))]

use intentplane::gateway::normalize::{path, path_and_parents};
use proptest::prelude::*;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, ClientConfig};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const IPC: &str = env!("CARGO_BIN_EXE_ipc");

fn repo(p: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(p)
        .display()
        .to_string()
}

/// The demo config with `send_money` mapped as in examples/mcp; `tools`
/// replaces the mapping, `server` the server's lines.
fn config(dir: &Path, server: &str, tools: &str) -> PathBuf {
    let text = format!(
        r#"packs = ["{packs}"]
world = "{world}"
store = "proxy.db"

[[servers]]
name = "demo"
{server}

[session]
user = "emma"
scopes = ["payments.write"]
budget = "5000.00"
issuer_key = "{key}"
user_key = "{emma}"
[session.claims]
account = "emma-checking"
currency = "EUR"

{tools}
"#,
        packs = repo("packs/bank"),
        world = repo("examples/mcp/world.toml"),
        key = repo("examples/mcp/keys/issuer.key"),
        emma = repo("examples/mcp/keys/emma.key"),
    );
    let p = dir.join("intentplane.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn demo_server() -> String {
    format!("command = \"{IPC}\"\nargs = [\"demo\", \"mcp-server\"]")
}

const SEND_MONEY: &str = r#"[[tools]]
server = "demo"
tool = "read_inbox"
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
"#;

/// `ipc mcp --config F --check [--servers] --format json`: exit code and
/// the report.
fn check_json(cfg: &Path, servers: bool) -> (i32, Value) {
    let mut cmd = Command::new(IPC);
    cmd.args(["mcp", "--config"]).arg(cfg).arg("--check");
    if servers {
        cmd.arg("--servers");
    }
    let out = cmd.args(["--format", "json"]).output().unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), doc)
}

/// `ipc mcp --config F --check [--servers]` as a person reads it: exit
/// code and what it prints.
fn check_human(cfg: &Path, servers: bool) -> (i32, String) {
    let mut cmd = Command::new(IPC);
    cmd.args(["mcp", "--config"]).arg(cfg).arg("--check");
    if servers {
        cmd.arg("--servers");
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code().unwrap_or(-1), stdout)
}

/// A tool of a `--check --format json` report.
fn tool_of<'a>(doc: &'a Value, name: &str) -> &'a Value {
    doc["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tool"] == name)
        .unwrap()
}

/// The diagnostics of a report with this code.
fn with_code<'a>(doc: &'a Value, code: &str) -> Vec<&'a Value> {
    doc["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["code"] == code)
        .collect()
}

/// The 1-based line of the config holding `needle`.
fn line_of(cfg: &Path, needle: &str) -> u64 {
    let text = std::fs::read_to_string(cfg).unwrap();
    text.lines().position(|l| l.contains(needle)).unwrap() as u64 + 1
}

#[test]
fn a_misspelt_argument_is_found_against_the_servers_declaration() {
    let dir = tempfile::tempdir().unwrap();
    let tools = SEND_MONEY.replace("arg = \"recipient\"", "arg = \"recipent\"");
    let cfg = config(dir.path(), &demo_server(), &tools);
    // without the servers, nothing says the tool has no such argument
    let (code, _) = check_json(&cfg, false);
    assert_eq!(code, 0);
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 1, "{doc:#}");
    let found = with_code(&doc, "ipc::mcp::undeclared_arg");
    assert_eq!(found.len(), 1, "{doc:#}");
    let d = found[0];
    assert_eq!(d["severity"], "error");
    assert_eq!(
        d["labels"][0]["line"],
        line_of(&cfg, "arg = \"recipent\""),
        "{d:#}"
    );
    let help = d["help"].as_str().unwrap();
    assert!(help.contains("`recipient`"), "{help}");
    assert!(help.contains("`from_account`"), "{help}");
    // and at start-up: the proxy does not start
    let out = Command::new(IPC)
        .args(["mcp", "--config"])
        .arg(&cfg)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ipc::mcp::undeclared_arg"), "{err}");
    assert!(err.contains("recipent"), "{err}");
}

#[test]
fn a_misspelt_tool_is_found_with_the_servers_name_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let tools = SEND_MONEY.replace("tool = \"send_money\"", "tool = \"send_mony\"");
    let cfg = config(dir.path(), &demo_server(), &tools);
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 1);
    let d = with_code(&doc, "ipc::mcp::undeclared_tool");
    assert_eq!(d.len(), 1, "{doc:#}");
    assert_eq!(
        d[0]["labels"][0]["line"],
        line_of(&cfg, "tool = \"send_mony\"")
    );
    assert!(
        d[0]["help"].as_str().unwrap().contains("`send_money`"),
        "{doc:#}"
    );
}

#[test]
fn a_type_the_server_does_not_take_is_found() {
    let dir = tempfile::tempdir().unwrap();
    // the server declares `amount` a number; the config sends a string
    let tools = SEND_MONEY.replace("scale = 100", "scale = 100\nformat = \"string\"");
    let cfg = config(dir.path(), &demo_server(), &tools);
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 1);
    let d = with_code(&doc, "ipc::mcp::arg_type");
    assert_eq!(d.len(), 1, "{doc:#}");
    assert_eq!(
        d[0]["labels"][0]["line"],
        line_of(&cfg, "[tools.params.amount]")
    );
    let msg = d[0]["message"].as_str().unwrap();
    assert!(
        msg.contains("a string") && msg.contains("a number"),
        "{msg}"
    );
}

#[test]
fn a_required_argument_left_unmapped_is_found() {
    let dir = tempfile::tempdir().unwrap();
    // `subject` mapped onto the tool's `currency` argument's neighbour:
    // drop `currency` from the mapping by renaming it onto `subject`'s
    let tools = SEND_MONEY.replace(
        "[tools.params.currency]\n[tools.params.subject]\n",
        "[tools.params.currency]\narg = \"subject\"\n",
    );
    let cfg = config(dir.path(), &demo_server(), &tools);
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 1, "{doc:#}");
    let d = with_code(&doc, "ipc::mcp::required_arg");
    assert_eq!(d.len(), 1, "{doc:#}");
    assert!(d[0]["message"].as_str().unwrap().contains("`currency`"));
}

#[test]
fn passing_through_a_tool_not_declared_read_only_is_a_warning_unless_unguarded() {
    let dir = tempfile::tempdir().unwrap();
    let extra = "\n[[tools]]\nserver = \"demo\"\ntool = \"delete_file\"\npassthrough = true\n";
    let cfg = config(dir.path(), &demo_server(), &format!("{SEND_MONEY}{extra}"));
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 0, "a warning: {doc:#}");
    let w = with_code(&doc, "ipc::mcp::passthrough_writes");
    assert_eq!(
        w.len(),
        1,
        "read_inbox is read-only, delete_file is not: {doc:#}"
    );
    assert_eq!(w[0]["severity"], "warning");
    assert_eq!(doc["warnings"], 1);
    let line = w[0]["labels"][0]["line"].as_u64().unwrap();
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert_eq!(
        text.lines().nth(line as usize - 1),
        Some("passthrough = true")
    );
    assert!(
        text.lines()
            .nth(line as usize - 2)
            .unwrap()
            .contains("delete_file")
    );
    // on purpose
    let cfg = config(
        dir.path(),
        &demo_server(),
        &format!(
            "{SEND_MONEY}{}",
            extra.replace("passthrough = true", "passthrough = \"unguarded\"")
        ),
    );
    let (code, doc) = check_json(&cfg, true);
    assert_eq!((code, doc["warnings"].clone()), (0, json!(0)), "{doc:#}");
    // any other word is a mistake
    let cfg = config(
        dir.path(),
        &demo_server(),
        &format!(
            "{SEND_MONEY}{}",
            extra.replace("passthrough = true", "passthrough = \"yes\"")
        ),
    );
    let (code, doc) = check_json(&cfg, false);
    assert_eq!(code, 1);
    assert_eq!(with_code(&doc, "ipc::mcp::tool").len(), 1, "{doc:#}");
}

/// The server restarted after a crash declares `send_money` otherwise:
/// its calls are refused with a receipt; `read_inbox` (unchanged) goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_whose_declaration_changed_has_the_tool_refused() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("started");
    let script = dir.path().join("server.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nif [ -e '{m}' ]; then IPC_DEMO_ALTER_TOOL=send_money exec '{IPC}' demo mcp-server; fi\ntouch '{m}'\nexec '{IPC}' demo mcp-server --crash-on read_inbox\n",
            m = marker.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = config(
        dir.path(),
        &format!("command = \"{}\"", script.display()),
        SEND_MONEY,
    );
    let mut cmd = tokio::process::Command::new(IPC);
    cmd.args(["mcp", "--config"]).arg(&cfg);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = ClientConfig::default().serve(transport).await.unwrap();
    let call = |name: &str, args: Value| {
        let mut p = CallToolRequestParams::new(name.to_string());
        if let Value::Object(m) = args {
            p = p.with_arguments(m);
        }
        p
    };
    let pay = json!({"recipient": "DE44500105175407324931", "amount": 12.5, "currency": "EUR", "subject": "rent"});
    let r = client
        .call_tool(call("send_money", pay.clone()))
        .await
        .unwrap();
    assert_ne!(r.is_error, Some(true), "before the restart: {r:?}");
    // the downstream dies on this call
    let r = client
        .call_tool(call("read_inbox", json!({})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    // started again, with `send_money` declaring a `memo` it requires
    let r = client.call_tool(call("send_money", pay)).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    let text = serde_json::to_string(&r.content).unwrap();
    assert!(
        text.contains("declares `send_money` otherwise") && text.contains("receipt #"),
        "{text}"
    );
    assert!(marker.exists());
    client.cancel().await.unwrap();
    // the refusal is a receipt in the store
    let out = Command::new(IPC)
        .args(["receipts", "show"])
        .arg(dir.path().join("proxy.db"))
        .args(["--format", "json"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("otherwise than when the config was checked"),
        "{shown}"
    );
}

/// The demo server keeping its state in `state`, annotating `send_money`
/// `readOnlyHint: true` when `lying` (a payment a server says is a read).
fn stateful_demo(state: &Path, lying: bool) -> String {
    let hint = if lying {
        ", \"--read-only-hint\", \"send_money\""
    } else {
        ""
    };
    format!(
        "command = \"{IPC}\"\nargs = [\"demo\", \"mcp-server\", \"--state\", \"{}\"{hint}]",
        state.display()
    )
}

/// `ipc mcp` on `cfg` as a process; the same payment called twice (an
/// agent's retry): both answers, and the annotations the client was shown
/// on `send_money`.
async fn pay_twice(cfg: &Path) -> (Vec<rmcp::model::CallToolResult>, Option<bool>) {
    let mut cmd = tokio::process::Command::new(IPC);
    cmd.args(["mcp", "--config"]).arg(cfg);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = ClientConfig::default().serve(transport).await.unwrap();
    let shown = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "send_money")
        .and_then(|t| t.annotations.and_then(|a| a.read_only_hint));
    let pay = json!({"recipient": "DE44500105175407324931", "amount": 12.5, "currency": "EUR", "subject": "rent"});
    let mut answers = vec![];
    for _ in 0..2 {
        let p = CallToolRequestParams::new("send_money")
            .with_arguments(pay.as_object().unwrap().clone());
        answers.push(client.call_tool(p).await.unwrap());
    }
    client.cancel().await.unwrap();
    (answers, shown)
}

/// The payments the demo server whose state is `state` executed.
fn payments(state: &Path) -> usize {
    let st: Value = serde_json::from_str(&std::fs::read_to_string(state).unwrap()).unwrap();
    st["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["tool"] == "send_money")
        .count()
}

/// Issue #40, item 2: a server's `readOnlyHint` is a hint the MCP
/// specification tells clients not to trust. A server marks its payment
/// tool read-only; the config says no `effect`: the payment is a write,
/// executed once, the agent's retry answered from the store. `--check
/// --servers` only suggests `effect = "read"`, as a hint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_a_server_marks_read_only_still_executes_once() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("demo-state.json");
    let cfg = config(dir.path(), &stateful_demo(&state, true), SEND_MONEY);
    let (answers, shown) = pay_twice(&cfg).await;
    assert_eq!(shown, Some(true), "the server does say read-only");
    for r in &answers {
        assert_ne!(r.is_error, Some(true), "{r:?}");
    }
    assert_eq!(answers[0].content, answers[1].content, "the stored answer");
    assert_eq!(payments(&state), 1, "executed once");
    // the check says how it is treated, and suggests, as a hint only
    let (code, doc) = check_json(&cfg, true);
    assert_eq!((code, doc["warnings"].clone()), (0, json!(0)), "{doc:#}");
    let tool = tool_of(&doc, "send_money");
    assert_eq!(tool["effect"], "write");
    assert_eq!(tool["hint"], "readOnlyHint");
    assert_eq!(tool["suggested_effect"], "read");
    assert_eq!(tool_of(&doc, "read_inbox")["effect"], Value::Null);
    let (code, human) = check_human(&cfg, true);
    assert_eq!(code, 0, "{human}");
    assert!(
        human.contains("pass  read_inbox: forwarded as is, without a decision\n")
            && human.contains(
                "write send_money (payment.transfer): executed once, a retry answered from the store\n      hint: `demo` marks `send_money` `readOnlyHint: true`; if its answer may change between calls, write `effect = \"read\"` (a server's hint changes nothing by itself)\n"
            ),
        "{human}"
    );
    // without `--servers` the hint is not known: the treatment alone
    let (_, doc) = check_json(&cfg, false);
    let tool = tool_of(&doc, "send_money");
    assert_eq!(
        (tool["effect"].clone(), tool["hint"].clone()),
        (json!("write"), Value::Null)
    );
}

/// `effect = "write"` written out is the default's exactly-once, and a
/// write by choice is not suggested a read, whatever the server says;
/// `effect = "read"` on the same payment (the operator's choice) sends the
/// retry again, and `--check` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_declared_write_keeps_exactly_once_and_one_declared_read_is_sent_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("demo-state.json");
    let written = |effect: &str| {
        SEND_MONEY.replace(
            "action = \"payment.transfer\"\n",
            &format!("action = \"payment.transfer\"\neffect = \"{effect}\"\n"),
        )
    };
    let cfg = config(dir.path(), &stateful_demo(&state, true), &written("write"));
    let (answers, _) = pay_twice(&cfg).await;
    assert!(
        answers.iter().all(|r| r.is_error != Some(true)),
        "{answers:?}"
    );
    assert_eq!(payments(&state), 1, "executed once");
    let (code, doc) = check_json(&cfg, true);
    assert_eq!(code, 0, "{doc:#}");
    let tool = tool_of(&doc, "send_money");
    assert_eq!(
        (tool["effect"].clone(), tool["hint"].clone()),
        (json!("write"), Value::Null)
    );
    // the same payment declared a read: each call is decided and sent; a
    // new session starts (the reads are part of its declared content), so
    // the payment its writes executed is not answered from their record
    let cfg = config(dir.path(), &stateful_demo(&state, false), &written("read"));
    let (_, human) = check_human(&cfg, false);
    assert!(
        human
            .contains("read  send_money (payment.transfer): decided and sent again at each call\n"),
        "{human}"
    );
    let (answers, _) = pay_twice(&cfg).await;
    assert!(
        answers.iter().all(|r| r.is_error != Some(true)),
        "{answers:?}"
    );
    assert_eq!(payments(&state), 3, "sent again");
}

/// The server's environment as it was started: the server is a shell
/// that writes `env` to a file, then runs the demo server; `ipc mcp --check
/// --servers` runs in an environment of the test's own (`vars`).
fn server_env(dir: &Path, lines: &str, vars: &[(&str, &str)]) -> Vec<(String, String)> {
    let (out, env) = started_env(dir, lines, vars);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    env
}

/// [`server_env`], whether or not the check passes (a server after the
/// demo one may not be there), with the command's output.
fn started_env(
    dir: &Path,
    lines: &str,
    vars: &[(&str, &str)],
) -> (std::process::Output, Vec<(String, String)>) {
    let dump = dir.join("env.txt");
    let server = format!(
        "command = \"/bin/sh\"\nargs = [\"-c\", \"env > '{}'; exec '{IPC}' demo mcp-server\"]\n{lines}",
        dump.display()
    );
    let cfg = config(dir, &server, SEND_MONEY);
    let out = Command::new(IPC)
        .args(["mcp", "--config"])
        .arg(&cfg)
        .args(["--check", "--servers"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let env = std::fs::read_to_string(&dump)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    (out, env)
}

/// Issue #39, finding 2: a stdio server gets what its own entry asks for
/// and the base variables, nothing else of the proxy's environment: never
/// a remote server's `token_env`, nor a variable another server's
/// `${VAR}` reads, whatever its `env_pass` says (that is refused at the
/// line).
#[test]
fn a_stdio_server_gets_no_secret_of_another_server() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("IPC_TEST_CRM_TOKEN", "crm-secret-0123456789"),
        ("IPC_TEST_GH_TOKEN", "gh-secret-0123456789"),
        ("IPC_TEST_UNNAMED", "anything"),
        ("HOME", "/home/emma"),
        ("LANG", "C.UTF-8"),
    ];
    let others = "\n[[servers]]\nname = \"crm\"\nurl = \"http://127.0.0.1:9/mcp\"\ntoken_env = \"IPC_TEST_CRM_TOKEN\"\n\n[[servers]]\nname = \"git\"\ncommand = \"/bin/true\"\nenv = { GH = \"${IPC_TEST_GH_TOKEN}\" }\n";
    // the demo server asks for nothing: it gets the base, nothing more
    let (_, env) = started_env(
        dir.path(),
        &format!("env = {{ OWN = \"x\" }}\n{others}"),
        &vars,
    );
    let mut names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    // (`PWD`, `SHLVL`, `_`: what the shell sets itself)
    names.retain(|n| !["PWD", "SHLVL", "_"].contains(n));
    assert_eq!(names, ["HOME", "LANG", "OWN", "PATH"], "{env:?}");
    for (_, v) in &env {
        assert!(!v.contains("secret"), "{env:?}");
    }
    // `env_pass` of another server's secret is refused at its line
    for var in ["IPC_TEST_CRM_TOKEN", "IPC_TEST_GH_TOKEN"] {
        let lines = format!("env_pass = [\"PATH\", \"{var}\"]\n{others}");
        let cfg = config(
            dir.path(),
            &format!("{}\n{lines}", demo_server()),
            SEND_MONEY,
        );
        let (code, doc) = check_json(&cfg, false);
        assert_eq!(code, 1, "{var}: {doc:#}");
        let d = with_code(&doc, "ipc::mcp::env_secret");
        assert_eq!(d.len(), 1, "{var}: {doc:#}");
        assert_eq!(d[0]["labels"][0]["line"], line_of(&cfg, "env_pass"));
    }
    // its own `${VAR}` may read one: then it is this server's too
    let lines = format!(
        "env = {{ MINE = \"${{IPC_TEST_GH_TOKEN}}\" }}\nenv_pass = [\"IPC_TEST_GH_TOKEN\"]\n{others}"
    );
    let (_, env) = started_env(dir.path(), &lines, &vars);
    assert!(
        env.contains(&("MINE".into(), "gh-secret-0123456789".into())),
        "{env:?}"
    );
    // `--check` names (never shows) what each server will see
    let cfg = config(
        dir.path(),
        &format!("{}\nenv = {{ OWN = \"v4lue\" }}", demo_server()),
        SEND_MONEY,
    );
    let (code, doc) = check_json(&cfg, false);
    assert_eq!(code, 0, "{doc:#}");
    let seen = doc["environment"]["demo"].as_array().unwrap();
    assert!(
        seen.contains(&json!("OWN")) && seen.contains(&json!("PATH")),
        "{doc:#}"
    );
    let (_, stdout) = check_human(&cfg, true);
    let line = stdout
        .lines()
        .find(|l| l.starts_with("env   demo: "))
        .unwrap_or_default();
    assert!(
        line.split(' ').any(|w| w == "OWN") && !stdout.contains("v4lue"),
        "{stdout}"
    );
}

#[test]
fn a_servers_env_expands_variables_forwards_named_ones_and_resolves_paths() {
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("IPC_TEST_SERVERS_TOKEN", "s3cret"),
        ("IPC_TEST_SERVERS_PASSED", "as-is"),
        ("IPC_TEST_SERVERS_OTHER", "not passed"),
    ];
    let lines = "env = { TOKEN = \"Bearer ${IPC_TEST_SERVERS_TOKEN}\", DATA = \"./data\", COST = \"$$5\" }\nenv_pass = [\"IPC_TEST_SERVERS_PASSED\", \"PATH\"]";
    let env = server_env(dir.path(), lines, &vars);
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("TOKEN").as_deref(), Some("Bearer s3cret"));
    assert_eq!(get("COST").as_deref(), Some("$5"));
    assert_eq!(get("IPC_TEST_SERVERS_PASSED").as_deref(), Some("as-is"));
    assert_eq!(
        get("DATA"),
        Some(dir.path().join("./data").display().to_string())
    );
    // with `env_pass`, nothing else of the proxy's environment
    assert_eq!(get("IPC_TEST_SERVERS_OTHER"), None, "{env:?}");
    // without it, nothing of the proxy's environment either (issue #39,
    // finding 2): the base variables alone
    let env = server_env(dir.path(), "", &vars);
    assert!(
        !env.iter().any(|(k, _)| k == "IPC_TEST_SERVERS_OTHER"),
        "{env:?}"
    );
    // an unset variable is an error at its value's line, never ""
    for (bad, var) in [
        (
            "env = { TOKEN = \"${IPC_TEST_SERVERS_UNSET}\" }",
            "IPC_TEST_SERVERS_UNSET",
        ),
        (
            "env_pass = [\"IPC_TEST_SERVERS_UNSET2\"]",
            "IPC_TEST_SERVERS_UNSET2",
        ),
        ("env = { TOKEN = \"${unclosed\" }", ""),
    ] {
        let cfg = config(dir.path(), &format!("{}\n{bad}", demo_server()), SEND_MONEY);
        let (code, doc) = check_json(&cfg, false);
        assert_eq!(code, 1, "{bad}");
        let d = with_code(&doc, "ipc::mcp::env");
        assert_eq!(d.len(), 1, "{bad}: {doc:#}");
        assert_eq!(d[0]["labels"][0]["line"], line_of(&cfg, bad));
        assert!(d[0]["message"].as_str().unwrap().contains(var));
    }
}

#[test]
fn the_path_normaliser_resolves_and_refuses() {
    assert_eq!(path("/a//b/./c/../d").unwrap(), "/a/b/d");
    assert_eq!(path("./notes/todo.md").unwrap(), "notes/todo.md");
    assert_eq!(path("notes/").unwrap(), "notes");
    assert_eq!(path(".").unwrap(), ".");
    assert_eq!(path("/").unwrap(), "/");
    assert_eq!(path("a/..").unwrap(), ".");
    for bad in [
        "../../.ssh/authorized_keys",
        "/..",
        "/a/../../etc/passwd",
        "a/../..",
        "",
        "~/.ssh/authorized_keys",
        "a\\..\\b",
        "a\u{0}b",
        " /a",
        "/a\u{200b}/b",
    ] {
        assert!(path(bad).is_err(), "{bad:?} accepted");
    }
    assert_eq!(path_and_parents("/a/b"), ["/a/b", "/a", "/"]);
    assert_eq!(path_and_parents("a/b"), ["a/b", "a"]);
    assert_eq!(path_and_parents("/"), ["/"]);
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(".".to_string()),
        Just("..".to_string()),
        Just(String::new()),
        "[a-z.]{1,4}",
    ]
}

proptest! {
    /// Normalising is idempotent, leaves no `.`, `..` or empty component,
    /// and a result is accepted only when no `..` ever climbs above where
    /// the path starts (the path never leaves its root).
    #[test]
    fn normalised_paths_never_leave_their_root(
        abs in any::<bool>(),
        parts in proptest::collection::vec(segment(), 1..10),
    ) {
        let text = format!("{}{}", if abs { "/" } else { "" }, parts.join("/"));
        let abs = text.starts_with('/');
        let mut depth: i64 = 0;
        let mut leaves = false;
        for p in &parts {
            match p.as_str() {
                "" | "." => {}
                ".." => { depth -= 1; if depth < 0 { leaves = true; } }
                _ => depth += 1,
            }
        }
        match path(&text) {
            Ok(n) => {
                prop_assert!(!leaves, "{text:?} leaves its root and became {n:?}");
                prop_assert_eq!(path(&n).unwrap(), n.clone());
                prop_assert_eq!(n.starts_with('/'), abs);
                let comps: Vec<&str> = n.split('/').skip(usize::from(abs)).collect();
                if n != "." && n != "/" {
                    prop_assert!(comps.iter().all(|c| !c.is_empty() && *c != "." && *c != ".."), "{n:?}");
                }
            }
            Err(_) => prop_assert!(leaves || text.is_empty(), "{text:?} refused"),
        }
    }

    /// A path normalised under a trusted folder is inside it (by its
    /// parents) only when it is that folder or below it, whatever `..`
    /// it was written with.
    #[test]
    fn inside_a_folder_means_below_it(
        parts in proptest::collection::vec(segment(), 1..10),
    ) {
        let text = format!("/work/ws/{}", parts.join("/"));
        if let Ok(n) = path(&text) {
            let inside = path_and_parents(&n).iter().any(|p| p == "/work/ws");
            prop_assert_eq!(inside, n == "/work/ws" || n.starts_with("/work/ws/"), "{}", n);
        }
    }
}

/// `ipc check` of one pack text: exit code and the diagnostics' codes.
fn check_pack(text: &str) -> (i32, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pack.ipc"), text).unwrap();
    let out = Command::new(IPC)
        .arg("check")
        .arg(dir.path())
        .args(["--format", "json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut codes = vec![];
    fn walk(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(c)) = m.get("code") {
                    out.push(c.clone());
                }
                m.values().for_each(|x| walk(x, out));
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            _ => {}
        }
    }
    walk(&doc, &mut codes);
    (out.status.code().unwrap_or(-1), codes)
}

const BRANCH_PACK: &str = r#"pack git version "0.1.0" "A repository"
registry branches: set<Text>
action git.create_branch "Start a branch" {
  scope git.write
  executor external
  param name: Text max_len 200
  param base: Text optional critical from registry.branches
  RULE
}
"#;

/// Item 4: an optional critical parameter is a pack like any other; a
/// rule cannot read it (absent, it has no value), and a critical one still
/// has no default.
#[test]
fn an_optional_critical_parameter_checks_and_is_never_read_by_a_rule() {
    let (code, codes) = check_pack(&BRANCH_PACK.replace("RULE", ""));
    assert_eq!(code, 0, "{codes:?}");
    let (code, codes) =
        check_pack(&BRANCH_PACK.replace("RULE", "step_up \"from main\" when base == \"main\""));
    assert_eq!(code, 1);
    assert!(
        codes.contains(&"ipc::optional_read".to_string()),
        "{codes:?}"
    );
    let (code, codes) = check_pack(
        &BRANCH_PACK
            .replace("RULE", "")
            .replace("optional critical", "optional default \"main\" critical"),
    );
    assert_eq!(code, 1);
    assert!(
        codes.contains(&"ipc::critical_default".to_string()),
        "{codes:?}"
    );
}

/// Item 4 through the gateway: left out, the parameter is absent from the
/// decision (and so from the downstream call); given, it must come from
/// the trusted source.
#[test]
fn an_optional_critical_parameter_is_absent_or_trusted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("branches.json"),
        r#"{"emma": [{"id": "main", "value": "main"}]}"#,
    )
    .unwrap();
    let tools = r#"[pack]
name = "git"
[pack.registries.branches]
type = "set<Text>"
file = "branches.json"

[[tools]]
server = "demo"
tool = "create_branch"
action = "git.create_branch"
scope = "git.write"
[tools.params.name]
type = "Text"
[tools.params.base]
type = "Text"
critical = true
optional = true
sources = ["registry:branches"]
"#;
    let cfg = config(dir.path(), &demo_server(), tools);
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("scopes = [\"payments.write\"]", "scopes = [\"git.write\"]")
        .replace(
            "[session.claims]\naccount = \"emma-checking\"\ncurrency = \"EUR\"\n",
            "",
        );
    std::fs::write(&cfg, text).unwrap();
    let setup = intentplane::mcp::config::load(&cfg).unwrap_or_else(|r| panic!("{r}"));
    let tool = setup.tool("create_branch").unwrap().clone();
    let mandate = setup.mandate_for(&tool).unwrap().clone();
    let gw = intentplane::gateway::Gateway::new(&setup.bundle, setup.world, setup.store).unwrap();
    let decide = |args: Value| {
        let proposal = tool
            .to_proposal(args.as_object().unwrap())
            .unwrap_or_else(|e| panic!("{e}"));
        gw.decide(&intentplane::gateway::Input {
            proposal,
            mandate: Some(mandate.clone()),
            approvals: vec![],
            malformed: None,
        })
        .unwrap()
    };
    use intentplane::gateway::Outcome;
    let without = decide(json!({"name": "topic"}));
    assert_eq!(without.decision, Outcome::Allow, "{without:?}");
    assert!(
        !without.resolved.contains_key("base"),
        "{:?}",
        without.resolved
    );
    let sent = tool.to_downstream(&without.resolved).unwrap();
    assert_eq!(Value::Object(sent), json!({"name": "topic"}));
    let trusted = decide(json!({"name": "topic", "base": "main"}));
    assert_eq!(trusted.decision, Outcome::Allow);
    assert_eq!(trusted.resolved["base"], "main");
    let injected = decide(json!({"name": "topic", "base": "attacker"}));
    assert_eq!(injected.decision, Outcome::Deny);
    assert_eq!(injected.stage.name(), "provenance");
}
