//! `ipc keygen -o NAME`: a new Ed25519 key pair, `NAME.key` (mode 0600) and
//! `NAME.pub`. Never overwrites a file.

use super::bundle::render_error;
use crate::keys::SecretKey;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct KeygenArgs {
    /// Base name: writes NAME.key (secret) and NAME.pub (public).
    #[arg(short, long, value_name = "NAME")]
    pub output: PathBuf,
}

pub fn run(args: &KeygenArgs, out: &mut dyn Write) -> u8 {
    let result = SecretKey::generate().and_then(|k| {
        let (sk, pk) = k.write_pair(&args.output)?;
        Ok((k.public().id(), sk, pk))
    });
    let written = match &result {
        Ok((id, sk, pk)) => writeln!(
            out,
            "wrote {} (secret, mode 0600) and {} (public)\nkey id {id}",
            sk.display(),
            pk.display()
        ),
        Err(e) => write!(out, "{}", render_error(e, super::use_color())),
    };
    u8::from(result.is_err() || written.is_err())
}
