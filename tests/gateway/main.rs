//! The gateway's tests: decisions across stages, concurrency and crashes,
//! failing closed, the attacker's property (fuzz), one regression per attack
//! class, secrets at rest, the trusted side.
//!
//! One test binary per area (ARCHITECTURE.md, `tests/`): each module below
//! was a test binary of its own; a new test file is a new `mod` line here.

#[path = "../common/mod.rs"]
#[allow(dead_code, unused_imports)]
mod common;

mod chain_shards;
mod chains;
mod concurrency;
mod fail_closed;
mod fuzz;
mod fuzz_agentdyn;
mod fuzz_moves;
mod fuzz_oracle;
mod fuzz_packs;
mod fuzz_sabotage;
mod fuzz_truth;
mod pipeline;
mod records;
mod regressions;
mod replay;
mod secrets_at_rest;
mod selections;
mod shadow;
mod shard_failures;
mod shard_move;
mod shard_move_cli;
mod shard_routing;
mod trusted;
