//! What a Slack app needs to serve one Slack channel: the bot token
//! scopes, the bot events, and the app manifest Slack's "Create New App →
//! From an app manifest" takes (<https://api.slack.com/reference/manifests>).
//!
//! Pure functions of the channel's settings: `bdk slack manifest` prints
//! the manifest, and `bdk slack doctor` compares a token's granted scopes
//! with [`required_scopes`], so the two can never disagree.

use bdk_core::project::SlackChannel;
use serde_json::{Map, Value, json};

/// The longest app name Slack accepts (`display_information.name`).
pub const MAX_APP_NAME: usize = 35;
/// The longest app description Slack accepts
/// (`display_information.description`).
pub const MAX_DESCRIPTION: usize = 140;
/// The longest bot display name Slack accepts
/// (`features.bot_user.display_name`).
pub const MAX_DISPLAY_NAME: usize = 80;

/// The app name used when the agent's name has nothing left after cleaning.
const FALLBACK_APP_NAME: &str = "bdk agent";
/// The bot display name used when the agent's name has nothing left after
/// cleaning.
const FALLBACK_DISPLAY_NAME: &str = "bdk";

/// The bot token scopes the pack needs for `settings`, sorted:
/// `app_mentions:read` (mentions), `channels:history` and `groups:history`
/// (thread replies and alert-watch in public and private channels),
/// `chat:write` (placeholders, replies, approval cards), `files:write`
/// (replies upload files), and `im:history` when direct messages engage
/// the bot.
pub fn required_scopes(settings: &SlackChannel) -> Vec<&'static str> {
    let mut scopes = vec![
        "app_mentions:read",
        "channels:history",
        "chat:write",
        "files:write",
        "groups:history",
    ];
    if settings.direct_messages {
        scopes.push("im:history");
    }
    scopes.sort_unstable();
    scopes
}

/// Why the pack needs `scope`, in a few words (for the doctor's findings);
/// an empty string for a scope it does not ask for.
pub fn scope_purpose(scope: &str) -> &'static str {
    match scope {
        "app_mentions:read" => "mentions of the bot",
        "channels:history" => "thread replies and alert-watch in public channels",
        "groups:history" => "thread replies and alert-watch in private channels",
        "chat:write" => "placeholders, replies and approval cards",
        "files:write" => "files attached to replies",
        "im:history" => "direct messages",
        _ => "",
    }
}

/// The bot events the app subscribes to for `settings`: `app_mention`,
/// `message.channels`, `message.groups`, and `message.im` when direct
/// messages engage the bot.
pub fn bot_events(settings: &SlackChannel) -> Vec<&'static str> {
    let mut events = vec!["app_mention", "message.channels", "message.groups"];
    if settings.direct_messages {
        events.push("message.im");
    }
    events
}

/// Slack's app manifest for a channel with `settings`, served at
/// `request_url` (`<public URL>/v1/channels/<name>`), which both Event
/// Subscriptions and Interactivity point at.
///
/// Names are made to fit Slack's limits: the app name is
/// [`app_name`]`(app_name)`, the bot's display name
/// [`bot_display_name`]`(app_name)`, and the description (left out when
/// `None` or blank) is cleaned like the app name and cut to
/// [`MAX_DESCRIPTION`] characters.
pub fn app_manifest(
    settings: &SlackChannel,
    app_name: &str,
    description: Option<&str>,
    request_url: &str,
) -> Value {
    let mut display = Map::new();
    display.insert("name".to_owned(), json!(self::app_name(app_name)));
    if let Some(text) = description
        .map(|d| cut(&one_line(d), MAX_DESCRIPTION))
        .filter(|d| !d.is_empty())
    {
        display.insert("description".to_owned(), json!(text));
    }
    let dms = settings.direct_messages;
    json!({
        "display_information": display,
        "features": {
            "bot_user": {
                "display_name": bot_display_name(app_name),
                "always_online": true,
            },
            "app_home": {
                "messages_tab_enabled": dms,
                "messages_tab_read_only_enabled": false,
                "home_tab_enabled": false,
            },
        },
        "oauth_config": {
            "scopes": {"bot": required_scopes(settings)},
        },
        "settings": {
            "event_subscriptions": {
                "request_url": request_url,
                "bot_events": bot_events(settings),
            },
            "interactivity": {
                "is_enabled": true,
                "request_url": request_url,
            },
            "org_deploy_enabled": false,
            "socket_mode_enabled": false,
            "token_rotation_enabled": false,
        },
    })
}

/// The app name Slack accepts for an agent named `name`: on one line (runs
/// of whitespace and control characters become one space), trimmed, and
/// cut to [`MAX_APP_NAME`] characters; `bdk agent` when nothing is left.
pub fn app_name(name: &str) -> String {
    let name = cut(&one_line(name), MAX_APP_NAME);
    if name.is_empty() {
        FALLBACK_APP_NAME.to_owned()
    } else {
        name
    }
}

/// The bot display name Slack accepts for an agent named `name`: Slack
/// allows lowercase letters, digits, `-`, `_` and `.`, so letters are
/// lowercased, every other character becomes `-`, runs of `-` become one,
/// `-` is trimmed from both ends, and the result is cut to
/// [`MAX_DISPLAY_NAME`] characters; `bdk` when nothing is left.
pub fn bot_display_name(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.') {
            c
        } else {
            '-'
        };
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    let out: String = out.chars().take(MAX_DISPLAY_NAME).collect();
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        FALLBACK_DISPLAY_NAME.to_owned()
    } else {
        out.to_owned()
    }
}

/// `text` on one line: runs of whitespace and control characters become a
/// single space, and the ends are trimmed.
fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// At most `max` characters of `text`, trimmed at the end; a cut text ends
/// with `…` (within the limit).
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max.saturating_sub(1)).collect();
    format!("{}…", kept.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_dms(direct_messages: bool) -> SlackChannel {
        let mut settings = SlackChannel::default();
        settings.direct_messages = direct_messages;
        settings
    }

    #[test]
    fn scopes_are_sorted_and_follow_direct_messages() {
        assert_eq!(
            required_scopes(&with_dms(true)),
            [
                "app_mentions:read",
                "channels:history",
                "chat:write",
                "files:write",
                "groups:history",
                "im:history"
            ]
        );
        let without = required_scopes(&with_dms(false));
        assert!(!without.contains(&"im:history"), "{without:?}");
        assert!(without.is_sorted(), "{without:?}");
        for scope in required_scopes(&with_dms(true)) {
            assert!(!scope_purpose(scope).is_empty(), "{scope} has no purpose");
        }
        assert_eq!(scope_purpose("admin"), "");
    }

    #[test]
    fn events_follow_direct_messages() {
        assert_eq!(
            bot_events(&with_dms(true)),
            [
                "app_mention",
                "message.channels",
                "message.groups",
                "message.im"
            ]
        );
        assert_eq!(
            bot_events(&with_dms(false)),
            ["app_mention", "message.channels", "message.groups"]
        );
    }

    #[test]
    fn the_manifest_has_slacks_shape() {
        let url = "https://bot.example.com/v1/channels/slack";
        let m = app_manifest(
            &with_dms(true),
            "Release Helper",
            Some("Answers questions\nabout releases."),
            url,
        );
        assert_eq!(
            m,
            json!({
                "display_information": {
                    "name": "Release Helper",
                    "description": "Answers questions about releases.",
                },
                "features": {
                    "bot_user": {"display_name": "release-helper", "always_online": true},
                    "app_home": {
                        "messages_tab_enabled": true,
                        "messages_tab_read_only_enabled": false,
                        "home_tab_enabled": false,
                    },
                },
                "oauth_config": {"scopes": {"bot": [
                    "app_mentions:read", "channels:history", "chat:write",
                    "files:write", "groups:history", "im:history",
                ]}},
                "settings": {
                    "event_subscriptions": {
                        "request_url": url,
                        "bot_events": ["app_mention", "message.channels", "message.groups", "message.im"],
                    },
                    "interactivity": {"is_enabled": true, "request_url": url},
                    "org_deploy_enabled": false,
                    "socket_mode_enabled": false,
                    "token_rotation_enabled": false,
                },
            })
        );
    }

    #[test]
    fn without_direct_messages_the_messages_tab_is_off() {
        let m = app_manifest(&with_dms(false), "x", None, "https://h/v1/channels/s");
        assert_eq!(m["features"]["app_home"]["messages_tab_enabled"], false);
        assert!(m["display_information"].get("description").is_none(), "{m}");
        let blank = app_manifest(&with_dms(false), "x", Some(" \n "), "https://h");
        assert!(
            blank["display_information"].get("description").is_none(),
            "{blank}"
        );
    }

    #[test]
    fn names_are_cut_and_cleaned_to_slacks_limits() {
        let long = "A very long agent name that Slack would refuse outright";
        let name = app_name(long);
        assert!(name.chars().count() <= MAX_APP_NAME, "{name}");
        assert_eq!(name, "A very long agent name that Slack…");
        assert!(name.ends_with('…'), "{name}");
        assert_eq!(app_name("  two\tlines\nhere "), "two lines here");
        assert_eq!(app_name(" \n"), "bdk agent");

        assert_eq!(bot_display_name("Release Helper!"), "release-helper");
        assert_eq!(bot_display_name("--Ops  Bot v2.1_x--"), "ops-bot-v2.1_x");
        assert_eq!(bot_display_name("Café"), "caf");
        assert_eq!(bot_display_name("!!!"), "bdk");
        let display = bot_display_name(&"ab ".repeat(60));
        assert!(display.chars().count() <= MAX_DISPLAY_NAME, "{display}");
        assert!(!display.ends_with('-'), "{display}");
        assert!(
            display.chars().all(|c| c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '-' | '_' | '.'))
        );

        let description = "d".repeat(200);
        let m = app_manifest(&with_dms(true), "x", Some(&description), "https://h");
        let cut = m["display_information"]["description"]
            .as_str()
            .unwrap_or("");
        assert_eq!(cut.chars().count(), MAX_DESCRIPTION);
    }
}
