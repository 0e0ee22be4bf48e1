//! The threads the bot is in: one record per thread session (namespace
//! [`THREADS_NAMESPACE`], key `<channel>/<conversation>/<thread_ts>`),
//! written when a message first reaches the session. A reply in a thread
//! engages the bot only when the thread has a record; the record also says
//! who started the thread (the default approver).

use bdk_store::{Store, StoreError};
use serde_json::{Value, json};

/// The key-value namespace of thread records.
pub const THREADS_NAMESPACE: &str = "slack-threads";

/// One thread the bot is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thread {
    /// The conversation id.
    pub conversation: String,
    /// The parent message's ts.
    pub thread_ts: String,
    /// The session.
    pub session_id: String,
    /// Who started it (user id; a bot id for an alert).
    pub starter: String,
}

fn record_key(channel: &str, key: &str) -> String {
    format!("{channel}/{key}")
}

/// The record of thread `key` (`<conversation>/<thread_ts>`) on `channel`.
pub async fn load(
    store: &dyn Store,
    channel: &str,
    key: &str,
) -> Result<Option<Thread>, StoreError> {
    let Some(v) = store
        .kv_get(THREADS_NAMESPACE, &record_key(channel, key))
        .await?
    else {
        return Ok(None);
    };
    let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let (conversation, thread_ts) = key.split_once('/').unwrap_or((key, ""));
    Ok(Some(Thread {
        conversation: conversation.to_owned(),
        thread_ts: thread_ts.to_owned(),
        session_id: text("sessionId"),
        starter: text("starter"),
    }))
}

/// Records `thread` unless it has a record (the first starter stays).
pub async fn save_new(store: &dyn Store, channel: &str, thread: &Thread) -> Result<(), StoreError> {
    let key = format!("{}/{}", thread.conversation, thread.thread_ts);
    store
        .kv_put_if_absent(
            THREADS_NAMESPACE,
            &record_key(channel, &key),
            json!({"sessionId": thread.session_id, "starter": thread.starter}),
        )
        .await
        .map(|_| ())
}

/// The conversation and thread ts of a thread key.
pub fn parse_key(key: &str) -> Option<(&str, &str)> {
    key.split_once('/')
        .filter(|(c, t)| !c.is_empty() && !t.is_empty())
}
