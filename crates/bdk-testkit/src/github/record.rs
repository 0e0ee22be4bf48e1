//! What the fake promises its clients (the API version, limits, where its
//! errors point) and what it tells tests: the [`Recorded`] requests and the
//! [`Failure`]s to inject.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::text::query_pairs;

/// Where GitHub's error bodies point.
pub(super) const DOCS: &str = "https://docs.github.com/rest";
/// The REST API version the fake accepts in `X-GitHub-Api-Version` (the
/// one the client pins); any other is refused with 400, as GitHub refuses
/// versions it does not know.
pub(super) const API_VERSION: &str = "2022-11-28";
/// The hourly request budget the rate-limit headers report.
pub(super) const RATE_LIMIT: u64 = 5000;
/// The largest comment body GitHub takes.
pub(super) const MAX_COMMENT: usize = 65536;
/// The largest commit status description GitHub takes.
pub(super) const MAX_STATUS_DESCRIPTION: usize = 140;

/// A response to give instead of the real one, for the next `times`
/// requests whose method and path (with its query) match.
#[derive(Debug, Clone)]
pub struct Failure {
    /// `Some("GET")` to match one method only.
    pub method: Option<&'static str>,
    /// A substring of the request's path and query (`/pulls/2/files`,
    /// `page=2`); empty matches every request.
    pub path_contains: String,
    /// The status to answer.
    pub status: u16,
    /// Headers to add, replacing the standard ones of the same name
    /// (`retry-after`, `x-ratelimit-remaining`, ...).
    pub headers: Vec<(String, String)>,
    /// The JSON body; `Null` gives GitHub's `{"message", "documentation_url"}`
    /// with the status's reason as the message.
    pub body: Value,
    /// How many matching requests get it.
    pub times: u32,
}

impl Failure {
    /// Answer `status` once to any method on paths containing `path_contains`.
    pub fn new(status: u16, path_contains: &str) -> Failure {
        Failure {
            method: None,
            path_contains: path_contains.to_owned(),
            status,
            headers: Vec::new(),
            body: Value::Null,
            times: 1,
        }
    }

    /// Only for requests with this method (`"GET"`, `"POST"`, ...).
    pub fn on(mut self, method: &'static str) -> Failure {
        self.method = Some(method);
        self
    }

    /// With this header on the response.
    pub fn header(mut self, name: &str, value: &str) -> Failure {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// With GitHub's error body carrying `message`.
    pub fn message(mut self, message: &str) -> Failure {
        self.body = json!({"message": message, "documentation_url": DOCS});
        self
    }

    /// With this body.
    pub fn body(mut self, body: Value) -> Failure {
        self.body = body;
        self
    }

    /// For the next `times` matching requests.
    pub fn times(mut self, times: u32) -> Failure {
        self.times = times;
        self
    }
}

/// One request the fake received, and the status it answered.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path, as sent (percent-encoded).
    pub path: String,
    /// The raw query string, empty when there was none.
    pub query: String,
    /// The headers, names lower-case (repeated headers joined with `, `).
    pub headers: BTreeMap<String, String>,
    /// The body: JSON, `Null` when empty, or a string when not JSON.
    pub body: Value,
    /// What the fake answered.
    pub status: u16,
}

impl Recorded {
    /// A header's value (`name` in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }

    /// A query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        query_pairs(&self.query)
            .into_iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value)
    }

    /// `METHOD path?query -> status`, as the fake-github binary logs it.
    pub fn summary(&self) -> String {
        let query = if self.query.is_empty() {
            String::new()
        } else {
            format!("?{}", self.query)
        };
        format!("{} {}{} -> {}", self.method, self.path, query, self.status)
    }
}
