//! The turn driver: the task that runs a session's turns back to back, and
//! the recorder, steering and conversation it hands the agent loop.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use bdk_events::view::turn_end;
use bdk_events::{
    Envelope, Event, FailStatus, MessageReceived, SessionCompleted, SessionFailed, SessionId,
    SessionMode, SessionWaiting, TurnCompleted, TurnFailed, TurnId, TurnQueued, TurnStarted, Usage,
};
use bdk_store::{NewEvent, SessionRecord};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::agent::{self, Nudge, RecordError, Recorder, Steering, TurnEnd, TurnEnv, TurnInput};
use crate::tool::SessionInfo;
use bdk_models::Message;

use super::Host;
use super::approvals::Gate;
use super::error::{HostResult, session_error};
use super::services::Services;
use super::slots::{Queued, REASON_NONE, REASON_SHUTDOWN, REASON_STOP, Running, Slot, SlotRef};
use super::transcript::{repair_transcript, transcript_from_events};

/// How [`Host::run_one`] ended: the result, and the end event when it is
/// still to be recorded.
pub(super) struct Outcome {
    pub(super) result: Result<String, String>,
    pub(super) end: Option<NewEvent>,
    /// The turn never started and stays open for the next start (see
    /// [`Host::resume_turn`]).
    pub(super) deferred: bool,
}

impl Outcome {
    /// An outcome whose end event was already recorded.
    pub(super) fn recorded(result: Result<String, String>) -> Self {
        Self {
            result,
            end: None,
            deferred: false,
        }
    }
}

pub(super) fn take_pending(slot: &Slot) -> Option<Vec<Queued>> {
    let mut state = slot.state();
    (!state.pending.is_empty()).then(|| std::mem::take(&mut state.pending))
}

pub(super) fn received_event(messages: &[Nudge]) -> MessageReceived {
    MessageReceived {
        message: messages
            .iter()
            .map(|m| m.message.as_str())
            .collect::<Vec<_>>()
            .join("\n\n"),
        delivery_ids: messages
            .iter()
            .filter_map(|m| m.delivery_id.clone())
            .collect(),
    }
}

pub(super) struct TurnRecorder {
    pub(super) host: Host,
    pub(super) session_id: SessionId,
    pub(super) turn_id: TurnId,
}

#[async_trait]
impl Recorder for TurnRecorder {
    async fn record(&self, event: Event) -> Result<(), RecordError> {
        self.host
            .record(&self.session_id, Some(&self.turn_id), vec![event])
            .await
            .map(|_| ())
            .map_err(|e| RecordError(e.to_string()))
    }

    async fn turn_events(&self) -> Vec<Envelope> {
        // Only gates ask, once per final reply. The store reads a session's
        // log from its start; the turn's own events are kept.
        match self.host.inner.store.read(&self.session_id, 0).await {
            Ok(mut events) => {
                events.retain(|e| e.turn_id.as_ref() == Some(&self.turn_id));
                events
            }
            Err(e) => {
                tracing::warn!(session_id = %self.session_id, error = %e, "failed to read the turn's events for a result gate");
                Vec::new()
            }
        }
    }

    async fn continuation_token(&self) -> Option<String> {
        match self.host.inner.store.get_session(&self.session_id).await {
            Ok(Some(record)) => Some(record.continuation_token),
            _ => None,
        }
    }
}

pub(super) struct SlotSteering {
    pub(super) slot: SlotRef,
}

impl Steering for SlotSteering {
    fn take(&self) -> Vec<Nudge> {
        let mut state = self.slot.state();
        let taken = std::mem::take(&mut state.pending);
        let mut nudges = Vec::with_capacity(taken.len());
        for queued in taken {
            state.delivered.extend(queued.key);
            nudges.push(queued.nudge);
        }
        nudges
    }
}

impl Host {
    /// Runs turns back to back until nothing is queued, then rests the session.
    #[expect(
        clippy::too_many_arguments,
        reason = "the turn task's whole state, moved in once"
    )]
    pub(super) async fn drive(
        &self,
        record: SessionRecord,
        slot: SlotRef,
        mut turn_id: TurnId,
        mut messages: Vec<Nudge>,
        mut cancel: CancellationToken,
        mut reason: Arc<AtomicU8>,
        mut done_tx: watch::Sender<bool>,
    ) {
        let chat = record.mode == SessionMode::Chat;
        loop {
            let Outcome {
                result: end,
                end: end_event,
                deferred,
            } = self
                .run_one(&record, &slot, &turn_id, &messages, &cancel, &reason)
                .await;
            if deferred {
                // A queued turn the host shut down under: it stays as
                // recorded (accepted, not started) for the next start to run,
                // like the follow-ups behind it.
                slot.state().running = None;
                self.release_lease(&record.id, &turn_id).await;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            // Follow-ups queued meanwhile drain into one more turn, with no
            // rest state in between; not while the host shuts down, when
            // they stay queued (and recorded) for the next start.
            let draining = chat && !self.inner.shutdown.is_cancelled();
            let mut next = draining.then(|| take_pending(&slot)).flatten();
            // The records of follow-ups steered into this turn, to remove
            // once its end is durable (which makes their nudges durable).
            let mut steered = Vec::new();
            // Whether the turn's end is in the store. The lease is given
            // back only then: a turn left open in the log keeps it, so other
            // replicas wait for it to lapse with this replica's heartbeat and
            // record the turn interrupted instead of starting one beside it.
            let mut end_durable = true;
            if next.is_some() {
                if let Some(end_event) = end_event.clone()
                    && let Err(e) = self.record_batch(&record.id, vec![end_event]).await
                {
                    end_durable = false;
                    tracing::error!(session_id = %record.id, error = %e, "failed to record the end of a turn");
                }
                steered = std::mem::take(&mut slot.state().delivered);
            }
            if next.is_none() {
                let rest: Event = match (chat, &end) {
                    (true, _) => SessionWaiting {}.into(),
                    (false, Ok(reply)) => SessionCompleted {
                        reply: Some(reply.clone()),
                    }
                    .into(),
                    (false, Err(message)) => SessionFailed {
                        message: message.clone(),
                    }
                    .into(),
                };
                slot.state().ending = true;
                let mut batch: Vec<NewEvent> = end_event.into_iter().collect();
                batch.push(NewEvent::session(rest));
                if let Err(e) = self.record_batch(&record.id, batch).await {
                    end_durable = false;
                    tracing::error!(session_id = %record.id, error = %e, "failed to record the end of a turn and the session's rest state");
                }
                // Re-check under the lock: a follow-up may have been queued
                // while the rest state was being recorded.
                // Taken under the same lock that ends the turn, so nudges of
                // a turn started right after are not among them.
                let mut state = slot.state();
                state.ending = false;
                steered = std::mem::take(&mut state.delivered);
                if draining && !state.pending.is_empty() {
                    next = Some(std::mem::take(&mut state.pending));
                } else {
                    state.running = None;
                }
            }
            self.forget_queued(steered).await;
            let Some(drained) = next else {
                if end_durable {
                    self.release_lease(&record.id, &turn_id).await;
                } else if self.coordination().is_some() {
                    tracing::warn!(session_id = %record.id, turn_id = %turn_id, "keeping the session's lease of a turn whose end is not recorded; it lapses with this replica's heartbeat");
                }
                // The hold goes before waiters wake: a session that rests is
                // released (its conversation cached) by the time they look.
                drop(slot);
                let _ = done_tx.send(true);
                return;
            };
            let drained_keys: Vec<String> = drained.iter().filter_map(|q| q.key.clone()).collect();
            messages = drained.into_iter().map(|q| q.nudge).collect();
            let (t, c, r, d) = self.next_running(&slot);
            (turn_id, cancel, reason) = (t, c, r);
            let _ = done_tx.send(true);
            done_tx = d;
            if !self.move_lease(&record.id, &turn_id).await {
                slot.state().running = None;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            let received = received_event(&messages).into();
            if let Err(e) = self
                .record(&record.id, Some(&turn_id), vec![received])
                .await
            {
                tracing::error!(session_id = %record.id, error = %e, "failed to record a drained follow-up");
                slot.state().running = None;
                self.release_lease(&record.id, &turn_id).await;
                drop(slot);
                let _ = done_tx.send(true);
                return;
            }
            // Their `message.received` is durable: the records can go.
            self.forget_queued(drained_keys).await;
        }
    }

    /// Replaces the slot's running turn with a fresh one (same task).
    pub(super) fn next_running(
        &self,
        slot: &Slot,
    ) -> (
        TurnId,
        CancellationToken,
        Arc<AtomicU8>,
        watch::Sender<bool>,
    ) {
        let turn_id = TurnId::generate();
        let cancel = self.inner.shutdown.child_token();
        let reason = Arc::new(AtomicU8::new(REASON_NONE));
        let (tx, rx) = watch::channel(false);
        slot.state().running = Some(Running {
            turn_id: turn_id.clone(),
            cancel: cancel.clone(),
            reason: Arc::clone(&reason),
            done: rx,
        });
        (turn_id, cancel, reason, tx)
    }

    /// Runs one turn from `turn.queued`/`turn.started` to its end event.
    /// Returns the reply or the failure message.
    pub(super) async fn run_one(
        &self,
        record: &SessionRecord,
        slot: &SlotRef,
        turn_id: &TurnId,
        messages: &[Nudge],
        cancel: &CancellationToken,
        reason: &AtomicU8,
    ) -> Outcome {
        let started = Instant::now();
        let id = &record.id;
        let fail = |message: String, status: FailStatus, usage: Option<Usage>| -> Event {
            TurnFailed {
                message,
                status,
                usage,
            }
            .into()
        };
        let cancelled_event = |usage: Option<Usage>| -> (Event, String) {
            let (status, message) = match reason.load(Ordering::SeqCst) {
                REASON_STOP => (FailStatus::Cancelled, "turn cancelled by stop"),
                REASON_SHUTDOWN => (
                    FailStatus::Interrupted,
                    "turn interrupted: the host is shutting down",
                ),
                _ => (
                    FailStatus::Interrupted,
                    "turn interrupted by a newer message",
                ),
            };
            (fail(message.to_owned(), status, usage), message.to_owned())
        };

        // A slot under max_running_turns, queueing visibly when none is free.
        let _permit = match &self.inner.turn_slots {
            None => None,
            Some(sem) => match Arc::clone(sem).try_acquire_owned() {
                Ok(p) => Some(p),
                Err(_) => {
                    let position = self.inner.queued.fetch_add(1, Ordering::SeqCst) + 1;
                    let queued = self
                        .record(id, Some(turn_id), vec![TurnQueued { position }.into()])
                        .await;
                    // A cancel wins over a slot freed by the same cancel (a
                    // shutdown ends the running turns, which frees slots).
                    let permit = tokio::select! {
                        biased;
                        _ = cancel.cancelled() => None,
                        p = Arc::clone(sem).acquire_owned() => p.ok(),
                    }
                    .filter(|_| !cancel.is_cancelled());
                    self.inner.queued.fetch_sub(1, Ordering::SeqCst);
                    if let Err(e) = queued {
                        return Outcome::recorded(Err(e.to_string()));
                    }
                    match permit {
                        Some(p) => Some(p),
                        // Shut down before it started: nothing of it ran, so
                        // the next start runs it rather than fail it.
                        None if self.inner.shutdown.is_cancelled() => {
                            return Outcome {
                                result: Err("deferred by a shutdown".into()),
                                end: None,
                                deferred: true,
                            };
                        }
                        None => {
                            let (event, message) = cancelled_event(Some(Usage::default()));
                            let _ = self.record(id, Some(turn_id), vec![event]).await;
                            return Outcome::recorded(Err(message));
                        }
                    }
                }
            },
        };

        if self.inner.shutdown.is_cancelled() {
            // Shut down before it started: kept for the next start, as above.
            return Outcome {
                result: Err("deferred by a shutdown".into()),
                end: None,
                deferred: true,
            };
        }
        // The root agent of this turn: the current tools, and the session's
        // A/B arms (as its log records them) applied.
        // The version of the agent current now: the turn keeps it to its
        // end, whatever a reload does meanwhile.
        let loaded = self.inner.loaded();
        let root = match self.session_arms(slot, id).await {
            Ok(arms) => Host::with_arms(&loaded, self.root_of(&loaded), &arms),
            Err(e) => {
                let message = format!("failed to read the session's A/B arms: {e}");
                let _ = self
                    .record(
                        id,
                        Some(turn_id),
                        vec![fail(message.clone(), FailStatus::Failed, None)],
                    )
                    .await;
                return Outcome::recorded(Err(message));
            }
        };
        let model = root.model.id().to_owned();
        if let Err(e) = self
            .record(
                id,
                Some(turn_id),
                vec![
                    TurnStarted {
                        model: Some(model.clone()),
                    }
                    .into(),
                ],
            )
            .await
        {
            return Outcome::recorded(Err(e.to_string()));
        }
        let transcript = match self.transcript(slot, id, turn_id).await {
            Ok(t) => t,
            Err(e) => {
                let message = format!("failed to rebuild the conversation: {e}");
                let _ = self
                    .record(
                        id,
                        Some(turn_id),
                        vec![fail(message.clone(), FailStatus::Failed, None)],
                    )
                    .await;
                return Outcome::recorded(Err(message));
            }
        };
        // The model sees the turn's prompt exactly as `message.received`
        // records it: coalesced sends joined into one user message.
        let mut history = transcript;
        let prompt = vec![Message::User {
            text: received_event(messages).message,
        }];
        history.extend(prompt.iter().cloned());

        let env = TurnEnv {
            session: SessionInfo {
                id: Some(id.clone()),
                channel: record.channel.clone(),
                mode: record.mode,
                principal: record.principal.clone(),
            },
            workspace_dir: self.inner.store.workspace_dir(id),
            trees: self.inner.trees.clone(),
            state_root: self.inner.store.state_root(),
            dry_run: record.dry_run,
            as_of: record.as_of,
            clock: self.clock(),
            services: Some(Arc::new(Services {
                host: self.clone(),
                session_id: Some(id.clone()),
                principal: record.principal.clone(),
            })),
        };
        let recorder = TurnRecorder {
            host: self.clone(),
            session_id: id.clone(),
            turn_id: turn_id.clone(),
        };
        let steering = SlotSteering { slot: slot.clone() };
        let gate = Gate {
            host: self.clone(),
            session_id: id.clone(),
        };
        // The turn's span: steps and tool calls nest under it (see `agent`).
        let turn_span = tracing::info_span!(
            target: agent::TRACE_TARGET,
            "bdk.turn",
            otel.name = %format_args!("invoke_agent {}", root.name),
            otel.status_code = tracing::field::Empty,
            gen_ai.operation.name = "invoke_agent",
            gen_ai.agent.name = %root.name,
            gen_ai.conversation.id = %id,
            gen_ai.provider.name = agent::provider_name(&model),
            gen_ai.request.model = %root.model_name,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            bdk.turn.id = %turn_id,
            bdk.turn.status = tracing::field::Empty,
            bdk.turn.steps = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        let outcome = agent::run_turn(TurnInput {
            spec: &root,
            history,
            env: &env,
            recorder: &recorder,
            steering: (record.mode == SessionMode::Chat).then_some(&steering as &dyn Steering),
            approvals: &gate,
            cancel: cancel.clone(),
            verbose: true,
        })
        .instrument(turn_span.clone())
        .await;

        {
            let mut state = slot.state();
            if let Some(t) = state.transcript.as_mut() {
                t.extend(prompt);
                t.extend(outcome.added.iter().cloned());
                repair_transcript(t);
            }
        }
        let usage = outcome.usage;
        let (event, result) = match outcome.end {
            TurnEnd::Completed => (
                TurnCompleted {
                    reply: outcome.reply.clone(),
                    usage,
                    model,
                    duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    steps: outcome.steps,
                }
                .into(),
                Ok(outcome.reply),
            ),
            TurnEnd::Failed(message) => (
                fail(message.clone(), FailStatus::Failed, usage),
                Err(message),
            ),
            TurnEnd::Cancelled => {
                let (event, message) = cancelled_event(usage);
                (event, Err(message))
            }
        };
        let status = turn_end(&event).map_or("completed", |end| end.status_str());
        turn_span.record("bdk.turn.status", status);
        turn_span.record("bdk.turn.steps", i64::from(outcome.steps));
        if let Some(usage) = &usage {
            turn_span.record(
                "gen_ai.usage.input_tokens",
                agent::as_i64(usage.input_tokens),
            );
            turn_span.record(
                "gen_ai.usage.output_tokens",
                agent::as_i64(usage.output_tokens),
            );
        }
        if matches!(status, "failed" | "interrupted") {
            turn_span.record("error.type", status);
            turn_span.record("otel.status_code", "ERROR");
        }
        drop(turn_span);
        // The end event is recorded by the caller, together with the
        // session's rest state when nothing is queued: one durable write
        // (one fsync) for both.
        Outcome {
            result,
            end: Some(NewEvent::turn(turn_id, event)),
            deferred: false,
        }
    }

    /// The conversation before the next turn: cached, or rebuilt from the
    /// durable stream after a restart.
    pub(super) async fn transcript(
        &self,
        slot: &Slot,
        id: &SessionId,
        current: &TurnId,
    ) -> HostResult<Vec<Message>> {
        if let Some(t) = slot.state().transcript.clone() {
            return Ok(t);
        }
        let mut events = self
            .inner
            .store
            .read(id, 0)
            .await
            .map_err(session_error(id))?;
        // The running turn's own prompt is added by the caller.
        events.retain(|e| e.turn_id.as_ref() != Some(current));
        let mut t = transcript_from_events(&events);
        repair_transcript(&mut t);
        slot.state().transcript = Some(t.clone());
        Ok(t)
    }
}
