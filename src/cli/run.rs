//! `ipc run --bundle B [--world W] [--store S] [--mandate TOKEN] [FILE|-]`:
//! one JSON decision per input line, in order. A malformed line gets a DENY
//! (contract) for that line and the run goes on. Lines are decided in
//! batches committed together (group commit): a decision is printed only
//! once it is durable, and a run killed mid-batch leaves no trace of the
//! unfinished batch — re-running executes nothing twice.

use super::gateway::{GatewayArgs, Line, malformed, next_line, parse_line};
use crate::gateway::{Decision, Input};
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// Mandate token for lines that carry none.
    #[arg(long, value_name = "FILE")]
    pub mandate: Option<PathBuf>,
    /// Run on an in-memory store: approvals, budgets and idempotency last
    /// only as long as the process (`ipc run` refuses to start without a
    /// store otherwise).
    #[arg(long)]
    pub ephemeral: bool,
    /// Lines decided per transaction.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// At the end, print on stderr one JSON line with what the store
    /// measured: how long its transactions held the chain's head lock
    /// (PostgreSQL: it bounds what one database decides per second) and
    /// how its decisions committed (`scripts/bench-pg`).
    #[arg(long)]
    pub store_stats: bool,
    /// Proposals, one JSON per line (`-` or nothing: standard input).
    pub input: Option<PathBuf>,
}

pub fn run(args: &RunArgs, out: &mut dyn Write) -> u8 {
    let mut gateway_args = args.gateway.clone();
    gateway_args.ephemeral_ok = args.ephemeral;
    let Some((gw, mandate)) = super::gateway::load_with_mandate(&gateway_args, &args.mandate)
    else {
        return 1;
    };
    let reader: Box<dyn BufRead> = match &args.input {
        None => Box::new(std::io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
        Some(p) => match std::fs::File::open(p) {
            Ok(f) => Box::new(std::io::BufReader::new(f)),
            Err(e) => {
                eprintln!(
                    "error: cannot read `{}`: {}",
                    p.display(),
                    e.to_string().to_lowercase()
                );
                return 1;
            }
        },
    };
    let mut batch: Vec<Input> = vec![];
    let batch_size = args.batch.max(1);
    let mut reader = reader;
    loop {
        let line = match next_line(&mut reader) {
            Ok(None) => break,
            Ok(Some(Line::Text(l))) => l,
            Ok(Some(Line::Bad(reason))) => {
                batch.push(malformed(reason, mandate.as_ref()));
                continue;
            }
            Err(e) => {
                // decide what was read, then stop: a failing input is not retried
                let _ = flush(&gw, &mut batch, out);
                eprintln!(
                    "error: cannot read the input: {}",
                    e.to_string().to_lowercase()
                );
                return 1;
            }
        };
        batch.push(parse_line(&line, mandate.as_ref()));
        if batch.len() >= batch_size && flush(&gw, &mut batch, out).is_err() {
            return 1;
        }
    }
    if flush(&gw, &mut batch, out).is_err() {
        return 1;
    }
    if args.store_stats {
        eprintln!("{}", store_stats(gw.store().as_ref()));
    }
    0
}

/// `--store-stats`: the store's head lock holds and optimistic counts
/// (`null` where the store has none).
fn store_stats(store: &dyn crate::store::Store) -> serde_json::Value {
    let hold = store.head_lock_hold().map(|h| {
        serde_json::json!({
            "transactions": h.transactions,
            "held_seconds": h.total.as_secs_f64(),
            "max_seconds": h.max.as_secs_f64(),
        })
    });
    let optimistic = store
        .optimistic_counts()
        .map(|(decided, rerun)| serde_json::json!({ "decided": decided, "rerun": rerun }));
    serde_json::json!({ "store_stats": { "head_lock": hold, "optimistic": optimistic } })
}

/// Decides a batch in one transaction and prints its decisions in order.
/// On a store failure, every committed decision is still printed (over
/// shards, those of the shards that did not fail, in their places), each
/// input not decided is a DENY without a receipt, the error goes to
/// stderr, and `Err` ends the run (exit code 1): a failing input is not
/// retried. `Err` also when a line cannot be written.
pub fn flush(
    gw: &crate::gateway::Gateway,
    batch: &mut Vec<Input>,
    out: &mut dyn Write,
) -> Result<(), Unfinished> {
    if batch.is_empty() {
        return Ok(());
    }
    let each = gw.decide_each(crate::gateway::Ask::batch(batch));
    batch.clear();
    let mut failed = None;
    let decided: Vec<Decision> = each
        .into_iter()
        .map(|e| match e {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                let d = Decision::unrecorded_after(&e);
                failed.get_or_insert(e);
                d
            }
            None => {
                failed.get_or_insert_with(|| {
                    std::sync::Arc::new(crate::gateway::GatewayError::Store(
                        crate::store::StoreError::Aborted(
                            "a batch came back short: nothing was decided".into(),
                        ),
                    ))
                });
                Decision::unrecorded("a batch came back short: this line was not decided")
            }
        })
        .collect();
    // the batch's lines leave in one write (stdout alone would write each
    // line on its own), all of them durable already
    let mut buf = std::io::BufWriter::with_capacity(1 << 16, out);
    for d in decided {
        if serde_json::to_writer(&mut buf, &d).is_err() || buf.write_all(b"\n").is_err() {
            return Err(Unfinished);
        }
    }
    buf.flush().map_err(|_| Unfinished)?;
    match failed {
        Some(e) => {
            eprint!("{}", super::bundle::render_error(e.as_ref(), false));
            Err(Unfinished)
        }
        None => Ok(()),
    }
}

/// A batch not wholly decided, or its answers not wholly written: said on
/// stderr already; the run ends with exit code 1.
#[derive(Debug)]
pub struct Unfinished;
