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

/// `from` copied into `to`, folders and files: a shipped pack or example
/// into a test's own folder, as it is.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}
