//! Starting the proxy: the durable session continued (or started anew),
//! the gateway built, every downstream server started and each configured
//! tool checked against what its server declares.

use super::downstream::{Downstream, declared_tool, start_listed};
use super::outcomes::Outcomes;
use super::{Inner, Proxy, ProxyError, Routed, elicit, standing};
use crate::gateway::Gateway;
use crate::mcp::config::declared::{DeclaredTool, Sites};
use crate::mcp::config::{ServerConfig, Setup, ToolConfig, ToolMode};
use crate::mcp::{intent, session};
use rmcp::model::Tool;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The session recorded in the store, continued or started anew (see
/// [`session::resume`]), and the child mandates the user granted in it;
/// synchronous: it reads and writes the store.
pub(super) fn resume_session(
    mut setup: Setup,
    fresh: bool,
) -> Result<(Setup, session::Start, HashMap<String, Value>), ProxyError> {
    let now = setup
        .world
        .clock
        .map_or_else(crate::gateway::unix_now, Ok)?;
    let reads: Vec<String> = setup
        .tools
        .iter()
        .filter_map(|t| match &t.mode {
            ToolMode::Action { action, effect, .. } if !effect.is_write() => Some(action.clone()),
            _ => None,
        })
        .collect();
    let start = session::resume(
        setup.store.as_ref(),
        &setup.bundle.hash,
        now,
        &setup.config_path,
        &mut setup.session,
        &reads,
        fresh,
    )?;
    let children = intent::resume(setup.store.as_ref(), &setup.config_path, &setup.session)?;
    Ok((setup, start, children))
}

impl Proxy {
    /// [`Proxy::start`]; `fresh`: a new session, the recorded one revoked
    /// (`ipc mcp --new-session`).
    pub async fn start_session(setup: Setup, fresh: bool) -> Result<Proxy, ProxyError> {
        // the store is synchronous (PostgreSQL's client runs a runtime of
        // its own, which cannot start on an async worker): read off them
        let (setup, start, children) =
            tokio::task::spawn_blocking(move || resume_session(setup, fresh))
                .await
                .map_err(|e| ProxyError::Session {
                    reason: format!("reading the session did not finish: {e}"),
                })??;
        let mandates: Vec<Value> = setup
            .tools
            .iter()
            .map(|t| setup.mandate_for(t).unwrap_or(&setup.session.token).clone())
            .collect();
        let packs: Vec<Option<String>> = setup
            .tools
            .iter()
            .map(|t| match &t.mode {
                ToolMode::Action { action, .. } => {
                    setup.bundle.table.action(action).map(|a| a.pack.clone())
                }
                ToolMode::Passthrough => None,
            })
            .collect();
        let request_tool = setup
            .session
            .mandate_requests
            .then(|| intent::tool(&setup.bundle, &setup.session.mandates));
        if let Some(line) = setup.world.shadow.startup_line() {
            crate::base::log::warn("shadow_mode", &line);
        }
        let gateway = Gateway::new(&setup.bundle, setup.world, setup.store)?
            .with_holding(setup.holding)
            .execute_externally();
        let (clients, offered) = start_servers(&setup.servers).await?;
        checked(&setup.sites, &setup.tools, &offered)?;
        let mut tools = vec![];
        for ((t, mandate), pack) in setup.tools.into_iter().zip(mandates).zip(packs) {
            tools.push(routed(t, &offered, mandate, pack)?);
        }
        let standing = standing::Standing::of(&gateway, &setup.session.mandates);
        let gateway = Arc::new(gateway);
        let notify = crate::gateway::notify::start(gateway.clone())?;
        Ok(Proxy {
            inner: Arc::new(Inner {
                gateway: gateway.clone(),
                session: setup.session,
                tools,
                clients,
                sealer: elicit::Sealer::new().map_err(|reason| ProxyError::Session { reason })?,
                config_path: setup.config_path,
                start,
                outcomes: Outcomes::start(gateway),
                changed: Mutex::default(),
                request_tool,
                children: Mutex::new(children),
                standing,
                notify,
            }),
        })
    }
}

/// Every downstream server started, and the tools each offers.
async fn start_servers(
    servers: &[ServerConfig],
) -> Result<(HashMap<String, Downstream>, HashMap<String, Vec<Tool>>), ProxyError> {
    let mut clients = HashMap::new();
    let mut offered: HashMap<String, Vec<Tool>> = HashMap::new();
    for s in servers {
        let (client, tools) = start_listed(s).await?;
        offered.insert(s.name.clone(), tools);
        clients.insert(
            s.name.clone(),
            Downstream {
                config: s.clone(),
                running: tokio::sync::RwLock::new(Arc::new(client)),
            },
        );
    }
    Ok((clients, offered))
}

/// The config checked against what the servers declare (`declared.rs`):
/// an error stops the start, a warning is printed.
fn checked(
    sites: &Sites,
    tools: &[ToolConfig],
    offered: &HashMap<String, Vec<Tool>>,
) -> Result<(), ProxyError> {
    let declared: HashMap<String, Vec<DeclaredTool>> = offered
        .iter()
        .map(|(k, v)| (k.clone(), v.iter().map(declared_tool).collect()))
        .collect();
    let report = crate::mcp::config::declared::check(sites, tools, &declared);
    if report.has_errors() {
        return Err(ProxyError::Declared {
            report: report.render_human(false),
        });
    }
    if !report.items.is_empty() {
        eprint!("{}", report.render_human(false));
    }
    Ok(())
}

/// A configured tool as the client sees it: its server's declaration,
/// shown with only the arguments the agent gives.
fn routed(
    t: ToolConfig,
    offered: &HashMap<String, Vec<Tool>>,
    mandate: Value,
    pack: Option<String>,
) -> Result<Routed, ProxyError> {
    let list = offered
        .get(&t.server)
        .ok_or_else(|| ProxyError::UnknownServer {
            tool: t.tool.clone(),
            server: t.server.clone(),
        })?;
    let tool = list
        .iter()
        .find(|d| d.name == t.tool)
        .cloned()
        .ok_or_else(|| ProxyError::MissingTool {
            server: t.server.clone(),
            tool: t.tool.clone(),
            offered: list
                .iter()
                .map(|d| format!("`{}`", d.name))
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    if let Some(arg) = t.undeclared_argument(&tool.input_schema) {
        return Err(ProxyError::UndeclaredArgument {
            server: t.server.clone(),
            tool: t.tool.clone(),
            arg: arg.to_string(),
        });
    }
    // the agent is shown only the arguments it gives
    let mut tool = tool;
    let declared = declared_tool(&tool);
    tool.input_schema = Arc::new(t.advertised_schema(&tool.input_schema));
    Ok(Routed {
        config: t,
        tool,
        declared,
        mandate,
        pack,
    })
}
