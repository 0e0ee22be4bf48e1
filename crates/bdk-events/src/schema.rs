//! JSON Schemas of the wire types, for documents that describe them (the
//! HTTP API's OpenAPI document). Behind the `schema` feature.
//!
//! The types here serialize by hand or through serde attributes that a
//! derive would not read the same way (the envelope flattens its event into
//! `type` and `data`), so each schema is written against a private shape
//! that is never built; the shape mirrors the serializer beside it, and the
//! HTTP suite validates every answer the server gives against these
//! schemas, so a drift fails there.
#![expect(
    dead_code,
    reason = "shapes only: named by the `JsonSchema` impls, never built"
)]

use std::borrow::Cow;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use crate::schema_by_shape;
use crate::{AbUnit, Admission, EVENT_TYPES, Envelope, SessionId, SessionMode, TurnId, Usage};

impl JsonSchema for SessionId {
    fn schema_name() -> Cow<'static, str> {
        "SessionId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "pattern": "^ses_.+",
            "examples": ["ses_01jh8k3m2n4p5q6r7s8t9v0w1x"],
        })
    }
}

impl JsonSchema for TurnId {
    fn schema_name() -> Cow<'static, str> {
        "TurnId".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string", "pattern": "^turn_.+"})
    }
}

/// The event vocabulary.
struct EventType;

impl JsonSchema for EventType {
    fn schema_name() -> Cow<'static, str> {
        "EventType".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "description": "The event vocabulary; `docs/events.md` describes each type's `data`.",
            "enum": EVENT_TYPES,
        })
    }
}

/// `chat` or `task`.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "SessionMode")]
enum SessionModeShape {
    Chat,
    Task,
}
schema_by_shape!(SessionMode, SessionModeShape);

/// How a follow-up joins a session with a running turn: `preempt` interrupts
/// the running turn, waits for it to settle, then runs the message; `coalesce`
/// queues it, to be picked up at the running turn's next tool boundary or as
/// the next turn.
#[derive(JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(rename = "Admission")]
enum AdmissionShape {
    Preempt,
    Coalesce,
}
schema_by_shape!(Admission, AdmissionShape);

/// One recorded event. `index` starts at 0 and grows by exactly one per
/// session.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Envelope")]
struct EnvelopeShape {
    #[serde(rename = "type")]
    kind: EventType,
    #[schemars(range(min = 0))]
    index: u64,
    session_id: SessionId,
    turn_id: Option<TurnId>,
    at: DateTime<Utc>,
    /// The event's fields; their shape depends on `type`.
    data: BTreeMap<String, Value>,
}
schema_by_shape!(Envelope, EnvelopeShape);

/// Token counts.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Usage")]
struct UsageShape {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
}
schema_by_shape!(Usage, UsageShape);

/// What an `ab.assigned` arm was chosen by.
#[derive(JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "AbUnit")]
enum AbUnitShape {
    Session,
    ChannelKey,
    Pinned,
}
schema_by_shape!(AbUnit, AbUnitShape);
