//! A router started before a tenant moved (`ipc shards move`) follows it:
//! its map still sends the tenant to the old shard, which denies the
//! decision at authn (the tenant moved off it, [`super::Holding`]). When
//! the old shard says where the tenant went and that store is a shard of
//! this router that holds the tenant, the router remembers it, decides the
//! input again there, and sends the tenant's next decisions there first.
//! The old shard's denial stays in its chain (a refusal: nothing decided
//! there); nothing is decided on two shards, since the new shard checks
//! in each decision's own transaction that it holds the tenant.
//!
//! A store the router does not hold is never opened here: the denial
//! stands, and the instance needs the new map (its start-up then checks
//! it).

use super::{ShardResult, ShardSet, Standing, owner_of, standing};
use crate::gateway::{Ask, Outcome, Stage};
use crate::store::StoreError;
use serde_json::Value;

impl ShardSet {
    /// The shard a moved tenant now lives on, once learned.
    pub(super) fn followed(&self, tenant: &str) -> Option<usize> {
        self.follow
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(tenant)
            .copied()
    }

    /// The inputs each shard denied at authn for a tenant that moved to
    /// another shard of this router: decided again there, their answers
    /// replaced (a denial whose shard cannot say is left as it is).
    pub(super) fn follow_moves(
        &self,
        ask: &Ask<'_>,
        groups: &[Vec<usize>],
        results: &mut [ShardResult],
    ) {
        for (k, (group, (decided, _))) in groups.iter().zip(results.iter_mut()).enumerate() {
            for (pos, d) in decided.iter_mut().enumerate() {
                if d.decision != Outcome::Deny || d.stage != Stage::Authn {
                    continue;
                }
                let Some(&i) = group.get(pos) else { continue };
                let (input, tenants) = ask.inputs[i];
                let Some(owner) = owner_of(input) else {
                    continue;
                };
                let Some(j) = self.moved_to(k, owner) else {
                    continue;
                };
                let mut again = vec![];
                let one = Ask::of(vec![(input, tenants)]);
                if self.shards[j].gw.decide_all(one, &mut again).is_ok()
                    && let Some(new) = again.pop()
                {
                    *d = new;
                }
            }
        }
    }

    /// Where `tenant` went from shard `k`: a shard of this router that
    /// holds it now (learned for its next decisions), or `None`.
    fn moved_to(&self, k: usize, tenant: &str) -> Option<usize> {
        let to = match self.standing_on(k, tenant).ok()? {
            Standing::Moved { to } => to,
            _ => return None,
        };
        let j = self.shards.iter().position(|s| s.name() == to)?;
        if j == k || self.standing_on(j, tenant).ok()? != Standing::Held {
            return None;
        }
        self.follow
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(tenant.to_string(), j);
        crate::base::log::warn(
            "shard_followed",
            &format!(
                "tenant `{}` moved to `{to}`: this instance follows it there; update the world's shard map",
                crate::base::json::echo(tenant)
            ),
        );
        Some(j)
    }

    fn standing_on(&self, k: usize, tenant: &str) -> Result<Standing, StoreError> {
        let mut out = Standing::Absent;
        self.shards[k].gw.store.read_only(&mut |tx| {
            out = standing(tx, tenant)?;
            Ok(Value::Null)
        })?;
        Ok(out)
    }
}
