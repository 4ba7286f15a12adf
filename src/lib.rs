//! intentplane: the agent proposes, a deterministic gateway decides.
//!
//! The crate follows the flow of data: [`syntax`] (pack text to syntax tree)
//! → [`check`] (syntax tree to the checked [`ir`], with [`diagnostics`] and
//! [`lint`]s) → code generation and bundle → gateway → store. The `ipc`
//! binary ([`cli`]) is a thin shell over these modules.
//!
//! The heavy parts are Cargo features, all on by default: `postgres` (the
//! PostgreSQL store), `http` (the HTTP service of [`serve`], `ipc serve --listen`), `mcp`
//! ([`mcp`], the MCP proxy), `solver` ([`mutate`], `ipc build --lint`), `demo` (the stories of
//! `ipc demo`).

// No `unsafe`; no `unwrap()` or `expect()` outside tests: every failure is
// a typed error.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
pub mod base;
pub mod bundle;
pub mod canonical;
pub mod check;
pub mod cli;
pub mod codegen;
pub mod compile;
#[cfg(feature = "demo")]
pub mod demo;
pub mod diagnostics;
pub mod gateway;
pub mod guarantee;
pub mod ir;
pub mod keys;
pub mod lint;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "solver")]
pub mod mutate;
pub mod scenarios;
pub mod serve;
pub mod store;
pub mod syntax;
