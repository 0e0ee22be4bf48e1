#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The session API over a real server: start, follow-up, stream, events,
//! stop, list, cost, approvals, and the races and replays around them.

use crate::common;

use std::time::Duration;

use bdk_core::host::StartSession;
use bdk_events::{SessionId, SessionMode};
use bdk_http::Config;
use common::*;
use serde_json::{Value, json};

#[tokio::test]
async fn start_stream_follow_up_and_dump() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());

    let started = start(
        http,
        base,
        json!({"message": "What's the weather in Paris?"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ses_"), "{started}");
    let token = started["continuationToken"].as_str().unwrap().to_owned();
    assert!(token.starts_with("http:"), "{started}");
    assert!(started["deliveryId"].as_str().unwrap().starts_with("dlv_"));
    assert!(started["turnId"].as_str().unwrap().starts_with("turn_"));
    assert_eq!(
        started["traceUrl"],
        format!("{base}/v1/session/{id}/events"),
        "the trace URL is absolute and names the events route"
    );
    assert!(
        started.get("playgroundUrl").is_none(),
        "no playground mounted"
    );

    // Replay from 0 and follow until the turn rests.
    let mut lines = stream(http, base, &id, 0).await;
    let first = lines.until(is("session.waiting")).await;
    assert_eq!(first[0]["type"], "session.started");
    let completed = first
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap();
    assert_eq!(completed["data"]["reply"], "It is 21 degrees in Paris.");
    assert!(kinds(&first).contains(&"action.result".to_owned()));
    drop(lines);

    // The dump has exactly what the stream delivered.
    let dump = events(http, base, &id).await;
    assert_eq!(dump, first);
    let as_json =
        expect_ok(get(http, format!("{base}/v1/session/{id}/events?format=json")).await).await;
    assert_eq!(as_json["events"], Value::Array(first.clone()));
    assert_eq!(as_json["sessionId"], id.as_str());
    expect_error(
        get(http, format!("{base}/v1/session/{id}/events?format=xml")).await,
        400,
        "invalid_request",
    )
    .await;

    // A follow-up with the token and a caller-chosen delivery id.
    let sent = expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "hello again", "continuationToken": token, "deliveryId": "hook-1"}),
        )
        .await,
    )
    .await;
    let rotated = sent["continuationToken"].as_str().unwrap().to_owned();
    assert_ne!(rotated, token, "accepted follow-ups rotate the token");
    assert_eq!(sent["deliveryId"], "hook-1");
    assert_eq!(sent["sessionId"], id.as_str());
    assert!(sent["turnId"].as_str().unwrap().starts_with("turn_"));

    let all = settle(http, base, &id, 2).await;
    let received: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "message.received")
        .collect();
    assert_eq!(received[1]["data"]["deliveryIds"], json!(["hook-1"]));
    let replies: Vec<&Value> = all
        .iter()
        .filter(|e| e["type"] == "turn.completed")
        .map(|e| &e["data"]["reply"])
        .collect();
    assert_eq!(replies[1], "echo: hello again");

    // The old token is stale now, and a forged one never matched.
    for bad in [token.as_str(), "http:00000000000000000000000000000000"] {
        expect_error(
            post(
                http,
                format!("{base}/v1/session/{id}"),
                &json!({"message": "again", "continuationToken": bad}),
            )
            .await,
            409,
            "stale_continuation_token",
        )
        .await;
    }

    // Listing shows the session with its current token to its owner.
    let list = expect_ok(get(http, format!("{base}/v1/sessions")).await).await;
    let mine = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["sessionId"] == id.as_str())
        .unwrap();
    assert_eq!(mine["continuationToken"], rotated.as_str());
    assert_eq!(mine["mode"], "chat");
    assert_eq!(mine["channel"], "http");
    assert_eq!(mine["principal"], "local");
    assert!(mine["createdAt"].is_string());

    // Cost: one row per ended turn, the scripted model is free.
    let cost = expect_ok(get(http, format!("{base}/v1/session/{id}/cost")).await).await;
    let turns = cost["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2, "{cost}");
    assert_eq!(turns[0]["status"], "completed");
    assert_eq!(turns[0]["model"], "scripted/default");
    assert_eq!(turns[0]["usage"]["inputTokens"], 250);
    assert_eq!(turns[0]["usage"]["outputTokens"], 30);
    assert!(turns[0]["durationMs"].is_u64());
    assert_eq!(turns[0]["estimatedCostUsd"], 0.0);
    assert_eq!(cost["totals"]["usage"]["inputTokens"], 260);
    assert_eq!(cost["totals"]["turns"], 2);
    assert_eq!(cost["totals"]["estimatedCostUsd"], 0.0);
}

#[tokio::test]
async fn session_errors() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let idle = start(http, base, json!({"title": "idle"})).await;
    let id = idle["sessionId"].as_str().unwrap();
    assert!(idle.get("turnId").is_none(), "no message, no turn: {idle}");
    assert!(idle.get("deliveryId").is_none());

    // Follow-up: message required, admission validated, delivery id validated.
    for (body, code) in [
        (json!({}), "invalid_request"),
        (json!({"message": "   "}), "invalid_request"),
        (
            json!({"message": "x", "admission": "sideways"}),
            "invalid_request",
        ),
        (
            json!({"message": "x", "deliveryId": "a\nb"}),
            "invalid_request",
        ),
        (
            json!({"message": "x", "workspaceFiles": {"../up.txt": "x"}}),
            "invalid_request",
        ),
    ] {
        expect_error(
            post(http, format!("{base}/v1/session/{id}"), &body).await,
            400,
            code,
        )
        .await;
    }

    // Unknown and malformed session ids on every session route.
    let unknown = SessionId::generate();
    for (path, status, code) in [
        (format!("/v1/session/{unknown}"), 404, "session_not_found"),
        (
            format!("/v1/session/{unknown}/stop"),
            404,
            "session_not_found",
        ),
        (
            "/v1/session/not-a-session".to_owned(),
            404,
            "invalid_session_id",
        ),
        (
            "/v1/session/ses_..%2f..%2fetc/stop".to_owned(),
            404,
            "invalid_session_id",
        ),
    ] {
        expect_error(
            post(http, format!("{base}{path}"), &json!({"message": "x"})).await,
            status,
            code,
        )
        .await;
    }
    for suffix in ["stream", "events", "cost", "approvals"] {
        expect_error(
            get(http, format!("{base}/v1/session/{unknown}/{suffix}")).await,
            404,
            "session_not_found",
        )
        .await;
        expect_error(
            get(http, format!("{base}/v1/session/bogus/{suffix}")).await,
            404,
            "invalid_session_id",
        )
        .await;
    }

    // startIndex must be a non-negative integer.
    for bad in ["abc", "-1", "1.5", "99999999999999999999999"] {
        expect_error(
            get(
                http,
                format!("{base}/v1/session/{id}/stream?startIndex={bad}"),
            )
            .await,
            400,
            "invalid_request",
        )
        .await;
    }

    // A task session takes no follow-ups.
    let task = s
        .agent
        .host
        .start_session(StartSession {
            mode: SessionMode::Task,
            principal: Some("local".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    expect_error(
        post(
            http,
            format!("{base}/v1/session/{}", task.session_id),
            &json!({"message": "more"}),
        )
        .await,
        409,
        "task_session",
    )
    .await;
}

#[tokio::test]
async fn start_options_as_of_dry_run_and_workspace_files() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());

    let started = start(
        http,
        base,
        json!({
            "title": "pinned",
            "purpose": "eval",
            "dryRun": true,
            "asOf": "2026-01-15T09:00:00+02:00",
            "workspaceFiles": {"notes/a.txt": "hello", "b.md": "# b"},
        }),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap();
    let dump = events(http, base, id).await;
    let data = &dump[0]["data"];
    assert_eq!(dump[0]["type"], "session.started");
    assert_eq!(data["dryRun"], true);
    assert_eq!(data["purpose"], "eval");
    assert_eq!(data["title"], "pinned");
    assert_eq!(data["channel"], "http");
    assert_eq!(data["principal"], "local");
    assert!(
        data["asOf"]
            .as_str()
            .unwrap()
            .starts_with("2026-01-15T07:00:00"),
        "asOf is normalised to UTC: {data}"
    );
    let ws = s
        .agent
        .host
        .store()
        .workspace_dir(&SessionId::parse(id).unwrap());
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/a.txt")).unwrap(),
        "hello"
    );

    for bad in [
        "2026-01-15T09:00:00",
        "yesterday",
        "2026-13-01T00:00:00Z",
        "",
    ] {
        let body = expect_error(
            post(
                http,
                format!("{base}/v1/session"),
                &json!({"message": "x", "asOf": bad}),
            )
            .await,
            400,
            "invalid_as_of",
        )
        .await;
        assert!(body["message"].as_str().unwrap().contains("zone"), "{body}");
    }
    let before = s.agent.host.list_sessions(None).await.unwrap().len();
    for bad in ["../escape.txt", "/etc/passwd", "a/../../x", "a\\b", ""] {
        expect_error(
            post(
                http,
                format!("{base}/v1/session"),
                &json!({"message": "x", "workspaceFiles": {bad: "x"}}),
            )
            .await,
            400,
            "invalid_request",
        )
        .await;
    }
    assert_eq!(
        s.agent.host.list_sessions(None).await.unwrap().len(),
        before,
        "refused starts create no session"
    );
    assert!(
        !s.agent
            .dir
            .path()
            .join("state/sessions/escape.txt")
            .exists()
    );
    expect_error(
        post(http, format!("{base}/v1/session"), &json!({"message": ""})).await,
        400,
        "invalid_request",
    )
    .await;
}

#[tokio::test]
async fn stop_cancels_the_running_turn() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({"message": "be slow"})).await;
    let id = started["sessionId"].as_str().unwrap();
    let mut lines = stream(http, base, id, 0).await;
    lines.until(is("turn.started")).await;

    let stop = expect_ok(
        http.post(format!("{base}/v1/session/{id}/stop"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(stop["stopped"], true);
    let rest = lines.until(is("session.waiting")).await;
    let failed = rest.iter().find(|e| e["type"] == "turn.failed").unwrap();
    assert_eq!(failed["data"]["status"], "cancelled");

    let again = expect_ok(
        http.post(format!("{base}/v1/session/{id}/stop"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(again["stopped"], false);

    let cost = expect_ok(get(http, format!("{base}/v1/session/{id}/cost")).await).await;
    assert_eq!(cost["turns"][0]["status"], "cancelled");
    assert_eq!(cost["turns"][0]["model"], "scripted/default");
}

#[tokio::test]
async fn approvals_list_approve_and_deny() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({"message": "deploy please"})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();
    let mut lines = stream(http, base, &id, 0).await;
    let parked = lines.until(is("action.approval_requested")).await;
    let call_id = parked.last().unwrap()["data"]["callId"]
        .as_str()
        .unwrap()
        .to_owned();

    let list = expect_ok(get(http, format!("{base}/v1/session/{id}/approvals")).await).await;
    let approvals = list["approvals"].as_array().unwrap();
    assert_eq!(approvals.len(), 1, "{list}");
    assert_eq!(approvals[0]["callId"], call_id.as_str());
    assert_eq!(approvals[0]["name"], "deploy");
    assert_eq!(approvals[0]["input"], json!({"target": "prod"}));

    let url = format!("{base}/v1/session/{id}/approvals/{call_id}");
    for body in [
        json!({"decision": "maybe"}),
        json!({}),
        json!({"decision": 1}),
    ] {
        expect_error(post(http, &url, &body).await, 400, "invalid_request").await;
    }
    expect_ok(
        post(
            http,
            &url,
            &json!({"decision": "approve", "reason": "looks fine"}),
        )
        .await,
    )
    .await;
    let rest = lines.until(is("session.waiting")).await;
    let resolved = rest
        .iter()
        .find(|e| e["type"] == "action.approval_resolved")
        .unwrap();
    assert_eq!(resolved["data"]["approved"], true);
    assert_eq!(resolved["data"]["by"], "local");
    let reply = rest.iter().find(|e| e["type"] == "turn.completed").unwrap();
    assert_eq!(reply["data"]["reply"], "deploy result: deployed to prod");

    // Already resolved, and never parked.
    expect_error(
        post(http, &url, &json!({"decision": "approve"})).await,
        404,
        "approval_not_found",
    )
    .await;
    expect_error(
        post(
            http,
            format!("{base}/v1/session/{id}/approvals/call_nope"),
            &json!({"decision": "deny"}),
        )
        .await,
        404,
        "approval_not_found",
    )
    .await;

    // Deny: the model gets the refusal as the tool's result.
    let from = rest.last().unwrap()["index"].as_u64().unwrap() + 1;
    let mut lines = stream(http, base, &id, from).await;
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "deploy again", "continuationToken": token}),
        )
        .await,
    )
    .await;
    let parked = lines.until(is("action.approval_requested")).await;
    let call_id = parked.last().unwrap()["data"]["callId"]
        .as_str()
        .unwrap()
        .to_owned();
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}/approvals/{call_id}"),
            &json!({"decision": "deny", "reason": "not today"}),
        )
        .await,
    )
    .await;
    let rest = lines.until(is("session.waiting")).await;
    let result = rest.iter().find(|e| e["type"] == "action.result").unwrap();
    assert_eq!(result["data"]["isError"], true, "{result}");
    let empty = expect_ok(get(http, format!("{base}/v1/session/{id}/approvals")).await).await;
    assert_eq!(empty["approvals"], json!([]));
}

#[tokio::test]
async fn racing_follow_ups_with_one_token_admit_exactly_one() {
    const RACERS: usize = 16;
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();

    let mut tasks = Vec::new();
    for i in 0..RACERS {
        let (http, url, token) = (
            http.clone(),
            format!("{base}/v1/session/{id}"),
            token.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let resp = post(
                &http,
                url,
                &json!({"message": format!("racer {i}"), "continuationToken": token}),
            )
            .await;
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap();
            (status, body)
        }));
    }
    let mut ok = 0;
    let mut conflicts = 0;
    for t in tasks {
        let (status, body) = t.await.unwrap();
        match status {
            200 => ok += 1,
            409 => {
                assert_eq!(body["error"], "stale_continuation_token", "{body}");
                conflicts += 1;
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
    assert_eq!((ok, conflicts), (1, RACERS - 1));
    let all = settle(http, base, &id, 1).await;
    let received = all
        .iter()
        .filter(|e| e["type"] == "message.received")
        .count();
    assert_eq!(received, 1, "only the winner reached the agent");
}

#[tokio::test]
async fn stream_resumes_from_start_index_without_gap_or_duplicate() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(
        http,
        base,
        json!({"message": "What's the weather in Oslo?"}),
    )
    .await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();

    let mut first = stream(http, base, &id, 0).await;
    let seen = first.until(is("session.waiting")).await;
    drop(first);
    let last = seen.last().unwrap()["index"].as_u64().unwrap();

    // Subscribe at the resume point before anything new happens, so the
    // rest arrives live.
    let mut resumed = stream(http, base, &id, last + 1).await;
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "What's the weather in Rome?", "continuationToken": token}),
        )
        .await,
    )
    .await;
    let more = resumed.until(is("session.waiting")).await;
    assert_eq!(more[0]["index"].as_u64().unwrap(), last + 1);

    let mut joined = seen.clone();
    joined.extend(more);
    for (i, e) in joined.iter().enumerate() {
        assert_eq!(
            e["index"].as_u64().unwrap(),
            i as u64,
            "gap or duplicate at {i}"
        );
    }
    assert_eq!(joined, events(http, base, &id).await);

    // A start index past the end waits for the future rather than failing.
    let next = joined.len() as u64;
    let mut ahead = stream(http, base, &id, next).await;
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "one more"}),
        )
        .await,
    )
    .await;
    let e = ahead.next().await.unwrap();
    assert_eq!(e["index"].as_u64().unwrap(), next);
    assert_eq!(e["type"], "message.received");
}

/// The DESIGN target is 1,000 readers per process (measured by the
/// benchmarks); this test keeps a smaller count so it stays fast.
const READERS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_readers_receive_the_same_complete_sequence() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();

    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let (http, base, id, ready) = (http.clone(), base.to_owned(), id.clone(), ready_tx.clone());
        readers.push(tokio::spawn(async move {
            let mut lines = stream(&http, &base, &id, 0).await;
            // session.started and session.waiting are replayed first.
            let mut got = vec![lines.next().await.unwrap(), lines.next().await.unwrap()];
            ready.send(()).unwrap();
            got.extend(
                lines
                    .until(|e| e["type"] == "session.waiting" && e["index"].as_u64().unwrap() > 1)
                    .await,
            );
            got
        }));
    }
    for _ in 0..READERS {
        tokio::time::timeout(DEADLINE, ready_rx.recv())
            .await
            .unwrap()
            .unwrap();
    }
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "What's the weather in Lima?"}),
        )
        .await,
    )
    .await;
    let expected = {
        let mut all = Vec::new();
        for r in readers {
            all.push(r.await.unwrap());
        }
        let dump = events(http, base, &id).await;
        for got in &all {
            assert_eq!(got, &dump, "a reader saw a different sequence");
        }
        dump
    };
    assert!(expected.iter().any(|e| e["type"] == "turn.completed"));
}

#[tokio::test]
async fn heartbeats_keep_a_quiet_stream_alive() {
    let config = Config {
        heartbeat: Duration::from_millis(40),
        ..Config::default()
    };
    let s = single(config).await;
    let (http, base) = (&s.http, s.base.as_str());
    let id = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut lines = stream(http, base, &id, 0).await;
    lines.until(is("session.waiting")).await;
    assert_eq!(lines.blanks, 0);
    // The next event only comes after the follow-up; until then the reader
    // gets bare newlines, which NDJSON readers skip.
    let chunk = lines.raw_chunk().await;
    assert_eq!(chunk, b"\n", "a quiet stream sends heartbeats");
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{id}"),
            &json!({"message": "hi"}),
        )
        .await,
    )
    .await;
    let rest = lines.until(is("session.waiting")).await;
    assert_eq!(rest[0]["type"], "message.received");
}

#[tokio::test]
async fn stream_ends_when_the_session_is_deleted_or_the_server_shuts_down() {
    let config = Config::default();
    let shutdown = config.shutdown.clone();
    let s = single(config).await;
    let (http, base) = (&s.http, s.base.as_str());

    let id = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut lines = stream(http, base, &id, 0).await;
    lines.until(is("session.waiting")).await;
    assert!(
        s.agent
            .host
            .store()
            .delete_session(&SessionId::parse(&id).unwrap())
            .await
            .unwrap()
    );
    assert!(lines.next().await.is_none(), "the stream ends cleanly");
    expect_error(
        get(http, format!("{base}/v1/session/{id}/stream")).await,
        404,
        "session_not_found",
    )
    .await;

    let other = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut a = stream(http, base, &other, 0).await;
    let mut b = stream(http, base, &other, 0).await;
    a.until(is("session.waiting")).await;
    b.until(is("session.waiting")).await;
    shutdown.cancel();
    assert!(a.next().await.is_none());
    assert!(b.next().await.is_none());
}

#[tokio::test]
async fn dev_mode_lists_every_principal_and_hides_foreign_tokens() {
    for dev in [false, true] {
        let s = single(Config {
            dev,
            ..Config::default()
        })
        .await;
        let (http, base) = (&s.http, s.base.as_str());
        let foreign = s
            .agent
            .host
            .start_session(StartSession {
                principal: Some("slack:U1".into()),
                channel: "slack".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let mine = start(http, base, json!({})).await;
        let list = expect_ok(get(http, format!("{base}/v1/sessions")).await).await;
        let sessions = list["sessions"].as_array().unwrap();
        let find = |id: &str| sessions.iter().find(|v| v["sessionId"] == id);
        let mine = find(mine["sessionId"].as_str().unwrap()).unwrap();
        assert!(mine["continuationToken"].is_string());
        let theirs = find(foreign.session_id.as_str());
        if dev {
            let theirs = theirs.expect("dev mode on loopback lists every session");
            assert_eq!(theirs["channel"], "slack");
            assert!(
                theirs.get("continuationToken").is_none(),
                "tokens go to their owners only"
            );
            // Seeing is not driving: a follow-up still needs the owner.
            expect_error(
                post(
                    http,
                    format!("{base}/v1/session/{}", foreign.session_id),
                    &json!({"message": "hijack"}),
                )
                .await,
                403,
                "forbidden",
            )
            .await;
            assert_eq!(
                events(http, base, foreign.session_id.as_str()).await[0]["type"],
                "session.started"
            );
        }
        // A schedule's task session, owned by someone else: a caller who
        // can see it learns the real reason (409, it takes no follow-ups);
        // one who cannot see it learns only that (403).
        let task = s
            .agent
            .host
            .start_session(StartSession {
                mode: SessionMode::Task,
                principal: Some("schedule:nightly".into()),
                channel: "schedule".into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let refused = post(
            http,
            format!("{base}/v1/session/{}", task.session_id),
            &json!({"message": "more"}),
        )
        .await;
        if dev {
            expect_error(refused, 409, "task_session").await;
        } else {
            expect_error(refused, 403, "forbidden").await;
        }
        if !dev {
            assert!(theirs.is_none(), "without --dev callers see their own");
            expect_error(
                get(
                    http,
                    format!("{base}/v1/session/{}/events", foreign.session_id),
                )
                .await,
                403,
                "forbidden",
            )
            .await;
        }
    }
}

/// Regression: a follow-up refused for a `workspaceFiles` path through a
/// symlink used to rotate the continuation token first, so the caller's
/// token was stale after an answer that accepted nothing.
#[tokio::test]
async fn a_follow_up_refused_for_bad_workspace_files_keeps_the_token() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let token = started["continuationToken"].as_str().unwrap().to_owned();
    let workspace = s
        .agent
        .host
        .store()
        .workspace_dir(&SessionId::parse(&id).unwrap());
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    std::os::unix::fs::symlink(outside.path(), workspace.join("out")).unwrap();

    let url = format!("{base}/v1/session/{id}");
    let refused = post(
        http,
        &url,
        &json!({
            "message": "write through the link",
            "continuationToken": token,
            "workspaceFiles": {"out/escaped.txt": "nope"},
        }),
    )
    .await;
    expect_error(refused, 400, "invalid_request").await;
    assert!(!outside.path().join("escaped.txt").exists());
    assert!(
        !events(http, base, &id)
            .await
            .iter()
            .any(|e| e["type"] == "message.received"),
        "nothing was accepted"
    );

    // The token the caller holds is still the current one.
    let listed = expect_ok(get(http, format!("{base}/v1/sessions")).await).await;
    assert_eq!(listed["sessions"][0]["continuationToken"], token.as_str());
    let sent = expect_ok(
        post(
            http,
            &url,
            &json!({"message": "hello", "continuationToken": token}),
        )
        .await,
    )
    .await;
    assert_ne!(sent["continuationToken"], token.as_str());
}

/// Regression: of 20 parallel follow-ups without a token, most used to lose
/// the token's compare-and-swap to each other and answer
/// `stale_continuation_token`, though they held no token that could be
/// stale. Sends of one server are now admitted one at a time; a tokenless
/// send that loses a race (to another replica) answers `session_busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_tokenless_follow_ups_are_never_stale() {
    const SENDERS: usize = 20;
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let id = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    for admission in ["preempt", "coalesce"] {
        let mut tasks = Vec::new();
        for i in 0..SENDERS {
            let (http, url) = (http.clone(), format!("{base}/v1/session/{id}"));
            tasks.push(tokio::spawn(async move {
                let resp = post(
                    &http,
                    url,
                    &json!({"message": format!("sender {i}"), "admission": admission}),
                )
                .await;
                let status = resp.status().as_u16();
                (status, resp.json::<Value>().await.unwrap())
            }));
        }
        let mut tokens = std::collections::BTreeSet::new();
        for t in tasks {
            let (status, body) = t.await.unwrap();
            match status {
                200 => assert!(
                    tokens.insert(body["continuationToken"].as_str().unwrap().to_owned()),
                    "{body}"
                ),
                409 => assert_eq!(body["error"], "session_busy", "{admission}: {body}"),
                other => panic!("{admission}: unexpected status {other}: {body}"),
            }
        }
        assert_eq!(
            tokens.len(),
            SENDERS,
            "{admission}: one server admits them all"
        );
        s.agent
            .host
            .wait_idle(&SessionId::parse(&id).unwrap())
            .await;
    }
    let all = events(http, base, &id).await;
    let delivered: usize = all
        .iter()
        .map(|e| match e["type"].as_str().unwrap() {
            "message.received" => e["data"]["deliveryIds"].as_array().unwrap().len(),
            "nudge.delivered" => 1,
            _ => 0,
        })
        .sum();
    assert_eq!(
        delivered,
        2 * SENDERS,
        "every accepted send reached the agent"
    );
}

#[tokio::test]
async fn delete_stops_the_running_turn_then_removes_the_session() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let started = start(http, base, json!({"message": "be slow"})).await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let workspace = s
        .agent
        .host
        .store()
        .workspace_dir(&SessionId::parse(&id).unwrap());
    let mut lines = stream(http, base, &id, 0).await;
    lines.until(is("turn.started")).await;

    let deleted = expect_ok(
        http.delete(format!("{base}/v1/session/{id}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(deleted["sessionId"], id.as_str());
    // The open stream still gets the stopped turn's end, then ends.
    let mut rest = Vec::new();
    while let Some(e) = lines.next().await {
        rest.push(e);
    }
    let failed = rest.iter().find(|e| e["type"] == "turn.failed").unwrap();
    assert_eq!(failed["data"]["status"], "cancelled");
    assert!(!workspace.exists(), "the workspace is gone");
    for resp in [
        http.get(format!("{base}/v1/session/{id}/events")),
        http.delete(format!("{base}/v1/session/{id}")),
    ] {
        expect_error(resp.send().await.unwrap(), 404, "session_not_found").await;
    }
    expect_error(
        http.delete(format!("{base}/v1/session/not-a-session-id"))
            .send()
            .await
            .unwrap(),
        404,
        "invalid_session_id",
    )
    .await;

    // Only the owner deletes.
    let foreign = s
        .agent
        .host
        .start_session(StartSession {
            principal: Some("someone-else".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    expect_error(
        http.delete(format!("{base}/v1/session/{}", foreign.session_id))
            .send()
            .await
            .unwrap(),
        403,
        "forbidden",
    )
    .await;
    assert!(
        s.agent
            .host
            .store()
            .get_session(&foreign.session_id)
            .await
            .unwrap()
            .is_some()
    );

    // A damaged session is still deletable: that is how an operator clears it.
    let damaged = start(http, base, json!({})).await["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = workspace
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join(&damaged)
        .join("events.ndjson");
    let text = std::fs::read_to_string(&log).unwrap();
    let (first, rest) = text.split_once('\n').unwrap();
    std::fs::write(&log, format!("{first}\nnot an event\n{rest}")).unwrap();
    expect_error(
        get(http, format!("{base}/v1/session/{damaged}/events")).await,
        409,
        "session_corrupt",
    )
    .await;
    expect_ok(
        http.delete(format!("{base}/v1/session/{damaged}"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(!log.exists());
}

/// The version before the journal kept a rotated token in a link beside the
/// session's record, and such links are still read. A link that is not the
/// server's own makes that session (and only that one) `session_corrupt`
/// instead of being followed or ignored.
#[tokio::test]
async fn a_foreign_token_link_makes_only_its_session_corrupt() {
    let s = single(Config::default()).await;
    let (http, base) = (&s.http, s.base.as_str());
    let mut tokens = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..2 {
        let started = start(http, base, json!({"message": "hi"})).await;
        let id = started["sessionId"].as_str().unwrap().to_owned();
        settle(http, base, &id, 1).await;
        let sent = expect_ok(
            post(
                http,
                format!("{base}/v1/session/{id}"),
                &json!({"message": "again", "continuationToken": started["continuationToken"]}),
            )
            .await,
        )
        .await;
        settle(http, base, &id, 2).await;
        tokens.push(sent["continuationToken"].as_str().unwrap().to_owned());
        ids.push(id);
    }
    let dir_of = |id: &str| {
        s.agent
            .host
            .store()
            .workspace_dir(&SessionId::parse(id).unwrap())
            .parent()
            .unwrap()
            .to_path_buf()
    };
    // The link an older version kept the rotated token in; a foreign one
    // is planted where it lived.
    let link = dir_of(&ids[0]).join("token");
    assert!(
        link.symlink_metadata().is_err(),
        "rotations make no link now"
    );
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();

    expect_error(
        post(
            http,
            format!("{base}/v1/session/{}", ids[0]),
            &json!({"message": "third", "continuationToken": tokens[0]}),
        )
        .await,
        409,
        "session_corrupt",
    )
    .await;
    // The other session goes on, and the listing still shows it.
    expect_ok(
        post(
            http,
            format!("{base}/v1/session/{}", ids[1]),
            &json!({"message": "third", "continuationToken": tokens[1]}),
        )
        .await,
    )
    .await;
    settle(http, base, &ids[1], 3).await;
    let list = expect_ok(get(http, format!("{base}/v1/sessions")).await).await;
    assert!(
        list["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["sessionId"] == ids[1].as_str()),
        "{list}"
    );
    // Whose session it is cannot be read either, so not even a delete goes
    // through until an operator removes the link on disk.
    expect_error(
        http.delete(format!("{base}/v1/session/{}", ids[0]))
            .send()
            .await
            .unwrap(),
        409,
        "session_corrupt",
    )
    .await;
    std::fs::remove_file(&link).unwrap();
    expect_ok(
        http.delete(format!("{base}/v1/session/{}", ids[0]))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert!(!dir_of(&ids[0]).exists());
}
