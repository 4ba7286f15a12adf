//! `ipc approve`: the trusted side signs an approval over a pending
//! operation as a named approver, with an expiry and a fresh nonce (single
//! use). What you see is what you sign: the operation is read from the
//! store (never from the agent's copy), shown (`gateway::render`), its
//! hash recomputed from exactly the fields shown, and signed only after a
//! yes (`--yes` for scripts); a hash the store does not know, that has
//! expired or executed, whose shown fields hash to something else, or with
//! a value too long to show, is refused. `--decline` records a refusal
//! instead.

use super::gateway::GatewayArgs;
use crate::gateway::approval::SignedApproval;
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The approver's secret key (not needed with --decline).
    #[arg(long, value_name = "KEYFILE", required_unless_present = "decline")]
    pub key: Option<PathBuf>,
    /// The approver's name, as in the world's `[approvers]`.
    #[arg(long = "as", value_name = "NAME")]
    pub approver: String,
    /// The operation hash the PENDING decision returned.
    #[arg(long, value_name = "HASH")]
    pub operation: String,
    /// Sign without asking (scripts): the operation is still shown.
    #[arg(long)]
    pub yes: bool,
    /// Refuse the operation: recorded, with a receipt; proposing it again
    /// is then a DENY. Unsigned: this command holds the store itself (over
    /// HTTP a decline is signed by the approver's key, which the agent
    /// host's token is not; docs/decisions/decline-signed-too.md).
    #[arg(long, conflicts_with_all = ["yes", "key", "output"])]
    pub decline: bool,
    /// Hand the approval to the store (by its operation hash) instead of
    /// printing it: the operation executes when it is proposed again.
    #[arg(long, conflicts_with = "output")]
    pub submit: bool,
    /// Validity in seconds.
    #[arg(long, default_value_t = 600)]
    pub ttl: i64,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

pub fn run(args: &ApproveArgs, out: &mut dyn Write) -> u8 {
    match approve(args, out, &mut std::io::stdin().lock()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            1
        }
    }
}

fn approve(args: &ApproveArgs, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<u8, String> {
    let gw = super::gateway::load_trusted(&args.gateway).map_err(|e| {
        super::bundle::render_error(e.as_ref(), false)
            .trim_end()
            .to_string()
    })?;
    // the key is checked before anything is shown or asked: an approver
    // who confirms and is then told the key is wrong has read for nothing
    let key = match approver_key(&gw, args) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(1);
        }
    };
    let op = match gw.pending_op(&args.operation) {
        Ok(op) => op,
        Err(e) => {
            eprint!("{}", super::bundle::render_error(&e, false));
            return Ok(1);
        }
    };
    // shown on stderr: stdout carries the signed approval
    let shown = match gw
        .now()
        .map_err(crate::store::StoreError::from)
        .and_then(|now| crate::gateway::render::show(&gw, &op, now))
    {
        Ok(s) => s,
        Err(e) => {
            eprint!("{}", super::bundle::render_error(&e, false));
            return Ok(1);
        }
    };
    eprint!("{}", shown.text());
    if args.decline {
        let r = gw
            .decline(&args.operation, &args.approver)
            .map_err(|e| e.to_string())?;
        writeln!(
            out,
            "declined `{}` as `{}` (receipt {} {})",
            args.operation, args.approver, r.seq, r.hash
        )
        .map_err(|e| e.to_string())?;
        return Ok(0);
    }
    // what is signed is what was shown: the operation hash recomputed
    // from the fields just printed, or nothing is signed
    if let Err(e) = shown.check(&gw, &args.operation) {
        eprint!("{}", super::bundle::render_error(&e, false));
        return Ok(1);
    }
    if !args.yes {
        eprint!("sign this operation as `{}`? [y/N] ", args.approver);
        let mut answer = String::new();
        input.read_line(&mut answer).map_err(|e| e.to_string())?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("not signed");
            return Ok(1);
        }
    }
    let Some(key) = key else {
        return Err("give the approver's key with `--key`".into());
    };
    let expires = gw
        .now()
        .map_err(|e| e.to_string())?
        .saturating_add(args.ttl)
        .min(op.expires_at);
    let signed = SignedApproval::issue(&args.approver, &args.operation, expires, &key)
        .map_err(|e| e.to_string())?;
    if args.submit {
        return match gw.submit_approval(&signed) {
            Ok(s) => {
                let r = &s.receipt;
                writeln!(
                    out,
                    "approved `{}` as `{}` (receipt {} {}{})",
                    args.operation,
                    args.approver,
                    r.seq,
                    r.hash,
                    if s.already {
                        ", submitted before: nothing written"
                    } else {
                        ""
                    }
                )
                .map_err(|e| e.to_string())?;
                Ok(0)
            }
            Err(e) => {
                eprint!("{}", super::bundle::render_error(&e, false));
                Ok(1)
            }
        };
    }
    let text = serde_json::to_string_pretty(&signed).map_err(|e| e.to_string())?;
    match &args.output {
        Some(p) => std::fs::write(p, text + "\n").map_err(|e| e.to_string())?,
        None => writeln!(out, "{text}").map_err(|e| e.to_string())?,
    }
    Ok(0)
}

/// The approver's secret key, read and matched against the world's
/// `[approvers]` entry for `--as` before the operation is shown: a name the
/// world does not know, an unreadable file or another person's key is said
/// at once. `None` with `--decline` (no key is needed to refuse).
fn approver_key(
    gw: &crate::gateway::Gateway,
    args: &ApproveArgs,
) -> Result<Option<crate::keys::SecretKey>, String> {
    let Some(path) = &args.key else {
        return Ok(None);
    };
    let Some(approver) = gw.world().approvers.get(&args.approver) else {
        return Err(format!(
            "`{}` is not an approver: the world's `[approvers]` does not name it",
            args.approver
        ));
    };
    let key =
        crate::keys::load_secret(path).map_err(|e| format!("the key `{}`: {e}", path.display()))?;
    let (have, want) = (key.public().id(), approver.key.id());
    if have != want {
        return Err(format!(
            "the key `{}` is not `{}`'s: it is `{have}`, the world's `[approvers]` holds `{want}` for `{}`",
            path.display(),
            args.approver,
            args.approver
        ));
    }
    Ok(Some(key))
}
