//! The typed settings of a Slack channel: a channel manifest with
//! `kind = "slack"` and a `[slack]` table.
//!
//! Discovery checks them and settles the defaults (credentials, what the
//! bot engages with, admission, the stop words, who may approve), so the
//! pack that serves them (`bdk-slack`) reads values it need not check
//! again. What the settings mean is documented in `docs/slack.md`.

use bdk_events::Admission;
use serde::Serialize;

/// The variable holding the bot token when the manifest names none.
pub const DEFAULT_SLACK_TOKEN_ENV: &str = "SLACK_BOT_TOKEN";
/// The variable holding the signing secret when the manifest names none.
pub const DEFAULT_SLACK_SECRET_ENV: &str = "SLACK_SIGNING_SECRET";
/// The variable naming the Web API base URL when the manifest sets no
/// `api_url` (tests point it at a fake, proxies at themselves).
pub const SLACK_API_URL_ENV: &str = "SLACK_API_URL";
/// Slack's Web API.
pub const SLACK_API_URL: &str = "https://slack.com/api";
/// The placeholder posted when a turn starts, unless the manifest says
/// otherwise.
pub const DEFAULT_PLACEHOLDER: &str = ":hourglass_flowing_sand: Working on it…";

/// A Slack channel's settings, checked by discovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SlackChannel {
    /// The variable holding the bot token (`xoxb-…`).
    pub token_env: String,
    /// The variable holding the app's signing secret.
    pub signing_secret_env: String,
    /// The Web API base URL the manifest sets; without one, the variable
    /// [`SLACK_API_URL_ENV`], else [`SLACK_API_URL`].
    pub api_url: Option<String>,
    /// How a message joins a thread whose turn is running.
    pub admission: Admission,
    /// Whole messages (after the bot's mention) that stop the running turn,
    /// compared without regard to case; empty for none.
    pub stop_words: Vec<String>,
    /// Whether direct messages to the bot engage it.
    pub direct_messages: bool,
    /// The conversations (ids such as `C0123ABCD`) where mentions engage
    /// the bot; empty for every conversation it is in.
    pub channels: Vec<String>,
    /// Alert-watch: conversations whose matching messages open a session.
    pub watch: Vec<SlackWatch>,
    /// The users (ids such as `U0123ABCD`) who may approve a parked tool
    /// call; empty for the person who started the thread.
    pub approvers: Vec<String>,
    /// The text of the placeholder posted when a turn starts; `None` posts
    /// none (the reply then arrives as a new message).
    pub placeholder: Option<String>,
    /// The server's public base URL, for the app manifest and the doctor
    /// (without one, the variable `BDK_PUBLIC_URL`).
    pub public_url: Option<String>,
}

impl Default for SlackChannel {
    /// What a `[slack]` table with no keys means: the token from
    /// `SLACK_BOT_TOKEN`, the secret from `SLACK_SIGNING_SECRET`, mentions
    /// anywhere and direct messages, coalesce, the stop word `stop`, the
    /// thread's starter approves, and the default placeholder.
    fn default() -> Self {
        Self {
            token_env: DEFAULT_SLACK_TOKEN_ENV.to_owned(),
            signing_secret_env: DEFAULT_SLACK_SECRET_ENV.to_owned(),
            api_url: None,
            admission: Admission::Coalesce,
            stop_words: vec!["stop".to_owned()],
            direct_messages: true,
            channels: Vec::new(),
            watch: Vec::new(),
            approvers: Vec::new(),
            placeholder: Some(DEFAULT_PLACEHOLDER.to_owned()),
            public_url: None,
        }
    }
}

/// One `[[slack.watch]]` entry: a conversation whose messages matching a
/// pattern open a session (alert-watch).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SlackWatch {
    /// The conversation id.
    pub channel: String,
    /// Regular expressions; a message matching any of them opens a session
    /// in its thread. Checked by discovery.
    pub patterns: Vec<String>,
    /// Whether messages posted by bots and integrations (where alerts come
    /// from) count; the pack's own never do.
    pub bots: bool,
}

impl SlackWatch {
    /// A watch of `channel` for `patterns`, bots included.
    pub fn new(channel: &str, patterns: &[&str]) -> Self {
        Self {
            channel: channel.to_owned(),
            patterns: patterns.iter().map(|p| (*p).to_owned()).collect(),
            bots: true,
        }
    }
}

/// True when `id` looks like a Slack conversation id (`C…`, `G…`, `D…`).
pub fn is_conversation_id(id: &str) -> bool {
    id.len() >= 2
        && id.starts_with(['C', 'G', 'D'])
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

/// True when `id` looks like a Slack user id (`U…` or `W…`).
pub fn is_user_id(id: &str) -> bool {
    id.len() >= 2
        && id.starts_with(['U', 'W'])
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_recognised() {
        for id in ["C0123ABCD", "G01", "D0DM"] {
            assert!(is_conversation_id(id), "{id}");
        }
        for id in ["c0123", "C", "X0123", "C01-2", "#general", ""] {
            assert!(!is_conversation_id(id), "{id}");
        }
        assert!(is_user_id("U0ALICE"));
        assert!(is_user_id("W012"));
        assert!(!is_user_id("alice"));
        assert!(!is_user_id("U"));
    }
}
