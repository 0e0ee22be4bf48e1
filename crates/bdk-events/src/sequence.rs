//! Structural rules every session log keeps, as a checker that tests (ours
//! and embedders') run over recorded events.
//!
//! Within a turn, `step.started` opens a step and `step.completed` closes it;
//! `actions.requested` opens the step's batch and `actions.completed` closes
//! it. Whatever ends a turn (completion, a failure, a stop, a preemption, a
//! shutdown), everything it opened is closed before its `turn.completed` or
//! `turn.failed`, and nothing of it comes after.
//!
//! A result gate judges a reply the model offered as final, so each
//! `gate.verdict` comes after the step that produced the reply closed and
//! before the turn ends, never while a step is open.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::{Envelope, Event, TurnId};

#[derive(Default)]
struct Open {
    steps: BTreeSet<u32>,
    batches: BTreeSet<u32>,
}

/// Every break of the rules above in `events` (one session's log, in index
/// order), as readable sentences; empty when the log keeps them. A turn
/// still running when the log was read (no end event yet) is not judged on
/// what it has open.
pub fn violations(events: &[Envelope]) -> Vec<String> {
    let mut out = Vec::new();
    let mut open: HashMap<&TurnId, Open> = HashMap::new();
    let mut ended: HashSet<&TurnId> = HashSet::new();
    for env in events {
        let Some(turn) = env.turn_id.as_ref() else {
            continue;
        };
        let at = |what: &str| format!("event {} ({}): {what}", env.index, env.kind());
        let is_end = matches!(env.event, Event::TurnCompleted(_) | Event::TurnFailed(_));
        let structural = matches!(
            env.event,
            Event::StepStarted(_)
                | Event::StepCompleted(_)
                | Event::ActionsRequested(_)
                | Event::ActionsCompleted(_)
                | Event::GateVerdict(_)
        );
        if ended.contains(turn) && (is_end || structural) {
            out.push(at(&format!("turn {turn} had already ended")));
            continue;
        }
        let state = open.entry(turn).or_default();
        match &env.event {
            Event::StepStarted(s) => {
                let fresh = state.steps.insert(s.step);
                if !fresh {
                    out.push(at(&format!("step {} was already open", s.step)));
                }
            }
            Event::StepCompleted(s) => {
                if !state.steps.remove(&s.step) {
                    out.push(at(&format!("step {} was not open", s.step)));
                }
                if state.batches.contains(&s.step) {
                    out.push(at(&format!(
                        "the batch of step {} has no actions.completed",
                        s.step
                    )));
                    state.batches.remove(&s.step);
                }
            }
            Event::ActionsRequested(a) => {
                let fresh = state.batches.insert(a.step);
                if !fresh {
                    out.push(at(&format!(
                        "the batch of step {} was already open",
                        a.step
                    )));
                }
            }
            Event::ActionsCompleted(a) => {
                let was_open = state.batches.remove(&a.step);
                if !was_open {
                    out.push(at(&format!("no batch of step {} was open", a.step)));
                }
            }
            Event::GateVerdict(g) => {
                for step in &state.steps {
                    out.push(at(&format!(
                        "gate `{}` judged a reply while step {step} was open",
                        g.gate
                    )));
                }
            }
            Event::TurnCompleted(_) | Event::TurnFailed(_) => {
                for step in &state.batches {
                    out.push(at(&format!(
                        "turn {turn} ended with the batch of step {step} open (no actions.completed)"
                    )));
                }
                for step in &state.steps {
                    out.push(at(&format!(
                        "turn {turn} ended with step {step} open (no step.completed)"
                    )));
                }
                open.remove(turn);
                ended.insert(turn);
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

    use super::*;
    use crate::{
        ActionRequest, ActionsCompleted, ActionsRequested, FailStatus, SessionId, StepCompleted,
        StepStarted, TurnFailed,
    };

    fn log(events: Vec<Event>) -> Vec<Envelope> {
        let turn = TurnId::from_string("turn_t");
        events
            .into_iter()
            .enumerate()
            .map(|(i, event)| Envelope {
                index: i as u64,
                session_id: SessionId::from_string("ses_s"),
                turn_id: Some(turn.clone()),
                at: Utc::now(),
                event,
            })
            .collect()
    }

    fn requested() -> Event {
        ActionsRequested {
            step: 1,
            actions: vec![ActionRequest {
                call_id: "c".into(),
                name: "t".into(),
                input: serde_json::json!({}),
            }],
        }
        .into()
    }

    fn failed() -> Event {
        TurnFailed {
            message: "stopped".into(),
            status: FailStatus::Cancelled,
            usage: None,
        }
        .into()
    }

    fn completed_step() -> Event {
        StepCompleted {
            step: 1,
            duration_ms: 0,
            finish_reason: None,
            usage: None,
        }
        .into()
    }

    #[test]
    fn a_closed_turn_passes() {
        let events = log(vec![
            StepStarted { step: 1 }.into(),
            requested(),
            ActionsCompleted {
                step: 1,
                call_ids: vec!["c".into()],
            }
            .into(),
            completed_step(),
            failed(),
        ]);
        assert_eq!(violations(&events), Vec::<String>::new());
    }

    #[test]
    fn a_turn_ending_with_its_batch_or_step_open_is_reported() {
        let events = log(vec![StepStarted { step: 1 }.into(), requested(), failed()]);
        let v = violations(&events);
        assert_eq!(v.len(), 2, "{v:?}");
        assert!(v[0].contains("batch of step 1 open"), "{v:?}");
        assert!(v[1].contains("step 1 open"), "{v:?}");
    }

    fn verdict() -> Event {
        crate::GateVerdict {
            gate: "g".into(),
            attempt: 1,
            max_attempts: 3,
            verdict: crate::Verdict::Accept,
            feedback: None,
            message: None,
            action: serde_json::Value::Null,
            duration_ms: 0,
            error: None,
        }
        .into()
    }

    #[test]
    fn a_verdict_belongs_between_the_step_and_the_turn_end() {
        let good = log(vec![
            StepStarted { step: 1 }.into(),
            completed_step(),
            verdict(),
            failed(),
        ]);
        assert_eq!(violations(&good), Vec::<String>::new());
        let inside = log(vec![
            StepStarted { step: 1 }.into(),
            verdict(),
            completed_step(),
            failed(),
        ]);
        let v = violations(&inside);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("while step 1 was open"), "{v:?}");
        let late = log(vec![failed(), verdict()]);
        assert_eq!(violations(&late).len(), 1);
    }

    #[test]
    fn a_running_turn_is_not_judged_and_late_events_are() {
        let running = log(vec![StepStarted { step: 1 }.into(), requested()]);
        assert!(violations(&running).is_empty());
        let late = log(vec![failed(), completed_step()]);
        assert_eq!(violations(&late).len(), 1);
    }
}
