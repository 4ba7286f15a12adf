//! delegation: the DENY path on the shipped packs (`gateway::testkit`).

use crate::gateway::testkit::*;
use serde_json::json;

#[test]
fn delegation_needs_the_scope() {
    let w = TestWorld::new();
    let gw = w.gateway();
    let mut spec = MandateSpec::bank("emma");
    spec.scopes = vec!["account.write".into()];
    let d = decide(&gw, transfer(LANDLORD, json!("5.00")), &w.mandate(spec));
    assert_deny(&d, "delegation", "`payments.write`");
}
