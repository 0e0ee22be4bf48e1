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

    /// One model step and its batch. Once `step.started` is recorded the
    /// step is always closed with `step.completed`, whatever ends it
    /// (cancellation, a model error, a limit), so every step in the log is
    /// paired.
    async fn step(&mut self) -> State {
        if self.input.cancel.is_cancelled() {
            return State::Done(TurnEnd::Cancelled);
        }
        if self.step >= self.input.spec.max_steps {
            return State::Done(TurnEnd::Failed(format!(
                "turn stopped after {} model steps without a final answer (max_steps); raise max_steps in agent.toml if the agent needs more",
                self.input.spec.max_steps
            )));
        }
        self.step += 1;
        let step = self.step;
        let started = Instant::now();
        if let Err(e) = self.emit(StepStarted { step }).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        let mut closing = StepClose::default();
        let state = self.stream_step(step, &mut closing).await;
        let completed = StepCompleted {
            step,
            duration_ms: elapsed_ms(started),
            finish_reason: closing.finish,
            usage: closing.usage,
        };
        match self.emit(completed).await {
            Err(e) if !matches!(state, State::Done(TurnEnd::Failed(_))) => {
                State::Done(TurnEnd::Failed(e.to_string()))
            }
            _ => state,
        }
    }

    /// The body of [`Run::step`] after `step.started`: streams the model's
    /// answer, then runs its batch. What `step.completed` reports goes into
    /// `closing` as it becomes known.
    async fn stream_step(&mut self, step: u32, closing: &mut StepClose) -> State {
        let request = ModelRequest {
            model: self.input.spec.model_name.clone(),
            system: self.input.spec.system.clone(),
            messages: self.messages.clone(),
            tools: Arc::clone(&self.definitions),
            effort: self.input.spec.effort.clone(),
            // Only the turn's first step is forced: after the forced call's
            // result the model must be free to answer.
            tool_choice: if step == 1 {
                self.input.spec.tool_choice.clone()
            } else {
                None
            },
            max_tokens: self.input.spec.max_output_tokens,
        };
        let cancel = self.input.cancel.clone();
        // The step span covers the model call only; the batch of tool calls
        // that follows gets spans of its own beside it, under the turn.
        let spec = self.input.spec;
        let step_span = tracing::info_span!(
            target: TRACE_TARGET,
            "bdk.step",
            otel.name = %format_args!("chat {}", spec.model_name),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider_name(spec.model.id()),
            gen_ai.system = provider_name(spec.model.id()),
            gen_ai.request.model = %spec.model_name,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.conversation.id = self.input.env.session.id.as_ref().map(tracing::field::display),
            gen_ai.agent.name = %spec.name,
            bdk.step = i64::from(step),
            error.type = Empty,
        );
        let mut stream = match spec
            .model
            .step(request, cancel.clone())
            .instrument(step_span.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                record_model_error(&step_span, &e);
                return State::Done(model_end(e));
            }
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls = Vec::new();
        // Unknown until the provider reports it; many local servers never do.
        let mut step_usage: Option<Usage> = None;
        let mut finish = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = cancel.cancelled() => return State::Done(TurnEnd::Cancelled),
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let recorded = match item {
                Ok(ModelEvent::TextDelta(delta)) => {
                    text.push_str(&delta);
                    self.emit(MessageAppended { delta }).await
                }
                Ok(ModelEvent::ReasoningDelta(delta)) => {
                    reasoning.push_str(&delta);
                    self.emit(ReasoningAppended { delta }).await
                }
                Ok(ModelEvent::ToolCall(call)) => {
                    calls.push(call);
                    Ok(())
                }
                Ok(ModelEvent::Usage(u)) => {
                    step_usage = Some(u);
                    Ok(())
                }
                Ok(ModelEvent::Stop(reason)) => {
                    finish = Some(reason.as_str().to_owned());
                    Ok(())
                }
                Err(e) => {
                    record_model_error(&step_span, &e);
                    return State::Done(model_end(e));
                }
            };
            if let Err(e) = recorded {
                return State::Done(TurnEnd::Failed(e.to_string()));
            }
        }
        drop(stream);
        step_span.record("gen_ai.response.model", spec.model_name.as_str());
        if let Some(u) = &step_usage {
            step_span.record("gen_ai.usage.input_tokens", as_i64(u.input_tokens));
            step_span.record("gen_ai.usage.output_tokens", as_i64(u.output_tokens));
        }
        if let Some(reason) = &finish {
            step_span.record("gen_ai.response.finish_reasons", reason.as_str());
        }
        drop(step_span);
        self.usage = Usage::sum_known(self.usage, step_usage);
        if !reasoning.is_empty()
            && let Err(e) = self.emit(ReasoningCompleted { text: reasoning }).await
        {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        if !text.is_empty()
            && let Err(e) = self.emit(MessageCompleted { text: text.clone() }).await
        {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        self.messages.push(Message::Assistant {
            text: text.clone(),
            tool_calls: calls.clone(),
        });
        closing.finish = finish;
        closing.usage = step_usage;
        if calls.is_empty() {
            if self.input.spec.gates.is_empty() {
                self.reply = text;
                return State::Done(TurnEnd::Completed);
            }
            return State::Check(text);
        }
        self.calls += calls.len();
        if self.calls > MAX_TOOL_CALLS_PER_TURN {
            return State::Done(TurnEnd::Failed(format!(
                "turn stopped after more than {MAX_TOOL_CALLS_PER_TURN} tool calls"
            )));
        }
        self.act(calls).await
    }

    /// Runs the agent's gates, in order, on a reply the model offered as
    /// final, recording each verdict. Every gate accepts: the turn
    /// completes with the reply. A reject before the gate's last attempt:
    /// the feedback goes to the model and the turn takes another step. A
    /// reject on the last attempt, or a fail: the turn fails. A gate that
    /// breaks answers what its `on_error` policy says.
    async fn check(&mut self, reply: String) -> State {
        self.attempt += 1;
        let attempt = self.attempt;
        let gates = Arc::clone(&self.input.spec.gates);
        for gate in gates.iter() {
            let spec = gate.spec();
            if self.input.cancel.is_cancelled() {
                return State::Done(TurnEnd::Cancelled);
            }
            let request = GateRequest {
                reply: reply.clone(),
                attempt,
                max_attempts: spec.max_attempts,
                events: self.input.recorder.turn_events().await,
                continuation_token: self.input.recorder.continuation_token().await,
                ctx: self.tool_context(&bdk_events::ids::new_id("gate"), None),
            };
            let (answer, took) = run_check(gate.as_ref(), request).await;
            if matches!(answer, Err(GateError::Cancelled)) || self.input.cancel.is_cancelled() {
                return State::Done(TurnEnd::Cancelled);
            }
            let (answer, error) = match answer {
                Ok(answer) => (answer, None),
                Err(e) => {
                    tracing::warn!(gate = %spec.name, attempt, error = %e, "result gate broke; applying its on_error policy");
                    let answer = match spec.on_error {
                        OnError::Accept => GateAnswer::accept(),
                        OnError::Fail => GateAnswer::Fail {
                            message: format!("the gate {e}"),
                        },
                    };
                    (answer, Some(e.to_string()))
                }
            };
            let mut verdict = GateVerdict {
                gate: spec.name.clone(),
                attempt,
                max_attempts: spec.max_attempts,
                verdict: answer.verdict(),
                feedback: None,
                message: None,
                action: Value::Null,
                duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                error,
            };
            match &answer {
                GateAnswer::Accept { action } => verdict.action = action.clone(),
                GateAnswer::Reject { feedback } => verdict.feedback = Some(feedback.clone()),
                GateAnswer::Fail { message } => verdict.message = Some(message.clone()),
            }
            if let Err(e) = self.input.recorder.record(verdict.clone().into()).await {
                return State::Done(TurnEnd::Failed(e.to_string()));
            }
            match answer {
                GateAnswer::Accept { .. } => {}
                GateAnswer::Reject { feedback } if attempt >= spec.max_attempts => {
                    return State::Done(TurnEnd::Failed(format!(
                        "result gate `{}` rejected the reply on attempt {attempt} of {} (max_attempts): {feedback}",
                        spec.name, spec.max_attempts
                    )));
                }
                GateAnswer::Reject { .. } => {
                    // The same text the log's conversation rebuilds, so a
                    // restarted host shows the model what this turn did.
                    self.messages.push(Message::User {
                        text: verdict.repair_prompt(),
                    });
                    return State::Step;
                }
                GateAnswer::Fail { message } => {
                    return State::Done(TurnEnd::Failed(format!(
                        "result gate `{}` failed the turn: {message}",
                        spec.name
                    )));
                }
            }
        }
        self.reply = reply;
        State::Done(TurnEnd::Completed)
    }

    /// Runs one batch, then steers in waiting nudges and goes back to `Step`.
    async fn act(&mut self, calls: Vec<ToolCall>) -> State {
        let step = self.step;
        let requested = ActionsRequested {
            step,
            actions: calls
                .iter()
                .map(|c| ActionRequest {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    input: c.input.clone(),
                })
                .collect(),
        };
        if let Err(e) = self.emit(requested).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        // Group consecutive reads; each write is its own group.
        let mut groups: Vec<Vec<&ToolCall>> = Vec::new();
        for call in &calls {
            let is_read = self.effect_of(&call.name) == Effect::Read;
            match groups.last_mut() {
                Some(g) if is_read && g.iter().all(|c| self.effect_of(&c.name) == Effect::Read) => {
                    g.push(call)
                }
                _ => groups.push(vec![call]),
            }
        }
        let mut results: Vec<(String, String, ToolOutput)> = Vec::with_capacity(calls.len());
        let mut ended = None;
        for group in groups {
            let outs = join_all(group.iter().map(|c| self.execute(c))).await;
            for (call, out) in group.iter().zip(outs) {
                match out {
                    Ok(out) => results.push((call.id.clone(), call.name.clone(), out)),
                    Err(e) => {
                        ended.get_or_insert(TurnEnd::Failed(e.to_string()));
                    }
                }
            }
            if ended.is_none() && self.input.cancel.is_cancelled() {
                ended = Some(TurnEnd::Cancelled);
            }
            if ended.is_some() {
                break;
            }
        }
        if let Some(end) = ended {
            // Whatever ended the turn mid-batch (a stop, a preemption, a
            // shutdown, a failed append), the batch is closed: calls that
            // never ran get an error result, then `actions.completed`.
            self.close_batch(step, &calls, &results).await;
            return State::Done(end);
        }
        for (call_id, name, out) in results {
            self.messages.push(Message::Tool {
                call_id,
                name,
                content: out.to_text(),
                is_error: out.is_error,
                images: content::images(&out.blocks),
            });
        }
        let completed = ActionsCompleted {
            step,
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
        };
        if let Err(e) = self.emit(completed).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        if let Some(steering) = self.input.steering {
            for nudge in steering.take() {
                let event = NudgeDelivered {
                    message: nudge.message.clone(),
                    delivery_id: nudge.delivery_id.clone(),
                };
                if let Err(e) = self.input.recorder.record(event.into()).await {
                    return State::Done(TurnEnd::Failed(e.to_string()));
                }
                self.messages.push(Message::User {
                    text: nudge.message,
                });
            }
        }
        State::Step
    }

    /// Closes a batch the turn leaves early: an error `action.result` for
    /// each call that has none, then `actions.completed`. Best effort: when
    /// the store refuses appends, the turn is failing for that already.
    async fn close_batch(
        &self,
        step: u32,
        calls: &[ToolCall],
        results: &[(String, String, ToolOutput)],
    ) {
        for call in calls {
            if results.iter().any(|(id, _, _)| *id == call.id) {
                continue;
            }
            let result = ActionResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                is_error: true,
                output: Value::String("not run: the turn ended before this call".to_owned()),
                content: Vec::new(),
                duration_ms: 0,
                stubbed: false,
            };
            if let Err(e) = self.emit(result).await {
                tracing::warn!(error = %e, "failed to record the result of a call the turn left");
                return;
            }
        }
        let completed = ActionsCompleted {
            step,
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
        };
        if let Err(e) = self.emit(completed).await {
            tracing::warn!(error = %e, "failed to close the batch of a turn that ended");
        }
    }

    fn effect_of(&self, name: &str) -> Effect {
        self.input
            .spec
            .tools
            .get(name)
            .map_or(Effect::Write, |e| e.tool.spec().effect)
    }

    /// Executes one call and records its `action.result`.
    async fn execute(&self, call: &ToolCall) -> Result<ToolOutput, RecordError> {
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "bdk.tool_call",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            gen_ai.conversation.id = self.input.env.session.id.as_ref().map(tracing::field::display),
            bdk.tool.status = Empty,
            error.type = Empty,
        );
        let started = Instant::now();
        let (out, stubbed) = self.execute_inner(call).instrument(span.clone()).await?;
        if out.is_error {
            span.record("bdk.tool.status", "error");
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
        } else {
            span.record("bdk.tool.status", "ok");
        }
        let result = ActionResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            is_error: out.is_error,
            output: out.content.clone(),
            content: out.blocks.clone(),
            duration_ms: elapsed_ms(started),
            stubbed,
        };
        self.emit(result).await?;
        Ok(out)
    }

    async fn execute_inner(&self, call: &ToolCall) -> Result<(ToolOutput, bool), RecordError> {
        let spec = self.input.spec;
        if call.name == TASK_TOOL
            && let Some((_, subagents)) = &spec.task
        {
            return Ok((self.delegate(call, subagents).await?, false));
        }
        let Some(entry) = spec.tools.get(&call.name) else {
            let mut names: Vec<&str> = spec.tools.keys().map(String::as_str).collect();
            if spec.task.is_some() {
                names.push(TASK_TOOL);
            }
            return Ok((
                ToolOutput::error(format!(
                    "unknown tool `{}`; available tools: {}",
                    call.name,
                    names.join(", ")
                )),
                false,
            ));
        };
        if let Some(validator) = &entry.validator
            && let Err(errors) = validator.validate(&call.input)
        {
            return Ok((
                ToolOutput::error(format!(
                    "invalid input for `{}`: {}",
                    call.name,
                    errors.join("; ")
                )),
                false,
            ));
        }
        if let Some(as_of) = self.input.env.as_of
            && let Some(late) = later_than(&call.input, as_of)
        {
            return Ok((
                ToolOutput::error(format!(
                    "time argument {late} is later than the session's asOf ({})",
                    as_of.to_rfc3339()
                )),
                false,
            ));
        }
        let tool_spec = entry.tool.spec();
        if self.input.env.dry_run && tool_spec.effect == Effect::Write {
            return Ok((
                ToolOutput::ok(json!({
                    "dryRun": true,
                    "message": format!("`{}` changes state, so this dry run did not execute it", call.name),
                })),
                true,
            ));
        }
        let mut approved_by = None;
        if tool_spec.needs_approval {
            let approvals = self.input.approvals;
            let parked = approvals.park(&call.id, &call.name, &call.input);
            let requested = ActionApprovalRequested {
                call_id: call.id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
            };
            if let Err(e) = self.input.recorder.record(requested.into()).await {
                approvals.unpark(&call.id);
                return Err(e);
            }
            let decision = tokio::select! {
                d = parked => d.ok(),
                _ = self.input.cancel.cancelled() => None,
            };
            let Some(decision) = decision else {
                approvals.unpark(&call.id);
                return Ok((ToolOutput::error("approval wait cancelled"), false));
            };
            self.input
                .recorder
                .record(
                    ActionApprovalResolved {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        approved: decision.approved,
                        by: decision.by.clone(),
                        reason: decision.reason.clone(),
                    }
                    .into(),
                )
                .await?;
            if !decision.approved {
                let who = decision.by.as_deref().unwrap_or("a reviewer");
                let why = decision
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                return Ok((
                    ToolOutput::error(format!("call denied by {who}{why}")),
                    false,
                ));
            }
            approved_by = decision.by;
        }
        let attempts = if tool_spec.effect == Effect::Read {
            READ_ATTEMPTS
        } else {
            1
        };
        let timeout = tool_spec.timeout(spec.tool_timeout);
        let mut attempt = 1;
        loop {
            let ctx = self.tool_context(&call.id, approved_by.clone());
            let out = call_with_timeout(&entry.tool, call.input.clone(), ctx, timeout).await;
            if !out.is_error
                || attempt >= attempts
                || !entry.tool.is_transient(&out)
                || self.input.cancel.is_cancelled()
            {
                return Ok((out, false));
            }
            attempt += 1;
            self.emit(ActionToolRetry {
                call_id: call.id.clone(),
                name: call.name.clone(),
                attempt,
                error: out.to_text(),
            })
            .await?;
            let backoff = Duration::from_millis(100 * u64::from(attempt - 1));
            tokio::select! {
                _ = self.input.cancel.cancelled() => return Ok((ToolOutput::error("tool call cancelled"), false)),
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }

    fn tool_context(&self, call_id: &str, approved_by: Option<String>) -> ToolContext {
        let env = self.input.env;
        ToolContext {
            call_id: call_id.to_owned(),
            session: env.session.clone(),
            workspace_dir: env.workspace_dir.clone(),
            trees: env.trees.clone(),
            state_root: env.state_root.clone(),
            now: env.as_of.unwrap_or_else(|| env.clock.now()),
            as_of_pinned: env.as_of.is_some(),
            dry_run: env.dry_run,
            approved_by,
            cancel: self.input.cancel.child_token(),
            services: env.services.clone(),
            reporter: None,
        }
    }

    async fn delegate(
        &self,
        call: &ToolCall,
        subagents: &BTreeMap<String, AgentSpec>,
    ) -> Result<ToolOutput, RecordError> {
        let name = call
            .input
            .get("subagent")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let prompt = call
            .input
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(sub) = subagents.get(name) else {
            let names: Vec<&str> = subagents.keys().map(String::as_str).collect();
            return Ok(ToolOutput::error(format!(
                "unknown subagent `{name}`; available subagents: {}",
                names.join(", ")
            )));
        };
        if prompt.trim().is_empty() {
            return Ok(ToolOutput::error("`prompt` must be a non-empty string"));
        }
        self.input
            .recorder
            .record(
                SubagentCalled {
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    prompt: prompt.to_owned(),
                }
                .into(),
            )
            .await?;
        let outcome = Box::pin(run_turn(TurnInput {
            spec: sub,
            history: vec![Message::User {
                text: prompt.to_owned(),
            }],
            env: self.input.env,
            recorder: self.input.recorder,
            steering: None,
            approvals: self.input.approvals,
            cancel: self.input.cancel.child_token(),
            verbose: false,
        }))
        .await;
        let (reply, is_error) = match &outcome.end {
            TurnEnd::Completed => (outcome.reply.clone(), false),
            TurnEnd::Failed(m) => (format!("subagent `{name}` failed: {m}"), true),
            TurnEnd::Cancelled => (format!("subagent `{name}` was cancelled"), true),
        };
        self.input
            .recorder
            .record(
                SubagentCompleted {
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    reply: reply.clone(),
                    is_error,
                    usage: outcome.usage,
                }
                .into(),
            )
            .await?;
        Ok(ToolOutput {
            content: Value::String(reply),
            is_error,
            blocks: Vec::new(),
        })
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
