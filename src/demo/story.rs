//! A demo story as data: the TOML file of `src/demo/stories/` (its
//! narration, its people, its mandates and its steps), read with serde
//! and checked before anything is played. [`super::play`] interprets it.
//! The format is described in docs/gateway.md ("The demo").

use crate::base::Money;
use crate::gateway::{Outcome, Stage};
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The reserved `of` of an approval: this step's own proposal, decided
/// once without approvals first (that decision's operation is approved,
/// and its receipt kept, as a person approving what they were shown).
pub const THIS: &str = "this";

/// Why a story cannot be played: a file that is not a story, a story
/// that names what it does not define, or a step the gateway could not
/// take as the story says.
#[derive(Debug, thiserror::Error, miette::Diagnostic)]
pub enum StoryError {
    /// A demo story (`src/demo/stories/NAME.toml`) that is not TOML of the
    /// story's shape: an unknown key, a missing field, a value of the
    /// wrong type. Keys are never ignored: a misspelt one would silently
    /// change the story.
    #[error("story `{story}` does not parse: {reason}")]
    #[diagnostic(
        code(ipc::demo::story),
        help(
            "a story has `intro`, `[[people]]`, `[mandates.NAME]` and `[[steps]]`: see docs/gateway.md"
        )
    )]
    Parse { story: String, reason: String },
    /// A demo story that parses but names what it does not define: a
    /// mandate or a person that is not in the file, an approval of a step
    /// that does not exist or comes later, a registry change that is not
    /// exactly one change, an amount that is not one. Checked for the whole
    /// file before the first step is played.
    #[error("story `{story}`, {place}: {reason}")]
    #[diagnostic(code(ipc::demo::story))]
    Invalid {
        story: String,
        place: String,
        reason: String,
    },
    /// A step of a demo story the gateway could not take as the story
    /// says: a registry change it refused, an approval of a decision that
    /// has no operation to approve, a decision that failed.
    #[error("story `{story}`, step {step}: {reason}")]
    #[diagnostic(code(ipc::demo::play))]
    Play {
        story: String,
        step: usize,
        reason: String,
    },
    /// The demo's own setting could not be made: a temporary folder, the
    /// embedded packs, a key, the store.
    #[error("cannot set the demo up: {reason}")]
    #[diagnostic(code(ipc::demo::setup))]
    Setup { reason: String },
}

/// A story as its file says it (see [`Story::parse`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Story {
    /// The narration printed before the steps.
    pub intro: String,
    /// Who has a key: the users, who approve as themselves, and anyone
    /// with an owner's role.
    #[serde(default)]
    pub people: Vec<Person>,
    /// The mandates the steps are decided under, by name.
    #[serde(default)]
    pub mandates: BTreeMap<String, MandateSpec>,
    pub steps: Vec<StepSpec>,
}

/// A person of the story: a key of their own in the world's approvers,
/// `owners` and `roles` making them an owner's second pair of eyes (the
/// CFO is acme's treasury).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Person {
    pub name: String,
    #[serde(default)]
    pub owners: Vec<String>,
    #[serde(default)]
    pub roles: Vec<String>,
}

/// A mandate the issuer signs for the story (valid ten minutes before the
/// story's clock to an hour after, 20 calls).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MandateSpec {
    pub pack: String,
    pub user: String,
    pub owner: String,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub claims: Map<String, Value>,
    /// The budget as a person writes it (`"2000.00"`); none is 0.
    #[serde(default)]
    pub budget: Option<String>,
    /// `budget` in minor units, set by [`Story::parse`].
    #[serde(skip)]
    pub budget_minor: i64,
}

/// One proposal of the agent, and what is done on the trusted side first.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepSpec {
    /// A name, for a later step's approval of this step's operation.
    #[serde(default)]
    pub id: Option<String>,
    /// The proposal as the reader sees it.
    pub what: String,
    /// What would have happened without the gateway (none: not shown).
    #[serde(default)]
    pub without: String,
    /// The mandate (a key of `mandates`) it is decided under.
    pub mandate: String,
    /// The proposal: a table, or the text of a JSON object.
    pub proposal: Value,
    /// A change to an owner's registry made before the step.
    #[serde(default)]
    pub registry_change: Option<RegistryEdit>,
    /// Approvals sent with the proposal.
    #[serde(default)]
    pub approvals: Vec<ApprovalSpec>,
    /// The decision the story states.
    pub expect: Expect,
}

/// A change to a registry, as the owner makes it in their own app: one of
/// `add`/`remove` (a set registry) or `put` with `record`/`delete` (a
/// keyed one).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryEdit {
    pub pack: String,
    pub registry: String,
    pub owner: String,
    /// Who makes it (the receipt's actor).
    pub by: String,
    #[serde(default)]
    pub add: Option<Value>,
    #[serde(default)]
    pub remove: Option<Value>,
    #[serde(default)]
    pub put: Option<String>,
    #[serde(default)]
    pub record: Option<Map<String, Value>>,
    #[serde(default)]
    pub delete: Option<String>,
}

/// An approval by a person of an operation: of an earlier step's
/// decision (its `id`), or [`THIS`] step's own first decision (made
/// without approvals).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalSpec {
    pub by: String,
    pub of: String,
}

/// A decision as the story states it: `ALLOW`, `PENDING` or `DENY`, and
/// the stage that made it (spelt as a decision's JSON spells them).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    pub decision: Outcome,
    pub stage: Stage,
}

impl Story {
    /// The story `name` from the text of its file, checked whole: every
    /// mandate, person and approved step it names exists (an approved step
    /// before the step approving it), every amount is one.
    pub fn parse(name: &str, text: &str) -> Result<Story, StoryError> {
        let mut story: Story = toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| crate::diagnostics::line_col(text, s.start).0);
            StoryError::Parse {
                story: name.to_string(),
                reason: match line {
                    Some(l) => format!("line {l}: {}", e.message().trim()),
                    None => e.message().trim().to_string(),
                },
            }
        })?;
        let invalid = |place: String, reason: String| StoryError::Invalid {
            story: name.to_string(),
            place,
            reason,
        };
        for (i, p) in story.people.iter().enumerate() {
            let place = format!("person {}", i + 1);
            let simple = |s: &str| {
                !s.is_empty()
                    && s.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            };
            if !simple(&p.name) {
                return Err(invalid(
                    place,
                    format!(
                        "`{}` is not a name: lowercase letters, digits and `_` only",
                        p.name
                    ),
                ));
            }
            if story.people[..i].iter().any(|q| q.name == p.name) {
                return Err(invalid(place, format!("`{}` is named twice", p.name)));
            }
        }
        for (name, m) in story.mandates.iter_mut() {
            if let Some(b) = &m.budget {
                m.budget_minor = Money::parse(b)
                    .map_err(|e| invalid(format!("mandate `{name}`"), format!("budget: {e}")))?
                    .minor();
            }
        }
        for i in 0..story.steps.len() {
            let place = format!("step {}", i + 1);
            let st = &story.steps[i];
            if let Some(id) = &st.id {
                if id == THIS {
                    return Err(invalid(
                        place,
                        format!("`{THIS}` is not an id: it names the step itself"),
                    ));
                }
                if story.steps[..i].iter().any(|p| p.id.as_ref() == Some(id)) {
                    return Err(invalid(place, format!("the id `{id}` is taken")));
                }
            }
            if !story.mandates.contains_key(&st.mandate) {
                return Err(invalid(
                    place,
                    format!("no mandate `{}` in the story", st.mandate),
                ));
            }
            for a in &st.approvals {
                if !story.people.iter().any(|p| p.name == a.by) {
                    return Err(invalid(
                        place,
                        format!("`{}` approves, but is not one of the people", a.by),
                    ));
                }
                if a.of != THIS
                    && !story.steps[..i]
                        .iter()
                        .any(|p| p.id.as_ref() == Some(&a.of))
                {
                    let later = story.steps[i..]
                        .iter()
                        .any(|p| p.id.as_ref() == Some(&a.of));
                    return Err(invalid(
                        place,
                        match later {
                            true => format!("approves step `{}`, which comes after it", a.of),
                            false => format!("approves step `{}`, which does not exist", a.of),
                        },
                    ));
                }
            }
            if let Some(c) = &st.registry_change {
                let ops = [
                    c.add.is_some(),
                    c.remove.is_some(),
                    c.put.is_some(),
                    c.delete.is_some(),
                ];
                if ops.iter().filter(|o| **o).count() != 1 {
                    return Err(invalid(
                        place,
                        "a registry change is exactly one of `add`, `remove`, `put`, `delete`"
                            .into(),
                    ));
                }
                if c.put.is_some() != c.record.is_some() {
                    return Err(invalid(
                        place,
                        "`record` goes with `put`, and only with it".into(),
                    ));
                }
            }
            // a proposal written as JSON text is read once, here
            if let Value::String(json) = &st.proposal {
                let v = crate::base::json::parse_strict(json)
                    .map_err(|e| invalid(place.clone(), format!("proposal: {e}")))?;
                story.steps[i].proposal = v;
            }
            if !story.steps[i].proposal.is_object() {
                return Err(invalid(
                    format!("step {}", i + 1),
                    "the proposal is not a table (or the text of a JSON object)".into(),
                ));
            }
        }
        Ok(story)
    }
}

impl RegistryEdit {
    /// The change it makes (checked to be exactly one by [`Story::parse`]).
    pub fn change(&self) -> Option<crate::gateway::trusted::RegistryChange> {
        use crate::gateway::trusted::RegistryChange;
        if let Some(value) = &self.add {
            return Some(RegistryChange::Add {
                value: value.clone(),
            });
        }
        if let Some(value) = &self.remove {
            return Some(RegistryChange::Remove {
                value: value.clone(),
            });
        }
        if let (Some(key), Some(record)) = (&self.put, &self.record) {
            return Some(RegistryChange::Put {
                key: key.clone(),
                record: record.clone(),
            });
        }
        self.delete
            .as_ref()
            .map(|key| RegistryChange::Delete { key: key.clone() })
    }
}
