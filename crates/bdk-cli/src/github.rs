//! `bdk github`: send GitHub webhook deliveries to a running `bdk serve`.
//!
//! Two commands feed a server's GitHub channels the way GitHub itself would,
//! so a PR bot can be tried before (or without) a public webhook URL:
//! `replay` sends one signed delivery, `forward` follows a webhook relay.
//! Both POST a JSON body with GitHub's headers (`X-GitHub-Event`,
//! `X-GitHub-Delivery`, `X-Hub-Signature-256`, `Content-Type:
//! application/json`, `User-Agent: GitHub-Hookshot/...`) to the host-level
//! `/v1/webhooks/github` (which fans the delivery out to every mounted
//! GitHub channel) or to one channel's route. The body that is signed is
//! byte for byte the body that is sent: payloads are never re-serialized
//! through a map that could reorder their keys.
//!
//! # Replaying and forwarding deliveries
//!
//! ## `bdk github replay <PR-URL | DELIVERY.json>`
//!
//! Sends one delivery to a running server and prints the server's answer
//! in one line (its status, and the sessions it names).
//!
//! - With a pull request URL (`https://github.com/OWNER/REPO/pull/N`, or a
//!   GitHub Enterprise host) it fetches the pull request and its repository
//!   from the REST API and sends a `pull_request` event
//!   (`{action, number, pull_request, repository, sender}`, the sender being
//!   the pull request's author). The token comes from `GITHUB_TOKEN` or
//!   `GH_TOKEN` (optional for public repositories).
//! - With a file it sends a saved delivery. Three shapes are read: what
//!   GitHub's "get a delivery for a repository webhook" API answers
//!   (`{guid, event, action, request: {headers, payload}}`), a
//!   `{"headers": {...}, "payload": {...}}` pair (`body` may stand for
//!   `payload`, also as a string holding the JSON text), and a bare
//!   payload. The event is `--event`, else the saved `X-GitHub-Event`
//!   header, else the delivery's `event`, else inferred from the payload's
//!   keys (`pull_request`, `issue_comment`, `pull_request_review_comment`,
//!   `pull_request_review`, `pull_request_review_thread`, `issues`, `ping`;
//!   the inference is noted on stderr).
//!
//! Options:
//!
//! | option | default | meaning |
//! |---|---|---|
//! | `--url URL` | `http://127.0.0.1:3000` | the server |
//! | `--path PATH` | `/v1/webhooks/github` | the route; `/v1/channels/<name>` (or `/<slug>/v1/channels/<name>`) targets one channel |
//! | `--event NAME` | from the file | the event of a saved payload |
//! | `--action NAME` | `opened` | the `action` of a pull request URL's event |
//! | `--delivery-id ID` | a fresh UUID v4 | the `X-GitHub-Delivery` id; a fresh id makes the server run the delivery again, the same id twice tests its dedupe |
//! | `--secret-env NAME` | `GITHUB_WEBHOOK_SECRET` | the variable holding the webhook secret; unset, the delivery goes unsigned and only a `--dev` server accepts it |
//! | `--api-url URL` | `GITHUB_API_URL`, else `https://api.github.com` (github.com) or `https://<host>/api/v3` (Enterprise) | the REST API of a pull request URL |
//! | `--json` | | print the server's JSON answer on stdout |
//!
//! Exit codes: 0 the server accepted the delivery (2xx); 1 the server
//! answered with an error (its status, `error` and `message` are printed);
//! 2 bad arguments or input (an unreadable file, not JSON, not a pull
//! request URL, no event given and none inferable); 3 the server or the
//! GitHub API could not be reached, or the API refused (its status and
//! message are printed).
//!
//! ## `bdk github forward --relay URL`
//!
//! Follows a webhook relay that speaks the smee.io protocol (create a
//! channel at <https://smee.io>, set it as the webhook's payload URL with
//! content type `application/json`) and forwards every delivery to the
//! local server with GitHub's headers and its body unchanged, printing one
//! line per delivery (event, delivery id, the server's status). A delivery
//! the server refuses is reported and forwarding goes on. When the relay
//! drops the stream it reconnects, waiting 1 s and doubling up to 30 s,
//! forever, and resumes after the last event id the relay gave.
//!
//! Options: `--relay URL` (required), `--url URL` and `--path PATH` as for
//! `replay`. Signatures are forwarded as GitHub computed them, so the server
//! needs the same secret as the webhook.
//!
//! Exit codes: 0 stopped with Ctrl-C or SIGTERM; 2 bad arguments; 3 the
//! relay could not be reached on the first connection.

mod delivery;
mod forward;
mod pr;
mod replay;
mod send;

use std::fmt;

/// Exit code: the server accepted the delivery, or forwarding was stopped.
const OK: u8 = 0;
/// Exit code: the server answered with an error.
const REFUSED: u8 = 1;
/// Exit code: bad arguments or input.
const UNUSABLE: u8 = 2;
/// Exit code: the server, the GitHub API or the relay could not be reached
/// (or the API refused).
const UNREACHABLE: u8 = 3;

/// The server both commands send to when `--url` is not given.
const DEFAULT_URL: &str = "http://127.0.0.1:3000";
/// The route both commands send to when `--path` is not given: the
/// loopback fan-out to every mounted GitHub channel.
const DEFAULT_PATH: &str = "/v1/webhooks/github";

const REPLAY_EXIT_CODES: &str = "\
Exit codes:
  0  the server accepted the delivery (2xx)
  1  the server answered with an error (its status, error and message are printed)
  2  bad arguments or input: an unreadable file, not JSON, not a pull request URL,
     no event given and none inferable from the payload
  3  the server or the GitHub API could not be reached, or the API refused
     (its status and message are printed)";

const FORWARD_EXIT_CODES: &str = "\
Exit codes:
  0  stopped with Ctrl-C or SIGTERM
  2  bad arguments
  3  the relay could not be reached on the first connection

A delivery the local server refuses is reported and forwarding goes on; when the
relay drops the stream, forward reconnects (1 s, doubling up to 30 s, forever).";

/// Arguments of `bdk github`.
#[derive(clap::Args, Debug)]
pub(crate) struct GithubArgs {
    #[command(subcommand)]
    command: GithubCommand,
}

#[derive(clap::Subcommand, Debug)]
enum GithubCommand {
    /// Send one signed webhook delivery, built from a pull request URL or
    /// read from a saved delivery file, to a running server.
    #[command(after_help = REPLAY_EXIT_CODES)]
    Replay(ReplayArgs),
    /// Follow a webhook relay (the smee.io protocol) and forward each
    /// delivery, headers and body unchanged, to a running server.
    #[command(after_help = FORWARD_EXIT_CODES)]
    Forward(ForwardArgs),
}

/// Where deliveries go: the server and the route.
#[derive(clap::Args, Debug)]
struct ServerArgs {
    /// The server's base URL.
    #[arg(long, value_name = "URL", default_value = DEFAULT_URL)]
    url: String,
    /// The route: the loopback fan-out to every GitHub channel, or one
    /// channel's `/v1/channels/<name>` (`/<slug>/v1/channels/<name>` on a
    /// multi-agent server).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_PATH)]
    path: String,
}

/// Arguments of `bdk github replay`.
#[derive(clap::Args, Debug)]
struct ReplayArgs {
    /// A pull request URL (`https://github.com/OWNER/REPO/pull/N`) or a
    /// saved delivery file (GitHub's delivery JSON, `{headers, payload}`, or
    /// a bare payload).
    #[arg(value_name = "PR-URL|DELIVERY.json")]
    source: String,
    #[command(flatten)]
    server: ServerArgs,
    /// The event of a saved payload (default: the saved `X-GitHub-Event`
    /// header, else inferred from the payload's keys).
    #[arg(long, value_name = "NAME")]
    event: Option<String>,
    /// The `action` of the `pull_request` event built from a pull request URL.
    #[arg(long, value_name = "NAME", default_value = "opened")]
    action: String,
    /// The `X-GitHub-Delivery` id (default: a fresh UUID v4, so the server
    /// runs the delivery again; send the same id twice to test dedupe).
    #[arg(long, value_name = "ID")]
    delivery_id: Option<String>,
    /// The environment variable holding the webhook secret; when it is
    /// unset the delivery is sent unsigned, which only a `--dev` server
    /// accepts.
    #[arg(long, value_name = "NAME", default_value = "GITHUB_WEBHOOK_SECRET")]
    secret_env: String,
    /// The GitHub REST API for a pull request URL (default:
    /// `https://api.github.com` for github.com, `https://<host>/api/v3` for
    /// GitHub Enterprise). The token comes from `GITHUB_TOKEN` or `GH_TOKEN`.
    #[arg(long, value_name = "URL", env = "GITHUB_API_URL")]
    api_url: Option<String>,
    /// Print the server's JSON answer on stdout.
    #[arg(long)]
    json: bool,
}

/// Arguments of `bdk github forward`.
#[derive(clap::Args, Debug)]
struct ForwardArgs {
    /// The relay channel's URL (e.g. `https://smee.io/<channel>`).
    #[arg(long, value_name = "URL")]
    relay: String,
    #[command(flatten)]
    server: ServerArgs,
}

/// Why a command stops early: the exit code and the message printed for it.
#[derive(Debug)]
struct Exit {
    code: u8,
    message: String,
}

impl Exit {
    /// Bad arguments or input (exit 2).
    fn unusable(message: impl fmt::Display) -> Exit {
        Exit {
            code: UNUSABLE,
            message: message.to_string(),
        }
    }

    /// Something could not be reached or refused to serve us (exit 3).
    fn unreachable(message: impl fmt::Display) -> Exit {
        Exit {
            code: UNREACHABLE,
            message: message.to_string(),
        }
    }

    /// The server answered with an error (exit 1).
    fn refused(message: impl fmt::Display) -> Exit {
        Exit {
            code: REFUSED,
            message: message.to_string(),
        }
    }
}

/// Runs `bdk github ...` and returns its exit code.
pub(crate) async fn run(args: GithubArgs) -> u8 {
    let result = match args.command {
        GithubCommand::Replay(args) => replay::run(args).await,
        GithubCommand::Forward(args) => forward::run(args).await,
    };
    match result {
        Ok(()) => OK,
        Err(exit) => {
            errln!("error: {}", exit.message);
            exit.code
        }
    }
}

/// The URL a delivery is POSTed to: `--url` joined with `--path`, checked
/// so that a typo is exit 2 rather than an unreachable server.
fn target_url(server: &ServerArgs) -> Result<reqwest::Url, Exit> {
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
fn http_client() -> Result<reqwest::Client, Exit> {
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
fn chain(e: &dyn std::error::Error) -> String {
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
