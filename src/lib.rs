//! intentplane: the agent proposes, a deterministic gateway decides.
//!
//! The crate follows the flow of data: [`syntax`] (pack text to syntax tree)
//! → [`check`] (syntax tree to the checked [`ir`], with [`diagnostics`] and
//! [`lint`]s) → code generation and bundle → gateway → store. The `ipc`
//! binary ([`cli`]) is a thin shell over these modules.

// No `unwrap()` or `expect()` outside tests: every failure is a typed error.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]
pub mod bundle;
pub mod canonical;
pub mod check;
pub mod cli;
pub mod codegen;
pub mod diagnostics;
pub mod gateway;
pub mod ir;
pub mod keys;
pub mod lint;
pub mod mcp;
pub mod mutate;
pub mod scenarios;
pub mod serve;
pub mod store;
pub mod syntax;
