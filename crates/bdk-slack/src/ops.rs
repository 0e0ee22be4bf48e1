//! `slack.*`: the host service for subprocess tools and handlers, with the
//! channel's token.
//!
//! | Operation | Arguments | Result |
//! | --- | --- | --- |
//! | `slack.post` | `text`, optional `channel`, `thread_ts`, `blocks` | `{channel, ts}` |
//! | `slack.update` | `ts`, `text`, optional `channel`, `blocks` | `{channel, ts}` |
//! | `slack.thread` | optional `channel`, `thread_ts`, `limit` | `{messages}` |
//!
//! A call bound to a session of a Slack thread defaults `channel` and
//! `thread_ts` to that thread; an unbound call names them. Text is
//! Markdown, converted to mrkdwn. Writes are refused in dry-run calls.

use bdk_core::extension::{OperationCall, OperationError};
use bdk_core::tool::ToolContext;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::ApiError;
use crate::mrkdwn;
use crate::pack::Inner;
use crate::thread::parse_key;

/// The operations.
pub(crate) const OPERATIONS: &[&str] = &["slack.post", "slack.update", "slack.thread"];

/// The most thread messages `slack.thread` returns.
const MAX_THREAD: u64 = 200;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    channel: Option<String>,
    thread_ts: Option<String>,
    ts: Option<String>,
    text: Option<String>,
    blocks: Option<Value>,
    limit: Option<u64>,
}

fn invalid(m: impl Into<String>) -> OperationError {
    OperationError::InvalidArgs(m.into())
}

fn unavailable(e: &ApiError) -> OperationError {
    OperationError::Unavailable(format!("{} ({})", e, e.code()))
}

fn check_ts(ts: &str, key: &str) -> Result<(), OperationError> {
    let ok = ts.split_once('.').is_some_and(|(s, f)| {
        !s.is_empty()
            && !f.is_empty()
            && s.chars().all(|c| c.is_ascii_digit())
            && f.chars().all(|c| c.is_ascii_digit())
    });
    if ok {
        Ok(())
    } else {
        Err(invalid(format!(
            "`{key}` must be a message ts such as \"1700000000.000100\", not `{ts}`"
        )))
    }
}

/// The conversation and thread of the Slack thread session a call is
/// bound to.
async fn session_thread(inner: &Inner, ctx: &ToolContext) -> Option<(String, String)> {
    let id = ctx.session.id.as_ref()?;
    let store = inner.store()?;
    let record = store.get_session(id).await.ok()??;
    inner.packs.contains_key(&record.channel).then_some(())?;
    let key = record
        .continuation_token
        .strip_prefix(&format!("{}:", record.channel))?;
    parse_key(key).map(|(c, t)| (c.to_owned(), t.to_owned()))
}

/// Answers one `slack.*` operation.
pub(crate) async fn operation(
    inner: &Inner,
    call: OperationCall<'_>,
) -> Result<Value, OperationError> {
    let args: Args = serde_json::from_value(call.args)
        .map_err(|e| invalid(format!("invalid args for `{}`: {e}", call.op)))?;
    let writes = call.op != "slack.thread";
    if writes && call.ctx.dry_run {
        return Err(OperationError::DryRun(call.op.to_owned()));
    }
    let session_channel = &call.ctx.session.channel;
    let pack = inner
        .pack_for(session_channel)
        .ok_or_else(|| OperationError::Unavailable("this agent has no Slack channel".to_owned()))?;
    // The thread of a session bound to a Slack channel.
    let bound = session_thread(inner, call.ctx).await;
    let channel = args
        .channel
        .clone()
        .or_else(|| bound.as_ref().map(|(c, _)| c.clone()))
        .ok_or_else(|| {
            invalid("give the conversation's `channel` id (the call is bound to no Slack thread)")
        })?;
    if !bdk_core::project::slack::is_conversation_id(&channel) {
        return Err(invalid(format!(
            "`channel` must be a conversation id such as C0123ABCD, not `{channel}`"
        )));
    }
    let same_conversation = bound.as_ref().is_some_and(|(c, _)| *c == channel);
    let thread_ts = args.thread_ts.clone().or_else(|| {
        same_conversation
            .then(|| bound.as_ref().map(|(_, t)| t.clone()))
            .flatten()
    });
    if let Some(t) = &thread_ts {
        check_ts(t, "thread_ts")?;
    }
    if let Some(blocks) = &args.blocks
        && !blocks.is_array()
    {
        return Err(invalid("`blocks` must be an array of Block Kit blocks"));
    }
    let client = pack.client().map_err(|e| unavailable(&e))?;
    match call.op {
        "slack.post" | "slack.update" => {
            let text = args
                .text
                .as_deref()
                .filter(|t| !t.trim().is_empty())
                .ok_or_else(|| invalid("give the message's `text`"))?;
            let text = mrkdwn::to_mrkdwn(text);
            if text.chars().count() > 40_000 {
                return Err(invalid("`text` is longer than Slack's 40,000 characters"));
            }
            let answer = if call.op == "slack.post" {
                client
                    .call(
                        "chat.postMessage",
                        json!({"channel": channel, "thread_ts": thread_ts, "text": text, "blocks": args.blocks}),
                    )
                    .await
            } else {
                let ts = args
                    .ts
                    .as_deref()
                    .ok_or_else(|| invalid("give the `ts` of the message to update"))?;
                check_ts(ts, "ts")?;
                client
                    .call(
                        "chat.update",
                        json!({"channel": channel, "ts": ts, "text": text, "blocks": args.blocks}),
                    )
                    .await
            }
            .map_err(|e| unavailable(&e))?;
            Ok(json!({"channel": answer.get("channel"), "ts": answer.get("ts")}))
        }
        "slack.thread" => {
            let thread_ts =
                thread_ts.ok_or_else(|| invalid("give the `thread_ts` of the thread to read"))?;
            let limit = args.limit.unwrap_or(100).clamp(1, MAX_THREAD);
            let answer = client
                .call(
                    "conversations.replies",
                    json!({"channel": channel, "ts": thread_ts, "limit": limit}),
                )
                .await
                .map_err(|e| unavailable(&e))?;
            let messages: Vec<Value> = answer
                .get("messages")
                .and_then(Value::as_array)
                .map(|m| {
                    m.iter()
                        .take(usize::try_from(limit).unwrap_or(usize::MAX))
                        .map(|m| {
                            json!({
                                "ts": m.get("ts"),
                                "user": m.get("user").or_else(|| m.get("bot_id")),
                                "text": m.get("text"),
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            Ok(json!({"channel": channel, "threadTs": thread_ts, "messages": messages}))
        }
        other => Err(OperationError::Unavailable(format!(
            "`{other}` is not a Slack operation"
        ))),
    }
}
