//! What a running tool reports before it answers: progress and log
//! messages ([`ToolNote`]), handed to whoever made the call through the
//! [`ToolReporter`] in its context. An MCP caller of a direct call hears them
//! as progress and log notifications; where nobody listens (a turn, the HTTP
//! API) they go to the host's log at debug level. Notes are advice: a
//! reporter never blocks the tool, and a caller that cannot keep up loses
//! some.
//!
//! A leaf: it names no other module of the crate.

use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

/// The levels of a tool's log messages: MCP's (RFC 5424's) names.
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// One report of a running tool.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum ToolNote {
    /// How far the call has come: `progress` (increasing from one report
    /// to the next) of `total` when known.
    Progress {
        /// Work done so far.
        progress: f64,
        /// The whole work, when known.
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        /// What is happening now.
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A log message.
    Log {
        /// One of [`LOG_LEVELS`].
        level: String,
        /// The message (any JSON; usually a string).
        data: Value,
    },
}

/// Where a call's notes go. Cheap to clone; calling it never blocks.
#[derive(Clone)]
pub struct ToolReporter(Arc<dyn Fn(ToolNote) + Send + Sync>);

impl ToolReporter {
    /// A reporter that hands every note to `f` (which must not block).
    pub fn new(f: impl Fn(ToolNote) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Reports one note.
    pub fn report(&self, note: ToolNote) {
        (self.0)(note);
    }
}

impl fmt::Debug for ToolReporter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ToolReporter")
    }
}
