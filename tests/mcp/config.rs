//! The MCP proxy's TOML front-end (src/mcp/config): one config per
//! diagnostic under tests/fixtures/mcp/, named after the code it must
//! report (`CODE.toml` or `CODE__variant.toml`, `mcp-` standing for
//! `mcp::`; `ok__*.toml` must load clean), each rendering snapshotted under
//! snapshots/mcp/. Then the mapping both ways (unit and property tests,
//! hostile inputs), a decision through the gateway with the session's
//! mandate, and `ipc mcp --check` as a command.
// needs a part of the default features: the test is off without it
#![cfg(feature = "mcp")]

use crate::common::copy_dir;
use intentplane::gateway::world::World;
use intentplane::gateway::{Gateway, Input, Outcome};
use intentplane::mcp::config::{
    ArgMap, ToolConfig, ToolMode, check, load, minor_from_tool, minor_to_tool,
};
use intentplane::store::memory::MemoryStore;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

const EXAMPLE: &str = "examples/mcp/intentplane.toml";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_fixture_reports_its_diagnostic() {
    insta::with_settings!({
        snapshot_path => "../../snapshots/mcp",
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::glob!("../fixtures/mcp", "*.toml", |path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            // relative, so that the rendering does not name this machine's paths
            let rel = Path::new("tests/fixtures/mcp").join(&name);
            let (report, checked) = check(&rel);
            let codes: Vec<String> = report.items.iter().map(|r| r.code()).collect();
            let expected = stem.split("__").next().unwrap();
            if expected == "ok" {
                assert!(!report.has_errors(), "{name}: {codes:?}\n{report}");
                assert!(checked.is_some(), "{name}: clean but nothing built");
            } else {
                let code = format!("ipc::{}", expected.replace('-', "::"));
                assert!(codes.contains(&code), "{name}: expected {code}, got {codes:?}");
                // a lint is a warning: the config still loads
                assert_eq!(checked.is_none(), report.has_errors(), "{name}");
            }
            insta::assert_snapshot!(report.render_human(false));
        });
    });
}

/// The fixtures cover the config's own diagnostics and the checker's.
#[test]
fn fixtures_cover_the_diagnostics() {
    let mut codes: Vec<String> = std::fs::read_dir(root().join("tests/fixtures/mcp"))
        .unwrap()
        .map(|e| {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            n.trim_end_matches(".toml")
                .split("__")
                .next()
                .unwrap()
                .to_string()
        })
        .collect();
    codes.sort();
    codes.dedup();
    for needed in [
        "critical_without_source",
        "unknown_registry",
        "source_type_mismatch",
        "type_mismatch",
        "mcp-unknown_server",
        "mcp-unknown_action",
        "mcp-unmapped_param",
        "mcp-scale",
        "mcp-toml",
        "mcp-missing_file",
        "ok",
    ] {
        assert!(codes.iter().any(|c| c == needed), "no fixture for {needed}");
    }
}

fn example_tool(name: &str) -> ToolConfig {
    let (report, checked) = check(&root().join(EXAMPLE));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    c.tools.into_iter().find(|t| t.tool == name).unwrap()
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

#[test]
fn the_example_config_loads_both_front_ends() {
    let (report, checked) = check(&root().join(EXAMPLE));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let modes: Vec<(&str, Option<&str>)> = c
        .tools
        .iter()
        .map(|t| {
            (
                t.tool.as_str(),
                match &t.mode {
                    ToolMode::Action { action, .. } => Some(action.as_str()),
                    ToolMode::Passthrough => None,
                },
            )
        })
        .collect();
    assert_eq!(
        modes,
        vec![
            ("read_inbox", None),
            ("list_vendors", None),
            ("send_money", Some("payment.transfer")),
            ("send_email", Some("mail.send")),
        ]
    );
    // one mandate per pack the tools use, both for emma
    let packs: Vec<&str> = c.session.mandates.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(packs, vec!["bank", "mail"]);
    assert_eq!(c.session.user, "emma");
    assert!(c.session.user_key.is_some());
    // `--check` opened no store
    assert!(
        !c.store_path.exists(),
        "{} was created",
        c.store_path.display()
    );
}

#[test]
fn a_tool_call_becomes_a_proposal_in_gateway_units() {
    let t = example_tool("send_money");
    let p = t
        .to_proposal(&obj(json!({
            "recipient": "DE89 3704 0044 0532 0130 00",
            "amount": 1234.5,
            "currency": "EUR",
            "subject": "invoice 7",
        })))
        .unwrap();
    assert_eq!(
        p,
        json!({"action": "payment.transfer", "args": {
            "from_account": "emma-checking",
            "payee_iban": "DE89 3704 0044 0532 0130 00",
            "amount": "1234.50",
            "currency": "EUR",
            "subject": "invoice 7",
        }})
    );
    // subject has a default: it may be left out
    let p = t
        .to_proposal(&obj(
            json!({"recipient": "X", "amount": 4, "currency": "EUR"}),
        ))
        .unwrap();
    assert_eq!(p["args"]["amount"], "4.00");
    assert!(p["args"].get("subject").is_none());
}

#[test]
fn hostile_tool_arguments_are_refused() {
    let t = example_tool("send_money");
    let base = json!({"recipient": "X", "amount": 4.0, "currency": "EUR"});
    let with = |k: &str, v: Value| {
        let mut o = obj(base.clone());
        o.insert(k.into(), v);
        t.to_proposal(&o)
    };
    for (v, why) in [
        (json!(4.001), "decimals"),
        (json!("4.00"), "a string where a number is mapped"),
        (json!("NaN"), "a NaN-like string"),
        (json!(-4.0), "negative"),
        (json!(1e300), "huge"),
        (json!(90071992547409.92), "beyond exact"),
        (json!({"value": 4}), "an object"),
        (json!([4]), "a list"),
        (Value::Null, "null"),
    ] {
        assert!(with("amount", v.clone()).is_err(), "{why}: {v} accepted");
    }
    // an argument the config fills, one the mapping does not know, and a
    // mapped one missing
    assert!(
        with("from_account", json!("mallory"))
            .unwrap_err()
            .contains("filled by intentplane")
    );
    // (#40, item 10: it says the config does not map it, and where)
    let e = with("from", json!("mallory")).unwrap_err();
    assert!(
        e.contains("`from` of tool `send_money` is not mapped in the proxy's config")
            && e.contains("arg = \"from\""),
        "{e}"
    );
    let mut o = obj(base.clone());
    o.remove("amount");
    assert!(t.to_proposal(&o).unwrap_err().contains("missing"));
}

#[test]
fn trusted_values_go_back_in_the_tools_units_and_names() {
    let t = example_tool("send_money");
    let resolved = obj(json!({
        "from_account": "emma-checking",
        "payee_iban": "DE89370400440532013000",
        "amount": 400,
        "currency": "EUR",
        "subject": "",
    }));
    let down = t.to_downstream(&resolved).unwrap();
    assert_eq!(
        Value::Object(down),
        json!({"from_account": "emma-checking", "recipient": "DE89370400440532013000", "amount": 4.0, "currency": "EUR", "subject": ""}),
        "the claim is sent too, under its argument's name"
    );
    // the amount as text, and a date as the tool takes it
    let text = ToolConfig {
        server: "s".into(),
        tool: "t".into(),
        mode: ToolMode::Action {
            action: "a".into(),
            effect: intentplane::gateway::Effect::Write,
            params: vec![
                (
                    "amount".into(),
                    ArgMap::Arg {
                        arg: "sum".into(),
                        scale: Some(100),
                        ty: intentplane::ir::Type::Money,
                        as_text: true,
                        optional: false,
                    },
                ),
                (
                    "date".into(),
                    ArgMap::Arg {
                        arg: "on".into(),
                        scale: None,
                        ty: intentplane::ir::Type::Date,
                        as_text: false,
                        optional: false,
                    },
                ),
            ],
        },
        base: None,
    };
    let down = text
        .to_downstream(&obj(json!({"amount": 400, "date": 1_796_083_200})))
        .unwrap();
    assert_eq!(
        Value::Object(down),
        json!({"sum": "4.00", "on": "2026-12-01"})
    );
    assert!(text.to_downstream(&obj(json!({"amount": "400"}))).is_err());
    assert!(
        text.to_downstream(&obj(json!({"amount": -1, "date": 0})))
            .is_err()
    );
}

#[test]
fn a_decision_with_the_session_mandate_resolves_the_trusted_spelling() {
    let (report, checked) = check(&root().join(EXAMPLE));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let tool = c
        .tools
        .iter()
        .find(|t| t.tool == "send_money")
        .unwrap()
        .clone();
    let mandate = c
        .session
        .mandates
        .iter()
        .find(|(p, _)| p == "bank")
        .map(|(_, t)| t.clone());
    let world: World = c.world;
    let gw = Gateway::new(&c.bundle, world, Arc::new(MemoryStore::new())).unwrap();
    // the agent spells the vendor's IBAN its own way
    let proposal = tool
        .to_proposal(&obj(json!({
            "recipient": "de89 3704 0044 0532 0130 00",
            "amount": 12.5,
            "currency": "EUR",
        })))
        .unwrap();
    let d = gw
        .decide(&Input {
            proposal,
            mandate: mandate.clone(),
            ..Input::default()
        })
        .unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    let down = tool.to_downstream(&d.resolved).unwrap();
    assert_eq!(down["recipient"], "DE89370400440532013000");
    assert_eq!(down["amount"], json!(12.5));
    // an IBAN the registry does not hold (the e-mail's) is refused
    let proposal = tool
        .to_proposal(&obj(json!({
            "recipient": "GB82 WEST 1234 5698 7654 32",
            "amount": 12.5,
            "currency": "EUR",
        })))
        .unwrap();
    let d = gw
        .decide(&Input {
            proposal,
            mandate,
            ..Input::default()
        })
        .unwrap();
    assert_eq!(d.decision, Outcome::Deny, "{d:?}");
}

proptest! {
    /// Every amount in range goes to the tool and back exactly, as a
    /// number and as text, at every scale.
    #[test]
    fn amounts_round_trip_exactly(minor in 0i64..10_000_000_000_000, scale in prop::sample::select(vec![1u32, 10, 100])) {
        for as_text in [false, true] {
            // up to 10^11 in major units, 13 significant digits: a JSON
            // number holds every one exactly, so none is refused
            let v = minor_to_tool(minor, scale, as_text).unwrap();
            prop_assert_eq!(minor_from_tool(&v, scale, as_text), Ok(minor));
        }
    }

    /// The agent's amount, through a proposal and the gateway's reading,
    /// comes back to the tool as the same number.
    #[test]
    fn a_tool_amount_survives_the_proposal(cents in 0i64..100_000_000_000) {
        let t = example_tool_cached();
        let amount: f64 = format!("{}.{:02}", cents / 100, cents % 100).parse().unwrap();
        let p = t.to_proposal(&obj(json!({"recipient": "X", "amount": amount, "currency": "EUR"}))).unwrap();
        let minor = intentplane::base::Money::from_json(&p["args"]["amount"])
            .unwrap()
            .minor();
        prop_assert_eq!(minor, cents);
        let down = t.to_downstream(&obj(json!({"from_account": "a", "payee_iban": "X", "amount": minor, "currency": "EUR"}))).unwrap();
        prop_assert_eq!(down["amount"].as_f64(), Some(amount));
    }

    /// Any string, and any number with a third decimal, is refused as an
    /// amount the tool gives as a number.
    #[test]
    fn hostile_amounts_are_refused(s in ".{0,40}", mills in 1i64..10, units in 0i64..1_000_000) {
        prop_assert!(minor_from_tool(&Value::String(s), 100, false).is_err());
        let v: f64 = format!("{units}.00{mills}").parse().unwrap();
        prop_assert!(minor_from_tool(&json!(v), 100, false).is_err());
    }
}

fn example_tool_cached() -> &'static ToolConfig {
    static TOOL: std::sync::OnceLock<ToolConfig> = std::sync::OnceLock::new();
    TOOL.get_or_init(|| example_tool("send_money"))
}

fn ipc(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(args)
        .current_dir(root())
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_of_the_example_exits_0_and_creates_no_store() {
    let (code, stdout, stderr) = ipc(&["mcp", "--config", EXAMPLE, "--check"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // how each tool's calls are treated, then the summary
    assert!(
        stdout.starts_with(
            "pass  read_inbox: forwarded as is, without a decision
pass  list_vendors: forwarded as is, without a decision
write send_money (payment.transfer): executed once, a retry answered from the store
write send_email (mail.send): executed once, a retry answered from the store
ok    examples/mcp/intentplane.toml (1 server, 4 tools"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("0 errors, 0 warnings\n"), "{stdout}");
    assert_eq!(stderr, "");
    assert!(!root().join("examples/mcp/intentplane.db").exists());
}

/// The config through `IPC_MCP_CONFIG`, for a client that takes
/// `--config` for itself (the MCP Inspector's CLI: #40, item 9); `--config`
/// wins when both are given; neither is an error, and `--help` names the
/// variable.
#[test]
fn the_config_may_come_from_the_environment() {
    let run = |args: &[&str], env: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_ipc"));
        c.args(args).current_dir(root()).env("NO_COLOR", "1");
        match env {
            Some(v) => c.env("IPC_MCP_CONFIG", v),
            None => c.env_remove("IPC_MCP_CONFIG"),
        };
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, _) = run(&["mcp", "--check"], Some(EXAMPLE));
    assert_eq!(code, Some(0), "{stdout}");
    assert!(
        stdout.contains("\nok    examples/mcp/intentplane.toml"),
        "{stdout}"
    );
    let (code, stdout, _) = run(
        &["mcp", "--config", EXAMPLE, "--check"],
        Some("/nowhere.toml"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let (code, _, stderr) = run(&["mcp", "--check"], None);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("--config <FILE>"), "{stderr}");
    let (_, help, _) = run(&["mcp", "--help"], None);
    assert!(help.contains("[env: IPC_MCP_CONFIG"), "{help}");
}

#[test]
fn check_of_a_bad_config_exits_1_with_the_diagnostic() {
    let (code, stdout, _) = ipc(&[
        "mcp",
        "--config",
        "tests/fixtures/mcp/mcp-unknown_server.toml",
        "--check",
    ]);
    assert_eq!(code, 1);
    assert!(stdout.contains("ipc::mcp::unknown_server"), "{stdout}");
    assert!(stdout.contains("did you mean `demo`?"), "{stdout}");
    assert!(
        stdout.ends_with("fail  tests/fixtures/mcp/mcp-unknown_server.toml\n1 error, 0 warnings\n"),
        "{stdout}"
    );
}

#[test]
fn check_as_json_is_machine_readable() {
    let (code, stdout, _) = ipc(&[
        "mcp",
        "--config",
        "tests/fixtures/mcp/critical_without_source.toml",
        "--check",
        "--format",
        "json",
    ]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["errors"], 1);
    let d = &v["diagnostics"][0];
    assert_eq!(d["code"], "ipc::critical_without_source");
    assert_eq!(d["file"], "tests/fixtures/mcp/critical_without_source.toml");
    // the label points at the TOML: line 29 is `[tools.params.to]`
    assert_eq!(d["labels"][0]["line"], 29);

    let (code, stdout, _) = ipc(&["mcp", "--config", EXAMPLE, "--check", "--format", "json"]);
    assert_eq!(code, 0);
    let v: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["ok"], true);
    // a write, as the config leaves it (`--servers` would name a hint)
    assert_eq!(
        v["tools"][2],
        json!({"server": "demo", "tool": "send_money", "action": "payment.transfer",
               "effect": "write", "hint": null, "suggested_effect": null})
    );
    assert_eq!(v["tools"][0]["effect"], Value::Null, "a passthrough");
}

#[test]
fn without_check_a_bad_config_starts_nothing() {
    let (code, stdout, stderr) = ipc(&["mcp", "--config", "tests/fixtures/mcp/mcp-scale.toml"]);
    assert_eq!(code, 1);
    assert_eq!(stdout, "", "stdout is the MCP channel");
    assert!(stderr.contains("ipc::mcp::scale"), "{stderr}");
}

/// A signed bundle from `ipc build`, an existing token from `ipc token
/// issue`: checked at start-up against the pinned key and the world.
#[test]
fn a_signed_bundle_and_an_existing_token() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ex = root().join("examples/mcp");
    let run = |args: &[&str]| {
        let (code, out, err) = ipc(args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
    };
    let bundle = d.join("bank.bundle");
    let issuer = ex.join("keys/issuer.key");
    run(&[
        "build",
        "packs/bank",
        "-o",
        bundle.to_str().unwrap(),
        "--sign",
        issuer.to_str().unwrap(),
    ]);
    let token = d.join("mandate.json");
    run(&[
        "token",
        "issue",
        "--bundle",
        bundle.to_str().unwrap(),
        "--bundle-key",
        ex.join("keys/issuer.pub").to_str().unwrap(),
        "--key",
        issuer.to_str().unwrap(),
        "--pack",
        "bank",
        "--user",
        "emma",
        "--scope",
        "payments.write",
        "--claim",
        "account=emma-checking",
        "--claim",
        "currency=EUR",
        "--budget",
        "100.00",
        "-o",
        token.to_str().unwrap(),
    ]);
    std::fs::write(
        d.join("world.toml"),
        format!(
            "mandate_keys = [{:?}]\n[registries]\nbank = {:?}\n",
            ex.join("keys/issuer.pub"),
            ex.join("registries/bank")
        ),
    )
    .unwrap();
    let config = |key: &str, extra: &str| {
        format!(
            "bundle = \"bank.bundle\"\nbundle_key = {:?}\nworld = \"world.toml\"\n\
             [[servers]]\nname = \"demo\"\ncommand = \"ipc\"\n\
             [session]\ntoken = \"mandate.json\"\n\
             [[tools]]\nserver = \"demo\"\ntool = \"send_money\"\naction = \"payment.transfer\"\n\
             [tools.params.from_account]\nclaim = \"account\"\n[tools.params.payee_iban]\narg = \"recipient\"\n\
             [tools.params.amount]\nscale = 100\n[tools.params.currency]\n{extra}",
            ex.join(key)
        )
    };
    let cfg = d.join("intentplane.toml");
    std::fs::write(&cfg, config("keys/issuer.pub", "")).unwrap();
    let (report, checked) = check(&cfg);
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    assert_eq!(c.session.user, "emma");
    assert_eq!(c.session.mandates.len(), 1);
    assert_eq!(c.store_path, d.join("intentplane.db"));
    let t = c.tools.iter().find(|t| t.tool == "send_money").unwrap();
    let p = t
        .to_proposal(&obj(
            json!({"recipient": "X", "amount": 1, "currency": "EUR"}),
        ))
        .unwrap();
    assert_eq!(p["args"]["from_account"], "emma-checking");

    // the bundle is not signed by the pinned key
    std::fs::write(&cfg, config("keys/emma.pub", "")).unwrap();
    let (report, _) = check(&cfg);
    let codes: Vec<String> = report.items.iter().map(|r| r.code()).collect();
    assert_eq!(codes, vec!["ipc::mcp::load"], "{report}");

    // an inline tool cannot extend a signed bundle
    let inline = "[[tools]]\nserver = \"demo\"\ntool = \"send_email\"\nscope = \"mail.send\"\n[tools.params.to]\ntype = \"Email\"\n";
    std::fs::write(&cfg, config("keys/issuer.pub", inline)).unwrap();
    let (report, _) = check(&cfg);
    let msgs: Vec<String> = report.items.iter().map(|r| r.to_json().message).collect();
    assert!(
        msgs.iter()
            .any(|m| m.contains("a signed bundle cannot be extended")),
        "{msgs:?}"
    );

    // a tampered token is refused at start-up
    let mut tok: Value = serde_json::from_str(&std::fs::read_to_string(&token).unwrap()).unwrap();
    tok["mandate"]["budget"]["amount"] = json!(100_000_000);
    std::fs::write(&token, tok.to_string()).unwrap();
    std::fs::write(&cfg, config("keys/issuer.pub", "")).unwrap();
    let (report, _) = check(&cfg);
    let msgs: Vec<String> = report.items.iter().map(|r| r.to_json().message).collect();
    assert_eq!(msgs, vec!["session: the token's signature does not verify"]);
}

/// An inline tool with Money: the budget, a fact, rules and the mandate's
/// claim reach the gateway, which decides on the TOML's rules.
#[test]
fn an_inline_tool_is_decided_by_its_rules() {
    let (report, checked) = check(Path::new("tests/fixtures/mcp/ok__inline_money.toml"));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let tool = c
        .tools
        .iter()
        .find(|t| t.tool == "pay_vendor")
        .unwrap()
        .clone();
    let mandate = c.session.mandates[0].1.clone();
    assert_eq!(c.session.mandates[0].0, "pay");
    let gw = Gateway::new(&c.bundle, c.world, Arc::new(MemoryStore::new())).unwrap();
    let decide = |amount: f64, iban: &str| {
        let proposal = tool
            .to_proposal(&obj(json!({"iban": iban, "amount": amount})))
            .unwrap();
        gw.decide(&Input {
            proposal,
            mandate: Some(mandate.clone()),
            ..Input::default()
        })
        .unwrap()
    };
    let vendor = "de89370400440532013000";
    assert_eq!(decide(10.0, vendor).decision, Outcome::Allow);
    assert_eq!(decide(1500.0, vendor).decision, Outcome::Pending);
    let d = decide(15000.0, vendor);
    assert_eq!(d.decision, Outcome::Deny);
    assert_eq!(d.reason.as_deref(), Some("forbidden: hard cap"), "{d:?}");
    assert_eq!(d.policies, vec!["pay/vendor.pay/forbid/hard-cap"]);
    assert_eq!(
        decide(10.0, "GB82 WEST 1234 5698 7654 32").decision,
        Outcome::Deny
    );
}

#[test]
fn check_with_only_warnings_exits_0_and_prints_them() {
    let (code, stdout, _) = ipc(&[
        "mcp",
        "--config",
        "tests/fixtures/mcp/unused_registry.toml",
        "--check",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("registry `unused` is never used"),
        "{stdout}"
    );
    assert!(stdout.ends_with("0 errors, 1 warning\n"), "{stdout}");
}

/// The pack parser's fragments keep the offset they are given: a condition
/// in the TOML is reported where it stands in the TOML.
#[test]
fn fragments_are_parsed_at_their_offset() {
    use intentplane::syntax::{parse_expr_at, parse_path_at, parse_type_at};
    let e = parse_expr_at("amount > 1_000.00", 40).unwrap();
    assert_eq!((e.span.start, e.span.end), (40, 57));
    let t = parse_type_at("set<Email>", 7).unwrap();
    assert_eq!((t.span.start, t.span.end), (7, 17));
    let p = parse_path_at("registry.contacts", 3).unwrap();
    assert_eq!(p.head.text, "registry");
    assert_eq!((p.span.start, p.span.end), (3, 20));
    // an error points into the larger file too, and trailing text is refused
    let err = parse_expr_at("amount >", 100).unwrap_err();
    let j = intentplane::diagnostics::to_json(&err[0], "f", &" ".repeat(200));
    assert_eq!(j.labels[0].offset, 108);
    assert!(parse_type_at("Iban extra", 0).is_err());
    assert!(parse_path_at("mandate.payee or", 0).is_err());
}

/// A shipped config's tool, and a gateway over its world and bundle with
/// the session's mandate.
fn shipped(config: &str, tool: &str) -> (ToolConfig, Gateway, Value) {
    let (report, checked) = check(&root().join(config));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let t = c.tools.iter().find(|t| t.tool == tool).unwrap().clone();
    let mandate = c.session.mandates[0].1.clone();
    let gw = Gateway::new(&c.bundle, c.world, Arc::new(MemoryStore::new())).unwrap();
    (t, gw, mandate)
}

/// Records through the proxy's mapping (issue #24, item 2): the memory
/// server's `create_relations` takes a list of objects; what the entities
/// registry vouches for goes out as the objects that came in, and one
/// injected element refuses the call.
#[test]
fn records_go_out_as_the_objects_they_came_in_as() {
    let (t, gw, mandate) = shipped("examples/mcp/memory/intentplane.toml", "create_relations");
    let decide = |args: Value| {
        let proposal = t.to_proposal(&obj(args)).unwrap();
        gw.decide(&Input {
            proposal,
            mandate: Some(mandate.clone()),
            ..Input::default()
        })
        .unwrap()
    };
    let relations = json!([
        {"relationType": "knows", "from": "Emma", "to": "Lukas"},
        {"from": "Lukas", "to": "Garden project", "relationType": "works on"},
    ]);
    let d = decide(json!({ "relations": relations }));
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    let call = t.downstream_call(&d.resolved, &Default::default()).unwrap();
    // the same objects, in the order of their fields as they came in
    assert_eq!(call.arguments["relations"], relations);
    assert_eq!(
        serde_json::to_string(&call.arguments["relations"][0]).unwrap(),
        r#"{"relationType":"knows","from":"Emma","to":"Lukas"}"#
    );
    assert_eq!(call.recorded, call.arguments);
    assert_eq!(
        d.origins["relations"],
        json!([
            {"from": "registry.entities", "to": "registry.entities"},
            {"from": "registry.entities", "to": "registry.entities"}
        ])
    );
    let d = decide(json!({"relations": [
        {"from": "Emma", "to": "Lukas", "relationType": "knows"},
        {"from": "Mallory", "to": "Emma", "relationType": "owns"},
    ]}));
    assert_eq!(d.decision, Outcome::Deny);
    assert_eq!(
        d.reason.as_deref(),
        Some(
            "`relations[1].from` `Mallory` is not from a trusted source: not in registry.entities"
        )
    );
}

/// `edit_file`: the file's relative path resolved against the server's
/// folder, the edits sent as they came.
#[test]
fn an_edit_of_the_filesystem_example_is_decided_and_sent() {
    let (t, gw, mandate) = shipped("examples/mcp/filesystem/intentplane.toml", "edit_file");
    let edits = json!([{"oldText": "milk", "newText": "tea"}]);
    let p = t
        .to_proposal(&obj(json!({"path": "./notes/todo.md", "edits": edits})))
        .unwrap();
    // the example's workspace is the folder beside its config
    // (its real path: the proxy resolves links for a server on this machine)
    let todo = root()
        .join("examples/mcp/filesystem/workspace")
        .canonicalize()
        .unwrap()
        .join("notes/todo.md")
        .display()
        .to_string();
    assert_eq!(p["args"]["path"], todo.as_str());
    let d = gw
        .decide(&Input {
            proposal: p,
            mandate: Some(mandate.clone()),
            ..Input::default()
        })
        .unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    let call = t.downstream_call(&d.resolved, &Default::default()).unwrap();
    assert_eq!(
        Value::Object(call.arguments),
        json!({"path": todo, "edits": edits})
    );
    // outside the folder: refused before any decision
    assert!(
        t.to_proposal(&obj(json!({"path": "../x", "edits": edits})))
            .is_err()
    );
}

/// A step-up on a tool with records: the approver is shown each record
/// whole (as JSON, escaped), and what is shown hashes to the operation.
#[test]
fn a_record_is_shown_to_the_approver_as_it_is_signed() {
    // the example as a user has it (its folder and the keys beside it),
    // copied, with a step-up on edits
    let d = tempfile::tempdir().unwrap();
    copy_dir(
        &root().join("examples/mcp/filesystem"),
        &d.path().join("filesystem"),
    );
    copy_dir(&root().join("examples/mcp/keys"), &d.path().join("keys"));
    let cfg = d.path().join("filesystem/intentplane.toml");
    let text = std::fs::read_to_string(&cfg).unwrap().replace(
        "[tools.params.dryRun]",
        "[[tools.rules]]\nkind = \"step_up\"\nreason = \"an edit\"\nalways = true\n[tools.params.dryRun]",
    );
    std::fs::write(&cfg, text).unwrap();
    let ws = d.path().join("filesystem/workspace");
    let (report, checked) = check(&cfg);
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let t = c.tools.iter().find(|t| t.tool == "edit_file").unwrap();
    let gw = Gateway::new(&c.bundle, c.world, Arc::new(MemoryStore::new())).unwrap();
    let edits = json!([{"oldText": "a \"quote\"", "newText": "line\nbreak"}]);
    let proposal = t
        .to_proposal(&obj(
            json!({"path": ws.join("x.md").display().to_string(), "edits": edits}),
        ))
        .unwrap();
    let d = gw
        .decide(&Input {
            proposal,
            mandate: Some(c.session.mandates[0].1.clone()),
            ..Input::default()
        })
        .unwrap();
    assert_eq!(d.decision, Outcome::Pending, "{d:?}");
    let op = gw.pending_op(d.operation_hash.as_deref().unwrap()).unwrap();
    let shown = intentplane::gateway::render::checked(&gw, &op).unwrap();
    let text = shown.text();
    // each element whole, as JSON, escaped once more: no line of its own
    assert!(
        text.contains(r#"- \json {"oldText":"a \\"quote\\"","newText":"line\\nbreak"}"#),
        "{text}"
    );
}

/// Issue #36, item 1: every shipped MCP example runs from a fresh clone.
/// Whatever a server of theirs is given (its command, arguments, folder
/// and environment) lies inside the checkout, never in `/tmp` or a folder
/// a user must make by hand, and each config loads as it is.
#[test]
fn the_shipped_examples_name_nothing_outside_the_checkout() {
    let examples = root().join("examples");
    for config in [
        "examples/mcp/intentplane.toml",
        "examples/mcp/filesystem/intentplane.toml",
        "examples/mcp/memory/intentplane.toml",
    ] {
        let (report, checked) = check(&root().join(config));
        assert!(!report.has_errors(), "{config}: {report}");
        for s in checked.unwrap().servers {
            let intentplane::mcp::config::Transport::Stdio { args, env, cwd, .. } = s.transport
            else {
                continue;
            };
            assert!(
                cwd.starts_with(&examples),
                "{config}: cwd {}",
                cwd.display()
            );
            // a variable passed through from the environment (the base
            // set: PATH, HOME, TMPDIR, ...; `env_pass`) is the user's, not
            // the example's
            let shipped = env
                .iter()
                .filter(|(k, v)| std::env::var(k).as_deref() != Ok(v.as_str()))
                .map(|(_, v)| v);
            for p in args.iter().chain(shipped).filter(|p| p.starts_with('/')) {
                assert!(Path::new(p).starts_with(&examples), "{config}: {p}");
            }
        }
    }
    // the git example (its author from the environment, as its header says)
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["mcp", "--check", "--config"])
        .arg(root().join("examples/mcp/git/intentplane.toml"))
        .env("GIT_AUTHOR_NAME", "Emma")
        .env("GIT_AUTHOR_EMAIL", "emma@example.org")
        .env("HOME", tmp.path())
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `${CONFIG_DIR}` is the config's folder in `args`, `cwd` and `env`,
/// whatever the environment says; a relative folder in a `set<Path>`
/// registry is the config's too; another unset variable is still an
/// error at its value.
#[test]
fn config_dir_and_relative_registry_folders_resolve_against_the_config() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap();
    copy_dir(&root().join("examples/mcp/filesystem"), &dir.join("fs"));
    copy_dir(&root().join("examples/mcp/keys"), &dir.join("keys"));
    let cfg = dir.join("fs/intentplane.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let text = text.replace(
        "env_pass = [\"HOME\", \"PATH\"]",
        "env = { WHERE = \"${CONFIG_DIR}/x\" }",
    );
    std::fs::write(&cfg, &text).unwrap();
    let (report, checked) = check(&cfg);
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let intentplane::mcp::config::Transport::Stdio { args, env, cwd, .. } = &c.servers[0].transport
    else {
        panic!("a command")
    };
    let ws = dir.join("fs/workspace");
    assert_eq!(args.last().map(String::as_str), ws.to_str());
    assert_eq!(cwd.canonicalize().unwrap(), ws);
    assert!(env.contains(&("WHERE".into(), format!("{}/x", dir.join("fs").display()))));
    // the registry's `workspace` is the folder beside the config: a write
    // there is allowed, one in a sibling folder of the same name elsewhere is not
    let t = c.tools.iter().find(|t| t.tool == "write_file").unwrap();
    let mandate = c.session.mandates[0].1.clone();
    let gw = Gateway::new(&c.bundle, c.world, Arc::new(MemoryStore::new())).unwrap();
    let decide = |path: String| {
        let p = t
            .to_proposal(&obj(json!({"path": path, "content": "x"})))
            .unwrap();
        gw.decide(&Input {
            proposal: p,
            mandate: Some(mandate.clone()),
            ..Input::default()
        })
        .unwrap()
    };
    let inside = decide(ws.join("a.md").display().to_string());
    assert_eq!(inside.decision, Outcome::Allow, "{inside:?}");
    let elsewhere = decide(dir.join("workspace/a.md").display().to_string());
    assert_eq!(elsewhere.decision, Outcome::Deny, "{elsewhere:?}");
    // any other variable is still read from the environment, and an unset
    // one is an error at its value
    let unset = "IPC_TEST_SURELY_UNSET_36";
    std::fs::write(
        &cfg,
        text.replace("${CONFIG_DIR}/workspace\"]", &format!("${{{unset}}}\"]")),
    )
    .unwrap();
    let (report, _) = check(&cfg);
    assert!(report.has_errors());
    assert!(report.to_string().contains(unset), "{report}");
}

/// A relative `--config` that is not there names the folder it was looked
/// for in and asks for an absolute path (a client starts the proxy from a
/// folder of its own) (#40, item 11); an absolute one that is not there
/// says only that it is missing.
#[test]
fn a_missing_relative_config_names_the_folder_searched() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["mcp", "--check", "--config", "intentplane.toml"])
        .env("NO_COLOR", "1")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let flat: String = err.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("ipc::mcp::read"), "{err}");
    assert!(flat.contains("give the config's absolute path"), "{err}");
    let folder = tmp.path().canonicalize().unwrap();
    let unwrapped: String = err.split_whitespace().collect();
    assert!(
        unwrapped.contains(&folder.display().to_string().replace(' ', "")),
        "{err}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ipc"))
        .args(["mcp", "--check", "--config"])
        .arg(tmp.path().join("intentplane.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("absolute path"));
}

/// Containment survives links (issue #39, finding 4): for a server on this
/// machine, a path inside the trusted folder that goes through a symbolic
/// link out of it (`workspace/link/pwned.txt`, `link` → `../outside`) is
/// decided as the file it really is, and refused; a dangling link (the
/// server would create its target) is refused before any decision; a link
/// that stays inside is allowed and sent as its real path.
#[cfg(unix)]
#[test]
fn a_path_through_a_link_out_of_the_trusted_folder_is_refused() {
    use std::os::unix::fs::symlink;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().canonicalize().unwrap();
    copy_dir(&root().join("examples/mcp/filesystem"), &dir.join("fs"));
    copy_dir(&root().join("examples/mcp/keys"), &dir.join("keys"));
    let ws = dir.join("fs/workspace");
    std::fs::create_dir_all(dir.join("outside")).unwrap();
    std::fs::create_dir_all(ws.join("notes")).unwrap();
    symlink("../../outside", ws.join("link")).unwrap();
    symlink("../../outside/new.txt", ws.join("dangling")).unwrap();
    symlink("notes", ws.join("inner")).unwrap();
    let (report, checked) = check(&dir.join("fs/intentplane.toml"));
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let t = c.tools.iter().find(|t| t.tool == "write_file").unwrap();
    let mandate = c.session.mandates[0].1.clone();
    let gw = Gateway::new(&c.bundle, c.world, Arc::new(MemoryStore::new())).unwrap();
    let decide = |path: &str| {
        let p = t.to_proposal(&obj(json!({"path": path, "content": "x"})))?;
        Ok::<_, String>(
            gw.decide(&Input {
                proposal: p,
                mandate: Some(mandate.clone()),
                ..Input::default()
            })
            .unwrap(),
        )
    };
    let absolute = ws.join("link/pwned.txt").display().to_string();
    for path in ["link/pwned.txt", "./link/pwned.txt", absolute.as_str()] {
        let d = decide(path).unwrap();
        assert_eq!(d.decision, Outcome::Deny, "{path}: {d:?}");
        assert_eq!(d.stage.name(), "provenance", "{path}: {d:?}");
        let outside = dir.join("outside/pwned.txt").display().to_string();
        assert!(
            d.reason.as_deref().unwrap_or("").contains(&outside),
            "{d:?}"
        );
    }
    let e = decide("dangling").unwrap_err();
    assert!(e.contains("cannot be resolved"), "{e}");
    let d = decide("inner/a.md").unwrap();
    assert_eq!(d.decision, Outcome::Allow, "{d:?}");
    let call = t.downstream_call(&d.resolved, &Default::default()).unwrap();
    assert_eq!(
        call.arguments["path"],
        json!(ws.join("notes/a.md").display().to_string())
    );
}

/// Issue #39, findings 2 and 9: a remote server's `token_file` that other
/// users can read or change is refused (its token is not the proxy's
/// alone); readable by its owner only, it loads.
#[test]
fn a_token_file_others_can_read_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let d = tempfile::tempdir().unwrap();
    let fixtures = root().join("tests/fixtures/mcp");
    let text = std::fs::read_to_string(fixtures.join("ok__remote.toml"))
        .unwrap()
        .replace("\"../../../", &format!("\"{}/", root().display()))
        .replace(
            "\"remote-ca.pem\"",
            &format!(
                "\"{}/remote-ca.pem\"\ntoken_file = \"token\"",
                fixtures.display()
            ),
        );
    let cfg = d.path().join("intentplane.toml");
    std::fs::write(&cfg, text).unwrap();
    let token = d.path().join("token");
    std::fs::write(&token, "tok-0123456789abcdef\n").unwrap();
    for (mode, loads) in [
        (0o600, true),
        (0o400, true),
        (0o644, false),
        (0o640, false),
        (0o604, false),
        (0o620, false),
    ] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let (report, checked) = check(&cfg);
        if loads {
            assert!(!report.has_errors(), "{mode:o}: {report}");
            assert!(checked.is_some());
            continue;
        }
        let codes: Vec<String> = report.items.iter().map(|r| r.code()).collect();
        assert_eq!(codes, ["ipc::mcp::server_token"], "{mode:o}: {report}");
        // words, not lines: miette wraps by the terminal's width
        let shown = report.to_string();
        let shown: Vec<&str> = shown.split_whitespace().filter(|w| *w != "│").collect();
        let shown = shown.join(" ");
        for words in [
            "other users can read",
            &format!("mode {mode:o}"),
            "chmod 600",
        ] {
            assert!(shown.contains(words), "{mode:o}: {words:?} in {shown}");
        }
    }
}

/// Issue #37: a world whose stores are sharded puts the proxy on its
/// session tenant's shard, and a shard that does not hold the tenant (not
/// placed yet, or a stale map) stops it from starting.
#[test]
fn a_sharded_world_puts_the_proxy_on_its_tenants_shard() {
    use intentplane::gateway::shards::Holding;
    let top = tempfile::tempdir().unwrap();
    copy_dir(&root().join("packs"), &top.path().join("packs"));
    let dir = top.path().join("examples/mcp");
    copy_dir(&root().join("examples/mcp"), &dir);
    let world = dir.join("world.toml");
    let mut text = std::fs::read_to_string(&world).unwrap();
    text.push_str("\n[store.shards]\nemma = \"emma.db\"\nnoah = \"noah.db\"\n");
    std::fs::write(&world, text).unwrap();
    let config = dir.join("intentplane.toml");
    let (report, checked) = check(&config);
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    assert!(
        c.store_path.ends_with("emma.db"),
        "{}",
        c.store_path.display()
    );
    assert_eq!(c.holding, Holding::Shard { default: false });
    // not placed: refused at start
    // the report as one line (it wraps long paths at its width)
    let flat = |r: &dyn std::fmt::Display| {
        r.to_string()
            .replace('│', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let report = load(&config).err().expect("refused");
    assert!(
        flat(&report).contains("does not hold tenant `emma`"),
        "{report}"
    );
    // placed (by the operator's command, as deployed): loads, on emma's shard
    let world_s = world.display().to_string();
    let (code, out, err) = ipc(&["shards", "init", "--world", &world_s]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("placed   emma on"), "{out}");
    let setup = load(&config).unwrap_or_else(|r| panic!("{r}"));
    assert_eq!(setup.holding, Holding::Shard { default: false });
    // a map naming no shard for her: a diagnostic, nothing opened
    let mut text = std::fs::read_to_string(&world).unwrap();
    text = text.replace("emma = \"emma.db\"\n", "");
    std::fs::write(&world, text).unwrap();
    let (report, _) = check(&config);
    assert!(
        flat(&report).contains("names no shard for the session's tenant `emma`"),
        "{report}"
    );
    assert!(
        report
            .to_string()
            .contains("names no shard for the session's tenant `emma`"),
        "{report}"
    );
}

#[test]
fn enforce_false_puts_the_sessions_every_pack_in_shadow() {
    let dir = tempfile::tempdir().unwrap();
    // the example as shipped, beside the packs it names (`../../packs`)
    copy_dir(
        &root().join("examples/mcp"),
        &dir.path().join("examples/mcp"),
    );
    copy_dir(&root().join("packs"), &dir.path().join("packs"));
    let config = dir.path().join("examples/mcp/intentplane.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("enforce = false\n{text}")).unwrap();
    let (report, checked) = check(&config);
    assert!(!report.has_errors(), "{report}");
    let c = checked.unwrap();
    let packs: Vec<&str> = c.world.shadow.packs.iter().map(String::as_str).collect();
    assert_eq!(packs, vec!["bank", "mail"]);
    // not a boolean: refused
    std::fs::write(&config, format!("enforce = \"no\"\n{text}")).unwrap();
    let (report, _) = check(&config);
    assert!(report.has_errors(), "{report}");
    // left out: every pack enforced
    std::fs::write(&config, &text).unwrap();
    let (_, checked) = check(&config);
    assert!(checked.unwrap().world.shadow.is_off());
}
