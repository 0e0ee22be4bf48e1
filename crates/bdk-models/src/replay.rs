//! Recording model steps to a file, and the `replay/` provider that plays
//! them back.
//!
//! A recording is JSON lines. The first line is a header,
//! `{"version":1,"format":"bdk-model-recording","createdAt":"..."}`; every
//! further line is one completed model step:
//!
//! ```json
//! {"step":1,"model":"scripted/default",
//!  "request":{"model":"default","system":"...","messages":[...],"tools":[...],"effort":null},
//!  "events":[{"type":"reasoning","delta":"..."},{"type":"tool_call","id":"call_...","name":"get_weather","input":{...}},
//!            {"type":"usage","inputTokens":120,"outputTokens":30,"cacheReadTokens":0,"cacheWriteTokens":0},
//!            {"type":"stop","reason":"tool_calls"}]}
//! ```
//!
//! `request` is what the model was asked (after the context budget was
//! applied); `events` is exactly what it streamed back, in order: `text`,
//! `reasoning`, `tool_call`, `usage`, `stop`, and `error` when the step
//! failed (`kind` `config`, `provider` or `timeout`). `model` is the full
//! id of the model that answered.
//!
//! [`RecordingModel`] wraps any model and appends one line per step when the
//! step's stream ends, flushed and synced before the step is handed back, so
//! a crash loses at most the step in flight. A cancelled step is not
//! recorded. Opening an existing recording appends to it, so a multi-turn
//! session recorded by several `bdk run --session` calls plays back as one.
//!
//! [`ReplayModel`] (`model = "replay/<file>"`) plays the recorded steps in
//! order, answering each with the recorded events. The incoming request must
//! equal the recorded one in `system`, `tools` and `messages` (compared as
//! canonical JSON; the model name and effort are informational); a mismatch
//! fails the step with the step number and the first differing field, and so
//! does a step past the end of the recording. Tool call ids are part of the
//! recorded events, so a replayed session carries the same ids as the
//! recorded one.
//!
//! Where the playback starts: a fresh replay (a new process) begins at the
//! first recorded step whose request equals its first request, so a session
//! continued by a later `bdk run --session` picks up where the recording
//! is. When no step matches, the step reported is the one whose messages
//! share the longest prefix with the request: where the conversation left
//! the recording. After the first step the order is strict.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;

use async_trait::async_trait;
use bdk_events::Usage;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::{
    Message, Model, ModelError, ModelEvent, ModelRequest, ModelStream, StopReason, ToolCall,
    ToolDefinition,
};

/// The recording format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// The `format` value of a recording's header line.
pub const FORMAT_NAME: &str = "bdk-model-recording";

/// Errors of recording files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordingError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The recording.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The file is not a recording this build can read.
    #[error("{path}: line {line}: {message}")]
    Format {
        /// The recording.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// The first line of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// [`FORMAT_NAME`].
    pub format: String,
    /// When the file was started.
    pub created_at: DateTime<Utc>,
}

/// A step's request as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The model name sent to the provider (informational).
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// The tool definitions.
    pub tools: Vec<ToolDefinition>,
    /// Reasoning effort (informational).
    #[serde(default)]
    pub effort: Option<String>,
}

impl From<&ModelRequest> for RecordedRequest {
    fn from(r: &ModelRequest) -> Self {
        Self {
            model: r.model.clone(),
            system: r.system.clone(),
            messages: r.messages.clone(),
            tools: r.tools.to_vec(),
            effort: r.effort.clone(),
        }
    }
}

/// How a recorded step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ErrorKind {
    /// [`ModelError::Config`].
    Config,
    /// [`ModelError::Provider`].
    Provider,
    /// [`ModelError::Timeout`].
    Timeout,
}

/// One streamed item of a recorded step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RecordedEvent {
    /// [`ModelEvent::TextDelta`].
    Text {
        /// The delta.
        delta: String,
    },
    /// [`ModelEvent::ReasoningDelta`].
    Reasoning {
        /// The delta.
        delta: String,
    },
    /// [`ModelEvent::ToolCall`].
    ToolCall(ToolCall),
    /// [`ModelEvent::Usage`].
    Usage(Usage),
    /// [`ModelEvent::Stop`].
    Stop {
        /// The wire spelling of the stop reason (`stop`, `tool_calls`, ...).
        reason: String,
    },
    /// The step ended in an error.
    Error {
        /// Which kind of error.
        kind: ErrorKind,
        /// Its message.
        message: String,
        /// The timeout, for `timeout` errors.
        #[serde(rename = "timeoutMs", default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
}

impl RecordedEvent {
    fn from_event(e: &ModelEvent) -> Self {
        match e {
            ModelEvent::TextDelta(d) => Self::Text { delta: d.clone() },
            ModelEvent::ReasoningDelta(d) => Self::Reasoning { delta: d.clone() },
            ModelEvent::ToolCall(c) => Self::ToolCall(c.clone()),
            ModelEvent::Usage(u) => Self::Usage(*u),
            ModelEvent::Stop(r) => Self::Stop {
                reason: r.as_str().to_owned(),
            },
        }
    }

    fn from_error(e: &ModelError) -> Self {
        let (kind, message, timeout_ms) = match e {
            ModelError::Config(m) => (ErrorKind::Config, m.clone(), None),
            ModelError::Provider(m) => (ErrorKind::Provider, m.clone(), None),
            ModelError::Timeout(ms) => (ErrorKind::Timeout, e.to_string(), Some(*ms)),
            other => (ErrorKind::Provider, other.to_string(), None),
        };
        Self::Error {
            kind,
            message,
            timeout_ms,
        }
    }

    /// The model event (or error) this item plays back as.
    pub fn to_model_event(&self) -> Result<ModelEvent, ModelError> {
        Ok(match self {
            Self::Text { delta } => ModelEvent::TextDelta(delta.clone()),
            Self::Reasoning { delta } => ModelEvent::ReasoningDelta(delta.clone()),
            Self::ToolCall(c) => ModelEvent::ToolCall(c.clone()),
            Self::Usage(u) => ModelEvent::Usage(*u),
            Self::Stop { reason } => ModelEvent::Stop(match reason.as_str() {
                "stop" => StopReason::Stop,
                "tool_calls" => StopReason::ToolCalls,
                "length" => StopReason::Length,
                other => StopReason::Other(other.to_owned()),
            }),
            Self::Error {
                kind,
                message,
                timeout_ms,
            } => {
                return Err(match kind {
                    ErrorKind::Config => ModelError::Config(message.clone()),
                    ErrorKind::Provider => ModelError::Provider(message.clone()),
                    ErrorKind::Timeout => ModelError::Timeout(timeout_ms.unwrap_or(0)),
                });
            }
        })
    }
}

/// One completed step of a recording.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedStep {
    /// 1-based position in the file.
    pub step: u64,
    /// The full id (`provider/model`) of the model that answered.
    pub model: String,
    /// What it was asked.
    pub request: RecordedRequest,
    /// What it streamed back.
    pub events: Vec<RecordedEvent>,
}

/// A parsed recording.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordingFile {
    /// The header line.
    pub header: Header,
    /// The completed steps, in order.
    pub steps: Vec<RecordedStep>,
    /// Bytes of complete lines; anything after is an unfinished last line
    /// (a write cut off by a crash) and is ignored.
    pub complete_len: usize,
}

/// Parses a recording. An unfinished last line is ignored; anything else
/// that is not a valid line is an error.
pub fn parse_recording(text: &str, path: &Path) -> Result<RecordingFile, RecordingError> {
    let format_err = |line: usize, message: String| RecordingError::Format {
        path: path.to_path_buf(),
        line,
        message,
    };
    let complete_len = text.rfind('\n').map_or(0, |i| i + 1);
    let mut lines = text[..complete_len]
        .split('\n')
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, first)) = lines.next() else {
        return Err(format_err(
            1,
            "the file is empty; expected a header line".into(),
        ));
    };
    let header: Header = serde_json::from_str(first).map_err(|e| {
        format_err(
            1,
            format!("not a recording header (`{{\"version\":{FORMAT_VERSION},\"format\":\"{FORMAT_NAME}\",...}}`): {e}"),
        )
    })?;
    if header.format != FORMAT_NAME {
        return Err(format_err(
            1,
            format!("format is `{}`, expected `{FORMAT_NAME}`", header.format),
        ));
    }
    if header.version != FORMAT_VERSION {
        return Err(format_err(
            1,
            format!(
                "recording version {} is not supported (this build reads version {FORMAT_VERSION})",
                header.version
            ),
        ));
    }
    let mut steps = Vec::new();
    for (i, line) in lines {
        let step: RecordedStep = serde_json::from_str(line)
            .map_err(|e| format_err(i + 1, format!("not a recorded step: {e}")))?;
        steps.push(step);
    }
    Ok(RecordingFile {
        header,
        steps,
        complete_len,
    })
}

/// An open recording file that steps are appended to.
pub struct Recording {
    path: PathBuf,
    state: tokio::sync::Mutex<Appender>,
}

struct Appender {
    file: tokio::fs::File,
    next_step: u64,
}

impl std::fmt::Debug for Recording {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recording")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Recording {
    /// Opens `path` for appending: a missing or empty file gets a header; an
    /// existing recording is validated and appended to (an unfinished last
    /// line left by a crash is cut first).
    pub async fn open(path: &Path) -> Result<Arc<Self>, RecordingError> {
        let io = |source| RecordingError::Io {
            path: path.to_path_buf(),
            source,
        };
        let existing = match tokio::fs::read(path).await {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(e)),
        };
        let (next_step, needs_header) = match existing.filter(|b| !b.is_empty()) {
            Some(bytes) => {
                let text = String::from_utf8(bytes).map_err(|e| RecordingError::Format {
                    path: path.to_path_buf(),
                    line: 1,
                    message: format!("not UTF-8 text: {e}"),
                })?;
                let parsed = parse_recording(&text, path)?;
                if parsed.complete_len < text.len() {
                    tracing::warn!(
                        path = %path.display(),
                        bytes = text.len() - parsed.complete_len,
                        "recording ends in an unfinished line (an interrupted write); cutting it"
                    );
                    let file = tokio::fs::OpenOptions::new()
                        .write(true)
                        .open(path)
                        .await
                        .map_err(io)?;
                    file.set_len(parsed.complete_len as u64).await.map_err(io)?;
                    file.sync_all().await.map_err(io)?;
                }
                (parsed.steps.len() as u64 + 1, false)
            }
            None => {
                if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                    tokio::fs::create_dir_all(parent).await.map_err(io)?;
                }
                (1, true)
            }
        };
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .await
            .map_err(io)?;
        if needs_header {
            let header = Header {
                version: FORMAT_VERSION,
                format: FORMAT_NAME.to_owned(),
                created_at: Utc::now(),
            };
            let mut line = serde_json::to_string(&header).map_err(|e| io(e.into()))?;
            line.push('\n');
            file.write_all(line.as_bytes()).await.map_err(io)?;
            file.flush().await.map_err(io)?;
            file.sync_all().await.map_err(io)?;
            // Make the new directory entry durable too. Opening a directory
            // for reading works on the Unix systems this runs on; elsewhere
            // the file's own sync is the best available.
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
                && let Ok(dir) = tokio::fs::File::open(parent).await
            {
                let _ = dir.sync_all().await;
            }
        }
        Ok(Arc::new(Self {
            path: path.to_path_buf(),
            state: tokio::sync::Mutex::new(Appender { file, next_step }),
        }))
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Steps in the file so far (earlier runs included).
    pub async fn steps(&self) -> u64 {
        self.state.lock().await.next_step - 1
    }

    /// Appends one step and syncs it. Returns its step number.
    async fn append(
        &self,
        model: String,
        request: RecordedRequest,
        events: Vec<RecordedEvent>,
    ) -> Result<u64, RecordingError> {
        let io = |source| RecordingError::Io {
            path: self.path.clone(),
            source,
        };
        let mut state = self.state.lock().await;
        let step = RecordedStep {
            step: state.next_step,
            model,
            request,
            events,
        };
        let mut line = serde_json::to_string(&step).map_err(|e| io(e.into()))?;
        line.push('\n');
        state.file.write_all(line.as_bytes()).await.map_err(io)?;
        state.file.flush().await.map_err(io)?;
        state.file.sync_data().await.map_err(io)?;
        state.next_step += 1;
        Ok(step.step)
    }

    /// Appends from a task of its own, so a step that completed is written
    /// in full even when the turn is cancelled while the write is under way.
    async fn append_detached(
        self: &Arc<Self>,
        model: String,
        request: RecordedRequest,
        events: Vec<RecordedEvent>,
    ) -> Result<u64, String> {
        let this = Arc::clone(self);
        match tokio::spawn(async move { this.append(model, request, events).await }).await {
            Ok(Ok(n)) => Ok(n),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("the recording task failed: {e}")),
        }
    }
}

/// A model decorator that records every step it runs (see the module doc).
/// It passes requests and events through unchanged.
pub struct RecordingModel {
    inner: Arc<dyn Model>,
    recording: Arc<Recording>,
}

impl RecordingModel {
    /// Records the steps of `inner` into `recording`.
    pub fn new(inner: Arc<dyn Model>, recording: Arc<Recording>) -> Self {
        Self { inner, recording }
    }
}

struct Tap {
    inner: ModelStream,
    recording: Arc<Recording>,
    model: String,
    request: Option<RecordedRequest>,
    events: Vec<RecordedEvent>,
}

impl Tap {
    /// Writes the step once; later calls do nothing.
    async fn finish(&mut self) -> Result<(), ModelError> {
        let Some(request) = self.request.take() else {
            return Ok(());
        };
        let events = std::mem::take(&mut self.events);
        self.recording
            .append_detached(self.model.clone(), request, events)
            .await
            .map(|_| ())
            .map_err(|e| ModelError::Provider(format!("failed to record the model step: {e}")))
    }
}

#[async_trait]
impl Model for RecordingModel {
    fn id(&self) -> &str {
        self.inner.id()
    }

    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let recorded = RecordedRequest::from(&request);
        let model = self.inner.id().to_owned();
        let stream = match self.inner.step(request, cancel).await {
            Ok(s) => s,
            Err(ModelError::Cancelled) => return Err(ModelError::Cancelled),
            Err(e) => {
                // A step that fails before streaming is recorded too, so a
                // replay reproduces the failure; the model's own error is
                // what the turn reports either way.
                let events = vec![RecordedEvent::from_error(&e)];
                if let Err(w) = self
                    .recording
                    .append_detached(model, recorded, events)
                    .await
                {
                    tracing::error!(error = %w, "failed to record a failed model step");
                }
                return Err(e);
            }
        };
        let tap = Tap {
            inner: stream,
            recording: Arc::clone(&self.recording),
            model,
            request: Some(recorded),
            events: Vec::new(),
        };
        let stream = futures::stream::unfold(Some(tap), |tap| async move {
            let mut tap = tap?;
            match tap.inner.next().await {
                Some(Ok(event)) => {
                    tap.events.push(RecordedEvent::from_event(&event));
                    Some((Ok(event), Some(tap)))
                }
                // A cancelled step is not a step of the conversation.
                Some(Err(ModelError::Cancelled)) => Some((Err(ModelError::Cancelled), None)),
                Some(Err(e)) => {
                    tap.events.push(RecordedEvent::from_error(&e));
                    if let Err(w) = tap.finish().await {
                        tracing::error!(error = %w, "failed to record a failed model step");
                    }
                    Some((Err(e), None))
                }
                None => match tap.finish().await {
                    Ok(()) => None,
                    Err(e) => Some((Err(e), None)),
                },
            }
        });
        Ok(stream.boxed())
    }
}

/// The `replay/` provider: plays a recording back step by step.
pub struct ReplayModel {
    id: String,
    source: PathBuf,
    steps: Vec<RecordedStep>,
    /// The index of the next step to play; `None` before the first.
    next: Mutex<Option<usize>>,
}

impl std::fmt::Debug for ReplayModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayModel")
            .field("id", &self.id)
            .field("source", &self.source)
            .field("steps", &self.steps.len())
            .finish_non_exhaustive()
    }
}

impl ReplayModel {
    /// Loads a recording.
    pub async fn load(path: &Path) -> Result<Self, RecordingError> {
        let bytes = tokio::fs::read(path)
            .await
            .map_err(|source| RecordingError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        let text = String::from_utf8_lossy(&bytes);
        Self::from_text(&text, path)
    }

    /// A replay of recording text; `source` names it in messages.
    pub fn from_text(text: &str, source: &Path) -> Result<Self, RecordingError> {
        let parsed = parse_recording(text, source)?;
        if parsed.complete_len < text.len() {
            tracing::warn!(
                path = %source.display(),
                "recording ends in an unfinished line (an interrupted write); it is ignored"
            );
        }
        Ok(Self::from_steps(parsed.steps, source))
    }

    /// A replay of recorded steps.
    pub fn from_steps(steps: Vec<RecordedStep>, source: &Path) -> Self {
        // The replay reports the recorded model's id, so a replayed session's
        // events (`turn.started`, `turn.completed`) match the recorded ones.
        let id = steps
            .first()
            .map(|s| s.model.clone())
            .unwrap_or_else(|| format!("replay/{}", source.display()));
        Self {
            id,
            source: source.to_path_buf(),
            steps,
            next: Mutex::new(None),
        }
    }

    /// Recorded steps.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// True when the recording holds no steps.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// The 1-based number of the next step to play; `None` before the first.
    pub fn next_step(&self) -> Option<usize> {
        self.cursor().map(|i| i + 1)
    }

    fn cursor(&self) -> MutexGuardOpt<'_> {
        // A poisoned lock only means a panic elsewhere while holding it; the
        // cursor is a plain number that stays meaningful.
        self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where a fresh replay starts for `request`: the first step with an
    /// equal request, else `Err` with the step that shares the longest
    /// message prefix with it (the earliest on a tie).
    fn seek(&self, request: &RecordedRequest) -> Result<usize, usize> {
        if let Some(i) = self
            .steps
            .iter()
            .position(|s| request_difference(&s.request, request).is_none())
        {
            return Ok(i);
        }
        let common = |s: &RecordedStep| {
            s.request
                .messages
                .iter()
                .zip(&request.messages)
                .take_while(|(a, b)| a == b)
                .count()
        };
        let mut best = 0;
        let mut best_len = 0;
        for (i, s) in self.steps.iter().enumerate() {
            let n = common(s);
            if n > best_len {
                best = i;
                best_len = n;
            }
        }
        Err(best)
    }
}

type MutexGuardOpt<'a> = std::sync::MutexGuard<'a, Option<usize>>;

#[async_trait]
impl Model for ReplayModel {
    fn id(&self) -> &str {
        &self.id
    }

    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        if cancel.is_cancelled() {
            return Err(ModelError::Cancelled);
        }
        let incoming = RecordedRequest::from(&request);
        let index = {
            let mut cursor = self.cursor();
            let index = match *cursor {
                Some(i) => i,
                None => self.seek(&incoming).unwrap_or_else(|closest| closest),
            };
            *cursor = Some(index + 1);
            index
        };
        let n = index + 1;
        let source = self.source.display();
        let Some(step) = self.steps.get(index) else {
            return Err(ModelError::Provider(format!(
                "replay of {source}: step {n} was requested, but the recording holds only {} step(s); the conversation went further than the recording",
                self.steps.len()
            )));
        };
        if let Some(diff) = request_difference(&step.request, &incoming) {
            return Err(ModelError::Provider(format!(
                "replay of {source}: step {n} does not match the recording: {diff}"
            )));
        }
        let events: Vec<Result<ModelEvent, ModelError>> = step
            .events
            .iter()
            .map(RecordedEvent::to_model_event)
            .collect();
        Ok(futures::stream::iter(events).boxed())
    }
}

/// The first difference between a recorded and an incoming request in the
/// compared fields (`system`, `tools`, `messages`), as a short message;
/// `None` when they are equal.
pub fn request_difference(recorded: &RecordedRequest, got: &RecordedRequest) -> Option<String> {
    let as_json = |r: &RecordedRequest| -> [(&'static str, Value); 3] {
        [
            ("system", Value::String(r.system.clone())),
            (
                "tools",
                serde_json::to_value(&r.tools).unwrap_or(Value::Null),
            ),
            (
                "messages",
                serde_json::to_value(&r.messages).unwrap_or(Value::Null),
            ),
        ]
    };
    for ((field, a), (_, b)) in as_json(recorded).iter().zip(as_json(got).iter()) {
        if let Some((path, ra, gb)) = first_difference(field.to_string(), Some(a), Some(b)) {
            return Some(format!(
                "`{path}` differs: recorded {}, got {}",
                excerpt(ra),
                excerpt(gb)
            ));
        }
    }
    None
}

fn first_difference<'a>(
    path: String,
    a: Option<&'a Value>,
    b: Option<&'a Value>,
) -> Option<(String, Option<&'a Value>, Option<&'a Value>)> {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .find_map(|k| first_difference(format!("{path}.{k}"), x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => (0..x.len().max(y.len()))
            .find_map(|i| first_difference(format!("{path}[{i}]"), x.get(i), y.get(i))),
        (a, b) if a == b => None,
        (a, b) => Some((path, a, b)),
    }
}

/// A value shortened for a one-line message.
fn excerpt(v: Option<&Value>) -> String {
    const MAX: usize = 80;
    let Some(v) = v else {
        return "nothing".into();
    };
    let s = v.to_string();
    if s.chars().count() <= MAX {
        return s;
    }
    let cut: String = s.chars().take(MAX).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "default".into(),
            system: "be brief".into(),
            messages,
            tools: vec![ToolDefinition {
                name: "lookup".into(),
                description: "looks up".into(),
                input_schema: json!({"type": "object"}),
            }]
            .into(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        }
    }

    fn user(t: &str) -> Message {
        Message::User { text: t.into() }
    }

    #[test]
    fn events_round_trip_through_json() {
        let events = vec![
            ModelEvent::ReasoningDelta("hmm".into()),
            ModelEvent::TextDelta("hé".into()),
            ModelEvent::ToolCall(ToolCall {
                id: "call_1".into(),
                name: "lookup".into(),
                input: json!({"city": "Paris"}),
            }),
            ModelEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 4,
                cache_read_tokens: 5,
                cache_write_tokens: 6,
            }),
            ModelEvent::Stop(StopReason::ToolCalls),
            ModelEvent::Stop(StopReason::Other("content_filter".into())),
        ];
        for e in events {
            let rec = RecordedEvent::from_event(&e);
            let line = serde_json::to_string(&rec).unwrap();
            let back: RecordedEvent = serde_json::from_str(&line).unwrap();
            assert_eq!(back.to_model_event().unwrap(), e, "{line}");
        }
        let usage = serde_json::to_value(RecordedEvent::Usage(Usage::default())).unwrap();
        assert_eq!(usage["type"], "usage");
        assert_eq!(usage["inputTokens"], 0);
        for err in [
            ModelError::Config("no key".into()),
            ModelError::Provider("overloaded".into()),
            ModelError::Timeout(1500),
        ] {
            let rec = RecordedEvent::from_error(&err);
            let line = serde_json::to_string(&rec).unwrap();
            let back: RecordedEvent = serde_json::from_str(&line).unwrap();
            let again = back.to_model_event().unwrap_err();
            assert_eq!(again.to_string(), err.to_string(), "{line}");
        }
    }

    #[test]
    fn differences_name_the_first_differing_field() {
        let a = RecordedRequest::from(&request(vec![user("weather in Paris")]));
        assert_eq!(request_difference(&a, &a.clone()), None);
        let mut other_model = a.clone();
        other_model.model = "grok".into();
        other_model.effort = Some("high".into());
        assert_eq!(request_difference(&a, &other_model), None, "informational");

        let b = RecordedRequest::from(&request(vec![user("weather in Rome")]));
        let d = request_difference(&a, &b).unwrap();
        assert_eq!(
            d,
            "`messages[0].text` differs: recorded \"weather in Paris\", got \"weather in Rome\""
        );
        let c = RecordedRequest::from(&request(vec![user("weather in Paris"), user("more")]));
        let d = request_difference(&a, &c).unwrap();
        assert!(
            d.starts_with("`messages[1]` differs: recorded nothing, got {"),
            "{d}"
        );
        let mut s = a.clone();
        s.system = "be verbose".into();
        assert!(
            request_difference(&a, &s)
                .unwrap()
                .starts_with("`system` differs")
        );
        let mut t = a.clone();
        t.tools[0].input_schema = json!({"type": "object", "required": ["x"]});
        let d = request_difference(&a, &t).unwrap();
        assert!(
            d.starts_with("`tools[0].input_schema.required` differs"),
            "{d}"
        );
        let long = RecordedRequest::from(&request(vec![user(&"x".repeat(500))]));
        let d = request_difference(&a, &long).unwrap();
        assert!(d.len() < 250 && d.ends_with("…"), "{d}");
    }

    #[test]
    fn parsing_checks_the_header_and_ignores_an_unfinished_last_line() {
        let p = Path::new("r.jsonl");
        let header = format!(
            "{{\"version\":1,\"format\":\"{FORMAT_NAME}\",\"createdAt\":\"2026-01-01T00:00:00Z\"}}\n"
        );
        let step = serde_json::to_string(&RecordedStep {
            step: 1,
            model: "scripted/default".into(),
            request: RecordedRequest::from(&request(vec![user("hi")])),
            events: vec![RecordedEvent::Stop {
                reason: "stop".into(),
            }],
        })
        .unwrap();
        let text = format!("{header}{step}\n{{\"step\":2,\"mod");
        let parsed = parse_recording(&text, p).unwrap();
        assert_eq!(parsed.steps.len(), 1);
        assert_eq!(parsed.complete_len, header.len() + step.len() + 1);

        let e = parse_recording("", p).unwrap_err().to_string();
        assert!(e.contains("empty"), "{e}");
        let e = parse_recording(&header.replace("\"version\":1", "\"version\":2"), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("version 2 is not supported"), "{e}");
        let e = parse_recording(&format!("{header}not json\n"), p)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("r.jsonl: line 2: not a recorded step"), "{e}");
        let e = parse_recording("{\"hello\":1}\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a recording header"), "{e}");
    }

    #[tokio::test]
    async fn a_fresh_replay_that_matches_nothing_names_where_the_conversation_left_the_recording() {
        let answer = Message::Assistant {
            text: "ok".into(),
            tool_calls: Vec::new(),
        };
        let step = |n: u64, messages: Vec<Message>| RecordedStep {
            step: n,
            model: "scripted/default".into(),
            request: RecordedRequest::from(&request(messages)),
            events: vec![RecordedEvent::Stop {
                reason: "stop".into(),
            }],
        };
        let steps = vec![
            step(1, vec![user("one")]),
            step(2, vec![user("one"), answer.clone(), user("two")]),
            step(3, vec![user("unrelated")]),
        ];
        let replay = ReplayModel::from_steps(steps, Path::new("rec.jsonl"));
        let Err(e) = replay
            .step(
                request(vec![user("one"), answer, user("three")]),
                CancellationToken::new(),
            )
            .await
        else {
            panic!("must fail");
        };
        assert!(
            e.to_string().contains(
                "step 2 does not match the recording: `messages[2].text` differs: recorded \"two\", got \"three\""
            ),
            "{e}"
        );
    }

    #[tokio::test]
    async fn replay_plays_steps_in_order_and_fails_loudly_past_the_end_or_on_mismatch() {
        let steps = vec![
            RecordedStep {
                step: 1,
                model: "xai/grok-4.3".into(),
                request: RecordedRequest::from(&request(vec![user("one")])),
                events: vec![
                    RecordedEvent::Text {
                        delta: "first".into(),
                    },
                    RecordedEvent::Stop {
                        reason: "stop".into(),
                    },
                ],
            },
            RecordedStep {
                step: 2,
                model: "xai/grok-4.3".into(),
                request: RecordedRequest::from(&request(vec![user("two")])),
                events: vec![RecordedEvent::Error {
                    kind: ErrorKind::Provider,
                    message: "overloaded".into(),
                    timeout_ms: None,
                }],
            },
        ];
        let replay = ReplayModel::from_steps(steps.clone(), Path::new("rec.jsonl"));
        assert_eq!(replay.id(), "xai/grok-4.3");
        let out: Vec<_> = replay
            .step(request(vec![user("one")]), CancellationToken::new())
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0].as_ref().unwrap(),
            &ModelEvent::TextDelta("first".into())
        );
        let out: Vec<_> = replay
            .step(request(vec![user("two")]), CancellationToken::new())
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(
            out[0].as_ref().unwrap_err().to_string(),
            "model request failed: overloaded"
        );
        let Err(e) = replay
            .step(request(vec![user("three")]), CancellationToken::new())
            .await
        else {
            panic!("a step past the end must fail");
        };
        assert!(
            e.to_string()
                .contains("step 3 was requested, but the recording holds only 2 step(s)"),
            "{e}"
        );

        // A fresh replay continuing a conversation (a new process) starts
        // at the step its first request matches, then keeps strict order.
        let replay = ReplayModel::from_steps(steps.clone(), Path::new("rec.jsonl"));
        assert_eq!(replay.next_step(), None);
        let out: Vec<_> = replay
            .step(request(vec![user("two")]), CancellationToken::new())
            .await
            .unwrap()
            .collect()
            .await;
        assert!(out[0].is_err());
        assert_eq!(replay.next_step(), Some(3));

        let replay = ReplayModel::from_steps(steps, Path::new("rec.jsonl"));
        let Err(e) = replay
            .step(request(vec![user("uno")]), CancellationToken::new())
            .await
        else {
            panic!("a mismatched step must fail");
        };
        assert_eq!(
            e.to_string(),
            "model request failed: replay of rec.jsonl: step 1 does not match the recording: `messages[0].text` differs: recorded \"one\", got \"uno\""
        );
    }
}
