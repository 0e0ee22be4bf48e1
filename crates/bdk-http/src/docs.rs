//! `/docs`: the user documentation, embedded at build time (see `build.rs`)
//! and rendered from Markdown to HTML on request. No auth: it holds nothing
//! about the running agents.
//!
//! `/docs` redirects to `/docs/`, which serves `README.md`; `/docs/<page>`
//! serves `<page>` or `<page>.md`. Relative links between pages work as
//! written in the Markdown, because every page is served at its own path.

use axum::Router;
use axum::extract::Path;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use pulldown_cmark::{Options, Parser, html};

use crate::discovery::escape;
use crate::error::ApiError;

include!(concat!(env!("OUT_DIR"), "/docs_pages.rs"));

/// The docs routes.
pub(crate) fn routes() -> Router {
    Router::new()
        .route("/docs", get(|| async { Redirect::permanent("/docs/") }))
        .route("/docs/", get(|| async { page("README.md") }))
        .route("/docs/{*path}", get(by_path))
}

async fn by_path(path: Result<Path<String>, axum::extract::rejection::PathRejection>) -> Response {
    let Ok(Path(path)) = path else {
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
    ApiError::not_found("not_found", "no documentation page at this path")
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
    html::push_html(&mut body, Parser::new_ext(markdown, options));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_sorted_for_lookup() {
        assert!(PAGES.windows(2).all(|w| w[0].0 < w[1].0));
    }

    #[test]
    fn renders_tables_and_title() {
        let html = render("x.md", "# Hello <you>\n\n| a | b |\n| - | - |\n| 1 | 2 |\n");
        assert!(html.contains("<title>Hello &lt;you&gt; · BDK docs</title>"));
        assert!(html.contains("<table>"));
    }
}
