//! `ipc`: parses arguments and dispatches to one module per command.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used)]

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = intentplane::cli::Cli::parse();
    ExitCode::from(intentplane::cli::run(cli))
}
