//! The JSON Schema of an artifact record, for documents that describe it
//! (the HTTP API's OpenAPI document). Behind the `schema` feature.
//!
//! Derived on a private shape that mirrors the record's serializer; the
//! HTTP suite validates every answer the server gives against it.
#![expect(
    dead_code,
    reason = "a shape only: named by the `JsonSchema` impl, never built"
)]

use bdk_events::{SessionId, schema_by_shape};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde_json::Value;

use crate::ArtifactRecord;

/// A durable output a session tagged.
#[derive(JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "Artifact")]
struct Artifact {
    /// `art_…`.
    id: String,
    session_id: Option<SessionId>,
    principal: Option<String>,
    kind: String,
    name: String,
    content_type: String,
    size: u64,
    /// Free-form.
    metadata: Option<Value>,
    created_at: DateTime<Utc>,
}

schema_by_shape!(ArtifactRecord, Artifact);
