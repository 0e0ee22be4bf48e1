//! `/trace`: a session told in a few lines, one per turn (its message, how
//! it ended, its tool calls), under a line about the whole session.

use bdk_core::trajectory::summarize;
use bdk_events::view::{session_state, turn_end};
use bdk_events::{Envelope, Event};
use serde_json::Value;

use crate::chat::show::{Style, one_line};

/// One turn as `/trace` lists it.
struct TurnLine {
    message: String,
    status: Option<&'static str>,
    tools: Vec<String>,
}

/// The lines of `/trace` for the session of `events`.
pub(crate) fn recap(session: &str, events: &[Envelope], style: Style) -> Vec<String> {
    let summary = summarize(events);
    let mut head = vec![
        session.to_owned(),
        session_state(events).as_str().to_owned(),
        format!(
            "{} turn{}",
            summary.turns,
            if summary.turns == 1 { "" } else { "s" }
        ),
    ];
    if let Some(model) = &summary.model {
        head.push(model.clone());
    }
    if let Some(usage) = summary.usage {
        head.push(format!(
            "{} → {} tokens",
            usage.input_tokens, usage.output_tokens
        ));
    }
    let mut turns: Vec<(Option<String>, TurnLine)> = Vec::new();
    for env in events {
        let turn = env.turn_id.as_ref().map(ToString::to_string);
        match &env.event {
            Event::MessageReceived(m) => turns.push((
                turn,
                TurnLine {
                    message: one_line(&Value::String(m.message.clone()), 50),
                    status: None,
                    tools: Default::default(),
                },
            )),
            Event::ActionResult(r) => {
                if let Some((_, line)) = turns.iter_mut().rev().find(|(t, _)| *t == turn) {
                    let failed = if r.is_error { " ✗" } else { "" };
                    line.tools
                        .push(format!("{}{failed} ({} ms)", r.name, r.duration_ms));
                }
            }
            other => {
                if let Some(end) = turn_end(other)
                    && let Some((_, line)) = turns.iter_mut().rev().find(|(t, _)| *t == turn)
                {
                    line.status = Some(end.status_str());
                }
            }
        }
    }
    let mut lines = vec![head.join(" · ")];
    for (n, (_, t)) in turns.iter().enumerate() {
        let mut line = format!(
            "  {}. “{}” → {}",
            n + 1,
            t.message,
            t.status.unwrap_or("running")
        );
        if !t.tools.is_empty() {
            line.push_str(&format!(" · {}", t.tools.join(", ")));
        }
        lines.push(style.dim(&line));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use bdk_events::{
        ActionResult, FailStatus, MessageReceived, SessionId, SessionWaiting, TurnCompleted,
        TurnFailed, TurnId,
    };

    fn env(index: u64, turn: Option<&str>, event: Event) -> Envelope {
        Envelope {
            index,
            session_id: SessionId::from_string("ses_1"),
            turn_id: turn.map(TurnId::from_string),
            at: chrono::Utc::now(),
            event,
        }
    }

    #[test]
    fn each_turn_is_a_line_with_its_calls_and_ending() {
        let events = vec![
            env(
                0,
                Some("turn_a"),
                Event::MessageReceived(MessageReceived {
                    message: "weather in Paris?".into(),
                    delivery_ids: vec![],
                }),
            ),
            env(
                1,
                Some("turn_a"),
                Event::ActionResult(ActionResult {
                    call_id: "c".into(),
                    name: "get_weather".into(),
                    is_error: false,
                    output: Value::Null,
                    content: Vec::new(),
                    duration_ms: 7,
                    stubbed: false,
                }),
            ),
            env(
                2,
                Some("turn_a"),
                Event::TurnCompleted(TurnCompleted {
                    reply: "Sunny.".into(),
                    usage: None,
                    model: "scripted".into(),
                    duration_ms: 9,
                    steps: 2,
                }),
            ),
            env(3, None, Event::SessionWaiting(SessionWaiting {})),
            env(
                4,
                Some("turn_b"),
                Event::MessageReceived(MessageReceived {
                    message: "slow\nplease".into(),
                    delivery_ids: vec![],
                }),
            ),
            env(
                5,
                Some("turn_b"),
                Event::TurnFailed(TurnFailed {
                    message: "stopped".into(),
                    status: FailStatus::Cancelled,
                    usage: None,
                }),
            ),
        ];
        let lines = recap("ses_1", &events, Style::PLAIN);
        assert_eq!(
            lines[1..],
            [
                "  1. “weather in Paris?” → completed · get_weather (7 ms)",
                "  2. “slow\\nplease” → cancelled",
            ]
        );
        assert!(lines[0].starts_with("ses_1 · "), "{lines:?}");
    }
}
