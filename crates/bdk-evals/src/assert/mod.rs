//! Trajectory assertions over recorded session events.
//!
//! [`Assertions`] is implemented by the whole case ([`crate::Case`]) and by
//! one turn ([`crate::Turn`]): the same methods, over the case's events or
//! the turn's. Every assertion returns whether it held and, when it did not,
//! records a [`Failure`] naming the event that broke it; nothing stops the
//! case except the `require*` forms and `expect_ok`, which return
//! [`Stop`].
//!
//! Each method builds one `Assertion`, the same value an eval file's
//! `assert = "..."` table deserializes into (`assertion.rs`), and records
//! what its one check finds; `trajectory.rs` reads calls off the events.

mod assertion;
mod trajectory;

use std::sync::{Arc, Mutex};

use bdk_events::Envelope;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use assertion::{Assertion, EventDef};
use assertion::{Found, Scope, Verdict};
use trajectory::Outcome;
pub use trajectory::{
    CallStatus, EventMatch, EventRef, GateMatch, ToolCallView, ToolMatch, subagent_calls,
    tool_calls,
};

use crate::judge::Judge;
use crate::matcher::Matcher;

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
        holds(self, &Assertion::Succeeded {})
    }

    /// A request for `name` matching `m` occurred (`count` times when set).
    fn called_tool(&self, name: &str, m: ToolMatch) -> bool {
        holds(
            self,
            &Assertion::CalledTool {
                name: name.to_owned(),
                input: m.input,
                output: m.output,
                status: m.status,
                count: m.count,
            },
        )
    }

    /// No request for `name` occurred.
    fn not_called_tool(&self, name: &str) -> bool {
        holds(self, &Assertion::NotCalledTool { name: name.into() })
    }

    /// The agent loaded the skill `name` with the built-in `load_skill` tool.
    fn loaded_skill(&self, name: &str) -> bool {
        holds(self, &Assertion::LoadedSkill { name: name.into() })
    }

    /// The named tools were requested in this relative order (others may come between).
    fn tool_order(&self, names: &[&str]) -> bool {
        holds(
            self,
            &Assertion::ToolOrder {
                names: names.iter().map(|&n| n.to_owned()).collect(),
            },
        )
    }

    /// No tool was requested.
    fn used_no_tools(&self) -> bool {
        holds(self, &Assertion::UsedNoTools {})
    }

    /// At most `max` tool calls were requested.
    fn max_tool_calls(&self, max: usize) -> bool {
        holds(self, &Assertion::MaxToolCalls { max })
    }

    /// No tool result was an error. Each failed result is its own failure.
    fn no_failed_actions(&self) -> bool {
        holds(self, &Assertion::NoFailedActions {})
    }

    /// A subagent call to `name` matching `m` (input: the prompt, output: the reply).
    fn called_subagent(&self, name: &str, m: ToolMatch) -> bool {
        holds(
            self,
            &Assertion::CalledSubagent {
                name: name.to_owned(),
                prompt: m.input,
                reply: m.output,
                status: m.status,
                count: m.count,
            },
        )
    }

    /// An artifact was tagged (of `kind` when given, whose `artifact.tagged`
    /// data matches `data` when given).
    fn tagged_artifact(&self, kind: Option<&str>, data: Option<Matcher>) -> bool {
        holds(
            self,
            &Assertion::TaggedArtifact {
                kind: kind.map(str::to_owned),
                data,
            },
        )
    }

    /// An event of `kind` (whose data matches) occurred.
    fn event(&self, kind: &str, data: Option<Matcher>) -> bool {
        holds(
            self,
            &Assertion::Event(EventMatch {
                kind: kind.into(),
                data,
            }),
        )
    }

    /// No event of `kind` (whose data matches) occurred.
    fn not_event(&self, kind: &str, data: Option<Matcher>) -> bool {
        holds(
            self,
            &Assertion::NotEvent(EventMatch {
                kind: kind.into(),
                data,
            }),
        )
    }

    /// A result gate's verdict matching `m` was recorded.
    fn gate_verdict(&self, m: GateMatch) -> bool {
        holds(
            self,
            &Assertion::GateVerdict {
                gate: m.gate,
                verdict: m.verdict,
                attempt: m.attempt,
                text: m.text,
            },
        )
    }

    /// Result gates judged exactly `count` final replies (the highest
    /// attempt in scope; 0 when no gate ran).
    fn gate_attempts(&self, count: u32) -> bool {
        holds(self, &Assertion::GateAttempts { count })
    }

    /// Events matching each group appeared in this relative order.
    fn event_order(&self, groups: &[EventMatch]) -> bool {
        holds(
            self,
            &Assertion::EventOrder {
                events: groups.to_vec(),
            },
        )
    }

    /// `predicate` accepted the event stream. It returns `Err((message,
    /// culprit index))` to explain a rejection.
    fn events_satisfy(
        &self,
        label: &str,
        predicate: impl Fn(&[Envelope]) -> Result<(), (String, Option<u64>)>,
    ) -> bool {
        let verdict = assertion::events_satisfy(&scope_of(self), label, predicate);
        settle(self, verdict).is_ok()
    }

    /// `value` met the expectation.
    fn check(&self, label: &str, value: &Value, expect: &Matcher) -> bool {
        let verdict = assertion::check_value(&scope_of(self), label, value, expect);
        settle(self, verdict).is_ok()
    }

    /// Records a score from 0 to 1; a value outside that range (or NaN) is a failure.
    fn score(&self, name: &str, value: f64) -> bool {
        holds(
            self,
            &Assertion::Score {
                name: name.to_owned(),
                value,
            },
        )
    }

    /// Like [`Assertions::called_tool`], but returns the first matching call
    /// and stops the case when there is none.
    fn require_tool_call(&self, name: &str, m: ToolMatch) -> Result<ToolCallView, Stop> {
        let a = Assertion::RequireToolCall {
            name: name.to_owned(),
            input: m.input,
            output: m.output,
            status: m.status,
            count: m.count,
        };
        match settle(self, a.check(&scope_of(self)))? {
            Found::Call(call) => Ok(call),
            _ => Err(Stop {
                reason: format!("requireToolCall({name:?}) found no call"),
            }),
        }
    }

    /// Returns the first approval request (a call waiting for a person's
    /// input) for `tool`, or stops the case when there is none.
    fn require_input_request(&self, tool: &str) -> Result<Value, Stop> {
        let a = Assertion::RequireInputRequest { tool: tool.into() };
        match settle(self, a.check(&scope_of(self)))? {
            Found::Request(data) => Ok(data),
            _ => Err(Stop {
                reason: format!("requireInputRequest({tool:?}) found no request"),
            }),
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

/// What the Rust methods check against: the scope's events. They never read
/// a reply or a turn count (see [`Scope::reply`]).
fn scope_of<S: Assertions + ?Sized>(scope: &S) -> Scope<'_> {
    Scope {
        events: scope.scope_events(),
        last: scope.last_event(),
        reply: "",
        turns: 0,
    }
}

/// Checks `a` in `scope` from a Rust method: whether it held.
fn holds<S: Assertions + ?Sized>(scope: &S, a: &Assertion) -> bool {
    settle(scope, a.check(&scope_of(scope))).is_ok()
}

/// Checks a file's assertion in the turn or case `scope`, whose reply and
/// turn count a `check` may read. A failure stops the case only for the
/// `require*` forms. A `judge` is not graded here (see [`Assertion::check`]).
pub(crate) fn apply<S: Assertions + ?Sized>(
    scope: &S,
    a: &Assertion,
    reply: &str,
    turns: usize,
) -> Result<(), Stop> {
    let s = Scope {
        events: scope.scope_events(),
        last: scope.last_event(),
        reply,
        turns,
    };
    match settle(scope, a.check(&s)) {
        Err(stop) if a.stops() => Err(stop),
        _ => Ok(()),
    }
}

/// Records a verdict in `scope`: keeps its score, records each outcome
/// under its label. `Err` names the first failure, for the forms that stop.
fn settle<S: Assertions + ?Sized>(scope: &S, v: Verdict) -> Result<Found, Stop> {
    if let Found::Score(name, value) = &v.found {
        scope.sink().push_score(Score {
            name: name.clone(),
            value: *value,
        });
    }
    let mut first = None;
    for outcome in v.outcomes {
        if let Err((message, _)) = &outcome {
            first.get_or_insert_with(|| format!("{}: {message}", v.label));
        }
        scope.record(v.label.clone(), outcome);
    }
    match first {
        Some(reason) => Err(Stop { reason }),
        None => Ok(v.found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::{Event, SessionId, TurnId};
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

    /// A file's assertion, deserialized and compiled as `spec.rs` does.
    fn from_file(table: &str) -> Assertion {
        #[derive(Deserialize)]
        struct One {
            a: Assertion<Value, EventDef>,
        }
        let one: One = toml::from_str(&format!("a = {table}")).unwrap();
        one.a.compile().unwrap()
    }

    /// Each file form is the Rust method of the same name: the same
    /// failures, scores and count of assertions, and only a `require*` that
    /// fails stops the case.
    #[test]
    fn a_file_assertion_records_what_its_rust_method_records() {
        type ByHand = &'static dyn Fn(&Scope);
        let pairs: Vec<(&str, ByHand)> = vec![
            (r#"{ assert = "succeeded" }"#, &|t| {
                t.succeeded();
            }),
            (
                r#"{ assert = "called_tool", name = "lookup", input = { city = "Rome" }, status = "failed", count = 1 }"#,
                &|t| {
                    t.called_tool(
                        "lookup",
                        ToolMatch::any()
                            .input(json!({"city": "Rome"}))
                            .status(CallStatus::Failed)
                            .count(1),
                    );
                },
            ),
            (
                r#"{ assert = "require_tool_call", name = "lookup", output = "down" }"#,
                &|t| {
                    t.require_tool_call("lookup", ToolMatch::any().output(json!("down")))
                        .unwrap();
                },
            ),
            (
                r#"{ assert = "require_tool_call", name = "deploy" }"#,
                &|t| {
                    t.require_tool_call("deploy", ToolMatch::any()).unwrap_err();
                },
            ),
            (r#"{ assert = "not_called_tool", name = "task" }"#, &|t| {
                t.not_called_tool("task");
            }),
            (r#"{ assert = "loaded_skill", name = "other" }"#, &|t| {
                t.loaded_skill("other");
            }),
            (
                r#"{ assert = "tool_order", names = ["task", "load_skill"] }"#,
                &|t| {
                    t.tool_order(&["task", "load_skill"]);
                },
            ),
            (r#"{ assert = "used_no_tools" }"#, &|t| {
                t.used_no_tools();
            }),
            (r#"{ assert = "max_tool_calls", max = 2 }"#, &|t| {
                t.max_tool_calls(2);
            }),
            (r#"{ assert = "no_failed_actions" }"#, &|t| {
                t.no_failed_actions();
            }),
            (
                r#"{ assert = "called_subagent", name = "climate", prompt = { "$contains" = "Oslo" }, reply = "cold" }"#,
                &|t| {
                    t.called_subagent(
                        "climate",
                        ToolMatch::any()
                            .input(Matcher::contains("Oslo"))
                            .output(json!("cold")),
                    );
                },
            ),
            (
                r#"{ assert = "tagged_artifact", kind = "memo", data = { path = "r.md" } }"#,
                &|t| {
                    t.tagged_artifact(
                        Some("memo"),
                        Some(Matcher::literal(json!({"path": "r.md"}))),
                    );
                },
            ),
            (r#"{ assert = "event", type = "turn.failed" }"#, &|t| {
                t.event("turn.failed", None);
            }),
            (
                r#"{ assert = "not_event", type = "action.result", data = { isError = true } }"#,
                &|t| {
                    t.not_event(
                        "action.result",
                        Some(Matcher::literal(json!({"isError": true}))),
                    );
                },
            ),
            (
                r#"{ assert = "event_order", events = [{ type = "turn.completed" }, { type = "turn.started" }] }"#,
                &|t| {
                    t.event_order(&[
                        EventMatch::kind("turn.completed"),
                        EventMatch::kind("turn.started"),
                    ]);
                },
            ),
            (
                r#"{ assert = "require_input_request", tool = "deploy" }"#,
                &|t| {
                    t.require_input_request("deploy").unwrap();
                },
            ),
            (
                r#"{ assert = "check", value = "tool_names", expect = ["load_skill"] }"#,
                &|t| {
                    t.check(
                        "tool_names",
                        &json!(["load_skill", "lookup", "task"]),
                        &Matcher::literal(json!(["load_skill"])),
                    );
                },
            ),
            (
                r#"{ assert = "score", name = "quality", value = 0.5 }"#,
                &|t| {
                    t.score("quality", 0.5);
                },
            ),
        ];
        for (table, by_hand) in pairs {
            let (file, rust) = (trajectory(), trajectory());
            let stopped = apply(&file, &from_file(table), "done", 1).is_err();
            by_hand(&rust);
            assert_eq!(file.sink.failures(), rust.sink.failures(), "{table}");
            assert_eq!(file.sink.scores(), rust.sink.scores(), "{table}");
            assert_eq!(
                file.sink.assertion_count(),
                rust.sink.assertion_count(),
                "{table}"
            );
            let should_stop = table.contains("require_tool_call") && table.contains("deploy");
            assert_eq!(stopped, should_stop, "{table}");
        }
    }
}
