//! One turn, followed from its message to the session's rest: its events
//! shown as they are recorded, approvals asked and answered, Esc and
//! Ctrl-C turned into a stop, a second Ctrl-C into leaving.
//!
//! The driver is one loop over four inputs (the session's events, keys,
//! signals and a stop in flight), each iteration handling whichever is
//! ready, so no input waits behind another: an approval can be answered
//! while the event stream is quiet, and a stop is asked for while a tool
//! runs.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;

use anyhow::{Result, bail};
use bdk_events::Event;
use futures::{FutureExt as _, StreamExt as _};
use serde_json::Value;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::mpsc;

use crate::chat::backend::Backend;
use crate::chat::show::Printer;
use crate::chat::term::Key;

/// The signals a chat listens to. Once they are installed Ctrl-C no longer
/// ends the process by itself: the chat decides (stop the turn, or leave).
pub(crate) struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Forgets a Ctrl-C that came while nothing was running, so it does
    /// not stop the next turn the moment it starts.
    pub(crate) fn forget_interrupts(&mut self) {
        while let Some(Some(())) = self.interrupt.recv().now_or_never() {}
    }

    /// The next signal: Ctrl-C, or a request to end the process (SIGTERM,
    /// or the terminal hung up).
    pub(crate) async fn next(&mut self) -> Sig {
        tokio::select! {
            _ = self.interrupt.recv() => Sig::Interrupt,
            _ = self.terminate.recv() => Sig::Leave,
            _ = self.hangup.recv() => Sig::Leave,
        }
    }
}

/// A signal a chat acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sig {
    /// Ctrl-C (SIGINT).
    Interrupt,
    /// SIGTERM or SIGHUP: leave now.
    Leave,
}

/// The turn to follow.
pub(crate) struct Turn<'a> {
    pub(crate) session: &'a str,
    pub(crate) turn: &'a str,
    /// Where to start reading the session's events.
    pub(crate) from: u64,
}

/// How following a turn ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The turn ended (`ok`: it completed) and the session rests; its next
    /// event will have index `next`. `interrupted`: a Ctrl-C stopped it.
    Ended {
        ok: bool,
        next: u64,
        interrupted: bool,
    },
    /// The person asked to leave (a second Ctrl-C, or one from a pipe, or
    /// the terminal went away). A stopped turn may still be settling.
    Leave { next: u64 },
}

/// Why a call was denied without asking (standard input is no terminal).
const UNASKED: &str = "nobody could be asked: bdk chat was reading messages from a pipe";

type Stopping<'a> = Pin<Box<dyn Future<Output = Result<()>> + Send + 'a>>;

/// Follows `turn` to its end, showing its events on `printer`. With `keys`
/// (a terminal) approvals are asked and Esc stops; without, approvals are
/// denied and Ctrl-C stops the turn and leaves.
pub(crate) async fn follow(
    backend: &Backend,
    turn: Turn<'_>,
    printer: &mut Printer,
    mut keys: Option<&mut mpsc::UnboundedReceiver<Key>>,
    signals: &mut Signals,
) -> Result<Ending> {
    let interactive = keys.is_some();
    let mut events = backend.follow(turn.session, turn.from).await?;
    let mut next = turn.from;
    // Parked calls in the order they were asked for: (call id, name, input).
    let mut parked: VecDeque<(String, String, Value)> = VecDeque::new();
    let mut asking: Option<String> = None;
    let mut stopping: Option<Stopping<'_>> = None;
    let mut ended: Option<bool> = None;
    // A stop was asked for (Esc or Ctrl-C); by Ctrl-C.
    let mut stop_asked = false;
    let mut interrupted = false;
    // A pipe's Ctrl-C: leave once the stopped turn has ended.
    let mut leave_after = false;
    loop {
        let stop_running = stopping.is_some();
        tokio::select! {
            item = events.next() => {
                let Some(item) = item else {
                    if let Some(ok) = ended {
                        return Ok(Ending::Ended { ok, next, interrupted });
                    }
                    bail!("the session's event stream ended before the turn did");
                };
                let env = item?;
                next = env.index + 1;
                if let Some(ok) = ended {
                    if matches!(
                        env.event,
                        Event::SessionWaiting(_) | Event::SessionCompleted(_) | Event::SessionFailed(_)
                    ) {
                        return Ok(if leave_after {
                            Ending::Leave { next }
                        } else {
                            Ending::Ended { ok, next, interrupted }
                        });
                    }
                    continue;
                }
                if env.turn_id.as_ref().map(|t| t.as_str()) != Some(turn.turn) {
                    continue;
                }
                printer.event(&env.event);
                match &env.event {
                    Event::ActionApprovalRequested(a) if interactive => {
                        parked.push_back((a.call_id.clone(), a.name.clone(), a.input.clone()));
                    }
                    Event::ActionApprovalRequested(a) => {
                        printer.denied_unasked(&a.call_id, &a.name, &a.input);
                        printer.flush();
                        if let Err(refusal) =
                            backend.decide(turn.session, &a.call_id, false, Some(UNASKED)).await?
                        {
                            printer.line(&format!("error: {}: {}", refusal.code, refusal.message));
                        }
                    }
                    Event::ActionApprovalResolved(r) => {
                        parked.retain(|(id, _, _)| *id != r.call_id);
                        if asking.as_deref() == Some(r.call_id.as_str()) {
                            asking = None;
                        }
                    }
                    Event::TurnCompleted(_) => ended = Some(true),
                    Event::TurnFailed(_) => ended = Some(false),
                    _ => {}
                }
                if ended.is_some() {
                    parked.clear();
                    asking = None;
                }
                if asking.is_none() && stopping.is_none()
                    && let Some((id, name, input)) = parked.front()
                {
                    printer.ask(id, name, input);
                    asking = Some(id.clone());
                }
                printer.flush();
            }
            Some(key) = next_key(&mut keys) => match key {
                Key::Escape => {
                    if ended.is_none() && !stop_asked {
                        stop_asked = true;
                        printer.note("stopping… (Ctrl-C again to leave)");
                        printer.flush();
                        stopping = Some(Box::pin(backend.stop(turn.session)));
                    }
                }
                Key::Yes | Key::No => {
                    let Some(call_id) = asking.take() else { continue };
                    let approved = key == Key::Yes;
                    printer.answer(&call_id, approved);
                    printer.flush();
                    parked.retain(|(id, _, _)| *id != call_id);
                    if let Err(refusal) = backend.decide(turn.session, &call_id, approved, None).await? {
                        printer.note(&format!("({}: {})", refusal.code, refusal.message));
                    }
                    if let Some((id, name, input)) = parked.front() {
                        printer.ask(id, name, input);
                        asking = Some(id.clone());
                    }
                    printer.flush();
                }
            },
            sig = signals.next() => {
                if sig == Sig::Leave || stop_asked || ended.is_some() {
                    printer.flush();
                    return Ok(Ending::Leave { next });
                }
                stop_asked = true;
                interrupted = true;
                if !interactive {
                    leave_after = true;
                }
                printer.note("stopping… (Ctrl-C again to leave)");
                printer.flush();
                stopping = Some(Box::pin(backend.stop(turn.session)));
            }
            stopped = async {
                match stopping.as_mut() {
                    Some(stop) => stop.await,
                    None => std::future::pending().await,
                }
            }, if stop_running => {
                // The turn has settled; its `turn.failed` is on the stream.
                stopping = None;
                if let Err(e) = stopped {
                    printer.note(&format!("could not stop the turn: {e:#}"));
                    printer.flush();
                }
            }
        }
    }
}

/// The next key, when there is a terminal to read keys from and it still
/// sends them.
async fn next_key(keys: &mut Option<&mut mpsc::UnboundedReceiver<Key>>) -> Option<Key> {
    match keys {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}
