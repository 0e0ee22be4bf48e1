//! The model's Markdown as Slack's `mrkdwn`, and `mrkdwn` cut at Slack's
//! size limits.
//!
//! Models write CommonMark with GitHub's additions; Slack reads its own
//! `mrkdwn` (<https://api.slack.com/reference/surfaces/formatting>):
//! `*bold*`, `_italic_`, `~strike~`, `<url|label>`, no headings, no
//! tables, and `&`, `<`, `>` escaped as entities. [`to_mrkdwn`] parses the
//! Markdown with pulldown-cmark, so emphasis follows CommonMark's rules
//! (`snake_case_name` and `2 * 3 * 4` stay text), and renders what Slack
//! can show. [`split`] cuts the result into messages.
//!
//! Inside: `escape` (escaping, and the spans kept as written), `tree`
//! (parser events folded into a tree), `render` (the tree as lines) and
//! `cut` (the cutting). None imports this module.

mod cut;
mod escape;
mod render;
mod tree;

pub use escape::escape;

/// The most characters the pack puts in one message's `text`. Slack
/// truncates `text` beyond 40,000 characters and recommends staying under
/// 4,000; this leaves room for the fences [`split`] adds.
pub const TEXT_LIMIT: usize = 3_900;

/// The most characters of a section block's text (Block Kit's limit).
pub const SECTION_LIMIT: usize = 3_000;

/// The model's Markdown (CommonMark with GitHub's tables, strikethrough and
/// task lists) as Slack `mrkdwn`.
///
/// - `**b**`, `__b__` -> `*b*`; `*i*`, `_i_` -> `_i_`; `~~s~~` -> `~s~`;
///   `***b***` -> `*_b_*`. Emphasis inside a word stays as written (Slack
///   formats whole words only); emphasis over several lines is closed and
///   reopened on each.
/// - `[text](url)` and `![alt](url)` -> `<url|text>`; `<https://...>` and
///   bare URLs stay links. A link Slack cannot follow (a relative path)
///   keeps only its text.
/// - Headings -> a bold line; lists -> `•`/`◦`/`▪` bullets (ordered lists
///   keep their numbers), four spaces per level; `> quotes` stay (one
///   level, Slack has no more); rules -> `———`; task items -> `☐`/`☑`.
/// - Code spans and blocks stay code, their text untouched but for the
///   escaping; a fence's language tag is dropped. Tables become code blocks
///   with aligned columns.
/// - `&`, `<`, `>` are escaped everywhere, code included, except in the
///   links this makes and in Slack tokens the model already wrote
///   (`<@U123>`, `<#C123>`, `<!here>`, `<https://x|label>`), kept as
///   written.
///
/// Blank lines between blocks follow the source. CRLF becomes LF; U+E000
/// and U+E001 (private use) are dropped. A document nested deeper than any
/// message needs is sent as escaped text rather than parsed.
pub fn to_mrkdwn(markdown: &str) -> String {
    let (source, protected) = escape::protect(markdown);
    let Some(nodes) = tree::parse(&source) else {
        return protected.expand(source.trim(), escape::Mode::Text);
    };
    let renderer = render::Renderer {
        source: &source,
        protected: &protected,
    };
    let lines = renderer.blocks(&nodes, render::Nest::default());
    let texts: Vec<&str> = lines.iter().map(|line| line.text.as_str()).collect();
    let first = texts
        .iter()
        .position(|t| !t.trim().is_empty())
        .unwrap_or(texts.len());
    let last = texts
        .iter()
        .rposition(|t| !t.trim().is_empty())
        .map_or(first, |i| i + 1);
    texts.get(first..last).unwrap_or_default().join("\n")
}

/// `mrkdwn` cut into parts of at most `limit` characters (chars, not bytes;
/// a `limit` of 0 counts as 1).
///
/// A cut falls at a blank line if one is in the second half of the room,
/// else at a line end, a space, or mid-word, in that order (then the same
/// in the first half); never inside a `<...>` link or mention, an `&...;`
/// entity or a ```` ``` ```` fence, unless a token is longer than the room.
/// A part cut inside a code block ends with a closing fence and the next
/// one starts by reopening it, both within the limit (when `limit` is at
/// least 9, room for both fences and a character).
///
/// The whitespace at each cut, and at the start and end of the input, is
/// dropped (the line after a cut keeps its indentation); nothing else is.
/// No part is empty or only whitespace.
pub fn split(mrkdwn: &str, limit: usize) -> Vec<String> {
    let chars: Vec<char> = mrkdwn.chars().collect();
    cut::pieces(&chars, limit)
        .iter()
        .map(|piece| piece.render(&chars))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(markdown: &str, expected: &str) {
        assert_eq!(to_mrkdwn(markdown), expected, "markdown: {markdown:?}");
    }

    /// Each `(markdown, mrkdwn)` pair.
    #[track_caller]
    fn check_all(cases: &[(&str, &str)]) {
        for (markdown, expected) in cases {
            check(markdown, expected);
        }
    }

    #[test]
    fn emphasis() {
        check_all(&[
            ("**bold**", "*bold*"),
            ("__bold__", "*bold*"),
            ("*italic*", "_italic_"),
            ("_italic_", "_italic_"),
            ("~~strike~~", "~strike~"),
            ("~strike~", "~strike~"),
            ("***both***", "*_both_*"),
            ("___both___", "*_both_*"),
            ("**_both_**", "*_both_*"),
            ("*a **b** c*", "_a *b* c_"),
            ("**a *b* c**", "*a _b_ c*"),
            ("**a **b** c**", "*a b c*"),
            ("a **b** c, *d*.", "a *b* c, _d_."),
            (
                "**bold** and ~~gone~~ and `code`",
                "*bold* and ~gone~ and `code`",
            ),
            // Slack formats no part of a line break or a word.
            ("**two\nlines**", "*two*\n*lines*"),
            ("*a  \nb*", "_a_\n_b_"),
            ("foo**bar**baz", "foo**bar**baz"),
            ("un*frigging*believable", "un*frigging*believable"),
        ]);
    }

    #[test]
    fn text_that_only_looks_like_emphasis_stays() {
        check_all(&[
            ("snake_case_name", "snake_case_name"),
            (
                "call `snake_case_name` or snake_case_name",
                "call `snake_case_name` or snake_case_name",
            ),
            ("2 * 3 * 4 = 24", "2 * 3 * 4 = 24"),
            ("2*3*4 = 24", "2*3*4 = 24"),
            ("a * b", "a * b"),
            ("**unclosed", "**unclosed"),
            ("*unclosed", "*unclosed"),
            ("_unclosed", "_unclosed"),
            ("~~unclosed", "~~unclosed"),
            ("closed**", "closed**"),
            ("* not a list*", "• not a list*"),
            // CommonMark (and GitHub) read this as strong emphasis.
            ("__init__.py", "*init*.py"),
            ("5 ** 2", "5 ** 2"),
            ("**", "**"),
        ]);
    }

    #[test]
    fn links_and_images() {
        check_all(&[
            ("[text](https://x.com)", "<https://x.com|text>"),
            (
                "[the docs](https://x.com/a_b_c)",
                "<https://x.com/a_b_c|the docs>",
            ),
            ("[x](https://x.com/*a*/b)", "<https://x.com/*a*/b|x>"),
            (
                "[x](https://x.com/?a=1&b=2)",
                "<https://x.com/?a=1&amp;b=2|x>",
            ),
            ("[a | b](https://x.com/a|b)", "<https://x.com/a%7Cb|a | b>"),
            ("[a <b>](https://x.com)", "<https://x.com|a &lt;b&gt;>"),
            (
                "[`code` label](https://x.com)",
                "<https://x.com|code label>",
            ),
            ("[https://x.com](https://x.com)", "<https://x.com>"),
            ("[](https://x.com)", "<https://x.com>"),
            ("<https://x.com/a_b_c>", "<https://x.com/a_b_c>"),
            ("<http://x.com?a&b>", "<http://x.com?a&amp;b>"),
            ("<me@x.com>", "<mailto:me@x.com>"),
            ("![alt](https://x.com/i.png)", "<https://x.com/i.png|alt>"),
            ("![](https://x.com/i.png)", "<https://x.com/i.png>"),
            ("![alt](./i.png)", "alt"),
            ("[relative](./docs/a.md)", "relative"),
            ("[anchor](#usage)", "anchor"),
            (
                "[**bold label**](https://x.com)",
                "*<https://x.com|bold label>*",
            ),
            ("[*it*](https://x.com)", "_<https://x.com|it>_"),
            ("[ref][1]\n\n[1]: https://x.com/r", "<https://x.com/r|ref>"),
            ("[x](javascript:alert(1))", "x"),
            ("<std::io::Error>", "&lt;std::io::Error&gt;"),
        ]);
    }

    #[test]
    fn bare_urls_are_not_formatted() {
        check_all(&[
            ("see https://x.com/a_b_c_d", "see https://x.com/a_b_c_d"),
            ("https://x.com/*a*/b", "https://x.com/*a*/b"),
            ("https://x.com/__init__/", "https://x.com/__init__/"),
            ("(https://x.com/a_b)", "(https://x.com/a_b)"),
            ("https://x.com/?a=1&b=2.", "https://x.com/?a=1&amp;b=2."),
            ("**https://x.com/a_b**", "*https://x.com/a_b*"),
            ("`https://x.com/<a>`", "`https://x.com/&lt;a&gt;`"),
        ]);
    }

    #[test]
    fn emphasis_around_links() {
        check_all(&[
            ("**see [docs](https://d.io)**", "*see <https://d.io|docs>*"),
            ("*a [b](https://c.io) d*", "_a <https://c.io|b> d_"),
            ("**[docs](https://d.io) now**", "*<https://d.io|docs> now*"),
            ("_see <https://d.io/a_b>_", "_see <https://d.io/a_b>_"),
        ]);
    }

    #[test]
    fn headings() {
        check_all(&[
            ("# Title", "*Title*"),
            ("## Title ##", "*Title*"),
            ("###### Six", "*Six*"),
            ("####### Seven", "####### Seven"),
            ("### A **b** c", "*A b c*"),
            ("# **Bold**", "*Bold*"),
            ("# A _b_ `c`", "*A _b_ `c`*"),
            ("# See [docs](https://d.io)", "*See <https://d.io|docs>*"),
            ("Title\n=====\n\ntext", "*Title*\n\ntext"),
            ("# Title\ntext", "*Title*\ntext"),
            ("#", ""),
            ("#hashtag", "#hashtag"),
        ]);
    }

    #[test]
    fn lists() {
        check_all(&[
            ("- a\n- b", "• a\n• b"),
            ("* a\n* b", "• a\n• b"),
            ("+ a\n+ b", "• a\n• b"),
            (
                "- a\n  - b\n    - c\n      - d",
                "• a\n    ◦ b\n        ▪ c\n            ▪ d",
            ),
            ("1. one\n2. two", "1. one\n2. two"),
            ("1. one\n1. two\n1. three", "1. one\n2. two\n3. three"),
            ("3. three\n4. four", "3. three\n4. four"),
            ("1. a\n   - b\n2. c", "1. a\n    ◦ b\n2. c"),
            ("- a\n\n- b", "• a\n\n• b"),
            ("- a\n\n  more a\n- b", "• a\n\n    more a\n• b"),
            ("- a\n  lazy", "• a\n    lazy"),
            ("* item with *italic*", "• item with _italic_"),
            ("*italic* text", "_italic_ text"),
            ("* a\n\n*b*", "• a\n\n_b_"),
            // A lazy continuation line belongs to the item.
            ("* a\n*b*", "• a\n    _b_"),
            ("- [ ] todo\n- [x] done", "• ☐ todo\n• ☑ done"),
            ("Intro:\n- a\n- b\n\nAfter.", "Intro:\n• a\n• b\n\nAfter."),
            ("- **Key**: value", "• *Key*: value"),
        ]);
    }

    #[test]
    fn code_inside_lists_is_not_indented() {
        check(
            "- a\n\n  ```sh\n  ls *.rs\n  ```\n- b",
            "• a\n\n```\nls *.rs\n```\n• b",
        );
        check("1. ```\n   x\n   ```", "1.\n```\nx\n```");
    }

    #[test]
    fn quotes() {
        check_all(&[
            ("> quote", "> quote"),
            ("> a\n> b", "> a\n> b"),
            ("> a\nlazy", "> a\n> lazy"),
            ("> a\n>\n> b", "> a\n>\n> b"),
            ("> **a** & b", "> *a* &amp; b"),
            ("> outer\n> > inner", "> outer\n> inner"),
            ("> - a\n> - b", "> • a\n> • b"),
            ("> ```\n> x\n> ```", "> ```\n> x\n> ```"),
            ("text\n\n> q\n\nmore", "text\n\n> q\n\nmore"),
        ]);
    }

    #[test]
    fn code_is_kept_but_escaped() {
        check_all(&[
            ("`a*b*c`", "`a*b*c`"),
            ("`**not bold**`", "`**not bold**`"),
            ("`a < b && c > d`", "`a &lt; b &amp;&amp; c &gt; d`"),
            ("`<@U123>`", "`&lt;@U123&gt;`"),
            ("``a ` b``", "`a ` b`"),
            (
                "```rust\nfn main() { let x = a**b; }\n```",
                "```\nfn main() { let x = a**b; }\n```",
            ),
            (
                "```\n<!here> & <https://x|y> [a](b) *c*\n```",
                "```\n&lt;!here&gt; &amp; &lt;https://x|y&gt; [a](b) *c*\n```",
            ),
            (
                "```\n    indented\n\n  two\n```",
                "```\n    indented\n\n  two\n```",
            ),
            ("    indented code\n    *x*", "```\nindented code\n*x*\n```"),
            ("```\nunclosed **x**", "```\nunclosed **x**\n```"),
            ("~~~python\nx = 1\n~~~", "```\nx = 1\n```"),
            ("```\n```", ""),
            ("text\n```\ncode\n```\nmore", "text\n```\ncode\n```\nmore"),
        ]);
    }

    #[test]
    fn escaping_and_slack_tokens() {
        check_all(&[
            ("a & b < c > d", "a &amp; b &lt; c &gt; d"),
            ("AT&T", "AT&amp;T"),
            ("&amp; &lt; &copy;", "&amp; &lt; ©"),
            ("a \\< b \\*c\\*", "a &lt; b *c*"),
            ("Vec<String>", "Vec&lt;String&gt;"),
            ("x -> y => z", "x -&gt; y =&gt; z"),
            (
                "hi <@U123> and <#C456> <!here> <!channel> <https://x|y>",
                "hi <@U123> and <#C456> <!here> <!channel> <https://x|y>",
            ),
            ("<!here> please look", "<!here> please look"),
            ("**<@U123>** did it", "*<@U123>* did it"),
            (
                "<@U1|ann>, <#C1|general>, <!subteam^S1|@t>",
                "<@U1|ann>, <#C1|general>, <!subteam^S1|@t>",
            ),
            (
                "<https://x.com/a_b|a *label*>",
                "<https://x.com/a_b|a *label*>",
            ),
            ("a<br>b", "a\nb"),
            ("a <!-- hidden --> b", "a  b"),
            ("<!-- hidden -->\n\ntext", "text"),
            ("<div>x</div>", "&lt;div&gt;x&lt;/div&gt;"),
            ("a \u{E000}0\u{E001} b", "a 0 b"),
        ]);
    }

    #[test]
    fn tables_become_aligned_code() {
        check(
            "| Name | Qty |\n|------|----:|\n| apple | 3 |\n| kiwi | 12 |",
            "```\nName  | Qty\n------+----\napple |   3\nkiwi  |  12\n```",
        );
        check(
            "a\n\n| **x** | [l](https://l.io) | `c<d>` |\n|:-:|---|---|\n| yy | | z & w |\n\nb",
            "a\n\n```\nx  | l | c&lt;d&gt;\n---+---+------\nyy |   | z &amp; w\n```\n\nb",
        );
        check("| a |\n|---|\n| <@U1> |", "```\na\n-----\n&lt;@U1&gt;\n```");
    }

    #[test]
    fn blocks_and_spacing() {
        check_all(&[
            ("", ""),
            ("  \n\n ", ""),
            ("one\ntwo", "one\ntwo"),
            ("one\n\n\n\ntwo", "one\n\ntwo"),
            ("a\n\n---\n\nb", "a\n\n———\n\nb"),
            ("***", "———"),
            ("___", "———"),
            ("text\n---", "*text*"),
            ("trailing spaces   \nnext", "trailing spaces\nnext"),
        ]);
    }

    #[test]
    fn crlf_input() {
        check("**a**\r\n\r\n- b\r\n- c\r\n", "*a*\n\n• b\n• c");
        check("```\r\ncode\r\n```\r\n", "```\ncode\n```");
        check("one\rtwo", "one\ntwo");
    }

    #[test]
    fn a_typical_answer() {
        let markdown = "## Summary\n\nThe build fails in `parse_args` because **`--jobs`** is read as a \
                        string. See [the log](https://ci.example.com/run/12?tab=log&line=40).\n\n\
                        ### Fix\n\n1. Parse it as `usize`:\n   ```rust\n   let jobs: usize = s.parse()?;\n   ```\n\
                        2. Add a test for `--jobs 0`.\n\n> Note: `2 * 3` jobs run at most.\n";
        let expected = "*Summary*\n\nThe build fails in `parse_args` because *`--jobs`* is read as a string. \
                        See <https://ci.example.com/run/12?tab=log&amp;line=40|the log>.\n\n*Fix*\n\n\
                        1. Parse it as `usize`:\n```\nlet jobs: usize = s.parse()?;\n```\n\
                        2. Add a test for `--jobs 0`.\n\n> Note: `2 * 3` jobs run at most.";
        check(markdown, expected);
    }

    #[test]
    fn hostile_input_does_not_panic() {
        let deep_quote = ">".repeat(100_000) + " x";
        assert!(to_mrkdwn(&deep_quote).ends_with('x'));
        let deep_list = (0..500)
            .map(|i| format!("{}- x\n", "  ".repeat(i)))
            .collect::<String>();
        assert!(to_mrkdwn(&deep_list).contains('x'));
        let deep_emphasis = "*".repeat(50_000) + "x" + &"*".repeat(50_000);
        assert!(to_mrkdwn(&deep_emphasis).contains('x'));
        let brackets = "[".repeat(50_000) + "x" + &"](https://x.io)".repeat(50_000);
        assert!(to_mrkdwn(&brackets).contains('x'));
        for weird in [
            "<",
            ">",
            "&",
            "<<<>>>",
            "\u{E000}",
            "\u{E000}99\u{E001}",
            "``",
            "|",
            "|-|\n|-|",
            "- ",
            "1.",
            "\0",
        ] {
            let _ = to_mrkdwn(weird);
        }
        let _ = to_mrkdwn(&"a".repeat(200_000));
        let _ = to_mrkdwn(&format!("https://x.io/{}", ")".repeat(200_000)));
        let _ = to_mrkdwn(&"<@".repeat(100_000));
        let _ = to_mrkdwn(&"| a ".repeat(10_000));
    }

    #[test]
    fn split_keeps_short_text_whole() {
        assert_eq!(split("hello", 10), ["hello"]);
        assert_eq!(split("  \n\nhello\n\n", 10), ["hello"]);
        assert_eq!(split("", 10), Vec::<String>::new());
        assert_eq!(split(" \n ", 10), Vec::<String>::new());
    }

    #[test]
    fn split_prefers_blank_lines_then_lines_then_spaces() {
        assert_eq!(split("aaaa\n\nbbbb\ncccc", 12), ["aaaa\n\nbbbb", "cccc"]);
        assert_eq!(split("aaaa bbbb\ncc dd", 12), ["aaaa bbbb", "cc dd"]);
        assert_eq!(split("aaa bbb ccc ddd", 8), ["aaa bbb", "ccc ddd"]);
        assert_eq!(split("abcdefghij", 4), ["abcd", "efgh", "ij"]);
        assert_eq!(
            split("para one\n\npara two is long", 20),
            ["para one", "para two is long"]
        );
    }

    #[test]
    fn split_never_cuts_a_token_or_an_entity() {
        assert_eq!(
            split("see <https://x.io/a|the docs> now", 26),
            ["see", "<https://x.io/a|the docs>", "now"]
        );
        assert_eq!(split("x &amp; y", 6), ["x", "&amp;", "y"]);
        assert_eq!(split("aaaa&amp;b", 6), ["aaaa", "&amp;b"]);
    }

    #[test]
    fn split_closes_and_reopens_code_blocks() {
        let text = "intro\n```\nline one\nline two\nline three\n```\nend";
        let parts = split(text, 24);
        assert_eq!(
            parts,
            [
                "intro\n```\nline one\n```",
                "```\nline two\n```",
                "```\nline three\n```\nend"
            ]
        );
        for part in &parts {
            assert!(part.chars().count() <= 24);
        }
    }

    #[test]
    fn split_counts_chars_not_bytes() {
        assert_eq!(split("ééé ééé", 3), ["ééé", "ééé"]);
        assert_eq!(split("日本語", 2), ["日本", "語"]);
    }

    #[test]
    fn split_with_tiny_limits_still_progresses() {
        assert_eq!(split("abc", 0), ["a", "b", "c"]);
        let parts = split("```\nabc\n```", 3);
        assert!(
            parts
                .iter()
                .all(|p| p.chars().count() <= 3 && !p.trim().is_empty())
        );
    }
}
