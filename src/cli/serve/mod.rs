//! `ipc serve`: the gateway as a long-lived process. `--stdio`: one JSON
//! line in, one decision line out (for harnesses; the lines in flight
//! decided in groups, see [`stdio`]). `--listen ADDR`: HTTP
//! JSON for many callers at once, served by the library's [`crate::serve`]
//! (routes, checks, sockets); this module reads the flags.

pub mod stdio;

use super::gateway::GatewayArgs;
#[cfg(feature = "http")]
use crate::serve::ListenAddr;
use crate::serve::{HttpConfig, ServeError};
use miette::Diagnostic;
use std::io::Write;
use std::path::PathBuf;
#[cfg(feature = "http")]
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Serve JSON lines on standard input and output.
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,
    /// Serve HTTP on this address: `127.0.0.1:8787` (port 0 picks one),
    /// `8787` (loopback), `[::1]:8787`, or `unix:/path/to.sock`. A TCP
    /// address needs `--auth-token-file`.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The bearer tokens callers must send (`Authorization: Bearer TOKEN`),
    /// each with the tenants it may act for (`TOKEN acme,globex`, `TOKEN *`
    /// for an operator; one token alone: an operator's), read from this
    /// file: re-read when the file changes, on a token that does not match,
    /// and on SIGHUP.
    #[arg(long, value_name = "FILE")]
    pub auth_token_file: Option<PathBuf>,
    /// A `Host` the server answers to (repeatable; `name` or `name:port`),
    /// instead of its own loopback names: what a reverse proxy sends.
    #[arg(long, value_name = "HOST")]
    pub allowed_host: Vec<String>,
    /// Serve `/metrics` without the token (to a scraper on a trusted
    /// network; the counters show decision volume, nothing else).
    #[arg(long)]
    pub public_metrics: bool,
    /// Run on an in-memory store: approvals, budgets and idempotency last
    /// only as long as the process (`ipc serve` refuses to start without a
    /// store otherwise).
    #[arg(long)]
    pub ephemeral: bool,
    /// Connections open at once; more wait in the listen queue.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub max_connections: usize,
    /// Decisions (and receipt reads) running at once; more wait their
    /// turn. A request's body is read before it waits.
    #[arg(long, value_name = "N", default_value_t = 128)]
    pub max_in_flight: usize,
    /// Seconds a client has to send a request's headers (also how long an
    /// idle connection stays open).
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    pub header_timeout: u64,
    /// Seconds a client has to send a request's body.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub body_timeout: u64,
    /// Seconds an answer may wait for the client to read it before the
    /// connection is dropped.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    pub write_timeout: u64,
    /// Serve a world that fixes the `clock` (development and replays only:
    /// at a fixed time nothing expires). Without it `ipc serve` refuses
    /// such a world.
    #[arg(long)]
    pub allow_frozen_clock: bool,
    /// Mandate token for inputs that carry none.
    #[arg(long, value_name = "FILE")]
    pub mandate: Option<PathBuf>,
    /// With `--stdio`: once the gateway is loaded, write one line
    /// `{"ready": true, "bundle": HASH}` on standard output before any
    /// decision, so that a caller knows it started (one that did not
    /// start writes nothing there, names its diagnostic on stderr and
    /// exits 1).
    #[arg(long, requires = "stdio")]
    pub ready: bool,
    /// With `--listen`: how the lines on stderr are written. `text`: each
    /// after an RFC 3339 UTC timestamp; `json`: one JSON object a line
    /// (`ts`, `level`, `event`, ...), with one line per decision and per
    /// HTTP request besides, never an argument's value or a secret.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// The store the gateway runs on, as the start-up line names it: its
/// file, or its URL with any password replaced by `***`; a sharded
/// world's shards, each so.
#[cfg(feature = "http")]
fn shown_store(args: &GatewayArgs, gw: &crate::gateway::Gateway) -> String {
    if let Some(set) = gw.shard_set() {
        let names: Vec<String> = set
            .shards
            .iter()
            .map(|s| crate::store::postgres::redact(&s.name()))
            .collect();
        return format!("{} shards: {}", names.len(), names.join(", "));
    }
    match args.store.as_ref().or(gw.world().store.as_ref()) {
        Some(p) => crate::store::postgres::redact(&p.display().to_string()),
        None => "in memory (--ephemeral: it ends with the process)".into(),
    }
}

/// Reads the flags; refuses a TCP address without a token.
#[cfg(feature = "http")]
fn http_config(args: &ServeArgs, addr: &str) -> Result<HttpConfig, ServeError> {
    let listen = ListenAddr::parse(addr)?;
    listen.require_auth(addr, args.auth_token_file.is_some())?;
    Ok(HttpConfig {
        listen,
        token_file: args.auth_token_file.clone(),
        allowed_hosts: args
            .allowed_host
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
        public_metrics: args.public_metrics,
        max_connections: args.max_connections.max(1),
        max_in_flight: args.max_in_flight.max(1),
        header_timeout: Duration::from_secs(args.header_timeout.max(1)),
        body_timeout: Duration::from_secs(args.body_timeout.max(1)),
        write_timeout: Duration::from_secs(args.write_timeout.max(1)),
    })
}

pub fn run(args: &ServeArgs, out: &mut dyn Write) -> u8 {
    let fail = |e: &dyn Diagnostic| {
        eprint!("{}", super::bundle::render_error(e, false));
    };
    // the listen flags first: a server that cannot start says so before
    // it loads anything
    let config: Option<HttpConfig> = match (&args.listen, args.stdio) {
        (_, true) => None,
        #[cfg(not(feature = "http"))]
        (Some(_), false) => return super::feature_off("ipc serve --listen", "http"),
        #[cfg(feature = "http")]
        (Some(addr), false) => match http_config(args, addr) {
            Ok(c) => Some(c),
            Err(e) => {
                fail(&e);
                return 2;
            }
        },
        (None, false) => {
            fail(&ServeError::NoMode);
            return 2;
        }
    };
    // the HTTP service's lines, from its first (the store's wait, the
    // loader's warnings) to its last
    if config.is_some() {
        crate::base::log::set_format(match args.log_format {
            LogFormat::Text => crate::base::log::Format::Text,
            LogFormat::Json => crate::base::log::Format::Json,
        });
    }
    let mut gateway_args = args.gateway.clone();
    gateway_args.ephemeral_ok = args.ephemeral;
    gateway_args.frozen_clock_ok = args.allow_frozen_clock;
    gateway_args.announce_frozen_clock = args.allow_frozen_clock;
    gateway_args.wait_for_store = true;
    let Some((gw, mandate)) = super::gateway::load_with_mandate(&gateway_args, &args.mandate)
    else {
        return 1;
    };
    let Some(config) = config else {
        // the `[[notify]]` sender runs beside the lines; what it has not
        // sent when the input ends waits in the outbox for the next
        // long-running process
        let gw = std::sync::Arc::new(gw);
        let notify = match crate::gateway::notify::start(gw.clone()) {
            Ok(n) => n,
            Err(e) => {
                fail(&e);
                return 1;
            }
        };
        if args.ready && stdio::announce_ready(&gw, out).is_err() {
            return 1;
        }
        let input = std::io::BufReader::with_capacity(1 << 16, std::io::stdin());
        let code = stdio::serve_lines(&gw, mandate.as_ref(), input, out);
        drop(notify);
        return code;
    };
    #[cfg(feature = "http")]
    let store = shown_store(&gateway_args, &gw);
    #[cfg(feature = "http")]
    match crate::serve::serve(gw, mandate, config, &store, out) {
        Ok(()) => 0,
        Err(e) => {
            fail(&e);
            1
        }
    }
    #[cfg(not(feature = "http"))]
    {
        let _ = (gw, mandate, config);
        super::feature_off("ipc serve --listen", "http")
    }
}
