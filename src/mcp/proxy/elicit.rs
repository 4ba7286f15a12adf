//! Step-up through MCP elicitation, in the era the client speaks.
//!
//! - Up to protocol 2025-11-25: a server-to-client `elicitation/create`
//!   request during the tool call (`Peer::create_elicitation`).
//! - 2026-07-28: server-to-client requests are gone; the tool call returns
//!   an *input required* result holding the elicitation and a sealed request
//!   state, and the client calls again with its answer and the state.
//!
//! The state is untrusted input: sealed with HMAC-SHA256 under a random key
//! of this process (so it never crosses sessions), bound to the operation
//! hash and the mandate's user as associated data, expiring after
//! [`STATE_TTL`]. It holds nothing secret, and it grants nothing by itself:
//! the approval is minted only after the gateway decided again on the same
//! arguments and found the same operation hash.

use crate::gateway::{Decision, Gateway};
use crate::mcp::config::SessionConfig;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitRequest, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationSchema, InputRequest, InputRequests, InputRequiredResult,
    ProtocolVersion, RequestStateCodec, SealOptions,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value};
use std::time::Duration;

/// How long a sealed request state stays valid.
pub const STATE_TTL: Duration = Duration::from_secs(300);

/// The key of the confirmation in the input requests and responses.
pub const CONFIRM: &str = "confirm";

/// Seals and opens the 2026-07-28 request state.
pub struct Sealer {
    codec: RequestStateCodec,
}

impl Sealer {
    /// A sealer with a fresh random key.
    pub fn new() -> Result<Self, String> {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| format!("no randomness for the state key: {e}"))?;
        Ok(Sealer {
            codec: RequestStateCodec::try_new(key.to_vec()).map_err(|e| e.to_string())?,
        })
    }

    fn context(purpose: &str, user: &str) -> Vec<u8> {
        format!("{purpose}\n{user}").into_bytes()
    }

    /// The state for a confirmation of `op` by `user`.
    pub fn seal(&self, op: &str, user: &str) -> Result<String, String> {
        self.seal_for(STEP_UP, op, user, &Map::new())
    }

    /// Whether `state` is one this process sealed for `op` and `user`, and
    /// has not expired.
    pub fn open(&self, state: &str, op: &str, user: &str) -> Result<(), String> {
        self.open_for(STEP_UP, state, op, user).map(|_| ())
    }

    /// The state of a question asked for `purpose` about `binding` (the
    /// hash of what the user is asked) of `user`, carrying `extra` (what
    /// the second round needs to show the same again, e.g. an id drawn in
    /// the first).
    pub fn seal_for(
        &self,
        purpose: &str,
        binding: &str,
        user: &str,
        extra: &Map<String, Value>,
    ) -> Result<String, String> {
        let mut payload = extra.clone();
        payload.insert("binding".into(), Value::String(binding.into()));
        self.codec
            .seal_json_with(
                &Value::Object(payload),
                &SealOptions::new()
                    .associated_data(&Self::context(purpose, user))
                    .ttl(STATE_TTL),
            )
            .map_err(|e| e.to_string())
    }

    /// What `state` carries, if this process sealed it for `purpose` and
    /// `user` and it has not expired (whatever it is bound to).
    pub fn payload(
        &self,
        purpose: &str,
        state: &str,
        user: &str,
    ) -> Result<Map<String, Value>, String> {
        match self
            .codec
            .open_json_with(state, &Self::context(purpose, user))
            .map_err(|e: rmcp::model::RequestStateError| e.to_string().to_lowercase())?
        {
            Value::Object(m) => Ok(m),
            _ => Err("the state holds no object".into()),
        }
    }

    /// [`Sealer::payload`], for `binding` only.
    pub fn open_for(
        &self,
        purpose: &str,
        state: &str,
        binding: &str,
        user: &str,
    ) -> Result<Map<String, Value>, String> {
        let p = self.payload(purpose, state, user)?;
        if p.get("binding").and_then(Value::as_str) != Some(binding) {
            return Err("the state is for another operation".into());
        }
        Ok(p)
    }
}

/// The purpose a step-up's state is sealed for.
const STEP_UP: &str = "intentplane-step-up";

/// What the client answered a form, or what to give it now.
pub enum Form {
    Answered(ElicitResult),
    /// A refusal, or the 2026-07-28 input request.
    Respond(Box<CallToolResponse>),
}

/// Asks the user `p` in the era the client speaks; `purpose` and
/// `binding` (what is asked, hashed) bind the 2026-07-28 state, and
/// `refuse` words what the agent reads when the question cannot be asked
/// or answered.
#[allow(clippy::too_many_arguments)]
pub async fn ask_form(
    sealer: &Sealer,
    purpose: &str,
    binding: &str,
    user: &str,
    extra: &Map<String, Value>,
    p: ElicitRequestParams,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    refuse: &(dyn Fn(&str) -> CallToolResponse + Sync),
) -> Form {
    let respond = |why: &str| Form::Respond(Box::new(refuse(why)));
    let new_era = ctx
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    let can_elicit = ctx
        .client_capabilities()
        .is_some_and(|c| c.elicitation.is_some());
    if new_era {
        if let Some(state) = &request.request_state {
            if let Err(e) = sealer.open_for(purpose, state, binding, user) {
                return respond(&format!(
                    "the request state was refused ({e}); call the tool again without it to be asked anew"
                ));
            }
            let answer = request
                .input_responses
                .as_ref()
                .and_then(|r| r.get(CONFIRM))
                .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
            return match answer {
                Some(r) => Form::Answered(r),
                None => respond("the answer to the confirmation is missing"),
            };
        }
        if !can_elicit {
            return respond(cannot_elicit());
        }
        let state = match sealer.seal_for(purpose, binding, user, extra) {
            Ok(s) => s,
            Err(e) => return respond(&format!("cannot seal the request state: {e}")),
        };
        let mut requests = InputRequests::new();
        requests.insert(
            CONFIRM.into(),
            InputRequest::Elicitation(ElicitRequest::new(p)),
        );
        return Form::Respond(Box::new(CallToolResponse::InputRequired(
            InputRequiredResult::new(Some(requests), Some(state)),
        )));
    }
    if !can_elicit {
        return respond(cannot_elicit());
    }
    match ctx.peer.create_elicitation(p).await {
        Ok(r) => Form::Answered(r),
        Err(e) => respond(&format!("the confirmation failed: {e}")),
    }
}

pub enum Answer {
    /// The user accepted exactly this operation.
    Accepted,
    /// The user declined exactly this operation (a cancel is not a
    /// decline: nothing is decided then).
    Declined,
    /// Give the client this now (a refusal, or an input request).
    Respond(Box<CallToolResponse>),
}

/// What the user is shown: the pending operation as the store holds it,
/// in the one rendering every approver sees (`gateway::render`: values
/// escaped, whole, with their origin and registry names), after checking
/// that the fields shown hash to exactly the operation `d` names and that
/// it may be approved (no value too long to show).
pub fn describe(gw: &Gateway, d: &Decision) -> Result<String, String> {
    let op = d
        .operation_hash
        .as_deref()
        .ok_or("no operation to confirm")?;
    let pending = gw.pending_op(op).map_err(|e| e.to_string())?;
    let shown = crate::gateway::render::checked(gw, &pending).map_err(|e| e.to_string())?;
    Ok(format!(
        "Confirm this operation\n{}Accept to approve exactly this operation once; decline to refuse it.",
        shown.text()
    ))
}

fn params(gw: &Gateway, d: &Decision) -> Result<ElicitRequestParams, String> {
    let message = describe(gw, d).map_err(|e| format!("it cannot be shown: {e}"))?;
    let schema = ElicitationSchema::builder()
        .build()
        .map_err(|e| e.to_string())?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    })
}

fn respond(d: &Decision, why: &str) -> Answer {
    Answer::Respond(Box::new(super::answer::refusal_with(d, why).into()))
}

fn on_result(d: &Decision, r: &ElicitResult) -> Answer {
    match r.action {
        ElicitationAction::Accept => Answer::Accepted,
        ElicitationAction::Decline => Answer::Declined,
        _ => respond(d, "the user cancelled the confirmation"),
    }
}

/// Asks the user to confirm `d` (a PENDING decision of level 1) in the era
/// the client speaks.
pub async fn ask(
    sealer: &Sealer,
    gw: &std::sync::Arc<Gateway>,
    d: &Decision,
    request: &CallToolRequestParams,
    ctx: &RequestContext<RoleServer>,
    session: &SessionConfig,
    config: &std::path::Path,
) -> Answer {
    let Some(op) = d.operation_hash.as_deref() else {
        return respond(d, "no operation to confirm");
    };
    // built (and checked: what is shown hashes to `op`) on every call, so
    // in the 2026-07-28 era an answer is accepted only if the operation
    // still shows what it was asked with
    // read off the async workers: the store is synchronous
    let line = approve_line(gw, config, op, &session.user);
    let (gw, pending) = (gw.clone(), d.clone());
    let built = tokio::task::spawn_blocking(move || params(&gw, &pending))
        .await
        .unwrap_or_else(|e| Err(format!("it did not finish: {e}")));
    let p = match built {
        Ok(p) => p,
        Err(e) => return respond(d, &format!("cannot build the confirmation: {e}")),
    };
    let refuse = |why: &str| {
        CallToolResponse::from(super::answer::refusal_with(
            d,
            &format!(
                "{why}; or the user `{}` approves out of band (`{line}`), then call this tool again with the same arguments",
                session.user
            ),
        ))
    };
    let none = Map::new();
    match ask_form(
        sealer,
        STEP_UP,
        op,
        &session.user,
        &none,
        p,
        request,
        ctx,
        &refuse,
    )
    .await
    {
        Form::Answered(r) => on_result(d, &r),
        Form::Respond(r) => Answer::Respond(r),
    }
}

/// Whether the second half of a four-eyes approval of `op` is at hand: an
/// approval by someone other than `user` dropped in the approvals folder
/// (`dropped`), or submitted to the store (`ipc approve --submit`, the
/// approval page) and not expired; in either case not used up (by an
/// execution of a read).
pub fn second_half(gw: &Gateway, op: &str, user: &str, dropped: &[Value]) -> bool {
    // an approval a read's execution used up counts for nothing
    gw.unused_approvals(dropped.to_vec())
        .iter()
        .any(|a| a["approval"]["approver"].as_str() != Some(user))
        || gw.pending_op(op).is_ok_and(|mut p| match gw.now() {
            Ok(now) => {
                p.approvals = gw.unused_approvals(std::mem::take(&mut p.approvals));
                p.approved_by(now).iter().any(|n| n != user)
            }
            // no clock, no second half: the refusal stands
            Err(_) => false,
        })
}

/// What a four-eyes refusal tells the agent (and through it the user)
/// happens next: which half is given out of band and how (the exact
/// command), and which half is then asked through this client.
pub fn four_eyes_next(
    gw: &Gateway,
    d: &Decision,
    session: &SessionConfig,
    config: &std::path::Path,
) -> String {
    let op = d.operation_hash.as_deref().unwrap_or("");
    let user = &session.user;
    let (owner, roles) = match gw.pending_op(op) {
        Ok(p) => (p.owner, p.roles),
        Err(_) => (user.clone(), vec![]),
    };
    let mut who: Vec<&String> = gw
        .world()
        .approvers
        .iter()
        .filter(|(name, a)| {
            *name != user
                && a.may_approve_for(&owner, None)
                && roles.iter().all(|r| a.may_approve_for(&owner, Some(r)))
        })
        .map(|(name, _)| name)
        .collect();
    who.sort();
    let second = match who.as_slice() {
        [] => format!(
            "a second approver of `{owner}`{} (none is declared in the world's `[approvers]` yet)",
            if roles.is_empty() {
                String::new()
            } else {
                format!(" with the role `{}`", roles.join("` and `"))
            }
        ),
        [one] => format!("`{one}`"),
        many => format!(
            "one of {}",
            many.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let name = who.first().map_or("NAME", |n| n.as_str());
    let first = approve_line(gw, config, op, name);
    let mut t = format!(
        "four eyes: two people approve this operation, and this client can ask only one of them. \
         1. Out of band, first: {second} signs it with `{first}` \
         (it shows the operation before signing), or on the approval page of `ipc serve`"
    );
    if let Some(dir) = &session.approvals_dir {
        t.push_str(&format!(
            ", or drops the output of `ipc approve ... -o FILE` (without `--submit`) in `{}`",
            dir.display()
        ));
    }
    if session.user_key.is_some() {
        t.push_str(&format!(
            ". 2. Then call this tool again with the same arguments: the user `{user}` is asked to confirm through this client (the other half), and the operation runs once both halves are in"
        ));
    } else {
        t.push_str(&format!(
            ". 2. This session holds no approval key for the user, so the user `{user}` approves out of band too (`{}`); then call this tool again with the same arguments",
            approve_line(gw, config, op, user)
        ));
    }
    t
}

/// The command that approves `op` as `who` out of band, ready to run.
/// The config is named by its absolute path: the command is run from
/// wherever the approver is.
pub fn approve_line(gw: &Gateway, config: &std::path::Path, op: &str, who: &str) -> String {
    let config = std::path::absolute(config).unwrap_or_else(|_| config.to_path_buf());
    format!(
        "ipc approve --config {} --operation {op} --as {who} --key {} --submit",
        config.display(),
        key_arg(gw, who)
    )
}

/// What `--key` is for the approver `name`: the secret key beside the
/// public key the world names for them when this machine holds it (where
/// `ipc keygen` writes it), else a placeholder, never a made-up path that
/// looks real.
fn key_arg(gw: &Gateway, name: &str) -> String {
    gw.world()
        .approver_key_files
        .get(name)
        .map(|public| public.with_extension("key"))
        .and_then(|secret| std::path::absolute(secret).ok())
        .filter(|secret| secret.is_file())
        .map_or_else(
            || format!("PATH/TO/{name}.key"),
            |secret| secret.display().to_string(),
        )
}

fn cannot_elicit() -> &'static str {
    "this client does not support elicitation, so the user cannot be asked to confirm; use a client that does"
}

#[cfg(test)]
mod tests {
    use super::Sealer;
    use proptest::prelude::*;

    /// A state opens only in the process that sealed it, for the operation
    /// and the user it was sealed for.
    #[test]
    fn a_state_is_bound_to_its_process_operation_and_user() {
        let s = Sealer::new().unwrap();
        let state = s.seal("sha256:aa", "emma").unwrap();
        assert!(s.open(&state, "sha256:aa", "emma").is_ok());
        assert!(s.open(&state, "sha256:ab", "emma").is_err());
        assert!(s.open(&state, "sha256:aa", "noah").is_err());
        let other = Sealer::new().unwrap();
        assert!(other.open(&state, "sha256:aa", "emma").is_err());
    }

    proptest! {
        /// Any edit of a sealed state is refused.
        #[test]
        fn an_edited_state_is_refused(pos in 0usize..400, c in proptest::char::range('!', '~')) {
            let s = Sealer::new().unwrap();
            let state = s.seal("sha256:aa", "emma").unwrap();
            let mut chars: Vec<char> = state.chars().collect();
            let i = pos % chars.len();
            prop_assume!(chars[i] != c);
            chars[i] = c;
            let edited: String = chars.into_iter().collect();
            prop_assert!(s.open(&edited, "sha256:aa", "emma").is_err());
        }
    }
}
