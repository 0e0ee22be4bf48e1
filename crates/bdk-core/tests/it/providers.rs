#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The remote model providers against fake servers on `127.0.0.1:0` that
//! speak HTTP/1.1 and server-sent events byte for byte: streaming, split
//! UTF-8, parallel tool-call deltas, keep-alive comments, cache usage, error
//! bodies and retries, disconnects, timeouts, cancellation, request bodies,
//! and the weather example end to end through the host.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bdk_core::host::Host;
use bdk_core::project::ProviderConfig;
use bdk_events::{Envelope, Event, Usage};
use bdk_models::anthropic::{AnthropicConfig, AnthropicModel};
use bdk_models::http::{HttpOptions, RetryPolicy};
use bdk_models::openai::{OpenAiConfig, OpenAiModel};
use bdk_models::resolve::resolve_model;
use bdk_models::{
    Message, Model, ModelError, ModelEvent, ModelRequest, StopReason, ToolCall, ToolDefinition,
};
use bdk_store::{FsStore, Store};
use bdk_testkit::session;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

// ---------------------------------------------------------------------------
// The fake server

/// One piece of a streamed response body.
enum Part {
    /// Written as one HTTP chunk, then flushed.
    Bytes(Vec<u8>),
    /// Waits until the test says go (to force a read boundary).
    Wait(oneshot::Receiver<()>),
    /// Drops the connection without finishing the body.
    Cut,
    /// Sends nothing more and waits for the client to close the connection.
    Hang,
}

/// How the server answers one request.
enum Reply {
    /// A complete response with a body.
    Status {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// `200` with a chunked `text/event-stream` body.
    Stream(Vec<Part>),
    /// Closes the connection right after reading the request.
    Reset,
}

/// A request as the server saw it.
#[derive(Debug)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: Value,
    at: Instant,
}

enum Observed {
    Request(Seen),
    /// A `Hang` response saw the client close the connection.
    Closed,
}

struct Fake {
    base: String,
    observed: mpsc::UnboundedReceiver<Observed>,
}

impl Fake {
    async fn start(replies: Vec<Reply>) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, observed) = mpsc::unbounded_channel();
        let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(serve(socket, Arc::clone(&replies), tx.clone()));
            }
        });
        Fake { base, observed }
    }

    /// The next observation, failing the test after 10 s.
    async fn next(&mut self) -> Observed {
        tokio::time::timeout(Duration::from_secs(10), self.observed.recv())
            .await
            .expect("the fake server observed nothing within 10 s")
            .expect("the fake server stopped")
    }

    async fn request(&mut self) -> Seen {
        match self.next().await {
            Observed::Request(seen) => seen,
            Observed::Closed => panic!("expected a request, saw a closed connection"),
        }
    }

    /// Everything observed so far, without waiting.
    fn drain(&mut self) -> Vec<Observed> {
        let mut out = Vec::new();
        while let Ok(o) = self.observed.try_recv() {
            out.push(o);
        }
        out
    }
}

async fn read_request(socket: &mut TcpStream) -> Option<Seen> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next().unwrap().split(' ');
    let method = request_line.next().unwrap().to_owned();
    let path = request_line.next().unwrap().to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .map_or(0, |v| v.parse().unwrap());
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = socket.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&body).unwrap()
    };
    Some(Seen {
        method,
        path,
        headers,
        body,
        at: Instant::now(),
    })
}

async fn serve(
    mut socket: TcpStream,
    replies: Arc<Mutex<VecDeque<Reply>>>,
    tx: mpsc::UnboundedSender<Observed>,
) {
    while let Some(seen) = read_request(&mut socket).await {
        let _ = tx.send(Observed::Request(seen));
        let reply = replies.lock().unwrap().pop_front();
        let reply = reply.unwrap_or(Reply::Status {
            status: 500,
            headers: Vec::new(),
            body: "the fake server has no reply scripted for this request".into(),
        });
        match reply {
            Reply::Reset => return,
            Reply::Status {
                status,
                headers,
                body,
            } => {
                let mut head = format!(
                    "HTTP/1.1 {status} Whatever\r\ncontent-type: application/json\r\ncontent-length: {}\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    head.push_str(&format!("{k}: {v}\r\n"));
                }
                head.push_str("\r\n");
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(body.as_bytes()).await.is_err()
                {
                    return;
                }
            }
            Reply::Stream(parts) => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                for part in parts {
                    match part {
                        Part::Bytes(bytes) => {
                            let mut chunk = format!("{:x}\r\n", bytes.len()).into_bytes();
                            chunk.extend_from_slice(&bytes);
                            chunk.extend_from_slice(b"\r\n");
                            if socket.write_all(&chunk).await.is_err() {
                                return;
                            }
                            let _ = socket.flush().await;
                        }
                        Part::Wait(go) => {
                            let _ = go.await;
                        }
                        Part::Cut => return,
                        Part::Hang => {
                            let mut sink = [0u8; 1024];
                            loop {
                                match socket.read(&mut sink).await {
                                    Ok(0) | Err(_) => break,
                                    Ok(_) => {}
                                }
                            }
                            let _ = tx.send(Observed::Closed);
                            return;
                        }
                    }
                }
                if socket.write_all(b"0\r\n\r\n").await.is_err() {
                    return;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Helpers

fn cassette(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cassettes")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A cassette written in pieces of `size` bytes (so lines, and characters,
/// are split across HTTP chunks).
fn pieces(bytes: &[u8], size: usize) -> Vec<Part> {
    bytes
        .chunks(size)
        .map(|c| Part::Bytes(c.to_vec()))
        .collect()
}

fn stream_of(name: &str) -> Reply {
    Reply::Stream(pieces(&cassette(name), 61))
}

fn json_error(status: u16, headers: Vec<(&'static str, String)>, body: Value) -> Reply {
    Reply::Status {
        status,
        headers,
        body: body.to_string(),
    }
}

fn quick_retries() -> HttpOptions {
    HttpOptions {
        step_timeout: Duration::from_secs(20),
        retry: RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
        },
    }
}

fn openai(fake: &Fake, http: HttpOptions) -> OpenAiModel {
    OpenAiModel::new(OpenAiConfig {
        id: "xai/grok-4.5".into(),
        base_url: format!("{}/v1", fake.base),
        api_key: Some("xai-test-key".into()),
        key_env: Some("XAI_API_KEY".into()),
        http,
    })
}

fn anthropic(fake: &Fake, http: HttpOptions) -> AnthropicModel {
    AnthropicModel::new(AnthropicConfig {
        id: "anthropic/claude-sonnet-4-5".into(),
        base_url: fake.base.clone(),
        api_key: "sk-ant-test".into(),
        key_env: Some("ANTHROPIC_API_KEY".into()),
        max_tokens: 8192,
        http,
    })
}

fn weather_tool() -> ToolDefinition {
    ToolDefinition {
        name: "get_weather".into(),
        description: "Current weather for a city.".into(),
        input_schema: json!({
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        }),
    }
}

fn ask(text: &str) -> ModelRequest {
    ModelRequest {
        model: "grok-4.5".into(),
        system: "You are terse.".into(),
        messages: vec![Message::User { text: text.into() }],
        tools: Default::default(),
        effort: None,
        tool_choice: None,
        max_tokens: None,
    }
}

/// Runs a step to its end: the events, then the error it ended with, if any.
async fn run(model: &dyn Model, request: ModelRequest) -> (Vec<ModelEvent>, Option<ModelError>) {
    let mut stream = match model.step(request, CancellationToken::new()).await {
        Ok(stream) => stream,
        Err(e) => return (Vec::new(), Some(e)),
    };
    let mut events = Vec::new();
    let collect = async {
        while let Some(item) = stream.next().await {
            match item {
                Ok(e) => events.push(e),
                Err(e) => return Some(e),
            }
        }
        None
    };
    let error = tokio::time::timeout(Duration::from_secs(20), collect)
        .await
        .expect("the step did not end within 20 s");
    (events, error)
}

async fn run_ok(model: &dyn Model, request: ModelRequest) -> Vec<ModelEvent> {
    let (events, error) = run(model, request).await;
    if let Some(e) = error {
        panic!("step failed: {e}; events so far: {events:?}");
    }
    events
}

fn text_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn reasoning_of(events: &[ModelEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ReasoningDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn calls_of(events: &[ModelEvent]) -> Vec<ToolCall> {
    events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn usage_of(events: &[ModelEvent]) -> Usage {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            ModelEvent::Usage(u) => Some(*u),
            _ => None,
        })
        .expect("a usage event")
}

/// The stop reason, which must be the last event.
fn stop_of(events: &[ModelEvent]) -> StopReason {
    match events.last() {
        Some(ModelEvent::Stop(reason)) => reason.clone(),
        other => panic!("the last event should be Stop, got {other:?}"),
    }
}

fn provider_error(e: Option<ModelError>) -> String {
    match e {
        Some(ModelError::Provider(m)) => m,
        other => panic!("expected a provider error, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// OpenAI-compatible

#[tokio::test]
async fn openai_streams_text_with_keep_alives_and_cached_usage() {
    let mut fake = Fake::start(vec![stream_of("openai_text.sse")]).await;
    let model = openai(&fake, quick_retries());
    let events = run_ok(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hello from the café ☕.");
    assert_eq!(
        usage_of(&events),
        Usage {
            input_tokens: 176,
            output_tokens: 9,
            cache_read_tokens: 1024,
            cache_write_tokens: 0,
        }
    );
    assert_eq!(stop_of(&events), StopReason::Stop);
    assert!(calls_of(&events).is_empty());

    let seen = fake.request().await;
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.headers["authorization"], "Bearer xai-test-key");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(
        seen.body,
        json!({
            "model": "grok-4.5",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "hi"},
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[tokio::test]
async fn openai_assembles_parallel_tool_calls_and_maps_the_conversation() {
    let mut fake = Fake::start(vec![stream_of("openai_tool_calls.sse")]).await;
    let model = openai(&fake, quick_retries());
    let request = ModelRequest {
        model: "gpt-4.1".into(),
        system: "sys".into(),
        messages: vec![
            Message::User {
                text: "Weather in Lyon?".into(),
            },
            Message::Assistant {
                text: "Checking.".into(),
                tool_calls: vec![ToolCall {
                    id: "call_0".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Lyon"}),
                }],
            },
            Message::Tool {
                call_id: "call_0".into(),
                name: "get_weather".into(),
                content: "{\"temperatureC\":18}".into(),
                is_error: false,
                images: Vec::new(),
            },
            Message::Assistant {
                text: "18 degrees.".into(),
                tool_calls: Vec::new(),
            },
            Message::User {
                text: "And Paris and Tokyo?".into(),
            },
        ],
        tools: vec![weather_tool()].into(),
        effort: Some("high".into()),
        tool_choice: None,
        max_tokens: None,
    };
    let events = run_ok(&model, request).await;
    assert_eq!(
        calls_of(&events),
        vec![
            ToolCall {
                id: "call_a1".into(),
                name: "get_weather".into(),
                input: json!({"city": "Paris"}),
            },
            ToolCall {
                id: "call_b2".into(),
                name: "get_weather".into(),
                input: json!({"city": "Tōkyō", "unit": "fahrenheit"}),
            },
        ]
    );
    assert_eq!(stop_of(&events), StopReason::ToolCalls);
    assert_eq!(usage_of(&events).input_tokens, 310);
    assert_eq!(text_of(&events), "");

    let seen = fake.request().await;
    assert_eq!(
        seen.body,
        json!({
            "model": "gpt-4.1",
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "Weather in Lyon?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_0", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{\"city\":\"Lyon\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "call_0", "content": "{\"temperatureC\":18}"},
                {"role": "assistant", "content": "18 degrees."},
                {"role": "user", "content": "And Paris and Tokyo?"},
            ],
            "tools": [{
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}},
                        "required": ["city"],
                    },
                },
            }],
            "stream": true,
            "stream_options": {"include_usage": true},
            "reasoning_effort": "high",
        })
    );
}

#[tokio::test]
async fn openai_streams_reasoning_deltas() {
    let fake = Fake::start(vec![stream_of("openai_reasoning.sse")]).await;
    let model = openai(&fake, quick_retries());
    let events = run_ok(&model, ask("2+2?")).await;
    assert_eq!(reasoning_of(&events), "The user asks for 2+2.");
    assert_eq!(text_of(&events), "4");
    // Reasoning comes before the answer, as it streamed.
    assert!(matches!(events[0], ModelEvent::ReasoningDelta(_)));
    let usage = usage_of(&events);
    assert_eq!((usage.input_tokens, usage.cache_read_tokens), (8, 6));
}

#[tokio::test]
async fn a_character_split_across_two_reads_arrives_whole() {
    let (go, wait) = oneshot::channel();
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Caf\"}}]}\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\u{e9} \u{1F600}\"}}]}\n\n";
    let bytes = first.as_bytes();
    // Cut inside the two-byte `é` of the second event.
    let cut = first.find('\u{e9}').unwrap() + 1;
    let rest = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let fake = Fake::start(vec![Reply::Stream(vec![
        Part::Bytes(bytes[..cut].to_vec()),
        Part::Wait(wait),
        Part::Bytes(bytes[cut..].to_vec()),
        Part::Bytes(rest.as_bytes().to_vec()),
    ])])
    .await;
    let model = openai(&fake, quick_retries());
    let mut stream = model
        .step(ask("hi"), CancellationToken::new())
        .await
        .unwrap();
    // The first event is out, so the client has consumed the first write and
    // holds half of `é`; only now does the server send the other half.
    let first_event = stream.next().await.unwrap().unwrap();
    assert_eq!(first_event, ModelEvent::TextDelta("Caf".into()));
    go.send(()).unwrap();
    let mut rest_events = Vec::new();
    while let Some(item) = stream.next().await {
        rest_events.push(item.unwrap());
    }
    assert_eq!(
        rest_events[0],
        ModelEvent::TextDelta("\u{e9} \u{1F600}".into())
    );
    assert_eq!(stop_of(&rest_events), StopReason::Stop);
}

#[tokio::test]
async fn openai_missing_key_fails_at_once_naming_the_variable() {
    let none = ProviderConfig::default();
    let env = |_: &str| None;
    let started = Instant::now();
    let model = resolve_model("xai/grok-4.5", &none, HttpOptions::default(), &env);
    let error = match model.step(ask("hi"), CancellationToken::new()).await {
        Err(e) => e,
        Ok(_) => panic!("a model without its key must not start a step"),
    };
    assert!(started.elapsed() < Duration::from_secs(2));
    match &error {
        ModelError::Config(m) => assert!(m.starts_with("XAI_API_KEY is not set"), "{m}"),
        other => panic!("expected a config error, got {other:?}"),
    }
    assert!(error.to_string().contains("XAI_API_KEY"));
    let model = resolve_model("openai/gpt-4.1", &none, HttpOptions::default(), &env);
    assert!(
        model
            .step(ask("hi"), CancellationToken::new())
            .await
            .err()
            .unwrap()
            .to_string()
            .contains("OPENAI_API_KEY")
    );
}

#[tokio::test]
async fn presets_reach_their_base_urls_with_their_keys() {
    // vllm/: base and key from its environment variables.
    let mut fake = Fake::start(vec![stream_of("openai_text.sse")]).await;
    let base = format!("{}/v1", fake.base);
    let env = move |var: &str| match var {
        "VLLM_BASE_URL" => Some(base.clone()),
        "VLLM_API_KEY" => Some("vllm-key".to_owned()),
        _ => None,
    };
    let model = resolve_model(
        "vllm/meta-llama/Llama-3.1-8B-Instruct",
        &ProviderConfig::default(),
        quick_retries(),
        &env,
    );
    assert_eq!(model.id(), "vllm/meta-llama/Llama-3.1-8B-Instruct");
    let mut request = ask("hi");
    request.model = "meta-llama/Llama-3.1-8B-Instruct".into();
    run_ok(model.as_ref(), request).await;
    let seen = fake.request().await;
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.headers["authorization"], "Bearer vllm-key");
    assert_eq!(seen.body["model"], "meta-llama/Llama-3.1-8B-Instruct");

    // ollama/: no key at all; agent.toml's base_url wins over OLLAMA_HOST.
    let mut fake = Fake::start(vec![stream_of("openai_text.sse")]).await;
    let provider = ProviderConfig {
        base_url: Some(format!("{}/v1", fake.base)),
        api_key_env: None,
    };
    let env = |var: &str| (var == "OLLAMA_HOST").then(|| "127.0.0.1:9".to_owned());
    let model = resolve_model("ollama/llama3.2", &provider, quick_retries(), &env);
    run_ok(model.as_ref(), ask("hi")).await;
    let seen = fake.request().await;
    assert!(!seen.headers.contains_key("authorization"), "{seen:?}");

    // anthropic/: x-api-key from ANTHROPIC_API_KEY at a [provider] base.
    let mut fake = Fake::start(vec![stream_of("anthropic_text.sse")]).await;
    let provider = ProviderConfig {
        base_url: Some(fake.base.clone()),
        api_key_env: None,
    };
    let env = |var: &str| (var == "ANTHROPIC_API_KEY").then(|| "sk-ant-env".to_owned());
    let model = resolve_model(
        "anthropic/claude-haiku-4-5",
        &provider,
        quick_retries(),
        &env,
    );
    run_ok(model.as_ref(), ask("hi")).await;
    let seen = fake.request().await;
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], "sk-ant-env");
}

// ---------------------------------------------------------------------------
// Errors and retries

#[tokio::test]
async fn an_auth_error_is_clear_and_not_retried() {
    let mut fake = Fake::start(vec![json_error(
        401,
        Vec::new(),
        json!({"error": {"message": "Incorrect API key provided: xai-****", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    )])
    .await;
    let model = openai(&fake, quick_retries());
    let (_, error) = run(&model, ask("hi")).await;
    let message = provider_error(error);
    assert_eq!(
        message,
        "authentication failed (HTTP 401): Incorrect API key provided: xai-****; check the key in XAI_API_KEY"
    );
    fake.request().await;
    assert!(fake.drain().is_empty(), "an auth error must not be retried");
}

#[tokio::test]
async fn a_context_length_error_says_so() {
    let fake = Fake::start(vec![json_error(
        400,
        Vec::new(),
        json!({"error": {"message": "This model's maximum context length is 131072 tokens. However, your messages resulted in 140000 tokens.", "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    )])
    .await;
    let model = openai(&fake, quick_retries());
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert!(
        message.starts_with("the conversation does not fit the model's context window (HTTP 400): This model's maximum context length"),
        "{message}"
    );

    let fake = Fake::start(vec![json_error(
        400,
        Vec::new(),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 215000 tokens > 200000 maximum"}}),
    )])
    .await;
    let model = anthropic(&fake, quick_retries());
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert!(message.contains("context window"), "{message}");
    assert!(message.contains("prompt is too long"), "{message}");
}

#[tokio::test]
async fn a_429_waits_for_retry_after_and_then_succeeds() {
    let mut fake = Fake::start(vec![
        json_error(
            429,
            vec![("retry-after", "1".into())],
            json!({"error": {"message": "Rate limit reached for requests", "type": "requests", "code": "rate_limit_exceeded"}}),
        ),
        stream_of("openai_text.sse"),
    ])
    .await;
    // A large backoff base shows the wait came from Retry-After, not backoff.
    let http = HttpOptions {
        step_timeout: Duration::from_secs(20),
        retry: RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(1),
        },
    };
    let model = openai(&fake, http);
    let events = run_ok(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hello from the café ☕.");
    let first = fake.request().await;
    let second = fake.request().await;
    let waited = second.at.duration_since(first.at);
    assert!(waited >= Duration::from_secs(1), "retried after {waited:?}");
    assert_eq!(first.body, second.body, "the retry sends the same request");
}

#[tokio::test]
async fn server_errors_and_resets_are_retried_with_backoff() {
    let mut fake = Fake::start(vec![
        json_error(
            500,
            Vec::new(),
            json!({"error": {"message": "internal error", "type": "server_error"}}),
        ),
        Reply::Reset,
        stream_of("openai_text.sse"),
    ])
    .await;
    let model = openai(&fake, quick_retries());
    let events = run_ok(&model, ask("hi")).await;
    assert_eq!(stop_of(&events), StopReason::Stop);
    fake.request().await;
    fake.request().await;
    fake.request().await;
}

#[tokio::test]
async fn retries_give_up_with_the_last_reason() {
    let overloaded = || {
        json_error(
            529,
            Vec::new(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )
    };
    let mut fake = Fake::start(vec![overloaded(), overloaded(), overloaded()]).await;
    let mut http = quick_retries();
    http.retry.max_retries = 1;
    let model = anthropic(&fake, http);
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert_eq!(
        message,
        "the provider is overloaded (HTTP 529): Overloaded; try again later (gave up after 1 retry)"
    );
    fake.request().await;
    fake.request().await;
    assert!(fake.drain().is_empty());
}

#[tokio::test]
async fn a_retry_after_past_the_step_timeout_fails_now() {
    let mut fake = Fake::start(vec![json_error(
        429,
        vec![("retry-after", "3600".into())],
        json!({"error": {"message": "slow down", "type": "rate_limit"}}),
    )])
    .await;
    let model = openai(&fake, quick_retries());
    let started = Instant::now();
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        message.starts_with("rate limited (HTTP 429): slow down"),
        "{message}"
    );
    assert!(message.contains("step timeout"), "{message}");
    fake.request().await;
}

#[tokio::test]
async fn a_schema_rejection_is_not_retried_even_as_a_500() {
    // llama-cpp-python's server answers a request its schema rejects with
    // HTTP 500 and pydantic's message: repeating it cannot help.
    let mut fake = Fake::start(vec![json_error(
        500,
        Vec::new(),
        json!({"error": {"message": "1 validation error for ChatCompletionRequestAssistantMessage\ncontent\n  Input should be a valid string [type=string_type, input_value=None, input_type=NoneType]", "type": "internal_server_error", "param": null, "code": null}}),
    )])
    .await;
    let model = openai(&fake, quick_retries());
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert!(
        message.starts_with("the server rejected the request as invalid (HTTP 500)")
            && message.contains("Input should be a valid string")
            && !message.contains("gave up"),
        "{message}"
    );
    fake.request().await;
    assert!(
        fake.drain().is_empty(),
        "a schema rejection must not be retried"
    );
}

#[tokio::test]
async fn a_quota_error_is_not_retried() {
    let mut fake = Fake::start(vec![json_error(
        429,
        Vec::new(),
        json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}),
    )])
    .await;
    let model = openai(&fake, quick_retries());
    let message = provider_error(run(&model, ask("hi")).await.1);
    assert!(
        message.starts_with("quota exhausted (HTTP 429)"),
        "{message}"
    );
    fake.request().await;
    assert!(fake.drain().is_empty());
}

#[tokio::test]
async fn a_mid_stream_disconnect_fails_the_step_without_a_retry() {
    let text = cassette("openai_text.sse");
    // Everything up to the second content chunk, then the connection drops.
    let cut = text.windows(5).position(|w| w == b"caf\xC3\xA9").unwrap() + 40;
    let mut fake = Fake::start(vec![
        Reply::Stream(vec![Part::Bytes(text[..cut].to_vec()), Part::Cut]),
        stream_of("openai_text.sse"),
    ])
    .await;
    let model = openai(&fake, quick_retries());
    let (events, error) = run(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hello");
    let message = provider_error(error);
    assert!(message.starts_with("stream ended early"), "{message}");
    fake.request().await;
    assert!(
        fake.drain().is_empty(),
        "a stream that already produced output must not be retried"
    );
}

#[tokio::test]
async fn a_stream_that_ends_cleanly_but_unfinished_is_an_error() {
    let partial = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hel\"}}\n\n";
    let fake = Fake::start(vec![Reply::Stream(vec![Part::Bytes(partial.into())])]).await;
    let model = anthropic(&fake, quick_retries());
    let (events, error) = run(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hel");
    assert!(provider_error(error).starts_with("stream ended early"));
}

#[tokio::test]
async fn the_step_timeout_ends_a_stalled_stream_and_closes_the_connection() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"thinking...\"}}]}\n\n";
    let mut fake = Fake::start(vec![Reply::Stream(vec![
        Part::Bytes(first.into()),
        Part::Hang,
    ])])
    .await;
    let mut http = quick_retries();
    http.step_timeout = Duration::from_millis(1000);
    let model = openai(&fake, http);
    let (events, error) = run(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "thinking...");
    assert!(
        matches!(error, Some(ModelError::Timeout(1000))),
        "{error:?}"
    );
    fake.request().await;
    assert!(matches!(fake.next().await, Observed::Closed));
}

#[tokio::test]
async fn cancelling_ends_the_stream_and_aborts_the_request() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Once upon\"}}]}\n\n";
    let mut fake = Fake::start(vec![Reply::Stream(vec![
        Part::Bytes(first.into()),
        Part::Hang,
    ])])
    .await;
    let model = openai(&fake, HttpOptions::default());
    let cancel = CancellationToken::new();
    let mut stream = model.step(ask("story"), cancel.clone()).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ModelEvent::TextDelta("Once upon".into())
    );
    fake.request().await;
    cancel.cancel();
    let next = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("cancel must end the stream promptly");
    assert!(matches!(next, Some(Err(ModelError::Cancelled))), "{next:?}");
    assert!(stream.next().await.is_none());
    drop(stream);
    assert!(matches!(fake.next().await, Observed::Closed));
}

#[tokio::test]
async fn cancelling_while_waiting_for_a_retry_returns_at_once() {
    let fake = Fake::start(vec![json_error(
        503,
        vec![("retry-after", "60".into())],
        json!({"error": {"message": "busy"}}),
    )])
    .await;
    let model = openai(&fake, HttpOptions::default());
    let cancel = CancellationToken::new();
    let step = model.step(ask("hi"), cancel.clone());
    let canceller = async {
        // Cancel once the server has answered the first attempt.
        let mut fake = fake;
        fake.request().await;
        cancel.cancel();
    };
    let (result, ()) = tokio::time::timeout(Duration::from_secs(10), async {
        tokio::join!(step, canceller)
    })
    .await
    .expect("the step must end promptly once cancelled");
    assert!(matches!(result, Err(ModelError::Cancelled)));
}

// ---------------------------------------------------------------------------
// Anthropic

#[tokio::test]
async fn anthropic_streams_text_with_cache_usage() {
    let mut fake = Fake::start(vec![stream_of("anthropic_text.sse")]).await;
    let model = anthropic(&fake, quick_retries());
    let events = run_ok(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hello from Zürich!");
    assert_eq!(
        usage_of(&events),
        Usage {
            input_tokens: 25,
            output_tokens: 15,
            cache_read_tokens: 4096,
            cache_write_tokens: 2048,
        }
    );
    assert_eq!(stop_of(&events), StopReason::Stop);
    let seen = fake.request().await;
    assert_eq!(seen.path, "/v1/messages");
    assert_eq!(seen.headers["x-api-key"], "sk-ant-test");
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        seen.body,
        json!({
            "model": "grok-4.5",
            "max_tokens": 8192,
            "system": "You are terse.",
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "stream": true,
        })
    );
}

#[tokio::test]
async fn anthropic_thinking_tool_use_and_the_next_request() {
    let mut fake = Fake::start(vec![
        stream_of("anthropic_tool_use.sse"),
        stream_of("anthropic_text.sse"),
    ])
    .await;
    let model = anthropic(&fake, quick_retries());
    let mut request = ModelRequest {
        model: "claude-sonnet-4-5".into(),
        system: "sys".into(),
        messages: vec![Message::User {
            text: "Weather in SF?".into(),
        }],
        tools: vec![weather_tool()].into(),
        effort: Some("medium".into()),
        tool_choice: None,
        max_tokens: None,
    };
    let events = run_ok(&model, request.clone()).await;
    assert_eq!(
        reasoning_of(&events),
        "The user wants the weather; call get_weather."
    );
    assert_eq!(text_of(&events), "Let me check.");
    let calls = calls_of(&events);
    assert_eq!(
        calls,
        vec![
            ToolCall {
                id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(),
                name: "get_weather".into(),
                input: json!({"city": "San Francisco", "unit": "fahrenheit"}),
            },
            ToolCall {
                id: "toolu_02Kq9".into(),
                name: "get_time".into(),
                input: json!({}),
            },
        ]
    );
    assert_eq!(stop_of(&events), StopReason::ToolCalls);
    assert_eq!(usage_of(&events).output_tokens, 89);
    let first = fake.request().await;
    assert_eq!(
        first.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    assert_eq!(first.body["max_tokens"], 8192 + 4096);
    assert_eq!(
        first.body["tools"],
        json!([{
            "name": "get_weather",
            "description": "Current weather for a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }])
    );

    // The tool loop continues: the assistant step goes back with its signed
    // thinking first, and both results share one user message.
    request.messages.push(Message::Assistant {
        text: "Let me check.".into(),
        tool_calls: calls,
    });
    for (id, content) in [
        ("toolu_01T1x1fJ34qAmk2tNTrN7Up6", "{\"temperatureF\":61}"),
        ("toolu_02Kq9", "12:00"),
    ] {
        request.messages.push(Message::Tool {
            call_id: id.into(),
            name: "t".into(),
            content: content.into(),
            is_error: false,
            images: Vec::new(),
        });
    }
    run_ok(&model, request).await;
    let second = fake.request().await;
    assert_eq!(
        second.body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Weather in SF?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants the weather; call get_weather.",
                 "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather",
                 "input": {"city": "San Francisco", "unit": "fahrenheit"}},
                {"type": "tool_use", "id": "toolu_02Kq9", "name": "get_time", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "content": "{\"temperatureF\":61}"},
                {"type": "tool_result", "tool_use_id": "toolu_02Kq9", "content": "12:00"},
            ]},
        ])
    );
    assert_eq!(
        second.body["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
}

#[tokio::test]
async fn anthropic_overloaded_is_retried_then_succeeds() {
    let mut fake = Fake::start(vec![
        json_error(
            529,
            Vec::new(),
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        stream_of("anthropic_text.sse"),
    ])
    .await;
    let model = anthropic(&fake, quick_retries());
    let events = run_ok(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hello from Zürich!");
    fake.request().await;
    fake.request().await;
}

#[tokio::test]
async fn anthropic_error_event_mid_stream_fails_the_step() {
    let body = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let mut fake = Fake::start(vec![Reply::Stream(vec![Part::Bytes(body.into())])]).await;
    let model = anthropic(&fake, quick_retries());
    let (events, error) = run(&model, ask("hi")).await;
    assert_eq!(text_of(&events), "Hi");
    assert_eq!(
        provider_error(error),
        "the provider is overloaded: Overloaded"
    );
    fake.request().await;
    assert!(fake.drain().is_empty());
}

// ---------------------------------------------------------------------------
// End to end: the weather example through the host

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The weather example in a temp dir, with its model pointed at `base_url`.
fn weather_project(agent_toml_tail: &str) -> (tempfile::TempDir, bdk_core::Project) {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather");
    copy_dir(&example, dir.path());
    let toml = format!(
        "name = \"weather\"\ndescription = \"Weather over a fake OpenAI-compatible server.\"\nmodel = \"openai-compatible/test-model\"\n{agent_toml_tail}"
    );
    std::fs::write(dir.path().join("agent/agent.toml"), toml).unwrap();
    let d = bdk_core::discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    (dir, d.project.unwrap())
}

async fn weather_host(project: bdk_core::Project, state: &Path) -> Host {
    let store: Arc<dyn Store> = Arc::new(FsStore::open(state).unwrap());
    Host::builder(project, store).build().await.unwrap()
}

fn sse(chunks: &[Value]) -> Vec<u8> {
    let mut out = String::new();
    for c in chunks {
        out.push_str(&format!("data: {c}\n\n"));
    }
    out.push_str("data: [DONE]\n\n");
    out.into_bytes()
}

#[tokio::test]
async fn the_weather_example_runs_a_tool_round_trip_over_the_openai_provider() {
    let tool_step = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": " \"Paris\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 500, "completion_tokens": 20, "prompt_tokens_details": {"cached_tokens": 100}}}),
    ]);
    let answer_step = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "It is sunny "}}]}),
        json!({"choices": [{"index": 0, "delta": {"content": "in Paris."}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 600, "completion_tokens": 8}}),
    ]);
    let mut fake = Fake::start(vec![
        Reply::Stream(pieces(&tool_step, 97)),
        Reply::Stream(pieces(&answer_step, 97)),
    ])
    .await;
    let (dir, project) =
        weather_project(&format!("\n[provider]\nbase_url = \"{}/v1\"\n", fake.base));
    let host = weather_host(project, &dir.path().join("state")).await;
    let started = session::start(&host, "What's the weather in Paris?").await;
    let turn_id = started.turn_id.clone().unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        host.wait_turn(&started.session_id, &turn_id),
    )
    .await
    .expect("the turn did not finish within 30 s")
    .unwrap();
    assert!(result.ok, "{result:?}");
    assert_eq!(result.reply, "It is sunny in Paris.");

    // First request: the example's instructions, tools and the question.
    let first = fake.request().await;
    assert_eq!(first.path, "/v1/chat/completions");
    assert_eq!(first.body["model"], "test-model");
    assert_eq!(first.body["stream"], true);
    let messages = first.body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert!(!messages[0]["content"].as_str().unwrap().is_empty());
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "user", "content": "What's the weather in Paris?"})
    );
    let tools = first.body["tools"].as_array().unwrap();
    let weather = tools
        .iter()
        .find(|t| t["function"]["name"] == "get_weather")
        .expect("get_weather is offered");
    assert_eq!(
        weather["function"]["parameters"]["required"],
        json!(["city"])
    );

    // Second request: the call and its result went back to the model.
    let second = fake.request().await;
    let messages = second.body["messages"].as_array().unwrap();
    let n = messages.len();
    assert_eq!(messages[n - 2]["role"], "assistant");
    assert_eq!(
        messages[n - 2]["tool_calls"][0],
        json!({"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}})
    );
    assert_eq!(messages[n - 1]["role"], "tool");
    assert_eq!(messages[n - 1]["tool_call_id"], "call_w1");
    let result_json: Value =
        serde_json::from_str(messages[n - 1]["content"].as_str().unwrap()).unwrap();
    assert_eq!(result_json["city"], "Paris");
    assert!(result_json["temperatureC"].is_i64(), "{result_json}");

    let events = session::settled_events(&host, &started.session_id).await;
    let turn: Vec<&Envelope> = events
        .iter()
        .filter(|e| e.turn_id.as_ref() == Some(&turn_id))
        .collect();
    let kinds: Vec<&str> = turn.iter().map(|e| e.kind()).collect();
    let expected = [
        "message.received",
        "turn.started",
        "step.started",
        "actions.requested",
        "action.result",
        "actions.completed",
        "step.completed",
        "step.started",
        "message.appended",
        "message.appended",
        "message.completed",
        "step.completed",
        "turn.completed",
    ];
    assert_eq!(kinds, expected);
    for e in &turn {
        match &e.event {
            Event::ActionResult(r) => {
                assert_eq!(r.call_id, "call_w1");
                assert_eq!(r.name, "get_weather");
                assert!(!r.is_error, "{:?}", r.output);
            }
            Event::TurnCompleted(c) => {
                assert_eq!(c.model, "openai-compatible/test-model");
                assert_eq!(c.reply, "It is sunny in Paris.");
                assert_eq!(c.steps, 2);
                assert_eq!(
                    c.usage,
                    Some(Usage {
                        input_tokens: 400 + 600,
                        output_tokens: 28,
                        cache_read_tokens: 100,
                        cache_write_tokens: 0,
                    })
                );
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_server_that_reports_no_usage_leaves_it_unknown_and_gets_empty_content() {
    // As llama-cpp-python's server does: no usage chunk in the stream.
    let tool_step = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
            {"index": 0, "id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ]);
    let answer_step = sse(&[
        json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Sunny."}}]}),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]);
    let mut fake = Fake::start(vec![
        Reply::Stream(pieces(&tool_step, 64)),
        Reply::Stream(pieces(&answer_step, 64)),
    ])
    .await;
    let (dir, project) = weather_project(&format!(
        "tool_choice = {{ tool = \"get_weather\" }}\nmax_output_tokens = 32\n\n[provider]\nbase_url = \"{}/v1\"\n",
        fake.base
    ));
    let host = weather_host(project, &dir.path().join("state")).await;
    let started = session::start(&host, "Weather in Paris?").await;
    let turn_id = started.turn_id.clone().unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        host.wait_turn(&started.session_id, &turn_id),
    )
    .await
    .expect("the turn did not finish within 30 s")
    .unwrap();
    assert!(result.ok, "{result:?}");
    assert_eq!(result.usage, None, "unknown usage is not zero");

    // The forced choice applies to the turn's first step only.
    let first = fake.request().await;
    assert_eq!(
        first.body["tool_choice"],
        json!({"type": "function", "function": {"name": "get_weather"}})
    );
    assert_eq!(first.body["max_tokens"], 32);
    let second = fake.request().await;
    assert!(second.body.get("tool_choice").is_none(), "{}", second.body);
    assert_eq!(second.body["max_tokens"], 32);
    let messages = second.body["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(
        assistant["content"], "",
        "a tool-calls-only step is sent with empty content, never null"
    );

    let events = session::settled_events(&host, &started.session_id).await;
    let mut steps = 0;
    for e in &events {
        let v: Value = serde_json::from_str(&e.to_line().unwrap()).unwrap();
        match e.kind() {
            "step.completed" => {
                steps += 1;
                assert_eq!(v["data"]["usage"], Value::Null, "{v}");
                assert!(v["data"].as_object().unwrap().contains_key("usage"));
            }
            "turn.completed" => assert_eq!(v["data"]["usage"], Value::Null, "{v}"),
            _ => {}
        }
    }
    assert_eq!(steps, 2);
}

#[tokio::test]
async fn a_missing_key_is_a_clear_turn_failure_naming_the_variable() {
    let (dir, project) = weather_project(
        "\n[provider]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"BDK_PROVIDERS_TEST_KEY_THAT_IS_NEVER_SET\"\n",
    );
    let host = weather_host(project, &dir.path().join("state")).await;
    let started = session::start(&host, "What's the weather in Paris?").await;
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        host.wait_turn(&started.session_id, started.turn_id.as_ref().unwrap()),
    )
    .await
    .expect("a missing key must fail the turn at once, not hang")
    .unwrap();
    assert!(!result.ok);
    assert_eq!(
        result.reply,
        "model is not configured: BDK_PROVIDERS_TEST_KEY_THAT_IS_NEVER_SET is not set: export it with your API key, or pick another model in agent/agent.toml (model = \"scripted\" runs offline)"
    );
}

// ---------------------------------------------------------------------------
// agent.toml: `[provider]` and `step_timeout_ms`

fn write_project(files: &[(&str, &str)]) -> tempfile::TempDir {
    bdk_testkit::AgentFolder::empty().files(files).write()
}

#[test]
fn provider_settings_are_read_and_validated_by_discovery() {
    let dir = write_project(&[
        (
            "agent/agent.toml",
            "model = \"openai-compatible/m\"\nstep_timeout_ms = 1500\n[provider]\nbase_url = \"http://127.0.0.1:8080/v1\"\napi_key_env = \"GATEWAY_KEY\"\n",
        ),
        ("agent/instructions.md", "Be brief.\n"),
    ]);
    let d = bdk_core::discover(dir.path());
    assert!(d.diagnostics.is_empty(), "{:#?}", d.diagnostics);
    let config = d.project.unwrap().config;
    assert_eq!(
        config.provider,
        ProviderConfig {
            base_url: Some("http://127.0.0.1:8080/v1".into()),
            api_key_env: Some("GATEWAY_KEY".into()),
        }
    );
    assert_eq!(config.step_timeout_ms, Some(1500));

    let dir = write_project(&[
        (
            "agent/agent.toml",
            "step_timeout_ms = 0\n[provider]\nbase_url = \"ftp://models.example\"\napi_key_env = \"sk-live-abc123\"\nkey = \"x\"\n",
        ),
        ("agent/instructions.md", "Be brief.\n"),
    ]);
    let d = bdk_core::discover(dir.path());
    let messages: Vec<String> = d
        .diagnostics
        .iter()
        .map(|x| format!("{:?}: {}", x.severity, x.message))
        .collect();
    assert!(
        messages.iter().any(|m| m
            == "Error: `provider.base_url` must be an http or https URL, found `ftp://models.example`"),
        "{messages:#?}"
    );
    assert!(
        messages.iter().any(|m| m.starts_with(
            "Error: `provider.api_key_env` must be the name of an environment variable"
        )),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("Warning: unknown key `provider.key` is ignored")),
        "{messages:#?}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("Error: `step_timeout_ms` must be greater than 0")),
        "{messages:#?}"
    );
    // Something that may be a key is never echoed into diagnostics.
    for x in &d.diagnostics {
        assert!(
            !x.message.contains("sk-live") && !x.fix.contains("sk-live"),
            "{x:?}"
        );
    }
}

#[tokio::test]
async fn subagents_inherit_the_timeout_and_only_a_same_provider_base_url() {
    let mut root_server = Fake::start(vec![
        stream_of("openai_text.sse"),
        stream_of("openai_text.sse"),
    ])
    .await;
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hm\"}}]}\n\n";
    let mut ollama = Fake::start(vec![Reply::Stream(vec![
        Part::Bytes(first.into()),
        Part::Hang,
    ])])
    .await;
    let root_toml = format!(
        "model = \"openai-compatible/root-model\"\nstep_timeout_ms = 1000\n[provider]\nbase_url = \"{}/v1\"\n",
        root_server.base
    );
    let dir = write_project(&[
        ("agent/agent.toml", &root_toml),
        ("agent/instructions.md", "Root.\n"),
        (
            "agent/subagents/local/agent.toml",
            "description = \"Runs on a local model.\"\nmodel = \"ollama/small\"\n",
        ),
        ("agent/subagents/local/instructions.md", "Local.\n"),
        (
            "agent/subagents/sibling/agent.toml",
            "description = \"Same gateway, other model.\"\nmodel = \"openai-compatible/other-model\"\n",
        ),
        ("agent/subagents/sibling/instructions.md", "Sibling.\n"),
    ]);
    let d = bdk_core::discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let project = d.project.unwrap();
    let ollama_host = ollama.base.trim_start_matches("http://").to_owned();
    let env = move |var: &str| (var == "OLLAMA_HOST").then(|| ollama_host.clone());
    let resolve = |m: &str| bdk_core::models::resolve_remote(m, &project, &env);

    let root = resolve("openai-compatible/root-model");
    let mut request = ask("hi");
    request.model = "root-model".into();
    run_ok(root.as_ref(), request).await;
    assert_eq!(root_server.request().await.body["model"], "root-model");

    let sibling = resolve("openai-compatible/other-model");
    let mut request = ask("hi");
    request.model = "other-model".into();
    run_ok(sibling.as_ref(), request).await;
    assert_eq!(root_server.request().await.body["model"], "other-model");

    // The ollama subagent goes to OLLAMA_HOST, not the root's gateway, and
    // inherits the root's 1000 ms step timeout.
    let local = resolve("ollama/small");
    let mut request = ask("hi");
    request.model = "small".into();
    let (events, error) = run(local.as_ref(), request).await;
    assert_eq!(text_of(&events), "hm");
    assert!(
        matches!(error, Some(ModelError::Timeout(1000))),
        "{error:?}"
    );
    let seen = ollama.request().await;
    assert_eq!(seen.path, "/v1/chat/completions");
    assert_eq!(seen.body["model"], "small");
}

/// The model of every session: one Anthropic model at the fake.
struct AtFake(Arc<dyn Model>);

impl bdk_core::models::ModelResolver for AtFake {
    fn resolve(
        &self,
        _model: &str,
        _project: &bdk_core::Project,
    ) -> Result<Arc<dyn Model>, ModelError> {
        Ok(self.0.clone())
    }
}

/// Anthropic's stream of one step that calls `tool` with no input.
fn anthropic_call(id: &str, tool: &str) -> Vec<u8> {
    let events = [
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-sonnet-4-5", "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": tool, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}),
        json!({"type": "message_stop"}),
    ];
    let mut out = String::new();
    for e in events {
        out.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap()
        ));
    }
    out.into_bytes()
}

#[tokio::test]
async fn a_tool_image_reaches_anthropic_as_an_image_block_and_the_log_keeps_the_blocks() {
    const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    let chart_py = format!(
        "import json\nprint(json.dumps({{\"content\": [{{\"type\": \"text\", \"text\": \"The chart:\"}}, {{\"type\": \"image\", \"data\": \"{PNG}\", \"mimeType\": \"image/png\"}}]}}))\n"
    );
    let dir = write_project(&[
        (
            "agent/agent.toml",
            "model = \"anthropic/claude-sonnet-4-5\"\n",
        ),
        ("agent/instructions.md", "Draw charts.\n"),
        (
            "agent/tools/chart.toml",
            "description = \"Draws the chart.\"\neffect = \"read\"\ncommand = [\"python3\", \"chart.py\"]\n[input_schema]\ntype = \"object\"\n",
        ),
        ("agent/tools/chart.py", &chart_py),
    ]);
    let mut fake = Fake::start(vec![
        Reply::Stream(pieces(&anthropic_call("toolu_c1", "chart"), 61)),
        stream_of("anthropic_text.sse"),
    ])
    .await;
    let d = bdk_core::discover(dir.path());
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
    let model: Arc<dyn Model> = Arc::new(anthropic(&fake, quick_retries()));
    let host = Host::builder(d.project.unwrap(), store)
        .models(Arc::new(AtFake(model)))
        .build()
        .await
        .unwrap();
    let started = session::start(&host, "Chart it").await;
    let turn_id = started.turn_id.clone().unwrap();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        host.wait_turn(&started.session_id, &turn_id),
    )
    .await
    .expect("the turn did not finish within 30 s")
    .unwrap();
    assert!(result.ok, "{result:?}");

    // The second request carries the image natively, after the text that
    // names it; no base64 in the text.
    let _first = fake.request().await;
    let second = fake.request().await;
    let messages = second.body["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(
        last["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_c1", "content": [
            {"type": "text", "text": "The chart:\n[image: image/png, 70 bytes]"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        ]})
    );

    // The log keeps the blocks unchanged beside the text the model saw, and
    // the conversation rebuilt from it (after a restart) has the image.
    let events = session::settled_events(&host, &started.session_id).await;
    let result = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ActionResult(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        result.output,
        json!("The chart:\n[image: image/png, 70 bytes]")
    );
    assert_eq!(result.content.len(), 2);
    assert_eq!(result.content[1]["data"], PNG);
    let transcript = bdk_core::host::transcript_from_events(&events);
    let images = transcript
        .iter()
        .find_map(|m| match m {
            Message::Tool { images, .. } => Some(images.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(images.len(), 1);
    assert_eq!(images[0].media_type, "image/png");
}
