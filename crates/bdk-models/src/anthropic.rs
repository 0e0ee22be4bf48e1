//! The Anthropic Messages provider.
//!
//! One step is one streaming `POST {base_url}/v1/messages`. The system prompt
//! goes in `system`; tool results travel as `tool_result` blocks of user
//! messages (consecutive results merged into one message, as the API wants
//! strictly alternating roles); `effort` turns on extended thinking with a
//! token budget. The stream's `message_start` / `content_block_*` /
//! `message_delta` / `message_stop` events become text, thinking and tool-call
//! events plus usage with cache reads and writes.
//!
//! Extended thinking has one stateful rule: while a tool loop runs, the
//! assistant message that asked for the tools must be sent back starting with
//! its signed thinking blocks. The conversation the agent loop keeps has no
//! place for signatures, so the model remembers them itself, keyed by the
//! step's first tool-call id; when they are not known (after a restart),
//! thinking is left off for that step instead of failing it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bdk_events::Usage;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::http::{
    Decoder, HttpOptions, PostRequest, SseEvent, StepClock, bad_chunk, drive, ended_early, open,
    secret_header, stream_error,
};
use super::{
    Image, Message, Model, ModelError, ModelEvent, ModelRequest, ModelStream, StopReason, ToolCall,
    ToolChoice,
};

/// The `max_tokens` of a step (the API requires one). With thinking on, the
/// thinking budget is added on top, so the visible answer keeps this much.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The API version every request names.
pub const API_VERSION: &str = "2023-06-01";

/// How many steps' thinking blocks are remembered for tool loops.
const THINKING_MEMORY: usize = 256;

/// Where and how an Anthropic model is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnthropicConfig {
    /// The full model string (`anthropic/claude-sonnet-4-5`).
    pub id: String,
    /// The API base without the version (`https://api.anthropic.com`); a
    /// base that already ends in `/v1` is used as is.
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: String,
    /// The environment variable the key comes from, named in auth errors.
    pub key_env: Option<String>,
    /// `max_tokens` of each step.
    pub max_tokens: u32,
    /// Timeouts and retries.
    pub http: HttpOptions,
}

/// The thinking budget for an `effort` value, `None` for thinking off.
pub fn thinking_budget(effort: &str) -> Result<Option<u32>, ModelError> {
    match effort.trim().to_ascii_lowercase().as_str() {
        "none" | "off" | "minimal" => Ok(None),
        "low" => Ok(Some(1024)),
        "medium" => Ok(Some(4096)),
        "high" => Ok(Some(16384)),
        other => Err(ModelError::Config(format!(
            "effort `{other}` is not understood by anthropic models; use low, medium or high (or remove `effort` from agent/agent.toml)"
        ))),
    }
}

/// Signed thinking blocks of recent steps, by the step's first tool-call id.
#[derive(Default)]
struct ThinkingMemory {
    entries: VecDeque<(String, Vec<Value>)>,
}

impl ThinkingMemory {
    fn get(&self, call_id: &str) -> Option<Vec<Value>> {
        self.entries
            .iter()
            .find(|(id, _)| id == call_id)
            .map(|(_, blocks)| blocks.clone())
    }

    fn put(&mut self, call_id: String, blocks: Vec<Value>) {
        if self.entries.len() >= THINKING_MEMORY {
            self.entries.pop_front();
        }
        self.entries.push_back((call_id, blocks));
    }
}

/// A model behind the Anthropic Messages API.
pub struct AnthropicModel {
    config: AnthropicConfig,
    thinking: Arc<Mutex<ThinkingMemory>>,
}

impl AnthropicModel {
    /// A model with `config`. Nothing is contacted until the first step.
    pub fn new(config: AnthropicConfig) -> Self {
        Self {
            config,
            thinking: Arc::default(),
        }
    }

    fn remembered(&self, call_id: &str) -> Option<Vec<Value>> {
        // A poisoned lock only means another step panicked mid-insert; the
        // memory is a cache, so carry on with what it holds.
        let memory = self
            .thinking
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        memory.get(call_id)
    }
}

#[async_trait]
impl Model for AnthropicModel {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let budget = match &request.effort {
            Some(effort) => thinking_budget(effort)?,
            None => None,
        };
        let clock = StepClock::start(cancel, self.config.http.step_timeout);
        let max_tokens = request.max_tokens.unwrap_or(self.config.max_tokens);
        let body = request_body(&request, max_tokens, budget, &|id| self.remembered(id));
        let body = serde_json::to_vec(&body)
            .map_err(|e| ModelError::Provider(format!("failed to encode the request: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-api-key",
            secret_header(&self.config.api_key, self.config.key_env.as_deref())?,
        );
        headers.insert("anthropic-version", HeaderValue::from_static(API_VERSION));
        let base = self.config.base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        };
        let url = reqwest::Url::parse(&url).map_err(|e| {
            ModelError::Config(format!(
                "the model's base URL `{}` does not make a valid URL (`{url}`: {e})",
                self.config.base_url
            ))
        })?;
        let post = PostRequest {
            url,
            headers,
            body,
            key_env: self.config.key_env.clone(),
        };
        let opened = open(&post, &self.config.http.retry, &clock).await?;
        let decoder = MessagesDecoder {
            memory: Arc::clone(&self.thinking),
            ..MessagesDecoder::default()
        };
        Ok(drive(opened, decoder, clock))
    }
}

/// The Messages request body of one step. `remembered` returns the signed
/// thinking blocks of the step whose first tool call has the given id.
fn request_body(
    request: &ModelRequest,
    max_tokens: u32,
    budget: Option<u32>,
    remembered: &dyn Fn(&str) -> Option<Vec<Value>>,
) -> Value {
    let mut messages: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        // Roles must alternate: consecutive tool results (and a nudge that
        // follows them) share one user message.
        match messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    };
    // Thinking stays on only if the tool loop in progress (if any) can be
    // continued with the thinking blocks that started it.
    let mut thinking_ok = true;
    let last_assistant = request
        .messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }));
    for (i, message) in request.messages.iter().enumerate() {
        match message {
            Message::User { text } => {
                if !text.is_empty() {
                    push("user", vec![json!({"type": "text", "text": text})]);
                }
            }
            Message::Assistant { text, tool_calls } => {
                let mut blocks = Vec::new();
                if let Some(first) = tool_calls.first() {
                    match remembered(&first.id) {
                        Some(thinking) => blocks.extend(thinking),
                        None if Some(i) == last_assistant => thinking_ok = false,
                        None => {}
                    }
                }
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.input),
                    }));
                }
                push("assistant", blocks);
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                images,
                ..
            } => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": tool_result_content(content, images),
                });
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push("user", vec![block]);
            }
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    // Anthropic refuses a forced tool while thinking is on, so a forced
    // choice turns thinking off for that step.
    let budget = budget.filter(|_| thinking_ok && !forced_choice(request));
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert(
        "max_tokens".into(),
        json!(max_tokens.saturating_add(budget.unwrap_or(0))),
    );
    if !request.system.is_empty() {
        body.insert("system".into(), json!(request.system));
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "name": t.name,
                    "description": t.description,
                    "input_schema": t.input_schema,
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        let choice = match &request.tool_choice {
            Some(ToolChoice::Auto) => Some(json!({"type": "auto"})),
            Some(ToolChoice::Required) => Some(json!({"type": "any"})),
            Some(ToolChoice::None) => Some(json!({"type": "none"})),
            Some(ToolChoice::Tool(name)) => Some(json!({"type": "tool", "name": name})),
            None => None,
        };
        if let Some(choice) = choice {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(budget) = budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    body.insert("stream".into(), json!(true));
    Value::Object(body)
}

/// Whether the step forces a tool call (Anthropic's `any` or `tool`).
fn forced_choice(request: &ModelRequest) -> bool {
    !request.tools.is_empty()
        && matches!(
            request.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        )
}

/// `tool_use.input` must be an object; anything else (an unparseable input
/// kept as a string by another provider) is wrapped so the request stays valid.
fn tool_input(input: &Value) -> Value {
    match input {
        Value::Object(_) => input.clone(),
        other => json!({"input": other}),
    }
}

/// A content block while it streams.
#[derive(Debug)]
enum Block {
    Text,
    Thinking {
        text: String,
        signature: String,
    },
    Redacted {
        data: Value,
    },
    ToolUse {
        id: String,
        name: String,
        json: String,
        initial: Value,
    },
    Other,
}

/// Decodes Messages stream events.
#[derive(Default)]
struct MessagesDecoder {
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    /// Whether the stream reported any count: without one the step's usage
    /// is unknown, which is not zero.
    usage_seen: bool,
    /// The last finished `tool_use` block (id, name, argument text, initial
    /// input), held until the next block shows whether it continues it.
    pending_call: Option<(String, String, String, Value)>,
    stop: Option<StopReason>,
    /// Whether the message carried anything: text, reasoning or a call.
    produced: bool,
    /// Finished thinking blocks, as they must be sent back.
    thinking: Vec<Value>,
    first_call: Option<String>,
    memory: Arc<Mutex<ThinkingMemory>>,
}

impl MessagesDecoder {
    fn usage_fields(&mut self, usage: &Value) {
        // `message_delta` repeats some counts cumulatively and leaves the
        // others null: only a present number replaces what is known.
        let n = |key: &str| usage[key].as_u64();
        if let Some(v) = n("input_tokens") {
            self.usage.input_tokens = v;
            self.usage_seen = true;
        }
        if let Some(v) = n("output_tokens") {
            self.usage.output_tokens = v;
            self.usage_seen = true;
        }
        if let Some(v) = n("cache_read_input_tokens") {
            self.usage.cache_read_tokens = v;
            self.usage_seen = true;
        }
        if let Some(v) = n("cache_creation_input_tokens") {
            self.usage.cache_write_tokens = v;
            self.usage_seen = true;
        }
    }

    fn block_start(&mut self, index: u64, block: &Value, out: &mut VecDeque<ModelEvent>) {
        let text = |key: &str| block[key].as_str().unwrap_or_default().to_owned();
        let started = match block["type"].as_str().unwrap_or_default() {
            "text" => {
                let t = text("text");
                if !t.is_empty() {
                    self.produced = true;
                    out.push_back(ModelEvent::TextDelta(t));
                }
                Block::Text
            }
            "thinking" => {
                let t = text("thinking");
                if !t.is_empty() {
                    out.push_back(ModelEvent::ReasoningDelta(t.clone()));
                }
                Block::Thinking {
                    text: t,
                    signature: text("signature"),
                }
            }
            "redacted_thinking" => Block::Redacted {
                data: block["data"].clone(),
            },
            "tool_use" => Block::ToolUse {
                id: text("id"),
                name: text("name"),
                json: String::new(),
                initial: block["input"].clone(),
            },
            _ => Block::Other,
        };
        if !matches!(started, Block::Text | Block::Other) {
            self.produced = true;
        }
        self.blocks.insert(index, started);
    }

    fn block_delta(&mut self, index: u64, delta: &Value, out: &mut VecDeque<ModelEvent>) {
        let text = |key: &str| delta[key].as_str().unwrap_or_default();
        match (
            delta["type"].as_str().unwrap_or_default(),
            self.blocks.get_mut(&index),
        ) {
            ("text_delta", _) => {
                let t = text("text");
                if !t.is_empty() {
                    self.produced = true;
                    out.push_back(ModelEvent::TextDelta(t.to_owned()));
                }
            }
            ("thinking_delta", block) => {
                let t = text("thinking");
                if let Some(Block::Thinking { text: all, .. }) = block {
                    all.push_str(t);
                }
                if !t.is_empty() {
                    self.produced = true;
                    out.push_back(ModelEvent::ReasoningDelta(t.to_owned()));
                }
            }
            ("signature_delta", Some(Block::Thinking { signature, .. })) => {
                signature.push_str(text("signature"));
            }
            ("input_json_delta", Some(Block::ToolUse { json, .. })) => {
                json.push_str(text("partial_json"));
            }
            _ => {}
        }
    }

    fn block_stop(&mut self, index: u64, out: &mut VecDeque<ModelEvent>) {
        match self.blocks.remove(&index) {
            Some(Block::ToolUse {
                id,
                name,
                json,
                initial,
            }) => {
                // Translating proxies (LiteLLM's `/v1/messages`) may split
                // one call's arguments over several consecutive `tool_use`
                // blocks that repeat its id. Ids are unique per call, so a
                // block with the id of the one before continues it.
                if let Some(pending) = &mut self.pending_call
                    && !id.is_empty()
                    && pending.0 == id
                {
                    pending.2.push_str(&json);
                    return;
                }
                self.flush_call(out);
                self.pending_call = Some((id, name, json, initial));
            }
            Some(Block::Thinking { text, signature }) => self.thinking.push(json!({
                "type": "thinking",
                "thinking": text,
                "signature": signature,
            })),
            Some(Block::Redacted { data }) => self.thinking.push(json!({
                "type": "redacted_thinking",
                "data": data,
            })),
            Some(Block::Text | Block::Other) | None => {}
        }
    }

    /// Hands on the tool call held back by [`Self::block_stop`].
    fn flush_call(&mut self, out: &mut VecDeque<ModelEvent>) {
        let Some((id, name, json, initial)) = self.pending_call.take() else {
            return;
        };
        let input = if json.trim().is_empty() {
            if initial.is_object() {
                initial
            } else {
                Value::Object(Map::new())
            }
        } else {
            serde_json::from_str(&json).unwrap_or(Value::String(json))
        };
        let id = if id.is_empty() {
            bdk_events::ids::new_call_id()
        } else {
            id
        };
        if self.first_call.is_none() {
            self.first_call = Some(id.clone());
        }
        out.push_back(ModelEvent::ToolCall(ToolCall { id, name, input }));
    }

    fn finalize(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        // A message with nothing in it that counted no input either: no
        // model read this prompt (every prompt has tokens). LiteLLM's
        // `/v1/messages` answers like this when the OpenAI-compatible server
        // behind it failed the request (llama-cpp-python does on a prompt
        // over its n_ctx, and on an assistant tool-call message without
        // `content`, which is how LiteLLM translates one). The same request
        // gets the same answer, so it fails the step rather than passing
        // for an empty reply.
        if !self.produced
            && self.usage_seen
            && self.usage.input_tokens == 0
            && self.usage.output_tokens == 0
        {
            return Err(ModelError::Provider(
                "the server answered with an empty message that counted no input tokens, so no model read the request; a translating proxy such as LiteLLM answers this way when the server behind it failed, and that server's log says why (llama.cpp fails like this on a conversation over its n_ctx: start it with a larger context, or set `context_window` in agent.toml to its size)".to_owned(),
            ));
        }
        // Blocks the server never closed: hand on the tool calls anyway.
        let open: Vec<u64> = self.blocks.keys().copied().collect();
        for index in open {
            self.block_stop(index, out);
        }
        self.flush_call(out);
        if let Some(call) = self.first_call.take()
            && !self.thinking.is_empty()
        {
            let mut memory = self
                .memory
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            memory.put(call, std::mem::take(&mut self.thinking));
        }
        if self.usage_seen {
            out.push_back(ModelEvent::Usage(self.usage));
        }
        out.push_back(ModelEvent::Stop(
            self.stop.take().unwrap_or(StopReason::Stop),
        ));
        Ok(())
    }
}

impl Decoder for MessagesDecoder {
    fn event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ModelEvent>,
    ) -> Result<bool, ModelError> {
        if event.data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value = serde_json::from_str(&event.data).map_err(|e| bad_chunk(&event.data, &e))?;
        let kind = v["type"]
            .as_str()
            .or(event.event.as_deref())
            .unwrap_or_default();
        let index = v["index"].as_u64().unwrap_or(0);
        match kind {
            "message_start" => self.usage_fields(&v["message"]["usage"]),
            "content_block_start" => self.block_start(index, &v["content_block"], out),
            "content_block_delta" => self.block_delta(index, &v["delta"], out),
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => {
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    self.stop = Some(match reason {
                        "end_turn" | "stop_sequence" => StopReason::Stop,
                        "tool_use" => StopReason::ToolCalls,
                        "max_tokens" => StopReason::Length,
                        other => StopReason::Other(other.to_owned()),
                    });
                }
                self.usage_fields(&v["usage"]);
            }
            "message_stop" => {
                self.finalize(out)?;
                return Ok(true);
            }
            "error" => return Err(stream_error(&event.data)),
            // `ping` and event types newer than this code.
            _ => {}
        }
        Ok(false)
    }

    fn end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        // `message_delta` carries the stop reason; a stream cut after it
        // lost nothing but `message_stop` itself.
        if self.stop.is_some() {
            self.finalize(out)
        } else {
            Err(ended_early(None))
        }
    }
}

/// The media types Anthropic takes as image blocks.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// A tool result's `content`: its text alone, or the text followed by the
/// tool's images as image blocks (those of a type Anthropic takes; the text
/// names every image, so one it cannot show is still accounted for).
fn tool_result_content(text: &str, images: &[Image]) -> Value {
    let shown: Vec<&Image> = images
        .iter()
        .filter(|i| IMAGE_TYPES.contains(&i.media_type.as_str()))
        .collect();
    if shown.is_empty() {
        return Value::String(text.to_owned());
    }
    let mut blocks = Vec::with_capacity(shown.len() + 1);
    if !text.is_empty() {
        blocks.push(json!({"type": "text", "text": text}));
    }
    for image in shown {
        blocks.push(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": image.media_type, "data": image.data},
        }));
    }
    Value::Array(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "t".into(),
            input: json!({"q": 1}),
        }
    }

    fn tool(id: &str, content: &str, is_error: bool) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: "t".into(),
            content: content.into(),
            is_error,
            images: Vec::new(),
        }
    }

    fn request(messages: Vec<Message>, effort: Option<&str>) -> ModelRequest {
        ModelRequest {
            model: "claude-x".into(),
            system: "sys".into(),
            messages,
            tools: Default::default(),
            effort: effort.map(str::to_owned),
            tool_choice: None,
            max_tokens: None,
        }
    }

    #[tokio::test]
    async fn a_base_url_that_makes_no_url_fails_the_step_and_says_which() {
        let model = AnthropicModel::new(AnthropicConfig {
            id: "anthropic/claude-x".into(),
            base_url: "http://[::1".into(),
            api_key: "key".into(),
            key_env: None,
            max_tokens: 64,
            http: HttpOptions::default(),
        });
        let step = model.step(
            request(vec![Message::User { text: "hi".into() }], None),
            CancellationToken::new(),
        );
        let Err(ModelError::Config(message)) = step.await else {
            panic!("the step should fail with a configuration error");
        };
        assert!(
            message.contains("`http://[::1`") && message.contains("/v1/messages"),
            "{message}"
        );
    }

    #[test]
    fn a_call_split_over_blocks_with_one_id_is_one_call() {
        // As LiteLLM's `/v1/messages` streams a call translated from an
        // OpenAI-compatible server: one block per argument fragment.
        let mut d = MessagesDecoder::default();
        let mut out = VecDeque::new();
        let mut feed = |d: &mut MessagesDecoder, data: Value| {
            let event = data["type"].as_str().unwrap().to_owned();
            d.event(
                SseEvent {
                    event: Some(event),
                    data: data.to_string(),
                },
                &mut out,
            )
            .unwrap();
        };
        feed(
            &mut d,
            json!({"type": "message_start", "message": {"usage": {}}}),
        );
        for (i, part) in ["{\"ci", "ty\": \"Par", "is\"}"].iter().enumerate() {
            feed(
                &mut d,
                json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {}}}),
            );
            feed(
                &mut d,
                json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": part}}),
            );
            feed(&mut d, json!({"type": "content_block_stop", "index": i}));
        }
        feed(
            &mut d,
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "c2", "name": "get_weather", "input": {"city": "Oslo"}}}),
        );
        feed(&mut d, json!({"type": "content_block_stop", "index": 3}));
        feed(
            &mut d,
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}),
        );
        feed(&mut d, json!({"type": "message_stop"}));
        let calls: Vec<ToolCall> = out
            .into_iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCall(c) => Some(c),
                _ => None,
            })
            .collect();
        assert_eq!(
            calls,
            vec![
                ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Paris"})
                },
                ToolCall {
                    id: "c2".into(),
                    name: "get_weather".into(),
                    input: json!({"city": "Oslo"})
                },
            ]
        );
    }

    /// Feeds `events` (their `type` doubles as the SSE event name) and
    /// returns what came out, or the first error.
    fn decode(events: &[Value]) -> Result<Vec<ModelEvent>, ModelError> {
        let mut d = MessagesDecoder::default();
        let mut out = VecDeque::new();
        for data in events {
            let event = data["type"].as_str().unwrap().to_owned();
            d.event(
                SseEvent {
                    event: Some(event),
                    data: data.to_string(),
                },
                &mut out,
            )?;
        }
        Ok(out.into_iter().collect())
    }

    #[test]
    fn an_empty_message_that_counted_no_input_fails_the_step() {
        // What LiteLLM 1.108's `/v1/messages` streams when llama-cpp-python
        // behind it failed on a prompt over its n_ctx.
        let zero = json!({"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
        let empty = [
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": zero}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 0, "output_tokens": 0}}),
            json!({"type": "message_stop"}),
        ];
        let Err(ModelError::Provider(message)) = decode(&empty) else {
            panic!("an empty, uncounted message must fail");
        };
        assert!(
            message.contains("empty message") && message.contains("n_ctx"),
            "{message}"
        );

        // The same shape with text, or with counted input, is an answer.
        let mut with_text = empty.to_vec();
        with_text.insert(
            2,
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
        );
        assert!(decode(&with_text).is_ok());
        let mut counted = empty.to_vec();
        counted[3] = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"input_tokens": 12, "output_tokens": 0}});
        let out = decode(&counted).unwrap();
        assert!(matches!(
            out.last(),
            Some(ModelEvent::Stop(StopReason::Stop))
        ));
        // A stream that reports no usage at all is not judged by it.
        let mut unreported = empty.to_vec();
        unreported[0] = json!({"type": "message_start", "message": {"usage": {}}});
        unreported[3] =
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}});
        assert!(decode(&unreported).is_ok());
    }

    #[test]
    fn tool_results_merge_into_one_user_message() {
        let req = request(
            vec![
                Message::User { text: "go".into() },
                Message::Assistant {
                    text: "checking".into(),
                    tool_calls: vec![call("a"), call("b")],
                },
                tool("a", "1", false),
                tool("b", "oops", true),
                Message::User {
                    text: "also this".into(),
                },
            ],
            None,
        );
        let body = request_body(&req, DEFAULT_MAX_TOKENS, None, &|_| None);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["max_tokens"], 8192);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "go"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "a", "name": "t", "input": {"q": 1}},
                    {"type": "tool_use", "id": "b", "name": "t", "input": {"q": 1}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": "1"},
                    {"type": "tool_result", "tool_use_id": "b", "content": "oops", "is_error": true},
                    {"type": "text", "text": "also this"},
                ]},
            ])
        );
    }

    #[test]
    fn tool_images_travel_as_image_blocks_of_the_result() {
        let png = Image {
            media_type: "image/png".into(),
            data: "iVBORw0KGgo=".into(),
        };
        let tiff = Image {
            media_type: "image/tiff".into(),
            data: "SUkqAA==".into(),
        };
        let shot = Message::Tool {
            call_id: "a".into(),
            name: "t".into(),
            content: "[image: image/png] [image: image/tiff]".into(),
            is_error: false,
            images: vec![png, tiff.clone()],
        };
        let only_tiff = Message::Tool {
            call_id: "b".into(),
            name: "t".into(),
            content: "[image: image/tiff]".into(),
            is_error: false,
            images: vec![tiff],
        };
        let req = request(
            vec![
                Message::User { text: "go".into() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![call("a"), call("b")],
                },
                shot,
                only_tiff,
            ],
            None,
        );
        let body = request_body(&req, DEFAULT_MAX_TOKENS, None, &|_| None);
        assert_eq!(
            body["messages"][2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "a", "content": [
                    {"type": "text", "text": "[image: image/png] [image: image/tiff]"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                ]},
                // A type Anthropic does not take stays named in the text only.
                {"type": "tool_result", "tool_use_id": "b", "content": "[image: image/tiff]"},
            ])
        );
    }

    #[test]
    fn thinking_needs_the_remembered_blocks_of_the_tool_loop() {
        let msgs = vec![
            Message::User { text: "go".into() },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("a")],
            },
            tool("a", "1", false),
        ];
        let budget = thinking_budget("medium").unwrap();
        let forgotten = request_body(&request(msgs.clone(), None), 8192, budget, &|_| None);
        assert!(forgotten.get("thinking").is_none());
        assert_eq!(forgotten["max_tokens"], 8192);
        let block = json!({"type": "thinking", "thinking": "hmm", "signature": "sig"});
        let known = request_body(&request(msgs, None), 8192, budget, &|id| {
            (id == "a").then(|| vec![block.clone()])
        });
        assert_eq!(
            known["thinking"],
            json!({"type": "enabled", "budget_tokens": 4096})
        );
        assert_eq!(known["max_tokens"], 8192 + 4096);
        assert_eq!(known["messages"][1]["content"][0], block);
    }

    #[test]
    fn effort_maps_to_budgets() {
        assert_eq!(thinking_budget("low").unwrap(), Some(1024));
        assert_eq!(thinking_budget("High").unwrap(), Some(16384));
        assert_eq!(thinking_budget("minimal").unwrap(), None);
        assert!(thinking_budget("extreme").is_err());
    }
}
