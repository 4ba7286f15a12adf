//! `ipc token child`: a child mandate of a parent token, issued by the
//! trusted side after the user confirmed it (or, with `--draft`, shown as
//! its confirmer sees it, with each value's origin and what widens, and
//! nothing issued). The gateway's `draft_child` / `issue_child` /
//! `record_child` do the work; this is their shell, and `ipc mandates
//! issue`'s too ([`issue`], [`ChildFields`]).

use super::Format;
use super::gateway::GatewayArgs;
use crate::gateway::chain::{ChildError, ChildRequest};
use crate::gateway::{MandateToken, ReceiptRef};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    #[command(flatten)]
    pub gateway: GatewayArgs,
    /// The parent mandate token (from `ipc token issue`, or a child).
    #[arg(long, value_name = "FILE", required_unless_present = "stdio")]
    pub parent: Option<PathBuf>,
    /// The key that signs the child: an issuer key of the world
    /// (`mandate_keys`) or the parent's user's key (`[approvers]`).
    /// Required unless `--draft`.
    #[arg(long, value_name = "KEYFILE", required_unless_present_any = ["draft", "stdio"])]
    pub key: Option<PathBuf>,
    #[command(flatten)]
    pub child: ChildFields,
    /// Expiry (`YYYY-MM-DDTHH:MM:SSZ`; default: the parent's).
    #[arg(long)]
    pub expires: Option<String>,
    /// Show the child as the user confirms it (each value, its origin,
    /// what widens) and issue nothing.
    #[arg(long)]
    pub draft: bool,
    #[arg(long, value_enum, default_value_t)]
    pub format: Format,
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// One JSON line per child on stdin, one answer per line on stdout
    /// (a harness's trusted side): `{"parent": TOKEN, "request": {"claims":
    /// ..., ...}, "draft": true}` answers `{"draft": {"mandate", "shown",
    /// "widens"}}`; without `draft` (and with `--key`) `{"token": CHILD}`,
    /// issued and recorded; a line that fails answers `{"error": "..."}`.
    #[arg(long, conflicts_with_all = ["parent", "draft", "output"])]
    pub stdio: bool,
}

/// What the child asks for, as `ipc token child` and `ipc mandates issue`
/// both take it.
#[derive(clap::Args, Debug)]
pub struct ChildFields {
    /// `NAME=VALUE`; repeat a set claim's name for each member. A set
    /// claim not given is empty in the child; a single claim not given is
    /// the parent's.
    #[arg(long = "claim", value_name = "NAME=VALUE")]
    pub claims: Vec<String>,
    /// A scope of the parent's the child keeps (repeat; default: all).
    #[arg(long = "scope")]
    pub scopes: Vec<String>,
    /// Cumulative amount cap, e.g. `1500.00` (default: the parent's).
    #[arg(long)]
    pub budget: Option<String>,
    /// Cap on executed calls (default: the parent's).
    #[arg(long)]
    pub calls: Option<u64>,
}

impl ChildFields {
    /// The request, expiring at `expires_at` (an RFC 3339 time or seconds
    /// since the epoch; `None`: when the parent does).
    pub(super) fn request(&self, expires_at: Option<Value>) -> Result<ChildRequest, ChildError> {
        let mut claims = serde_json::Map::new();
        for c in &self.claims {
            let (name, value) = c.split_once('=').ok_or_else(|| ChildError::Request {
                reason: format!("`{c}` is not NAME=VALUE"),
            })?;
            let entry = claims
                .entry(name.to_string())
                .or_insert(Value::Array(vec![]));
            if let Value::Array(items) = entry {
                items.push(Value::String(value.to_string()));
            }
        }
        let mut wire = serde_json::Map::new();
        wire.insert("claims".into(), Value::Object(claims));
        if !self.scopes.is_empty() {
            wire.insert("scopes".into(), json!(self.scopes));
        }
        if let Some(b) = &self.budget {
            wire.insert("budget".into(), json!(b));
        }
        if let Some(c) = self.calls {
            wire.insert("calls".into(), json!(c));
        }
        if let Some(e) = expires_at {
            wire.insert("expires_at".into(), e);
        }
        ChildRequest::from_json(&Value::Object(wire))
    }
}

/// The parent token in the file `path`.
pub(super) fn read_parent(path: &Path) -> Result<MandateToken, String> {
    super::gateway::read_json(path)
        .and_then(|v| serde_json::from_value(v).map_err(|e| e.to_string()))
        .map_err(|e| format!("the parent `{}`: {e}", path.display()))
}

fn draft_json(d: &crate::gateway::chain::Draft) -> Value {
    json!({"mandate": d.mandate, "shown": d.shown, "widens": d.widens})
}

/// The child of `parent` for `req`: issued with `key` and recorded (the
/// one implementation of `ipc token child` and `ipc mandates issue`).
pub(super) fn issue(
    gw: &crate::gateway::Gateway,
    parent: &MandateToken,
    req: &ChildRequest,
    key: &crate::keys::SecretKey,
) -> Result<(MandateToken, ReceiptRef), ChildError> {
    let token = gw.issue_child(parent, req, key)?;
    let receipt = gw.record_child(&token, "cli")?;
    Ok((token, receipt))
}

/// `--stdio`: one line in, one line out, until the end of stdin.
fn serve(
    gw: &crate::gateway::Gateway,
    key: Option<&crate::keys::SecretKey>,
    out: &mut dyn Write,
) -> Result<(), String> {
    use std::io::BufRead;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        if line.trim().is_empty() {
            continue;
        }
        let answer = (|| -> Result<Value, String> {
            let v = crate::base::json::parse_strict(&line)?;
            let parent: MandateToken =
                serde_json::from_value(v["parent"].clone()).map_err(|e| format!("parent: {e}"))?;
            let req = ChildRequest::from_json(&v["request"]).map_err(|e| e.to_string())?;
            if v["draft"] == json!(true) {
                let d = gw.draft_child(&parent, &req).map_err(|e| e.to_string())?;
                return Ok(json!({"draft": draft_json(&d)}));
            }
            let key = key.ok_or("`--key` signs the children")?;
            let (token, _) = issue(gw, &parent, &req, key).map_err(|e| e.to_string())?;
            Ok(json!({"token": token}))
        })()
        .unwrap_or_else(|e| json!({"error": e}));
        writeln!(out, "{answer}").map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
    }
    Ok(())
}

pub fn run(a: &ChildArgs, out: &mut dyn Write) -> Result<(), String> {
    let gw = super::gateway::load(&a.gateway).map_err(|e| e.to_string())?;
    let key = match &a.key {
        Some(k) => Some(crate::keys::load_secret(k).map_err(|e| e.to_string())?),
        None => None,
    };
    let Some(parent_path) = &a.parent else {
        return serve(&gw, key.as_ref(), out);
    };
    let parent = read_parent(parent_path)?;
    let req = a
        .child
        .request(a.expires.as_ref().map(|e| json!(e)))
        .map_err(|e| e.to_string())?;
    if a.draft {
        let d = gw.draft_child(&parent, &req).map_err(|e| e.to_string())?;
        let text = match a.format {
            Format::Json => {
                serde_json::to_string_pretty(&draft_json(&d)).map_err(|e| e.to_string())?
            }
            Format::Human => d.shown.text(),
        };
        return writeln!(out, "{text}").map_err(|e| e.to_string());
    }
    let Some(key) = &key else {
        return Err("`--key` signs the child".into());
    };
    let (token, _) = issue(&gw, &parent, &req, key).map_err(|e| e.to_string())?;
    let text = serde_json::to_string_pretty(&token).map_err(|e| e.to_string())?;
    match &a.output {
        Some(p) => std::fs::write(p, text + "\n").map_err(|e| {
            format!(
                "cannot write `{}`: {}",
                p.display(),
                e.to_string().to_lowercase()
            )
        }),
        None => writeln!(out, "{text}").map_err(|e| e.to_string()),
    }
}
