//! The tree as `mrkdwn` lines.
//!
//! Slack formats runs of text, not structure: there are no headings,
//! tables or nested quotes, a list is just lines starting with `•`, and
//! `*bold*` does not cross a line or start inside a word. So a heading
//! becomes a bold line, a table a code block, emphasis is closed and
//! reopened on every line it spans, and emphasis inside a word is left as
//! the model wrote it.

use pulldown_cmark::Alignment;

use super::escape::{Mode, Protected, escape, linkable};
use super::tree::{Block, Inline, Item, Node};

/// Continuation lines of a list item, and each level of nesting.
const INDENT: &str = "    ";

/// One output line.
pub(super) struct Line {
    pub(super) text: String,
    /// Code: list indentation would change it, so it gets none.
    pub(super) verbatim: bool,
}

impl Line {
    fn text(text: impl Into<String>) -> Self {
        Line {
            text: text.into(),
            verbatim: false,
        }
    }

    fn code(text: impl Into<String>) -> Self {
        Line {
            text: text.into(),
            verbatim: true,
        }
    }
}

pub(super) struct Renderer<'a> {
    /// The protected source, for the blank lines between blocks and the
    /// text of emphasis left as written.
    pub(super) source: &'a str,
    pub(super) protected: &'a Protected,
}

/// Where a block sits.
#[derive(Clone, Copy, Default)]
pub(super) struct Nest {
    /// How many lists it is in.
    lists: usize,
    /// Inside a quote: Slack has one level of quoting, so an inner quote
    /// adds no second `>`.
    quoted: bool,
}

/// The formatting already applied around an inline, which Slack cannot
/// nest again (`*a *b* c*`).
#[derive(Clone, Copy, Default)]
struct Style {
    strong: bool,
    emphasis: bool,
    strike: bool,
}

impl Renderer<'_> {
    pub(super) fn blocks(&self, nodes: &[Node], nest: Nest) -> Vec<Line> {
        let mut out: Vec<Line> = Vec::new();
        for node in nodes {
            let lines = self.block(&node.block, nest);
            if lines.is_empty() {
                continue;
            }
            if !out.is_empty() && self.blank_before(node.start) {
                out.push(Line::text(""));
            }
            out.extend(lines);
        }
        out
    }

    fn block(&self, block: &Block, nest: Nest) -> Vec<Line> {
        match block {
            Block::Paragraph(inlines) => self
                .inlines(inlines, Style::default())
                .split('\n')
                .map(|line| Line::text(line.trim_end()))
                .collect::<Vec<_>>()
                .into_iter()
                .skip_while(|l| l.text.is_empty())
                .collect(),
            Block::Heading(inlines) => {
                let bold = Style {
                    strong: true,
                    ..Style::default()
                };
                let text = self.inlines(inlines, bold).replace('\n', " ");
                let text = text.trim();
                if text.is_empty() {
                    Vec::new()
                } else {
                    vec![Line::text(wrap(text, "*", "*"))]
                }
            }
            Block::Code(code) => {
                let code = code.strip_suffix('\n').unwrap_or(code);
                if code.trim().is_empty() {
                    return Vec::new();
                }
                let mut lines = vec![Line::code("```")];
                lines.extend(
                    code.split('\n')
                        .map(|l| Line::code(self.protected.expand(l, Mode::Code))),
                );
                lines.push(Line::code("```"));
                lines
            }
            Block::Html(html) => {
                if is_comment(html) {
                    return Vec::new();
                }
                html.trim_end()
                    .split('\n')
                    .map(|line| Line::text(self.protected.expand(line, Mode::Text).trim_end()))
                    .collect()
            }
            Block::Quote(children) => {
                let inner = self.blocks(
                    children,
                    Nest {
                        quoted: true,
                        ..nest
                    },
                );
                if nest.quoted {
                    return inner;
                }
                inner
                    .into_iter()
                    .map(|line| Line {
                        text: if line.text.is_empty() {
                            ">".to_owned()
                        } else {
                            format!("> {}", line.text)
                        },
                        verbatim: line.verbatim,
                    })
                    .collect()
            }
            Block::List { start, items } => self.list(*start, items, nest),
            Block::Table { aligns, rows } => self.table(aligns, rows),
            Block::Rule => vec![Line::text("———")],
        }
    }

    fn list(&self, start: Option<u64>, items: &[Item], nest: Nest) -> Vec<Line> {
        let level = nest.lists + 1;
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let marker = match start {
                Some(first) => format!("{}.", first.saturating_add(i as u64)),
                None => match level {
                    1 => "•",
                    2 => "◦",
                    _ => "▪",
                }
                .to_owned(),
            };
            let mut body = self.blocks(
                &item.children,
                Nest {
                    lists: level,
                    ..nest
                },
            );
            if let Some(done) = item.task {
                let check = if done { "☑" } else { "☐" };
                match body.first_mut() {
                    Some(first) if !first.verbatim => {
                        first.text = format!("{check} {}", first.text)
                    }
                    _ => body.insert(0, Line::text(check)),
                }
            }
            if i > 0 && self.blank_before(item.start) {
                out.push(Line::text(""));
            }
            let mut body = body.into_iter();
            match body.next() {
                Some(first) if !first.verbatim => {
                    out.push(Line::text(format!("{marker} {}", first.text)))
                }
                first => {
                    out.push(Line::text(marker));
                    out.extend(first);
                }
            }
            out.extend(body.map(|line| {
                if line.verbatim || line.text.is_empty() {
                    line
                } else {
                    Line::text(format!("{INDENT}{}", line.text))
                }
            }));
        }
        out
    }

    /// A table as a code block with aligned columns (Slack has no tables).
    /// Cells are plain text: formatting would show as its markers.
    fn table(&self, aligns: &[Alignment], rows: &[Vec<Vec<Inline>>]) -> Vec<Line> {
        let grid: Vec<Vec<String>> = rows
            .iter()
            .map(|row| {
                row.iter()
                    .map(|cell| collapse_whitespace(&self.plain(cell)))
                    .collect()
            })
            .collect();
        let columns = grid.iter().map(Vec::len).max().unwrap_or(0);
        if columns == 0 {
            return Vec::new();
        }
        let mut widths = vec![0; columns];
        for row in &grid {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        let mut lines = vec![Line::code("```")];
        for (r, row) in grid.iter().enumerate() {
            let cells: Vec<String> = widths
                .iter()
                .enumerate()
                .map(|(c, &width)| {
                    let cell = row.get(c).map_or("", String::as_str);
                    pad(
                        cell,
                        width,
                        aligns.get(c).copied().unwrap_or(Alignment::None),
                    )
                })
                .collect();
            lines.push(Line::code(escape(cells.join(" | ").trim_end())));
            if r == 0 {
                let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w.max(1))).collect();
                lines.push(Line::code(rule.join("-+-")));
            }
        }
        lines.push(Line::code("```"));
        lines
    }

    /// True when the source has a blank line right before the line where
    /// the block at `start` begins (quote markers count as blank).
    fn blank_before(&self, start: usize) -> bool {
        let Some(before) = self.source.get(..start) else {
            return false;
        };
        let Some(line_start) = before.rfind('\n') else {
            return false;
        };
        let previous = before.get(..line_start).unwrap_or_default();
        let previous = previous.rsplit('\n').next().unwrap_or_default();
        previous.chars().all(|c| c.is_whitespace() || c == '>')
    }

    fn inlines(&self, inlines: &[Inline], style: Style) -> String {
        let mut out = String::new();
        for inline in inlines {
            self.inline(inline, style, &mut out);
        }
        out
    }

    fn inline(&self, inline: &Inline, style: Style, out: &mut String) {
        match inline {
            Inline::Text(text) => out.push_str(&self.protected.expand(text, Mode::Text)),
            Inline::Code(code) => {
                out.push('`');
                out.push_str(&self.protected.expand(code, Mode::Code));
                out.push('`');
            }
            Inline::Html(html) if is_line_break(html) => out.push('\n'),
            Inline::Html(html) if is_comment(html) => {}
            Inline::Html(html) => out.push_str(&self.protected.expand(html, Mode::Text)),
            Inline::Break => out.push('\n'),
            Inline::Strong(children, range) => {
                if style.strong {
                    out.push_str(&self.inlines(children, style));
                } else if self.inside_word(range) {
                    out.push_str(&self.as_written(range));
                } else {
                    let inner = self.inlines(
                        children,
                        Style {
                            strong: true,
                            ..style
                        },
                    );
                    out.push_str(&wrap(&inner, "*", "*"));
                }
            }
            Inline::Emphasis(children, range) => {
                if style.emphasis {
                    out.push_str(&self.inlines(children, style));
                } else if self.inside_word(range) {
                    out.push_str(&self.as_written(range));
                } else if let ([Inline::Strong(inner, _)], false) =
                    (children.as_slice(), style.strong)
                {
                    // `***both***` parses as emphasis around strong; Slack
                    // reads `*_both_*` most reliably.
                    let both = Style {
                        strong: true,
                        emphasis: true,
                        ..style
                    };
                    out.push_str(&wrap(&self.inlines(inner, both), "*_", "_*"));
                } else {
                    let inner = self.inlines(
                        children,
                        Style {
                            emphasis: true,
                            ..style
                        },
                    );
                    out.push_str(&wrap(&inner, "_", "_"));
                }
            }
            Inline::Strikethrough(children, range) => {
                if style.strike {
                    out.push_str(&self.inlines(children, style));
                } else if self.inside_word(range) {
                    out.push_str(&self.as_written(range));
                } else {
                    let inner = self.inlines(
                        children,
                        Style {
                            strike: true,
                            ..style
                        },
                    );
                    out.push_str(&wrap(&inner, "~", "~"));
                }
            }
            Inline::Link {
                url,
                auto,
                email,
                children,
            } => self.link(url, *auto, *email, children, style, out),
            Inline::Image { url, alt } => {
                let url = self.protected.expand(url, Mode::Plain);
                let alt = collapse_whitespace(&self.plain(alt));
                if !linkable(&url) {
                    out.push_str(&escape(&alt));
                } else if alt.is_empty() {
                    out.push_str(&format!("<{}>", link_target(&url)));
                } else {
                    out.push_str(&format!("<{}|{}>", link_target(&url), escape(&alt)));
                }
            }
        }
    }

    fn link(
        &self,
        url: &str,
        auto: bool,
        email: bool,
        children: &[Inline],
        style: Style,
        out: &mut String,
    ) {
        let mut url = self.protected.expand(url, Mode::Plain);
        if email {
            url = format!("mailto:{url}");
        }
        if !linkable(&url) {
            if auto {
                // `<std::io::Error>`: not a link Slack can follow; show it as
                // written.
                out.push_str(&escape(&format!("<{}>", self.plain(children))));
            } else {
                out.push_str(&self.inlines(children, style));
            }
            return;
        }
        // Slack formats no part of a label: formatting that covers the whole
        // label goes around the link instead (`[**x**](u)` -> `*<u|x>*`).
        let (mut open, mut close) = (String::new(), String::new());
        let (mut label, mut style) = (children, style);
        loop {
            let (inner, mark) = match label {
                [Inline::Strong(inner, _)] if !style.strong => {
                    style.strong = true;
                    (inner, "*")
                }
                [Inline::Emphasis(inner, _)] if !style.emphasis => {
                    style.emphasis = true;
                    (inner, "_")
                }
                [Inline::Strikethrough(inner, _)] if !style.strike => {
                    style.strike = true;
                    (inner, "~")
                }
                [
                    Inline::Strong(inner, _)
                    | Inline::Emphasis(inner, _)
                    | Inline::Strikethrough(inner, _),
                ] => (inner, ""),
                _ => break,
            };
            open.push_str(mark);
            close.insert_str(0, mark);
            label = inner;
        }
        let text = collapse_whitespace(&self.plain(label));
        let target = link_target(&url);
        out.push_str(&open);
        if auto || text.is_empty() || text == url {
            out.push_str(&format!("<{target}>"));
        } else {
            out.push_str(&format!("<{target}|{}>", escape(&text)));
        }
        out.push_str(&close);
    }

    /// The text of inlines without formatting, unescaped.
    fn plain(&self, inlines: &[Inline]) -> String {
        let mut out = String::new();
        for inline in inlines {
            match inline {
                Inline::Text(text) | Inline::Code(text) => {
                    out.push_str(&self.protected.expand(text, Mode::Plain))
                }
                Inline::Html(html) if is_line_break(html) => out.push(' '),
                Inline::Html(html) if is_comment(html) => {}
                Inline::Html(html) => out.push_str(&self.protected.expand(html, Mode::Plain)),
                Inline::Break => out.push(' '),
                Inline::Strong(children, _)
                | Inline::Emphasis(children, _)
                | Inline::Strikethrough(children, _)
                | Inline::Link { children, .. }
                | Inline::Image { alt: children, .. } => out.push_str(&self.plain(children)),
            }
        }
        out
    }

    /// True when the span touches a letter or digit on either side: Slack
    /// formats whole words only, so `2*3*4` and `foo**bar**` stay as
    /// written.
    fn inside_word(&self, range: &std::ops::Range<usize>) -> bool {
        let before = self
            .source
            .get(..range.start)
            .and_then(|s| s.chars().next_back());
        let after = self.source.get(range.end..).and_then(|s| s.chars().next());
        before.is_some_and(char::is_alphanumeric) || after.is_some_and(char::is_alphanumeric)
    }

    /// The span as the model wrote it, escaped.
    fn as_written(&self, range: &std::ops::Range<usize>) -> String {
        let text = self.source.get(range.clone()).unwrap_or_default();
        self.protected.expand(text, Mode::Text)
    }
}

/// `open` and `close` around each line of `content`, outside its leading
/// and trailing spaces (`*a *` formats nothing in Slack).
fn wrap(content: &str, open: &str, close: &str) -> String {
    content
        .split('\n')
        .map(|line| {
            let core = line.trim();
            if core.is_empty() {
                return line.to_owned();
            }
            let lead = &line[..line.len() - line.trim_start().len()];
            let trail = &line[line.trim_end().len()..];
            format!("{lead}{open}{core}{close}{trail}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A URL as the target of `<target|label>`: `&` escaped like everywhere
/// (Slack unescapes it), and the characters that would end the target
/// percent-encoded.
fn link_target(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    for c in url.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '|' => out.push_str("%7C"),
            c if c.is_whitespace() => out.push_str("%20"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `cell` padded to `width` characters.
fn pad(cell: &str, width: usize, align: Alignment) -> String {
    let gap = width.saturating_sub(cell.chars().count());
    let (left, right) = match align {
        Alignment::Right => (gap, 0),
        Alignment::Center => (gap / 2, gap - gap / 2),
        Alignment::None | Alignment::Left => (0, gap),
    };
    format!("{}{cell}{}", " ".repeat(left), " ".repeat(right))
}

fn is_line_break(html: &str) -> bool {
    let tag: String = html
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    matches!(tag.as_str(), "<br>" | "<br/>")
}

fn is_comment(html: &str) -> bool {
    let html = html.trim();
    html.starts_with("<!--") && html.ends_with("-->")
}
