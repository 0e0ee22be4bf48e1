//! One model step of a turn: stream it, record what it said, and, when it
//! offers a final reply, let the agent's result gates judge it.

use super::*;

impl Run<'_> {
    /// One model step and its batch. Once `step.started` is recorded the
    /// step is always closed with `step.completed`, whatever ends it
    /// (cancellation, a model error, a limit), so every step in the log is
    /// paired.
    pub(super) async fn step(&mut self) -> State {
        if self.input.cancel.is_cancelled() {
            return State::Done(TurnEnd::Cancelled);
        }
        if self.step >= self.input.spec.max_steps {
            return State::Done(TurnEnd::Failed(format!(
                "turn stopped after {} model steps without a final answer (max_steps); raise max_steps in agent.toml if the agent needs more",
                self.input.spec.max_steps
            )));
        }
        self.step += 1;
        let step = self.step;
        let started = Instant::now();
        if let Err(e) = self.emit(StepStarted { step }).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        let mut closing = StepClose::default();
        let state = self.stream_step(step, &mut closing).await;
        let completed = StepCompleted {
            step,
            duration_ms: elapsed_ms(started),
            finish_reason: closing.finish,
            usage: closing.usage,
        };
        match self.emit(completed).await {
            Err(e) if !matches!(state, State::Done(TurnEnd::Failed(_))) => {
                State::Done(TurnEnd::Failed(e.to_string()))
            }
            _ => state,
        }
    }

    /// The body of [`Run::step`] after `step.started`: streams the model's
    /// answer, then runs its batch. What `step.completed` reports goes into
    /// `closing` as it becomes known.
    async fn stream_step(&mut self, step: u32, closing: &mut StepClose) -> State {
        let request = ModelRequest {
            model: self.input.spec.model_name.clone(),
            system: self.input.spec.system.clone(),
            messages: self.messages.clone(),
            tools: Arc::clone(&self.definitions),
            effort: self.input.spec.effort.clone(),
            // Only the turn's first step is forced: after the forced call's
            // result the model must be free to answer.
            tool_choice: if step == 1 {
                self.input.spec.tool_choice.clone()
            } else {
                None
            },
            max_tokens: self.input.spec.max_output_tokens,
        };
        let cancel = self.input.cancel.clone();
        // The step span covers the model call only; the batch of tool calls
        // that follows gets spans of its own beside it, under the turn.
        let spec = self.input.spec;
        let step_span = tracing::info_span!(
            target: TRACE_TARGET,
            "bdk.step",
            otel.name = %format_args!("chat {}", spec.model_name),
            otel.kind = "client",
            otel.status_code = Empty,
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider_name(spec.model.id()),
            gen_ai.system = provider_name(spec.model.id()),
            gen_ai.request.model = %spec.model_name,
            gen_ai.response.model = Empty,
            gen_ai.response.finish_reasons = Empty,
            gen_ai.usage.input_tokens = Empty,
            gen_ai.usage.output_tokens = Empty,
            gen_ai.conversation.id = self.input.env.session.id.as_ref().map(tracing::field::display),
            gen_ai.agent.name = %spec.name,
            bdk.step = i64::from(step),
            error.type = Empty,
        );
        let mut stream = match spec
            .model
            .step(request, cancel.clone())
            .instrument(step_span.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                record_model_error(&step_span, &e);
                return State::Done(model_end(e));
            }
        };
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut calls = Vec::new();
        // Unknown until the provider reports it; many local servers never do.
        let mut step_usage: Option<Usage> = None;
        let mut finish = None;
        loop {
            let item = tokio::select! {
                biased;
                _ = cancel.cancelled() => return State::Done(TurnEnd::Cancelled),
                item = stream.next() => item,
            };
            let Some(item) = item else { break };
            let recorded = match item {
                Ok(ModelEvent::TextDelta(delta)) => {
                    text.push_str(&delta);
                    self.emit(MessageAppended { delta }).await
                }
                Ok(ModelEvent::ReasoningDelta(delta)) => {
                    reasoning.push_str(&delta);
                    self.emit(ReasoningAppended { delta }).await
                }
                Ok(ModelEvent::ToolCall(call)) => {
                    calls.push(call);
                    Ok(())
                }
                Ok(ModelEvent::Usage(u)) => {
                    step_usage = Some(u);
                    Ok(())
                }
                Ok(ModelEvent::Stop(reason)) => {
                    finish = Some(reason.as_str().to_owned());
                    Ok(())
                }
                Err(e) => {
                    record_model_error(&step_span, &e);
                    return State::Done(model_end(e));
                }
            };
            if let Err(e) = recorded {
                return State::Done(TurnEnd::Failed(e.to_string()));
            }
        }
        drop(stream);
        step_span.record("gen_ai.response.model", spec.model_name.as_str());
        if let Some(u) = &step_usage {
            step_span.record("gen_ai.usage.input_tokens", as_i64(u.input_tokens));
            step_span.record("gen_ai.usage.output_tokens", as_i64(u.output_tokens));
        }
        if let Some(reason) = &finish {
            step_span.record("gen_ai.response.finish_reasons", reason.as_str());
        }
        drop(step_span);
        self.usage = Usage::sum_known(self.usage, step_usage);
        if !reasoning.is_empty()
            && let Err(e) = self.emit(ReasoningCompleted { text: reasoning }).await
        {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        if !text.is_empty()
            && let Err(e) = self.emit(MessageCompleted { text: text.clone() }).await
        {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        self.messages.push(Message::Assistant {
            text: text.clone(),
            tool_calls: calls.clone(),
        });
        closing.finish = finish;
        closing.usage = step_usage;
        if calls.is_empty() {
            if self.input.spec.gates.is_empty() {
                self.reply = text;
                return State::Done(TurnEnd::Completed);
            }
            return State::Check(text);
        }
        self.calls += calls.len();
        if self.calls > MAX_TOOL_CALLS_PER_TURN {
            return State::Done(TurnEnd::Failed(format!(
                "turn stopped after more than {MAX_TOOL_CALLS_PER_TURN} tool calls"
            )));
        }
        self.act(calls).await
    }

    /// Runs the agent's gates, in order, on a reply the model offered as
    /// final, recording each verdict. Every gate accepts: the turn
    /// completes with the reply. A reject before the gate's last attempt:
    /// the feedback goes to the model and the turn takes another step. A
    /// reject on the last attempt, or a fail: the turn fails. A gate that
    /// breaks answers what its `on_error` policy says.
    pub(super) async fn check(&mut self, reply: String) -> State {
        self.attempt += 1;
        let attempt = self.attempt;
        let gates = Arc::clone(&self.input.spec.gates);
        for gate in gates.iter() {
            let spec = gate.spec();
            if self.input.cancel.is_cancelled() {
                return State::Done(TurnEnd::Cancelled);
            }
            let request = GateRequest {
                reply: reply.clone(),
                attempt,
                max_attempts: spec.max_attempts,
                events: self.input.recorder.turn_events().await,
                continuation_token: self.input.recorder.continuation_token().await,
                ctx: self.tool_context(&bdk_events::ids::new_id("gate"), None),
            };
            let (answer, took) = run_check(gate.as_ref(), request).await;
            if matches!(answer, Err(GateError::Cancelled)) || self.input.cancel.is_cancelled() {
                return State::Done(TurnEnd::Cancelled);
            }
            let (answer, error) = match answer {
                Ok(answer) => (answer, None),
                Err(e) => {
                    tracing::warn!(gate = %spec.name, attempt, error = %e, "result gate broke; applying its on_error policy");
                    let answer = match spec.on_error {
                        OnError::Accept => GateAnswer::accept(),
                        OnError::Fail => GateAnswer::Fail {
                            message: format!("the gate {e}"),
                        },
                    };
                    (answer, Some(e.to_string()))
                }
            };
            let mut verdict = GateVerdict {
                gate: spec.name.clone(),
                attempt,
                max_attempts: spec.max_attempts,
                verdict: answer.verdict(),
                feedback: None,
                message: None,
                action: Value::Null,
                duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
                error,
            };
            match &answer {
                GateAnswer::Accept { action } => verdict.action = action.clone(),
                GateAnswer::Reject { feedback } => verdict.feedback = Some(feedback.clone()),
                GateAnswer::Fail { message } => verdict.message = Some(message.clone()),
            }
            if let Err(e) = self.input.recorder.record(verdict.clone().into()).await {
                return State::Done(TurnEnd::Failed(e.to_string()));
            }
            match answer {
                GateAnswer::Accept { .. } => {}
                GateAnswer::Reject { feedback } if attempt >= spec.max_attempts => {
                    return State::Done(TurnEnd::Failed(format!(
                        "result gate `{}` rejected the reply on attempt {attempt} of {} (max_attempts): {feedback}",
                        spec.name, spec.max_attempts
                    )));
                }
                GateAnswer::Reject { .. } => {
                    // The same text the log's conversation rebuilds, so a
                    // restarted host shows the model what this turn did.
                    self.messages.push(Message::User {
                        text: verdict.repair_prompt(),
                    });
                    return State::Step;
                }
                GateAnswer::Fail { message } => {
                    return State::Done(TurnEnd::Failed(format!(
                        "result gate `{}` failed the turn: {message}",
                        spec.name
                    )));
                }
            }
        }
        self.reply = reply;
        State::Done(TurnEnd::Completed)
    }
}
