//! The event envelope and the event vocabulary.
//!
//! One event is one NDJSON line:
//!
//! ```json
//! {"type":"turn.started","index":3,"sessionId":"ses_…","turnId":"turn_…","at":"2026-11-30T18:00:00.000Z","data":{}}
//! ```
//!
//! `type` names the event and decides the shape of `data`; `index` starts at 0
//! and grows by exactly one per session; `turnId` is present on events that
//! belong to a turn; `at` is an RFC 3339 UTC timestamp.
//!
//! Compatibility rules for this public format: a field is never renamed or
//! retyped; new optional fields may appear (readers ignore unknown fields);
//! an event type this version does not know is read as [`Event::Unknown`] and
//! written back unchanged, so an old reader never fails on a newer file.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::Error as _;
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::ids::{SessionId, TurnId};

/// Token counts for one step, one turn or one session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Usage {
    /// Prompt tokens billed at the full input rate.
    pub input_tokens: u64,
    /// Completion tokens, reasoning included.
    pub output_tokens: u64,
    /// Prompt tokens served from the provider's cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's cache.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: &Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }

    /// Sums two counts either of which may be unknown (`None`: the provider
    /// reported nothing). The sum is known only when both parts are: a
    /// total that silently left a part out would understate what was used.
    pub fn sum_known(total: Option<Usage>, part: Option<Usage>) -> Option<Usage> {
        let (mut total, part) = (total?, part?);
        total.add(&part);
        Some(total)
    }
}

/// How a session behaves after a turn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionMode {
    /// Waits for follow-ups after each turn (`session.waiting`).
    #[default]
    Chat,
    /// Runs once and ends in `session.completed` or `session.failed`.
    Task,
}

/// Why a turn failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailStatus {
    /// The turn hit an error: model, limits, configuration.
    Failed,
    /// The turn was stopped by `stop` or by the host shutting down.
    Cancelled,
    /// The turn was preempted by a follow-up, or the process died mid-turn.
    Interrupted,
}

impl FailStatus {
    /// The wire name (`failed`, `cancelled`, `interrupted`).
    pub fn as_str(self) -> &'static str {
        match self {
            FailStatus::Failed => "failed",
            FailStatus::Cancelled => "cancelled",
            FailStatus::Interrupted => "interrupted",
        }
    }
}

/// How a follow-up joins a busy session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Admission {
    /// Interrupt the running turn, wait for it to settle, run the new message.
    #[default]
    Preempt,
    /// Queue behind the running turn; steer into it at a tool boundary.
    Coalesce,
}

/// Data of `session.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionStarted {
    /// `chat` or `task`.
    pub mode: SessionMode,
    /// The channel that created the session (`http`, `cli`, a custom channel id).
    pub channel: String,
    /// The principal that owns the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Display title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Free-form purpose supplied by the caller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// Whether writes are stubbed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,
    /// The pinned "now" for tools, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<DateTime<Utc>>,
    /// The agent that serves the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Data of `ab.assigned`: recorded right after `session.started`, once
/// per experiment the session is enrolled in. It is the truth about the
/// session's arm for the rest of its life, whatever the experiment's
/// weights say later.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AbAssigned {
    /// The experiment name.
    pub experiment: String,
    /// The arm the session was enrolled in.
    pub arm: String,
    /// What the arm was chosen by; absent in files written before it
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<AbUnit>,
    /// The value the arm was drawn from: the session id, or the channel
    /// conversation's continuation token (`<channelId>:<key>`); the session
    /// id for a pinned arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_key: Option<String>,
}

/// What an `ab.assigned` arm was chosen by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbUnit {
    /// Drawn from the session id: every session draws on its own.
    Session,
    /// Drawn from the channel conversation's continuation token, so every
    /// session of one channel key lands in the same arm.
    ChannelKey,
    /// Chosen by the caller (an eval case pinning an arm), not drawn.
    Pinned,
}

impl AbUnit {
    /// The wire name (`session`, `channel_key`, `pinned`).
    pub fn as_str(self) -> &'static str {
        match self {
            AbUnit::Session => "session",
            AbUnit::ChannelKey => "channel_key",
            AbUnit::Pinned => "pinned",
        }
    }
}

/// Data of `agent.bound`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentBound {
    /// The runtime's id for the conversation.
    pub agent_id: String,
    /// Where a person can look at it, when there is such a place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

/// Data of `session.waiting`: the session is idle and accepts follow-ups.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionWaiting {}

/// Data of `session.completed`: a task session ended well.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionCompleted {
    /// The final reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
}

/// Data of `session.failed`: a task session ended in failure.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionFailed {
    /// What went wrong.
    pub message: String,
}

/// Data of `message.received`: a user message became a turn's prompt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageReceived {
    /// The prompt text (several coalesced sends are joined by blank lines).
    pub message: String,
    /// Every send this prompt carries, in arrival order.
    #[serde(default)]
    pub delivery_ids: Vec<String>,
}

/// Data of `nudge.delivered`: a message reached a running turn at a tool boundary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NudgeDelivered {
    /// The steering text.
    pub message: String,
    /// The send it came from, when it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_id: Option<String>,
}

/// Data of `turn.queued`: the turn waits for a slot under `max_running_turns`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnQueued {
    /// 1-based position in the agent's queue when the turn was queued.
    pub position: u64,
}

/// Data of `turn.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStarted {
    /// The model the turn runs on (`provider/model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// Data of `turn.completed`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompleted {
    /// The final assistant reply of the turn.
    pub reply: String,
    /// Token usage summed over the turn's steps; `null` when the provider
    /// reported none for some step (unknown, which is not zero).
    #[serde(default)]
    pub usage: Option<Usage>,
    /// The model the turn ran on.
    pub model: String,
    /// Wall time of the turn.
    pub duration_ms: u64,
    /// Number of model steps.
    #[serde(default)]
    pub steps: u32,
}

/// Data of `turn.failed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnFailed {
    /// What went wrong, for a person.
    pub message: String,
    /// `failed`, `cancelled` or `interrupted`.
    pub status: FailStatus,
    /// Token usage of the steps that did run; `null` (or absent, in files
    /// written before this was spelled out) when it is not known.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Data of `step.started`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepStarted {
    /// 1-based step number within the turn.
    pub step: u32,
}

/// Data of `step.completed`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepCompleted {
    /// 1-based step number within the turn.
    pub step: u32,
    /// Wall time of the step, tool execution included.
    pub duration_ms: u64,
    /// Why the model stopped (`stop`, `tool_calls`, `length`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token usage of this step; `null` when the provider reported none.
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Data of `reasoning.appended`: a reasoning delta.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningAppended {
    /// The new text.
    pub delta: String,
}

/// Data of `reasoning.completed`: the finished reasoning block.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningCompleted {
    /// The whole block.
    pub text: String,
}

/// Data of `message.appended`: an assistant text delta.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageAppended {
    /// The new text.
    pub delta: String,
}

/// Data of `message.completed`: a finalized assistant message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageCompleted {
    /// The whole message.
    pub text: String,
}

/// One tool call of a batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionRequest {
    /// The call id, repeated on `action.result`.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The input as the model sent it (validated before execution).
    pub input: Value,
}

/// Data of `actions.requested`: the batch of calls of one model step.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionsRequested {
    /// The step that requested them.
    pub step: u32,
    /// The calls, in the model's order.
    pub actions: Vec<ActionRequest>,
}

/// Data of `actions.completed`: every call of the batch has a result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionsCompleted {
    /// The step that requested them.
    pub step: u32,
    /// The call ids of the batch.
    pub call_ids: Vec<String>,
}

/// Data of `action.result`: the outcome of one call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionResult {
    /// The call id from `actions.requested`.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// True when the tool failed; `output` then describes the failure.
    pub is_error: bool,
    /// The result as the model sees it.
    pub output: Value,
    /// The MCP content blocks the tool answered with (text, image, audio,
    /// resource, resource link), unchanged; absent for an ordinary result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
    /// Execution wall time.
    pub duration_ms: u64,
    /// True when a dry run stubbed this write instead of running it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub stubbed: bool,
}

/// Data of `action.tool_retry`: a read runs again after a transient failure.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionToolRetry {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// 1-based number of the attempt about to run.
    pub attempt: u32,
    /// What failed.
    pub error: String,
}

/// Data of `action.approval_requested`: a call is parked until a person decides.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionApprovalRequested {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The validated input.
    pub input: Value,
}

/// Data of `action.approval_resolved`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionApprovalResolved {
    /// The call id.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The decision.
    pub approved: bool,
    /// The principal that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// An optional reason, passed to the model on denial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Data of `subagent.called`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentCalled {
    /// The `task` call that delegated.
    pub call_id: String,
    /// The subagent name.
    pub name: String,
    /// The prompt handed to it.
    pub prompt: String,
}

/// Data of `subagent.completed`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentCompleted {
    /// The `task` call that delegated.
    pub call_id: String,
    /// The subagent name.
    pub name: String,
    /// Its final reply (or the failure message).
    pub reply: String,
    /// True when the subagent's run failed.
    pub is_error: bool,
    /// Its token usage; `null` when not known (see `TurnCompleted::usage`).
    #[serde(default)]
    pub usage: Option<Usage>,
}

/// Data of `channel.outbound`: something a channel pack did outside on the
/// session's behalf (a GitHub commit status, banner comment or reply), and
/// whether it worked. Recorded for every failure and for each posted reply,
/// so what happened outside is visible in the session's own log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelOutbound {
    /// The channel (its file name).
    pub channel: String,
    /// What it did: `status`, `banner`, `reply`, ...
    pub action: String,
    /// True when it worked.
    pub ok: bool,
    /// The turn it was about, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_turn: Option<String>,
    /// Where the result can be seen (a comment's URL).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A short error code when it failed (`github_forbidden`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// What went wrong, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Data of `artifact.tagged`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactTagged {
    /// The artifact id.
    pub artifact_id: String,
    /// A caller-chosen kind (`report`, `pr-comment`, ...).
    pub kind: String,
    /// Workspace-relative path of the content, when it is a file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Free-form metadata.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub metadata: Value,
}

/// What a result gate answered about a turn's final reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The reply stands; the turn completes with it.
    Accept,
    /// The reply goes back to the model with feedback to repair it.
    Reject,
    /// The turn ends `turn.failed` with the gate's message.
    Fail,
}

impl Verdict {
    /// The wire name (`accept`, `reject`, `fail`).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Accept => "accept",
            Verdict::Reject => "reject",
            Verdict::Fail => "fail",
        }
    }
}

/// Data of `gate.verdict`: one result gate's answer about one reply the
/// turn offered as final.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateVerdict {
    /// The gate (its manifest stem, or the name a Rust gate gives itself).
    pub gate: String,
    /// Which final reply of the turn this is, from 1.
    pub attempt: u32,
    /// How many replies the gate lets a turn offer.
    pub max_attempts: u32,
    /// The verdict that took effect (after the gate's `on_error` policy,
    /// when the gate itself broke).
    pub verdict: Verdict,
    /// What the model is told to repair (`reject`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    /// Why the turn fails (`fail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What the gate says it did with an accepted reply (free text or JSON).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub action: Value,
    /// How long the gate ran.
    pub duration_ms: u64,
    /// Set when the gate itself broke (crashed, timed out, answered
    /// something that is not a verdict): what went wrong. `verdict` is then
    /// what the gate's `on_error` policy made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl GateVerdict {
    /// The message the model gets after a `reject`: the conversation keeps
    /// it as a user message, so a transcript rebuilt from the log after a
    /// restart shows the model exactly what the running turn showed it.
    pub fn repair_prompt(&self) -> String {
        format!(
            "The result gate `{}` rejected your reply (attempt {} of {}). Feedback: {}\n\nRevise your reply and answer again.",
            self.gate,
            self.attempt,
            self.max_attempts,
            self.feedback.as_deref().unwrap_or("no reason given")
        )
    }
}

macro_rules! vocabulary {
    ($($(#[$doc:meta])* $variant:ident($data:ty) = $wire:literal,)*) => {
        /// One event of the vocabulary, with its typed `data`.
        #[derive(Clone, Debug, PartialEq)]
        #[non_exhaustive]
        pub enum Event {
            $($(#[$doc])* $variant($data),)*
            /// An event type this version does not know, kept verbatim.
            Unknown {
                /// The wire `type`.
                kind: String,
                /// The raw `data`.
                data: Value,
            },
        }

        /// Every wire type name this version knows, in vocabulary order.
        pub const EVENT_TYPES: &[&str] = &[$($wire,)*];

        impl Event {
            /// The wire `type` of this event.
            pub fn kind(&self) -> &str {
                match self {
                    $(Event::$variant(_) => $wire,)*
                    Event::Unknown { kind, .. } => kind,
                }
            }

            /// The `data` object as JSON.
            pub fn data_json(&self) -> Result<Value, serde_json::Error> {
                match self {
                    $(Event::$variant(d) => serde_json::to_value(d),)*
                    Event::Unknown { data, .. } => Ok(data.clone()),
                }
            }

            fn serialize_data<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
                match self {
                    $(Event::$variant(d) => map.serialize_entry("data", d),)*
                    Event::Unknown { data, .. } => map.serialize_entry("data", data),
                }
            }

            /// Builds an event from its wire type and data.
            pub fn from_parts(kind: &str, data: Value) -> Result<Event, serde_json::Error> {
                Ok(match kind {
                    $($wire => Event::$variant(serde_json::from_value(data)?),)*
                    other => Event::Unknown { kind: other.to_owned(), data },
                })
            }
        }

        $(
            impl From<$data> for Event {
                fn from(d: $data) -> Event {
                    Event::$variant(d)
                }
            }
        )*
    };
}

vocabulary! {
    /// A session was created.
    SessionStarted(SessionStarted) = "session.started",
    /// The session was enrolled in an A/B arm.
    AbAssigned(AbAssigned) = "ab.assigned",
    /// The runtime's conversation id is known.
    AgentBound(AgentBound) = "agent.bound",
    /// The session is idle and accepts follow-ups.
    SessionWaiting(SessionWaiting) = "session.waiting",
    /// A task session ended well.
    SessionCompleted(SessionCompleted) = "session.completed",
    /// A task session ended in failure.
    SessionFailed(SessionFailed) = "session.failed",
    /// A user message became a turn's prompt.
    MessageReceived(MessageReceived) = "message.received",
    /// A message reached a running turn at a tool boundary.
    NudgeDelivered(NudgeDelivered) = "nudge.delivered",
    /// A turn waits for a slot.
    TurnQueued(TurnQueued) = "turn.queued",
    /// A turn started.
    TurnStarted(TurnStarted) = "turn.started",
    /// A turn finished with a reply.
    TurnCompleted(TurnCompleted) = "turn.completed",
    /// A turn failed, was cancelled or was interrupted.
    TurnFailed(TurnFailed) = "turn.failed",
    /// A model step started.
    StepStarted(StepStarted) = "step.started",
    /// A model step ended.
    StepCompleted(StepCompleted) = "step.completed",
    /// Reasoning text streamed.
    ReasoningAppended(ReasoningAppended) = "reasoning.appended",
    /// A reasoning block finished.
    ReasoningCompleted(ReasoningCompleted) = "reasoning.completed",
    /// Assistant text streamed.
    MessageAppended(MessageAppended) = "message.appended",
    /// An assistant message finished.
    MessageCompleted(MessageCompleted) = "message.completed",
    /// A model step asked for a batch of tool calls.
    ActionsRequested(ActionsRequested) = "actions.requested",
    /// Every call of a batch has a result.
    ActionsCompleted(ActionsCompleted) = "actions.completed",
    /// One call's result.
    ActionResult(ActionResult) = "action.result",
    /// A read is retried after a transient failure.
    ActionToolRetry(ActionToolRetry) = "action.tool_retry",
    /// A call waits for approval.
    ActionApprovalRequested(ActionApprovalRequested) = "action.approval_requested",
    /// An approval was decided.
    ActionApprovalResolved(ActionApprovalResolved) = "action.approval_resolved",
    /// The model delegated to a subagent.
    SubagentCalled(SubagentCalled) = "subagent.called",
    /// A subagent finished.
    SubagentCompleted(SubagentCompleted) = "subagent.completed",
    /// An artifact was tagged.
    ArtifactTagged(ArtifactTagged) = "artifact.tagged",
    /// A result gate judged the turn's final reply.
    GateVerdict(GateVerdict) = "gate.verdict",
    /// A channel pack acted outside on the session's behalf.
    ChannelOutbound(ChannelOutbound) = "channel.outbound",
}

impl Event {
    /// True for the events that end a turn.
    pub fn ends_turn(&self) -> bool {
        matches!(self, Event::TurnCompleted(_) | Event::TurnFailed(_))
    }

    /// True for the events after which a session rests: the points where the
    /// store makes appends durable before acknowledging them.
    pub fn is_boundary(&self) -> bool {
        matches!(
            self,
            Event::TurnCompleted(_)
                | Event::TurnFailed(_)
                | Event::SessionStarted(_)
                | Event::SessionWaiting(_)
                | Event::SessionCompleted(_)
                | Event::SessionFailed(_)
                | Event::MessageReceived(_)
        )
    }
}

/// One recorded event: the envelope around an [`Event`].
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// Position in the session's stream, from 0, gapless.
    pub index: u64,
    /// The session the event belongs to.
    pub session_id: SessionId,
    /// The turn the event belongs to, if any.
    pub turn_id: Option<TurnId>,
    /// When the event was recorded.
    pub at: DateTime<Utc>,
    /// The event.
    pub event: Event,
}

impl Envelope {
    /// The wire `type`.
    pub fn kind(&self) -> &str {
        self.event.kind()
    }

    /// The envelope as one NDJSON line, without the newline.
    pub fn to_line(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }
}

impl Serialize for Envelope {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let len = if self.turn_id.is_some() { 6 } else { 5 };
        let mut map = serializer.serialize_map(Some(len))?;
        map.serialize_entry("type", self.event.kind())?;
        map.serialize_entry("index", &self.index)?;
        map.serialize_entry("sessionId", &self.session_id)?;
        if let Some(turn) = &self.turn_id {
            map.serialize_entry("turnId", turn)?;
        }
        map.serialize_entry("at", &self.at.to_rfc3339_opts(SecondsFormat::Millis, true))?;
        self.event.serialize_data(&mut map)?;
        map.end()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawEnvelope {
    #[serde(rename = "type")]
    kind: String,
    index: u64,
    session_id: SessionId,
    #[serde(default)]
    turn_id: Option<TurnId>,
    at: DateTime<Utc>,
    #[serde(default)]
    data: Value,
}

impl<'de> Deserialize<'de> for Envelope {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawEnvelope::deserialize(deserializer)?;
        let data = if raw.data.is_null() {
            Value::Object(Default::default())
        } else {
            raw.data
        };
        let event = Event::from_parts(&raw.kind, data)
            .map_err(|e| D::Error::custom(format_args!("invalid data for {}: {e}", raw.kind)))?;
        Ok(Envelope {
            index: raw.index,
            session_id: raw.session_id,
            turn_id: raw.turn_id,
            at: raw.at,
            event,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(event: Event) -> Envelope {
        Envelope {
            index: 7,
            session_id: SessionId::from_string("ses_test"),
            turn_id: Some(TurnId::from_string("turn_test")),
            at: DateTime::parse_from_rfc3339("2026-11-30T18:00:00.123Z")
                .unwrap()
                .with_timezone(&Utc),
            event,
        }
    }

    #[test]
    fn envelope_wire_shape_is_stable() {
        let e = env(Event::TurnCompleted(TurnCompleted {
            reply: "hi".into(),
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 2,
                cache_read_tokens: 1,
                cache_write_tokens: 0,
            }),
            model: "scripted/default".into(),
            duration_ms: 5,
            steps: 1,
        }));
        let line = e.to_line().unwrap();
        assert_eq!(
            line,
            r#"{"type":"turn.completed","index":7,"sessionId":"ses_test","turnId":"turn_test","at":"2026-11-30T18:00:00.123Z","data":{"reply":"hi","usage":{"inputTokens":10,"outputTokens":2,"cacheReadTokens":1,"cacheWriteTokens":0},"model":"scripted/default","durationMs":5,"steps":1}}"#
        );
        let back: Envelope = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn unknown_usage_is_null_never_zero() {
        let step = env(Event::StepCompleted(StepCompleted {
            step: 1,
            duration_ms: 3,
            finish_reason: Some("stop".into()),
            usage: None,
        }));
        let v: Value = serde_json::from_str(&step.to_line().unwrap()).unwrap();
        assert_eq!(v["data"]["usage"], Value::Null);
        assert!(v["data"].as_object().unwrap().contains_key("usage"));
        let turn = env(Event::TurnCompleted(TurnCompleted {
            reply: "hi".into(),
            usage: None,
            model: "openai-compatible/m".into(),
            duration_ms: 5,
            steps: 1,
        }));
        let line = turn.to_line().unwrap();
        assert!(line.contains(r#""usage":null"#), "{line}");
        let back: Envelope = serde_json::from_str(&line).unwrap();
        assert_eq!(back, turn);
        // Files written before usage could be unknown always carried it.
        let old: Envelope = serde_json::from_str(
            r#"{"type":"turn.completed","index":1,"sessionId":"s","at":"2026-11-30T18:00:00.000Z","data":{"reply":"","usage":{"inputTokens":4},"model":"m","durationMs":0}}"#,
        )
        .unwrap();
        let Event::TurnCompleted(c) = old.event else {
            panic!("not a turn.completed");
        };
        assert_eq!(c.usage.map(|u| u.input_tokens), Some(4));
    }

    #[test]
    fn every_known_type_round_trips_with_default_data() {
        // Build each event from the smallest data its type accepts and check
        // the wire name survives a round trip.
        let minimal = |kind: &str| -> Value {
            match kind {
                "session.failed" => json!({"message": "x"}),
                "turn.failed" => json!({"message": "x", "status": "cancelled"}),
                "turn.completed" => {
                    json!({"reply": "", "usage": {}, "model": "m", "durationMs": 0})
                }
                "ab.assigned" => json!({"experiment": "e", "arm": "a"}),
                "agent.bound" => json!({"agentId": "a"}),
                "actions.requested" => {
                    json!({"step": 1, "actions": [{"callId": "c", "name": "t", "input": {}}]})
                }
                "action.result" => {
                    json!({"callId": "c", "name": "t", "isError": false, "output": 1, "durationMs": 0})
                }
                "action.tool_retry" => {
                    json!({"callId": "c", "name": "t", "attempt": 2, "error": "e"})
                }
                "action.approval_requested" => json!({"callId": "c", "name": "t", "input": {}}),
                "action.approval_resolved" => json!({"callId": "c", "name": "t", "approved": true}),
                "subagent.called" => json!({"callId": "c", "name": "s", "prompt": "p"}),
                "subagent.completed" => {
                    json!({"callId": "c", "name": "s", "reply": "r", "isError": false})
                }
                "artifact.tagged" => json!({"artifactId": "a", "kind": "k"}),
                "channel.outbound" => json!({"channel": "github", "action": "status", "ok": true}),
                "gate.verdict" => json!({
                    "gate": "g", "attempt": 1, "maxAttempts": 3,
                    "verdict": "reject", "feedback": "f", "durationMs": 0
                }),
                "message.received" | "nudge.delivered" => json!({"message": "m"}),
                "turn.queued" => json!({"position": 1}),
                "actions.completed" => json!({"step": 1, "callIds": ["c"]}),
                "step.started" => json!({"step": 1}),
                "step.completed" => json!({"step": 1, "durationMs": 0}),
                "reasoning.appended" | "message.appended" => json!({"delta": "d"}),
                "reasoning.completed" | "message.completed" => json!({"text": "t"}),
                "session.started" => json!({"mode": "chat", "channel": "http"}),
                _ => json!({}),
            }
        };
        assert_eq!(EVENT_TYPES.len(), 29);
        for kind in EVENT_TYPES {
            let event =
                Event::from_parts(kind, minimal(kind)).unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert_eq!(event.kind(), *kind);
            assert!(
                !matches!(event, Event::Unknown { .. }),
                "{kind} must be typed"
            );
            let line = env(event.clone()).to_line().unwrap();
            let back: Envelope = serde_json::from_str(&line).unwrap();
            assert_eq!(back.event, event, "{kind}");
        }
    }

    #[test]
    fn gate_verdict_wire_shape_is_stable() {
        let e = env(Event::GateVerdict(GateVerdict {
            gate: "format".into(),
            attempt: 1,
            max_attempts: 3,
            verdict: Verdict::Reject,
            feedback: Some("sign it".into()),
            message: None,
            action: Value::Null,
            duration_ms: 4,
            error: None,
        }));
        let line = e.to_line().unwrap();
        assert_eq!(
            line,
            r#"{"type":"gate.verdict","index":7,"sessionId":"ses_test","turnId":"turn_test","at":"2026-11-30T18:00:00.123Z","data":{"gate":"format","attempt":1,"maxAttempts":3,"verdict":"reject","feedback":"sign it","durationMs":4}}"#
        );
        let back: Envelope = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn ab_assigned_wire_shape() {
        let e = env(Event::AbAssigned(AbAssigned {
            experiment: "tone".into(),
            arm: "concise".into(),
            unit: Some(AbUnit::ChannelKey),
            unit_key: Some("slack:T1".into()),
        }));
        let v: Value = serde_json::from_str(&e.to_line().unwrap()).unwrap();
        assert_eq!(
            v["data"],
            json!({"experiment": "tone", "arm": "concise", "unit": "channel_key", "unitKey": "slack:T1"})
        );
        // Files without the unit fields read as unknown units.
        let old = Event::from_parts("ab.assigned", json!({"experiment": "e", "arm": "a"})).unwrap();
        assert_eq!(
            old,
            Event::AbAssigned(AbAssigned {
                experiment: "e".into(),
                arm: "a".into(),
                ..AbAssigned::default()
            })
        );
    }

    #[test]
    fn unknown_types_survive_verbatim() {
        let line = r#"{"type":"future.thing","index":0,"sessionId":"ses_a","at":"2026-11-30T18:00:00Z","data":{"x":[1,2]}}"#;
        let e: Envelope = serde_json::from_str(line).unwrap();
        assert_eq!(e.kind(), "future.thing");
        assert_eq!(e.turn_id, None);
        let again: Value = serde_json::from_str(&e.to_line().unwrap()).unwrap();
        assert_eq!(again["data"], json!({"x": [1, 2]}));
    }

    #[test]
    fn unknown_data_fields_are_ignored_and_bad_data_is_an_error() {
        let ok = r#"{"type":"turn.queued","index":1,"sessionId":"ses_a","at":"2026-11-30T18:00:00Z","data":{"position":2,"newField":true}}"#;
        let e: Envelope = serde_json::from_str(ok).unwrap();
        assert_eq!(e.event, Event::TurnQueued(TurnQueued { position: 2 }));
        let bad = r#"{"type":"turn.queued","index":1,"sessionId":"ses_a","at":"2026-11-30T18:00:00Z","data":{"position":"two"}}"#;
        let err = serde_json::from_str::<Envelope>(bad)
            .unwrap_err()
            .to_string();
        assert!(err.contains("turn.queued"), "{err}");
    }
}
