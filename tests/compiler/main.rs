//! The compiler's tests: diagnostics and their fixtures, the IR, the parser's
//! properties, Cedar generation, the bundle, `ipc mutate`, `ipc test` and
//! the `ipc` binary end to end.
//!
//! One test binary per area (ARCHITECTURE.md, `tests/`): each module below
//! was a test binary of its own; a new test file is a new `mod` line here.

#[path = "../common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

mod bundle;
mod check_fixtures;
mod check_ir;
mod check_props;
mod cli;
mod codegen;
mod demo;
mod docs;
mod guarantee_scenarios;
mod guarantees;
mod layers;
mod mutate;
mod scenarios;
