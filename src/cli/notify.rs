//! `ipc notify drain --bundle B --world W [--store S] [--wait SECS]`: the
//! world's `[[notify]]` deliveries waiting in the store's outbox (what a
//! one-shot `ipc run` left there) sent now, until none waits or `--wait`
//! has passed; then what was sent and what still waits. Exit 0 when
//! nothing waits and nothing failed, 1 otherwise.

use super::Format;
use super::gateway::GatewayArgs;
use clap::Subcommand;
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct NotifyArgs {
    #[command(subcommand)]
    pub command: NotifyCommand,
}

#[derive(Subcommand, Debug)]
pub enum NotifyCommand {
    /// Send the deliveries waiting in the store's outbox, then say what was
    /// sent, what failed (given up) and what still waits.
    Drain(DrainArgs),
}

#[derive(clap::Args, Debug)]
pub struct DrainArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Seconds to keep sending (retries included) before giving the
    /// command up; what still waits stays in the outbox.
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub wait: u64,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(args: &NotifyArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        NotifyCommand::Drain(a) => drain(a, out),
    }
}

#[cfg(not(feature = "notify"))]
fn drain(_: &DrainArgs, _: &mut dyn Write) -> u8 {
    super::feature_off("ipc notify drain", "notify")
}

#[cfg(feature = "notify")]
fn drain(args: &DrainArgs, out: &mut dyn Write) -> u8 {
    use crate::gateway::notify;
    let Some((gw, _)) = super::gateway::load_with_mandate(&args.gateway, &None) else {
        return 1;
    };
    let gw = std::sync::Arc::new(gw);
    let running = match notify::start(gw.clone()) {
        Ok(Some(r)) => r,
        Ok(None) => {
            crate::base::log::error("notify", "the world names no `[[notify]]` target");
            return 1;
        }
        Err(e) => {
            eprint!("{}", super::bundle::render_error(&e, false));
            return 1;
        }
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(args.wait);
    let waiting = loop {
        let n = match notify::waiting(&gw) {
            Ok(n) => n,
            Err(e) => {
                eprint!("{}", super::bundle::render_error(&e, false));
                return 1;
            }
        };
        if n == 0 || std::time::Instant::now() >= end {
            break n;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let stats = running.stats.clone();
    running.stop();
    let count = |o: &str| -> u64 {
        stats
            .outcomes()
            .iter()
            .filter(|x| x.1 == o)
            .map(|x| x.2)
            .sum()
    };
    let (delivered, failed) = (count("delivered"), count("failed"));
    let _ = match args.format {
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::json!({"delivered": delivered, "failed": failed, "waiting": waiting})
        ),
        Format::Human => writeln!(
            out,
            "delivered {delivered}, failed {failed}, still waiting {waiting}"
        ),
    };
    u8::from(waiting > 0 || failed > 0)
}
