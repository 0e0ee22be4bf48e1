//! The fake over real sockets: every method in both encodings, every error
//! code it promises, scopes, authentication, injected rate limits,
//! pagination and the upload flow.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::args::form_encode;
use super::*;

/// An answer as the client sees it.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    text: String,
    body: Value,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    fn error(&self) -> Option<&str> {
        self.body["error"].as_str()
    }

    /// The body of an `ok: true` answer; panics with the answer otherwise.
    fn ok(self) -> Value {
        assert_eq!(
            (self.status, &self.body["ok"]),
            (200, &json!(true)),
            "{self:?}"
        );
        self.body
    }
}

/// Sends one request over a fresh connection.
async fn send(
    fake: &FakeSlack,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut stream = tokio::net::TcpStream::connect(fake.addr).await.unwrap();
    let mut request = format!(
        "{method} {target} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        fake.addr,
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    let mut bytes = request.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).await.unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.unwrap();
    let response = String::from_utf8(response).unwrap();
    let (head, text) = response.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines.next().unwrap()[9..12].parse().unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    Answer {
        status,
        headers,
        text: text.to_owned(),
        body: serde_json::from_str(text).unwrap_or(Value::Null),
    }
}

/// How a client encodes a call's arguments.
#[derive(Debug, Clone, Copy)]
enum Enc {
    Json,
    Form,
}

const BOTH: [Enc; 2] = [Enc::Json, Enc::Form];

/// Calls `method` with `args` (an object) and the bot token as a bearer.
async fn call(fake: &FakeSlack, enc: Enc, method: &str, args: Value) -> Answer {
    call_as(fake, enc, Some(FakeSlack::BOT_TOKEN), method, args).await
}

async fn call_as(
    fake: &FakeSlack,
    enc: Enc,
    token: Option<&str>,
    method: &str,
    args: Value,
) -> Answer {
    let auth = token.map(|token| format!("Bearer {token}"));
    let mut headers = Vec::new();
    if let Some(auth) = &auth {
        headers.push(("authorization", auth.as_str()));
    }
    let body = match enc {
        Enc::Json => {
            headers.push(("content-type", "application/json; charset=utf-8"));
            args.to_string()
        }
        Enc::Form => {
            headers.push(("content-type", "application/x-www-form-urlencoded"));
            form(&args)
        }
    };
    send(
        fake,
        "POST",
        &format!("/api/{method}"),
        &headers,
        body.as_bytes(),
    )
    .await
}

/// A form body: strings as they are, anything else as JSON text.
fn form(args: &Value) -> String {
    args.as_object()
        .unwrap()
        .iter()
        .map(|(name, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            format!("{}={}", form_encode(name), form_encode(&text))
        })
        .collect::<Vec<_>>()
        .join("&")
}

async fn get(fake: &FakeSlack, method: &str, query: &str) -> Answer {
    let auth = format!("Bearer {}", FakeSlack::BOT_TOKEN);
    send(
        fake,
        "GET",
        &format!("/api/{method}?{query}"),
        &[("authorization", auth.as_str())],
        b"",
    )
    .await
}

fn is_slack_ts(ts: &str) -> bool {
    let Some((seconds, micros)) = ts.split_once('.') else {
        return false;
    };
    seconds.len() == 10
        && micros.len() == 6
        && seconds.bytes().all(|b| b.is_ascii_digit())
        && micros.bytes().all(|b| b.is_ascii_digit())
}

#[tokio::test]
async fn url_is_the_api_base() {
    let fake = FakeSlack::start().await;
    assert_eq!(fake.url(), format!("http://{}/api", fake.addr));
    let answer = send(&fake, "GET", "/elsewhere", &[], b"").await;
    assert_eq!(answer.status, 404);
}

#[tokio::test]
async fn auth_test_answers_the_bot_in_every_encoding() {
    let fake = FakeSlack::start().await;
    for enc in BOTH {
        let answer = call(&fake, enc, "auth.test", json!({})).await;
        assert_eq!(answer.header("x-accepted-oauth-scopes"), Some(""));
        assert_eq!(
            answer.header("x-oauth-scopes"),
            Some(
                "app_mentions:read,channels:history,channels:read,chat:write,files:write,groups:history,im:history,users:read"
            )
        );
        assert_eq!(
            answer.header("content-type"),
            Some("application/json; charset=utf-8")
        );
        let body = answer.ok();
        assert_eq!(body["user_id"], FakeSlack::BOT_USER);
        assert_eq!(body["bot_id"], FakeSlack::BOT_ID);
        assert_eq!(body["team_id"], FakeSlack::TEAM);
        assert_eq!(body["is_enterprise_install"], false);
        assert!(body["url"].as_str().unwrap().starts_with("https://"));
        assert!(body["team"].is_string() && body["user"].is_string());
    }
    get(&fake, "auth.test", "").await.ok();
    // The legacy way: the token as a form field, or in the query string.
    let legacy = send(
        &fake,
        "POST",
        "/api/auth.test",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"token=xoxb-fake-bot-token",
    )
    .await;
    legacy.ok();
    send(
        &fake,
        "GET",
        "/api/auth.test?token=xoxb-fake-bot-token",
        &[],
        b"",
    )
    .await
    .ok();
}

#[tokio::test]
async fn refusals_of_the_caller() {
    let fake = FakeSlack::start().await;
    for enc in BOTH {
        let answer = call_as(&fake, enc, None, "auth.test", json!({})).await;
        assert_eq!((answer.status, answer.error()), (200, Some("not_authed")));
        assert_eq!(answer.body["ok"], false);
        assert_eq!(answer.header("x-oauth-scopes"), Some(""));
        let answer = call_as(&fake, enc, Some("xoxb-nope"), "auth.test", json!({})).await;
        assert_eq!(answer.error(), Some("invalid_auth"));
    }
    let answer = send(
        &fake,
        "POST",
        "/api/auth.test",
        &[("content-type", "application/x-www-form-urlencoded")],
        b"token=xoxb-nope",
    )
    .await;
    assert_eq!(answer.error(), Some("invalid_auth"));
    // Slack reads no token from a JSON body.
    let answer = call_as(
        &fake,
        Enc::Json,
        None,
        "auth.test",
        json!({"token": FakeSlack::BOT_TOKEN}),
    )
    .await;
    assert_eq!(answer.error(), Some("not_authed"));
    let answer = call(&fake, Enc::Json, "chat.postMessagee", json!({})).await;
    assert_eq!(
        (
            answer.status,
            answer.error(),
            answer.body["req_method"].as_str()
        ),
        (404, Some("unknown_method"), Some("chat.postMessagee"))
    );
}

#[tokio::test]
async fn missing_scope_names_the_needed_and_provided_scopes() {
    let fake = FakeSlack::start().await;
    fake.add_token("xoxb-reader", &["users:read", "channels:read"]);
    let answer = call_as(
        &fake,
        Enc::Form,
        Some("xoxb-reader"),
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "hi"}),
    )
    .await;
    assert_eq!(answer.status, 200);
    assert_eq!(answer.error(), Some("missing_scope"));
    assert_eq!(answer.body["needed"], "chat:write");
    assert_eq!(answer.body["provided"], "users:read,channels:read");
    assert_eq!(
        answer.header("x-oauth-scopes"),
        Some("users:read,channels:read")
    );
    assert_eq!(answer.header("x-accepted-oauth-scopes"), Some("chat:write"));
    assert!(fake.messages("C0GENERAL").is_empty());

    // Conversation methods need the scope of the conversation's kind.
    fake.add_channel("G0SECRET", "secret");
    let parent = fake.post_user_message("G0SECRET", "U0ALICE", "psst", None);
    let answer = call_as(
        &fake,
        Enc::Json,
        Some("xoxb-reader"),
        "conversations.replies",
        json!({"channel": "G0SECRET", "ts": parent}),
    )
    .await;
    assert_eq!(
        (answer.error(), answer.body["needed"].as_str()),
        (Some("missing_scope"), Some("groups:history"))
    );
    assert_eq!(
        answer.header("x-accepted-oauth-scopes"),
        Some("channels:history,groups:history,im:history,mpim:history")
    );
    // The default token reads channels but not DMs' info.
    let answer = call(
        &fake,
        Enc::Json,
        "conversations.info",
        json!({"channel": "D0DM"}),
    )
    .await;
    assert_eq!(
        (answer.error(), answer.body["needed"].as_str()),
        (Some("missing_scope"), Some("im:read"))
    );
    let answer = call_as(
        &fake,
        Enc::Json,
        Some("xoxb-reader"),
        "auth.test",
        json!({}),
    )
    .await;
    answer.ok();
}

#[tokio::test]
async fn post_message_in_both_encodings() {
    let fake = FakeSlack::start().await;
    let blocks = json!([{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]);
    let mut seen = Vec::new();
    for enc in BOTH {
        let answer = call(
            &fake,
            enc,
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "hi", "blocks": blocks, "mrkdwn": true, "unfurl_links": false}),
        )
        .await;
        assert_eq!(answer.header("x-accepted-oauth-scopes"), Some("chat:write"));
        let body = answer.ok();
        let ts = body["ts"].as_str().unwrap().to_owned();
        assert!(is_slack_ts(&ts), "{ts}");
        assert_eq!(body["channel"], "C0GENERAL");
        let message = &body["message"];
        assert_eq!(message["type"], "message");
        assert_eq!(message["text"], "hi");
        assert_eq!(message["user"], FakeSlack::BOT_USER);
        assert_eq!(message["bot_id"], FakeSlack::BOT_ID);
        assert_eq!(message["ts"], ts.as_str());
        assert_eq!(message["blocks"], blocks);
        assert!(message.get("thread_ts").is_none());
        seen.push(ts);
    }
    // Blocks alone are enough; a channel may be named.
    let body = call(
        &fake,
        Enc::Form,
        "chat.postMessage",
        json!({"channel": "#alerts", "blocks": blocks.to_string()}),
    )
    .await
    .ok();
    assert_eq!(body["channel"], "C0ALERTS");
    seen.push(body["ts"].as_str().unwrap().to_owned());

    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "ts values are unique and increasing");
    let stored = fake.messages("C0GENERAL");
    assert_eq!(stored.len(), 2);
    assert_eq!(stored[1]["ts"], seen[1].as_str());

    // The record has the form's JSON text parsed back to JSON.
    let requests = fake.requests();
    assert_eq!(requests[1].method, "chat.postMessage");
    assert_eq!(requests[1].http_method, "POST");
    assert_eq!(requests[1].args["blocks"], blocks);
    assert_eq!(requests[1].arg("channel"), Some("C0GENERAL"));
    assert_eq!(requests[1].summary(), "chat.postMessage -> ok");
    assert!(
        requests[1]
            .header("Authorization")
            .unwrap()
            .starts_with("Bearer ")
    );
    assert!(requests.iter().all(Recorded::ok));
}

#[tokio::test]
async fn post_message_refusals() {
    let fake = FakeSlack::start().await;
    let many: Vec<Value> = (0..51).map(|_| json!({"type": "divider"})).collect();
    let fifty: Vec<Value> = (0..50).map(|_| json!({"type": "divider"})).collect();
    let cases = [
        (
            json!({"channel": "C0NOPE", "text": "x"}),
            "channel_not_found",
            None,
        ),
        (json!({"text": "x"}), "channel_not_found", None),
        (json!({"channel": "C0GENERAL"}), "no_text", None),
        (json!({"channel": "C0GENERAL", "text": ""}), "no_text", None),
        (
            json!({"channel": "C0GENERAL", "blocks": []}),
            "no_text",
            None,
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x".repeat(40_001)}),
            "msg_too_long",
            None,
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x", "blocks": {"type": "divider"}}),
            "invalid_blocks",
            Some("[ERROR] must provide an array [json-pointer:/blocks]"),
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x", "blocks": [{"type": "divider"}, 3]}),
            "invalid_blocks",
            Some("[ERROR] must provide an object [json-pointer:/blocks/1]"),
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x", "blocks": [{"text": "no type"}]}),
            "invalid_blocks",
            Some("[ERROR] missing required field: type [json-pointer:/blocks/0]"),
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x", "blocks": [{"type": 7}]}),
            "invalid_blocks",
            Some("[ERROR] must be a string [json-pointer:/blocks/0/type]"),
        ),
        (
            json!({"channel": "C0GENERAL", "text": "x", "blocks": many}),
            "invalid_blocks",
            Some("[ERROR] no more than 50 items allowed [json-pointer:/blocks]"),
        ),
    ];
    for enc in BOTH {
        for (args, code, explanation) in &cases {
            let answer = call(&fake, enc, "chat.postMessage", args.clone()).await;
            assert_eq!(
                (answer.status, answer.error()),
                (200, Some(*code)),
                "{enc:?} {args}"
            );
            if let Some(explanation) = explanation {
                assert_eq!(
                    answer.body["response_metadata"]["messages"][0].as_str(),
                    Some(*explanation)
                );
            }
        }
    }
    // Blocks sent as text that is not JSON.
    let answer = call(
        &fake,
        Enc::Form,
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "x", "blocks": "[{"}),
    )
    .await;
    assert_eq!(answer.error(), Some("invalid_blocks_format"));
    assert!(fake.messages("C0GENERAL").is_empty());
    // The limits themselves pass, counted in characters.
    call(
        &fake,
        Enc::Json,
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "é".repeat(40_000), "blocks": fifty}),
    )
    .await
    .ok();
    let summaries: Vec<String> = fake.requests().iter().map(Recorded::summary).collect();
    assert_eq!(summaries[0], "chat.postMessage -> channel_not_found");
}

#[tokio::test]
async fn threads_and_replies_in_both_encodings() {
    let fake = FakeSlack::start().await;
    let parent = fake.post_user_message("C0GENERAL", "U0ALICE", "<@U0BOT> help", None);
    for enc in BOTH {
        let body = call(
            &fake,
            enc,
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "on it", "thread_ts": parent}),
        )
        .await
        .ok();
        assert_eq!(body["message"]["thread_ts"], parent.as_str());
        assert_eq!(body["message"]["parent_user_id"], "U0ALICE");
    }
    let human = fake.post_user_message("C0GENERAL", "U0BOB", "me too", Some(&parent));
    // A reply to a reply lands in the same thread.
    let body = call(
        &fake,
        Enc::Json,
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "both", "thread_ts": human, "reply_broadcast": true}),
    )
    .await
    .ok();
    assert_eq!(body["message"]["thread_ts"], parent.as_str());
    assert_eq!(body["message"]["subtype"], "thread_broadcast");

    let thread = fake.thread("C0GENERAL", &parent);
    assert_eq!(thread.len(), 5);
    assert_eq!(thread[0]["reply_count"], 4);
    assert_eq!(thread[0]["reply_users"], json!(["U0BOT", "U0BOB"]));
    assert_eq!(thread[0]["latest_reply"], thread[4]["ts"]);
    assert_eq!(thread[0]["thread_ts"], parent.as_str());

    for enc in BOTH {
        let body = call(
            &fake,
            enc,
            "conversations.replies",
            json!({"channel": "C0GENERAL", "ts": parent}),
        )
        .await
        .ok();
        assert_eq!(body["messages"], json!(thread));
        assert_eq!(body["has_more"], false);
        assert_eq!(body["response_metadata"]["next_cursor"], "");
    }
    let body = get(
        &fake,
        "conversations.replies",
        &format!("channel=C0GENERAL&ts={human}"),
    )
    .await
    .ok();
    assert_eq!(
        body["messages"],
        json!(thread),
        "a reply's ts reads its thread"
    );

    // A message without replies is a thread of one.
    let lone = fake.post_user_message("C0GENERAL", "U0BOB", "alone", None);
    let body = get(
        &fake,
        "conversations.replies",
        &format!("channel=C0GENERAL&ts={lone}"),
    )
    .await
    .ok();
    assert_eq!(body["messages"].as_array().unwrap().len(), 1);

    for (args, code) in [
        (
            json!({"channel": "C0GENERAL", "ts": "1.000001"}),
            "thread_not_found",
        ),
        (
            json!({"channel": "C0NOPE", "ts": parent}),
            "channel_not_found",
        ),
        (json!({"channel": "C0GENERAL"}), "invalid_arguments"),
    ] {
        let answer = call(&fake, Enc::Form, "conversations.replies", args).await;
        assert_eq!(answer.error(), Some(code));
    }
}

#[tokio::test]
async fn replies_paginate_with_cursors() {
    let fake = FakeSlack::start().await;
    let parent = fake.post_user_message("D0DM", "U0ALICE", "start", None);
    for n in 0..6 {
        fake.post_user_message("D0DM", "U0ALICE", &format!("reply {n}"), Some(&parent));
    }
    let all = fake.thread("D0DM", &parent);
    assert_eq!(all.len(), 7);

    for enc in BOTH {
        let mut pages = Vec::new();
        let mut cursor = String::new();
        loop {
            let mut args = json!({"channel": "D0DM", "ts": parent, "limit": 3});
            if !cursor.is_empty() {
                args["cursor"] = json!(cursor);
            }
            let body = call(&fake, enc, "conversations.replies", args).await.ok();
            let messages = body["messages"].as_array().unwrap().clone();
            cursor = body["response_metadata"]["next_cursor"]
                .as_str()
                .unwrap()
                .to_owned();
            assert_eq!(body["has_more"], !cursor.is_empty());
            pages.push(messages);
            if cursor.is_empty() {
                break;
            }
        }
        let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
        assert_eq!(sizes, [3, 3, 1], "{enc:?}");
        assert_eq!(pages.concat(), all);
    }
    for (args, code) in [
        (
            json!({"channel": "D0DM", "ts": parent, "cursor": "bm90IGEgY3Vyc29y"}),
            "invalid_cursor",
        ),
        (
            json!({"channel": "D0DM", "ts": parent, "cursor": "%%%"}),
            "invalid_cursor",
        ),
        (
            json!({"channel": "D0DM", "ts": parent, "limit": "many"}),
            "invalid_limit",
        ),
    ] {
        let answer = call(&fake, Enc::Form, "conversations.replies", args).await;
        assert_eq!(answer.error(), Some(code));
    }
    // Above the maximum is the maximum.
    let body = get(
        &fake,
        "conversations.replies",
        &format!("channel=D0DM&ts={parent}&limit=5000"),
    )
    .await
    .ok();
    assert_eq!(body["messages"].as_array().unwrap().len(), 7);
}

#[tokio::test]
async fn update_in_both_encodings_and_its_refusals() {
    let fake = FakeSlack::start().await;
    let blocks = json!([{"type": "divider"}]);
    for enc in BOTH {
        let posted = call(
            &fake,
            enc,
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "working…", "blocks": blocks}),
        )
        .await
        .ok();
        let ts = posted["ts"].as_str().unwrap().to_owned();
        let body = call(
            &fake,
            enc,
            "chat.update",
            json!({"channel": "C0GENERAL", "ts": ts, "text": "done"}),
        )
        .await
        .ok();
        assert_eq!(body["channel"], "C0GENERAL");
        assert_eq!(body["ts"], ts.as_str());
        assert_eq!(body["text"], "done");
        assert_eq!(body["message"]["text"], "done");
        assert_eq!(
            body["message"]["blocks"], blocks,
            "blocks left out are kept"
        );
        assert_eq!(body["message"]["edited"]["user"], FakeSlack::BOT_USER);
        let body = call(
            &fake,
            enc,
            "chat.update",
            json!({"channel": "C0GENERAL", "ts": ts, "blocks": []}),
        )
        .await
        .ok();
        assert!(body["message"].get("blocks").is_none(), "[] removes blocks");
        assert_eq!(body["text"], "done");
        let stored = &fake.messages("C0GENERAL")[..];
        let stored = stored.iter().find(|m| m["ts"] == ts.as_str()).unwrap();
        assert_eq!(stored["text"], "done");
    }
    let ours = fake.messages("C0GENERAL")[0]["ts"]
        .as_str()
        .unwrap()
        .to_owned();
    let theirs = fake.post_user_message("C0GENERAL", "U0ALICE", "mine", None);
    for (args, code) in [
        (
            json!({"channel": "C0GENERAL", "ts": "1.000001", "text": "x"}),
            "message_not_found",
        ),
        (
            json!({"channel": "C0GENERAL", "ts": theirs, "text": "x"}),
            "cant_update_message",
        ),
        (
            json!({"channel": "C0GENERAL", "ts": ours, "text": "x".repeat(40_001)}),
            "msg_too_long",
        ),
        (json!({"channel": "C0GENERAL", "ts": ours}), "no_text"),
        (
            json!({"channel": "C0NOPE", "ts": ours, "text": "x"}),
            "channel_not_found",
        ),
        (
            json!({"channel": "C0GENERAL", "ts": ours, "blocks": [{}]}),
            "invalid_blocks",
        ),
    ] {
        for enc in BOTH {
            let answer = call(&fake, enc, "chat.update", args.clone()).await;
            assert_eq!(answer.error(), Some(code), "{enc:?} {args}");
        }
    }
}

#[tokio::test]
async fn delete_in_both_encodings() {
    let fake = FakeSlack::start().await;
    let parent = fake.post_user_message("C0GENERAL", "U0ALICE", "q", None);
    for enc in BOTH {
        let posted = call(
            &fake,
            enc,
            "chat.postMessage",
            json!({"channel": "C0GENERAL", "text": "a", "thread_ts": parent}),
        )
        .await
        .ok();
        let ts = posted["ts"].as_str().unwrap().to_owned();
        assert_eq!(fake.thread("C0GENERAL", &parent)[0]["reply_count"], 1);
        let body = call(
            &fake,
            enc,
            "chat.delete",
            json!({"channel": "C0GENERAL", "ts": ts}),
        )
        .await
        .ok();
        assert_eq!(
            (body["channel"].as_str(), body["ts"].as_str()),
            (Some("C0GENERAL"), Some(ts.as_str()))
        );
        assert_eq!(fake.thread("C0GENERAL", &parent).len(), 1);
        assert!(
            fake.thread("C0GENERAL", &parent)[0]
                .get("reply_count")
                .is_none()
        );
        let answer = call(
            &fake,
            enc,
            "chat.delete",
            json!({"channel": "C0GENERAL", "ts": ts}),
        )
        .await;
        assert_eq!(answer.error(), Some("message_not_found"));
        let answer = call(
            &fake,
            enc,
            "chat.delete",
            json!({"channel": "C0GENERAL", "ts": parent}),
        )
        .await;
        assert_eq!(answer.error(), Some("cant_delete_message"));
    }
    // The bot's parent with replies stays as a tombstone.
    let head = call(
        &fake,
        Enc::Json,
        "chat.postMessage",
        json!({"channel": "C0ALERTS", "text": "alert"}),
    )
    .await
    .ok()["ts"]
        .as_str()
        .unwrap()
        .to_owned();
    fake.post_user_message("C0ALERTS", "U0BOB", "ack", Some(&head));
    call(
        &fake,
        Enc::Form,
        "chat.delete",
        json!({"channel": "C0ALERTS", "ts": head}),
    )
    .await
    .ok();
    let thread = fake.thread("C0ALERTS", &head);
    assert_eq!(thread.len(), 2);
    assert_eq!(thread[0]["subtype"], "tombstone");
}

#[tokio::test]
async fn conversations_and_users_info_in_both_encodings() {
    let fake = FakeSlack::start().await;
    fake.add_channel("G0PRIV", "private-room");
    fake.add_user("U0CAROL", "carol");
    fake.add_token(
        "xoxb-all",
        &["channels:read", "groups:read", "im:read", "users:read"],
    );
    for enc in BOTH {
        let body = call(
            &fake,
            enc,
            "conversations.info",
            json!({"channel": "C0GENERAL"}),
        )
        .await
        .ok();
        let channel = &body["channel"];
        assert_eq!(channel["id"], "C0GENERAL");
        assert_eq!(channel["name"], "general");
        assert_eq!(
            (
                &channel["is_channel"],
                &channel["is_im"],
                &channel["is_private"]
            ),
            (&json!(true), &json!(false), &json!(false))
        );
        let body = call_as(
            &fake,
            enc,
            Some("xoxb-all"),
            "conversations.info",
            json!({"channel": "G0PRIV"}),
        )
        .await
        .ok();
        assert_eq!(
            (
                &body["channel"]["is_channel"],
                &body["channel"]["is_private"],
                &body["channel"]["name"]
            ),
            (&json!(false), &json!(true), &json!("private-room"))
        );
        let body = call_as(
            &fake,
            enc,
            Some("xoxb-all"),
            "conversations.info",
            json!({"channel": "D0DM"}),
        )
        .await
        .ok();
        assert_eq!(
            (&body["channel"]["is_im"], &body["channel"]["user"]),
            (&json!(true), &json!("U0ALICE"))
        );
        let answer = call(
            &fake,
            enc,
            "conversations.info",
            json!({"channel": "C0NOPE"}),
        )
        .await;
        assert_eq!(answer.error(), Some("channel_not_found"));

        let body = call(&fake, enc, "users.info", json!({"user": "U0CAROL"}))
            .await
            .ok();
        let user = &body["user"];
        assert_eq!(
            (
                &user["id"],
                &user["name"],
                &user["real_name"],
                &user["is_bot"]
            ),
            (
                &json!("U0CAROL"),
                &json!("carol"),
                &json!("carol"),
                &json!(false)
            )
        );
        let body = call(
            &fake,
            enc,
            "users.info",
            json!({"user": FakeSlack::BOT_USER}),
        )
        .await
        .ok();
        assert_eq!(body["user"]["is_bot"], true);
        for args in [json!({"user": "U0NOBODY"}), json!({})] {
            let answer = call(&fake, enc, "users.info", args).await;
            assert_eq!(answer.error(), Some("user_not_found"));
        }
    }
    let body = get(&fake, "users.info", "user=U0ALICE").await.ok();
    assert_eq!(body["user"]["name"], "alice");
}

#[tokio::test]
async fn unreadable_calls_get_slacks_errors_and_are_recorded() {
    let fake = FakeSlack::start().await;
    let auth = format!("Bearer {}", FakeSlack::BOT_TOKEN);
    let auth = auth.as_str();
    /// Headers, body, and the error code Slack answers.
    type Case<'a> = (&'a [(&'a str, &'a str)], &'a [u8], &'a str);
    let cases: &[Case<'_>] = &[
        (
            &[
                ("authorization", auth),
                ("content-type", "application/json; charset=utf-8"),
            ],
            b"{\"channel\":",
            "invalid_json",
        ),
        (
            &[
                ("authorization", auth),
                ("content-type", "application/json; charset=utf-8"),
            ],
            b"[\"x\"]",
            "json_not_object",
        ),
        (
            &[
                ("authorization", auth),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            b"text=%C3%28",
            "invalid_form_data",
        ),
        (&[("authorization", auth)], b"text=hi", "missing_post_type"),
        (
            &[("authorization", auth), ("content-type", "text/xml")],
            b"<x/>",
            "invalid_post_type",
        ),
    ];
    for (headers, body, code) in cases {
        let answer = send(&fake, "POST", "/api/chat.postMessage", headers, body).await;
        assert_eq!((answer.status, answer.error()), (200, Some(*code)));
    }
    let requests = fake.requests();
    assert_eq!(requests.len(), cases.len());
    assert!(requests.iter().all(|r| r.args.is_null()));
    assert_eq!(requests[0].summary(), "chat.postMessage -> invalid_json");

    // JSON without a charset works, with Slack's warning.
    let answer = send(
        &fake,
        "POST",
        "/api/chat.postMessage",
        &[
            ("authorization", auth),
            ("content-type", "application/json"),
        ],
        br#"{"channel":"C0GENERAL","text":"hi"}"#,
    )
    .await;
    assert_eq!(answer.body["warning"], "missing_charset");
    assert_eq!(
        answer.body["response_metadata"]["warnings"],
        json!(["missing_charset"])
    );
    answer.ok();
}

#[tokio::test]
async fn injected_rate_limits_and_errors() {
    let fake = FakeSlack::start().await;
    let posted = call(
        &fake,
        Enc::Json,
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "a"}),
    )
    .await
    .ok();
    let ts = posted["ts"].as_str().unwrap().to_owned();
    fake.fail_next(Failure::new(429, "chat.update").header("Retry-After", "3"));
    let update = json!({"channel": "C0GENERAL", "ts": ts, "text": "b"});
    let answer = call(&fake, Enc::Json, "chat.update", update.clone()).await;
    assert_eq!(answer.status, 429);
    assert_eq!(answer.header("retry-after"), Some("3"));
    assert_eq!(answer.body, json!({"ok": false, "error": "ratelimited"}));
    assert!(
        answer
            .header("x-oauth-scopes")
            .unwrap()
            .contains("chat:write")
    );
    assert_eq!(
        fake.messages("C0GENERAL")[0]["text"],
        "a",
        "a refused call changes nothing"
    );
    call(&fake, Enc::Json, "chat.update", update.clone())
        .await
        .ok();

    // Without a Retry-After, Slack's 429 still carries one.
    fake.fail_next(Failure::new(429, "chat.update").times(2));
    for _ in 0..2 {
        let answer = call(&fake, Enc::Form, "chat.update", update.clone()).await;
        assert_eq!(
            (answer.status, answer.header("retry-after")),
            (429, Some("1"))
        );
    }
    call(&fake, Enc::Form, "chat.update", update.clone())
        .await
        .ok();

    fake.fail_next(Failure::slack_error(
        "chat.postMessage",
        "channel_not_found",
    ));
    let answer = call(
        &fake,
        Enc::Json,
        "chat.postMessage",
        json!({"channel": "C0GENERAL", "text": "c"}),
    )
    .await;
    assert_eq!(
        (answer.status, answer.error()),
        (200, Some("channel_not_found"))
    );
    fake.fail_next(Failure::new(503, ""));
    let answer = call(&fake, Enc::Json, "auth.test", json!({})).await;
    assert_eq!(
        (answer.status, answer.error()),
        (503, Some("internal_error"))
    );

    let requests = fake
        .wait_for("the injected answers", |requests| requests.len() == 8)
        .await;
    let summaries: Vec<String> = requests.iter().map(Recorded::summary).collect();
    assert_eq!(
        summaries,
        [
            "chat.postMessage -> ok",
            "chat.update -> 429",
            "chat.update -> ok",
            "chat.update -> 429",
            "chat.update -> 429",
            "chat.update -> ok",
            "chat.postMessage -> channel_not_found",
            "auth.test -> 503",
        ]
    );
    assert_eq!(requests[1].error.as_deref(), Some("ratelimited"));
}

#[tokio::test]
async fn the_upload_flow_end_to_end() {
    let fake = FakeSlack::start().await;
    let parent = fake.post_user_message("C0GENERAL", "U0ALICE", "<@U0BOT> report please", None);
    let bytes = b"hello, report";

    // 1. Ask for an upload URL (form, as Slack documents it).
    let body = call(
        &fake,
        Enc::Form,
        "files.getUploadURLExternal",
        json!({"filename": "report.txt", "length": bytes.len().to_string()}),
    )
    .await
    .ok();
    let file_id = body["file_id"].as_str().unwrap().to_owned();
    let upload_url = body["upload_url"].as_str().unwrap().to_owned();
    let prefix = format!("http://{}/upload/", fake.addr);
    assert_eq!(upload_url, format!("{prefix}{file_id}"));

    // 2. POST the raw bytes there.
    let path = upload_url.trim_start_matches(&format!("http://{}", fake.addr));
    let answer = send(
        &fake,
        "POST",
        path,
        &[("content-type", "application/octet-stream")],
        bytes,
    )
    .await;
    assert_eq!((answer.status, answer.text.as_str()), (200, "OK - 13"));

    // 3. Complete it into the thread (JSON, files as an array).
    let body = call(
        &fake,
        Enc::Json,
        "files.completeUploadExternal",
        json!({
            "files": [{"id": file_id, "title": "The report"}],
            "channel_id": "C0GENERAL",
            "thread_ts": parent,
            "initial_comment": "here it is",
        }),
    )
    .await
    .ok();
    assert_eq!(body["files"][0]["id"], file_id.as_str());
    assert_eq!(body["files"][0]["title"], "The report");
    assert_eq!(body["files"][0]["name"], "report.txt");

    let thread = fake.thread("C0GENERAL", &parent);
    assert_eq!(thread.len(), 2);
    assert_eq!(thread[1]["text"], "here it is");
    assert_eq!(thread[1]["files"][0]["id"], file_id.as_str());
    assert_eq!(thread[1]["user"], FakeSlack::BOT_USER);
    let files = fake.files();
    assert_eq!(files[0]["bytes"], 13);
    assert_eq!(files[0]["length"], 13);
    assert_eq!(files[0]["shares"][0]["channel"], "C0GENERAL");
    assert_eq!(files[0]["shares"][0]["thread_ts"], parent.as_str());
    assert_eq!(files[0]["shares"][0]["ts"], thread[1]["ts"]);

    // A multipart upload, completed from a form with `files` as JSON text
    // and no channel (uploaded, not shared).
    let body = call(
        &fake,
        Enc::Json,
        "files.getUploadURLExternal",
        json!({"filename": "b.bin", "length": 4}),
    )
    .await
    .ok();
    let second = body["file_id"].as_str().unwrap().to_owned();
    let multipart = b"--b0undary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\x01\x02\x03\r\n--b0undary--\r\n";
    let answer = send(
        &fake,
        "POST",
        &format!("/upload/{second}"),
        &[("content-type", "multipart/form-data; boundary=b0undary")],
        multipart,
    )
    .await;
    assert_eq!((answer.status, answer.text.as_str()), (200, "OK - 4"));
    let body = call(
        &fake,
        Enc::Form,
        "files.completeUploadExternal",
        json!({"files": [{"id": second}]}),
    )
    .await
    .ok();
    assert_eq!(body["files"][0]["title"], "b.bin");
    assert_eq!(fake.files()[1]["shares"], json!([]));

    // A length mismatch is refused, and the file never completes.
    let body = call(
        &fake,
        Enc::Form,
        "files.getUploadURLExternal",
        json!({"filename": "c.txt", "length": "10"}),
    )
    .await
    .ok();
    let third = body["file_id"].as_str().unwrap().to_owned();
    let answer = send(&fake, "POST", &format!("/upload/{third}"), &[], b"short").await;
    assert_eq!(answer.status, 400);
    for enc in BOTH {
        for id in [third.as_str(), "F0NEVER"] {
            let answer = call(
                &fake,
                enc,
                "files.completeUploadExternal",
                json!({"files": [{"id": id}], "channel_id": "C0GENERAL"}),
            )
            .await;
            assert_eq!(answer.error(), Some("file_not_found"));
        }
    }
    let answer = call(
        &fake,
        Enc::Json,
        "files.completeUploadExternal",
        json!({"files": [{"id": file_id}], "channel_id": "C0NOPE"}),
    )
    .await;
    assert_eq!(answer.error(), Some("channel_not_found"));
    for args in [
        json!({"length": 3}),
        json!({"filename": "x"}),
        json!({"filename": "x", "length": "three"}),
    ] {
        let answer = call(&fake, Enc::Form, "files.getUploadURLExternal", args).await;
        assert_eq!(answer.error(), Some("invalid_arguments"));
        assert!(answer.body["response_metadata"]["messages"][0].is_string());
    }
    let answer = call(&fake, Enc::Json, "files.completeUploadExternal", json!({})).await;
    assert_eq!(answer.error(), Some("invalid_arguments"));

    let uploads: Vec<Recorded> = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == UPLOAD)
        .collect();
    assert_eq!(
        uploads.iter().map(|r| r.status).collect::<Vec<_>>(),
        [200, 200, 400]
    );
    assert_eq!(uploads[2].summary(), "upload -> 400");
    assert_eq!(uploads[0].args["file_id"], file_id.as_str());
    let answer = send(&fake, "POST", "/upload/F0NEVER", &[], b"x").await;
    assert_eq!(answer.status, 404);
}

#[tokio::test]
async fn an_upload_can_be_failed_on_purpose() {
    let fake = FakeSlack::start().await;
    let body = call(
        &fake,
        Enc::Json,
        "files.getUploadURLExternal",
        json!({"filename": "a.txt", "length": 1}),
    )
    .await
    .ok();
    let id = body["file_id"].as_str().unwrap().to_owned();
    fake.fail_next(Failure::new(500, UPLOAD));
    let answer = send(&fake, "POST", &format!("/upload/{id}"), &[], b"a").await;
    assert_eq!(answer.status, 500);
    let answer = send(&fake, "POST", &format!("/upload/{id}"), &[], b"a").await;
    assert_eq!(answer.status, 200);
}
