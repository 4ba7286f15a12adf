//! How a child mandate asks for more than its parent allows: each way,
//! as the gateway refuses it and as the person who confirms a child reads
//! it. Owned here, read by the chain (`chain`, which finds them) and the
//! child's rendering (`render::child`, which shows them), so that neither
//! of those imports the other for it.

use crate::base::Money;
use crate::base::json::{echo, format_time};
use serde::Serialize;

/// One way a child asks for more than its parent allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Widening {
    /// Another pack, user or owner than the parent's.
    Identity {
        field: String,
        parent: String,
        child: String,
    },
    /// A scope the parent does not grant.
    Scope {
        scope: String,
    },
    /// A claim value neither the parent's claim nor a registry of the owner
    /// (one the parent lets vouch) holds; `value` as JSON, escaped.
    Claim {
        claim: String,
        value: String,
    },
    /// A single claim the parent has and the child leaves out (a fact that
    /// reads it could no longer be established the parent's way).
    Dropped {
        claim: String,
    },
    Budget {
        child: i64,
        parent: i64,
    },
    Calls {
        child: u64,
        parent: u64,
    },
    Expiry {
        child: i64,
        parent: i64,
    },
    /// A source the parent's narrowing does not allow for a parameter.
    Sources {
        param: String,
        source: String,
    },
}

impl std::fmt::Display for Widening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Widening::Identity {
                field,
                parent,
                child,
            } => write!(
                f,
                "{field} `{}` is not the parent's `{}`",
                echo(child),
                echo(parent)
            ),
            Widening::Scope { scope } => {
                write!(f, "scope `{}` is not granted by the parent", echo(scope))
            }
            Widening::Claim { claim, value } => write!(
                f,
                "claim `{claim}` value `{value}` is neither the parent's nor in a registry of the owner that the parent allows"
            ),
            Widening::Dropped { claim } => {
                write!(f, "claim `{claim}` of the parent is left out")
            }
            Widening::Budget { child, parent } => write!(
                f,
                "budget {} is more than the parent's {}",
                Money::from_minor(*child).grouped(),
                Money::from_minor(*parent).grouped()
            ),
            Widening::Calls { child, parent } => {
                write!(f, "{child} calls are more than the parent's {parent}")
            }
            Widening::Expiry { child, parent } => write!(
                f,
                "expiry {} is later than the parent's {}",
                format_time(*child),
                format_time(*parent)
            ),
            Widening::Sources { param, source } => write!(
                f,
                "source `{}` of `{}` is not allowed by the parent",
                echo(source),
                echo(param)
            ),
        }
    }
}
