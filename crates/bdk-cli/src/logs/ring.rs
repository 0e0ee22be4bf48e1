//! Feeds `tracing` events into the server's log ring buffer (`/v1/logs`).

use bdk_http::LogBuffer;
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

use super::text;

/// A layer that copies each event, rendered on one escaped line (see the
/// `text` module), into a [`LogBuffer`].
pub struct RingLayer {
    buffer: LogBuffer,
}

impl RingLayer {
    /// A layer writing into `buffer`.
    pub fn new(buffer: LogBuffer) -> Self {
        Self { buffer }
    }
}

impl<S: Subscriber> Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        self.buffer.push(
            &meta.level().to_string().to_lowercase(),
            meta.target(),
            text::render(event),
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    #[test]
    fn a_forged_line_stays_inside_its_message() {
        let buffer = LogBuffer::new(10);
        let subscriber = tracing_subscriber::registry().with(RingLayer::new(buffer.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(id = %"a\n2026-01-01T00:00:00Z ERROR forged", "response error");
        });
        let (lines, _) = buffer.after(0, 10);
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].level, "warn");
        assert_eq!(
            lines[0].message,
            r"response error id=a\n2026-01-01T00:00:00Z ERROR forged"
        );
    }
}
