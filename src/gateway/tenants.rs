//! The tenants (owners) a caller of the HTTP service may act for: what a
//! bearer token is bound to (`cli/serve/auth.rs`). A decision for a
//! mandate whose owner is not among them is a DENY at authn, with its
//! receipt; the receipts, approvals and pending operations a caller sees
//! are those of its tenants.

use std::collections::BTreeSet;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tenants {
    /// Every tenant: an operator (`*` in the token file, the single token
    /// of the old file format, the process behind `ipc run` or `--stdio`,
    /// the peer of a Unix socket without a token file).
    All,
    /// These tenants only (never empty in a token file).
    Only(BTreeSet<String>),
    /// No tenant: a proposal whose tenant no shard holds
    /// (`gateway::shards`), denied at authn with this reason before any
    /// state is read.
    Unrouted(String),
}

impl Tenants {
    pub fn allows(&self, owner: &str) -> bool {
        match self {
            Tenants::All => true,
            Tenants::Only(set) => set.contains(owner),
            Tenants::Unrouted(_) => false,
        }
    }

    /// `acme`, `acme, globex`, or `*`.
    pub fn shown(&self) -> String {
        match self {
            Tenants::All => "*".into(),
            Tenants::Only(set) => set.iter().cloned().collect::<Vec<_>>().join(", "),
            Tenants::Unrouted(_) => String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tenants;

    #[test]
    fn only_the_named_tenants_are_allowed() {
        let t = Tenants::Only(["acme".to_string()].into());
        assert!(t.allows("acme"));
        assert!(!t.allows("globex"));
        assert!(!t.allows("acme "));
        assert!(!t.allows("*"), "`*` is no tenant name a token may claim");
        assert!(Tenants::All.allows("globex"));
        assert_eq!(t.shown(), "acme");
    }
}
