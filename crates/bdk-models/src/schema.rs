//! JSON Schemas of the cost report's types, for documents that describe
//! them (the HTTP API's OpenAPI document). Behind the `schema` feature.
//!
//! Each schema is derived on a private shape that mirrors the type's
//! serializer (`TurnCost::status` is a `&'static str` the schema names as
//! an enum); the HTTP suite validates every answer the server gives
//! against these schemas, so a drift fails there.
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use bdk_events::{TurnId, Usage, schema_by_shape};
use schemars::JsonSchema;

use crate::prices::{CostTotals, TurnCost};

/// How a turn ended, as the cost report lists it.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "TurnStatus")]
enum TurnStatus {
    Completed,
    Failed,
    Cancelled,
    Interrupted,
}

/// One ended turn's usage and price.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CostTurn")]
struct CostTurn {
    turn_id: Option<TurnId>,
    status: TurnStatus,
    /// `provider/model`; null when the turn never reached a model.
    model: Option<String>,
    /// Null when the server reported no token usage for some step of the
    /// turn (unknown, not zero).
    usage: Option<Usage>,
    /// Null when the turn's start was not recorded.
    duration_ms: Option<u64>,
    /// Null when the model has no known price or the usage is unknown.
    estimated_cost_usd: Option<f64>,
}
schema_by_shape!(TurnCost, CostTurn);

/// Sums over a session's turns.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "CostTotals")]
struct CostTotalsShape {
    turns: u64,
    /// Null when any turn's usage is unknown.
    usage: Option<Usage>,
    duration_ms: u64,
    /// Null when any turn's cost is unknown.
    estimated_cost_usd: Option<f64>,
}
schema_by_shape!(CostTotals, CostTotalsShape);
