//! The OpenAI-compatible Chat Completions provider (xAI Grok, OpenAI,
//! Ollama, vLLM, llama.cpp's server, OpenRouter and the like).
//!
//! One step is one streaming `POST {base_url}/chat/completions`. The request
//! maps the conversation onto `system`/`user`/`assistant`/`tool` messages;
//! the stream is decoded into text and reasoning deltas (servers that expose
//! reasoning send it as `reasoning_content` or `reasoning`), tool calls
//! assembled from their per-index deltas, the usage of the final chunk, and
//! the finish reason. Retries, timeouts and cancellation are the shared ones
//! of [`super::http`].

use std::borrow::Cow;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::Usage;
use reqwest::header::{AUTHORIZATION, HeaderMap};
use serde::{Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::http::{
    Decoder, HttpOptions, PostRequest, SseEvent, StepClock, bad_chunk, drive, ended_early, open,
    secret_header, stream_error,
};
use super::memo::ToolsMemo;
use super::{
    Message, Model, ModelError, ModelEvent, ModelRequest, ModelStream, StopReason, ToolCall,
    ToolChoice, ToolDefinition,
};

/// Where and how an OpenAI-compatible model is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenAiConfig {
    /// The full model string (`xai/grok-4.5`), reported as the model's id.
    pub id: String,
    /// The API base, up to and including the version (`https://api.x.ai/v1`).
    pub base_url: String,
    /// Sent as a bearer token when present.
    pub api_key: Option<String>,
    /// The environment variable the key comes from, named in auth errors.
    pub key_env: Option<String>,
    /// Timeouts and retries.
    pub http: HttpOptions,
}

/// A model behind an OpenAI-compatible Chat Completions endpoint.
pub struct OpenAiModel {
    config: OpenAiConfig,
    /// The wire form of the last tool definitions sent: encoded once for a
    /// turn's steps, and once for every turn while the tools stay the same.
    tools: ToolsMemo<Result<Option<Arc<RawValue>>, String>>,
    /// `{base_url}/chat/completions`, parsed once.
    url: Result<reqwest::Url, String>,
}

impl OpenAiModel {
    /// A model with `config`. Nothing is contacted until the first step.
    pub fn new(config: OpenAiConfig) -> Self {
        let url = completions_url(&config.base_url);
        Self {
            config,
            tools: ToolsMemo::default(),
            url,
        }
    }
}

/// Where a step is posted, or why `base_url` cannot say.
fn completions_url(base_url: &str) -> Result<reqwest::Url, String> {
    let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
    reqwest::Url::parse(&url).map_err(|e| {
        format!("the model's base URL `{base_url}` does not make a valid URL (`{url}`: {e})")
    })
}

#[async_trait]
impl Model for OpenAiModel {
    fn id(&self) -> &str {
        &self.config.id
    }

    async fn step(
        &self,
        request: ModelRequest,
        cancel: CancellationToken,
    ) -> Result<ModelStream, ModelError> {
        let clock = StepClock::start(cancel, self.config.http.step_timeout);
        let mut headers = HeaderMap::new();
        if let Some(key) = &self.config.api_key {
            headers.insert(
                AUTHORIZATION,
                secret_header(&format!("Bearer {key}"), self.config.key_env.as_deref())?,
            );
        }
        let encoding =
            |e: String| ModelError::Provider(format!("failed to encode the request: {e}"));
        let tools = self
            .tools
            .get(&request.tools, wire_tools)
            .map_err(encoding)?;
        let body = serde_json::to_vec(&request_body(&request, tools.as_deref()))
            .map_err(|e| encoding(e.to_string()))?;
        let post = PostRequest {
            url: self.url.clone().map_err(ModelError::Config)?,
            headers,
            body,
            key_env: self.config.key_env.clone(),
        };
        let opened = open(&post, &self.config.http.retry, &clock).await?;
        Ok(drive(opened, ChatDecoder::default(), clock))
    }
}

/// The `tools` of a request body, encoded (none when there are no tools).
fn wire_tools(tools: &[ToolDefinition]) -> Result<Option<Arc<RawValue>>, String> {
    if tools.is_empty() {
        return Ok(None);
    }
    let text = serde_json::to_string(&Tools(tools)).map_err(|e| e.to_string())?;
    RawValue::from_string(text)
        .map(|raw| Some(Arc::from(raw)))
        .map_err(|e| e.to_string())
}

/// The Chat Completions request body of one step, borrowing the request
/// and its tools' wire form (see [`wire_tools`]): it is serialized straight
/// into the bytes sent, with no JSON tree built (and no copy of the
/// conversation) in between.
fn request_body<'a>(request: &'a ModelRequest, tools: Option<&'a RawValue>) -> Body<'a> {
    Body {
        model: &request.model,
        messages: Messages(request),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
        // Without tools there is nothing to choose: no tool_choice is sent.
        tool_choice: tools
            .and(request.tool_choice.as_ref())
            .map(|choice| match choice {
                ToolChoice::Auto => Choice::Mode("auto"),
                ToolChoice::Required => Choice::Mode("required"),
                ToolChoice::None => Choice::Mode("none"),
                ToolChoice::Tool(name) => Choice::Tool {
                    kind: "function",
                    function: Named { name },
                },
            }),
        tools,
        // `max_tokens` rather than OpenAI's newer `max_completion_tokens`:
        // every compatible server (llama.cpp, vLLM, Ollama) reads it.
        max_tokens: request.max_tokens,
        reasoning_effort: request.effort.as_deref(),
    }
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    messages: Messages<'a>,
    stream: bool,
    stream_options: StreamOptions,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<Choice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'a str>,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Choice<'a> {
    Mode(&'static str),
    Tool {
        #[serde(rename = "type")]
        kind: &'static str,
        function: Named<'a>,
    },
}

#[derive(Serialize)]
struct Named<'a> {
    name: &'a str,
}

/// The system prompt (when there is one), then the conversation.
struct Messages<'a>(&'a ModelRequest);

impl Serialize for Messages<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let request = self.0;
        let system = (!request.system.is_empty()).then(|| WireMessage {
            role: "system",
            tool_call_id: None,
            content: Cow::Borrowed(&request.system),
            tool_calls: None,
        });
        serializer.collect_seq(system.into_iter().chain(request.messages.iter().map(wire)))
    }
}

#[derive(Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    content: Cow<'a, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<WireCall<'a>>>,
}

#[derive(Serialize)]
struct WireCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireArguments<'a>,
}

#[derive(Serialize)]
struct WireArguments<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

fn wire(message: &Message) -> WireMessage<'_> {
    let (role, content) = match message {
        Message::User { text } => ("user", text),
        Message::Assistant { text, .. } => ("assistant", text),
        Message::Tool {
            call_id,
            content,
            is_error,
            ..
        } => {
            // The tool role has no error flag; say it in the content so
            // the model does not mistake a failure for data.
            let content = if *is_error {
                Cow::Owned(format!("Tool error: {content}"))
            } else {
                Cow::Borrowed(content.as_str())
            };
            return WireMessage {
                role: "tool",
                tool_call_id: Some(call_id),
                content,
                tool_calls: None,
            };
        }
    };
    let tool_calls = match message {
        Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(
            tool_calls
                .iter()
                .map(|c| WireCall {
                    id: &c.id,
                    kind: "function",
                    function: WireArguments {
                        name: &c.name,
                        arguments: arguments_text(&c.input),
                    },
                })
                .collect(),
        ),
        _ => None,
    };
    // A step made only of tool calls is sent with `content: ""`. The
    // OpenAI spec allows null or an absent field here, but servers disagree
    // on both: llama-cpp-python's schema, LM Studio and older llama.cpp
    // `llama-server` builds reject null, and older llama-server and
    // llama-cpp-python builds fail on a missing field. An empty string is
    // accepted by all of them, by vLLM and Ollama (whose message content is
    // a plain string) and by OpenAI itself.
    WireMessage {
        role,
        tool_call_id: None,
        content: Cow::Borrowed(content),
        tool_calls,
    }
}

/// The tools, as functions.
#[derive(Clone, Copy)]
struct Tools<'a>(&'a [ToolDefinition]);

impl Serialize for Tools<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.0.iter().map(|t| WireTool {
            kind: "function",
            function: WireFunction {
                name: &t.name,
                description: &t.description,
                parameters: &t.input_schema,
            },
        }))
    }
}

#[derive(Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunction<'a>,
}

#[derive(Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// Tool arguments as the API carries them: a JSON document in a string. An
/// input that arrived as unparseable text (a JSON string) goes back verbatim,
/// so the model sees exactly what it produced.
fn arguments_text(input: &Value) -> Cow<'_, str> {
    match input {
        Value::String(raw) => Cow::Borrowed(raw),
        other => Cow::Owned(other.to_string()),
    }
}

/// A tool call while its deltas arrive.
#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Decodes `chat.completion.chunk` events.
#[derive(Debug, Default)]
struct ChatDecoder {
    /// Calls by their `index`, so parallel calls assemble independently.
    calls: BTreeMap<u64, PartialCall>,
    /// The index the last tool-call delta went to, for servers that omit it.
    last_index: Option<u64>,
    calls_emitted: bool,
    finish: Option<StopReason>,
    usage: Option<Usage>,
}

impl ChatDecoder {
    fn chunk(&mut self, chunk: &Value, out: &mut VecDeque<ModelEvent>) {
        // A usage object without token counts (some servers send
        // `"usage": {}` or nulls) reports nothing: the step's usage stays
        // unknown rather than becoming zero.
        if let Some(usage) = chunk
            .get("usage")
            .filter(|u| u["prompt_tokens"].is_u64() || u["completion_tokens"].is_u64())
        {
            let n = |v: &Value| v.as_u64().unwrap_or(0);
            let prompt = n(&usage["prompt_tokens"]);
            let cached = n(&usage["prompt_tokens_details"]["cached_tokens"]);
            self.usage = Some(Usage {
                input_tokens: prompt.saturating_sub(cached),
                output_tokens: n(&usage["completion_tokens"]),
                cache_read_tokens: cached,
                cache_write_tokens: 0,
            });
        }
        let Some(choices) = chunk.get("choices").and_then(Value::as_array) else {
            return;
        };
        // A step asks for one completion; any other choice is ignored.
        let Some(choice) = choices
            .iter()
            .find(|c| c["index"].as_u64().unwrap_or(0) == 0)
        else {
            return;
        };
        let delta = &choice["delta"];
        let text = |key: &str| delta[key].as_str().filter(|s| !s.is_empty());
        // Servers disagree on the field's name; some send both with the same
        // text, so only one of them is taken.
        if let Some(reasoning) = text("reasoning_content").or_else(|| text("reasoning")) {
            out.push_back(ModelEvent::ReasoningDelta(reasoning.to_owned()));
        }
        if let Some(content) = text("content") {
            out.push_back(ModelEvent::TextDelta(content.to_owned()));
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for call in calls {
                self.call_delta(call);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish = Some(match reason {
                "stop" => StopReason::Stop,
                "tool_calls" | "function_call" => StopReason::ToolCalls,
                "length" => StopReason::Length,
                other => StopReason::Other(other.to_owned()),
            });
            // The calls are complete once the choice finishes; hand them on
            // now rather than after the usage chunk.
            self.emit_calls(out);
        }
    }

    fn call_delta(&mut self, call: &Value) {
        let id = call["id"].as_str().filter(|s| !s.is_empty());
        let index = match call["index"].as_u64() {
            Some(i) => i,
            // Without an index, a new id starts a new call and anything else
            // continues the last one.
            None => match (self.last_index, id) {
                (Some(last), Some(id))
                    if self
                        .calls
                        .get(&last)
                        .is_some_and(|c| c.id != id && !c.id.is_empty()) =>
                {
                    last + 1
                }
                (Some(last), _) => last,
                (None, _) => 0,
            },
        };
        self.last_index = Some(index);
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id
            && entry.id.is_empty()
        {
            id.clone_into(&mut entry.id);
        }
        let function = &call["function"];
        if let Some(name) = function["name"].as_str()
            && entry.name.is_empty()
        {
            name.clone_into(&mut entry.name);
        }
        match &function["arguments"] {
            Value::String(args) => entry.arguments.push_str(args),
            // A few servers send the arguments as a JSON object in one
            // piece instead of as streamed text.
            Value::Object(_) if entry.arguments.is_empty() => {
                entry.arguments = function["arguments"].to_string();
            }
            _ => {}
        }
    }

    fn emit_calls(&mut self, out: &mut VecDeque<ModelEvent>) {
        if self.calls_emitted {
            return;
        }
        self.calls_emitted = true;
        for call in std::mem::take(&mut self.calls).into_values() {
            let raw = call.arguments.trim();
            let input = if raw.is_empty() {
                Value::Object(Map::new())
            } else {
                serde_json::from_str(raw).unwrap_or_else(|_| Value::String(call.arguments.clone()))
            };
            let id = if call.id.is_empty() {
                bdk_events::ids::new_call_id()
            } else {
                call.id
            };
            out.push_back(ModelEvent::ToolCall(ToolCall {
                id,
                name: call.name,
                input,
            }));
        }
    }

    fn finalize(&mut self, out: &mut VecDeque<ModelEvent>) {
        let had_calls = !self.calls.is_empty() || self.calls_emitted;
        self.emit_calls(out);
        if let Some(usage) = self.usage.take() {
            out.push_back(ModelEvent::Usage(usage));
        }
        let stop = self.finish.take().unwrap_or(if had_calls {
            StopReason::ToolCalls
        } else {
            StopReason::Stop
        });
        out.push_back(ModelEvent::Stop(stop));
    }
}

impl Decoder for ChatDecoder {
    fn event(
        &mut self,
        event: SseEvent,
        out: &mut VecDeque<ModelEvent>,
    ) -> Result<bool, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            self.finalize(out);
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| bad_chunk(data, &e))?;
        if chunk.get("error").is_some_and(|e| !e.is_null())
            || event.event.as_deref() == Some("error")
        {
            return Err(stream_error(data));
        }
        self.chunk(&chunk, out);
        Ok(false)
    }

    fn end(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<(), ModelError> {
        // Some servers close without `[DONE]`; a finished choice is still a
        // complete step. Without one, the answer was cut off.
        if self.finish.is_some() {
            self.finalize(out);
            Ok(())
        } else {
            Err(ended_early(None))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(events: &[&str]) -> (Vec<ModelEvent>, Result<bool, String>) {
        let mut d = ChatDecoder::default();
        let mut out = VecDeque::new();
        let mut last = Ok(false);
        for data in events {
            last = d
                .event(
                    SseEvent {
                        event: None,
                        data: (*data).to_owned(),
                    },
                    &mut out,
                )
                .map_err(|e| e.to_string());
        }
        (out.into_iter().collect(), last)
    }

    #[test]
    fn calls_without_index_are_told_apart_by_id() {
        let (events, done) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","function":{"name":"f","arguments":"{\"x\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":"not json"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(done, Ok(true));
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCall(ToolCall {
                    id: "a".into(),
                    name: "f".into(),
                    input: json!({"x": 1})
                }),
                ModelEvent::ToolCall(ToolCall {
                    id: "b".into(),
                    name: "g".into(),
                    input: json!("not json")
                }),
                ModelEvent::Stop(StopReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn arguments_sent_as_an_object_are_taken_whole() {
        let (events, _) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":{"city":"Oslo"}}}]},"finish_reason":"tool_calls"}]}"#,
        ]);
        assert_eq!(
            events,
            vec![ModelEvent::ToolCall(ToolCall {
                id: "c".into(),
                name: "f".into(),
                input: json!({"city": "Oslo"})
            })]
        );
    }

    #[test]
    fn reasoning_is_taken_once_whatever_the_field_name() {
        let (events, _) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"a","reasoning":"a"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":"b"}}]}"#,
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::ReasoningDelta("a".into()),
                ModelEvent::ReasoningDelta("b".into())
            ]
        );
    }

    #[test]
    fn a_stream_without_usage_reports_none() {
        let (events, _) = decode(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":null}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":null}}"#,
            "[DONE]",
        ]);
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("hi".into()),
                ModelEvent::Stop(StopReason::Stop)
            ]
        );
        let (events, _) = decode(&[
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":0}}"#,
            "[DONE]",
        ]);
        assert!(
            events.contains(&ModelEvent::Usage(Usage {
                input_tokens: 7,
                ..Usage::default()
            })),
            "{events:?}"
        );
    }

    #[test]
    fn an_error_chunk_fails_the_step() {
        let (_, last) = decode(&[r#"{"error":{"message":"boom","type":"server_error"}}"#]);
        assert_eq!(
            last,
            Err("model request failed: the provider reported an error mid-stream: boom".into())
        );
    }

    /// The body a step sends for `request`, as JSON.
    fn body_of(request: &ModelRequest) -> Value {
        let tools = wire_tools(&request.tools).unwrap();
        serde_json::to_value(request_body(request, tools.as_deref())).unwrap()
    }

    #[tokio::test]
    async fn a_base_url_that_makes_no_url_fails_the_step_and_says_which() {
        let model = OpenAiModel::new(OpenAiConfig {
            id: "openai-compatible/m".into(),
            base_url: "http://[::1".into(),
            api_key: None,
            key_env: None,
            http: HttpOptions::default(),
        });
        let request = ModelRequest {
            model: "m".into(),
            system: String::new(),
            messages: vec![Message::User { text: "hi".into() }],
            tools: Default::default(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        };
        let Err(ModelError::Config(message)) = model.step(request, CancellationToken::new()).await
        else {
            panic!("the step should fail with a configuration error");
        };
        assert!(
            message.contains("`http://[::1`") && message.contains("/chat/completions"),
            "{message}"
        );
        assert!(
            completions_url("http://127.0.0.1:8080/v1/")
                .is_ok_and(|u| u.as_str() == "http://127.0.0.1:8080/v1/chat/completions")
        );
    }

    #[test]
    fn request_body_maps_every_message_kind() {
        let req = ModelRequest {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![
                Message::User { text: "hi".into() },
                Message::Assistant {
                    text: String::new(),
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "t".into(),
                        input: json!({"a": 1}),
                    }],
                },
                Message::Tool {
                    call_id: "c1".into(),
                    name: "t".into(),
                    content: "bad".into(),
                    is_error: true,
                    images: Vec::new(),
                },
                Message::Assistant {
                    text: "done".into(),
                    tool_calls: Vec::new(),
                },
            ],
            tools: vec![ToolDefinition {
                name: "t".into(),
                description: "d".into(),
                input_schema: json!({"type": "object"}),
            }]
            .into(),
            effort: None,
            tool_choice: None,
            max_tokens: None,
        };
        let body = body_of(&req);
        assert_eq!(
            body["messages"],
            json!([
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{\"a\":1}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "Tool error: bad"},
                {"role": "assistant", "content": "done"},
            ])
        );
        assert_eq!(body["model"], "m");
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {
                "name": "t", "description": "d", "parameters": {"type": "object"}
            }}])
        );
        assert!(body.get("reasoning_effort").is_none());
        assert!(body.get("tool_choice").is_none());
        assert!(body.get("max_tokens").is_none());

        let forced = body_of(&ModelRequest {
            tool_choice: Some(ToolChoice::Tool("t".into())),
            max_tokens: Some(64),
            ..req.clone()
        });
        assert_eq!(
            forced["tool_choice"],
            json!({"type": "function", "function": {"name": "t"}})
        );
        assert_eq!(forced["max_tokens"], 64);
        let effortful = body_of(&ModelRequest {
            effort: Some("high".into()),
            ..req.clone()
        });
        assert_eq!(effortful["reasoning_effort"], "high");
        let required = body_of(&ModelRequest {
            tool_choice: Some(ToolChoice::Required),
            ..req.clone()
        });
        assert_eq!(required["tool_choice"], "required");
        // Without tools there is nothing to choose: no tool_choice is sent.
        let toolless = body_of(&ModelRequest {
            tools: Default::default(),
            tool_choice: Some(ToolChoice::Required),
            ..req
        });
        assert!(toolless.get("tool_choice").is_none());
    }
}
