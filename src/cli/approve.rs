//! `ipc approve`: the trusted side signs an approval over an operation hash
//! (from a PENDING decision) as a named approver, with an expiry and a
//! fresh nonce (single use).

use crate::gateway::approval::SignedApproval;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ApproveArgs {
    /// The approver's secret key.
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,
    /// The approver's name, as in the world's `[approvers]`.
    #[arg(long = "as", value_name = "NAME")]
    pub approver: String,
    /// The operation hash the PENDING decision returned.
    #[arg(long, value_name = "HASH")]
    pub operation: String,
    /// Validity in seconds.
    #[arg(long, default_value_t = 600)]
    pub ttl: i64,
    /// Signing time (`YYYY-MM-DDTHH:MM:SSZ`); default now.
    #[arg(long)]
    pub now: Option<String>,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn sign(args: &ApproveArgs) -> Result<SignedApproval, String> {
    let key = crate::keys::load_secret(&args.key).map_err(|e| e.to_string())?;
    if !args.operation.starts_with("sha256:") {
        return Err(format!(
            "`{}` is not an operation hash (sha256:...)",
            args.operation
        ));
    }
    let now = super::token::now_or(&args.now)?;
    SignedApproval::issue(
        &args.approver,
        &args.operation,
        now.saturating_add(args.ttl),
        &key,
    )
    .map_err(|e| e.to_string())
}

pub fn run(args: &ApproveArgs, out: &mut dyn Write) -> u8 {
    let r = sign(args).and_then(|a| {
        let text = serde_json::to_string_pretty(&a).map_err(|e| e.to_string())?;
        match &args.output {
            Some(p) => std::fs::write(p, text + "\n").map_err(|e| e.to_string()),
            None => writeln!(out, "{text}").map_err(|e| e.to_string()),
        }
    });
    match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}
