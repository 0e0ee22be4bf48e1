//! Shared harness of the HTTP tests: a real project on disk (scripted model,
//! native tools, an agent-execution script), a real `FsStore`, the real
//! router served with `axum::serve` on 127.0.0.1:0, and reqwest as client.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bdk_core::host::Host;
use bdk_core::tool::native::native_tool;
use bdk_core::tool::{Effect, Tool, ToolContext};
use bdk_core::{Diagnostic, Project, discover};
use bdk_http::{Config, Mount};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tempfile::TempDir;

/// Every test gives up after this long rather than hang.
pub const DEADLINE: Duration = Duration::from_secs(20);

pub const RULES: &str = r#"
[[rules]]
user_regex = "(?i)weather in (?P<city>[A-Za-z]+)"
tool_calls = [{ name = "lookup", input = { city = "{{ captures.city }}" } }]
usage = { input_tokens = 100, output_tokens = 20 }

[[rules]]
tool_result = "lookup"
reply = "It is {{ result.temp }} degrees in {{ result.city }}."
usage = { input_tokens = 150, output_tokens = 10 }

[[rules]]
user_contains = "deploy"
tool_calls = [{ name = "deploy", input = { target = "prod" } }]

[[rules]]
tool_result = "deploy"
reply = "deploy result: {{ result_text }}"

[[rules]]
user_contains = "slow"
reply = "finally"
delay_ms = 30000

[[rules]]
reply = "echo: {{ user }}"
usage = { input_tokens = 10, output_tokens = 5 }
"#;

const LINT_TOML: &str = r#"
description = "Lints the workspace (runs as a script in the workspace)."
execution = "agent"
script = "lint.sh"

[input_schema]
type = "object"
"#;

#[derive(Deserialize, JsonSchema)]
struct Target {
    target: String,
}

#[derive(Deserialize, JsonSchema)]
struct Note {
    text: String,
}

/// `lookup` (read, [`bdk_testkit::rules::lookup_tool`]): `{city}` ->
/// `{city, temp: 21}`.
/// `deploy` (write, needs approval): `{target}` -> `"deployed to <target>"`.
/// `note` (write): `{text}` -> `{noted}`, or an error result for `"boom"`.
pub fn tools() -> Vec<Arc<dyn Tool>> {
    vec![
        bdk_testkit::rules::lookup_tool(),
        Arc::new(
            native_tool(
                "deploy",
                "Deploys to a target.",
                |t: Target, _ctx: ToolContext| async move {
                    Ok(json!(format!("deployed to {}", t.target)))
                },
            )
            .effect(Effect::Write)
            .needs_approval(true),
        ),
        Arc::new(
            native_tool(
                "note",
                "Writes a note.",
                |n: Note, _ctx: ToolContext| async move {
                    if n.text == "boom" {
                        Err("the note tool failed on purpose".to_owned())
                    } else {
                        Ok(json!({"noted": n.text}))
                    }
                },
            )
            .effect(Effect::Write),
        ),
    ]
}

/// A project on disk and its discovery result.
pub fn project(name: &str) -> (TempDir, Project, Vec<Diagnostic>) {
    project_with(name, &[])
}

/// [`project`] with more files (relative path, content) in its folder.
pub fn project_with(name: &str, extra: &[(&str, &str)]) -> (TempDir, Project, Vec<Diagnostic>) {
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![
        (
            "agent/agent.toml".to_owned(),
            format!(
                "name = \"{name}\"\ndescription = \"The {name} test agent.\"\nmodel = \"scripted\"\n\n# Two built-ins are exposed to direct callers; the rest are the model's.\n[builtin_tools]\ndirect = [\"read_file\", \"tag_artifact\"]\n"
            ),
        ),
        (
            "agent/instructions.md".to_owned(),
            "You are a test agent.\n".to_owned(),
        ),
        ("agent/scripted.toml".to_owned(), RULES.to_owned()),
        ("agent/tools/lint.toml".to_owned(), LINT_TOML.to_owned()),
        (
            "agent/tools/lint.sh".to_owned(),
            "#!/bin/sh\necho ok\n".to_owned(),
        ),
    ];
    files.extend(
        extra
            .iter()
            .map(|(path, content)| ((*path).to_owned(), (*content).to_owned())),
    );
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    (dir, d.project.unwrap(), d.diagnostics)
}

/// One agent: its project folder (also holding the state root) and its host.
pub struct Agent {
    pub dir: TempDir,
    pub host: Host,
    pub diagnostics: Vec<Diagnostic>,
}

pub async fn agent(name: &str) -> Agent {
    agent_with(name, &[]).await
}

/// [`agent`] over [`project_with`].
pub async fn agent_with(name: &str, extra: &[(&str, &str)]) -> Agent {
    let (dir, project, diagnostics) = project_with(name, extra);
    // As `bdk serve` builds it: with reminders.
    let host = bdk_testkit::host_over(project, &dir.path().join("state"), |b| {
        let b = b.extension(Arc::new(bdk_scheduler::Reminders::new()));
        tools().into_iter().fold(b, |b, t| b.tool(t))
    })
    .await;
    Agent {
        dir,
        host,
        diagnostics,
    }
}

impl Agent {
    pub fn mount(&self, slug: Option<&str>) -> Mount {
        Mount {
            slug: slug.map(str::to_owned),
            host: self.host.clone(),
            diagnostics: self.diagnostics.clone(),
            reload: None,
        }
    }
}

/// Serves `app` on a fresh loopback port; returns `http://127.0.0.1:<port>`.
pub async fn serve(mounts: Vec<Mount>, config: Config) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = bdk_http::app(mounts, config);
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}")
}

pub fn client() -> reqwest::Client {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A single-mode app over one fresh agent with the default config (local auth).
pub struct Single {
    pub agent: Agent,
    pub base: String,
    pub http: reqwest::Client,
}

pub async fn single(config: Config) -> Single {
    single_with(config, &[]).await
}

/// [`single`] over an agent with more files (see [`project_with`]).
pub async fn single_with(config: Config, extra: &[(&str, &str)]) -> Single {
    let agent = agent_with("solo", extra).await;
    let base = serve(vec![agent.mount(None)], config).await;
    Single {
        agent,
        base,
        http: client(),
    }
}

/// Asserts an error response: status and `error` code; returns the body.
pub async fn expect_error(resp: reqwest::Response, status: u16, code: &str) -> Value {
    let got = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap();
    assert_eq!(got, status, "unexpected status; body: {text}");
    assert!(
        ct.starts_with("application/json"),
        "content type {ct}: {text}"
    );
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["ok"], false, "{body}");
    assert_eq!(body["error"], code, "{body}");
    assert!(body["message"].is_string(), "{body}");
    body
}

/// Asserts a 200 JSON response with `ok: true`; returns the body.
pub async fn expect_ok(resp: reqwest::Response) -> Value {
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 200, "body: {text}");
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(body["ok"], true, "{body}");
    body
}

/// Reads NDJSON from a streaming response.
pub struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// Blank (heartbeat) lines seen so far.
    pub blanks: usize,
}

impl Lines {
    pub fn new(resp: reqwest::Response) -> Self {
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(
            resp.headers().get("content-type").unwrap(),
            "application/x-ndjson"
        );
        Self {
            resp,
            buf: Vec::new(),
            blanks: 0,
        }
    }

    /// The next event, or `None` when the body ended. Blank lines are skipped.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                let line = &line[..line.len() - 1];
                if line.iter().all(u8::is_ascii_whitespace) {
                    self.blanks += 1;
                    continue;
                }
                return Some(serde_json::from_slice(line).unwrap());
            }
            match tokio::time::timeout(DEADLINE, self.resp.chunk())
                .await
                .expect("stream stalled")
                .unwrap()
            {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None => {
                    assert!(self.buf.is_empty(), "stream ended mid-line");
                    return None;
                }
            }
        }
    }

    /// The next raw chunk of the body (nothing may be buffered).
    pub async fn raw_chunk(&mut self) -> Vec<u8> {
        assert!(self.buf.is_empty(), "unread lines are buffered");
        tokio::time::timeout(DEADLINE, self.resp.chunk())
            .await
            .expect("stream stalled")
            .unwrap()
            .expect("stream ended")
            .to_vec()
    }

    /// Events up to and including the first one matching `stop`.
    pub async fn until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out = Vec::new();
        loop {
            let e = self.next().await.expect("stream ended early");
            let done = stop(&e);
            out.push(e);
            if done {
                return out;
            }
        }
    }
}

pub fn is(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |e: &Value| e["type"] == kind
}

pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Parses an NDJSON body.
pub fn parse_ndjson(text: &str) -> Vec<Value> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Starts a session over HTTP; returns the response body.
pub async fn start(http: &reqwest::Client, base: &str, body: Value) -> Value {
    expect_ok(
        http.post(format!("{base}/v1/session"))
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await
}

/// Opens the stream of a session from `from`.
pub async fn stream(http: &reqwest::Client, base: &str, id: &str, from: u64) -> Lines {
    Lines::new(
        http.get(format!("{base}/v1/session/{id}/stream?startIndex={from}"))
            .send()
            .await
            .unwrap(),
    )
}

/// Waits for a session's turn to end (reading its stream from 0) and returns all events so far.
pub async fn settle(http: &reqwest::Client, base: &str, id: &str, turns: usize) -> Vec<Value> {
    let mut lines = stream(http, base, id, 0).await;
    let mut ended = 0;
    let mut out = Vec::new();
    while ended < turns {
        let e = lines.next().await.expect("stream ended early");
        if e["type"] == "session.waiting"
            && out.iter().any(|p: &Value| p["type"] == "message.received")
        {
            ended += 1;
        }
        out.push(e);
    }
    out
}

/// The recorded events of a session (NDJSON dump).
pub async fn events(http: &reqwest::Client, base: &str, id: &str) -> Vec<Value> {
    let resp = http
        .get(format!("{base}/v1/session/{id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    parse_ndjson(&resp.text().await.unwrap())
}

/// `GET url`, sent; the answer, whatever its status.
pub async fn get(http: &reqwest::Client, url: impl reqwest::IntoUrl) -> reqwest::Response {
    http.get(url).send().await.unwrap()
}

/// `POST url` with `body` as JSON, sent; the answer, whatever its status.
pub async fn post(
    http: &reqwest::Client,
    url: impl reqwest::IntoUrl,
    body: &impl serde::Serialize,
) -> reqwest::Response {
    http.post(url).json(body).send().await.unwrap()
}
