//! What a scope's events say: the calls they record (paired by
//! [`bdk_events::view`], with the events an assertion failure points at),
//! and the matchers that narrow a call or an event. Assertions are checked
//! on top of this.

use bdk_events::{Envelope, view};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::matcher::Matcher;

/// How an assertion ended: `Err` carries the message and the event that
/// broke it.
pub(crate) type Outcome = Result<(), (String, Option<EventRef>)>;

/// The event an assertion failure points at.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRef {
    /// The event's index in the session stream.
    pub index: u64,
    /// The event type (`action.result`, ...).
    #[serde(rename = "type")]
    pub kind: String,
}

impl EventRef {
    pub(crate) fn of(env: &Envelope) -> EventRef {
        EventRef {
            index: env.index,
            kind: env.kind().to_owned(),
        }
    }
}

/// How a tool call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CallStatus {
    /// It returned a result.
    Completed,
    /// It returned an error result.
    Failed,
    /// No result was recorded (the turn ended first).
    Pending,
}

impl CallStatus {
    /// The status of a call whose result is an error (`Some(true)`), a
    /// success (`Some(false)`) or not recorded (`None`).
    fn of(is_error: Option<bool>) -> CallStatus {
        match is_error {
            Some(true) => CallStatus::Failed,
            Some(false) => CallStatus::Completed,
            None => CallStatus::Pending,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CallStatus::Completed => "completed",
            CallStatus::Failed => "failed",
            CallStatus::Pending => "pending",
        }
    }
}

/// One tool (or subagent) call read off the events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The call id.
    pub call_id: String,
    /// The tool (or subagent) name.
    pub name: String,
    /// The input (for a subagent: the prompt string).
    pub input: Value,
    /// The output (for a subagent: its reply); null while pending.
    pub output: Value,
    /// How it ended.
    pub status: CallStatus,
    /// The event that requested it.
    pub requested: EventRef,
    /// The event that carried its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<EventRef>,
}

/// Tool calls in request order, each paired with its result the way
/// [`bdk_events::view::calls`] pairs them.
pub fn tool_calls(events: &[Envelope]) -> Vec<ToolCallView> {
    view::calls(events)
        .into_iter()
        .map(|c| ToolCallView {
            call_id: c.request.call_id.clone(),
            name: c.request.name.clone(),
            input: c.request.input.clone(),
            output: c.result.map_or(Value::Null, |r| r.output.clone()),
            status: CallStatus::of(c.result.map(|r| r.is_error)),
            requested: EventRef::of(c.requested),
            result: c.answered.map(EventRef::of),
        })
        .collect()
}

/// Subagent calls in order: input is the prompt, output the reply.
pub fn subagent_calls(events: &[Envelope]) -> Vec<ToolCallView> {
    view::delegations(events)
        .into_iter()
        .map(|d| ToolCallView {
            call_id: d.call.call_id.clone(),
            name: d.call.name.clone(),
            input: Value::String(d.call.prompt.clone()),
            output: d
                .completion
                .map_or(Value::Null, |c| Value::String(c.reply.clone())),
            status: CallStatus::of(d.completion.map(|c| c.is_error)),
            requested: EventRef::of(d.called),
            result: d.completed.map(EventRef::of),
        })
        .collect()
}

/// Narrows a tool or subagent call: input, output, status and how many
/// matching calls there must be. Every field is optional; the default
/// matches any call.
#[derive(Clone, Debug, Default)]
pub struct ToolMatch {
    /// Matches the input (a subagent's prompt).
    pub input: Option<Matcher>,
    /// Matches the output (a subagent's reply).
    pub output: Option<Matcher>,
    /// Required status.
    pub status: Option<CallStatus>,
    /// Exactly this many matching calls (default: at least one).
    pub count: Option<usize>,
}

impl ToolMatch {
    /// Any call.
    pub fn any() -> ToolMatch {
        ToolMatch::default()
    }
    /// Input must match.
    pub fn input(mut self, m: impl Into<Matcher>) -> ToolMatch {
        self.input = Some(m.into());
        self
    }
    /// Output must match.
    pub fn output(mut self, m: impl Into<Matcher>) -> ToolMatch {
        self.output = Some(m.into());
        self
    }
    /// Status must be this.
    pub fn status(mut self, s: CallStatus) -> ToolMatch {
        self.status = Some(s);
        self
    }
    /// Exactly `n` matching calls.
    pub fn count(mut self, n: usize) -> ToolMatch {
        self.count = Some(n);
        self
    }

    pub(crate) fn check(&self, call: &ToolCallView) -> Result<(), String> {
        if let Some(m) = &self.input {
            m.check(Some(&call.input))
                .map_err(|e| format!("input {e}"))?;
        }
        if let Some(m) = &self.output {
            m.check(Some(&call.output))
                .map_err(|e| format!("output {e}"))?;
        }
        if let Some(s) = self.status
            && s != call.status
        {
            return Err(format!(
                "status is {}, expected {}",
                call.status.as_str(),
                s.as_str()
            ));
        }
        Ok(())
    }

    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.input {
            parts.push(format!("input: {}", m.describe()));
        }
        if let Some(m) = &self.output {
            parts.push(format!("output: {}", m.describe()));
        }
        if let Some(s) = self.status {
            parts.push(format!("status: {}", s.as_str()));
        }
        if let Some(n) = self.count {
            parts.push(format!("count: {n}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!(", {{{}}}", parts.join(", "))
        }
    }
}

impl From<serde_json::Value> for Matcher {
    fn from(v: serde_json::Value) -> Matcher {
        Matcher::literal(v)
    }
}

/// An event type with an optional matcher on its `data`.
#[derive(Clone, Debug)]
pub struct EventMatch {
    /// The event type.
    pub kind: String,
    /// Matches `data`.
    pub data: Option<Matcher>,
}

impl EventMatch {
    /// Any event of this type.
    pub fn kind(kind: impl Into<String>) -> EventMatch {
        EventMatch {
            kind: kind.into(),
            data: None,
        }
    }
    /// Whose data matches.
    pub fn data(mut self, m: impl Into<Matcher>) -> EventMatch {
        self.data = Some(m.into());
        self
    }

    pub(crate) fn check(&self, env: &Envelope) -> Result<(), String> {
        if env.kind() != self.kind {
            return Err(format!("type is {}", env.kind()));
        }
        if let Some(m) = &self.data {
            let data = env.event.data_json().unwrap_or(Value::Null);
            m.check(Some(&data)).map_err(|e| format!("data {e}"))?;
        }
        Ok(())
    }

    pub(crate) fn describe(&self) -> String {
        match &self.data {
            Some(m) => format!("{} {}", self.kind, m.describe()),
            None => self.kind.clone(),
        }
    }
}

/// What a `gate.verdict` must show for [`crate::Assertions::gate_verdict`].
/// Every field is optional; the default matches any verdict.
#[derive(Clone, Debug, Default)]
pub struct GateMatch {
    /// The gate's name.
    pub gate: Option<String>,
    /// The verdict (`accept`, `reject`, `fail`).
    pub verdict: Option<bdk_events::Verdict>,
    /// The attempt it judged, from 1.
    pub attempt: Option<u32>,
    /// Matches the reject's feedback or the fail's message.
    pub text: Option<Matcher>,
}

impl GateMatch {
    /// Any verdict of any gate.
    pub fn any() -> GateMatch {
        GateMatch::default()
    }
    /// Of this gate.
    pub fn gate(mut self, name: impl Into<String>) -> GateMatch {
        self.gate = Some(name.into());
        self
    }
    /// This verdict.
    pub fn verdict(mut self, v: bdk_events::Verdict) -> GateMatch {
        self.verdict = Some(v);
        self
    }
    /// On this attempt.
    pub fn attempt(mut self, n: u32) -> GateMatch {
        self.attempt = Some(n);
        self
    }
    /// Whose feedback (reject) or message (fail) matches.
    pub fn text(mut self, m: impl Into<Matcher>) -> GateMatch {
        self.text = Some(m.into());
        self
    }

    pub(crate) fn check(&self, v: &bdk_events::GateVerdict) -> Result<(), String> {
        if let Some(g) = &self.gate
            && *g != v.gate
        {
            return Err(format!("gate is {}", v.gate));
        }
        if let Some(want) = self.verdict
            && want != v.verdict
        {
            return Err(format!("verdict is {}", v.verdict.as_str()));
        }
        if let Some(n) = self.attempt
            && n != v.attempt
        {
            return Err(format!("attempt is {}", v.attempt));
        }
        if let Some(m) = &self.text {
            let text = v.feedback.as_deref().or(v.message.as_deref());
            let text = text.map(|t| Value::String(t.to_owned()));
            m.check(text.as_ref()).map_err(|e| format!("text {e}"))?;
        }
        Ok(())
    }

    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(g) = &self.gate {
            parts.push(format!("gate: {g:?}"));
        }
        if let Some(v) = self.verdict {
            parts.push(format!("verdict: {}", v.as_str()));
        }
        if let Some(n) = self.attempt {
            parts.push(format!("attempt: {n}"));
        }
        if let Some(m) = &self.text {
            parts.push(format!("text: {}", m.describe()));
        }
        format!("{{{}}}", parts.join(", "))
    }
}
