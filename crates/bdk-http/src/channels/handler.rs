//! Channel routes answered by a handler program (`handler = [...]` in a
//! `[[routes]]` table): the request, once authenticated and checked against
//! the route's schemas, goes to the program, whose answer is the HTTP
//! response and, optionally, a message to deliver.
//!
//! The answer is one JSON object:
//!
//! - `status`: 200 to 499 (default 200, or 202 when it delivers without a
//!   `body`);
//! - `body`: any JSON, sent as the response body (default: the usual
//!   `202` acceptance when it delivers, `{"ok": true}` when it does not);
//!   when it delivers and gives a body, the delivery's identifiers are in
//!   the `bdk-session-id`, `bdk-delivery-id` and `bdk-turn-id` headers;
//! - `headers`: extra response headers, names to strings (not the framing
//!   ones: `content-length`, `content-type`, `transfer-encoding`,
//!   `connection` and the like, nor `bdk-*`);
//! - `deliver`: `{message, key?, admission?, mode?, deliveryId?}`, a
//!   message for the conversation `key` names (a new one without a key),
//!   through the same path a templated route takes.
//!
//! A handler that cannot start, fails, hangs past its timeout, floods
//! stdout or answers anything else is `424 handler_failed`, with the
//! details in the server log only (its stderr may hold what the caller
//! must not see); never a 5xx.

use std::collections::BTreeMap;

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use bdk_core::handler::HandlerCall;
use bdk_core::host::Host;
use bdk_core::project::RouteHandler;
use bdk_events::{Admission, SessionMode};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use super::config::RouteConfig;
use crate::error::{ApiError, ErrorCode};

/// The checked request a handler is shown.
pub(super) struct Request<'a> {
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) params: Map<String, Value>,
    pub(super) query: Value,
    pub(super) headers: &'a HeaderMap,
    pub(super) body: Value,
    /// The route's caller; `None` behind a bearer token or a signature.
    pub(super) principal: Option<String>,
}

/// A handler's answer.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandlerAnswer {
    status: Option<u16>,
    body: Option<Value>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    deliver: Option<Deliver>,
}

/// What a handler asks to deliver.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct Deliver {
    pub(super) message: String,
    pub(super) key: Option<String>,
    pub(super) admission: Option<Admission>,
    pub(super) mode: Option<SessionMode>,
    pub(super) delivery_id: Option<String>,
}

/// Response headers a handler may not set: the framing is the server's.
const RESERVED_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "content-type",
    "host",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// What a handler answered, checked: the response it asks for and the
/// message it wants delivered.
pub(super) struct Outcome {
    pub(super) status: Option<StatusCode>,
    pub(super) body: Option<Value>,
    pub(super) headers: HeaderMap,
    pub(super) deliver: Option<Deliver>,
}

/// Runs the route's handler for `request` and checks its answer.
pub(super) async fn run(
    host: &Host,
    channel: &str,
    route: &RouteConfig,
    handler: &RouteHandler,
    request: Request<'_>,
) -> Result<Outcome, ApiError> {
    let headers: Map<String, Value> = handler
        .pass_headers
        .iter()
        .filter_map(|name| {
            let values: Vec<&str> = request
                .headers
                .get_all(name.as_str())
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            (!values.is_empty()).then(|| (name.clone(), Value::String(values.join(", "))))
        })
        .collect();
    let mut fields = Map::new();
    fields.insert("channel".to_owned(), json!(channel));
    fields.insert(
        "route".to_owned(),
        json!(format!("{} {}", route.route.method, route.route.path)),
    );
    fields.insert("method".to_owned(), json!(request.method));
    fields.insert("path".to_owned(), json!(request.path));
    fields.insert("params".to_owned(), Value::Object(request.params));
    fields.insert("query".to_owned(), request.query);
    fields.insert("headers".to_owned(), Value::Object(headers));
    fields.insert("body".to_owned(), request.body);
    let raw = host
        .run_handler(
            &handler.handler,
            HandlerCall {
                kind: "route",
                request: fields,
                principal: request.principal,
                channel: channel.to_owned(),
                session: None,
                cancel: CancellationToken::new(),
            },
        )
        .await
        .map_err(|e| failed(channel, route, e.code(), &e.to_string()))?;
    let parsed: HandlerAnswer = serde_json::from_value(Value::Object(raw)).map_err(|e| {
        failed(
            channel,
            route,
            "handler_bad_answer",
            &format!("its answer does not have the route-handler shape: {e}"),
        )
    })?;
    let status = match parsed.status {
        None => None,
        Some(code) if (200..500).contains(&code) => StatusCode::from_u16(code).ok(),
        Some(code) => {
            return Err(failed(
                channel,
                route,
                "handler_bad_answer",
                &format!("its answer's status {code} is not between 200 and 499"),
            ));
        }
    };
    let mut extra = HeaderMap::new();
    for (name, value) in &parsed.headers {
        let lower = name.to_ascii_lowercase();
        let header = HeaderName::try_from(lower.as_str())
            .ok()
            .filter(|_| !RESERVED_HEADERS.contains(&lower.as_str()) && !lower.starts_with("bdk-"))
            .zip(HeaderValue::try_from(value.as_str()).ok());
        let Some((header, value)) = header else {
            return Err(failed(
                channel,
                route,
                "handler_bad_answer",
                &format!(
                    "its answer sets header `{name}`, which is reserved or not a valid header"
                ),
            ));
        };
        extra.append(header, value);
    }
    let deliver = match parsed.deliver {
        None => None,
        Some(mut deliver) => {
            if deliver.message.trim().is_empty() {
                return Err(failed(
                    channel,
                    route,
                    "handler_bad_answer",
                    "its answer's `deliver.message` is empty",
                ));
            }
            deliver.key = deliver.key.map(|k| k.trim().to_owned());
            if deliver
                .key
                .as_deref()
                .is_some_and(|k| k.is_empty() || k.len() > max_key_bytes())
            {
                return Err(failed(
                    channel,
                    route,
                    "handler_bad_answer",
                    &format!(
                        "its answer's `deliver.key` must be 1 to {} bytes",
                        max_key_bytes()
                    ),
                ));
            }
            deliver.delivery_id = deliver.delivery_id.filter(|d| !d.trim().is_empty());
            Some(deliver)
        }
    };
    Ok(Outcome {
        status,
        body: parsed.body,
        headers: extra,
        deliver,
    })
}

/// The longest conversation key a channel takes.
fn max_key_bytes() -> usize {
    bdk_core::host::MAX_KEY_BYTES
}

/// A handler without a usable answer: `424`, the details in the log only.
pub(super) fn failed(channel: &str, route: &RouteConfig, code: &str, detail: &str) -> ApiError {
    tracing::warn!(channel, route = %route.route, code, error = %detail, "a channel route's handler gave no usable answer");
    ApiError::new(
        ErrorCode::HandlerFailed,
        format!(
            "the route's handler gave no usable answer ({code}); the server log has the details"
        ),
    )
}
