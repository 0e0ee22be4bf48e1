#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The pack inside a real host: the `github.*` host-endpoint operations
//! reached by a Python tool over the socket named in its environment (the
//! way subprocess tools and handlers call them), against the fake GitHub
//! API; and the durable claim of a delivery id, taken by `accept` and given
//! back by `release` when the session could not be woken.

use std::path::PathBuf;
use std::sync::Arc;

use bdk_core::host::Host;
use bdk_github::{Delivery, Github, GithubOptions, Ingress};
use bdk_testkit::endpoint::{ok, refused, run_client};
use bdk_testkit::github::FakeGithub;
use serde_json::{Value, json};
use tempfile::TempDir;

const REPO: &str = "Codertocat/Hello-World";

/// `pull_request.opened` from GitHub's own examples
/// (`@octokit/webhooks-examples`, installed by `.ci/test-deps`).
fn opened() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/github-fixtures/node_modules/@octokit/webhooks-examples/api.github.com/index.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the GitHub webhook examples are missing at {} ({e}); run .ci/test-deps to install them",
            path.display()
        )
    });
    let groups: Vec<Value> = serde_json::from_str(&text).unwrap();
    groups
        .into_iter()
        .find(|g| g["name"] == "pull_request")
        .and_then(|g| {
            g["examples"]
                .as_array()?
                .iter()
                .find(|e| e["action"] == "opened")
                .cloned()
        })
        .expect("a pull_request.opened example")
}

struct Setup {
    _dir: TempDir,
    host: Host,
    github: Github,
    fake: FakeGithub,
}

/// A project with a GitHub channel serving [`REPO`] through the fake API,
/// the client tool, and a host over both. The token reaches the pack
/// through injected secrets, not the process environment.
async fn setup() -> Setup {
    let fake = FakeGithub::start().await;
    let example = opened();
    fake.add_pull_from_payload(&example);
    fake.set_pull_files(
        REPO,
        2,
        vec![(
            "README.md".to_owned(),
            "modified".to_owned(),
            "@@ -1 +1 @@\n-# Hello-World\n+# Hello World".to_owned(),
        )],
    );
    fake.add_file(REPO, "main", "docs/notes.txt", b"remember the changelog\n");
    fake.add_repo("Codertocat/Other");
    let channel = format!(
        "kind = \"github\"\n\n[github]\nbot = \"helper-bot\"\napi_url = \"{}\"\nrepositories = [\"{REPO}\"]\n",
        fake.url()
    );
    let found = bdk_testkit::endpoint::client_agent()
        .channel("github", &channel)
        .discover();
    let (dir, project) = (found.dir, found.project);
    let secrets: bdk_github::Secrets =
        Arc::new(|name| (name == "GITHUB_TOKEN").then(|| FakeGithub::TOKEN.to_owned()));
    let github = Github::from_project(&project, GithubOptions::default().with_secrets(secrets))
        .expect("the project has a GitHub channel");
    let host = bdk_testkit::host::host_over(project, &dir.path().join("state"), |b| {
        b.extension(Arc::new(github.clone()))
    })
    .await;
    Setup {
        _dir: dir,
        host,
        github,
        fake,
    }
}

#[tokio::test]
async fn the_github_operations_read_and_write_with_the_channels_token() {
    let s = setup().await;
    let a = run_client(
        &s.host,
        false,
        json!([
            {"op": "github.pr", "args": {"repo": REPO, "number": 2}},
            {"op": "github.file", "args": {"repo": REPO, "path": "docs/notes.txt", "ref": "main"}},
            {"op": "github.comment", "args": {"repo": REPO, "number": 2, "body": "Looks good."}},
            {"op": "github.review", "args": {
                "repo": REPO, "number": 2, "body": "One nit.", "event": "COMMENT",
                "comments": [{"path": "README.md", "line": 1, "body": "Keep the hyphen?"}]
            }},
            {"op": "github.request", "args": {"path": format!("/repos/{REPO}/pulls/2/files?per_page=1")}},
        ]),
    )
    .await;

    let pr = ok(&a[0]);
    assert_eq!(pr["pull"]["number"], 2);
    assert_eq!(
        pr["pull"]["title"],
        "Update the README with new information."
    );
    assert_eq!(pr["files"][0]["filename"], "README.md");
    assert!(
        pr["diff"]
            .as_str()
            .unwrap()
            .contains("diff --git a/README.md b/README.md"),
        "{pr}"
    );

    let file = ok(&a[1]);
    assert_eq!(file["encoding"], "utf-8");
    assert_eq!(file["content"], "remember the changelog\n");

    let comment = ok(&a[2]);
    assert!(comment["id"].is_u64(), "{comment}");
    let posted = s.fake.comments(REPO, 2);
    assert_eq!(posted.len(), 1, "{posted:#?}");
    assert!(
        posted[0]["body"]
            .as_str()
            .unwrap()
            .starts_with("Looks good.")
    );

    let review = ok(&a[3]);
    assert_eq!(review["state"], "COMMENTED", "{review}");
    let reviews = s.fake.reviews(REPO, 2);
    assert_eq!(reviews.len(), 1, "{reviews:#?}");

    let raw = ok(&a[4]);
    assert_eq!(raw["status"], 200, "{raw}");
    assert_eq!(raw["body"][0]["filename"], "README.md");

    // Every call carried the channel's token and stayed on the served
    // repository.
    let requests = s.fake.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        assert_eq!(
            r.header("authorization"),
            Some(format!("Bearer {}", FakeGithub::TOKEN).as_str()),
            "{}",
            r.summary()
        );
        assert!(
            r.path.starts_with(&format!("/repos/{REPO}/")),
            "{}",
            r.summary()
        );
    }
}

#[tokio::test]
async fn the_github_operations_refuse_what_the_channel_does_not_grant() {
    let s = setup().await;
    let a = run_client(
        &s.host,
        false,
        json!([
            // A repository the channel does not serve, by each way in.
            {"op": "github.pr", "args": {"repo": "Codertocat/Other", "number": 1}},
            {"op": "github.request", "args": {"path": "/repos/Codertocat/Other/issues"}},
            // Paths that leave the repository, plainly or encoded.
            {"op": "github.request", "args": {"path": "/user"}},
            {"op": "github.request", "args": {"path": format!("/repos/{REPO}/../../user")}},
            {"op": "github.request", "args": {"path": format!("/repos/{REPO}/%2e%2e/%2E%2E/%2e%2e/user")}},
            {"op": "github.request", "args": {"path": format!("/repos/{REPO}/issues%2f..%2f..%2fOther")}},
            {"op": "github.request", "args": {"method": "TRACE", "path": format!("/repos/{REPO}/issues")}},
            // Bad arguments.
            {"op": "github.file", "args": {"repo": REPO, "path": "../../etc/passwd"}},
            {"op": "github.comment", "args": {"repo": REPO, "number": 2, "body": "  "}},
            {"op": "github.pr", "args": {"repo": REPO, "number": 2, "sneaky": true}},
            {"op": "github.pr", "args": {"number": 2}},
        ]),
    )
    .await;
    let m = refused(&a[0], "invalid_args");
    assert!(m.contains("not served by channel `github`"), "{m}");
    let m = refused(&a[1], "invalid_args");
    assert!(m.contains("not served"), "{m}");
    for (i, answer) in a.iter().enumerate().take(7).skip(2) {
        let m = refused(answer, "invalid_args");
        assert!(
            m.contains("/repos/<owner>/<name>") || m.contains("GET, POST"),
            "{i}: {m}"
        );
    }
    for answer in &a[7..] {
        refused(answer, "invalid_args");
    }
    // Nothing reached the API.
    assert!(
        s.fake.requests().is_empty(),
        "{:#?}",
        s.fake
            .requests()
            .iter()
            .map(|r| r.summary())
            .collect::<Vec<_>>()
    );

    // A dry run reads but does not write.
    let a = run_client(
        &s.host,
        true,
        json!([
            {"op": "github.comment", "args": {"repo": REPO, "number": 2, "body": "hi"}},
            {"op": "github.review", "args": {"repo": REPO, "number": 2, "body": "hi", "event": "APPROVE"}},
            {"op": "github.request", "args": {"method": "POST", "path": format!("/repos/{REPO}/issues/2/comments"), "body": {"body": "hi"}}},
            {"op": "github.request", "args": {"path": format!("/repos/{REPO}/pulls/2")}},
        ]),
    )
    .await;
    for answer in &a[..3] {
        refused(answer, "dry_run");
    }
    assert_eq!(ok(&a[3])["status"], 200);
    assert!(s.fake.comments(REPO, 2).is_empty());
    assert!(s.fake.reviews(REPO, 2).is_empty());

    // An API refusal is an answer with GitHub's status, not a dead call.
    let a = run_client(
        &s.host,
        false,
        json!([{"op": "github.request", "args": {"path": format!("/repos/{REPO}/pulls/99")}}]),
    )
    .await;
    let answer = ok(&a[0]);
    assert_eq!(answer["status"], 404, "{answer}");
    assert_eq!(answer["error"], "github_not_found", "{answer}");
}

#[tokio::test]
async fn a_delivery_id_is_claimed_once_and_a_released_claim_runs_again() {
    let s = setup().await;
    let payload = opened();
    let delivery = |id: &'static str| Delivery {
        event: "pull_request",
        id,
        payload: &payload,
        origin: None,
    };
    let first = s.github.accept("github", &delivery("d-1")).await.unwrap();
    assert!(matches!(first, Ingress::Wake(_)), "{first:?}");
    // The same id again, before any session: a duplicate.
    let again = s.github.accept("github", &delivery("d-1")).await.unwrap();
    assert!(matches!(again, Ingress::Duplicate { .. }), "{again:?}");
    // The waking failed: the claim is given back and the redelivery runs.
    s.github.release("github", "d-1").await;
    let redelivered = s.github.accept("github", &delivery("d-1")).await.unwrap();
    assert!(matches!(redelivered, Ingress::Wake(_)), "{redelivered:?}");
    // Another id is its own claim; an unknown channel is an error.
    let other = s.github.accept("github", &delivery("d-2")).await.unwrap();
    assert!(matches!(other, Ingress::Wake(_)), "{other:?}");
    assert!(s.github.accept("nope", &delivery("d-3")).await.is_err());
    // Releasing what was never claimed is harmless.
    s.github.release("github", "never-seen").await;
}

/// Issue 43, item 4: a tool listed and deleted the pack's dedupe records
/// through the endpoint, so a redelivery ran twice. The pack's namespaces
/// are the server's: every `kv.*` operation on them is refused, and a
/// claimed delivery stays claimed.
#[tokio::test]
async fn the_packs_namespaces_are_refused_to_tools() {
    let s = setup().await;
    let payload = opened();
    let delivery = Delivery {
        event: "pull_request",
        id: "d-kept",
        payload: &payload,
        origin: None,
    };
    let first = s.github.accept("github", &delivery).await.unwrap();
    assert!(matches!(first, Ingress::Wake(_)), "{first:?}");
    assert_eq!(
        bdk_github::NAMESPACES,
        ["github-deliveries", "github-threads", "github-progress"]
    );
    let requests: Vec<Value> = bdk_github::NAMESPACES
        .iter()
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .chain([
            json!({"op": "kv.delete", "args": {"namespace": "github-deliveries", "key": "github/d-kept"}}),
            json!({"op": "kv.put", "args": {"namespace": "pr-notes", "key": "k", "value": 1}}),
        ])
        .collect();
    let a = run_client(&s.host, false, json!(requests)).await;
    for (n, namespace) in bdk_github::NAMESPACES.iter().enumerate() {
        bdk_testkit::endpoint::assert_reserved(&a[n * 4..n * 4 + 4], namespace);
    }
    refused(&a[12], "reserved_namespace");
    ok(&a[13]);
    let again = s.github.accept("github", &delivery).await.unwrap();
    assert!(matches!(again, Ingress::Duplicate { .. }), "{again:?}");
}
