//! The agent loop: one turn, step by step.
//!
//! A turn is an explicit state machine over three states: `Step` (stream
//! one model step, then run the batch of tool calls it asked for, if any),
//! `Check` (the step offered a final reply: the agent's result gates judge
//! it, see [`crate::gate`]) and `Done`. Every observable fact becomes an
//! event recorded through a [`Recorder`] before the loop moves on, so the
//! durable stream is the turn's only source of truth: a restarted host
//! rebuilds the conversation from it.
//!
//! Rules the loop keeps:
//! - tool input is validated against the tool's schema before execution; an
//!   unknown tool, invalid input or a failing tool becomes an `isError`
//!   result the model sees, never a dead turn;
//! - consecutive `effect = "read"` calls of a batch run concurrently; a write
//!   waits for everything before it and runs alone, so writes keep the
//!   model's order;
//! - dry runs execute reads and stub writes; `asOf` pins `now` and refuses
//!   time arguments later than it;
//! - reads that fail transiently are retried (`action.tool_retry`);
//! - the step limit and the per-turn tool-call limit end a runaway turn;
//! - a final reply passes every result gate, in name order, before the turn
//!   completes with it: a reject sends the gate's feedback to the model (a
//!   user message the log keeps as `gate.verdict`) for another step, up to
//!   the gate's `max_attempts` replies; a fail ends the turn;
//! - cancellation reaches the model stream and every tool call promptly.
//!
//! Tracing: each model step is a `bdk.step` span and each tool call a
//! `bdk.tool_call` span, both under the caller's current span (the host's
//! `bdk.turn`), carrying OpenTelemetry GenAI attribute names. They use the
//! [`TRACE_TARGET`] target, so a subscriber that does not ask for it pays
//! nothing for them; `bdk-cli` turns them into OTLP traces and metrics.

mod act;
mod step;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_events::{
    ActionApprovalRequested, ActionApprovalResolved, ActionRequest, ActionResult, ActionToolRetry,
    ActionsCompleted, ActionsRequested, Envelope, Event, GateVerdict, MessageAppended,
    MessageCompleted, NudgeDelivered, ReasoningAppended, ReasoningCompleted, StepCompleted,
    StepStarted, SubagentCalled, SubagentCompleted, Usage,
};
use chrono::{DateTime, NaiveDate, Utc};
use futures::StreamExt;
use futures::future::join_all;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;
use tracing::field::Empty;

use crate::gate::{GateAnswer, GateError, GateRequest, OnError, ResultGate, run_check};
use crate::tool::schema::InputValidator;
use crate::tool::{
    Effect, SessionInfo, Tool, ToolContext, ToolOutput, ToolServices, ToolSpec, content,
};
use bdk_models::{
    Message, Model, ModelError, ModelEvent, ModelRequest, ToolCall, ToolChoice, ToolDefinition,
};

/// Model steps per turn when `agent.toml` sets no `max_steps`.
pub const DEFAULT_MAX_STEPS: u32 = 25;
/// Tool calls per turn before the turn is ended as runaway.
pub const MAX_TOOL_CALLS_PER_TURN: usize = 256;
/// Tool timeout when neither the tool nor `agent.toml` sets one.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// Attempts for a read that fails transiently (the first run included).
pub const READ_ATTEMPTS: u32 = 3;
/// The name of the built-in delegation tool.
pub use bdk_project::tool::TASK_TOOL;
/// The `tracing` target of the turn, step and tool-call spans.
pub const TRACE_TARGET: &str = "bdk::gen_ai";

/// The provider part of a `provider/model` id (`gen_ai.provider.name`).
pub fn provider_name(model_id: &str) -> &str {
    model_id.split_once('/').map_or(model_id, |(p, _)| p)
}

/// A count as a span field: `tracing-opentelemetry` exports `i64` fields as
/// integers but `u64` ones as strings.
pub fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Marks a step span failed by `e` (a cancelled step is not an error).
fn record_model_error(span: &tracing::Span, e: &ModelError) {
    if !matches!(e, ModelError::Cancelled) {
        span.record("error.type", e.error_type());
        span.record("otel.status_code", "ERROR");
    }
}

/// A recording failure: the store refused an append. The turn cannot go on
/// without a durable record, so it ends.
#[derive(Debug, thiserror::Error)]
#[error("failed to record event: {0}")]
pub struct RecordError(pub String);

/// Where the loop records its events (the host appends them to the store
/// under the session and turn ids, then hands them to hooks).
#[async_trait]
pub trait Recorder: Send + Sync {
    /// Records one event of the running turn.
    async fn record(&self, event: Event) -> Result<(), RecordError>;

    /// The events the running turn recorded so far, oldest first, for
    /// result gates (empty when the recorder keeps no log).
    async fn turn_events(&self) -> Vec<Envelope> {
        Vec::new()
    }

    /// The session's current continuation token, for result gates.
    async fn continuation_token(&self) -> Option<String> {
        None
    }
}

/// A message steered into a running turn at a tool boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct Nudge {
    /// The text.
    pub message: String,
    /// The send it came from.
    pub delivery_id: Option<String>,
}

/// Source of messages to steer into the running turn.
pub trait Steering: Send + Sync {
    /// Takes every message waiting to be steered in.
    fn take(&self) -> Vec<Nudge>;
}

/// A person's decision on a parked call.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// Approved or denied.
    pub approved: bool,
    /// Who decided.
    pub by: Option<String>,
    /// Why (shown to the model on denial).
    pub reason: Option<String>,
}

/// Parks calls of `needs_approval` tools until a decision arrives.
///
/// The loop parks a call before it records `action.approval_requested`, so
/// whoever reads that event can resolve the call right away.
pub trait ApprovalGate: Send + Sync {
    /// Registers `call_id` as waiting for a decision; the receiver gets it.
    fn park(
        &self,
        call_id: &str,
        name: &str,
        input: &Value,
    ) -> tokio::sync::oneshot::Receiver<Decision>;
    /// Forgets a parked call nobody waits for any more (the wait was
    /// cancelled, or its request could not be recorded).
    fn unpark(&self, call_id: &str);
}

/// A tool with its compiled input validator.
#[derive(Clone)]
pub struct ToolEntry {
    /// The tool.
    pub tool: Arc<dyn Tool>,
    /// Its compiled input schema; `None` when the schema could not compile
    /// (discovery reports that; the input then goes through unvalidated).
    pub validator: Option<Arc<InputValidator>>,
}

impl ToolEntry {
    /// Wraps a tool, compiling its input schema.
    pub fn new(tool: Arc<dyn Tool>) -> Self {
        let validator = InputValidator::new(&tool.spec().input_schema)
            .ok()
            .map(Arc::new);
        Self { tool, validator }
    }
}

/// Everything the loop needs to know about one agent (the root or a subagent).
#[derive(Clone)]
pub struct AgentSpec {
    /// The agent's name.
    pub name: String,
    /// The full system prompt: instructions and catalogs.
    pub system: String,
    /// The model.
    pub model: Arc<dyn Model>,
    /// The model name sent to the provider (after the `provider/` prefix).
    pub model_name: String,
    /// Reasoning effort.
    pub effort: Option<String>,
    /// The first step's tool choice (later steps leave it to the model).
    pub tool_choice: Option<ToolChoice>,
    /// A cap on each step's output tokens.
    pub max_output_tokens: Option<u32>,
    /// Step limit.
    pub max_steps: u32,
    /// Default tool timeout.
    pub tool_timeout: Duration,
    /// Callable tools by name (the `task` tool excluded).
    pub tools: Arc<BTreeMap<String, ToolEntry>>,
    /// The `task` tool's spec and the subagents it reaches, when there are any.
    pub task: Option<(ToolSpec, Arc<BTreeMap<String, AgentSpec>>)>,
    /// Result gates judging each final reply, in the order they run (none
    /// for subagents: their reply goes to the parent, not to the user).
    pub gates: Arc<[Arc<dyn ResultGate>]>,
    /// The tool definitions last built from `tools` and `task`
    /// (`Default::default()` for a new spec; see [`AgentSpec::definitions`]).
    pub definitions_cache: DefinitionsCache,
}

/// The tool definitions an agent last gave its model, with the tools they
/// were built from. Clones of a spec share it; it is only a cache, checked
/// against the spec's own `tools` and `task` on every use, so a clone whose
/// tools were replaced never sees definitions of the old ones.
#[derive(Clone, Default)]
pub struct DefinitionsCache(Arc<Mutex<Option<BuiltDefinitions>>>);

struct BuiltDefinitions {
    /// Held, not just compared by address, so the address cannot be reused
    /// by another map while it is remembered.
    tools: Arc<BTreeMap<String, ToolEntry>>,
    task: Option<ToolSpec>,
    definitions: Arc<[ToolDefinition]>,
}

impl AgentSpec {
    /// The tool definitions the model sees. Built once and shared while the
    /// tool map (the same `Arc`: a new one is made whenever the tools
    /// change) and the `task` tool stay the same, so a turn's steps and an
    /// agent's turns neither rebuild them nor make the model re-encode them.
    pub fn definitions(&self) -> Arc<[ToolDefinition]> {
        let task = self.task.as_ref().map(|(spec, _)| spec);
        let mut built = self
            .definitions_cache
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(b) = built.as_ref()
            && Arc::ptr_eq(&b.tools, &self.tools)
            && b.task.as_ref() == task
        {
            return Arc::clone(&b.definitions);
        }
        let definitions = self.build_definitions();
        *built = Some(BuiltDefinitions {
            tools: Arc::clone(&self.tools),
            task: task.cloned(),
            definitions: Arc::clone(&definitions),
        });
        definitions
    }

    fn build_definitions(&self) -> Arc<[ToolDefinition]> {
        let mut defs: Vec<ToolDefinition> = self
            .tools
            .values()
            .map(|e| {
                let s = e.tool.spec();
                ToolDefinition {
                    name: s.name.clone(),
                    description: s.description.clone(),
                    input_schema: s.input_schema.clone(),
                }
            })
            .collect();
        if let Some((spec, _)) = &self.task {
            defs.push(ToolDefinition {
                name: spec.name.clone(),
                description: spec.description.clone(),
                input_schema: spec.input_schema.clone(),
            });
        }
        defs.into()
    }
}

/// The session-level facts a turn runs with.
#[derive(Clone)]
pub struct TurnEnv {
    /// Session facts handed to tools.
    pub session: SessionInfo,
    /// The workspace tools work in.
    pub workspace_dir: std::path::PathBuf,
    /// The host's way into the trees tools write (see [`ToolContext::trees`]).
    pub trees: crate::workspace::trees::Trees,
    /// The agent's state root.
    pub state_root: std::path::PathBuf,
    /// Writes are stubbed.
    pub dry_run: bool,
    /// Pinned "now".
    pub as_of: Option<DateTime<Utc>>,
    /// "Now" for tools when `as_of` does not pin it.
    pub clock: Arc<dyn crate::clock::Clock>,
    /// Host services for built-in tools.
    pub services: Option<Arc<dyn ToolServices>>,
}

/// How a turn ended.
#[derive(Clone, Debug, PartialEq)]
pub enum TurnEnd {
    /// The model finished with a reply.
    Completed,
    /// The turn failed (model error, limits, recording failure).
    Failed(String),
    /// The turn's cancel token fired.
    Cancelled,
}

/// The result of [`run_turn`].
#[derive(Clone, Debug)]
pub struct TurnOutcome {
    /// How it ended.
    pub end: TurnEnd,
    /// The final reply (the last step's text).
    pub reply: String,
    /// Usage summed over steps; `None` when some step's usage is unknown
    /// (the provider reported none).
    pub usage: Option<Usage>,
    /// Steps run.
    pub steps: u32,
    /// Messages this turn added to the conversation (assistant steps, tool
    /// results, nudges), for the caller's transcript cache.
    pub added: Vec<Message>,
}

/// One turn's inputs.
pub struct TurnInput<'a> {
    /// The agent.
    pub spec: &'a AgentSpec,
    /// The conversation so far, ending with the turn's user message.
    pub history: Vec<Message>,
    /// Session facts.
    pub env: &'a TurnEnv,
    /// Where events go.
    pub recorder: &'a dyn Recorder,
    /// Messages steered in at tool boundaries.
    pub steering: Option<&'a dyn Steering>,
    /// Approvals.
    pub approvals: &'a dyn ApprovalGate,
    /// Fires to cancel the turn.
    pub cancel: CancellationToken,
    /// Record step-level events (false inside a subagent, whose inner
    /// steps are summarised by `subagent.called` / `subagent.completed`).
    pub verbose: bool,
}

enum State {
    /// Stream one model step, then run its batch of calls, if any.
    Step,
    /// The last step offered this final reply; the gates judge it.
    Check(String),
    /// The turn is over.
    Done(TurnEnd),
}

/// What `step.completed` reports, filled in as the step learns it.
#[derive(Default)]
struct StepClose {
    finish: Option<String>,
    usage: Option<Usage>,
}

struct Run<'a> {
    input: TurnInput<'a>,
    /// The tools' definitions, shared by every step's request.
    definitions: Arc<[ToolDefinition]>,
    messages: Vec<Message>,
    added_from: usize,
    usage: Option<Usage>,
    step: u32,
    reply: String,
    calls: usize,
    /// Final replies offered so far (what result gates count).
    attempt: u32,
}

/// Runs one turn to its end. The caller records `turn.started` before and
/// `turn.completed` / `turn.failed` after, from the outcome.
pub async fn run_turn(mut input: TurnInput<'_>) -> TurnOutcome {
    let added_from = input.history.len();
    let messages = std::mem::take(&mut input.history);
    let mut run = Run {
        definitions: input.spec.definitions(),
        input,
        messages,
        added_from,
        usage: Some(Usage::default()),
        step: 0,
        reply: String::new(),
        calls: 0,
        attempt: 0,
    };
    let mut state = State::Step;
    let end = loop {
        state = match state {
            State::Step => run.step().await,
            State::Check(reply) => run.check(reply).await,
            State::Done(end) => break end,
        };
    };
    let added = run.messages.split_off(run.added_from);
    TurnOutcome {
        end,
        reply: run.reply,
        usage: run.usage,
        steps: run.step,
        added,
    }
}

impl Run<'_> {
    async fn emit(&self, event: impl Into<Event>) -> Result<(), RecordError> {
        if self.input.verbose {
            self.input.recorder.record(event.into()).await
        } else {
            Ok(())
        }
    }
}

/// Calls a tool with a hard timeout, whatever the tool does about its own.
pub async fn call_with_timeout(
    tool: &Arc<dyn Tool>,
    input: Value,
    ctx: ToolContext,
    timeout: Duration,
) -> ToolOutput {
    let cancel = ctx.cancel.clone();
    // The tool gets its own deadline first; ours is a safety net a little later
    // so a tool that reports its own timeout gets to say so.
    let safety = timeout + Duration::from_millis(500);
    tokio::select! {
        out = tool.call(input, ctx) => out,
        _ = tokio::time::sleep(safety) => {
            cancel.cancel();
            ToolOutput::error(format!("tool timed out after {} ms", timeout.as_millis()))
        }
    }
}

fn model_end(e: ModelError) -> TurnEnd {
    match e {
        ModelError::Cancelled => TurnEnd::Cancelled,
        other => TurnEnd::Failed(other.to_string()),
    }
}

fn elapsed_ms(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The first string in `input` (searched depth-first) that reads as a date or
/// timestamp later than `as_of`.
fn later_than(input: &Value, as_of: DateTime<Utc>) -> Option<String> {
    match input {
        Value::String(s) => {
            let t = s.trim();
            if let Ok(dt) = DateTime::parse_from_rfc3339(t) {
                return (dt.with_timezone(&Utc) > as_of).then(|| s.clone());
            }
            if t.len() == 10
                && let Ok(d) = NaiveDate::parse_from_str(t, "%Y-%m-%d")
            {
                return (d > as_of.date_naive()).then(|| s.clone());
            }
            None
        }
        Value::Array(items) => items.iter().find_map(|v| later_than(v, as_of)),
        Value::Object(map) => map.values().find_map(|v| later_than(v, as_of)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_than_finds_dates_and_timestamps() {
        let as_of = DateTime::parse_from_rfc3339("2026-01-15T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(later_than(&json!({"d": "2026-01-15"}), as_of), None);
        assert_eq!(
            later_than(&json!({"d": "2026-01-16"}), as_of),
            Some("2026-01-16".into())
        );
        assert_eq!(
            later_than(&json!({"x": [1, {"t": "2026-01-15T12:00:01Z"}]}), as_of),
            Some("2026-01-15T12:00:01Z".into())
        );
        assert_eq!(
            later_than(&json!({"t": "2026-01-15T11:00:00-02:00"}), as_of),
            Some("2026-01-15T11:00:00-02:00".into())
        );
        assert_eq!(later_than(&json!({"city": "Paris", "n": 3}), as_of), None);
    }
}

#[cfg(test)]
mod definitions_tests {
    use std::path::Path;

    use bdk_models::scripted::{RulesFile, ScriptedModel};
    use schemars::JsonSchema;
    use serde::Deserialize;

    use super::*;
    use crate::tool::builtin::task_spec;
    use crate::tool::native::native_tool;

    #[derive(Deserialize, JsonSchema)]
    struct Input {
        #[allow(dead_code)]
        text: String,
    }

    fn tools(names: &[&str]) -> Arc<BTreeMap<String, ToolEntry>> {
        let map = names
            .iter()
            .map(|name| {
                let tool = native_tool(name, "echoes", |_: Input, _| async { Ok(json!({})) });
                (name.to_string(), ToolEntry::new(Arc::new(tool)))
            })
            .collect();
        Arc::new(map)
    }

    fn spec(tools: Arc<BTreeMap<String, ToolEntry>>) -> AgentSpec {
        let rules =
            RulesFile::parse("[[rules]]\nreply = \"ok\"\n", Path::new("rules.toml")).unwrap();
        AgentSpec {
            name: "a".into(),
            system: String::new(),
            model: Arc::new(ScriptedModel::from_rules(rules, "scripted/default")),
            model_name: "default".into(),
            effort: None,
            tool_choice: None,
            max_output_tokens: None,
            max_steps: 4,
            tool_timeout: Duration::from_secs(1),
            tools,
            task: None,
            gates: Arc::from(Vec::new()),
            definitions_cache: Default::default(),
        }
    }

    fn names(definitions: &[ToolDefinition]) -> Vec<&str> {
        definitions.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn definitions_are_shared_while_the_tools_stay_and_rebuilt_when_they_change() {
        let root = spec(tools(&["a", "b"]));
        let first = root.definitions();
        assert_eq!(names(&first), ["a", "b"]);
        // Another turn of the same agent, or a clone of it: the same set.
        assert!(Arc::ptr_eq(&first, &root.definitions()));
        assert!(Arc::ptr_eq(&first, &root.clone().definitions()));

        // A clone with another tool map (new MCP tools) shares the cache
        // but never its stale entry.
        let grown = AgentSpec {
            tools: tools(&["a", "b", "c"]),
            ..root.clone()
        };
        assert_eq!(names(&grown.definitions()), ["a", "b", "c"]);
        assert_eq!(names(&root.definitions()), ["a", "b"]);

        // The `task` tool is part of the key too.
        let delegating = AgentSpec {
            task: Some((
                task_spec(&[("helper".into(), "helps".into())]),
                Arc::new(BTreeMap::new()),
            )),
            ..root.clone()
        };
        assert_eq!(names(&delegating.definitions()), ["a", "b", "task"]);
        let other_task = AgentSpec {
            task: Some((
                task_spec(&[("other".into(), "also helps".into())]),
                Arc::new(BTreeMap::new()),
            )),
            ..root.clone()
        };
        let task = other_task.definitions();
        assert_eq!(names(&task), ["a", "b", "task"]);
        assert!(
            task[2].description.contains("other"),
            "{}",
            task[2].description
        );
    }
}
