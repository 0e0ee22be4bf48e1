//! The conversation at a terminal: read a line, send it or run its slash
//! command, follow the turn, read the next line.

use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::Result;
use tokio::sync::mpsc;

use crate::chat::backend::{Accepted, Backend};
use crate::chat::prompt::{Prompt, Read};
use crate::chat::recap::recap;
use crate::chat::show::{Mode, Printer, Style};
use crate::chat::slash::{HELP, Input, Slash, parse};
use crate::chat::term::{KeyWatch, Restore};
use crate::chat::turn::{self, Ending, Signals, Turn};
use crate::support::OK;

/// What the conversation starts with.
pub(crate) struct Options {
    /// The history file.
    pub(crate) history: Option<PathBuf>,
    /// A session to continue (checked to exist) and the index its next
    /// event will have.
    pub(crate) session: Option<(String, u64)>,
    /// Show the model's reasoning.
    pub(crate) reasoning: bool,
    /// Who answers (the agent, its model, where), for the banner.
    pub(crate) who: String,
}

const PROMPT: &str = "› ";

/// Where the conversation is: the session the next message goes to (none:
/// a new one) and the index of its next event.
struct Conversation {
    session: Option<String>,
    next: u64,
}

/// Talks with `backend` until the person leaves; exit code 0 (a failed
/// turn is shown, and the conversation goes on).
pub(crate) async fn run(backend: Backend, opts: Options) -> Result<u8> {
    // Whatever happens below, the terminal is left as it was found.
    let _restore = Restore::capture().ok();
    let result = converse(&backend, opts).await;
    backend.close().await;
    result.map(|()| OK)
}

async fn converse(backend: &Backend, opts: Options) -> Result<()> {
    let mut signals = Signals::install()?;
    let style = Style::for_stream(std::io::stdout().is_terminal());
    let mut printer = Printer::new(Mode::Chat, style, opts.reasoning);
    let mut prompt = Prompt::new(opts.history)?;
    printer.note(&format!(
        "bdk chat with {} · /help lists the commands · Esc stops a reply · Ctrl-D leaves",
        opts.who
    ));
    let mut chat = Conversation {
        session: None,
        next: 0,
    };
    if let Some((id, next)) = opts.session {
        printer.note(&format!("continuing {id}"));
        chat = Conversation {
            session: Some(id),
            next,
        };
    }
    printer.flush();
    // A Ctrl-C at the prompt arms leaving; so does one that stopped a turn.
    let mut armed = false;
    loop {
        let line = match prompt.read(PROMPT).await? {
            Read::Line(line) => line,
            Read::Eof => return Ok(()),
            Read::Interrupted => {
                if armed {
                    return Ok(());
                }
                armed = true;
                printer.note("(Ctrl-C again or Ctrl-D to leave)");
                printer.flush();
                continue;
            }
        };
        armed = false;
        if line.trim().is_empty() {
            continue;
        }
        prompt.remember(&line);
        let message = match parse(&line) {
            Input::Message(message) => message,
            Input::Command(slash) => {
                match command(backend, &mut chat, &mut printer, slash).await {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    // The conversation goes on: the next line may work
                    // (the server is back, the disk has room).
                    Err(e) => failure(&mut printer, &e),
                }
                printer.flush();
                continue;
            }
        };
        match exchange(backend, &mut chat, &mut printer, &mut signals, &message).await {
            Ok(Exchange::Done) => {}
            Ok(Exchange::Stopped) => armed = true,
            Ok(Exchange::Leave) => return Ok(()),
            Err(e) => failure(&mut printer, &e),
        }
    }
}

/// Shows an error that ends an exchange but not the conversation.
fn failure(printer: &mut Printer, e: &anyhow::Error) {
    let text = printer.style().red(&format!("✗ {e:#}"));
    printer.line(&text);
    printer.flush();
}

/// How one message went, for the prompt loop.
enum Exchange {
    /// The turn ended (or the message was refused, which was shown).
    Done,
    /// The turn was stopped with Ctrl-C: another at the prompt leaves.
    Stopped,
    /// The person asked to leave.
    Leave,
}

/// Sends `message` and follows its turn.
async fn exchange(
    backend: &Backend,
    chat: &mut Conversation,
    printer: &mut Printer,
    signals: &mut Signals,
    message: &str,
) -> Result<Exchange> {
    let Accepted {
        session,
        turn,
        index,
    } = match backend.send(chat.session.as_deref(), message).await? {
        Ok(accepted) => accepted,
        Err(refusal) => {
            let text = printer
                .style()
                .red(&format!("✗ {}: {}", refusal.code, refusal.message));
            printer.line(&text);
            printer.flush();
            return Ok(Exchange::Done);
        }
    };
    if chat.session.as_deref() != Some(session.as_str()) {
        printer.note(&format!("new session {session}"));
        chat.session = Some(session.clone());
        chat.next = 0;
    }
    let Some(turn) = turn else {
        printer.note("queued behind the running turn");
        printer.flush();
        return Ok(Exchange::Done);
    };
    printer.flush();
    printer.begin_turn();
    signals.forget_interrupts();
    let (tx, mut keys) = mpsc::unbounded_channel();
    let watch = KeyWatch::start(tx)?;
    let followed = turn::follow(
        backend,
        Turn {
            session: &session,
            turn: &turn,
            from: index.unwrap_or(chat.next),
        },
        printer,
        Some(&mut keys),
        signals,
    )
    .await;
    // The terminal's settings come back before anything else is printed.
    drop(watch);
    printer.flush();
    match followed? {
        Ending::Ended {
            next, interrupted, ..
        } => {
            chat.next = next;
            Ok(if interrupted {
                Exchange::Stopped
            } else {
                Exchange::Done
            })
        }
        Ending::Leave { next } => {
            chat.next = next;
            Ok(Exchange::Leave)
        }
    }
}

/// Runs a slash command; true when it asks to leave.
async fn command(
    backend: &Backend,
    chat: &mut Conversation,
    printer: &mut Printer,
    slash: Slash,
) -> Result<bool> {
    let style = printer.style();
    match slash {
        Slash::Quit => return Ok(true),
        Slash::Help => {
            for line in HELP.lines() {
                printer.line(line);
            }
        }
        Slash::New => {
            chat.session = None;
            chat.next = 0;
            printer.note("the next message starts a new session");
        }
        Slash::Reasoning => {
            printer.reasoning = !printer.reasoning;
            printer.note(if printer.reasoning {
                "reasoning shown"
            } else {
                "reasoning hidden"
            });
        }
        Slash::Session(None) => match &chat.session {
            Some(id) => printer.line(id),
            None => printer.note("no session yet: the next message starts one"),
        },
        Slash::Session(Some(id)) => match backend.events(&id).await? {
            Ok(events) => {
                printer.note(&format!("continuing {id} ({} events)", events.len()));
                chat.next = events.last().map_or(0, |e| e.index + 1);
                chat.session = Some(id);
            }
            Err(refusal) => {
                let keep = match &chat.session {
                    Some(current) => format!("still in {current}"),
                    None => "the next message starts a new session".to_owned(),
                };
                printer
                    .line(&style.red(&format!("✗ {}: {}; {keep}", refusal.code, refusal.message)));
            }
        },
        Slash::Trace => {
            let Some(id) = chat.session.clone() else {
                printer.note("no session yet: send a message first");
                return Ok(false);
            };
            match backend.events(&id).await? {
                Ok(events) => {
                    for line in recap(&id, &events, style) {
                        printer.line(&line);
                    }
                    let trace = backend.write_trace(&id, &events).await?;
                    printer.line(&format!("trace: {trace}"));
                }
                Err(refusal) => {
                    printer.line(&style.red(&format!("✗ {}: {}", refusal.code, refusal.message)));
                }
            }
        }
        Slash::Unknown(text) => {
            printer.line(&format!("unknown command {text}; /help lists the commands"));
        }
    }
    Ok(false)
}
