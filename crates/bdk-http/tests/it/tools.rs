#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Tool routes (catalog and direct calls, with every documented rule and
//! error) and artifact routes, over a real server.

use crate::common;

use bdk_events::SessionId;
use bdk_http::{Auth, BearerToken, Config};
use common::*;
use serde_json::{Value, json};

async fn call(s: &Single, name: &str, body: Value) -> reqwest::Response {
    post(&s.http, format!("{}/v1/tools/{name}", s.base), &body).await
}

#[tokio::test]
async fn catalog_lists_server_tools_and_describes_each() {
    let s = single(Config::default()).await;
    let list = expect_ok(get(&s.http, format!("{}/v1/tools", s.base)).await).await;
    let tools = list["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    for expected in ["lookup", "deploy", "note", "read_file", "tag_artifact"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    // Built-ins the agent does not expose stay out of the catalog.
    for hidden in ["write_file", "edit_file", "delete_file", "list_files"] {
        assert!(!names.contains(&hidden), "{hidden} listed: {names:?}");
    }
    assert!(
        !names.contains(&"lint"),
        "agent-execution tools are not server tools"
    );
    let lookup = tools.iter().find(|t| t["name"] == "lookup").unwrap();
    assert_eq!(lookup["effect"], "read");
    assert_eq!(lookup["execution"], "server");
    assert_eq!(lookup["needsApproval"], false);
    assert_eq!(lookup["inputSchema"]["required"], json!(["city"]));
    assert!(lookup["description"].as_str().unwrap().contains("weather"));
    let deploy = tools.iter().find(|t| t["name"] == "deploy").unwrap();
    assert_eq!(
        (deploy["effect"].as_str(), deploy["needsApproval"].as_bool()),
        (Some("write"), Some(true))
    );

    let one = expect_ok(get(&s.http, format!("{}/v1/tools/lookup", s.base)).await).await;
    assert_eq!(&one["tool"], lookup);
    let lint = expect_ok(get(&s.http, format!("{}/v1/tools/lint", s.base)).await).await;
    assert_eq!(lint["tool"]["execution"], "agent");
    let unknown = expect_error(
        get(&s.http, format!("{}/v1/tools/nope", s.base)).await,
        404,
        "unknown_tool",
    )
    .await;
    assert!(
        unknown["available"]
            .as_array()
            .unwrap()
            .contains(&json!("lookup"))
    );
}

#[tokio::test]
async fn unbound_calls_and_their_errors() {
    let s = single(Config::default()).await;

    let ok = expect_ok(call(&s, "lookup", json!({"input": {"city": "Oslo"}})).await).await;
    assert_eq!(ok["toolName"], "lookup");
    assert!(ok["callId"].as_str().unwrap().starts_with("tool_lookup_"));
    assert_eq!(ok["isError"], false);
    assert_eq!(ok["result"], json!({"city": "Oslo", "temp": 21}));
    assert!(ok["durationMs"].is_u64());
    assert!(ok.get("sessionId").is_none());
    assert!(ok.get("scratchWorkspace").is_none());

    // A failing tool is a result, not an HTTP error.
    let failed = expect_ok(call(&s, "note", json!({"input": {"text": "boom"}})).await).await;
    assert_eq!(failed["isError"], true);
    assert_eq!(failed["result"], "the note tool failed on purpose");

    let unknown = expect_error(call(&s, "nope", json!({})).await, 404, "unknown_tool").await;
    let available = unknown["available"].as_array().unwrap();
    assert!(available.contains(&json!("lookup")) && !available.contains(&json!("lint")));
    expect_error(call(&s, "lint", json!({})).await, 400, "tool_not_callable").await;

    for input in [json!({}), json!({"city": 5}), json!([1]), json!("Oslo")] {
        let body = expect_error(
            call(&s, "lookup", json!({"input": input})).await,
            400,
            "invalid_tool_input",
        )
        .await;
        assert!(!body["errors"].as_array().unwrap().is_empty(), "{body}");
    }
    // Omitted input is `{}`, which this schema refuses.
    expect_error(
        call(&s, "lookup", json!({})).await,
        400,
        "invalid_tool_input",
    )
    .await;

    for body in [
        json!({"input": {"city": "x"}, "sessionId": SessionId::generate(), "continuationToken": "a:b"}),
        json!({"input": {"city": "x"}, "continuationToken": "nocolon"}),
        json!({"input": {"city": "x"}, "continuationToken": ":key"}),
        json!({"input": {"city": "x"}, "continuationToken": "channel:"}),
        json!({"input": {"city": "x"}, "continuationToken": ""}),
    ] {
        expect_error(
            call(&s, "lookup", body).await,
            400,
            "invalid_continuation_token",
        )
        .await;
    }
    for sid in [
        SessionId::generate().to_string(),
        "../../etc/passwd".into(),
        "ses_x/..".into(),
    ] {
        expect_error(
            call(
                &s,
                "lookup",
                json!({"input": {"city": "x"}, "sessionId": sid}),
            )
            .await,
            404,
            "session_not_found",
        )
        .await;
    }

    // A well-formed token with no session: a scratch call with that identity.
    let scratch = expect_ok(
        call(
            &s,
            "lookup",
            json!({"input": {"city": "Rome"}, "continuationToken": "pr:acme/app#1"}),
        )
        .await,
    )
    .await;
    assert_eq!(scratch["result"]["city"], "Rome");
    assert!(scratch.get("sessionId").is_none());
}

#[tokio::test]
async fn session_bound_calls_busy_and_workspace_rules() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();

    // Bound by id and by token: recorded on the session's stream.
    let by_id = expect_ok(
        call(
            &s,
            "note",
            json!({"input": {"text": "hi"}, "sessionId": id}),
        )
        .await,
    )
    .await;
    assert_eq!(by_id["sessionId"], id.as_str());
    let by_token = expect_ok(
        call(
            &s,
            "lookup",
            json!({"input": {"city": "Bern"}, "continuationToken": token}),
        )
        .await,
    )
    .await;
    assert_eq!(by_token["sessionId"], id.as_str());
    let dump = events(http, base, &id).await;
    for call_id in [&by_id["callId"], &by_token["callId"]] {
        let requested = dump.iter().any(|e| {
            e["type"] == "actions.requested" && e["data"]["actions"][0]["callId"] == *call_id
        });
        let result = dump
            .iter()
            .any(|e| e["type"] == "action.result" && e["data"]["callId"] == *call_id);
        assert!(requested && result, "call {call_id} not recorded");
    }

    // While a turn runs: writes are refused, reads run alongside.
    let mut lines = stream(http, base, &id, 0).await;
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "be slow"}),
        )
        .await,
    )
    .await;
    lines.until(is("turn.started")).await;
    expect_error(
        call(&s, "note", json!({"input": {"text": "x"}, "sessionId": id})).await,
        409,
        "session_busy",
    )
    .await;
    let read = expect_ok(
        call(
            &s,
            "lookup",
            json!({"input": {"city": "Kyiv"}, "sessionId": id}),
        )
        .await,
    )
    .await;
    assert_eq!(read["isError"], false);
    expect_ok(
        http.post(format!("{base}/v1/session/{id}/stop"))
            .send()
            .await
            .unwrap(),
    )
    .await;

    // A workspace that cannot be created: writes fail with 500, reads fall
    // back to a scratch workspace.
    let other = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let ws = s
        .agent
        .host
        .store()
        .workspace_dir(&SessionId::parse(&other).unwrap());
    std::fs::remove_dir_all(&ws).unwrap();
    std::fs::write(&ws, "not a directory").unwrap();
    let body = expect_error(
        call(
            &s,
            "note",
            json!({"input": {"text": "x"}, "sessionId": other}),
        )
        .await,
        500,
        "workspace_unavailable",
    )
    .await;
    assert!(
        !body["message"]
            .as_str()
            .unwrap()
            .contains(ws.to_str().unwrap()),
        "server paths stay in the log"
    );
    let read = expect_ok(
        call(
            &s,
            "lookup",
            json!({"input": {"city": "Rome"}, "sessionId": other}),
        )
        .await,
    )
    .await;
    assert_eq!(read["scratchWorkspace"], true);
}

#[tokio::test]
async fn artifacts_list_and_download_with_ownership() {
    let config = Config {
        auth: Auth::Bearer(vec![
            BearerToken {
                principal: "alice".into(),
                token: "alice-secret".into(),
            },
            BearerToken {
                principal: "bob".into(),
                token: "bob-secret".into(),
            },
        ]),
        ..Config::default()
    };
    let s = single(config).await;
    let base = s.base.as_str();
    let alice = |req: reqwest::RequestBuilder| req.bearer_auth("alice-secret");
    let bob = |req: reqwest::RequestBuilder| req.bearer_auth("bob-secret");

    let started = expect_ok(
        alice(s.http.post(format!("{base}/v1/session")))
            .json(&json!({}))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let tagged = expect_ok(
        alice(s.http.post(format!("{base}/v1/tools/tag_artifact")))
            .json(&json!({
                "sessionId": id,
                "input": {"kind": "report", "content": "hello report", "name": "../r\".txt", "contentType": "text/html"}
            }))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(tagged["isError"], false, "{tagged}");
    let art = tagged["result"]["artifactId"].as_str().unwrap().to_owned();

    let list = expect_ok(
        alice(s.http.get(format!("{base}/v1/artifacts")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let arts = list["artifacts"].as_array().unwrap();
    assert_eq!(arts.len(), 1);
    assert_eq!(arts[0]["id"], art.as_str());
    assert_eq!(arts[0]["kind"], "report");
    assert_eq!(arts[0]["sessionId"], id.as_str());
    for (query, n) in [
        ("kind=report", 1),
        ("kind=other", 0),
        (&format!("sessionId={id}")[..], 1),
        (&format!("sessionId={}", SessionId::generate())[..], 0),
        ("sessionId=..%2f..", 0),
        ("limit=1", 1),
    ] {
        let got = expect_ok(
            alice(s.http.get(format!("{base}/v1/artifacts?{query}")))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(got["artifacts"].as_array().unwrap().len(), n, "{query}");
    }
    for bad in ["limit=0", "limit=-1", "limit=x", "limit=100000"] {
        expect_error(
            alice(s.http.get(format!("{base}/v1/artifacts?{bad}")))
                .send()
                .await
                .unwrap(),
            400,
            "invalid_request",
        )
        .await;
    }

    let resp = alice(s.http.get(format!("{base}/v1/artifacts/{art}/content")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let h = resp.headers();
    assert_eq!(h["content-type"], "text/html");
    assert_eq!(h["content-disposition"], "attachment; filename=\"r_.txt\"");
    assert_eq!(h["x-content-type-options"], "nosniff");
    assert!(
        h["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("sandbox")
    );
    assert_eq!(resp.text().await.unwrap(), "hello report");

    // Another principal neither lists nor downloads it.
    let theirs = expect_ok(
        bob(s.http.get(format!("{base}/v1/artifacts")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(theirs["artifacts"], json!([]));
    expect_error(
        bob(s.http.get(format!("{base}/v1/artifacts/{art}/content")))
            .send()
            .await
            .unwrap(),
        404,
        "not_found",
    )
    .await;

    // Hostile and unknown ids are simply not found.
    for hostile in [
        "art_nope",
        "..",
        "..%2f..%2fsessions",
        "%2e%2e",
        "art_%00",
        "a%ffb",
        "art_..%5c..%5cx",
        &"a".repeat(300),
    ] {
        expect_error(
            alice(s.http.get(format!("{base}/v1/artifacts/{hostile}/content")))
                .send()
                .await
                .unwrap(),
            404,
            "not_found",
        )
        .await;
    }
}

/// Regression: `POST /v1/tools/deploy` ran a `needs_approval` tool with no
/// approval, and built-ins were callable by any remote caller.
#[tokio::test]
async fn built_ins_need_exposing_and_approval_tools_an_explicit_approval() {
    let s = single(Config::default()).await;
    let session =
        expect_ok(post(&s.http, format!("{}/v1/session", s.base), &json!({})).await).await;
    let id = session["sessionId"].as_str().unwrap().to_owned();

    // A built-in the agent did not expose: refused with the fix, and its
    // description is not served either.
    let refused = expect_error(
        call(
            &s,
            "write_file",
            json!({"sessionId": id, "input": {"path": "a.txt", "content": "x"}}),
        )
        .await,
        403,
        "tool_not_exposed",
    )
    .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("[builtin_tools] direct"),
        "{refused}"
    );
    expect_error(
        get(&s.http, format!("{}/v1/tools/write_file", s.base)).await,
        404,
        "unknown_tool",
    )
    .await;
    // An exposed one works.
    let read = expect_ok(
        call(
            &s,
            "read_file",
            json!({"sessionId": id, "input": {"path": "missing.txt"}}),
        )
        .await,
    )
    .await;
    assert_eq!(read["toolName"], "read_file");

    // An approval tool without an approval: refused, nothing recorded.
    let before = s
        .agent
        .host
        .events(&SessionId::parse(&id).unwrap(), 0, None)
        .await
        .unwrap();
    let refused = expect_error(
        call(
            &s,
            "deploy",
            json!({"sessionId": id, "input": {"target": "prod"}}),
        )
        .await,
        403,
        "approval_required",
    )
    .await;
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("\"approve\": true"),
        "{refused}"
    );
    let after = s
        .agent
        .host
        .events(&SessionId::parse(&id).unwrap(), 0, None)
        .await
        .unwrap();
    assert_eq!(before.len(), after.len(), "a refused call left events");

    // With an explicit approval it runs, and the record names the approver.
    let done = expect_ok(
        call(
            &s,
            "deploy",
            json!({"sessionId": id, "input": {"target": "prod"}, "approve": true}),
        )
        .await,
    )
    .await;
    assert_eq!(done["isError"], false, "{done}");
    assert_eq!(done["approvedBy"], "local", "{done}");
    let events = s
        .agent
        .host
        .events(&SessionId::parse(&id).unwrap(), 0, None)
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    let requested = kinds
        .iter()
        .position(|k| *k == "action.approval_requested")
        .unwrap();
    assert_eq!(
        kinds[requested + 1],
        "action.approval_resolved",
        "{kinds:?}"
    );
    assert!(kinds[requested..].contains(&"action.result"), "{kinds:?}");
    let resolved = serde_json::to_value(&events[requested + 1]).unwrap();
    assert_eq!(resolved["data"]["approved"], true, "{resolved}");
    assert_eq!(resolved["data"]["by"], "local", "{resolved}");

    // Unbound, the approval is the caller's too.
    let unbound = expect_ok(
        call(
            &s,
            "deploy",
            json!({"input": {"target": "staging"}, "approve": true}),
        )
        .await,
    )
    .await;
    assert_eq!(unbound["approvedBy"], "local", "{unbound}");
}
