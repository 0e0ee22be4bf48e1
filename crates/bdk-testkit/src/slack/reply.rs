//! What a method answers before the server adds Slack's headers: HTTP 200
//! with `{"ok": true, ...}` or `{"ok": false, "error": ...}`, as the Web API
//! answers everything but a rate limit.

use serde_json::{Map, Value, json};

/// An answer, before the standard headers are added.
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
    pub(super) body: ReplyBody,
}

#[derive(Debug)]
pub(super) enum ReplyBody {
    Json(Value),
    /// The upload URL answers plain text.
    Text(String),
}

impl Reply {
    /// `{"ok": true}` plus the fields of `fields` (an object).
    pub(super) fn ok(fields: Value) -> Reply {
        let mut object = match fields {
            Value::Object(object) => object,
            _ => Map::new(),
        };
        object.insert("ok".to_owned(), Value::Bool(true));
        Reply::json(200, Value::Object(object))
    }

    /// `{"ok": false, "error": code}`.
    pub(super) fn error(code: &str) -> Reply {
        Reply::json(200, json!({"ok": false, "error": code}))
    }

    /// `{"ok": false, "error": code}` plus the fields of `extra`.
    pub(super) fn error_with(code: &str, extra: Value) -> Reply {
        let mut reply = Reply::error(code);
        if let (ReplyBody::Json(Value::Object(object)), Value::Object(extra)) =
            (&mut reply.body, extra)
        {
            object.extend(extra);
        }
        reply
    }

    /// An error with Slack's `response_metadata.messages` explaining it.
    pub(super) fn error_explained(code: &str, messages: &[String]) -> Reply {
        Reply::error_with(code, json!({"response_metadata": {"messages": messages}}))
    }

    /// `invalid_arguments` for a required argument left out.
    pub(super) fn missing(name: &str) -> Reply {
        Reply::error_explained(
            "invalid_arguments",
            &[format!("[ERROR] missing required field: {name}")],
        )
    }

    pub(super) fn json(status: u16, body: Value) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Json(body),
        }
    }

    pub(super) fn text(status: u16, text: String) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: ReplyBody::Text(text),
        }
    }

    /// The `error` code of an `ok: false` answer.
    pub(super) fn error_code(&self) -> Option<String> {
        match &self.body {
            ReplyBody::Json(value) if value["ok"] == false => {
                Some(value["error"].as_str().unwrap_or("").to_owned())
            }
            _ => None,
        }
    }

    /// Adds a Slack warning (`warning` and `response_metadata.warnings`)
    /// to a JSON answer.
    pub(super) fn warn(&mut self, warning: &str) {
        let ReplyBody::Json(Value::Object(object)) = &mut self.body else {
            return;
        };
        let joined = match object.get("warning").and_then(Value::as_str) {
            Some(existing) => format!("{existing},{warning}"),
            None => warning.to_owned(),
        };
        object.insert("warning".to_owned(), Value::String(joined));
        let metadata = object
            .entry("response_metadata")
            .or_insert_with(|| json!({}));
        if let Value::Object(metadata) = metadata {
            let warnings = metadata
                .entry("warnings")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(warnings) = warnings {
                warnings.push(Value::String(warning.to_owned()));
            }
        }
    }
}
