//! The test world for the integration tests: the library's
//! `gateway::testkit` (the `testkit` feature, which the crate's
//! dev-dependency on itself turns on for tests and examples).

pub use intentplane::gateway::testkit::*;
pub mod chain;
pub mod cli;
pub mod counting;
pub mod http;
#[cfg(feature = "mcp")]
pub mod mcp;
#[cfg(feature = "postgres")]
pub mod pg;
pub mod tools;
