//! What Slack sends an app, as its docs show it, for tests to deliver to
//! the app under test: the Events API envelope (`event_callback`) around
//! `app_mention` and `message` events, the `url_verification` handshake,
//! and the `block_actions` interactivity payload of a button click with
//! the `payload=<JSON>` form body it arrives in. Sign what you send with
//! [`super::sign`] (re-exported as `slack::sign`).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::args::form_encode;
use super::ids::{
    APP_ID, BOT_ID, BOT_USER, TEAM, TEAM_DOMAIN, VERIFICATION_TOKEN, channel_name, user_name,
};

/// The Events API envelope around `event`: `token`, `team_id`,
/// `api_app_id`, `event`, `type: "event_callback"`, `event_id`,
/// `event_time` (from the event's `event_ts`, else now) and
/// `authorizations` naming the bot, as Slack delivers every event.
pub fn event_callback(event: Value, event_id: &str) -> Value {
    let event_time = event["event_ts"]
        .as_str()
        .or_else(|| event["ts"].as_str())
        .and_then(|ts| ts.split('.').next())
        .and_then(|seconds| seconds.parse::<u64>().ok())
        .unwrap_or_else(now_seconds);
    json!({
        "token": VERIFICATION_TOKEN,
        "team_id": TEAM,
        "context_team_id": TEAM,
        "api_app_id": APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": event_time,
        "authorizations": [{
            "enterprise_id": null,
            "team_id": TEAM,
            "user_id": BOT_USER,
            "is_bot": true,
            "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-fake-{event_id}"),
    })
}

/// The `url_verification` request Slack sends when an app's event URL is
/// set; the app answers with the `challenge`.
pub fn url_verification(challenge: &str) -> Value {
    json!({
        "token": VERIFICATION_TOKEN,
        "challenge": challenge,
        "type": "url_verification",
    })
}

/// An `app_mention` event: `user` wrote `text` (which, as in Slack,
/// should contain the mention `<@U0BOT>`) in `channel` at `ts`, in the
/// thread `thread_ts` if any.
pub fn app_mention(
    channel: &str,
    user: &str,
    text: &str,
    ts: &str,
    thread_ts: Option<&str>,
) -> Value {
    let mut event = json!({
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM,
    });
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// A `message` event from a person: `channel_type` is `"channel"`,
/// `"group"` (a private channel) or `"im"`.
pub fn message_event(
    channel: &str,
    channel_type: &str,
    user: &str,
    text: &str,
    ts: &str,
    thread_ts: Option<&str>,
) -> Value {
    let mut event = json!({
        "type": "message",
        "channel": channel,
        "user": user,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": TEAM,
    });
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// A `message` event with `subtype: "bot_message"` and `bot_id`: what an
/// app sees of a bot's message (its own, with `B0BOT`, carries the bot
/// user and app id too, so an app can recognise and skip it).
pub fn bot_message_event(
    channel: &str,
    channel_type: &str,
    bot_id: &str,
    text: &str,
    ts: &str,
    thread_ts: Option<&str>,
) -> Value {
    let mut event = json!({
        "type": "message",
        "subtype": "bot_message",
        "channel": channel,
        "bot_id": bot_id,
        "text": text,
        "ts": ts,
        "event_ts": ts,
        "channel_type": channel_type,
    });
    if bot_id == BOT_ID {
        event["user"] = json!(BOT_USER);
        event["app_id"] = json!(APP_ID);
    }
    if let Some(thread_ts) = thread_ts {
        event["thread_ts"] = json!(thread_ts);
    }
    event
}

/// The `block_actions` payload of `user` clicking the button `action_id`
/// (carrying `value`) on the bot's message `message_ts` in `channel` (in
/// the thread `thread_ts` if any), as Slack posts it to the app's
/// interactivity URL. The button sits in an `actions` block with
/// `block_id` `"actions"`.
pub fn block_actions(
    user: &str,
    channel: &str,
    message_ts: &str,
    thread_ts: Option<&str>,
    action_id: &str,
    value: &str,
    response_url: &str,
) -> Value {
    let button = json!({
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": action_id, "emoji": true},
        "value": value,
    });
    let mut message = json!({
        "type": "message",
        "user": BOT_USER,
        "bot_id": BOT_ID,
        "app_id": APP_ID,
        "team": TEAM,
        "text": "",
        "ts": message_ts,
        "blocks": [{"type": "actions", "block_id": "actions", "elements": [button]}],
    });
    let mut container = json!({
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": false,
    });
    if let Some(thread_ts) = thread_ts {
        message["thread_ts"] = json!(thread_ts);
        container["thread_ts"] = json!(thread_ts);
    }
    let now = now_action_ts();
    json!({
        "type": "block_actions",
        "user": {
            "id": user,
            "username": user_name(user),
            "name": user_name(user),
            "team_id": TEAM,
        },
        "api_app_id": APP_ID,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": format!("{}.1000000001.{:032x}", now.replace('.', ""), action_id.len()),
        "team": {"id": TEAM, "domain": TEAM_DOMAIN},
        "enterprise": null,
        "is_enterprise_install": false,
        "channel": {"id": channel, "name": channel_name(channel)},
        "message": message,
        "state": {"values": {}},
        "response_url": response_url,
        "actions": [{
            "type": "button",
            "action_id": action_id,
            "block_id": "actions",
            "text": {"type": "plain_text", "text": action_id, "emoji": true},
            "value": value,
            "action_ts": now,
        }],
    })
}

/// The form body Slack posts an interactivity payload in:
/// `payload=<percent-encoded JSON>`, sent as
/// `application/x-www-form-urlencoded`.
pub fn interactivity_body(payload: &Value) -> String {
    format!("payload={}", form_encode(&payload.to_string()))
}

fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_secs())
        .unwrap_or(0)
}

/// Now as a Slack timestamp, `seconds.microseconds`.
fn now_action_ts() -> String {
    let micros = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|elapsed| elapsed.as_micros())
        .unwrap_or(0);
    format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
}

#[cfg(test)]
mod tests {
    use super::super::args::form_pairs;
    use super::*;

    #[test]
    fn events_come_in_slacks_envelope() {
        let event = app_mention(
            "C0GENERAL",
            "U0ALICE",
            "<@U0BOT> hi",
            "1700000000.000100",
            None,
        );
        let envelope = event_callback(event.clone(), "Ev01");
        assert_eq!(envelope["type"], "event_callback");
        assert_eq!(envelope["event"], event);
        assert_eq!(envelope["event_time"], 1_700_000_000);
        assert_eq!(envelope["authorizations"][0]["user_id"], BOT_USER);
        assert_eq!(envelope["api_app_id"], APP_ID);

        let reply = message_event("D0DM", "im", "U0ALICE", "hi", "2.000001", Some("1.000001"));
        assert_eq!(
            (reply["channel_type"].as_str(), reply["thread_ts"].as_str()),
            (Some("im"), Some("1.000001"))
        );
        let bot = bot_message_event("C0GENERAL", "channel", BOT_ID, "x", "3.0", None);
        assert_eq!(
            (bot["subtype"].as_str(), bot["user"].as_str()),
            (Some("bot_message"), Some(BOT_USER))
        );
        assert!(bot.get("thread_ts").is_none());
    }

    #[test]
    fn a_button_click_arrives_as_a_payload_form_field() {
        let payload = block_actions(
            "U0ALICE",
            "C0GENERAL",
            "1700000000.000100",
            Some("1699999999.000100"),
            "bdk_approve",
            "call-1",
            "https://hooks.slack.com/actions/T0FAKE/1/abc",
        );
        assert_eq!(payload["type"], "block_actions");
        assert_eq!(payload["user"]["username"], "alice");
        assert_eq!(payload["channel"]["name"], "general");
        assert_eq!(payload["container"]["thread_ts"], "1699999999.000100");
        assert_eq!(payload["container"]["is_ephemeral"], false);
        assert_eq!(payload["actions"][0]["action_id"], "bdk_approve");
        assert_eq!(payload["actions"][0]["value"], "call-1");
        assert_eq!(payload["message"]["ts"], "1700000000.000100");

        let body = interactivity_body(&payload);
        assert!(body.starts_with("payload=%7B"), "{body}");
        let pairs = form_pairs(&body).unwrap();
        assert_eq!(pairs[0].0, "payload");
        let decoded: Value = serde_json::from_str(&pairs[0].1).unwrap();
        assert_eq!(decoded, payload);
    }
}
