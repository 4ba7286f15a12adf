//! Approvals: a person's signature over the exact operation hash, single
//! use (a nonce), expiring. Step-up is the mandate's user; four eyes is the
//! user and a different person.

use crate::canonical::to_jcs;
use crate::keys::SecretKey;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// Who approves (a name in the world's approvers).
    pub approver: String,
    /// The operation hash a PENDING decision returned.
    pub operation_hash: String,
    /// Seconds since the epoch.
    pub expires_at: i64,
    /// Makes the approval single use.
    pub nonce: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedApproval {
    pub approval: Approval,
    /// Ed25519 over the JCS encoding of `approval`, base64.
    pub signature: String,
}

impl SignedApproval {
    pub fn sign(
        approval: Approval,
        key: &SecretKey,
    ) -> Result<Self, crate::canonical::CanonicalError> {
        let msg = to_jcs(&approval)?;
        Ok(SignedApproval {
            signature: key.sign(msg.as_bytes()),
            approval,
        })
    }

    /// `approver`'s approval of one operation until `expires_at`, with a
    /// fresh nonce, signed: what the trusted side hands the gateway.
    pub fn issue(
        approver: &str,
        operation_hash: &str,
        expires_at: i64,
        key: &SecretKey,
    ) -> Result<Self, IssueError> {
        Ok(Self::sign(
            Approval {
                approver: approver.to_string(),
                operation_hash: operation_hash.to_string(),
                expires_at,
                nonce: random_id()?,
            },
            key,
        )?)
    }
}

/// A refusal of one operation by an approver, signed like an approval.
/// `verdict` is always `"decline"`: the field an [`Approval`] never has,
/// so no approval's signature can pass for a decline, nor a decline's for
/// an approval (each is verified over the JCS of its own struct).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Decline {
    pub approver: String,
    pub operation_hash: String,
    /// Seconds since the epoch: a decline is refused after this.
    pub expires_at: i64,
    pub verdict: Verdict,
}

/// The one verdict a [`Decline`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Decline,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedDecline {
    pub decline: Decline,
    /// Ed25519 over the JCS encoding of `decline`, base64.
    pub signature: String,
}

impl SignedDecline {
    /// `approver`'s refusal of one operation, valid until `expires_at`.
    pub fn issue(
        approver: &str,
        operation_hash: &str,
        expires_at: i64,
        key: &SecretKey,
    ) -> Result<Self, crate::canonical::CanonicalError> {
        let decline = Decline {
            approver: approver.to_string(),
            operation_hash: operation_hash.to_string(),
            expires_at,
            verdict: Verdict::Decline,
        };
        let msg = to_jcs(&decline)?;
        Ok(SignedDecline {
            signature: key.sign(msg.as_bytes()),
            decline,
        })
    }
}

/// The operating system's random source failed: nothing random is made
/// up in its place (a nonce, a mandate id, an approver's challenge or
/// session token built from the time could be guessed).
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
#[error("the operating system's random source failed: {reason}")]
#[diagnostic(
    code(ipc::random),
    help(
        "nothing is issued without randomness: check `/dev/urandom` (or `getrandom`) on this machine"
    )
)]
pub struct RandomError {
    pub reason: String,
}

/// 16 random bytes from the operating system, as hex: for nonces, token
/// ids, challenges and session tokens. An error when the OS cannot give
/// them, never a stand-in (fail closed).
pub fn random_id() -> Result<String, RandomError> {
    random_with(|b| getrandom::fill(b).map_err(|e| e.to_string()))
}

fn random_with(fill: impl FnOnce(&mut [u8]) -> Result<(), String>) -> Result<String, RandomError> {
    let mut b = [0u8; 16];
    fill(&mut b).map_err(|reason| RandomError {
        reason: reason.to_lowercase(),
    })?;
    Ok(hex::encode(b))
}

/// Why an approval could not be issued.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum IssueError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Canonical(#[from] crate::canonical::CanonicalError),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Random(#[from] RandomError),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failing random source is an error, never a time-based stand-in.
    #[test]
    fn a_failing_random_source_is_an_error() {
        let e = random_with(|_| Err("no entropy".into())).unwrap_err();
        assert!(e.to_string().contains("no entropy"), "{e}");
        let ok = random_with(|b| {
            b.fill(7);
            Ok(())
        })
        .unwrap();
        assert_eq!(ok, "07".repeat(16));
        assert_ne!(random_id().unwrap(), random_id().unwrap());
    }

    /// The approval page signs the JCS its own code writes
    /// (`src/cli/serve/page/app.js`); `tests/py/test_approval_page.py`
    /// asserts that the browser writes this very string for this object.
    #[test]
    fn approval_jcs_is_the_string_the_page_writes() {
        let a = Approval {
            approver: "zo\u{eb} \"q\"\n\u{1}".into(),
            operation_hash: "sha256:ab".into(),
            expires_at: 1_764_000_000,
            nonce: "\u{e9}\u{20ac}\u{1f600}".into(),
        };
        assert_eq!(
            to_jcs(&a).unwrap(),
            "{\"approver\":\"zo\u{eb} \\\"q\\\"\\n\\u0001\",\"expires_at\":1764000000,\"nonce\":\"\u{e9}\u{20ac}\u{1f600}\",\"operation_hash\":\"sha256:ab\"}"
        );
    }

    /// A decline's signed bytes always hold `"verdict":"decline"`, which an
    /// approval's never do: neither signature passes for the other.
    #[test]
    fn a_decline_signs_other_bytes_than_an_approval() {
        let key = SecretKey::from_seed(&[7; 32]);
        let d = SignedDecline::issue("emma", "sha256:ab", 5, &key).unwrap();
        let msg = to_jcs(&d.decline).unwrap();
        assert_eq!(
            msg,
            "{\"approver\":\"emma\",\"expires_at\":5,\"operation_hash\":\"sha256:ab\",\"verdict\":\"decline\"}"
        );
        let as_approval: Result<Approval, _> =
            serde_json::from_value(serde_json::to_value(&d.decline).unwrap());
        assert!(as_approval.is_err());
    }
}
