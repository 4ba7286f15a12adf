//! `ipc serve --stdio`: JSON lines in, one decision line out for each, in
//! the order of the lines. A reader thread reads and parses the lines as
//! they come; the deciding thread takes every line waiting (up to
//! [`MAX_GROUP`]) and decides them in one store transaction (group commit,
//! as `ipc run` and `ipc serve --listen` do), then writes their answers:
//! an answer is written only once its receipt is durable, and a line alone
//! in flight is decided at once, never held back for others to come.

use super::super::gateway::{Line, malformed, next_line, parse_line};
use crate::gateway::{Decision, Gateway, Input};
use serde_json::Value;
use std::io::{BufRead, Write};
use std::sync::mpsc;

/// Most lines decided in one transaction.
pub const MAX_GROUP: usize = 256;

/// What the reader hands the decider.
enum Read {
    Input(Input),
    /// The input failed (an I/O error): the lines before it are decided,
    /// then the command ends with exit code 1.
    Failed(std::io::Error),
}

/// Serves `input` until it ends; answers to `out`. A store that cannot
/// record a decision (not even its DENY, see
/// [`crate::gateway::Gateway::decide_all`]) does not end the loop: that
/// line is answered with a DENY that has no receipt, the error goes to
/// stderr, the next lines are decided, and the exit code is 1. An answer
/// that cannot be written ends the loop (exit code 1).
pub fn serve_lines(
    gw: &Gateway,
    mandate: Option<&Value>,
    input: impl BufRead + Send + 'static,
    out: &mut dyn Write,
) -> u8 {
    let (to_decider, lines) = mpsc::sync_channel::<Read>(MAX_GROUP);
    let mandate = mandate.cloned();
    // not joined: it ends at the end of the input, or when the decider is
    // gone (its next send fails), or with the process
    std::thread::spawn(move || read_lines(input, mandate.as_ref(), to_decider));
    let mut failed = false;
    let mut group: Vec<Input> = Vec::with_capacity(MAX_GROUP);
    while let Ok(first) = lines.recv() {
        let mut stop = None;
        let mut next = Some(first);
        while let Some(item) = next.take() {
            match item {
                Read::Input(i) => group.push(i),
                Read::Failed(e) => {
                    stop = Some(e);
                    break;
                }
            }
            if group.len() < MAX_GROUP {
                next = lines.try_recv().ok();
            }
        }
        match decide_group(gw, &mut group, out) {
            Ok(f) => failed |= f,
            Err(()) => return 1,
        }
        if let Some(e) = stop {
            eprintln!(
                "error: cannot read the input: {}",
                e.to_string().to_lowercase()
            );
            return 1;
        }
    }
    u8::from(failed)
}

/// `--ready`: the line that says the gateway is loaded and reading,
/// before any decision.
pub fn announce_ready(gw: &Gateway, out: &mut dyn Write) -> std::io::Result<()> {
    let line = serde_json::json!({"ready": true, "bundle": gw.bundle_hash()});
    writeln!(out, "{line}")?;
    out.flush()
}

fn read_lines(mut input: impl BufRead, mandate: Option<&Value>, to: mpsc::SyncSender<Read>) {
    loop {
        let item = match next_line(&mut input) {
            Ok(None) => return,
            Ok(Some(Line::Text(l))) => Read::Input(parse_line(&l, mandate)),
            Ok(Some(Line::Bad(reason))) => Read::Input(malformed(reason, mandate)),
            Err(e) => Read::Failed(e),
        };
        let last = matches!(item, Read::Failed(_));
        if to.send(item).is_err() || last {
            return;
        }
    }
}

/// Decides `group` (emptied) in one transaction and writes its answers in
/// order, all at once, once they are durable. Lines the store could not
/// decide with the group are decided again one by one, and one whose
/// decision fails again is answered with a DENY without a receipt, its
/// error on stderr (`Ok(true)`: the exit code will be 1). `Err` when an answer cannot be
/// written.
fn decide_group(gw: &Gateway, group: &mut Vec<Input>, out: &mut dyn Write) -> Result<bool, ()> {
    let mut failed = false;
    // on an error, the lines its batch did not decide (over shards, only
    // the failing shard's): nothing of them committed (or, after a commit
    // of unknown outcome, perhaps all: a write that did is answered from
    // the store), each is decided again alone (as it was before groups)
    let each = gw.decide_each(crate::gateway::Ask::batch(group));
    let mut decided: Vec<Decision> = Vec::with_capacity(group.len());
    for (input, e) in group.iter().zip(each) {
        decided.push(match e {
            Some(Ok(d)) => d,
            _ => match gw.decide(input) {
                Ok(d) => d,
                Err(e) => {
                    eprint!("{}", super::super::bundle::render_error(&e, false));
                    failed = true;
                    Decision::unrecorded_after(&e)
                }
            },
        });
    }
    group.clear();
    let mut buf = Vec::with_capacity(decided.len() * 1024);
    for d in &decided {
        if serde_json::to_writer(&mut buf, d).is_err() {
            return Err(());
        }
        buf.push(b'\n');
    }
    out.write_all(&buf).map_err(|_| ())?;
    out.flush().map_err(|_| ())?;
    Ok(failed)
}
