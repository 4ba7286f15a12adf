//! The proxy's test setup, built by hand (not from a TOML file): the test
//! world's bundle and keys, Emma's bank mandate, the demo server as the
//! one downstream, `send_money` mapped onto `payment.transfer`. For the
//! integration tests and the benchmark; test code, it panics.

use crate::gateway::testkit::{MandateSpec, TestWorld};
use crate::ir::Type;
use crate::mcp::config::{
    ArgMap, ServerConfig, SessionConfig, Setup, ToolConfig, ToolMode, Transport,
};
use crate::store::Store;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A tool argument of the parameter's type, as the tool names it, no
/// scale, required.
fn arg(a: &str, ty: Type) -> ArgMap {
    ArgMap::Arg {
        arg: a.into(),
        scale: None,
        ty,
        as_text: false,
        optional: false,
    }
}

/// The demo server's tools as the proxy's tests configure them:
/// `read_inbox` and `list_vendors` passthrough, `send_money` mapped onto
/// `payment.transfer` (amount in major units), `send_email` and
/// `delete_file` not listed (hidden).
pub fn demo_tools() -> Vec<ToolConfig> {
    let arg = |a: &str, scale: Option<u32>, ty: Type, optional: bool| ArgMap::Arg {
        arg: a.into(),
        scale,
        ty,
        as_text: false,
        optional,
    };
    vec![
        ToolConfig {
            server: "demo".into(),
            tool: "read_inbox".into(),
            mode: ToolMode::Passthrough,
            base: None,
        },
        ToolConfig {
            server: "demo".into(),
            tool: "list_vendors".into(),
            mode: ToolMode::Passthrough,
            base: None,
        },
        ToolConfig {
            server: "demo".into(),
            tool: "send_money".into(),
            mode: ToolMode::Action {
                action: "payment.transfer".into(),
                effect: crate::gateway::Effect::Write,
                params: vec![
                    (
                        "from_account".into(),
                        ArgMap::Const {
                            value: json!("emma-checking"),
                            arg: "from_account".into(),
                            scale: None,
                            ty: Type::Id,
                            as_text: false,
                        },
                    ),
                    (
                        "payee_iban".into(),
                        arg("recipient", None, Type::Iban, false),
                    ),
                    (
                        "amount".into(),
                        arg("amount", Some(100), Type::Money, false),
                    ),
                    (
                        "currency".into(),
                        arg("currency", None, Type::Currency, false),
                    ),
                    ("subject".into(), arg("subject", None, Type::Text, true)),
                ],
            },
            base: None,
        },
    ]
}

/// `change_password` mapped onto the bank pack's `user.update_password`
/// (its `new_password` is `secret`; step-up, always).
pub fn password_tool() -> ToolConfig {
    ToolConfig {
        server: "demo".into(),
        tool: "change_password".into(),
        mode: ToolMode::Action {
            action: "user.update_password".into(),
            effect: crate::gateway::Effect::Write,
            params: vec![(
                "new_password".into(),
                ArgMap::Arg {
                    arg: "password".into(),
                    scale: None,
                    ty: Type::Text,
                    as_text: false,
                    optional: false,
                },
            )],
        },
        base: None,
    }
}

/// `update_vendor` mapped onto the AP pack's `vendor.change_iban` (four
/// eyes, always).
pub fn ap_tools() -> Vec<ToolConfig> {
    vec![ToolConfig {
        server: "demo".into(),
        tool: "update_vendor".into(),
        mode: ToolMode::Action {
            action: "vendor.change_iban".into(),
            effect: crate::gateway::Effect::Write,
            params: vec![
                ("vendor_id".into(), arg("vendor_id", Type::Id)),
                ("callback_id".into(), arg("callback_id", Type::Id)),
                ("new_iban".into(), arg("iban", Type::Iban)),
            ],
        },
        base: None,
    }]
}

/// The demo server's `fetch` mapped onto the slack pack's `web.fetch` as a
/// read (`effect = "read"`: decided and sent again at each call), and
/// `publish` onto `web.post` (a write); both take a `url` from the
/// mandate's `sites` (see [`web_mandate`]).
pub fn web_tools() -> Vec<ToolConfig> {
    vec![
        ToolConfig {
            server: "demo".into(),
            tool: "fetch".into(),
            mode: ToolMode::Action {
                action: "web.fetch".into(),
                params: vec![("url".into(), arg("url", Type::Url))],
                effect: crate::gateway::Effect::Read,
            },
            base: None,
        },
        ToolConfig {
            server: "demo".into(),
            tool: "publish".into(),
            mode: ToolMode::Action {
                action: "web.post".into(),
                params: vec![
                    ("url".into(), arg("url", Type::Url)),
                    ("content".into(), arg("content", Type::Text)),
                ],
                effect: crate::gateway::Effect::Write,
            },
            base: None,
        },
    ]
}

/// Emma's mandate on the slack pack for [`web_tools`]: `web.read` and
/// `web.write`, the sites she named.
pub fn web_mandate(sites: &[&str]) -> MandateSpec {
    MandateSpec::for_pack("slack", "emma", "emma", &["web.read", "web.write"])
        .claim("sites", json!(sites))
        .claim("emails", json!([]))
}

/// The demo server started as `ipc demo mcp-server --state <state>` (with
/// extra arguments, e.g. `--crash-on send_money`).
pub fn demo_server(ipc: &Path, state: &Path, extra: &[&str], cwd: &Path) -> ServerConfig {
    let mut args: Vec<String> = vec![
        "demo".into(),
        "mcp-server".into(),
        "--state".into(),
        state.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    ServerConfig {
        name: "demo".into(),
        transport: Transport::Stdio {
            command: ipc.display().to_string(),
            args,
            env: vec![],
            cwd: cwd.to_path_buf(),
        },
    }
}

/// A proxy setup over `tw`: Emma's mandate (`spec`), her key for step-up
/// (`user_key`), approvals read from `<dir>/approvals`.
pub fn setup(
    tw: &TestWorld,
    spec: MandateSpec,
    server: ServerConfig,
    tools: Vec<ToolConfig>,
    store: Arc<dyn Store>,
    user_key: bool,
) -> Setup {
    let user = spec.user.clone();
    let pack = spec.pack.clone();
    let token = tw.mandate(spec);
    let approvals: PathBuf = tw.dir.path().join("approvals");
    let _ = std::fs::create_dir_all(&approvals);
    Setup {
        config_path: tw.dir.path().join("intentplane.toml"),
        servers: vec![server],
        tools,
        bundle: tw.bundle.clone(),
        world: tw.world(),
        store,
        session: SessionConfig {
            mandates: vec![(pack, token.clone())],
            token,
            user_key: user_key.then(|| tw.key(&user).clone()),
            user,
            approvals_dir: Some(approvals),
            issued: false,
            decline_for: crate::mcp::config::DEFAULT_DECLINE_FOR,
            issuer_key: None,
            mandate_requests: false,
        },
        sites: Default::default(),
        holding: Default::default(),
    }
}
