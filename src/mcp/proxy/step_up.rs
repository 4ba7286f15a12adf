//! A PENDING decision: approvals dropped out of band, four eyes (level 2)
//! waiting for its second half, then the user asked through elicitation
//! (level 1, [`super::elicit`]); a decline recorded for the session's
//! `decline_for`.

use super::answer::{error_result, refusal, refusal_with};
use super::{Proxy, Routed, elicit};
use crate::gateway::{Decision, Outcome};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

impl Proxy {
    /// A PENDING decision: approvals dropped out of band, then the user
    /// through elicitation (level 1). Returns the next decision, or the
    /// response to give now (a refusal, or the 2026-07-28 input request).
    pub(super) async fn step_up(
        &self,
        routed: &Routed,
        pending: Decision,
        proposal: &Value,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Decision, CallToolResponse> {
        let Some(op) = pending.operation_hash.clone() else {
            return Err(refusal(&pending).into());
        };
        // (one a read's execution used up counts for nothing: not brought)
        let dropped = self.dropped_approvals(&op);
        let mut approvals = if dropped.is_empty() {
            dropped
        } else {
            self.blocking(move |gw| gw.unused_approvals(dropped))
                .await
                .map_err(|e| CallToolResponse::from(error_result(e)))?
        };
        let mut d = pending;
        if !approvals.is_empty() {
            d = self
                .decide(
                    routed,
                    self.input(routed, proposal.clone(), None, approvals.clone()),
                )
                .await
                .map_err(|e| CallToolResponse::from(error_result(e)))?;
            if d.decision != Outcome::Pending {
                return Ok(d);
            }
        }
        if d.level.unwrap_or(0) >= 2
            && let Some(next) = self.four_eyes_missing(&d, &op, &approvals).await?
        {
            return Err(refusal_with(&d, &next).into());
        }
        if self.inner.session.user_key.is_none() {
            let (s, config) = (&self.inner.session, &self.inner.config_path);
            let line = elicit::approve_line(&self.inner.gateway, config, &op, &s.user);
            return Err(refusal_with(
                &d,
                &format!(
                    "this session holds no approval key for the user, so the step-up cannot be confirmed through this client; the user `{}` approves out of band (`{line}`), then call this tool again with the same arguments",
                    s.user
                ),
            )
            .into());
        }
        let asked = elicit::ask(
            &self.inner.sealer,
            &self.inner.gateway,
            &d,
            request,
            ctx,
            &self.inner.session,
            &self.inner.config_path,
        )
        .await;
        match asked {
            elicit::Answer::Accepted => {}
            elicit::Answer::Declined => return Err(self.declined(&d, &op).await.into()),
            elicit::Answer::Respond(resp) => return Err(*resp),
        }
        let minted = self
            .mint(&op)
            .map_err(|e| CallToolResponse::from(error_result(e)))?;
        approvals.push(minted);
        self.decide(
            routed,
            self.input(routed, proposal.clone(), None, approvals),
        )
        .await
        .map_err(|e| CallToolResponse::from(error_result(e)))
    }

    /// A four-eyes operation `op` without its second half (out of band):
    /// what the agent is told happens next; `None` when it is at hand.
    pub(super) async fn four_eyes_missing(
        &self,
        d: &Decision,
        op: &str,
        approvals: &[Value],
    ) -> Result<Option<String>, CallToolResponse> {
        let (inner, d, op, approvals) = (
            self.inner.clone(),
            d.clone(),
            op.to_string(),
            approvals.to_vec(),
        );
        self.blocking(move |gw| {
            let (s, config) = (&inner.session, &inner.config_path);
            (!elicit::second_half(gw, &op, &s.user, &approvals))
                .then(|| elicit::four_eyes_next(gw, &d, s, config))
        })
        .await
        .map_err(|e| CallToolResponse::from(error_result(e)))
    }

    /// The user declined `op` through elicitation: recorded in the store as
    /// the user's decline (as `ipc approve --decline` does), standing for
    /// the session's `decline_for` seconds: until then the same operation
    /// is refused without asking, after that it may be asked again. The
    /// agent reads a DENY, with the decline's receipt.
    pub(super) async fn declined(&self, d: &Decision, op: &str) -> CallToolResult {
        let until = match self.inner.gateway.now() {
            Ok(now) => now.saturating_add(self.inner.session.decline_for),
            // no clock: the decline cannot be dated, nothing is recorded
            // and nothing runs
            Err(e) => return error_result(e.to_string()),
        };
        let (op, user) = (op.to_string(), self.inner.session.user.clone());
        let who = user.clone();
        let recorded = self
            .blocking(move |gw| gw.decline_until(&op, &who, Some(until)))
            .await;
        let deny = crate::gateway::pending::declined(&user, &user, Some(until));
        let mut denied = Decision {
            decision: Outcome::Deny,
            stage: deny.stage,
            reason: Some(deny.reason),
            hint: deny.hint,
            approve_by: None,
            receipt: None,
            ..d.clone()
        };
        let note = match recorded {
            Ok(Ok(r)) => {
                denied.receipt = Some(r);
                String::new()
            }
            Ok(Err(e)) => format!("the decline was not recorded: {e}"),
            Err(e) => format!("the decline was not recorded: {e}"),
        };
        refusal_with(&denied, &note)
    }
}
