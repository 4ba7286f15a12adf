//! The runner: one fresh in-memory store and one gateway per test, keys
//! generated per suite, the trusted side's changes applied between steps.

use super::{DecideStep, Expect, MandateSpec, Step, Suite, TestCase, Trusted, scenario_files};
use crate::base::Money;
use crate::base::json::parse_time_str;
use crate::bundle::Bundle;
use crate::bundle::format::{Table, TablePack};
use crate::gateway::approval::SignedApproval;
use crate::gateway::mandate::Narrowing;
use crate::gateway::narrowing;
use crate::gateway::trusted::RegistryChange;
use crate::gateway::world::{Approver, Records, World, typed_value};
use crate::gateway::{
    Budget, Decision, Gateway, GatewayError, Input, Mandate, MandateToken, Outcome,
};
use crate::keys::SecretKey;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// Makes the gateway for one test from the test's world (keys, clock,
/// registries) and its fresh store.
pub type GatewayFactory<'a> = dyn Fn(World, Arc<dyn Store>) -> Result<Gateway, GatewayError> + 'a;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Every decision was as expected.
    Pass,
    /// A decision was not.
    Fail,
    /// The test could not run (an unknown registry, a claim the pack does
    /// not declare, a gateway or store error).
    Error,
}

/// Where a test went wrong.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepFailure {
    /// 1-based.
    pub step: usize,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct TestResult {
    pub name: String,
    pub status: Status,
    /// The expectation of the failing step, or of the last decision step.
    pub expected: String,
    /// What that step got.
    pub got: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<StepFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The decision of that step, in full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// One scenario file's results.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteResult {
    pub pack: String,
    pub file: String,
    /// The file could not be used at all (invalid, wrong pack, keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub tests: Vec<TestResult>,
}

impl SuiteResult {
    pub fn count(&self, s: Status) -> usize {
        self.tests.iter().filter(|t| t.status == s).count()
    }
    /// No invalid file, every test passed.
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.tests.iter().all(|t| t.status == Status::Pass)
    }
}

/// Every scenario file of one pack.
#[derive(Clone, Debug, Serialize)]
pub struct PackResult {
    pub pack: String,
    pub path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub suites: Vec<SuiteResult>,
}

impl PackResult {
    pub fn count(&self, s: Status) -> usize {
        self.suites.iter().map(|x| x.count(s)).sum()
    }
    pub fn tests(&self) -> usize {
        self.suites.iter().map(|x| x.tests.len()).sum()
    }
    pub fn invalid_files(&self) -> usize {
        self.suites.iter().filter(|x| x.error.is_some()).count()
    }
    pub fn ok(&self) -> bool {
        self.error.is_none() && self.suites.iter().all(SuiteResult::ok)
    }
}

/// Runs the scenario files of the pack at `pack_path` (named `pack` in
/// the bundle), only the tests whose name contains `filter` if given.
pub fn run_pack(
    pack_path: &Path,
    pack: &str,
    table: &Table,
    make_gateway: &GatewayFactory<'_>,
    filter: Option<&str>,
) -> PackResult {
    let mut res = PackResult {
        pack: pack.to_string(),
        path: pack_path.display().to_string(),
        error: None,
        suites: vec![],
    };
    let files = match scenario_files(pack_path) {
        Ok(f) => f,
        Err(e) => {
            res.error = Some(e.to_string());
            return res;
        }
    };
    for f in files {
        let file = f.display().to_string();
        let suite = match Suite::load(&f) {
            Ok(s) => s,
            Err(e) => {
                res.suites.push(SuiteResult {
                    pack: pack.to_string(),
                    file,
                    error: Some(e.to_string()),
                    tests: vec![],
                });
                continue;
            }
        };
        if suite.pack != pack {
            res.suites.push(SuiteResult {
                pack: pack.to_string(),
                file: file.clone(),
                error: Some(format!(
                    "invalid scenario file `{file}`: it is for pack `{}`, but it is in the folder of pack `{pack}`",
                    suite.pack
                )),
                tests: vec![],
            });
            continue;
        }
        let mut suite = suite;
        if let Some(q) = filter {
            suite.tests.retain(|t| t.name.contains(q));
        }
        res.suites.push(run_suite(&suite, table, make_gateway));
    }
    res
}

/// Runs a suite on gateways of the bundle as built: one gateway prepared
/// once, forked per test.
pub fn run_suite_with_bundle(suite: &Suite, bundle: &Bundle) -> SuiteResult {
    match Gateway::new(bundle, World::empty(), Arc::new(MemoryStore::new())) {
        Ok(base) => run_suite(suite, &bundle.table, &|w, s| Ok(base.fork(w, s))),
        Err(e) => SuiteResult {
            pack: suite.pack.clone(),
            file: suite.path.display().to_string(),
            error: Some(e.to_string()),
            tests: vec![],
        },
    }
}

/// Runs every test of a suite, each on a fresh in-memory store and a
/// gateway from `make_gateway`.
pub fn run_suite(suite: &Suite, table: &Table, make_gateway: &GatewayFactory<'_>) -> SuiteResult {
    let mut res = SuiteResult {
        pack: suite.pack.clone(),
        file: suite.path.display().to_string(),
        error: None,
        tests: vec![],
    };
    match Prepared::new(suite, table) {
        Err(e) => res.error = Some(e),
        Ok(p) => {
            for t in &suite.tests {
                res.tests.push(p.run_test(t, make_gateway));
            }
        }
    }
    res
}

/// What a suite's tests share: the pack's declarations, its registries as
/// loaded, and the keys.
struct Prepared<'a> {
    suite: &'a Suite,
    pack: &'a TablePack,
    /// The pack's actions, for a strict mandate's narrowing.
    actions: Vec<&'a crate::ir::Action>,
    registries: HashMap<String, HashMap<String, HashMap<String, Records>>>,
    issuer: SecretKey,
    people: BTreeMap<String, SecretKey>,
}

impl<'a> Prepared<'a> {
    fn new(suite: &'a Suite, table: &'a Table) -> Result<Self, String> {
        let pack = table
            .pack(&suite.pack)
            .ok_or_else(|| format!("the bundle has no pack `{}`", suite.pack))?;
        let mut w = World::empty();
        if suite.registries.is_dir() {
            w.load_registries(&suite.pack, &suite.registries, table)
                .map_err(|e| e.to_string())?;
        }
        add_file_records(&mut w, suite, pack)?;
        let issuer = SecretKey::generate().map_err(|e| e.to_string())?;
        let mut people = BTreeMap::new();
        for p in suite.people() {
            people.insert(p, SecretKey::generate().map_err(|e| e.to_string())?);
        }
        Ok(Prepared {
            suite,
            pack,
            actions: table
                .actions
                .iter()
                .filter(|a| a.pack == suite.pack)
                .map(|a| &a.action)
                .collect(),
            registries: w.registries,
            issuer,
            people,
        })
    }

    fn world(&self) -> World {
        let mut w = World::empty();
        w.clock = Some(self.suite.clock);
        let issuer = self.issuer.public();
        w.mandate_keys.insert(issuer.id(), issuer);
        for (name, k) in &self.people {
            let spec = self.suite.approvers.get(name).cloned().unwrap_or_default();
            w.approvers.insert(
                name.clone(),
                Approver {
                    key: k.public(),
                    owners: spec.owners,
                    roles: spec.roles,
                },
            );
        }
        w.registries = self.registries.clone();
        w
    }

    fn run_test(&self, t: &TestCase, make_gateway: &GatewayFactory<'_>) -> TestResult {
        match self.try_run(t, make_gateway) {
            Ok(r) => r,
            Err(e) => TestResult {
                name: t.name.clone(),
                status: Status::Error,
                expected: String::new(),
                got: "error".into(),
                failure: None,
                error: Some(e),
                decision: None,
            },
        }
    }

    fn try_run(
        &self,
        t: &TestCase,
        make_gateway: &GatewayFactory<'_>,
    ) -> Result<TestResult, String> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let gw = make_gateway(self.world(), store)
            .map_err(|e| format!("cannot make the gateway: {e}"))?;
        // the tokens this test uses, issued once: steps share them
        let mut tokens: HashMap<&str, Value> = HashMap::new();
        for s in &t.steps {
            if let Step::Decide(DecideStep {
                mandate: Some(m), ..
            }) = s
                && !tokens.contains_key(m.as_str())
            {
                let spec = self
                    .suite
                    .mandates
                    .get(m)
                    .ok_or_else(|| format!("no mandate `{m}`"))?;
                let token = self.token(m, spec)?;
                if spec.revoked {
                    let id = mandate_id(m, spec);
                    gw.store()
                        .transaction(&mut |tx| {
                            tx.revoke(&id)?;
                            Ok(Value::Null)
                        })
                        .map_err(|e| e.to_string())?;
                }
                tokens.insert(m, token);
            }
        }
        let mut shown: Option<(String, String, Decision)> = None;
        for (i, s) in t.steps.iter().enumerate() {
            let at = |e: String| format!("step {}: {e}", i + 1);
            match s {
                Step::Trusted(tr) => self.apply(&gw, tr).map_err(at)?,
                Step::Decide(d) => {
                    let token = d.mandate.as_deref().and_then(|m| tokens.get(m)).cloned();
                    let (decision, note) = self.decide(&gw, d, token).map_err(at)?;
                    let mut problems = check(&d.expect, &decision);
                    let mut got = describe(&decision);
                    if let Some(n) = note {
                        problems.insert(0, n);
                        got.push_str(" without the approvals");
                    }
                    let expected = describe_expect(&d.expect);
                    if !problems.is_empty() {
                        return Ok(TestResult {
                            name: t.name.clone(),
                            status: Status::Fail,
                            expected,
                            got,
                            failure: Some(StepFailure {
                                step: i + 1,
                                problems,
                            }),
                            error: None,
                            decision: Some(decision),
                        });
                    }
                    shown = Some((expected, got, decision));
                }
            }
        }
        let (expected, got, decision) = shown.ok_or_else(|| "no decision step".to_string())?;
        Ok(TestResult {
            name: t.name.clone(),
            status: Status::Pass,
            expected,
            got,
            failure: None,
            error: None,
            decision: Some(decision),
        })
    }

    /// Decides once; with approvals, decides first without them, signs
    /// them over that decision's operation and decides again. The note says
    /// the approvals were not needed (an ALLOW without them), which fails
    /// the step: a test that lists approvals claims they are required.
    fn decide(
        &self,
        gw: &Gateway,
        d: &DecideStep,
        token: Option<Value>,
    ) -> Result<(Decision, Option<String>), String> {
        let input = Input {
            proposal: d.proposal.clone(),
            mandate: token.clone(),
            approvals: vec![],
            malformed: None,
        };
        let first = gw.decide(&input).map_err(|e| e.to_string())?;
        if d.approvals.is_empty() {
            return Ok((first, None));
        }
        if first.decision == Outcome::Allow {
            return Ok((
                first,
                Some("the approvals were not needed: ALLOW without them".into()),
            ));
        }
        // a PENDING names its operation; a DENY past provenance has the
        // resolved values, so the approvals are for the exact operation and
        // the test shows that even they do not lift it
        let op = match &first.operation_hash {
            Some(h) => h.clone(),
            None => {
                let id = token
                    .as_ref()
                    .and_then(|t| t.pointer("/mandate/id"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                crate::gateway::operation_hash(
                    id,
                    gw.bundle_hash(),
                    first.action.as_deref().unwrap_or_default(),
                    &first.resolved,
                )
                .map_err(|e| e.to_string())?
            }
        };
        let mut approvals = vec![];
        for who in &d.approvals {
            let key = self
                .people
                .get(who)
                .ok_or_else(|| format!("no key for `{who}`"))?;
            let a = SignedApproval::issue(who, &op, self.suite.clock + 600, key)
                .map_err(|e| e.to_string())?;
            approvals.push(serde_json::to_value(a).map_err(|e| e.to_string())?);
        }
        let second = gw
            .decide(&Input { approvals, ..input })
            .map_err(|e| e.to_string())?;
        Ok((second, None))
    }

    /// A signed token for a mandate entry, claims typed and normalised as
    /// `ipc token issue` does.
    fn token(&self, name: &str, spec: &MandateSpec) -> Result<Value, String> {
        let bad = |e: String| format!("mandate `{name}`: {e}");
        let mut claims = Map::new();
        for (k, v) in &spec.claims {
            let decl = self
                .pack
                .claims
                .iter()
                .find(|c| &c.name == k)
                .ok_or_else(|| {
                    bad(format!(
                        "pack `{}` declares no claim `{k}`",
                        self.suite.pack
                    ))
                })?;
            let v = match &decl.ty {
                crate::ir::Type::Selection(_) => crate::gateway::mandate::selection_claim(
                    v,
                    &decl.ty,
                    &self.pack.name,
                    &self.pack.registries,
                )
                .map_err(|e| bad(format!("claim `{k}`: {e}")))?,
                ty => typed_value(v, ty).map_err(|e| bad(format!("claim `{k}`: {e}")))?,
            };
            claims.insert(k.clone(), v);
        }
        for c in &self.pack.claims {
            if c.ty.is_collection() && !claims.contains_key(&c.name) {
                claims.insert(c.name.clone(), Value::Array(vec![]));
            }
        }
        let amount = match &spec.budget {
            Some(b) => Money::from_json(b)
                .map_err(|e| bad(format!("budget: {e}")))?
                .minor(),
            None => 0,
        };
        let now = self.suite.clock;
        let expires_at = match &spec.expires {
            Some(e) => parse_time_str(e).map_err(|e| bad(format!("expires: {e}")))?,
            None => now.saturating_add(spec.ttl.unwrap_or(3600)),
        };
        let m = Mandate {
            id: mandate_id(name, spec),
            pack: self.suite.pack.clone(),
            user: spec.user.clone(),
            owner: spec.owner.clone().unwrap_or_else(|| spec.user.clone()),
            scopes: spec.scopes.clone(),
            claims,
            budget: Budget {
                amount,
                calls: spec.calls.unwrap_or(100),
            },
            issued_at: now - 60,
            expires_at,
            sources: self.narrowing(spec).map_err(bad)?,
            parent: None,
        };
        let token = MandateToken::sign(m, &self.issuer).map_err(|e| bad(e.to_string()))?;
        let mut v = serde_json::to_value(token).map_err(|e| bad(e.to_string()))?;
        if spec.tamper {
            tamper(&mut v);
        }
        Ok(v)
    }

    /// The narrowing a mandate entry signs: `sources` as given, over the
    /// strict narrowing when `strict`.
    fn narrowing(&self, spec: &MandateSpec) -> Result<Narrowing, String> {
        let mut out = if spec.strict {
            narrowing::strict(&["*".to_string()], &self.suite.pack, &self.actions)
                .map_err(|e| e.to_string())?
        } else {
            Narrowing::new()
        };
        out.extend(spec.sources.clone());
        Ok(out)
    }

    /// A change on the trusted side, in its own store transaction, with
    /// its receipt (as `ipc registry` makes it).
    fn apply(&self, gw: &Gateway, t: &Trusted) -> Result<(), String> {
        let (registry, owner, change) = match t {
            Trusted::Add {
                registry,
                owner,
                value,
            } => (
                registry,
                owner,
                RegistryChange::Add {
                    value: value.clone(),
                },
            ),
            Trusted::Put {
                registry,
                owner,
                key,
                record,
            } => (
                registry,
                owner,
                RegistryChange::Put {
                    key: key.clone(),
                    record: record.clone(),
                },
            ),
        };
        gw.change_registry(&self.suite.pack, registry, owner, &change, "scenario")
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The suite's own records (`"registries"`) over the pack's, each typed
/// against its declaration; a registry the pack lacks is an error.
fn add_file_records(w: &mut World, suite: &Suite, pack: &TablePack) -> Result<(), String> {
    for (name, owners) in &suite.records {
        let reg = pack
            .registries
            .iter()
            .find(|r| &r.name == name)
            .ok_or_else(|| {
                format!(
                    "registries: pack `{}` declares no registry `{name}`",
                    suite.pack
                )
            })?;
        for (owner, recs) in owners {
            w.add_records(&suite.pack, reg, owner, recs.clone())
                .map_err(|e| format!("registries: `{name}`, owner `{owner}`: {e}"))?;
        }
    }
    Ok(())
}

fn mandate_id(name: &str, spec: &MandateSpec) -> String {
    spec.id.clone().unwrap_or_else(|| format!("m-{name}"))
}

/// Alters the signed token the way an agent would try to: the first claim
/// (a string gets a suffix, a set an extra member, a number one more, a
/// boolean flipped), or the budget when there is no claim.
fn tamper(token: &mut Value) {
    if let Some(Value::Object(claims)) = token.pointer_mut("/mandate/claims")
        && let Some((_, v)) = claims.iter_mut().next()
    {
        match v {
            Value::String(s) => s.push_str("-tampered"),
            Value::Array(items) => items.push(Value::String("tampered".into())),
            Value::Bool(b) => *b = !*b,
            Value::Number(n) => *v = Value::from(n.as_i64().unwrap_or(0).saturating_add(1)),
            _ => *v = Value::String("tampered".into()),
        }
        return;
    }
    if let Some(Value::Number(n)) = token.pointer_mut("/mandate/budget/amount") {
        *n = serde_json::Number::from(n.as_i64().unwrap_or(0).saturating_mul(100).max(1));
    }
}

/// Every way the decision differs from the expectation.
fn check(e: &Expect, d: &Decision) -> Vec<String> {
    let mut p = vec![];
    if d.decision != e.decision {
        p.push(format!(
            "decision: expected {}, got {}",
            e.decision.name(),
            d.decision.name()
        ));
    }
    if let Some(st) = &e.stage
        && d.stage.name() != st
    {
        p.push(format!("stage: expected `{st}`, got `{}`", d.stage.name()));
    }
    if let Some(l) = e.level
        && d.level != Some(l)
    {
        p.push(format!(
            "level: expected {l}, got {}",
            d.level
                .map(|x| x.to_string())
                .unwrap_or_else(|| "none".into())
        ));
    }
    if let Some(r) = &e.reason {
        let got = d.reason.as_deref().unwrap_or_default();
        if !got.contains(r.as_str()) {
            p.push(format!("reason: {got:?} does not contain {r:?}"));
        }
    }
    if let Some(h) = &e.hint {
        let got = d.hint.as_deref().unwrap_or_default();
        if !got.contains(h.as_str()) {
            p.push(format!("hint: {got:?} does not contain {h:?}"));
        }
    }
    if let Some(res) = &e.resolved {
        for (k, v) in res {
            // in the gateway's form (`150000`) or as the answer shows it
            // (`"1500.00"`)
            match d.resolved.get(k) {
                Some(x) if x == v || d.shown.get(k) == Some(v) => {}
                Some(x) => p.push(format!("resolved `{k}`: expected {v}, got {x}")),
                None => p.push(format!("resolved `{k}`: expected {v}, got nothing")),
            }
        }
    }
    if let Some(r) = e.replayed
        && d.replayed != r
    {
        p.push(format!("replayed: expected {r}, got {}", d.replayed));
    }
    p
}

fn describe_expect(e: &Expect) -> String {
    let mut s = e.decision.name().to_string();
    if let Some(st) = &e.stage {
        s.push(' ');
        s.push_str(st);
    }
    if let Some(l) = e.level {
        s.push_str(&format!(" level {l}"));
    }
    if let Some(r) = &e.reason {
        s.push_str(&format!(" {r:?}"));
    }
    if e.replayed == Some(true) {
        s.push_str(" replayed");
    }
    s
}

fn describe(d: &Decision) -> String {
    let mut s = d.decision.name().to_string();
    match d.decision {
        Outcome::Allow => {
            if d.replayed {
                s.push_str(" replayed");
            }
        }
        Outcome::Pending => {
            if let Some(l) = d.level {
                s.push_str(&format!(" level {l}"));
            }
        }
        Outcome::Deny | Outcome::Shadow => {
            s.push(' ');
            s.push_str(d.stage.name());
            if let Some(r) = &d.reason {
                s.push_str(": ");
                s.push_str(r);
            }
        }
    }
    s
}
