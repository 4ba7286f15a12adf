//! The scenario runner for mutants: a pack's scenario files run in process
//! on forks of one gateway, the mutated action's policies replaced.

use super::{ScenarioOutcome, ScenarioRunner};
use crate::bundle::Bundle;
use cedar_policy::PolicySet;
use serde_json::Value;

/// The scenario files of one pack, run in process on forks of one gateway.
pub struct PackScenarios<'a> {
    bundle: &'a Bundle,
    suites: Vec<crate::scenarios::Suite>,
    base: crate::gateway::Gateway,
}

impl<'a> PackScenarios<'a> {
    /// Loads every scenario file of the pack folder `path` (pack `pack` of
    /// `bundle`); an invalid file, or one for another pack, is an error.
    pub fn load(bundle: &'a Bundle, pack: &str, path: &std::path::Path) -> Result<Self, String> {
        let files = crate::scenarios::scenario_files(path).map_err(|e| e.to_string())?;
        let mut suites = vec![];
        for f in files {
            let s = crate::scenarios::Suite::load(&f).map_err(|e| e.to_string())?;
            if s.pack != pack {
                return Err(format!(
                    "`{}` is for pack `{}`, not `{pack}`",
                    f.display(),
                    s.pack
                ));
            }
            suites.push(s);
        }
        let base = crate::gateway::Gateway::new(
            bundle,
            crate::gateway::world::World::empty(),
            std::sync::Arc::new(crate::store::memory::MemoryStore::new()),
        )
        .map_err(|e| e.to_string())?;
        Ok(PackScenarios {
            bundle,
            suites,
            base,
        })
    }
}

impl ScenarioRunner for PackScenarios<'_> {
    fn run(&mut self, replace: Option<(&str, &PolicySet)>) -> Result<Vec<ScenarioOutcome>, String> {
        let mut gw = self.base.fork(
            crate::gateway::world::World::empty(),
            std::sync::Arc::new(crate::store::memory::MemoryStore::new()),
        );
        if let Some((action, set)) = replace {
            gw.with_policies(action, set.clone())
                .map_err(|e| e.to_string())?;
        }
        let factory = |w, s| Ok(gw.fork(w, s));
        let mut out = vec![];
        for suite in &self.suites {
            // with one action's policies replaced, only the tests that
            // propose that action can change: the others are not run
            let filtered;
            let suite = match replace {
                None => suite,
                Some((action, _)) => {
                    let mut s = suite.clone();
                    s.tests.retain(|t| proposes(t, action));
                    if s.tests.is_empty() {
                        continue;
                    }
                    filtered = s;
                    &filtered
                }
            };
            let r = crate::scenarios::run_suite(suite, &self.bundle.table, &factory);
            let file = suite
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| suite.path.display().to_string());
            if let Some(e) = r.error {
                return Err(e);
            }
            let mut failed = false;
            for t in r.tests {
                failed |= t.status != crate::scenarios::Status::Pass;
                out.push(ScenarioOutcome {
                    name: format!("{file}: {}", t.name),
                    passed: t.status == crate::scenarios::Status::Pass,
                    got: decision_only(&t.got),
                });
            }
            // a mutant needs one failing test to be killed
            if failed && replace.is_some() {
                break;
            }
        }
        Ok(out)
    }
}

/// Whether a test proposes `action` in one of its steps.
fn proposes(t: &crate::scenarios::TestCase, action: &str) -> bool {
    t.steps.iter().any(|s| match s {
        crate::scenarios::Step::Decide(d) => {
            d.proposal.get("action").and_then(Value::as_str) == Some(action)
        }
        crate::scenarios::Step::Trusted(_) => false,
    })
}

/// `DENY policy: forbidden: hard cap` → `DENY policy`: a mutant changes an
/// outcome when it changes the decision, the stage or the level; the reason
/// text names the policies and changes with any of them.
fn decision_only(got: &str) -> String {
    got.split(": ").next().unwrap_or(got).to_string()
}
