//! Decoding a Web API call's arguments the way Slack reads them: the query
//! string, then a body that is JSON, a form (`x-www-form-urlencoded`) or
//! multipart, with JSON-valued fields (`blocks`, `files`) given as JSON
//! text inside a form. A body that cannot be read is refused with Slack's
//! common error codes, never a panic.

use serde_json::{Map, Value, json};

/// The arguments that carry JSON; a form sends them as JSON text.
const JSON_FIELDS: &[&str] = &["blocks", "files", "attachments", "metadata"];

/// A call's arguments, decoded.
#[derive(Debug, Default, Clone)]
pub(super) struct Args {
    /// Every argument by name.
    pub(super) map: Map<String, Value>,
    /// A `token` sent the legacy way (query or form field); Slack ignores
    /// one inside a JSON body.
    pub(super) token: Option<String>,
    /// Slack's warnings about the request (`missing_charset`).
    pub(super) warnings: Vec<&'static str>,
}

impl Args {
    /// An argument as text: strings as they are, numbers and booleans
    /// written out (a client may send a `ts` or a `length` as a JSON
    /// number); `None` when absent, null or empty.
    pub(super) fn text(&self, name: &str) -> Option<String> {
        match self.map.get(name)? {
            Value::String(text) if text.is_empty() => None,
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            Value::Bool(flag) => Some(flag.to_string()),
            _ => None,
        }
    }

    /// A boolean argument: `true`, `"true"` or `"1"`.
    pub(super) fn flag(&self, name: &str) -> bool {
        match self.map.get(name) {
            Some(Value::Bool(flag)) => *flag,
            Some(Value::String(text)) => text == "true" || text == "1",
            Some(Value::Number(number)) => number.as_u64() == Some(1),
            _ => false,
        }
    }

    /// An argument as it came (JSON fields parsed).
    pub(super) fn value(&self, name: &str) -> Option<&Value> {
        self.map.get(name).filter(|value| !value.is_null())
    }

    /// The arguments as one JSON object, for the record.
    pub(super) fn to_value(&self) -> Value {
        Value::Object(self.map.clone())
    }
}

/// Decodes the query string and the body per `content_type`; `Err` is the
/// Slack error code to answer.
pub(super) fn decode(
    content_type: Option<&str>,
    query: &str,
    body: &[u8],
) -> Result<Args, &'static str> {
    let mut args = Args::default();
    for (name, value) in form_pairs(query).ok_or("invalid_form_data")? {
        args.map.insert(name, Value::String(value));
    }
    args.token = args.text("token");
    if body.iter().all(u8::is_ascii_whitespace) {
        parse_json_fields(&mut args.map);
        return Ok(args);
    }
    let Some(content_type) = content_type else {
        return Err("missing_post_type");
    };
    let (media, params) = media_type(content_type);
    match media.as_str() {
        "application/json" => {
            match params.iter().find(|(name, _)| name == "charset") {
                None => args.warnings.push("missing_charset"),
                Some((_, charset)) if !charset.eq_ignore_ascii_case("utf-8") => {
                    return Err("invalid_charset");
                }
                Some(_) => {}
            }
            let value: Value = serde_json::from_slice(body).map_err(|_| "invalid_json")?;
            let Value::Object(object) = value else {
                return Err("json_not_object");
            };
            args.map.extend(object);
        }
        "application/x-www-form-urlencoded" => {
            let text = std::str::from_utf8(body).map_err(|_| "invalid_form_data")?;
            for (name, value) in form_pairs(text.trim()).ok_or("invalid_form_data")? {
                args.map.insert(name, Value::String(value));
            }
            args.token = args.text("token");
        }
        "multipart/form-data" => {
            let parts = multipart(content_type, body).ok_or("invalid_form_data")?;
            for part in parts {
                let value = match part.filename {
                    Some(filename) => json!({"filename": filename, "length": part.data.len()}),
                    None => Value::String(
                        String::from_utf8(part.data.to_vec()).map_err(|_| "invalid_form_data")?,
                    ),
                };
                args.map.insert(part.name, value);
            }
            args.token = args.text("token");
        }
        _ => return Err("invalid_post_type"),
    }
    parse_json_fields(&mut args.map);
    Ok(args)
}

/// Parses the JSON-valued fields that came as JSON text; text that does
/// not parse stays a string for the method to refuse.
fn parse_json_fields(map: &mut Map<String, Value>) {
    for name in JSON_FIELDS {
        if let Some(Value::String(text)) = map.get(*name)
            && let Ok(parsed) = serde_json::from_str::<Value>(text)
        {
            map.insert((*name).to_owned(), parsed);
        }
    }
}

/// `application/json; charset=utf-8` as the lower-cased media type and its
/// parameters (names lower-cased, values unquoted).
pub(super) fn media_type(content_type: &str) -> (String, Vec<(String, String)>) {
    let mut pieces = content_type.split(';');
    let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
    let params = pieces
        .filter_map(|piece| {
            let (name, value) = piece.split_once('=')?;
            Some((
                name.trim().to_ascii_lowercase(),
                value.trim().trim_matches('"').to_owned(),
            ))
        })
        .collect();
    (media, params)
}

/// `a=1&b=x%20y+z` as decoded pairs; `None` when a decoded name or value
/// is not UTF-8.
pub(super) fn form_pairs(text: &str) -> Option<Vec<(String, String)>> {
    text.split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            Some((form_decode(name)?, form_decode(value)?))
        })
        .collect()
}

/// Decodes one form component: `+` is a space, `%XX` a byte; a `%` not
/// followed by two hex digits stays as it is.
fn form_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%'
            && let Some(hex) = text.get(index + 1..index + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
        {
            out.push(byte);
            index += 3;
            continue;
        }
        out.push(if bytes[index] == b'+' {
            b' '
        } else {
            bytes[index]
        });
        index += 1;
    }
    String::from_utf8(out).ok()
}

/// Encodes `text` as one form component: everything but the unreserved
/// characters as `%XX`.
pub(super) fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// One part of a multipart body.
pub(super) struct Part<'a> {
    pub(super) name: String,
    pub(super) filename: Option<String>,
    pub(super) data: &'a [u8],
}

/// The parts of a `multipart/form-data` body; `None` when the boundary is
/// missing or the body does not follow it.
pub(super) fn multipart<'a>(content_type: &str, body: &'a [u8]) -> Option<Vec<Part<'a>>> {
    let (_, params) = media_type(content_type);
    let boundary = params
        .into_iter()
        .find(|(name, _)| name == "boundary")
        .map(|(_, value)| value)
        .filter(|value| !value.is_empty())?;
    let delimiter = format!("--{boundary}");
    let delimiter = delimiter.as_bytes();
    let mut at = find(body, delimiter, 0)? + delimiter.len();
    let mut parts = Vec::new();
    loop {
        let rest = body.get(at..)?;
        if rest.starts_with(b"--") {
            return Some(parts);
        }
        let rest = rest.strip_prefix(b"\r\n")?;
        let start = body.len() - rest.len();
        let head_end = find(body, b"\r\n\r\n", start)?;
        let head = std::str::from_utf8(body.get(start..head_end)?).ok()?;
        let data_start = head_end + 4;
        let mut closing = b"\r\n".to_vec();
        closing.extend_from_slice(delimiter);
        let data_end = find(body, &closing, data_start)?;
        let (name, filename) = disposition(head)?;
        parts.push(Part {
            name,
            filename,
            data: body.get(data_start..data_end)?,
        });
        at = data_end + closing.len();
    }
}

/// The `name` and `filename` of a part's `Content-Disposition: form-data`.
fn disposition(head: &str) -> Option<(String, Option<String>)> {
    let line = head.lines().find(|line| {
        line.to_ascii_lowercase()
            .starts_with("content-disposition:")
    })?;
    let (_, params) = media_type(line.split_once(':')?.1);
    let get = |wanted: &str| {
        params
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.clone())
    };
    Some((get("name")?, get("filename")))
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|window| window == needle)
        .map(|position| position + from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_with_json_fields_parsed() {
        let args = decode(
            Some("application/x-www-form-urlencoded"),
            "",
            b"channel=C1&text=a+b%20c&blocks=%5B%7B%22type%22%3A%22divider%22%7D%5D&token=xoxb-1",
        )
        .unwrap();
        assert_eq!(args.text("text").as_deref(), Some("a b c"));
        assert_eq!(args.map["blocks"], json!([{"type": "divider"}]));
        assert_eq!(args.token.as_deref(), Some("xoxb-1"));
        assert!(args.warnings.is_empty());
    }

    #[test]
    fn json_bodies_merge_over_the_query_and_ignore_a_body_token() {
        let args = decode(
            Some("application/json"),
            "limit=5&channel=C0",
            br#"{"channel":"C1","ts":1700000000.5,"token":"xoxb-body"}"#,
        )
        .unwrap();
        assert_eq!(args.text("channel").as_deref(), Some("C1"));
        assert_eq!(args.text("limit").as_deref(), Some("5"));
        assert_eq!(args.text("ts").as_deref(), Some("1700000000.5"));
        assert_eq!(args.token, None);
        assert_eq!(args.warnings, ["missing_charset"]);
    }

    #[test]
    fn unreadable_bodies_get_slacks_codes() {
        let cases: &[(Option<&str>, &[u8], &str)] = &[
            (None, b"a=1", "missing_post_type"),
            (Some("text/csv"), b"a,b", "invalid_post_type"),
            (
                Some("application/json; charset=utf-8"),
                b"{nope",
                "invalid_json",
            ),
            (
                Some("application/json; charset=utf-8"),
                b"[1]",
                "json_not_object",
            ),
            (
                Some("application/json; charset=latin-9"),
                b"{}",
                "invalid_charset",
            ),
            (
                Some("application/x-www-form-urlencoded"),
                b"a=%FF",
                "invalid_form_data",
            ),
            (
                Some("application/x-www-form-urlencoded"),
                b"a=\xff",
                "invalid_form_data",
            ),
            (Some("multipart/form-data"), b"--x\r\n", "invalid_form_data"),
            (
                Some("multipart/form-data; boundary=x"),
                b"garbage",
                "invalid_form_data",
            ),
        ];
        for (content_type, body, code) in cases {
            assert_eq!(
                decode(*content_type, "", body).unwrap_err(),
                *code,
                "{body:?}"
            );
        }
    }

    #[test]
    fn multipart_fields_and_files() {
        let body = b"--XyZ\r\nContent-Disposition: form-data; name=\"channel\"\r\n\r\nC1\r\n--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XyZ--\r\n";
        let args = decode(Some("multipart/form-data; boundary=XyZ"), "", body).unwrap();
        assert_eq!(args.text("channel").as_deref(), Some("C1"));
        assert_eq!(args.map["file"], json!({"filename": "a.txt", "length": 5}));
    }

    #[test]
    fn form_components_round_trip() {
        let text = "{\"a\": \"x&y=z+ü\"}";
        let pairs = form_pairs(&format!("payload={}", form_encode(text))).unwrap();
        assert_eq!(pairs, [("payload".to_owned(), text.to_owned())]);
    }
}
