//! The MCP proxy: its TOML configuration, what a downstream tool is sent, the
//! proxy in process and `ipc mcp` across restarts.
//!
//! One test binary per area (ARCHITECTURE.md, `tests/`): each module below
//! was a test binary of its own; a new test file is a new `mod` line here.

#[path = "../common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

mod commits;
mod config;
mod downstream;
mod effect;
mod intent;
mod listen;
mod proxy;
mod proxy_approval;
mod proxy_budget;
mod proxy_calls;
mod proxy_reads;
mod remote;
mod servers;
mod session;
