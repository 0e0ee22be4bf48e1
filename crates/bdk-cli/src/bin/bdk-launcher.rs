//! `bdk-launcher`: the tool sandbox launcher as a small program of its own.
//!
//! `bdk` starts every contained program through a launcher. When this one
//! sits beside `bdk` (both come out of one build or one `cargo install`),
//! `bdk` uses it instead of re-running itself: starting the whole `bdk`
//! binary costs several milliseconds of CPU (tens of thousands of
//! relocations to apply), this one a small fraction of that. Without it
//! `bdk` is its own launcher, and nothing else changes.

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = bdk_core::containment::run_if_launcher() {
        return code;
    }
    eprintln!(
        "bdk-launcher starts the programs of a `bdk` server in their sandbox; it is not run by hand"
    );
    ExitCode::from(2)
}
