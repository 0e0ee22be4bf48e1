//! The reminder dev routes: `GET /v1/dev/reminders` lists every reminder of
//! the agent and `POST /v1/dev/reminders/{id}` fires one now through the same
//! delivery path as its timer. Like the other dev routes they only answer
//! under `--dev`; otherwise they answer 404 like routes that do not exist.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_events::TurnId;
use bdk_scheduler::reminders::{HostReminders, Reminder, ReminderError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::api::True;
use crate::auth::Caller;
use crate::described;
use crate::error::{ApiError, ErrorCode};
use crate::extract::PathParams;
use crate::state::Agent;

/// The path of a reminder.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
pub(crate) struct ReminderPath {
    /// The reminder id (`rem_...`).
    id: String,
}

/// Every reminder of the agent.
#[derive(Serialize, JsonSchema)]
#[schemars(rename = "ReminderList")]
pub(crate) struct Reminders {
    ok: True,
    reminders: Vec<Reminder>,
}

/// The reminder after a fire by hand.
#[derive(Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "ReminderFired")]
pub(crate) struct Fired {
    ok: True,
    reminder: Reminder,
    #[schemars(with = "described::FireResult")]
    result: String,
    /// The turn the fire started; null when it started none.
    turn_id: Option<TurnId>,
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

/// `GET /v1/dev/reminders`: every reminder, oldest first, in any state.
pub(crate) async fn list(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
) -> Result<Json<Reminders>, ApiError> {
    dev_only(&agent)?;
    let reminders = agent.host.list_reminders(None);
    Ok(Json(Reminders {
        ok: True,
        reminders,
    }))
}

/// `POST /v1/dev/reminders/{id}`: fires an armed reminder once, now. A
/// recurring reminder keeps its next scheduled fire; a one-shot completes.
pub(crate) async fn fire(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParams(ReminderPath { id }): PathParams<ReminderPath>,
) -> Result<Json<Fired>, ApiError> {
    dev_only(&agent)?;
    match agent.host.dispatch_reminder(&id).await {
        Ok(out) => Ok(Json(Fired {
            ok: True,
            reminder: out.reminder,
            result: out.result,
            turn_id: out.turn_id,
        })),
        // A host built without reminders has none to fire.
        Err(ReminderError::NotFound(_) | ReminderError::Detached) => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no reminder with id `{id}`"),
        )),
        Err(e @ ReminderError::NotArmed(_)) => {
            Err(ApiError::new(ErrorCode::InvalidRequest, e.to_string()))
        }
        Err(e) => Err(ApiError::internal(&e)),
    }
}
