#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The eval routes over a real loopback socket: listing, a run to
//! completion with its failures and events, 404 for no match and unknown
//! runs, 409 while a run is active, cancel, the history cap, persisted runs
//! across a restart, and hostile input.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bdk_core::host::Host;
use bdk_http::{Auth, BearerToken, Config, Mount};
use bdk_store::FsStore;
use serde_json::{Value, json};

use common::{client, expect_error, expect_ok, get, post, serve};

const CONFIG: &str = "max_concurrency = 2\nmax_playground_runs = 2\n";

const CASES: &str = r#"
tags = ["quick"]

[[cases]]
name = "echo"
[[cases.steps]]
send = "hi there"
expect_ok = true
expect = [{ assert = "used_no_tools" }]
[[cases.expect]]
assert = "check"
value = "reply"
expect = { "$contains" = "echo: hi there" }

[[cases]]
name = "weather"
tags = ["quick", "tools"]
[[cases.steps]]
send = "weather in Oslo"
expect = [{ assert = "called_tool", name = "lookup", input = { city = "Oslo" } }]

[[cases]]
name = "broken"
tags = ["quick", "broken"]
[[cases.steps]]
send = "weather in Oslo"
expect = [{ assert = "called_tool", name = "lookup", input = { city = "Lima" } }]
"#;

const SLOW: &str = r#"
tags = ["slow"]
[[cases]]
name = "hold"
[[cases.steps]]
send = "be slow"
"#;

fn write_evals(root: &std::path::Path, config: &str) {
    std::fs::create_dir_all(root.join("evals/slow")).unwrap();
    std::fs::write(root.join("evals/evals.toml"), config).unwrap();
    std::fs::write(root.join("evals/quick.eval.toml"), CASES).unwrap();
    std::fs::write(root.join("evals/slow/hold.eval.toml"), SLOW).unwrap();
}

async fn start(http: &reqwest::Client, base: &str, body: Value) -> reqwest::Response {
    post(http, format!("{base}/v1/dev/evals/runs"), &body).await
}

/// Polls the run until it leaves `running` (a run's status is no session
/// event, so there is nothing to subscribe to).
async fn settle(http: &reqwest::Client, base: &str, id: &str) -> Value {
    bdk_testkit::poll::until_some("the run to finish", || async {
        let v = expect_ok(get(http, format!("{base}/v1/dev/evals/runs/{id}")).await).await;
        (v["run"]["status"] != "running").then(|| v["run"].clone())
    })
    .await
}

async fn accepted(resp: reqwest::Response) -> Value {
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["ok"], true);
    assert_eq!(body["run"]["status"], "running");
    assert_eq!(body["run"]["runId"], body["runId"]);
    body
}

#[tokio::test]
async fn list_run_and_read_failures_with_their_events() {
    let agent = common::agent("evals").await;
    write_evals(agent.dir.path(), CONFIG);
    let base = serve(vec![agent.mount(None)], Config::default()).await;
    let http = client();

    let listed = expect_ok(get(&http, format!("{base}/v1/dev/evals")).await).await;
    let ids: Vec<&str> = listed["evals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "quick/broken",
            "quick/echo",
            "quick/weather",
            "slow/hold/hold"
        ]
    );
    assert_eq!(listed["config"]["maxConcurrency"], 2);
    assert_eq!(listed["config"]["maxPlaygroundRuns"], 2);
    assert_eq!(listed["config"]["durableRuns"], false);
    assert_eq!(listed["evals"][1]["messages"], json!(["hi there"]));

    let started = accepted(start(&http, &base, json!({"tags": ["quick"]})).await).await;
    let id = started["runId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("evr_"));
    assert_eq!(started["run"]["cases"].as_array().unwrap().len(), 3);
    let run = settle(&http, &base, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(
        run["summary"],
        json!({"total": 3, "passed": 2, "failed": 1, "cancelled": 0})
    );
    let broken = &run["cases"][0];
    assert_eq!(broken["id"], "quick/broken");
    assert_eq!(broken["status"], "failed");
    let failure = &broken["iterations"][0]["failures"][0];
    assert_eq!(failure["scope"], "turn 1");
    assert_eq!(failure["event"]["type"], "actions.requested");
    assert!(failure["event"]["index"].as_u64().is_some());
    assert!(
        failure["message"].as_str().unwrap().contains("Lima"),
        "{failure}"
    );

    // The runs list, newest first, with no active run.
    let runs = expect_ok(get(&http, format!("{base}/v1/dev/evals/runs")).await).await;
    assert_eq!(runs["runs"][0]["runId"], json!(id));
    assert!(runs.get("activeRunId").is_none());

    // Eval traffic is marked and owned by the caller.
    let sessions = agent.host.list_sessions(None).await.unwrap();
    assert_eq!(sessions.len(), 3);
    assert!(
        sessions
            .iter()
            .all(|s| s.purpose.as_deref() == Some("eval"))
    );
    assert!(
        sessions
            .iter()
            .all(|s| s.principal.as_deref() == Some("local"))
    );

    // OR within tags, AND with ids.
    let r = accepted(
        start(
            &http,
            &base,
            json!({"tags": ["tools", "broken"], "filterIds": ["quick/weather", "slow"]}),
        )
        .await,
    )
    .await;
    let run = settle(&http, &base, r["runId"].as_str().unwrap()).await;
    let ids: Vec<&str> = run["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["quick/weather"]);

    // The history keeps max_playground_runs (2).
    let r = accepted(start(&http, &base, json!({"filterIds": ["quick/echo"]})).await).await;
    settle(&http, &base, r["runId"].as_str().unwrap()).await;
    let runs = expect_ok(get(&http, format!("{base}/v1/dev/evals/runs")).await).await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2);
    expect_error(
        get(&http, format!("{base}/v1/dev/evals/runs/{id}")).await,
        404,
        "eval_run_not_found",
    )
    .await;
}

#[tokio::test]
async fn a_second_run_conflicts_and_cancel_stops_the_active_one() {
    let agent = common::agent("evals").await;
    write_evals(agent.dir.path(), CONFIG);
    let base = serve(vec![agent.mount(None)], Config::default()).await;
    let http = client();

    let started = accepted(start(&http, &base, json!({"tags": ["slow"]})).await).await;
    let id = started["runId"].as_str().unwrap().to_owned();
    let busy = expect_error(start(&http, &base, json!({})).await, 409, "eval_run_active").await;
    assert_eq!(busy["activeRunId"], json!(id));
    let runs = expect_ok(get(&http, format!("{base}/v1/dev/evals/runs")).await).await;
    assert_eq!(runs["activeRunId"], json!(id));

    // Wait until the held turn is really running, then cancel. No event
    // announces a new session, so its creation is polled; its turn is
    // awaited on its events.
    let session = bdk_testkit::poll::until_some("the eval session", || async {
        agent
            .host
            .list_sessions(None)
            .await
            .unwrap()
            .into_iter()
            .next()
    })
    .await;
    bdk_testkit::wait::wait_for_kind(agent.host.store().as_ref(), &session.id, "step.started")
        .await;
    assert!(
        agent.host.is_busy(&session.id),
        "the eval turn never started"
    );
    let cancelled = expect_ok(
        http.post(format!("{base}/v1/dev/evals/runs/{id}/cancel"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(cancelled["run"]["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["run"]["cases"][0]["status"], "cancelled");
    assert_eq!(
        cancelled["run"]["cases"][0]["iterations"][0]["status"],
        "cancelled"
    );
    // The held turn was stopped, not left running for 30 s.
    let session = &agent.host.list_sessions(None).await.unwrap()[0];
    tokio::time::timeout(Duration::from_secs(30), agent.host.wait_idle(&session.id))
        .await
        .expect("the eval turn was not stopped");

    expect_error(
        http.post(format!("{base}/v1/dev/evals/runs/{id}/cancel"))
            .send()
            .await
            .unwrap(),
        409,
        "eval_run_finished",
    )
    .await;
    expect_error(
        http.post(format!("{base}/v1/dev/evals/runs/evr_nope/cancel"))
            .send()
            .await
            .unwrap(),
        404,
        "eval_run_not_found",
    )
    .await;
    // The slot is free again.
    let again = accepted(start(&http, &base, json!({"filterIds": ["quick/echo"]})).await).await;
    let run = settle(&http, &base, again["runId"].as_str().unwrap()).await;
    assert_eq!(run["status"], "completed");
}

#[tokio::test]
async fn no_match_no_evals_and_invalid_files() {
    let agent = common::agent("evals").await;
    let base = serve(vec![agent.mount(None)], Config::default()).await;
    let http = client();

    // No evals/ folder: an empty list, and nothing to run.
    let listed = expect_ok(get(&http, format!("{base}/v1/dev/evals")).await).await;
    assert_eq!(listed["evals"], json!([]));
    assert_eq!(listed["config"]["maxPlaygroundRuns"], 20);
    expect_error(
        start(&http, &base, json!({})).await,
        404,
        "no_matching_evals",
    )
    .await;

    write_evals(agent.dir.path(), CONFIG);
    expect_error(
        start(&http, &base, json!({"filterIds": ["nope"]})).await,
        404,
        "no_matching_evals",
    )
    .await;
    expect_error(
        start(
            &http,
            &base,
            json!({"tags": ["quick"], "filterIds": ["slow"]}),
        )
        .await,
        404,
        "no_matching_evals",
    )
    .await;
    expect_error(
        get(&http, format!("{base}/v1/dev/evals/runs/evr_missing")).await,
        404,
        "eval_run_not_found",
    )
    .await;

    // A broken file: the list carries diagnostics, a run is refused.
    std::fs::write(
        agent.dir.path().join("evals/bad.eval.toml"),
        "[[cases]]\nname = 3\n",
    )
    .unwrap();
    let listed = expect_ok(get(&http, format!("{base}/v1/dev/evals")).await).await;
    assert_eq!(listed["evals"], json!([]));
    assert!(
        listed["diagnostics"][0]["message"]
            .as_str()
            .unwrap()
            .contains("invalid TOML")
    );
    let bad = expect_error(start(&http, &base, json!({})).await, 400, "invalid_evals").await;
    assert_eq!(bad["diagnostics"][0]["file"], "evals/bad.eval.toml");
}

#[tokio::test]
async fn hostile_input_gets_its_documented_codes() {
    let agent = common::agent("evals").await;
    write_evals(agent.dir.path(), CONFIG);
    let base = serve(vec![agent.mount(None)], Config::default()).await;
    let http = client();
    let url = format!("{base}/v1/dev/evals/runs");

    let raw = |body: &'static str| {
        http.post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    expect_error(raw("{not json").await.unwrap(), 400, "invalid_json").await;
    expect_error(
        raw(r#"{"filterIds": "quick"}"#).await.unwrap(),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        raw(r#"{"timeoutMs": -5}"#).await.unwrap(),
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        start(&http, &base, json!({"timeoutMs": 0})).await,
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        start(&http, &base, json!({"timeoutMs": 99_999_999u64})).await,
        400,
        "invalid_request",
    )
    .await;
    let many: Vec<String> = (0..600).map(|i| format!("c{i}")).collect();
    expect_error(
        start(&http, &base, json!({"filterIds": many})).await,
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        start(&http, &base, json!({"tags": [""]})).await,
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        start(&http, &base, json!({"tags": ["a\u{0}b"]})).await,
        400,
        "invalid_request",
    )
    .await;
    expect_error(
        start(&http, &base, json!({"filterIds": ["x".repeat(400)]})).await,
        400,
        "invalid_request",
    )
    .await;
    let huge = format!("{{\"tags\": [\"{}\"]}}", "a".repeat(2 * 1024 * 1024));
    expect_error(
        http.post(&url)
            .header("content-type", "application/json")
            .body(huge)
            .send()
            .await
            .unwrap(),
        413,
        "payload_too_large",
    )
    .await;
    expect_error(
        http.post(&url)
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap(),
        415,
        "unsupported_media_type",
    )
    .await;
    for id in ["..%2F..%2Fetc%2Fpasswd", "%00", "evr_%E2%98%83"] {
        let r = get(&http, format!("{url}/{id}")).await;
        assert_eq!(r.status().as_u16(), 404, "{id}");
    }
    expect_error(
        http.delete(&url).send().await.unwrap(),
        405,
        "method_not_allowed",
    )
    .await;
    // Nothing above started a run.
    let runs = expect_ok(get(&http, &url).await).await;
    assert_eq!(runs["runs"], json!([]));
}

#[tokio::test]
async fn the_routes_sit_behind_auth() {
    let agent = common::agent("evals").await;
    write_evals(agent.dir.path(), CONFIG);
    let config = Config {
        auth: Auth::Bearer(vec![BearerToken {
            principal: "ci".into(),
            token: "s3cret".into(),
        }]),
        ..Config::default()
    };
    let base = serve(vec![agent.mount(None)], config).await;
    let http = client();
    expect_error(
        get(&http, format!("{base}/v1/dev/evals")).await,
        401,
        "unauthorized",
    )
    .await;
    expect_error(start(&http, &base, json!({})).await, 401, "unauthorized").await;
    expect_error(
        http.get(format!("{base}/v1/dev/evals"))
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap(),
        401,
        "unauthorized",
    )
    .await;
    let r = http
        .post(format!("{base}/v1/dev/evals/runs"))
        .bearer_auth("s3cret")
        .json(&json!({"filterIds": ["quick/echo"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let sessions = bdk_testkit::poll::until_some("the eval session", || async {
        let s = agent.host.list_sessions(None).await.unwrap();
        (!s.is_empty()).then_some(s)
    })
    .await;
    assert_eq!(sessions[0].principal.as_deref(), Some("ci"));
}

#[tokio::test]
async fn persisted_runs_survive_a_restart() {
    let agent = common::agent("evals").await;
    write_evals(
        agent.dir.path(),
        "max_concurrency = 1\npersist_runs = true\n",
    );
    let base = serve(vec![agent.mount(None)], Config::default()).await;
    let http = client();
    let listed = expect_ok(get(&http, format!("{base}/v1/dev/evals")).await).await;
    assert_eq!(listed["config"]["durableRuns"], true);
    let r = accepted(start(&http, &base, json!({"filterIds": ["quick/echo"]})).await).await;
    let id = r["runId"].as_str().unwrap().to_owned();
    let before = settle(&http, &base, &id).await;

    // A second host over the same state root, as after a restart.
    let state = agent.dir.path().join("state");
    let store = Arc::new(FsStore::open(&state).unwrap());
    let host = Host::builder((*agent.host.project()).clone(), store)
        .build()
        .await
        .unwrap();
    let base2 = serve(
        vec![Mount {
            slug: None,
            host,
            diagnostics: Vec::new(),
            reload: None,
        }],
        Config::default(),
    )
    .await;
    let after = expect_ok(get(&http, format!("{base2}/v1/dev/evals/runs/{id}")).await).await;
    assert_eq!(after["run"], before);
}
