//! Mutation testing of a pack's policies: `ipc mutate`.
//!
//! For each action of a pack, [`mutants::generate`] weakens (or strengthens)
//! one policy at a time on Cedar's syntax tree; the pack's scenarios run
//! against a gateway whose policies for that action are replaced by the
//! mutant's ([`crate::gateway::Gateway::with_policies`]), in process. A
//! mutant is killed when a scenario fails or its outcome changes. A
//! survivor is handed to [`equiv::Prover`]: proved equivalent (the same
//! decision on every request the gateway can make), or reported with the
//! solver's counterexample as a scenario to add. A survivor that is not
//! equivalent is then proven against the pack's guarantees that cover its
//! action ([`crate::guarantee::obligations`], the proof of `ipc build`):
//! one the unmutated policies keep and the mutant breaks kills it. Without
//! cvc5 survivors are unproven.

pub mod equiv;
pub mod mutants;
pub mod report;
mod runner;

pub use runner::PackScenarios;

use crate::bundle::Bundle;
use crate::bundle::format::TableAction;
use crate::guarantee::Obligation;
use crate::ir;
use cedar_policy::{Policy, PolicyId, PolicySet};
use equiv::{Counterexample, LintFinding, Prover, Verdict};
use mutants::{Mutant, Operator};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum MutateError {
    /// The bundle's Cedar does not load for mutation testing.
    #[error("the bundle's cedar does not load: {0}")]
    #[diagnostic(code(ipc::mutate::cedar))]
    Cedar(String),
    /// The table names a policy the bundle lacks.
    #[error("the bundle has no policy `{0}` listed in its table")]
    #[diagnostic(code(ipc::mutate::policy))]
    MissingPolicy(String),
    #[error(transparent)]
    #[diagnostic(transparent)]
    Mutant(#[from] mutants::MutantError),
    /// A pack's scenarios cannot run (unreadable or invalid files).
    #[error("the scenarios of pack `{pack}` cannot run: {reason}")]
    #[diagnostic(code(ipc::mutate::suite))]
    Suite { pack: String, reason: String },
    /// The scenarios fail on the real policies: mutants would be killed by
    /// tests that are wrong already.
    #[error("the scenarios of pack `{pack}` fail on the unmutated policies: {tests}")]
    #[diagnostic(
        code(ipc::mutate::baseline),
        help("mutation testing needs a passing suite: run `ipc test` and fix it first")
    )]
    Baseline { pack: String, tests: String },
    /// A pack without scenarios: nothing could kill a mutant.
    #[error("pack `{0}` has no scenarios: every mutant would survive")]
    #[diagnostic(
        code(ipc::mutate::no_scenarios),
        help("add scenario files under `<pack>/scenarios/` (see docs/scenarios.md)")
    )]
    NoScenarios(String),
}

/// One scenario's result, as the mutation tester compares them.
#[derive(Clone, Debug, PartialEq)]
pub struct ScenarioOutcome {
    /// `<file>: <test>`.
    pub name: String,
    pub passed: bool,
    /// What the gateway decided, e.g. `DENY (policy)`.
    pub got: String,
}

/// Runs a pack's scenarios, optionally with one action's policies replaced.
pub trait ScenarioRunner {
    fn run(&mut self, replace: Option<(&str, &PolicySet)>) -> Result<Vec<ScenarioOutcome>, String>;
}

/// What happened to one mutant.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// A scenario failed or changed its outcome.
    Killed { scenario: String, got: String },
    /// Survived the scenarios, but breaks a guarantee of the pack that the
    /// unmutated policies keep: the proof kills it.
    KilledByGuarantee {
        /// The guarantee's reason.
        guarantee: String,
        /// `<pack>/<file>:<line>` of the guarantee.
        guarantee_source: String,
        /// `never allow`, or `need level N`.
        claim: String,
        /// A request on which the mutant breaks it.
        counterexample: Box<Counterexample>,
        /// The gateway's decision on it with the real policies, and with the
        /// mutant's.
        original: String,
        mutant: String,
    },
    /// Proved to decide like the original on every request the gateway can
    /// make.
    Equivalent,
    /// Survived and not equivalent: a request that tells them apart.
    Survived {
        counterexample: Box<Counterexample>,
        /// The gateway's decision on it with the real policies, and with the
        /// mutant's.
        original: String,
        mutant: String,
        /// A test to add to a scenario file (fill in the mandate).
        scenario: Value,
    },
    /// Survived; the solver could not decide (or is not available).
    Unproven { reason: String },
}

impl Status {
    pub fn label(&self) -> &'static str {
        match self {
            Status::Killed { .. } => "killed",
            Status::KilledByGuarantee { .. } => "killed by guarantee",
            Status::Equivalent => "equivalent",
            Status::Survived { .. } => "SURVIVED",
            Status::Unproven { .. } => "UNPROVEN",
        }
    }
    /// Killed or proved equivalent.
    pub fn ok(&self) -> bool {
        matches!(
            self,
            Status::Killed { .. } | Status::KilledByGuarantee { .. } | Status::Equivalent
        )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct MutantResult {
    pub id: String,
    pub action: String,
    pub policy_id: String,
    pub source: String,
    pub operator: Operator,
    pub description: String,
    #[serde(flatten)]
    pub status: Status,
}

/// The mutation report of one pack.
#[derive(Clone, Debug, Serialize)]
pub struct PackReport {
    pub pack: String,
    pub scenarios: usize,
    pub mutants: Vec<MutantResult>,
    /// Why survivors are unproven, when the solver is not available.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solver_unavailable: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lint: Vec<LintFinding>,
    /// The guarantees that kill no mutant because the unmutated policies do
    /// not keep them (or the solver could not tell): `ipc build` fails on
    /// these.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub guarantees_not_kept: Vec<String>,
}

impl PackReport {
    pub fn count(&self, label: &str) -> usize {
        self.mutants
            .iter()
            .filter(|m| m.status.label() == label)
            .count()
    }
    /// Killed or equivalent, in percent (100 with no mutant).
    pub fn score(&self) -> f64 {
        if self.mutants.is_empty() {
            return 100.0;
        }
        let ok = self.mutants.iter().filter(|m| m.status.ok()).count();
        100.0 * ok as f64 / self.mutants.len() as f64
    }
    pub fn ok(&self) -> bool {
        self.mutants.iter().all(|m| m.status.ok())
    }
    pub fn summary(&self) -> Value {
        json!({
            "mutants": self.mutants.len(),
            "killed": self.count("killed"),
            "killed_by_guarantee": self.count("killed by guarantee"),
            "equivalent": self.count("equivalent"),
            "survived": self.count("SURVIVED"),
            "unproven": self.count("UNPROVEN"),
            "score": (self.score() * 10.0).round() / 10.0,
        })
    }
}

/// The policies of one action, in bundle order.
pub fn action_policies(
    all: &PolicySet,
    action: &TableAction,
) -> Result<(Vec<Policy>, PolicySet), MutateError> {
    let mut list = vec![];
    let mut set = PolicySet::new();
    for id in &action.policy_ids {
        let p = all
            .policy(&PolicyId::new(id))
            .ok_or_else(|| MutateError::MissingPolicy(id.clone()))?
            .clone();
        set.add(p.clone())
            .map_err(|e| MutateError::Cedar(e.to_string()))?;
        list.push(p);
    }
    Ok((list, set))
}

/// Every mutant of a pack's actions.
pub fn pack_mutants(bundle: &Bundle, pack: &str) -> Result<Vec<Mutant>, MutateError> {
    let cedar = bundle
        .cedar()
        .map_err(|e| MutateError::Cedar(e.to_string()))?;
    let mut out = vec![];
    for a in bundle.table.actions.iter().filter(|a| a.pack == pack) {
        let (list, _) = action_policies(&cedar.policies, a)?;
        out.extend(mutants::generate(&a.action.name, &list)?);
    }
    Ok(out)
}

/// Where the survivors go.
pub enum Solver<'a> {
    Available(&'a mut Prover),
    /// Why not (cvc5 missing): survivors are unproven.
    Unavailable(String),
}

/// The guarantees a survivor is proven against: per action, those that the
/// unmutated policies keep, proven on first need.
struct Guarantees<'a> {
    pack: Option<&'a ir::Pack>,
    kept: std::collections::HashMap<String, Vec<Obligation>>,
    not_kept: Vec<String>,
}

impl Guarantees<'_> {
    /// The guarantees on `action` that its policies (`original`) keep.
    fn kept(
        &mut self,
        prover: &mut Prover,
        action: &TableAction,
        original: &PolicySet,
    ) -> &[Obligation] {
        let name = &action.action.name;
        if !self.kept.contains_key(name) {
            let mut kept = vec![];
            let all = match self.pack {
                None => Ok(vec![]),
                Some(p) => crate::guarantee::obligations(p, action),
            };
            match all {
                Err(e) => self
                    .not_kept
                    .push(format!("the guarantees on `{name}` do not compile: {e}")),
                Ok(all) => {
                    for o in all {
                        match o.check_original(prover, action, original) {
                            Ok(None) => kept.push(o),
                            Ok(Some(_)) => self.not_kept.push(format!(
                                "`{}` ({}) does not hold for `{name}` (see `ipc build`)",
                                o.guarantee, o.source
                            )),
                            Err(e) => self.not_kept.push(format!(
                                "`{}` ({}) is unproven for `{name}`: {e}",
                                o.guarantee, o.source
                            )),
                        }
                    }
                }
            }
            self.kept.insert(name.clone(), kept);
        }
        self.kept.get(name).map(Vec::as_slice).unwrap_or_default()
    }

    /// A survivor of the scenarios that is not equivalent, proven against
    /// the guarantees on its action: the status of the first it breaks.
    /// A proof that fails kills nothing.
    fn kill(
        &mut self,
        prover: &mut Prover,
        action: &TableAction,
        original: &PolicySet,
        mutant: &PolicySet,
    ) -> Option<Status> {
        let kept = self.kept(prover, action, original).to_vec();
        if kept.is_empty() {
            return None;
        }
        let compiled = prover.compile(action, mutant).ok()?;
        kept.iter().find_map(|o| {
            let example = o.check(prover, &compiled, mutant).ok()??;
            Some(Status::KilledByGuarantee {
                guarantee: o.guarantee.clone(),
                guarantee_source: o.source.clone(),
                claim: o.claim.clone(),
                original: equiv::gateway_outcome(original, &example),
                mutant: equiv::gateway_outcome(mutant, &example),
                counterexample: Box::new(example),
            })
        })
    }
}

/// Mutation-tests one pack of `bundle`: generate, run, prove. `guarantees`
/// is the checked pack whose guarantees judge the survivors (`None`: only
/// scenarios and equivalence). `progress` is told (done, total) after each
/// mutant.
pub fn mutate_pack(
    bundle: &Bundle,
    pack: &str,
    guarantees: Option<&ir::Pack>,
    runner: &mut dyn ScenarioRunner,
    solver: &mut Solver<'_>,
    lint: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<PackReport, MutateError> {
    let cedar = bundle
        .cedar()
        .map_err(|e| MutateError::Cedar(e.to_string()))?;
    let suite_err = |reason: String| MutateError::Suite {
        pack: pack.to_string(),
        reason,
    };
    let baseline = runner.run(None).map_err(suite_err)?;
    if baseline.is_empty() {
        return Err(MutateError::NoScenarios(pack.to_string()));
    }
    let failing: Vec<&str> = baseline
        .iter()
        .filter(|s| !s.passed)
        .map(|s| s.name.as_str())
        .collect();
    if !failing.is_empty() {
        return Err(MutateError::Baseline {
            pack: pack.to_string(),
            tests: failing.join(", "),
        });
    }
    let mut results = vec![];
    let mut lint_findings = vec![];
    let actions: Vec<&TableAction> = bundle
        .table
        .actions
        .iter()
        .filter(|a| a.pack == pack)
        .collect();
    let mut all: Vec<(&TableAction, PolicySet, Mutant)> = vec![];
    for a in &actions {
        let (list, set) = action_policies(&cedar.policies, a)?;
        for m in mutants::generate(&a.action.name, &list)? {
            all.push((a, set.clone(), m));
        }
        if lint && let Solver::Available(p) = solver {
            match p.lint(a, &set) {
                Ok(f) => lint_findings.extend(f),
                Err(e) => lint_findings.push(LintFinding {
                    code: "lint-failed",
                    action: a.action.name.clone(),
                    policy_id: String::new(),
                    source: a.source.clone(),
                    message: e,
                    example: None,
                }),
            }
        }
    }
    let total = all.len();
    let mut guarantees = Guarantees {
        pack: guarantees,
        kept: Default::default(),
        not_kept: vec![],
    };
    for (done, (action, original, m)) in all.into_iter().enumerate() {
        let outcomes = runner.run(Some((&m.action, &m.set))).map_err(suite_err)?;
        let killer = outcomes.iter().find(|o| {
            !o.passed
                || baseline
                    .iter()
                    .find(|b| b.name == o.name)
                    .is_none_or(|b| b.got != o.got)
        });
        let status = match killer {
            Some(k) => Status::Killed {
                scenario: k.name.clone(),
                got: k.got.clone(),
            },
            None => match solver {
                Solver::Unavailable(why) => Status::Unproven {
                    reason: why.clone(),
                },
                Solver::Available(p) => {
                    let verdict = p.equivalent(action, &original, &m.set);
                    // only a mutant that is not equivalent can break a
                    // guarantee the original keeps: the proofs run here
                    let by_guarantee = match verdict {
                        Verdict::Equivalent => None,
                        _ => guarantees.kill(p, action, &original, &m.set),
                    };
                    match (by_guarantee, verdict) {
                        (Some(killed), _) => killed,
                        (None, Verdict::Equivalent) => Status::Equivalent,
                        (None, Verdict::Failed(reason)) => Status::Unproven { reason },
                        (
                            None,
                            Verdict::Differs {
                                example,
                                original: o,
                                mutant: mu,
                            },
                        ) => {
                            let name = format!("mutation kill: {}", m.id);
                            let scenario =
                                equiv::suggested_scenario(action, &original, &name, &example, &o);
                            Status::Survived {
                                counterexample: Box::new(example),
                                original: o,
                                mutant: mu,
                                scenario,
                            }
                        }
                    }
                }
            },
        };
        results.push(MutantResult {
            id: m.id,
            action: m.action,
            policy_id: m.policy_id,
            source: m.source,
            operator: m.operator,
            description: m.description,
            status,
        });
        progress(done + 1, total);
    }
    Ok(PackReport {
        pack: pack.to_string(),
        scenarios: baseline.len(),
        mutants: results,
        solver_unavailable: match solver {
            Solver::Unavailable(w) => Some(w.clone()),
            Solver::Available(_) => None,
        },
        lint: lint_findings,
        guarantees_not_kept: guarantees.not_kept,
    })
}
