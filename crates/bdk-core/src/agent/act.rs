//! A step's batch of tool calls: run them in order (reads together, each
//! write alone), validate, retry, time out, stub in dry runs, delegate to
//! subagents, and record each result.

use super::*;

impl Run<'_> {
    /// Runs one batch, then steers in waiting nudges and goes back to `Step`.
    pub(super) async fn act(&mut self, calls: Vec<ToolCall>) -> State {
        let step = self.step;
        let requested = ActionsRequested {
            step,
            actions: calls
                .iter()
                .map(|c| ActionRequest {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    input: c.input.clone(),
                })
                .collect(),
        };
        if let Err(e) = self.emit(requested).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        // Group consecutive reads; each write is its own group.
        let mut groups: Vec<Vec<&ToolCall>> = Vec::new();
        for call in &calls {
            let is_read = self.effect_of(&call.name) == Effect::Read;
            match groups.last_mut() {
                Some(g) if is_read && g.iter().all(|c| self.effect_of(&c.name) == Effect::Read) => {
                    g.push(call)
                }
                _ => groups.push(vec![call]),
            }
        }
        let mut results: Vec<(String, String, ToolOutput)> = Vec::with_capacity(calls.len());
        let mut ended = None;
        for group in groups {
            let outs = join_all(group.iter().map(|c| self.execute(c))).await;
            for (call, out) in group.iter().zip(outs) {
                match out {
                    Ok(out) => results.push((call.id.clone(), call.name.clone(), out)),
                    Err(e) => {
                        ended.get_or_insert(TurnEnd::Failed(e.to_string()));
                    }
                }
            }
            if ended.is_none() && self.input.cancel.is_cancelled() {
                ended = Some(TurnEnd::Cancelled);
            }
            if ended.is_some() {
                break;
            }
        }
        if let Some(end) = ended {
            // Whatever ended the turn mid-batch (a stop, a preemption, a
            // shutdown, a failed append), the batch is closed: calls that
            // never ran get an error result, then `actions.completed`.
            self.close_batch(step, &calls, &results).await;
            return State::Done(end);
        }
        for (call_id, name, out) in results {
            self.messages.push(Message::Tool {
                call_id,
                name,
                content: out.to_text(),
                is_error: out.is_error,
                images: content::images(&out.blocks),
            });
        }
        let completed = ActionsCompleted {
            step,
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
        };
        if let Err(e) = self.emit(completed).await {
            return State::Done(TurnEnd::Failed(e.to_string()));
        }
        if let Some(steering) = self.input.steering {
            for nudge in steering.take() {
                let event = NudgeDelivered {
                    message: nudge.message.clone(),
                    delivery_id: nudge.delivery_id.clone(),
                };
                if let Err(e) = self.input.recorder.record(event.into()).await {
                    return State::Done(TurnEnd::Failed(e.to_string()));
                }
                self.messages.push(Message::User {
                    text: nudge.message,
                });
            }
        }
        State::Step
    }

    /// Closes a batch the turn leaves early: an error `action.result` for
    /// each call that has none, then `actions.completed`. Best effort: when
    /// the store refuses appends, the turn is failing for that already.
    async fn close_batch(
        &self,
        step: u32,
        calls: &[ToolCall],
        results: &[(String, String, ToolOutput)],
    ) {
        for call in calls {
            if results.iter().any(|(id, _, _)| *id == call.id) {
                continue;
            }
            let result = ActionResult {
                call_id: call.id.clone(),
                name: call.name.clone(),
                is_error: true,
                output: Value::String("not run: the turn ended before this call".to_owned()),
                content: Vec::new(),
                duration_ms: 0,
                stubbed: false,
            };
            if let Err(e) = self.emit(result).await {
                tracing::warn!(error = %e, "failed to record the result of a call the turn left");
                return;
            }
        }
        let completed = ActionsCompleted {
            step,
            call_ids: calls.iter().map(|c| c.id.clone()).collect(),
        };
        if let Err(e) = self.emit(completed).await {
            tracing::warn!(error = %e, "failed to close the batch of a turn that ended");
        }
    }

    fn effect_of(&self, name: &str) -> Effect {
        self.input
            .spec
            .tools
            .get(name)
            .map_or(Effect::Write, |e| e.tool.spec().effect)
    }

    /// Executes one call and records its `action.result`.
    async fn execute(&self, call: &ToolCall) -> Result<ToolOutput, RecordError> {
        let span = tracing::info_span!(
            target: TRACE_TARGET,
            "bdk.tool_call",
            otel.name = %format_args!("execute_tool {}", call.name),
            otel.status_code = Empty,
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = %call.name,
            gen_ai.tool.call.id = %call.id,
            gen_ai.tool.type = "function",
            gen_ai.conversation.id = self.input.env.session.id.as_ref().map(tracing::field::display),
            bdk.tool.status = Empty,
            error.type = Empty,
        );
        let started = Instant::now();
        let (out, stubbed) = self.execute_inner(call).instrument(span.clone()).await?;
        if out.is_error {
            span.record("bdk.tool.status", "error");
            span.record("error.type", "tool_error");
            span.record("otel.status_code", "ERROR");
        } else {
            span.record("bdk.tool.status", "ok");
        }
        let result = ActionResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            is_error: out.is_error,
            output: out.content.clone(),
            content: out.blocks.clone(),
            duration_ms: elapsed_ms(started),
            stubbed,
        };
        self.emit(result).await?;
        Ok(out)
    }

    async fn execute_inner(&self, call: &ToolCall) -> Result<(ToolOutput, bool), RecordError> {
        let spec = self.input.spec;
        if call.name == TASK_TOOL
            && let Some((_, subagents)) = &spec.task
        {
            return Ok((self.delegate(call, subagents).await?, false));
        }
        let Some(entry) = spec.tools.get(&call.name) else {
            let mut names: Vec<&str> = spec.tools.keys().map(String::as_str).collect();
            if spec.task.is_some() {
                names.push(TASK_TOOL);
            }
            return Ok((
                ToolOutput::error(format!(
                    "unknown tool `{}`; available tools: {}",
                    call.name,
                    names.join(", ")
                )),
                false,
            ));
        };
        if let Some(validator) = &entry.validator
            && let Err(errors) = validator.validate(&call.input)
        {
            return Ok((
                ToolOutput::error(format!(
                    "invalid input for `{}`: {}",
                    call.name,
                    errors.join("; ")
                )),
                false,
            ));
        }
        if let Some(as_of) = self.input.env.as_of
            && let Some(late) = later_than(&call.input, as_of)
        {
            return Ok((
                ToolOutput::error(format!(
                    "time argument {late} is later than the session's asOf ({})",
                    as_of.to_rfc3339()
                )),
                false,
            ));
        }
        let tool_spec = entry.tool.spec();
        if self.input.env.dry_run && tool_spec.effect == Effect::Write {
            return Ok((
                ToolOutput::ok(json!({
                    "dryRun": true,
                    "message": format!("`{}` changes state, so this dry run did not execute it", call.name),
                })),
                true,
            ));
        }
        let mut approved_by = None;
        if tool_spec.needs_approval {
            let approvals = self.input.approvals;
            let parked = approvals.park(&call.id, &call.name, &call.input);
            let requested = ActionApprovalRequested {
                call_id: call.id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
            };
            if let Err(e) = self.input.recorder.record(requested.into()).await {
                approvals.unpark(&call.id);
                return Err(e);
            }
            let decision = tokio::select! {
                d = parked => d.ok(),
                _ = self.input.cancel.cancelled() => None,
            };
            let Some(decision) = decision else {
                approvals.unpark(&call.id);
                return Ok((ToolOutput::error("approval wait cancelled"), false));
            };
            self.input
                .recorder
                .record(
                    ActionApprovalResolved {
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        approved: decision.approved,
                        by: decision.by.clone(),
                        reason: decision.reason.clone(),
                    }
                    .into(),
                )
                .await?;
            if !decision.approved {
                let who = decision.by.as_deref().unwrap_or("a reviewer");
                let why = decision
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                return Ok((
                    ToolOutput::error(format!("call denied by {who}{why}")),
                    false,
                ));
            }
            approved_by = decision.by;
        }
        let attempts = if tool_spec.effect == Effect::Read {
            READ_ATTEMPTS
        } else {
            1
        };
        let timeout = tool_spec.timeout(spec.tool_timeout);
        let mut attempt = 1;
        loop {
            let ctx = self.tool_context(&call.id, approved_by.clone());
            let out = call_with_timeout(&entry.tool, call.input.clone(), ctx, timeout).await;
            if !out.is_error
                || attempt >= attempts
                || !entry.tool.is_transient(&out)
                || self.input.cancel.is_cancelled()
            {
                return Ok((out, false));
            }
            attempt += 1;
            self.emit(ActionToolRetry {
                call_id: call.id.clone(),
                name: call.name.clone(),
                attempt,
                error: out.to_text(),
            })
            .await?;
            let backoff = Duration::from_millis(100 * u64::from(attempt - 1));
            tokio::select! {
                _ = self.input.cancel.cancelled() => return Ok((ToolOutput::error("tool call cancelled"), false)),
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }

    pub(super) fn tool_context(&self, call_id: &str, approved_by: Option<String>) -> ToolContext {
        let env = self.input.env;
        ToolContext {
            call_id: call_id.to_owned(),
            session: env.session.clone(),
            workspace_dir: env.workspace_dir.clone(),
            trees: env.trees.clone(),
            state_root: env.state_root.clone(),
            now: env.as_of.unwrap_or_else(|| env.clock.now()),
            as_of_pinned: env.as_of.is_some(),
            dry_run: env.dry_run,
            approved_by,
            cancel: self.input.cancel.child_token(),
            services: env.services.clone(),
            reporter: None,
        }
    }

    async fn delegate(
        &self,
        call: &ToolCall,
        subagents: &BTreeMap<String, AgentSpec>,
    ) -> Result<ToolOutput, RecordError> {
        let name = call
            .input
            .get("subagent")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let prompt = call
            .input
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(sub) = subagents.get(name) else {
            let names: Vec<&str> = subagents.keys().map(String::as_str).collect();
            return Ok(ToolOutput::error(format!(
                "unknown subagent `{name}`; available subagents: {}",
                names.join(", ")
            )));
        };
        if prompt.trim().is_empty() {
            return Ok(ToolOutput::error("`prompt` must be a non-empty string"));
        }
        self.input
            .recorder
            .record(
                SubagentCalled {
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    prompt: prompt.to_owned(),
                }
                .into(),
            )
            .await?;
        let outcome = Box::pin(run_turn(TurnInput {
            spec: sub,
            history: vec![Message::User {
                text: prompt.to_owned(),
            }],
            env: self.input.env,
            recorder: self.input.recorder,
            steering: None,
            approvals: self.input.approvals,
            cancel: self.input.cancel.child_token(),
            verbose: false,
        }))
        .await;
        let (reply, is_error) = match &outcome.end {
            TurnEnd::Completed => (outcome.reply.clone(), false),
            TurnEnd::Failed(m) => (format!("subagent `{name}` failed: {m}"), true),
            TurnEnd::Cancelled => (format!("subagent `{name}` was cancelled"), true),
        };
        self.input
            .recorder
            .record(
                SubagentCompleted {
                    call_id: call.id.clone(),
                    name: name.to_owned(),
                    reply: reply.clone(),
                    is_error,
                    usage: outcome.usage,
                }
                .into(),
            )
            .await?;
        Ok(ToolOutput {
            content: Value::String(reply),
            is_error,
            blocks: Vec::new(),
        })
    }
}
