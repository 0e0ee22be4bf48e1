//! The host's side of [`crate::extension`]: [`Host`] implements the narrow
//! [`Runtime`] port extensions reach it through, hands them a
//! [`RuntimeLink`] that does not keep it alive, and finds an extension
//! again by its type.

use std::sync::Arc;

use async_trait::async_trait;
use bdk_events::{Admission, SessionId, SessionMode, TurnId};
use bdk_store::{Store, StoreError};
use serde_json::Value;

use super::{CallOrigin, DirectCall, FollowUp, Host, HostResult};
use crate::clock::Clock;
use crate::extension::{HostExtension, Runtime, RuntimeLink};
use crate::tool::ToolSpec;

#[async_trait]
impl Runtime for Host {
    fn store(&self) -> Arc<dyn Store> {
        Arc::clone(Host::store(self))
    }

    fn clock(&self) -> Arc<dyn Clock> {
        Host::clock(self)
    }

    fn shares_store(&self) -> bool {
        self.coordination().is_some()
    }

    fn tools(&self) -> Vec<ToolSpec> {
        Host::tools(self)
    }

    async fn session_mode(&self, session: &SessionId) -> Result<Option<SessionMode>, StoreError> {
        Ok(self
            .inner
            .store
            .get_session(session)
            .await?
            .map(|record| record.mode))
    }

    async fn wake(&self, session: &SessionId, message: String) -> HostResult<Option<TurnId>> {
        let sent = self
            .send(
                session,
                FollowUp {
                    message,
                    admission: Admission::Coalesce,
                    ..FollowUp::default()
                },
            )
            .await?;
        Ok(sent.turn_id)
    }

    async fn call_tool(
        &self,
        session: &SessionId,
        tool: &str,
        args: Value,
    ) -> HostResult<(bool, Value)> {
        let outcome = Host::call_tool(
            self,
            DirectCall {
                name: tool.to_owned(),
                input: args,
                session_id: Some(session.clone()),
                // The agent's own machinery: built-ins are fine, but no
                // one is there to approve an approval tool.
                origin: CallOrigin::Agent,
                ..DirectCall::default()
            },
        )
        .await?;
        Ok((outcome.is_error, outcome.result))
    }
}

impl Host {
    /// A link to this host for its extensions.
    pub(super) fn runtime_link(&self) -> RuntimeLink {
        let weak = self.downgrade();
        RuntimeLink::new(move || weak.upgrade().map(|h| Arc::new(h) as Arc<dyn Runtime>))
    }

    /// The extension of type `T` this host was built with, if any (e.g.
    /// `bdk_scheduler::Reminders`, for its API).
    pub fn extension<T: HostExtension>(&self) -> Option<Arc<T>> {
        self.inner
            .extensions
            .iter()
            .find_map(|e| Arc::clone(e).into_any().downcast::<T>().ok())
    }

    /// Tells every extension that `session` was deleted.
    pub(super) async fn extensions_session_deleted(&self, session: &SessionId) {
        for extension in &self.inner.extensions {
            extension.session_deleted(session).await;
        }
    }
}
