//! The `ipc` command line: argument definitions and dispatch. Each command
//! is a small module that writes its report and returns an exit code
//! (0 success, 1 a finding or a failure, 2 a usage error).

mod build;
mod bundle;
mod check;
mod keygen;
mod mcp;
// the gateway and the trusted side
mod approvals;
mod approve;
mod demo;
pub mod gateway;
mod receipts;
mod registry;
mod run;
mod serve;
pub(crate) mod token;
// scenarios
mod mutate;
mod test;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "ipc",
    version,
    about = "intentplane: compile and lint packs, evaluate agent proposals against them"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Check pack specs: parse, resolve every name, type-check, lint.
    Check(CheckArgs),
    /// Compile packs to one runtime bundle: Cedar schema, policies, table.
    Build(build::BuildArgs),
    /// Generate an Ed25519 key pair for signing bundles.
    Keygen(keygen::KeygenArgs),
    /// Verify or inspect a bundle.
    Bundle(bundle::BundleArgs),
    /// Verify or show the hash-chained receipts of a store.
    Receipts(receipts::ReceiptsArgs),
    /// Decide on proposals (JSON lines), one decision per line.
    Run(run::RunArgs),
    /// The gateway as a service: JSON lines on stdio, or HTTP on loopback.
    Serve(serve::ServeArgs),
    /// Trusted side: issue or revoke a mandate token.
    Token(token::TokenArgs),
    /// Trusted side: sign (or decline) a pending operation, shown from the store.
    Approve(approve::ApproveArgs),
    /// Trusted side: the operations waiting for approval.
    Approvals(approvals::ApprovalsArgs),
    /// Trusted side: the owner adds or removes a record (with a receipt).
    Registry(registry::RegistryArgs),
    /// Play a scenario end to end: `bank`, `ap`, `three` or `mcp`.
    Demo(demo::DemoArgs),
    /// Run the packs' scenario suites (`<pack>/scenarios/*.json`).
    Test(test::TestArgs),
    /// Mutation testing: weaken each policy, require the scenarios to fail.
    Mutate(mutate::MutateArgs),
    /// The MCP proxy: an MCP server on stdio deciding every tool call
    /// (`--check`: report the config's diagnostics, start nothing).
    Mcp(mcp::McpArgs),
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// Readable diagnostics with source excerpts.
    #[default]
    Human,
    /// One JSON document on stdout.
    Json,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Pack folders (holding `pack.ipc`) or pack files.
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// Treat warnings as errors.
    #[arg(long)]
    pub deny_warnings: bool,
}

/// Runs a parsed command line; the return value is the process exit code.
pub fn run(cli: Cli) -> u8 {
    // `ipc mcp` and `ipc demo mcp-server` speak MCP on stdout through
    // rmcp, which locks stdout itself: holding the lock here would block it
    let (mut locked, mut unlocked);
    let mut out: &mut dyn std::io::Write =
        if matches!(&cli.command, Command::Mcp(_) | Command::Demo(_)) {
            unlocked = std::io::stdout();
            &mut unlocked
        } else {
            locked = std::io::stdout().lock();
            &mut locked
        };
    match cli.command {
        Command::Check(args) => check::run(&args, &mut out),
        Command::Receipts(args) => receipts::run(&args, &mut out),
        Command::Build(args) => build::run(&args, &mut out),
        Command::Keygen(args) => keygen::run(&args, &mut out),
        Command::Bundle(args) => bundle::run(&args, &mut out),
        Command::Run(args) => run::run(&args, &mut out),
        Command::Serve(args) => serve::run(&args, &mut out),
        Command::Token(args) => token::run(&args, &mut out),
        Command::Approve(args) => approve::run(&args, &mut out),
        Command::Approvals(args) => approvals::run(&args, &mut out),
        Command::Registry(args) => registry::run(&args, &mut out),
        Command::Demo(args) => demo::run(&args, &mut out),
        Command::Test(args) => test::run(&args, &mut out),
        Command::Mutate(args) => mutate::run(&args, &mut out),
        Command::Mcp(args) => mcp::run(&args, &mut out),
    }
}

/// Whether to colour output written to stdout.
pub(crate) fn use_color() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}
