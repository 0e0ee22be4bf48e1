#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! App layout: two agents under slugs with host routes at the root, one
//! agent in single mode, discovery routes, logs and docs.

use crate::common;

use bdk_core::project::info::{add_tools, surface};
use bdk_core::{Diagnostic, Severity};
use bdk_http::{Config, LogBuffer, check_slug};
use common::*;
use serde_json::json;

#[tokio::test]
async fn two_agents_under_slugs_with_host_routes() {
    let alpha = agent("alpha").await;
    let beta = agent("beta").await;
    let base = serve(
        vec![alpha.mount(Some("alpha")), beta.mount(Some("beta"))],
        Config::default(),
    )
    .await;
    let http = client();

    // Host routes: the HTML index, the JSON index and health need no auth.
    let html = get(&http, format!("{base}/")).await;
    assert_eq!(html.status().as_u16(), 200);
    assert!(
        html.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let html = html.text().await.unwrap();
    assert!(
        html.contains("/alpha/v1/info") && html.contains("/beta/v1/info"),
        "{html}"
    );
    let agents = expect_ok(
        http.get(format!("{base}/v1/agents"))
            .header("x-forwarded-for", "203.0.113.9")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let slugs: Vec<&str> = agents["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["slug"].as_str().unwrap())
        .collect();
    assert_eq!(slugs, ["alpha", "beta"]);
    assert_eq!(agents["agents"][0]["name"], "alpha");
    assert_eq!(agents["agents"][0]["basePath"], "/alpha");
    expect_ok(get(&http, format!("{base}/v1/health")).await).await;

    // Each agent answers under its own prefix, with its own sessions.
    let meta = expect_ok(get(&http, format!("{base}/beta/v1/meta")).await).await;
    assert_eq!(meta["agent"], "beta");
    assert_eq!(meta["basePath"], "/beta");
    assert_eq!(meta["dev"], false);
    assert!(meta["version"].is_string());
    expect_ok(get(&http, format!("{base}/alpha/v1/health")).await).await;

    let started = start(&http, &format!("{base}/alpha"), json!({"message": "hi"})).await;
    let id = started["sessionId"].as_str().unwrap();
    assert_eq!(
        started["traceUrl"],
        format!("{base}/alpha/v1/session/{id}/events")
    );
    let all = settle(&http, &format!("{base}/alpha"), id, 1).await;
    assert!(all.iter().any(|e| e["type"] == "turn.completed"));
    assert_eq!(all[0]["data"]["agent"], "alpha");
    expect_error(
        get(&http, format!("{base}/beta/v1/session/{id}/events")).await,
        404,
        "session_not_found",
    )
    .await;

    // No agent routes at the root, and unknown slugs are unknown routes.
    for path in ["/v1/session", "/gamma/v1/health", "/alpha", "/alpha/v1"] {
        let resp = get(&http, format!("{base}{path}")).await;
        expect_error(resp, 404, "not_found").await;
    }
    expect_error(
        post(&http, format!("{base}/v1/session"), &json!({})).await,
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn unservable_mounts_are_skipped() {
    let a = agent("a").await;
    let b = agent("b").await;
    let c = agent("c").await;
    let base = serve(
        vec![
            a.mount(Some("same")),
            b.mount(Some("same")),
            c.mount(Some("v1")),
            a.mount(None),
        ],
        Config::default(),
    )
    .await;
    let http = client();
    let agents = expect_ok(get(&http, format!("{base}/v1/agents")).await).await;
    assert_eq!(agents["agents"].as_array().unwrap().len(), 1);
    assert_eq!(
        agents["agents"][0]["name"], "a",
        "the first of a repeated slug wins"
    );
    for (slug, ok) in [
        ("a", true),
        ("my-agent_2", true),
        ("-a", false),
        ("docs", false),
        ("playground", false),
        ("a.b", false),
        ("", false),
    ] {
        assert_eq!(check_slug(slug).is_ok(), ok, "{slug:?}");
    }
}

#[tokio::test]
async fn single_mode_discovery_logs_and_playground_urls() {
    let logs = LogBuffer::new(100);
    let config = Config {
        playground: true,
        logs: logs.clone(),
        ..Config::default()
    };
    let a = agent("solo").await;
    let warning = Diagnostic {
        severity: Severity::Warning,
        file: "agent/tools/stray.txt".into(),
        message: "stray file".into(),
        fix: "remove it".into(),
    };
    let mut mount = a.mount(None);
    mount.diagnostics = vec![warning.clone()];
    let base = serve(vec![mount], config).await;
    let http = client();

    let meta = expect_ok(get(&http, format!("{base}/v1/meta")).await).await;
    assert_eq!(meta["basePath"], "");
    assert_eq!(meta["agent"], "solo");
    assert_eq!(meta["playground"], true);

    // /v1/info is exactly `bdk info --json`.
    let info: serde_json::Value = get(&http, format!("{base}/v1/info"))
        .await
        .json()
        .await
        .unwrap();
    // ...with the host's own tools (native ones here) beside the manifests.
    let mut expected = surface(&a.host.project(), &[warning]);
    add_tools(&mut expected, &a.host.project(), &a.host.tool_sources());
    assert_eq!(info, expected);
    assert!(
        info["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["source"] == "manifest" || t["source"] == "native"),
        "{info}"
    );
    assert_eq!(info["diagnostics"][0]["message"], "stray file");

    let started = start(&http, &base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap();
    assert_eq!(
        started["playgroundUrl"],
        format!("{base}/playground?sessionId={id}")
    );
    assert_eq!(
        started["traceUrl"],
        format!("{base}/v1/session/{id}/events")
    );
    let dump =
        expect_ok(get(&http, format!("{base}/v1/session/{id}/events?format=json")).await).await;
    assert_eq!(dump["playgroundUrl"], started["playgroundUrl"]);

    // Logs page with a cursor.
    for i in 1..=3 {
        logs.push("info", "bdk::test", format!("line {i}"));
    }
    let page = expect_ok(get(&http, format!("{base}/v1/logs?after=0&limit=2")).await).await;
    assert_eq!(page["next"], 2);
    assert_eq!(page["lines"][0]["message"], "line 1");
    assert_eq!(page["lines"][0]["level"], "info");
    assert_eq!(page["lines"][0]["target"], "bdk::test");
    assert!(page["lines"][0]["at"].is_string());
    let rest = expect_ok(get(&http, format!("{base}/v1/logs?after=2")).await).await;
    assert_eq!(rest["lines"].as_array().unwrap().len(), 1);
    assert_eq!(rest["lines"][0]["cursor"], 3);
    assert_eq!(rest["next"], 3);
}

#[tokio::test]
async fn docs_are_served_as_html_and_can_be_turned_off() {
    let s = single(Config::default()).await;
    let http = &s.http;
    // `/docs` redirects to `/docs/`; reqwest follows it.
    let index = get(http, format!("{}/docs", s.base)).await;
    assert_eq!(index.status().as_u16(), 200);
    assert_eq!(index.url().path(), "/docs/");
    let index = index.text().await.unwrap();
    assert!(index.contains("<h1 id="), "{index}");
    assert!(
        index.contains("href=\"/docs/project/README.md\""),
        "{index}"
    );
    for path in ["/docs/http-api.md", "/docs/http-api"] {
        let page = get(http, format!("{}{path}", s.base)).await;
        assert_eq!(page.status().as_u16(), 200, "{path}");
        assert!(
            page.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        );
        let text = page.text().await.unwrap();
        assert!(text.contains("<table>"), "tables render");
        assert!(text.contains("/v1/session"), "{path}");
    }
    for path in [
        "/docs/nope.md",
        "/docs/../Cargo.toml",
        "/docs/%2e%2e/Cargo.toml",
    ] {
        expect_error(
            get(http, format!("{}{path}", s.base)).await,
            404,
            "not_found",
        )
        .await;
    }

    let off = single(Config {
        docs: false,
        ..Config::default()
    })
    .await;
    expect_error(
        get(&off.http, format!("{}/docs/", off.base)).await,
        404,
        "not_found",
    )
    .await;
}

#[tokio::test]
async fn serve_admits_loopback_peers_and_stops_on_shutdown() {
    let a = agent("served").await;
    let config = Config::default();
    let shutdown = config.shutdown.clone();
    let app = bdk_http::app(vec![a.mount(None)], config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(bdk_http::serve(listener, app, shutdown.clone()));
    let http = client();

    // The default policy sees the loopback peer address through `serve`.
    let started = start(&http, &base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap();
    let mut lines = stream(&http, &base, id, 0).await;
    lines.until(is("session.waiting")).await;

    shutdown.cancel();
    assert!(lines.next().await.is_none(), "open streams end on shutdown");
    tokio::time::timeout(DEADLINE, server)
        .await
        .expect("serve returns after shutdown")
        .unwrap()
        .unwrap();
    assert!(http.get(format!("{base}/v1/health")).send().await.is_err());
}
