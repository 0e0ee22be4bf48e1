//! Trajectories: the summary of a session's events that `bdk run` prints and
//! `bdk trajectory` rebuilds from a saved NDJSON file, in one shape.

use bdk_events::{Envelope, Event, Usage};
use serde::Serialize;
use serde_json::Value;

/// One tool call with its result.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallSummary {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// The input the model sent.
    pub input: Value,
    /// The result (`null` when the call never returned).
    pub output: Value,
    /// True when the call failed or never returned.
    pub is_error: bool,
    /// Execution time.
    pub duration_ms: u64,
    /// True when a dry run stubbed the call.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stubbed: bool,
}

/// A subagent delegation.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentSummary {
    /// The subagent.
    pub name: String,
    /// The prompt it got.
    pub prompt: String,
    /// Its reply.
    pub reply: String,
    /// True when it failed.
    pub is_error: bool,
}

/// The summary of a run.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Trajectory {
    /// True when the last turn completed.
    pub ok: bool,
    /// The session.
    pub session_id: Option<String>,
    /// The last turn.
    pub turn_id: Option<String>,
    /// `completed`, `failed`, `cancelled`, `interrupted`, or `running` when
    /// the last turn has no end event.
    pub status: String,
    /// The last turn's reply.
    pub reply: String,
    /// The failure message of the last turn, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Every tool call, in order.
    pub tool_calls: Vec<ToolCallSummary>,
    /// Every subagent delegation, in order.
    pub subagents: Vec<SubagentSummary>,
    /// Skills the model loaded, in order.
    pub loaded_skills: Vec<String>,
    /// Usage summed over every ended turn; `null` when any turn's is unknown.
    pub usage: Option<Usage>,
    /// The model of the last completed turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Turns that started.
    pub turns: usize,
}

/// Summarises events (a whole session, or any slice of one).
pub fn summarize(events: &[Envelope]) -> Trajectory {
    let mut t = Trajectory {
        ok: false,
        session_id: events.first().map(|e| e.session_id.to_string()),
        turn_id: None,
        status: "idle".into(),
        reply: String::new(),
        error: None,
        tool_calls: Vec::new(),
        subagents: Vec::new(),
        loaded_skills: Vec::new(),
        usage: Some(Usage::default()),
        model: None,
        turns: 0,
    };
    for env in events {
        match &env.event {
            Event::TurnStarted(_) => {
                t.turns += 1;
                t.turn_id = env.turn_id.as_ref().map(ToString::to_string);
                t.status = "running".into();
                t.ok = false;
                t.reply.clear();
                t.error = None;
            }
            Event::ActionsRequested(a) => {
                for r in &a.actions {
                    t.tool_calls.push(ToolCallSummary {
                        call_id: r.call_id.clone(),
                        name: r.name.clone(),
                        input: r.input.clone(),
                        output: Value::Null,
                        is_error: true,
                        duration_ms: 0,
                        stubbed: false,
                    });
                    if r.name == "load_skill"
                        && let Some(name) = r.input.get("name").and_then(Value::as_str)
                    {
                        t.loaded_skills.push(name.to_owned());
                    }
                }
            }
            Event::ActionResult(r) => {
                if let Some(c) = t
                    .tool_calls
                    .iter_mut()
                    .rev()
                    .find(|c| c.call_id == r.call_id)
                {
                    c.output = r.output.clone();
                    c.is_error = r.is_error;
                    c.duration_ms = r.duration_ms;
                    c.stubbed = r.stubbed;
                }
            }
            Event::SubagentCompleted(s) => t.subagents.push(SubagentSummary {
                name: s.name.clone(),
                prompt: String::new(),
                reply: s.reply.clone(),
                is_error: s.is_error,
            }),
            Event::SubagentCalled(s) => t.subagents.push(SubagentSummary {
                name: s.name.clone(),
                prompt: s.prompt.clone(),
                reply: String::new(),
                is_error: false,
            }),
            Event::TurnCompleted(c) => {
                t.ok = true;
                t.status = "completed".into();
                t.reply = c.reply.clone();
                t.usage = Usage::sum_known(t.usage, c.usage);
                t.model = Some(c.model.clone());
            }
            Event::TurnFailed(f) => {
                t.ok = false;
                t.status = serde_json::to_value(f.status)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| "failed".into());
                t.error = Some(f.message.clone());
                t.usage = Usage::sum_known(t.usage, f.usage);
            }
            _ => {}
        }
    }
    // A `subagent.called` and its `subagent.completed` are one delegation.
    let mut merged: Vec<SubagentSummary> = Vec::new();
    for s in t.subagents.drain(..) {
        match merged.last_mut() {
            Some(last) if last.name == s.name && last.reply.is_empty() && s.prompt.is_empty() => {
                last.reply = s.reply;
                last.is_error = s.is_error;
            }
            _ => merged.push(s),
        }
    }
    t.subagents = merged;
    t
}
