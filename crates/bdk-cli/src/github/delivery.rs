//! Saved deliveries: reading the three file shapes `bdk github replay`
//! accepts into one payload text and its event, inferring the event from a
//! bare payload's keys, and compacting JSON text without reordering it.
//!
//! Everything here is a plain function over text, so that what is signed
//! and sent is decided (and tested) apart from the network.

use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde_json::value::RawValue;

/// A delivery read from a file, ready to sign and send.
#[derive(Debug, PartialEq)]
pub(super) struct Saved {
    /// The event name (`X-GitHub-Event`).
    pub event: String,
    /// Where the event name came from.
    pub event_from: EventFrom,
    /// The payload as compact JSON text, its keys in the file's order.
    pub payload: String,
    /// Saved headers that describe the hook rather than this delivery
    /// (`X-GitHub-Hook-ID`, `X-GitHub-Hook-Installation-Target-*`,
    /// `X-GitHub-Enterprise-*`), sent again as they were.
    pub hook_headers: Vec<(String, String)>,
}

/// Where a saved delivery's event name came from.
#[derive(Debug, PartialEq, Clone, Copy)]
pub(super) enum EventFrom {
    /// `--event`.
    Flag,
    /// The saved `X-GitHub-Event` header.
    Header,
    /// The `event` field of GitHub's delivery record.
    Record,
    /// The payload's keys.
    Inferred,
}

/// Reads a delivery file's text. `event` is `--event`, which wins over
/// what the file says.
pub(super) fn parse(text: &str, event: Option<&str>) -> Result<Saved, String> {
    let _valid: &RawValue =
        serde_json::from_str(text).map_err(|e| format!("the file is not JSON: {e}"))?;
    let fields: HashMap<String, &RawValue> = serde_json::from_str(text)
        .map_err(|_| "the file does not hold a JSON object".to_owned())?;

    let (payload, headers, record_event) = if let Some(request) = fields
        .get("request")
        .and_then(|r| object(r))
        .filter(|r| r.contains_key("payload"))
    {
        // GitHub's delivery record: {guid, event, action, request: {headers, payload}}.
        let headers = request.get("headers").map(|h| headers_of(h)).transpose()?;
        let record_event = fields
            .get("event")
            .and_then(|e| serde_json::from_str::<String>(e.get()).ok());
        (
            payload_text(request.get("payload").copied())?,
            headers.unwrap_or_default(),
            record_event,
        )
    } else if let Some(headers) = fields
        .get("headers")
        .filter(|_| fields.contains_key("payload") || fields.contains_key("body"))
    {
        // {headers, payload} or {headers, body}.
        let payload = fields.get("payload").or_else(|| fields.get("body"));
        (payload_text(payload.copied())?, headers_of(headers)?, None)
    } else {
        (text.to_owned(), Vec::new(), None)
    };

    let payload = compact(&payload);
    let keys: HashMap<String, IgnoredAny> = serde_json::from_str(&payload)
        .map_err(|_| "the payload is not a JSON object".to_owned())?;

    let (event, event_from) = if let Some(flag) = event {
        (flag.to_owned(), EventFrom::Flag)
    } else if let Some(saved) = header(&headers, "x-github-event") {
        (saved.to_owned(), EventFrom::Header)
    } else if let Some(recorded) = record_event {
        (recorded, EventFrom::Record)
    } else if let Some(inferred) = infer_event(keys.keys().map(String::as_str)) {
        (inferred.to_owned(), EventFrom::Inferred)
    } else {
        return Err(
            "the file names no event (no X-GitHub-Event header) and the payload's keys match none \
             we infer: pass --event NAME"
                .to_owned(),
        );
    };
    if event.trim().is_empty() {
        return Err("the event name is empty".to_owned());
    }
    let hook_headers = headers
        .into_iter()
        .filter(|(name, _)| {
            let name = name.to_ascii_lowercase();
            name.starts_with("x-github-hook-") || name.starts_with("x-github-enterprise-")
        })
        .collect();
    Ok(Saved {
        event,
        event_from,
        payload,
        hook_headers,
    })
}

/// The object's fields, or `None` for anything that is not an object.
fn object(raw: &RawValue) -> Option<HashMap<String, &RawValue>> {
    serde_json::from_str(raw.get()).ok()
}

/// The payload's JSON text: an object as it is written, or a string that
/// holds JSON text (a body saved as the raw string it arrived as).
fn payload_text(raw: Option<&RawValue>) -> Result<String, String> {
    let Some(raw) = raw else {
        return Err("the delivery has no payload".to_owned());
    };
    let text = raw.get();
    if text.starts_with('"') {
        let inner: String = serde_json::from_str(text)
            .map_err(|e| format!("the delivery's body is not a string: {e}"))?;
        let _valid: &RawValue = serde_json::from_str(&inner)
            .map_err(|e| format!("the delivery's body string is not JSON: {e}"))?;
        return Ok(inner);
    }
    Ok(text.to_owned())
}

/// Saved headers, in no particular order; values that are not strings are
/// left out (GitHub's are all strings).
fn headers_of(raw: &RawValue) -> Result<Vec<(String, String)>, String> {
    let map: HashMap<String, serde_json::Value> = serde_json::from_str(raw.get())
        .map_err(|_| "the delivery's headers are not a JSON object".to_owned())?;
    Ok(map
        .into_iter()
        .filter_map(|(name, value)| match value {
            serde_json::Value::String(s) => Some((name, s)),
            _ => None,
        })
        .collect())
}

/// The value of a header, its name matched without regard to case.
pub(super) fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The event a bare payload is, from its top-level keys; `None` when they
/// match none of the events a GitHub bot usually handles. The more specific
/// shapes come first: a review comment also carries `pull_request`, an
/// issue comment also carries `issue`.
pub(super) fn infer_event<'a>(keys: impl Iterator<Item = &'a str>) -> Option<&'static str> {
    let keys: Vec<&str> = keys.collect();
    let has = |k: &str| keys.contains(&k);
    let event = if has("zen") && has("hook_id") {
        "ping"
    } else if has("pull_request") && has("comment") {
        "pull_request_review_comment"
    } else if has("pull_request") && has("review") {
        "pull_request_review"
    } else if has("pull_request") && has("thread") {
        "pull_request_review_thread"
    } else if has("pull_request") {
        "pull_request"
    } else if has("issue") && has("comment") {
        "issue_comment"
    } else if has("issue") {
        "issues"
    } else {
        return None;
    };
    Some(event)
}

/// Valid JSON text without its insignificant whitespace, every other byte
/// (key order, number spelling, string escapes) kept: what GitHub sends is
/// compact, and re-serializing through a map would reorder the keys.
pub(super) fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn compact_drops_whitespace_between_tokens_only() {
        let text = "{\n  \"b\": [1, 2],\n  \"a\": \"x y \\\" z\\\\\",\n  \"c\": {\"d\": null}\n}\n";
        assert_eq!(
            compact(text),
            r#"{"b":[1,2],"a":"x y \" z\\","c":{"d":null}}"#
        );
        // Still the same JSON value.
        let before: serde_json::Value = serde_json::from_str(text).unwrap();
        let after: serde_json::Value = serde_json::from_str(&compact(text)).unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn compact_keeps_non_ascii_and_escapes_as_written() {
        let text = r#"{ "t": "caf\u00e9 é \n" , "n": 1.50e3 }"#;
        assert_eq!(compact(text), r#"{"t":"caf\u00e9 é \n","n":1.50e3}"#);
    }

    #[test]
    fn a_github_delivery_record_gives_its_payload_event_and_hook_headers() {
        let text = r#"{
          "id": 1, "guid": "0b989ba4", "event": "issues", "action": "opened",
          "request": {
            "headers": {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "0b989ba4",
                        "X-GitHub-Hook-ID": "42", "X-Hub-Signature-256": "sha256=old",
                        "Content-Type": "application/json"},
            "payload": {"zeta": 1, "action": "opened", "pull_request": {"number": 3}}
          },
          "response": {"headers": {}, "payload": null}
        }"#;
        let saved = parse(text, None).unwrap();
        assert_eq!(saved.event, "pull_request");
        assert_eq!(saved.event_from, EventFrom::Header);
        assert_eq!(
            saved.payload,
            r#"{"zeta":1,"action":"opened","pull_request":{"number":3}}"#
        );
        assert_eq!(
            saved.hook_headers,
            vec![("X-GitHub-Hook-ID".to_owned(), "42".to_owned())]
        );
    }

    #[test]
    fn a_record_without_the_event_header_uses_its_event_field() {
        let text = r#"{"guid": "g", "event": "issues", "request": {"headers": {}, "payload": {"issue": {}}}}"#;
        let saved = parse(text, None).unwrap();
        assert_eq!(saved.event, "issues");
        assert_eq!(saved.event_from, EventFrom::Record);
    }

    #[test]
    fn a_headers_and_payload_pair_reads_either_payload_or_body() {
        let payload =
            r#"{"headers": {"x-github-event": "ping"}, "payload": {"zen": "z", "hook_id": 1}}"#;
        let saved = parse(payload, None).unwrap();
        assert_eq!(
            (saved.event.as_str(), saved.payload.as_str()),
            ("ping", r#"{"zen":"z","hook_id":1}"#)
        );

        let body = r#"{"headers": {"X-GITHUB-EVENT": "issues"}, "body": {"issue": {"n": 1}}}"#;
        assert_eq!(parse(body, None).unwrap().payload, r#"{"issue":{"n":1}}"#);

        // A body saved as the string it arrived as is sent as that text.
        let string =
            r#"{"headers": {"X-GitHub-Event": "issues"}, "body": "{\"issue\": {\"n\": 1}}"}"#;
        assert_eq!(parse(string, None).unwrap().payload, r#"{"issue":{"n":1}}"#);
    }

    #[test]
    fn a_bare_payload_is_sent_whole_with_its_event_inferred_or_given() {
        let text = r#"{"action": "created", "issue": {}, "comment": {}, "repository": {}}"#;
        let saved = parse(text, None).unwrap();
        assert_eq!(saved.event, "issue_comment");
        assert_eq!(saved.event_from, EventFrom::Inferred);
        assert_eq!(
            saved.payload,
            r#"{"action":"created","issue":{},"comment":{},"repository":{}}"#
        );
        let given = parse(text, Some("discussion_comment")).unwrap();
        assert_eq!(
            (given.event.as_str(), given.event_from),
            ("discussion_comment", EventFrom::Flag)
        );
    }

    #[test]
    fn the_flag_wins_over_the_saved_header() {
        let text = r#"{"headers": {"X-GitHub-Event": "issues"}, "payload": {"issue": {}}}"#;
        assert_eq!(
            parse(text, Some("issue_comment")).unwrap().event,
            "issue_comment"
        );
    }

    #[test]
    fn inference_picks_the_specific_event_first() {
        let cases: [(&[&str], Option<&str>); 8] = [
            (
                &["action", "pull_request", "repository"],
                Some("pull_request"),
            ),
            (
                &["action", "comment", "pull_request"],
                Some("pull_request_review_comment"),
            ),
            (
                &["action", "review", "pull_request"],
                Some("pull_request_review"),
            ),
            (
                &["action", "thread", "pull_request"],
                Some("pull_request_review_thread"),
            ),
            (&["action", "issue", "comment"], Some("issue_comment")),
            (&["action", "issue", "repository"], Some("issues")),
            (&["zen", "hook_id", "hook"], Some("ping")),
            (&["ref", "before", "after", "commits"], None),
        ];
        for (keys, expected) in cases {
            assert_eq!(infer_event(keys.iter().copied()), expected, "{keys:?}");
        }
    }

    #[test]
    fn unusable_files_say_why() {
        let cases = [
            ("not json", "not JSON"),
            ("[1, 2]", "does not hold a JSON object"),
            (r#"{"ref": "main", "commits": []}"#, "pass --event"),
            (r#"{"headers": {}, "payload": [1]}"#, "not a JSON object"),
            (r#"{"headers": {}, "body": "nope"}"#, "not JSON"),
            (r#"{"headers": [], "payload": {}}"#, "headers are not"),
        ];
        for (text, expected) in cases {
            let message = parse(text, None).unwrap_err();
            assert!(message.contains(expected), "{text}: {message}");
        }
    }
}
