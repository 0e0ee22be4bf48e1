//! Approvals asked through the MCP client: while `ask` waits, a call the
//! turn parks for approval (`action.approval_requested`) is put to the
//! client as an `elicitation/create` form (approve, and an optional reason),
//! and the answer resolves the call with the caller's principal, as
//! `POST /v1/session/:sessionId/approvals/:callId` would. Only for a client
//! that declared the elicitation capability on a connection that keeps a
//! session (`bdk mcp` over stdio): the HTTP endpoints are stateless, and a
//! stateless server cannot receive the answer to a request it sends.
//! Without it, or when the client dismisses the form, the call stays
//! parked for the session API, as before.
//!
//! It names the host, rmcp and the turn's event stream (`turn.rs`), nothing
//! of the server around it.

use bdk_core::host::Host;
use bdk_events::{Event, SessionId, TurnId};
use futures::StreamExt;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};

/// Puts one caller's parked calls to its client for one `ask`.
pub(crate) struct Asker {
    peer: Peer<RoleServer>,
    principal: String,
}

impl Asker {
    /// An asker when the client said it can answer forms.
    pub(crate) fn for_client(peer: &Peer<RoleServer>, principal: &str) -> Option<Self> {
        let info = peer.peer_info()?;
        info.capabilities.elicitation.as_ref()?;
        Some(Self {
            peer: peer.clone(),
            principal: principal.to_owned(),
        })
    }

    /// Follows `turn` from event index `from` until it ends, asking about
    /// each call it parks.
    pub(crate) async fn follow(self, host: &Host, session: &SessionId, turn: &TurnId, from: u64) {
        let events = super::turn::events(host, session, turn, from).await;
        futures::pin_mut!(events);
        while let Some(envelope) = events.next().await {
            if let Event::ActionApprovalRequested(parked) = &envelope.event {
                self.ask(host, session, &parked.call_id, &parked.name, &parked.input)
                    .await;
            }
        }
    }

    async fn ask(
        &self,
        host: &Host,
        session: &SessionId,
        call_id: &str,
        name: &str,
        input: &Value,
    ) {
        let schema = json!({
            "type": "object",
            "properties": {
                "approve": {"type": "boolean", "title": "Approve",
                            "description": format!("Run `{name}` as shown")},
                "reason": {"type": "string", "title": "Reason",
                           "description": "Why (optional; recorded with the decision)"},
            },
            "required": ["approve"],
        });
        let Ok(requested_schema) = schema
            .as_object()
            .cloned()
            .ok_or(())
            .and_then(|o| ElicitationSchema::from_json_schema(o).map_err(|_| ()))
        else {
            return;
        };
        let message = format!(
            "The agent wants to run `{name}` with {}. Approve it?",
            compact(input)
        );
        let asked = self
            .peer
            .create_elicitation(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message,
                requested_schema,
            })
            .await;
        let (approved, reason) = match asked {
            Ok(answer) => match answer.action {
                ElicitationAction::Accept => {
                    let content = answer.content.unwrap_or(Value::Null);
                    let approved = content["approve"].as_bool().unwrap_or(false);
                    let reason = content["reason"]
                        .as_str()
                        .map(str::trim)
                        .filter(|r| !r.is_empty())
                        .map(str::to_owned);
                    (approved, reason)
                }
                ElicitationAction::Decline => {
                    (false, Some("declined in the MCP client".to_owned()))
                }
                // Dismissed: no decision; the call stays parked.
                _ => return,
            },
            Err(e) => {
                tracing::debug!(call_id, error = %e, "the MCP client did not answer the approval form; the call stays parked");
                return;
            }
        };
        if let Err(e) = host
            .resolve_approval(session, call_id, approved, reason, Some(&self.principal))
            .await
        {
            // Resolved meanwhile through the session API, or not ours.
            tracing::debug!(call_id, error = %e, "the approval answered through MCP was not applied");
        }
    }
}

/// The input as one line of JSON, cut to 200 characters.
fn compact(input: &Value) -> String {
    let text = input.to_string();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text,
    }
}
