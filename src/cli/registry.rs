//! `ipc registry add|remove`: the owner changes its own records at run
//! time, through the store, with a receipt; the next decision sees the
//! change. The world's registry files stay the starting state.

use super::Format;
use super::gateway::GatewayArgs;
use crate::gateway::trusted::{RegistryChange, Verb};
use serde_json::{Value, json};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct RegistryArgs {
    #[command(subcommand)]
    pub command: RegistryCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum RegistryCommand {
    /// Add a value to a set registry, or (with --record) a record to a keyed one.
    Add(ChangeArgs),
    /// Remove a value from a set registry, or the record under a key.
    Remove(ChangeArgs),
}

#[derive(clap::Args, Debug)]
pub struct ChangeArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The pack that declares the registry.
    #[arg(long)]
    pub pack: String,
    /// The registry, as the pack declares it.
    #[arg(long)]
    pub registry: String,
    /// Whose records (the tenant); `*` for a global registry.
    #[arg(long)]
    pub owner: String,
    /// Who makes the change, recorded in the receipt (default: the owner).
    #[arg(long)]
    pub by: Option<String>,
    /// A keyed registry's record, as JSON (`add` only).
    #[arg(long, value_name = "JSON")]
    pub record: Option<String>,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    /// The value (set registry) or the key (keyed registry).
    pub value: String,
}

pub fn run(args: &RegistryArgs, out: &mut dyn Write) -> u8 {
    let (a, add) = match &args.command {
        RegistryCommand::Add(a) => (a, true),
        RegistryCommand::Remove(a) => (a, false),
    };
    let gw = match super::gateway::load_trusted(&a.gateway) {
        Ok(g) => g,
        Err(e) => {
            eprint!("{}", super::bundle::render_error(e.as_ref(), false));
            return 1;
        }
    };
    let keyed = gw
        .registry(&a.pack, &a.registry)
        .is_some_and(|r| matches!(r.shape, crate::ir::RegistryShape::Keyed { .. }));
    let record = match &a.record {
        None => None,
        Some(text) => match crate::base::json::parse_strict(text) {
            Ok(Value::Object(record)) => Some(record),
            Ok(_) => return fail("`--record` is a JSON object of the record's fields"),
            Err(e) => return fail(&format!("`--record`: {e}")),
        },
    };
    let verb = if add { Verb::Add } else { Verb::Remove };
    let change = match RegistryChange::from_request(keyed, verb, &a.value, record, &a.registry) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let by = a.by.clone().unwrap_or_else(|| a.owner.clone());
    match gw.change_registry(&a.pack, &a.registry, &a.owner, &change, &by) {
        Ok(receipt) => {
            let verb = if add { "added to" } else { "removed from" };
            let written = match a.format {
                Format::Human => writeln!(
                    out,
                    "{verb} {}/{} of `{}`: `{}` (receipt {} {})",
                    a.pack, a.registry, a.owner, a.value, receipt.seq, receipt.hash
                ),
                Format::Json => writeln!(
                    out,
                    "{}",
                    json!({"ok": true, "change": if add { "add" } else { "remove" },
                        "pack": a.pack, "registry": a.registry, "owner": a.owner,
                        "value": a.value, "receipt": {"seq": receipt.seq, "hash": receipt.hash}})
                ),
            };
            u8::from(written.is_err())
        }
        Err(e) => {
            match a.format {
                Format::Human => eprint!("{}", super::bundle::render_error(&e, false)),
                Format::Json => {
                    let _ = writeln!(out, "{}", super::bundle::error_json(&e));
                }
            }
            1
        }
    }
}

fn fail(msg: &str) -> u8 {
    eprintln!("error: {msg}");
    2
}
