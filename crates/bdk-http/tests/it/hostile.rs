#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Hostile and malformed input: every request gets its documented JSON
//! error, none reaches the catch-panic layer (no 500s), and the auth chain
//! holds (loopback-only by default, bearer principals own their sessions).

use crate::common;

use bdk_http::{Auth, BearerToken, Config};
use common::*;
use serde_json::json;

#[tokio::test]
async fn malformed_bodies_get_their_codes() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let url = format!("{base}/v1/session");
    let raw = |ct: Option<&str>, body: &'static [u8]| {
        let mut req = http.post(&url).body(body);
        if let Some(ct) = ct {
            req = req.header("content-type", ct);
        }
        req
    };

    for body in [
        &b"{\"message\":"[..],
        b"not json",
        b"{\"message\": \"x\",}",
        b"\xff\xfe",
    ] {
        expect_error(
            raw(Some("application/json"), body).send().await.unwrap(),
            400,
            "invalid_json",
        )
        .await;
    }
    for body in [
        &br#"{"message": 5}"#[..],
        br#"[1,2]"#,
        br#""text""#,
        br#"{"dryRun": "yes"}"#,
        br#"{"workspaceFiles": ["a"]}"#,
    ] {
        expect_error(
            raw(Some("application/json"), body).send().await.unwrap(),
            400,
            "invalid_request",
        )
        .await;
    }
    for ct in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ] {
        expect_error(
            raw(Some(ct), br#"{"message":"x"}"#).send().await.unwrap(),
            415,
            "unsupported_media_type",
        )
        .await;
    }
    expect_error(
        raw(None, br#"{"message":"x"}"#).send().await.unwrap(),
        415,
        "unsupported_media_type",
    )
    .await;
    // `application/json; charset=utf-8` and `+json` types are JSON.
    expect_ok(
        raw(Some("application/json; charset=utf-8"), br#"{}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    expect_ok(
        raw(Some("application/vnd.api+json"), br#"{}"#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    // An empty body without a content type reads as `{}`.
    expect_ok(raw(None, b"").send().await.unwrap()).await;

    // 2 MiB against the 1 MiB default.
    let big = format!("{{\"message\":\"{}\"}}", "x".repeat(2 * 1024 * 1024));
    let resp = http
        .post(&url)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    expect_error(resp, 413, "payload_too_large").await;
    // The server is fine afterwards.
    expect_ok(get(http, format!("{base}/v1/health")).await).await;
}

#[tokio::test]
async fn unknown_routes_and_methods() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    for path in [
        "/",
        "/nope",
        "/v1/nope",
        "/v1/session/",
        "/v2/session",
        "/v1/agents",
    ] {
        expect_error(get(http, format!("{base}{path}")).await, 404, "not_found").await;
    }
    for (method, path) in [
        ("GET", "/v1/session"),
        ("PUT", "/v1/session/ses_x"),
        ("PUT", "/v1/sessions"),
        ("POST", "/v1/health"),
        ("POST", "/v1/info"),
        ("GET", "/v1/session/ses_x/stop"),
        ("DELETE", "/v1/tools/lookup"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        expect_error(
            http.request(m, format!("{base}{path}"))
                .send()
                .await
                .unwrap(),
            405,
            "method_not_allowed",
        )
        .await;
    }
}

#[tokio::test]
async fn hostile_paths_and_queries() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let id = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    for path in [
        "/v1/session/ses_%2e%2e%2f%2e%2e%2fetc/events",
        "/v1/session/ses_a%2fb/events",
        "/v1/session/%ff%fe/events",
        "/v1/session/ses_%00/events",
    ] {
        expect_error(
            get(http, format!("{base}{path}")).await,
            404,
            "invalid_session_id",
        )
        .await;
    }
    for query in ["after=-1", "after=x", "limit=0", "limit=5000", "limit=%ff"] {
        expect_error(
            get(http, format!("{base}/v1/logs?{query}")).await,
            400,
            "invalid_request",
        )
        .await;
    }
    // Workspace paths that try to leave the workspace, on start and follow-up.
    for bad in [
        "../x",
        "/etc/passwd",
        "a/../../x",
        "a\\..\\x",
        "C:/x",
        "a\u{0}b",
    ] {
        let files = json!({ bad: "x" });
        expect_error(
            post(
                http,
                format!("{base}/v1/session"),
                &json!({"message": "x", "workspaceFiles": files}),
            )
            .await,
            400,
            "invalid_request",
        )
        .await;
        expect_error(
            post(
                http,
                format!("{base}/v1/session/{id}"),
                &json!({"message": "x", "workspaceFiles": files}),
            )
            .await,
            400,
            "invalid_request",
        )
        .await;
    }
    let state = s.agent.dir.path().join("state");
    assert!(!state.join("sessions/x").exists());
    assert!(!state.join("x").exists());
    // The follow-ups were refused before anything reached the agent.
    assert!(
        events(http, base, &id)
            .await
            .iter()
            .all(|e| e["type"] != "message.received")
    );
}

#[tokio::test]
async fn local_dev_strict_refuses_proxied_and_rebound_requests() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    for (name, value) in [
        ("x-forwarded-for", "203.0.113.9"),
        ("forwarded", "for=203.0.113.9"),
        ("x-forwarded-host", "example.com"),
        ("x-forwarded-proto", "https"),
        ("x-real-ip", "203.0.113.9"),
    ] {
        expect_error(
            http.get(format!("{base}/v1/sessions"))
                .header(name, value)
                .send()
                .await
                .unwrap(),
            401,
            "unauthorized",
        )
        .await;
        expect_error(
            http.post(format!("{base}/v1/session"))
                .header(name, value)
                .json(&json!({"message": "x"}))
                .send()
                .await
                .unwrap(),
            401,
            "unauthorized",
        )
        .await;
    }
    // A page on another name rebound to 127.0.0.1 sends its own Host.
    expect_error(
        http.get(format!("{base}/v1/sessions"))
            .header("host", "evil.example:80")
            .send()
            .await
            .unwrap(),
        401,
        "unauthorized",
    )
    .await;
    // Health and meta run no auth.
    expect_ok(
        http.get(format!("{base}/v1/health"))
            .header("x-forwarded-for", "203.0.113.9")
            .send()
            .await
            .unwrap(),
    )
    .await;
    let meta = expect_ok(get(http, format!("{base}/v1/meta")).await).await;
    assert_eq!(meta["auth"], "localDevStrict");
    // `localhost` is loopback too.
    let port = base.rsplit(':').next().unwrap();
    expect_ok(
        http.get(format!("{base}/v1/sessions"))
            .header("host", format!("localhost:{port}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
}

fn two_principals() -> Config {
    Config {
        auth: Auth::Bearer(vec![
            BearerToken {
                principal: "alice".into(),
                token: "alice-secret-token".into(),
            },
            BearerToken {
                principal: "bob".into(),
                token: "bob-secret-token".into(),
            },
        ]),
        ..Config::default()
    }
}

#[tokio::test]
async fn bearer_tokens_are_principals_that_own_sessions() {
    let s = single(two_principals()).await;
    let (http, base) = (&s.http, s.base.as_str());

    for auth in [
        None,
        Some("Bearer wrong"),
        Some("Basic YWxpY2U6eA=="),
        Some("Bearer "),
        Some("Bearer alice-secret-toke"),
    ] {
        let mut req = http.get(format!("{base}/v1/sessions"));
        if let Some(a) = auth {
            req = req.header("authorization", a);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        expect_error(resp, 401, "unauthorized").await;
    }
    // Proxy headers are fine with bearer auth (deployments sit behind proxies).
    let started = expect_ok(
        http.post(format!("{base}/v1/session"))
            .bearer_auth("alice-secret-token")
            .header("x-forwarded-proto", "https")
            .header("x-forwarded-for", "203.0.113.9")
            .json(&json!({"message": "deploy now"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();
    assert!(
        started["traceUrl"]
            .as_str()
            .unwrap()
            .starts_with("https://"),
        "a proxy's scheme is honoured under bearer auth: {started}"
    );

    let bob = |req: reqwest::RequestBuilder| req.bearer_auth("bob-secret-token");
    // Bob cannot drive, read or approve Alice's session, even with her token.
    expect_error(
        bob(http.post(format!("{base}/v1/session/{id}")))
            .json(&json!({"message": "hijack", "continuationToken": token}))
            .send()
            .await
            .unwrap(),
        403,
        "forbidden",
    )
    .await;
    for suffix in ["stream", "events", "cost", "approvals"] {
        expect_error(
            bob(http.get(format!("{base}/v1/session/{id}/{suffix}")))
                .send()
                .await
                .unwrap(),
            403,
            "forbidden",
        )
        .await;
    }
    expect_error(
        bob(http.post(format!("{base}/v1/session/{id}/stop")))
            .send()
            .await
            .unwrap(),
        403,
        "forbidden",
    )
    .await;
    expect_error(
        bob(http.post(format!("{base}/v1/session/{id}/approvals/call_x")))
            .json(&json!({"decision": "approve"}))
            .send()
            .await
            .unwrap(),
        403,
        "forbidden",
    )
    .await;
    for binding in [
        json!({"sessionId": id}),
        json!({"continuationToken": token}),
    ] {
        let mut body = binding;
        body["input"] = json!({"city": "x"});
        expect_error(
            bob(http.post(format!("{base}/v1/tools/lookup")))
                .json(&body)
                .send()
                .await
                .unwrap(),
            403,
            "forbidden",
        )
        .await;
    }
    let bobs = expect_ok(
        bob(http.get(format!("{base}/v1/sessions")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(bobs["sessions"], json!([]));

    // Alice still can, and her session records her as the approver.
    let mut lines = Lines::new(
        http.get(format!("{base}/v1/session/{id}/stream"))
            .bearer_auth("alice-secret-token")
            .send()
            .await
            .unwrap(),
    );
    let parked = lines.until(is("action.approval_requested")).await;
    let call_id = parked.last().unwrap()["data"]["callId"]
        .as_str()
        .unwrap()
        .to_owned();
    expect_ok(
        http.post(format!("{base}/v1/session/{id}/approvals/{call_id}"))
            .bearer_auth("alice-secret-token")
            .json(&json!({"decision": "approve"}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let rest = lines.until(is("session.waiting")).await;
    let resolved = rest
        .iter()
        .find(|e| e["type"] == "action.approval_resolved")
        .unwrap();
    assert_eq!(resolved["data"]["by"], "alice");
    assert_eq!(
        expect_ok(
            http.get(format!("{base}/v1/sessions"))
                .bearer_auth("alice-secret-token")
                .send()
                .await
                .unwrap()
        )
        .await["sessions"][0]["principal"],
        "alice"
    );
}

#[tokio::test]
async fn anonymous_auth_admits_everyone_as_one_principal() {
    let s = single(Config {
        auth: Auth::Anonymous,
        ..Config::default()
    })
    .await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = expect_ok(
        http.post(format!("{base}/v1/session"))
            .header("x-forwarded-for", "203.0.113.9")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let list = expect_ok(get(http, format!("{base}/v1/sessions")).await).await;
    assert_eq!(list["sessions"][0]["sessionId"], started["sessionId"]);
    assert_eq!(list["sessions"][0]["principal"], "anonymous");
}

/// `pull_request.opened` from GitHub's own webhook examples
/// (`@octokit/webhooks-examples`, installed by `.ci/test-deps`).
fn pull_request_opened() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(
        "../../target/github-fixtures/node_modules/@octokit/webhooks-examples/api.github.com/index.json",
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "the GitHub webhook examples are missing at {} ({e}); run .ci/test-deps to install them",
            path.display()
        )
    });
    let groups: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    groups
        .iter()
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

/// Issue 43, item 6: `POST /v1/webhooks/github`, documented as local only,
/// checked the peer alone and accepted requests a proxy relayed or a page
/// rebound to 127.0.0.1 sent. It now applies the local-only rule of the
/// default policy with its status and code, whatever the server's policy,
/// and a signed delivery from a direct loopback client is still accepted.
#[tokio::test]
async fn the_github_fan_out_is_local_only_whatever_the_policy() {
    const SECRET: &str = "fan-out secret";
    const REPO: &str = "Codertocat/Hello-World";
    let opened = pull_request_opened();
    let body = serde_json::to_vec(&opened).unwrap();
    let signature = bdk_http::channels::sign(SECRET.as_bytes(), &body);
    for config in [Config::default(), two_principals()] {
        let fake = bdk_testkit::github::FakeGithub::start().await;
        fake.add_pull_from_payload(&opened);
        let channel = format!(
            "kind = \"github\"\n\n[github]\nbot = \"helper-bot\"\napi_url = \"{}\"\nrepositories = [\"{REPO}\"]\n",
            fake.url()
        );
        let (dir, project, diagnostics) =
            project_with("hub", &[("agent/channels/github.toml", &channel)]);
        let secrets: bdk_github::Secrets = std::sync::Arc::new(|name| match name {
            "GITHUB_WEBHOOK_SECRET" => Some(SECRET.to_owned()),
            "GITHUB_TOKEN" => Some(bdk_testkit::github::FakeGithub::TOKEN.to_owned()),
            _ => None,
        });
        let github = bdk_github::Github::from_project(
            &project,
            bdk_github::GithubOptions::default().with_secrets(secrets),
        )
        .unwrap();
        let host = bdk_testkit::host_over(project, &dir.path().join("state"), |b| {
            b.extension(std::sync::Arc::new(github))
        })
        .await;
        let agent = Agent {
            dir,
            host,
            diagnostics,
        };
        let base = serve(vec![agent.mount(None)], config).await;
        let http = client();
        let deliver = |id: &str, extra: Option<(&str, &str)>| {
            let mut req = http
                .post(format!("{base}/v1/webhooks/github"))
                .header("content-type", "application/json")
                .header("x-github-event", "pull_request")
                .header("x-github-delivery", id)
                .header("x-hub-signature-256", &signature)
                .body(body.clone());
            if let Some((name, value)) = extra {
                req = req.header(name, value);
            }
            req.send()
        };
        let refusals = [
            ("x-forwarded-for", "203.0.113.9"),
            ("forwarded", "for=203.0.113.9"),
            ("via", "1.1 relay.example"),
            ("x-real-ip", "203.0.113.9"),
            ("x-forwarded-host", "hooks.example"),
            ("host", "evil.example:80"),
        ];
        for (n, (name, value)) in refusals.iter().enumerate() {
            let id = format!("dlv-proxied-{n}");
            let refused = expect_error(
                deliver(&id, Some((name, value))).await.unwrap(),
                401,
                "unauthorized",
            )
            .await;
            let message = refused["message"].as_str().unwrap();
            assert!(
                message.contains("direct loopback clients only"),
                "{name}: {refused}"
            );
            // Refused before the pack saw it: the delivery id is not claimed.
            assert_eq!(
                agent
                    .host
                    .store()
                    .kv_get(bdk_github::DELIVERIES_NAMESPACE, &format!("github/{id}"))
                    .await
                    .unwrap(),
                None,
                "{name}"
            );
        }
        let accepted = deliver("dlv-direct", None).await.unwrap();
        assert_eq!(accepted.status().as_u16(), 202);
        let answer: serde_json::Value = accepted.json().await.unwrap();
        assert_eq!(answer["deliveries"][0]["outcome"], "accepted", "{answer}");
        assert_eq!(answer["deliveries"][0]["created"], true, "{answer}");
    }
}

/// Like the fan-out route of issue 43, item 6, `--dev`'s "loopback callers
/// see every session" judged the peer alone under bearer auth: behind a
/// reverse proxy on the same machine, every remote token holder saw every
/// session. It takes the local-only rule now.
#[tokio::test]
async fn dev_mode_sees_every_session_only_for_direct_local_bearer_callers() {
    let s = single(Config {
        dev: true,
        ..two_principals()
    })
    .await;
    let (http, base) = (&s.http, s.base.as_str());
    let alices = expect_ok(
        http.post(format!("{base}/v1/session"))
            .bearer_auth("alice-secret-token")
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = alices["sessionId"].as_str().unwrap();
    let bob_lists = |extra: Option<(&str, &str)>| {
        let mut req = http
            .get(format!("{base}/v1/sessions"))
            .bearer_auth("bob-secret-token");
        if let Some((name, value)) = extra {
            req = req.header(name, value);
        }
        req.send()
    };
    let listed = |list: &serde_json::Value| {
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["sessionId"] == id)
    };
    let direct = expect_ok(bob_lists(None).await.unwrap()).await;
    assert!(
        listed(&direct),
        "a direct local caller sees every session: {direct}"
    );
    for header in [
        ("x-forwarded-for", "203.0.113.9"),
        ("via", "1.1 proxy.example"),
        ("host", "agents.example"),
    ] {
        let proxied = expect_ok(bob_lists(Some(header)).await.unwrap()).await;
        assert!(!listed(&proxied), "{header:?}: {proxied}");
    }
}
