//! The `[github]` table of a channel with `kind = "github"`: credentials,
//! the events that wake the agent, progress and replies. Every problem is a
//! diagnostic; the settings come out typed with their defaults applied.

use std::path::Path;

use bdk_events::Admission;
use toml::Table;

use super::util::{Diags, Fields, check_env_name, check_url};
use crate::github::{
    DEFAULT_GITHUB_KEY_ENV, DEFAULT_GITHUB_SECRET_ENV, DEFAULT_GITHUB_TOKEN_ENV, GITHUB_EVENTS,
    default_triggers,
};
use crate::{GithubAppId, GithubChannel, GithubCredentials, GithubReply, GithubTrigger};

/// Keys of the `[github]` table.
const GITHUB_KEYS: &[&str] = &[
    "secret_env",
    "token_env",
    "app_id",
    "app_id_env",
    "private_key_env",
    "installation_id",
    "api_url",
    "bot",
    "repositories",
    "admission",
    "reply",
    "status",
    "status_context",
    "banner",
    "public_url",
    "on",
];

/// Keys of one `[[github.on]]` entry.
const TRIGGER_KEYS: &[&str] = &["event", "actions", "mention", "message"];

/// The checked settings, or `None` after reporting an error.
pub(super) fn settings(
    d: &mut Diags,
    path: &Path,
    channel: &Table,
    name: &str,
) -> Option<GithubChannel> {
    let errors_before = d.error_count();
    let empty = Table::new();
    let table = match channel.get("github") {
        None => &empty,
        Some(toml::Value::Table(t)) => t,
        Some(other) => {
            d.error(
                path,
                format!("`github` must be a table, found {}", other.type_str()),
                "write the settings in a `[github]` section",
            );
            return None;
        }
    };
    let f = Fields::nested(table, path, "github.");
    f.unknown_keys(d, GITHUB_KEYS);
    let env = |d: &mut Diags, key: &str, default: &str| -> String {
        let value = f
            .nonempty_string(d, key)
            .unwrap_or_else(|| default.to_owned());
        check_env_name(d, path, &value);
        value
    };
    let secret_env = env(d, "secret_env", DEFAULT_GITHUB_SECRET_ENV);
    let credentials = credentials(d, &f, &env);
    let api_url = f.nonempty_string(d, "api_url");
    if let Some(url) = &api_url {
        check_url(d, &f, "api_url", url);
    }
    let public_url = f.nonempty_string(d, "public_url");
    if let Some(url) = &public_url {
        check_url(d, &f, "public_url", url);
    }
    let bot = f.nonempty_string(d, "bot").map(|b| {
        let b = b.trim_start_matches('@').to_owned();
        if !b
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_[]".contains(c))
        {
            d.error(
                path,
                format!("`github.bot` is not a GitHub login: `{b}`"),
                "write the bot's login, such as `review-bot` or `my-app[bot]`",
            );
        }
        b
    });
    let repositories = f.strings(d, "repositories").unwrap_or_default();
    for r in &repositories {
        let ok = r.split_once('/').is_some_and(|(o, n)| {
            !o.is_empty() && !n.is_empty() && !n.contains('/') && (n == "*" || !n.contains('*'))
        });
        if !ok {
            d.error(
                path,
                format!("`github.repositories`: `{r}` is not `owner/name` or `owner/*`"),
                "list repositories as `owner/name`, or `owner/*` for all of an owner's",
            );
        }
    }
    let admission = match f.string(d, "admission").as_deref() {
        None | Some("coalesce") => Admission::Coalesce,
        Some("preempt") => Admission::Preempt,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`github.admission` must be \"coalesce\" or \"preempt\", found \"{other}\""
                ),
                "set `github.admission` to \"coalesce\" (the default) or \"preempt\"",
            );
            Admission::Coalesce
        }
    };
    let reply = match f.string(d, "reply").as_deref() {
        None | Some("comment") => GithubReply::Comment,
        Some("review") => GithubReply::Review,
        Some("none") => GithubReply::None,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`github.reply` must be \"comment\", \"review\" or \"none\", found \"{other}\""
                ),
                "set `github.reply` to \"comment\" (the default), \"review\" or \"none\"",
            );
            GithubReply::Comment
        }
    };
    let status = f.bool(d, "status").unwrap_or(true);
    let status_context = f
        .nonempty_string(d, "status_context")
        .unwrap_or_else(|| format!("bdk/{name}"));
    let banner = f.bool(d, "banner").unwrap_or(true);
    let triggers = triggers(d, path, table);
    if d.error_count() > errors_before {
        return None;
    }
    Some(GithubChannel {
        secret_env,
        api_url: api_url.map(|u| u.trim_end_matches('/').to_owned()),
        credentials,
        bot,
        repositories,
        triggers,
        admission,
        reply,
        status_context: status.then_some(status_context),
        banner,
        public_url: public_url.map(|u| u.trim_end_matches('/').to_owned()),
    })
}

fn credentials(
    d: &mut Diags,
    f: &Fields<'_>,
    env: &dyn Fn(&mut Diags, &str, &str) -> String,
) -> GithubCredentials {
    let app_id = match (f.has("app_id"), f.has("app_id_env")) {
        (true, true) => {
            d.error(
                f.path,
                "`github.app_id` and `github.app_id_env` are both set",
                "keep one: the app id itself, or the variable that holds it",
            );
            None
        }
        (true, false) => f.positive(d, "app_id").map(GithubAppId::Literal),
        (false, true) => Some(GithubAppId::Env(env(d, "app_id_env", ""))),
        (false, false) => None,
    };
    let installation_id = f.positive(d, "installation_id");
    match app_id {
        Some(app_id) => {
            if f.has("token_env") {
                d.error(
                    f.path,
                    "`github.token_env` is set beside a GitHub App's `app_id`",
                    "authenticate either with a token (`token_env`) or as an App (`app_id` and `private_key_env`)",
                );
            }
            GithubCredentials::App {
                app_id,
                private_key_env: env(d, "private_key_env", DEFAULT_GITHUB_KEY_ENV),
                installation_id,
            }
        }
        None => {
            for key in ["private_key_env", "installation_id"] {
                if f.has(key) {
                    d.error(
                        f.path,
                        format!("`github.{key}` is set but no `app_id`"),
                        "add `app_id` (or `app_id_env`) to authenticate as a GitHub App, or remove the key",
                    );
                }
            }
            GithubCredentials::Token {
                token_env: env(d, "token_env", DEFAULT_GITHUB_TOKEN_ENV),
            }
        }
    }
}

/// `[[github.on]]`, or the defaults when there is none.
fn triggers(d: &mut Diags, path: &Path, table: &Table) -> Vec<GithubTrigger> {
    let items = match table.get("on") {
        None => return default_triggers(),
        Some(toml::Value::Array(items)) => items,
        Some(other) => {
            d.error(
                path,
                format!(
                    "`github.on` must be an array of tables, found {}",
                    other.type_str()
                ),
                "declare each event as a `[[github.on]]` section",
            );
            return Vec::new();
        }
    };
    if items.is_empty() {
        d.error(
            path,
            "`github.on` is empty: nothing would wake the agent",
            "add a `[[github.on]]` entry, or remove `on` for the default events",
        );
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let Some(t) = item.as_table() else {
            d.error(
                path,
                format!("`github.on[{i}]` must be a table"),
                "write each event as a `[[github.on]]` section",
            );
            continue;
        };
        let f = Fields::nested(t, path, format!("github.on[{i}]."));
        f.unknown_keys(d, TRIGGER_KEYS);
        let Some(event) = f.nonempty_string(d, "event") else {
            if !f.has("event") {
                d.error(
                    path,
                    format!("`github.on[{i}]` has no `event`"),
                    format!("add `event = ` one of {}", GITHUB_EVENTS.join(", ")),
                );
            }
            continue;
        };
        if !GITHUB_EVENTS.contains(&event.as_str()) {
            d.error(
                path,
                format!(
                    "`github.on[{i}].event`: `{event}` is not an event the GitHub channel acts on"
                ),
                format!("use one of {}", GITHUB_EVENTS.join(", ")),
            );
            continue;
        }
        let actions = f.strings(d, "actions").unwrap_or_default();
        let comment = matches!(
            event.as_str(),
            "issue_comment" | "pull_request_review_comment" | "pull_request_review"
        );
        let mention = f.bool(d, "mention").unwrap_or(comment);
        let message = f.nonempty_string(d, "message");
        if let Some(source) = &message
            && let Err(e) = minijinja::Environment::new().template_from_str(source)
        {
            let detail = e
                .detail()
                .map_or_else(|| e.kind().to_string(), str::to_owned);
            d.error(
                path,
                format!("`github.on[{i}].message` is not a valid template: {detail}"),
                "fix the template syntax (minijinja, `{{ payload.pull_request.title }}`)",
            );
            continue;
        }
        out.push(GithubTrigger {
            event,
            actions,
            mention,
            message,
        });
    }
    out
}
