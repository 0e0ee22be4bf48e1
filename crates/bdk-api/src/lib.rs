//! The HTTP contract of a bdk server: what a caller sends and what it gets
//! back.
//!
//! - [`paths`]: every route, relative to an agent's base URL.
//! - [`sessions`]: the request and response bodies of the session routes.
//! - [`error`]: every error code, with its one HTTP status and meaning,
//!   and the error body.
//! - [`token`]: the continuation tokens a caller holds.
//! - [`stream`]: reading the NDJSON event stream, chunk by chunk, with the
//!   index to resume from.
//! - `client` (feature `client`): a typed async client over reqwest.
//!
//! The events themselves are `bdk-events`' [`Envelope`](bdk_events::Envelope),
//! re-exported as [`events`]. With the `schema` feature every body
//! implements `schemars::JsonSchema`; the server generates its OpenAPI
//! document from these types.
//!
//! ```
//! use bdk_api::sessions::{StartSessionRequest, StartSessionResponse};
//!
//! let body = StartSessionRequest::message("What is the weather in Paris?");
//! assert_eq!(
//!     serde_json::to_value(&body).unwrap(),
//!     serde_json::json!({
//!         "message": "What is the weather in Paris?",
//!         "dryRun": false,
//!         "workspaceFiles": {},
//!     }),
//! );
//!
//! let answer: StartSessionResponse = serde_json::from_str(
//!     r#"{"ok": true, "sessionId": "ses_1", "continuationToken": "http:ses_1.x",
//!         "turnId": "turn_1", "traceUrl": "/v1/session/ses_1/events"}"#,
//! )
//! .unwrap();
//! assert_eq!(answer.session_id.as_str(), "ses_1");
//! ```
#![warn(missing_docs)]

pub mod error;
pub mod literal;
pub mod paths;
pub mod sessions;
pub mod stream;
pub mod token;

#[cfg(feature = "client")]
pub mod client;

pub use bdk_events as events;
pub use error::{ErrorAnswer, ErrorCode};
pub use literal::{False, True};

#[cfg(feature = "client")]
pub use client::{Client, ClientError, Resume};
