//! The rmcp shell (built on the `mcp-proxy` branch; this placeholder only
//! lets `ipc mcp` link until that branch is merged).

use super::config::Setup;

/// Runs the proxy on stdio until the client goes away.
pub fn run(setup: Setup) -> Result<std::process::ExitCode, miette::Report> {
    let _ = setup;
    Err(miette::miette!("the proxy is not built in this branch"))
}
