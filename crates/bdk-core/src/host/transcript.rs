//! Derivations from a session's log: the model conversation
//! ([`transcript_from_events`], [`repair_transcript`]) and the turn left
//! open ([`open_turn`], [`open_turn_state`]).

use std::collections::HashSet;

use bdk_events::{Envelope, Event, TurnId};
use serde_json::Value;

use bdk_models::Message;

/// A turn that started and never ended, as the log shows it.
pub(crate) struct OpenTurn {
    pub(crate) id: TurnId,
    /// `turn.started` is recorded: the turn may have done things.
    pub(crate) started: bool,
    /// Its prompt, as its `message.received` recorded it.
    pub(crate) prompt: String,
}

/// The open turn of `events`, if any.
pub(crate) fn open_turn_state(events: &[Envelope]) -> Option<OpenTurn> {
    let id = open_turn(events)?;
    let mut started = false;
    let mut prompt = String::new();
    for env in events.iter().filter(|e| e.turn_id.as_ref() == Some(&id)) {
        match &env.event {
            Event::MessageReceived(m) => prompt.clone_from(&m.message),
            Event::TurnStarted(_) => started = true,
            _ => {}
        }
    }
    Some(OpenTurn {
        id,
        started,
        prompt,
    })
}

/// Rebuilds the model conversation from a session's events: prompts,
/// nudges, assistant steps and tool results of every model turn (direct tool
/// calls are not part of the conversation).
pub fn transcript_from_events(events: &[Envelope]) -> Vec<Message> {
    let mut out = Vec::new();
    let mut model_turns: HashSet<&TurnId> = HashSet::new();
    let mut text = String::new();
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
                out.push(Message::User {
                    text: m.message.clone(),
                });
            }
            Event::NudgeDelivered(n) => out.push(Message::User {
                text: n.message.clone(),
            }),
            Event::StepStarted(_) if in_model_turn => {
                text.clear();
                step_flushed = false;
            }
            Event::MessageCompleted(m) if in_model_turn => text = m.text.clone(),
            Event::ActionsRequested(a) if in_model_turn => {
                out.push(Message::Assistant {
                    text: std::mem::take(&mut text),
                    tool_calls: a
                        .actions
                        .iter()
                        .map(|r| bdk_models::ToolCall {
                            id: r.call_id.clone(),
                            name: r.name.clone(),
                            input: r.input.clone(),
                        })
                        .collect(),
                });
                step_flushed = true;
            }
            Event::ActionResult(r) if in_model_turn => out.push(Message::Tool {
                call_id: r.call_id.clone(),
                name: r.name.clone(),
                content: match &r.output {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                is_error: r.is_error,
            }),
            Event::StepCompleted(_) | Event::TurnCompleted(_) | Event::TurnFailed(_)
                if in_model_turn =>
            {
                if !step_flushed && !text.is_empty() {
                    out.push(Message::Assistant {
                        text: std::mem::take(&mut text),
                        tool_calls: Vec::new(),
                    });
                }
                step_flushed = true;
            }
            _ => {}
        }
    }
    out
}

/// Gives every tool call an answer: calls cut off by an interruption get an
/// error result, so the conversation stays valid for every provider.
pub fn repair_transcript(messages: &mut Vec<Message>) {
    let mut answered: HashSet<String> = HashSet::new();
    for m in messages.iter() {
        if let Message::Tool { call_id, .. } = m {
            answered.insert(call_id.clone());
        }
    }
    let mut i = 0;
    while i < messages.len() {
        if let Message::Assistant { tool_calls, .. } = &messages[i] {
            let missing: Vec<Message> = tool_calls
                .iter()
                .filter(|c| !answered.contains(&c.id))
                .map(|c| Message::Tool {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    content: "call interrupted before it returned".into(),
                    is_error: true,
                })
                .collect();
            // Answers sit right after the assistant step and its own answers.
            let mut at = i + 1;
            while at < messages.len() && matches!(messages[at], Message::Tool { .. }) {
                at += 1;
            }
            let n = missing.len();
            for (k, m) in missing.into_iter().enumerate() {
                messages.insert(at + k, m);
            }
            i = at + n;
        } else {
            i += 1;
        }
    }
}

/// The turn of `events` that started and never ended, if any.
pub(crate) fn open_turn(events: &[Envelope]) -> Option<TurnId> {
    let mut open = None;
    for env in events {
        match &env.event {
            Event::MessageReceived(_) | Event::TurnQueued(_) | Event::TurnStarted(_) => {
                open = env.turn_id.clone();
            }
            Event::TurnCompleted(_) | Event::TurnFailed(_) => open = None,
            _ => {}
        }
    }
    open
}
