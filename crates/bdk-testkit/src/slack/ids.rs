//! The fixed identities of the fake workspace: its team, the app and its
//! bot, the default token with its scopes, and the channels and users it
//! starts with. A leaf: the server, the state and the payload builders all
//! name these, and `FakeSlack` re-exports them as its constants.

/// The bot token the fake accepts from the start.
pub(super) const BOT_TOKEN: &str = "xoxb-fake-bot-token";
/// The bot's user id (what `auth.test` answers as `user_id`).
pub(super) const BOT_USER: &str = "U0BOT";
/// The bot's user name.
pub(super) const BOT_NAME: &str = "bdk";
/// The bot id on every message the bot posts.
pub(super) const BOT_ID: &str = "B0BOT";
/// The app the bot belongs to (`api_app_id` in payloads).
pub(super) const APP_ID: &str = "A0FAKE";
/// The workspace id.
pub(super) const TEAM: &str = "T0FAKE";
/// The workspace name `auth.test` answers.
pub(super) const TEAM_NAME: &str = "Fake Workspace";
/// The workspace domain (`fake.slack.com`).
pub(super) const TEAM_DOMAIN: &str = "fake";
/// The legacy verification token payloads carry in their `token` field.
pub(super) const VERIFICATION_TOKEN: &str = "fake-verification-token";

/// The scopes of [`BOT_TOKEN`].
pub(super) const BOT_SCOPES: &[&str] = &[
    "app_mentions:read",
    "channels:history",
    "channels:read",
    "chat:write",
    "files:write",
    "groups:history",
    "im:history",
    "users:read",
];

/// The conversations that exist from the start: `(id, name)`.
pub(super) const DEFAULT_CHANNELS: &[(&str, &str)] = &[
    ("C0GENERAL", "general"),
    ("C0ALERTS", "alerts"),
    ("D0DM", "directmessage"),
];

/// The human users that exist from the start: `(id, name)`.
pub(super) const DEFAULT_USERS: &[(&str, &str)] = &[("U0ALICE", "alice"), ("U0BOB", "bob")];

/// The user on the other side of the default DM.
pub(super) const DM_USER: &str = "U0ALICE";

/// The name of a default channel, for payloads that carry one; an unknown
/// id names itself.
pub(super) fn channel_name(id: &str) -> &str {
    DEFAULT_CHANNELS
        .iter()
        .find(|(known, _)| *known == id)
        .map_or(id, |(_, name)| name)
}

/// The name of a default user (or the bot); an unknown id names itself.
pub(super) fn user_name(id: &str) -> &str {
    if id == BOT_USER {
        return BOT_NAME;
    }
    DEFAULT_USERS
        .iter()
        .find(|(known, _)| *known == id)
        .map_or(id, |(_, name)| name)
}
