//! The fuzz's oracle is checked by sabotage (see `fuzz.rs`): the same
//! property against deliberately broken gateways, pack by pack, must fail
//! for the right reason.

use crate::fuzz::*;
use crate::fuzz_moves::*;
use crate::fuzz_truth::*;
use cedar_policy::{Effect, PolicySet};
use intentplane::gateway::Gateway;
use intentplane::store::memory::MemoryStore;
use proptest::test_runner::{Config, TestError, TestRunner};
use std::sync::Arc;

// ---- the oracle is checked by sabotage ---------------------------------

#[derive(Clone, Copy, Debug)]
pub(crate) enum Sabotage {
    /// Every parameter marked non-critical: provenance vouches for nothing,
    /// so any value the agent writes passes it.
    ProvenanceAcceptsAnything,
    /// Every `step_up` and `four_eyes` rule removed: nothing waits for an
    /// approval.
    SkippedStepUp,
    /// Every `forbid` rule removed (the approval rules kept).
    NoForbids,
    /// No budget parameter: nothing is spent.
    BudgetNotCounted,
    /// Every approver authorised for every owner, with every role: a
    /// person of another tenant counts as the second pair of eyes.
    AnyoneIsFourEyes,
}

/// The world a sabotage runs in: the test world, or one whose approvers
/// are all authorised everywhere.
pub(crate) fn world_for(s: Option<Sabotage>) -> intentplane::gateway::world::World {
    let mut w = loaded();
    if let Some(Sabotage::AnyoneIsFourEyes) = s {
        let owners: Vec<String> = [
            "acme",
            "globex",
            "dr_lee",
            "dr_kim",
            "dr_rao",
            "payments-api",
            "web-portal",
            "emma",
            "noah",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for a in w.approvers.values_mut() {
            a.owners = owners.clone();
            a.roles = vec!["treasury".into()];
        }
    }
    w
}

/// A gateway over the test world, broken on purpose.
pub(crate) fn sabotaged(s: Sabotage) -> Gateway {
    let w = world();
    let mut gw = w.gateway();
    for ta in &w.bundle.table.actions {
        let name = ta.action.name.as_str();
        match s {
            Sabotage::ProvenanceAcceptsAnything => gw
                .edit_action_for_sabotage(name, |a| {
                    for p in &mut a.params {
                        p.critical = false;
                    }
                })
                .unwrap(),
            Sabotage::BudgetNotCounted => gw
                .edit_action_for_sabotage(name, |a| a.budget = None)
                .unwrap(),
            Sabotage::AnyoneIsFourEyes => {}
            Sabotage::SkippedStepUp | Sabotage::NoForbids => {
                let mut set = PolicySet::new();
                for p in gw.policies(name).unwrap().policies() {
                    let approval = p.annotation("level").is_some();
                    let keep = match s {
                        Sabotage::SkippedStepUp => !approval,
                        _ => p.effect() == Effect::Permit || approval,
                    };
                    if keep {
                        set.add(p.clone()).unwrap();
                    }
                }
                gw.with_policies(name, set).unwrap();
            }
        }
    }
    gw
}

/// Runs the property on moves of one pack against forks of `gw` (a fresh
/// store per case), with no shrinking: the first failure is the answer.
pub(crate) fn run_property(
    gw: &Gateway,
    pack: usize,
    cases: u32,
    s: Option<Sabotage>,
) -> Result<(), TestError<Vec<Move>>> {
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 0,
        failure_persistence: None,
        ..Config::default()
    });
    runner.run(&moves(pack..pack + 1), |moves| {
        let fork = gw.fork(world_for(s), Arc::new(MemoryStore::new()));
        check_sequence(&fork, &moves)
    })
}

/// The property must FAIL against the sabotaged gateway, for each pack
/// given, and the oracle's complaint must carry `tag`.
pub(crate) fn assert_caught(s: Sabotage, packs: &[&str], tag: &str) {
    let gw = sabotaged(s);
    for pack in packs {
        let i = PACKS.iter().position(|p| p == pack).unwrap();
        // the first failure ends the run: usually in the first case or
        // two (accounts payable, with few open invoices, took up to 20)
        match run_property(&gw, i, 256, Some(s)) {
            Ok(()) => panic!("{s:?} on `{pack}`: the oracle accepted a broken gateway"),
            Err(TestError::Fail(reason, _)) => assert!(
                reason.message().contains(tag),
                "{s:?} on `{pack}`: caught, but not as {tag}: {}",
                reason.message()
            ),
            Err(TestError::Abort(e)) => panic!("{s:?} on `{pack}`: aborted: {e}"),
        }
    }
}

#[test]
fn the_unbroken_gateway_passes_the_same_runs() {
    let gw = gateway();
    for (i, pack) in PACKS.iter().enumerate() {
        let r = run_property(gw, i, 1, None);
        assert!(r.is_ok(), "{pack}: {r:?}");
    }
}

#[test]
fn sabotage_provenance_accepting_any_value_is_caught() {
    assert_caught(Sabotage::ProvenanceAcceptsAnything, &PACKS, "[provenance]");
}

#[test]
fn sabotage_a_skipped_step_up_is_caught() {
    assert_caught(Sabotage::SkippedStepUp, &PACKS, "[approval]");
}

#[test]
fn sabotage_removed_forbids_are_caught() {
    // the slack and github packs have no forbid to remove
    assert_caught(
        Sabotage::NoForbids,
        &[
            "bank",
            "ap",
            "health",
            "workspace",
            "code",
            "travel",
            "dailylife",
        ],
        "[policy]",
    );
}

#[test]
fn sabotage_a_second_approver_of_another_tenant_is_caught() {
    assert_caught(
        Sabotage::AnyoneIsFourEyes,
        &["ap", "health", "code"],
        "[approval]",
    );
}

#[test]
fn sabotage_budgets_not_counted_is_caught() {
    // the packs with a budget parameter (github spends no amount)
    assert_caught(
        Sabotage::BudgetNotCounted,
        &["bank", "ap", "dailylife"],
        "[budget]",
    );
}
