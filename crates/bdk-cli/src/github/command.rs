//! What every `bdk github` command shares: where deliveries go, how a
//! command ends (its exit code and message), the HTTP client and error text.

use std::fmt;

/// Exit code: the server accepted the delivery, or forwarding was stopped.
pub(super) const OK: u8 = 0;
/// Exit code: the server answered with an error.
pub(super) const REFUSED: u8 = 1;
/// Exit code: bad arguments or input.
pub(super) const UNUSABLE: u8 = 2;
/// Exit code: the server, the GitHub API or the relay could not be reached
/// (or the API refused).
pub(super) const UNREACHABLE: u8 = 3;

/// The server both commands send to when `--url` is not given.
pub(super) const DEFAULT_URL: &str = "http://127.0.0.1:3000";
/// The route both commands send to when `--path` is not given: the
/// loopback fan-out to every mounted GitHub channel.
pub(super) const DEFAULT_PATH: &str = bdk_api::paths::GITHUB_WEBHOOKS;

/// Where deliveries go: the server and the route.
#[derive(clap::Args, Debug)]
pub(super) struct ServerArgs {
    /// The server's base URL.
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    pub(super) url: String,
    /// The route: the loopback fan-out to every GitHub channel, or one
    /// channel's `/v1/channels/<name>` (`/<slug>/v1/channels/<name>` on a
    /// multi-agent server).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_PATH)]
    pub(super) path: String,
}

/// Arguments of `bdk github replay`.
#[derive(clap::Args, Debug)]
pub(super) struct ReplayArgs {
    /// A pull request URL (`https://github.com/OWNER/REPO/pull/N`) or a
    /// saved delivery file (GitHub's delivery JSON, `{headers, payload}`, or
    /// a bare payload).
    #[arg(value_name = "PR-URL|DELIVERY.json")]
    pub(super) source: String,
    #[command(flatten)]
    pub(super) server: ServerArgs,
    /// The event of a saved payload (default: the saved `X-GitHub-Event`
    /// header, else inferred from the payload's keys).
    #[arg(long, value_name = "NAME")]
    pub(super) event: Option<String>,
    /// The `action` of the `pull_request` event built from a pull request URL.
    #[arg(long, value_name = "NAME", default_value = "opened")]
    pub(super) action: String,
    /// The `X-GitHub-Delivery` id (default: a fresh UUID v4, so the server
    /// runs the delivery again; send the same id twice to test dedupe).
    #[arg(long, value_name = "ID")]
    pub(super) delivery_id: Option<String>,
    /// The environment variable holding the webhook secret; when it is
    /// unset the delivery is sent unsigned, which only a `--dev` server
    /// accepts.
    #[arg(long, value_name = "NAME", default_value = "GITHUB_WEBHOOK_SECRET")]
    pub(super) secret_env: String,
    /// The GitHub REST API for a pull request URL (default:
    /// `https://api.github.com` for github.com, `https://<host>/api/v3` for
    /// GitHub Enterprise). The token comes from `GITHUB_TOKEN` or `GH_TOKEN`.
    #[arg(long, value_name = "URL", env = "GITHUB_API_URL")]
    pub(super) api_url: Option<String>,
    /// Print the server's JSON answer on stdout.
    #[arg(long)]
    pub(super) json: bool,
}

/// Arguments of `bdk github forward`.
#[derive(clap::Args, Debug)]
pub(super) struct ForwardArgs {
    /// The relay channel's URL (e.g. `https://smee.io/<channel>`).
    #[arg(long, value_name = "URL")]
    pub(super) relay: String,
    #[command(flatten)]
    pub(super) server: ServerArgs,
}

/// Why a command stops early: the exit code and the message printed for it.
#[derive(Debug)]
pub(super) struct Exit {
    pub(super) code: u8,
    pub(super) message: String,
}

impl Exit {
    /// Bad arguments or input (exit 2).
    pub(super) fn unusable(message: impl fmt::Display) -> Exit {
        Exit {
            code: UNUSABLE,
            message: message.to_string(),
        }
    }

    /// Something could not be reached or refused to serve us (exit 3).
    pub(super) fn unreachable(message: impl fmt::Display) -> Exit {
        Exit {
            code: UNREACHABLE,
            message: message.to_string(),
        }
    }

    /// The server answered with an error (exit 1).
    pub(super) fn refused(message: impl fmt::Display) -> Exit {
        Exit {
            code: REFUSED,
            message: message.to_string(),
        }
    }
}

/// The URL a delivery is POSTed to: `--url` joined with `--path`, checked
/// so that a typo is exit 2 rather than an unreachable server.
pub(super) fn target_url(server: &ServerArgs) -> Result<reqwest::Url, Exit> {
    let base = server.url.trim_end_matches('/');
    let path = server.path.trim();
    let joined = if path.starts_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{path}")
    };
    let url = reqwest::Url::parse(&joined)
        .map_err(|e| Exit::unusable(format_args!("--url/--path `{joined}`: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(Exit::unusable(format_args!(
            "--url `{}` is not an http:// or https:// URL",
            server.url
        )));
    }
    Ok(url)
}

/// The HTTP client of both commands: the shared client's connect timeout
/// and user agent, plus TCP keepalive so that a relay connection that died
/// without a FIN is noticed instead of waited on forever.
pub(super) fn http_client() -> Result<reqwest::Client, Exit> {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .tcp_keepalive(std::time::Duration::from_secs(30))
        .user_agent(concat!("bdk/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| Exit::unreachable(format_args!("failed to build the HTTP client: {e}")))
}

/// An error with its sources, which is where reqwest says what went wrong
/// ("connection refused").
pub(super) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn server(url: &str, path: &str) -> ServerArgs {
        ServerArgs {
            url: url.into(),
            path: path.into(),
        }
    }

    #[test]
    fn the_target_joins_url_and_path_with_one_slash() {
        for (url, path) in [
            ("http://127.0.0.1:3000", "/v1/webhooks/github"),
            ("http://127.0.0.1:3000/", "/v1/webhooks/github"),
            ("http://127.0.0.1:3000", "v1/webhooks/github"),
        ] {
            assert_eq!(
                target_url(&server(url, path)).unwrap().as_str(),
                "http://127.0.0.1:3000/v1/webhooks/github"
            );
        }
    }

    #[test]
    fn a_target_that_is_not_http_is_unusable() {
        for url in ["127.0.0.1:3000", "not a url", "ftp://example.com"] {
            let exit = target_url(&server(url, DEFAULT_PATH)).unwrap_err();
            assert_eq!(exit.code, UNUSABLE, "{url}: {}", exit.message);
        }
    }
}
