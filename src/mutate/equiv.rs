//! Symbolic equivalence with Cedar's symbolic compiler (`cedar-policy-symcc`)
//! and the cvc5 solver, and the solver-backed lint.
//!
//! Two policy sets of one action are compared for every request the schema
//! allows *in the gateway's domain*: both sets get the same extra forbid
//! that denies what the gateway never asks (an approval level outside
//! 0..=2, a parameter outside its `range`), so a mutant that differs only
//! there is equivalent for the gateway. A counterexample is replayed
//! through Cedar's `Authorizer` before it is reported.

use crate::bundle::format::{CTX_APPROVAL_LEVEL, CTX_NOW, CTX_PROVENANCE, TableAction};
use crate::ir::Validator;
use crate::mutate::mutants::{conjuncts, is_guard};
use cedar_policy::pst::{self, BinaryOp, Clause, Effect, Expr, Literal, Var};
use cedar_policy::{
    Authorizer, Context, Decision, Entities, EntityUid, Policy, PolicySet, Request, RequestEnv,
    Schema,
};
use cedar_policy_symcc::solver::LocalSolver;
use cedar_policy_symcc::{CedarSymCompiler, CompiledPolicy, CompiledPolicySet};
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Id of the domain forbid added to both sets of a comparison.
const DOMAIN_ID: &str = "ipc-mutate/domain";

/// Why the solver cannot be used.
#[derive(Debug, Clone, thiserror::Error, miette::Diagnostic)]
pub enum SolverUnavailable {
    /// cvc5 is not found (not `CVC5`, not on the `PATH`, not the wheel's
    /// `intentplane-cvc5` beside `ipc`): survivors are listed as unproven.
    #[error("cvc5 not found: set `CVC5` to its path or put `cvc5` on the `PATH`")]
    #[diagnostic(
        code(ipc::mutate::no_solver),
        help(
            "on Debian: `apt-get install cvc5`; with pip: `pip install intentplane` puts `intentplane-cvc5` beside `ipc`"
        )
    )]
    NotFound,
    /// `CVC5` names a file that does not exist.
    #[error("`CVC5` points to `{0}`, which does not exist")]
    #[diagnostic(code(ipc::mutate::no_solver))]
    BadPath(String),
    /// The solver's async runtime cannot start.
    #[error("cannot start the async runtime for the solver: {0}")]
    #[diagnostic(code(ipc::mutate::runtime))]
    Runtime(String),
}

/// The launcher the Python wheel installs beside `ipc`: cvc5 from PyPI's
/// `cvc5` package (python/intentplane/_cvc5.py), speaking SMT-LIB on stdin
/// as `cvc5 --lang smt` does.
pub const WHEEL_SOLVER: &str = "intentplane-cvc5";

/// Where cvc5 is: `CVC5` (a path, or a name on the `PATH`), else `cvc5` on
/// the `PATH`, else the wheel's [`WHEEL_SOLVER`] in the folder of the
/// running `ipc` (a venv's `bin/`: `pip install intentplane` puts both
/// there). Never a guess beyond these.
pub fn find_cvc5() -> Result<PathBuf, SolverUnavailable> {
    if let Some(p) = std::env::var_os("CVC5") {
        let p = PathBuf::from(p);
        if p.components().count() > 1 {
            return if p.is_file() {
                Ok(p)
            } else {
                Err(SolverUnavailable::BadPath(p.display().to_string()))
            };
        }
        return search_path(&p.to_string_lossy()).ok_or(SolverUnavailable::NotFound);
    }
    search_path("cvc5")
        .or_else(beside_ipc)
        .ok_or(SolverUnavailable::NotFound)
}

fn beside_ipc() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.join(WHEEL_SOLVER);
    p.is_file().then_some(p)
}

fn search_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// A request on which two sets decide differently (or a lint's example).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Counterexample {
    pub principal: String,
    pub action: String,
    pub resource: String,
    /// The request's context, as JSON (parameters, facts, provenance,
    /// `approval_level`, `now`).
    pub context: Value,
}

/// The gateway's decision on a context, replayed over levels 0, 1, 2 as the
/// policy stage does: `ALLOW` (level 0), `PENDING level N`, or `DENY`.
pub fn gateway_outcome(set: &PolicySet, cex: &Counterexample) -> String {
    let (Ok(p), Ok(a), Ok(r)) = (
        cex.principal.parse::<EntityUid>(),
        cex.action.parse::<EntityUid>(),
        cex.resource.parse::<EntityUid>(),
    ) else {
        return "DENY (unreadable request)".into();
    };
    let Value::Object(ctx) = &cex.context else {
        return "DENY (no context)".into();
    };
    let auth = Authorizer::new();
    for level in 0..=2i64 {
        let mut c = ctx.clone();
        c.insert(CTX_APPROVAL_LEVEL.into(), Value::from(level));
        let Ok(context) = Context::from_json_value(Value::Object(c), None) else {
            return "DENY (context)".into();
        };
        let Ok(req) = Request::new(p.clone(), a.clone(), r.clone(), context, None) else {
            return "DENY (request)".into();
        };
        let resp = auth.is_authorized(&req, set, &Entities::empty());
        if resp.diagnostics().errors().next().is_some() {
            return "DENY (evaluation error)".into();
        }
        if resp.decision() == Decision::Allow {
            return if level == 0 {
                "ALLOW".into()
            } else {
                format!("PENDING level {level}")
            };
        }
    }
    "DENY".into()
}

/// Cedar's decision on exactly this request (its own approval level).
fn cedar_decision(set: &PolicySet, cex: &Counterexample) -> Option<Decision> {
    let context = Context::from_json_value(cex.context.clone(), None).ok()?;
    let req = Request::new(
        cex.principal.parse().ok()?,
        cex.action.parse().ok()?,
        cex.resource.parse().ok()?,
        context,
        None,
    )
    .ok()?;
    Some(
        Authorizer::new()
            .is_authorized(&req, set, &Entities::empty())
            .decision(),
    )
}

fn context_attr(name: &str) -> Arc<Expr> {
    Arc::new(Expr::GetAttr {
        expr: Arc::new(Expr::Var(Var::Context)),
        attr: name.into(),
    })
}

fn cmp(op: BinaryOp, attr: &str, v: i64) -> Arc<Expr> {
    Arc::new(Expr::BinaryOp {
        op,
        left: context_attr(attr),
        right: Arc::new(Expr::Literal(Literal::Long(v))),
    })
}

fn disjoin(parts: Vec<Arc<Expr>>) -> Option<Arc<Expr>> {
    let mut it = parts.into_iter();
    let first = it.next()?;
    Some(it.fold(first, |acc, e| {
        Arc::new(Expr::BinaryOp {
            op: BinaryOp::Or,
            left: acc,
            right: e,
        })
    }))
}

/// What the gateway never asks Cedar, as one condition: an approval level
/// outside 0..=2, a ranged numeric parameter outside its range.
fn out_of_domain(action: &TableAction) -> Arc<Expr> {
    let mut parts = vec![
        cmp(BinaryOp::Less, CTX_APPROVAL_LEVEL, 0),
        cmp(BinaryOp::Greater, CTX_APPROVAL_LEVEL, 2),
    ];
    for p in &action.action.params {
        if !p.ty.is_numeric() {
            continue;
        }
        for v in &p.validators {
            if let Validator::Range { min, max } = v {
                parts.push(cmp(BinaryOp::Less, &p.name, *min));
                parts.push(cmp(BinaryOp::Greater, &p.name, *max));
            }
        }
    }
    // never empty: the approval level is always there
    disjoin(parts).unwrap_or_else(|| Arc::new(Expr::Literal(Literal::Bool(false))))
}

fn make_policy(
    id: &str,
    effect: Effect,
    action_uid: &EntityUid,
    when: Option<Arc<Expr>>,
) -> Result<Policy, String> {
    let tpl = pst::Template::new(
        pst::PolicyID(id.into()),
        effect,
        pst::PrincipalConstraint::Any,
        pst::ActionConstraint::Eq(action_uid.clone().into()),
        pst::ResourceConstraint::Any,
    )
    .try_with_clauses(when.map(Clause::When))
    .map_err(|e| e.to_string())?;
    let sp = pst::StaticPolicy::try_from(tpl).map_err(|e| e.to_string())?;
    Policy::from_pst(pst::Policy::Static(sp)).map_err(|e| e.to_string())
}

/// `set` plus the domain forbid.
fn in_domain(set: &PolicySet, domain: &Policy) -> Result<PolicySet, String> {
    let mut s = set.clone();
    s.add(domain.clone()).map_err(|e| e.to_string())?;
    Ok(s)
}

/// The outcome of one equivalence query.
#[derive(Clone, Debug)]
pub enum Verdict {
    /// Same decision on every request of the gateway's domain.
    Equivalent,
    /// A request where they differ: the original's and the mutant's
    /// gateway outcomes on it.
    Differs {
        example: Counterexample,
        original: String,
        mutant: String,
    },
    /// The solver failed (time limit, crash); the mutant is unproven.
    Failed(String),
}

/// One finding of the solver-backed lint.
#[derive(Clone, Debug, Serialize)]
pub struct LintFinding {
    pub code: &'static str,
    pub action: String,
    pub policy_id: String,
    pub source: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<Counterexample>,
}

/// One action's policy set compiled for the solver ([`Prover::compile`]),
/// in the gateway's domain, under each of the action's request environments.
pub struct Compiled(Vec<(RequestEnv, CompiledPolicySet)>);

/// The solver, the async runtime it needs and the compiled originals.
pub struct Prover {
    rt: tokio::runtime::Runtime,
    symcc: Option<CedarSymCompiler<LocalSolver>>,
    schema: Schema,
    /// Per action: its request environments and the compiled original
    /// (with the domain forbid) under each.
    compiled: HashMap<String, Vec<(RequestEnv, CompiledPolicySet)>>,
}

/// Runs one solver query on a prover; on error the solver is dropped, so
/// that the next query starts a new one.
macro_rules! solve {
    ($prover:expr, $c:ident => $call:expr) => {{
        let Prover { rt, symcc, .. } = &mut *$prover;
        let r = rt.block_on(async {
            start(symcc)?;
            let Some($c) = symcc.as_mut() else {
                return Err("no solver".to_string());
            };
            $call.await.map_err(|e| format!("solver: {e}"))
        });
        if r.is_err() {
            *symcc = None;
        }
        r
    }};
}

fn start(slot: &mut Option<CedarSymCompiler<LocalSolver>>) -> Result<(), String> {
    if slot.is_none() {
        let path = find_cvc5().map_err(|e| e.to_string())?;
        let solver = LocalSolver::from_command(tokio::process::Command::new(path).args([
            "--lang",
            "smt",
            "--tlimit-per=60000",
        ]))
        .map_err(|e| format!("cannot start cvc5: {e}"))?;
        *slot = Some(CedarSymCompiler::new(solver).map_err(|e| e.to_string())?);
    }
    Ok(())
}

fn request_of(env: &cedar_policy_symcc::Env) -> Counterexample {
    let r = &env.request;
    Counterexample {
        principal: r.principal().map(|p| p.to_string()).unwrap_or_default(),
        action: r.action().map(|a| a.to_string()).unwrap_or_default(),
        resource: r.resource().map(|x| x.to_string()).unwrap_or_default(),
        context: r
            .context()
            .and_then(|c| c.to_json_value().ok())
            .unwrap_or(Value::Null),
    }
}

impl Prover {
    /// Fails when cvc5 cannot be found; the solver itself starts on the
    /// first query.
    pub fn new(schema: Schema) -> Result<Self, SolverUnavailable> {
        find_cvc5()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| SolverUnavailable::Runtime(e.to_string()))?;
        Ok(Prover {
            rt,
            symcc: None,
            schema,
            compiled: HashMap::new(),
        })
    }

    fn envs(&self, action_uid: &EntityUid) -> Vec<RequestEnv> {
        self.schema
            .request_envs()
            .filter(|e| e.action() == action_uid)
            .collect()
    }

    fn action_uid(action: &TableAction) -> Result<EntityUid, String> {
        action
            .cedar_action
            .parse()
            .map_err(|e: cedar_policy::ParseErrors| e.to_string())
    }

    fn domain(action: &TableAction) -> Result<Policy, String> {
        make_policy(
            DOMAIN_ID,
            Effect::Forbid,
            &Self::action_uid(action)?,
            Some(out_of_domain(action)),
        )
    }

    fn original(
        &mut self,
        action: &TableAction,
        set: &PolicySet,
    ) -> Result<Vec<(RequestEnv, CompiledPolicySet)>, String> {
        if let Some(c) = self.compiled.get(&action.action.name) {
            return Ok(c.clone());
        }
        let out = self.compile(action, set)?.0;
        self.compiled
            .insert(action.action.name.clone(), out.clone());
        Ok(out)
    }

    /// `set` (any policy set of `action`, e.g. a mutant) with the domain
    /// forbid, compiled under each of the action's request environments;
    /// never cached.
    pub fn compile(&self, action: &TableAction, set: &PolicySet) -> Result<Compiled, String> {
        let uid = Self::action_uid(action)?;
        let full = in_domain(set, &Self::domain(action)?)?;
        let mut out = vec![];
        for env in self.envs(&uid) {
            let c = CompiledPolicySet::compile(&full, &env, &self.schema)
                .map_err(|e| format!("cannot compile the policies of `{}`: {e}", uid))?;
            out.push((env, c));
        }
        Ok(Compiled(out))
    }

    /// Whether `mutant` decides like `original` (the action's policies) on
    /// every request of the gateway's domain.
    pub fn equivalent(
        &mut self,
        action: &TableAction,
        original: &PolicySet,
        mutant: &PolicySet,
    ) -> Verdict {
        match self.try_equivalent(action, original, mutant) {
            Ok(v) => v,
            Err(e) => Verdict::Failed(e),
        }
    }

    fn try_equivalent(
        &mut self,
        action: &TableAction,
        original: &PolicySet,
        mutant: &PolicySet,
    ) -> Result<Verdict, String> {
        let envs = self.original(action, original)?;
        let mutant_full = in_domain(mutant, &Self::domain(action)?)?;
        for (env, orig) in envs {
            let m = CompiledPolicySet::compile(&mutant_full, &env, &self.schema)
                .map_err(|e| format!("cannot compile the mutant: {e}"))?;
            let found = solve!(self, c => c.check_equivalent_with_counterexample_opt(&orig, &m))?;
            if let Some(env) = found {
                let example = request_of(&env);
                let (a, b) = (
                    cedar_decision(original, &example),
                    cedar_decision(mutant, &example),
                );
                if a == b {
                    return Err(format!(
                        "the solver's counterexample does not replay: both sets decide {a:?} on it"
                    ));
                }
                return Ok(Verdict::Differs {
                    original: gateway_outcome(original, &example),
                    mutant: gateway_outcome(mutant, &example),
                    example,
                });
            }
        }
        Ok(Verdict::Equivalent)
    }

    /// A request of the gateway's domain that `set` (an action's policies)
    /// allows and `condition` (a permit of the same action) matches, if any:
    /// `None` proves that `set` denies whenever `condition` holds. The
    /// example is replayed through Cedar before it is returned.
    pub fn allowed_where(
        &mut self,
        action: &TableAction,
        set: &PolicySet,
        condition: &Policy,
    ) -> Result<Option<Counterexample>, String> {
        let envs = self.original(action, set)?;
        self.allowed_in(&envs, set, condition)
    }

    /// [`Prover::allowed_where`] for a set compiled by [`Prover::compile`]
    /// (`set` is that set, for the replay): the same query on a policy set
    /// that is not the action's own, such as a mutant.
    pub fn allowed_where_compiled(
        &mut self,
        compiled: &Compiled,
        set: &PolicySet,
        condition: &Policy,
    ) -> Result<Option<Counterexample>, String> {
        self.allowed_in(&compiled.0, set, condition)
    }

    fn allowed_in(
        &mut self,
        envs: &[(RequestEnv, CompiledPolicySet)],
        set: &PolicySet,
        condition: &Policy,
    ) -> Result<Option<Counterexample>, String> {
        let mut cond = PolicySet::new();
        cond.add(condition.clone()).map_err(|e| e.to_string())?;
        for (env, orig) in envs {
            let c = CompiledPolicySet::compile(&cond, env, &self.schema)
                .map_err(|e| format!("cannot compile the guarantee: {e}"))?;
            let found = solve!(self, s => s.check_disjoint_with_counterexample_opt(orig, &c))?;
            if let Some(env) = found {
                let example = request_of(&env);
                let (a, b) = (
                    cedar_decision(set, &example),
                    cedar_decision(&cond, &example),
                );
                if a != Some(Decision::Allow) || b != Some(Decision::Allow) {
                    return Err(format!(
                        "the solver's counterexample does not replay: the policies decide {a:?}, the guarantee's condition {b:?}"
                    ));
                }
                return Ok(Some(example));
            }
        }
        Ok(None)
    }

    /// The solver-backed lint of one action's policies: a forbid that can
    /// error at run time, a rule that never matches in the gateway's domain,
    /// an approval rule made unreachable by a forbid, a set that allows every
    /// request although it has forbids.
    pub fn lint(
        &mut self,
        action: &TableAction,
        set: &PolicySet,
    ) -> Result<Vec<LintFinding>, String> {
        let uid = Self::action_uid(action)?;
        let domain = Self::domain(action)?;
        let envs = self.envs(&uid);
        let mut policies: Vec<&Policy> = set.policies().collect();
        policies.sort_by_key(|p| {
            action
                .policy_ids
                .iter()
                .position(|id| *id == p.id().to_string())
                .unwrap_or(usize::MAX)
        });
        let mut out = vec![];
        let finding = |code: &'static str, p: &Policy, message: String, ex| LintFinding {
            code,
            action: action.action.name.clone(),
            policy_id: p.id().to_string(),
            source: p.annotation("source").unwrap_or("-").to_string(),
            message,
            example: ex,
        };
        let (forbids_as_permits, n_forbids) = forbids_as_permits(&policies, &uid)?;
        for env in &envs {
            for p in &policies {
                let Ok(pst::Policy::Static(sp)) = p.to_pst() else {
                    continue;
                };
                let t = sp.body().clone();
                // can error
                let cp =
                    CompiledPolicy::compile(p, env, &self.schema).map_err(|e| e.to_string())?;
                if let Some(ex) =
                    solve!(self, c => c.check_never_errors_with_counterexample_opt(&cp))?
                {
                    out.push(finding(
                        if t.effect == Effect::Forbid {
                            "forbid-can-error"
                        } else {
                            "permit-can-error"
                        },
                        p,
                        "can fail to evaluate at run time (the gateway then denies, whatever the other rules say)".into(),
                        Some(request_of(&ex)),
                    ));
                }
                // never matches in the domain
                let as_permit = make_policy("m", Effect::Permit, &uid, when_of(t.clauses()))?;
                let mut s = PolicySet::new();
                s.add(as_permit).map_err(|e| e.to_string())?;
                let s = in_domain(&s, &domain)?;
                let cs =
                    CompiledPolicySet::compile(&s, env, &self.schema).map_err(|e| e.to_string())?;
                let never = solve!(self, c => c.check_always_denies_opt(&cs))?;
                if never {
                    out.push(finding(
                        "never-matches",
                        p,
                        "never matches a request the gateway can make: the rule is dead".into(),
                        None,
                    ));
                    continue;
                }
                // an approval rule made unreachable by a forbid
                if t.effect == Effect::Forbid
                    && guarded(t.clauses())
                    && forbids_as_permits.policies().count() > 0
                {
                    let within = (&uid, &domain, env);
                    if self.a_forbid_always_applies(t.clauses(), within, &forbids_as_permits)? {
                        out.push(finding(
                            "approval-unreachable",
                            p,
                            "whenever this approval rule applies, a forbid applies too: no approval can ever help".into(),
                            None,
                        ));
                    }
                }
                // a permit whose condition always holds
                if t.effect == Effect::Permit && !t.clauses().is_empty() {
                    let cp =
                        CompiledPolicy::compile(p, env, &self.schema).map_err(|e| e.to_string())?;
                    if solve!(self, c => c.check_always_matches_opt(&cp))? {
                        out.push(finding(
                            "permit-always-allows",
                            p,
                            "its condition always holds: it permits every request".into(),
                            None,
                        ));
                    }
                }
            }
            // a set with forbids that still allows everything at level 0
            if n_forbids > 0 && self.allows_everything_at_level_0(set, (&uid, &domain, env))? {
                let permit = policies.iter().find(|p| {
                        matches!(p.to_pst(), Ok(pst::Policy::Static(ref sp)) if sp.body().effect == Effect::Permit)
                    });
                if let Some(p) = permit {
                    out.push(finding(
                            "permit-always-allows",
                            p,
                            "the action is allowed without approval for every request: none of its rules ever applies".into(),
                            None,
                        ));
                }
            }
        }
        Ok(out)
    }

    /// Whether, whenever the approval rule of `clauses` (a guarded forbid)
    /// applies without its guard, one of the plain forbids
    /// (`forbids_as_permits`) applies too, within the action's domain.
    fn a_forbid_always_applies(
        &mut self,
        clauses: &[Clause],
        (uid, domain, env): (&EntityUid, &Policy, &RequestEnv),
        forbids_as_permits: &PolicySet,
    ) -> Result<bool, String> {
        let unguarded: Vec<Clause> = clauses
            .iter()
            .filter_map(|c| match c {
                Clause::When(e) => {
                    let kept: Vec<Arc<Expr>> =
                        conjuncts(e).into_iter().filter(|x| !is_guard(x)).collect();
                    crate::mutate::mutants::conjoin(&kept).map(Clause::When)
                }
                u => Some(u.clone()),
            })
            .collect();
        let cond = make_policy("a", Effect::Permit, uid, when_of(&unguarded))?;
        let mut a = PolicySet::new();
        a.add(cond).map_err(|e| e.to_string())?;
        let a = in_domain(&a, domain)?;
        let ca = CompiledPolicySet::compile(&a, env, &self.schema).map_err(|e| e.to_string())?;
        let cf = CompiledPolicySet::compile(forbids_as_permits, env, &self.schema)
            .map_err(|e| e.to_string())?;
        solve!(self, c => c.check_implies_opt(&ca, &cf))
    }

    /// Whether `set` allows every request of the action's domain at
    /// approval level 0.
    fn allows_everything_at_level_0(
        &mut self,
        set: &PolicySet,
        (uid, domain, env): (&EntityUid, &Policy, &RequestEnv),
    ) -> Result<bool, String> {
        let mut all = PolicySet::new();
        all.add(make_policy("all", Effect::Permit, uid, None)?)
            .map_err(|e| e.to_string())?;
        all.add(make_policy(
            "level0",
            Effect::Forbid,
            uid,
            Some(cmp(BinaryOp::NotEq, CTX_APPROVAL_LEVEL, 0)),
        )?)
        .map_err(|e| e.to_string())?;
        let all = in_domain(&all, domain)?;
        let ca = CompiledPolicySet::compile(&all, env, &self.schema).map_err(|e| e.to_string())?;
        let cs = CompiledPolicySet::compile(set, env, &self.schema).map_err(|e| e.to_string())?;
        solve!(self, c => c.check_implies_opt(&ca, &cs))
    }
}

/// Whether a `when` clause of a policy holds an approval guard (an
/// approval rule, not a plain forbid).
fn guarded(clauses: &[Clause]) -> bool {
    clauses.iter().any(|c| match c {
        Clause::When(e) => conjuncts(e).iter().any(|x| is_guard(x)),
        Clause::Unless(_) => false,
    })
}

/// The plain (unguarded) forbids of `policies`, as permits: "some forbid
/// holds"; and how many forbids there are, guarded or not.
fn forbids_as_permits(policies: &[&Policy], uid: &EntityUid) -> Result<(PolicySet, usize), String> {
    let mut forbids_as_permits = PolicySet::new();
    let mut n_forbids = 0;
    for p in policies {
        let Ok(pst::Policy::Static(sp)) = p.to_pst() else {
            continue;
        };
        let t = sp.body();
        if t.effect == Effect::Forbid {
            n_forbids += 1;
            if !guarded(t.clauses()) {
                let q = make_policy(
                    &format!("f{n_forbids}"),
                    Effect::Permit,
                    uid,
                    when_of(t.clauses()),
                )?;
                forbids_as_permits.add(q).map_err(|e| e.to_string())?;
            }
        }
    }
    Ok((forbids_as_permits, n_forbids))
}

/// The clauses of a policy as one `when` condition for a new policy.
fn when_of(clauses: &[Clause]) -> Option<Arc<Expr>> {
    let parts: Vec<Arc<Expr>> = clauses
        .iter()
        .map(|c| match c {
            Clause::When(e) => e.clone(),
            Clause::Unless(e) => Arc::new(Expr::UnaryOp {
                op: pst::UnaryOp::Not,
                expr: e.clone(),
            }),
        })
        .collect();
    crate::mutate::mutants::conjoin(&parts)
}

/// A counterexample as a scenario to add: the proposal's arguments from the
/// context attributes that are parameters (money back in units), the facts
/// and provenance it needs, the approval level and the clock, and the
/// decision the unmutated policies give.
pub fn suggested_scenario(
    action: &TableAction,
    policies: &PolicySet,
    name: &str,
    example: &Counterexample,
    expect: &str,
) -> Value {
    let ctx = example.context.as_object().cloned().unwrap_or_default();
    let text = policies.to_string();
    let reads = |name: &str| {
        text.contains(&format!("context.{name}")) || text.contains(&format!("context[\"{name}\"]"))
    };
    let mut args = Map::new();
    for p in &action.action.params {
        if let Some(v) = ctx.get(&p.name) {
            // a critical value must come from its trusted source: the
            // solver's arbitrary one is only kept where a rule reads it
            if p.critical && !reads(&p.name) {
                args.insert(p.name.clone(), from_sources(p));
                continue;
            }
            let v = match (&p.ty, v) {
                (crate::ir::Type::Money, Value::Number(n)) => {
                    n.as_i64().map(money_json).unwrap_or_else(|| v.clone())
                }
                // no rule reads a record's fields: its critical ones come
                // from their sources, never the solver
                _ if p.vouched() => sourced_fields(p, v),
                _ => v.clone(),
            };
            args.insert(p.name.clone(), v);
        }
    }
    let mut facts = Map::new();
    for f in &action.action.facts {
        if let Some(v) = ctx.get(&f.name) {
            facts.insert(f.name.clone(), v.clone());
        }
    }
    let expect = if expect == "ALLOW" {
        serde_json::json!({"decision": "ALLOW"})
    } else if let Some(l) = expect.strip_prefix("PENDING level ") {
        serde_json::json!({"decision": "PENDING", "level": l.parse::<u8>().unwrap_or(1)})
    } else {
        serde_json::json!({"decision": "DENY", "stage": "policy"})
    };
    let test = serde_json::json!({
        "name": name,
        "mandate": "<a mandate entry of the file>",
        "proposal": {"action": action.action.name, "args": args},
        "expect": expect,
    });
    // what the scenario's world must provide for the request to happen
    let mut needs = Map::new();
    if !facts.is_empty() {
        needs.insert("facts".into(), Value::Object(facts));
    }
    if reads(CTX_PROVENANCE)
        && let Some(p) = ctx.get(CTX_PROVENANCE)
    {
        needs.insert("provenance".into(), p.clone());
    }
    if reads(CTX_NOW)
        && let Some(n) = ctx.get(CTX_NOW)
    {
        needs.insert("now".into(), n.clone());
    }
    if let Some(l) = ctx.get(CTX_APPROVAL_LEVEL) {
        needs.insert("differs_at_approval_level".into(), l.clone());
    }
    serde_json::json!({"test": test, "needs": needs})
}

/// A record's (or a list of records') value with each critical field, at
/// any depth, as the `<from ...>` its sources must give.
fn sourced_fields(p: &crate::ir::Param, v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(|i| sourced_fields(p, i)).collect()),
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let x = match p.field(k) {
                        Some(f) if f.critical => from_sources(f),
                        Some(f) if f.vouched() => sourced_fields(f, x),
                        _ => x.clone(),
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `<from registry.a | mandate.b>`: where a critical value must come from.
fn from_sources(p: &crate::ir::Param) -> Value {
    let from: Vec<String> = p.sources.iter().map(source_name).collect();
    Value::from(format!("<from {}>", from.join(" | ")))
}

pub(crate) fn source_name(s: &crate::ir::Source) -> String {
    match s {
        crate::ir::Source::Claim { claim } => format!("mandate.{claim}"),
        crate::ir::Source::Registry { registry } => format!("registry.{registry}"),
        crate::ir::Source::Lookup(l) => format!("registry.{}[…].{}", l.registry, l.field),
    }
}

/// Minor units as the exact decimal a proposal carries (`"1000.01"`).
fn money_json(cents: i64) -> Value {
    crate::base::Money::from_minor(cents).to_json()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A survivor's scenario over a list of records: each element's
    /// critical fields are `<from ...>` (no rule reads a field: the
    /// solver's value is never a trusted one), the other fields as given.
    #[test]
    fn a_records_critical_fields_are_left_to_their_sources() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mutate/records");
        let report = crate::compile::build(&[dir]);
        let bundle = report.bundle.expect("the records fixture builds");
        let action = bundle
            .table
            .action("files.write_many")
            .expect("files.write_many");
        let example = Counterexample {
            principal: String::new(),
            action: String::new(),
            resource: String::new(),
            context: serde_json::json!({"files": [
                {"path": "/x", "content": "c", "meta": {"owner": "a@b.c", "tag": "t"}},
            ]}),
        };
        let s = suggested_scenario(action, &PolicySet::new(), "n", &example, "ALLOW");
        assert_eq!(
            s["test"]["proposal"]["args"]["files"],
            serde_json::json!([{
                "path": "<from registry.workspace>",
                "content": "c",
                "meta": {"owner": "<from registry.people>", "tag": "t"},
            }])
        );
    }

    #[test]
    fn money_is_exact() {
        assert_eq!(money_json(100000), "1000.00");
        assert_eq!(money_json(1000001), "10000.01");
        assert_eq!(money_json(-5), "-0.05");
    }
}
