//! What the fake tells tests: the [`Recorded`] calls with what they were
//! answered, and the [`Failure`]s a test injects.

use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The name [`Recorded::method`] and [`Failure::method`] use for a POST of
/// a file's bytes to the upload URL `files.getUploadURLExternal` handed out.
pub const UPLOAD: &str = "upload";

/// An answer to give instead of the real one, for the next `times` calls
/// of a Web API method.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The Slack method it answers (`chat.update`, or [`UPLOAD`] for the
    /// upload URL), matched exactly; empty matches every call.
    pub method: String,
    /// The HTTP status to answer.
    pub status: u16,
    /// Headers to add, replacing the standard ones of the same name
    /// (`retry-after`, ...). A 429 without a `retry-after` gets
    /// `retry-after: 1`, as Slack always sends one.
    pub headers: Vec<(String, String)>,
    /// The JSON body; `Null` gives `{"ok":false,"error":"ratelimited"}` on a
    /// 429, `internal_error` on a 5xx and `fatal_error` otherwise.
    pub body: Value,
    /// How many matching calls get it.
    pub times: u32,
}

impl Failure {
    /// Answer HTTP `status` once to the next call of `method`.
    pub fn new(status: u16, method: &str) -> Failure {
        Failure {
            method: method.to_owned(),
            status,
            headers: Vec::new(),
            body: Value::Null,
            times: 1,
        }
    }

    /// Answer the next call of `method` with HTTP 200 and
    /// `{"ok":false,"error":error}`, as Slack refuses a call.
    pub fn slack_error(method: &str, error: &str) -> Failure {
        Failure::new(200, method).body(json!({"ok": false, "error": error}))
    }

    /// With this header on the answer.
    pub fn header(mut self, name: &str, value: &str) -> Failure {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// With this body.
    pub fn body(mut self, body: Value) -> Failure {
        self.body = body;
        self
    }

    /// For the next `times` matching calls.
    pub fn times(mut self, times: u32) -> Failure {
        self.times = times;
        self
    }

    /// The body to answer: the one given, or Slack's for the status.
    pub(super) fn answer_body(&self) -> Value {
        if !self.body.is_null() {
            return self.body.clone();
        }
        let error = match self.status {
            429 => "ratelimited",
            500..=599 => "internal_error",
            _ => "fatal_error",
        };
        json!({"ok": false, "error": error})
    }
}

/// One call the fake received, and what it answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The Slack method (`chat.postMessage`), [`UPLOAD`] for a POST to an
    /// upload URL, or the path for anything else.
    pub method: String,
    /// `GET`, `POST`, ...
    pub http_method: String,
    /// The arguments as one JSON object: query string and body merged (the
    /// body wins), form and multipart fields as strings, JSON-valued
    /// fields (`blocks`, `files`, `attachments`, `metadata`) parsed to
    /// JSON. `Null` when the body could not be decoded. For an upload:
    /// `{"file_id", "length"}`.
    pub args: Value,
    /// The headers, names lower-case (repeated headers joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The HTTP status answered.
    pub status: u16,
    /// The `error` code when the answer was `ok: false`.
    pub error: Option<String>,
    /// The JSON answered (`Null` for the upload URL's text answer).
    pub response: Value,
}

impl Recorded {
    /// A header's value (`name` in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// An argument as a string (`None` when absent or not a string).
    pub fn arg(&self, name: &str) -> Option<&str> {
        self.args.get(name).and_then(Value::as_str)
    }

    /// Whether the call was answered HTTP 200 with `ok: true` (or, for an
    /// upload, with 200).
    pub fn ok(&self) -> bool {
        self.status == 200 && self.error.is_none()
    }

    /// `chat.postMessage -> ok`, `chat.update -> 429`,
    /// `chat.postMessage -> channel_not_found`: the method and the HTTP
    /// status when it was not 200, else the error code or `ok`.
    pub fn summary(&self) -> String {
        let outcome = if self.status != 200 {
            self.status.to_string()
        } else {
            self.error.clone().unwrap_or_else(|| "ok".to_owned())
        };
        format!("{} -> {outcome}", self.method)
    }
}
