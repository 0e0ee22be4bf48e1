//! The built-in GitHub tools the pack gives the model, and the `github.*`
//! host-endpoint operations subprocess tools and handlers call: both with
//! the channel's credentials and limited to the repositories the channel
//! serves.
//!
//! A call bound to a thread session acts on that pull request or issue
//! unless it names another (`repo`, `number`); an unbound call (a schedule
//! handler) names its own. Reads are `effect = "read"`; comments and
//! reviews are writes, refused in dry-run sessions.

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine;
use bdk_core::extension::{OperationCall, OperationError};
use bdk_core::project::github::repository_allowed;
use bdk_core::tool::{Effect, Tool, ToolContext, ToolOutput, ToolSource, ToolSpec};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{ApiError, ApiRequest, Method};
use crate::ingress::MARKER;
use crate::pack::{Inner, Pack};
use crate::thread::parse_key;

/// The host-endpoint operations the pack answers.
pub(crate) const OPERATIONS: &[&str] = &[
    "github.pr",
    "github.file",
    "github.comment",
    "github.review",
    "github.request",
];

/// The most diff text a read returns, in characters.
const MAX_DIFF_CHARS: usize = 60_000;
/// The most of one file's patch a read returns, in characters.
const MAX_PATCH_CHARS: usize = 8_000;
/// The most changed files a read lists.
const MAX_FILES: usize = 300;
/// The largest file `github_file_read` returns, in bytes.
const MAX_FILE_BYTES: usize = 200_000;

/// What a call asks for, whichever way it came.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Pr,
    File,
    Comment,
    Review,
}

impl Op {
    fn writes(self) -> bool {
        matches!(self, Op::Comment | Op::Review)
    }
}

/// The target of a call: a repository and, for most calls, a number.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Input {
    repo: Option<String>,
    number: Option<u64>,
    #[serde(default)]
    diff: Option<bool>,
    path: Option<String>,
    #[serde(rename = "ref")]
    git_ref: Option<String>,
    body: Option<String>,
    event: Option<String>,
    comments: Option<Vec<ReviewComment>>,
}

#[derive(Deserialize, serde::Serialize, Clone)]
#[serde(deny_unknown_fields)]
struct ReviewComment {
    path: String,
    line: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    side: Option<String>,
    body: String,
}

/// The four tools.
pub(crate) fn tools(inner: &Arc<Inner>) -> Vec<Arc<dyn Tool>> {
    let target = json!({
        "repo": {"type": "string", "description": "owner/name; defaults to this conversation's repository."},
        "number": {"type": "integer", "minimum": 1, "description": "The pull request or issue number; defaults to this conversation's."}
    });
    let with = |extra: Value| -> Value {
        let mut props = target.clone();
        if let (Some(p), Some(e)) = (props.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                p.insert(k.clone(), v.clone());
            }
        }
        props
    };
    let tool = |op: Op, spec: ToolSpec| -> Arc<dyn Tool> {
        Arc::new(GithubTool {
            inner: Arc::clone(inner),
            op,
            spec,
        })
    };
    vec![
        tool(
            Op::Pr,
            ToolSpec::server(
                "github_pr_read",
                "Read a pull request: its title, description, author, branches and head commit, \
                 the changed files with their patches, and the unified diff (long diffs are cut).",
                json!({
                    "type": "object",
                    "properties": with(json!({"diff": {"type": "boolean", "description": "Include the unified diff (default true)."}})),
                    "additionalProperties": false
                }),
                Effect::Read,
            ),
        ),
        tool(
            Op::File,
            ToolSpec::server(
                "github_file_read",
                "Read one file of the repository at a branch, tag or commit (default: the pull \
                 request's head commit, else the default branch).",
                json!({
                    "type": "object",
                    "properties": {
                        "repo": {"type": "string", "description": "owner/name; defaults to this conversation's repository."},
                        "path": {"type": "string", "minLength": 1, "description": "The file's path in the repository."},
                        "ref": {"type": "string", "description": "A branch, tag or commit SHA."}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
                Effect::Read,
            ),
        ),
        tool(
            Op::Comment,
            ToolSpec::server(
                "github_comment",
                "Post a comment (Markdown) on the pull request or issue.",
                json!({
                    "type": "object",
                    "properties": with(json!({"body": {"type": "string", "minLength": 1}})),
                    "required": ["body"],
                    "additionalProperties": false
                }),
                Effect::Write,
            ),
        ),
        tool(
            Op::Review,
            ToolSpec::server(
                "github_review",
                "Submit a review of the pull request: a summary, optional inline comments on \
                 lines of the diff, and COMMENT (default), APPROVE or REQUEST_CHANGES.",
                json!({
                    "type": "object",
                    "properties": with(json!({
                        "body": {"type": "string", "minLength": 1, "description": "The review's summary (Markdown)."},
                        "event": {"type": "string", "enum": ["COMMENT", "APPROVE", "REQUEST_CHANGES"]},
                        "comments": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "properties": {
                                    "path": {"type": "string", "minLength": 1},
                                    "line": {"type": "integer", "minimum": 1, "description": "The line in the file's new version (RIGHT) or old version (LEFT)."},
                                    "side": {"type": "string", "enum": ["LEFT", "RIGHT"]},
                                    "body": {"type": "string", "minLength": 1}
                                },
                                "required": ["path", "line", "body"],
                                "additionalProperties": false
                            }
                        }
                    })),
                    "required": ["body"],
                    "additionalProperties": false
                }),
                Effect::Write,
            ),
        ),
    ]
}

struct GithubTool {
    inner: Arc<Inner>,
    op: Op,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for GithubTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Builtin
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        let input: Input = match serde_json::from_value(input) {
            Ok(i) => i,
            Err(e) => return ToolOutput::error(format!("invalid input: {e}")),
        };
        match run(&self.inner, self.op, input, &ctx).await {
            Ok(v) => ToolOutput::ok(v),
            Err(e) => ToolOutput::error(e.to_string()),
        }
    }
}

/// Why a call failed, before or at GitHub.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("GitHub refused ({code}): {source}")]
    Api {
        code: &'static str,
        source: ApiError,
    },
}

impl From<ApiError> for CallError {
    fn from(source: ApiError) -> Self {
        CallError::Api {
            code: source.code(),
            source,
        }
    }
}

/// The thread key of the session a call is bound to, if it is a GitHub
/// thread session.
async fn session_thread(inner: &Inner, ctx: &ToolContext) -> Option<(String, u64)> {
    let id = ctx.session.id.as_ref()?;
    let store = inner.store()?;
    let record = store.get_session(id).await.ok()??;
    let key = record
        .continuation_token
        .strip_prefix(&format!("{}:", record.channel))?;
    inner.packs.contains_key(&record.channel).then_some(())?;
    parse_key(key)
}

async fn run(inner: &Inner, op: Op, input: Input, ctx: &ToolContext) -> Result<Value, CallError> {
    let pack = inner
        .pack_for(&ctx.session.channel)
        .ok_or_else(|| CallError::Unavailable("this agent has no GitHub channel".to_owned()))?;
    if op.writes() && ctx.dry_run {
        return Err(CallError::Invalid(
            "this session is a dry run: nothing is posted to GitHub".to_owned(),
        ));
    }
    let bound = session_thread(inner, ctx).await;
    let repo = input
        .repo
        .clone()
        .or_else(|| bound.as_ref().map(|(r, _)| r.clone()))
        .ok_or_else(|| CallError::Invalid("name the repository (`repo`: owner/name)".to_owned()))?;
    check_repo(pack, &repo)?;
    let number = || -> Result<u64, CallError> {
        input
            .number
            .or_else(|| {
                bound
                    .as_ref()
                    .filter(|(r, _)| r.eq_ignore_ascii_case(&repo))
                    .map(|(_, n)| *n)
            })
            .ok_or_else(|| {
                CallError::Invalid("name the pull request or issue (`number`)".to_owned())
            })
    };
    let client = pack.client()?;
    match op {
        Op::Pr => {
            let n = number()?;
            let pull = client
                .get(&format!("/repos/{repo}/pulls/{n}"), Some(&repo))
                .await?;
            let files = client
                .paginate(
                    &format!("/repos/{repo}/pulls/{n}/files"),
                    Some(&repo),
                    MAX_FILES,
                )
                .await?;
            let files: Vec<Value> = files
                .iter()
                .map(|f| {
                    let patch = f.get("patch").and_then(Value::as_str).unwrap_or("");
                    json!({
                        "filename": f.get("filename"),
                        "status": f.get("status"),
                        "additions": f.get("additions"),
                        "deletions": f.get("deletions"),
                        "patch": cut(patch, MAX_PATCH_CHARS),
                    })
                })
                .collect();
            let mut out = json!({
                "pull": {
                    "repo": repo,
                    "number": n,
                    "title": pull.get("title"),
                    "body": pull.get("body"),
                    "state": pull.get("state"),
                    "draft": pull.get("draft"),
                    "author": pull.pointer("/user/login"),
                    "head": {"ref": pull.pointer("/head/ref"), "sha": pull.pointer("/head/sha")},
                    "base": {"ref": pull.pointer("/base/ref"), "sha": pull.pointer("/base/sha")},
                    "url": pull.get("html_url"),
                    "additions": pull.get("additions"),
                    "deletions": pull.get("deletions"),
                    "changedFiles": pull.get("changed_files"),
                },
                "files": files,
            });
            if input.diff.unwrap_or(true) {
                let diff = client
                    .text(
                        &format!("/repos/{repo}/pulls/{n}"),
                        "application/vnd.github.diff",
                        Some(&repo),
                    )
                    .await?;
                out["diffTruncated"] = Value::Bool(diff.chars().count() > MAX_DIFF_CHARS);
                out["diff"] = Value::String(cut(&diff, MAX_DIFF_CHARS));
            }
            Ok(out)
        }
        Op::File => {
            let path = input
                .path
                .as_deref()
                .filter(|p| !p.trim().is_empty())
                .ok_or_else(|| CallError::Invalid("give the file's `path`".to_owned()))?;
            check_file_path(path)?;
            let git_ref = match &input.git_ref {
                Some(r) => Some(r.clone()),
                None => match bound
                    .as_ref()
                    .filter(|(r, _)| r.eq_ignore_ascii_case(&repo))
                {
                    Some((_, n)) => client
                        .get(&format!("/repos/{repo}/pulls/{n}"), Some(&repo))
                        .await
                        .ok()
                        .and_then(|p| {
                            p.pointer("/head/sha")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        }),
                    None => None,
                },
            };
            let mut url = format!("/repos/{repo}/contents/{}", encode_path(path));
            if let Some(r) = &git_ref {
                url.push_str(&format!("?ref={}", encode_component(r)));
            }
            let file = client.get(&url, Some(&repo)).await?;
            if file.get("type").and_then(Value::as_str) != Some("file") {
                return Err(CallError::Invalid(format!(
                    "`{path}` is not a file (it is a {})",
                    file.get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("directory")
                )));
            }
            let encoded: String = file
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| {
                    CallError::Invalid(format!("GitHub sent content that is not base64: {e}"))
                })?;
            let truncated = bytes.len() > MAX_FILE_BYTES;
            let bytes = &bytes[..bytes.len().min(MAX_FILE_BYTES)];
            let (encoding, content) = match std::str::from_utf8(bytes) {
                Ok(text) => ("utf-8", text.to_owned()),
                Err(e) if truncated && e.error_len().is_none() => {
                    // Cut inside a character: keep the whole ones.
                    (
                        "utf-8",
                        String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned(),
                    )
                }
                Err(_) => (
                    "base64",
                    base64::engine::general_purpose::STANDARD.encode(bytes),
                ),
            };
            Ok(json!({
                "repo": repo,
                "path": path,
                "ref": git_ref,
                "sha": file.get("sha"),
                "size": file.get("size"),
                "encoding": encoding,
                "content": content,
                "truncated": truncated,
            }))
        }
        Op::Comment => {
            let n = number()?;
            let body = nonblank(input.body.as_deref(), "body")?;
            let posted = client
                .send(
                    Method::Post,
                    &format!("/repos/{repo}/issues/{n}/comments"),
                    json!({"body": marked(body)}),
                    Some(&repo),
                )
                .await?;
            Ok(json!({"id": posted.get("id"), "url": posted.get("html_url")}))
        }
        Op::Review => {
            let n = number()?;
            let body = nonblank(input.body.as_deref(), "body")?;
            let event = input.event.as_deref().unwrap_or("COMMENT");
            if !["COMMENT", "APPROVE", "REQUEST_CHANGES"].contains(&event) {
                return Err(CallError::Invalid(format!(
                    "`event` must be COMMENT, APPROVE or REQUEST_CHANGES, not `{event}`"
                )));
            }
            let mut req = json!({"body": marked(body), "event": event});
            if let Some(comments) = &input.comments {
                req["comments"] = serde_json::to_value(comments).unwrap_or(Value::Null);
            }
            let posted = client
                .send(
                    Method::Post,
                    &format!("/repos/{repo}/pulls/{n}/reviews"),
                    req,
                    Some(&repo),
                )
                .await?;
            Ok(
                json!({"id": posted.get("id"), "url": posted.get("html_url"), "state": posted.get("state")}),
            )
        }
    }
}

fn nonblank<'a>(value: Option<&'a str>, key: &str) -> Result<&'a str, CallError> {
    value
        .filter(|v| !v.trim().is_empty())
        .ok_or_else(|| CallError::Invalid(format!("`{key}` must not be empty")))
}

/// The comment with the pack's marker, so the pack never wakes on it.
fn marked(body: &str) -> String {
    format!("{body}\n\n{MARKER} tool -->")
}

/// Refuses repositories the channel does not serve, and names that are not
/// `owner/name`.
fn check_repo(pack: &Pack, repo: &str) -> Result<(), CallError> {
    let valid = repo.split_once('/').is_some_and(|(o, n)| {
        let part = |s: &str| {
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        part(o) && part(n)
    });
    if !valid {
        return Err(CallError::Invalid(format!(
            "`{repo}` is not a repository name (owner/name)"
        )));
    }
    if !repository_allowed(&pack.settings.repositories, repo) {
        return Err(CallError::Invalid(format!(
            "repository `{repo}` is not served by channel `{}`",
            pack.name
        )));
    }
    Ok(())
}

fn check_file_path(path: &str) -> Result<(), CallError> {
    let bad = path.starts_with('/')
        || path
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
        || path.chars().any(char::is_control);
    if bad {
        return Err(CallError::Invalid(format!(
            "`{path}` is not a path inside the repository"
        )));
    }
    Ok(())
}

/// Percent-encodes one URL component (RFC 3986 unreserved characters stay).
fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encodes a repository path, keeping its `/`.
fn encode_path(path: &str) -> String {
    path.split('/')
        .map(encode_component)
        .collect::<Vec<_>>()
        .join("/")
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}\n…(cut)", &text[..at]),
        None => text.to_owned(),
    }
}

/// `github.*`: the same calls for subprocess tools and handlers, plus
/// `github.request`, any REST call under one of the channel's repositories.
pub(crate) async fn operation(
    inner: &Inner,
    call: OperationCall<'_>,
) -> Result<Value, OperationError> {
    let op = match call.op {
        "github.pr" => Op::Pr,
        "github.file" => Op::File,
        "github.comment" => Op::Comment,
        "github.review" => Op::Review,
        "github.request" => return request(inner, call).await,
        other => {
            return Err(OperationError::Unavailable(format!(
                "`{other}` is not a GitHub operation"
            )));
        }
    };
    if op.writes() && call.ctx.dry_run {
        return Err(OperationError::DryRun(call.op.to_owned()));
    }
    let input: Input = serde_json::from_value(call.args)
        .map_err(|e| OperationError::InvalidArgs(format!("invalid args for `{}`: {e}", call.op)))?;
    run(inner, op, input, call.ctx).await.map_err(|e| match e {
        CallError::Invalid(m) => OperationError::InvalidArgs(m),
        CallError::Unavailable(m) => OperationError::Unavailable(m),
        api @ CallError::Api { .. } => OperationError::Unavailable(api.to_string()),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRequest {
    #[serde(default = "get")]
    method: String,
    path: String,
    #[serde(default)]
    body: Option<Value>,
    #[serde(default)]
    accept: Option<String>,
}

fn get() -> String {
    "GET".to_owned()
}

/// `github.request`: `{method, path, body?, accept?}` where `path` is under
/// `/repos/<owner>/<name>` of a repository the channel serves.
async fn request(inner: &Inner, call: OperationCall<'_>) -> Result<Value, OperationError> {
    let raw: RawRequest = serde_json::from_value(call.args).map_err(|e| {
        OperationError::InvalidArgs(format!("invalid args for `github.request`: {e}"))
    })?;
    let method = match raw.method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PATCH" => Method::Patch,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        other => {
            return Err(OperationError::InvalidArgs(format!(
                "`method` must be GET, POST, PATCH, PUT or DELETE, not `{other}`"
            )));
        }
    };
    if method != Method::Get && call.ctx.dry_run {
        return Err(OperationError::DryRun("github.request".to_owned()));
    }
    let pack = inner.pack_for(&call.ctx.session.channel).ok_or_else(|| {
        OperationError::Unavailable("this agent has no GitHub channel".to_owned())
    })?;
    let (path_only, _query) = raw.path.split_once('?').unwrap_or((raw.path.as_str(), ""));
    let segments: Vec<&str> = path_only.split('/').collect();
    let under_repo = segments.len() >= 4
        && segments[0].is_empty()
        && segments[1] == "repos"
        && !raw.path.contains("..")
        && !raw.path.contains("//")
        && !segments.iter().any(|s| escapes_its_place(s))
        && !raw
            .path
            .chars()
            .any(|c| c.is_control() || c == '#' || c == '\\');
    if !under_repo {
        return Err(OperationError::InvalidArgs(format!(
            "`path` must be a REST path under /repos/<owner>/<name>, not `{}`",
            raw.path
        )));
    }
    let repo = format!("{}/{}", segments[2], segments[3]);
    check_repo(pack, &repo).map_err(|e| OperationError::InvalidArgs(e.to_string()))?;
    let client = pack
        .client()
        .map_err(|e| OperationError::Unavailable(e.to_string()))?;
    let answer = client
        .request(ApiRequest {
            method,
            path: raw.path.clone(),
            body: raw.body,
            accept: raw.accept,
            repo: Some(repo),
        })
        .await;
    match answer {
        Ok(r) => Ok(json!({"status": r.status, "body": r.body, "next": r.next})),
        Err(e) => Ok(json!({
            "status": e.status(),
            "error": e.code(),
            "message": e.to_string(),
        })),
    }
}

/// Whether a path segment, once percent-decoded as URL parsers do, is a
/// dot segment or holds a separator: `%2e%2e` would walk the request out
/// of the repository (and carry the token to any other API path).
fn escapes_its_place(segment: &str) -> bool {
    let bytes = segment.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            // Two hex digits are at most 0xff.
            decoded.push(u8::try_from(h * 16 + l).unwrap_or(u8::MAX));
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    decoded == b"." || decoded == b".." || decoded.iter().any(|b| matches!(b, b'/' | b'\\'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_dot_segments_and_separators_are_caught() {
        for bad in ["%2e%2e", "%2E.", ".%2e", "%2e", "a%2fb", "a%5Cb", ".."] {
            assert!(escapes_its_place(bad), "{bad}");
        }
        for good in ["issues", "a%20b.txt", "...", "%2e%2e%2e", "v1.2", "%zz"] {
            assert!(!escapes_its_place(good), "{good}");
        }
    }

    #[test]
    fn paths_are_encoded_and_checked() {
        assert_eq!(encode_path("src/a b.rs"), "src/a%20b.rs");
        assert_eq!(encode_component("feature/x"), "feature%2Fx");
        assert!(check_file_path("src/lib.rs").is_ok());
        for bad in ["/etc/passwd", "a/../b", "a//b", "./a", "a\nb"] {
            assert!(check_file_path(bad).is_err(), "{bad}");
        }
    }
}
