//! Stage 9, receipt: every decision, whatever its outcome, is appended to
//! the hash chain in the same transaction as its effects: the raw proposal,
//! the resolved values and their origins, the stage, the decision, the
//! approvers, the policies that decided, and the bundle hash.

use super::Run;
use crate::gateway::Decision;
use crate::gateway::json::format_time;
use crate::store::{ReceiptRecord, StoreError};
use serde_json::json;

pub(super) fn append(r: &mut Run<'_>, d: &Decision) -> Result<ReceiptRecord, StoreError> {
    let body = json!({
        "time": format_time(r.now),
        "bundle": r.gw.bundle_hash,
        "mandate": r.mandate.as_ref().map(|m| json!({"id": m.id, "user": m.user, "owner": m.owner})),
        "proposal": r.input.proposal,
        "decision": d.decision,
        "stage": d.stage,
        "action": d.action,
        "reason": d.reason,
        "resolved": d.resolved,
        "origins": d.origins,
        "level": d.level,
        "operation_hash": d.operation_hash,
        "approvers": d.approvers,
        "policies": d.policies,
        "result": d.result,
        "replayed": d.replayed,
    });
    r.tx.append_receipt(&body)
}
