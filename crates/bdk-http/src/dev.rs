//! Schedules in the HTTP app: the dev routes (`GET /v1/dev/schedules`, each
//! schedule's next fire, last run and skipped fires; `POST
//! /v1/dev/schedules/{id}`, a dispatch by hand) and the dispatcher they
//! share with the production cadence (started by [`crate::Background`]).
//!
//! Both go through one [`Dispatcher`] per agent, whose channel hand-off is
//! the agent's own [`Channels`] instance, so a scheduled hand-off joins its
//! conversation through the same one-session-per-key path as a message that
//! arrives over HTTP. The routes only answer under `--dev`; otherwise they
//! answer 404 like routes that do not exist.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_core::host::Host;
use bdk_events::SessionId;
use bdk_scheduler::{
    Dispatcher, HandlerRun, Handoff, HandoffFn, ScheduleError, ScheduleStatus, ToolRun,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::True;
use crate::auth::Caller;
use crate::channels::{Channels, Receive};
use crate::error::{ApiError, ErrorCode};
use crate::extract::PathParams;
use crate::state::Agent;

/// The path of a schedule.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct SchedulePath {
    /// The schedule name (its path under `agent/schedules/` without the
    /// extension).
    id: String,
}

/// Every discovered schedule and its state.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ScheduleList")]
pub(crate) struct Schedules {
    ok: True,
    schedules: Vec<ScheduleStatus>,
}

/// The sessions a fire by hand started or continued.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ScheduleDispatched")]
pub(crate) struct Dispatched {
    ok: True,
    /// The schedule name.
    schedule_id: String,
    session_ids: Vec<SessionId>,
    /// A tool schedule's call, error results included.
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call: Option<ToolRun>,
    /// What a handler schedule's program answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    handler: Option<HandlerRun>,
}

/// The dispatcher of one agent, handing TOML schedules to `channels` when
/// the agent serves any.
pub(crate) fn dispatcher(host: &Host, channels: Option<&Channels>) -> Dispatcher {
    let dispatcher = Dispatcher::new(host.clone());
    let Some(channels) = channels.cloned() else {
        return dispatcher;
    };
    let handoff: HandoffFn = Arc::new(move |h: Handoff| {
        let channels = channels.clone();
        Box::pin(async move {
            let receive = Receive {
                message: h.message,
                continuation_key: h.continuation_key,
                principal: Some(h.principal),
                ..Receive::default()
            };
            channels
                .receive(&h.channel, receive)
                .await
                .map(|accepted| accepted.session_id)
                .map_err(|e| e.to_string())
        })
    });
    dispatcher.with_handoff(handoff)
}

fn dev_only(agent: &Agent) -> Result<(), ApiError> {
    if agent.shared.dev {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::NotFound,
            "dev routes are only served under --dev",
        ))
    }
}

/// `GET /v1/dev/schedules`: every schedule with its next fire, the latest
/// claimed minute, how its last run ended and the fires skipped under the
/// catch-up policy (read from the agent's state, so fires recorded by an
/// earlier production run over the same state root show too).
pub(crate) async fn list_schedules(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
) -> Result<Json<Schedules>, ApiError> {
    dev_only(&agent)?;
    // The dev routes only answer under `--dev`, where nothing fires on a
    // cadence clock: "now" is the host's.
    let now = agent.host.clock().now();
    let schedules =
        bdk_scheduler::schedule_status(agent.host.store(), &agent.host.project().schedules, now)
            .await
            .map_err(|e| ApiError::internal(&e))?;
    Ok(Json(Schedules {
        ok: True,
        schedules,
    }))
}

/// `POST /v1/dev/schedules/{id}`: fires one schedule now, exactly once,
/// through the production path. 404 for an unknown schedule, and for every
/// request when the server does not run with `--dev`.
pub(crate) async fn dispatch_schedule(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParams(SchedulePath { id }): PathParams<SchedulePath>,
) -> Result<Json<Dispatched>, ApiError> {
    dev_only(&agent)?;
    match agent.schedules.dispatch_schedule(&id).await {
        Ok(done) => Ok(Json(Dispatched {
            ok: True,
            schedule_id: done.schedule_id,
            session_ids: done.session_ids,
            tool_call: done.tool_call,
            handler: done.handler,
        })),
        Err(e @ (ScheduleError::Handler { .. } | ScheduleError::HandlerFailed { .. })) => {
            Err(ApiError::new(ErrorCode::HandlerFailed, e.to_string()))
        }
        Err(ScheduleError::Unknown(_)) => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no schedule named `{id}`"),
        )),
        Err(ScheduleError::Host(e)) => Err(e.into()),
        Err(e) => Err(ApiError::internal(&e)),
    }
}
