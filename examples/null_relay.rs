//! A relay that does nothing but copy: it starts the command it is given
//! and copies each line from its own stdin to the command's and from the
//! command's stdout to its own, parsing nothing and recording nothing.
//! `scripts/bench-reference-servers` puts it where `ipc mcp` would be, so
//! that the cost of one more process and two more pipes on a call's path
//! is measured apart from what the proxy does with the call.
//!
//!   target/release/examples/null_relay COMMAND [ARGS...]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};

fn main() -> ExitCode {
    match relay() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("null_relay: {e}");
            ExitCode::FAILURE
        }
    }
}

fn relay() -> std::io::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let command = args.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "usage: null_relay COMMAND [ARGS...]",
        )
    })?;
    let mut child = Command::new(command)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let (Some(mut to_child), Some(from_child)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the child has no pipes"));
    };
    let back = std::thread::spawn(move || -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        for line in BufReader::new(from_child).lines() {
            out.write_all(line?.as_bytes())?;
            out.write_all(b"\n")?;
            out.flush()?;
        }
        Ok(())
    });
    for line in std::io::stdin().lock().lines() {
        to_child.write_all(line?.as_bytes())?;
        to_child.write_all(b"\n")?;
        to_child.flush()?;
    }
    drop(to_child);
    back.join()
        .map_err(|_| std::io::Error::other("the copying thread panicked"))??;
    child.wait()?;
    Ok(())
}
