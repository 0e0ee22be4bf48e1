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

mod command;
mod delivery;
mod forward;
mod pr;
mod replay;
mod send;

use command::{ForwardArgs, OK, ReplayArgs};

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
