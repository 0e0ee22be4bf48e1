//! The JSON lines log format (`--log-format json`): one JSON object a line,
//!
//! ```json
//! {"timestamp":"2026-01-15T09:00:00.000000Z","level":"WARN","target":"bdk_core::host","fields":{"message":"...","session_id":"ses_..."},"spans":[{"name":"turn","session_id":"ses_..."}]}
//! ```
//!
//! Strings go through serde_json, which escapes quotes, backslashes and the
//! C0 controls; [`SafeJson`] also writes DEL, the C1 controls and the other
//! characters the `escape` module lists as `\u` escapes, so a line is valid
//! JSON whatever a value holds, decodes to the exact value, and never
//! carries a raw control character to a terminal.

use std::error::Error;
use std::fmt::{self, Write as _};
use std::io;

use serde::Serialize as _;
use serde::Serializer as _;
use serde::ser::SerializeMap as _;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

use super::escape::is_unsafe;

/// The event formatter of the JSON lines format. Use it with
/// [`JsonSpanFields`] as the field formatter, which records span fields in
/// the form this formatter reads back.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut spans = Vec::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let mut entry = Map::new();
                entry.insert("name".into(), Value::String(span.name().to_owned()));
                if let Some(fields) = span.extensions().get::<FormattedFields<N>>() {
                    entry.extend(span_fields(&fields.fields));
                }
                spans.push(Value::Object(entry));
            }
        }
        let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut line = Vec::with_capacity(256);
        {
            let mut ser = serde_json::Serializer::with_formatter(&mut line, SafeJson);
            let mut map = (&mut ser).serialize_map(None).map_err(|_| fmt::Error)?;
            map.serialize_entry("timestamp", &timestamp)
                .and_then(|()| map.serialize_entry("level", meta.level().as_str()))
                .and_then(|()| map.serialize_entry("target", meta.target()))
                .and_then(|()| map.serialize_entry("fields", &record(event)))
                .and_then(|()| map.serialize_entry("spans", &spans))
                .map_err(|_| fmt::Error)?;
            map.end().map_err(|_| fmt::Error)?;
        }
        let line = String::from_utf8(line).map_err(|_| fmt::Error)?;
        writer.write_str(&line)?;
        writer.write_char('\n')
    }
}

/// The field formatter of the JSON lines format, used for span fields: it
/// keeps them as the members of a JSON object without its braces
/// (`"a":1,"b":"x"`), so that fields recorded later append with a comma.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JsonSpanFields;

impl<'writer> FormatFields<'writer> for JsonSpanFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        let object = to_string(&Value::Object(record(fields)))?;
        // `{...}` without its braces.
        let members = object
            .strip_prefix('{')
            .and_then(|s| s.strip_suffix('}'))
            .unwrap_or_default();
        writer.write_str(members)
    }

    fn add_fields(
        &self,
        current: &'writer mut FormattedFields<Self>,
        fields: &tracing::span::Record<'_>,
    ) -> fmt::Result {
        let mut added = String::new();
        self.format_fields(Writer::new(&mut added), fields)?;
        if !current.fields.is_empty() && !added.is_empty() {
            current.fields.push(',');
        }
        current.fields.push_str(&added);
        Ok(())
    }
}

/// The members [`JsonSpanFields`] wrote, as an object.
fn span_fields(members: &str) -> Map<String, Value> {
    match serde_json::from_str::<Value>(&format!("{{{members}}}")) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

fn to_string(value: &Value) -> Result<String, fmt::Error> {
    let mut out = Vec::new();
    value
        .serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, SafeJson,
        ))
        .map_err(|_| fmt::Error)?;
    String::from_utf8(out).map_err(|_| fmt::Error)
}

/// The fields as JSON values: numbers and booleans as such, everything else
/// (strings, `%display`, `?debug`, errors with their causes) as strings.
fn record<R: RecordFields>(fields: R) -> Map<String, Value> {
    let mut visitor = JsonVisitor(Map::new());
    fields.record(&mut visitor);
    visitor.0
}

struct JsonVisitor(Map<String, Value>);

impl JsonVisitor {
    fn put(&mut self, field: &Field, value: Value) {
        self.0.insert(field.name().to_owned(), value);
    }
}

impl Visit for JsonVisitor {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let value = serde_json::Number::from_f64(value)
            .map_or_else(|| Value::String(value.to_string()), Value::Number);
        self.put(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::Bool(value));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::String(value.to_owned()));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(text, ": {cause}");
            source = cause.source();
        }
        self.put(field, Value::String(text));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::String(format!("{value:?}")));
    }
}

/// serde_json's compact output, with every character that the `escape`
/// module calls unsafe and serde_json leaves as it is (DEL, the C1
/// controls, line separators, bidirectional marks) written as `\uXXXX`.
struct SafeJson;

impl serde_json::ser::Formatter for SafeJson {
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()>
    where
        W: ?Sized + io::Write,
    {
        let mut start = 0;
        for (i, ch) in fragment.char_indices() {
            if is_unsafe(ch) {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                // Every unsafe character is in the Basic Multilingual Plane,
                // so one `\uXXXX` escape is its whole JSON form.
                write!(writer, "\\u{:04x}", u32::from(ch))?;
                start = i + ch.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn json_output(emit: impl FnOnce()) -> Vec<Value> {
        let out = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .event_format(JsonLines)
            .fmt_fields(JsonSpanFields)
            .with_writer(out.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert!(!text.chars().any(|c| is_unsafe(c) && c != '\n'), "{text:?}");
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn each_event_is_one_json_object_holding_the_exact_values() {
        let hostile =
            "a\n2026-01-01T00:00:00Z ERROR forged \"q\" \\ \u{1b}[31m \u{7f}\u{9b}\u{2028}\u{202e}";
        let lines = json_output(|| {
            let span = tracing::info_span!("turn", session = %hostile, step = 1);
            let _entered = span.enter();
            span.record("step", 2);
            tracing::warn!(id = %hostile, text = hostile, n = 7, ok = true, ratio = 0.5, nan = f64::NAN, "sent {}", hostile);
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        assert_eq!(line["level"], "WARN");
        assert_eq!(line["target"], "bdk::logs::json::tests");
        assert!(line["timestamp"].as_str().unwrap().ends_with('Z'));
        let fields = &line["fields"];
        assert_eq!(fields["message"], format!("sent {hostile}"));
        assert_eq!(fields["id"], hostile);
        assert_eq!(fields["text"], hostile);
        assert_eq!(fields["n"], 7);
        assert_eq!(fields["ok"], true);
        assert_eq!(fields["ratio"], 0.5);
        assert_eq!(fields["nan"], "NaN");
        assert_eq!(line["spans"][0]["name"], "turn");
        assert_eq!(line["spans"][0]["session"], hostile);
        assert_eq!(line["spans"][0]["step"], 2);
    }

    #[test]
    fn events_outside_spans_have_an_empty_span_list() {
        let lines = json_output(|| tracing::error!("plain"));
        assert_eq!(lines[0]["fields"]["message"], "plain");
        assert_eq!(lines[0]["spans"], serde_json::json!([]));
    }
}
