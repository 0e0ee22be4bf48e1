//! `bdk-sandbox`: the sandbox launcher as a program of its own.
//!
//! It does nothing but act as the launcher ([`bdk_sandbox::run_if_launcher`]);
//! run any other way it explains itself and exits with status 2.

use std::process::ExitCode;

fn main() -> ExitCode {
    if let Some(code) = bdk_sandbox::run_if_launcher() {
        return code;
    }
    eprintln!(
        "bdk-sandbox is the launcher of contained programs; it is started by bdk_sandbox::Sandbox::wrap, not by hand"
    );
    ExitCode::from(2)
}
