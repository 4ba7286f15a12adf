//! `intentplane_request_mandate` in the proxy: the agent's request shown
//! to the user, the answer read back, the child mandate issued and kept
//! (see [`crate::mcp::intent`]).

use super::elicit::{self, Form};
use super::{Proxy, error_result};
use crate::gateway::mandate::MandateToken;
use crate::mcp::intent::{self, Item, Request};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    ElicitationAction,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

/// The purpose a request's 2026-07-28 state is sealed for.
const PURPOSE: &str = "intentplane-mandate-request";

impl Proxy {
    /// The agent asks for a mandate: parsed, shown to the user, and on
    /// acceptance issued as a child of the session's mandate.
    pub(super) async fn request_mandate(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let args = request.arguments.clone().unwrap_or_default();
        let size = serde_json::to_string(&args).map_or(usize::MAX, |s| s.len());
        if size > super::MAX_ARGS_BYTES {
            let why = format!(
                "the arguments are {size} bytes, more than the {} accepted",
                super::MAX_ARGS_BYTES
            );
            return self.refuse_request(request, &why).await;
        }
        let inner = &self.inner;
        let parsed = {
            let (gw, bundle, parents) = (
                inner.gateway.clone(),
                &inner.bundle,
                &inner.session.mandates,
            );
            intent::parse(&gw, bundle, parents, &args)
        };
        let (req, parent) = match parsed {
            Ok(x) => x,
            Err(why) => return self.refuse_request(request, &why).await,
        };
        let now = match inner.gateway.now() {
            Ok(t) => t,
            Err(e) => return error_result(e.to_string()).into(),
        };
        // the child is made before the user is asked: a request the
        // session's mandate cannot hold is refused without a question
        let all: Vec<Item> = req.items.clone();
        let plain = match self.child(&parent, &req, &all, now) {
            Ok((_, plain)) => plain,
            Err(why) => return self.refuse_request(request, &why).await,
        };
        let message = intent::message(&req, &parent, &plain);
        let form = match intent::form(&req, message.clone()) {
            Ok(f) => f,
            Err(e) => return error_result(format!("cannot build the confirmation: {e}")).into(),
        };
        let shown = match serde_json::to_value(&form)
            .map_err(|e| e.to_string())
            .and_then(|f| crate::canonical::hash_of(&f).map_err(|e| e.to_string()))
        {
            Ok(h) => h,
            Err(e) => return error_result(format!("cannot build the confirmation: {e}")).into(),
        };
        let refuse = |why: &str| {
            CallToolResponse::from(error_result(format!(
                "the mandate request was not confirmed: {why}"
            )))
        };
        let user = inner.session.user.clone();
        let answer = match elicit::ask_form(
            &inner.sealer,
            PURPOSE,
            &shown,
            &user,
            form,
            request,
            ctx,
            &refuse,
        )
        .await
        {
            Form::Answered(r) => r,
            Form::Respond(r) => return *r,
        };
        let granted = match answer.action {
            ElicitationAction::Accept => match intent::granted(&req, answer.content.as_ref()) {
                Ok(g) => Some(g),
                Err(e) => return refuse(&format!("the answer was refused ({e})")),
            },
            ElicitationAction::Decline => None,
            _ => return refuse("the user cancelled"),
        };
        let child = match &granted {
            Some(g) => match self.child(&parent, &req, g, now) {
                Ok((c, plain)) => Some((c, plain)),
                Err(why) => return self.refuse_request(request, &why).await,
            },
            None => None,
        };
        let config = inner.config_path.clone();
        let (req2, parent2, g2) = (req.clone(), parent.clone(), granted.clone());
        let c2 = child.as_ref().map(|(c, _)| c.clone());
        let shown2 = shown.clone();
        let recorded = self
            .blocking(move |gw| {
                intent::record(
                    gw.store().as_ref(),
                    &config,
                    now,
                    &req2,
                    &parent2,
                    g2.as_deref().unwrap_or(&[]),
                    c2.as_ref(),
                    &shown2,
                )
            })
            .await;
        let receipt = match recorded {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return error_result(format!(
                    "the answer could not be recorded, so nothing was granted: {e}"
                ))
                .into();
            }
            Err(e) => return error_result(e).into(),
        };
        let receipt_line = format!("receipt #{} {}", receipt.seq, receipt.hash);
        let Some((token, plain)) = child else {
            return error_result(format!(
                "the user declined the mandate request: nothing was granted, and the session's calls stay decided under its mandate `{}`\n{receipt_line}",
                parent.mandate.id
            ))
            .into();
        };
        let id = token["mandate"]["id"].as_str().unwrap_or("").to_string();
        if let Ok(mut children) = inner.children.lock() {
            children.insert(req.pack.clone(), token.clone());
        }
        let granted = granted.unwrap_or_default();
        let not = req.items.len() - granted.len();
        let mut text = format!(
            "the user granted the mandate `{id}` (a child of `{}`): {} of the {} values asked{}; the calls of pack `{}` are now decided under it\nit allows: {plain}\n{receipt_line}",
            parent.mandate.id,
            granted.len(),
            req.items.len(),
            if not > 0 {
                format!(", {not} not granted")
            } else {
                String::new()
            },
            req.pack
        );
        if !granted.is_empty() {
            text.push_str("\ngranted:");
            for g in &granted {
                text.push_str(&format!("\n  {} {}", g.claim, g.shown));
            }
        }
        let mut r = CallToolResult::success(vec![Content::text(text)]);
        r.structured_content = Some(json!({
            "mandate": id,
            "parent": parent.mandate.id,
            "granted": granted.iter().map(|g| json!({"claim": g.claim, "value": g.value})).collect::<Vec<_>>(),
            "receipt": {"seq": receipt.seq, "hash": receipt.hash},
        }));
        r.into()
    }

    /// A request refused before the user is asked, with its receipt.
    async fn refuse_request(
        &self,
        request: &CallToolRequestParams,
        why: &str,
    ) -> CallToolResponse {
        let receipt = self.record_refusal(intent::TOOL, request, why).await;
        error_result(format!("the mandate request was refused: {why}\n{receipt}")).into()
    }

    /// The child of `parent` holding exactly `granted` of `req`, signed
    /// with the session's issuer key, and what it allows in plain words.
    fn child(
        &self,
        parent: &MandateToken,
        req: &Request,
        granted: &[Item],
        now: i64,
    ) -> Result<(Value, String), String> {
        let key = self
            .inner
            .session
            .issuer_key
            .as_ref()
            .ok_or("this session holds no key to sign a mandate")?;
        intent::issue_child(&self.inner.bundle, parent, req, granted, now, key)
    }
}
