//! The model conversation of a session: its log's conversation
//! ([`bdk_events::view::conversation`], where the fold's rules live) mapped
//! to the model's messages ([`transcript_from_events`]), and the repair that
//! answers every call a stop or crash cut off ([`repair_transcript`]).

use std::collections::HashSet;

use bdk_events::Envelope;
use bdk_events::view::{Utterance, conversation};
use serde_json::Value;

use bdk_models::Message;

use crate::tool::content;

/// Rebuilds the model conversation from a session's events: prompts,
/// nudges, assistant steps and tool results of every model turn (direct tool
/// calls are not part of the conversation).
pub fn transcript_from_events(events: &[Envelope]) -> Vec<Message> {
    conversation(events)
        .into_iter()
        .map(|u| match u {
            Utterance::User(text) => Message::User {
                text: text.to_owned(),
            },
            Utterance::Assistant { text, calls } => Message::Assistant {
                text: text.to_owned(),
                tool_calls: calls
                    .iter()
                    .map(|r| bdk_models::ToolCall {
                        id: r.call_id.clone(),
                        name: r.name.clone(),
                        input: r.input.clone(),
                    })
                    .collect(),
            },
            Utterance::Result(r) => Message::Tool {
                call_id: r.call_id.clone(),
                name: r.name.clone(),
                content: match &r.output {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                },
                is_error: r.is_error,
                images: content::images(&r.content),
            },
            Utterance::Feedback(verdict) => Message::User {
                text: verdict.repair_prompt(),
            },
        })
        .collect()
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
                    images: Vec::new(),
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
