//! `bdk chat` when standard input is not a terminal: every line that is not
//! blank is one turn of the same session, stdout gets each final reply and
//! a newline, and everything else (tool lines, failures) goes to stderr.
//! Lines are sent as written; slash commands are for people at a prompt.
//! Calls that need approval are denied, since there is nobody to ask.

use std::io::IsTerminal as _;

use anyhow::Result;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::chat::backend::Backend;
use crate::chat::show::{Mode, Printer, Style};
use crate::chat::turn::{self, Ending, Signals, Turn};
use crate::support::{FAILED, OK};

/// Sends each line of standard input; exit code 1 when any turn failed or
/// a message was refused, else 0. `session`: a session to continue and the
/// index its next event will have.
pub(crate) async fn run(backend: Backend, session: Option<(String, u64)>) -> Result<u8> {
    let result = converse(&backend, session).await;
    backend.close().await;
    result
}

async fn converse(backend: &Backend, session: Option<(String, u64)>) -> Result<u8> {
    let mut signals = Signals::install()?;
    let style = Style::for_stream(std::io::stderr().is_terminal());
    let mut printer = Printer::new(Mode::Pipe, style, false);
    let (mut session, mut next) = match session {
        Some((id, next)) => (Some(id), next),
        None => (None, 0),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut failed = false;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line?,
            _ = signals.next() => return Ok(FAILED),
        };
        let Some(line) = line else { break };
        let message = line.trim();
        if message.is_empty() {
            continue;
        }
        let accepted = match backend.send(session.as_deref(), message).await? {
            Ok(accepted) => accepted,
            Err(refusal) => {
                printer.line(&format!("error: {}: {}", refusal.code, refusal.message));
                printer.flush();
                failed = true;
                continue;
            }
        };
        if session.as_deref() != Some(accepted.session.as_str()) {
            session = Some(accepted.session.clone());
            next = 0;
        }
        let Some(turn) = accepted.turn else {
            printer.line("note: the message was queued behind a running turn");
            printer.flush();
            continue;
        };
        printer.begin_turn();
        let ending = turn::follow(
            backend,
            Turn {
                session: &accepted.session,
                turn: &turn,
                from: accepted.index.unwrap_or(next),
            },
            &mut printer,
            None,
            &mut signals,
        )
        .await?;
        printer.flush();
        match ending {
            Ending::Ended { ok, next: n, .. } => {
                next = n;
                failed |= !ok;
            }
            Ending::Leave { .. } => return Ok(FAILED),
        }
    }
    Ok(if failed { FAILED } else { OK })
}
