//! Shared plumbing of the remote model providers: where a model string's
//! endpoint and key come from, the retrying request, the step's clock, the
//! mapping of provider errors to clear messages, and the server-sent-events
//! reader that feeds a provider's stream decoder.
//!
//! The providers ([`super::openai`], [`super::anthropic`]) only build request
//! bodies and decode events; everything about the wire that they have in
//! common lives here, so retries, timeouts and cancellation behave the same
//! for every provider.
//!
//! Retries happen only before the first byte of the response stream has been
//! consumed: once a text delta may have reached the agent loop, a repeated
//! request would duplicate output, so a later disconnect fails the step
//! instead.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::{ModelError, ModelEvent, ModelStream};

/// How long one model step may take, retries included, when `agent.toml`
/// sets no `step_timeout_ms`.
pub const DEFAULT_STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// The most of an error body we read: enough for any provider's JSON error,
/// small enough that a misbehaving server cannot make us buffer a download.
const ERROR_BODY_CAP: usize = 64 * 1024;

/// How much of a provider's error message a step error quotes.
const QUOTE_CHARS: usize = 500;

/// When and how often a failed request is tried again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after the first attempt (so `3` means at most four requests).
    pub max_retries: u32,
    /// The backoff ceiling of the first retry; it doubles on every retry.
    pub base_delay: Duration,
    /// The largest backoff ceiling.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 3,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (0-based) with "full jitter": a
    /// uniform draw from zero up to the exponential ceiling, where `unit` is
    /// the draw in `[0, 1)`. Full jitter spreads the retries of many clients
    /// that failed together, which fixed exponential steps do not.
    pub fn backoff(&self, retry: u32, unit: f64) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(31));
        let ceiling = self.base_delay.saturating_mul(factor).min(self.max_delay);
        ceiling.mul_f64(unit.clamp(0.0, 1.0))
    }
}

/// Transport settings of one remote model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// The whole step, from the request to the last event, retries included.
    pub step_timeout: Duration,
    /// Retries before the stream starts.
    pub retry: RetryPolicy,
}

impl Default for HttpOptions {
    fn default() -> Self {
        Self {
            step_timeout: DEFAULT_STEP_TIMEOUT,
            retry: RetryPolicy::default(),
        }
    }
}

/// The clock of one step: its cancel token and its deadline. Every await of
/// a provider goes through [`StepClock::run`], so cancellation and the step
/// timeout end the step wherever it is waiting.
pub(crate) struct StepClock {
    cancel: CancellationToken,
    deadline: Instant,
    timeout: Duration,
}

impl StepClock {
    pub(crate) fn start(cancel: CancellationToken, timeout: Duration) -> Self {
        Self {
            cancel,
            deadline: Instant::now() + timeout,
            timeout,
        }
    }

    fn timeout_error(&self) -> ModelError {
        ModelError::Timeout(u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX))
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Awaits `fut` unless the step is cancelled or runs out of time first.
    /// Dropping `fut` in those cases is what aborts an HTTP request in flight.
    pub(crate) async fn run<F: Future>(&self, fut: F) -> Result<F::Output, ModelError> {
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(ModelError::Cancelled),
            () = tokio::time::sleep_until(self.deadline) => Err(self.timeout_error()),
            out = fut => Ok(out),
        }
    }
}

/// One streaming POST to a provider.
pub(crate) struct PostRequest {
    /// Parsed once by the provider, not by the client on every attempt.
    pub(crate) url: reqwest::Url,
    /// Provider headers (auth, versions); content type and accept are added.
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
    /// The environment variable the key came from, named in auth errors.
    pub(crate) key_env: Option<String>,
}

/// A header value holding a secret, marked sensitive so it never shows in
/// debug output or logs.
pub(crate) fn secret_header(value: &str, var: Option<&str>) -> Result<HeaderValue, ModelError> {
    let mut v = HeaderValue::from_str(value).map_err(|_| {
        let var = var.unwrap_or("the API key variable");
        ModelError::Config(format!(
            "{var} holds characters that cannot be sent in an HTTP header; check it for stray quotes or line breaks"
        ))
    })?;
    v.set_sensitive(true);
    Ok(v)
}

type Body = BoxStream<'static, Result<Vec<u8>, reqwest::Error>>;

/// A response whose status was a success and whose first chunk has arrived.
pub(crate) struct Opened {
    first: Vec<u8>,
    body: Body,
}

/// A failed attempt, with what the retry loop needs to decide.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) retryable: bool,
    pub(crate) retry_after: Option<Duration>,
}

impl Failure {
    fn into_error(self, retries: u32) -> ModelError {
        if retries == 0 {
            ModelError::Provider(self.message)
        } else {
            let s = if retries == 1 { "retry" } else { "retries" };
            ModelError::Provider(format!("{} (gave up after {retries} {s})", self.message))
        }
    }
}

/// Sends `req`, retrying transient failures per `policy` within the step's
/// clock, until a success response has delivered its first chunk.
///
/// The loop is written out rather than built on `backon`: each wait is either
/// the provider's own (`Retry-After`, `retry-after-ms`, which may differ per
/// response) or full jitter (a draw between zero and the ceiling; `backon`'s
/// jitter adds to the ceiling instead), a wait that would outlast the step
/// fails at once with the provider's reason, and every await goes through
/// the step clock so a stop ends it. Expressing those with `backon`'s
/// `adjust`/`when`/`sleep` hooks takes more code than the loop itself.
pub(crate) async fn open(
    req: &PostRequest,
    policy: &RetryPolicy,
    clock: &StepClock,
) -> Result<Opened, ModelError> {
    let client = crate::net::http_client().map_err(|e| ModelError::Provider(e.to_string()))?;
    let mut retries = 0;
    loop {
        let failure = match clock.run(attempt(&client, req)).await? {
            Ok(opened) => return Ok(opened),
            Err(failure) => failure,
        };
        if !failure.retryable || retries >= policy.max_retries {
            return Err(failure.into_error(retries));
        }
        let delay = failure
            .retry_after
            .unwrap_or_else(|| policy.backoff(retries, random_unit()));
        if delay >= clock.remaining() {
            // Waiting would outlast the step: fail now with the provider's
            // reason rather than later with a bare timeout.
            let mut failure = failure;
            failure.message = format!(
                "{} (the next retry, in {} ms, would pass the step timeout)",
                failure.message,
                delay.as_millis()
            );
            return Err(failure.into_error(retries));
        }
        tracing::warn!(
            url = %req.url,
            retry = retries + 1,
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            error = %failure.message,
            "model request failed; retrying"
        );
        clock.run(tokio::time::sleep(delay)).await?;
        retries += 1;
    }
}

async fn attempt(client: &reqwest::Client, req: &PostRequest) -> Result<Opened, Failure> {
    let sent = client
        .post(req.url.clone())
        .headers(req.headers.clone())
        .header(CONTENT_TYPE, "application/json")
        .header(ACCEPT, "text/event-stream")
        .body(req.body.clone())
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) => return Err(transport_failure(req.url.as_str(), &e)),
    };
    let status = resp.status();
    if status.is_success() {
        let mut body: Body = resp.bytes_stream().map_ok(Vec::from).boxed();
        // Nothing of the stream has been consumed yet, so a failure to get
        // the first chunk is still safe to retry.
        return match body.next().await {
            Some(Ok(first)) => Ok(Opened { first, body }),
            Some(Err(e)) => Err(transport_failure(req.url.as_str(), &e)),
            // A success status with nothing after it is what
            // llama-cpp-python's server sends when a streamed prompt does not
            // fit its context (its error is raised after the status went
            // out). The same request gets the same answer, so it is not
            // retried, and the message names the likely cause.
            None => Err(Failure {
                message: format!(
                    "{} answered HTTP {status} with an empty stream; local servers do this when the conversation does not fit the model's context window (llama.cpp's n_ctx): start the server with a larger context, or set `context_window` in agent.toml to its size",
                    req.url
                ),
                retryable: false,
                retry_after: None,
            }),
        };
    }
    let retry_after = retry_after(resp.headers(), Utc::now());
    let body = read_capped(resp).await;
    Err(classify(
        status.as_u16(),
        &body,
        retry_after,
        req.key_env.as_deref(),
        req.url.as_str(),
    ))
}

async fn read_capped(mut resp: reqwest::Response) -> Vec<u8> {
    let mut out = Vec::new();
    // A body that fails halfway still has a useful beginning.
    while let Ok(Some(chunk)) = resp.chunk().await {
        let room = ERROR_BODY_CAP.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= ERROR_BODY_CAP {
            break;
        }
    }
    out
}

fn transport_failure(url: &str, e: &reqwest::Error) -> Failure {
    let hint = if e.is_connect() {
        "; check that the server is running and the base URL is right"
    } else {
        ""
    };
    Failure {
        message: format!("could not reach {url}: {}{hint}", error_chain(e)),
        // A malformed URL will not get better by trying again; everything
        // else (refused, reset, DNS, TLS hiccups) may.
        retryable: !e.is_builder(),
        retry_after: None,
    }
}

/// An error and its sources on one line, skipping sources whose text the
/// line already holds (reqwest repeats its cause in its own message).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

/// A draw in `[0, 1)` for backoff jitter.
fn random_unit() -> f64 {
    fastrand::f64()
}

/// The wait a `429`/`503` response asks for: `retry-after-ms` (sent by
/// OpenAI), else `Retry-After` as delay-seconds or as an HTTP date.
pub(crate) fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when = DateTime::parse_from_rfc2822(value).ok()?;
    Some(
        (when.with_timezone(&Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// The readable parts of a provider's JSON error body: its message and a
/// lowercase string of its type and code fields to match kinds against.
pub(crate) fn error_details(body: &[u8]) -> (String, String) {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        let text = String::from_utf8_lossy(body).trim().to_owned();
        let text = if text.is_empty() {
            "no error message".to_owned()
        } else {
            text
        };
        return (quote(&text), String::new());
    };
    let s = |v: &Value| v.as_str().map(str::to_owned);
    let err = &v["error"];
    let message = s(&err["message"])
        .or_else(|| s(err))
        .or_else(|| s(&v["message"]))
        .or_else(|| s(&v["detail"]))
        .or_else(|| validation_details(&v["detail"]))
        .unwrap_or_else(|| v.to_string());
    let mut kinds = Vec::new();
    for field in [&err["type"], &err["code"], &v["type"], &v["code"]] {
        match field {
            Value::String(t) => kinds.push(t.to_lowercase()),
            Value::Number(n) => kinds.push(n.to_string()),
            _ => {}
        }
    }
    (quote(&message), kinds.join(" "))
}

/// A FastAPI/pydantic validation body's `detail` list (`[{"loc": ["body",
/// "messages", 1, "content"], "msg": "Input should be a valid string"}]`) as
/// `body.messages.1.content: Input should be a valid string; ...`.
fn validation_details(detail: &Value) -> Option<String> {
    let items = detail.as_array()?;
    let parts: Vec<String> = items
        .iter()
        .filter_map(|item| {
            let msg = item["msg"].as_str()?;
            let loc: Vec<String> = item["loc"]
                .as_array()
                .map(|l| {
                    l.iter()
                        .map(|p| p.as_str().map_or_else(|| p.to_string(), str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            Some(if loc.is_empty() {
                msg.to_owned()
            } else {
                format!("{}: {msg}", loc.join("."))
            })
        })
        .collect();
    (!parts.is_empty()).then(|| format!("validation error: {}", parts.join("; ")))
}

fn quote(text: &str) -> String {
    match text.char_indices().nth(QUOTE_CHARS) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

fn is_context_length(message: &str, kinds: &str) -> bool {
    let m = message.to_lowercase();
    kinds.contains("context_length_exceeded")
        || m.contains("prompt is too long")
        || m.contains("context length")
        || m.contains("context window")
        || m.contains("maximum context")
        || m.contains("context_length_exceeded")
}

/// True when an error body says the request itself is malformed (a schema
/// or validation failure) rather than that the server is in trouble.
fn is_invalid_request(message: &str, kinds: &str) -> bool {
    let m = message.to_lowercase();
    kinds.contains("invalid_request")
        || kinds.contains("validation")
        || kinds.contains("bad_request")
        || kinds.contains("badrequest")
        || m.contains("validation error")
        || m.contains("input should be")
        || m.contains("field required")
        || m.contains("invalid request")
        || m.contains("invalid_request")
        || m.contains("unprocessable")
}

/// True for a 429 that means "out of money or quota" rather than "too fast".
/// Only specific wordings count: many providers mention quotas in ordinary
/// rate-limit messages, and those should be retried.
fn is_quota(message: &str, kinds: &str) -> bool {
    let m = message.to_lowercase();
    kinds.contains("insufficient_quota")
        || m.contains("exceeded your current quota")
        || m.contains("used all available credits")
        || m.contains("spending limit")
}

/// Maps an error response to a clear message and whether to retry it.
pub(crate) fn classify(
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
    key_env: Option<&str>,
    url: &str,
) -> Failure {
    let (message, kinds) = error_details(body);
    let fail = |message: String, retryable: bool| Failure {
        message,
        retryable,
        retry_after,
    };
    match status {
        401 | 403 => {
            let check = key_env.map_or_else(
                || "check the API key".to_owned(),
                |var| format!("check the key in {var}"),
            );
            fail(
                format!("authentication failed (HTTP {status}): {message}; {check}"),
                false,
            )
        }
        // An exhausted quota is not a rate limit: retrying cannot help.
        429 if is_quota(&message, &kinds) => fail(
            format!("quota exhausted (HTTP 429): {message}; check the account's plan and billing"),
            false,
        ),
        429 => fail(format!("rate limited (HTTP 429): {message}"), true),
        529 => fail(
            format!("the provider is overloaded (HTTP 529): {message}; try again later"),
            true,
        ),
        _ if kinds.contains("overloaded") => fail(
            format!("the provider is overloaded (HTTP {status}): {message}; try again later"),
            true,
        ),
        400 | 413 | 422 if is_context_length(&message, &kinds) => fail(
            format!(
                "the conversation does not fit the model's context window (HTTP {status}): {message}"
            ),
            false,
        ),
        400 | 413 | 422 => fail(format!("bad request (HTTP {status}): {message}"), false),
        404 => fail(
            format!(
                "not found (HTTP 404) at {url}: {message}; check the model name and the base URL"
            ),
            false,
        ),
        // Some servers answer a request their schema rejects with a 5xx
        // (llama-cpp-python wraps pydantic's validation error in a 500):
        // the same request fails the same way every time, so it is not
        // retried, and the server's words reach the turn's error.
        500..=599 if is_invalid_request(&message, &kinds) => fail(
            format!("the server rejected the request as invalid (HTTP {status}): {message}"),
            false,
        ),
        408 | 500..=599 => fail(format!("server error (HTTP {status}): {message}"), true),
        _ => fail(format!("unexpected HTTP {status}: {message}"), false),
    }
}

/// An error event inside an otherwise successful stream (Anthropic's
/// `error` event, an OpenAI-compatible chunk carrying `error`).
pub(crate) fn stream_error(data: &str) -> ModelError {
    let (message, kinds) = error_details(data.as_bytes());
    let what = if kinds.contains("overloaded") {
        "the provider is overloaded"
    } else if kinds.contains("rate_limit") {
        "rate limited"
    } else if is_context_length(&message, &kinds) {
        "the conversation does not fit the model's context window"
    } else {
        "the provider reported an error mid-stream"
    };
    ModelError::Provider(format!("{what}: {message}"))
}

/// The error of a stream that stopped before the provider said it was done.
pub(crate) fn ended_early(cause: Option<&reqwest::Error>) -> ModelError {
    match cause {
        Some(e) => ModelError::Provider(format!(
            "stream ended early: the connection failed before the step finished ({})",
            error_chain(e)
        )),
        None => ModelError::Provider(
            "stream ended early: the connection closed before the step finished".to_owned(),
        ),
    }
}

/// An unreadable stream payload.
pub(crate) fn bad_chunk(data: &str, e: &serde_json::Error) -> ModelError {
    ModelError::Provider(format!(
        "the provider sent an unreadable stream event ({e}): {}",
        quote(data)
    ))
}

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, when the server sent one.
    pub event: Option<String>,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// An incremental server-sent-events reader.
///
/// Bytes arrive in arbitrary chunks: a line, and a multi-byte character in
/// it, may be split anywhere. Bytes are buffered until a whole line is in,
/// and only whole lines are decoded as UTF-8, so a split character is never
/// seen half. Lines end in `\n`, `\r\n` or `\r`; comment lines (`:` first,
/// the usual keep-alive) are skipped; `id` and `retry` fields are ignored.
///
/// Hand-written rather than `sse-stream` (0.2, already in the build through
/// rmcp), which is stricter than the SSE specification in ways model
/// servers and proxies trip over: it fails the stream on an unknown field, a
/// line without a colon, a repeated `event:` line or a non-UTF-8 byte, all
/// of which the specification says to ignore or tolerate, and it drops a
/// last event whose blank line never came (some servers end that way).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    started: bool,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds bytes; returns the events they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        if !self.started {
            // A stream may begin with a UTF-8 byte order mark; wait until
            // enough bytes are in to tell.
            if self.buf.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.buf) {
                return Vec::new();
            }
            if self.buf.starts_with(b"\xEF\xBB\xBF") {
                self.buf.drain(..3);
            }
            self.started = true;
        }
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buf[start..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = start + offset;
            let next = if self.buf[end] == b'\r' {
                match self.buf.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    // A `\r` at the end of the buffer may be the first half
                    // of `\r\n`: wait for the next chunk to know.
                    None => break,
                }
            } else {
                end + 1
            };
            let line = self.buf[start..end].to_vec();
            self.line(&line, &mut out);
            start = next;
        }
        self.buf.drain(..start);
        out
    }

    /// Ends the stream: a complete last line that only lacked the blank line
    /// after it still counts; a partial line is dropped.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        // `push` holds back only a trailing `\r` (it might have been half of
        // `\r\n`); at the end of the stream it is a complete line ending.
        if let Some(line) = self.buf.strip_suffix(b"\r") {
            let line = line.to_vec();
            self.line(&line, &mut out);
        }
        self.buf.clear();
        self.line(b"", &mut out);
        out
    }

    fn line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data,
                });
            } else {
                self.event = None;
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"event" => self.event = Some(value.into_owned()),
            _ => {}
        }
    }
}

/// A provider's stream decoder: turns server-sent events into model events.
pub(crate) trait Decoder: Send + 'static {
    /// Handles one event; returns `true` when the provider said the step is
    /// complete (nothing after it is read).
    fn event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ModelEvent>,
    ) -> Result<bool, ModelError>;

    /// The body ended before [`Decoder::event`] returned `true`. Returns
    /// `Ok` when what was received is a complete step anyway.
    fn end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError>;
}

struct Drive<D> {
    body: Option<Body>,
    first: Option<Vec<u8>>,
    parser: SseParser,
    decoder: D,
    ready: VecDeque<ModelEvent>,
    error: Option<ModelError>,
    done: bool,
    clock: StepClock,
}

impl<D: Decoder> Drive<D> {
    /// Reads one chunk and decodes what it completes.
    async fn pump(&mut self) {
        let chunk = match self.first.take() {
            Some(first) => Some(Ok(first)),
            None => match &mut self.body {
                Some(body) => match self.clock.run(body.next()).await {
                    Ok(chunk) => chunk,
                    Err(e) => return self.fail(e),
                },
                None => None,
            },
        };
        match chunk {
            Some(Ok(bytes)) => {
                for event in self.parser.push(&bytes) {
                    match self.decoder.event(event, &mut self.ready) {
                        Ok(false) => {}
                        Ok(true) => return self.complete(),
                        Err(e) => return self.fail(e),
                    }
                }
            }
            Some(Err(e)) => match self.decoder.end(&mut self.ready) {
                Ok(()) => self.complete(),
                Err(_) => self.fail(ended_early(Some(&e))),
            },
            None => {
                for event in self.parser.finish() {
                    match self.decoder.event(event, &mut self.ready) {
                        Ok(false) => {}
                        Ok(true) => return self.complete(),
                        Err(e) => return self.fail(e),
                    }
                }
                match self.decoder.end(&mut self.ready) {
                    Ok(()) => self.complete(),
                    Err(e) => self.fail(e),
                }
            }
        }
    }

    fn complete(&mut self) {
        self.done = true;
        self.body = None;
    }

    /// Ends the step with `e` after the events already decoded. Dropping the
    /// body aborts the HTTP request when it is still in flight.
    fn fail(&mut self, e: ModelError) {
        self.error = Some(e);
        self.complete();
    }
}

/// The step's event stream over an opened response. Dropping the stream
/// drops the response body, which closes the connection.
pub(crate) fn drive<D: Decoder>(opened: Opened, decoder: D, clock: StepClock) -> ModelStream {
    let state = Drive {
        body: Some(opened.body),
        first: Some(opened.first),
        parser: SseParser::new(),
        decoder,
        ready: VecDeque::new(),
        error: None,
        done: false,
        clock,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.ready.pop_front() {
                return Some((Ok(event), st));
            }
            if let Some(e) = st.error.take() {
                return Some((Err(e), st));
            }
            if st.done {
                return None;
            }
            st.pump().await;
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.push(c));
        }
        out.extend(p.finish());
        out
    }

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    #[test]
    fn sse_events_survive_every_split_point() {
        let stream = "event: message_start\ndata: {\"a\":\"caf\u{e9} \u{1F600}\"}\n\n: keep-alive\n\ndata: line one\r\ndata: line two\r\n\r\nevent: ping\ndata:\n\ndata: [DONE]\r\r".as_bytes();
        let expected = vec![
            ev(Some("message_start"), "{\"a\":\"caf\u{e9} \u{1F600}\"}"),
            ev(None, "line one\nline two"),
            ev(Some("ping"), ""),
            ev(None, "[DONE]"),
        ];
        assert_eq!(parse_all(&[stream]), expected);
        for split in 0..stream.len() {
            let (a, b) = stream.split_at(split);
            assert_eq!(parse_all(&[a, b]), expected, "split at byte {split}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_all(&bytes), expected, "byte by byte");
    }

    #[test]
    fn sse_comments_and_unknown_fields_are_ignored() {
        let out = parse_all(&[b": ping\nid: 7\nretry: 100\ndata:x\n\n:\n\n"]);
        assert_eq!(out, vec![ev(None, "x")]);
    }

    #[test]
    fn sse_a_final_line_without_blank_line_counts_but_a_partial_one_does_not() {
        assert_eq!(parse_all(&[b"data: [DONE]\n"]), vec![ev(None, "[DONE]")]);
        assert_eq!(parse_all(&[b"data: {\"half"]), Vec::new());
    }

    #[test]
    fn sse_byte_order_mark_is_skipped_even_when_split() {
        let out = parse_all(&[b"\xEF", b"\xBB\xBFdata: x\n\n"]);
        assert_eq!(out, vec![ev(None, "x")]);
    }

    #[test]
    fn backoff_is_full_jitter_under_an_exponential_cap() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(0, 0.0), Duration::ZERO);
        assert_eq!(p.backoff(0, 0.5), Duration::from_millis(250));
        assert_eq!(p.backoff(2, 1.0), Duration::from_secs(2));
        assert_eq!(p.backoff(10, 1.0), Duration::from_secs(20));
        assert_eq!(p.backoff(40, 1.0), Duration::from_secs(20));
        for _ in 0..100 {
            let u = random_unit();
            assert!((0.0..1.0).contains(&u), "{u}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_dates_and_milliseconds() {
        let now = DateTime::parse_from_rfc3339("2015-10-21T07:28:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h, now), None);
        h.insert(RETRY_AFTER, HeaderValue::from_static("7"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(30)));
        h.insert(
            RETRY_AFTER,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:27:00 GMT"),
        );
        assert_eq!(retry_after(&h, now), Some(Duration::ZERO));
        h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h, now), None);
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h, now), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn errors_are_classified_by_status_and_body() {
        let c = |status, body: &str| {
            classify(
                status,
                body.as_bytes(),
                None,
                Some("XAI_API_KEY"),
                "http://x/v1/chat/completions",
            )
        };
        let auth = c(
            401,
            r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#,
        );
        assert!(!auth.retryable);
        assert_eq!(
            auth.message,
            "authentication failed (HTTP 401): Incorrect API key provided; check the key in XAI_API_KEY"
        );
        let quota = c(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota"}}"#,
        );
        assert!(!quota.retryable && quota.message.starts_with("quota exhausted"));
        let limited = c(
            429,
            r#"{"code":"rate_limited","error":"Too many requests"}"#,
        );
        assert!(limited.retryable);
        // Mentioning a quota does not make a rate limit final.
        let per_minute = c(
            429,
            r#"{"error":{"message":"Resource has been exhausted (e.g. check quota)."}}"#,
        );
        assert!(per_minute.retryable, "{}", per_minute.message);
        assert_eq!(
            limited.message,
            "rate limited (HTTP 429): Too many requests"
        );
        let overloaded = c(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert!(overloaded.retryable && overloaded.message.contains("overloaded"));
        let ctx = c(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
        );
        assert!(
            !ctx.retryable && ctx.message.contains("context window"),
            "{}",
            ctx.message
        );
        let long = c(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert!(long.message.contains("context window"), "{}", long.message);
        let bad = c(
            400,
            r#"{"object":"error","message":"unknown field `reasoning_effort`","type":"BadRequestError","code":400}"#,
        );
        assert_eq!(
            bad.message,
            "bad request (HTTP 400): unknown field `reasoning_effort`"
        );
        let server = c(503, "upstream connect error");
        assert!(server.retryable);
        assert_eq!(
            server.message,
            "server error (HTTP 503): upstream connect error"
        );
        // A schema rejection is final whatever the status, and its body is
        // quoted.
        let schema = c(
            500,
            r#"{"error":{"message":"1 validation error for Request\nbody.messages.1.content\n  Input should be a valid string","type":"internal_server_error"}}"#,
        );
        assert!(!schema.retryable, "{}", schema.message);
        assert!(
            schema
                .message
                .starts_with("the server rejected the request as invalid (HTTP 500)")
                && schema.message.contains("Input should be a valid string"),
            "{}",
            schema.message
        );
        let unprocessable = c(
            422,
            r#"{"detail":[{"type":"string_type","loc":["body","messages",1,"content"],"msg":"Input should be a valid string","input":null}]}"#,
        );
        assert!(!unprocessable.retryable);
        assert_eq!(
            unprocessable.message,
            "bad request (HTTP 422): validation error: body.messages.1.content: Input should be a valid string"
        );
        let crash = c(
            500,
            r#"{"error":{"message":"CUDA out of memory","type":"server_error"}}"#,
        );
        assert!(crash.retryable, "{}", crash.message);
        let missing = c(404, "");
        assert!(!missing.retryable && missing.message.contains("no error message"));
    }
}
