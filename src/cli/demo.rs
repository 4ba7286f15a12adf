//! `ipc demo [bank|ap|three|mcp]`: the flags; the stories are the
//! library's [`crate::demo`] (feature `demo`), the MCP demo's server and
//! client too (with `mcp`). `mcp-server` and its hidden flags are the
//! tests' downstream server (`--crash-on`, `--hang-on`, `--record`,
//! `--read-only-hint`): the hooks work only in a build with `testkit` (the
//! tests'), never in what `cargo build` or `cargo install` makes.

use super::Format;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Which story: `bank` (Emma's December bill), `ap` (the "we changed
    /// banks" e-mail, for a CFO), `three` (one injection, three domains,
    /// one gateway) or `mcp` (an MCP client's agent through `ipc mcp`).
    #[arg(default_value = "bank")]
    pub story: String,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// `mcp-server`: keep the demo server's state in this JSON file.
    #[arg(long, hide = true)]
    pub state: Option<std::path::PathBuf>,
    /// `mcp-server`: exit when this tool is called (a downstream crash).
    #[arg(long, hide = true)]
    pub crash_on: Option<String>,
    /// `mcp-server`: append every call's arguments, as received, to this
    /// file (`TOOL<tab>JSON` per line).
    #[arg(long, hide = true)]
    pub record: Option<std::path::PathBuf>,
    /// `mcp-server`: execute this tool, then never answer (a downstream
    /// still running when the proxy dies).
    #[arg(long, hide = true)]
    pub hang_on: Option<String>,
    /// `mcp-server`: annotate this tool `readOnlyHint: true` whatever it
    /// does (a server whose hints cannot be trusted); repeatable.
    #[arg(long, hide = true)]
    pub read_only_hint: Vec<String>,
    /// `mcp`: the proxy's config (default: `examples/mcp/intentplane.toml`
    /// as embedded in the binary, so the demo runs from any directory).
    #[arg(long)]
    pub config: Option<std::path::PathBuf>,
}

#[cfg(not(feature = "demo"))]
pub fn run(_: &DemoArgs, _: &mut dyn Write) -> u8 {
    super::feature_off("ipc demo", "demo")
}

#[cfg(feature = "demo")]
pub fn run(args: &DemoArgs, out: &mut dyn Write) -> u8 {
    match args.story.as_str() {
        #[cfg(not(feature = "mcp"))]
        "mcp-server" | "mcp" => super::feature_off("ipc demo mcp", "mcp"),
        #[cfg(feature = "mcp")]
        "mcp-server" => {
            // the tests' hooks are not in a binary that `cargo build` or
            // `cargo install` makes: only the tests' build has `testkit`
            if cfg!(not(feature = "testkit"))
                && (args.crash_on.is_some()
                    || args.hang_on.is_some()
                    || args.record.is_some()
                    || !args.read_only_hint.is_empty())
            {
                eprintln!(
                    "error: `--crash-on`, `--hang-on`, `--record` and `--read-only-hint` are the tests' hooks, in a build with the `testkit` feature only (the one `cargo test` makes)"
                );
                return 2;
            }
            let opts = crate::demo::mcp_server::DemoOptions {
                state: args.state.clone(),
                crash_on: args.crash_on.clone(),
                record: args.record.clone(),
                hang_on: args.hang_on.clone(),
                read_only_hint: args.read_only_hint.clone(),
            };
            match crate::demo::mcp_server::run(opts) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("error: {e}");
                    1
                }
            }
        }
        #[cfg(feature = "mcp")]
        "mcp" => {
            // without `--config`, the example config embedded in the
            // binary, written to a temporary folder: the demo runs from any
            // directory, not only from a checkout
            let embedded = match args.config {
                Some(_) => None,
                None => match crate::demo::embedded_mcp_example() {
                    Ok(dir) => Some(dir),
                    Err(e) => {
                        eprintln!("error: {e}");
                        return 1;
                    }
                },
            };
            let config = match (&args.config, &embedded) {
                (Some(c), _) => c.clone(),
                (None, Some(dir)) => dir.path().join("examples/mcp/intentplane.toml"),
                (None, None) => return 1,
            };
            match crate::demo::mcp_client::run(&config, args.format == Format::Json, out) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("error: {e}");
                    1
                }
            }
        }
        story => crate::demo::play(story, args.format == Format::Json, out),
    }
}
