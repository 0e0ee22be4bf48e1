//! `bdk chat`: a conversation with the agent in the terminal, over one
//! session at a time.
//!
//! At a terminal the reply streams as the model writes it, tool calls show
//! on a line each, approvals are asked in place, Esc or Ctrl-C stops a
//! reply and slash commands switch sessions or show the trace. From a pipe
//! each line is a turn and stdout gets only the replies.
//!
//! The agent runs in this process, as for `bdk run`, or through the server
//! that holds the state root, or the one named by `--url`. Module map, each
//! a leaf below this file: `backend.rs` (the local host or the HTTP API
//! behind one set of operations), `turn.rs` (one turn followed to its end:
//! events, keys, signals, a stop), `show.rs` (how events read), `term.rs`
//! (single keys while a turn runs, the terminal put back), `prompt.rs` (the
//! line editor and its history), `slash.rs` (the commands), `recap.rs`
//! (`/trace`), `interactive.rs` and `pipe.rs` (the two ways to converse).

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Result;

use crate::chat::backend::Backend;
use crate::remote::Remote;
use crate::support::{Opened, ProjectArgs, UNUSABLE, open_host_or_remote, parse_session_id};

mod backend;
mod interactive;
mod pipe;
mod prompt;
mod recap;
mod show;
mod slash;
mod term;
mod turn;

/// The history file's name under the state root.
const HISTORY_FILE: &str = "chat_history";

/// The arguments of `bdk chat`.
#[derive(clap::Args, Debug)]
pub(crate) struct ChatArgs {
    /// The project directory (same as --dir).
    #[arg(value_name = "DIR")]
    path: Option<PathBuf>,
    #[command(flatten)]
    project: ProjectArgs,
    /// Continue this session instead of starting one.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Talk to the agent a running server serves at URL, its base URL
    /// (http://127.0.0.1:3000/weather); a bearer token comes from
    /// `BDK_TOKEN`.
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Show the model's reasoning as it streams (`/reasoning` toggles it).
    #[arg(long)]
    reasoning: bool,
}

/// Runs `bdk chat`; the exit code.
pub(crate) async fn run(args: ChatArgs) -> Result<u8> {
    let session = match args.session.as_deref().map(parse_session_id).transpose() {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let (backend, history) = match &args.url {
        Some(url) => {
            let remote = match Remote::connect(url) {
                Ok(r) => r,
                Err(e) => {
                    errln!("error: --url {e:#}");
                    return Ok(UNUSABLE);
                }
            };
            let history = args
                .project
                .state_root
                .clone()
                .or_else(user_state_dir)
                .map(|root| root.join(HISTORY_FILE));
            let backend = Backend::Remote {
                remote,
                traces: None,
            };
            (backend, history)
        }
        None => {
            let dir = args.project.dir(args.path.as_deref());
            let root = args.project.state_root(&dir);
            let backend = match open_host_or_remote(&dir, &root, None).await? {
                Ok(Opened::Local(host, lock)) => Backend::Local { host, _lock: lock },
                Ok(Opened::Remote(remote)) => Backend::Remote {
                    remote,
                    traces: Some(root.join("traces")),
                },
                Err(code) => return Ok(code),
            };
            (backend, Some(root.join(HISTORY_FILE)))
        }
    };
    let who = match backend.describe().await {
        Ok(who) => who,
        Err(e) => {
            errln!("error: {e:#}");
            backend.close().await;
            return Ok(crate::support::FAILED);
        }
    };
    // A session to continue must exist and be readable; its next event's
    // index is where following its first turn starts.
    let session = match session {
        None => None,
        Some(id) => match backend.events(id.as_str()).await? {
            Ok(events) => Some((id.to_string(), events.last().map_or(0, |e| e.index + 1))),
            Err(refusal) => {
                errln!("error: {}: {}", refusal.code, refusal.message);
                backend.close().await;
                return Ok(crate::support::FAILED);
            }
        },
    };
    if std::io::stdin().is_terminal() {
        let opts = interactive::Options {
            history,
            session,
            reasoning: args.reasoning,
            who,
        };
        interactive::run(backend, opts).await
    } else {
        pipe::run(backend, session).await
    }
}

/// Where per-user state lives when no state root applies (`--url` without
/// `--state-root`): `$XDG_STATE_HOME/bdk`, else `~/.local/state/bdk`.
fn user_state_dir() -> Option<PathBuf> {
    let non_empty = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    non_empty("XDG_STATE_HOME")
        .map(|d| PathBuf::from(d).join("bdk"))
        .or_else(|| non_empty("HOME").map(|h| PathBuf::from(h).join(".local/state/bdk")))
}
