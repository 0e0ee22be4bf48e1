//! Trajectories: the summary of a session's events that `bdk run` prints and
//! `bdk trajectory` rebuilds from a saved NDJSON file, in one shape. How
//! turns ended and which call returned what are read through
//! [`bdk_events::view`], as every other reader of a log reads them.

use bdk_events::view::{assignments, calls, delegations, turn_end, verdicts};
use bdk_events::{Envelope, Event, GateVerdict, Usage};
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
    /// Every result-gate verdict, in order (left out when there is none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gates: Vec<GateVerdict>,
    /// Usage summed over every ended turn; `null` when any turn's is unknown.
    pub usage: Option<Usage>,
    /// The model of the last completed turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Turns that started.
    pub turns: usize,
    /// The A/B arms the session was enrolled in, experiment -> arm
    /// (absent when none).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub arms: std::collections::BTreeMap<String, String>,
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
        gates: Vec::new(),
        usage: Some(Usage::default()),
        model: None,
        turns: 0,
        arms: assignments(events)
            .into_iter()
            .map(|a| (a.experiment.clone(), a.arm.clone()))
            .collect(),
    };
    for env in events {
        if let Event::TurnStarted(_) = &env.event {
            t.turns += 1;
            t.turn_id = env.turn_id.as_ref().map(ToString::to_string);
            t.status = "running".into();
            t.ok = false;
            t.reply.clear();
            t.error = None;
        } else if let Some(end) = turn_end(&env.event) {
            t.ok = end.ok;
            t.status = end.status_str().into();
            if end.ok {
                t.reply = end.text.to_owned();
            } else {
                t.error = Some(end.text.to_owned());
            }
            t.usage = Usage::sum_known(t.usage, end.usage);
            if let Event::TurnCompleted(c) = &env.event {
                t.model = Some(c.model.clone());
            }
        }
    }
    for call in calls(events) {
        let r = call.request;
        if r.name == "load_skill"
            && let Some(name) = r.input.get("name").and_then(Value::as_str)
        {
            t.loaded_skills.push(name.to_owned());
        }
        t.tool_calls.push(ToolCallSummary {
            call_id: r.call_id.clone(),
            name: r.name.clone(),
            input: r.input.clone(),
            output: call.result.map_or(Value::Null, |res| res.output.clone()),
            is_error: call.result.is_none_or(|res| res.is_error),
            duration_ms: call.result.map_or(0, |res| res.duration_ms),
            stubbed: call.result.is_some_and(|res| res.stubbed),
        });
    }
    t.subagents = delegations(events)
        .into_iter()
        .map(|d| SubagentSummary {
            name: d.call.name.clone(),
            prompt: d.call.prompt.clone(),
            reply: d.completion.map(|c| c.reply.clone()).unwrap_or_default(),
            is_error: d.completion.is_some_and(|c| c.is_error),
        })
        .collect();
    t.gates = verdicts(events)
        .into_iter()
        .map(|(_, v)| v.clone())
        .collect();
    t
}
