//! `GET /v1/session/{sessionId}/cost`: per-turn token usage and an estimated cost,
//! folded from the session's `turn.completed` and `turn.failed` events.
//!
//! The folding and the prices live in the core
//! (`bdk_models::prices::session_cost` over the host's price table:
//! built-in list prices plus `agent.toml` `[prices]`), so this route and
//! `bdk cost` report the same numbers. A model without a known price has
//! `estimatedCostUsd: null`, and so do the totals when any turn's model is
//! unpriced.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_events::SessionId;
use bdk_models::prices::{CostTotals, TurnCost, session_cost};
use schemars::JsonSchema;
use serde::Serialize;

use crate::api::True;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::SessionPath;
use crate::state::Agent;

/// A session's token usage and estimated cost: one entry per ended turn,
/// and the totals.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CostResponse")]
pub(crate) struct Cost {
    ok: True,
    session_id: SessionId,
    turns: Vec<TurnCost>,
    totals: CostTotals,
}

/// The handler.
pub(crate) async fn cost(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    SessionPath(id): SessionPath,
) -> Result<Json<Cost>, ApiError> {
    let events = agent.host.events(&id, 0, caller.read_scope()).await?;
    let report = session_cost(&events, &agent.host.prices());
    Ok(Json(Cost {
        ok: True,
        session_id: id,
        turns: report.turns,
        totals: report.totals,
    }))
}

#[cfg(test)]
mod tests {
    use bdk_events::{
        Envelope, Event, FailStatus, SessionId, TurnCompleted, TurnFailed, TurnId, TurnStarted,
        Usage,
    };
    use bdk_models::prices::{Price, PriceTable};
    use chrono::{Duration, Utc};

    use super::*;

    fn env(index: u64, turn: &TurnId, event: Event, ms: i64) -> Envelope {
        Envelope {
            index,
            session_id: SessionId::generate(),
            turn_id: Some(turn.clone()),
            at: Utc::now() + Duration::milliseconds(ms),
            event,
        }
    }

    #[test]
    fn turns_are_priced_by_their_model_and_unknown_models_are_null() {
        let usage = Usage {
            input_tokens: 1_000_000,
            output_tokens: 100_000,
            ..Usage::default()
        };
        let (a, b, c) = (TurnId::generate(), TurnId::generate(), TurnId::generate());
        let events = vec![
            env(
                0,
                &a,
                TurnStarted {
                    model: Some("acme/big".into()),
                }
                .into(),
                0,
            ),
            env(
                1,
                &a,
                TurnCompleted {
                    reply: "x".into(),
                    usage: Some(usage),
                    model: "acme/big".into(),
                    duration_ms: 12,
                    steps: 1,
                }
                .into(),
                12,
            ),
            env(
                2,
                &b,
                TurnStarted {
                    model: Some("scripted/default".into()),
                }
                .into(),
                20,
            ),
            env(
                3,
                &b,
                TurnFailed {
                    message: "stop".into(),
                    status: FailStatus::Cancelled,
                    usage: Some(usage),
                }
                .into(),
                50,
            ),
        ];
        let mut prices = PriceTable::builtin();
        prices.insert("acme/big", Price::new(3.0, 15.0, 0.3, 3.75));
        let report = session_cost(&events, &prices);
        let v = serde_json::to_value(&report).unwrap();
        assert_eq!(v["turns"][0]["estimatedCostUsd"], 4.5);
        assert_eq!(v["turns"][0]["durationMs"], 12);
        assert_eq!(v["turns"][1]["status"], "cancelled");
        assert_eq!(v["turns"][1]["model"], "scripted/default");
        assert_eq!(v["turns"][1]["estimatedCostUsd"], 0.0);
        assert!(v["turns"][1]["durationMs"].as_u64().unwrap() >= 30);
        assert_eq!(v["totals"]["estimatedCostUsd"], 4.5);
        assert_eq!(v["totals"]["usage"]["inputTokens"], 2_000_000);

        // The same session without a price for `acme/big`: that turn and
        // the totals become null.
        let report = session_cost(&events, &PriceTable::builtin());
        let v = serde_json::to_value(&report).unwrap();
        assert!(v["turns"][0]["estimatedCostUsd"].is_null());
        assert!(v["totals"]["estimatedCostUsd"].is_null());
        assert_eq!(v["totals"]["turns"], 2);

        // A turn that never reached a model costs nothing.
        let events = vec![env(
            0,
            &c,
            TurnFailed {
                message: "queued and cancelled".into(),
                status: FailStatus::Cancelled,
                usage: Some(Usage::default()),
            }
            .into(),
            0,
        )];
        let report = session_cost(&events, &PriceTable::empty());
        assert_eq!(report.turns[0].estimated_cost_usd, Some(0.0));

        // A turn whose server reported no usage is unknown, not free, even
        // on a free model; so are the totals it is part of.
        let mut events = events;
        events.push(env(
            1,
            &a,
            TurnCompleted {
                reply: "x".into(),
                usage: None,
                model: "scripted/default".into(),
                duration_ms: 3,
                steps: 1,
            }
            .into(),
            3,
        ));
        let v = serde_json::to_value(session_cost(&events, &PriceTable::builtin())).unwrap();
        assert!(v["turns"][1]["usage"].is_null(), "{v}");
        assert!(v["turns"][1]["estimatedCostUsd"].is_null(), "{v}");
        assert!(v["totals"]["usage"].is_null(), "{v}");
        assert!(v["totals"]["estimatedCostUsd"].is_null(), "{v}");
        assert_eq!(v["totals"]["turns"], 2);
    }
}
