//! `ipc serve`: JSON lines over stdio and HTTP, on SQLite and on PostgreSQL.
//!
//! One test binary per area (ARCHITECTURE.md, `tests/`): each module below
//! was a test binary of its own; a new test file is a new `mod` line here.

#[path = "../common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

mod logs;
mod mandates;
mod notify;
mod notify_receiver;
mod pg_serve;
mod serve;
mod serve_access;
mod serve_approvals;
mod serve_kit;
mod serve_shards;
mod serve_startup;
mod stdio_groups;
