#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Custom channel routes end to end: a real project on disk (scripted
//! model), the real host over the file store, the channel router served on
//! 127.0.0.1:0, and real HTTP receivers for the events map.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use bdk_core::host::Host;
use bdk_core::{Project, discover};
use bdk_events::{Envelope, Event, SessionId, TurnId};
use bdk_http::channels::{self, Channels, Options, Receive};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A safety net for awaits that should finish quickly; a test failing on it
/// means the awaited event never came.
const DEADLINE: Duration = Duration::from_secs(30);

const BASE: &[(&str, &str)] = &[
    ("agent/agent.toml", "model = \"scripted\"\n"),
    ("agent/instructions.md", "You are a test agent.\n"),
    (
        "agent/scripted.toml",
        "[[rules]]\nreply = \"got: {{ user }}\"\n",
    ),
];

const SECRET: &str = "It's a Secret to Everybody";
const TOKEN: &str = "tok-123";

/// One channel with every kind of route the tests need.
const GH: &str = r#"
auth = "hmac"
secret_env = "GH_SECRET"
signature_header = "X-Hub-Signature-256"

[[routes]]
method = "POST"
path = "/github"
body_schema = { type = "object", required = ["action"], properties = { action = { type = "string" } } }
message = "PR {{ body.pull_request.number }} was {{ body.action }}"
continuation_key = "pr:{{ body.repository.full_name }}#{{ body.pull_request.number }}"
delivery_id = "{{ headers['x-github-delivery'] | default('') }}"
admission = "coalesce"

[[routes]]
method = "POST"
path = "/unset"
secret_env = "NOT_SET_ANYWHERE"
signature_header = "X-Sig"
auth = "hmac"
message = "never"

[[routes]]
method = "POST"
path = "/bearer"
auth = "bearer"
token_env = "GH_TOKEN"
message = "bearer says {{ body.text }}"

[[routes]]
method = "POST"
path = "/chat"
auth = "default"
continuation_key = "{{ body.thread }}"
message = "{{ body.text }}"

[[routes]]
method = "GET"
path = "/search"
auth = "default"
query_schema = { type = "object", required = ["q"], properties = { q = { type = "string", minLength = 1 } } }
message = "search {{ query.q }}"

[[routes]]
method = "POST"
path = "/task/{id}"
auth = "default"
mode = "task"
continuation_key = "task-{{ params.id }}"
message = "run task {{ params.id }}"

[[routes]]
method = "POST"
path = "/"
auth = "default"
"#;

/// Writes the base project plus `extra` files and discovers it, refusing
/// any diagnostic (the manifests here must be clean).
fn write_project(root: &Path, extra: &[(&str, String)]) -> Project {
    for (path, content) in BASE
        .iter()
        .map(|(p, c)| (*p, (*c).to_owned()))
        .chain(extra.iter().map(|(p, c)| (*p, c.clone())))
    {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
    let d = discover(root);
    assert!(d.diagnostics.is_empty(), "{:#?}", d.diagnostics);
    d.project.unwrap()
}

fn secrets() -> channels::Secrets {
    let map: HashMap<&str, &str> = HashMap::from([("GH_SECRET", SECRET), ("GH_TOKEN", TOKEN)]);
    Arc::new(move |name| map.get(name).map(|v| (*v).to_owned()))
}

struct Server {
    dir: Option<TempDir>,
    host: Host,
    channels: Channels,
    base: String,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    client: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.task.abort();
    }
}

impl Server {
    /// Stops serving and delivering, keeping the project and its state.
    fn stop(mut self) -> TempDir {
        self.shutdown.cancel();
        self.task.abort();
        self.dir.take().unwrap()
    }
}

/// Serves `extra` (channel manifests) in a fresh project.
async fn serve(extra: &[(&str, String)]) -> Server {
    serve_in(tempfile::tempdir().unwrap(), extra, |c| c.router()).await
}

async fn serve_in(
    dir: TempDir,
    extra: &[(&str, String)],
    router: impl FnOnce(&Channels) -> Router,
) -> Server {
    let project = write_project(dir.path(), extra);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let host = Host::builder(project, store).build().await.unwrap();
    let shutdown = CancellationToken::new();
    let mut options = Options::default();
    options.secrets = secrets();
    let channels = Channels::start(
        host.clone(),
        &host.project().channels,
        shutdown.clone(),
        options,
    );
    let app = Router::new().nest("/v1/channels", router(&channels));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    bdk_models::net::install_crypto_provider();
    Server {
        dir: Some(dir),
        host,
        channels,
        base,
        shutdown,
        task,
        // A client per test: pooled connections belong to the runtime that
        // opened them, and every test has its own runtime.
        client: reqwest::Client::new(),
    }
}

impl Server {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&[u8]>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let mut req = self
            .client
            .request(method, format!("{}/v1/channels{path}", self.base));
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_vec());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let bytes = serde_json::to_vec(body).unwrap();
        self.send(reqwest::Method::POST, path, Some(&bytes), &[])
            .await
    }

    /// Waits for the turn a 202 answer started and returns the session's events.
    async fn settle(&self, answer: &Value) -> Vec<Envelope> {
        let sid = SessionId::parse(answer["sessionId"].as_str().unwrap()).unwrap();
        let turn = TurnId::from_string(answer["turnId"].as_str().unwrap());
        let result = tokio::time::timeout(DEADLINE, self.host.wait_turn(&sid, &turn))
            .await
            .unwrap()
            .unwrap();
        assert!(result.ok, "{result:?}");
        self.host.events(&sid, 0, None).await.unwrap()
    }
}

fn received(events: &[Envelope]) -> Vec<(String, Vec<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.event {
            Event::MessageReceived(m) => Some((m.message.clone(), m.delivery_ids.clone())),
            _ => None,
        })
        .collect()
}

fn pr_event(action: &str, number: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "action": action,
        "pull_request": { "number": number },
        "repository": { "full_name": "octo/repo" },
    }))
    .unwrap()
}

#[tokio::test]
async fn hmac_signatures_are_verified_over_the_raw_body() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let body = pr_event("opened", 7);
    let signature = channels::sign(SECRET.as_bytes(), &body);

    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/github",
            Some(&body),
            &[
                ("X-Hub-Signature-256", &signature),
                ("X-GitHub-Delivery", "d-1"),
            ],
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["created"], true);
    assert_eq!(answer["continuationToken"], "gh:pr:octo/repo#7");
    assert_eq!(answer["deliveryId"], "d-1");
    let events = s.settle(&answer).await;
    assert_eq!(
        received(&events),
        [("PR 7 was opened".to_owned(), vec!["d-1".to_owned()])]
    );
    // Channel-authenticated sessions belong to no principal.
    let sid = SessionId::parse(answer["sessionId"].as_str().unwrap()).unwrap();
    let record = s.host.session(&sid, None).await.unwrap();
    assert_eq!(record.channel, "gh");
    assert_eq!(record.principal, None);

    // A signature over other bytes, a signature under another secret, a
    // malformed one and none at all are all refused the same way.
    let tampered = pr_event("closed", 7);
    let other_secret = channels::sign(b"another secret", &body);
    for headers in [
        vec![("X-Hub-Signature-256", signature.as_str())],
        vec![("X-Hub-Signature-256", other_secret.as_str())],
        vec![("X-Hub-Signature-256", "sha256=nothex")],
        vec![],
    ] {
        let (status, answer) = s
            .send(
                reqwest::Method::POST,
                "/gh/github",
                Some(&tampered),
                &headers,
            )
            .await;
        assert_eq!(status, 401, "{headers:?}: {answer}");
        assert_eq!(answer["ok"], false);
        assert_eq!(answer["error"], "unauthorized");
    }
    // A route whose secret is not configured refuses everything.
    let unset = channels::sign(b"", b"{}");
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/unset",
            Some(b"{}"),
            &[("X-Sig", &unset)],
        )
        .await;
    assert_eq!(status, 401, "{answer}");
    // Nothing but the first request created a session.
    assert_eq!(s.host.list_sessions(None).await.unwrap().len(), 1);
}

#[tokio::test]
async fn bearer_routes_compare_the_configured_token() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let body = br#"{"text":"hello"}"#;
    for auth in [None, Some("Bearer wrong"), Some("Basic tok-123")] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        let (status, answer) = s
            .send(reqwest::Method::POST, "/gh/bearer", Some(body), &headers)
            .await;
        assert_eq!(status, 401, "{auth:?}: {answer}");
        assert_eq!(answer["error"], "unauthorized");
    }
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/bearer",
            Some(body),
            &[("Authorization", "Bearer tok-123")],
        )
        .await;
    assert_eq!(status, 202, "{answer}");
    let events = s.settle(&answer).await;
    assert_eq!(received(&events)[0].0, "bearer says hello");
}

#[tokio::test]
async fn bodies_are_checked_before_anything_runs() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let signed = |body: &[u8]| channels::sign(SECRET.as_bytes(), body);

    // Schema violation: `action` is required and must be a string.
    let body = br#"{"action": 5}"#;
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/github",
            Some(body),
            &[("X-Hub-Signature-256", &signed(body))],
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "invalid_body");
    let errors = answer["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap().contains("/action")),
        "{answer}"
    );

    // Not JSON at all.
    let body = b"{not json";
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/github",
            Some(body),
            &[("X-Hub-Signature-256", &signed(body))],
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "invalid_json");

    // A non-JSON content type.
    let resp = s
        .client
        .post(format!("{}/v1/channels/gh/chat", s.base))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE.as_u16());
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["error"], "unsupported_media_type");

    // A template that reads a field the body lacks.
    let body = br#"{"action": "opened"}"#;
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/github",
            Some(body),
            &[("X-Hub-Signature-256", &signed(body))],
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "invalid_request");
    assert!(
        answer["message"].as_str().unwrap().contains("`message`"),
        "{answer}"
    );

    // A continuation key that renders empty.
    let (status, answer) = s
        .post("/gh/chat", &json!({"thread": " ", "text": "x"}))
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "invalid_request");

    // A route without a message template and a request without a body.
    let (status, answer) = s.send(reqwest::Method::POST, "/gh", None, &[]).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"], "invalid_request");

    // A method the path does not declare.
    let (status, answer) = s.send(reqwest::Method::PUT, "/gh/chat", None, &[]).await;
    assert_eq!(status, 405, "{answer}");
    assert_eq!(answer["error"], "method_not_allowed");

    assert!(s.host.list_sessions(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn query_parameters_are_validated_and_rendered() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    for query in ["", "?q=", "?other=1"] {
        let (status, answer) = s
            .send(
                reqwest::Method::GET,
                &format!("/gh/search{query}"),
                None,
                &[],
            )
            .await;
        assert_eq!(status, 400, "{query}: {answer}");
        assert_eq!(answer["error"], "invalid_query");
        assert!(!answer["errors"].as_array().unwrap().is_empty());
    }
    let (status, answer) = s
        .send(reqwest::Method::GET, "/gh/search?q=rust%20async", None, &[])
        .await;
    assert_eq!(status, 202, "{answer}");
    let events = s.settle(&answer).await;
    assert_eq!(received(&events)[0].0, "search rust async");
    // A default-auth route reached without the server's auth layer runs as
    // `anonymous`.
    let sid = SessionId::parse(answer["sessionId"].as_str().unwrap()).unwrap();
    let record = s.host.session(&sid, None).await.unwrap();
    assert_eq!(record.principal.as_deref(), Some(channels::ANONYMOUS));
}

#[tokio::test]
async fn a_route_without_a_message_template_sends_the_body() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let (status, answer) = s.post("/gh", &json!("just text")).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(received(&s.settle(&answer).await)[0].0, "just text");
    let (status, answer) = s.post("/gh", &json!({"a": [1, 2]})).await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(received(&s.settle(&answer).await)[0].0, r#"{"a":[1,2]}"#);
}

#[tokio::test]
async fn the_same_key_continues_the_same_session() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let (status, first) = s
        .post("/gh/chat", &json!({"thread": "t-1", "text": "one"}))
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["created"], true);
    assert_eq!(first["continuationToken"], "gh:t-1");
    s.settle(&first).await;

    let (status, second) = s
        .post("/gh/chat", &json!({"thread": "t-1", "text": "two"}))
        .await;
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["created"], false);
    assert_eq!(second["sessionId"], first["sessionId"]);
    // Channel tokens name the conversation and do not rotate.
    assert_eq!(second["continuationToken"], "gh:t-1");
    assert_ne!(second["deliveryId"], first["deliveryId"]);
    let events = s.settle(&second).await;
    let messages: Vec<String> = received(&events).into_iter().map(|(m, _)| m).collect();
    assert_eq!(messages, ["one", "two"]);
    let replies: Vec<&str> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::TurnCompleted(t) => Some(t.reply.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(replies, ["got: one", "got: two"]);

    // Host code hands messages to the same conversation through the API.
    let accepted = s
        .channels
        .receive(
            "gh",
            Receive {
                message: "three".into(),
                continuation_key: Some("t-1".into()),
                delivery_id: Some("dlv-host".into()),
                ..Receive::default()
            },
        )
        .await
        .unwrap();
    assert!(!accepted.created);
    assert_eq!(accepted.session_id.as_str(), first["sessionId"]);
    assert_eq!(accepted.delivery_id, "dlv-host");
    let answer = serde_json::to_value(&accepted).unwrap();
    let events = s.settle(&answer).await;
    assert_eq!(
        received(&events).last().unwrap(),
        &("three".to_owned(), vec!["dlv-host".to_owned()])
    );
    assert!(matches!(
        s.channels.receive("nope", Receive::default()).await,
        Err(channels::ChannelError::UnknownChannel(_))
    ));

    // Another key is another conversation.
    let (status, other) = s
        .post("/gh/chat", &json!({"thread": "t-2", "text": "four"}))
        .await;
    assert_eq!(status, 202, "{other}");
    assert_eq!(other["created"], true);
    assert_ne!(other["sessionId"], first["sessionId"]);
    assert_eq!(received(&s.settle(&other).await).len(), 1);
    assert_eq!(s.host.list_sessions(None).await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_requests_create_one_session() {
    let s = Arc::new(serve(&[("agent/channels/gh.toml", GH.to_owned())]).await);
    let mut tasks = Vec::new();
    for i in 0..16 {
        let s = Arc::clone(&s);
        tasks.push(tokio::spawn(async move {
            s.post(
                "/gh/chat",
                &json!({"thread": "race", "text": format!("m{i}")}),
            )
            .await
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        let (status, answer) = t.await.unwrap();
        assert_eq!(status, 202, "{answer}");
        answers.push(answer);
    }
    let created = answers.iter().filter(|a| a["created"] == true).count();
    assert_eq!(created, 1, "{answers:#?}");
    let sid = &answers[0]["sessionId"];
    assert!(
        answers.iter().all(|a| &a["sessionId"] == sid),
        "{answers:#?}"
    );
    let sessions = s.host.list_sessions(None).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].continuation_token, "gh:race");
    // Every message reached the one session (preempted turns included).
    let id = SessionId::parse(sid.as_str().unwrap()).unwrap();
    let events = s.host.events(&id, 0, None).await.unwrap();
    assert_eq!(received(&events).len(), 16);
}

#[tokio::test]
async fn task_sessions_refuse_follow_ups() {
    let s = serve(&[("agent/channels/gh.toml", GH.to_owned())]).await;
    let (status, first) = s
        .send(reqwest::Method::POST, "/gh/task/42", None, &[])
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["continuationToken"], "gh:task-42");
    let events = s.settle(&first).await;
    assert_eq!(received(&events)[0].0, "run task 42");
    let (status, again) = s
        .send(reqwest::Method::POST, "/gh/task/42", None, &[])
        .await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["error"], "task_session");
    // Another id is another task.
    let (status, other) = s
        .send(reqwest::Method::POST, "/gh/task/43", None, &[])
        .await;
    assert_eq!(status, 202, "{other}");
    assert_ne!(other["sessionId"], first["sessionId"]);
}

#[tokio::test]
async fn the_server_auth_layer_applies_to_default_routes_only() {
    // A stand-in for the server's auth chain that refuses everyone.
    let refuse = axum::middleware::from_fn(
        |_req: axum::extract::Request, _next: axum::middleware::Next| async {
            (StatusCode::UNAUTHORIZED, "server auth refused").into_response()
        },
    );
    let s = serve_in(
        tempfile::tempdir().unwrap(),
        &[("agent/channels/gh.toml", GH.to_owned())],
        move |c| c.router_with_auth(refuse),
    )
    .await;
    let (status, _) = s
        .post("/gh/chat", &json!({"thread": "t", "text": "x"}))
        .await;
    assert_eq!(status, 401);
    let (status, answer) = s
        .send(
            reqwest::Method::POST,
            "/gh/bearer",
            Some(br#"{"text":"hi"}"#),
            &[("Authorization", "Bearer tok-123")],
        )
        .await;
    assert_eq!(status, 202, "{answer}");
}

/// A local HTTP receiver: every POSTed JSON body goes into the channel,
/// and the answer has `status`.
async fn receiver(status: StatusCode) -> (String, mpsc::UnboundedReceiver<Value>, JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = Router::new()
        .route(
            "/hook",
            post(
                |State((tx, status)): State<(mpsc::UnboundedSender<Value>, StatusCode)>,
                 body: axum::body::Bytes| async move {
                    let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    status
                },
            ),
        )
        .with_state((tx, status));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (url, rx, task)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(DEADLINE, rx.recv())
        .await
        .expect("the receiver got nothing in time")
        .unwrap()
}

/// A channel with one default-auth route and the given events map.
fn events_channel(events: &str) -> String {
    format!(
        r#"
[[routes]]
method = "POST"
path = "/in"
continuation_key = "{{{{ body.key }}}}"
message = "{{{{ body.text }}}}"
{events}"#
    )
}

#[tokio::test]
async fn chosen_events_are_delivered_to_a_url() {
    let (url, mut rx, _r) = receiver(StatusCode::OK).await;
    let manifest = events_channel(&format!(
        "[[events]]\ntypes = [\"message.completed\", \"turn.completed\"]\nurl = \"{url}\"\nheaders = {{ X-Test = \"yes\" }}\n"
    ));
    let s = serve(&[("agent/channels/ops.toml", manifest)]).await;
    let (status, answer) = s
        .post("/ops/in", &json!({"key": "k", "text": "ping"}))
        .await;
    assert_eq!(status, 202, "{answer}");

    let first = next(&mut rx).await;
    assert_eq!(first["channel"], "ops");
    assert_eq!(first["sessionId"], answer["sessionId"]);
    assert_eq!(first["continuationToken"], "ops:k");
    let event = &first["event"];
    assert_eq!(event["type"], "message.completed");
    assert_eq!(event["sessionId"], answer["sessionId"]);
    assert_eq!(event["turnId"], answer["turnId"]);
    assert_eq!(event["data"]["text"], "got: ping");
    assert!(event["index"].as_u64().is_some() && event["at"].is_string());
    let second = next(&mut rx).await;
    assert_eq!(second["event"]["type"], "turn.completed");
    assert_eq!(second["event"]["data"]["reply"], "got: ping");
    assert!(second["event"]["index"].as_u64() > event["index"].as_u64());

    // A follow-up's events reach the receiver too, and nothing else does.
    let (status, again) = s
        .post("/ops/in", &json!({"key": "k", "text": "pong"}))
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(next(&mut rx).await["event"]["data"]["text"], "got: pong");
    assert_eq!(next(&mut rx).await["event"]["type"], "turn.completed");
    s.settle(&again).await;
    assert!(rx.try_recv().is_err());
}

#[tokio::test]
async fn events_are_delivered_to_a_command() {
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("delivered.ndjson");
    let manifest = events_channel(&format!(
        "[[events]]\ntypes = [\"message.completed\"]\ncommand = [\"sh\", \"-c\", \"cat >> \\\"$0\\\"\", \"{}\"]\n",
        file.display()
    ));
    let s = serve(&[("agent/channels/ops.toml", manifest)]).await;
    let (status, answer) = s.post("/ops/in", &json!({"key": "c", "text": "cmd"})).await;
    assert_eq!(status, 202, "{answer}");
    s.settle(&answer).await;
    // The command leaves no other trace to await, so poll its output file
    // with a bounded deadline.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let line = loop {
        if let Ok(text) = tokio::fs::read_to_string(&file).await
            && text.ends_with('\n')
        {
            break text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the command never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let lines: Vec<&str> = line.lines().collect();
    assert_eq!(lines.len(), 1, "{line}");
    let payload: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(payload["event"]["type"], "message.completed");
    assert_eq!(payload["event"]["data"]["text"], "got: cmd");
    assert_eq!(payload["continuationToken"], "ops:c");
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct LogBuf(Arc<Mutex<Vec<u8>>>);

impl Write for LogBuf {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// A current-thread runtime, so the thread-local log subscriber sees every
// task's logs.
#[tokio::test]
async fn a_failing_receiver_is_retried_then_logged_without_touching_the_turn() {
    let logs = LogBuf::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (bad_url, mut bad, _b) = receiver(StatusCode::INTERNAL_SERVER_ERROR).await;
    let (good_url, mut good, _g) = receiver(StatusCode::OK).await;
    // Rules run in order per event, so the good receiver hears of the event
    // only after the failing one has used up its attempts.
    let manifest = events_channel(&format!(
        "[[events]]\ntypes = [\"message.completed\"]\nurl = \"{bad_url}\"\nattempts = 3\nbackoff_ms = 10\n\n\
         [[events]]\ntypes = [\"message.completed\"]\nurl = \"{good_url}\"\n"
    ));
    let s = serve(&[("agent/channels/ops.toml", manifest)]).await;
    let (status, answer) = s
        .post("/ops/in", &json!({"key": "f", "text": "boom"}))
        .await;
    assert_eq!(status, 202, "{answer}");
    let events = s.settle(&answer).await;
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.event, Event::TurnCompleted(t) if t.reply == "got: boom"))
    );

    for _ in 0..3 {
        assert_eq!(next(&mut bad).await["event"]["type"], "message.completed");
    }
    assert_eq!(next(&mut good).await["event"]["data"]["text"], "got: boom");
    assert!(bad.try_recv().is_err(), "more than 3 attempts");
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("channel event delivery failed"))
        .unwrap_or_else(|| panic!("no failure logged:\n{text}"));
    assert!(line.contains("attempts=3"), "{line}");
    assert!(line.contains("500"), "{line}");
    assert!(line.contains("channel=ops"), "{line}");

    // The session goes on: a follow-up runs normally.
    let (status, again) = s
        .post("/ops/in", &json!({"key": "f", "text": "again"}))
        .await;
    assert_eq!(status, 202, "{again}");
    assert_eq!(received(&s.settle(&again).await).len(), 2);
}

#[tokio::test]
async fn delivery_resumes_after_a_restart_without_repeating_events() {
    let (url, mut rx, _r) = receiver(StatusCode::OK).await;
    let manifest = events_channel(&format!(
        "[[events]]\ntypes = [\"message.completed\", \"turn.completed\"]\nurl = \"{url}\"\n"
    ));
    let extra = [("agent/channels/ops.toml", manifest)];
    let s = serve(&extra).await;
    let (status, first) = s
        .post("/ops/in", &json!({"key": "r", "text": "before"}))
        .await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(next(&mut rx).await["event"]["data"]["text"], "got: before");
    // `turn.completed` comes after the cursor moved past `message.completed`.
    assert_eq!(next(&mut rx).await["event"]["type"], "turn.completed");
    s.settle(&first).await;

    // Stop everything and serve the same state again.
    let dir = s.stop();
    let s = serve_in(dir, &extra, |c| c.router()).await;
    let (status, second) = s
        .post("/ops/in", &json!({"key": "r", "text": "after"}))
        .await;
    assert_eq!(status, 202, "{second}");
    assert_eq!(second["sessionId"], first["sessionId"]);
    assert_eq!(second["created"], false);
    // Deliveries are ordered per session: had the first message been
    // delivered again, it would arrive before this one.
    let first_message = loop {
        let got = next(&mut rx).await;
        if got["event"]["type"] == "message.completed" {
            break got;
        }
    };
    assert_eq!(first_message["event"]["data"]["text"], "got: after");
    let cursor = s
        .host
        .store()
        .kv_get(
            channels::CURSOR_NAMESPACE,
            &format!("ops/{}", second["sessionId"].as_str().unwrap()),
        )
        .await
        .unwrap();
    assert!(cursor.is_some());
}
