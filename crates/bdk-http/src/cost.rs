//! `GET /v1/session/:id/cost`: per-turn token usage and an estimated cost,
//! folded from the session's `turn.completed` and `turn.failed` events.
//!
//! Prices come from [`price`]; a model without a known price has
//! `estimatedCostUsd: null`, and so do the totals when any turn's model is
//! unpriced. The scripted provider costs nothing.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_events::{Envelope, Event, TurnId, Usage};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::Agent;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::SessionPath;

/// US dollars per million tokens of each kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Price {
    pub(crate) input: f64,
    pub(crate) output: f64,
    pub(crate) cache_read: f64,
    pub(crate) cache_write: f64,
}

impl Price {
    const FREE: Price = Price {
        input: 0.0,
        output: 0.0,
        cache_read: 0.0,
        cache_write: 0.0,
    };

    fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, rate: f64| tokens as f64 * rate / 1_000_000.0;
        per(usage.input_tokens, self.input)
            + per(usage.output_tokens, self.output)
            + per(usage.cache_read_tokens, self.cache_read)
            + per(usage.cache_write_tokens, self.cache_write)
    }
}

/// The price of a model, by its `provider/model` id. Remote providers and
/// their price table arrive with the providers work; until then only the
/// offline scripted provider has a (zero) price.
pub(crate) fn price(model: &str) -> Option<Price> {
    let provider = model.split_once('/').map_or(model, |(p, _)| p);
    (provider == "scripted").then_some(Price::FREE)
}

struct TurnCost {
    turn_id: Option<TurnId>,
    status: &'static str,
    model: Option<String>,
    usage: Usage,
    duration_ms: Option<u64>,
}

/// Folds a session's events into one entry per ended turn.
fn turns(events: &[Envelope]) -> Vec<TurnCost> {
    let mut started: HashMap<Option<TurnId>, (Option<String>, DateTime<Utc>)> = HashMap::new();
    let mut out = Vec::new();
    for env in events {
        match &env.event {
            Event::TurnStarted(s) => {
                started.insert(env.turn_id.clone(), (s.model.clone(), env.at));
            }
            Event::TurnCompleted(c) => out.push(TurnCost {
                turn_id: env.turn_id.clone(),
                status: "completed",
                model: Some(c.model.clone()),
                usage: c.usage,
                duration_ms: Some(c.duration_ms),
            }),
            Event::TurnFailed(f) => {
                let start = started.get(&env.turn_id);
                // A failed turn records no duration of its own: measure it
                // from its `turn.started`, when it got that far.
                let duration_ms = start.map(|(_, at)| {
                    u64::try_from((env.at - *at).num_milliseconds().max(0)).unwrap_or(0)
                });
                out.push(TurnCost {
                    turn_id: env.turn_id.clone(),
                    status: match f.status {
                        bdk_events::FailStatus::Failed => "failed",
                        bdk_events::FailStatus::Cancelled => "cancelled",
                        bdk_events::FailStatus::Interrupted => "interrupted",
                    },
                    model: start.and_then(|(m, _)| m.clone()),
                    usage: f.usage.unwrap_or_default(),
                    duration_ms,
                });
            }
            _ => {}
        }
    }
    out
}

fn cost_of(model: Option<&str>, usage: &Usage) -> Option<f64> {
    match model {
        Some(m) => price(m).map(|p| p.cost(usage)),
        // A turn that never reached a model used no tokens.
        None if *usage == Usage::default() => Some(0.0),
        None => None,
    }
}

/// The handler.
pub(crate) async fn cost(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Value>, ApiError> {
    let events = agent.host.events(&id, 0, caller.read_scope()).await?;
    let turns = turns(&events);
    let mut total_usage = Usage::default();
    let mut total_cost = Some(0.0);
    let mut total_ms = 0u64;
    let mut rows = Vec::with_capacity(turns.len());
    for t in &turns {
        let cost = cost_of(t.model.as_deref(), &t.usage);
        total_usage.add(&t.usage);
        total_ms = total_ms.saturating_add(t.duration_ms.unwrap_or(0));
        total_cost = match (total_cost, cost) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
        rows.push(json!({
            "turnId": t.turn_id,
            "status": t.status,
            "model": t.model,
            "usage": t.usage,
            "durationMs": t.duration_ms,
            "estimatedCostUsd": cost,
        }));
    }
    Ok(Json(json!({
        "ok": true,
        "sessionId": id,
        "turns": rows,
        "totals": {
            "turns": rows.len(),
            "usage": total_usage,
            "durationMs": total_ms,
            "estimatedCostUsd": total_cost,
        },
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_is_free_and_remote_is_unknown() {
        let usage = Usage {
            input_tokens: 1000,
            output_tokens: 500,
            ..Usage::default()
        };
        assert_eq!(cost_of(Some("scripted/default"), &usage), Some(0.0));
        assert_eq!(cost_of(Some("scripted"), &usage), Some(0.0));
        assert_eq!(cost_of(Some("xai/grok-4.5"), &usage), None);
        assert_eq!(cost_of(None, &Usage::default()), Some(0.0));
        assert_eq!(cost_of(None, &usage), None);
    }

    #[test]
    fn price_arithmetic() {
        let p = Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.3,
            cache_write: 3.75,
        };
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            cache_read_tokens: 1_000_000,
            cache_write_tokens: 0,
        };
        let c = p.cost(&usage);
        assert!((c - (3.0 + 1.5 + 0.3)).abs() < 1e-9, "{c}");
    }
}
