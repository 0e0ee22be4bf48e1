//! What the fake holds: tokens with their scopes, conversations, users,
//! every conversation's messages with their threads, uploaded files, the
//! failures to inject and the calls seen.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::ids::{
    APP_ID, BOT_ID, BOT_NAME, BOT_SCOPES, BOT_TOKEN, BOT_USER, DEFAULT_CHANNELS, DEFAULT_USERS,
    DM_USER, TEAM,
};
use super::record::{Failure, Recorded};

/// The state, usable after a panic elsewhere: a panicking test thread must
/// not hide the calls from the next one.
pub(super) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What kind of conversation an id names, by Slack's id prefixes: `C` a
/// public channel, `G` a private one, `D` a direct message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Public,
    Private,
    Im,
}

impl Kind {
    pub(super) fn of(id: &str) -> Kind {
        match id.chars().next() {
            Some('D') => Kind::Im,
            Some('G') => Kind::Private,
            _ => Kind::Public,
        }
    }
}

pub(super) struct Channel {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) created: u64,
}

impl Channel {
    /// The conversation object `conversations.info` answers.
    pub(super) fn to_value(&self) -> Value {
        let kind = Kind::of(&self.id);
        let mut value = json!({
            "id": self.id,
            "name": self.name,
            "created": self.created,
            "creator": DM_USER,
            "is_channel": kind == Kind::Public,
            "is_group": kind == Kind::Private,
            "is_im": kind == Kind::Im,
            "is_mpim": false,
            "is_private": kind != Kind::Public,
            "is_archived": false,
            "is_general": self.name == "general",
            "is_member": true,
            "is_ext_shared": false,
            "is_org_shared": false,
            "context_team_id": TEAM,
        });
        if kind == Kind::Im {
            value["user"] = json!(DM_USER);
        }
        value
    }
}

pub(super) struct User {
    pub(super) id: String,
    pub(super) name: String,
    pub(super) is_bot: bool,
}

impl User {
    /// The user object `users.info` answers.
    pub(super) fn to_value(&self) -> Value {
        let mut value = json!({
            "id": self.id,
            "team_id": TEAM,
            "name": self.name,
            "real_name": self.name,
            "deleted": false,
            "is_bot": self.is_bot,
            "is_app_user": false,
            "is_admin": false,
            "tz": "Etc/UTC",
            "profile": {
                "real_name": self.name,
                "display_name": self.name,
                "team": TEAM,
            },
        });
        if self.is_bot {
            value["profile"]["bot_id"] = json!(BOT_ID);
        }
        value
    }
}

/// A file from `files.getUploadURLExternal` on.
pub(super) struct FileRecord {
    pub(super) id: String,
    pub(super) filename: String,
    /// The length the client announced.
    pub(super) length: usize,
    /// The bytes received at the upload URL, once they matched `length`.
    pub(super) uploaded: Option<usize>,
    pub(super) title: Option<String>,
    pub(super) created: u64,
    /// Where `files.completeUploadExternal` shared it: `{channel,
    /// thread_ts, ts}`.
    pub(super) shares: Vec<Value>,
}

impl FileRecord {
    /// The file object Slack answers and puts on the sharing message.
    pub(super) fn to_value(&self) -> Value {
        let extension = self
            .filename
            .rsplit_once('.')
            .map(|(_, extension)| extension.to_ascii_lowercase());
        let (mimetype, filetype) = match extension.as_deref() {
            Some("txt" | "log") => ("text/plain", "text"),
            Some("md") => ("text/plain", "markdown"),
            Some("json") => ("application/json", "json"),
            Some("png") => ("image/png", "png"),
            Some("jpg" | "jpeg") => ("image/jpeg", "jpg"),
            Some("pdf") => ("application/pdf", "pdf"),
            Some("csv") => ("text/csv", "csv"),
            Some("diff" | "patch") => ("text/plain", "diff"),
            _ => ("application/octet-stream", "binary"),
        };
        json!({
            "id": self.id,
            "created": self.created,
            "timestamp": self.created,
            "name": self.filename,
            "title": self.title.clone().unwrap_or_else(|| self.filename.clone()),
            "mimetype": mimetype,
            "filetype": filetype,
            "user": BOT_USER,
            "size": self.uploaded.unwrap_or(self.length),
            "mode": "hosted",
            "is_external": false,
            "url_private": format!("https://files.slack.com/files-pri/{TEAM}-{}/{}", self.id, self.filename),
        })
    }
}

pub(super) struct State {
    /// `http://127.0.0.1:PORT`.
    pub(super) base: String,
    /// Token -> its scopes.
    pub(super) tokens: HashMap<String, Vec<String>>,
    pub(super) channels: BTreeMap<String, Channel>,
    pub(super) users: BTreeMap<String, User>,
    /// Each conversation's messages (top-level and replies) in the order
    /// they were posted.
    pub(super) messages: BTreeMap<String, Vec<Value>>,
    pub(super) files: BTreeMap<String, FileRecord>,
    /// Ephemeral messages (`chat.postEphemeral`): seen by one user, never
    /// in a conversation's history.
    pub(super) ephemerals: Vec<Value>,
    pub(super) failures: Vec<Failure>,
    pub(super) requests: Vec<Recorded>,
    /// The last `ts` handed out, in microseconds since the epoch.
    last_ts: u128,
    next_id: u64,
    pub(super) log: bool,
}

impl State {
    pub(super) fn new(base: String) -> State {
        let mut state = State {
            base,
            tokens: HashMap::new(),
            channels: BTreeMap::new(),
            users: BTreeMap::new(),
            messages: BTreeMap::new(),
            files: BTreeMap::new(),
            ephemerals: Vec::new(),
            failures: Vec::new(),
            requests: Vec::new(),
            last_ts: 0,
            next_id: 0,
            log: false,
        };
        state.tokens.insert(
            BOT_TOKEN.to_owned(),
            BOT_SCOPES.iter().map(|scope| (*scope).to_owned()).collect(),
        );
        for (id, name) in DEFAULT_CHANNELS {
            state.add_channel(id, name);
        }
        for (id, name) in DEFAULT_USERS {
            state.add_user(id, name, false);
        }
        state.add_user(BOT_USER, BOT_NAME, true);
        state
    }

    pub(super) fn add_channel(&mut self, id: &str, name: &str) {
        let created = now_micros() / 1_000_000;
        self.channels.insert(
            id.to_owned(),
            Channel {
                id: id.to_owned(),
                name: name.trim_start_matches('#').to_owned(),
                created: u64::try_from(created).unwrap_or(u64::MAX),
            },
        );
    }

    pub(super) fn add_user(&mut self, id: &str, name: &str, is_bot: bool) {
        self.users.insert(
            id.to_owned(),
            User {
                id: id.to_owned(),
                name: name.to_owned(),
                is_bot,
            },
        );
    }

    /// A counter for ids the fake makes up (files, request ids).
    pub(super) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// A new message timestamp, `"1700000000.000100"`: the current time
    /// in microseconds, one past the last when the clock has not moved, so
    /// every `ts` is unique and later than the one before.
    pub(super) fn next_ts(&mut self) -> String {
        self.last_ts = now_micros().max(self.last_ts + 1);
        format!(
            "{}.{:06}",
            self.last_ts / 1_000_000,
            self.last_ts % 1_000_000
        )
    }

    /// The id of the conversation `channel` names: its id, or its name
    /// with or without `#`, as `chat.postMessage` accepts both.
    pub(super) fn channel_id(&self, channel: &str) -> Option<String> {
        if self.channels.contains_key(channel) {
            return Some(channel.to_owned());
        }
        let name = channel.trim_start_matches('#');
        self.channels
            .values()
            .find(|known| known.name == name && Kind::of(&known.id) != Kind::Im)
            .map(|known| known.id.clone())
    }

    /// The index of the message `ts` in `channel`.
    pub(super) fn find_message(&self, channel: &str, ts: &str) -> Option<usize> {
        self.messages
            .get(channel)?
            .iter()
            .position(|message| message["ts"] == ts)
    }

    /// The thread parent a `thread_ts` means: a reply's ts stands for its
    /// parent, as Slack threads a reply to a reply under the same parent.
    pub(super) fn thread_root(&self, channel: &str, ts: &str) -> String {
        self.find_message(channel, ts)
            .and_then(|index| self.messages[channel][index]["thread_ts"].as_str())
            .unwrap_or(ts)
            .to_owned()
    }

    /// Appends `message` to `channel` and, for a reply, updates its
    /// parent's thread fields.
    pub(super) fn add_message(&mut self, channel: &str, mut message: Value) {
        let parent = message["thread_ts"]
            .as_str()
            .filter(|thread_ts| message["ts"] != *thread_ts)
            .map(str::to_owned);
        if let Some(parent) = &parent
            && let Some(index) = self.find_message(channel, parent)
        {
            message["parent_user_id"] = self.messages[channel][index]["user"].clone();
        }
        self.messages
            .entry(channel.to_owned())
            .or_default()
            .push(message);
        if let Some(parent) = parent {
            self.refresh_thread(channel, &parent);
        }
    }

    /// Recomputes a parent's `reply_count`, `reply_users`,
    /// `reply_users_count`, `latest_reply` and `thread_ts` from its replies.
    pub(super) fn refresh_thread(&mut self, channel: &str, parent_ts: &str) {
        let Some(messages) = self.messages.get_mut(channel) else {
            return;
        };
        let replies: Vec<&Value> = messages
            .iter()
            .filter(|message| message["thread_ts"] == parent_ts && message["ts"] != parent_ts)
            .collect();
        let count = replies.len();
        let mut users: Vec<Value> = Vec::new();
        for reply in &replies {
            if !users.contains(&reply["user"]) {
                users.push(reply["user"].clone());
            }
        }
        let latest = replies.last().map(|reply| reply["ts"].clone());
        let Some(parent) = messages
            .iter_mut()
            .find(|message| message["ts"] == parent_ts)
        else {
            return;
        };
        let Some(object) = parent.as_object_mut() else {
            return;
        };
        if let Some(latest) = latest {
            object.insert("thread_ts".to_owned(), json!(parent_ts));
            object.insert("reply_count".to_owned(), json!(count));
            object.insert("reply_users_count".to_owned(), json!(users.len()));
            object.insert("reply_users".to_owned(), Value::Array(users));
            object.insert("latest_reply".to_owned(), latest);
        } else {
            for field in [
                "thread_ts",
                "reply_count",
                "reply_users_count",
                "reply_users",
                "latest_reply",
            ] {
                object.remove(field);
            }
        }
    }

    /// The thread `ts` belongs to: its parent, then the replies in order.
    /// `None` when no message has that ts.
    pub(super) fn thread(&self, channel: &str, ts: &str) -> Option<Vec<Value>> {
        self.find_message(channel, ts)?;
        let root = self.thread_root(channel, ts);
        let messages = self.messages.get(channel)?;
        let parent = messages
            .iter()
            .find(|message| message["ts"] == root.as_str())?;
        let mut thread = vec![parent.clone()];
        thread.extend(
            messages
                .iter()
                .filter(|message| {
                    message["thread_ts"] == root.as_str() && message["ts"] != root.as_str()
                })
                .cloned(),
        );
        Some(thread)
    }
}

/// A message a person posts: what the history and `conversations.replies`
/// show for it.
pub(super) fn user_message(user: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut message = json!({
        "type": "message",
        "user": user,
        "text": text,
        "ts": ts,
        "team": TEAM,
    });
    if let Some(thread_ts) = thread_ts {
        message["thread_ts"] = json!(thread_ts);
    }
    message
}

/// A message the bot posts through `chat.postMessage` (or shares a file
/// with), as Slack answers and stores it.
pub(super) fn bot_message(text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut message = json!({
        "type": "message",
        "user": BOT_USER,
        "bot_id": BOT_ID,
        "app_id": APP_ID,
        "text": text,
        "ts": ts,
        "team": TEAM,
        "bot_profile": {
            "id": BOT_ID,
            "app_id": APP_ID,
            "name": BOT_NAME,
            "team_id": TEAM,
            "deleted": false,
        },
    });
    if let Some(thread_ts) = thread_ts {
        message["thread_ts"] = json!(thread_ts);
    }
    message
}

pub(super) fn now_micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros())
        .unwrap_or(0)
}
