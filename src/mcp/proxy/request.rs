//! `intentplane_request_mandate` in the proxy: the agent's request shown
//! to the user, the answer read back, the child mandate issued and kept
//! (see [`crate::mcp::intent`]).

use super::elicit::{self, Form};
use super::{Proxy, error_result};
use crate::gateway::chain::ChildRequest;
use crate::gateway::mandate::MandateToken;
use crate::mcp::intent;
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
        let (pack, parent, req) = match intent::parse(&inner.session.mandates, &args) {
            Ok(x) => x,
            Err(why) => return self.refuse_request(request, &why).await,
        };
        let now = match inner.gateway.now() {
            Ok(t) => t,
            Err(e) => return error_result(e.to_string()).into(),
        };
        // the child the agent asks for, checked against the session's
        // mandate and rendered for the user; a request that widens it
        // beyond a claim value is refused without a question
        // the child's id: drawn when the user is first asked, and carried
        // by the 2026-07-28 state to the second round, so that the user is
        // shown, and granted, one and the same child
        let user = inner.session.user.clone();
        let new_era = ctx
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let carried = match (&request.request_state, new_era) {
            (Some(state), true) => match inner.sealer.payload(PURPOSE, state, &user) {
                Ok(p) => p.get("id").and_then(Value::as_str).map(str::to_string),
                Err(e) => {
                    return error_result(format!(
                        "the mandate request was not confirmed: the request state was refused ({e}); call the tool again without it to be asked anew"
                    ))
                    .into();
                }
            },
            _ => None,
        };
        let mut req = req;
        req.id = match carried {
            Some(id) => Some(id),
            None => match crate::gateway::approval::random_id() {
                Ok(r) => Some(format!("m-{r}")),
                Err(e) => return error_result(e.to_string()).into(),
            },
        };
        let (p2, r2) = (parent.clone(), req.clone());
        let draft = match self.blocking(move |gw| gw.draft_child(&p2, &r2)).await {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return self.refuse_request(request, &e.to_string()).await,
            Err(e) => return error_result(e).into(),
        };
        let beyond = intent::beyond_claims(&draft);
        if !beyond.is_empty() {
            let why = format!(
                "it asks for more than the session's mandate allows: {}",
                crate::gateway::chain::describe(&beyond)
            );
            return self.refuse_request(request, &why).await;
        }
        let items = intent::items(&draft, &req);
        let message = intent::message(&draft, &items);
        let form = match intent::form(&items, message.clone()) {
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
        let mut extra = serde_json::Map::new();
        extra.insert("id".into(), json!(req.id));
        let answer = match elicit::ask_form(
            &inner.sealer,
            PURPOSE,
            &shown,
            &user,
            &extra,
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
            ElicitationAction::Accept => match intent::granted(&items, answer.content.as_ref())
                .and_then(|g| intent::single_unticked(&draft, &req, &g).map(|()| g))
            {
                Ok(g) => Some(g),
                Err(e) => return refuse(&format!("the answer was refused ({e})")),
            },
            ElicitationAction::Decline => None,
            _ => return refuse("the user cancelled"),
        };
        let child = match &granted {
            Some(g) => {
                let mut ticked = req.clone();
                ticked.claims = g
                    .iter()
                    .map(|i| (i.claim.clone(), i.value.clone()))
                    .collect();
                match self.child(&parent, ticked).await {
                    Ok(c) => Some(c),
                    Err(why) => return self.refuse_request(request, &why).await,
                }
            }
            None => None,
        };
        let config = inner.config_path.clone();
        let (pack2, items2, parent2, g2) =
            (pack.clone(), items.clone(), parent.clone(), granted.clone());
        let c2 = child.as_ref().map(|(c, _)| c.clone());
        let shown2 = shown.clone();
        let recorded = self
            .blocking(move |gw| {
                intent::record(
                    gw.store().as_ref(),
                    &config,
                    now,
                    &pack2,
                    &items2,
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
            children.insert(pack.clone(), token.clone());
        }
        let granted = granted.unwrap_or_default();
        let not = items.len() - granted.len();
        let mut text = format!(
            "the user granted the mandate `{id}` (a child of `{}`): {} of the {} values asked{}; the calls of pack `{}` are now decided under it\nit allows: {plain}\n{receipt_line}",
            parent.mandate.id,
            granted.len(),
            items.len(),
            if not > 0 {
                format!(", {not} not granted")
            } else {
                String::new()
            },
            pack
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
    async fn refuse_request(&self, request: &CallToolRequestParams, why: &str) -> CallToolResponse {
        let receipt = self.record_refusal(intent::TOOL, request, why).await;
        error_result(format!("the mandate request was refused: {why}\n{receipt}")).into()
    }

    /// The child of `parent` for `req`, issued with the session's issuer
    /// key and recorded by the gateway (its `issued` receipt); and what it
    /// allows in plain words.
    async fn child(
        &self,
        parent: &MandateToken,
        req: ChildRequest,
    ) -> Result<(Value, String), String> {
        let key = self
            .inner
            .session
            .issuer_key
            .clone()
            .ok_or("this session holds no key to sign a mandate")?;
        let parent = parent.clone();
        self.blocking(move |gw| {
            let d = gw.propose_child(&parent, &req).map_err(|e| e.to_string())?;
            let token = gw
                .issue_child(&parent, &req, &key)
                .map_err(|e| e.to_string())?;
            gw.record_child(&token, "mcp").map_err(|e| e.to_string())?;
            let v = serde_json::to_value(&token).map_err(|e| e.to_string())?;
            Ok((v, d.shown.summary))
        })
        .await?
    }
}
