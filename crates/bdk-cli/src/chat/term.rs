//! The terminal while a reply streams: keys read one at a time, and the
//! terminal's settings always put back.
//!
//! While a turn runs, `bdk chat` wants single key presses (Esc to stop,
//! `y`/`n` to answer an approval) without taking the terminal into full raw
//! mode, which would also turn off output processing (a `\n` would no longer
//! return the carriage) and signal keys. So only line buffering and echo are
//! turned off (`ICANON`, `ECHO`); `ISIG` stays on, and Ctrl-C remains a
//! SIGINT that the turn driver catches. A thread polls standard input and a
//! wake-up pipe and sends each key it recognises; dropping the [`KeyWatch`]
//! wakes it, waits for it, and the terminal's settings come back whatever
//! happened in between. rustyline owns the terminal while the prompt is
//! shown, never at the same time as a watch.

use std::io;
use std::os::fd::OwnedFd;
use std::thread::JoinHandle;

use rustix::event::{PollFd, PollFlags, poll};
use rustix::termios::{
    LocalModes, OptionalActions, SpecialCodeIndex, Termios, tcgetattr, tcsetattr,
};
use tokio::sync::mpsc;

/// A key that means something while a turn runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Key {
    /// Esc: stop the turn.
    Escape,
    /// `y`: approve the call that is asked about.
    Yes,
    /// `n`: deny it.
    No,
}

/// The keys in one read from the terminal. A lone ESC is [`Key::Escape`];
/// the escape sequences that arrow and function keys send (`ESC [ ...`,
/// `ESC O x`) are skipped whole, so pressing an arrow key never stops a
/// turn. Every other byte means nothing here.
pub(crate) fn keys(bytes: &[u8]) -> Vec<Key> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0x1b => match bytes.get(i + 1) {
                Some(b'[') => {
                    // CSI: parameters, then one final byte in 0x40..=0x7e.
                    i += 2;
                    while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                        i += 1;
                    }
                }
                Some(b'O') => i += 2,
                _ => out.push(Key::Escape),
            },
            b'y' | b'Y' => out.push(Key::Yes),
            b'n' | b'N' => out.push(Key::No),
            _ => {}
        }
        i += 1;
    }
    out
}

/// The terminal settings of standard input as they were; put back on drop.
pub(crate) struct Restore {
    saved: Termios,
}

impl Restore {
    /// Remembers the current settings of standard input (an error when it
    /// is not a terminal).
    pub(crate) fn capture() -> io::Result<Restore> {
        Ok(Restore {
            saved: tcgetattr(io::stdin())?,
        })
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Nothing better to do on failure: the terminal went away.
        let _ = tcsetattr(io::stdin(), OptionalActions::Now, &self.saved);
    }
}

/// Turns off line buffering and echo on standard input, keeping signals
/// and output processing; the settings come back when the result drops.
fn cbreak() -> io::Result<Restore> {
    let restore = Restore::capture()?;
    let mut mode = restore.saved.clone();
    mode.local_modes -= LocalModes::ICANON | LocalModes::ECHO;
    mode.special_codes[SpecialCodeIndex::VMIN] = 1;
    mode.special_codes[SpecialCodeIndex::VTIME] = 0;
    tcsetattr(io::stdin(), OptionalActions::Now, &mode)?;
    Ok(restore)
}

/// Reads keys from the terminal on a thread of its own until dropped.
pub(crate) struct KeyWatch {
    wake: Option<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl KeyWatch {
    /// Puts the terminal in single-key mode and sends every [`Key`] pressed
    /// to `keys` until the watch is dropped.
    pub(crate) fn start(tx: mpsc::UnboundedSender<Key>) -> io::Result<KeyWatch> {
        // Close-on-exec: a program started meanwhile must not hold the write
        // end, or closing ours would never wake the thread.
        let (wake_read, wake_write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mode = cbreak()?;
        let thread = std::thread::Builder::new()
            .name("bdk-chat-keys".into())
            .spawn(move || {
                watch(&wake_read, &tx);
                drop(mode);
            })?;
        Ok(KeyWatch {
            wake: Some(wake_write),
            thread: Some(thread),
        })
    }
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        // Closing the pipe's write end wakes the poll (a hang-up).
        drop(self.wake.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The watching thread: standard input and the wake-up pipe, until the
/// pipe wakes it, input ends or nobody listens any more.
fn watch(wake: &OwnedFd, tx: &mpsc::UnboundedSender<Key>) {
    let stdin = io::stdin();
    let mut buf = [0u8; 64];
    loop {
        let mut fds = [
            PollFd::new(&stdin, PollFlags::IN),
            PollFd::new(wake, PollFlags::IN),
        ];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return,
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        let ready = fds[0].revents();
        if ready.contains(PollFlags::IN) {
            match rustix::io::read(&stdin, &mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    for key in keys(&buf[..n]) {
                        if tx.send(key).is_err() {
                            return;
                        }
                    }
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => {}
                Err(_) => return,
            }
        } else if ready.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_escape_stops_and_arrow_keys_do_not() {
        assert_eq!(keys(b"\x1b"), vec![Key::Escape]);
        assert_eq!(keys(b"\x1b[A\x1b[1;5C\x1bOP"), vec![]);
        assert_eq!(keys(b"yN"), vec![Key::Yes, Key::No]);
        assert_eq!(keys(b"hello\x1b"), vec![Key::Escape]);
        // A truncated sequence at the end of a read is dropped, not read as Esc.
        assert_eq!(keys(b"\x1b[1;"), vec![]);
    }
}
