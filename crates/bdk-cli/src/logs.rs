//! Feeds `tracing` events into the server's log ring buffer (`/v1/logs`).

use std::fmt::Write as _;

use bdk_http::LogBuffer;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// A layer that copies each event, formatted on one line, into a [`LogBuffer`].
pub struct RingLayer {
    buffer: LogBuffer,
}

impl RingLayer {
    /// A layer writing into `buffer`.
    pub fn new(buffer: LogBuffer) -> Self {
        Self { buffer }
    }
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        let meta = event.metadata();
        self.buffer.push(
            &meta.level().to_string().to_lowercase(),
            meta.target(),
            format!("{}{}", line.message, line.fields),
        );
    }
}
