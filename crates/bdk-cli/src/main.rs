//! `bdk`: validate, inspect, run and call an agent project from the shell.
//!
//! This crate wires concrete adapters together (the file store, the core
//! host) and owns process concerns: arguments, exit codes, signals, the
//! state-root lock, and printing. Exit codes: 0 success; 1 the run failed
//! (a turn failed, a tool returned an error, a runtime error); 2 the request
//! was unusable (bad arguments, validation errors, unreadable input).

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};

#[macro_use]
mod output;

/// `bdk --version`: the package version, the commit it was built from and
/// the build date.
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BDK_COMMIT"),
    " ",
    env!("BDK_BUILD_DATE"),
    ")"
);

mod args;
mod chat;
mod commands;
mod cost;
mod dev;
mod evals;
mod generate;
mod github;
mod hooks;
mod init;
mod lock;
mod logs;
mod malloc;
mod mcp;
mod remote;
mod render;
mod sandbox;
mod serve;
mod slack;
mod store;
mod support;
mod telemetry;
mod trace;

fn main() -> ExitCode {
    // This executable is also the sandbox launcher of the tools it runs: a
    // launcher invocation is handled before any thread or runtime starts.
    if let Some(code) = bdk_core::containment::run_if_launcher() {
        return code;
    }
    let cli = Cli::parse();
    // Before any thread: a long-running server gives freed memory back.
    if matches!(cli.command, Command::Serve { .. } | Command::Dev { .. }) {
        malloc::pin_mmap_threshold();
    }
    let logs = bdk_http::LogBuffer::new(2000);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: failed to start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    // OpenTelemetry export, for the commands that run turns; its exporters
    // must be built inside the runtime.
    let otlp = match &cli.command {
        Command::Serve { otlp_endpoint, .. } | Command::Run { otlp_endpoint, .. } => {
            Some(otlp_endpoint.as_deref())
        }
        _ => None,
    };
    let telemetry = match otlp {
        None => None,
        Some(flag) => {
            let _guard = runtime.enter();
            match telemetry::Telemetry::start(flag) {
                Ok(t) => t,
                Err(e) => {
                    errln!("error: {e:#}");
                    return ExitCode::from(2);
                }
            }
        }
    };
    logs::init(cli.log_format, &logs, telemetry.as_ref());
    let code = runtime.block_on(commands::dispatch(cli.command, logs));
    // Flush spans and metrics while the runtime still drives the exporters'
    // connections (after `serve` has drained on SIGINT/SIGTERM).
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    // Turn tasks that outlive the command (none should) must not hold the
    // process open.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    // Every program has ended with its call: their cgroups can go.
    sandbox::release_cgroups();
    code
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
