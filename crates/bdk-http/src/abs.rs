//! `GET /v1/abs`: the agent's A/B experiments with each arm's totals and
//! the per-session assignments, folded from the durable event streams of
//! the sessions the caller may see (`bdk_core::ab`; no separate store).
//!
//! Visibility follows the session list: a caller that sees every session
//! (dev mode on loopback, anonymous access) gets totals over every session;
//! a named principal gets totals over its own sessions only, so one tenant
//! never learns about another's traffic.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_core::ab::ExperimentReport;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::True;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::QueryParams;
use crate::state::Agent;

/// Assignments listed per experiment when the query sets no `limit`.
const DEFAULT_LIMIT: usize = 100;
/// The most assignments a caller may ask for per experiment.
const MAX_LIMIT: usize = 10_000;

/// Query of `GET /v1/abs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct AbsQuery {
    /// How many assignments to list per experiment, newest first (default
    /// 100, at most 10000; `0` lists none). The totals always cover every
    /// visible session.
    limit: Option<usize>,
}

/// The A/B report.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AbsResponse")]
pub(crate) struct Abs {
    ok: True,
    experiments: Vec<ExperimentReport>,
}

/// The handler.
pub(crate) async fn abs(
    State(agent): State<Arc<Agent>>,
    caller: Caller,
    QueryParams(query): QueryParams<AbsQuery>,
) -> Result<Json<Abs>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit > MAX_LIMIT {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("limit must be at most {MAX_LIMIT}, not {limit}"),
        ));
    }
    let report = agent.host.abs(caller.read_scope(), limit).await?;
    Ok(Json(Abs {
        ok: True,
        experiments: report.experiments,
    }))
}
