//! The MCP proxy (`ipc mcp`): the gateway between an MCP client and the
//! MCP servers it uses.
//!
//! [`config`] is the TOML front-end: it reads `intentplane.toml`, lowers
//! inline tool declarations to the same checked IR as the pack language
//! (with the same checker and diagnostics), and maps each tool's arguments
//! onto an action's parameters and back. [`proxy`] is the rmcp shell: the
//! upstream server on stdio, the downstream clients, elicitation.
//! [`session`] keeps the session's mandates in the store, so that a restart
//! continues the same session. [`intent`] is the agent's request for a
//! mandate (`intentplane_request_mandate`), confirmed by the user.
//! [`transport`] is Streamable HTTP, both ways: a downstream given by
//! `url`, and `ipc mcp --listen`.

pub mod config;
pub mod intent;
pub mod proxy;
pub mod session;
/// The proxy's test setup (tests and benchmarks only, like
/// `gateway::testkit`).
#[cfg(any(test, feature = "testkit"))]
#[allow(clippy::unwrap_used, clippy::expect_used)] // test code: a broken fixture panics
pub mod testkit;
pub mod transport;
