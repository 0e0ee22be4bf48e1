//! The host's side of reminders: [`Host`] implements the narrow
//! `ReminderHost` port that [`crate::reminders`] fires through, and
//! offers the reminder API as its own methods.

use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::{Admission, SessionId, SessionMode, TurnId};
use bdk_store::Store;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{CallOrigin, DirectCall, FollowUp, Host, HostError};
use crate::reminders::{
    self, Engine, FireOutcome, NewReminder, Reminder, ReminderError, ReminderHost, ReminderResult,
};
use crate::tool::ToolSpec;

#[async_trait]
impl ReminderHost for Host {
    fn reminder_engine(&self) -> Arc<Engine> {
        Host::reminder_engine(self)
    }

    fn store(&self) -> &Arc<dyn Store> {
        Host::store(self)
    }

    fn shares_store(&self) -> bool {
        self.coordination().is_some()
    }

    fn tools(&self) -> Vec<ToolSpec> {
        Host::tools(self)
    }

    async fn session_mode(&self, session: &SessionId) -> ReminderResult<SessionMode> {
        match self.session(session, None).await {
            Ok(record) => Ok(record.mode),
            Err(HostError::SessionNotFound(id)) => Err(ReminderError::SessionNotFound(id)),
            Err(HostError::Store(e)) => Err(ReminderError::Store(e)),
            Err(e) => Err(ReminderError::Delivery(e.to_string())),
        }
    }

    async fn send_coalesced(
        &self,
        session: &SessionId,
        message: String,
    ) -> Result<Option<TurnId>, String> {
        self.send(
            session,
            FollowUp {
                message,
                admission: Admission::Coalesce,
                ..FollowUp::default()
            },
        )
        .await
        .map(|sent| sent.turn_id)
        .map_err(|e| e.to_string())
    }

    async fn call_handler(
        &self,
        session: &SessionId,
        handler: &str,
        args: Value,
    ) -> Result<(bool, Value), String> {
        let outcome = self
            .call_tool(DirectCall {
                name: handler.to_owned(),
                input: args,
                session_id: Some(session.clone()),
                // The agent's own machinery: built-ins are fine, but no
                // one is there to approve an approval tool.
                origin: CallOrigin::Agent,
                ..DirectCall::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok((outcome.is_error, outcome.result))
    }
}

impl Host {
    /// Creates a reminder bound to the chat session `session`.
    pub async fn create_reminder(
        &self,
        session: &SessionId,
        req: NewReminder,
    ) -> ReminderResult<Reminder> {
        reminders::create_reminder(self, session, req).await
    }

    /// The time the reminder timer wakes next: the earliest armed fire,
    /// dropping stale entries on the way. This is the lookup the timer does
    /// after every change, exposed so the runtime benchmark can time it with
    /// many reminders armed.
    #[doc(hidden)]
    pub fn next_reminder_fire(&self) -> Option<DateTime<Utc>> {
        reminders::next_reminder_fire(self)
    }

    /// All reminders, or those of one session, oldest first.
    pub fn list_reminders(&self, session: Option<&SessionId>) -> Vec<Reminder> {
        reminders::list_reminders(self, session)
    }

    /// One reminder.
    pub fn reminder(&self, id: &str) -> Option<Reminder> {
        reminders::reminder(self, id)
    }

    /// Cancels an armed reminder (scoped to `session` when given).
    pub async fn cancel_reminder(
        &self,
        id: &str,
        session: Option<&SessionId>,
    ) -> ReminderResult<Reminder> {
        reminders::cancel_reminder(self, id, session).await
    }

    /// Arms the reminders that other hosts sharing the store (replicas)
    /// created since this host loaded its table, so that a reminder still
    /// fires when the replica that created it is gone. Returns how many it
    /// added. `bdk serve` runs it periodically on replicas.
    pub async fn resync_reminders(&self) -> ReminderResult<usize> {
        reminders::resync_reminders(self).await
    }

    /// Fires a reminder now through the production path (the dev route).
    /// A recurring reminder keeps its next scheduled fire.
    pub async fn dispatch_reminder(&self, id: &str) -> ReminderResult<FireOutcome> {
        reminders::dispatch_reminder(self, id).await
    }

    /// Disarms every armed reminder of `session` (the host deletes it).
    /// Returns how many it disarmed.
    pub(crate) async fn disarm_session_reminders(
        &self,
        session: &SessionId,
    ) -> ReminderResult<usize> {
        reminders::disarm_session_reminders(self, session).await
    }

    /// Loads stored reminders and arms the armed ones (at build).
    pub(crate) async fn rearm_reminders(&self) -> ReminderResult<()> {
        reminders::rearm_reminders(self).await
    }
}
