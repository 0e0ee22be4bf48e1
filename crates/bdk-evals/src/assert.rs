//! Trajectory assertions over recorded session events.
//!
//! [`Assertions`] is implemented by the whole case ([`crate::Case`]) and by
//! one turn ([`crate::Turn`]): the same methods, over the case's events or
//! the turn's. Every assertion returns whether it held and, when it did not,
//! records a [`Failure`] naming the event that broke it; nothing stops the
//! case except the `require*` forms and `expect_ok`, which return
//! [`Stop`].

use std::sync::{Arc, Mutex};

use bdk_events::{Envelope, Event};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::judge::Judge;
use crate::matcher::Matcher;

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

/// One violated assertion.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The assertion as written (`calledTool("get_weather")`).
    pub assertion: String,
    /// Where it was asserted: `case` or `turn N`.
    pub scope: String,
    /// What went wrong.
    pub message: String,
    /// The event that broke it (the offending event, or the last event
    /// inspected when something expected never happened). `None` only when
    /// the scope has no events at all, or for value checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<EventRef>,
}

impl Failure {
    /// One line for a terminal: `turn 1: calledTool("x"): message (event #7 turn.completed)`.
    pub fn line(&self) -> String {
        let at = self
            .event
            .as_ref()
            .map(|e| format!(" (event #{} {})", e.index, e.kind))
            .unwrap_or_default();
        format!("{}: {}: {}{at}", self.scope, self.assertion, self.message)
    }
}

/// A recorded score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The score's name.
    pub name: String,
    /// From 0 to 1.
    pub value: f64,
}

/// Returned by the `require*` forms and `expect_ok` to stop the rest of the
/// case body (propagate it with `?`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("case stopped: {reason}")]
pub struct Stop {
    /// Why.
    pub reason: String,
}

#[derive(Default)]
pub(crate) struct Record {
    pub(crate) failures: Vec<Failure>,
    pub(crate) scores: Vec<Score>,
    pub(crate) assertions: u32,
}

/// Where assertions of one case iteration record their results. Shared by
/// the case and every turn it returned.
#[derive(Clone, Default)]
pub struct Sink {
    pub(crate) record: Arc<Mutex<Record>>,
    pub(crate) judge: Option<Arc<Judge>>,
}

impl Sink {
    pub(crate) fn new(judge: Option<Arc<Judge>>) -> Sink {
        Sink {
            record: Arc::default(),
            judge,
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Record) -> R) -> R {
        // A poisoned lock only means another assertion panicked mid-record;
        // the record itself is still usable.
        let mut guard = match self.record.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    pub(crate) fn outcome(
        &self,
        scope: &str,
        assertion: String,
        result: Result<(), (String, Option<EventRef>)>,
    ) -> bool {
        self.with(|r| {
            r.assertions += 1;
            match result {
                Ok(()) => true,
                Err((message, event)) => {
                    r.failures.push(Failure {
                        assertion,
                        scope: scope.to_owned(),
                        message,
                        event,
                    });
                    false
                }
            }
        })
    }

    pub(crate) fn push_score(&self, score: Score) {
        self.with(|r| r.scores.push(score));
    }

    /// The failures recorded so far.
    pub fn failures(&self) -> Vec<Failure> {
        self.with(|r| r.failures.clone())
    }

    /// The scores recorded so far.
    pub fn scores(&self) -> Vec<Score> {
        self.with(|r| r.scores.clone())
    }

    /// How many assertions ran.
    pub fn assertion_count(&self) -> u32 {
        self.with(|r| r.assertions)
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
    fn as_str(self) -> &'static str {
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

/// Tool calls in request order.
pub fn tool_calls(events: &[Envelope]) -> Vec<ToolCallView> {
    let mut calls: Vec<ToolCallView> = Vec::new();
    for env in events {
        match &env.event {
            Event::ActionsRequested(batch) => {
                for a in &batch.actions {
                    calls.push(ToolCallView {
                        call_id: a.call_id.clone(),
                        name: a.name.clone(),
                        input: a.input.clone(),
                        output: Value::Null,
                        status: CallStatus::Pending,
                        requested: EventRef::of(env),
                        result: None,
                    });
                }
            }
            Event::ActionResult(r) => {
                if let Some(c) = calls.iter_mut().find(|c| c.call_id == r.call_id) {
                    c.output = r.output.clone();
                    c.status = if r.is_error {
                        CallStatus::Failed
                    } else {
                        CallStatus::Completed
                    };
                    c.result = Some(EventRef::of(env));
                }
            }
            _ => {}
        }
    }
    calls
}

/// Subagent calls in order: input is the prompt, output the reply.
pub fn subagent_calls(events: &[Envelope]) -> Vec<ToolCallView> {
    let mut calls: Vec<ToolCallView> = Vec::new();
    for env in events {
        match &env.event {
            Event::SubagentCalled(c) => calls.push(ToolCallView {
                call_id: c.call_id.clone(),
                name: c.name.clone(),
                input: Value::String(c.prompt.clone()),
                output: Value::Null,
                status: CallStatus::Pending,
                requested: EventRef::of(env),
                result: None,
            }),
            Event::SubagentCompleted(done) => {
                if let Some(c) = calls.iter_mut().find(|c| c.call_id == done.call_id) {
                    c.output = Value::String(done.reply.clone());
                    c.status = if done.is_error {
                        CallStatus::Failed
                    } else {
                        CallStatus::Completed
                    };
                    c.result = Some(EventRef::of(env));
                }
            }
            _ => {}
        }
    }
    calls
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

    fn check(&self, call: &ToolCallView) -> Result<(), String> {
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

    fn describe(&self) -> String {
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

    fn check(&self, env: &Envelope) -> Result<(), String> {
        if env.kind() != self.kind {
            return Err(format!("type is {}", env.kind()));
        }
        if let Some(m) = &self.data {
            let data = env.event.data_json().unwrap_or(Value::Null);
            m.check(Some(&data)).map_err(|e| format!("data {e}"))?;
        }
        Ok(())
    }

    fn describe(&self) -> String {
        match &self.data {
            Some(m) => format!("{} {}", self.kind, m.describe()),
            None => self.kind.clone(),
        }
    }
}

type Outcome = Result<(), (String, Option<EventRef>)>;

/// The assertions shared by a case and a turn.
pub trait Assertions {
    /// The events in scope (the whole session for a case, one turn's for a turn).
    fn scope_events(&self) -> &[Envelope];
    /// Where results go.
    fn sink(&self) -> &Sink;
    /// `case` or `turn N`.
    fn scope_label(&self) -> String;

    /// Records the outcome of a custom assertion.
    fn record(&self, assertion: String, outcome: Outcome) -> bool {
        self.sink().outcome(&self.scope_label(), assertion, outcome)
    }

    /// The last event in scope, the default culprit when something never happened.
    fn last_event(&self) -> Option<EventRef> {
        self.scope_events().last().map(EventRef::of)
    }

    /// Every turn in scope finished without failure (and at least one ran).
    fn succeeded(&self) -> bool {
        let events = self.scope_events();
        let mut ended = 0;
        let mut outcome: Outcome = Ok(());
        for env in events {
            match &env.event {
                Event::TurnCompleted(_) => ended += 1,
                Event::TurnFailed(f) => {
                    outcome = Err((
                        format!(
                            "turn failed ({}): {}",
                            serde_json::to_value(f.status)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_owned))
                                .unwrap_or_default(),
                            f.message
                        ),
                        Some(EventRef::of(env)),
                    ));
                    break;
                }
                _ => {}
            }
        }
        if outcome.is_ok() && ended == 0 {
            outcome = Err(("no turn completed".into(), self.last_event()));
        }
        self.record("succeeded()".into(), outcome)
    }

    /// A request for `name` matching `m` occurred (`count` times when set).
    fn called_tool(&self, name: &str, m: ToolMatch) -> bool {
        let label = format!("calledTool({name:?}{})", m.describe());
        let calls = tool_calls(self.scope_events());
        let outcome = match_calls(&calls, name, &m, "tool", self.last_event()).map(|_| ());
        self.record(label, outcome)
    }

    /// No request for `name` occurred.
    fn not_called_tool(&self, name: &str) -> bool {
        let calls = tool_calls(self.scope_events());
        let outcome = match calls.iter().find(|c| c.name == name) {
            Some(c) => Err((
                format!(
                    "{name} was requested with input {}",
                    crate::matcher::short(&c.input)
                ),
                Some(c.requested.clone()),
            )),
            None => Ok(()),
        };
        self.record(format!("notCalledTool({name:?})"), outcome)
    }

    /// The agent loaded the skill `name` with the built-in `load_skill` tool.
    fn loaded_skill(&self, name: &str) -> bool {
        let calls = tool_calls(self.scope_events());
        let loads: Vec<&ToolCallView> = calls
            .iter()
            .filter(|c| {
                c.name == "load_skill" && c.input.get("name").and_then(Value::as_str) == Some(name)
            })
            .collect();
        let outcome = if loads.iter().any(|c| c.status == CallStatus::Completed) {
            Ok(())
        } else if let Some(c) = loads.first() {
            Err((
                format!(
                    "load_skill({name}) did not succeed: {}",
                    crate::matcher::short(&c.output)
                ),
                c.result.clone().or_else(|| Some(c.requested.clone())),
            ))
        } else {
            let loaded: Vec<String> = calls
                .iter()
                .filter(|c| c.name == "load_skill")
                .filter_map(|c| {
                    c.input
                        .get("name")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect();
            Err((
                if loaded.is_empty() {
                    format!("skill {name} was never loaded (no load_skill call)")
                } else {
                    format!(
                        "skill {name} was never loaded (loaded: {})",
                        loaded.join(", ")
                    )
                },
                self.last_event(),
            ))
        };
        self.record(format!("loadedSkill({name:?})"), outcome)
    }

    /// The named tools were requested in this relative order (others may come between).
    fn tool_order(&self, names: &[&str]) -> bool {
        let calls = tool_calls(self.scope_events());
        let mut pos = 0usize;
        let mut outcome: Outcome = Ok(());
        let mut after: Option<&ToolCallView> = None;
        for want in names {
            match calls[pos..].iter().position(|c| c.name == *want) {
                Some(found) => {
                    after = calls.get(pos + found);
                    pos += found + 1;
                }
                None => {
                    let msg = match after {
                        Some(prev) => format!("{want} was not requested after {}", prev.name),
                        None => format!("{want} was never requested"),
                    };
                    let seen: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
                    outcome = Err((
                        format!("{msg} (requested order: [{}])", seen.join(", ")),
                        after
                            .map(|c| c.requested.clone())
                            .or_else(|| self.last_event()),
                    ));
                    break;
                }
            }
        }
        self.record(format!("toolOrder({names:?})"), outcome)
    }

    /// No tool was requested.
    fn used_no_tools(&self) -> bool {
        let calls = tool_calls(self.scope_events());
        let outcome = match calls.first() {
            Some(c) => Err((
                format!("{} tool call(s), first: {}", calls.len(), c.name),
                Some(c.requested.clone()),
            )),
            None => Ok(()),
        };
        self.record("usedNoTools()".into(), outcome)
    }

    /// At most `max` tool calls were requested.
    fn max_tool_calls(&self, max: usize) -> bool {
        let calls = tool_calls(self.scope_events());
        let outcome = match calls.get(max) {
            Some(c) => Err((
                format!(
                    "{} tool calls, more than {max}; call {} was {}",
                    calls.len(),
                    max + 1,
                    c.name
                ),
                Some(c.requested.clone()),
            )),
            None => Ok(()),
        };
        self.record(format!("maxToolCalls({max})"), outcome)
    }

    /// No tool result was an error. Each failed result is its own failure.
    fn no_failed_actions(&self) -> bool {
        let calls = tool_calls(self.scope_events());
        let mut ok = true;
        for c in calls.iter().filter(|c| c.status == CallStatus::Failed) {
            ok &= self.record(
                "noFailedActions()".into(),
                Err((
                    format!("{} failed: {}", c.name, crate::matcher::short(&c.output)),
                    c.result.clone(),
                )),
            );
        }
        if ok {
            self.record("noFailedActions()".into(), Ok(()));
        }
        ok
    }

    /// A subagent call to `name` matching `m` (input: the prompt, output: the reply).
    fn called_subagent(&self, name: &str, m: ToolMatch) -> bool {
        let label = format!("calledSubagent({name:?}{})", m.describe());
        let calls = subagent_calls(self.scope_events());
        let outcome = match_calls(&calls, name, &m, "subagent", self.last_event()).map(|_| ());
        self.record(label, outcome)
    }

    /// An artifact was tagged (of `kind` when given, whose `artifact.tagged`
    /// data matches `data` when given).
    fn tagged_artifact(&self, kind: Option<&str>, data: Option<Matcher>) -> bool {
        let mut em = EventMatch::kind("artifact.tagged");
        let mut fields: Vec<(String, Matcher)> = Vec::new();
        if let Some(k) = kind {
            fields.push(("kind".into(), Matcher::Eq(Value::String(k.into()))));
        }
        let label = format!(
            "taggedArtifact({}{})",
            kind.map(|k| format!("{k:?}")).unwrap_or_default(),
            data.as_ref()
                .map(|m| format!(", {}", m.describe()))
                .unwrap_or_default()
        );
        if !fields.is_empty() {
            em.data = Some(Matcher::Object(fields));
        }
        let outcome = find_event(self.scope_events(), &em, data.as_ref(), self.last_event());
        self.record(label, outcome)
    }

    /// An event of `kind` (whose data matches) occurred.
    fn event(&self, kind: &str, data: Option<Matcher>) -> bool {
        let em = EventMatch {
            kind: kind.into(),
            data,
        };
        let outcome = find_event(self.scope_events(), &em, None, self.last_event());
        self.record(format!("event({})", em.describe()), outcome)
    }

    /// No event of `kind` (whose data matches) occurred.
    fn not_event(&self, kind: &str, data: Option<Matcher>) -> bool {
        let em = EventMatch {
            kind: kind.into(),
            data,
        };
        let outcome = match self.scope_events().iter().find(|e| em.check(e).is_ok()) {
            Some(env) => Err((format!("{} occurred", env.kind()), Some(EventRef::of(env)))),
            None => Ok(()),
        };
        self.record(format!("notEvent({})", em.describe()), outcome)
    }

    /// Events matching each group appeared in this relative order.
    fn event_order(&self, groups: &[EventMatch]) -> bool {
        let events = self.scope_events();
        let mut pos = 0usize;
        let mut outcome: Outcome = Ok(());
        let mut prev: Option<&Envelope> = None;
        for g in groups {
            match events[pos..].iter().position(|e| g.check(e).is_ok()) {
                Some(found) => {
                    prev = events.get(pos + found);
                    pos += found + 1;
                }
                None => {
                    outcome = Err((
                        match prev {
                            Some(p) => {
                                format!("no {} after event #{} {}", g.describe(), p.index, p.kind())
                            }
                            None => format!("no {} at all", g.describe()),
                        },
                        prev.map(EventRef::of).or_else(|| self.last_event()),
                    ));
                    break;
                }
            }
        }
        let names: Vec<String> = groups.iter().map(EventMatch::describe).collect();
        self.record(format!("eventOrder([{}])", names.join(", ")), outcome)
    }

    /// `predicate` accepted the event stream. It returns `Err((message,
    /// culprit index))` to explain a rejection.
    fn events_satisfy(
        &self,
        label: &str,
        predicate: impl Fn(&[Envelope]) -> Result<(), (String, Option<u64>)>,
    ) -> bool {
        let events = self.scope_events();
        let outcome = predicate(events).map_err(|(msg, at)| {
            let event = at
                .and_then(|i| events.iter().find(|e| e.index == i))
                .map(EventRef::of)
                .or_else(|| self.last_event());
            (msg, event)
        });
        self.record(format!("eventsSatisfy({label:?})"), outcome)
    }

    /// `value` met the expectation.
    fn check(&self, label: &str, value: &Value, expect: &Matcher) -> bool {
        let outcome = expect
            .check(Some(value))
            .map_err(|e| (format!("{label}: {e}"), self.last_event()));
        self.record(format!("check({label:?}, {})", expect.describe()), outcome)
    }

    /// Records a score from 0 to 1; a value outside that range (or NaN) is a failure.
    fn score(&self, name: &str, value: f64) -> bool {
        let outcome = if (0.0..=1.0).contains(&value) {
            self.sink().push_score(Score {
                name: name.to_owned(),
                value,
            });
            Ok(())
        } else {
            Err((format!("score {value} is outside 0..=1"), self.last_event()))
        };
        self.record(format!("score({name:?})"), outcome)
    }

    /// Like [`Assertions::called_tool`], but returns the first matching call
    /// and stops the case when there is none.
    fn require_tool_call(&self, name: &str, m: ToolMatch) -> Result<ToolCallView, Stop> {
        let label = format!("requireToolCall({name:?}{})", m.describe());
        let calls = tool_calls(self.scope_events());
        match match_calls(&calls, name, &m, "tool", self.last_event()) {
            Ok(found) => {
                self.record(label, Ok(()));
                Ok(found)
            }
            Err(e) => {
                let reason = format!("{label}: {}", e.0);
                self.record(label, Err(e));
                Err(Stop { reason })
            }
        }
    }

    /// Returns the first approval request (a call waiting for a person's
    /// input) for `tool`, or stops the case when there is none.
    fn require_input_request(&self, tool: &str) -> Result<Value, Stop> {
        let label = format!("requireInputRequest({tool:?})");
        let em = EventMatch::kind("action.approval_requested").data(Matcher::object([(
            "name",
            Matcher::Eq(Value::String(tool.into())),
        )]));
        match self.scope_events().iter().find(|e| em.check(e).is_ok()) {
            Some(env) => {
                self.record(label, Ok(()));
                Ok(env.event.data_json().unwrap_or(Value::Null))
            }
            None => {
                let reason = format!("{label}: no approval was requested for {tool}");
                self.record(
                    label,
                    Err((
                        format!("no approval was requested for {tool}"),
                        self.last_event(),
                    )),
                );
                Err(Stop { reason })
            }
        }
    }

    /// Returns the value, or records a failure and stops the case when it is `None`.
    fn require<T>(&self, label: &str, value: Option<T>) -> Result<T, Stop> {
        match value {
            Some(v) => {
                self.record(format!("require({label:?})"), Ok(()));
                Ok(v)
            }
            None => {
                self.record(
                    format!("require({label:?})"),
                    Err(("no value".into(), self.last_event())),
                );
                Err(Stop {
                    reason: format!("require({label:?}) found no value"),
                })
            }
        }
    }
}

fn match_calls(
    calls: &[ToolCallView],
    name: &str,
    m: &ToolMatch,
    what: &str,
    last: Option<EventRef>,
) -> Result<ToolCallView, (String, Option<EventRef>)> {
    let named: Vec<&ToolCallView> = calls.iter().filter(|c| c.name == name).collect();
    let mut matching = Vec::new();
    let mut near_miss: Option<(&ToolCallView, String)> = None;
    for c in &named {
        match m.check(c) {
            Ok(()) => matching.push(*c),
            Err(why) => {
                if near_miss.is_none() {
                    near_miss = Some((c, why));
                }
            }
        }
    }
    if let Some(n) = m.count {
        if matching.len() == n {
            return match matching.first() {
                Some(c) => Ok((*c).clone()),
                // count = 0 holds when nothing matched; there is no call to return.
                None => Ok(ToolCallView {
                    call_id: String::new(),
                    name: name.to_owned(),
                    input: Value::Null,
                    output: Value::Null,
                    status: CallStatus::Pending,
                    requested: last.clone().unwrap_or(EventRef {
                        index: 0,
                        kind: String::new(),
                    }),
                    result: None,
                }),
            };
        }
        let culprit = matching.get(n).map(|c| c.requested.clone()).or(last);
        return Err((
            format!(
                "expected {n} matching {what} call(s) to {name}, found {} ({} call(s) by name)",
                matching.len(),
                named.len()
            ),
            culprit,
        ));
    }
    if let Some(c) = matching.first() {
        return Ok((*c).clone());
    }
    match near_miss {
        Some((c, why)) => Err((
            format!("{name} was called but did not match: {why}"),
            Some(
                c.result
                    .clone()
                    .filter(|_| why.starts_with("output") || why.starts_with("status"))
                    .unwrap_or_else(|| c.requested.clone()),
            ),
        )),
        None => {
            let others: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
            Err((
                if others.is_empty() {
                    format!("{name} was never called (no {what} calls)")
                } else {
                    format!("{name} was never called (called: {})", others.join(", "))
                },
                last,
            ))
        }
    }
}

fn find_event(
    events: &[Envelope],
    em: &EventMatch,
    extra: Option<&Matcher>,
    last: Option<EventRef>,
) -> Outcome {
    let mut near: Option<(&Envelope, String)> = None;
    for env in events {
        let r = em.check(env).and_then(|()| match extra {
            Some(m) => {
                let data = env.event.data_json().unwrap_or(Value::Null);
                m.check(Some(&data)).map_err(|e| format!("data {e}"))
            }
            None => Ok(()),
        });
        match r {
            Ok(()) => return Ok(()),
            Err(why) if env.kind() == em.kind && near.is_none() => near = Some((env, why)),
            Err(_) => {}
        }
    }
    match near {
        Some((env, why)) => Err((
            format!("{} occurred but did not match: {why}", em.kind),
            Some(EventRef::of(env)),
        )),
        None => Err((format!("no {} event", em.kind), last)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::{SessionId, TurnId};
    use serde_json::json;

    struct Scope {
        events: Vec<Envelope>,
        sink: Sink,
    }

    impl Assertions for Scope {
        fn scope_events(&self) -> &[Envelope] {
            &self.events
        }
        fn sink(&self) -> &Sink {
            &self.sink
        }
        fn scope_label(&self) -> String {
            "case".into()
        }
    }

    fn scope(events: &[(&str, Value)]) -> Scope {
        let at = chrono::Utc::now();
        Scope {
            events: events
                .iter()
                .enumerate()
                .map(|(i, (kind, data))| Envelope {
                    index: i as u64,
                    session_id: SessionId::from_string("ses_t"),
                    turn_id: Some(TurnId::from_string("turn_t")),
                    at,
                    event: Event::from_parts(kind, data.clone()).unwrap(),
                })
                .collect(),
            sink: Sink::default(),
        }
    }

    fn trajectory() -> Scope {
        scope(&[
            (
                "message.received",
                json!({"message": "hi", "deliveryIds": []}),
            ),
            ("turn.started", json!({})),
            (
                "actions.requested",
                json!({"step": 1, "actions": [
                    {"callId": "c1", "name": "load_skill", "input": {"name": "style"}},
                    {"callId": "c2", "name": "lookup", "input": {"city": "Oslo", "unit": "c"}},
                ]}),
            ),
            (
                "action.result",
                json!({"callId": "c1", "name": "load_skill", "isError": false, "output": "# Style", "durationMs": 1}),
            ),
            (
                "action.result",
                json!({"callId": "c2", "name": "lookup", "isError": true, "output": "down", "durationMs": 1}),
            ),
            (
                "actions.requested",
                json!({"step": 2, "actions": [{"callId": "c3", "name": "task", "input": {"subagent": "climate", "prompt": "p"}}]}),
            ),
            (
                "subagent.called",
                json!({"callId": "c3", "name": "climate", "prompt": "Climate research: Oslo"}),
            ),
            (
                "subagent.completed",
                json!({"callId": "c3", "name": "climate", "reply": "mild", "isError": false}),
            ),
            (
                "action.result",
                json!({"callId": "c3", "name": "task", "isError": false, "output": "mild", "durationMs": 1}),
            ),
            (
                "artifact.tagged",
                json!({"artifactId": "art_1", "kind": "report", "path": "r.md"}),
            ),
            (
                "action.approval_requested",
                json!({"callId": "c4", "name": "deploy", "input": {"target": "prod"}}),
            ),
            (
                "turn.completed",
                json!({"reply": "done", "usage": {}, "model": "scripted/default", "durationMs": 3}),
            ),
        ])
    }

    #[test]
    fn holding_assertions_record_no_failure() {
        let t = trajectory();
        assert!(t.succeeded());
        assert!(
            t.called_tool(
                "lookup",
                ToolMatch::any()
                    .input(json!({"city": "Oslo"}))
                    .status(CallStatus::Failed)
                    .count(1)
            )
        );
        assert!(t.not_called_tool("deploy"));
        assert!(t.loaded_skill("style"));
        assert!(t.tool_order(&["load_skill", "task"]));
        assert!(t.max_tool_calls(3));
        assert!(
            t.called_subagent(
                "climate",
                ToolMatch::any()
                    .input(Matcher::contains("Oslo"))
                    .output(json!("mild"))
            )
        );
        assert!(t.tagged_artifact(
            Some("report"),
            Some(Matcher::literal(json!({"path": "r.md"})))
        ));
        assert!(t.event(
            "subagent.completed",
            Some(Matcher::literal(json!({"isError": false})))
        ));
        assert!(t.not_event("turn.failed", None));
        assert!(t.event_order(&[
            EventMatch::kind("actions.requested"),
            EventMatch::kind("artifact.tagged"),
            EventMatch::kind("turn.completed")
        ]));
        assert!(t.events_satisfy("ends with a reply", |e| {
            match e.last().map(|x| x.kind()) {
                Some("turn.completed") => Ok(()),
                _ => Err(("no reply".into(), None)),
            }
        }));
        assert!(t.check(
            "n",
            &json!(3),
            &Matcher::predicate("odd", |v| v.as_u64().is_some_and(|n| n % 2 == 1))
        ));
        assert!(t.score("quality", 0.5));
        assert_eq!(
            t.require_input_request("deploy").unwrap()["input"]["target"],
            "prod"
        );
        assert_eq!(t.require("x", Some(1)).unwrap(), 1);
        assert!(t.sink.failures().is_empty(), "{:?}", t.sink.failures());
        assert_eq!(
            t.sink.scores(),
            vec![Score {
                name: "quality".into(),
                value: 0.5
            }]
        );
    }

    #[test]
    fn each_broken_assertion_names_its_event() {
        let t = trajectory();
        let culprit = |ok: bool| {
            assert!(!ok);
            let f = t.sink.failures().pop().unwrap();
            (
                f.event.as_ref().map(|e| (e.index, e.kind.clone())),
                f.message,
            )
        };
        assert_eq!(
            culprit(t.used_no_tools()).0,
            Some((2, "actions.requested".into()))
        );
        assert_eq!(
            culprit(t.not_called_tool("task")).0,
            Some((5, "actions.requested".into()))
        );
        assert_eq!(
            culprit(t.max_tool_calls(2)).0,
            Some((5, "actions.requested".into()))
        );
        assert_eq!(
            culprit(t.no_failed_actions()).0,
            Some((4, "action.result".into()))
        );
        let (at, msg) =
            culprit(t.called_tool("lookup", ToolMatch::any().status(CallStatus::Completed)));
        assert_eq!(at, Some((4, "action.result".into())));
        assert!(msg.contains("status is failed"), "{msg}");
        let (at, msg) =
            culprit(t.called_tool("lookup", ToolMatch::any().input(json!({"city": "Rome"}))));
        assert_eq!(at, Some((2, "actions.requested".into())));
        assert!(msg.contains("city"), "{msg}");
        assert_eq!(
            culprit(t.called_tool("lookup", ToolMatch::any().count(2))).0,
            Some((11, "turn.completed".into()))
        );
        assert_eq!(
            culprit(t.loaded_skill("other")).0,
            Some((11, "turn.completed".into()))
        );
        assert_eq!(
            culprit(t.tool_order(&["task", "load_skill"])).0,
            Some((5, "actions.requested".into()))
        );
        assert_eq!(
            culprit(t.called_subagent("coder", ToolMatch::any())).0,
            Some((11, "turn.completed".into()))
        );
        assert_eq!(
            culprit(t.tagged_artifact(Some("memo"), None)).0,
            Some((9, "artifact.tagged".into()))
        );
        assert_eq!(
            culprit(t.not_event("artifact.tagged", None)).0,
            Some((9, "artifact.tagged".into()))
        );
        assert_eq!(
            culprit(t.event("turn.failed", None)).0,
            Some((11, "turn.completed".into()))
        );
        assert_eq!(
            culprit(t.event_order(&[
                EventMatch::kind("turn.completed"),
                EventMatch::kind("turn.started")
            ]))
            .0,
            Some((11, "turn.completed".into()))
        );
        assert_eq!(
            culprit(t.events_satisfy("x", |_| Err(("no".into(), Some(3))))).0,
            Some((3, "action.result".into()))
        );
        assert!(
            culprit(t.check("reply", &json!("done"), &Matcher::contains("nope")))
                .1
                .contains("nope")
        );
        assert!(culprit(t.score("bad", 1.5)).1.contains("outside"));
        assert!(t.require_tool_call("deploy", ToolMatch::any()).is_err());
        assert!(t.require_input_request("lookup").is_err());
        assert!(t.require::<u8>("nothing", None).is_err());
        // 17 broken assertions above, then the three stopped require forms.
        assert_eq!(t.sink.failures().len(), 20);

        let failed = scope(&[(
            "turn.failed",
            json!({"message": "boom", "status": "failed"}),
        )]);
        assert!(!failed.succeeded());
        let f = failed.sink.failures().pop().unwrap();
        assert_eq!(f.event.unwrap().kind, "turn.failed");
        assert!(f.message.contains("boom"));
    }
}
