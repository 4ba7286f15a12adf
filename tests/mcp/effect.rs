//! Issue #40, item 2: what a decided call does, as the caller that executes
//! it declares it (`effect`, `gateway::Effect`). A write executes once and
//! a retry is answered from the store; a read is decided by every stage and
//! executed again at each call, each execution under a key of its own. A
//! read never weakens a write: an operation a write executed is answered
//! from the store however it comes again, and an approval counts for one
//! execution. Tested on the gateway directly, as the MCP proxy drives it.
// needs a part of the default features: the test is off without it
#![cfg(feature = "mcp")]

use intentplane::gateway::approval::SignedApproval;
use intentplane::gateway::outcome::ExternalOutcome;
use intentplane::gateway::secret::SecretValues;
use intentplane::gateway::testkit::{MandateSpec, TestWorld, input, transfer};
use intentplane::gateway::{Decision, Effect, Gateway, Outcome};
use serde_json::{Map, Value, json};

const LANDLORD: &str = "DE44 5001 0517 5407 3249 31";

/// Emma's bank mandate with room for several payments.
fn mandate(tw: &TestWorld) -> Value {
    tw.mandate(MandateSpec {
        budget: 10_000_000,
        ..MandateSpec::bank("emma")
    })
}

/// The proposal decided as `effect`, recording the call as the proxy does.
fn decide(
    gw: &Gateway,
    proposal: &Value,
    m: &Value,
    approvals: Vec<Value>,
    effect: Effect,
) -> Decision {
    let record = |r: &Map<String, Value>, _: &SecretValues| Ok(json!({"arguments": r}));
    let i = input(proposal.clone(), m, approvals);
    let mut out = vec![];
    gw.decide_all(
        intentplane::gateway::Ask::one(&i).dispatching(&record, effect),
        &mut out,
    )
    .unwrap();
    out.pop().unwrap()
}

fn outcome(text: &str) -> ExternalOutcome {
    ExternalOutcome {
        executor: "mcp:demo/send_money".into(),
        is_error: false,
        result: json!({"content": [{"type": "text", "text": text}]}),
    }
}

fn calls(gw: &Gateway, m: &Value) -> u64 {
    let id = m["mandate"]["id"].as_str().unwrap().to_string();
    let mut n = 0;
    gw.store()
        .transaction(&mut |tx| {
            n = tx.spent(&id)?.calls;
            Ok(Value::Null)
        })
        .unwrap();
    n
}

#[test]
fn a_read_executes_again_under_its_own_key_and_never_weakens_a_write() {
    let tw = TestWorld::new();
    let gw = tw.gateway().execute_externally();
    let m = mandate(&tw);
    let p = transfer(LANDLORD, json!("40.00"));
    // a read, twice: two executions of one operation, each its own key
    let r1 = decide(&gw, &p, &m, vec![], Effect::Read);
    let r2 = decide(&gw, &p, &m, vec![], Effect::Read);
    for r in [&r1, &r2] {
        assert_eq!(r.decision, Outcome::Allow, "{r:#?}");
        assert!(!r.replayed, "{r:#?}");
        assert_eq!(r.effect, Effect::Read);
    }
    assert_eq!(r1.operation_hash, r2.operation_hash);
    let op = r1.operation_hash.clone().unwrap();
    let (k1, k2) = (r1.execution.clone().unwrap(), r2.execution.clone().unwrap());
    assert_ne!(k1, k2);
    for k in [&k1, &k2] {
        assert_eq!(intentplane::store::read_operation(k), Some(op.as_str()));
    }
    // the decision as the agent's `_meta` shows it says so; a write's not
    let shown = serde_json::to_value(&r1).unwrap();
    assert_eq!(
        (shown["effect"].clone(), shown["execution"].clone()),
        (json!("read"), json!(k1))
    );
    // each execution has one outcome; its answer is not kept (no call is
    // ever answered with it)
    gw.record_outcome(&k1, &outcome("first")).unwrap();
    gw.record_outcome(&k2, &outcome("second")).unwrap();
    assert!(gw.record_outcome(&k1, &outcome("again")).is_err());
    assert_eq!(gw.outcome(&k1).unwrap().unwrap().result, Value::Null);
    // the operation was never executed as a write: a write executes it,
    // once
    let w1 = decide(&gw, &p, &m, vec![], Effect::Write);
    assert_eq!(w1.decision, Outcome::Allow);
    assert!(!w1.replayed && w1.execution.is_none() && w1.effect == Effect::Write);
    assert!(
        !serde_json::to_value(&w1)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("effect")
    );
    gw.record_outcome(&op, &outcome("paid")).unwrap();
    let w2 = decide(&gw, &p, &m, vec![], Effect::Write);
    assert!(w2.replayed, "{w2:#?}");
    // executed by a write, it is answered from the store as a read too
    let r3 = decide(&gw, &p, &m, vec![], Effect::Read);
    assert_eq!(r3.decision, Outcome::Allow);
    assert!(r3.replayed && r3.execution.is_none(), "{r3:#?}");
    assert_eq!(gw.outcome(&op).unwrap().unwrap(), outcome("paid"));
    // every execution spent a call, the replays none
    assert_eq!(calls(&gw, &m), 3);
    // the receipts: the reads say so, the write as it always was
    let recs: Vec<Value> = gw
        .store()
        .receipts()
        .unwrap()
        .into_iter()
        .map(|r| r.body)
        .collect();
    let allows: Vec<&Value> = recs.iter().filter(|b| b["decision"] == "ALLOW").collect();
    assert_eq!(allows.len(), 5);
    assert_eq!(allows[0]["execution"], json!(k1));
    assert_eq!(allows[1]["execution"], json!(k2));
    for (b, read) in allows.iter().zip([true, true, false, false, true]) {
        assert_eq!(b.get("effect").is_some(), read, "{b}");
    }
    assert!(allows[2].get("execution").is_none());
    let outcomes: Vec<&Value> = recs.iter().filter(|b| b["kind"] == "outcome").collect();
    assert_eq!(outcomes.len(), 3);
    assert_eq!(outcomes[0]["execution"], json!(k1));
    assert_eq!(outcomes[0]["operation_hash"], json!(op));
    assert!(outcomes[2].get("execution").is_none() && outcomes[2].get("effect").is_none());
    intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None).unwrap();
}

/// A gateway that executes in process (the packs' simulated systems)
/// only writes: a read declared to it is executed once as any operation.
#[test]
fn only_a_call_made_outside_can_be_a_read() {
    let tw = TestWorld::new();
    let gw = tw.gateway();
    let m = mandate(&tw);
    let p = transfer(LANDLORD, json!("40.00"));
    let first = decide(&gw, &p, &m, vec![], Effect::Read);
    assert_eq!(first.decision, Outcome::Allow);
    assert_eq!(
        (first.effect, first.execution.clone()),
        (Effect::Write, None)
    );
    assert!(decide(&gw, &p, &m, vec![], Effect::Read).replayed);
}

/// A read's approval allows one execution: the same approval again counts
/// for nothing and the read is PENDING again (asked anew, never a DENY
/// that would stand), whether the agent brings it or it was submitted to
/// the store; a write's used approval is still refused as before.
#[test]
fn an_approval_of_a_read_allows_one_execution() {
    let tw = TestWorld::new();
    let gw = tw.gateway().execute_externally();
    let m = mandate(&tw);
    // above 1,000.00: the user's step-up
    let p = transfer(LANDLORD, json!("1200.00"));
    let pending = decide(&gw, &p, &m, vec![], Effect::Read);
    assert_eq!(pending.decision, Outcome::Pending, "{pending:#?}");
    let op = pending.operation_hash.clone().unwrap();
    let yes = tw.approve("emma", &op);
    let allowed = decide(&gw, &p, &m, vec![yes.clone()], Effect::Read);
    assert_eq!(allowed.decision, Outcome::Allow, "{allowed:#?}");
    assert_eq!(allowed.approvers, ["emma"]);
    let again = decide(&gw, &p, &m, vec![yes.clone()], Effect::Read);
    assert_eq!(again.decision, Outcome::Pending, "used up: {again:#?}");
    assert!(again.approvers.is_empty());
    // submitted to the store (the approval page, `ipc approve --submit`):
    // counted once, then passed over, and another counts again
    for _ in 0..2 {
        let signed: SignedApproval = serde_json::from_value(tw.approve("emma", &op)).unwrap();
        gw.submit_approval(&signed).unwrap();
        let d = decide(&gw, &p, &m, vec![], Effect::Read);
        assert_eq!(d.decision, Outcome::Allow, "{d:#?}");
        let d = decide(&gw, &p, &m, vec![], Effect::Read);
        assert_eq!(d.decision, Outcome::Pending, "{d:#?}");
    }
    assert_eq!(calls(&gw, &m), 3);
    // a write brought a used approval: refused, as it always was
    let w = decide(&gw, &p, &m, vec![yes], Effect::Write);
    assert_eq!(w.decision, Outcome::Deny, "{w:#?}");
    assert!(w.reason.unwrap().contains("already used"));
    intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None).unwrap();
}
