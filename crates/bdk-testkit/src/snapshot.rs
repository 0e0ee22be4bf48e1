//! Event sequences as snapshot-able JSON: what varies from run to run
//! (ids, times, durations, temporary paths) replaced by stable stand-ins.
//!
//! Generated ids (`<prefix>_<26 base32 chars>`, see `bdk_events::ids`)
//! become `<prefix>_<n>`, numbered per prefix in order of first appearance,
//! so a snapshot still shows which events share a session, a turn or a
//! call. Timestamps (`at` and every `...At` field) become `[time]`, and
//! durations (`...Ms` fields) `[ms]`.

use std::collections::BTreeMap;

use bdk_events::Envelope;
use serde_json::{Map, Value};

/// The envelopes as a JSON array with every run-dependent value redacted
/// (see [`redacted`]).
pub fn redacted_events(events: &[Envelope], paths: &[&std::path::Path]) -> Value {
    redacted(serde_json::to_value(events).unwrap(), paths)
}

/// `value` with run-dependent values redacted, and every occurrence of the
/// `paths` (temporary directories) replaced by `[dir]`.
pub fn redacted(mut value: Value, paths: &[&std::path::Path]) -> Value {
    let mut redactor = Redactor {
        paths: paths.iter().map(|p| p.display().to_string()).collect(),
        ..Redactor::default()
    };
    redactor.value(&mut value, None);
    value
}

#[derive(Default)]
struct Redactor {
    /// Stand-ins handed out so far: id -> `<prefix>_<n>`.
    ids: BTreeMap<String, String>,
    /// How many ids of each prefix have been seen.
    counts: BTreeMap<String, usize>,
    paths: Vec<String>,
}

impl Redactor {
    fn value(&mut self, value: &mut Value, key: Option<&str>) {
        match value {
            Value::Object(map) => self.object(map),
            Value::Array(items) => {
                for item in items {
                    self.value(item, None);
                }
            }
            Value::String(s) => {
                if key.is_some_and(is_time_key) {
                    *s = "[time]".to_owned();
                } else if let Some(stand_in) = self.id(s) {
                    *s = stand_in;
                } else {
                    for path in &self.paths {
                        *s = s.replace(path.as_str(), "[dir]");
                    }
                }
            }
            Value::Number(_) if key.is_some_and(is_duration_key) => {
                *value = Value::String("[ms]".to_owned());
            }
            _ => {}
        }
    }

    fn object(&mut self, map: &mut Map<String, Value>) {
        for (key, item) in map.iter_mut() {
            self.value(item, Some(key));
        }
    }

    /// The stand-in for `s` when it is a generated id.
    fn id(&mut self, s: &str) -> Option<String> {
        let (prefix, body) = s.split_once('_')?;
        let is_id = !prefix.is_empty()
            && prefix.bytes().all(|b| b.is_ascii_lowercase())
            && body.len() == 26
            && body
                .bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
        if !is_id {
            return None;
        }
        if let Some(known) = self.ids.get(s) {
            return Some(known.clone());
        }
        let n = self.counts.entry(prefix.to_owned()).or_default();
        *n += 1;
        let stand_in = format!("{prefix}_{n}");
        self.ids.insert(s.to_owned(), stand_in.clone());
        Some(stand_in)
    }
}

fn is_time_key(key: &str) -> bool {
    key == "at" || key.ends_with("At")
}

fn is_duration_key(key: &str) -> bool {
    key.ends_with("Ms")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_times_and_durations_get_stable_stand_ins() {
        let value = json!([
            {"sessionId": "ses_0123456789abcdefghjkmnpqrs", "at": "2026-01-01T00:00:00Z",
             "data": {"callId": "call_0123456789abcdefghjkmnpqrs", "durationMs": 12,
                      "startedAt": "x", "path": "/tmp/abc/file", "n": 3}},
            {"sessionId": "ses_0123456789abcdefghjkmnpqrs",
             "data": {"callId": "call_zzzzzzzzzzzzzzzzzzzzzzzzzz", "text": "not_an_id"}}
        ]);
        let out = redacted(value, &[std::path::Path::new("/tmp/abc")]);
        assert_eq!(
            out,
            json!([
                {"sessionId": "ses_1", "at": "[time]",
                 "data": {"callId": "call_1", "durationMs": "[ms]",
                          "startedAt": "[time]", "path": "[dir]/file", "n": 3}},
                {"sessionId": "ses_1",
                 "data": {"callId": "call_2", "text": "not_an_id"}}
            ])
        );
    }
}
