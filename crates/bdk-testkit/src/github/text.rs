//! Text formats the fake produces or reads: unified diffs and their line
//! numbers, the contents API's wrapped base64, git blob ids, timestamps
//! and query strings.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, SecondsFormat, Utc};

/// The line numbers a patch shows on one side: the new file's (context and
/// added lines) or, with `left`, the old file's (context and removed).
pub(super) fn diff_lines(patch: &str, left: bool) -> Vec<u64> {
    let mut lines = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("@@ ") {
            // "@@ -a,b +c,d @@"
            let mut ranges = header.split_whitespace();
            let start = |range: Option<&str>, sign: char| {
                range
                    .and_then(|range| range.strip_prefix(sign))
                    .and_then(|range| range.split(',').next())
                    .and_then(|start| start.parse::<u64>().ok())
                    .unwrap_or(1)
            };
            old = start(ranges.next(), '-');
            new = start(ranges.next(), '+');
            continue;
        }
        match line.chars().next() {
            Some('+') => {
                if !left {
                    lines.push(new);
                }
                new += 1;
            }
            Some('-') => {
                if left {
                    lines.push(old);
                }
                old += 1;
            }
            Some('\\') => {}
            _ => {
                lines.push(if left { old } else { new });
                old += 1;
                new += 1;
            }
        }
    }
    lines
}

/// Added and removed lines of a patch.
pub(super) fn count_changes(patch: &str) -> (usize, usize) {
    patch
        .lines()
        .filter(|line| !line.starts_with("@@"))
        .fold((0, 0), |(added, removed), line| match line.chars().next() {
            Some('+') => (added + 1, removed),
            Some('-') => (added, removed + 1),
            _ => (added, removed),
        })
}

/// Base64 with a newline every 60 characters and at the end, as the
/// contents API encodes files.
pub(super) fn wrapped_base64(bytes: &[u8]) -> String {
    let encoded = STANDARD.encode(bytes);
    let mut wrapped = String::with_capacity(encoded.len() + encoded.len() / 60 + 1);
    for chunk in encoded.as_bytes().chunks(60) {
        wrapped.push_str(&String::from_utf8_lossy(chunk));
        wrapped.push('\n');
    }
    wrapped
}

pub(super) fn sha1_hex(bytes: &[u8]) -> String {
    hex_string(ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, bytes).as_ref())
}

pub(super) fn hex_string(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

pub(super) fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `a=1&b=x%20y` as decoded pairs (`+` is a space, as in forms).
pub(super) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                percent_decode(&key.replace('+', " ")),
                percent_decode(&value.replace('+', " ")),
            )
        })
        .collect()
}

pub(super) fn percent_decode(text: &str) -> String {
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
        out.push(bytes[index]);
        index += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

pub(super) fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b'/') {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_lines_follow_the_hunk_headers() {
        let patch = "@@ -1,3 +1,4 @@\n line one\n-line two\n+line 2\n+line 2b\n line three";
        assert_eq!(diff_lines(patch, false), vec![1, 2, 3, 4]);
        assert_eq!(diff_lines(patch, true), vec![1, 2, 3]);
        let later = "@@ -10,2 +12,2 @@ fn main() {\n context\n+added";
        assert_eq!(diff_lines(later, false), vec![12, 13]);
        assert_eq!(count_changes(patch), (2, 1));
    }

    #[test]
    fn base64_is_wrapped_like_github() {
        let wrapped = wrapped_base64(&[b'a'; 100]);
        let lines: Vec<&str> = wrapped.lines().collect();
        assert_eq!(lines[0].len(), 60);
        assert!(wrapped.ends_with('\n'));
        let joined: String = lines.concat();
        assert_eq!(STANDARD.decode(joined).unwrap(), vec![b'a'; 100]);
    }

    #[test]
    fn queries_decode() {
        assert_eq!(
            query_pairs("ref=feature%2Fx&per_page=2&q=a+b"),
            vec![
                ("ref".into(), "feature/x".into()),
                ("per_page".into(), "2".into()),
                ("q".into(), "a b".into())
            ]
        );
        assert_eq!(percent_decode("%zz%41"), "%zzA");
    }
}
