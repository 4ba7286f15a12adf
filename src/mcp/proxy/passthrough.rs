//! A passthrough tool: forwarded as is while the session's mandates stand
//! ([`super::standing`]), then its receipt.

use super::answer::error_result;
use super::{Proxy, Routed};
use crate::gateway::outcome::ProxyCall;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Value, json};

impl Proxy {
    /// A passthrough: forwarded as is, then its receipt (the hashes of the
    /// arguments and of the answer, the status). A call whose receipt cannot
    /// be written gives the agent no result.
    pub(super) async fn passthrough(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
    ) -> CallToolResult {
        // a dead server is started again here (the call's error otherwise
        // comes from `forward`), and may declare the tool otherwise now
        let _ = self.client(&routed.config.server).await;
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, request).await;
        }
        if let Some(why) = self.session_ended().await {
            return self.refuse(&request.name, request, &why).await;
        }
        let args = request.arguments.clone().unwrap_or_default();
        let arguments = Value::Object(args.clone());
        let (result, answer) = match self.forward(&routed.config, args).await {
            Ok(r) => {
                let v = serde_json::to_value(&r).unwrap_or(Value::Null);
                (r, v)
            }
            Err(e) => (error_result(e.clone()), json!({ "error": e })),
        };
        let server = routed.config.server.clone();
        let tool = routed.config.tool.clone();
        let is_error = result.is_error.unwrap_or(false);
        let recorded = self
            .blocking(move |gw| {
                gw.record_call(&ProxyCall::Passthrough {
                    server: &server,
                    tool: &tool,
                    arguments: &arguments,
                    is_error,
                    result: &answer,
                })
            })
            .await;
        match recorded {
            Ok(Ok(_)) => result,
            Ok(Err(e)) => error_result(format!(
                "the call's receipt could not be recorded, so its result is withheld: {e}"
            )),
            Err(e) => error_result(e),
        }
    }

    /// Why no call is forwarded any more: a mandate of the session expired
    /// or was revoked (or that cannot be known); `None` while it stands.
    pub(super) async fn session_ended(&self) -> Option<String> {
        let inner = self.inner.clone();
        let why = match self.blocking(move |gw| inner.standing.check(gw)).await {
            Ok(Ok(None)) => return None,
            Ok(Ok(Some(why))) => why,
            Ok(Err(e)) | Err(e) => format!("the session's mandates cannot be checked: {e}"),
        };
        let next = if self.inner.session.issued {
            "every call is refused until a new session is started (`ipc mcp --new-session`)"
        } else {
            "every call is refused until `[session] token` names a mandate that stands (`ipc token issue`)"
        };
        Some(format!("{why}; {next}"))
    }
}
