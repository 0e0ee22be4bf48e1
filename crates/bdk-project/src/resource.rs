//! Resources an agent folder publishes to MCP callers (`agent/resources.toml`):
//! fixed resources served from a file of the agent folder, and resource
//! templates whose reads call a tool of the agent.
//!
//! Discovery checks the declarations (`discover/resources.rs`); the MCP
//! server (`bdk-mcp`) serves them. The URI template grammar lives here so
//! that `bdk validate` and the server agree on what a template matches.

use std::fmt;
use std::path::PathBuf;

use serde::{Serialize, Serializer};

/// The largest file a declared resource may serve: the most one MCP
/// `resources/read` returns.
pub const MAX_RESOURCE_BYTES: u64 = 16 * 1024 * 1024;

/// The longest URI or URI template a declaration may use; longer URIs name
/// nothing the server offers.
pub const MAX_URI_BYTES: usize = 4096;

/// The URI scheme of the server's own resources (sessions, skills), which
/// declarations may not use.
pub const RESERVED_SCHEME: &str = "bdk";

/// A fixed resource: a URI served from a file of the agent folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentResource {
    /// The absolute URI callers read (`docs://runbook`).
    pub uri: String,
    /// The resource's name in listings.
    pub name: String,
    /// A display name for people.
    pub title: Option<String>,
    /// What the resource holds.
    pub description: Option<String>,
    /// The declared media type; `None` lets the server guess from the
    /// file name and content.
    pub mime_type: Option<String>,
    /// The file, relative to the agent folder (`/`-separated). The server
    /// reads it on each request, confined to the agent folder.
    pub file: String,
}

/// A resource template: URIs that match `uri_template` are read by calling
/// `tool` with the template's variables as its input.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentResourceTemplate {
    /// The RFC 6570 (level 1) template (`test://items/{id}`).
    pub uri_template: UriTemplate,
    /// The template's name in listings.
    pub name: String,
    /// A display name for people.
    pub title: Option<String>,
    /// What the resources hold.
    pub description: Option<String>,
    /// The media type of the text the tool's result is served as
    /// (default `text/plain`).
    pub mime_type: Option<String>,
    /// The server tool a read calls.
    pub tool: String,
}

/// The declarations of `agent/resources.toml`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentResources {
    /// `[[resources]]`, in the order declared.
    pub resources: Vec<AgentResource>,
    /// `[[templates]]`, in the order declared.
    pub templates: Vec<AgentResourceTemplate>,
    /// The manifest, when there is one.
    pub path: Option<PathBuf>,
}

impl AgentResources {
    /// True when the agent declares nothing.
    pub fn is_empty(&self) -> bool {
        self.resources.is_empty() && self.templates.is_empty()
    }
}

/// One piece of a URI template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(String),
    Var(String),
}

/// A URI template of RFC 6570 level 1: literal text and simple `{name}`
/// expressions. A variable matches one non-empty run of characters other
/// than `/`, `?` and `#` (what simple expansion of a value can produce),
/// which is percent-decoded once.
#[derive(Clone, PartialEq, Eq)]
pub struct UriTemplate {
    raw: String,
    parts: Vec<Part>,
}

/// Why a URI template is refused; a message fragment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemplateError(pub String);

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl UriTemplate {
    /// Parses a template. Refused: text that is not an absolute URI, the
    /// operators and modifiers of levels 2-4 (`{+x}`, `{#x}`, `{x,y}`,
    /// `{x*}`, `{x:3}`), variable names other than letters, digits and `_`,
    /// a variable used twice, two variables with no literal text between
    /// them, unbalanced braces, and a template without a variable.
    pub fn parse(raw: &str) -> Result<Self, TemplateError> {
        let err = |m: String| Err(TemplateError(m));
        if let Err(why) = check_uri_text(raw) {
            return err(why);
        }
        let mut parts = Vec::new();
        let mut rest = raw;
        while !rest.is_empty() {
            let open = rest.find('{');
            let close = rest.find('}');
            match (open, close) {
                (None, None) => {
                    parts.push(Part::Literal(rest.to_owned()));
                    break;
                }
                (Some(o), Some(c)) if o < c => {
                    if o > 0 {
                        parts.push(Part::Literal(rest[..o].to_owned()));
                    }
                    let name = &rest[o + 1..c];
                    if name.contains('{') {
                        return err("`{` inside an expression".to_owned());
                    }
                    check_var(name)?;
                    if matches!(parts.last(), Some(Part::Var(_))) {
                        return err(format!(
                            "`{{{name}}}` follows another variable directly; put literal text between them"
                        ));
                    }
                    if parts.iter().any(|p| *p == Part::Var(name.to_owned())) {
                        return err(format!("variable `{name}` is used twice"));
                    }
                    parts.push(Part::Var(name.to_owned()));
                    rest = &rest[c + 1..];
                }
                _ => return err("unbalanced `{` or `}`".to_owned()),
            }
        }
        if !parts.iter().any(|p| matches!(p, Part::Var(_))) {
            return err("the template has no `{variable}`".to_owned());
        }
        // The scheme must be literal, so every URI it matches has it.
        match parts.first() {
            Some(Part::Literal(head)) if head.contains(':') => {}
            _ => return err("the scheme (`name:`) must be literal text".to_owned()),
        }
        Ok(Self {
            raw: raw.to_owned(),
            parts,
        })
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The variable names, in order.
    pub fn variables(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Var(name) => Some(name.as_str()),
            Part::Literal(_) => None,
        })
    }

    /// The URI's value of each variable when `uri` matches, percent-decoded
    /// once; `None` when it does not match. A variable takes the shortest
    /// run up to the literal text that follows it (or the rest of the URI),
    /// so matching is linear in the URI's length.
    pub fn matches(&self, uri: &str) -> Option<Vec<(String, String)>> {
        if uri.len() > MAX_URI_BYTES {
            return None;
        }
        let mut rest = uri;
        let mut out = Vec::new();
        let mut parts = self.parts.iter().peekable();
        while let Some(part) = parts.next() {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Var(name) => {
                    let end = match parts.peek() {
                        Some(Part::Literal(next)) => rest.find(next.as_str())?,
                        // `parse` refuses adjacent variables.
                        Some(Part::Var(_)) => return None,
                        None => rest.len(),
                    };
                    let raw = &rest[..end];
                    if raw.is_empty() || raw.contains(['/', '?', '#']) {
                        return None;
                    }
                    let value = percent_encoding::percent_decode_str(raw)
                        .decode_utf8()
                        .ok()?
                        .into_owned();
                    out.push((name.clone(), value));
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(out)
    }
}

impl fmt::Debug for UriTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UriTemplate({:?})", self.raw)
    }
}

impl fmt::Display for UriTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for UriTemplate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

fn check_var(name: &str) -> Result<(), TemplateError> {
    let err = |m: String| Err(TemplateError(m));
    if name.is_empty() {
        return err("an empty `{}` expression".to_owned());
    }
    if let Some(op) = name.chars().next().filter(|c| "+#./;?&=,!@|".contains(*c)) {
        return err(format!(
            "the `{op}` operator of `{{{name}}}` is not supported: only simple `{{name}}` expressions (RFC 6570 level 1)"
        ));
    }
    if name.contains([',', '*', ':']) {
        return err(format!(
            "`{{{name}}}` uses lists or modifiers: only simple `{{name}}` expressions (RFC 6570 level 1)"
        ));
    }
    if name.len() > 64 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return err(format!(
            "variable name `{name}` is invalid: use 1-64 letters, digits or `_`"
        ));
    }
    Ok(())
}

/// Checks that `uri` is an absolute URI: a scheme (a letter, then letters,
/// digits, `+`, `-` or `.`), a colon, something after it, no whitespace or
/// control characters, and not the reserved `bdk` scheme. The error is a
/// message fragment.
pub fn check_uri(uri: &str) -> Result<(), String> {
    check_uri_text(uri)
}

fn check_uri_text(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_URI_BYTES {
        return Err(format!("it is longer than {MAX_URI_BYTES} bytes"));
    }
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains whitespace or control characters".to_owned());
    }
    let Some((scheme, rest)) = uri.split_once(':') else {
        return Err("it has no scheme: write an absolute URI such as `docs://runbook`".to_owned());
    };
    let mut chars = scheme.chars();
    let scheme_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !scheme_ok {
        return Err(format!(
            "`{scheme}` is not a URI scheme: write an absolute URI such as `docs://runbook`"
        ));
    }
    if rest.is_empty() {
        return Err("nothing follows the scheme".to_owned());
    }
    if scheme.eq_ignore_ascii_case(RESERVED_SCHEME) {
        return Err(format!(
            "the `{RESERVED_SCHEME}:` scheme is reserved for the server's own resources (sessions, skills)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(t: &UriTemplate, uri: &str) -> Option<Vec<(String, String)>> {
        t.matches(uri)
    }

    fn pair(k: &str, v: &str) -> (String, String) {
        (k.to_owned(), v.to_owned())
    }

    #[test]
    fn level_one_templates_match_and_decode_once() {
        let t = UriTemplate::parse("test://template/{id}/data").unwrap();
        assert_eq!(t.variables().collect::<Vec<_>>(), ["id"]);
        assert_eq!(t.as_str(), "test://template/{id}/data");
        assert_eq!(
            vars(&t, "test://template/123/data"),
            Some(vec![pair("id", "123")])
        );
        assert_eq!(
            vars(&t, "test://template/a%20b/data"),
            Some(vec![pair("id", "a b")])
        );
        // Decoded once: an encoded `/` or `..` is a value, for the tool's
        // schema (and the server) to judge.
        assert_eq!(
            vars(&t, "test://template/a%2Fb/data"),
            Some(vec![pair("id", "a/b")])
        );
        assert_eq!(
            vars(&t, "test://template/%252e/data"),
            Some(vec![pair("id", "%2e")])
        );
        for miss in [
            "test://template//data",
            "test://template/a/b/data",
            "test://template/../data/data",
            "test://template/123/data/",
            "test://template/123/dat",
            "test://template/123",
            "test://template/1?x/data",
            "test://template/%ff/data",
            "other://template/1/data",
            "",
        ] {
            assert_eq!(vars(&t, miss), None, "{miss}");
        }
        let two = UriTemplate::parse("db://{table}/rows/{row}").unwrap();
        assert_eq!(
            vars(&two, "db://users/rows/7"),
            Some(vec![pair("table", "users"), pair("row", "7")])
        );
        assert_eq!(
            vars(&two, &format!("db://{}/rows/7", "a".repeat(5000))),
            None
        );
    }

    #[test]
    fn templates_beyond_level_one_are_refused() {
        for (raw, why) in [
            ("test://{+path}", "operator"),
            ("test://{#frag}", "operator"),
            ("test://{a,b}", "level 1"),
            ("test://{list*}", "level 1"),
            ("test://{x:3}", "level 1"),
            ("test://{a-b}", "invalid"),
            ("test://{}", "empty"),
            ("test://{a}{b}", "follows another variable"),
            ("test://{a}/{a}", "used twice"),
            ("test://{a", "unbalanced"),
            ("test://a}", "unbalanced"),
            ("test://{{a}}", "inside"),
            ("test://static", "no `{variable}`"),
            ("{scheme}://x", "scheme"),
            ("no-scheme/{id}", "scheme"),
            ("bdk://sessions/{id}", "reserved"),
            ("test://a b/{id}", "whitespace"),
        ] {
            let got = UriTemplate::parse(raw).unwrap_err().0;
            assert!(got.contains(why), "{raw}: {got}");
        }
    }

    #[test]
    fn absolute_uris() {
        for ok in [
            "test://static-text",
            "docs://runbook",
            "urn:isbn:0451450523",
            "x+y.z-w:a",
        ] {
            assert_eq!(check_uri(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("runbook", "no scheme"),
            ("://x", "not a URI scheme"),
            ("1x://y", "not a URI scheme"),
            ("docs:", "nothing follows"),
            ("docs://a b", "whitespace"),
            ("docs://a\nb", "whitespace"),
            ("BDK://sessions/x/events", "reserved"),
        ] {
            let got = check_uri(bad).unwrap_err();
            assert!(got.contains(why), "{bad}: {got}");
        }
    }
}
