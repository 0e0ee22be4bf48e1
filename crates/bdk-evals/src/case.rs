//! The Rust eval API: a [`Case`] sends turns and asserts on what happened.
//!
//! ```no_run
//! # #[cfg(feature = "host")]
//! # async fn demo(host: bdk_core::host::Host) -> Result<(), bdk_evals::Stop> {
//! use bdk_evals::{Assertions, Case, Matcher, ToolMatch};
//! use serde_json::json;
//!
//! let mut t = Case::in_process("weather/paris", host);
//! let turn = t.send("What's the weather in Paris?").await?;
//! turn.expect_ok()?;
//! turn.called_tool("get_weather", ToolMatch::any().input(json!({"city": "Paris"})));
//! t.check("reply", &json!(t.reply()), &Matcher::contains("Paris"));
//! t.finish().assert_passed();
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

#[cfg(feature = "host")]
use bdk_core::host::Host;
use bdk_events::view::last_turn_end;
use bdk_events::{Envelope, Event, SessionId};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::assert::{Assertions, EventRef, Failure, Score, Sink, Stop, ToolCallView, tool_calls};
use crate::judge::Judge;
#[cfg(feature = "host")]
use crate::target::HostTarget;
use crate::target::{Opened, Target};

/// Options of one send. `workspace_files` only shape the session on the
/// first send; later sends add them to the workspace before their turn.
#[derive(Clone, Debug, Default)]
pub struct SendOptions {
    /// Relative path -> content, written into the session workspace.
    pub workspace_files: BTreeMap<String, String>,
}

/// One finished turn of a case. Assertions on it see only its events.
#[derive(Clone)]
pub struct Turn {
    /// 1-based position in the case.
    pub index: u32,
    /// The session.
    pub session_id: SessionId,
    /// The user message that started it.
    pub prompt: String,
    /// The assistant's reply (or the failure message when it failed).
    pub message: String,
    /// True when the turn completed.
    pub ok: bool,
    /// `failed`, `cancelled` or `interrupted` when it did not complete.
    pub status: Option<String>,
    /// The turn's events.
    pub events: Vec<Envelope>,
    /// Its tool calls, in request order.
    pub tool_calls: Vec<ToolCallView>,
    /// Calls the turn waits on for a decision (`needs_approval`): when not
    /// empty the turn is parked, not ended, and [`Case::approve`] or
    /// [`Case::deny`] lets it go on.
    pub pending_approvals: Vec<PendingApproval>,
    sink: Sink,
    cancel: CancellationToken,
}

impl std::fmt::Debug for Turn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Turn")
            .field("index", &self.index)
            .field("ok", &self.ok)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl Assertions for Turn {
    fn scope_events(&self) -> &[Envelope] {
        &self.events
    }
    fn sink(&self) -> &Sink {
        &self.sink
    }
    fn scope_label(&self) -> String {
        format!("turn {}", self.index)
    }
}

impl Turn {
    /// Stops the case when this turn failed.
    pub fn expect_ok(&self) -> Result<&Turn, Stop> {
        let culprit = last_turn_end(&self.events)
            .map(|(e, _)| EventRef::of(e))
            .or_else(|| self.last_event());
        let outcome = if self.ok {
            Ok(())
        } else {
            Err((format!("turn failed: {}", self.message), culprit))
        };
        if self.record("expectOk()".into(), outcome) {
            Ok(self)
        } else {
            Err(Stop {
                reason: format!("turn {} failed: {}", self.index, self.message),
            })
        }
    }

    /// Grades this turn's reply against `rubric`; passes at `threshold` or above.
    pub async fn judge(&self, rubric: &str, threshold: f64) -> bool {
        let culprit = last_turn_end(&self.events).map(|(e, _)| EventRef::of(e));
        judge_answer(
            self,
            rubric,
            threshold,
            &self.prompt,
            &self.message,
            culprit,
            self.cancel.clone(),
        )
        .await
    }
}

/// A call parked for approval, as its `action.approval_requested` recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    /// The call.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
}

/// The calls of `events` requested for approval and not resolved yet, in
/// request order.
fn pending_approvals(events: &[Envelope]) -> Vec<PendingApproval> {
    let mut pending: Vec<PendingApproval> = Vec::new();
    for e in events {
        match &e.event {
            Event::ActionApprovalRequested(a) => pending.push(PendingApproval {
                call_id: a.call_id.clone(),
                name: a.name.clone(),
                input: a.input.clone(),
            }),
            Event::ActionApprovalResolved(r) => pending.retain(|p| p.call_id != r.call_id),
            _ => {}
        }
    }
    pending
}

/// A summary of one turn for reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSummary {
    /// 1-based.
    pub index: u32,
    /// The user message.
    pub prompt: String,
    /// The reply or failure message.
    pub message: String,
    /// Completed?
    pub ok: bool,
    /// Tool names in request order.
    pub tool_calls: Vec<String>,
}

/// What a case iteration ended with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaseOutcome {
    /// No failure was recorded and the body was not stopped.
    pub passed: bool,
    /// Every violated assertion, in the order they were checked.
    pub failures: Vec<Failure>,
    /// Recorded scores.
    pub scores: Vec<Score>,
    /// How many assertions ran.
    pub assertions: u32,
    /// The turns.
    pub turns: Vec<TurnSummary>,
    /// The session, once one was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Why the body stopped early (a `require*`, `expect_ok` or a send error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
}

impl CaseOutcome {
    /// Fails the calling `cargo test` with every violated assertion.
    #[expect(
        clippy::panic,
        reason = "meant for `cargo test`, where a panic is a failed test"
    )]
    pub fn assert_passed(&self) {
        if !self.passed {
            let mut lines: Vec<String> = self.failures.iter().map(Failure::line).collect();
            if let Some(s) = &self.stopped {
                lines.push(format!("stopped: {s}"));
            }
            panic!("eval case failed:\n  {}", lines.join("\n  "));
        }
    }
}

/// One running case iteration: its session, its turns and its assertions.
pub struct Case {
    id: String,
    target: Arc<dyn Target>,
    sink: Sink,
    session: Option<Opened>,
    turns: Vec<Turn>,
    events: Vec<Envelope>,
    iteration: u32,
    iterations: u32,
    cancel: CancellationToken,
    metadata: Value,
    stopped: Option<String>,
    arms: BTreeMap<String, String>,
}

impl Assertions for Case {
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

impl Case {
    /// A case against `target`, judged by `judge` when given.
    pub fn new(id: impl Into<String>, target: Arc<dyn Target>, judge: Option<Arc<Judge>>) -> Case {
        Case {
            id: id.into(),
            target,
            sink: Sink::new(judge),
            session: None,
            turns: Vec::new(),
            events: Vec::new(),
            iteration: 1,
            iterations: 1,
            cancel: CancellationToken::new(),
            metadata: Value::Null,
            stopped: None,
            arms: BTreeMap::new(),
        }
    }

    /// Pins the session the case opens to these A/B arms (experiment ->
    /// arm), recorded as `ab.assigned` with unit `pinned`. Only before the
    /// first send.
    pub fn pin_arms(&mut self, arms: BTreeMap<String, String>) {
        self.arms = arms;
    }

    /// A case against an in-process host, without a judge.
    #[cfg(feature = "host")]
    pub fn in_process(id: impl Into<String>, host: Host) -> Case {
        Case::new(id, Arc::new(HostTarget::new(host)), None)
    }

    /// Sets the judge.
    pub fn with_judge(mut self, judge: Arc<Judge>) -> Case {
        self.sink.judge = Some(judge);
        self
    }

    pub(crate) fn set_run_values(
        &mut self,
        iteration: u32,
        iterations: u32,
        cancel: CancellationToken,
        metadata: Value,
    ) {
        self.iteration = iteration;
        self.iterations = iterations;
        self.cancel = cancel;
        self.metadata = metadata;
    }

    /// The case id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The last turn's reply (empty before the first send).
    pub fn reply(&self) -> &str {
        self.turns.last().map_or("", |t| t.message.as_str())
    }
    /// Every event of the case's session so far.
    pub fn events(&self) -> &[Envelope] {
        &self.events
    }
    /// The turns so far.
    pub fn turns(&self) -> &[Turn] {
        &self.turns
    }
    /// The session, after the first send.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session.as_ref().map(|s| &s.session_id)
    }
    /// 1-based iteration number.
    pub fn iteration(&self) -> u32 {
        self.iteration
    }
    /// How many iterations the case runs.
    pub fn iterations(&self) -> u32 {
        self.iterations
    }
    /// Fires when the case times out or the run is cancelled.
    pub fn signal(&self) -> &CancellationToken {
        &self.cancel
    }
    /// The case's merged metadata.
    pub fn metadata(&self) -> &Value {
        &self.metadata
    }

    /// Sends a message (the first one opens the session) and waits for the turn.
    pub async fn send(&mut self, message: &str) -> Result<Turn, Stop> {
        self.send_with(message, SendOptions::default()).await
    }

    /// [`Case::send`] with options.
    pub async fn send_with(&mut self, message: &str, opts: SendOptions) -> Result<Turn, Stop> {
        let index = u32::try_from(self.turns.len() + 1).unwrap_or(u32::MAX);
        match self.try_send(message, &opts, index).await {
            Ok(turn) => Ok(turn),
            Err(e) => {
                let reason = format!("send {index} failed: {e}");
                self.record(
                    format!(
                        "send({:?})",
                        crate::matcher::short(&Value::String(message.into()))
                    ),
                    Err((reason.clone(), self.last_event())),
                );
                self.stopped = Some(reason.clone());
                Err(Stop { reason })
            }
        }
    }

    async fn try_send(
        &mut self,
        message: &str,
        opts: &SendOptions,
        index: u32,
    ) -> Result<Turn, crate::target::TargetError> {
        let from = self.events.len() as u64;
        let opened = match &self.session {
            None => {
                self.target
                    .start_pinned(&self.id, message, &opts.workspace_files, &self.arms)
                    .await?
            }
            Some(s) => {
                self.target
                    .follow_up(s, message, &opts.workspace_files)
                    .await?
            }
        };
        self.session = Some(opened.clone());
        self.settle(&opened, from).await?;
        let turn = self.read_turn(&opened, index, message);
        self.turns.push(turn.clone());
        Ok(turn)
    }

    /// Waits until the turn of `opened` ends or parks a call for approval
    /// (looking at events from `from` on), then reads the session's events.
    async fn settle(
        &mut self,
        opened: &Opened,
        from: u64,
    ) -> Result<(), crate::target::TargetError> {
        self.target
            .wait_settled(&opened.session_id, &opened.turn_id, from)
            .await?;
        self.events = self.target.events(&opened.session_id).await?;
        Ok(())
    }

    /// The turn of `opened` as the events read last show it.
    fn read_turn(&self, opened: &Opened, index: u32, message: &str) -> Turn {
        let events: Vec<Envelope> = self
            .events
            .iter()
            .filter(|e| e.turn_id.as_ref() == Some(&opened.turn_id))
            .cloned()
            .collect();
        let pending = pending_approvals(&events);
        let ended = last_turn_end(&events).map(|(_, end)| {
            (
                end.ok,
                end.text.to_owned(),
                end.status.map(|s| s.as_str().to_owned()),
            )
        });
        let (ok, text, status) = match ended {
            Some(end) => end,
            None if !pending.is_empty() => {
                let names: Vec<&str> = pending.iter().map(|p| p.name.as_str()).collect();
                (
                    false,
                    format!("waiting for approval of {}", names.join(", ")),
                    Some("waiting".into()),
                )
            }
            None => (
                false,
                "the turn recorded no end".into(),
                Some("failed".into()),
            ),
        };
        let waiting = status.as_deref() == Some("waiting");
        Turn {
            index,
            session_id: opened.session_id.clone(),
            prompt: message.to_owned(),
            message: text,
            ok,
            status,
            tool_calls: tool_calls(&events),
            pending_approvals: if waiting { pending } else { Vec::new() },
            events,
            sink: self.sink.clone(),
            cancel: self.cancel.clone(),
        }
    }

    /// True when the last turn waits for an approval decision.
    pub fn parked(&self) -> bool {
        self.turns
            .last()
            .is_some_and(|t| !t.pending_approvals.is_empty())
    }

    /// Approves the parked call `call` (a call id, or the name of the tool
    /// whose oldest parked call is meant) and waits for the turn to end or
    /// park again; returns the turn as it stands then. Stops the case when
    /// nothing matching is parked.
    pub async fn approve(&mut self, call: &str) -> Result<Turn, Stop> {
        self.resolve(call, true, None).await
    }

    /// Denies the parked call `call` (as in [`Case::approve`]) with an
    /// optional reason the model sees, and waits like [`Case::approve`].
    pub async fn deny(&mut self, call: &str, reason: Option<&str>) -> Result<Turn, Stop> {
        self.resolve(call, false, reason).await
    }

    async fn resolve(
        &mut self,
        call: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<Turn, Stop> {
        let label = format!("{}({call:?})", if approved { "approve" } else { "deny" });
        let result = self.try_resolve(call, approved, reason).await;
        match result {
            Ok(turn) => Ok(turn),
            Err(reason) => {
                self.record(label, Err((reason.clone(), self.last_event())));
                self.stopped = Some(reason.clone());
                Err(Stop { reason })
            }
        }
    }

    async fn try_resolve(
        &mut self,
        call: &str,
        approved: bool,
        reason: Option<&str>,
    ) -> Result<Turn, String> {
        let (Some(opened), Some(last)) = (self.session.clone(), self.turns.last()) else {
            return Err(format!("nothing to resolve for {call}: no turn was sent"));
        };
        let pending = &last.pending_approvals;
        let Some(target) = pending
            .iter()
            .find(|p| p.call_id == call)
            .or_else(|| pending.iter().find(|p| p.name == call))
            .cloned()
        else {
            let parked: Vec<String> = pending
                .iter()
                .map(|p| format!("{} ({})", p.name, p.call_id))
                .collect();
            return Err(if parked.is_empty() {
                format!(
                    "no call of {call} waits for approval: turn {} is not parked",
                    last.index
                )
            } else {
                format!(
                    "no call of {call} waits for approval; parked: {}",
                    parked.join(", ")
                )
            });
        };
        let (index, prompt) = (last.index, last.prompt.clone());
        let from = self.events.len() as u64;
        self.target
            .resolve_approval(&opened.session_id, &target.call_id, approved, reason)
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", target.call_id))?;
        self.settle(&opened, from)
            .await
            .map_err(|e| format!("after resolving {}: {e}", target.call_id))?;
        let turn = self.read_turn(&opened, index, &prompt);
        if let Some(slot) = self.turns.last_mut() {
            *slot = turn.clone();
        }
        Ok(turn)
    }

    /// Grades the last reply against `rubric`; passes at `threshold` or above.
    pub async fn judge(&self, rubric: &str, threshold: f64) -> bool {
        let Some(turn) = self.turns.last() else {
            return self.record(
                format!("judge({:?})", rubric),
                Err(("nothing to judge: no turn was sent".into(), None)),
            );
        };
        let culprit = last_turn_end(&turn.events).map(|(e, _)| EventRef::of(e));
        judge_answer(
            self,
            rubric,
            threshold,
            &turn.prompt,
            &turn.message,
            culprit,
            self.cancel.clone(),
        )
        .await
    }

    /// Stops the running turn, if any (used on timeout).
    pub async fn stop_turn(&self) {
        if let Some(s) = &self.session {
            self.target.stop(&s.session_id).await;
        }
    }

    pub(crate) fn mark_stopped(&mut self, reason: String) {
        self.stopped.get_or_insert(reason);
    }

    /// Ends the case and returns its outcome.
    pub fn finish(self) -> CaseOutcome {
        let failures = self.sink.failures();
        CaseOutcome {
            passed: failures.is_empty() && self.stopped.is_none(),
            failures,
            scores: self.sink.scores(),
            assertions: self.sink.assertion_count(),
            turns: self
                .turns
                .iter()
                .map(|t| TurnSummary {
                    index: t.index,
                    prompt: t.prompt.clone(),
                    message: t.message.clone(),
                    ok: t.ok,
                    tool_calls: t.tool_calls.iter().map(|c| c.name.clone()).collect(),
                })
                .collect(),
            session_id: self.session.map(|s| s.session_id.to_string()),
            stopped: self.stopped,
        }
    }
}

async fn judge_answer(
    scope: &impl Assertions,
    rubric: &str,
    threshold: f64,
    question: &str,
    answer: &str,
    culprit: Option<EventRef>,
    cancel: CancellationToken,
) -> bool {
    let label = format!(
        "judge({:?}, threshold: {threshold})",
        crate::matcher::clip(rubric, 80)
    );
    let Some(judge) = scope.sink().judge.clone() else {
        return scope.record(
            label,
            Err((
                "no judge model is configured; set [judge] model in evals/evals.toml or judge on the case".into(),
                culprit,
            )),
        );
    };
    match judge.grade(rubric, question, answer, cancel).await {
        Ok(v) => {
            scope.sink().push_score(Score {
                name: "judge".into(),
                value: v.score,
            });
            let outcome = if v.score >= threshold {
                Ok(())
            } else {
                Err((
                    format!(
                        "judge {} scored {} (below {threshold}): {}",
                        judge.model_id(),
                        v.score,
                        v.reason
                    ),
                    culprit,
                ))
            };
            scope.record(label, outcome)
        }
        Err(e) => scope.record(label, Err((e.to_string(), culprit))),
    }
}
