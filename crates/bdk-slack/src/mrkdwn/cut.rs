//! Cutting a long `mrkdwn` message into parts Slack takes.
//!
//! Positions are in chars. A cut never falls inside a `<...>` token, an
//! `&...;` entity or a ```` ``` ```` fence; a part that ends inside a code
//! block closes it, and the next part opens it again.

/// Added at the end of a part cut inside a code block.
const CLOSE: &str = "\n```";
/// Added at the start of the part after it.
const REOPEN: &str = "```\n";
/// The characters [`CLOSE`] and [`REOPEN`] take.
const FENCE_COST: usize = 4;
/// Below this limit a part has no room for both fences and a character of
/// its own, and code blocks are cut without them.
const MIN_FENCED_LIMIT: usize = 2 * FENCE_COST + 1;
/// An entity is `&` and at most this many characters up to its `;`.
const MAX_ENTITY: usize = 10;
/// A `<...>` token longer than this is taken for text.
const MAX_TOKEN: usize = 4_000;

/// One part: `chars[start..end]` of the input, with the fences added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Piece {
    pub(super) start: usize,
    pub(super) end: usize,
    /// Starts with [`REOPEN`]: the previous part was cut inside a code block.
    pub(super) reopen: bool,
    /// Ends with [`CLOSE`]: this part is cut (or the input ends) inside a
    /// code block.
    pub(super) close: bool,
}

impl Piece {
    pub(super) fn render(&self, chars: &[char]) -> String {
        let mut out = String::new();
        if self.reopen {
            out.push_str(REOPEN);
        }
        out.extend(chars.get(self.start..self.end).unwrap_or_default());
        if self.close {
            out.push_str(CLOSE);
        }
        out
    }

    fn len(&self) -> usize {
        self.end - self.start + fences(self.reopen) + fences(self.close)
    }
}

fn fences(added: bool) -> usize {
    if added { FENCE_COST } else { 0 }
}

/// Where a cut may fall, best first.
#[derive(Clone, Copy)]
enum Class {
    /// At a line followed by a blank line.
    Paragraph,
    /// At a line end.
    Line,
    /// At a space.
    Space,
    /// Anywhere outside a token, an entity or a fence.
    Anywhere,
}

/// The parts of `chars`, each at most `limit` characters (at least 1) with
/// its fences.
pub(super) fn pieces(chars: &[char], limit: usize) -> Vec<Piece> {
    let limit = limit.max(1);
    let text = Text::new(chars, limit >= MIN_FENCED_LIMIT);
    let mut out = Vec::new();
    let mut start = text.skip_gap(0);
    while start < chars.len() {
        let reopen = text.in_code[start];
        let room = limit.saturating_sub(fences(reopen));
        let whole = text.piece(start, chars.len(), reopen);
        let (piece, next) = if whole.len() <= limit {
            (whole, chars.len())
        } else {
            let cut = text
                .best_cut(start, room, limit)
                .unwrap_or_else(|| text.forced_cut(start, room));
            (text.piece(start, cut, reopen), text.skip_gap(cut))
        };
        if piece.end > piece.start {
            out.push(piece);
        }
        // `next > start` always: a cut is after `start`.
        start = next.max(start + 1);
    }
    out
}

/// The input and what is known about each position in it.
struct Text<'a> {
    chars: &'a [char],
    /// Code blocks get closed and reopened at cuts.
    balance_fences: bool,
    /// `in_code[i]`: position `i` is inside a code block (an odd number of
    /// fences before it). All false when fences are not balanced.
    in_code: Vec<bool>,
    /// `in_token[i]`: a cut before `chars[i]` would split a `<...>` token.
    in_token: Vec<bool>,
    /// `in_atom[i]`: a cut before `chars[i]` would split an entity or a
    /// fence.
    in_atom: Vec<bool>,
    /// `content_end[i]`: `i` with the whitespace before it dropped.
    content_end: Vec<usize>,
}

impl<'a> Text<'a> {
    fn new(chars: &'a [char], balance_fences: bool) -> Self {
        let n = chars.len();
        let mut in_code = vec![false; n + 1];
        let mut in_token = vec![false; n + 1];
        let mut in_atom = vec![false; n + 1];
        let mut open = false;
        let mut i = 0;
        while let Some(&c) = chars.get(i) {
            in_code[i] = open && balance_fences;
            if chars.get(i..i + 3) == Some(&['`', '`', '`']) {
                for j in i + 1..i + 3 {
                    in_code[j] = in_code[i];
                    in_atom[j] = true;
                }
                open = !open;
                i += 3;
                continue;
            }
            let (end, blocked) = match c {
                '<' => (
                    closing(chars, i, '>', MAX_TOKEN, |c| c != '\n' && c != '<'),
                    &mut in_token,
                ),
                '&' => (
                    closing(chars, i, ';', MAX_ENTITY, |c| {
                        c.is_ascii_alphanumeric() || c == '#'
                    }),
                    &mut in_atom,
                ),
                _ => (None, &mut in_atom),
            };
            if let Some(end) = end {
                for flag in blocked.get_mut(i + 1..end).unwrap_or_default() {
                    *flag = true;
                }
            }
            i += 1;
        }
        in_code[n] = open && balance_fences;
        let mut content_end = vec![0; n + 1];
        for (i, c) in chars.iter().enumerate() {
            content_end[i + 1] = if c.is_whitespace() {
                content_end[i]
            } else {
                i + 1
            };
        }
        Text {
            chars,
            balance_fences,
            in_code,
            in_token,
            in_atom,
            content_end,
        }
    }

    /// The piece `start..end` with trailing whitespace dropped.
    fn piece(&self, start: usize, end: usize, reopen: bool) -> Piece {
        let end = self.content_end.get(end).map_or(start, |&e| e.max(start));
        Piece {
            start,
            end,
            reopen,
            close: self.in_code.get(end).copied().unwrap_or(false),
        }
    }

    /// Past the whitespace at `at`: through its last line end when it has
    /// one (the next line keeps its indentation), else through its spaces.
    fn skip_gap(&self, at: usize) -> usize {
        let mut end = at;
        let mut after_newline = None;
        while let Some(&c) = self.chars.get(end) {
            if !c.is_whitespace() {
                break;
            }
            end += 1;
            if c == '\n' {
                after_newline = Some(end);
            }
        }
        if end == self.chars.len() {
            return end;
        }
        after_newline.unwrap_or(end)
    }

    fn is(&self, cut: usize, class: Class) -> bool {
        if self.in_token[cut] || self.in_atom[cut] {
            return false;
        }
        let Some(&c) = self.chars.get(cut) else {
            return false;
        };
        match class {
            Class::Paragraph => {
                c == '\n'
                    && self
                        .chars
                        .get(cut + 1..)
                        .unwrap_or_default()
                        .iter()
                        .find(|c| !matches!(c, ' ' | '\t'))
                        .is_none_or(|&c| c == '\n')
            }
            Class::Line => c == '\n',
            Class::Space => c == ' ' || c == '\t',
            Class::Anywhere => true,
        }
    }

    /// The best cut after `start` whose part fits `limit`: the latest blank
    /// line in the second half of the room (one earlier would make a short
    /// part where a line end makes a long one), else the latest line end,
    /// space, or other place.
    fn best_cut(&self, start: usize, room: usize, limit: usize) -> Option<usize> {
        let last = (start + room).min(self.chars.len().saturating_sub(1));
        let reopen = self.in_code[start];
        let fits = |cut: usize| {
            let piece = self.piece(start, cut, reopen);
            piece.end > piece.start && piece.len() <= limit
        };
        let half = (start + room / 2).max(start + 1);
        [
            (Class::Paragraph, half),
            (Class::Line, start + 1),
            (Class::Space, start + 1),
            (Class::Anywhere, start + 1),
        ]
        .into_iter()
        .find_map(|(class, floor)| {
            (floor..=last)
                .rev()
                .find(|&cut| self.is(cut, class) && fits(cut))
        })
    }

    /// A cut for when no clean one fits (a token longer than the room): as
    /// late as the room allows with a closing fence, off an entity or a
    /// fence.
    fn forced_cut(&self, start: usize, room: usize) -> usize {
        let room = room.saturating_sub(fences(self.balance_fences)).max(1);
        let mut cut = (start + room).min(self.chars.len());
        while cut > start + 1 && self.in_atom[cut] {
            cut -= 1;
        }
        cut
    }
}

/// One past the `end_char` closing the atom that starts at `start`, when it
/// comes within `max` characters and everything before it passes `inner`.
fn closing(
    chars: &[char],
    start: usize,
    end_char: char,
    max: usize,
    inner: impl Fn(char) -> bool,
) -> Option<usize> {
    let mut i = start + 1;
    while i <= start + max {
        let &c = chars.get(i)?;
        if c == end_char {
            return (i > start + 1).then_some(i + 1);
        }
        if !inner(c) {
            return None;
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use std::ops::Range;

    use super::*;

    /// A small deterministic generator (xorshift64), enough to vary inputs.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n.max(1) as u64) as usize
        }

        fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
            from[self.below(from.len())]
        }
    }

    /// The longest token in [`PARTS`], in chars.
    const LONGEST_TOKEN: usize = 36;

    const PARTS: &[&str] = &[
        "word",
        "a",
        "longer-word",
        "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
        " ",
        " ",
        " ",
        "  ",
        "\n",
        "\n",
        "\n\n",
        "\n   \n",
        "<https://example.com/a_b|the label>",
        "<@U12345>",
        "<!here>",
        "&amp;",
        "&lt;",
        "é",
        "日本",
        "🦀",
        "\n```\n",
        "```",
        "    ",
        "*bold*",
        "`code`",
        "\t",
    ];

    fn text(rng: &mut Rng, len: usize) -> String {
        let mut out = String::new();
        while out.chars().count() < len {
            out.push_str(rng.pick(PARTS));
        }
        out
    }

    /// The `<...>` tokens and `&...;` entities of `chars`.
    fn atoms(chars: &[char]) -> Vec<Range<usize>> {
        let mut out = Vec::new();
        for (i, &c) in chars.iter().enumerate() {
            let end = match c {
                '<' => closing(chars, i, '>', MAX_TOKEN, |c| c != '\n' && c != '<'),
                '&' => closing(chars, i, ';', MAX_ENTITY, |c| {
                    c.is_ascii_alphanumeric() || c == '#'
                }),
                _ => None,
            };
            out.extend(end.map(|end| i..end));
        }
        out
    }

    fn fences_in(text: &str) -> usize {
        text.matches("```").count()
    }

    /// Everything `split` promises, for one input and limit.
    #[track_caller]
    fn check_properties(input: &str, limit: usize) {
        let chars: Vec<char> = input.chars().collect();
        let pieces = pieces(&chars, limit);
        let context = format!("limit {limit}, input {input:?}");
        let mut at = 0;
        let mut previous: Option<Piece> = None;
        for piece in &pieces {
            let part = piece.render(&chars);
            assert!(
                part.chars().count() <= limit,
                "part over the limit: {part:?}, {context}"
            );
            let content: String = chars[piece.start..piece.end].iter().collect();
            assert!(!content.trim().is_empty(), "empty part, {context}");
            assert!(
                !content.ends_with(char::is_whitespace),
                "{content:?}, {context}"
            );
            assert_eq!(
                fences_in(&part) % 2,
                0,
                "unbalanced fences in {part:?}, {context}"
            );
            // Reassembly: only whitespace between the parts.
            assert!(piece.start >= at, "{context}");
            assert!(
                chars[at..piece.start].iter().all(|c| c.is_whitespace()),
                "{context}"
            );
            if let Some(previous) = previous {
                assert_eq!(previous.close, piece.reopen, "{context}");
            } else {
                assert!(!piece.reopen, "{context}");
            }
            if limit >= 2 * (LONGEST_TOKEN + FENCE_COST) {
                for atom in atoms(&chars) {
                    for cut in [piece.start, piece.end] {
                        assert!(
                            cut <= atom.start || cut >= atom.end,
                            "cut at {cut} inside {atom:?} ({:?}), {context}",
                            chars[atom.clone()].iter().collect::<String>()
                        );
                    }
                }
            }
            at = piece.end;
            previous = Some(*piece);
        }
        assert!(chars[at..].iter().all(|c| c.is_whitespace()), "{context}");
        if let Some(last) = previous {
            let fences_total = fences_in(input) % 2 == 1;
            assert_eq!(last.close, fences_total, "{context}");
        }
        let expected: Vec<String> = pieces.iter().map(|p| p.render(&chars)).collect();
        assert_eq!(crate::mrkdwn::split(input, limit), expected);
    }

    #[test]
    fn split_properties_on_generated_text() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3_000 {
            let len = rng.below(500);
            let limit = MIN_FENCED_LIMIT + rng.below(150);
            check_properties(&text(&mut rng, len), limit);
        }
    }

    #[test]
    fn split_properties_at_slacks_limits() {
        let mut rng = Rng(42);
        for limit in [crate::mrkdwn::SECTION_LIMIT, crate::mrkdwn::TEXT_LIMIT] {
            for _ in 0..5 {
                let len = 20_000 + rng.below(20_000);
                check_properties(&text(&mut rng, len), limit);
            }
        }
    }

    #[test]
    fn split_properties_on_converted_markdown() {
        const MARKDOWN: &[&str] = &[
            "# Heading\n\n",
            "Some **bold** text and a [link](https://example.com/a_b?c=1&d=2). ",
            "A sentence with `code < here` and <@U42>.\n",
            "\n- item one\n- item two with *emphasis*\n  - nested\n\n",
            "```rust\nfn main() {\n    println!(\"<&>\");\n}\n```\n\n",
            "| a | b |\n|---|---|\n| 1 | 2 |\n\n",
            "> quoted & text\n\n",
            "plain words follow plain words ",
        ];
        let mut rng = Rng(7);
        for _ in 0..300 {
            let mut markdown = String::new();
            for _ in 0..rng.below(60) {
                markdown.push_str(rng.pick(MARKDOWN));
            }
            let mrkdwn = crate::mrkdwn::to_mrkdwn(&markdown);
            let limit = 2 * (LONGEST_TOKEN + FENCE_COST) + rng.below(300);
            check_properties(&mrkdwn, limit);
        }
    }

    #[test]
    fn split_properties_with_small_limits() {
        let mut rng = Rng(3);
        for limit in MIN_FENCED_LIMIT..MIN_FENCED_LIMIT + 8 {
            for _ in 0..200 {
                let len = rng.below(120);
                check_properties(&text(&mut rng, len), limit);
            }
        }
    }

    #[test]
    fn long_runs_of_whitespace_and_unclosed_tokens_stay_linear() {
        let input = format!("\n{}x {}", " ".repeat(200_000), "<a ".repeat(100_000));
        check_properties(&input, crate::mrkdwn::TEXT_LIMIT);
        check_properties(&" y".repeat(100_000), 50);
    }

    #[test]
    fn a_token_longer_than_the_room_is_cut_rather_than_sent_whole() {
        let token = format!("<https://x.io/{}|label>", "a".repeat(50));
        let parts = crate::mrkdwn::split(&token, 20);
        assert!(parts.len() > 1);
        assert!(parts.iter().all(|p| p.chars().count() <= 20));
        assert_eq!(parts.concat(), token);
    }
}
