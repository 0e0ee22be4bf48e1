//! The reminder dev routes: `GET /v1/dev/reminders` lists every reminder of
//! the agent and `POST /v1/dev/reminders/:id` fires one now through the same
//! delivery path as its timer. Like the other dev routes they only answer
//! under `--dev`; otherwise they answer 404 like routes that do not exist.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use bdk_core::reminders::ReminderError;
use serde_json::{Value, json};

use crate::Agent;
use crate::auth::Caller;
use crate::error::{ApiError, ErrorCode};
use crate::extract::PathParam;

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
) -> Result<Json<Value>, ApiError> {
    dev_only(&agent)?;
    let reminders = agent.host.list_reminders(None);
    Ok(Json(json!({"ok": true, "reminders": reminders})))
}

/// `POST /v1/dev/reminders/:id`: fires an armed reminder once, now. A
/// recurring reminder keeps its next scheduled fire; a one-shot completes.
pub(crate) async fn fire(
    State(agent): State<Arc<Agent>>,
    _caller: Caller,
    PathParam(id): PathParam,
) -> Result<Json<Value>, ApiError> {
    dev_only(&agent)?;
    match agent.host.dispatch_reminder(&id).await {
        Ok(out) => Ok(Json(json!({
            "ok": true,
            "reminder": out.reminder,
            "result": out.result,
            "turnId": out.turn_id,
        }))),
        Err(ReminderError::NotFound(_)) => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no reminder with id `{id}`"),
        )),
        Err(e @ ReminderError::NotArmed(_)) => {
            Err(ApiError::new(ErrorCode::InvalidRequest, e.to_string()))
        }
        Err(e) => Err(ApiError::internal(&e)),
    }
}
