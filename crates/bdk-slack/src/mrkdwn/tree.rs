//! The Markdown's structure: pulldown-cmark's events folded into a small
//! tree of blocks and inlines that the renderer walks.
//!
//! The fold keeps its own stack instead of recursing, so that no input
//! nests it deeper than the machine's stack; a document nested deeper than
//! [`MAX_DEPTH`] is refused as a whole and sent as escaped text.

use std::ops::Range;

use pulldown_cmark::{Alignment, Event, LinkType, Options, Parser, Tag};

/// Deeper nesting (quotes in quotes, lists in lists, emphasis in links)
/// than any readable message uses. Rendering and dropping the tree recurse,
/// so the depth stays bounded.
const MAX_DEPTH: usize = 64;

/// A block and where it starts in the source (a byte offset), for the
/// blank lines between blocks.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) start: usize,
    pub(super) block: Block,
}

/// What a block is, with what it holds.
#[derive(Debug)]
pub(super) enum Block {
    Paragraph(Vec<Inline>),
    Heading(Vec<Inline>),
    /// A fenced or indented code block's text (the language tag is gone).
    Code(String),
    Html(String),
    Quote(Vec<Node>),
    List {
        /// The first number of an ordered list.
        start: Option<u64>,
        items: Vec<Item>,
    },
    Table {
        aligns: Vec<Alignment>,
        /// The header row first.
        rows: Vec<Vec<Vec<Inline>>>,
    },
    Rule,
}

/// A list item and where it starts in the source.
#[derive(Debug)]
pub(super) struct Item {
    pub(super) start: usize,
    /// A task list item's checkbox.
    pub(super) task: Option<bool>,
    pub(super) children: Vec<Node>,
}

/// Span-level content.
#[derive(Debug)]
pub(super) enum Inline {
    Text(String),
    Code(String),
    Html(String),
    /// A soft or hard line break.
    Break,
    /// Emphasis and where it is in the source, to tell `a*b*c` (left as
    /// written: Slack formats no part of a word) from `*b*`.
    Emphasis(Vec<Inline>, Range<usize>),
    Strong(Vec<Inline>, Range<usize>),
    Strikethrough(Vec<Inline>, Range<usize>),
    Link {
        url: String,
        /// `<https://...>`: the URL is the text.
        auto: bool,
        /// `<a@b.c>`: the target needs `mailto:`.
        email: bool,
        children: Vec<Inline>,
    },
    Image {
        url: String,
        alt: Vec<Inline>,
    },
}

/// The document's blocks, or `None` when it nests deeper than [`MAX_DEPTH`].
pub(super) fn parse(source: &str) -> Option<Vec<Node>> {
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut stack = vec![Frame::new(Kind::Root, 0..source.len())];
    for (event, range) in Parser::new_ext(source, options).into_offset_iter() {
        match event {
            Event::Start(tag) => {
                let kind = Kind::of(tag);
                if kind.is_inline() {
                    open_paragraph(&mut stack, range.start);
                } else if kind != Kind::Other {
                    close_paragraph(&mut stack);
                }
                stack.push(Frame::new(kind, range));
                if stack.len() > MAX_DEPTH {
                    return None;
                }
            }
            Event::End(_) => {
                close_paragraph(&mut stack);
                close(&mut stack);
            }
            Event::Text(text) => match stack.last_mut() {
                Some(frame) if matches!(frame.kind, Kind::Code | Kind::Html) => {
                    frame.text.push_str(&text);
                }
                _ => push_inline(&mut stack, range.start, Inline::Text(text.into_string())),
            },
            Event::Html(html) => match stack.last_mut() {
                Some(frame) if frame.kind == Kind::Html => frame.text.push_str(&html),
                _ => push_inline(&mut stack, range.start, Inline::Html(html.into_string())),
            },
            Event::Code(code) => {
                push_inline(&mut stack, range.start, Inline::Code(code.into_string()))
            }
            Event::InlineHtml(html) => {
                push_inline(&mut stack, range.start, Inline::Html(html.into_string()));
            }
            // Not enabled; kept as text should that change.
            Event::InlineMath(text) | Event::DisplayMath(text) | Event::FootnoteReference(text) => {
                push_inline(&mut stack, range.start, Inline::Text(text.into_string()));
            }
            Event::SoftBreak | Event::HardBreak => {
                push_inline(&mut stack, range.start, Inline::Break)
            }
            Event::Rule => {
                close_paragraph(&mut stack);
                if let Some(frame) = stack.last_mut() {
                    frame.nodes.push(Node {
                        start: range.start,
                        block: Block::Rule,
                    });
                }
            }
            Event::TaskListMarker(done) => {
                close_paragraph(&mut stack);
                if let Some(item) = stack.iter_mut().rev().find(|f| f.kind == Kind::Item) {
                    item.task = Some(done);
                }
            }
        }
    }
    while stack.len() > 1 {
        close_paragraph(&mut stack);
        close(&mut stack);
    }
    stack.pop().map(|root| root.nodes)
}

/// What a frame of the fold is building.
#[derive(Clone, Debug, PartialEq)]
enum Kind {
    Root,
    Paragraph,
    /// The text of a tight list item, which has no paragraph of its own.
    ImplicitParagraph,
    Heading,
    Quote,
    Code,
    Html,
    List(Option<u64>),
    Item,
    Table(Vec<Alignment>),
    /// The header row or a body row.
    Row,
    Cell,
    Emphasis,
    Strong,
    Strikethrough,
    Link {
        url: String,
        auto: bool,
        email: bool,
    },
    Image {
        url: String,
    },
    /// Anything the options leave off (footnotes, metadata, ...): its
    /// content goes to the parent.
    Other,
}

impl Kind {
    fn of(tag: Tag<'_>) -> Self {
        match tag {
            Tag::Paragraph => Kind::Paragraph,
            Tag::Heading { .. } => Kind::Heading,
            Tag::BlockQuote(_) => Kind::Quote,
            Tag::CodeBlock(_) => Kind::Code,
            Tag::HtmlBlock => Kind::Html,
            Tag::List(start) => Kind::List(start),
            Tag::Item => Kind::Item,
            Tag::Table(aligns) => Kind::Table(aligns),
            Tag::TableHead | Tag::TableRow => Kind::Row,
            Tag::TableCell => Kind::Cell,
            Tag::Emphasis => Kind::Emphasis,
            Tag::Strong => Kind::Strong,
            Tag::Strikethrough => Kind::Strikethrough,
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => Kind::Link {
                url: dest_url.into_string(),
                auto: matches!(link_type, LinkType::Autolink | LinkType::Email),
                email: link_type == LinkType::Email,
            },
            Tag::Image { dest_url, .. } => Kind::Image {
                url: dest_url.into_string(),
            },
            _ => Kind::Other,
        }
    }

    /// Span-level: lives inside a paragraph.
    fn is_inline(&self) -> bool {
        matches!(
            self,
            Kind::Emphasis
                | Kind::Strong
                | Kind::Strikethrough
                | Kind::Link { .. }
                | Kind::Image { .. }
        )
    }

    /// Holds inlines directly.
    fn takes_inlines(&self) -> bool {
        self.is_inline()
            || matches!(
                self,
                Kind::Paragraph | Kind::ImplicitParagraph | Kind::Heading | Kind::Cell
            )
    }
}

#[derive(Debug)]
struct Frame {
    kind: Kind,
    range: Range<usize>,
    nodes: Vec<Node>,
    inlines: Vec<Inline>,
    text: String,
    items: Vec<Item>,
    task: Option<bool>,
    cells: Vec<Vec<Inline>>,
    rows: Vec<Vec<Vec<Inline>>>,
}

impl Frame {
    fn new(kind: Kind, range: Range<usize>) -> Self {
        Frame {
            kind,
            range,
            nodes: Vec::new(),
            inlines: Vec::new(),
            text: String::new(),
            items: Vec::new(),
            task: None,
            cells: Vec::new(),
            rows: Vec::new(),
        }
    }
}

/// Makes sure the top frame takes inlines: inside a tight list item (or
/// anywhere a block is expected) the text gets a paragraph of its own.
fn open_paragraph(stack: &mut Vec<Frame>, start: usize) {
    if stack
        .last()
        .is_some_and(|f| !f.kind.takes_inlines() && f.kind != Kind::Other)
    {
        stack.push(Frame::new(Kind::ImplicitParagraph, start..start));
    }
}

/// Ends the implicit paragraph on top, if there is one.
fn close_paragraph(stack: &mut Vec<Frame>) {
    if stack
        .last()
        .is_some_and(|f| f.kind == Kind::ImplicitParagraph)
    {
        close(stack);
    }
}

fn push_inline(stack: &mut Vec<Frame>, start: usize, inline: Inline) {
    open_paragraph(stack, start);
    if let Some(frame) = stack.last_mut() {
        // Adjacent text events are one text, so that a placeholder is never
        // split between two of them.
        match (frame.inlines.last_mut(), inline) {
            (Some(Inline::Text(text)), Inline::Text(more)) => text.push_str(&more),
            (_, inline) => frame.inlines.push(inline),
        }
    }
}

/// Pops the top frame (never the root) into its parent.
fn close(stack: &mut Vec<Frame>) {
    if stack.len() < 2 {
        return;
    }
    let (Some(frame), Some(parent)) = (stack.pop(), stack.last_mut()) else {
        return;
    };
    let start = frame.range.start;
    let node = |block| Node { start, block };
    match frame.kind {
        Kind::Root => {}
        Kind::Paragraph | Kind::ImplicitParagraph => {
            parent.nodes.push(node(Block::Paragraph(frame.inlines)));
        }
        Kind::Heading => parent.nodes.push(node(Block::Heading(frame.inlines))),
        Kind::Quote => parent.nodes.push(node(Block::Quote(frame.nodes))),
        Kind::Code => parent.nodes.push(node(Block::Code(frame.text))),
        Kind::Html => parent.nodes.push(node(Block::Html(frame.text))),
        Kind::List(first) => parent.nodes.push(node(Block::List {
            start: first,
            items: frame.items,
        })),
        Kind::Item => parent.items.push(Item {
            start,
            task: frame.task,
            children: frame.nodes,
        }),
        Kind::Table(aligns) => parent.nodes.push(node(Block::Table {
            aligns,
            rows: frame.rows,
        })),
        Kind::Row => parent.rows.push(frame.cells),
        Kind::Cell => parent.cells.push(frame.inlines),
        Kind::Emphasis => parent
            .inlines
            .push(Inline::Emphasis(frame.inlines, frame.range)),
        Kind::Strong => parent
            .inlines
            .push(Inline::Strong(frame.inlines, frame.range)),
        Kind::Strikethrough => parent
            .inlines
            .push(Inline::Strikethrough(frame.inlines, frame.range)),
        Kind::Link { url, auto, email } => parent.inlines.push(Inline::Link {
            url,
            auto,
            email,
            children: frame.inlines,
        }),
        Kind::Image { url } => parent.inlines.push(Inline::Image {
            url,
            alt: frame.inlines,
        }),
        Kind::Other => {
            parent.nodes.extend(frame.nodes);
            parent.inlines.extend(frame.inlines);
        }
    }
}
