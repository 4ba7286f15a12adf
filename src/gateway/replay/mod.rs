//! `ipc replay`: the recorded proposals of a store decided again with
//! another bundle, on a store of the replay's own, and what would change
//! (see `docs/replay.md`, `docs/decisions/replay-reconstruction.md`).
//!
//! The recorded store is only read ([`crate::store::recorded`]). The
//! replay's gateway decides on a fresh [`MemoryStore`] seeded from the
//! world, in chain order, each decision at its receipt's `time`, with the
//! registry changes and revocations the chain records applied at their
//! place: budgets, nonces and executions are those the new bundle's own
//! decisions would have produced (an alternative history, not the
//! recorded state). Each proposal comes with its mandate token as the
//! gateway kept it ([`KEPT_TOKENS`]), verified again against the world's
//! keys; approvals are carried over as the recorded approvers' stand-in
//! signatures over the re-decided operation.

mod events;
pub mod report;

pub use report::{Report, Side, Transition};

use crate::bundle::Bundle;
use crate::gateway::approval::{Approval, SignedApproval};
use crate::gateway::chain::Verified;
use crate::gateway::world::World;
use crate::gateway::{Ask, Gateway, GatewayError, Input, MandateToken};
use crate::keys::SecretKey;
use crate::store::memory::MemoryStore;
use crate::store::recorded::Recorded;
use crate::store::{Store, StoreError};
use events::Event;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// The state namespace where the gateway keeps each mandate token, by
/// mandate id, as it first verified it (`stages/authn.rs`): what a replay
/// verifies again.
pub const KEPT_TOKENS: &str = "mandates.kept";

/// Receipts read from the recorded store at a time.
const PAGE: usize = 1024;

/// How long a carried-over approval is valid after its decision's time.
const APPROVAL_LIFETIME: i64 = 86_400;

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum ReplayError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Gateway(#[from] GatewayError),
    /// The world reads registries from tables of the store's database
    /// (`[pg_registries]`): a replay decides on a store of its own, which
    /// has no such tables, and never writes to the recorded one.
    #[error(
        "the world reads registries from database tables ({tables}): a replay decides on a store of its own, which has none"
    )]
    #[diagnostic(
        code(ipc::replay::registry_tables),
        help("replay with a world that names registry files under `[registries]`")
    )]
    RegistryTables { tables: String },
    /// No recorded store to read: neither `--store` nor the world's
    /// `store`.
    #[error("no recorded store to replay")]
    #[diagnostic(
        code(ipc::replay::no_store),
        help("give `--store FILE|URL`: the store whose receipts are decided again")
    )]
    NoStore,
    /// The world's stores are sharded and no one store was given: each
    /// shard is replayed on its own.
    #[error("the world's stores are sharded (`[store.shards]`): a replay reads one recorded chain")]
    #[diagnostic(
        code(ipc::replay::sharded),
        help("replay each shard with `--store` naming its store (its tenants' chain)")
    )]
    Sharded,
    /// The replay's stand-in approval keys cannot be made (no randomness).
    #[error("cannot make the replay's stand-in approval keys: {reason}")]
    #[diagnostic(code(ipc::replay::keys))]
    Keys { reason: String },
}

/// A kept token, verified against the world's keys and the new bundle
/// (`None`: it no longer verifies, and the replay's gateway says why).
struct Token {
    raw: Value,
    signature: String,
    verified: Option<Verified>,
}

/// The replay under way.
struct Replayer<'r> {
    recorded: &'r dyn Recorded,
    store: Arc<MemoryStore>,
    /// The world as given: verifies the kept tokens.
    verifier: Gateway,
    /// The world with stand-in approver keys: decides.
    gw: Gateway,
    /// The same, executing externally (a recorded call made outside).
    ext: Gateway,
    stand_ins: HashMap<String, SecretKey>,
    tokens: HashMap<String, Option<Arc<Token>>>,
    tally: report::Tally,
}

/// Decides every proposal `recorded` holds again with `bundle`, over
/// `world`, and counts what changes. Reads the recorded store up to its
/// head as it stood when the replay began; writes nothing to it.
pub fn replay(
    bundle: &Bundle,
    world: &World,
    recorded: &dyn Recorded,
) -> Result<Report, ReplayError> {
    let head = recorded.head()?;
    let mut r = Replayer::new(bundle, world, recorded)?;
    r.tally.report.bundle = bundle.hash.clone();
    r.tally.report.head = head
        .as_ref()
        .map(|(seq, hash)| json!({"seq": seq, "hash": hash}));
    let last = head.map(|(seq, _)| seq);
    let mut after = 0;
    loop {
        let page = recorded.page(after, PAGE)?;
        let Some(end) = page.last().map(|p| p.seq) else {
            break;
        };
        for rec in &page {
            if last.is_some_and(|l| rec.seq > l) {
                return Ok(r.tally.finish());
            }
            r.step(rec.seq, &rec.body)?;
        }
        after = end;
    }
    Ok(r.tally.finish())
}

impl<'r> Replayer<'r> {
    fn new(
        bundle: &Bundle,
        world: &World,
        recorded: &'r dyn Recorded,
    ) -> Result<Self, ReplayError> {
        if let Some(tables) = world.registry_tables_listed() {
            return Err(ReplayError::RegistryTables { tables });
        }
        let store = Arc::new(MemoryStore::forgetting_receipts());
        let mut world = world.clone();
        world.store = None;
        world.shards = None;
        // what enforcing the new bundle would have decided: never in
        // shadow (a SHADOW recorded is compared by its `would_be`), and
        // nobody notified of a replayed PENDING
        world.shadow = Default::default();
        world.notify = Default::default();
        let verifier = Gateway::new(bundle, world.clone(), store.clone())?;
        let mut stand_ins = HashMap::new();
        for (name, a) in world.approvers.iter_mut() {
            let key = SecretKey::generate().map_err(|e| ReplayError::Keys {
                reason: e.to_string(),
            })?;
            a.key = key.public();
            stand_ins.insert(name.clone(), key);
        }
        let gw = verifier.fork(world.clone(), store.clone());
        let ext = verifier.fork(world, store.clone()).execute_externally();
        Ok(Replayer {
            recorded,
            store,
            verifier,
            gw,
            ext,
            stand_ins,
            tokens: HashMap::new(),
            tally: report::Tally::default(),
        })
    }

    fn at(&mut self, time: i64) {
        self.gw.world.clock = Some(time);
        self.ext.world.clock = Some(time);
    }

    /// One recorded receipt.
    fn step(&mut self, seq: u64, body: &Value) -> Result<(), ReplayError> {
        match events::read(seq, body) {
            Event::Decision(rec) => self.decide(*rec),
            Event::Unreplayable { why, revoked } => {
                if let Some(id) = revoked {
                    self.revoke(&id)?;
                }
                self.tally.unreplayable(why);
                Ok(())
            }
            Event::Registry(c) => {
                self.at(c.time);
                match self
                    .gw
                    .change_registry(&c.pack, &c.registry, &c.owner, &c.change, &c.by)
                {
                    Ok(_) => self.tally.report.registry_changes += 1,
                    Err(e) => self.tally.refused(
                        miette::Diagnostic::code(&e)
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| e.to_string()),
                    ),
                }
                Ok(())
            }
            Event::Revoked { id, time } => {
                self.at(time);
                self.revoke(&id)?;
                self.tally.report.revocations += 1;
                Ok(())
            }
            Event::Other(kind) => {
                self.tally.other(&kind);
                Ok(())
            }
        }
    }

    fn revoke(&self, id: &str) -> Result<(), StoreError> {
        self.store.transaction(&mut |tx| {
            tx.revoke(id)?;
            Ok(Value::Null)
        })?;
        Ok(())
    }

    /// The kept token of mandate `id`, verified once.
    fn token(&mut self, id: &str) -> Result<Option<Arc<Token>>, ReplayError> {
        if let Some(t) = self.tokens.get(id) {
            return Ok(t.clone());
        }
        let t = match self.recorded.state(KEPT_TOKENS, id)? {
            Some(raw) => {
                let verified = serde_json::from_value::<MandateToken>(raw.clone())
                    .ok()
                    .and_then(|tok| self.verifier.verify_token(&tok).ok());
                let signature = raw
                    .get("signature")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                Some(Arc::new(Token {
                    raw,
                    signature,
                    verified,
                }))
            }
            None => None,
        };
        self.tokens.insert(id.to_string(), t.clone());
        Ok(t)
    }

    /// One recorded decision taken again.
    fn decide(&mut self, mut rec: events::Recorded) -> Result<(), ReplayError> {
        let Some(token) = self.token(&rec.mandate)? else {
            self.tally
                .unreplayable("the mandate was not kept (recorded before replay kept tokens)");
            return Ok(());
        };
        if let Some(id) = &rec.revoked {
            self.revoke(id)?;
        }
        self.at(rec.time);
        let input = Input {
            approvals: self.approvals(&rec),
            proposal: std::mem::take(&mut rec.proposal),
            mandate: Some(token.raw.clone()),
            malformed: None,
        };
        let gw = if rec.external.is_some() {
            &self.ext
        } else {
            &self.gw
        };
        // the token verified with the world's own keys (a child's is
        // signed by its parent's user, whose key the stand-ins replace)
        if let (Some(v), Ok(mut cache)) = (&token.verified, gw.verified.lock()) {
            cache
                .entry(token.signature.clone())
                .or_insert_with(|| (token.raw.clone(), v.clone()));
        }
        let call = |_: &Map<String, Value>, _: &crate::gateway::secret::SecretValues| {
            Ok(json!({"replay": "not sent"}))
        };
        let mut ask = Ask::one(&input);
        if let Some(effect) = rec.external {
            ask = ask.dispatching(&call, effect);
        }
        let mut out = Vec::with_capacity(1);
        gw.decide_all(ask, &mut out)?;
        let Some(d) = out.pop() else {
            self.tally
                .unreplayable("the replay's store decided nothing");
            return Ok(());
        };
        self.tally.decided(rec.action, rec.side, Side::decided(&d));
        Ok(())
    }

    /// The recorded approvers' approvals of the operation as the new
    /// bundle would hash it (the recorded resolved values), signed with
    /// their stand-in keys: an approval given for the recorded operation
    /// counts for the same operation decided again.
    fn approvals(&self, rec: &events::Recorded) -> Vec<Value> {
        let Some(action) = &rec.action else {
            return vec![];
        };
        let Ok(op) = crate::gateway::operation_hash(
            &rec.mandate,
            self.gw.bundle_hash(),
            action,
            &rec.resolved,
        ) else {
            return vec![];
        };
        rec.approvers
            .iter()
            .filter_map(|name| {
                let key = self.stand_ins.get(name)?;
                let approval = Approval {
                    approver: name.clone(),
                    operation_hash: op.clone(),
                    expires_at: rec.time.saturating_add(APPROVAL_LIFETIME),
                    nonce: format!("replay:{}:{name}", rec.seq),
                };
                let signed = SignedApproval::sign(approval, key).ok()?;
                serde_json::to_value(signed).ok()
            })
            .collect()
    }
}
