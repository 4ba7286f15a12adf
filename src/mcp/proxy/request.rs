//! `intentplane_request_mandate` in the proxy: the agent's request shown
//! to the user, the answer read back, the child mandate issued and kept
//! (see [`crate::mcp::intent`]).

use super::Proxy;
use super::answer::error_result;
use super::elicit::{self, Form};
use crate::gateway::ReceiptRef;
use crate::gateway::chain::{ChildRequest, Draft};
use crate::gateway::mandate::MandateToken;
use crate::mcp::intent::{self, Item};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock as Content,
    ElicitationAction,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Value, json};

/// The purpose a request's 2026-07-28 state is sealed for.
const PURPOSE: &str = "intentplane-mandate-request";

/// What the user is asked: the request parsed and drafted as a child of
/// its pack's mandate in the session.
struct Asked {
    pack: String,
    parent: MandateToken,
    req: ChildRequest,
    draft: Draft,
    now: i64,
}

/// The user's answer to what was shown (`shown`, the hash of the form):
/// the values granted, `None` when declined.
struct Answered {
    items: Vec<Item>,
    shown: String,
    granted: Option<Vec<Item>>,
}

/// A step of the request: its result, or the response to give now.
type Step<T> = Result<T, CallToolResponse>;

impl Proxy {
    /// The agent asks for a mandate: parsed, shown to the user, and on
    /// acceptance issued as a child of the session's mandate.
    pub(super) async fn request_mandate(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        match self.request_steps(request, ctx).await {
            Ok(r) | Err(r) => r,
        }
    }

    /// Asked, answered, the child issued (when granted), the answer
    /// recorded, the agent told.
    async fn request_steps(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Step<CallToolResponse> {
        let asked = self.asked(request, ctx).await?;
        let answered = self.confirm(&asked, request, ctx).await?;
        let child = match &answered.granted {
            Some(g) => {
                let mut ticked = asked.req.clone();
                ticked.claims = g
                    .iter()
                    .map(|i| (i.claim.clone(), i.value.clone()))
                    .collect();
                match self.child(&asked.parent, ticked).await {
                    Ok(c) => Some(c),
                    Err(why) => return Err(self.refuse_request(request, &why).await),
                }
            }
            None => None,
        };
        let receipt = self
            .record_answer(&asked, &answered, child.as_ref().map(|(c, _)| c))
            .await?;
        Ok(self.told(&asked, answered, child, &receipt))
    }

    /// The request parsed and drafted; one that is too large, malformed or
    /// widens the session's mandate beyond a claim value is refused
    /// without a question.
    async fn asked(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Step<Asked> {
        let args = request.arguments.clone().unwrap_or_default();
        let size = serde_json::to_string(&args).map_or(usize::MAX, |s| s.len());
        if size > super::MAX_ARGS_BYTES {
            let why = format!(
                "the arguments are {size} bytes, more than the {} accepted",
                super::MAX_ARGS_BYTES
            );
            return Err(self.refuse_request(request, &why).await);
        }
        let inner = &self.inner;
        let (pack, parent, mut req) = match intent::parse(&inner.session.mandates, &args) {
            Ok(x) => x,
            Err(why) => return Err(self.refuse_request(request, &why).await),
        };
        let now = inner
            .gateway
            .now()
            .map_err(|e| CallToolResponse::from(error_result(e.to_string())))?;
        // the child the agent asks for, checked against the session's
        // mandate and rendered for the user; a request that widens it
        // beyond a claim value is refused without a question
        let (id, issued_at) = self
            .child_id(request, ctx)
            .map_err(|e| CallToolResponse::from(error_result(e)))?;
        req.id = Some(id);
        let (p2, r2) = (parent.clone(), req.clone());
        let draft = match self
            .blocking(move |gw| gw.draft_child_at(&p2, &r2, issued_at))
            .await
        {
            Ok(Ok(d)) => d,
            Ok(Err(e)) => return Err(self.refuse_request(request, &e.to_string()).await),
            Err(e) => return Err(error_result(e).into()),
        };
        let beyond = intent::beyond_claims(&draft);
        if !beyond.is_empty() {
            let why = format!(
                "it asks for more than the session's mandate allows: {}",
                crate::gateway::chain::describe(&beyond)
            );
            return Err(self.refuse_request(request, &why).await);
        }
        Ok(Asked {
            pack,
            parent,
            req,
            draft,
            now,
        })
    }

    /// The child's id: drawn when the user is first asked, and carried
    /// by the 2026-07-28 state to the second round, so that the user is
    /// shown, and granted, one and the same child. `Err`: what the agent
    /// reads.
    fn child_id(
        &self,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(String, Option<i64>), String> {
        let new_era = ctx
            .protocol_version()
            .is_some_and(|v| v >= rmcp::model::ProtocolVersion::V_2026_07_28);
        let user = &self.inner.session.user;
        let carried = match (&request.request_state, new_era) {
            (Some(state), true) => match self.inner.sealer.payload(PURPOSE, state, user) {
                Ok(p) => p
                    .get("id")
                    .and_then(Value::as_str)
                    .map(|id| (id.to_string(), p.get("issued_at").and_then(Value::as_i64))),
                Err(e) => {
                    return Err(format!(
                        "the mandate request was not confirmed: the request state was refused ({e}); call the tool again without it to be asked anew"
                    ));
                }
            },
            _ => None,
        };
        match carried {
            Some(carried) => Ok(carried),
            None => match crate::gateway::approval::random_id() {
                Ok(r) => Ok((format!("m-{r}"), None)),
                Err(e) => Err(e.to_string()),
            },
        }
    }

    /// The draft shown to the user as a form of values to tick, and the
    /// answer read back.
    async fn confirm(
        &self,
        asked: &Asked,
        request: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Step<Answered> {
        let (draft, req) = (&asked.draft, &asked.req);
        let items = intent::items(draft, req);
        let message = intent::message(draft, &items);
        let cannot = |e: String| {
            CallToolResponse::from(error_result(format!("cannot build the confirmation: {e}")))
        };
        let form = intent::form(&items, message).map_err(cannot)?;
        let shown = serde_json::to_value(&form)
            .map_err(|e| e.to_string())
            .and_then(|f| crate::canonical::hash_of(&f).map_err(|e| e.to_string()))
            .map_err(cannot)?;
        let refuse = |why: &str| {
            CallToolResponse::from(error_result(format!(
                "the mandate request was not confirmed: {why}"
            )))
        };
        let mut extra = serde_json::Map::new();
        extra.insert("id".into(), json!(req.id));
        // and the time it is issued from, shown as "valid from": the second
        // round shows the very form the first did, whatever second it is
        extra.insert("issued_at".into(), json!(draft.mandate.issued_at));
        let inner = &self.inner;
        let answer = match elicit::ask_form(
            &inner.sealer,
            PURPOSE,
            &shown,
            &inner.session.user,
            &extra,
            form,
            request,
            ctx,
            &refuse,
        )
        .await
        {
            Form::Answered(r) => r,
            Form::Respond(r) => return Err(*r),
        };
        let granted = match answer.action {
            ElicitationAction::Accept => match intent::granted(&items, answer.content.as_ref())
                .and_then(|g| intent::single_unticked(draft, req, &g).map(|()| g))
            {
                Ok(g) => Some(g),
                Err(e) => return Err(refuse(&format!("the answer was refused ({e})"))),
            },
            ElicitationAction::Decline => None,
            _ => return Err(refuse("the user cancelled")),
        };
        Ok(Answered {
            items,
            shown,
            granted,
        })
    }

    /// The answer recorded (granted or declined, with the child issued):
    /// nothing is granted unless it is.
    async fn record_answer(
        &self,
        asked: &Asked,
        answered: &Answered,
        child: Option<&Value>,
    ) -> Step<ReceiptRef> {
        let config = self.inner.config_path.clone();
        let (now, pack2, parent2) = (asked.now, asked.pack.clone(), asked.parent.clone());
        let (items2, g2) = (answered.items.clone(), answered.granted.clone());
        let c2 = child.cloned();
        let shown2 = answered.shown.clone();
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
        match recorded {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(error_result(format!(
                "the answer could not be recorded, so nothing was granted: {e}"
            ))
            .into()),
            Err(e) => Err(error_result(e).into()),
        }
    }

    /// What the agent reads: declined, or the child granted (from now on
    /// its pack's calls are decided under it) and what it allows.
    fn told(
        &self,
        asked: &Asked,
        answered: Answered,
        child: Option<(Value, String)>,
        receipt: &ReceiptRef,
    ) -> CallToolResponse {
        let (pack, parent, items) = (&asked.pack, &asked.parent, &answered.items);
        let receipt_line = format!("receipt #{} {}", receipt.seq, receipt.hash);
        let Some((token, plain)) = child else {
            return error_result(format!(
                "the user declined the mandate request: nothing was granted, and the session's calls stay decided under its mandate `{}`\n{receipt_line}",
                parent.mandate.id
            ))
            .into();
        };
        let id = token["mandate"]["id"].as_str().unwrap_or("").to_string();
        if let Ok(mut children) = self.inner.children.lock() {
            children.insert(pack.clone(), token.clone());
        }
        let granted = answered.granted.unwrap_or_default();
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
