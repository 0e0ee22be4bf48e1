//! One definition per assertion.
//!
//! An eval file's `assert = "..."` table deserializes into [`Assertion`], and
//! the methods of [`Assertions`](super::Assertions) construct one, so both
//! forms are checked by the same [`Assertion::check`] and fail with the same
//! labels and messages.
//!
//! The enum is generic over how it holds matchers. A file gives plain values
//! (`Assertion<Value, EventDef>`), which [`Assertion::compile`] validates and
//! compiles into the checked form (the default parameters: [`Matcher`] and
//! [`EventMatch`]). Compiling after deserializing, not inside it, keeps a bad
//! regex or an unknown event type an error of its one assertion, reported
//! with its case and `expect[i]`, while a wrong key or assertion kind fails
//! the file with the TOML error serde gives.

use bdk_events::{EVENT_TYPES, Envelope, Event};
use serde::Deserialize;
use serde_json::{Value, json};

use super::trajectory::{
    CallStatus, EventMatch, EventRef, GateMatch, Outcome, ToolCallView, ToolMatch, subagent_calls,
    tool_calls,
};
use crate::matcher::{Matcher, short};

/// One assertion, as a file writes it (`assert = "<kind>"` plus the fields
/// of its variant) and as the Rust method of the same name builds it. `M`
/// holds a matcher and `E` one event of `event_order`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "assert", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Assertion<M = Matcher, E = EventMatch> {
    /// Every turn in scope completed, and at least one ran.
    Succeeded {},
    /// A call to `name` matched (exactly `count` of them when set).
    CalledTool {
        name: String,
        input: Option<M>,
        output: Option<M>,
        status: Option<CallStatus>,
        count: Option<usize>,
    },
    /// Like `CalledTool`, and stops the case when nothing matched. Only Rust
    /// can ask for a count.
    RequireToolCall {
        name: String,
        input: Option<M>,
        output: Option<M>,
        status: Option<CallStatus>,
        #[serde(skip)]
        count: Option<usize>,
    },
    /// `name` was never requested.
    NotCalledTool { name: String },
    /// The skill was loaded through `load_skill`, successfully.
    LoadedSkill { name: String },
    /// The tools were requested in this relative order.
    ToolOrder { names: Vec<String> },
    /// No tool was requested.
    UsedNoTools {},
    /// At most `max` tool calls.
    MaxToolCalls { max: usize },
    /// No tool result was an error; each failed result is its own failure.
    NoFailedActions {},
    /// A delegation to the subagent matched: its prompt is the input, its
    /// reply the output.
    CalledSubagent {
        name: String,
        prompt: Option<M>,
        reply: Option<M>,
        status: Option<CallStatus>,
        count: Option<usize>,
    },
    /// An `artifact.tagged` event matched.
    TaggedArtifact {
        kind: Option<String>,
        data: Option<M>,
    },
    /// A matching event occurred.
    Event(E),
    /// No matching event occurred.
    NotEvent(E),
    /// Matching events appeared in this relative order.
    EventOrder { events: Vec<E> },
    /// Every event of `kind` matches `data`, and there is at least one.
    EventsSatisfy {
        label: String,
        #[serde(rename = "type")]
        kind: String,
        data: M,
    },
    /// A call to `tool` waits for approval; stops the case otherwise.
    RequireInputRequest { tool: String },
    /// A result gate's `gate.verdict` matched (of `gate`, with `verdict`,
    /// on `attempt`, whose feedback or message matches `text`; each only
    /// when set).
    GateVerdict {
        gate: Option<String>,
        verdict: Option<bdk_events::Verdict>,
        attempt: Option<u32>,
        text: Option<M>,
    },
    /// Result gates judged exactly `count` final replies: the highest
    /// attempt in scope (0 when no gate ran).
    GateAttempts { count: u32 },
    /// A value read off the scope meets `expect`.
    Check { value: CheckValue, expect: M },
    /// Records a score; a value outside 0..=1 fails.
    Score { name: String, value: f64 },
    /// The judge model scores the reply at `threshold` or above.
    Judge {
        rubric: String,
        #[serde(default = "default_threshold")]
        threshold: f64,
    },
}

fn default_threshold() -> f64 {
    0.7
}

/// The file form of an [`EventMatch`]: `{ type = "...", data = ... }`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventDef {
    #[serde(rename = "type")]
    kind: String,
    data: Option<Value>,
}

/// The values a file's `check` can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CheckValue {
    Reply,
    ToolNames,
    ToolCallCount,
    EventCount,
    TurnCount,
}

impl Assertion<Value, EventDef> {
    /// Validates a file's assertion and compiles its matchers; `Err` is the
    /// diagnostic's message, naming the field at fault.
    pub(crate) fn compile(self) -> Result<Assertion, String> {
        use Assertion as A;
        Ok(match self {
            A::Succeeded {} => A::Succeeded {},
            A::CalledTool {
                name,
                input,
                output,
                status,
                count,
            } => A::CalledTool {
                name,
                input: matcher(input, "input")?,
                output: matcher(output, "output")?,
                status,
                count,
            },
            A::RequireToolCall {
                name,
                input,
                output,
                status,
                count,
            } => A::RequireToolCall {
                name,
                input: matcher(input, "input")?,
                output: matcher(output, "output")?,
                status,
                count,
            },
            A::NotCalledTool { name } => A::NotCalledTool { name },
            A::LoadedSkill { name } => A::LoadedSkill { name },
            A::ToolOrder { names } if names.is_empty() => {
                return Err("tool_order needs at least one name".into());
            }
            A::ToolOrder { names } => A::ToolOrder { names },
            A::UsedNoTools {} => A::UsedNoTools {},
            A::MaxToolCalls { max } => A::MaxToolCalls { max },
            A::NoFailedActions {} => A::NoFailedActions {},
            A::CalledSubagent {
                name,
                prompt,
                reply,
                status,
                count,
            } => A::CalledSubagent {
                name,
                prompt: matcher(prompt, "prompt")?,
                reply: matcher(reply, "reply")?,
                status,
                count,
            },
            A::TaggedArtifact { kind, data } => A::TaggedArtifact {
                kind,
                data: matcher(data, "data")?,
            },
            A::Event(e) => A::Event(e.compile(None)?),
            A::NotEvent(e) => A::NotEvent(e.compile(None)?),
            A::EventOrder { events } if events.is_empty() => {
                return Err("event_order needs at least one event".into());
            }
            A::EventOrder { events } => A::EventOrder {
                events: events
                    .into_iter()
                    .enumerate()
                    .map(|(i, e)| e.compile(Some(&format!("events[{i}]"))))
                    .collect::<Result<_, _>>()?,
            },
            A::EventsSatisfy { label, kind, data } => {
                event_type(&kind)?;
                A::EventsSatisfy {
                    label,
                    kind,
                    data: compile_matcher(&data, "data")?,
                }
            }
            A::RequireInputRequest { tool } => A::RequireInputRequest { tool },
            A::GateVerdict {
                gate,
                verdict,
                attempt,
                text,
            } => A::GateVerdict {
                gate,
                verdict,
                attempt,
                text: matcher(text, "text")?,
            },
            A::GateAttempts { count } => A::GateAttempts { count },
            A::Check { value, expect } => A::Check {
                value,
                expect: compile_matcher(&expect, "expect")?,
            },
            A::Score { value, .. } if !(0.0..=1.0).contains(&value) => {
                return Err(format!("score {value} is outside 0..=1"));
            }
            A::Score { name, value } => A::Score { name, value },
            A::Judge { threshold, .. } if !(0.0..=1.0).contains(&threshold) => {
                return Err(format!("judge threshold {threshold} is outside 0..=1"));
            }
            A::Judge { rubric, .. } if rubric.trim().is_empty() => {
                return Err("judge needs a rubric".into());
            }
            A::Judge { rubric, threshold } => A::Judge { rubric, threshold },
        })
    }
}

impl EventDef {
    /// `at` is where the event sits in its assertion (`events[1]`), `None`
    /// for the assertion's own `type` and `data`.
    fn compile(self, at: Option<&str>) -> Result<EventMatch, String> {
        event_type(&self.kind).map_err(|m| match at {
            Some(at) => format!("{at}: {m}"),
            None => m,
        })?;
        let field = at.map_or_else(|| "data".to_owned(), |at| format!("{at}.data"));
        Ok(EventMatch {
            data: matcher(self.data, &field)?,
            kind: self.kind,
        })
    }
}

fn compile_matcher(v: &Value, what: &str) -> Result<Matcher, String> {
    Matcher::compile(v).map_err(|e| format!("{what}: {e}"))
}

fn matcher(v: Option<Value>, what: &str) -> Result<Option<Matcher>, String> {
    v.map(|v| compile_matcher(&v, what)).transpose()
}

/// Catches typos in a file's event types, against the vocabulary bdk-events
/// defines.
fn event_type(kind: &str) -> Result<(), String> {
    if EVENT_TYPES.contains(&kind) {
        Ok(())
    } else {
        Err(format!(
            "unknown event type `{kind}`; known types: {}",
            EVENT_TYPES.join(", ")
        ))
    }
}

/// What one check sees.
pub(crate) struct Scope<'a> {
    /// The events in scope: one turn's, or the whole case's.
    pub(crate) events: &'a [Envelope],
    /// The default culprit when something expected never happened.
    pub(crate) last: Option<EventRef>,
    /// The reply a file's `check` of `reply` reads: the turn's, or the
    /// case's last. Empty from the Rust methods, which never build a
    /// [`CheckValue`]: Rust's `check` is given its value.
    pub(crate) reply: &'a str,
    /// The turn count a file's `check` of `turn_count` reads (1 for a turn).
    pub(crate) turns: usize,
}

/// The result of one check, for the scope to record.
pub(crate) struct Verdict {
    /// The assertion as Rust writes it (`calledTool("x")`), which names its
    /// failures.
    pub(crate) label: String,
    /// What to record: one outcome, or for `no_failed_actions` one failure
    /// per failed call.
    pub(crate) outcomes: Vec<Outcome>,
    /// What the check hands back besides its outcome.
    pub(crate) found: Found,
}

/// What a check hands back besides its outcome.
pub(crate) enum Found {
    /// Nothing.
    Nothing,
    /// The first matching call (`require_tool_call`).
    Call(ToolCallView),
    /// The data of the approval request (`require_input_request`).
    Request(Value),
    /// A score in range, to keep (`score`).
    Score(String, f64),
}

impl Verdict {
    fn one(label: String, outcome: Outcome) -> Verdict {
        Verdict {
            label,
            outcomes: vec![outcome],
            found: Found::Nothing,
        }
    }
}

impl Assertion {
    /// True for the forms whose failure stops the case (`require*`).
    pub(crate) fn stops(&self) -> bool {
        matches!(
            self,
            Assertion::RequireToolCall { .. } | Assertion::RequireInputRequest { .. }
        )
    }

    /// Checks the assertion against one scope. A `Judge` needs the judge
    /// model, so `Case::judge` and `Turn::judge` grade it; here it records
    /// nothing.
    pub(crate) fn check(&self, s: &Scope<'_>) -> Verdict {
        match self {
            Assertion::Succeeded {} => Verdict::one("succeeded()".into(), succeeded(s)),
            Assertion::CalledTool {
                name,
                input,
                output,
                status,
                count,
            } => {
                let m = tool_match(input, output, *status, *count);
                let calls = tool_calls(s.events);
                Verdict::one(
                    format!("calledTool({name:?}{})", m.describe()),
                    match_calls(&calls, name, &m, "tool", s.last.clone()).map(drop),
                )
            }
            Assertion::RequireToolCall {
                name,
                input,
                output,
                status,
                count,
            } => {
                let m = tool_match(input, output, *status, *count);
                let label = format!("requireToolCall({name:?}{})", m.describe());
                match match_calls(&tool_calls(s.events), name, &m, "tool", s.last.clone()) {
                    Ok(call) => Verdict {
                        label,
                        outcomes: vec![Ok(())],
                        found: Found::Call(call),
                    },
                    Err(e) => Verdict::one(label, Err(e)),
                }
            }
            Assertion::NotCalledTool { name } => {
                Verdict::one(format!("notCalledTool({name:?})"), not_called_tool(s, name))
            }
            Assertion::LoadedSkill { name } => {
                Verdict::one(format!("loadedSkill({name:?})"), loaded_skill(s, name))
            }
            Assertion::ToolOrder { names } => {
                Verdict::one(format!("toolOrder({names:?})"), tool_order(s, names))
            }
            Assertion::UsedNoTools {} => Verdict::one("usedNoTools()".into(), used_no_tools(s)),
            Assertion::MaxToolCalls { max } => {
                Verdict::one(format!("maxToolCalls({max})"), max_tool_calls(s, *max))
            }
            Assertion::NoFailedActions {} => Verdict {
                label: "noFailedActions()".into(),
                outcomes: no_failed_actions(s),
                found: Found::Nothing,
            },
            Assertion::CalledSubagent {
                name,
                prompt,
                reply,
                status,
                count,
            } => {
                let m = tool_match(prompt, reply, *status, *count);
                let calls = subagent_calls(s.events);
                Verdict::one(
                    format!("calledSubagent({name:?}{})", m.describe()),
                    match_calls(&calls, name, &m, "subagent", s.last.clone()).map(drop),
                )
            }
            Assertion::TaggedArtifact { kind, data } => tagged_artifact(s, kind.as_deref(), data),
            Assertion::Event(em) => Verdict::one(
                format!("event({})", em.describe()),
                find_event(s.events, em, None, s.last.clone()),
            ),
            Assertion::NotEvent(em) => {
                Verdict::one(format!("notEvent({})", em.describe()), not_event(s, em))
            }
            Assertion::EventOrder { events } => {
                let names: Vec<String> = events.iter().map(EventMatch::describe).collect();
                Verdict::one(
                    format!("eventOrder([{}])", names.join(", ")),
                    event_order(s, events),
                )
            }
            Assertion::EventsSatisfy { label, kind, data } => {
                events_satisfy(s, label, |events| every_event_matches(events, kind, data))
            }
            Assertion::RequireInputRequest { tool } => require_input_request(s, tool),
            Assertion::GateVerdict {
                gate,
                verdict,
                attempt,
                text,
            } => {
                let m = GateMatch {
                    gate: gate.clone(),
                    verdict: *verdict,
                    attempt: *attempt,
                    text: text.clone(),
                };
                Verdict::one(
                    format!("gateVerdict({})", m.describe()),
                    gate_verdict(s, &m),
                )
            }
            Assertion::GateAttempts { count } => {
                Verdict::one(format!("gateAttempts({count})"), gate_attempts(s, *count))
            }
            Assertion::Check { value, expect } => {
                let (label, v) = value.read(s);
                check_value(s, label, &v, expect)
            }
            Assertion::Score { name, value } => {
                let label = format!("score({name:?})");
                if (0.0..=1.0).contains(value) {
                    Verdict {
                        label,
                        outcomes: vec![Ok(())],
                        found: Found::Score(name.clone(), *value),
                    }
                } else {
                    Verdict::one(
                        label,
                        Err((format!("score {value} is outside 0..=1"), s.last.clone())),
                    )
                }
            }
            Assertion::Judge { rubric, .. } => Verdict {
                label: format!("judge({rubric:?})"),
                outcomes: Vec::new(),
                found: Found::Nothing,
            },
        }
    }
}

impl CheckValue {
    /// The label and value a file's `check` looks at.
    fn read(self, s: &Scope<'_>) -> (&'static str, Value) {
        match self {
            CheckValue::Reply => ("reply", Value::String(s.reply.to_owned())),
            CheckValue::ToolNames => (
                "tool_names",
                json!(
                    tool_calls(s.events)
                        .into_iter()
                        .map(|c| c.name)
                        .collect::<Vec<_>>()
                ),
            ),
            CheckValue::ToolCallCount => ("tool_call_count", json!(tool_calls(s.events).len())),
            CheckValue::EventCount => ("event_count", json!(s.events.len())),
            CheckValue::TurnCount => ("turn_count", json!(s.turns)),
        }
    }
}

/// `eventsSatisfy(label)`: `predicate` accepted the events. It explains a
/// rejection with a message and the index of the culprit event.
pub(crate) fn events_satisfy(
    s: &Scope<'_>,
    label: &str,
    predicate: impl Fn(&[Envelope]) -> Result<(), (String, Option<u64>)>,
) -> Verdict {
    let outcome = predicate(s.events).map_err(|(msg, at)| {
        let event = at
            .and_then(|i| s.events.iter().find(|e| e.index == i))
            .map(EventRef::of)
            .or_else(|| s.last.clone());
        (msg, event)
    });
    Verdict::one(format!("eventsSatisfy({label:?})"), outcome)
}

/// `check(label, expect)`: `value` met `expect`.
pub(crate) fn check_value(s: &Scope<'_>, label: &str, value: &Value, expect: &Matcher) -> Verdict {
    let outcome = expect
        .check(Some(value))
        .map_err(|e| (format!("{label}: {e}"), s.last.clone()));
    Verdict::one(format!("check({label:?}, {})", expect.describe()), outcome)
}

fn tool_match(
    input: &Option<Matcher>,
    output: &Option<Matcher>,
    status: Option<CallStatus>,
    count: Option<usize>,
) -> ToolMatch {
    ToolMatch {
        input: input.clone(),
        output: output.clone(),
        status,
        count,
    }
}

fn succeeded(s: &Scope<'_>) -> Outcome {
    let mut ended = 0;
    for env in s.events {
        match &env.event {
            Event::TurnCompleted(_) => ended += 1,
            Event::TurnFailed(f) => {
                return Err((
                    format!("turn failed ({}): {}", f.status.as_str(), f.message),
                    Some(EventRef::of(env)),
                ));
            }
            _ => {}
        }
    }
    if ended == 0 {
        return Err(("no turn completed".into(), s.last.clone()));
    }
    Ok(())
}

fn gate_verdict(s: &Scope<'_>, m: &GateMatch) -> Outcome {
    let verdicts = bdk_events::view::verdicts(s.events);
    let mut nearest: Option<(String, EventRef)> = None;
    for (env, v) in &verdicts {
        match m.check(v) {
            Ok(()) => return Ok(()),
            Err(why) if nearest.is_none() => {
                nearest = Some((
                    format!("gate {} attempt {}: {why}", v.gate, v.attempt),
                    EventRef::of(env),
                ));
            }
            Err(_) => {}
        }
    }
    Err(match nearest {
        Some((why, at)) => (
            format!(
                "no gate.verdict matched of {}; first: {why}",
                verdicts.len()
            ),
            Some(at),
        ),
        None => (
            "no result gate judged a reply (no gate.verdict)".into(),
            s.last.clone(),
        ),
    })
}

fn gate_attempts(s: &Scope<'_>, count: u32) -> Outcome {
    let verdicts = bdk_events::view::verdicts(s.events);
    let highest = verdicts.iter().max_by_key(|(_, v)| v.attempt);
    let seen = highest.map_or(0, |(_, v)| v.attempt);
    if seen == count {
        return Ok(());
    }
    Err((
        format!(
            "gates judged {seen} final repl{}, expected {count}",
            if seen == 1 { "y" } else { "ies" }
        ),
        highest
            .map(|(env, _)| EventRef::of(env))
            .or_else(|| s.last.clone()),
    ))
}

fn not_called_tool(s: &Scope<'_>, name: &str) -> Outcome {
    match tool_calls(s.events).iter().find(|c| c.name == name) {
        Some(c) => Err((
            format!("{name} was requested with input {}", short(&c.input)),
            Some(c.requested.clone()),
        )),
        None => Ok(()),
    }
}

fn loaded_skill(s: &Scope<'_>, name: &str) -> Outcome {
    let calls = tool_calls(s.events);
    let loads: Vec<&ToolCallView> = calls
        .iter()
        .filter(|c| {
            c.name == "load_skill" && c.input.get("name").and_then(Value::as_str) == Some(name)
        })
        .collect();
    if loads.iter().any(|c| c.status == CallStatus::Completed) {
        return Ok(());
    }
    if let Some(c) = loads.first() {
        return Err((
            format!("load_skill({name}) did not succeed: {}", short(&c.output)),
            c.result.clone().or_else(|| Some(c.requested.clone())),
        ));
    }
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
        s.last.clone(),
    ))
}

fn tool_order(s: &Scope<'_>, names: &[String]) -> Outcome {
    let calls = tool_calls(s.events);
    let mut pos = 0usize;
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
                return Err((
                    format!("{msg} (requested order: [{}])", seen.join(", ")),
                    after
                        .map(|c| c.requested.clone())
                        .or_else(|| s.last.clone()),
                ));
            }
        }
    }
    Ok(())
}

fn used_no_tools(s: &Scope<'_>) -> Outcome {
    let calls = tool_calls(s.events);
    match calls.first() {
        Some(c) => Err((
            format!("{} tool call(s), first: {}", calls.len(), c.name),
            Some(c.requested.clone()),
        )),
        None => Ok(()),
    }
}

fn max_tool_calls(s: &Scope<'_>, max: usize) -> Outcome {
    let calls = tool_calls(s.events);
    match calls.get(max) {
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
    }
}

fn no_failed_actions(s: &Scope<'_>) -> Vec<Outcome> {
    let failed: Vec<Outcome> = tool_calls(s.events)
        .iter()
        .filter(|c| c.status == CallStatus::Failed)
        .map(|c| {
            Err((
                format!("{} failed: {}", c.name, short(&c.output)),
                c.result.clone(),
            ))
        })
        .collect();
    if failed.is_empty() {
        vec![Ok(())]
    } else {
        failed
    }
}

fn tagged_artifact(s: &Scope<'_>, kind: Option<&str>, data: &Option<Matcher>) -> Verdict {
    let mut em = EventMatch::kind("artifact.tagged");
    if let Some(k) = kind {
        em.data = Some(Matcher::Object(vec![(
            "kind".into(),
            Matcher::Eq(Value::String(k.into())),
        )]));
    }
    let label = format!(
        "taggedArtifact({}{})",
        kind.map(|k| format!("{k:?}")).unwrap_or_default(),
        data.as_ref()
            .map(|m| format!(", {}", m.describe()))
            .unwrap_or_default()
    );
    Verdict::one(
        label,
        find_event(s.events, &em, data.as_ref(), s.last.clone()),
    )
}

fn not_event(s: &Scope<'_>, em: &EventMatch) -> Outcome {
    match s.events.iter().find(|e| em.check(e).is_ok()) {
        Some(env) => Err((format!("{} occurred", env.kind()), Some(EventRef::of(env)))),
        None => Ok(()),
    }
}

fn event_order(s: &Scope<'_>, groups: &[EventMatch]) -> Outcome {
    let events = s.events;
    let mut pos = 0usize;
    let mut prev: Option<&Envelope> = None;
    for g in groups {
        match events[pos..].iter().position(|e| g.check(e).is_ok()) {
            Some(found) => {
                prev = events.get(pos + found);
                pos += found + 1;
            }
            None => {
                return Err((
                    match prev {
                        Some(p) => {
                            format!("no {} after event #{} {}", g.describe(), p.index, p.kind())
                        }
                        None => format!("no {} at all", g.describe()),
                    },
                    prev.map(EventRef::of).or_else(|| s.last.clone()),
                ));
            }
        }
    }
    Ok(())
}

/// A file's `events_satisfy`: every event of `kind` matches `data`, and
/// there is at least one.
fn every_event_matches(
    events: &[Envelope],
    kind: &str,
    data: &Matcher,
) -> Result<(), (String, Option<u64>)> {
    let mut seen = 0;
    for env in events.iter().filter(|e| e.kind() == kind) {
        seen += 1;
        let value = env.event.data_json().unwrap_or(Value::Null);
        if let Err(why) = data.check(Some(&value)) {
            return Err((
                format!("{kind} #{}: data {why}", env.index),
                Some(env.index),
            ));
        }
    }
    if seen == 0 {
        return Err((format!("no {kind} event to check"), None));
    }
    Ok(())
}

fn require_input_request(s: &Scope<'_>, tool: &str) -> Verdict {
    let label = format!("requireInputRequest({tool:?})");
    let em = EventMatch::kind("action.approval_requested").data(Matcher::object([(
        "name",
        Matcher::Eq(Value::String(tool.into())),
    )]));
    match s.events.iter().find(|e| em.check(e).is_ok()) {
        Some(env) => Verdict {
            label,
            outcomes: vec![Ok(())],
            found: Found::Request(env.event.data_json().unwrap_or(Value::Null)),
        },
        None => Verdict::one(
            label,
            Err((
                format!("no approval was requested for {tool}"),
                s.last.clone(),
            )),
        ),
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
