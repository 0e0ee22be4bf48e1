//! The binary's log pipeline: `tracing` events to stderr (text or JSON
//! lines) and to the ring buffer behind `GET /v1/logs`, plus the
//! OpenTelemetry layers when export is on.
//!
//! Logged values carry text from outside (a JSON-RPC id, a tool name, a
//! header), so both sinks format every message and field through the
//! `escape` module's rule: no value can start a line of its own or send a
//! terminal control sequence. Colour is used only when stderr is a terminal
//! and `NO_COLOR` is unset.

use std::io::IsTerminal as _;

use bdk_http::LogBuffer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, Registry};

use crate::telemetry::Telemetry;

pub(crate) mod escape;
mod json;
mod ring;
mod text;

/// How stderr log lines are written (`--log-format`, `BDK_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines: time, level, spans, target, message, fields.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields`
    /// (the message among them) and `spans`.
    Json,
}

/// Installs the process-wide subscriber. `BDK_LOG` sets both filters; by
/// default stderr shows warnings and errors, and the ring keeps `info` and
/// above except the runtime's `bdk::gen_ai` spans, which are for the
/// OpenTelemetry layers.
pub fn init(format: LogFormat, ring: &LogBuffer, telemetry: Option<&Telemetry>) {
    let ring_filter = EnvFilter::try_from_env("BDK_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,bdk::gen_ai=off"));
    let stderr_filter =
        EnvFilter::try_from_env("BDK_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let stderr = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let stderr: Box<dyn tracing_subscriber::Layer<Registry> + Send + Sync> = match format {
        LogFormat::Text => stderr
            .fmt_fields(text::TextFields)
            .with_ansi(colour(
                std::io::stderr().is_terminal(),
                std::env::var_os("NO_COLOR"),
            ))
            .with_filter(stderr_filter)
            .boxed(),
        LogFormat::Json => stderr
            .event_format(json::JsonLines)
            .fmt_fields(json::JsonSpanFields)
            .with_ansi(false)
            .with_filter(stderr_filter)
            .boxed(),
    };
    tracing_subscriber::registry()
        .with(stderr)
        .with(ring::RingLayer::new(ring.clone()).with_filter(ring_filter))
        .with(telemetry.map(Telemetry::layers))
        .init();
}

/// Whether the text format colours its output: only on a terminal, and
/// never when `NO_COLOR` is set to a non-empty value (<https://no-color.org>).
fn colour(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_needs_a_terminal_and_no_no_color() {
        assert!(colour(true, None));
        assert!(colour(true, Some("".into())));
        assert!(!colour(true, Some("1".into())));
        assert!(!colour(false, None));
    }
}
