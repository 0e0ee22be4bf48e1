//! `conversations.replies` (a thread, cursor-paginated as Slack pages it)
//! and `conversations.info`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use super::args::Args;
use super::reply::Reply;
use super::state::State;

/// The default and the largest `limit` of `conversations.replies`.
pub(super) const MAX_REPLIES_PAGE: usize = 1000;

pub(super) fn replies(state: &mut State, args: &Args) -> Reply {
    let Some(channel) = args
        .text("channel")
        .filter(|channel| state.channels.contains_key(channel))
    else {
        return Reply::error("channel_not_found");
    };
    let Some(ts) = args.text("ts") else {
        return Reply::missing("ts");
    };
    let Some(thread) = state.thread(&channel, &ts) else {
        return Reply::error("thread_not_found");
    };
    let limit = match args.text("limit").map(|limit| limit.parse::<usize>()) {
        None | Some(Ok(0)) => MAX_REPLIES_PAGE,
        Some(Ok(limit)) => limit.min(MAX_REPLIES_PAGE),
        Some(Err(_)) => return Reply::error("invalid_limit"),
    };
    let start = match args.text("cursor") {
        None => 0,
        Some(cursor) => {
            let Some(start) = decode_cursor(&cursor)
                .and_then(|next_ts| thread.iter().position(|message| message["ts"] == next_ts))
            else {
                return Reply::error("invalid_cursor");
            };
            start
        }
    };
    let end = start.saturating_add(limit).min(thread.len());
    let next_cursor = thread
        .get(end)
        .and_then(|next| next["ts"].as_str())
        .map(encode_cursor)
        .unwrap_or_default();
    Reply::ok(json!({
        "messages": thread.get(start..end).unwrap_or_default(),
        "has_more": end < thread.len(),
        "response_metadata": {"next_cursor": next_cursor},
    }))
}

pub(super) fn info(state: &mut State, args: &Args) -> Reply {
    match args
        .text("channel")
        .and_then(|channel| state.channels.get(&channel))
    {
        Some(channel) => Reply::ok(json!({"channel": channel.to_value()})),
        None => Reply::error("channel_not_found"),
    }
}

/// Slack's cursors are opaque base64; the fake's say which message the
/// next page starts at, `next_ts:<ts>`, the way Slack's own do.
fn encode_cursor(ts: &str) -> String {
    STANDARD.encode(format!("next_ts:{ts}"))
}

fn decode_cursor(cursor: &str) -> Option<String> {
    let bytes = STANDARD.decode(cursor.trim()).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.strip_prefix("next_ts:").map(str::to_owned)
}
