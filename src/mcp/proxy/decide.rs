//! A mapped tool's call: its arguments to a proposal, the gateway's
//! decision (with a step-up on PENDING, `step_up.rs`), and on ALLOW the
//! downstream call the decision recorded, sent once (a write) or at each
//! call (a read).

use super::answer::{error_result, refusal, stored_result};
use super::outcomes::Seen;
use super::{MAX_ARGS_BYTES, NOT_RECORDED, Proxy, Routed};
use crate::gateway::approval::SignedApproval;
use crate::gateway::outcome::ExternalOutcome;
use crate::gateway::secret::SecretValues;
use crate::gateway::{Ask, Decision, Input, Outcome};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value, json};

impl Proxy {
    /// The gateway's decision, off the async workers (it is synchronous and
    /// writes the store). An ALLOW records the downstream call it
    /// dispatches (`ToolConfig::downstream_call`) before it is made.
    pub(super) async fn decide(&self, routed: &Routed, input: Input) -> Result<Decision, String> {
        let gw = self.inner.gateway.clone();
        let tool = routed.config.clone();
        let effect = tool.effect();
        let dispatch = move |resolved: &Map<String, Value>, secrets: &SecretValues| {
            tool.downstream_call(resolved, secrets)?.record()
        };
        // the outcomes answered since the last decision commit with this one
        let outcomes = &self.inner.outcomes;
        let earlier = outcomes.take(None);
        let n = earlier.len();
        let gw2 = gw.clone();
        let decided = tokio::task::spawn_blocking(move || {
            let mut out = Vec::with_capacity(1);
            let ask = Ask::one(&input)
                .dispatching(&dispatch, effect)
                .after(&earlier);
            let r = gw2.decide_all(ask, &mut out).map(|links| {
                let d = out
                    .pop()
                    .unwrap_or_else(|| Decision::unrecorded("no decision"));
                (d, links)
            });
            (earlier, r)
        })
        .await;
        match decided {
            Ok((earlier, Ok((d, Some(links))))) => {
                outcomes.settle(&earlier, links.into_iter().map(Ok).collect());
                Ok(d)
            }
            Ok((earlier, r)) => {
                // still taken: settled once written
                outcomes.write_later(&gw, earlier);
                r.map(|(d, _)| d)
                    .map_err(|e| format!("the gateway failed: {e}"))
            }
            Err(e) => {
                outcomes.forget(n);
                Err(format!("the decision did not finish: {e}"))
            }
        }
    }

    pub(super) fn input(
        &self,
        routed: &Routed,
        proposal: Value,
        malformed: Option<String>,
        approvals: Vec<Value>,
    ) -> Input {
        Input {
            proposal,
            mandate: Some(self.current_mandate(routed)),
            approvals,
            malformed,
        }
    }

    /// Approvals dropped out of band for this operation (`ipc approve`
    /// output, one JSON file each); unreadable files and approvals of other
    /// operations are skipped.
    pub(super) fn dropped_approvals(&self, op: &str) -> Vec<Value> {
        let Some(dir) = &self.inner.session.approvals_dir else {
            return vec![];
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return vec![];
        };
        let mut out = vec![];
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if !meta.is_file() || meta.len() > MAX_ARGS_BYTES as u64 {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(e.path()) else {
                continue;
            };
            let Ok(sa) = serde_json::from_str::<SignedApproval>(&text) else {
                continue;
            };
            if sa.approval.operation_hash == op
                && let Ok(v) = serde_json::to_value(&sa)
            {
                out.push(v);
            }
        }
        out
    }

    /// A step-up approval by the mandate's user for `op`, signed by the
    /// proxy with the user's key after the user accepted.
    pub(super) fn mint(&self, op: &str) -> Result<Value, String> {
        let key = self
            .inner
            .session
            .user_key
            .as_ref()
            .ok_or("no approval key for the user in this session")?;
        let expires = self.inner.gateway.now().map_err(|e| e.to_string())? + 300;
        let sa = SignedApproval::issue(&self.inner.session.user, op, expires, key)
            .map_err(|e| e.to_string())?;
        serde_json::to_value(sa).map_err(|e| e.to_string())
    }

    pub(super) async fn call_mapped(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        // a dead downstream is started again before anything is decided: a
        // decision commits the budget, which a server that cannot be
        // reached must not spend
        if let Err(reason) = self.client(&routed.config.server).await {
            return self.refuse(&request.name, request, &reason).await.into();
        }
        // started again just now, it may declare the tool otherwise
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, request).await.into();
        }
        let args = request.arguments.clone().unwrap_or_default();
        let size = serde_json::to_string(&args).map_or(usize::MAX, |s| s.len());
        let (proposal, malformed) = if size > MAX_ARGS_BYTES {
            (
                Value::Null,
                Some(format!(
                    "the arguments are {size} bytes, more than the {MAX_ARGS_BYTES} accepted"
                )),
            )
        } else {
            match routed.config.to_proposal(&args) {
                Ok(p) => (p, None),
                Err(reason) => (Value::Null, Some(reason)),
            }
        };
        let first = match self
            .decide(
                routed,
                self.input(routed, proposal.clone(), malformed, vec![]),
            )
            .await
        {
            Ok(d) => d,
            Err(e) => return error_result(e).into(),
        };
        let d = if first.decision == Outcome::Pending {
            match self.step_up(routed, first, &proposal, request, ctx).await {
                Ok(d) => d,
                Err(resp) => return resp,
            }
        } else {
            first
        };
        match d.decision {
            Outcome::Allow => self.execute(routed, &d).await.into(),
            Outcome::Shadow => self.forward_in_shadow(routed, args, &d).await.into(),
            _ => refusal(&d).into(),
        }
    }

    /// A SHADOW decision (`enforce = false`): the call goes on as the
    /// agent made it, the gateway's decision recorded and attached to the
    /// answer (`_meta`, [`DECISION_META`]). The agent's own arguments are
    /// sent; what the config fills (a claim, a constant) is added from the
    /// decision where it resolved that far.
    async fn forward_in_shadow(
        &self,
        routed: &Routed,
        mut args: serde_json::Map<String, Value>,
        d: &Decision,
    ) -> CallToolResult {
        if let Ok(filled) = routed.config.to_downstream(&d.resolved) {
            for (k, v) in filled {
                args.entry(k).or_insert(v);
            }
        }
        let mut r = match self.forward(&routed.config, args).await {
            Ok(r) => r,
            Err(reason) => error_result(reason),
        };
        if let Ok(v) = serde_json::to_value(d) {
            let mut meta = r.meta.take().map(|m| m.0).unwrap_or_default();
            meta.insert(super::answer::DECISION_META.to_string(), v);
            r.meta = Some(rmcp::model::MetaObject(meta));
        }
        r
    }

    /// An ALLOW: the downstream executes with the trusted values, once (a
    /// write) or at this call (a read, whose every call is decided and
    /// sent). The decision is committed; the outcome is recorded after the
    /// answer, under the operation hash (a write) or the read's execution.
    pub(super) async fn execute(&self, routed: &Routed, d: &Decision) -> CallToolResult {
        let Some(op) = d.operation_hash.clone() else {
            return error_result("an allowed operation without an operation hash".into());
        };
        let outcomes = &self.inner.outcomes;
        if d.replayed {
            return match outcomes.seen(&op) {
                Seen::Running => error_result(format!(
                    "the same operation ({op}) is running now; wait for its result instead of calling again"
                )),
                Seen::Answered(o) => stored_result(&o),
                Seen::Unknown => match self
                    .blocking({
                        let op = op.clone();
                        move |gw| gw.outcome(&op)
                    })
                    .await
                {
                    Ok(Ok(Some(o))) => stored_result(&o),
                    Ok(Ok(None)) => error_result(format!(
                        "{NOT_RECORDED}: the operation {op} was allowed and dispatched before, by another instance of the proxy on this store that may still be running it, or by one that stopped during the call; it is not sent again; call again in a moment to read its result once recorded; if none is ever recorded, the outcome is unknown: ask the user"
                    )),
                    Ok(Err(e)) => error_result(format!("the store failed: {e}")),
                    Err(e) => error_result(e),
                },
            };
        }
        // a read's execution has a key of its own: never answered to a
        // retry (the gateway decides each call of a read afresh)
        let op = d.execution.clone().unwrap_or(op);
        if !outcomes.running(&op) {
            return error_result("the proxy's state is poisoned".into());
        }
        let executor = format!("mcp:{}/{}", routed.config.server, routed.config.tool);
        // what is sent is what the decision's receipt recorded: the same
        // function built both, and a call that differs is not sent; a
        // secret goes downstream as the value its commitment binds, and
        // what is stored of the answer never holds it
        let call = routed
            .config
            .downstream_call(&d.resolved, &d.secrets)
            .and_then(|c| {
                let recorded = d.result.as_ref().and_then(|r| r.get("downstream"));
                if recorded == Some(&c.record()?) {
                    Ok(c)
                } else {
                    Err("the call differs from the one the decision recorded".into())
                }
            });
        let outcome = match call {
            Err(reason) => ExternalOutcome {
                executor,
                is_error: true,
                result: json!({"error": format!("the trusted values do not map back onto the tool: {reason}")}),
            },
            Ok(call) => match self.forward(&routed.config, call.arguments).await {
                Ok(r) => ExternalOutcome {
                    executor,
                    is_error: r.is_error.unwrap_or(false),
                    result: serde_json::to_value(&r).unwrap_or(Value::Null),
                },
                Err(reason) => ExternalOutcome {
                    executor,
                    is_error: true,
                    result: json!({ "error": reason }),
                },
            },
        };
        let outcome = ExternalOutcome {
            result: d.secrets.scrub(&outcome.result),
            ..outcome
        };
        outcomes.answered(&op, &outcome);
        stored_result(&outcome)
    }
}
