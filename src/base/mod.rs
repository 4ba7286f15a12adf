//! The base layer: what every other layer reads and writes values with —
//! strict JSON, times and echoes ([`json`]), amounts ([`money`]), and the
//! lines a long-running process writes on stderr ([`log`]). It imports
//! nothing of the crate (tests/compiler/layers.rs).

pub mod json;
pub mod log;
pub mod money;

pub use money::Money;
