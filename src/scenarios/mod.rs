//! Scenario suites: the proof that a pack does what its spec says.
//!
//! A suite is one JSON file, `packs/<pack>/scenarios/*.json`, shaped like
//! Cedar's `run-tests` files (a list of named tests, each a request and an
//! expected decision) and extended with what the gateway needs: the signed
//! mandates, the agent's proposal, the approvals given, the trusted side's
//! changes between steps, and the expected outcome (ALLOW, PENDING at a
//! level, DENY at a stage). The format is described in
//! `docs/scenarios.md`; [`Suite::load`] reads a file and refuses any key it
//! does not know, naming the file and the test, so that a typo can never
//! turn a test into one that checks nothing.
//!
//! [`run_suite`] runs a suite against gateways made by a caller-supplied
//! factory: `ipc test` uses the bundle as built ([`run_suite_with_bundle`]),
//! the mutation tester the same bundle with a weakened policy set
//! ([`crate::gateway::Gateway::with_policies`]).

mod run;

pub use run::{
    GatewayFactory, PackResult, Status, StepFailure, SuiteResult, TestResult, run_pack, run_suite,
    run_suite_with_bundle,
};

use crate::base::json::{parse_strict, parse_time_str};
use crate::gateway::Outcome;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A scenario file is written by hand; larger than this it is not one.
pub const MAX_SCENARIO_LEN: u64 = crate::base::json::MAX_LINE as u64;

#[derive(Debug, Clone, PartialEq, thiserror::Error, miette::Diagnostic)]
pub enum ScenarioError {
    /// A scenario file cannot be read.
    #[error("cannot read scenario file `{path}`: {reason}")]
    #[diagnostic(code(ipc::scenario::read))]
    Read { path: String, reason: String },

    /// A scenario file that does not fit the format (an unknown key anywhere,
    /// a missing `expect`, an unknown mandate), naming the file and the test.
    #[error("invalid scenario file `{path}`{}: {reason}", at_test(.test))]
    #[diagnostic(
        code(ipc::scenario::invalid),
        help("the scenario format is described in docs/scenarios.md")
    )]
    Invalid {
        path: String,
        /// The test the problem is in, when it is in one.
        test: Option<String>,
        reason: String,
    },
}

fn at_test(test: &Option<String>) -> String {
    match test {
        Some(t) => format!(", test `{}`", t.escape_debug()),
        None => String::new(),
    }
}

/// One scenario file, loaded and checked for shape.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The file, as given.
    pub path: PathBuf,
    /// The pack whose actions the mandates cover.
    pub pack: String,
    /// The file's `clock`, seconds since the epoch.
    pub clock: i64,
    /// The folder of the pack's registries (`<pack>/registries` next to the
    /// `scenarios` folder by default).
    pub registries: PathBuf,
    /// The file's own records (`"registries"`): registry to owner to
    /// values (a set registry) or key to record (a keyed one), added to the
    /// pack's registry data for every test of the file, a record replacing
    /// the one under its key. Typed when the suite runs.
    pub records: RecordsSpec,
    pub mandates: BTreeMap<String, MandateSpec>,
    /// Who may be the second pair of eyes, for which owners and roles (as
    /// the world's `[approvers.NAME]`); anyone else approves only as the
    /// user of their own mandates.
    pub approvers: BTreeMap<String, ApproverSpec>,
    pub tests: Vec<TestCase>,
}

/// Registry to owner to that owner's records, as in a registry file.
pub type RecordsSpec = BTreeMap<String, BTreeMap<String, Value>>;

/// A scenario file's approver: the owners and roles it may approve for.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ApproverSpec {
    #[serde(default)]
    pub owners: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A mandate the runner issues (and signs with its own issuer key) for
/// each test that names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MandateSpec {
    /// The person the agent acts for; an approver of the world.
    pub user: String,
    /// The tenant whose records are in scope (default: the user).
    #[serde(default)]
    pub owner: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The pack's mandate claims; an undeclared claim is an error, a
    /// collection claim left out is empty.
    #[serde(default)]
    pub claims: Map<String, Value>,
    /// A decimal amount (`"2000.00"`); default 0.00.
    #[serde(default)]
    pub budget: Option<Value>,
    /// Default 100.
    #[serde(default)]
    pub calls: Option<u64>,
    /// Seconds from the clock to expiry; default 3600.
    #[serde(default)]
    pub ttl: Option<i64>,
    /// A fixed expiry time instead of `ttl`.
    #[serde(default)]
    pub expires: Option<String>,
    /// Revoked in the store before the test runs.
    #[serde(default)]
    pub revoked: bool,
    /// The runner alters a claim (or the budget, when there is no claim)
    /// after signing.
    #[serde(default)]
    pub tamper: bool,
    /// The mandate id (default `m-<entry name>`); entries sharing an id are
    /// one mandate for budget, revocation and idempotency.
    #[serde(default)]
    pub id: Option<String>,
    /// The mandate's narrowing as signed, unchecked (`{"payment.transfer.
    /// payee_iban": ["mandate.payee"]}`): the gateway checks it at authn.
    #[serde(default)]
    pub sources: crate::gateway::mandate::Narrowing,
    /// Every critical parameter that declares a mandate source takes its
    /// value only from the mandate (`ipc token issue --strict`); an entry
    /// of `sources` for the same parameter wins.
    #[serde(default)]
    pub strict: bool,
}

/// One named test: a single decision, or several steps sharing one store.
#[derive(Clone, Debug)]
pub struct TestCase {
    pub name: String,
    pub description: Option<String>,
    pub steps: Vec<Step>,
}

#[derive(Clone, Debug)]
pub enum Step {
    Decide(DecideStep),
    Trusted(Trusted),
}

/// The agent proposes; the gateway decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideStep {
    /// A mandate entry's name; none: the proposal comes without a token.
    #[serde(default)]
    pub mandate: Option<String>,
    /// What the agent sends, verbatim (it may be malformed on purpose).
    pub proposal: Value,
    /// People who approve: the runner decides once without approvals,
    /// signs approvals for that decision's operation, and decides again.
    #[serde(default)]
    pub approvals: Vec<String>,
    pub expect: Expect,
}

/// What the decision must be. Only `decision` is required; every field
/// given is checked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// As a decision spells it (`ALLOW`, `PENDING`, `DENY`).
    pub decision: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The approval level (PENDING).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<u8>,
    /// A substring of the reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A substring of the remediation hint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// Expected resolved values (a subset): the trusted spelling, amounts
    /// in minor units as the gateway holds them (`150000`) or as the
    /// answer shows them (`"1500.00"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<bool>,
}

/// A change on the trusted side between two decisions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub enum Trusted {
    /// A value added to a set registry (the user confirms a new payee).
    Add {
        registry: String,
        owner: String,
        value: Value,
    },
    /// A record written to a keyed registry, replacing any record under
    /// that key (a call-back logged, a vendor's details changed).
    Put {
        registry: String,
        owner: String,
        key: String,
        record: Map<String, Value>,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRaw {
    pack: String,
    clock: String,
    #[serde(default)]
    mandates: BTreeMap<String, Value>,
    #[serde(default)]
    approvers: BTreeMap<String, ApproverSpec>,
    #[serde(default)]
    registries: BTreeMap<String, Value>,
    tests: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TestRaw {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    mandate: Option<String>,
    #[serde(default)]
    proposal: Option<Value>,
    #[serde(default)]
    approvals: Option<Vec<String>>,
    #[serde(default)]
    expect: Option<Expect>,
    #[serde(default)]
    steps: Option<Vec<Value>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TrustedRaw {
    trusted: Trusted,
}

/// The stage names an `expect.stage` may use.
pub const STAGES: &[&str] = &[
    "authn",
    "contract",
    "provenance",
    "delegation",
    "budget",
    "policy",
    "approval",
    "execution",
    "receipt",
];

fn serde_reason(e: serde_json::Error) -> String {
    // serde_json appends "at line L column C" relative to the fragment
    // being read, which is misleading here: keep the message only
    let s = e.to_string();
    match s.rfind(" at line ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl Suite {
    /// Reads and checks one scenario file. Registries default to
    /// `<file>/../../registries` (the pack folder's `registries`).
    pub fn load(path: &Path) -> Result<Suite, ScenarioError> {
        let p = path.display().to_string();
        let read = |reason: String| ScenarioError::Read {
            path: p.clone(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| read(e.to_string().to_lowercase()))?;
        if meta.len() > MAX_SCENARIO_LEN {
            return Err(read(format!(
                "larger than {} MiB",
                MAX_SCENARIO_LEN / 1024 / 1024
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string().to_lowercase()))?;
        let registries = path
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."))
            .join("registries");
        Suite::parse(&text, path, registries)
    }

    /// Checks the text of a scenario file.
    pub fn parse(text: &str, path: &Path, registries: PathBuf) -> Result<Suite, ScenarioError> {
        let p = path.display().to_string();
        let invalid = |test: Option<&str>, reason: String| ScenarioError::Invalid {
            path: p.clone(),
            test: test.map(str::to_string),
            reason,
        };
        let v = parse_strict(text).map_err(|e| invalid(None, e))?;
        let raw: FileRaw = serde_json::from_value(v).map_err(|e| invalid(None, serde_reason(e)))?;
        let clock = parse_time_str(&raw.clock).map_err(|e| invalid(None, format!("clock: {e}")))?;
        let mut mandates = BTreeMap::new();
        for (name, m) in raw.mandates {
            let spec: MandateSpec = serde_json::from_value(m)
                .map_err(|e| invalid(None, format!("mandate `{name}`: {}", serde_reason(e))))?;
            if spec.expires.is_some() && spec.ttl.is_some() {
                return Err(invalid(
                    None,
                    format!("mandate `{name}`: give `expires` or `ttl`, not both"),
                ));
            }
            if let Some(e) = &spec.expires {
                parse_time_str(e)
                    .map_err(|e| invalid(None, format!("mandate `{name}`: expires: {e}")))?;
            }
            if let Some(b) = &spec.budget {
                crate::base::Money::from_json(b)
                    .map_err(|e| invalid(None, format!("mandate `{name}`: budget: {e}")))?;
            }
            mandates.insert(name, spec);
        }
        let mut records = RecordsSpec::new();
        for (name, owners) in raw.registries {
            let owners = serde_json::from_value(owners).map_err(|e| {
                invalid(
                    None,
                    format!(
                        "registries: `{name}`: expected an object from owner to records ({})",
                        serde_reason(e)
                    ),
                )
            })?;
            records.insert(name, owners);
        }
        if raw.tests.is_empty() {
            return Err(invalid(None, "no tests".into()));
        }
        let mut tests: Vec<TestCase> = vec![];
        for (i, t) in raw.tests.into_iter().enumerate() {
            let label = t
                .get("name")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("#{}", i + 1));
            let bad = |reason: String| invalid(Some(&label), reason);
            let tr: TestRaw = serde_json::from_value(t).map_err(|e| bad(serde_reason(e)))?;
            if tests.iter().any(|x| x.name == tr.name) {
                return Err(bad("two tests have this name".into()));
            }
            let single = tr.mandate.is_some()
                || tr.proposal.is_some()
                || tr.approvals.is_some()
                || tr.expect.is_some();
            let steps = match (tr.steps, single) {
                (Some(_), true) => {
                    return Err(bad(
                        "a test is either one decision (`mandate`, `proposal`, `approvals`, `expect`) or `steps`, not both"
                            .into(),
                    ));
                }
                (Some(steps), false) => {
                    if steps.is_empty() {
                        return Err(bad("`steps` is empty".into()));
                    }
                    let mut out = vec![];
                    for (j, s) in steps.into_iter().enumerate() {
                        let at = |reason: String| bad(format!("step {}: {reason}", j + 1));
                        let step = if s.get("trusted").is_some() {
                            let t: TrustedRaw =
                                serde_json::from_value(s).map_err(|e| at(serde_reason(e)))?;
                            Step::Trusted(t.trusted)
                        } else {
                            let d: DecideStep =
                                serde_json::from_value(s).map_err(|e| at(serde_reason(e)))?;
                            Step::Decide(d)
                        };
                        out.push(step);
                    }
                    out
                }
                (None, _) => {
                    let (Some(proposal), Some(expect)) = (tr.proposal, tr.expect) else {
                        return Err(bad(
                            "a test needs `proposal` and `expect`, or `steps`".into()
                        ));
                    };
                    vec![Step::Decide(DecideStep {
                        mandate: tr.mandate,
                        proposal,
                        approvals: tr.approvals.unwrap_or_default(),
                        expect,
                    })]
                }
            };
            if !steps.iter().any(|s| matches!(s, Step::Decide(_))) {
                return Err(bad("no decision step: the test would check nothing".into()));
            }
            for (j, s) in steps.iter().enumerate() {
                let Step::Decide(d) = s else { continue };
                let at = |reason: String| bad(format!("step {}: {reason}", j + 1));
                if let Some(m) = &d.mandate
                    && !mandates.contains_key(m)
                {
                    return Err(at(format!("no mandate `{m}` in `mandates`")));
                }
                if let Some(st) = &d.expect.stage
                    && !STAGES.contains(&st.as_str())
                {
                    return Err(at(format!(
                        "unknown stage `{st}`; one of {}",
                        STAGES.join(", ")
                    )));
                }
                if d.expect.level.is_some_and(|l| l > 2) {
                    return Err(at("`level` is 0, 1 or 2".into()));
                }
                if d.approvals.iter().any(String::is_empty) {
                    return Err(at("an approver's name is empty".into()));
                }
            }
            tests.push(TestCase {
                name: tr.name,
                description: tr.description,
                steps,
            });
        }
        Ok(Suite {
            path: path.to_path_buf(),
            pack: raw.pack,
            clock,
            registries,
            records,
            mandates,
            approvers: raw.approvers,
            tests,
        })
    }

    /// Everyone who must be a world approver: mandate users and approvers.
    pub fn people(&self) -> Vec<String> {
        let mut out: Vec<String> = self.mandates.values().map(|m| m.user.clone()).collect();
        out.extend(self.approvers.keys().cloned());
        for t in &self.tests {
            for s in &t.steps {
                if let Step::Decide(d) = s {
                    out.extend(d.approvals.iter().cloned());
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// The scenario files of a pack: `scenarios/*.json` in the pack folder (or
/// next to the pack file), sorted by name. No folder: none.
pub fn scenario_files(pack_path: &Path) -> Result<Vec<PathBuf>, ScenarioError> {
    let dir = if pack_path.is_dir() {
        pack_path.join("scenarios")
    } else {
        pack_path
            .parent()
            .unwrap_or(Path::new("."))
            .join("scenarios")
    };
    if !dir.is_dir() {
        return Ok(vec![]);
    }
    let rd = std::fs::read_dir(&dir).map_err(|e| ScenarioError::Read {
        path: dir.display().to_string(),
        reason: e.to_string().to_lowercase(),
    })?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Suite, ScenarioError> {
        Suite::parse(text, Path::new("x.json"), PathBuf::from("regs"))
    }

    const OK: &str = r#"{"pack": "bank", "clock": "2026-11-27T18:40:00Z",
        "mandates": {"emma": {"user": "emma", "budget": "10.00"}},
        "tests": [{"name": "one", "mandate": "emma", "proposal": {"action": "x", "args": {}},
                   "approvals": ["emma"], "expect": {"decision": "DENY", "stage": "contract"}}]}"#;

    #[test]
    fn a_valid_file_loads() {
        let s = parse(OK).unwrap();
        assert_eq!(s.pack, "bank");
        assert_eq!(s.tests.len(), 1);
        assert_eq!(s.people(), vec!["emma".to_string()]);
    }

    #[test]
    fn a_typo_anywhere_is_an_error_naming_the_test() {
        for (from, to, needle) in [
            ("\"expect\"", "\"expct\"", "unknown field `expct`"),
            ("\"stage\"", "\"stag\"", "unknown field `stag`"),
            ("\"budget\"", "\"budgte\"", "mandate `emma`"),
            ("\"contract\"", "\"contrat\"", "unknown stage"),
            ("\"DENY\"", "\"DENIED\"", "unknown variant"),
            (
                "\"mandate\": \"emma\"",
                "\"mandate\": \"emme\"",
                "no mandate `emme`",
            ),
            ("\"clock\"", "\"clocks\"", "unknown field"),
        ] {
            let text = OK.replacen(from, to, 1);
            let e = parse(&text).unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(needle), "{msg} lacks {needle}");
            assert!(msg.contains("x.json"), "{msg}");
        }
        let e = parse(&OK.replace("\"stage\"", "\"stag\"")).unwrap_err();
        assert!(e.to_string().contains("test `one`"), "{e}");
    }

    #[test]
    fn a_files_records_must_be_owner_to_records() {
        let text = OK.replacen(
            "\"tests\"",
            "\"registries\": {\"sanctions\": [\"x\"]}, \"tests\"",
            1,
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains("registries: `sanctions`: expected an object from owner to records"),
            "{e}"
        );
        let ok = OK.replacen(
            "\"tests\"",
            "\"registries\": {\"sanctions\": {\"*\": [\"x\"]}}, \"tests\"",
            1,
        );
        assert_eq!(
            parse(&ok).unwrap().records["sanctions"]["*"],
            serde_json::json!(["x"])
        );
    }

    #[test]
    fn steps_and_trusted_changes_are_checked() {
        let text = r#"{"pack": "bank", "clock": "2026-11-27T18:40:00Z", "mandates": {},
          "tests": [{"name": "s", "steps": [
            {"trusted": {"add": {"registry": "beneficiaries", "owner": "emma", "value": "x"}}},
            {"trusted": {"ad": {"registry": "beneficiaries", "owner": "emma", "value": "x"}}}]}]}"#;
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("step 2") && e.contains("unknown variant `ad`"),
            "{e}"
        );
        let only_trusted = text.replace("\"ad\"", "\"add\"");
        let e = parse(&only_trusted).unwrap_err().to_string();
        assert!(e.contains("no decision step"), "{e}");
        let dup = r#"{"pack": "bank", "clock": "2026-11-27T18:40:00Z", "pack": "ap", "tests": []}"#;
        assert!(parse(dup).unwrap_err().to_string().contains("duplicate"));
    }
}
