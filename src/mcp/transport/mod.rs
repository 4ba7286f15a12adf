//! `ipc mcp`'s remote transports, both directions, on rmcp's Streamable
//! HTTP: [`client`] connects to a downstream server given by `url` (a
//! bearer token, TLS verified by rustls), [`listen`] serves the proxy
//! itself over HTTP (`ipc mcp --listen`, behind the checks of
//! `ipc serve --listen`, `crate::serve::serve_gated`), each session bound
//! to the credential that opened it ([`sessions`]).

pub mod client;
pub mod listen;
pub mod said;
pub mod sessions;

pub use client::{RemoteError, connect};
