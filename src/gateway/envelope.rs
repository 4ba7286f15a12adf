//! The input of one decision as a caller sends it: a bare proposal, or the
//! trusted caller's envelope (`ipc run`, `ipc serve --stdio` and `POST
//! /v1/decide` read the same thing).

use super::{Deny, Input, Stage};
use crate::base::json::parse_strict;
use serde_json::Value;

/// One input line: a bare proposal `{"action", "args"}`, or an envelope
/// `{"proposal", "mandate"?, "approvals"?}` from the trusted caller. A line
/// that is not that becomes an input the gateway denies (contract), with a
/// receipt holding the raw line.
pub fn parse_line(line: &str, default_mandate: Option<&Value>) -> Input {
    parse_envelope(line, default_mandate).unwrap_or_else(|d| Input {
        // the receipt decides what it keeps of it (`stages/receipt.rs`)
        proposal: Value::String(line.to_string()),
        mandate: default_mandate.cloned(),
        approvals: vec![],
        malformed: Some(d.reason),
    })
}

fn parse_envelope(line: &str, default_mandate: Option<&Value>) -> Result<Input, Deny> {
    // a blank line is an input too: every line gets its decision, so that a
    // caller matching answers to lines never goes out of step
    if line.trim().is_empty() {
        return Err(Deny::new(
            Stage::Contract,
            "an empty line is not a proposal: one JSON proposal per line",
        ));
    }
    let v = parse_strict(line).map_err(|e| Deny::new(Stage::Contract, e))?;
    let mut input = Input {
        mandate: default_mandate.cloned(),
        ..Input::default()
    };
    match v {
        Value::Object(mut o) if o.contains_key("proposal") => {
            if let Some(k) = o
                .keys()
                .find(|k| !["proposal", "mandate", "approvals"].contains(&k.as_str()))
            {
                return Err(Deny::new(
                    Stage::Contract,
                    format!("unexpected key `{k}` in the envelope"),
                ));
            }
            input.proposal = o.remove("proposal").unwrap_or(Value::Null);
            if let Some(m) = o.remove("mandate") {
                input.mandate = Some(m);
            }
            match o.remove("approvals") {
                None => {}
                Some(Value::Array(a)) => input.approvals = a,
                Some(_) => {
                    return Err(Deny::new(Stage::Contract, "`approvals` is a list"));
                }
            }
        }
        other => input.proposal = other,
    }
    Ok(input)
}

/// An input the gateway denies at the contract stage, with a receipt.
pub fn malformed(reason: String, default_mandate: Option<&Value>) -> Input {
    Input {
        proposal: Value::Null,
        mandate: default_mandate.cloned(),
        approvals: vec![],
        malformed: Some(reason),
    }
}
