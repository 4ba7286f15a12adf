//! Shadow mode (`docs/rollout.md`, `docs/decisions/shadow-mode.md`): a
//! world may set `enforce = false` for a tenant or a pack. Every stage
//! then runs and every decision is a receipt, as when enforced, but the
//! answer is `SHADOW` with the decision the gateway would have taken
//! ([`WouldBe`]) and nothing is executed by the gateway: the caller goes
//! on (the MCP proxy forwards the call as it came).
//!
//! **Invariant:** shadow is never implicit: it is chosen by the world's
//! `[enforce]` table only, applies only to a proposal whose mandate
//! verified (a proposal that fails authn is always a DENY), and a pack
//! marked `shadow never` in the signed bundle refuses to start in it.
//! Budgets, nonces and executions taken in shadow are kept under keys of
//! their own ([`key`]), apart from the enforced ones.

use super::{Outcome, Stage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The prefix of every budget, nonce and execution key taken in shadow.
pub const PREFIX: &str = "shadow:";

/// The key a shadow decision reads and writes in place of `key` (a
/// mandate id, an approval nonce, an operation hash or a read's
/// execution).
pub fn key(key: &str) -> String {
    format!("{PREFIX}{key}")
}

/// What runs in shadow: the world's `[enforce]` tables, with `false`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shadow {
    /// Tenants (mandate owners) whose every decision is in shadow.
    pub tenants: BTreeSet<String>,
    /// Packs whose every action's decision is in shadow.
    pub packs: BTreeSet<String>,
}

/// `[enforce]` in the world file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct EnforceFile {
    #[serde(default)]
    tenants: std::collections::BTreeMap<String, bool>,
    #[serde(default)]
    packs: std::collections::BTreeMap<String, bool>,
}

impl EnforceFile {
    pub(crate) fn shadow(&self) -> Shadow {
        let off = |m: &std::collections::BTreeMap<String, bool>| {
            m.iter()
                .filter(|(_, on)| !**on)
                .map(|(k, _)| k.clone())
                .collect()
        };
        Shadow {
            tenants: off(&self.tenants),
            packs: off(&self.packs),
        }
    }

    /// The packs named, enforced or not (each must be in the bundle).
    pub(crate) fn packs(&self) -> impl Iterator<Item = &String> {
        self.packs.keys()
    }
}

impl Shadow {
    pub fn is_off(&self) -> bool {
        self.tenants.is_empty() && self.packs.is_empty()
    }

    /// Whether a decision for `tenant` (a verified mandate's owner) on an
    /// action of `pack` is in shadow. `None` when the tenant or the pack is
    /// not known (authn or contract refused first): a tenant's shadow needs
    /// its verified mandate, a pack's the action.
    pub fn applies(&self, tenant: Option<&str>, pack: Option<&str>) -> bool {
        tenant.is_some_and(|t| self.tenants.contains(t))
            || pack.is_some_and(|p| self.packs.contains(p))
    }

    /// The line every shell writes on stderr at start-up, `None` when every
    /// decision is enforced.
    pub fn startup_line(&self) -> Option<String> {
        if self.is_off() {
            return None;
        }
        let list = |s: &BTreeSet<String>| {
            s.iter()
                .map(|x| format!("`{x}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = vec![];
        if !self.tenants.is_empty() {
            parts.push(format!("tenants {}", list(&self.tenants)));
        }
        if !self.packs.is_empty() {
            parts.push(format!("packs {}", list(&self.packs)));
        }
        Some(format!(
            "SHADOW MODE for {}: their decisions are recorded and answered SHADOW with what would have been decided; nothing is enforced for them",
            parts.join("; ")
        ))
    }

    /// The packs in shadow, tenant-wide settings included: a tenant in
    /// shadow runs every pack of the bundle in shadow.
    pub fn packs_in_shadow<'a>(&'a self, bundle_packs: &'a [String]) -> Vec<&'a String> {
        if self.tenants.is_empty() {
            bundle_packs
                .iter()
                .filter(|p| self.packs.contains(*p))
                .collect()
        } else {
            bundle_packs.iter().collect()
        }
    }
}

/// The decision a shadow decision would have been, enforced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WouldBe {
    pub decision: Outcome,
    pub stage: Stage,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub level: Option<u8>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enforce(text: &str) -> Result<Shadow, toml::de::Error> {
        toml::from_str::<EnforceFile>(text).map(|f| f.shadow())
    }

    #[test]
    fn the_audit_reads_shadow_keys_as_the_gateway_writes_them() {
        assert_eq!(PREFIX, crate::store::audit::SHADOW_PREFIX);
    }

    #[test]
    fn only_false_puts_in_shadow() {
        let s =
            enforce("tenants = { acme = false, globex = true }\npacks = { bank = false }").unwrap();
        assert!(s.applies(Some("acme"), None));
        assert!(!s.applies(Some("globex"), None));
        assert!(s.applies(None, Some("bank")));
        assert!(!s.applies(Some("globex"), Some("health")));
        // nothing known: enforced
        assert!(!s.applies(None, None));
    }

    #[test]
    fn a_value_that_is_not_a_boolean_or_an_unknown_key_is_refused() {
        assert!(enforce("tenants = { acme = \"no\" }").is_err());
        assert!(enforce("tenant = { acme = false }").is_err());
    }

    #[test]
    fn the_startup_line_names_every_tenant_and_pack() {
        let s = enforce("tenants = { acme = false }\npacks = { bank = false }").unwrap();
        let line = s.startup_line().unwrap();
        assert!(line.contains("`acme`") && line.contains("`bank`"), "{line}");
        assert!(Shadow::default().startup_line().is_none());
    }

    #[test]
    fn a_tenant_in_shadow_runs_every_pack_in_shadow() {
        let packs = vec!["bank".to_string(), "health".to_string()];
        let s = enforce("packs = { bank = false }").unwrap();
        assert_eq!(s.packs_in_shadow(&packs), vec![&packs[0]]);
        let s = enforce("tenants = { acme = false }").unwrap();
        assert_eq!(s.packs_in_shadow(&packs).len(), 2);
    }
}
