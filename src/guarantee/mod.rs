//! Proving a pack's guarantees (`guarantee "..." never allow ...`, `...
//! need level N ...`) over the compiled bundle, as `ipc build` does.
//!
//! For each action a guarantee covers, the guarantee's condition becomes a
//! permit of that action (with `context.approval_level < N` for a level),
//! and the solver (cedar-policy-symcc + cvc5, through the `Prover` that
//! `ipc mutate` uses) looks for a request of the gateway's domain that both
//! the action's policies and that permit allow. None: the guarantee holds
//! for every input. One: it is replayed through Cedar and turned into a
//! scenario the pack author can add (`scenario.rs`).
//!
//! What this proves is the Cedar decision, given the context the gateway
//! builds (parameters, facts, the facts the checker added for the
//! guarantee's registry reads); nothing about provenance, budgets,
//! executors or what a downstream server does (docs/guarantees.md).

#[cfg(feature = "solver")]
mod scenario;
#[cfg(feature = "solver")]
mod values;
#[cfg(feature = "solver")]
mod world;

use crate::bundle::Bundle;
use crate::bundle::format::{CTX_APPROVAL_LEVEL, TableAction};
use crate::diagnostics::PackDiagnostic;
use crate::ir;
#[cfg(feature = "solver")]
use crate::mutate::equiv::{Compiled, Counterexample, Prover, gateway_outcome};
/// Without the solver no counterexample is ever found (every proof is
/// `Unproven`, so the build fails closed); the field keeps its shape.
#[cfg(not(feature = "solver"))]
type Counterexample = serde_json::Value;
#[cfg(feature = "solver")]
use cedar_policy::PolicySet;
use cedar_policy::{Policy, PolicyId};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// One checked pack whose guarantees are proven, with where its files are.
pub struct PackGuarantees<'a> {
    pub pack: &'a ir::Pack,
    /// The pack file, as diagnostics name it.
    pub file: String,
    /// Its text, for diagnostics.
    pub source: String,
    /// The folder whose `registries/` the scenarios are drawn from.
    pub dir: Option<PathBuf>,
}

/// What the solver said about one guarantee on one action.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// No input breaks it.
    Proven,
    /// An input breaks it: the gateway's decision there.
    Violated,
    /// No answer (no solver, time limit, an internal error).
    Unproven,
}

/// The proof of one guarantee for one action it covers.
#[derive(Clone, Debug, Serialize)]
pub struct Proof {
    pub pack: String,
    /// The guarantee's reason.
    pub guarantee: String,
    /// `<pack>/<file>:<line>` of the guarantee.
    pub source: String,
    /// Its scope as written.
    pub scope: String,
    pub action: String,
    /// `never allow`, or `need level N`.
    pub claim: String,
    pub outcome: Outcome,
    /// On a violation: the gateway's outcome on the counterexample
    /// (`ALLOW`, `PENDING level 1`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<String>,
    /// On a violation: the request the solver found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterexample: Option<Counterexample>,
    /// On a violation: a scenario file that fails until the pack is fixed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scenario: Option<serde_json::Value>,
    /// Why it is unproven.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    pub millis: f64,
    #[serde(skip)]
    line: usize,
    #[serde(skip)]
    pack_ix: usize,
    /// Unproven because no solver could be had at all (not this proof's
    /// own failure): the build says so once ([`problems`]).
    #[serde(skip)]
    no_solver: bool,
}

impl Proof {
    /// The build's diagnostic for a proof that did not succeed.
    pub fn problem(&self, packs: &[PackGuarantees<'_>]) -> Option<crate::codegen::Problem> {
        let p = packs.get(self.pack_ix)?;
        let span = crate::codegen::line_span(&p.source, self.line);
        let diagnostic = match self.outcome {
            Outcome::Proven => return None,
            Outcome::Violated => PackDiagnostic::GuaranteeViolated {
                reason: self.guarantee.clone(),
                action: self.action.clone(),
                decision: format!(
                    "the policies decide {} on an input where it {}",
                    self.decision.as_deref().unwrap_or("ALLOW"),
                    if self.claim == "never allow" {
                        "says never".to_string()
                    } else {
                        format!("says {}", self.claim)
                    }
                ),
                span,
                help: Some(format!(
                    "add the scenario below to `{}` (it fails until the pack keeps the guarantee), then add the missing rule to `{}`",
                    scenario_dir(p),
                    self.action
                )),
            },
            Outcome::Unproven => PackDiagnostic::GuaranteeUnproven {
                reason: self.guarantee.clone(),
                action: self.action.clone(),
                message: self.message.clone().unwrap_or_default(),
                span,
            },
        };
        Some(crate::codegen::Problem {
            file: p.file.clone(),
            source: p.source.clone(),
            diagnostic,
        })
    }
}

/// The build's diagnostics for these proofs: one per proof that did not
/// succeed, except that proofs no solver could run (none found) are one
/// diagnostic, at the first of them, counting the rest — not the same
/// error once per guarantee and action. Every proof stays `unproven` in
/// the JSON, and the build fails either way.
pub fn problems<'p>(
    proofs: &'p [Proof],
    packs: &[PackGuarantees<'_>],
) -> Vec<(&'p Proof, crate::codegen::Problem)> {
    let without: Vec<&Proof> = proofs.iter().filter(|p| p.no_solver).collect();
    let guarantees = {
        let mut g: Vec<(&str, &str)> = without
            .iter()
            .map(|p| (p.pack.as_str(), p.guarantee.as_str()))
            .collect();
        g.sort_unstable();
        g.dedup();
        g.len()
    };
    let mut out = vec![];
    let mut said = false;
    for proof in proofs {
        if proof.no_solver && said {
            continue;
        }
        let Some(mut problem) = proof.problem(packs) else {
            continue;
        };
        if proof.no_solver {
            said = true;
            if let PackDiagnostic::GuaranteeUnproven { message, .. } = &mut problem.diagnostic
                && without.len() > 1
            {
                message.push_str(&format!(
                    " (nor any of the {} proofs of {guarantees} guarantees)",
                    without.len()
                ));
            }
        }
        out.push((proof, problem));
    }
    out
}

fn scenario_dir(p: &PackGuarantees<'_>) -> String {
    match &p.dir {
        Some(d) => d.join("scenarios").display().to_string() + "/",
        None => "the pack's scenarios".into(),
    }
}

/// Whether any of these packs states a guarantee.
pub fn any(packs: &[PackGuarantees<'_>]) -> bool {
    packs.iter().any(|p| !p.pack.guarantees.is_empty())
}

/// Proves every guarantee of these packs against the bundle built from
/// them: one proof per guarantee and covered action, in pack and
/// declaration order. Nothing here fails silently: without a solver, or
/// on any error, the proof is `Unproven`.
pub fn prove(bundle: &Bundle, packs: &[PackGuarantees<'_>]) -> Vec<Proof> {
    let mut out = vec![];
    let cedar = bundle.cedar();
    #[cfg(feature = "solver")]
    let mut prover = match &cedar {
        Ok(c) => Prover::new(c.schema.clone()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    #[cfg(not(feature = "solver"))]
    let mut prover: Result<std::convert::Infallible, String> = Err(
        "this build has no solver (Cargo feature `solver`): no guarantee can be proven".to_string(),
    );
    for (pack_ix, p) in packs.iter().enumerate() {
        for g in &p.pack.guarantees {
            let claim = claim(g);
            for c in &g.covers {
                let started = Instant::now();
                let mut proof = Proof {
                    pack: p.pack.name.clone(),
                    guarantee: g.reason.clone(),
                    source: source_label(p.pack, g),
                    scope: g.scope.clone(),
                    action: c.action.clone(),
                    claim: claim.clone(),
                    outcome: Outcome::Unproven,
                    decision: None,
                    counterexample: None,
                    scenario: None,
                    message: None,
                    millis: 0.0,
                    line: g.line,
                    pack_ix,
                    no_solver: prover.is_err(),
                };
                let action = bundle.table.action(&c.action);
                let set = cedar.as_ref().ok().and_then(|x| x.by_action.get(&c.action));
                let result = match (&mut prover, action, set) {
                    (Err(e), _, _) => Err(e.clone()),
                    (_, None, _) | (_, _, None) => {
                        Err(format!("`{}` is not in the bundle", c.action))
                    }
                    #[cfg(feature = "solver")]
                    (Ok(prover), Some(a), Some(set)) => prove_one(prover, a, set, g, c),
                    #[cfg(not(feature = "solver"))]
                    (Ok(never), _, _) => match *never {},
                };
                match result {
                    Ok(None) => proof.outcome = Outcome::Proven,
                    Ok(Some(example)) => {
                        #[cfg(feature = "solver")]
                        if let (Some(a), Some(set)) = (action, set) {
                            let decision = gateway_outcome(set, &example);
                            proof.scenario = Some(scenario::scenario(p, a, g, &example, &decision));
                            proof.decision = Some(decision);
                        }
                        proof.outcome = Outcome::Violated;
                        proof.counterexample = Some(example);
                    }
                    Err(e) => proof.message = Some(e),
                }
                proof.millis = started.elapsed().as_secs_f64() * 1000.0;
                out.push(proof);
            }
        }
    }
    out
}

/// `never allow`, or `need level N`.
fn claim(g: &ir::Guarantee) -> String {
    match g.level {
        None => "never allow".to_string(),
        Some(n) => format!("need level {n}"),
    }
}

/// `<pack>/<file>:<line>` of a guarantee.
fn source_label(pack: &ir::Pack, g: &ir::Guarantee) -> String {
    format!(
        "{}:{}",
        crate::codegen::file_label(&pack.name, &pack.file),
        g.line
    )
}

/// One guarantee on one action it covers, as a permit ready to be proven
/// against any policy set of that action: the mutants of `ipc mutate`.
#[derive(Clone, Debug)]
pub struct Obligation {
    /// The guarantee's reason.
    pub guarantee: String,
    /// `<pack>/<file>:<line>` of the guarantee.
    pub source: String,
    /// `never allow`, or `need level N`.
    pub claim: String,
    #[cfg_attr(not(feature = "solver"), allow(dead_code))]
    condition: Policy,
}

/// The guarantees of `pack` that cover `action`, in declaration order.
pub fn obligations(pack: &ir::Pack, action: &TableAction) -> Result<Vec<Obligation>, String> {
    let mut out = vec![];
    for g in &pack.guarantees {
        for c in g.covers.iter().filter(|c| c.action == action.action.name) {
            out.push(Obligation {
                guarantee: g.reason.clone(),
                source: source_label(pack, g),
                claim: claim(g),
                condition: condition_policy(action, g, c)?,
            });
        }
    }
    Ok(out)
}

#[cfg(feature = "solver")]
impl Obligation {
    /// Whether the action's own policies (`set`, compiled once per action
    /// and shared with the other proofs) keep it: a request that breaks it,
    /// or `None` when it holds for every input.
    pub fn check_original(
        &self,
        prover: &mut Prover,
        action: &TableAction,
        set: &PolicySet,
    ) -> Result<Option<Counterexample>, String> {
        prover.allowed_where(action, set, &self.condition)
    }

    /// The same proof on another policy set of the action (a mutant),
    /// compiled by [`Prover::compile`].
    pub fn check(
        &self,
        prover: &mut Prover,
        compiled: &Compiled,
        set: &PolicySet,
    ) -> Result<Option<Counterexample>, String> {
        prover.allowed_where_compiled(compiled, set, &self.condition)
    }
}

/// The guarantee on one action as a permit: it matches exactly the
/// requests the guarantee says the policies must deny.
pub fn condition_policy(
    action: &TableAction,
    g: &ir::Guarantee,
    c: &ir::Covered,
) -> Result<Policy, String> {
    let mut parts = vec![];
    if let Some(w) = &c.when {
        parts.push(format!("({})", crate::codegen::cedar_condition(w)?));
    }
    if let Some(n) = g.level {
        parts.push(format!("context.{CTX_APPROVAL_LEVEL} < {n}"));
    }
    let when = if parts.is_empty() {
        String::new()
    } else {
        format!(" when {{ {} }}", parts.join(" && "))
    };
    let text = format!(
        "permit (principal, action == {}, resource){when};",
        action.cedar_action
    );
    Policy::parse(Some(PolicyId::new("ipc-guarantee")), &text)
        .map_err(|e| format!("the guarantee does not compile to cedar: {e}"))
}

#[cfg(feature = "solver")]
fn prove_one(
    prover: &mut Prover,
    action: &TableAction,
    set: &PolicySet,
    g: &ir::Guarantee,
    c: &ir::Covered,
) -> Result<Option<Counterexample>, String> {
    let cond = condition_policy(action, g, c)?;
    prover.allowed_where(action, set, &cond)
}

/// The checked packs of a build, with their files and folders.
pub fn inputs(checked: &[crate::check::Checked]) -> Vec<PackGuarantees<'_>> {
    checked
        .iter()
        .filter_map(|c| {
            c.pack.as_ref().map(|p| PackGuarantees {
                pack: p,
                file: c.file.clone(),
                source: c.source.clone(),
                dir: std::path::Path::new(&c.file)
                    .parent()
                    .map(std::path::Path::to_path_buf),
            })
        })
        .collect()
}

/// The proofs for a person: each failure as a diagnostic (a violation
/// followed by its scenario), then one line of totals.
pub fn render_human(
    proofs: &[Proof],
    broken: &[(&Proof, crate::codegen::Problem)],
    color: bool,
) -> String {
    let mut text = String::new();
    if proofs.is_empty() {
        return text;
    }
    for (proof, problem) in broken {
        text.push_str(&problem.render(color));
        text.push('\n');
        if let Some(s) = &proof.scenario {
            text.push_str(&serde_json::to_string_pretty(s).unwrap_or_default());
            text.push_str("\n\n");
        }
    }
    let count = |o: Outcome| proofs.iter().filter(|p| p.outcome == o).count();
    let guarantees: std::collections::BTreeSet<(&str, &str)> = proofs
        .iter()
        .map(|p| (p.pack.as_str(), p.source.as_str()))
        .collect();
    let actions: std::collections::BTreeSet<&str> =
        proofs.iter().map(|p| p.action.as_str()).collect();
    let s = |n: usize| if n == 1 { "" } else { "s" };
    // a proof is one guarantee on one action it covers
    text.push_str(&format!(
        "guarantees: {} proven, {} violated, {} unproven ({} proof{}: {} guarantee{} over {} action{})\n",
        count(Outcome::Proven),
        count(Outcome::Violated),
        count(Outcome::Unproven),
        proofs.len(),
        s(proofs.len()),
        guarantees.len(),
        s(guarantees.len()),
        actions.len(),
        s(actions.len()),
    ));
    text
}
