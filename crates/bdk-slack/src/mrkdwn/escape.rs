//! Slack's escaping, and the spans of the model's text that must reach Slack
//! as written.
//!
//! Two kinds of span are taken out of the Markdown before it is parsed and
//! put back afterwards ([`protect`], [`Protected::expand`]):
//!
//! - Slack tokens the model already wrote in Slack's own form (`<@U123>`,
//!   `<#C123|general>`, `<!here>`, `<https://x|label>`). A CommonMark parser
//!   would read `<!here>` as HTML and `<https://x|y>` as a link to
//!   `https://x|y`; Slack needs them byte for byte.
//! - Bare URLs (`https://x.com/a_*b*_c`). GitHub's Markdown links them
//!   before looking for emphasis; plain CommonMark would turn the `*b*` into
//!   italics and break the URL.
//!
//! A span is replaced by a placeholder of private-use characters
//! (U+E000, its index, U+E001), which CommonMark treats like a word: it
//! opens and closes no emphasis, starts no block and is not split across
//! text events. The input's own U+E000 and U+E001 are dropped first.

/// Opens a placeholder.
const OPEN: char = '\u{E000}';
/// Closes a placeholder.
const CLOSE: char = '\u{E001}';

/// A token is at most this long (a long signed URL fits; a runaway `<`
/// with a `>` much later on the line is not a token).
const MAX_TOKEN: usize = 4_000;

/// URL schemes Slack links; a Markdown link to anything else (a relative
/// path, `javascript:`) keeps only its text.
const SCHEMES: &[&str] = &["http", "https", "mailto", "tel", "ftp", "slack"];

/// `&`, `<` and `>` as the HTML entities Slack requires in text: it reads
/// these three as control characters, and nothing else needs escaping.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        push_escaped(&mut out, c);
    }
    out
}

/// Appends `c`, escaped.
pub(super) fn push_escaped(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        c => out.push(c),
    }
}

/// How a protected span, and the text around it, comes back out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Running text: escaped, tokens as written, bare URLs escaped (Slack
    /// links them itself).
    Text,
    /// Code: everything escaped, tokens included (inside code Slack would
    /// not resolve them anyway, and the reader should see what was written).
    Code,
    /// Unescaped original text: for a link's target and for labels escaped
    /// later.
    Plain,
}

/// The spans taken out of a document.
#[derive(Debug, Default)]
pub(super) struct Protected {
    spans: Vec<Span>,
}

#[derive(Debug)]
struct Span {
    /// A Slack token (kept as written in text) rather than a bare URL.
    token: bool,
    text: String,
}

/// The Markdown with CRLF and lone CR as LF, the private-use characters the
/// placeholders use dropped, and each Slack token and bare URL replaced by a
/// placeholder.
pub(super) fn protect(markdown: &str) -> (String, Protected) {
    let chars = normalize(markdown);
    let mut out = String::with_capacity(markdown.len());
    let mut protected = Protected::default();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let found = if c == '<' {
            token_end(&chars, i).map(|end| (end, true))
        } else if starts_url(&chars, i) {
            url_end(&chars, i).map(|end| (end, false))
        } else {
            None
        };
        match found {
            Some((end, token)) => {
                let text: String = chars.get(i..end).unwrap_or_default().iter().collect();
                out.push(OPEN);
                out.push_str(&protected.spans.len().to_string());
                out.push(CLOSE);
                protected.spans.push(Span { token, text });
                i = end;
            }
            None => {
                out.push(c);
                i += 1;
            }
        }
    }
    (out, protected)
}

impl Protected {
    /// `text` (from the protected document) with its placeholders put back,
    /// escaped as `mode` says.
    pub(super) fn expand(&self, text: &str, mode: Mode) -> String {
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != OPEN {
                match mode {
                    Mode::Plain => out.push(c),
                    Mode::Text | Mode::Code => push_escaped(&mut out, c),
                }
                continue;
            }
            let index: String = chars.by_ref().take_while(|&c| c != CLOSE).collect();
            let Some(span) = index.parse::<usize>().ok().and_then(|i| self.spans.get(i)) else {
                continue;
            };
            match mode {
                Mode::Plain => out.push_str(&span.text),
                Mode::Text if span.token => out.push_str(&span.text),
                Mode::Text | Mode::Code => out.push_str(&escape(&span.text)),
            }
        }
        out
    }
}

/// The input as chars, line endings normalized, placeholder characters
/// dropped.
fn normalize(markdown: &str) -> Vec<char> {
    let mut chars = Vec::with_capacity(markdown.len());
    let mut input = markdown.chars().peekable();
    while let Some(c) = input.next() {
        match c {
            OPEN | CLOSE => {}
            '\r' => {
                if input.peek() == Some(&'\n') {
                    input.next();
                }
                chars.push('\n');
            }
            c => chars.push(c),
        }
    }
    chars
}

/// Where the Slack token starting with the `<` at `start` ends (one past its
/// `>`), if it is one: `<@U123>`, `<#C123>`, `<!here>`, `<!subteam^S1>`,
/// each with an optional `|label`, or `<https://x|label>`. A URL in angle
/// brackets without a label is a CommonMark autolink, left to the parser.
fn token_end(chars: &[char], start: usize) -> Option<usize> {
    let mut end = start + 1;
    loop {
        match chars.get(end) {
            Some('>') => break,
            None | Some('<' | '\n' | '`') => return None,
            Some(_) if end - start > MAX_TOKEN => return None,
            Some(_) => end += 1,
        }
    }
    let inner: String = chars.get(start + 1..end)?.iter().collect();
    let (target, label) = match inner.split_once('|') {
        Some((target, label)) => (target, Some(label)),
        None => (inner.as_str(), None),
    };
    if target.is_empty() || target.chars().any(char::is_whitespace) {
        return None;
    }
    let is_token = match target.chars().next() {
        Some('@' | '#') => target.len() > 1,
        Some('!') => target.len() > 1 && !target.starts_with("!--"),
        _ => label.is_some() && linkable(target),
    };
    is_token.then_some(end + 1)
}

/// True when Slack links `url`: a scheme it knows and something after it.
pub(super) fn linkable(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once(':') else {
        return false;
    };
    !rest.is_empty() && SCHEMES.iter().any(|s| s.eq_ignore_ascii_case(scheme))
}

/// True when a bare `http://` or `https://` URL starts at `i`: not inside a
/// word and not right after a `<` (an autolink, the parser's).
fn starts_url(chars: &[char], i: usize) -> bool {
    let before = i.checked_sub(1).and_then(|b| chars.get(b));
    if before.is_some_and(|&b| b.is_alphanumeric() || b == '<') {
        return false;
    }
    let rest = chars.get(i..).unwrap_or_default();
    starts_with_ignore_case(rest, "http://") || starts_with_ignore_case(rest, "https://")
}

fn starts_with_ignore_case(chars: &[char], prefix: &str) -> bool {
    chars.len() >= prefix.len()
        && chars
            .iter()
            .zip(prefix.chars())
            .all(|(c, p)| c.eq_ignore_ascii_case(&p))
}

/// Where the bare URL starting at `start` ends, GitHub's way: at
/// whitespace or a character that cannot be in it here, then without
/// trailing punctuation and without a `)` that closes nothing inside it.
/// `None` when nothing follows the scheme.
fn url_end(chars: &[char], start: usize) -> Option<usize> {
    let mut end = start;
    while let Some(&c) = chars.get(end) {
        if c.is_whitespace() || matches!(c, '<' | '>' | '`' | '"' | '[' | ']' | '|') {
            break;
        }
        end += 1;
    }
    let url = chars.get(start..end).unwrap_or_default();
    let open_parens = url.iter().filter(|&&c| c == '(').count();
    let mut close_parens = url.iter().filter(|&&c| c == ')').count();
    while end > start {
        let Some(&last) = chars.get(end - 1) else {
            break;
        };
        if matches!(
            last,
            '?' | '!' | '.' | ',' | ':' | ';' | '*' | '_' | '~' | '\''
        ) {
            end -= 1;
        } else if last == ')' && close_parens > open_parens {
            close_parens -= 1;
            end -= 1;
        } else {
            break;
        }
    }
    let body = chars.get(start..end).unwrap_or_default();
    let scheme = body.iter().position(|&c| c == ':').unwrap_or(0) + 3;
    (end > start + scheme).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protected spans of `markdown`, in order.
    fn spans(markdown: &str) -> Vec<(bool, String)> {
        let (_, protected) = protect(markdown);
        protected
            .spans
            .into_iter()
            .map(|s| (s.token, s.text))
            .collect()
    }

    #[test]
    fn slack_tokens_are_protected() {
        for token in [
            "<@U123>",
            "<@U123|ann>",
            "<#C123>",
            "<#C123|general>",
            "<!here>",
            "<!channel>",
            "<!subteam^S123|@team>",
            "<!date^1392734382^{date_short}|Feb 18>",
            "<https://x.com|the docs>",
            "<mailto:a@b.c|mail me>",
        ] {
            assert_eq!(
                spans(&format!("a {token} b")),
                [(true, token.to_owned())],
                "{token}"
            );
        }
    }

    #[test]
    fn look_alikes_are_not_tokens() {
        for text in [
            "<https://x.com>",
            "<std::io::Error|x>",
            "<@>",
            "<@ U1>",
            "<!-- c -->",
            "<!--c-->",
            "Vec<String>",
            "a < b > c",
            "<@U1\n>",
            "<@U1`>",
        ] {
            assert_eq!(spans(text), [], "{text}");
        }
    }

    #[test]
    fn bare_urls_end_the_way_github_ends_them() {
        let check = |text: &str, url: &str| {
            assert_eq!(spans(text), [(false, url.to_owned())], "{text}");
        };
        check("see https://x.com/a_b_c.", "https://x.com/a_b_c");
        check(
            "(https://en.wikipedia.org/wiki/A_(b))",
            "https://en.wikipedia.org/wiki/A_(b)",
        );
        check("**https://x.com/*y*/z**", "https://x.com/*y*/z");
        check("HTTPS://X.COM/p?q=1&r=2, then", "HTTPS://X.COM/p?q=1&r=2");
        check("| https://x.io |", "https://x.io");
        assert_eq!(
            spans("[https://a.io](https://b.io)"),
            [
                (false, "https://a.io".to_owned()),
                (false, "https://b.io".to_owned())
            ]
        );
        assert_eq!(spans("xhttps://x.com"), []);
        assert_eq!(spans("https:// nothing"), []);
        assert_eq!(spans("<https://x.com/a_b>"), []);
    }

    #[test]
    fn expand_puts_spans_back_escaped_per_mode() {
        let (text, protected) = protect("a&<@U1> https://x.io/?a=1&b=2 \u{E000}7\u{E001}");
        assert!(!text.contains('@'));
        assert_eq!(
            protected.expand(&text, Mode::Text),
            "a&amp;<@U1> https://x.io/?a=1&amp;b=2 7"
        );
        assert_eq!(
            protected.expand(&text, Mode::Code),
            "a&amp;&lt;@U1&gt; https://x.io/?a=1&amp;b=2 7"
        );
        assert_eq!(
            protected.expand(&text, Mode::Plain),
            "a&<@U1> https://x.io/?a=1&b=2 7"
        );
    }

    #[test]
    fn line_endings_are_normalized() {
        assert_eq!(protect("a\r\nb\rc\n").0, "a\nb\nc\n");
    }

    #[test]
    fn escape_escapes_the_three_control_characters() {
        assert_eq!(
            escape("a & b < c > d \"'*_"),
            "a &amp; b &lt; c &gt; d \"'*_"
        );
    }
}
