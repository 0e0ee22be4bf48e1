//! What both `bdk slack` commands share: their arguments, how a command
//! ends early (its exit code and message), which Slack channel they work
//! on, and the public URL Slack sends requests to. A leaf: it names no
//! other module of `slack`.

use std::fmt;
use std::path::{Path, PathBuf};

use bdk_core::Project;
use bdk_core::project::SlackChannel;

use crate::support::UNUSABLE;

/// The variable naming the server's public base URL when neither `--url`
/// nor the channel's `public_url` does.
pub(super) const PUBLIC_URL_ENV: &str = "BDK_PUBLIC_URL";

/// The project and the channel a command works on.
#[derive(clap::Args, Debug)]
pub(super) struct Target {
    /// The project directory (the one holding `agent/`).
    #[arg(value_name = "DIR", default_value = ".")]
    pub(super) dir: PathBuf,
    /// The Slack channel (the file stem of `agent/channels/<name>.toml`);
    /// needed when the project has several.
    #[arg(long, value_name = "NAME")]
    pub(super) channel: Option<String>,
    /// The server's public base URL, as Slack reaches it (default: the
    /// channel's `public_url`, else `BDK_PUBLIC_URL`). On a multi-agent
    /// server include the agent's slug: `https://host/<slug>`.
    #[arg(long, value_name = "PUBLIC_URL")]
    pub(super) url: Option<String>,
}

/// Arguments of `bdk slack manifest`.
#[derive(clap::Args, Debug)]
pub(super) struct ManifestArgs {
    #[command(flatten)]
    pub(super) target: Target,
    /// Print YAML instead of JSON (Slack takes either).
    #[arg(long)]
    pub(super) yaml: bool,
}

/// Arguments of `bdk slack doctor`.
#[derive(clap::Args, Debug)]
pub(super) struct DoctorArgs {
    #[command(flatten)]
    pub(super) target: Target,
    /// Print `{"ok", "checks": [{"name", "status", "detail", "fix"}]}`.
    #[arg(long)]
    pub(super) json: bool,
}

/// Why a command stops before its work: the exit code, and the message
/// printed for it (empty when it was printed already).
#[derive(Debug)]
pub(super) struct Exit {
    pub(super) code: u8,
    pub(super) message: String,
}

impl Exit {
    /// Bad arguments or project (exit 2).
    pub(super) fn unusable(message: impl fmt::Display) -> Exit {
        Exit {
            code: UNUSABLE,
            message: message.to_string(),
        }
    }
}

/// The project at `dir`, or exit 2 after its diagnostics were printed.
pub(super) fn load(dir: &Path) -> Result<Project, Exit> {
    crate::support::load(dir).map_err(|code| Exit {
        code,
        message: String::new(),
    })
}

/// The Slack channel to work on: `wanted`, or the project's only one.
pub(super) fn pick<'p>(
    project: &'p Project,
    wanted: Option<&str>,
) -> Result<(&'p str, &'p SlackChannel), Exit> {
    let slack: Vec<(&str, &SlackChannel)> = project
        .channels
        .iter()
        .filter_map(|c| c.slack.as_ref().map(|s| (c.name.as_str(), s)))
        .collect();
    let names = || {
        slack
            .iter()
            .map(|(n, _)| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(wanted) = wanted {
        if let Some(found) = slack.iter().find(|(n, _)| *n == wanted) {
            return Ok(*found);
        }
        let what = if project.channels.iter().any(|c| c.name == wanted) {
            format!("the channel `{wanted}` is not a Slack channel (no `kind = \"slack\"`)")
        } else {
            format!("the project has no channel `{wanted}`")
        };
        return Err(Exit::unusable(if slack.is_empty() {
            format!("{what}, and no Slack channel at all")
        } else {
            format!("{what}; its Slack channels: {}", names())
        }));
    }
    match slack.as_slice() {
        [] => Err(Exit::unusable(format!(
            "no Slack channel in {}\n  fix: add agent/channels/slack.toml with `kind = \"slack\"` and a `[slack]` table (docs/slack.md)",
            project.root.display()
        ))),
        [only] => Ok(*only),
        _ => Err(Exit::unusable(format!(
            "the project has {} Slack channels ({}): pass --channel NAME",
            slack.len(),
            names()
        ))),
    }
}

/// The server's public base URL: `flag`, else the channel's `public_url`,
/// else `env_url` (`BDK_PUBLIC_URL`); `None` when none is given. A given
/// one must be an absolute `http(s)://` URL without a query (exit 2).
pub(super) fn public_url(
    flag: Option<&str>,
    settings: &SlackChannel,
    env_url: Option<String>,
) -> Result<Option<String>, Exit> {
    let (url, from) = match (flag, &settings.public_url, env_url) {
        (Some(url), _, _) => (url.to_owned(), "--url"),
        (None, Some(url), _) => (url.clone(), "the channel's `public_url`"),
        (None, None, Some(url)) => (url, PUBLIC_URL_ENV),
        (None, None, None) => return Ok(None),
    };
    let url = url.trim().trim_end_matches('/').to_owned();
    let parsed = reqwest::Url::parse(&url)
        .map_err(|e| Exit::unusable(format!("{from} `{url}` is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https")
        || parsed.host_str().is_none_or(str::is_empty)
        || parsed.query().is_some()
        || parsed.fragment().is_some()
    {
        return Err(Exit::unusable(format!(
            "{from} `{url}` must be http(s)://host[/path] without a query"
        )));
    }
    Ok(Some(url))
}

/// Where Slack sends a channel's requests: `<public>/v1/channels/<name>`.
pub(super) fn request_url(public: &str, channel: &str) -> String {
    let path = bdk_api::paths::fill(bdk_api::paths::CHANNEL, &[channel]);
    format!("{}{path}", public.trim_end_matches('/'))
}

/// The exit-2 message when no public URL is known.
pub(super) fn no_public_url() -> Exit {
    Exit::unusable(format!(
        "no public URL for the request URL: pass --url https://<your public host> \
         (or set `public_url` in the channel's [slack] table, or {PUBLIC_URL_ENV})\n  \
         note: Slack must reach the server over the internet, so `bdk serve` on a laptop \
         needs a tunnel (cloudflared, ngrok, ...) whose https address you pass"
    ))
}

/// The directory name `bdk serve` mounts an agent under (its slug) on a
/// multi-agent server.
pub(super) fn slug(project: &Project) -> String {
    project
        .root
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "<slug>".to_owned())
}

/// A variable's value, `None` when unset or empty.
pub(super) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(public_url: Option<&str>) -> SlackChannel {
        let mut s = SlackChannel::default();
        s.public_url = public_url.map(str::to_owned);
        s
    }

    #[test]
    fn the_public_url_comes_from_the_flag_then_the_channel_then_the_variable() {
        let env = || Some("https://env.example.com".to_owned());
        let s = settings(Some("https://channel.example.com/"));
        assert_eq!(
            public_url(Some("https://flag.example.com/"), &s, env()).unwrap(),
            Some("https://flag.example.com".to_owned())
        );
        assert_eq!(
            public_url(None, &s, env()).unwrap(),
            Some("https://channel.example.com".to_owned())
        );
        assert_eq!(
            public_url(None, &settings(None), env()).unwrap(),
            Some("https://env.example.com".to_owned())
        );
        assert_eq!(public_url(None, &settings(None), None).unwrap(), None);
    }

    #[test]
    fn an_unusable_public_url_is_exit_2() {
        for bad in ["helper.example.com", "ftp://h", "https://h/?q=1", "http://"] {
            let exit = public_url(Some(bad), &settings(None), None).unwrap_err();
            assert_eq!(exit.code, UNUSABLE, "{bad}: {}", exit.message);
        }
    }

    #[test]
    fn the_request_url_joins_with_one_slash() {
        assert_eq!(
            request_url("https://h/agent/", "slack"),
            "https://h/agent/v1/channels/slack"
        );
    }
}
