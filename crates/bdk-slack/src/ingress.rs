//! What a request from Slack means: its signature, its shape (a URL
//! check, an event, a button click), and whether an event engages the bot.
//!
//! Everything here is pure: the pack ([`crate::Slack`]) adds what needs the
//! store (dedupe, which threads the bot is in) and the HTTP layer what
//! needs the host.

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use bdk_core::project::SlackChannel;

/// How far a request's timestamp may be from now, in seconds: Slack's
/// advice against replayed requests.
pub const MAX_SKEW_SECS: i64 = 300;

/// Why a request's signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header is missing.
    #[error("missing {0} header")]
    Missing(&'static str),
    /// The timestamp is not a number of seconds.
    #[error("X-Slack-Request-Timestamp is not a Unix time")]
    BadTimestamp,
    /// The timestamp is older (or newer) than five minutes.
    #[error(
        "the request timestamp is {0} s away from now (more than five minutes): a replay is refused"
    )]
    Stale(i64),
    /// The signature does not match the body.
    #[error("X-Slack-Signature does not match the body")]
    Mismatch,
}

/// `v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>">`, as Slack signs.
pub fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap_or_else(|_| {
        // HMAC takes keys of any length; this cannot fail.
        unreachable!("HMAC accepts every key length")
    });
    mac.update(b"v0:");
    mac.update(timestamp.as_bytes());
    mac.update(b":");
    mac.update(body);
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

/// Checks `X-Slack-Request-Timestamp` and `X-Slack-Signature` against the
/// body, in constant time, refusing timestamps more than five minutes from
/// `now` (Unix seconds).
pub fn verify(
    secret: &[u8],
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<(), SignatureError> {
    let timestamp = timestamp.ok_or(SignatureError::Missing("X-Slack-Request-Timestamp"))?;
    let signature = signature.ok_or(SignatureError::Missing("X-Slack-Signature"))?;
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    let skew = now.saturating_sub(ts);
    if skew.saturating_abs() > MAX_SKEW_SECS {
        return Err(SignatureError::Stale(skew));
    }
    let Some(hex_sig) = signature.trim().strip_prefix("v0=") else {
        return Err(SignatureError::Mismatch);
    };
    let Ok(given) = hex::decode(hex_sig) else {
        return Err(SignatureError::Mismatch);
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| SignatureError::Mismatch)?;
    mac.update(b"v0:");
    mac.update(timestamp.trim().as_bytes());
    mac.update(b":");
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| SignatureError::Mismatch)
}

/// A request body Slack sent, by shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// `url_verification`: answer the challenge.
    UrlVerification {
        /// The value to echo.
        challenge: String,
    },
    /// `event_callback`: one event.
    Event {
        /// The event's id, for dedupe.
        event_id: String,
        /// The workspace.
        team_id: Option<String>,
        /// The event.
        event: Value,
    },
    /// An interactivity payload (`payload=` form field): a button click.
    Interaction(Value),
    /// Another envelope (`app_rate_limited`, ...): acknowledged.
    Other(String),
}

/// Why a body is not a request from Slack.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not JSON where JSON is due.
    #[error("the body is not JSON: {0}")]
    Json(String),
    /// Neither JSON nor an interactivity form.
    #[error(
        "unsupported content type `{0}`: Slack sends application/json or application/x-www-form-urlencoded"
    )]
    ContentType(String),
    /// A required field is missing.
    #[error("{0}")]
    Shape(String),
}

/// Parses a body by its content type.
pub fn parse(content_type: &str, body: &[u8]) -> Result<Request, ParseError> {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => {
            let v: Value =
                serde_json::from_slice(body).map_err(|e| ParseError::Json(e.to_string()))?;
            let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
            match kind {
                "url_verification" => Ok(Request::UrlVerification {
                    challenge: v
                        .get("challenge")
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            ParseError::Shape("url_verification without a challenge".into())
                        })?
                        .to_owned(),
                }),
                "event_callback" => {
                    let event_id = v
                        .get("event_id")
                        .and_then(Value::as_str)
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| ParseError::Shape("event_callback without event_id".into()))?
                        .to_owned();
                    let event = v
                        .get("event")
                        .filter(|e| e.is_object())
                        .cloned()
                        .ok_or_else(|| {
                            ParseError::Shape("event_callback without an event".into())
                        })?;
                    Ok(Request::Event {
                        event_id,
                        team_id: v.get("team_id").and_then(Value::as_str).map(str::to_owned),
                        event,
                    })
                }
                "" => Err(ParseError::Shape("the body has no `type`".into())),
                other => Ok(Request::Other(other.to_owned())),
            }
        }
        "application/x-www-form-urlencoded" => {
            let payload = form_urlencoded::parse(body)
                .find(|(k, _)| k == "payload")
                .map(|(_, v)| v.into_owned())
                .ok_or_else(|| ParseError::Shape("the form has no `payload` field".into()))?;
            let v: Value =
                serde_json::from_str(&payload).map_err(|e| ParseError::Json(e.to_string()))?;
            if !v.is_object() {
                return Err(ParseError::Shape("the payload is not an object".into()));
            }
            Ok(Request::Interaction(v))
        }
        other => Err(ParseError::ContentType(other.to_owned())),
    }
}

/// How a message reached the bot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// An `app_mention`.
    Mention,
    /// A direct message.
    Direct,
    /// A reply in a thread (engages only in a thread the bot is in).
    Thread,
    /// A watched conversation's message matching a pattern.
    Watch,
}

/// A message for the session of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engage {
    /// The conversation id.
    pub conversation: String,
    /// The thread's parent ts (the message's own for a top-level message:
    /// the reply starts the thread).
    pub thread_ts: String,
    /// The message's ts.
    pub ts: String,
    /// Who wrote it (a user id, or a bot's id for alerts).
    pub user: String,
    /// What the model reads.
    pub message: String,
    /// How it came.
    pub via: Via,
}

impl Engage {
    /// The conversation key of the thread: `<conversation>/<thread_ts>`.
    pub fn key(&self) -> String {
        thread_key(&self.conversation, &self.thread_ts)
    }
}

/// The conversation key of a thread.
pub fn thread_key(conversation: &str, thread_ts: &str) -> String {
    format!("{conversation}/{thread_ts}")
}

/// What an event means for the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// Nothing to do, and why.
    Ignored(String),
    /// A message for a thread's session.
    Engage(Engage),
    /// A stop word: stop the thread's running turn.
    Stop {
        /// The thread's key.
        key: String,
        /// Who asked.
        user: String,
    },
}

/// Who the bot is: its user id (mentions) and bot id (its own messages).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bot {
    /// `U…`.
    pub user_id: String,
    /// `B…`, when known.
    pub bot_id: Option<String>,
}

/// Message subtypes that are conversation; every other subtype (edits,
/// deletions, joins, topic changes, ...) is ignored.
const CONVERSATION_SUBTYPES: &[&str] = &["thread_broadcast", "file_share", "me_message"];

/// Classifies one event against the channel's settings.
pub fn classify(settings: &SlackChannel, bot: &Bot, event: &Value) -> Classified {
    let text_of = |k: &str| event.get(k).and_then(Value::as_str).unwrap_or("");
    let kind = text_of("type");
    let conversation = text_of("channel").to_owned();
    let ts = text_of("ts").to_owned();
    let user = text_of("user").to_owned();
    let subtype = event.get("subtype").and_then(Value::as_str);
    let from_bot = event.get("bot_id").and_then(Value::as_str);
    let thread_ts = event
        .get("thread_ts")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let text = text_of("text");
    let ignored = |why: &str| Classified::Ignored(why.to_owned());

    if conversation.is_empty() || ts.is_empty() {
        return ignored("the event names no conversation or ts");
    }
    if !user.is_empty() && user == bot.user_id {
        return ignored("the bot's own message");
    }
    if from_bot.is_some() && from_bot == bot.bot_id.as_deref() {
        return ignored("the bot's own message");
    }
    let mention = format!("<@{}>", bot.user_id);
    let body = strip_mention(text, &mention);
    let in_thread = thread_ts.clone().unwrap_or_else(|| ts.clone());
    let engage = |via: Via, who: &str, message: String| {
        Classified::Engage(Engage {
            conversation: conversation.clone(),
            thread_ts: in_thread.clone(),
            ts: ts.clone(),
            user: who.to_owned(),
            message,
            via,
        })
    };
    let stop = || {
        let word = body
            .trim()
            .trim_end_matches(['!', '.'])
            .trim()
            .to_lowercase();
        (!word.is_empty() && settings.stop_words.contains(&word)).then(|| Classified::Stop {
            key: thread_key(&conversation, &in_thread),
            user: user.clone(),
        })
    };

    match kind {
        "app_mention" => {
            if user.is_empty() || from_bot.is_some() {
                return ignored("a mention by a bot");
            }
            if !settings.channels.is_empty() && !settings.channels.contains(&conversation) {
                return ignored("a mention in a conversation the channel does not serve");
            }
            if body.trim().is_empty() {
                return engage(Via::Mention, &user, format!("<@{user}> mentioned you"));
            }
            if let Some(s) = stop() {
                return s;
            }
            engage(Via::Mention, &user, format!("<@{user}>: {body}"))
        }
        "message" => {
            if let Some(sub) = subtype
                && !CONVERSATION_SUBTYPES.contains(&sub)
                && sub != "bot_message"
            {
                return Classified::Ignored(format!("a `{sub}` message is not conversation"));
            }
            let channel_type = text_of("channel_type");
            let watched = settings.watch.iter().find(|w| w.channel == conversation);
            let is_bot = from_bot.is_some() || subtype == Some("bot_message");
            if let Some(w) = watched
                && thread_ts.as_ref().is_none_or(|t| *t == ts)
            {
                if is_bot && !w.bots {
                    return ignored("a bot's message in a watch that takes none");
                }
                let matched = w
                    .patterns
                    .iter()
                    .filter_map(|p| regex::Regex::new(p).ok())
                    .any(|re| re.is_match(text));
                if matched {
                    let who = if user.is_empty() {
                        from_bot.unwrap_or("a bot").to_owned()
                    } else {
                        user.clone()
                    };
                    let name = event
                        .pointer("/bot_profile/name")
                        .or_else(|| event.get("username"))
                        .and_then(Value::as_str)
                        .map(|n| format!(" ({n})"))
                        .unwrap_or_default();
                    let from = if user.is_empty() {
                        format!("{who}{name}")
                    } else {
                        format!("<@{who}>")
                    };
                    return engage(
                        Via::Watch,
                        &who,
                        format!("Alert in <#{conversation}> from {from}:\n{text}"),
                    );
                }
            }
            if is_bot || user.is_empty() {
                return ignored("a bot's message");
            }
            if channel_type == "im" {
                if !settings.direct_messages {
                    return ignored("direct messages are off for this channel");
                }
                if let Some(s) = stop() {
                    return s;
                }
                return engage(Via::Direct, &user, format!("<@{user}>: {body}"));
            }
            if text.contains(&mention) {
                return ignored("a mention: its app_mention event carries it");
            }
            match &thread_ts {
                Some(t) if *t != ts => {
                    if let Some(s) = stop() {
                        return s;
                    }
                    engage(Via::Thread, &user, format!("<@{user}>: {body}"))
                }
                _ => ignored("a message not addressed to the bot"),
            }
        }
        other => Classified::Ignored(format!("`{other}` events are not acted on")),
    }
}

/// The text without the bot's mention (and the space after it).
fn strip_mention(text: &str, mention: &str) -> String {
    let mut out = text.replace(mention, " ");
    // Collapse the gap the mention leaves, keeping line breaks.
    while out.contains("  ") {
        out = out.replace("  ", " ");
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use bdk_core::project::SlackWatch;
    use serde_json::json;

    const SECRET: &[u8] = b"8f742231b10e8888abcd99yyyzzz85a5";

    #[test]
    fn slacks_documented_example_verifies() {
        // The example of Slack's "Verifying requests from Slack".
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(sign(SECRET, "1531420618", body), expected);
        assert_eq!(
            verify(
                SECRET,
                Some("1531420618"),
                Some(expected),
                body,
                1_531_420_618 + 10
            ),
            Ok(())
        );
    }

    #[test]
    fn bad_signatures_and_stale_timestamps_are_refused() {
        let body = br#"{"type":"event_callback"}"#;
        let now = 1_700_000_000;
        let ts = now.to_string();
        let good = sign(SECRET, &ts, body);
        assert_eq!(verify(SECRET, Some(&ts), Some(&good), body, now), Ok(()));
        type Case<'a> = (Option<&'a str>, Option<&'a str>, &'a [u8], SignatureError);
        let cases: Vec<Case> = vec![
            (
                None,
                Some(&good),
                body,
                SignatureError::Missing("X-Slack-Request-Timestamp"),
            ),
            (
                Some(&ts),
                None,
                body,
                SignatureError::Missing("X-Slack-Signature"),
            ),
            (
                Some("yesterday"),
                Some(&good),
                body,
                SignatureError::BadTimestamp,
            ),
            (Some(&ts), Some("v0=00"), body, SignatureError::Mismatch),
            (Some(&ts), Some("v1=abc"), body, SignatureError::Mismatch),
            (Some(&ts), Some("v0=zz"), body, SignatureError::Mismatch),
            (Some(&ts), Some(&good), b"{}", SignatureError::Mismatch),
        ];
        for (t, s, b, want) in cases {
            assert_eq!(verify(SECRET, t, s, b, now), Err(want));
        }
        // Signed correctly, but six minutes old (or ahead).
        for skew in [-360, 360] {
            let old = (now + skew).to_string();
            let sig = sign(SECRET, &old, body);
            assert!(matches!(
                verify(SECRET, Some(&old), Some(&sig), body, now),
                Err(SignatureError::Stale(_))
            ));
        }
    }

    #[test]
    fn bodies_parse_by_shape() {
        let check = parse(
            "application/json",
            br#"{"token":"t","challenge":"abc","type":"url_verification"}"#,
        );
        assert_eq!(
            check,
            Ok(Request::UrlVerification {
                challenge: "abc".into()
            })
        );
        let event = parse(
            "application/json; charset=utf-8",
            br#"{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention"}}"#,
        )
        .unwrap();
        assert!(matches!(event, Request::Event { ref event_id, .. } if event_id == "Ev1"));
        let form = format!(
            "payload={}",
            form_urlencoded::byte_serialize(br#"{"type":"block_actions"}"#).collect::<String>()
        );
        assert!(matches!(
            parse("application/x-www-form-urlencoded", form.as_bytes()),
            Ok(Request::Interaction(_))
        ));
        assert!(matches!(
            parse("application/json", br#"{"type":"app_rate_limited"}"#),
            Ok(Request::Other(_))
        ));
        for (ct, body) in [
            ("application/json", &b"{nope"[..]),
            (
                "application/json",
                br#"{"type":"event_callback","event":{}}"#,
            ),
            (
                "application/json",
                br#"{"type":"event_callback","event_id":"E"}"#,
            ),
            ("application/json", br#"[1]"#),
            ("application/x-www-form-urlencoded", b"text=hi"),
            ("application/x-www-form-urlencoded", b"payload=%5B1%5D"),
            ("text/plain", b"hi"),
        ] {
            assert!(parse(ct, body).is_err(), "{ct} {body:?}");
        }
    }

    fn bot() -> Bot {
        Bot {
            user_id: "U0BOT".into(),
            bot_id: Some("B0BOT".into()),
        }
    }

    fn engaged(c: &Classified) -> &Engage {
        match c {
            Classified::Engage(e) => e,
            other => panic!("not engaged: {other:?}"),
        }
    }

    #[test]
    fn mentions_direct_messages_and_thread_replies_engage() {
        let s = SlackChannel::default();
        let m = classify(
            &s,
            &bot(),
            &json!({"type": "app_mention", "channel": "C1", "user": "U0ALICE", "ts": "1.1", "text": "<@U0BOT> is prod up?"}),
        );
        let e = engaged(&m);
        assert_eq!(e.key(), "C1/1.1", "a top-level mention starts a thread");
        assert_eq!(e.message, "<@U0ALICE>: is prod up?");
        assert_eq!(e.via, Via::Mention);
        let m = classify(
            &s,
            &bot(),
            &json!({"type": "app_mention", "channel": "C1", "user": "U0ALICE", "ts": "1.5", "thread_ts": "1.1", "text": "and staging <@U0BOT>?"}),
        );
        assert_eq!(engaged(&m).key(), "C1/1.1");
        let dm = classify(
            &s,
            &bot(),
            &json!({"type": "message", "channel_type": "im", "channel": "D1", "user": "U0ALICE", "ts": "2.1", "text": "hello"}),
        );
        assert_eq!(engaged(&dm).via, Via::Direct);
        let reply = classify(
            &s,
            &bot(),
            &json!({"type": "message", "channel_type": "channel", "channel": "C1", "user": "U0BOB", "ts": "1.9", "thread_ts": "1.1", "text": "any news?"}),
        );
        assert_eq!(engaged(&reply).via, Via::Thread);
        assert_eq!(engaged(&reply).key(), "C1/1.1");
    }

    #[test]
    fn the_bot_other_bots_edits_and_strays_are_ignored() {
        let s = SlackChannel::default();
        for event in [
            json!({"type": "message", "channel_type": "channel", "channel": "C1", "user": "U0BOT", "ts": "1", "thread_ts": "0.5", "text": "my own reply"}),
            json!({"type": "message", "channel_type": "channel", "channel": "C1", "bot_id": "B0BOT", "ts": "1", "thread_ts": "0.5", "text": "mine too"}),
            json!({"type": "message", "subtype": "bot_message", "channel_type": "channel", "channel": "C1", "bot_id": "B0OTHER", "ts": "1", "thread_ts": "0.5", "text": "another bot"}),
            json!({"type": "app_mention", "channel": "C1", "bot_id": "B0OTHER", "user": "U0OTHERBOT", "ts": "1", "text": "<@U0BOT> hi"}),
            json!({"type": "message", "subtype": "message_changed", "channel": "C1", "ts": "1", "message": {}}),
            json!({"type": "message", "subtype": "channel_join", "channel": "C1", "user": "U0ALICE", "ts": "1", "text": "joined"}),
            json!({"type": "message", "channel_type": "channel", "channel": "C1", "user": "U0ALICE", "ts": "1", "text": "just chatting"}),
            json!({"type": "message", "channel_type": "channel", "channel": "C1", "user": "U0ALICE", "ts": "1", "text": "<@U0BOT> hi"}),
            json!({"type": "reaction_added", "user": "U0ALICE", "ts": "1", "channel": "C1"}),
            json!({"type": "app_mention", "user": "U0ALICE", "text": "no channel"}),
        ] {
            assert!(
                matches!(classify(&s, &bot(), &event), Classified::Ignored(_)),
                "{event}"
            );
        }
        let mut no_dms = SlackChannel::default();
        no_dms.direct_messages = false;
        assert!(matches!(
            classify(
                &no_dms,
                &bot(),
                &json!({"type": "message", "channel_type": "im", "channel": "D1", "user": "U0ALICE", "ts": "1", "text": "hi"})
            ),
            Classified::Ignored(_)
        ));
        let mut only = SlackChannel::default();
        only.channels = vec!["C2".into()];
        assert!(matches!(
            classify(
                &only,
                &bot(),
                &json!({"type": "app_mention", "channel": "C1", "user": "U0ALICE", "ts": "1", "text": "<@U0BOT> hi"})
            ),
            Classified::Ignored(_)
        ));
    }

    #[test]
    fn stop_words_stop_the_thread() {
        let s = SlackChannel::default();
        for text in ["<@U0BOT> stop", "STOP!", "  stop. "] {
            let c = classify(
                &s,
                &bot(),
                &json!({"type": "app_mention", "channel": "C1", "user": "U0ALICE", "ts": "1.5", "thread_ts": "1.1", "text": text}),
            );
            assert_eq!(
                c,
                Classified::Stop {
                    key: "C1/1.1".into(),
                    user: "U0ALICE".into()
                },
                "{text}"
            );
        }
        // A sentence with the word in it is a message.
        let c = classify(
            &s,
            &bot(),
            &json!({"type": "message", "channel_type": "channel", "channel": "C1", "user": "U0ALICE", "ts": "1.5", "thread_ts": "1.1", "text": "please stop the deploy"}),
        );
        assert!(matches!(c, Classified::Engage(_)));
    }

    #[test]
    fn watched_conversations_open_sessions_on_matching_messages() {
        let mut s = SlackChannel::default();
        s.watch = vec![SlackWatch::new("C0ALERTS", &["(?i)down|error"])];
        let alert = classify(
            &s,
            &bot(),
            &json!({"type": "message", "subtype": "bot_message", "channel": "C0ALERTS", "bot_id": "B0PAGER", "username": "pager", "ts": "5.1", "text": "checkout is DOWN"}),
        );
        let e = engaged(&alert);
        assert_eq!(e.via, Via::Watch);
        assert_eq!(e.key(), "C0ALERTS/5.1");
        assert!(e.message.contains("checkout is DOWN"), "{}", e.message);
        assert!(e.message.contains("pager"), "{}", e.message);
        let calm = classify(
            &s,
            &bot(),
            &json!({"type": "message", "channel": "C0ALERTS", "user": "U0ALICE", "ts": "5.2", "text": "all good"}),
        );
        assert!(matches!(calm, Classified::Ignored(_)));
    }
}
