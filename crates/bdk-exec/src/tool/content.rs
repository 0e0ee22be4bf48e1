//! Rich tool results: MCP content blocks.
//!
//! A tool may answer with a list of MCP content blocks instead of one JSON
//! value: text, an image, audio, an embedded resource or a resource link
//! (`{"type": "image", "data": "<base64>", "mimeType": "image/png"}`, ...).
//! The blocks travel unchanged to callers that understand them (the MCP
//! endpoints, the direct-call API, `action.result.content` in the event
//! stream); the model gets [`summary`] as the result's text, and the images
//! themselves where its provider takes images in tool results
//! ([`images`]).
//!
//! [`parse_blocks`] decides what counts as blocks: a non-empty array whose
//! every item has a known `type` and the fields MCP requires of it. Anything
//! else is an ordinary JSON result, so a tool that happens to return an
//! array of objects keeps working as before.
//!
//! Names only [`super::spec`], so discovery and the MCP port can use it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bdk_models::Image;
use serde_json::{Map, Value};

use super::spec::ToolOutput;

/// The most blocks one result may carry.
pub const MAX_BLOCKS: usize = 64;

/// A result of content blocks: `content` is the structured content when
/// there is some and the call succeeded, else the blocks' [`summary`].
pub fn output(blocks: Vec<Value>, structured: Option<Value>, is_error: bool) -> ToolOutput {
    let content = match structured {
        Some(structured) if !is_error => structured,
        _ => Value::String(summary(&blocks)),
    };
    ToolOutput {
        content,
        is_error,
        blocks,
    }
}

/// `Some(blocks)` when `value` is a list of MCP content blocks (see the
/// module docs); `None` when it is any other JSON value.
pub fn parse_blocks(value: &Value) -> Option<Vec<Value>> {
    let items = value.as_array()?;
    if items.is_empty() || items.len() > MAX_BLOCKS {
        return None;
    }
    items
        .iter()
        .all(|b| b.as_object().is_some_and(is_block))
        .then(|| items.clone())
}

/// True when `block` is one MCP content block with the fields its kind
/// requires.
fn is_block(block: &Map<String, Value>) -> bool {
    let text = |k: &str| block.get(k).and_then(Value::as_str).is_some();
    match block.get("type").and_then(Value::as_str) {
        Some("text") => text("text"),
        Some("image" | "audio") => text("mimeType") && is_base64(block.get("data")),
        Some("resource") => block
            .get("resource")
            .and_then(Value::as_object)
            .is_some_and(|r| {
                r.get("uri").and_then(Value::as_str).is_some()
                    && (r.get("text").and_then(Value::as_str).is_some() || is_base64(r.get("blob")))
            }),
        Some("resource_link") => text("uri") && text("name"),
        _ => false,
    }
}

fn is_base64(value: Option<&Value>) -> bool {
    value
        .and_then(Value::as_str)
        .is_some_and(|s| STANDARD.decode(s).is_ok())
}

/// The blocks as text for the model and for text-only callers: text blocks
/// verbatim; every other block as one bracketed line naming it (kind, media
/// type, size, URI), and an embedded text resource with its text. Base64
/// never reaches the text.
pub fn summary(blocks: &[Value]) -> String {
    let lines: Vec<String> = blocks.iter().map(describe).collect();
    lines.join("\n")
}

fn describe(block: &Value) -> String {
    let field = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let kind = field(block, "type");
    match kind.as_str() {
        "text" => field(block, "text"),
        "image" | "audio" => format!(
            "[{kind}: {}, {} bytes]",
            field(block, "mimeType"),
            decoded_len(&field(block, "data"))
        ),
        "resource" => {
            let resource = block.get("resource").unwrap_or(&Value::Null);
            let uri = field(resource, "uri");
            let mime = field(resource, "mimeType");
            let mime = if mime.is_empty() {
                String::new()
            } else {
                format!(", {mime}")
            };
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource: {uri}{mime}]\n{text}"),
                None => format!(
                    "[resource: {uri}{mime}, {} bytes]",
                    decoded_len(&field(resource, "blob"))
                ),
            }
        }
        "resource_link" => format!(
            "[resource link: {} ({})]",
            field(block, "uri"),
            field(block, "name")
        ),
        _ => String::new(),
    }
}

/// The size of base64 data once decoded, without decoding it.
fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

/// The image blocks, as the model messages carry them.
pub fn images(blocks: &[Value]) -> Vec<Image> {
    blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("image"))
        .filter_map(|b| {
            Some(Image {
                media_type: b.get("mimeType")?.as_str()?.to_owned(),
                data: b.get("data")?.as_str()?.to_owned(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mixed() -> Value {
        json!([
            {"type": "text", "text": "Here is the chart."},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "test://doc", "mimeType": "text/plain", "text": "body"}},
            {"type": "resource", "resource": {"uri": "test://bin", "blob": "AAEC"}},
            {"type": "resource_link", "uri": "file:///a.txt", "name": "a.txt"},
        ])
    }

    #[test]
    fn every_kind_is_recognised_and_summarised_without_base64() {
        let blocks = parse_blocks(&mixed()).expect("blocks");
        assert_eq!(blocks.len(), 6);
        assert_eq!(
            summary(&blocks),
            "Here is the chart.\n[image: image/png, 8 bytes]\n[audio: audio/wav, 4 bytes]\n\
             [resource: test://doc, text/plain]\nbody\n[resource: test://bin, 3 bytes]\n\
             [resource link: file:///a.txt (a.txt)]"
        );
        assert_eq!(
            images(&blocks),
            vec![Image {
                media_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }]
        );
    }

    #[test]
    fn anything_short_of_valid_blocks_is_an_ordinary_result() {
        for value in [
            json!([]),
            json!([1, 2]),
            json!([{"type": "text"}]),
            json!([{"type": "text", "text": "a"}, {"name": "x"}]),
            json!([{"type": "image", "data": "not base64!", "mimeType": "image/png"}]),
            json!([{"type": "image", "data": "AAAA"}]),
            json!([{"type": "resource", "resource": {"uri": "x:y"}}]),
            json!([{"type": "resource_link", "uri": "x:y"}]),
            json!([{"type": "video", "data": "AAAA", "mimeType": "video/mp4"}]),
            json!({"type": "text", "text": "a"}),
            json!("text"),
        ] {
            assert_eq!(parse_blocks(&value), None, "{value}");
        }
        let many = Value::Array(vec![json!({"type": "text", "text": "a"}); MAX_BLOCKS + 1]);
        assert_eq!(parse_blocks(&many), None);
    }
}
