//! The one rule for text that reaches a log line: characters that could end
//! the line, move the cursor or drive the terminal are written as escapes.
//!
//! Logged values come from outside (a JSON-RPC id, a tool name, a header, a
//! path segment). Written as they are, a newline in one starts what looks
//! like a new log line of any level, and an ESC sequence recolours or
//! rewrites the operator's terminal. Both sinks, stderr and the ring behind
//! `GET /v1/logs`, format every message and every field through [`Escaped`].

use std::fmt::{self, Write};

/// True for a character that must not reach a log line as it is: the C0
/// controls (newline, carriage return, tab, ESC, ...), DEL and the C1
/// controls (all of Unicode's `Cc`), the Unicode line and paragraph
/// separators, which some viewers break lines at, and the bidirectional
/// embedding, override and isolate marks, which reorder what a reader sees.
pub(crate) fn is_unsafe(ch: char) -> bool {
    ch.is_control()
        || matches!(
            ch,
            '\u{2028}'
                | '\u{2029}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// A [`fmt::Write`] adapter that passes text through, writing each unsafe
/// character ([`is_unsafe`]) as an escape: `\n`, `\r`, `\t`, or `\u{..}`
/// with its hexadecimal code point (the form Rust's `Debug` uses).
pub(crate) struct Escaped<W>(pub(crate) W);

impl<W: Write> Write for Escaped<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut start = 0;
        for (i, ch) in s.char_indices() {
            if !is_unsafe(ch) {
                continue;
            }
            self.0.write_str(&s[start..i])?;
            match ch {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                other => write!(self.0, "\\u{{{:x}}}", u32::from(other))?,
            }
            start = i + ch.len_utf8();
        }
        self.0.write_str(&s[start..])
    }
}

/// `value` with its unsafe characters escaped.
#[cfg(test)]
pub(crate) fn escape(value: &str) -> String {
    let mut out = String::new();
    let _ = Escaped(&mut out).write_str(value);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_and_terminal_controls_are_escaped() {
        for (raw, shown) in [
            ("plain text, ünïcode ✓", "plain text, ünïcode ✓"),
            (
                "a\n2026-01-01T00:00:00Z ERROR forged",
                "a\\n2026-01-01T00:00:00Z ERROR forged",
            ),
            ("cr\rlf\r\n", "cr\\rlf\\r\\n"),
            ("tab\there", "tab\\there"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            ("nul\0bel\u{7}", "nul\\u{0}bel\\u{7}"),
            ("del\u{7f}", "del\\u{7f}"),
            ("c1 csi\u{9b}2J nel\u{85}", "c1 csi\\u{9b}2J nel\\u{85}"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("rlo\u{202e}txt.exe", "rlo\\u{202e}txt.exe"),
            ("isolate\u{2066}x\u{2069}", "isolate\\u{2066}x\\u{2069}"),
            // A backslash is kept: escaping stops new lines, not look-alikes.
            ("C:\\path", "C:\\path"),
        ] {
            assert_eq!(escape(raw), shown, "{raw:?}");
        }
    }

    #[test]
    fn no_escaped_output_holds_an_unsafe_character() {
        let every: String = (0u32..0x3000).filter_map(char::from_u32).collect();
        let out = escape(&every);
        assert!(!out.chars().any(is_unsafe), "{out:?}");
        assert!(!out.contains('\n'));
    }
}
