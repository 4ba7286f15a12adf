//! `ipc demo [bank|ap|three]`: the scenarios of the product description,
//! played end to end on the embedded packs and the embedded store (SQLite)
//! in a temporary folder: build the bundle, issue keys and mandates, decide
//! on what a compromised agent proposes, show what would have happened
//! without the gateway, and verify the receipts. The stories are data
//! (`stories/*.toml`, read by [`story`]); [`run_story`] interprets one.
//! Feature `demo` (on by default); `mcp_server` and `mcp_client` are `ipc
//! demo mcp`'s (with `mcp`).

#[cfg(feature = "mcp")]
pub mod mcp_client;
#[cfg(feature = "mcp")]
pub mod mcp_server;
pub mod story;

pub use story::{Expect, Story, StoryError};
use story::{MandateSpec, Person};

use crate::base::json::parse_time_str;
use crate::compile::build;
use crate::gateway::approval::{SignedApproval, random_id};
use crate::gateway::world::World;
use crate::gateway::{Budget, Decision, Gateway, Input, Mandate, MandateToken, Outcome};
use crate::keys::SecretKey;
use crate::store::sqlite::SqliteStore;
use serde_json::{Map, Value, json};
use std::io::Write;
use std::sync::Arc;

const NOW: &str = "2026-11-27T18:40:00Z";

/// The packs the demo ships with, so that it runs from the binary alone.
const FILES: &[(&str, &str)] = &[
    ("bank/pack.ipc", include_str!("../../packs/bank/pack.ipc")),
    (
        "bank/registries/beneficiaries.json",
        include_str!("../../packs/bank/registries/beneficiaries.json"),
    ),
    (
        "bank/registries/sanctions.json",
        include_str!("../../packs/bank/registries/sanctions.json"),
    ),
    (
        "bank/registries/standing_orders.json",
        include_str!("../../packs/bank/registries/standing_orders.json"),
    ),
    (
        "bank/registries/counterparties.json",
        include_str!("../../packs/bank/registries/counterparties.json"),
    ),
    (
        "bank/registries/scheduled.json",
        include_str!("../../packs/bank/registries/scheduled.json"),
    ),
    ("ap/pack.ipc", include_str!("../../packs/ap/pack.ipc")),
    (
        "ap/registries/vendors.json",
        include_str!("../../packs/ap/registries/vendors.json"),
    ),
    (
        "ap/registries/invoices.json",
        include_str!("../../packs/ap/registries/invoices.json"),
    ),
    (
        "ap/registries/callbacks.json",
        include_str!("../../packs/ap/registries/callbacks.json"),
    ),
    (
        "ap/registries/vop.json",
        include_str!("../../packs/ap/registries/vop.json"),
    ),
    (
        "health/pack.ipc",
        include_str!("../../packs/health/pack.ipc"),
    ),
    (
        "health/registries/cohort.json",
        include_str!("../../packs/health/registries/cohort.json"),
    ),
    (
        "health/registries/encounters.json",
        include_str!("../../packs/health/registries/encounters.json"),
    ),
    (
        "health/registries/patients.json",
        include_str!("../../packs/health/registries/patients.json"),
    ),
    (
        "health/registries/research_consent.json",
        include_str!("../../packs/health/registries/research_consent.json"),
    ),
    ("code/pack.ipc", include_str!("../../packs/code/pack.ipc")),
    (
        "code/registries/attestations.json",
        include_str!("../../packs/code/registries/attestations.json"),
    ),
    (
        "code/registries/branches.json",
        include_str!("../../packs/code/registries/branches.json"),
    ),
    (
        "code/registries/protected_branches.json",
        include_str!("../../packs/code/registries/protected_branches.json"),
    ),
    (
        "code/registries/repositories.json",
        include_str!("../../packs/code/registries/repositories.json"),
    ),
];

/// `examples/mcp/` (the proxy's demo config, its world, its demo keys and
/// registries) and the bank pack it names, as `ipc demo mcp` plays them.
#[cfg(feature = "mcp")]
const MCP_EXAMPLE: &[(&str, &str)] = &[
    (
        "examples/mcp/intentplane.toml",
        include_str!("../../examples/mcp/intentplane.toml"),
    ),
    (
        "examples/mcp/world.toml",
        include_str!("../../examples/mcp/world.toml"),
    ),
    (
        "examples/mcp/keys/issuer.key",
        include_str!("../../examples/mcp/keys/issuer.key"),
    ),
    (
        "examples/mcp/keys/issuer.pub",
        include_str!("../../examples/mcp/keys/issuer.pub"),
    ),
    (
        "examples/mcp/keys/emma.key",
        include_str!("../../examples/mcp/keys/emma.key"),
    ),
    (
        "examples/mcp/keys/emma.pub",
        include_str!("../../examples/mcp/keys/emma.pub"),
    ),
    (
        "examples/mcp/registries/bank/beneficiaries.json",
        include_str!("../../examples/mcp/registries/bank/beneficiaries.json"),
    ),
    (
        "examples/mcp/registries/bank/counterparties.json",
        include_str!("../../examples/mcp/registries/bank/counterparties.json"),
    ),
    (
        "examples/mcp/registries/bank/sanctions.json",
        include_str!("../../examples/mcp/registries/bank/sanctions.json"),
    ),
    (
        "examples/mcp/registries/bank/scheduled.json",
        include_str!("../../examples/mcp/registries/bank/scheduled.json"),
    ),
    (
        "examples/mcp/registries/bank/standing_orders.json",
        include_str!("../../examples/mcp/registries/bank/standing_orders.json"),
    ),
    (
        "examples/mcp/registries/mail/contacts.json",
        include_str!("../../examples/mcp/registries/mail/contacts.json"),
    ),
    (
        "packs/bank/pack.ipc",
        include_str!("../../packs/bank/pack.ipc"),
    ),
];

/// Writes [`MCP_EXAMPLE`] into a new temporary folder (removed when the
/// returned value drops).
#[cfg(feature = "mcp")]
pub fn embedded_mcp_example() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary folder: {e}"))?;
    for (rel, text) in MCP_EXAMPLE {
        let path = dir.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot write `{}`: {e}", parent.display()))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    std::fs::create_dir_all(dir.path().join("examples/mcp/approvals"))
        .map_err(|e| format!("cannot write the approvals folder: {e}"))?;
    Ok(dir)
}

/// The stories `ipc demo NAME` plays, by name: the files of
/// `src/demo/stories/`, embedded so that the demo runs from the binary
/// alone.
pub const STORIES: &[(&str, &str)] = &[
    ("bank", include_str!("stories/bank.toml")),
    ("ap", include_str!("stories/ap.toml")),
    ("three", include_str!("stories/three.toml")),
];

/// One step played: what the story says of it and the gateway's decision.
pub struct PlayedStep {
    pub what: String,
    pub without: String,
    pub expect: Expect,
    pub decision: Decision,
}

/// A story played: its steps and the gateway (with its store) they were
/// decided by, in a temporary folder removed when this drops.
pub struct Played {
    setup: Setup,
    pub intro: String,
    pub steps: Vec<PlayedStep>,
}

impl Played {
    pub fn gateway(&self) -> &Gateway {
        &self.setup.gw
    }
}

impl PlayedStep {
    /// How the decision differs from what the story expects of it (`None`
    /// when it is the expected decision at the expected stage).
    pub fn unexpected(&self) -> Option<String> {
        let (d, e) = (&self.decision, &self.expect);
        (d.decision != e.decision || d.stage != e.stage).then(|| {
            format!(
                "decided {} at `{}`, the story expects {} at `{}`",
                d.decision.name(),
                d.stage.name(),
                e.decision.name(),
                e.stage.name()
            )
        })
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    gw: Gateway,
    issuer: SecretKey,
    people: Vec<(String, SecretKey)>,
    now: i64,
}

/// A TOML string (quoted and escaped).
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| toml_str(s)).collect();
    format!("[{}]", quoted.join(", "))
}

fn setup(people: &[Person]) -> Result<Setup, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    for (rel, text) in FILES {
        let p = dir.path().join("packs").join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(&p, text).map_err(|e| e.to_string())?;
    }
    let packs: Vec<_> = ["bank", "ap", "health", "code"]
        .iter()
        .map(|p| dir.path().join("packs").join(p))
        .collect();
    let report = build(&packs);
    let bundle = report
        .bundle
        .ok_or_else(|| "the embedded packs do not build".to_string())?;
    let issuer = SecretKey::generate().map_err(|e| e.to_string())?;
    issuer
        .write_pair(&dir.path().join("issuer"))
        .map_err(|e| e.to_string())?;
    let mut approvers = String::new();
    let mut keys = vec![];
    for p in people {
        // the name is checked (`[a-z0-9_]+`): a file name and a TOML key
        let name = &p.name;
        let k = SecretKey::generate().map_err(|e| e.to_string())?;
        k.write_pair(&dir.path().join(name))
            .map_err(|e| e.to_string())?;
        // a person with an owner's role (the CFO is acme's treasury) is a
        // second pair of eyes on its records; everyone else approves only
        // as the user
        if p.owners.is_empty() && p.roles.is_empty() {
            approvers.push_str(&format!("{name} = \"{name}.pub\"\n"));
        } else {
            approvers.push_str(&format!(
                "{name} = {{ key = \"{name}.pub\", owners = {}, roles = {} }}\n",
                toml_list(&p.owners),
                toml_list(&p.roles)
            ));
        }
        keys.push((name.clone(), k));
    }
    let world_path = dir.path().join("world.toml");
    std::fs::write(
        &world_path,
        format!(
            "clock = \"{NOW}\"\nmandate_keys = [\"issuer.pub\"]\nstore = \"state.db\"\n[approvers]\n{approvers}[registries]\nbank = \"packs/bank/registries\"\nap = \"packs/ap/registries\"\nhealth = \"packs/health/registries\"\ncode = \"packs/code/registries\"\n"
        ),
    )
    .map_err(|e| e.to_string())?;
    let world = World::load(&world_path, &bundle.table).map_err(|e| e.to_string())?;
    let store_path = world
        .store
        .clone()
        .unwrap_or_else(|| dir.path().join("state.db"));
    let store = SqliteStore::open(&store_path).map_err(|e| e.to_string())?;
    let gw = Gateway::new(&bundle, world, Arc::new(store)).map_err(|e| e.to_string())?;
    Ok(Setup {
        _dir: dir,
        gw,
        issuer,
        people: keys,
        now: parse_time_str(NOW)?,
    })
}

impl Setup {
    fn mandate(&self, spec: &MandateSpec) -> Result<Value, String> {
        let m = Mandate {
            id: format!(
                "m-{}-{}",
                spec.user,
                &random_id().map_err(|e| e.to_string())?[..8]
            ),
            pack: spec.pack.clone(),
            user: spec.user.clone(),
            owner: spec.owner.clone(),
            scopes: spec.scopes.clone(),
            claims: spec.claims.clone(),
            budget: Budget {
                amount: spec.budget_minor,
                calls: 20,
            },
            issued_at: self.now - 600,
            expires_at: self.now + 3600,
            sources: Default::default(),
            parent: None,
        };
        let t = MandateToken::sign(m, &self.issuer).map_err(|e| e.to_string())?;
        serde_json::to_value(t).map_err(|e| e.to_string())
    }

    fn decide(
        &self,
        proposal: Value,
        mandate: &Value,
        approvals: Vec<Value>,
    ) -> Result<Decision, String> {
        self.gw
            .decide(&Input {
                proposal,
                mandate: Some(mandate.clone()),
                approvals,
                malformed: None,
            })
            .map_err(|e| e.to_string())
    }

    fn approve(&self, who: &str, op: &Option<String>) -> Result<Value, String> {
        let key = self
            .people
            .iter()
            .find(|(n, _)| n == who)
            .map(|(_, k)| k)
            .ok_or("no such approver")?;
        let op = op.as_deref().ok_or("no operation hash to approve")?;
        let a = SignedApproval::issue(who, op, self.now + 300, key).map_err(|e| e.to_string())?;
        serde_json::to_value(a).map_err(|e| e.to_string())
    }
}

/// Plays the story `name` (the text of its file): parsed and checked
/// whole first, then step by step on the embedded packs; each step's
/// registry change, then its approvals (of an earlier step's operation, or
/// of this step's own proposal, decided once without them first), then
/// its decision.
pub fn run_story(name: &str, text: &str) -> Result<Played, StoryError> {
    let story = Story::parse(name, text)?;
    let s = setup(&story.people).map_err(|reason| StoryError::Setup { reason })?;
    let mut mandates = std::collections::BTreeMap::new();
    for (k, spec) in &story.mandates {
        let token = s
            .mandate(spec)
            .map_err(|reason| StoryError::Setup { reason })?;
        mandates.insert(k.as_str(), token);
    }
    let mut steps: Vec<PlayedStep> = vec![];
    for (i, st) in story.steps.iter().enumerate() {
        let fail = |reason: String| StoryError::Play {
            story: name.to_string(),
            step: i + 1,
            reason,
        };
        // checked by `Story::parse`: the mandate exists, approvals name
        // people and earlier steps, the change is one change
        let mandate = mandates
            .get(st.mandate.as_str())
            .ok_or_else(|| fail(format!("no mandate `{}`", st.mandate)))?;
        if let Some(c) = &st.registry_change {
            let change = c
                .change()
                .ok_or_else(|| fail("the registry change is not one change".into()))?;
            s.gw.change_registry(&c.pack, &c.registry, &c.owner, &change, &c.by)
                .map_err(|e| fail(format!("the registry change is refused: {e}")))?;
        }
        let mut own: Option<Decision> = None;
        let mut approvals = vec![];
        for a in &st.approvals {
            let op = if a.of == story::THIS {
                if own.is_none() {
                    // whatever it decides (the bank story's greedy
                    // payment is over budget: DENY), its receipt is kept
                    own = Some(
                        s.decide(st.proposal.clone(), mandate, vec![])
                            .map_err(&fail)?,
                    );
                }
                own.as_ref().and_then(|d| d.operation_hash.clone())
            } else {
                let j = story
                    .steps
                    .iter()
                    .position(|p| p.id.as_ref() == Some(&a.of))
                    .filter(|j| *j < i)
                    .ok_or_else(|| fail(format!("no earlier step `{}`", a.of)))?;
                steps[j].decision.operation_hash.clone()
            };
            approvals.push(
                s.approve(&a.by, &op)
                    .map_err(|e| fail(format!("`{}`'s approval of `{}`: {e}", a.by, a.of)))?,
            );
        }
        let decision = s
            .decide(st.proposal.clone(), mandate, approvals)
            .map_err(&fail)?;
        steps.push(PlayedStep {
            what: st.what.clone(),
            without: st.without.clone(),
            expect: st.expect.clone(),
            decision,
        });
    }
    Ok(Played {
        setup: s,
        intro: story.intro,
        steps,
    })
}

fn verdict(d: &Decision) -> String {
    match d.decision {
        Outcome::Allow => {
            if d.replayed {
                "ALLOWED (already executed: not run again)".into()
            } else {
                "EXECUTED".into()
            }
        }
        Outcome::Pending => format!(
            "PENDING level {}: {}; approve: {}",
            d.level.unwrap_or(0),
            d.reason.as_deref().unwrap_or(""),
            d.approve_by.as_deref().unwrap_or("")
        ),
        Outcome::Deny => {
            let mut s = format!(
                "DENIED ({}): {}",
                d.stage.name(),
                d.reason.as_deref().unwrap_or("")
            );
            if let Some(h) = &d.hint {
                s.push_str(&format!("\n{:>8}hint: {h}", ""));
            }
            s
        }
        Outcome::Shadow => format!(
            "SHADOW (would be {} at {}): {}",
            d.would_be.as_ref().map_or("?", |w| w.decision.name()),
            d.stage.name(),
            d.reason.as_deref().unwrap_or("")
        ),
    }
}

/// Plays the story `story` (`bank`, `ap`, `three`: [`STORIES`]), its
/// report on `out` (JSON with `json`); the exit code.
pub fn play(story: &str, json: bool, out: &mut dyn Write) -> u8 {
    let played = match STORIES.iter().find(|(name, _)| *name == story) {
        Some((name, text)) => run_story(name, text).map_err(|e| e.to_string()),
        None => {
            let names: Vec<String> = STORIES.iter().map(|(n, _)| format!("`{n}`")).collect();
            Err(format!(
                "no demo `{}`: try {} or `mcp`",
                crate::base::json::echo(story),
                names.join(", ")
            ))
        }
    };
    let played = match played {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let (s, steps, intro) = (&played.setup, &played.steps, played.intro.as_str());
    // a store that cannot be read back is an error, never an empty chain
    let snap = match s.gw.store().snapshot() {
        Ok(snap) => snap,
        Err(e) => {
            eprintln!("error: cannot read the receipts back: {e}");
            return 1;
        }
    };
    // the chain, and the budgets, nonces and executions against it
    let verified = crate::store::verify_store(&snap, None);
    let recs = &snap.receipts;
    let r = match json {
        true => {
            let doc = json!({
                "story": story,
                "steps": steps.iter().map(|st| json!({
                    "proposal": st.what.trim_start_matches(' '),
                    "without_intentplane": st.without,
                    "decision": st.decision,
                })).collect::<Vec<_>>(),
                "receipts": recs.len(),
                "chain_verifies": verified.is_ok(),
            });
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )
        }
        false => {
            let mut text = format!("{intro}\n\n");
            for (i, st) in steps.iter().enumerate() {
                text.push_str(&format!("{:>2}. {}\n", i + 1, st.what));
                if !st.without.is_empty() {
                    text.push_str(&format!("    without intentplane: {}\n", st.without));
                }
                text.push_str(&format!(
                    "    with intentplane:    {}\n",
                    verdict(&st.decision)
                ));
                if st.decision.decision == Outcome::Allow
                    && let Some(Value::Object(res)) = st.decision.result.as_ref()
                {
                    let mut m = Map::new();
                    for (k, v) in res.iter().take(4) {
                        // the ledger keeps minor units; a person reads 98.70
                        let shown = match (k.as_str(), v.as_i64()) {
                            ("amount", Some(minor)) => {
                                crate::base::Money::from_minor(minor).to_json()
                            }
                            _ => v.clone(),
                        };
                        m.insert(k.clone(), shown);
                    }
                    text.push_str(&format!(
                        "    executed with the trusted values: {}\n",
                        Value::Object(m)
                    ));
                }
                text.push('\n');
            }
            text.push_str(&match &verified {
                Ok(n) => format!("{n} receipts, one per decision and one per change to the owner's records; the store verifies.\n"),
                Err(p) => format!("the receipt chain does NOT verify: {} problems\n", p.len()),
            });
            text.push_str("The agent never held a credential; every value that executed came from the mandate or the owner's own records.\n");
            write!(out, "{text}")
        }
    };
    // a story whose gateway decides otherwise than it states is a failure,
    // never a demo that shows what it does not claim
    let mut differs = false;
    for (i, st) in steps.iter().enumerate() {
        if let Some(why) = st.unexpected() {
            eprintln!("error: story `{story}`, step {}: {why}", i + 1);
            differs = true;
        }
    }
    if r.is_err() || verified.is_err() || differs {
        return 1;
    }
    0
}
