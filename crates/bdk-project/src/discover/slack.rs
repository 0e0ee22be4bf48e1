//! The `[slack]` table of a channel with `kind = "slack"`: credentials,
//! what engages the bot, admission, stop words, alert-watch and approvers.
//! Every problem is a diagnostic; the settings come out typed with their
//! defaults applied.

use std::path::Path;

use bdk_events::Admission;
use toml::Table;

use super::util::{Diags, Fields, check_env_name, check_url};
use crate::slack::{
    DEFAULT_PLACEHOLDER, DEFAULT_SLACK_SECRET_ENV, DEFAULT_SLACK_TOKEN_ENV, is_conversation_id,
    is_user_id,
};
use crate::{SlackChannel, SlackWatch};

/// Keys of the `[slack]` table.
const SLACK_KEYS: &[&str] = &[
    "token_env",
    "signing_secret_env",
    "api_url",
    "admission",
    "stop_words",
    "direct_messages",
    "channels",
    "watch",
    "approvers",
    "placeholder",
    "public_url",
];

/// Keys of one `[[slack.watch]]` entry.
const WATCH_KEYS: &[&str] = &["channel", "patterns", "bots"];

/// The checked settings, or `None` after reporting an error.
pub(super) fn settings(d: &mut Diags, path: &Path, channel: &Table) -> Option<SlackChannel> {
    let errors_before = d.error_count();
    let empty = Table::new();
    let table = match channel.get("slack") {
        None => &empty,
        Some(toml::Value::Table(t)) => t,
        Some(other) => {
            d.error(
                path,
                format!("`slack` must be a table, found {}", other.type_str()),
                "write the settings in a `[slack]` section",
            );
            return None;
        }
    };
    let f = Fields::nested(table, path, "slack.");
    f.unknown_keys(d, SLACK_KEYS);
    let env = |d: &mut Diags, key: &str, default: &str| -> String {
        let value = f
            .nonempty_string(d, key)
            .unwrap_or_else(|| default.to_owned());
        check_env_name(d, path, &value);
        value
    };
    let token_env = env(d, "token_env", DEFAULT_SLACK_TOKEN_ENV);
    let signing_secret_env = env(d, "signing_secret_env", DEFAULT_SLACK_SECRET_ENV);
    let api_url = f.nonempty_string(d, "api_url");
    if let Some(url) = &api_url {
        check_url(d, &f, "api_url", url);
    }
    let public_url = f.nonempty_string(d, "public_url");
    if let Some(url) = &public_url {
        check_url(d, &f, "public_url", url);
    }
    let admission = match f.string(d, "admission").as_deref() {
        None | Some("coalesce") => Admission::Coalesce,
        Some("preempt") => Admission::Preempt,
        Some(other) => {
            d.error(
                path,
                format!("`slack.admission` must be \"coalesce\" or \"preempt\", found \"{other}\""),
                "set `slack.admission` to \"coalesce\" (the default) or \"preempt\"",
            );
            Admission::Coalesce
        }
    };
    let stop_words = match f.strings(d, "stop_words") {
        None => vec!["stop".to_owned()],
        Some(words) => words
            .into_iter()
            .map(|w| w.trim().to_lowercase())
            .filter(|w| {
                if w.is_empty() {
                    d.error(
                        path,
                        "`slack.stop_words` has an empty word",
                        "remove the empty string, or write `stop_words = []` for none",
                    );
                }
                !w.is_empty()
            })
            .collect(),
    };
    let direct_messages = f.bool(d, "direct_messages").unwrap_or(true);
    let channels = f.strings(d, "channels").unwrap_or_default();
    for c in &channels {
        if !is_conversation_id(c) {
            d.error(
                path,
                format!("`slack.channels`: `{c}` is not a conversation id"),
                "list conversation ids such as `C0123ABCD` (Slack: the channel's details, at the bottom), not names",
            );
        }
    }
    let approvers = f.strings(d, "approvers").unwrap_or_default();
    for u in &approvers {
        if !is_user_id(u) {
            d.error(
                path,
                format!("`slack.approvers`: `{u}` is not a user id"),
                "list user ids such as `U0123ABCD` (Slack: a profile's ⋮ menu, Copy member ID), not names",
            );
        }
    }
    let placeholder = match f.string(d, "placeholder") {
        None => Some(DEFAULT_PLACEHOLDER.to_owned()),
        Some(p) if p.trim().is_empty() => None,
        Some(p) => Some(p),
    };
    let watch = watch(d, path, table);
    if d.error_count() > errors_before {
        return None;
    }
    Some(SlackChannel {
        token_env,
        signing_secret_env,
        api_url: api_url.map(|u| u.trim_end_matches('/').to_owned()),
        admission,
        stop_words,
        direct_messages,
        channels,
        watch,
        approvers,
        placeholder,
        public_url: public_url.map(|u| u.trim_end_matches('/').to_owned()),
    })
}

/// `[[slack.watch]]`: none unless declared.
fn watch(d: &mut Diags, path: &Path, table: &Table) -> Vec<SlackWatch> {
    let items = match table.get("watch") {
        None => return Vec::new(),
        Some(toml::Value::Array(items)) => items,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`slack.watch` must be an array of tables, found {}",
                    other.type_str()
                ),
                "declare each watched conversation as a `[[slack.watch]]` section",
            );
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(t) = item.as_table() else {
            d.error(
                path,
                format!("`slack.watch[{i}]` must be a table"),
                "write each watched conversation as a `[[slack.watch]]` section",
            );
            continue;
        };
        let f = Fields::nested(t, path, format!("slack.watch[{i}]."));
        f.unknown_keys(d, WATCH_KEYS);
        let channel = f.nonempty_string(d, "channel");
        match &channel {
            None if !f.has("channel") => d.error(
                path,
                format!("`slack.watch[{i}]` has no `channel`"),
                "add `channel = \"C0123ABCD\"`, the id of the conversation to watch",
            ),
            Some(c) if !is_conversation_id(c) => d.error(
                path,
                format!("`slack.watch[{i}].channel`: `{c}` is not a conversation id"),
                "write the conversation's id, such as `C0123ABCD`, not its name",
            ),
            _ => {}
        }
        let patterns = f.strings(d, "patterns").unwrap_or_default();
        if patterns.is_empty() && !f.has("patterns") {
            d.error(
                path,
                format!("`slack.watch[{i}]` has no `patterns`"),
                "add `patterns = [\"(?i)error|down\"]`: the messages that open a session",
            );
        }
        for p in &patterns {
            if let Err(e) = regex::Regex::new(p) {
                d.error(
                    path,
                    format!(
                        "`slack.watch[{i}].patterns`: `{p}` is not a valid regular expression: {e}"
                    ),
                    "fix the pattern (Rust regex syntax, `(?i)` for case-insensitive)",
                );
            }
        }
        if patterns.is_empty() && f.has("patterns") {
            d.error(
                path,
                format!("`slack.watch[{i}].patterns` is empty: nothing would match"),
                "list at least one pattern, or remove the watch",
            );
        }
        let bots = f.bool(d, "bots").unwrap_or(true);
        if let Some(channel) = channel {
            out.push(SlackWatch {
                channel,
                patterns,
                bots,
            });
        }
    }
    out
}
