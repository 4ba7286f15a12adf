//! The runtime table: what the gateway needs besides Cedar to decide on a
//! proposal (contracts, trusted sources, normalisers, validators, facts,
//! budget, scope, executor) and which Cedar policies belong to each action.
//! It is the bundle's vocabulary: the compiler writes it, the runtime reads
//! it, and the runtime imports nothing of the compiler.

use crate::ir;
use serde::{Deserialize, Serialize};

/// Context attribute: the origin of each critical value (a record).
pub const CTX_PROVENANCE: &str = "provenance";
/// Context attribute: the approval level being evaluated (0, 1 or 2).
pub const CTX_APPROVAL_LEVEL: &str = "approval_level";
/// Context attribute: the gateway's clock, in seconds since the epoch.
pub const CTX_NOW: &str = "now";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Table {
    /// Per pack: its mandate claims, its registries and its Cedar types.
    pub packs: Vec<TablePack>,
    /// Every action of every pack (action names are unique in a bundle).
    pub actions: Vec<TableAction>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablePack {
    pub name: String,
    /// The claims a mandate for this pack carries.
    pub claims: Vec<ir::Claim>,
    pub registries: Vec<ir::Registry>,
    /// Cedar principal entity type, e.g. `bank::User`.
    pub principal_type: String,
    /// Cedar resource entity type (the mandate's owner), e.g. `bank::Tenant`.
    pub resource_type: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableAction {
    /// The pack that declares it.
    pub pack: String,
    /// The Cedar action entity, e.g. `bank::Action::"payment.transfer"`.
    pub cedar_action: String,
    /// `<pack>/<file>:<line>` of the declaration.
    pub source: String,
    /// The checked action: params (types, critical flag, ordered sources,
    /// normaliser, validators, default, hint), facts, rules, budget param,
    /// scope, executor.
    pub action: ir::Action,
    /// The policies the gateway evaluates for this action (its own, plus any
    /// hand-written policy whose scope can match it), in bundle order.
    pub policy_ids: Vec<String>,
    /// `rule_policy_ids[i]` is the policy compiled from `action.rules[i]`:
    /// how a Cedar reason maps back to a rule's reason and hint.
    pub rule_policy_ids: Vec<String>,
}

impl Table {
    pub fn action(&self, name: &str) -> Option<&TableAction> {
        self.actions.iter().find(|a| a.action.name == name)
    }
    pub fn pack(&self, name: &str) -> Option<&TablePack> {
        self.packs.iter().find(|p| p.name == name)
    }
    /// The actions of pack `pack`, in the table's order (what a mandate of
    /// that pack is issued against).
    pub fn pack_actions(&self, pack: &str) -> Vec<&ir::Action> {
        self.actions
            .iter()
            .filter(|t| t.pack == pack)
            .map(|t| &t.action)
            .collect()
    }
}

impl TableAction {
    /// The rule a policy was compiled from (`None` for the permit and for
    /// hand-written policies).
    pub fn rule_of(&self, policy_id: &str) -> Option<&ir::Rule> {
        self.rule_policy_ids
            .iter()
            .position(|id| id == policy_id)
            .and_then(|i| self.action.rules.get(i))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackInfo {
    pub name: String,
    pub version: String,
    pub description: String,
    /// `shadow never` in the pack: a gateway asked to run it in shadow
    /// mode refuses to start. Absent when false (bundles built before it
    /// keep their bytes and hash).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow_never: bool,
}

/// One Cedar policy of the bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyEntry {
    /// The Cedar policy id (also its `@id` annotation).
    pub id: String,
    /// `<pack>/<file>:<line>` of the rule, action or hand-written policy.
    pub source: String,
    /// Cedar text, annotations included.
    pub text: String,
}

/// Everything a bundle holds, except its hash and signature.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Sorted by name.
    pub packs: Vec<PackInfo>,
    pub schema: String,
    pub policies: Vec<PolicyEntry>,
    pub table: Table,
}
