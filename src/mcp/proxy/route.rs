//! Routing a `tools/call`: `intentplane_request_mandate`, a passthrough
//! or a mapped tool; a tool not listed, or declared otherwise by a
//! restarted server, refused before any decision, with its receipt.

use super::answer::error_result;
use super::{Proxy, Routed};
use crate::gateway::outcome::ProxyCall;
use crate::mcp::config::ToolMode;
use crate::mcp::intent;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

impl Proxy {
    pub(super) async fn route(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> CallToolResponse {
        if request.name == intent::TOOL && self.inner.request_tool.is_some() {
            return self.request_mandate(&request, &context).await;
        }
        let Some(routed) = self.routed(&request.name) else {
            return self
                .refuse(&request.name, &request, "not listed in the config")
                .await
                .into();
        };
        // the server may have been started again by an earlier call
        if self.declaration_changed(&routed.config.tool) {
            return self.refuse_changed(routed, &request).await.into();
        }
        match &routed.config.mode {
            ToolMode::Passthrough => self.passthrough(routed, &request).await.into(),
            ToolMode::Action { .. } => self.call_mapped(routed, &request, &context).await,
        }
    }

    pub(super) fn declaration_changed(&self, tool: &str) -> bool {
        self.inner.changed.lock().map_or(true, |c| c.contains(tool))
    }

    pub(super) async fn refuse_changed(
        &self,
        routed: &Routed,
        request: &CallToolRequestParams,
    ) -> CallToolResult {
        let reason = format!(
            "the server `{}` was started again and declares `{}` otherwise than when the config was checked against it; check the config again (`ipc mcp --config {} --check --servers`) and restart `ipc mcp`",
            routed.config.server,
            routed.config.tool,
            self.inner.config_path.display()
        );
        self.refuse(&request.name, request, &reason).await
    }

    /// A call refused before any decision, with its receipt.
    pub(super) async fn refuse(
        &self,
        tool: &str,
        request: &CallToolRequestParams,
        reason: &str,
    ) -> CallToolResult {
        let receipt = self.record_refusal(tool, request, reason).await;
        error_result(format!(
            "tool `{}` is not available through intentplane: {reason}\n{receipt}",
            crate::base::json::echo(tool)
        ))
    }

    /// Records a call refused before any decision; the receipt's line for
    /// the agent (or why there is none).
    pub(super) async fn record_refusal(
        &self,
        tool: &str,
        request: &CallToolRequestParams,
        reason: &str,
    ) -> String {
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let (t, why) = (tool.to_string(), reason.to_string());
        let recorded = self
            .blocking(move |gw| {
                gw.record_call(&ProxyCall::Refused {
                    tool: &t,
                    arguments: &arguments,
                    reason: &why,
                })
            })
            .await;
        match recorded {
            Ok(Ok(r)) => format!("receipt #{} {}", r.seq, r.hash),
            Ok(Err(e)) => format!("its receipt could not be recorded: {e}"),
            Err(e) => e,
        }
    }
}
