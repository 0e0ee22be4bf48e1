//! Printing that survives a closed pipe.
//!
//! `println!` panics when its reader has gone (`bdk sessions | head -2`).
//! These macros write through [`write_out`] and [`write_err`] instead: the
//! first write that fails marks that stream closed, later writes to it are
//! dropped, and the command carries on to its normal end and exit code. A
//! reader that stops reading is not a failure of the command.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

fn write_to(closed: &AtomicBool, mut stream: impl Write, args: fmt::Arguments<'_>) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    // Any error, not only EPIPE: a full disk or a revoked terminal leaves
    // nothing useful to do with the rest of the output either.
    if stream
        .write_fmt(args)
        .and_then(|()| stream.flush())
        .is_err()
    {
        closed.store(true, Ordering::Relaxed);
    }
}

/// Writes to stdout unless it was found closed.
pub(crate) fn write_out(args: fmt::Arguments<'_>) {
    write_to(&STDOUT_CLOSED, io::stdout().lock(), args);
}

/// Writes to stderr unless it was found closed.
pub(crate) fn write_err(args: fmt::Arguments<'_>) {
    write_to(&STDERR_CLOSED, io::stderr().lock(), args);
}

/// `print!` that never panics on a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_out(format_args!($($arg)*)) };
}

/// `println!` that never panics on a closed stdout.
macro_rules! outln {
    () => { $crate::output::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprint!` that never panics on a closed stderr.
macro_rules! err {
    ($($arg:tt)*) => { $crate::output::write_err(format_args!($($arg)*)) };
}

/// `eprintln!` that never panics on a closed stderr.
macro_rules! errln {
    () => { $crate::output::write_err(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}
