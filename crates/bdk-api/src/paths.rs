//! Every route of an agent's API, relative to the agent's base URL
//! (`http://HOST:PORT/<agent>`, or the server root when it serves one
//! agent).
//!
//! The constants are route templates as the server mounts them, with
//! `{name}` placeholders; the functions fill them in for a client. This is
//! the one place in the workspace that spells a `/v1/` path (an edge rule
//! in xtask checks it).

/// `GET`: liveness.
pub const HEALTH: &str = "/v1/health";
/// `GET`: the server's name and version, and the agent's.
pub const META: &str = "/v1/meta";
/// `GET`: the OpenAPI document of this API.
pub const OPENAPI: &str = "/v1/openapi.json";
/// `POST`: start a session.
pub const SESSION: &str = "/v1/session";
/// `POST`: a follow-up message; `DELETE`: delete the session.
pub const SESSION_ID: &str = "/v1/session/{sessionId}";
/// `GET`: the live NDJSON stream, from `startIndex`.
pub const SESSION_STREAM: &str = "/v1/session/{sessionId}/stream";
/// `GET`: the recorded events, as NDJSON or one JSON document.
pub const SESSION_EVENTS: &str = "/v1/session/{sessionId}/events";
/// `POST`: stop the running turn.
pub const SESSION_STOP: &str = "/v1/session/{sessionId}/stop";
/// `GET`: the session's usage and price, turn by turn.
pub const SESSION_COST: &str = "/v1/session/{sessionId}/cost";
/// `GET`: the calls waiting for a decision.
pub const SESSION_APPROVALS: &str = "/v1/session/{sessionId}/approvals";
/// `POST`: approve or deny one waiting call.
pub const SESSION_APPROVAL: &str = "/v1/session/{sessionId}/approvals/{callId}";
/// `GET`: the caller's sessions, newest first.
pub const SESSIONS: &str = "/v1/sessions";
/// `GET`: the tools a caller can call directly.
pub const TOOLS: &str = "/v1/tools";
/// `GET`: describe one tool; `POST`: call it with no model turn.
pub const TOOL: &str = "/v1/tools/{name}";
/// `GET`: what the agent is made of (`bdk info`).
pub const INFO: &str = "/v1/info";
/// `GET`: the server's recent log lines.
pub const LOGS: &str = "/v1/logs";
/// `GET`: the A/B experiments and their totals.
pub const ABS: &str = "/v1/abs";
/// `GET`: the process's memory figures.
pub const MEMORY: &str = "/v1/memory";
/// `GET`: the artifacts sessions tagged.
pub const ARTIFACTS: &str = "/v1/artifacts";
/// `GET`: one artifact's bytes.
pub const ARTIFACT_CONTENT: &str = "/v1/artifacts/{id}/content";
/// `GET`: pending reminders.
pub const DEV_REMINDERS: &str = "/v1/dev/reminders";
/// `POST`: fire one reminder now.
pub const DEV_REMINDER: &str = "/v1/dev/reminders/{id}";
/// `GET`: the schedules and their last runs.
pub const DEV_SCHEDULES: &str = "/v1/dev/schedules";
/// `POST`: fire one schedule now.
pub const DEV_SCHEDULE: &str = "/v1/dev/schedules/{id}";
/// `GET`: the eval cases.
pub const DEV_EVALS: &str = "/v1/dev/evals";
/// `GET`: the eval run history; `POST`: start a run.
pub const DEV_EVAL_RUNS: &str = "/v1/dev/evals/runs";
/// `GET`: one eval run.
pub const DEV_EVAL_RUN: &str = "/v1/dev/evals/runs/{id}";
/// `POST`: cancel a running eval run.
pub const DEV_EVAL_RUN_CANCEL: &str = "/v1/dev/evals/runs/{id}/cancel";
/// The MCP endpoint (streamable HTTP).
pub const MCP: &str = "/v1/mcp";
/// The MCP endpoint that serves only the agent's tools.
pub const MCP_TOOLS: &str = "/v1/mcp/tools";
/// Where channel ingress routes are nested: `/v1/channels/<channel>/...`.
pub const CHANNELS: &str = "/v1/channels";
/// A channel's own URL (any method the channel declares).
pub const CHANNEL: &str = "/v1/channels/{channel}";
/// A route below a channel's URL.
pub const CHANNEL_PATH: &str = "/v1/channels/{channel}/{path}";
/// `POST`, at the server root, loopback clients only: a GitHub delivery
/// handed to every mounted GitHub channel (what `bdk github send` and
/// `bdk github replay` post to by default).
pub const GITHUB_WEBHOOKS: &str = "/v1/webhooks/github";

/// `GET`, at the server root of a multi-agent server: the agents, as JSON.
pub const AGENTS: &str = "/v1/agents";

/// `template` with each `{name}` placeholder replaced, in order, by the
/// matching value, percent-encoded as one path segment.
///
/// ```
/// assert_eq!(
///     bdk_api::paths::fill(bdk_api::paths::SESSION_APPROVAL, &["ses_1", "call 2"]),
///     "/v1/session/ses_1/approvals/call%202",
/// );
/// ```
pub fn fill(template: &str, values: &[&str]) -> String {
    let mut out = String::with_capacity(template.len() + 32);
    let mut values = values.iter();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        match values.next() {
            Some(v) => encode_segment(v, &mut out),
            None => out.push_str(&rest[open..close]),
        }
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

/// Percent-encodes everything but RFC 3986's unreserved characters, so a
/// value can never add a segment (`/`), a query (`?`) or a `..` step of
/// its own.
fn encode_segment(value: &str, out: &mut String) {
    if value == "." || value == ".." {
        // Unreserved characters, but a whole segment of them is a step.
        for _ in 0..value.len() {
            out.push_str("%2E");
        }
        return;
    }
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_cannot_leave_its_segment() {
        assert_eq!(
            fill(SESSION_ID, &["../x?y=1"]),
            "/v1/session/..%2Fx%3Fy%3D1"
        );
        assert_eq!(fill(SESSION_ID, &[".."]), "/v1/session/%2E%2E");
        assert_eq!(fill(TOOL, &["get_weather"]), "/v1/tools/get_weather");
    }

    #[test]
    fn a_missing_value_leaves_the_placeholder() {
        assert_eq!(
            fill(SESSION_APPROVAL, &["s"]),
            "/v1/session/s/approvals/{callId}"
        );
    }
}
