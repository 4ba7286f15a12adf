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
mod child;
mod demo;
pub mod gateway;
mod mandates;
mod notify;
mod receipts;
mod receipts_report;
mod receipts_world;
mod registry;
mod replay;
mod report;
pub mod run;
pub mod serve;
pub(crate) mod shards;
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
    /// Trusted side: child mandates (list, show, revoke, issue).
    Mandates(mandates::MandatesArgs),
    /// Trusted side: the owner adds or removes a record (with a receipt).
    Registry(registry::RegistryArgs),
    /// Send the world's `[[notify]]` deliveries waiting in the store's
    /// outbox (`drain`).
    Notify(notify::NotifyArgs),
    /// What a new bundle changes: a store's recorded proposals decided
    /// again with it, read-only (exit 1 when any would be newly allowed).
    Replay(replay::ReplayArgs),
    /// Shards of tenants: place the world's map (`init`), check every
    /// shard against it (`check`).
    Shards(shards::ShardsArgs),
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
        Command::Mandates(args) => mandates::run(&args, &mut out),
        Command::Registry(args) => registry::run(&args, &mut out),
        Command::Notify(args) => notify::run(&args, &mut out),
        Command::Replay(args) => replay::run(&args, &mut out),
        Command::Shards(args) => shards::run(&args, &mut out),
        Command::Demo(args) => demo::run(&args, &mut out),
        Command::Test(args) => test::run(&args, &mut out),
        Command::Mutate(args) => mutate::run(&args, &mut out),
        Command::Mcp(args) => mcp::run(&args, &mut out),
    }
}

/// A command (or an option) of a part this build of `ipc` leaves out.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("`{what}` needs the `{feature}` feature, which this build of `ipc` leaves out")]
#[diagnostic(
    code(ipc::cli::feature_off),
    help(
        "install `ipc` with it: `cargo install intentplane` (the default features have it) or `--features {feature}`"
    )
)]
pub struct FeatureOff {
    pub what: &'static str,
    pub feature: &'static str,
}

/// Says on stderr that `what` needs `feature`; the exit code (2).
#[allow(dead_code)] // every feature on: nothing is left out
pub(crate) fn feature_off(what: &'static str, feature: &'static str) -> u8 {
    eprint!(
        "{}",
        bundle::render_error(&FeatureOff { what, feature }, false)
    );
    2
}

/// Whether to colour output written to stdout.
pub(crate) fn use_color() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none() && std::io::stdout().is_terminal()
}

#[cfg(test)]
mod tests {
    use super::{Cli, FeatureOff, run};
    use clap::Parser;
    use miette::Diagnostic;

    #[test]
    fn a_part_left_out_is_a_typed_diagnostic() {
        let e = FeatureOff {
            what: "ipc mutate",
            feature: "solver",
        };
        assert_eq!(
            e.code().map(|c| c.to_string()).as_deref(),
            Some("ipc::cli::feature_off")
        );
        assert_eq!(
            e.to_string(),
            "`ipc mutate` needs the `solver` feature, which this build of `ipc` leaves out"
        );
        assert!(
            e.help()
                .is_some_and(|h| h.to_string().contains("--features solver"))
        );
    }

    /// Every command parses whatever the features (none is missing from
    /// `ipc --help`); one whose part is left out exits 2 before reading
    /// anything (the paths here do not exist).
    #[test]
    fn commands_of_parts_left_out_exit_2() {
        let off: &[(&[&str], bool)] = &[
            (&["ipc", "mutate", "/nonexistent"], cfg!(feature = "solver")),
            (
                &[
                    "ipc",
                    "build",
                    "/nonexistent",
                    "-o",
                    "/nonexistent/b",
                    "--lint",
                ],
                cfg!(feature = "solver"),
            ),
            (
                &["ipc", "mcp", "--config", "/nonexistent"],
                cfg!(feature = "mcp"),
            ),
            (
                &["ipc", "demo", "mcp"],
                cfg!(all(feature = "mcp", feature = "demo")),
            ),
            (
                &[
                    "ipc",
                    "serve",
                    "--bundle",
                    "/nonexistent",
                    "--listen",
                    "8787",
                ],
                cfg!(feature = "http"),
            ),
        ];
        for (argv, on) in off {
            let cli = Cli::try_parse_from(*argv).unwrap();
            if !on {
                assert_eq!(run(cli), 2, "{argv:?}");
            }
        }
    }
}
