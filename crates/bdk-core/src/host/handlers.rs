//! Running handler programs ([`crate::handler`]) for the host's callers: a
//! schedule's fire, a channel route's request.

use std::sync::Arc;
use std::time::Duration;

use bdk_events::SessionMode;
use bdk_events::ids::new_id;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use crate::handler::{self, HandlerCall, HandlerError, NativeRequest, Run};
use crate::project::HandlerSpec;
use crate::tool::{SessionInfo, ToolContext};

use super::Host;
use super::services::Services;

impl Host {
    /// Runs the handler `spec` names once for `call` and returns its answer
    /// (one JSON object), or what went wrong. The program gets the request on stdin
    /// with `kind` and a `context` (`callId`, `channel`, `principal`,
    /// `now`) added, and the host endpoint bound to no session and to
    /// `call.principal`, so it reaches the sessions that principal owns and
    /// those nobody owns.
    pub async fn run_handler(
        &self,
        spec: &HandlerSpec,
        call: HandlerCall,
    ) -> Result<Map<String, Value>, HandlerError> {
        let call_id = new_id(&format!("hdl_{}", call.kind));
        // The caller's token or the host's shutdown stops the run.
        let cancel = self.inner.shutdown.child_token();
        let link = {
            let caller = call.cancel.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                caller.cancelled().await;
                cancel.cancel();
            })
        };
        let now = self.clock().now();
        let state_root = self.inner.store.state_root();
        let record = match &call.session {
            Some(id) => match self.session(id, None).await {
                Ok(record) => Some(record),
                Err(e) => {
                    link.abort();
                    return Err(HandlerError::Failed {
                        program: spec.label().to_owned(),
                        reason: format!("its session cannot be read: {e}"),
                    });
                }
            },
            None => None,
        };
        let ctx = ToolContext {
            call_id: call_id.clone(),
            session: SessionInfo {
                id: call.session.clone(),
                channel: call.channel.clone(),
                mode: record.as_ref().map_or(SessionMode::Chat, |r| r.mode),
                principal: call.principal.clone(),
            },
            // The session's workspace when bound to one; otherwise none:
            // the endpoint refuses what needs one (`artifacts.tag`).
            workspace_dir: match &call.session {
                Some(id) => self.inner.store.workspace_dir(id),
                None => state_root.join("tmp").join(&call_id),
            },
            trees: self.inner.trees.clone(),
            state_root: state_root.clone(),
            now,
            as_of_pinned: false,
            dry_run: record.as_ref().is_some_and(|r| r.dry_run),
            approved_by: None,
            cancel: cancel.clone(),
            services: None,
            reporter: None,
        };
        let services = Arc::new(Services {
            host: self.clone(),
            session_id: call.session.clone(),
            principal: call.principal.clone(),
        });
        let mut request = call.request;
        request.insert("kind".to_owned(), Value::String(call.kind.to_owned()));
        request.insert(
            "context".to_owned(),
            json!({
                "callId": call_id,
                "sessionId": call.session,
                "channel": call.channel,
                "principal": call.principal,
                "now": now.to_rfc3339_opts(SecondsFormat::Millis, true),
            }),
        );
        let command = match spec {
            HandlerSpec::Program(command) => command,
            HandlerSpec::Native { name, timeout } => {
                let result = self
                    .run_native(name, *timeout, request, services, ctx)
                    .await;
                link.abort();
                if let Err(e) = &result {
                    tracing::warn!(kind = call.kind, call_id = %call_id, code = e.code(), error = %e, "a handler gave no answer");
                }
                return result;
            }
            // A kind a newer bdk-project declares and this runtime cannot run.
            other => {
                link.abort();
                return Err(HandlerError::Spawn {
                    program: other.label().to_owned(),
                    reason: "this runtime does not know how to run this kind of handler".into(),
                });
            }
        };
        let grant = match self.inner.endpoint.grant(&ctx, services).await {
            Ok(grant) => Some(grant),
            Err(e) => {
                tracing::warn!(call_id = %call_id, error = %e, "host endpoint unavailable; the handler runs without it");
                None
            }
        };
        let loaded = self.inner.loaded();
        let stdin = Value::Object(request).to_string().into_bytes();
        let result = handler::run(Run {
            command,
            containment: &loaded.containment,
            lib: loaded.project.lib_dir(),
            state_root: &state_root,
            write: Vec::new(),
            call_id: &call_id,
            stdin,
            grant: grant.as_ref(),
            cancel: &cancel,
        })
        .await;
        link.abort();
        // The token dies with the run: every process that could use it is
        // gone once `run` returns.
        drop(grant);
        if let Err(e) = &result {
            tracing::warn!(kind = call.kind, call_id = %call_id, code = e.code(), error = %e, "a handler gave no answer");
        }
        result
    }

    /// A native handler's run: the same request, the services directly,
    /// under the same timeout and cancellation as a program.
    async fn run_native(
        &self,
        name: &str,
        timeout: Duration,
        request: Map<String, Value>,
        services: Arc<Services>,
        ctx: ToolContext,
    ) -> Result<Map<String, Value>, HandlerError> {
        let Some(handler) = self.inner.handlers.get(name).cloned() else {
            return Err(HandlerError::Spawn {
                program: name.to_owned(),
                reason: "no native handler of this name is registered (HostBuilder::handler)"
                    .to_owned(),
            });
        };
        let cancel = ctx.cancel.clone();
        let run = handler.handle(NativeRequest {
            request,
            services,
            ctx,
        });
        tokio::select! {
            answer = tokio::time::timeout(timeout, run) => match answer {
                Ok(answer) => answer,
                Err(_) => Err(HandlerError::TimedOut {
                    program: name.to_owned(),
                    timeout,
                }),
            },
            () = cancel.cancelled() => Err(HandlerError::Cancelled {
                program: name.to_owned(),
            }),
        }
    }
}
