//! The plain data of a call: what it knows of its session
//! ([`SessionInfo`]), what it returns ([`ToolOutput`]) and what it may tag
//! ([`NewArtifact`]). What a tool is ([`ToolSpec`], [`Effect`],
//! [`Execution`], [`ToolSource`]) is the agent folder's data and lives in
//! `bdk-project`; it is re-exported here.
//!
//! A leaf: it names no other module of the crate, so the workspace and the
//! MCP port can use these types without reaching the runtime. Re-exported
//! from [`crate::tool`], where callers name them.

use bdk_events::{SessionId, SessionMode};
pub use bdk_project::tool::{Effect, Execution, ToolSource, ToolSpec};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Read-only facts about the session a call runs in.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session id, or `None` for an unbound direct call.
    pub id: Option<SessionId>,
    /// The channel (`http`, `cli`, ...).
    pub channel: String,
    /// Chat or task.
    pub mode: SessionMode,
    /// The owning principal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
}

/// An artifact to tag: what [`ToolServices::tag_artifact`] stores and
/// records in `artifact.tagged`.
///
/// [`ToolServices::tag_artifact`]: crate::tool::ToolServices::tag_artifact
#[derive(Clone, Debug, PartialEq)]
pub struct NewArtifact {
    /// What it is (`report`, `patch`, ...).
    pub kind: String,
    /// Its display name.
    pub name: String,
    /// The workspace-relative path of the file it was read from; `None` for
    /// content given inline.
    pub path: Option<String>,
    /// The bytes.
    pub content: Vec<u8>,
    /// The media type.
    pub content_type: String,
    /// Extra facts (a JSON object).
    pub metadata: Value,
}

/// The outcome of a call: what the model sees.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    /// The result: any JSON value (a string is passed verbatim). For a
    /// result of content blocks, their structured content or their text
    /// (see [`super::content`]).
    pub content: Value,
    /// True when the call failed; `content` describes the failure.
    pub is_error: bool,
    /// The MCP content blocks the tool answered with, unchanged; empty for
    /// an ordinary result.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Value>,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<Value>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            blocks: Vec::new(),
        }
    }

    /// A failed result with a message.
    pub fn error(message: impl Into<String>) -> Self {
        Self {
            content: Value::String(message.into()),
            is_error: true,
            blocks: Vec::new(),
        }
    }

    /// The result as text for the model: strings verbatim, other JSON serialized.
    pub fn to_text(&self) -> String {
        match &self.content {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}
