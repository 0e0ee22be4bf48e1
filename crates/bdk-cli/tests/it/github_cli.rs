#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk github replay` and `bdk github forward`, run as the real binary
//! against servers started in the test: a webhook receiver that records
//! every request byte for byte, a responder for the two REST calls of a
//! pull request URL, and a relay speaking the smee.io protocol.
//!
//! The payloads are GitHub's own examples (`@octokit/webhooks-examples`)
//! and the signatures are checked against GitHub's own signing code
//! (`@octokit/webhooks-methods`), both installed by `.ci/test-deps` under
//! `target/github-fixtures`.

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use bdk_testkit::PATIENCE;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

const SECRET: &str = "It's a Secret to Everybody";

// ---------------------------------------------------------------- fixtures

/// `target/github-fixtures/node_modules/@octokit`, or a failure that says
/// how to install it.
fn octokit() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../target/github-fixtures/node_modules/@octokit");
    for needed in [
        "webhooks-examples/api.github.com/index.json",
        "webhooks-methods/dist-node/index.js",
    ] {
        assert!(
            dir.join(needed).is_file(),
            "{} is missing: run .ci/test-deps (it installs @octokit/webhooks-examples and \
             @octokit/webhooks-methods into target/github-fixtures)",
            dir.join(needed).display()
        );
    }
    dir
}

/// One real payload, as GitHub sends it (compact) and pretty-printed, both
/// written by Python from the same object, so the key order is the
/// example's.
#[derive(serde::Deserialize, Debug, Clone)]
struct Example {
    event: String,
    compact: String,
    pretty: String,
}

/// The first `per_event` examples of each of `events`.
fn examples(events: &[&str], per_event: usize) -> Vec<Example> {
    let index = octokit().join("webhooks-examples/api.github.com/index.json");
    let script = r#"
import json, sys
index = json.load(open(sys.argv[1]))
wanted = sys.argv[2].split(",")
out = []
for entry in index:
    if entry["name"] in wanted:
        for payload in entry["examples"][: int(sys.argv[3])]:
            out.append({
                "event": entry["name"],
                "compact": json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
                "pretty": json.dumps(payload, indent=2, ensure_ascii=False),
            })
print(json.dumps(out))
"#;
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .arg(&index)
        .arg(events.join(","))
        .arg(per_event.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let examples: Vec<Example> = serde_json::from_slice(&out.stdout).unwrap();
    for event in events {
        assert!(
            examples.iter().any(|e| e.event == *event),
            "no example of {event}"
        );
    }
    examples
}

/// The signatures `@octokit/webhooks-methods` computes for `bodies`.
fn octokit_signatures(secret: &str, bodies: &[String]) -> Vec<String> {
    let module = octokit().join("webhooks-methods/dist-node/index.js");
    let script = format!(
        r#"import {{ sign }} from {module};
let input = "";
process.stdin.setEncoding("utf8");
for await (const chunk of process.stdin) input += chunk;
const {{ secret, bodies }} = JSON.parse(input);
const out = [];
for (const body of bodies) out.push(await sign(secret, body));
console.log(JSON.stringify(out));"#,
        module = json!(module.display().to_string())
    );
    let mut child = std::process::Command::new("node")
        .args(["--input-type=module", "-e", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node (installed by .ci/test-deps)");
    let input = json!({"secret": secret, "bodies": bodies}).to_string();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

// ---------------------------------------------------------------- servers

/// A request a test server received.
#[derive(Debug)]
struct Received {
    method: Method,
    path: String,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn body_text(&self) -> String {
        String::from_utf8(self.body.clone()).unwrap()
    }
}

type Answerer = dyn Fn(&Received) -> (u16, String) + Send + Sync;

/// An HTTP server on a free port that records every request and answers
/// what `answer` says (always as `application/json`).
struct Recorder {
    url: String,
    requests: mpsc::UnboundedReceiver<Received>,
}

impl Recorder {
    async fn start(
        answer: impl Fn(&Received) -> (u16, String) + Send + Sync + 'static,
    ) -> Recorder {
        let answer: Arc<Answerer> = Arc::new(answer);
        let (tx, requests) = mpsc::unbounded_channel();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let answer = answer.clone();
                let tx = tx.clone();
                async move {
                    let received = Received {
                        method,
                        path: uri.path().to_owned(),
                        headers,
                        body: body.to_vec(),
                    };
                    let (status, text) = answer(&received);
                    let _ = tx.send(received);
                    Response::builder()
                        .status(status)
                        .header("content-type", "application/json")
                        .body(Body::from(text))
                        .unwrap()
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Recorder { url, requests }
    }

    /// A receiver that accepts every delivery like a channel does.
    async fn accepting() -> Recorder {
        Recorder::start(|_| {
            (
                202,
                json!({"ok": true, "sessionId": "sess-1", "created": true}).to_string(),
            )
        })
        .await
    }

    async fn next(&mut self) -> Received {
        tokio::time::timeout(PATIENCE, self.requests.recv())
            .await
            .expect("a request within PATIENCE")
            .expect("the server runs")
    }

    fn nothing_more(&mut self) {
        assert!(
            self.requests.try_recv().is_err(),
            "the server got an extra request"
        );
    }
}

/// A URL on which nothing listens.
fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    url
}

// ---------------------------------------------------------------- the binary

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// `bdk github <args>` with a clean GitHub environment plus `env`.
async fn bdk(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"));
    cmd.arg("github").args(args);
    for name in [
        "GITHUB_WEBHOOK_SECRET",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_API_URL",
    ] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    let out = tokio::time::timeout(PATIENCE, cmd.output())
        .await
        .expect("bdk github ends")
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// A delivery id of the default kind: a UUID v4.
fn is_uuid_v4(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    parts.iter().map(|p| p.len()).collect::<Vec<_>>() == [8, 4, 4, 4, 12]
        && parts[2].starts_with('4')
        && id.chars().all(|c| c == '-' || c.is_ascii_hexdigit())
}

/// What every replayed delivery must look like.
fn assert_delivery(got: &Received, event: &str, body: &str) {
    assert_eq!(got.method, Method::POST);
    assert_eq!(got.path, "/v1/webhooks/github");
    assert_eq!(got.body_text(), body, "the body arrives unchanged");
    assert_eq!(got.header("x-github-event"), Some(event));
    assert_eq!(got.header("content-type"), Some("application/json"));
    assert!(
        got.header("user-agent")
            .is_some_and(|ua| ua.starts_with("GitHub-Hookshot/")),
        "{:?}",
        got.header("user-agent")
    );
    assert_eq!(
        got.header("x-hub-signature-256"),
        Some(bdk_http::channels::sign(SECRET.as_bytes(), &got.body).as_str()),
        "the signature verifies with the secret"
    );
}

// ---------------------------------------------------------------- replay

#[tokio::test(flavor = "multi_thread")]
async fn replay_sends_each_saved_shape_unchanged_and_signed() {
    let mut receiver = Recorder::accepting().await;
    let tmp = tempfile::tempdir().unwrap();
    let env = [("GITHUB_WEBHOOK_SECRET", SECRET)];
    let events = [
        "pull_request",
        "issue_comment",
        "issues",
        "ping",
        "pull_request_review_comment",
    ];
    for example in examples(&events, 1) {
        let event = example.event.as_str();

        // (c) a bare payload, the event inferred from its keys.
        let bare = write(tmp.path(), &format!("{event}.json"), &example.compact);
        let run = bdk(&["replay", &bare, "--url", &receiver.url], &env).await;
        assert_eq!(run.code, 0, "{event}: {}", run.stderr);
        assert!(
            run.stderr
                .contains(&format!("inferred `{event}` from the payload's keys")),
            "{}",
            run.stderr
        );
        let got = receiver.next().await;
        assert_delivery(&got, event, &example.compact);
        let id = got.header("x-github-delivery").unwrap();
        assert!(is_uuid_v4(id), "{id}");
        assert_eq!(
            run.stdout.trim(),
            format!("{event} {id} -> 202 Accepted, session sess-1")
        );

        // (b) headers and payload; the saved event is used, the saved
        // delivery id is not (a replay runs again).
        let pair = format!(
            r#"{{"headers": {{"X-GitHub-Event": "{event}", "X-GitHub-Delivery": "saved-id"}}, "payload": {}}}"#,
            example.compact
        );
        let pair = write(tmp.path(), &format!("{event}-pair.json"), &pair);
        let run = bdk(&["replay", &pair, "--url", &receiver.url], &env).await;
        assert_eq!(run.code, 0, "{event}: {}", run.stderr);
        assert!(!run.stderr.contains("inferred"), "{}", run.stderr);
        let got = receiver.next().await;
        assert_delivery(&got, event, &example.compact);
        assert_ne!(got.header("x-github-delivery"), Some("saved-id"));

        // (a) GitHub's delivery record, pretty-printed: sent compact, keys
        // in the payload's order, with the hook's headers and the given id.
        let record = json!({
            "id": 17,
            "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
            "delivered_at": "2019-06-03T00:57:16Z",
            "redelivery": false,
            "status": "OK",
            "status_code": 200,
            "event": event,
            "action": "opened",
            "request": {
                "headers": {
                    "X-GitHub-Delivery": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
                    "X-Hub-Signature-256": "sha256=6dcb09b5b57875f334f61aebed695e2e4193db5e",
                    "Accept": "*/*",
                    "X-GitHub-Hook-ID": "42",
                    "User-Agent": "GitHub-Hookshot/b8c71d8",
                    "X-GitHub-Event": event,
                    "X-GitHub-Hook-Installation-Target-ID": "123",
                    "X-GitHub-Hook-Installation-Target-Type": "repository",
                    "content-type": "application/json"
                },
                "payload": "PAYLOAD"
            },
            "response": {"headers": {}, "payload": null}
        });
        let record = serde_json::to_string_pretty(&record)
            .unwrap()
            .replace("\"PAYLOAD\"", &example.pretty);
        let record = write(tmp.path(), &format!("{event}-record.json"), &record);
        for _ in 0..2 {
            let run = bdk(
                &[
                    "replay",
                    &record,
                    "--url",
                    &receiver.url,
                    "--delivery-id",
                    "dedupe-me",
                ],
                &env,
            )
            .await;
            assert_eq!(run.code, 0, "{event}: {}", run.stderr);
            let got = receiver.next().await;
            assert_delivery(&got, event, &example.compact);
            assert_eq!(got.header("x-github-delivery"), Some("dedupe-me"));
            assert_eq!(got.header("x-github-hook-id"), Some("42"));
            assert_eq!(
                got.header("x-github-hook-installation-target-type"),
                Some("repository")
            );
        }
    }
    receiver.nothing_more();
}

#[tokio::test(flavor = "multi_thread")]
async fn signatures_match_githubs_own_signing_code() {
    let mut receiver = Recorder::accepting().await;
    let tmp = tempfile::tempdir().unwrap();
    let mut sent = Vec::new();
    let mut bodies = Vec::new();
    let events = [
        "pull_request",
        "pull_request_review",
        "issue_comment",
        "issues",
        "ping",
        "push",
        "release",
    ];
    let mut payloads: Vec<(String, String)> = examples(&events, 3)
        .into_iter()
        .map(|e| (e.event, e.compact))
        .collect();
    // Text beyond ASCII is signed as its UTF-8 bytes on both sides.
    payloads.push((
        "issues".into(),
        r#"{"action":"opened","issue":{"title":"café ✓ \u00e9 \"quoted\"","body":"日本語\n"}}"#
            .into(),
    ));
    for (i, (event, payload)) in payloads.iter().enumerate() {
        let file = write(tmp.path(), &format!("{i}.json"), payload);
        let run = bdk(
            &[
                "replay",
                &file,
                "--event",
                event,
                "--url",
                &receiver.url,
                "--secret-env",
                "MY_HOOK_SECRET",
            ],
            &[("MY_HOOK_SECRET", SECRET)],
        )
        .await;
        assert_eq!(run.code, 0, "{event}: {}", run.stderr);
        let got = receiver.next().await;
        assert_eq!(got.body_text(), *payload);
        sent.push(got.header("x-hub-signature-256").unwrap().to_owned());
        bodies.push(got.body_text());
    }
    assert_eq!(octokit_signatures(SECRET, &bodies), sent);
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_exit_codes_say_who_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let ping = examples(&["ping"], 1).remove(0);
    let file = write(tmp.path(), "ping.json", &ping.compact);
    let env = [("GITHUB_WEBHOOK_SECRET", SECRET)];

    // 1: the server refuses, and says why.
    let mut refusing = Recorder::start(|_| {
        (
            401,
            json!({"ok": false, "error": "bad_signature", "message": "the signature does not match"})
                .to_string(),
        )
    })
    .await;
    let run = bdk(&["replay", &file, "--url", &refusing.url], &env).await;
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("401 Unauthorized: bad_signature: the signature does not match"),
        "{}",
        run.stderr
    );
    refusing.next().await;

    // 2: input that cannot be sent, before anything is sent.
    let not_json = write(tmp.path(), "not.json", "{ nope");
    let unknown = write(tmp.path(), "push.json", r#"{"ref": "main", "commits": []}"#);
    let missing = tmp.path().join("missing.json").display().to_string();
    for (args, expected) in [
        (vec!["replay", missing.as_str()], "cannot read"),
        (vec!["replay", not_json.as_str()], "not JSON"),
        (vec!["replay", unknown.as_str()], "pass --event"),
        (
            vec!["replay", "https://github.com/octo/hello/issues/3"],
            "not a pull request URL",
        ),
        (
            vec!["replay", file.as_str(), "--url", "localhost:3000"],
            "--url",
        ),
        (vec!["replay"], "PR-URL|DELIVERY.json"),
    ] {
        let mut args = args.clone();
        if !args.contains(&"--url") {
            args.extend(["--url", refusing.url.as_str()]);
        }
        let run = bdk(&args, &env).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{args:?}: {}", run.stderr);
    }
    refusing.nothing_more();

    // 3: nothing listens.
    let dead = dead_url();
    let run = bdk(&["replay", &file, "--url", &dead], &env).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("POST {dead}/v1/webhooks/github failed")),
        "{}",
        run.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_secret_the_delivery_goes_unsigned_with_a_note() {
    let mut receiver = Recorder::accepting().await;
    let tmp = tempfile::tempdir().unwrap();
    let ping = examples(&["ping"], 1).remove(0);
    let file = write(tmp.path(), "ping.json", &ping.compact);
    let run = bdk(
        &[
            "replay",
            &file,
            "--url",
            &receiver.url,
            "--path",
            "/octo/v1/channels/github",
            "--json",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("GITHUB_WEBHOOK_SECRET is not set: sending the delivery unsigned"),
        "{}",
        run.stderr
    );
    // --json: the server's answer, as it answered.
    let answer: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(answer["sessionId"], "sess-1");
    let got = receiver.next().await;
    assert_eq!(got.path, "/octo/v1/channels/github");
    assert_eq!(got.header("x-hub-signature-256"), None);
    assert_eq!(got.body_text(), ping.compact);
}

// ---------------------------------------------------------------- PR URL mode

/// The keys of a JSON object's text, in the order they are written.
fn keys_in_order(text: &str) -> Vec<String> {
    struct Keys;
    impl<'de> serde::de::Visitor<'de> for Keys {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("an object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Vec<String>, A::Error> {
            let mut keys = Vec::new();
            while let Some((key, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                keys.push(key);
            }
            Ok(keys)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    serde::Deserializer::deserialize_map(&mut de, Keys).unwrap()
}

/// A responder for the two REST calls, serving a real pull request and its
/// repository pretty-printed (as the REST API does), under `prefix`.
async fn api(prefix: &'static str, pull: String, repo: String) -> Recorder {
    Recorder::start(move |r| {
        let path = r.path.strip_prefix(prefix).unwrap_or("");
        match path {
            "/repos/octo/hello/pulls/7" => (200, pull.clone()),
            "/repos/octo/hello" => (200, repo.clone()),
            _ => (
                404,
                json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
                    .to_string(),
            ),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pull_request_url_is_fetched_and_sent_as_github_would() {
    let example = examples(&["pull_request"], 1).remove(0);
    let payload: Value = serde_json::from_str(&example.compact).unwrap();
    let pull = serde_json::to_string_pretty(&payload["pull_request"]).unwrap();
    let repo = serde_json::to_string_pretty(&payload["repository"]).unwrap();
    let mut receiver = Recorder::accepting().await;
    let env = [
        ("GITHUB_WEBHOOK_SECRET", SECRET),
        ("GITHUB_TOKEN", "ghp_test"),
    ];

    // github.com with --api-url pointing at the responder.
    let mut github = api("", pull.clone(), repo.clone()).await;
    let run = bdk(
        &[
            "replay",
            "https://github.com/octo/hello/pull/7",
            "--api-url",
            &github.url,
            "--action",
            "synchronize",
            "--url",
            &receiver.url,
        ],
        &env,
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let mut paths = Vec::new();
    for _ in 0..2 {
        let call = github.next().await;
        assert_eq!(call.method, Method::GET);
        assert_eq!(call.header("accept"), Some("application/vnd.github+json"));
        assert_eq!(call.header("x-github-api-version"), Some("2022-11-28"));
        assert_eq!(call.header("authorization"), Some("Bearer ghp_test"));
        assert!(call.header("user-agent").is_some());
        paths.push(call.path);
    }
    paths.sort();
    assert_eq!(paths, ["/repos/octo/hello", "/repos/octo/hello/pulls/7"]);

    let got = receiver.next().await;
    assert_delivery(&got, "pull_request", &got.body_text());
    let body = got.body_text();
    assert!(
        body.starts_with(r#"{"action":"synchronize","number":7,"pull_request":{"#),
        "{}",
        &body[..80]
    );
    assert!(!body.contains('\n'), "the payload is sent compact");
    let sent: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sent["pull_request"], payload["pull_request"]);
    assert_eq!(sent["repository"], payload["repository"]);
    assert_eq!(sent["sender"], payload["pull_request"]["user"]);
    // The payload's keys come in GitHub's order, and the API's objects
    // keep theirs.
    assert_eq!(
        keys_in_order(&body),
        ["action", "number", "pull_request", "repository", "sender"]
    );
    #[derive(serde::Deserialize)]
    struct Sent<'a> {
        #[serde(borrow)]
        pull_request: &'a serde_json::value::RawValue,
        #[serde(borrow)]
        repository: &'a serde_json::value::RawValue,
    }
    let parts: Sent<'_> = serde_json::from_str(&body).unwrap();
    assert_eq!(
        keys_in_order(parts.pull_request.get()),
        keys_in_order(&pull)
    );
    assert_eq!(keys_in_order(parts.repository.get()), keys_in_order(&repo));

    // An Enterprise host: the API is <host>/api/v3, no token.
    let mut enterprise = api("/api/v3", pull.clone(), repo.clone()).await;
    let pr_url = format!("{}/octo/hello/pull/7", enterprise.url);
    let run = bdk(&["replay", &pr_url, "--url", &receiver.url], &env[..1]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    let call = enterprise.next().await;
    assert!(
        call.path.starts_with("/api/v3/repos/octo/hello"),
        "{}",
        call.path
    );
    assert_eq!(call.header("authorization"), None);
    enterprise.next().await;
    let got = receiver.next().await;
    assert!(
        got.body_text()
            .starts_with(r#"{"action":"opened","number":7,"#)
    );

    // The API refuses: exit 3 with its status and message.
    let run = bdk(
        &[
            "replay",
            "https://github.com/octo/missing/pull/1",
            "--api-url",
            &github.url,
            "--url",
            &receiver.url,
        ],
        &env,
    )
    .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("404 Not Found: Not Found"),
        "{}",
        run.stderr
    );
    // The API cannot be reached: exit 3.
    let run = bdk(
        &[
            "replay",
            "https://github.com/octo/hello/pull/7",
            "--api-url",
            &dead_url(),
            "--url",
            &receiver.url,
        ],
        &env,
    )
    .await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    receiver.nothing_more();
}

// ---------------------------------------------------------------- forward

/// One relay event carrying a delivery, as smee.io writes it: the request
/// headers GitHub sent, lower-cased, beside `body`, `query` and `timestamp`.
fn relay_event(id: u32, event: &str, delivery: &str, body: &str) -> String {
    let signature = bdk_http::channels::sign(SECRET.as_bytes(), body.as_bytes());
    let data = format!(
        r#"{{"host":"smee.io","connection":"close","content-length":"{}","user-agent":"GitHub-Hookshot/b8c71d8","x-github-event":"{event}","x-github-delivery":"{delivery}","x-github-hook-id":"42","x-hub-signature-256":"{signature}","content-type":"application/json","body":{body},"query":{{}},"timestamp":1717000000000}}"#,
        body.len()
    );
    format!("id: {id}\ndata: {data}\n\n")
}

/// A relay on a free port: the first connection gets `ready`, two
/// deliveries and a `ping`, then the stream closes; the second gets one
/// more delivery and stays open. Records each connection's `Last-Event-ID`.
async fn relay(events: Vec<String>) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let connections = Arc::new(AtomicUsize::new(0));
    let record = seen.clone();
    let app = axum::Router::new().route(
        "/channel",
        axum::routing::get(move |headers: HeaderMap| {
            let record = record.clone();
            let events = events.clone();
            let n = connections.fetch_add(1, Ordering::SeqCst);
            async move {
                record.lock().unwrap().push(
                    headers
                        .get("last-event-id")
                        .map(|v| v.to_str().unwrap().to_owned()),
                );
                let ready = "event: ready\ndata: {}\n\n".to_owned();
                let ping = "event: ping\ndata: {}\n\n".to_owned();
                let chunks: Vec<String> = match n {
                    0 => vec![ready, events[0].clone(), ping, events[1].clone()],
                    1 => vec![ready, events[2].clone()],
                    _ => vec![ready],
                };
                let stream = futures::stream::iter(
                    chunks
                        .into_iter()
                        .map(|c| Ok::<_, Infallible>(Bytes::from(c))),
                );
                let body = if n == 0 {
                    Body::from_stream(stream)
                } else {
                    Body::from_stream(futures::StreamExt::chain(
                        stream,
                        futures::stream::pending(),
                    ))
                };
                Response::builder()
                    .status(StatusCode::OK)
                    .header("content-type", "text/event-stream")
                    .body(body)
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/channel", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn forward_relays_every_delivery_unchanged_and_reconnects() {
    let payloads = examples(&["pull_request", "issue_comment", "issues"], 1);
    let deliveries = ["d-1", "d-2", "d-3"];
    let events: Vec<String> = payloads
        .iter()
        .zip(deliveries)
        .enumerate()
        .map(|(i, (p, d))| relay_event(i as u32 + 1, &p.event, d, &p.compact))
        .collect();
    let (relay_url, seen) = relay(events).await;
    // The server refuses the second delivery; forwarding goes on.
    let mut receiver = Recorder::start(|r| match r.header("x-github-delivery") {
        Some("d-2") => (
            401,
            json!({"ok": false, "error": "bad_signature", "message": "no match"}).to_string(),
        ),
        _ => (202, json!({"ok": true, "sessionId": "sess-1"}).to_string()),
    })
    .await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"))
        .args([
            "github",
            "forward",
            "--relay",
            &relay_url,
            "--url",
            &receiver.url,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (lines_tx, mut lines) = mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            let _ = lines_tx.send(line);
        }
    });
    let stderr_text = Arc::new(Mutex::new(String::new()));
    let sink = stderr_text.clone();
    let stderr = child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });

    for (payload, delivery) in payloads.iter().zip(deliveries) {
        let got = receiver.next().await;
        assert_eq!(got.method, Method::POST);
        assert_eq!(got.path, "/v1/webhooks/github");
        assert_eq!(
            got.body_text(),
            payload.compact,
            "the body arrives unchanged"
        );
        assert_eq!(got.header("x-github-event"), Some(payload.event.as_str()));
        assert_eq!(got.header("x-github-delivery"), Some(delivery));
        assert_eq!(got.header("x-github-hook-id"), Some("42"));
        assert_eq!(got.header("content-type"), Some("application/json"));
        assert_eq!(got.header("user-agent"), Some("GitHub-Hookshot/b8c71d8"));
        assert_eq!(
            got.header("x-hub-signature-256"),
            Some(bdk_http::channels::sign(SECRET.as_bytes(), &got.body).as_str())
        );
        // The relay's own connection headers stay behind.
        assert_ne!(got.header("host"), Some("smee.io"));
        assert_eq!(
            got.header("content-length"),
            Some(got.body.len().to_string().as_str())
        );
        assert!(got.header("query").is_none() && got.header("timestamp").is_none());
    }
    let mut printed = Vec::new();
    for _ in 0..3 {
        let line = tokio::time::timeout(PATIENCE, lines.recv())
            .await
            .expect("a line per delivery")
            .expect("forward still runs");
        printed.push(line);
    }
    let expected: Vec<String> = payloads
        .iter()
        .zip(deliveries)
        .map(|(p, d)| match d {
            "d-2" => format!(
                "{} {d} -> refused: 401 Unauthorized: bad_signature: no match",
                p.event
            ),
            _ => format!("{} {d} -> 202 Accepted, session sess-1", p.event),
        })
        .collect();
    assert_eq!(printed, expected);
    // The second connection resumed after the last id the relay gave.
    assert_eq!(seen.lock().unwrap().clone(), [None, Some("2".to_owned())]);
    let stderr = stderr_text.lock().unwrap().clone();
    assert!(
        stderr.contains("relay: the relay closed the stream; reconnecting in 1s"),
        "{stderr}"
    );

    // SIGTERM stops it with exit 0.
    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(PATIENCE, child.wait())
        .await
        .expect("forward exits after SIGTERM")
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", stderr_text.lock().unwrap());
    receiver.nothing_more();
}

#[tokio::test(flavor = "multi_thread")]
async fn forward_exits_3_when_the_relay_cannot_be_reached_and_2_on_bad_arguments() {
    let dead = format!("{}/channel", dead_url());
    let run = bdk(&["forward", "--relay", &dead], &[]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(
        run.stderr.contains("could not be reached"),
        "{}",
        run.stderr
    );

    // A URL that answers but is no relay.
    let mut not_a_relay = Recorder::start(|_| (404, r#"{"message":"Not Found"}"#.into())).await;
    let run = bdk(&["forward", "--relay", &not_a_relay.url], &[]).await;
    assert_eq!(run.code, 3, "{}", run.stderr);
    assert!(run.stderr.contains("404 Not Found"), "{}", run.stderr);
    not_a_relay.next().await;

    for args in [
        vec!["forward"],
        vec!["forward", "--relay", "not a url"],
        vec![
            "forward",
            "--relay",
            "http://127.0.0.1:1/c",
            "--url",
            "nope",
        ],
    ] {
        let run = bdk(&args, &[]).await;
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
    }
}
