//! `ipc demo`'s stories are data (src/demo/stories/*.toml, issue #22):
//! every embedded story parses, plays to the decisions it states and
//! leaves a store that verifies; a malformed story (tests/fixtures/demo/)
//! is a typed error naming the story, never a panic.
#![cfg(feature = "demo")]

use intentplane::demo::{STORIES, Story, StoryError, run_story};
use miette::Diagnostic;

#[test]
fn every_embedded_story_plays_to_the_decisions_it_states() {
    let names: Vec<&str> = STORIES.iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["bank", "ap", "three"]);
    for (name, text) in STORIES {
        let story = Story::parse(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let played = run_story(name, text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(played.steps.len(), story.steps.len(), "{name}");
        for (i, st) in played.steps.iter().enumerate() {
            let got = serde_json::to_value(&st.decision).unwrap();
            assert_eq!(
                (got["decision"].as_str(), got["stage"].as_str()),
                (
                    Some(st.expect.decision.name()),
                    Some(st.expect.stage.name())
                ),
                "{name}, step {} ({}): {got}",
                i + 1,
                st.what
            );
        }
        // every story blocks something and lets the user's own task through
        let outcomes: Vec<&str> = played
            .steps
            .iter()
            .map(|s| s.expect.decision.name())
            .collect();
        assert!(
            outcomes.contains(&"DENY") && outcomes.contains(&"ALLOW"),
            "{name}: {outcomes:?}"
        );
        let snap = played.gateway().store().snapshot().unwrap();
        assert!(
            intentplane::store::verify_store(&snap, None).is_ok(),
            "{name}: the store does not verify"
        );
    }
}

/// The bank story's "greedy" step approves its own proposal's operation:
/// decided once without the approval, then with it; both receipts kept
/// (six steps, one registry change, one decision before the approval).
#[test]
fn an_approval_of_this_step_decides_the_proposal_twice() {
    let (name, text) = STORIES[0];
    let played = run_story(name, text).unwrap();
    let snap = played.gateway().store().snapshot().unwrap();
    assert_eq!(snap.receipts.len(), 8);
    let greedy = &played.steps[4];
    assert!(greedy.what.contains("even with Emma's approval"));
    assert_eq!(greedy.decision.stage.name(), "budget");
}

fn fixture(name: &str) -> String {
    let path = format!(
        "{}/tests/fixtures/demo/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).unwrap()
}

/// A story the gateway decides otherwise than it states plays, and the
/// difference is named step by step (`ipc demo` exits 1 on it); the
/// embedded stories have none.
#[test]
fn a_decision_other_than_the_story_states_is_named() {
    let played = run_story("wrong_expectation", &fixture("wrong_expectation")).unwrap();
    let why = played.steps[0].unexpected();
    assert_eq!(
        why.as_deref(),
        Some("decided DENY at `provenance`, the story expects ALLOW at `execution`"),
    );
    for (name, text) in STORIES {
        let played = run_story(name, text).unwrap();
        for st in &played.steps {
            assert_eq!(st.unexpected(), None, "{name}: {}", st.what);
        }
    }
}

/// Each malformed story: the code, and what the message says (with the
/// story's name in backticks).
#[test]
fn a_malformed_story_is_a_typed_error() {
    let cases = [
        (
            "unknown_key",
            "ipc::demo::story",
            "story `unknown_key` does not parse: line 17: unknown field `whithout`",
        ),
        (
            "approves_missing_step",
            "ipc::demo::story",
            "story `approves_missing_step`, step 2: approves step `pending`, which does not exist",
        ),
        (
            "approves_later_step",
            "ipc::demo::story",
            "story `approves_later_step`, step 1: approves step `later`, which comes after it",
        ),
        (
            "refused_registry_change",
            "ipc::demo::play",
            "story `refused_registry_change`, step 1: the registry change is refused",
        ),
    ];
    for (name, code, message) in cases {
        let text = fixture(name);
        let err: StoryError = match run_story(name, &text) {
            Ok(_) => panic!("{name}: played"),
            Err(e) => e,
        };
        assert_eq!(
            err.code().map(|c| c.to_string()).as_deref(),
            Some(code),
            "{name}: {err}"
        );
        let shown = err.to_string();
        assert!(shown.starts_with(message), "{name}: {shown}");
        // the checks come before anything is played
        if code == "ipc::demo::story" {
            assert!(Story::parse(name, &text).is_err(), "{name}");
        } else {
            assert!(Story::parse(name, &text).is_ok(), "{name}");
        }
    }
}

/// Every key of a story is read or refused: each known key of the bank
/// story misspelt is a parse error, not a story that plays differently.
#[test]
fn a_misspelt_key_anywhere_is_refused() {
    let (_, text) = STORIES[0];
    for key in [
        "intro =",
        "name =",
        "pack =",
        "scopes =",
        "claims =",
        "budget =",
        "what =",
        "without =",
        "mandate =",
        "proposal =",
        "expect =",
        "registry =",
        "approvals =",
    ] {
        let bad = text.replacen(key, &format!("x{key}"), 1);
        assert_ne!(bad, text, "{key}");
        match Story::parse("bank", &bad) {
            Err(StoryError::Parse { story, .. }) => assert_eq!(story, "bank"),
            other => panic!("{key}: {:?}", other.map(|_| ())),
        }
    }
}

/// An expected decision or stage spelt otherwise than a decision spells
/// it is a parse error naming the line, not a story that fails only when
/// played.
#[test]
fn a_misspelt_expectation_is_refused() {
    let (_, text) = STORIES[0];
    for (from, to) in [
        ("stage = \"provenance\"", "stage = \"provenence\""),
        ("decision = \"DENY\"", "decision = \"deny\""),
    ] {
        let bad = text.replacen(from, to, 1);
        assert_ne!(bad, text, "{from}");
        match Story::parse("bank", &bad) {
            Err(StoryError::Parse { reason, .. }) => {
                assert!(reason.starts_with("line 25: unknown variant"), "{reason}")
            }
            other => panic!("{to}: {:?}", other.map(|_| ())),
        }
    }
}
