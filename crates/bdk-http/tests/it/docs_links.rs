#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The documentation cannot rot quietly:
//!
//! - every relative link in `docs/`, `README.md` and `ARCHITECTURE.md`
//!   names a file that exists, and every `#fragment` a heading of its
//!   target;
//! - every route a page names as `` `METHOD /path` `` is one the router
//!   serves with that method (checked against the OpenAPI document, which
//!   `tests/it/openapi.rs` holds equal to the registered routes);
//! - the pages as served under `/docs/` link only to pages that answer 200,
//!   at anchors those pages carry.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

use crate::common;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Every Markdown page the checks cover: `docs/**/*.md`, `README.md`,
/// `ARCHITECTURE.md`.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let root = repo();
    let mut out = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    walk(&root.join("docs"), &mut out);
    out.sort();
    out
}

/// GitHub's anchor for a heading.
fn slug(text: &str) -> String {
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

struct Page {
    links: Vec<String>,
    anchors: BTreeSet<String>,
    /// Inline code spans, where routes are named.
    code: Vec<String>,
}

fn parse(text: &str) -> Page {
    let mut page = Page {
        links: Vec::new(),
        anchors: BTreeSet::new(),
        code: Vec::new(),
    };
    let mut heading: Option<String> = None;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for event in Parser::new_ext(
        text,
        Options::ENABLE_TABLES | Options::ENABLE_HEADING_ATTRIBUTES,
    ) {
        match event {
            Event::Start(Tag::Link { dest_url, .. }) => page.links.push(dest_url.to_string()),
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::End(TagEnd::Heading(_)) => {
                let base = slug(&heading.take().unwrap_or_default());
                let n = seen.entry(base.clone()).or_insert(0);
                page.anchors
                    .insert(if *n == 0 { base } else { format!("{base}-{n}") });
                *n += 1;
            }
            Event::Text(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
                page.code.push(t.to_string());
            }
            _ => {}
        }
    }
    page
}

fn is_external(link: &str) -> bool {
    link.contains("://") || link.starts_with("mailto:")
}

#[test]
fn relative_links_and_anchors_resolve_in_the_repository() {
    let root = repo();
    let mut problems = Vec::new();
    for path in pages() {
        let text = std::fs::read_to_string(&path).unwrap();
        let page = parse(&text);
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        for link in &page.links {
            if is_external(link) {
                continue;
            }
            let (target, fragment) = match link.split_once('#') {
                Some((t, f)) => (t, Some(f)),
                None => (link.as_str(), None),
            };
            let target_path = if target.is_empty() {
                path.clone()
            } else if target.starts_with('/') {
                problems.push(format!("{rel}: `{link}` is absolute; link relatively"));
                continue;
            } else {
                path.parent().unwrap().join(target)
            };
            let Ok(resolved) = target_path.canonicalize() else {
                problems.push(format!("{rel}: `{link}` names no file"));
                continue;
            };
            if !resolved.starts_with(&root) {
                problems.push(format!("{rel}: `{link}` leaves the repository"));
                continue;
            }
            if let Some(fragment) = fragment
                && resolved.extension().is_some_and(|e| e == "md")
            {
                let anchors = parse(&std::fs::read_to_string(&resolved).unwrap()).anchors;
                if !anchors.contains(fragment) {
                    problems.push(format!("{rel}: `{link}`: no heading `#{fragment}` there"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `(method, path)` for each `` `METHOD /path` `` the page names, with
/// parameters (`:id`, `<id>`, `{id}`) as `{}` and the query dropped.
fn named_routes(code: &[String]) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for span in code {
        let mut words = span.split_whitespace();
        let (Some(method), Some(path)) = (words.next(), words.next()) else {
            continue;
        };
        if !["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method) {
            continue;
        }
        let path = path.strip_prefix("<base>").unwrap_or(path);
        if !path.starts_with('/') {
            // `GET .../stream`: a shorthand the sentence around it explains.
            continue;
        }
        let path = path.split('?').next().unwrap_or(path);
        out.push((method.to_lowercase(), normalize(path), span.clone()));
    }
    out
}

fn normalize(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with(':')
                || (segment.starts_with('<') && segment.ends_with('>'))
                || (segment.starts_with('{') && segment.ends_with('}'))
            {
                "{}"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn every_route_the_docs_name_is_served() {
    let doc = bdk_http::openapi::document();
    let mut served: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if !method.starts_with("x-") && method != "servers" {
                served.insert((method.clone(), normalize(path)));
            }
        }
    }
    let root = repo();
    let mut problems = Vec::new();
    let mut checked = 0;
    for path in pages() {
        let page = parse(&std::fs::read_to_string(&path).unwrap());
        let rel = path.strip_prefix(&root).unwrap().display().to_string();
        for (method, route, span) in named_routes(&page.code) {
            checked += 1;
            if !served.contains(&(method, route)) {
                problems.push(format!("{rel}: `{span}` is not a route the server has"));
            }
        }
    }
    assert!(checked > 50, "only {checked} routes found in the docs");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn served_pages_link_to_served_pages_and_anchors() {
    let s = common::single(Default::default()).await;
    let http = &s.http;
    let mut queue = vec!["/docs/".to_owned()];
    let mut visited: BTreeMap<String, String> = BTreeMap::new();
    while let Some(url) = queue.pop() {
        if visited.contains_key(&url) {
            continue;
        }
        let resp = http.get(format!("{}{url}", s.base)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200, "{url}");
        let html = resp.text().await.unwrap();
        for href in hrefs(&html) {
            let page = href.split('#').next().unwrap_or(&href);
            if page.starts_with("/docs/") && !visited.contains_key(page) {
                queue.push(page.to_owned());
            }
        }
        visited.insert(url, html);
    }
    assert!(
        visited.contains_key("/docs/project/README.md")
            && visited.contains_key("/docs/project/ARCHITECTURE.md"),
        "{:?}",
        visited.keys()
    );
    let mut problems = Vec::new();
    for (url, html) in &visited {
        for href in hrefs(html) {
            if is_external(&href) {
                continue;
            }
            let (page, fragment) = match href.split_once('#') {
                Some((p, f)) => (if p.is_empty() { url.as_str() } else { p }, Some(f)),
                None => (href.as_str(), None),
            };
            if !page.starts_with("/docs/") {
                // A link to a source file, which only the repository has.
                if page.starts_with('/') {
                    problems.push(format!("{url}: `{href}` is not a docs page"));
                }
                continue;
            }
            let Some(target) = visited.get(page) else {
                problems.push(format!("{url}: `{href}` was not served"));
                continue;
            };
            if let Some(f) = fragment
                && !target.contains(&format!("id=\"{f}\""))
            {
                problems.push(format!("{url}: `{href}`: no element with that id"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn hrefs(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|h| !h.is_empty())
        .map(|h| h.replace("&amp;", "&"))
        .collect()
}
