//! `ipc bundle verify FILE [--key PUBFILE]` and `ipc bundle inspect FILE`.
//! Also the rendering of diagnostics that have no source file (key and
//! bundle errors), shared with `build` and `keygen`.

use super::Format;
use crate::base::Money;
use crate::bundle::Bundle;
use crate::ir::{self, Type, Validator, Value};
use crate::keys::PublicKey;
use miette::Diagnostic;
use serde_json::json;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BundleArgs {
    #[command(subcommand)]
    pub command: BundleCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum BundleCommand {
    /// Check a bundle's format, hash, Cedar and (with --key) signature.
    Verify(VerifyArgs),
    /// Show what a bundle holds: packs, actions, params, sources, policies.
    Inspect(InspectArgs),
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The bundle file.
    pub file: PathBuf,
    /// Public key file (from `ipc keygen`) the bundle must be signed with.
    #[arg(long, value_name = "PUBFILE")]
    pub key: Option<PathBuf>,
    /// Without `--key`: check everything but the signature, and say so
    /// (`intact`, never `ok`).
    #[arg(long, conflicts_with = "key")]
    pub allow_unsigned: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    /// The bundle file.
    pub file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
}

pub fn run(args: &BundleArgs, out: &mut dyn Write) -> u8 {
    match &args.command {
        BundleCommand::Verify(a) => verify(a, out),
        BundleCommand::Inspect(a) => inspect(a, out),
    }
}

/// A diagnostic without source code, rendered like the others.
pub(crate) fn render_error(e: &dyn Diagnostic, color: bool) -> String {
    let theme = if color {
        miette::GraphicalTheme::unicode()
    } else {
        miette::GraphicalTheme::unicode_nocolor()
    };
    let handler = miette::GraphicalReportHandler::new_themed(theme).with_width(100);
    let mut out = String::new();
    if handler.render_report(&mut out, e).is_err() {
        return format!("error: {e}\n");
    }
    out
}

/// The same, as `--format json` prints diagnostics.
pub(crate) fn error_json(e: &dyn Diagnostic) -> serde_json::Value {
    json!({
        "file": null,
        "code": e.code().map(|c| c.to_string()).unwrap_or_default(),
        "severity": "error",
        "message": e.to_string(),
        "help": e.help().map(|h| h.to_string()),
        "labels": [],
    })
}

fn print_failure(
    out: &mut dyn Write,
    format: Format,
    file: &std::path::Path,
    e: &dyn Diagnostic,
) -> u8 {
    let _ = match format {
        Format::Human => write!(out, "{}", render_error(e, super::use_color())),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "ok": false,
                "file": file.display().to_string(),
                "error": error_json(e),
            }))
            .unwrap_or_default()
        ),
    };
    1
}

fn verify(args: &VerifyArgs, out: &mut dyn Write) -> u8 {
    let key = match &args.key {
        None => None,
        Some(p) => match PublicKey::load(p) {
            Ok(k) => Some(k),
            Err(e) => return print_failure(out, args.format, &args.file, &e),
        },
    };
    let bundle = match Bundle::load(&args.file, key.as_ref()) {
        Ok(b) => b,
        Err(e) => return print_failure(out, args.format, &args.file, &e),
    };
    if let Err(e) = bundle.cedar() {
        return print_failure(out, args.format, &args.file, &e);
    }
    // a bundle is `ok` only when its signature was checked; without a key
    // that is a refusal, unless asked to check the rest only
    if key.is_none() && !args.allow_unsigned {
        let e = crate::bundle::BundleError::KeyRequired {
            path: args.file.display().to_string(),
        };
        return print_failure(out, args.format, &args.file, &e);
    }
    let verified = key.is_some();
    let signature = match (&bundle.signature, &key) {
        (Some(s), Some(_)) => format!("verified with key {}", s.key_id),
        (Some(s), None) => format!(
            "signed with key {}, NOT checked (give --key PUBFILE)",
            s.key_id
        ),
        (None, _) => "unsigned".to_string(),
    };
    let written = match args.format {
        Format::Human => writeln!(
            out,
            "{}{}\nhash  {}\nsig   {signature}\n      {} pack{}, {} action{}, {} polic{}; cedar schema and policies validate",
            if verified { "ok    " } else { "intact " },
            args.file.display(),
            bundle.hash,
            bundle.packs.len(),
            if bundle.packs.len() == 1 { "" } else { "s" },
            bundle.table.actions.len(),
            if bundle.table.actions.len() == 1 {
                ""
            } else {
                "s"
            },
            bundle.policies.len(),
            if bundle.policies.len() == 1 {
                "y"
            } else {
                "ies"
            },
        ),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&json!({
                "ok": verified,
                "intact": true,
                "file": args.file.display().to_string(),
                "format": bundle.format,
                "hash": bundle.hash,
                "signed": bundle.signature.is_some(),
                "key_id": bundle.signature.as_ref().map(|s| s.key_id.clone()),
                "signature_verified": verified,
                "packs": bundle.packs.iter().map(|p| p.name.clone()).collect::<Vec<_>>(),
                "actions": bundle.table.actions.len(),
                "policies": bundle.policies.len(),
            }))
            .unwrap_or_default()
        ),
    };
    u8::from(written.is_err())
}

fn inspect(args: &InspectArgs, out: &mut dyn Write) -> u8 {
    let bundle = match Bundle::load(&args.file, None) {
        Ok(b) => b,
        Err(e) => return print_failure(out, args.format, &args.file, &e),
    };
    let written = match args.format {
        Format::Human => write!(out, "{}", inspect_human(&bundle, &args.file)),
        Format::Json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&inspect_json(&bundle, &args.file)).unwrap_or_default()
        ),
    };
    u8::from(written.is_err())
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Int(n) => n.to_string(),
        // money as written in packs: `1000000` → `10000.00`
        Value::Money(n) => Money::from_minor(*n).to_string(),
        Value::Str(s) => format!("{s:?}"),
        Value::Bool(b) => b.to_string(),
        Value::Duration(s) => format!("{s} seconds"),
        Value::List(items) => format!(
            "[{}]",
            items.iter().map(value_text).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn validator_text(v: &Validator, ty: &Type) -> String {
    match v {
        Validator::Range { min, max } if *ty.element() == Type::Money => {
            format!(
                "range {} .. {}",
                Money::from_minor(*min),
                Money::from_minor(*max)
            )
        }
        Validator::Range { min, max } => format!("range {min} .. {max}"),
        Validator::MinLen { len } => format!("min_len {len}"),
        Validator::MaxLen { len } => format!("max_len {len}"),
        Validator::Pattern { regex } => format!("pattern {regex:?}"),
        Validator::MinItems { count } => format!("min_items {count}"),
        Validator::MaxItems { count } => format!("max_items {count}"),
        Validator::NonEmpty => "nonempty".into(),
    }
}

fn param_text(p: &ir::Param) -> String {
    let mut parts: Vec<String> = vec![];
    if p.critical {
        let sources: Vec<String> = p.sources.iter().map(|s| s.to_string()).collect();
        parts.push(format!("critical from {}", sources.join(" | ")));
    }
    if let Some(n) = p.normalize {
        parts.push(format!("normalize {}", n.name()));
    }
    parts.extend(p.validators.iter().map(|v| validator_text(v, &p.ty)));
    if let Some(d) = &p.default {
        parts.push(format!("default {}", value_text(d)));
    }
    // a record's fields, each with what it says
    for f in &p.fields {
        let text = param_text(f);
        if !text.is_empty() {
            parts.push(format!(".{} {text}", f.name));
        }
    }
    parts.join(", ")
}

fn inspect_human(b: &Bundle, file: &std::path::Path) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "bundle   {}", file.display());
    let _ = writeln!(s, "format   {}", b.format);
    let _ = writeln!(s, "hash     {}", b.hash);
    let _ = writeln!(
        s,
        "signed   {}",
        match &b.signature {
            Some(sig) => format!(
                "yes, key {} (check it with `ipc bundle verify --key`)",
                sig.key_id
            ),
            None => "no".into(),
        }
    );
    let _ = writeln!(s, "policies {}", b.policies.len());
    for p in &b.packs {
        let _ = writeln!(s);
        let desc = if p.description.is_empty() {
            String::new()
        } else {
            format!(": {}", p.description)
        };
        let _ = writeln!(s, "pack {} {}{desc}", p.name, p.version);
        for a in b.table.actions.iter().filter(|a| a.pack == p.name) {
            let act = &a.action;
            let _ = writeln!(s, "  action {}  ({})", act.name, a.source);
            if !act.description.is_empty() {
                let _ = writeln!(s, "    {}", act.description);
            }
            let _ = writeln!(
                s,
                "    scope {}, executor {}{}",
                act.scope,
                act.executor,
                act.budget
                    .as_ref()
                    .map(|b| format!(", budget {b}"))
                    .unwrap_or_default()
            );
            let width = act.params.iter().map(|p| p.name.len()).max().unwrap_or(0);
            for p in &act.params {
                let ty = p.ty.to_string();
                let rest = param_text(p);
                let _ = writeln!(
                    s,
                    "    param {:<width$} {ty:<10} {rest}",
                    format!("{}:", p.name),
                    width = width + 1
                );
            }
            for f in &act.facts {
                let _ = writeln!(s, "    fact  {}: {}", f.name, f.ty);
            }
            for (r, id) in act.rules.iter().zip(&a.rule_policy_ids) {
                let _ = writeln!(s, "    {} {:?} -> {id}", r.kind.keyword(), r.reason);
            }
            let _ = writeln!(s, "    policies: {}", a.policy_ids.join(", "));
        }
    }
    s
}

fn inspect_json(b: &Bundle, file: &std::path::Path) -> serde_json::Value {
    json!({
        "file": file.display().to_string(),
        "format": b.format,
        "hash": b.hash,
        "signed": b.signature.is_some(),
        "key_id": b.signature.as_ref().map(|s| s.key_id.clone()),
        "policy_count": b.policies.len(),
        "packs": b.packs,
        "policies": b.policies.iter().map(|p| json!({"id": p.id, "source": p.source})).collect::<Vec<_>>(),
        "actions": b.table.actions.iter().map(|a| json!({
            "pack": a.pack,
            "name": a.action.name,
            "description": a.action.description,
            "source": a.source,
            "scope": a.action.scope,
            "executor": a.action.executor,
            "budget": a.action.budget,
            "params": a.action.params.iter().map(|p| json!({
                "name": p.name,
                "type": p.ty.to_string(),
                "critical": p.critical,
                "sources": p.sources.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "normalize": p.normalize.map(|n| n.name()),
                "validators": p.validators.iter().map(|v| validator_text(v, &p.ty)).collect::<Vec<_>>(),
                "default": p.default.as_ref().map(value_text),
            })).collect::<Vec<_>>(),
            "facts": a.action.facts.iter().map(|f| json!({"name": f.name, "type": f.ty.to_string()})).collect::<Vec<_>>(),
            "rules": a.action.rules.iter().zip(&a.rule_policy_ids).map(|(r, id)| json!({
                "kind": r.kind.keyword(), "reason": r.reason, "policy_id": id,
            })).collect::<Vec<_>>(),
            "policy_ids": a.policy_ids,
        })).collect::<Vec<_>>(),
    })
}
