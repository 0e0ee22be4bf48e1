//! Who is calling and who others are: `auth.test` and `users.info`.

use serde_json::json;

use super::args::Args;
use super::ids::{BOT_ID, BOT_NAME, BOT_USER, TEAM, TEAM_DOMAIN, TEAM_NAME};
use super::reply::Reply;
use super::state::State;

/// Every token acts as the bot.
pub(super) fn auth_test() -> Reply {
    Reply::ok(json!({
        "url": format!("https://{TEAM_DOMAIN}.slack.com/"),
        "team": TEAM_NAME,
        "user": BOT_NAME,
        "team_id": TEAM,
        "user_id": BOT_USER,
        "bot_id": BOT_ID,
        "is_enterprise_install": false,
    }))
}

pub(super) fn users_info(state: &mut State, args: &Args) -> Reply {
    match args.text("user").and_then(|user| state.users.get(&user)) {
        Some(user) => Reply::ok(json!({"user": user.to_value()})),
        None => Reply::error("user_not_found"),
    }
}
