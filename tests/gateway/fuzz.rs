//! The property: the attacker controls every proposal. Proptest generates
//! sequences of proposals over everything an agent can send — any action
//! name, keys and values; references, including other tenants' ids;
//! smuggled keys (origin, scope, context, approval_level...); wrong types;
//! disguised IBANs, addresses, patient ids, commits, paths
//! (`/user/../system/.ssh/id`), hosts and repository names; huge and nested
//! values; genuine, expired, tampered and foreign tokens; approvals by the
//! right and the wrong people, twice by one person, expired, and for other
//! operations — against every shipped pack (bank, accounts payable,
//! health, workspace, code, slack, travel, and the AgentDyn packs
//! dailylife and github) but those `NOT_YET_FUZZED` lists (shop).
//!
//! An oracle written from the world's ground truth (the registry files and
//! the mandates as data, parsed here, never through gateway code) checks
//! every executed action: a genuine, unexpired token of the action's pack
//! with the scope; every critical value equal, after the oracle's own
//! normalisation (paths resolved lexically and kept inside a trusted
//! folder, hosts and repository names in lower case, e-mail addresses...),
//! to a trusted value of that owner and to what the agent proposed (or what
//! its reference names in the owner's records); the forbids (hard caps,
//! sanctions, cooling-off, research consent, red CI, ...); the approval
//! level an independent table requires; budgets and call counts; an invoice
//! paid once. The AgentDyn packs' rules, values and mandates are in
//! `fuzz_agentdyn.rs`; their world adds a second tenant (`noah`) to their
//! registries, so that another tenant's values are there to steal.
//!
//! The oracle is itself tested: the sabotage tests at the end run the same
//! property against deliberately broken gateways (provenance vouching for
//! anything, approval rules removed, forbids removed, budgets not counted),
//! pack by pack (all nine; the forbids for the seven that have one), and
//! require it to fail, for the right reason.
//!
//! Default: 6,000 proposals (60 cases × 100), spread over the nine packs.
//! `IPC_FUZZ_CASES=1000` runs 100,000.

use crate::common;
use crate::fuzz_moves::*;
use crate::fuzz_oracle::*;
use crate::fuzz_truth::*;
use common::*;
use intentplane::gateway::{Decision, Gateway, Outcome};
use intentplane::store::memory::MemoryStore;
use proptest::prelude::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

// ---- playing the moves -------------------------------------------------

/// Someone other than `user` the world knows, to approve as a second
/// person or alone: one the world authorises for `owner` and `action`
/// when `ours`, else one of another tenant (or of none).
pub(crate) fn colleague(user: &str, owner: &str, action: &str, ours: bool) -> &'static str {
    [
        "cfo", "clerk", "maria", "lead_bo", "noah", "emma", "dev_ana",
    ]
    .into_iter()
    .filter(|c| *c != user)
    .find(|c| authorised(c, owner, action) == ours)
    .unwrap_or("dev_ana")
}

/// Decides a move: the proposal, then (when PENDING and the move says so)
/// the proposal again with approvals. Returns every decision taken.
pub(crate) fn decide_move(
    gw: &Gateway,
    m: &M,
    proposal: &Value,
    mv: &Move,
) -> Result<Vec<Decision>, String> {
    let w = world();
    let d = gw
        .decide(&input(proposal.clone(), &m.token, vec![]))
        .map_err(|e| e.to_string())?;
    if d.decision != Outcome::Pending || mv.approvals == 0 {
        return Ok(vec![d]);
    }
    let op = d.operation_hash.clone().unwrap_or_default();
    let user = m.token["mandate"]["user"].as_str().unwrap_or("emma");
    // a user the world has no key for: someone else signs in their place
    let user = if w.approvers.iter().any(|(n, _)| n == user) {
        user
    } else {
        "emma"
    };
    let owner = m.token["mandate"]["owner"].as_str().unwrap_or("");
    let action = proposal["action"].as_str().unwrap_or("");
    let other = colleague(user, owner, action, true);
    let approvals = match mv.approvals {
        1 => vec![w.approve(user, &op)],
        2 => vec![w.approve(user, &op), w.approve(other, &op)],
        3 => vec![w.approve(other, &op)],
        4 => vec![w.approve(user, "sha256:00")],
        5 => vec![w.approve(user, &op), w.approve(user, &op)],
        7 => vec![
            w.approve(user, &op),
            w.approve(colleague(user, owner, action, false), &op),
        ],
        _ => vec![
            w.approve_with(user, &op, now() - 1, "expired-nonce"),
            w.approve(other, &op),
        ],
    };
    let again = gw
        .decide(&input(proposal.clone(), &m.token, approvals))
        .map_err(|e| e.to_string())?;
    Ok(vec![d, again])
}

pub(crate) fn play(gw: &Gateway, c: &Ctx, moves: &[Move]) -> Result<usize, String> {
    let mut ledger = Ledger::default();
    let mut decided = 0;
    for mv in moves {
        let (m, proposal) = proposal_of(c, mv);
        let ds = decide_move(gw, m, &proposal, mv)?;
        decided += ds.len();
        for d in &ds {
            if d.decision == Outcome::Allow && !d.replayed {
                check_executed(&c.truth, m, &proposal, &Exec::from(d), &mut ledger)
                    .map_err(|e| format!("{e}\nproposal: {proposal}\ndecision: {d:?}"))?;
            }
            if d.decision == Outcome::Deny && d.result.is_some() {
                return Err("[execution] a DENY carries an executor result".into());
            }
        }
    }
    Ok(decided)
}

/// The property for one sequence of moves on one gateway: the oracle agrees
/// with every execution, every decision left a receipt, and the chain
/// verifies.
pub(crate) fn check_sequence(gw: &Gateway, moves: &[Move]) -> Result<(), TestCaseError> {
    let decided = play(gw, ctx(), moves).map_err(TestCaseError::fail)?;
    let recs = gw
        .store()
        .receipts()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(
        recs.len(),
        decided,
        "[receipt] a decision without a receipt"
    );
    let head = gw
        .store()
        .head()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert!(
        intentplane::store::verify_chain(&recs, head).is_ok(),
        "[receipt] the chain does not verify"
    );
    // and the budgets, nonces and executions are what the receipts say
    let snapshot = gw
        .store()
        .snapshot()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let audit = intentplane::store::verify_store(&snapshot, None);
    prop_assert!(
        audit.is_ok(),
        "[receipt] the store does not verify: {:?}",
        audit
    );
    Ok(())
}

/// The same moves, decided by several threads at once on one gateway; the
/// oracle then replays the executions in the order the receipt chain
/// records them (the order the store serialised them in).
pub(crate) fn play_concurrently(
    gw: &Gateway,
    c: &Ctx,
    lanes: &[Vec<Move>],
) -> Result<usize, String> {
    let results: Vec<Result<usize, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = lanes
            .iter()
            .map(|lane| {
                scope.spawn(move || {
                    let mut n = 0;
                    for mv in lane {
                        let (m, proposal) = proposal_of(c, mv);
                        n += decide_move(gw, m, &proposal, mv)?.len();
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a lane panicked".into())))
            .collect()
    });
    let mut decided = 0;
    for r in results {
        decided += r?;
    }
    let by_id: HashMap<String, &M> = c
        .all()
        .map(|m| {
            (
                m.token["mandate"]["id"].as_str().unwrap_or("").to_string(),
                m,
            )
        })
        .collect();
    let mut ledger = Ledger::default();
    for rec in gw.store().receipts().map_err(|e| e.to_string())? {
        let b = &rec.body;
        if b["decision"] != "ALLOW" || b["replayed"] == true {
            continue;
        }
        let id = b["mandate"]["id"].as_str().unwrap_or("");
        let m = by_id
            .get(id)
            .ok_or(format!("[authn] executed under an unknown mandate `{id}`"))?;
        let exec = Exec {
            action: b["action"].as_str().map(str::to_string),
            resolved: b["resolved"].as_object().cloned().unwrap_or_default(),
            approvers: b["approvers"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default(),
        };
        check_executed(&c.truth, m, &b["proposal"], &exec, &mut ledger)
            .map_err(|e| format!("{e}\nreceipt: {b}"))?;
    }
    Ok(decided)
}

pub(crate) fn cases() -> u32 {
    std::env::var("IPC_FUZZ_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(60)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn nothing_executes_unless_the_oracle_agrees(moves in moves(0..PACKS.len())) {
        check_sequence(&fresh(Arc::new(MemoryStore::new())), &moves)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: (cases() / 6).max(4), ..ProptestConfig::default() })]

    /// Interleavings: four threads propose at once on one SQLite store.
    #[test]
    fn concurrent_proposals_never_break_the_oracle(
        lanes in proptest::collection::vec(
            proptest::collection::vec(a_move(0..PACKS.len()), 25..=25), 4..=4)
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = intentplane::store::sqlite::SqliteStore::open(dir.path().join("s.db")).unwrap();
        let gw = fresh(Arc::new(store));
        let r = play_concurrently(&gw, ctx(), &lanes);
        prop_assert!(r.is_ok(), "{}", r.err().unwrap_or_default());
        let recs = gw.store().receipts().unwrap();
        prop_assert_eq!(recs.len(), r.unwrap_or(0));
        // and the budgets, nonces and executions are what the receipts say
        let audit = intentplane::store::verify_store(&gw.store().snapshot().unwrap(), None);
        prop_assert!(audit.is_ok(), "{:?}", audit);
    }
}

/// The fuzz is not vacuous: the well-formed proposals of the generator
/// reach an execution of every action of every pack, and the oracle agrees
/// with each.
#[test]
fn the_fuzz_reaches_every_action_of_every_pack() {
    let c = ctx();
    let gw = fresh(Arc::new(MemoryStore::new()));
    let mut moves = vec![];
    // variant by variant, so that a mandate's budget is not spent on one
    // action's variants before another action is tried
    for variant in 0..2 {
        for (pack, name) in PACKS.iter().enumerate() {
            for mandate in 0..c.pools[pack].genuine {
                for action in 0..pack_actions(name).len() {
                    moves.push(Move {
                        pack,
                        mandate,
                        genuine: true,
                        cross: false,
                        action: action as u8,
                        base: true,
                        variant,
                        args: vec![],
                        extra_top_level: false,
                        approvals: 2,
                    });
                }
            }
        }
    }
    play(&gw, c, &moves).unwrap();
    let executed: BTreeSet<String> = gw
        .store()
        .receipts()
        .unwrap()
        .iter()
        .filter(|r| r.body["decision"] == "ALLOW")
        .filter_map(|r| r.body["action"].as_str().map(str::to_string))
        .collect();
    for pack in PACKS {
        for a in pack_actions(pack) {
            assert!(executed.contains(*a), "`{a}` never executed: {executed:?}");
        }
    }
}

/// An AgentDyn pack (issue 42) checked, scenario-tested, mutation-tested
/// (`ipc mutate`, 100% killed) and its guarantees proven like every pack,
/// but not yet modelled by the differential oracle of this fuzz.
const NOT_YET_FUZZED: [(&str, &str); 1] = [(
    "shop",
    "issue 42: the oracle does not model its catalogue and orders yet",
)];

/// Every pack in `packs/` is fuzzed, and the oracle knows every action of
/// each (a pack or an action added later fails here until the oracle
/// learns it).
#[test]
fn the_oracle_knows_every_shipped_action() {
    let mut shipped: Vec<String> = std::fs::read_dir(root().join("packs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    shipped.sort();
    // Shipped but not yet fuzzed, each with its reason; a pack leaves this
    // list when the oracle learns it (and any other new pack still fails).
    shipped.retain(|p| !NOT_YET_FUZZED.iter().any(|(n, _)| n == p));
    let mut fuzzed: Vec<String> = PACKS.iter().map(|p| p.to_string()).collect();
    fuzzed.sort();
    assert_eq!(shipped, fuzzed);
    for ta in &world().bundle.table.actions {
        let name = ta.action.name.as_str();
        assert!(
            pack_actions(&ta.pack).contains(&name),
            "`{name}` of `{}` is not fuzzed",
            ta.pack
        );
        assert_eq!(
            contract_of(name),
            Some((ta.pack.as_str(), ta.action.scope.as_str())),
            "`{name}`"
        );
        assert!(actions().contains(&name), "`{name}` is not in actions()");
        for p in &ta.action.params {
            assert!(
                own_params(name).contains(&p.name.as_str()),
                "`{name}.{}`",
                p.name
            );
            assert!(
                PARAMS.contains(&p.name.as_str()),
                "`{}` is not in PARAMS",
                p.name
            );
        }
    }
}
