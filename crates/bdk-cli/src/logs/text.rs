//! One-line text rendering of an event's or a span's fields:
//! `message name=value name="text" ...`, every part escaped.
//!
//! [`TextFields`] is the stderr text format's field formatter (event fields
//! and span fields alike); the ring buffer renders its lines with the same
//! [`render`], so both sinks show a value the same way.

use std::error::Error;
use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

use super::escape::Escaped;

/// The field formatter of the text log format: like tracing-subscriber's
/// default, with every message and value escaped (see the `escape` module).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        writer.write_str(&render(fields))
    }
}

/// The fields as one escaped line: the message first, then ` name=value`
/// for each other field. String values are quoted (`name="a b"`) so that a
/// value cannot pass for another field.
pub(crate) fn render<R: RecordFields>(fields: R) -> String {
    let mut line = Line::default();
    fields.record(&mut line);
    if line.fields.is_empty() {
        line.message
    } else if line.message.is_empty() {
        line.fields.trim_start().to_owned()
    } else {
        line.message + &line.fields
    }
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Line {
    /// Appends ` name=` to the fields and returns where the value goes.
    fn value_of(&mut self, field: &Field) -> Escaped<&mut String> {
        let _ = write!(self.fields, " {}=", field.name());
        Escaped(&mut self.fields)
    }
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            let _ = Escaped(&mut self.message).write_str(value);
        } else {
            let _ = write!(self.value_of(field), "{value:?}");
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        // The error and its causes, the way `{:#}` shows an anyhow chain.
        let mut out = self.value_of(field);
        let _ = write!(out, "{value}");
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(out, ": {cause}");
            source = cause.source();
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(Escaped(&mut self.message), "{value:?}");
        } else {
            let _ = write!(self.value_of(field), "{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    /// A writer that collects what the fmt layer writes.
    #[derive(Clone, Default)]
    pub(crate) struct Captured(pub(crate) Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn text_output(emit: impl FnOnce()) -> String {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(TextFields)
            .with_ansi(false)
            .without_time()
            .with_writer(out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        String::from_utf8(out.0.lock().unwrap().clone()).unwrap()
    }

    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer\nfailure")
        }
    }
    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn every_kind_of_value_stays_on_its_line() {
        let forged = "x\n2026-01-01T00:00:00Z ERROR forged";
        let out = text_output(|| {
            let span = tracing::info_span!("turn", session = %forged);
            let _entered = span.enter();
            let error = Outer(std::io::Error::other("inner\r\ncause"));
            tracing::warn!(
                id = %forged,
                debug = ?forged,
                text = forged,
                error = &error as &dyn Error,
                count = 3,
                "message with {}",
                forged
            );
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(!out.contains('\r'));
        assert_eq!(
            out.trim(),
            r#"WARN turn{session=x\n2026-01-01T00:00:00Z ERROR forged}: bdk::logs::text::tests: message with x\n2026-01-01T00:00:00Z ERROR forged id=x\n2026-01-01T00:00:00Z ERROR forged debug="x\n2026-01-01T00:00:00Z ERROR forged" text="x\n2026-01-01T00:00:00Z ERROR forged" error=outer\nfailure: inner\r\ncause count=3"#
        );
    }

    #[test]
    fn ansi_sequences_in_values_are_escaped() {
        let out = text_output(|| tracing::error!(name = %"\u{1b}[2J\u{1b}[31mboom", "\u{9b}31m"));
        assert!(
            !out.contains('\u{1b}') && !out.contains('\u{9b}'),
            "{out:?}"
        );
        assert!(
            out.contains(r"\u{9b}31m name=\u{1b}[2J\u{1b}[31mboom"),
            "{out}"
        );
    }

    #[test]
    fn an_event_without_a_message_lists_its_fields() {
        let out = text_output(|| tracing::info!(a = 1, b = "two"));
        assert!(out.trim_end().ends_with(r#"a=1 b="two""#), "{out}");
    }
}
