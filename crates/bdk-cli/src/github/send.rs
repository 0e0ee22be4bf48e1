//! POSTing one delivery to the server and putting its answer in words:
//! shared by `replay` (one delivery) and `forward` (one per relay event).

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

/// How long the server has to answer a delivery. GitHub itself gives up
/// after ten seconds; a server acknowledges first and works after, so a
/// longer wait only covers a slow machine.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// The server's answer to a delivery.
pub(super) struct Answer {
    pub status: reqwest::StatusCode,
    /// The body as text, for `--json` and for answers that are not JSON.
    pub text: String,
    /// The body, when it is JSON.
    pub json: Option<Value>,
}

/// Headers from name/value pairs; the first pair that is not a valid
/// header is the error.
pub(super) fn header_map<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<HeaderMap, String> {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let header = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("`{name}` is not a valid header name"))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| format!("the value of header `{name}` is not a valid header value"))?;
        map.append(header, value);
    }
    Ok(map)
}

/// POSTs `body` with `headers` to `url`. The error is reqwest's, with its
/// causes, when the server could not be reached or did not answer.
pub(super) async fn post(
    client: &reqwest::Client,
    url: &reqwest::Url,
    headers: HeaderMap,
    body: String,
) -> Result<Answer, String> {
    let response = client
        .post(url.clone())
        .headers(headers)
        .body(body)
        .timeout(ANSWER_TIMEOUT)
        .send()
        .await
        .map_err(|e| super::command::chain(&e))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| format!("reading the answer failed: {}", super::command::chain(&e)))?;
    let json = serde_json::from_str(&text).ok();
    Ok(Answer { status, text, json })
}

impl Answer {
    /// True for a 2xx answer: the server took the delivery.
    pub(super) fn accepted(&self) -> bool {
        self.status.is_success()
    }

    /// One line for an accepted delivery: the status, then the sessions
    /// the answer names (or that it was a duplicate).
    pub(super) fn summary(&self) -> String {
        let mut line = self.status.to_string();
        let Some(json) = &self.json else {
            return line;
        };
        let mut sessions = Vec::new();
        collect_sessions(json, &mut sessions);
        if !sessions.is_empty() {
            let noun = if sessions.len() == 1 {
                "session"
            } else {
                "sessions"
            };
            line.push_str(&format!(", {noun} {}", sessions.join(", ")));
        }
        if has_true(json, "duplicate") {
            line.push_str(" (a duplicate delivery: nothing ran again)");
        }
        line
    }

    /// One line for a refused delivery: the status, the error code and the
    /// message of a `{ok:false, error, message}` answer, or the start of
    /// any other body.
    pub(super) fn refusal(&self) -> String {
        let error = self
            .json
            .as_ref()
            .and_then(|j| j.get("error"))
            .and_then(Value::as_str);
        let message = self
            .json
            .as_ref()
            .and_then(|j| j.get("message"))
            .and_then(Value::as_str);
        match (error, message) {
            (Some(error), Some(message)) => format!("{}: {error}: {message}", self.status),
            (Some(one), None) | (None, Some(one)) => format!("{}: {one}", self.status),
            (None, None) if self.text.trim().is_empty() => self.status.to_string(),
            (None, None) => {
                let start: String = self.text.trim().chars().take(200).collect();
                format!("{}: {start}", self.status)
            }
        }
    }
}

/// Every distinct `sessionId` string in the answer, in the order met: a
/// channel's answer names one, the fan-out's may name one per channel.
fn collect_sessions(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if matches!(key.as_str(), "sessionId" | "session_id")
                    && let Value::String(id) = v
                {
                    if !out.contains(id) {
                        out.push(id.clone());
                    }
                } else {
                    collect_sessions(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_sessions(v, out)),
        _ => {}
    }
}

/// True when some object in the answer has `key: true`.
fn has_true(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map
            .iter()
            .any(|(k, v)| (k == key && v == &Value::Bool(true)) || has_true(v, key)),
        Value::Array(items) => items.iter().any(|v| has_true(v, key)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: reqwest::StatusCode::from_u16(status).unwrap(),
            text: body.to_owned(),
            json: serde_json::from_str(body).ok(),
        }
    }

    #[test]
    fn an_accepted_answer_names_its_sessions_once_each() {
        let body = json!({"ok": true, "channels": [
            {"channel": "github", "sessionId": "s-1", "created": true},
            {"channel": "triage", "accepted": {"sessionId": "s-2"}},
            {"channel": "again", "sessionId": "s-1"}
        ]});
        let a = answer(202, &body.to_string());
        assert!(a.accepted());
        assert_eq!(a.summary(), "202 Accepted, sessions s-1, s-2");
        assert_eq!(
            answer(200, r#"{"ok":true,"sessionId":"s-9"}"#).summary(),
            "200 OK, session s-9"
        );
        assert_eq!(answer(200, r#"{"ok":true}"#).summary(), "200 OK");
        assert_eq!(answer(204, "").summary(), "204 No Content");
    }

    #[test]
    fn a_duplicate_is_said_to_be_one() {
        let a = answer(200, r#"{"ok":true,"duplicate":true}"#);
        assert_eq!(
            a.summary(),
            "200 OK (a duplicate delivery: nothing ran again)"
        );
    }

    #[test]
    fn a_refusal_shows_status_error_and_message() {
        let a = answer(
            401,
            r#"{"ok":false,"error":"bad_signature","message":"the signature does not match"}"#,
        );
        assert!(!a.accepted());
        assert_eq!(
            a.refusal(),
            "401 Unauthorized: bad_signature: the signature does not match"
        );
        assert_eq!(
            answer(502, "<html>bad gateway</html>").refusal(),
            "502 Bad Gateway: <html>bad gateway</html>"
        );
        assert_eq!(answer(500, "").refusal(), "500 Internal Server Error");
    }

    #[test]
    fn invalid_headers_are_named() {
        assert!(header_map([("X-GitHub-Event", "push")]).is_ok());
        let bad_name = header_map([("bad name", "x")]).unwrap_err();
        assert!(bad_name.contains("bad name"), "{bad_name}");
        let bad_value = header_map([("X-GitHub-Event", "a\nb")]).unwrap_err();
        assert!(bad_value.contains("X-GitHub-Event"), "{bad_value}");
    }
}
