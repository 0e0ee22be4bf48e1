//! The model layer of BDK: the [`Model`] port and its providers, usable
//! without the runtime.
//!
//! A [`Model`] takes the conversation so far ([`ModelRequest`]) and streams a
//! step back as [`ModelEvent`]s: text and reasoning deltas, complete tool
//! calls, usage, and a final stop reason. Whoever drives the model (the
//! runtime's agent loop, an eval judge, your own code) owns the step and
//! decides what happens next.
//!
//! Providers: [`scripted`] (offline, deterministic, driven by a rules file),
//! [`openai`] (OpenAI-compatible Chat Completions) and [`anthropic`]
//! (Anthropic Messages), the last two over the shared transport of [`http`]
//! (retries with backoff, timeouts, SSE); [`resolve::resolve_model`] picks
//! one from a `provider/model` string with its preset's base URL and key. Around any
//! model: [`replay`] records steps and plays them back, [`context`] keeps
//! each request inside the model's context window. [`prices`] turns usage
//! into cost; [`net`] is the process's one outbound HTTP client.
//!
//! Everything that runs a step sits behind the default `runtime` feature.
//! Without it the crate is plain data (the request, event and settings
//! types, the catalog, prices, provider names and the scripted rules
//! parser) with no async runtime or HTTP client: what `bdk-project` reads
//! an agent folder with.
//!
//! This crate knows the event vocabulary (`bdk-events`, for usage and for
//! pricing a session's events) and nothing else of BDK: no agent folder,
//! no sessions, no store.

use std::sync::Arc;

#[cfg(feature = "runtime")]
use async_trait::async_trait;
use bdk_events::Usage;
#[cfg(feature = "runtime")]
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
#[cfg(feature = "runtime")]
use tokio_util::sync::CancellationToken;

#[cfg(feature = "runtime")]
pub mod anthropic;
pub mod catalog;
#[cfg(feature = "runtime")]
pub mod context;
#[cfg(feature = "runtime")]
pub mod http;
#[cfg(feature = "runtime")]
mod memo;
#[cfg(feature = "runtime")]
pub mod net;
#[cfg(feature = "runtime")]
pub mod openai;
pub mod prices;
#[cfg(feature = "runtime")]
pub mod replay;
pub mod resolve;
#[cfg(feature = "schema")]
mod schema;
pub mod scripted;

/// The model used when `agent.toml` names none: xAI's current Grok.
pub const DEFAULT_MODEL: &str = "xai/grok-4.5";

/// `("scripted", "default")` for `scripted`, `("xai", "grok-4")` for `xai/grok-4`.
pub fn split_model(model: &str) -> (&str, &str) {
    match model.split_once('/') {
        Some((p, m)) => (p, m),
        None if model == "scripted" => ("scripted", "default"),
        None => (model, ""),
    }
}

/// Overrides of a provider's preset (`[provider]` in `agent.toml`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProviderConfig {
    /// The API base URL, replacing the preset's (for OpenAI-compatible
    /// providers up to and including the version, e.g. `http://host:8000/v1`).
    pub base_url: Option<String>,
    /// The name of the environment variable holding the API key (never the
    /// key itself); naming one makes the key required.
    pub api_key_env: Option<String>,
}

/// One message of the conversation sent to a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    /// A user prompt (or a nudge steered into a running turn).
    User {
        /// The text.
        text: String,
    },
    /// An assistant step: its text and the tool calls it asked for.
    Assistant {
        /// The visible text of the step (may be empty).
        text: String,
        /// Tool calls requested by the step.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The result of one tool call.
    Tool {
        /// The call it answers.
        call_id: String,
        /// The tool name.
        name: String,
        /// The result as text (JSON results are serialized).
        content: String,
        /// True when the call failed.
        is_error: bool,
        /// Images the tool returned beside its text (MCP image content),
        /// for providers that take images in tool results; `content` names
        /// each one, so providers that cannot show them still say what
        /// came back.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        images: Vec<Image>,
    },
}

/// An image in a tool result: base64 data and its media type.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The media type, e.g. `image/png`.
    pub media_type: String,
    /// The image bytes, base64-encoded (standard alphabet, padded).
    pub data: String,
}

/// A tool call requested by a model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider-assigned (or generated) call id.
    pub id: String,
    /// The tool name.
    pub name: String,
    /// The arguments, as parsed JSON (providers that stream argument text
    /// parse it; unparseable text arrives as a JSON string).
    pub input: Value,
}

/// What a model is told about one tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// The tool name.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// JSON Schema of its input.
    pub input_schema: Value,
}

/// One step's request.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelRequest {
    /// The model name after the provider prefix (`grok-4`, `default`, ...).
    pub model: String,
    /// The system prompt.
    pub system: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call. Shared: a turn builds its tools'
    /// definitions once and every step's request holds the same ones.
    pub tools: Arc<[ToolDefinition]>,
    /// Reasoning effort, when configured.
    pub effort: Option<String>,
    /// Whether and which tool the model must call; `None` leaves it to the
    /// provider's default (the model decides).
    pub tool_choice: Option<ToolChoice>,
    /// A cap on the step's output tokens; `None` is the provider's default
    /// (Anthropic, which requires one, gets its configured default).
    pub max_tokens: Option<u32>,
}

/// `tool_choice` of `agent.toml`: whether the model must call a tool.
///
/// The agent loop applies it to the first step of each turn only; later
/// steps are always [`ToolChoice::Auto`], or a forced call would repeat
/// forever. This is what an "always call X first" agent wants.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (the providers' default).
    Auto,
    /// The model must call some tool.
    Required,
    /// The model must not call tools.
    None,
    /// The model must call this tool.
    Tool(String),
}

/// Why a step ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished its answer.
    Stop,
    /// The model asked for tool calls.
    ToolCalls,
    /// The output hit the token limit.
    Length,
    /// Anything else the provider reported.
    Other(String),
}

impl StopReason {
    /// The wire spelling used on `step.completed.data.finishReason`.
    pub fn as_str(&self) -> &str {
        match self {
            StopReason::Stop => "stop",
            StopReason::ToolCalls => "tool_calls",
            StopReason::Length => "length",
            StopReason::Other(s) => s,
        }
    }
}

/// One item of a streamed step.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelEvent {
    /// Visible text.
    TextDelta(String),
    /// Reasoning text.
    ReasoningDelta(String),
    /// A complete tool call.
    ToolCall(ToolCall),
    /// Token usage of the step (may arrive more than once; the last wins).
    Usage(Usage),
    /// The step ended.
    Stop(StopReason),
}

/// Errors a model step can end in.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The model is not configured well enough to run (missing key, bad rules file).
    #[error("model is not configured: {0}")]
    Config(String),
    /// The provider refused or failed the request.
    #[error("model request failed: {0}")]
    Provider(String),
    /// The step was cancelled.
    #[error("model step cancelled")]
    Cancelled,
    /// The step took longer than its timeout.
    #[error("model step timed out after {0} ms")]
    Timeout(u64),
    /// The request is larger than the model's context window even after the
    /// context budget dropped every older turn and cut the tool results it
    /// may cut, so it was not sent.
    #[error(
        "the request does not fit the model's context window: about {estimated} tokens after trimming, and the window is {window}; shorten the message, or set `context_window` in agent.toml to the model's real window if it is larger"
    )]
    ContextOverflow {
        /// The estimated size of the trimmed request, in tokens.
        estimated: u64,
        /// The context window the budget was computed for.
        window: u64,
    },
}

impl ModelError {
    /// A low-cardinality class of the error, for metrics and traces
    /// (OpenTelemetry's `error.type`).
    pub fn error_type(&self) -> &'static str {
        match self {
            ModelError::Config(_) => "model_config",
            ModelError::Provider(_) => "model_provider",
            ModelError::Timeout(_) => "model_timeout",
            ModelError::ContextOverflow { .. } => "model_context_overflow",
            ModelError::Cancelled => "cancelled",
        }
    }
}

/// A streamed step.
#[cfg(feature = "runtime")]
pub type ModelStream = BoxStream<'static, Result<ModelEvent, ModelError>>;

/// A language model behind a provider.
#[cfg(feature = "runtime")]
#[async_trait]
pub trait Model: Send + Sync + 'static {
    /// The full model string (`provider/model`), as reported on `turn.completed`.
    fn id(&self) -> &str;

    /// Starts one step. The stream must end promptly (with
    /// [`ModelError::Cancelled`] or simply ending) once `cancel` fires, and
    /// dropping the stream must abort any work in flight.
    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError>;
}
