//! What a webhook delivery means for the agent: answer a `ping`, ignore an
//! event nobody asked for (or one the bot caused itself), or wake the
//! session of the pull request or issue it is about with a message
//! rendered from the payload.
//!
//! [`classify`] is pure: it reads the channel's settings, the bot's login
//! and the delivery, and decides. The signature was checked before (by the
//! HTTP layer, over the raw body), and the durable dedupe happens after
//! (in [`crate::Github::accept`]), so only deliveries that wake anything
//! claim an id.

use bdk_core::project::github::repository_allowed;
use bdk_core::project::{GithubChannel, GithubTrigger};
use bdk_events::Admission;
use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Value, json};

use crate::thread::{Thread, thread_key};

/// The hidden marker every comment the pack writes carries, so the pack
/// knows its own comments even before it knows its login.
pub const MARKER: &str = "<!-- bdk:github";

/// One delivery, as GitHub sent it.
#[derive(Clone, Copy, Debug)]
pub struct Delivery<'a> {
    /// `X-GitHub-Event`.
    pub event: &'a str,
    /// `X-GitHub-Delivery`.
    pub id: &'a str,
    /// The parsed body.
    pub payload: &'a Value,
    /// Where the server is reached from outside (`https://bots.example.com`),
    /// as the request showed it; links to traces start there when the
    /// channel sets no `public_url`.
    pub origin: Option<&'a str>,
}

/// What to do with a delivery.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Classified {
    /// A `ping`: GitHub checking the hook.
    Pong {
        /// GitHub's zen line.
        zen: Option<String>,
        /// The hook's id.
        hook_id: Option<u64>,
    },
    /// Nothing to do, and why.
    Ignored(String),
    /// Wake the thread's session.
    Wake(Box<Wake>),
}

/// A session to wake: the conversation key, the message, and what the pack
/// records about the thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wake {
    /// `owner/repo#123`.
    pub key: String,
    /// The rendered message.
    pub message: String,
    /// How it joins a busy session.
    pub admission: Admission,
    /// The delivery id (the message's delivery id too).
    pub delivery: String,
    /// What the delivery says about the thread.
    pub thread: Thread,
}

/// A delivery that cannot be acted on as sent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IngressError {
    /// The payload lacks what the event always carries.
    #[error("the `{event}` payload has no {what}")]
    Payload {
        /// The event.
        event: String,
        /// What is missing.
        what: &'static str,
    },
    /// The message template failed for this payload.
    #[error("the message template for `{event}` failed: {detail}")]
    Template {
        /// The event.
        event: String,
        /// minijinja's explanation.
        detail: String,
    },
}

/// Decides what `delivery` means for a channel with `settings`, whose bot
/// acts as `bot` (its login, when known).
pub fn classify(
    settings: &GithubChannel,
    bot: Option<&str>,
    delivery: &Delivery<'_>,
) -> Result<Classified, IngressError> {
    let p = delivery.payload;
    if delivery.event == "ping" {
        return Ok(Classified::Pong {
            zen: p.get("zen").and_then(Value::as_str).map(str::to_owned),
            hook_id: p.get("hook_id").and_then(Value::as_u64),
        });
    }
    let action = p.get("action").and_then(Value::as_str);
    let Some(trigger) = settings
        .triggers
        .iter()
        .find(|t| t.takes(delivery.event, action))
    else {
        return Ok(Classified::Ignored(match action {
            Some(a) => format!("`{}` `{a}` does not wake this channel", delivery.event),
            None => format!("`{}` does not wake this channel", delivery.event),
        }));
    };
    let missing = |what| IngressError::Payload {
        event: delivery.event.to_owned(),
        what,
    };
    let repo = p
        .pointer("/repository/full_name")
        .and_then(Value::as_str)
        .ok_or_else(|| missing("`repository.full_name`"))?;
    if !repository_allowed(&settings.repositories, repo) {
        return Ok(Classified::Ignored(format!(
            "repository `{repo}` is not served by this channel"
        )));
    }
    let sender = p
        .pointer("/sender/login")
        .and_then(Value::as_str)
        .unwrap_or("someone");
    let sender_is_bot = p.pointer("/sender/type").and_then(Value::as_str) == Some("Bot");
    if let Some(bot) = bot
        && sender.eq_ignore_ascii_case(bot)
    {
        return Ok(Classified::Ignored(format!(
            "the event was caused by the bot itself (`{sender}`)"
        )));
    }
    let item = thread_item(delivery.event, p).ok_or_else(|| missing("pull request or issue"))?;
    let number = item
        .get("number")
        .and_then(Value::as_u64)
        .ok_or_else(|| missing("number"))?;
    let comment = comment_text(delivery.event, p);
    if let Some(text) = comment {
        if text.contains(MARKER) {
            return Ok(Classified::Ignored(
                "the comment was written by this pack".to_owned(),
            ));
        }
        if sender_is_bot {
            return Ok(Classified::Ignored(format!(
                "comments by other bots (`{sender}`) do not wake the agent"
            )));
        }
        if trigger.mention {
            let Some(bot) = bot else {
                return Ok(Classified::Ignored(
                    "the bot's login is not known, so mentions cannot be recognised; set `github.bot`"
                        .to_owned(),
                ));
            };
            if !mentions(text, bot) {
                return Ok(Classified::Ignored(format!(
                    "the comment does not mention @{}",
                    mention_name(bot)
                )));
            }
        }
    }
    let pull = delivery.event.starts_with("pull_request") || item.get("pull_request").is_some();
    let thread = Thread {
        repo: repo.to_owned(),
        number,
        pull,
        head_sha: p
            .pointer("/pull_request/head/sha")
            .and_then(Value::as_str)
            .map(str::to_owned),
        title: str_at(item, "title").to_owned(),
        html_url: str_at(item, "html_url").to_owned(),
        installation: p.pointer("/installation/id").and_then(Value::as_u64),
        banner_id: None,
        origin: delivery.origin.map(str::to_owned),
    };
    let message = render(trigger, delivery, &thread, sender, bot, action)?;
    Ok(Classified::Wake(Box::new(Wake {
        key: thread_key(repo, number),
        message,
        admission: settings.admission,
        delivery: delivery.id.to_owned(),
        thread,
    })))
}

/// The pull request or issue the event is about.
fn thread_item<'a>(event: &str, p: &'a Value) -> Option<&'a Value> {
    match event {
        "issue_comment" | "issues" => p.get("issue"),
        _ => p.get("pull_request"),
    }
    .filter(|v| v.is_object())
}

/// The text a person wrote, for events that carry one.
fn comment_text<'a>(event: &str, p: &'a Value) -> Option<&'a str> {
    match event {
        "issue_comment" | "pull_request_review_comment" => Some(
            p.pointer("/comment/body")
                .and_then(Value::as_str)
                .unwrap_or(""),
        ),
        "pull_request_review" => Some(
            p.pointer("/review/body")
                .and_then(Value::as_str)
                .unwrap_or(""),
        ),
        _ => None,
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The name people write after `@` for `login` (an App's login ends in
/// `[bot]`, its mention does not).
pub fn mention_name(login: &str) -> &str {
    login.strip_suffix("[bot]").unwrap_or(login)
}

/// True when `text` mentions `@login` as a whole word, in any case.
pub fn mentions(text: &str, login: &str) -> bool {
    let name = mention_name(login).to_ascii_lowercase();
    if name.is_empty() {
        return false;
    }
    let lower = text.to_ascii_lowercase();
    let needle = format!("@{name}");
    let mut from = 0;
    while let Some(at) = lower[from..].find(&needle) {
        let start = from + at;
        let end = start + needle.len();
        let before_ok = start == 0
            || !lower[..start]
                .chars()
                .next_back()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-');
        let after_ok = !lower[end..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-' || c == '/');
        if before_ok && after_ok {
            return true;
        }
        from = end;
    }
    false
}

/// What happened, as a verb phrase for the default messages.
fn did(event: &str, action: Option<&str>) -> String {
    match (event, action.unwrap_or("")) {
        ("pull_request", "synchronize") => "pushed new commits to".to_owned(),
        ("pull_request", "ready_for_review") => "marked ready for review".to_owned(),
        (_, "") => "updated".to_owned(),
        (_, a) => a.replace('_', " "),
    }
}

/// The pack's message for each event, when the trigger sets none.
fn default_template(event: &str) -> &'static str {
    match event {
        "pull_request" => {
            "{{ sender }} {{ did }} pull request {{ repo }}#{{ number }}: {{ title }}\n\
             {{ url }}\n\
             Branch {{ payload.pull_request.head.ref }} into {{ payload.pull_request.base.ref }}, \
             head commit {{ payload.pull_request.head.sha }}\
             {% if payload.pull_request.draft %} (draft){% endif %}.\
             {% if payload.pull_request.body %}\n\nDescription:\n{{ payload.pull_request.body }}{% endif %}"
        }
        "issue_comment" => {
            "{{ sender }} commented on {{ kind }} {{ repo }}#{{ number }} ({{ title }}):\n\
             {{ payload.comment.body }}\n\
             {{ payload.comment.html_url }}"
        }
        "pull_request_review_comment" => {
            "{{ sender }} commented on {{ payload.comment.path }}\
             {% if payload.comment.line %} line {{ payload.comment.line }}{% endif %} \
             in pull request {{ repo }}#{{ number }} ({{ title }}):\n\
             {{ payload.comment.body }}\n\
             {{ payload.comment.html_url }}"
        }
        "pull_request_review" => {
            "{{ sender }} reviewed pull request {{ repo }}#{{ number }} ({{ title }}): \
             {{ payload.review.state | lower | replace('_', ' ') }}\
             {% if payload.review.body %}\n{{ payload.review.body }}{% endif %}"
        }
        _ => {
            "{{ sender }} {{ did }} issue {{ repo }}#{{ number }}: {{ title }}\n\
             {{ url }}\
             {% if payload.issue.body %}\n\n{{ payload.issue.body }}{% endif %}"
        }
    }
}

fn render(
    trigger: &GithubTrigger,
    delivery: &Delivery<'_>,
    thread: &Thread,
    sender: &str,
    bot: Option<&str>,
    action: Option<&str>,
) -> Result<String, IngressError> {
    // An author's template is strict, as on every channel: printing a
    // field the payload lacks is an error, not an empty string. The pack's
    // own templates read optional fields that older payloads (and GitHub
    // Enterprise Server's) leave out, so for them a missing field is empty.
    let (source, undefined) = match trigger.message.as_deref() {
        Some(own) => (own, UndefinedBehavior::Strict),
        None => (
            default_template(delivery.event),
            UndefinedBehavior::Chainable,
        ),
    };
    let mut env = Environment::new();
    env.set_undefined_behavior(undefined);
    let context = json!({
        "event": delivery.event,
        "action": action,
        "did": did(delivery.event, action),
        "payload": delivery.payload,
        "repo": thread.repo,
        "number": thread.number,
        "kind": if thread.pull { "pull request" } else { "issue" },
        "title": thread.title,
        "url": thread.html_url,
        "sender": sender,
        "bot": bot,
    });
    let failed = |e: minijinja::Error| IngressError::Template {
        event: delivery.event.to_owned(),
        detail: e
            .detail()
            .map_or_else(|| e.kind().to_string(), str::to_owned),
    };
    let text = env
        .render_str(
            source,
            minijinja::Value::from(minijinja::value::Serde(&context)),
        )
        .map_err(failed)?;
    Ok(text.trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_whole_words() {
        assert!(mentions("hey @review-bot, look", "review-bot"));
        assert!(mentions("@Review-Bot please", "review-bot"));
        assert!(mentions("ping @my-app", "my-app[bot]"));
        assert!(!mentions("hey @review-bot2", "review-bot"));
        assert!(!mentions("mail me@review-bot", "review-bot"));
        assert!(!mentions("see @review-bot/team", "review-bot"));
        assert!(!mentions("no mention", "review-bot"));
        assert!(mentions("x @nope and @review-bot", "review-bot"));
    }

    #[test]
    fn verbs() {
        assert_eq!(did("pull_request", Some("opened")), "opened");
        assert_eq!(
            did("pull_request", Some("synchronize")),
            "pushed new commits to"
        );
        assert_eq!(did("issues", Some("ready_for_review")), "ready for review");
    }
}
