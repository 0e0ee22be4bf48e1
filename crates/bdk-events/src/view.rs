//! What a session's log says, derived once: the rest state of the session
//! ([`session_state`]), the turns left open ([`open_turns`], [`open_turn`]),
//! how a turn ended ([`turn_end`]), each call paired with its result
//! ([`calls`], [`delegations`]), the result gates' verdicts ([`verdicts`]),
//! the conversation ([`conversation`]) and the A/B arms the session was
//! enrolled in ([`assignments`]).
//!
//! Every reader of a log (the host's recovery and transcript, the MCP
//! server, the CLI, trajectories, eval assertions) asks these questions
//! here, so they all get the same answer. The functions are pure folds over
//! events in index order and borrow from them; they accept any slice (a
//! whole session, one turn's events, a saved file) and never fail on a log
//! that breaks the rules [`crate::sequence`] checks: a log cut off by a
//! crash is an ordinary input.
//!
//! The conversation stops at the event level: who said what, which calls
//! each assistant step made and what each returned, in order. Turning that
//! into a provider's message type is the model layer's business, and
//! `bdk-models` sits above this crate, so the runtime maps [`Utterance`]s to
//! its messages (and repairs calls left unanswered) itself; the fold, the
//! part with the rules, lives here.

use std::collections::HashSet;

use crate::{
    AbAssigned, ActionRequest, ActionResult, Envelope, Event, FailStatus, GateVerdict,
    SubagentCalled, SubagentCompleted, TurnId, Usage,
};

/// Where a session rests, as its log shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// Nothing happened yet: no turn, no rest event.
    New,
    /// A turn was accepted (received, queued or started) and the session
    /// has not come to rest since; also a turn a crash left open.
    Running,
    /// A chat session waits for a follow-up (`session.waiting`).
    Waiting,
    /// A task session ended well (`session.completed`).
    Completed,
    /// A task session ended in failure (`session.failed`).
    Failed,
}

impl SessionState {
    /// The lowercase name (`new`, `running`, `waiting`, `completed`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            SessionState::New => "new",
            SessionState::Running => "running",
            SessionState::Waiting => "waiting",
            SessionState::Completed => "completed",
            SessionState::Failed => "failed",
        }
    }
}

/// The rest state of the session `events` records: the last of its rest
/// events (`session.waiting`, `session.completed`, `session.failed`) and
/// turn openings (`message.received`, `turn.queued`, `turn.started`) decides.
/// A turn's end alone does not: the session rests only once its rest event
/// is recorded.
pub fn session_state(events: &[Envelope]) -> SessionState {
    let mut state = SessionState::New;
    for env in events {
        state = match &env.event {
            Event::SessionWaiting(_) => SessionState::Waiting,
            Event::SessionCompleted(_) => SessionState::Completed,
            Event::SessionFailed(_) => SessionState::Failed,
            e if opens_turn(e) => SessionState::Running,
            _ => continue,
        };
    }
    state
}

/// True for the events that open a turn (or keep it open): it was accepted,
/// queued or started.
fn opens_turn(event: &Event) -> bool {
    matches!(
        event,
        Event::MessageReceived(_) | Event::TurnQueued(_) | Event::TurnStarted(_)
    )
}

/// A turn that was opened and never ended, as the log shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenTurn<'a> {
    /// The turn.
    pub id: &'a TurnId,
    /// `turn.started` is recorded: the turn may have done things. An open
    /// turn that never started was only accepted (maybe `turn.queued`).
    pub started: bool,
    /// Its prompt, as its last `message.received` recorded it (empty when
    /// it has none).
    pub prompt: &'a str,
}

/// The turns of `events` that were opened (`message.received`,
/// `turn.queued`, `turn.started`) and not ended (`turn.completed`,
/// `turn.failed`), the one opened (or touched by an opening event) last at
/// the end. A session runs one turn at a time, so a log the host wrote has
/// at most one; a crash can leave it there.
pub fn open_turns(events: &[Envelope]) -> Vec<OpenTurn<'_>> {
    let mut open: Vec<OpenTurn<'_>> = Vec::new();
    for env in events {
        let Some(id) = env.turn_id.as_ref() else {
            continue;
        };
        if env.event.ends_turn() {
            open.retain(|t| t.id != id);
        } else if opens_turn(&env.event) {
            let mut turn = match open.iter().position(|t| t.id == id) {
                Some(at) => open.remove(at),
                None => OpenTurn {
                    id,
                    started: false,
                    prompt: "",
                },
            };
            match &env.event {
                Event::MessageReceived(m) => turn.prompt = &m.message,
                Event::TurnStarted(_) => turn.started = true,
                _ => {}
            }
            open.push(turn);
        }
    }
    open
}

/// The open turn of `events` (the last of [`open_turns`]), if any.
pub fn open_turn(events: &[Envelope]) -> Option<OpenTurn<'_>> {
    open_turns(events).pop()
}

/// How one turn ended, read off its end event.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnEnd<'a> {
    /// True for `turn.completed`.
    pub ok: bool,
    /// The reply of a completed turn, the failure message of a failed one.
    pub text: &'a str,
    /// Why it failed; `None` when it completed.
    pub status: Option<FailStatus>,
    /// The turn's usage, when known.
    pub usage: Option<Usage>,
}

impl TurnEnd<'_> {
    /// `completed`, or the failure's status (`failed`, `cancelled`,
    /// `interrupted`).
    pub fn status_str(&self) -> &'static str {
        self.status.map_or("completed", FailStatus::as_str)
    }
}

/// How a turn ended, when `event` ends one.
pub fn turn_end(event: &Event) -> Option<TurnEnd<'_>> {
    match event {
        Event::TurnCompleted(c) => Some(TurnEnd {
            ok: true,
            text: &c.reply,
            status: None,
            usage: c.usage,
        }),
        Event::TurnFailed(f) => Some(TurnEnd {
            ok: false,
            text: &f.message,
            status: Some(f.status),
            usage: f.usage,
        }),
        _ => None,
    }
}

/// How the last turn of `events` that ended did, with its end event.
pub fn last_turn_end(events: &[Envelope]) -> Option<(&Envelope, TurnEnd<'_>)> {
    events
        .iter()
        .rev()
        .find_map(|env| turn_end(&env.event).map(|end| (env, end)))
}

/// The A/B arms the session of `events` was enrolled in: its `ab.assigned`
/// events, one per experiment. Only the ones recorded before the first
/// turn count (that is where the host records them); should an experiment
/// appear twice there, the first record wins, so a session never changes
/// arm.
pub fn assignments(events: &[Envelope]) -> Vec<&AbAssigned> {
    let mut out: Vec<&AbAssigned> = Vec::new();
    for env in events {
        match &env.event {
            Event::AbAssigned(a) if !out.iter().any(|o| o.experiment == a.experiment) => {
                out.push(a);
            }
            Event::AbAssigned(_) | Event::SessionStarted(_) => {}
            _ if env.turn_id.is_some() || matches!(env.event, Event::MessageReceived(_)) => {
                break;
            }
            _ => {}
        }
    }
    out
}

/// One tool call and what it returned.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Call<'a> {
    /// The `actions.requested` that asked for it.
    pub requested: &'a Envelope,
    /// The call as the model made it.
    pub request: &'a ActionRequest,
    /// The `action.result` that answered it; `None` while it runs, and for
    /// a call its turn ended without (a crash, a stop).
    pub answered: Option<&'a Envelope>,
    /// The result carried by [`Call::answered`].
    pub result: Option<&'a ActionResult>,
}

/// Every tool call of `events` in request order, each with its result.
///
/// A result answers the latest request of its call id, so ids a provider
/// repeats across turns (some number their calls from 0 in every step)
/// pair within their turn.
pub fn calls(events: &[Envelope]) -> Vec<Call<'_>> {
    let mut out: Vec<Call<'_>> = Vec::new();
    for env in events {
        match &env.event {
            Event::ActionsRequested(batch) => {
                out.extend(batch.actions.iter().map(|request| Call {
                    requested: env,
                    request,
                    answered: None,
                    result: None,
                }))
            }
            Event::ActionResult(r) => {
                if let Some(call) = out
                    .iter_mut()
                    .rev()
                    .find(|c| c.request.call_id == r.call_id)
                {
                    call.answered = Some(env);
                    call.result = Some(r);
                }
            }
            _ => {}
        }
    }
    out
}

/// One delegation to a subagent and how it ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Delegation<'a> {
    /// The `subagent.called` event.
    pub called: &'a Envelope,
    /// Its data: the subagent and the prompt.
    pub call: &'a SubagentCalled,
    /// The `subagent.completed` event; `None` while the subagent runs or
    /// when the turn ended without it.
    pub completed: Option<&'a Envelope>,
    /// Its data: the reply and whether it failed.
    pub completion: Option<&'a SubagentCompleted>,
}

/// Every subagent delegation of `events` in call order, each with its
/// completion, paired by call id the way [`calls`] pairs results.
pub fn delegations(events: &[Envelope]) -> Vec<Delegation<'_>> {
    let mut out: Vec<Delegation<'_>> = Vec::new();
    for env in events {
        match &env.event {
            Event::SubagentCalled(call) => out.push(Delegation {
                called: env,
                call,
                completed: None,
                completion: None,
            }),
            Event::SubagentCompleted(done) => {
                if let Some(d) = out
                    .iter_mut()
                    .rev()
                    .find(|d| d.call.call_id == done.call_id)
                {
                    d.completed = Some(env);
                    d.completion = Some(done);
                }
            }
            _ => {}
        }
    }
    out
}

/// Every result-gate verdict of `events`, in log order, with its envelope
/// (which turn it belongs to, where it sits).
pub fn verdicts(events: &[Envelope]) -> Vec<(&Envelope, &GateVerdict)> {
    events
        .iter()
        .filter_map(|env| match &env.event {
            Event::GateVerdict(v) => Some((env, v)),
            _ => None,
        })
        .collect()
}

/// One entry of the conversation a session's log records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Utterance<'a> {
    /// What the user said: a turn's prompt or a nudge into a running turn.
    User(&'a str),
    /// One assistant step: its final text and the calls it made (the text
    /// of a step that made no call is recorded only when not empty).
    Assistant {
        /// The step's `message.completed` text, empty when it had none.
        text: &'a str,
        /// The calls of the step, in the model's order.
        calls: &'a [ActionRequest],
    },
    /// What a call returned.
    Result(&'a ActionResult),
    /// A result gate rejected the reply before it: the model is asked to
    /// repair it ([`GateVerdict::repair_prompt`] is the text it sees, as a
    /// user message).
    Feedback(&'a GateVerdict),
}

/// The conversation of `events`: prompts and nudges, the assistant steps of
/// every model turn and their calls' results, in log order. Only turns that
/// received a message are model turns: the steps and results of a direct
/// tool call are not part of the conversation. A gate's `reject` is part of
/// it (the feedback the model repaired its reply from) unless it was the
/// turn's last attempt; other verdicts are not. A step cut off before it
/// recorded its calls keeps its text when its turn ends; a call without a
/// result stays without one here.
pub fn conversation(events: &[Envelope]) -> Vec<Utterance<'_>> {
    let mut out = Vec::new();
    let mut model_turns: HashSet<&TurnId> = HashSet::new();
    let mut text: &str = "";
    let mut step_flushed = true;
    for env in events {
        let in_model_turn = env
            .turn_id
            .as_ref()
            .is_some_and(|t| model_turns.contains(t));
        match &env.event {
            Event::MessageReceived(m) => {
                if let Some(t) = &env.turn_id {
                    model_turns.insert(t);
                }
                out.push(Utterance::User(&m.message));
            }
            Event::NudgeDelivered(n) => out.push(Utterance::User(&n.message)),
            Event::StepStarted(_) if in_model_turn => {
                text = "";
                step_flushed = false;
            }
            Event::MessageCompleted(m) if in_model_turn => text = &m.text,
            Event::ActionsRequested(a) if in_model_turn => {
                out.push(Utterance::Assistant {
                    text: std::mem::take(&mut text),
                    calls: &a.actions,
                });
                step_flushed = true;
            }
            Event::ActionResult(r) if in_model_turn => out.push(Utterance::Result(r)),
            // A reject on the last attempt fails the turn: nothing is
            // repaired, so the model is not told.
            Event::GateVerdict(v)
                if in_model_turn
                    && v.verdict == crate::Verdict::Reject
                    && v.attempt < v.max_attempts =>
            {
                out.push(Utterance::Feedback(v))
            }
            Event::StepCompleted(_) | Event::TurnCompleted(_) | Event::TurnFailed(_)
                if in_model_turn =>
            {
                if !step_flushed && !text.is_empty() {
                    out.push(Utterance::Assistant {
                        text: std::mem::take(&mut text),
                        calls: &[],
                    });
                }
                step_flushed = true;
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use serde_json::{Value, json};

    use super::*;
    use crate::{
        ActionsRequested, MessageCompleted, MessageReceived, NudgeDelivered, SessionCompleted,
        SessionFailed, SessionId, SessionStarted, SessionWaiting, StepCompleted, StepStarted,
        TurnCompleted, TurnFailed, TurnQueued, TurnStarted,
    };

    /// Builds a log: each entry is (turn, event); indices follow the order.
    fn log(entries: Vec<(Option<&str>, Event)>) -> Vec<Envelope> {
        entries
            .into_iter()
            .enumerate()
            .map(|(i, (turn, event))| Envelope {
                index: i as u64,
                session_id: SessionId::from_string("ses_view"),
                turn_id: turn.map(TurnId::from_string),
                at: Utc::now(),
                event,
            })
            .collect()
    }

    fn started() -> Event {
        SessionStarted::default().into()
    }
    fn received(text: &str) -> Event {
        MessageReceived {
            message: text.into(),
            delivery_ids: Vec::new(),
        }
        .into()
    }
    fn turn_started() -> Event {
        TurnStarted::default().into()
    }
    fn completed(reply: &str) -> Event {
        TurnCompleted {
            reply: reply.into(),
            usage: None,
            model: "m".into(),
            duration_ms: 1,
            steps: 1,
        }
        .into()
    }
    fn failed(message: &str, status: FailStatus) -> Event {
        TurnFailed {
            message: message.into(),
            status,
            usage: None,
        }
        .into()
    }
    fn waiting() -> Event {
        SessionWaiting {}.into()
    }
    fn step(n: u32) -> Event {
        StepStarted { step: n }.into()
    }
    fn step_done(n: u32) -> Event {
        StepCompleted {
            step: n,
            duration_ms: 0,
            finish_reason: None,
            usage: None,
        }
        .into()
    }
    fn said(text: &str) -> Event {
        MessageCompleted { text: text.into() }.into()
    }
    fn requested(step: u32, ids: &[&str]) -> Event {
        ActionsRequested {
            step,
            actions: ids
                .iter()
                .map(|id| ActionRequest {
                    call_id: (*id).into(),
                    name: "lookup".into(),
                    input: json!({"q": id}),
                })
                .collect(),
        }
        .into()
    }
    fn result(id: &str, output: Value, is_error: bool) -> Event {
        ActionResult {
            call_id: id.into(),
            name: "lookup".into(),
            is_error,
            output,
            content: Vec::new(),
            duration_ms: 2,
            stubbed: false,
        }
        .into()
    }

    #[test]
    fn session_state_follows_rest_events_and_turn_openings() {
        assert_eq!(session_state(&[]), SessionState::New);
        assert_eq!(
            session_state(&log(vec![(None, started())])),
            SessionState::New
        );
        let chat = log(vec![
            (None, started()),
            (Some("t1"), received("hi")),
            (Some("t1"), turn_started()),
            (Some("t1"), completed("hello")),
        ]);
        // A turn's end alone does not rest the session.
        assert_eq!(session_state(&chat), SessionState::Running);
        let mut rested = chat.clone();
        rested.extend(log(vec![(None, waiting())]));
        assert_eq!(session_state(&rested), SessionState::Waiting);
        assert_eq!(SessionState::Waiting.as_str(), "waiting");
        let queued = log(vec![
            (None, waiting()),
            (Some("t2"), TurnQueued { position: 1 }.into()),
        ]);
        assert_eq!(session_state(&queued), SessionState::Running);
    }

    #[test]
    fn session_state_of_task_sessions_is_their_end() {
        let done = log(vec![
            (Some("t1"), received("do it")),
            (Some("t1"), completed("done")),
            (
                None,
                SessionCompleted {
                    reply: Some("done".into()),
                }
                .into(),
            ),
        ]);
        assert_eq!(session_state(&done), SessionState::Completed);
        let broke = log(vec![
            (Some("t1"), received("do it")),
            (Some("t1"), failed("boom", FailStatus::Failed)),
            (
                None,
                SessionFailed {
                    message: "boom".into(),
                }
                .into(),
            ),
        ]);
        assert_eq!(session_state(&broke), SessionState::Failed);
        assert_eq!(SessionState::Failed.as_str(), "failed");
    }

    #[test]
    fn a_turn_left_open_by_a_crash_is_the_open_turn() {
        let events = log(vec![
            (Some("t1"), received("first")),
            (Some("t1"), turn_started()),
            (Some("t1"), completed("ok")),
            (None, waiting()),
            (Some("t2"), received("second")),
            (Some("t2"), turn_started()),
            (Some("t2"), step(1)),
        ]);
        let open = open_turn(&events).expect("t2 is open");
        assert_eq!(open.id.as_str(), "t2");
        assert!(open.started);
        assert_eq!(open.prompt, "second");
        assert_eq!(open_turns(&events).len(), 1);
        assert_eq!(session_state(&events), SessionState::Running);
    }

    #[test]
    fn an_accepted_turn_that_never_started_is_open_and_not_started() {
        let events = log(vec![
            (Some("t1"), received("wait for me")),
            (Some("t1"), TurnQueued { position: 2 }.into()),
        ]);
        let open = open_turn(&events).expect("t1 is open");
        assert!(!open.started);
        assert_eq!(open.prompt, "wait for me");
    }

    #[test]
    fn ended_turns_are_not_open_whatever_ended_them() {
        for end in [
            completed("ok"),
            failed("stopped", FailStatus::Cancelled),
            failed("preempted", FailStatus::Interrupted),
        ] {
            let events = log(vec![
                (Some("t1"), received("x")),
                (Some("t1"), turn_started()),
                (Some("t1"), end),
            ]);
            assert_eq!(open_turn(&events), None);
        }
        // Events of no turn (a direct call's session events) open nothing.
        assert_eq!(open_turn(&log(vec![(None, received("x"))])), None);
    }

    #[test]
    fn open_turns_tracks_each_turn_by_id() {
        // Not a log the host writes (it runs one turn at a time), but a
        // merged or hand-made one: the end of one turn leaves the other open.
        let events = log(vec![
            (Some("a"), received("a")),
            (Some("b"), received("b")),
            (Some("a"), failed("gone", FailStatus::Interrupted)),
        ]);
        let open = open_turns(&events);
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].id.as_str(), "b");
    }

    #[test]
    fn turn_end_reads_completions_and_failures() {
        let events = log(vec![
            (Some("t1"), received("x")),
            (Some("t1"), completed("first")),
            (Some("t2"), received("y")),
            (
                Some("t2"),
                failed("stopped by a person", FailStatus::Cancelled),
            ),
            (None, waiting()),
        ]);
        let (env, end) = last_turn_end(&events).expect("two turns ended");
        assert_eq!(env.index, 3);
        assert!(!end.ok);
        assert_eq!(end.text, "stopped by a person");
        assert_eq!(end.status_str(), "cancelled");
        let first = turn_end(&events[1].event).expect("a completion");
        assert!(first.ok);
        assert_eq!(first.text, "first");
        assert_eq!(first.status_str(), "completed");
        assert_eq!(turn_end(&events[0].event), None);
        assert_eq!(last_turn_end(&events[..1]), None);
    }

    #[test]
    fn calls_pair_results_including_missing_and_repeated_ids() {
        let events = log(vec![
            (Some("t1"), received("x")),
            (Some("t1"), requested(1, &["c0", "c1"])),
            // Results may arrive out of request order.
            (Some("t1"), result("c1", json!("one"), false)),
            (Some("t1"), result("c0", json!({"e": 1}), true)),
            (Some("t1"), completed("ok")),
            (Some("t2"), received("y")),
            // The provider numbers its calls from 0 again.
            (Some("t2"), requested(1, &["c0"])),
            (Some("t2"), failed("crash", FailStatus::Interrupted)),
        ]);
        let calls = calls(&events);
        assert_eq!(calls.len(), 3);
        assert_eq!(calls[0].request.call_id, "c0");
        assert_eq!(calls[0].result.map(|r| r.is_error), Some(true));
        assert_eq!(calls[0].answered.map(|e| e.index), Some(3));
        assert_eq!(
            calls[1].result.map(|r| r.output.clone()),
            Some(json!("one"))
        );
        assert_eq!(calls[1].requested.index, 1);
        // The second turn's c0 never returned, and the first turn's c0
        // keeps its own result.
        assert_eq!(calls[2].requested.index, 6);
        assert_eq!(calls[2].result, None);
        assert_eq!(calls[2].answered, None);
    }

    #[test]
    fn a_result_after_a_repeated_id_answers_the_latest_request() {
        let events = log(vec![
            (Some("t1"), requested(1, &["c0"])),
            (Some("t1"), result("c0", json!(1), false)),
            (Some("t2"), requested(1, &["c0"])),
            (Some("t2"), result("c0", json!(2), false)),
        ]);
        let calls = calls(&events);
        assert_eq!(calls[0].result.map(|r| r.output.clone()), Some(json!(1)));
        assert_eq!(calls[1].result.map(|r| r.output.clone()), Some(json!(2)));
    }

    #[test]
    fn delegations_pair_by_call_id_even_when_they_overlap() {
        let called = |id: &str, name: &str| -> Event {
            SubagentCalled {
                call_id: id.into(),
                name: name.into(),
                prompt: format!("ask {name}"),
            }
            .into()
        };
        let done = |id: &str, name: &str, is_error: bool| -> Event {
            SubagentCompleted {
                call_id: id.into(),
                name: name.into(),
                reply: format!("{name} says"),
                is_error,
                usage: None,
            }
            .into()
        };
        let events = log(vec![
            (Some("t1"), called("c1", "a")),
            (Some("t1"), called("c2", "b")),
            (Some("t1"), done("c1", "a", false)),
            (Some("t1"), done("c2", "b", true)),
            (Some("t1"), called("c3", "a")),
        ]);
        let d = delegations(&events);
        assert_eq!(d.len(), 3);
        assert_eq!(d[0].completion.map(|c| c.reply.as_str()), Some("a says"));
        assert_eq!(d[0].completed.map(|e| e.index), Some(2));
        assert_eq!(d[1].completion.map(|c| c.is_error), Some(true));
        assert_eq!(d[2].call.prompt, "ask a");
        assert_eq!(d[2].completion, None);
    }

    #[test]
    fn conversation_holds_prompts_steps_and_results_in_order() {
        let events = log(vec![
            (None, started()),
            (Some("t1"), received("weather?")),
            (Some("t1"), turn_started()),
            (Some("t1"), step(1)),
            (Some("t1"), said("let me look")),
            (Some("t1"), requested(1, &["c0"])),
            (Some("t1"), result("c0", json!("sunny"), false)),
            (Some("t1"), step_done(1)),
            (
                Some("t1"),
                NudgeDelivered {
                    message: "in Rome".into(),
                    delivery_id: None,
                }
                .into(),
            ),
            (Some("t1"), step(2)),
            (Some("t1"), said("sunny in Rome")),
            (Some("t1"), step_done(2)),
            (Some("t1"), completed("sunny in Rome")),
            (None, waiting()),
        ]);
        let c = conversation(&events);
        assert_eq!(c.len(), 5, "{c:?}");
        assert_eq!(c[0], Utterance::User("weather?"));
        let Utterance::Assistant { text, calls } = c[1] else {
            panic!("not a step: {:?}", c[1]);
        };
        assert_eq!(text, "let me look");
        assert_eq!(calls.len(), 1);
        assert!(matches!(c[2], Utterance::Result(r) if r.call_id == "c0"));
        assert_eq!(c[3], Utterance::User("in Rome"));
        assert_eq!(
            c[4],
            Utterance::Assistant {
                text: "sunny in Rome",
                calls: &[]
            }
        );
    }

    #[test]
    fn conversation_of_a_cut_off_turn_keeps_what_was_said() {
        let events = log(vec![
            (Some("t1"), received("go")),
            (Some("t1"), turn_started()),
            (Some("t1"), step(1)),
            (Some("t1"), said("half an answer")),
            (Some("t1"), failed("stopped", FailStatus::Cancelled)),
            (Some("t2"), received("again")),
            (Some("t2"), step(1)),
            (Some("t2"), requested(1, &["c0"])),
            (Some("t2"), failed("crash", FailStatus::Interrupted)),
        ]);
        let c = conversation(&events);
        assert_eq!(c.len(), 4, "{c:?}");
        assert_eq!(
            c[1],
            Utterance::Assistant {
                text: "half an answer",
                calls: &[]
            }
        );
        // The call without a result stays without one.
        assert!(matches!(c[3], Utterance::Assistant { text: "", calls } if calls.len() == 1));
    }

    #[test]
    fn conversation_leaves_out_direct_calls_and_empty_steps() {
        let events = log(vec![
            // A direct tool call: a turn id, but no message.received.
            (Some("d1"), requested(0, &["direct"])),
            (Some("d1"), result("direct", json!("x"), false)),
            (Some("t1"), received("hi")),
            (Some("t1"), step(1)),
            (Some("t1"), step_done(1)),
            (Some("t1"), completed("")),
        ]);
        assert_eq!(conversation(&events), vec![Utterance::User("hi")]);
    }

    fn verdict(verdict: crate::Verdict, attempt: u32) -> Event {
        GateVerdict {
            gate: "sign".into(),
            attempt,
            max_attempts: 2,
            verdict,
            feedback: (verdict == crate::Verdict::Reject).then(|| "sign it".into()),
            message: None,
            action: Value::Null,
            duration_ms: 1,
            error: None,
        }
        .into()
    }

    #[test]
    fn conversation_keeps_a_gate_reject_as_feedback_unless_it_ended_the_turn() {
        let events = log(vec![
            (Some("t1"), received("write")),
            (Some("t1"), step(1)),
            (Some("t1"), said("draft")),
            (Some("t1"), step_done(1)),
            (Some("t1"), verdict(crate::Verdict::Reject, 1)),
            (Some("t1"), step(2)),
            (Some("t1"), said("draft, signed")),
            (Some("t1"), step_done(2)),
            (Some("t1"), verdict(crate::Verdict::Accept, 2)),
            (Some("t1"), completed("draft, signed")),
            (Some("t2"), received("again")),
            (Some("t2"), step(1)),
            (Some("t2"), said("bad")),
            (Some("t2"), step_done(1)),
            (Some("t2"), verdict(crate::Verdict::Reject, 2)),
            (Some("t2"), failed("rejected", FailStatus::Failed)),
        ]);
        let c = conversation(&events);
        assert_eq!(c.len(), 6, "{c:?}");
        let Utterance::Feedback(v) = c[2] else {
            panic!("not feedback: {:?}", c[2]);
        };
        assert_eq!(v.feedback.as_deref(), Some("sign it"));
        assert!(v.repair_prompt().contains("sign it"));
        assert_eq!(c[4], Utterance::User("again"));
        assert_eq!(
            c[5],
            Utterance::Assistant {
                text: "bad",
                calls: &[]
            }
        );
        assert_eq!(verdicts(&events).len(), 3);
    }

    #[test]
    fn assignments_are_the_ones_recorded_before_the_first_turn() {
        let assigned = |experiment: &str, arm: &str| -> Event {
            crate::AbAssigned {
                experiment: experiment.into(),
                arm: arm.into(),
                ..crate::AbAssigned::default()
            }
            .into()
        };
        let events = log(vec![
            (None, started()),
            (None, assigned("tone", "concise")),
            (None, assigned("model", "b")),
            // A second record of one experiment never moves the session.
            (None, assigned("tone", "control")),
            (None, SessionWaiting {}.into()),
            (Some("turn_1"), received("hi")),
            (Some("turn_1"), completed("hello")),
            // Past the first turn nothing counts.
            (None, assigned("late", "x")),
        ]);
        let got: Vec<(&str, &str)> = assignments(&events)
            .iter()
            .map(|a| (a.experiment.as_str(), a.arm.as_str()))
            .collect();
        assert_eq!(got, vec![("tone", "concise"), ("model", "b")]);
        assert!(assignments(&log(vec![(None, started())])).is_empty());
    }
}
