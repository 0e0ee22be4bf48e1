//! Crash recovery: when a host starts over a store holding a turn that
//! never ended, the turn is closed (`interrupted`) and the session rests
//! again, with its queued follow-ups delivered.

use std::collections::HashSet;

use bdk_events::view::open_turn;
use bdk_events::{
    ActionRequest, ActionResult, ActionsCompleted, Envelope, Event, FailStatus, SessionFailed,
    SessionMode, SessionWaiting, StepCompleted, TurnFailed, TurnId,
};
use bdk_store::SessionRecord;
use serde_json::Value;

use super::Host;
use super::error::{HostResult, session_error};

/// The events that close what turn `turn` of `events` left open: an error
/// `action.result` for each requested call without one and the batch's
/// `actions.completed`, then `step.completed` for each open step.
pub(super) fn closing_events(events: &[Envelope], turn: &TurnId) -> Vec<Event> {
    let mut steps: Vec<u32> = Vec::new();
    let mut batches: Vec<(u32, Vec<ActionRequest>)> = Vec::new();
    let mut results: HashSet<&str> = HashSet::new();
    for env in events.iter().filter(|e| e.turn_id.as_ref() == Some(turn)) {
        match &env.event {
            Event::StepStarted(s) => steps.push(s.step),
            Event::StepCompleted(s) => steps.retain(|x| *x != s.step),
            Event::ActionsRequested(a) => batches.push((a.step, a.actions.clone())),
            Event::ActionsCompleted(a) => batches.retain(|(step, _)| *step != a.step),
            Event::ActionResult(r) => {
                results.insert(r.call_id.as_str());
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (step, actions) in batches {
        for action in &actions {
            if !results.contains(action.call_id.as_str()) {
                out.push(
                    ActionResult {
                        call_id: action.call_id.clone(),
                        name: action.name.clone(),
                        is_error: true,
                        output: Value::String(
                            "not run: the host stopped before this call finished".to_owned(),
                        ),
                        content: Vec::new(),
                        duration_ms: 0,
                        stubbed: false,
                    }
                    .into(),
                );
            }
        }
        out.push(
            ActionsCompleted {
                step,
                call_ids: actions.into_iter().map(|a| a.call_id).collect(),
            }
            .into(),
        );
    }
    for step in steps {
        out.push(
            StepCompleted {
                step,
                duration_ms: 0,
                finish_reason: None,
                usage: None,
            }
            .into(),
        );
    }
    out
}

impl Host {
    /// Records `turn.failed` (interrupted) for turns that never ended, so
    /// their sessions can continue. A session that cannot be recovered (its
    /// log is damaged, an append fails) is logged and left as it is: one bad
    /// session never keeps the host from starting.
    pub(super) async fn recover(&self) -> HostResult<()> {
        for record in self.inner.store.list_sessions().await? {
            if let Err(e) = self.recover_session(&record).await {
                tracing::warn!(session_id = %record.id, error = %e, "cannot recover a session; leaving it as it is");
            }
        }
        Ok(())
    }

    /// [`Host::recover`] for one session.
    pub(super) async fn recover_session(&self, record: &SessionRecord) -> HostResult<()> {
        let events = self
            .inner
            .store
            .read(&record.id, 0)
            .await
            .map_err(session_error(&record.id))?;
        if self.coordination().is_some() {
            // Another replica may be running it: only a session whose lease
            // is free is touched.
            return self.recover_shared(record, &events).await;
        }
        self.settle_session(
            record,
            &events,
            "turn interrupted: the host stopped while it was running",
            "task interrupted by a restart",
        )
        .await
    }

    /// Settles what a host that stopped (crashed, shut down, or a replica
    /// that died) left of a session, by what it had acknowledged:
    ///
    /// - an open turn that never started (accepted, maybe `turn.queued`
    ///   under `max_running_turns`) runs now, under its own turn id;
    /// - an open turn that started is recorded `turn.failed` (interrupted)
    ///   with the session's rest state, since running it again could repeat
    ///   its tools' effects;
    /// - coalesced follow-ups still queued in the store are delivered:
    ///   behind the resumed turn, or as the next turn.
    ///
    /// With replicas the caller holds the session's lease for the open turn
    /// (a resumed turn keeps it; otherwise it is released here).
    pub(crate) async fn settle_session(
        &self,
        record: &SessionRecord,
        events: &[Envelope],
        interrupted: &str,
        task_interrupted: &str,
    ) -> HostResult<()> {
        let queued = self.stored_queue(&record.id, events).await?;
        if let Some(open) = open_turn(events) {
            if !open.started {
                self.resume_turn(record, open.id, open.prompt.to_owned(), queued);
                return Ok(());
            }
            tracing::warn!(session_id = %record.id, turn_id = %open.id, "recording a turn interrupted by a stop of its host");
            let rest: Event = match record.mode {
                SessionMode::Chat => SessionWaiting {}.into(),
                SessionMode::Task => SessionFailed {
                    message: task_interrupted.to_owned(),
                }
                .into(),
            };
            let failed: Event = TurnFailed {
                message: interrupted.to_owned(),
                status: FailStatus::Interrupted,
                usage: None,
            }
            .into();
            // What the stopped host left open (a batch, a step) is closed
            // before the turn's end, as a turn ending in a live host does.
            let mut end = closing_events(events, open.id);
            end.push(failed);
            let result = async {
                self.record(&record.id, Some(open.id), end).await?;
                self.record(&record.id, None, vec![rest]).await
            }
            .await;
            self.release_lease(&record.id, open.id).await;
            result?;
        }
        if record.mode == SessionMode::Chat {
            self.deliver_queued(record, queued).await?;
        }
        Ok(())
    }
}
