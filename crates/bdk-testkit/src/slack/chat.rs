//! `chat.postMessage`, `chat.update` and `chat.delete`, with Slack's checks
//! on text and blocks: `no_text`, `msg_too_long` past 40,000 characters,
//! `invalid_blocks` (with the JSON pointer Slack names in
//! `response_metadata.messages`) past 50 blocks or for a block without a
//! string `type`, and `invalid_blocks_format` for blocks text that is not
//! JSON.

use serde_json::{Value, json};

use super::args::Args;
use super::ids::{BOT_ID, BOT_USER};
use super::reply::Reply;
use super::state::{State, bot_message};

/// The longest `text` Slack takes, in characters.
pub(super) const MAX_TEXT: usize = 40_000;
/// The most blocks a message may have.
pub(super) const MAX_BLOCKS: usize = 50;

pub(super) fn post_message(state: &mut State, args: &Args) -> Reply {
    let channel = match channel(state, args) {
        Ok(channel) => channel,
        Err(reply) => return reply,
    };
    let blocks = match blocks(args) {
        Ok(blocks) => blocks,
        Err(reply) => return reply,
    };
    let text = args.text("text").unwrap_or_default();
    if text.is_empty() && blocks.as_ref().is_none_or(is_empty_array) {
        return Reply::error("no_text");
    }
    if text.chars().count() > MAX_TEXT {
        return Reply::error("msg_too_long");
    }
    let thread_ts = args
        .text("thread_ts")
        .map(|thread_ts| state.thread_root(&channel, &thread_ts));
    let ts = state.next_ts();
    let mut message = bot_message(&text, &ts, thread_ts.as_deref());
    if let Some(blocks) = blocks.filter(|blocks| !is_empty_array(blocks)) {
        message["blocks"] = blocks;
    }
    if thread_ts.is_some() && args.flag("reply_broadcast") {
        message["subtype"] = json!("thread_broadcast");
    }
    state.add_message(&channel, message);
    let stored = stored(state, &channel, &ts);
    Reply::ok(json!({"channel": channel, "ts": ts, "message": stored}))
}

pub(super) fn update(state: &mut State, args: &Args) -> Reply {
    let channel = match channel(state, args) {
        Ok(channel) => channel,
        Err(reply) => return reply,
    };
    let Some(ts) = args.text("ts") else {
        return Reply::error("message_not_found");
    };
    let Some(index) = state.find_message(&channel, &ts) else {
        return Reply::error("message_not_found");
    };
    if state.messages[&channel][index]["bot_id"] != BOT_ID {
        return Reply::error("cant_update_message");
    }
    let blocks = match blocks(args) {
        Ok(blocks) => blocks,
        Err(reply) => return reply,
    };
    let text = args.text("text");
    if text.is_none() && blocks.is_none() {
        return Reply::error("no_text");
    }
    if text
        .as_ref()
        .is_some_and(|text| text.chars().count() > MAX_TEXT)
    {
        return Reply::error("msg_too_long");
    }
    let edited_ts = state.next_ts();
    let Some(message) = state
        .messages
        .get_mut(&channel)
        .and_then(|messages| messages.get_mut(index))
        .and_then(Value::as_object_mut)
    else {
        return Reply::error("message_not_found");
    };
    if let Some(text) = text {
        message.insert("text".to_owned(), Value::String(text));
    }
    // Slack keeps a message's blocks when an update leaves them out, and
    // removes them for an empty array.
    match blocks {
        Some(blocks) if is_empty_array(&blocks) => {
            message.remove("blocks");
        }
        Some(blocks) => {
            message.insert("blocks".to_owned(), blocks);
        }
        None => {}
    }
    message.insert(
        "edited".to_owned(),
        json!({"user": BOT_USER, "ts": edited_ts}),
    );
    let stored = Value::Object(message.clone());
    Reply::ok(json!({
        "channel": channel,
        "ts": ts,
        "text": stored["text"],
        "message": stored,
    }))
}

/// `chat.postEphemeral`: a message only `user` sees, kept apart from the
/// conversation's history. `user_not_in_channel` when the user is unknown.
pub(super) fn post_ephemeral(state: &mut State, args: &Args) -> Reply {
    let channel = match channel(state, args) {
        Ok(channel) => channel,
        Err(reply) => return reply,
    };
    let Some(user) = args.text("user").filter(|u| state.users.contains_key(u)) else {
        return Reply::error("user_not_in_channel");
    };
    let text = args.text("text").unwrap_or_default();
    if text.trim().is_empty() && args.text("blocks").is_none() {
        return Reply::error("no_text");
    }
    let ts = state.next_ts();
    state.ephemerals.push(json!({
        "channel": channel,
        "user": user,
        "text": text,
        "thread_ts": args.text("thread_ts"),
        "ts": ts,
    }));
    Reply::ok(json!({"message_ts": ts}))
}

pub(super) fn delete(state: &mut State, args: &Args) -> Reply {
    let channel = match channel(state, args) {
        Ok(channel) => channel,
        Err(reply) => return reply,
    };
    let Some(ts) = args.text("ts") else {
        return Reply::error("message_not_found");
    };
    let Some(index) = state.find_message(&channel, &ts) else {
        return Reply::error("message_not_found");
    };
    let Some(messages) = state.messages.get_mut(&channel) else {
        return Reply::error("message_not_found");
    };
    if messages[index]["bot_id"] != BOT_ID {
        return Reply::error("cant_delete_message");
    }
    let thread_ts = messages[index]["thread_ts"].as_str().map(str::to_owned);
    let has_replies = messages[index]["reply_count"].as_u64().unwrap_or(0) > 0;
    if has_replies {
        // A parent with replies stays as a tombstone, as in Slack, so the
        // thread keeps its head.
        let message = &mut messages[index];
        for field in [
            "bot_id",
            "app_id",
            "bot_profile",
            "blocks",
            "files",
            "edited",
        ] {
            if let Some(object) = message.as_object_mut() {
                object.remove(field);
            }
        }
        message["subtype"] = json!("tombstone");
        message["text"] = json!("This message was deleted.");
        message["user"] = json!("USLACKBOT");
        message["hidden"] = json!(true);
    } else {
        messages.remove(index);
        if let Some(thread_ts) = thread_ts.filter(|thread_ts| *thread_ts != ts) {
            state.refresh_thread(&channel, &thread_ts);
        }
    }
    Reply::ok(json!({"channel": channel, "ts": ts}))
}

/// The conversation id the `channel` argument names, or
/// `channel_not_found`.
fn channel(state: &State, args: &Args) -> Result<String, Reply> {
    args.text("channel")
        .and_then(|channel| state.channel_id(&channel))
        .ok_or_else(|| Reply::error("channel_not_found"))
}

/// The stored message `ts` in `channel`.
fn stored(state: &State, channel: &str, ts: &str) -> Value {
    state
        .find_message(channel, ts)
        .map(|index| state.messages[channel][index].clone())
        .unwrap_or(Value::Null)
}

fn is_empty_array(value: &Value) -> bool {
    value.as_array().is_some_and(Vec::is_empty)
}

/// The `blocks` argument, checked as Slack checks it; `None` when absent.
pub(super) fn blocks(args: &Args) -> Result<Option<Value>, Reply> {
    let Some(blocks) = args.value("blocks") else {
        return Ok(None);
    };
    if let Value::String(text) = blocks {
        if text.trim().is_empty() {
            return Ok(None);
        }
        // The args decoder parses JSON text; a string left is not JSON.
        return Err(Reply::error("invalid_blocks_format"));
    }
    validate_blocks(blocks)
        .map(|()| Some(blocks.clone()))
        .map_err(|message| Reply::error_explained("invalid_blocks", &[message]))
}

/// What Slack refuses with `invalid_blocks`, as its explanation.
pub(super) fn validate_blocks(blocks: &Value) -> Result<(), String> {
    let Some(list) = blocks.as_array() else {
        return Err("[ERROR] must provide an array [json-pointer:/blocks]".to_owned());
    };
    if list.len() > MAX_BLOCKS {
        return Err(format!(
            "[ERROR] no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]"
        ));
    }
    for (index, block) in list.iter().enumerate() {
        let Some(object) = block.as_object() else {
            return Err(format!(
                "[ERROR] must provide an object [json-pointer:/blocks/{index}]"
            ));
        };
        match object.get("type") {
            None => {
                return Err(format!(
                    "[ERROR] missing required field: type [json-pointer:/blocks/{index}]"
                ));
            }
            Some(Value::String(_)) => {}
            Some(_) => {
                return Err(format!(
                    "[ERROR] must be a string [json-pointer:/blocks/{index}/type]"
                ));
            }
        }
    }
    Ok(())
}
