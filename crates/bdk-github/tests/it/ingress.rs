#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! What real deliveries mean: every example payload GitHub's own
//! `@octokit/webhooks-examples` carries, classified with the channel's
//! default settings and with every event turned on.

use std::path::Path;

use bdk_core::project::{GithubChannel, GithubTrigger};
use bdk_github::ingress::{Classified, Delivery, classify};
use serde_json::Value;

fn all_examples() -> Vec<(String, Value)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../target/github-fixtures/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; `.ci/test-deps` installs GitHub's webhook examples",
            path.display()
        )
    });
    let all: Vec<Value> = serde_json::from_str(&text).unwrap();
    all.iter()
        .flat_map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            e["examples"]
                .as_array()
                .unwrap()
                .iter()
                .map(move |p| (name.clone(), p.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

fn settings() -> GithubChannel {
    let mut s = GithubChannel::default();
    s.bot = Some("pr-reviewer-bot".into());
    s
}

fn run(s: &GithubChannel, event: &str, payload: &Value) -> Classified {
    classify(
        s,
        s.bot.as_deref(),
        &Delivery {
            event,
            id: "d-1",
            payload,
            origin: Some("https://bots.example.com"),
        },
    )
    .unwrap_or_else(|e| panic!("{event} {}: {e}", payload["action"]))
}

#[test]
fn the_default_events_wake_and_the_rest_are_acknowledged() {
    let s = settings();
    let mut woke = Vec::new();
    for (event, payload) in all_examples() {
        let action = payload["action"].as_str().unwrap_or("").to_owned();
        match run(&s, &event, &payload) {
            Classified::Pong { zen, .. } => {
                assert_eq!(event, "ping");
                assert!(zen.is_some());
            }
            Classified::Ignored(reason) => assert!(!reason.is_empty()),
            Classified::Wake(w) => {
                assert!(!w.message.is_empty());
                assert_eq!(w.delivery, "d-1");
                assert_eq!(w.thread.origin.as_deref(), Some("https://bots.example.com"));
                woke.push((event, action, w));
            }
        }
    }
    let kinds: std::collections::BTreeSet<(String, String)> = woke
        .iter()
        .map(|(e, a, _)| (e.clone(), a.clone()))
        .collect();
    let expected: std::collections::BTreeSet<(String, String)> = [
        ("issues", "opened"),
        ("pull_request", "opened"),
        ("pull_request", "ready_for_review"),
        ("pull_request", "reopened"),
        ("pull_request", "synchronize"),
    ]
    .iter()
    .map(|(e, a)| ((*e).to_owned(), (*a).to_owned()))
    .collect();
    // No example comment mentions the bot, so no comment wakes it.
    assert_eq!(kinds, expected);
    let (_, _, opened) = woke
        .iter()
        .find(|(e, a, _)| e == "pull_request" && a == "opened")
        .unwrap();
    assert_eq!(opened.key, "Codertocat/Hello-World#2");
    assert!(opened.thread.pull);
    assert_eq!(
        opened.thread.head_sha.as_deref(),
        Some("ec26c3e57ca3a959ca5aad62de7213c562f8c821")
    );
    assert!(
        opened.message.starts_with(
            "Codertocat opened pull request Codertocat/Hello-World#2: Update the README with new information."
        ),
        "{}",
        opened.message
    );
    assert!(
        opened
            .message
            .contains("https://github.com/Codertocat/Hello-World/pull/2")
    );
    let (_, _, issue) = woke.iter().find(|(e, _, _)| e == "issues").unwrap();
    assert_eq!(issue.key, "Codertocat/Hello-World#1");
    assert!(!issue.thread.pull);
    assert_eq!(issue.thread.head_sha, None);
}

#[test]
fn every_example_renders_when_every_event_is_on() {
    let mut s = settings();
    s.triggers = bdk_core::project::github::GITHUB_EVENTS
        .iter()
        .map(|e| {
            let mut t = GithubTrigger::new(e, &[], false);
            t.mention = false;
            t
        })
        .collect();
    let mut rendered = 0;
    for (event, payload) in all_examples() {
        if let Classified::Wake(w) = run(&s, &event, &payload) {
            assert!(
                w.key
                    .starts_with(payload["repository"]["full_name"].as_str().unwrap())
            );
            assert!(!w.message.contains("{{"), "{}", w.message);
            rendered += 1;
        }
    }
    // pull_request, issues, issue_comment, both review events: dozens.
    assert!(rendered > 60, "{rendered}");
}

#[test]
fn mentions_bots_and_repositories() {
    let s = settings();
    let mut comment = all_examples()
        .into_iter()
        .find(|(e, p)| e == "issue_comment" && p["action"] == "created")
        .unwrap()
        .1;
    comment["comment"]["body"] = "Hey @PR-Reviewer-Bot, is this right?".into();
    let Classified::Wake(w) = run(&s, "issue_comment", &comment) else {
        panic!("a mention wakes the agent");
    };
    assert_eq!(w.key, "Codertocat/Hello-World#1");
    assert!(
        w.message
            .contains("commented on issue Codertocat/Hello-World#1"),
        "{}",
        w.message
    );
    assert!(w.message.contains("is this right?"));

    let mut own = comment.clone();
    own["sender"]["login"] = "pr-reviewer-bot".into();
    assert!(
        matches!(run(&s, "issue_comment", &own), Classified::Ignored(r) if r.contains("bot itself"))
    );
    let mut other_bot = comment.clone();
    other_bot["sender"]["type"] = "Bot".into();
    other_bot["sender"]["login"] = "dependabot[bot]".into();
    assert!(
        matches!(run(&s, "issue_comment", &other_bot), Classified::Ignored(r) if r.contains("other bots"))
    );
    let mut marked = comment.clone();
    marked["comment"]["body"] = "@pr-reviewer-bot x\n<!-- bdk:github reply turn_1 -->".into();
    assert!(
        matches!(run(&s, "issue_comment", &marked), Classified::Ignored(r) if r.contains("this pack"))
    );

    let mut fenced = settings();
    fenced.repositories = vec!["acme/*".into()];
    assert!(
        matches!(run(&fenced, "issue_comment", &comment), Classified::Ignored(r) if r.contains("not served"))
    );

    // A custom template that prints a field the payload lacks is an error,
    // not an empty message.
    let mut strict = settings();
    let mut t = GithubTrigger::new("issue_comment", &[], false);
    t.message = Some("{{ payload.nope.deeper }}".into());
    strict.triggers = vec![t];
    let err = classify(
        &strict,
        Some("pr-reviewer-bot"),
        &Delivery {
            event: "issue_comment",
            id: "d",
            payload: &comment,
            origin: None,
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("template"), "{err}");
    // A payload without its repository is refused, not guessed.
    let bare = serde_json::json!({"action": "opened", "pull_request": {"number": 1}});
    assert!(
        classify(
            &s,
            None,
            &Delivery {
                event: "pull_request",
                id: "d",
                payload: &bare,
                origin: None
            }
        )
        .is_err()
    );
}
