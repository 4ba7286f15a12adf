//! The store's tests: the conformance suite over every store, its failures,
//! and PostgreSQL (optimistic decisions, registry tables, TLS).
//!
//! One test binary per area (ARCHITECTURE.md, `tests/`): each module below
//! was a test binary of its own; a new test file is a new `mod` line here.

#[path = "../common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

mod concurrency;
mod contract;
mod contract_kit;
mod failures;
mod opening;
mod pg_contract;
mod pg_failover;
mod pg_optimistic;
mod pg_registries;
mod pg_stuck;
mod pg_tls;
mod tamper;
