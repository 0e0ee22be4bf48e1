//! The typed settings of a GitHub channel: a channel manifest with
//! `kind = "github"` and a `[github]` table.
//!
//! Discovery checks them and settles the defaults (the credentials, the
//! events that wake the agent and their message templates, progress and
//! replies), so the pack that serves them (`bdk-github`) reads values it
//! need not check again. What the settings mean is documented in
//! `docs/github.md`.

use bdk_events::Admission;
use serde::Serialize;

/// The variable holding the webhook secret when the manifest names none.
pub const DEFAULT_GITHUB_SECRET_ENV: &str = "GITHUB_WEBHOOK_SECRET";
/// The variable holding the token when the manifest names none.
pub const DEFAULT_GITHUB_TOKEN_ENV: &str = "GITHUB_TOKEN";
/// The variable holding a GitHub App's private key when the manifest names
/// none.
pub const DEFAULT_GITHUB_KEY_ENV: &str = "GITHUB_APP_PRIVATE_KEY";
/// The variable naming the API base URL when the manifest sets no `api_url`
/// (GitHub Actions sets it, and tests point it at a fake).
pub const GITHUB_API_URL_ENV: &str = "GITHUB_API_URL";
/// The API of github.com.
pub const GITHUB_API_URL: &str = "https://api.github.com";

/// The webhook events a GitHub channel can act on.
pub const GITHUB_EVENTS: [&str; 5] = [
    "pull_request",
    "issue_comment",
    "pull_request_review_comment",
    "pull_request_review",
    "issues",
];

/// A GitHub channel's settings, checked by discovery.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GithubChannel {
    /// The variable holding the webhook secret.
    pub secret_env: String,
    /// The API base URL the manifest sets; without one, the variable
    /// [`GITHUB_API_URL_ENV`], else [`GITHUB_API_URL`].
    pub api_url: Option<String>,
    /// How the pack authenticates to the API.
    pub credentials: GithubCredentials,
    /// The bot's login (without `@`): mentions of it wake the agent and its
    /// own events are ignored. Without one, the login the credentials act
    /// as, asked from the API once.
    pub bot: Option<String>,
    /// The repositories served (`owner/name` or `owner/*`, compared without
    /// regard to case); empty for every repository that sends deliveries.
    pub repositories: Vec<String>,
    /// The events that wake the agent, in manifest order.
    pub triggers: Vec<GithubTrigger>,
    /// How a delivery joins a busy session.
    pub admission: Admission,
    /// Where the final reply goes.
    pub reply: GithubReply,
    /// The commit status context, or `None` when no status is posted.
    pub status_context: Option<String>,
    /// Whether the sticky banner comment is kept.
    pub banner: bool,
    /// The server's public base URL, for the status's link to the trace
    /// (without one, the variable `BDK_PUBLIC_URL`, else no link).
    pub public_url: Option<String>,
}

impl Default for GithubChannel {
    /// What a `[github]` table with no keys means (for a channel named
    /// `github`): a token from `GITHUB_TOKEN`, the secret from
    /// `GITHUB_WEBHOOK_SECRET`, the default events, coalesce, a comment
    /// reply, the status and the banner.
    fn default() -> Self {
        Self {
            secret_env: DEFAULT_GITHUB_SECRET_ENV.to_owned(),
            api_url: None,
            credentials: GithubCredentials::Token {
                token_env: DEFAULT_GITHUB_TOKEN_ENV.to_owned(),
            },
            bot: None,
            repositories: Vec::new(),
            triggers: default_triggers(),
            admission: Admission::Coalesce,
            reply: GithubReply::Comment,
            status_context: Some("bdk/github".to_owned()),
            banner: true,
            public_url: None,
        }
    }
}

/// How a GitHub channel authenticates to the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum GithubCredentials {
    /// A token read from the variable `token_env`.
    Token {
        /// The variable.
        token_env: String,
    },
    /// A GitHub App: installation tokens minted with its private key.
    App {
        /// Where the app id comes from.
        app_id: GithubAppId,
        /// The variable holding the PEM private key (or a path to it).
        private_key_env: String,
        /// The installation, when fixed; otherwise the delivery's or the
        /// repository's.
        installation_id: Option<u64>,
    },
}

/// A GitHub App's id: written in the manifest or read from a variable.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GithubAppId {
    /// `app_id = 123`.
    Literal(u64),
    /// `app_id_env = "GITHUB_APP_ID"`.
    Env(String),
}

/// Where a turn's final reply is posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GithubReply {
    /// A comment on the pull request or issue.
    Comment,
    /// A review of the pull request (`COMMENT`); a comment on issues.
    Review,
    /// Nowhere: the agent replies through its tools.
    None,
}

/// One `[[github.on]]` entry: an event that wakes the agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GithubTrigger {
    /// The event (`X-GitHub-Event`), one of [`GITHUB_EVENTS`].
    pub event: String,
    /// The actions that wake the agent; empty for every action.
    pub actions: Vec<String>,
    /// Comment events: only when the comment mentions the bot.
    pub mention: bool,
    /// The message template; `None` for the pack's own for the event.
    pub message: Option<String>,
}

impl GithubTrigger {
    /// A trigger with the pack's defaults for `event`.
    pub fn new(event: &str, actions: &[&str], mention: bool) -> Self {
        Self {
            event: event.to_owned(),
            actions: actions.iter().map(|a| (*a).to_owned()).collect(),
            mention,
            message: None,
        }
    }

    /// True when this trigger takes `event` with `action`.
    pub fn takes(&self, event: &str, action: Option<&str>) -> bool {
        self.event == event
            && (self.actions.is_empty()
                || action.is_some_and(|a| self.actions.iter().any(|x| x == a)))
    }
}

/// What wakes the agent when the manifest has no `[[github.on]]`: pull
/// requests opened, pushed to, reopened or marked ready, comments and
/// review comments that mention the bot, and new issues.
pub fn default_triggers() -> Vec<GithubTrigger> {
    vec![
        GithubTrigger::new(
            "pull_request",
            &["opened", "synchronize", "reopened", "ready_for_review"],
            false,
        ),
        GithubTrigger::new("issue_comment", &["created"], true),
        GithubTrigger::new("pull_request_review_comment", &["created"], true),
        GithubTrigger::new("issues", &["opened"], false),
    ]
}

/// True when `repo` (`owner/name`) is served under `patterns`.
pub fn repository_allowed(patterns: &[String], repo: &str) -> bool {
    if patterns.is_empty() {
        return true;
    }
    let repo = repo.to_ascii_lowercase();
    patterns.iter().any(|p| {
        let p = p.to_ascii_lowercase();
        match p.strip_suffix("/*") {
            Some(owner) => repo
                .split_once('/')
                .is_some_and(|(o, name)| o == owner && !name.is_empty()),
            None => p == repo,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_patterns() {
        let p = vec!["Acme/*".to_owned(), "octo/hello".to_owned()];
        assert!(repository_allowed(&p, "acme/checkout"));
        assert!(repository_allowed(&p, "Octo/Hello"));
        assert!(!repository_allowed(&p, "octo/other"));
        assert!(!repository_allowed(&p, "acmex/checkout"));
        assert!(repository_allowed(&[], "anyone/anything"));
    }

    #[test]
    fn triggers_match_events_and_actions() {
        let t = GithubTrigger::new("pull_request", &["opened"], false);
        assert!(t.takes("pull_request", Some("opened")));
        assert!(!t.takes("pull_request", Some("closed")));
        assert!(!t.takes("issues", Some("opened")));
        assert!(GithubTrigger::new("issues", &[], false).takes("issues", None));
    }
}
