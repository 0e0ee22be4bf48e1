//! `/docs`: the user documentation, embedded at build time (see `build.rs`)
//! and rendered from Markdown to HTML on request. No auth: it holds nothing
//! about the running agents.
//!
//! `/docs` redirects to `/docs/`, which serves `README.md`; `/docs/<page>`
//! serves `<page>` or `<page>.md`; the project's `README.md` and
//! `ARCHITECTURE.md` are served as `/docs/project/...`. Links are written
//! for reading the files in the repository (`../README.md` from a page in
//! `docs/`), so rendering resolves each relative link against the page's
//! place in the repository and points it at the served copy. Headings get
//! the ids GitHub gives them, so `page.md#section` links land too.

use aide::axum::ApiRouter;
use aide::axum::routing::get_with;
use axum::extract::Path;
use axum::response::{Html, IntoResponse, Redirect, Response};
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{Describe, open};
use crate::discovery::escape;
use crate::error::{ApiError, ErrorCode};

include!(concat!(env!("OUT_DIR"), "/docs_pages.rs"));

/// The path of a page.
#[derive(Deserialize, JsonSchema)]
#[schemars(inline)]
struct PagePath {
    /// The page, for example `http-api` or `http-api.md`; it may span
    /// several segments.
    path: String,
}

fn html_doc(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"text/html": {"schema": {"type": "string"}}},
    })
}

/// The docs routes. None runs auth.
pub(crate) fn routes() -> ApiRouter {
    let routes = ApiRouter::new()
        .api_route(
            "/docs",
            get_with(redirect, |op| {
                op.doc(
                    "docsRedirect",
                    "docs",
                    "The documentation",
                    "Redirects to `/docs/`. Absent with `--no-docs`.",
                )
                .raw_response(
                    308,
                    json!({
                        "description": "A permanent redirect.",
                        "headers": {"Location": {"schema": {"type": "string", "const": "/docs/"}}},
                    }),
                )
            }),
        )
        .api_route(
            "/docs/",
            get_with(index, |op| {
                op.doc(
                    "docsIndex",
                    "docs",
                    "The documentation index",
                    "The documentation's index page, rendered from Markdown. Absent with `--no-docs`.",
                )
                .raw_response(200, html_doc("The index page."))
            }),
        )
        .api_route(
            "/docs/{*path}",
            get_with(by_path, |op| {
                op.doc(
                    "docsPage",
                    "docs",
                    "One documentation page",
                    "A page of the documentation, named with or without `.md`, rendered from Markdown. Absent with `--no-docs`.",
                )
                .raw_response(200, html_doc("The page."))
                .errors(&[ErrorCode::NotFound])
            }),
        );
    open(routes)
}

async fn redirect() -> Redirect {
    Redirect::permanent("/docs/")
}

async fn index() -> Response {
    page("README.md")
}

async fn by_path(
    path: Result<Path<PagePath>, axum::extract::rejection::PathRejection>,
) -> Response {
    let Ok(Path(PagePath { path })) = path else {
        return missing().into_response();
    };
    let candidates = if path.ends_with('/') {
        vec![format!("{path}README.md")]
    } else {
        vec![path.clone(), format!("{path}.md")]
    };
    for candidate in candidates {
        if lookup(&candidate).is_some() {
            return page(&candidate);
        }
    }
    missing().into_response()
}

fn missing() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no documentation page at this path")
}

fn lookup(path: &str) -> Option<&'static str> {
    PAGES
        .binary_search_by(|(p, _)| (*p).cmp(path))
        .ok()
        .map(|i| PAGES[i].1)
}

fn page(path: &str) -> Response {
    let Some(markdown) = lookup(path) else {
        return missing().into_response();
    };
    Html(render(path, markdown)).into_response()
}

fn render(path: &str, markdown: &str) -> String {
    let title = markdown
        .lines()
        .find_map(|l| l.strip_prefix("# "))
        .unwrap_or(path)
        .trim();
    let mut body = String::new();
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_HEADING_ATTRIBUTES;
    html::push_html(
        &mut body,
        served_events(path, markdown, options).into_iter(),
    );
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · BDK docs</title>\
         <style>body{{max-width:52rem;margin:2rem auto;padding:0 1rem;font:16px/1.5 system-ui,sans-serif}}\
         pre{{background:#f4f4f4;padding:.75rem;overflow:auto}}code{{font-size:.9em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.25rem .5rem;vertical-align:top}}</style>\
         </head>\n<body>\n<nav><a href=\"/docs/\">BDK docs</a></nav>\n{body}</body></html>\n",
        escape(title)
    )
}

/// The page's events with links pointed at the served pages and ids on
/// headings.
fn served_events<'a>(path: &str, markdown: &'a str, options: Options) -> Vec<Event<'a>> {
    let mut events: Vec<Event<'a>> = Parser::new_ext(markdown, options)
        .map(|event| match event {
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                title,
                id,
            }) => Event::Start(Tag::Link {
                link_type,
                dest_url: served_link(path, &dest_url).map_or(dest_url, CowStr::from),
                title,
                id,
            }),
            other => other,
        })
        .collect();
    let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut i = 0;
    while i < events.len() {
        if let Event::Start(Tag::Heading { id: None, .. }) = &events[i] {
            let mut text = String::new();
            let mut j = i + 1;
            while j < events.len() && !matches!(events[j], Event::End(TagEnd::Heading(_))) {
                if let Event::Text(t) | Event::Code(t) = &events[j] {
                    text.push_str(t);
                }
                j += 1;
            }
            let base = heading_slug(&text);
            let n = seen.entry(base.clone()).or_insert(0);
            let slug = if *n == 0 { base } else { format!("{base}-{n}") };
            *n += 1;
            if let Event::Start(Tag::Heading { id, .. }) = &mut events[i] {
                *id = Some(CowStr::from(slug));
            }
        }
        i += 1;
    }
    events
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn heading_slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Where a relative link of the page at `path` points once served: `None`
/// for absolute URLs, fragments and links to files that are not served.
fn served_link(path: &str, dest: &str) -> Option<String> {
    if dest.is_empty()
        || dest.starts_with('#')
        || dest.starts_with('/')
        || dest.contains("://")
        || dest.starts_with("mailto:")
    {
        return None;
    }
    let (target, fragment) = match dest.split_once('#') {
        Some((t, f)) => (t, Some(f)),
        None => (dest, None),
    };
    // The page's place in the repository.
    let repo_path = match path.strip_prefix("project/") {
        Some(root_file) => root_file.to_owned(),
        None => format!("docs/{path}"),
    };
    let mut parts: Vec<&str> = repo_path.split('/').collect();
    parts.pop();
    for segment in target.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    let resolved = parts.join("/");
    let served = if let Some(page) = resolved.strip_prefix("docs/") {
        lookup(page).map(|_| format!("/docs/{page}"))
    } else if resolved == "docs" {
        Some("/docs/".to_owned())
    } else {
        let page = format!("project/{resolved}");
        lookup(&page).map(|_| format!("/docs/{page}"))
    }?;
    Some(match fragment {
        Some(f) => format!("{served}#{f}"),
        None => served,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_sorted_for_lookup() {
        assert!(PAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn links_point_at_the_served_pages() {
        assert_eq!(
            served_link("README.md", "../README.md").as_deref(),
            Some("/docs/project/README.md")
        );
        assert_eq!(
            served_link("project/README.md", "docs/cli.md#exit-codes").as_deref(),
            Some("/docs/cli.md#exit-codes")
        );
        assert_eq!(
            served_link("design/turn-loop.md", "../http-api.md").as_deref(),
            Some("/docs/http-api.md")
        );
        assert_eq!(served_link("cli.md", "#exit-codes"), None);
        assert_eq!(served_link("cli.md", "https://example.com/x.md"), None);
        assert_eq!(served_link("cli.md", "../../../etc/passwd"), None);
        assert_eq!(served_link("cli.md", "../crates/bdk-cli/src/main.rs"), None);
    }

    #[test]
    fn headings_get_github_ids() {
        let html = render(
            "x.md",
            "# Exit codes\n\n## `bdk run`: one turn\n\n## Exit codes\n",
        );
        assert!(html.contains("<h1 id=\"exit-codes\">"), "{html}");
        assert!(html.contains("<h2 id=\"bdk-run-one-turn\">"), "{html}");
        assert!(html.contains("<h2 id=\"exit-codes-1\">"), "{html}");
    }

    #[test]
    fn renders_tables_and_title() {
        let html = render("x.md", "# Hello <you>\n\n| a | b |\n| - | - |\n| 1 | 2 |\n");
        assert!(html.contains("<title>Hello &lt;you&gt; · BDK docs</title>"));
        assert!(html.contains("<table>"));
    }
}
