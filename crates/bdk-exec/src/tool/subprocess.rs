//! Manifest tools that run outside Rust: a subprocess ([`CommandTool`]) or an
//! HTTP endpoint ([`UrlTool`]). Processes run through the crate's process
//! runner, which the built-in shell and `Containment::run` share.
//!
//! The wire contract is the same for both: one JSON request
//! `{"input": ..., "context": {...}}` (on stdin, or as the POST body), and the
//! result on stdout (or in the response body): a JSON value, plain text, or the
//! envelope `{"content": ..., "isError": bool}` (whose `content` may be MCP
//! content blocks, see [`crate::tool::content`]). Subprocesses start in the
//! tool's folder from an empty environment plus the allowlist of
//! [`crate::containment`], in a process group of their own, and, when the
//! host has a sandbox, contained by it: the tool reads the system and its
//! folder, writes its workspace and a temp dir of its own (`TMPDIR`), and is
//! the first process of a PID namespace, so a timeout, a cancellation or an
//! output flood kills every process the tool started, detached ones too; the
//! tree never outlives the call. When the caller offers host services, a
//! command tool also gets `BDK_HOST_SOCKET` and a per-call `BDK_HOST_TOKEN`
//! for the host endpoint (`bdk_core::endpoint`).

use std::collections::BTreeMap;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::SecondsFormat;
use serde_json::{Map, Value, json};

use crate::containment::{Containment, Grants};
use crate::grant::{SOCKET_ENV, TOKEN_ENV};
use crate::process::{ProcessEnd, ProcessSpec, Tail, run_process, temp_env};
use crate::tool::{Tool, ToolContext, ToolOutput, ToolSource, ToolSpec, content};
use bdk_project::{ToolManifest, ToolRunner};

/// The largest response body a `url` tool may return.
pub const MAX_URL_RESPONSE_BYTES: usize = 1024 * 1024;

/// How much of a non-2xx response body is quoted in the error.
const ERROR_EXCERPT_CHARS: usize = 500;

// Error-message prefixes of failures worth retrying. `is_transient` only sees
// the output, so the kind of failure is recognized by how its message starts.
const TIMED_OUT: &str = "tool timed out after ";
const KILLED_BY_SIGNAL: &str = "tool was killed by signal ";
const CONNECTION_FAILED: &str = "tool endpoint connection failed: ";
const SERVER_ERROR: &str = "tool endpoint returned status 5";
const TRANSIENT_PREFIXES: [&str; 4] =
    [TIMED_OUT, KILLED_BY_SIGNAL, CONNECTION_FAILED, SERVER_ERROR];

/// Builds the host-callable tool for a manifest: a [`CommandTool`] for
/// `command = [...]`, a [`UrlTool`] for `url`, `None` for agent-execution
/// scripts (they run in the session workspace, never on the host). Command
/// tools run under `containment`; `lib` is the agent's shared code folder,
/// readable by every tool.
pub fn from_manifest(
    m: &ToolManifest,
    default_timeout: Duration,
    containment: &Containment,
    lib: Option<&Path>,
) -> Option<Arc<dyn Tool>> {
    let timeout = m.spec.timeout(default_timeout);
    match &m.runner {
        ToolRunner::Command {
            argv,
            env,
            pass_env,
            sandbox,
            max_output_bytes,
        } => {
            let mut read = vec![m.dir.clone()];
            read.extend(lib.map(Path::to_path_buf));
            // A program named by path elsewhere in the agent folder is
            // readable too (its folder is not: that is the author's to grant).
            if let Some(program) = argv.first().filter(|p| p.contains('/')) {
                read.push(resolve_program(&m.dir, program));
            }
            Some(Arc::new(CommandTool {
                spec: m.spec.clone(),
                dir: m.dir.clone(),
                argv: argv.clone(),
                env: env.clone(),
                max_output_bytes: *max_output_bytes,
                timeout,
                containment: containment.clone(),
                grants: Grants {
                    mode: *sandbox,
                    read,
                    pass_env: pass_env.clone(),
                    ..Grants::default()
                },
            }))
        }
        ToolRunner::Url { url, headers } => Some(Arc::new(UrlTool {
            spec: m.spec.clone(),
            url: url.clone(),
            headers: headers.clone(),
            timeout,
        })),
        ToolRunner::Script { .. } => None,
    }
}

/// A tool run as a subprocess in its folder: the request on stdin, the result
/// on stdout.
///
/// Deliberately not `Debug`: its manifest `env` may carry secrets.
pub struct CommandTool {
    spec: ToolSpec,
    dir: PathBuf,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    max_output_bytes: usize,
    timeout: Duration,
    containment: Containment,
    /// What every call may reach (its folder, pass-through variables); the
    /// workspace, temp dir and socket are added per call.
    grants: Grants,
}

#[async_trait]
impl Tool for CommandTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Manifest
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        let Some((program, args)) = self.argv.split_first() else {
            return ToolOutput::error("tool command is empty");
        };
        let mut stdin = request_body(&input, &ctx).to_string().into_bytes();
        stdin.push(b'\n');
        let scratch = match self
            .containment
            .scratch(&ctx.state_root, &ctx.call_id)
            .await
        {
            Ok(dir) => dir,
            Err(e) => {
                return ToolOutput::error(format!("failed to create the tool's temp dir: {e}"));
            }
        };
        let mut env = self.containment.env(&self.grants.pass_env);
        env.extend(self.env.iter().map(|(k, v)| (k.clone(), v.clone())));
        env.extend(context_env(&ctx));
        env.extend(temp_env(scratch.path()));
        // The host endpoint capability for this call. It is held until
        // `run_process` returns, which is after the leader is reaped and its
        // process tree killed, so the token dies with the last process that
        // could have used it.
        let grant = match &ctx.services {
            Some(services) => services.endpoint(&ctx).await,
            None => None,
        };
        let mut grants = self.grants.clone();
        grants.write = vec![ctx.workspace_dir.clone(), scratch.path().to_path_buf()];
        if let Some(grant) = &grant {
            env.push((
                SOCKET_ENV.to_owned(),
                grant.socket.to_string_lossy().into_owned(),
            ));
            env.push((TOKEN_ENV.to_owned(), grant.token.clone()));
            grants.sockets.push(grant.socket.clone());
        }
        let spec = ProcessSpec {
            program: resolve_program(&self.dir, program),
            args: args.to_vec(),
            cwd: self.dir.clone(),
            env,
            stdin: Some(stdin),
            max_stdout: self.max_output_bytes,
            timeout: self.timeout,
            sandbox: self.containment.call(&grants),
        };
        let contained = spec.sandbox.is_some();
        let end = run_process(spec, &ctx.cancel).await;
        drop(grant);
        scratch.finish(self.containment.tree_gone(contained, &end));
        match end {
            ProcessEnd::Exited {
                status,
                stdout,
                stderr,
            } => {
                if status.success() {
                    parse_result(stdout)
                } else if contained && looks_denied(&stderr) {
                    ToolOutput::error(format!("{}{SANDBOX_HINT}", exit_message(status, &stderr)))
                } else {
                    ToolOutput::error(exit_message(status, &stderr))
                }
            }
            ProcessEnd::TimedOut => ToolOutput::error(timed_out_message(self.timeout)),
            ProcessEnd::Cancelled => ToolOutput::error("tool call cancelled"),
            ProcessEnd::OutputExceeded { .. } => ToolOutput::error(format!(
                "tool output exceeded {} bytes",
                self.max_output_bytes
            )),
            ProcessEnd::SpawnFailed(e) => ToolOutput::error(spawn_failed_message(program, &e)),
            ProcessEnd::Failed(e) => ToolOutput::error(format!("tool i/o failed: {e}")),
            ProcessEnd::LimitReached { limit } => ToolOutput::error(limit_message(&limit)),
        }
    }

    fn is_transient(&self, output: &ToolOutput) -> bool {
        is_transient_output(output)
    }
}

/// A tool served by an HTTP endpoint: the request is POSTed as JSON, the
/// response body is the result.
///
/// Deliberately not `Debug`: its manifest headers may carry secrets.
pub struct UrlTool {
    spec: ToolSpec,
    url: String,
    headers: BTreeMap<String, String>,
    timeout: Duration,
}

#[async_trait]
impl Tool for UrlTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn source(&self) -> ToolSource {
        ToolSource::Manifest
    }

    async fn call(&self, input: Value, ctx: ToolContext) -> ToolOutput {
        if ctx.cancel.is_cancelled() {
            return ToolOutput::error("tool call cancelled");
        }
        let client = match bdk_models::net::http_client() {
            Ok(client) => client,
            Err(e) => return ToolOutput::error(format!("tool endpoint unavailable: {e}")),
        };
        let mut request = client.post(&self.url).json(&request_body(&input, &ctx));
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        let exchange = async {
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) if e.is_builder() => {
                    return ToolOutput::error(format!("invalid tool request: {}", error_chain(&e)));
                }
                Err(e) => {
                    return ToolOutput::error(format!("{CONNECTION_FAILED}{}", error_chain(&e)));
                }
            };
            let status = response.status();
            // A declared length over the cap fails without reading the body.
            if status.is_success()
                && response
                    .content_length()
                    .is_some_and(|len| len > MAX_URL_RESPONSE_BYTES as u64)
            {
                return ToolOutput::error(format!(
                    "tool output exceeded {MAX_URL_RESPONSE_BYTES} bytes"
                ));
            }
            let cap = if status.is_success() {
                MAX_URL_RESPONSE_BYTES
            } else {
                // Only an excerpt is quoted; the UTF-8 bound of the excerpt is
                // at most four bytes per character.
                ERROR_EXCERPT_CHARS * 4
            };
            let (body, over) = match read_response_capped(response, cap).await {
                Ok(read) => read,
                Err(e) => {
                    return ToolOutput::error(format!("{CONNECTION_FAILED}{}", error_chain(&e)));
                }
            };
            if !status.is_success() {
                let text = String::from_utf8_lossy(&body);
                let excerpt: String = text.trim().chars().take(ERROR_EXCERPT_CHARS).collect();
                return ToolOutput::error(format!(
                    "tool endpoint returned status {}: {excerpt}",
                    status.as_u16()
                ));
            }
            if over {
                return ToolOutput::error(format!(
                    "tool output exceeded {MAX_URL_RESPONSE_BYTES} bytes"
                ));
            }
            parse_result(body)
        };
        tokio::select! {
            output = exchange => output,
            () = tokio::time::sleep(self.timeout) => ToolOutput::error(timed_out_message(self.timeout)),
            () = ctx.cancel.cancelled() => ToolOutput::error("tool call cancelled"),
        }
    }

    fn is_transient(&self, output: &ToolOutput) -> bool {
        is_transient_output(output)
    }
}

/// Reads at most `cap` bytes of a response body; the flag says whether more
/// was sent (the rest is not read).
async fn read_response_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<(Vec<u8>, bool), reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > cap {
            let take = cap - body.len();
            body.extend_from_slice(&chunk[..take]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// An error and its causes, `: `-joined: reqwest's own message alone rarely
/// says what went wrong.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// True for failures worth retrying: timeouts, signal deaths the runtime did
/// not cause, connection failures and 5xx answers.
pub(crate) fn is_transient_output(output: &ToolOutput) -> bool {
    output.is_error
        && matches!(&output.content, Value::String(s)
            if TRANSIENT_PREFIXES.iter().any(|p| s.starts_with(p)))
}

/// The JSON request a tool receives: its input and the call context.
pub(crate) fn request_body(input: &Value, ctx: &ToolContext) -> Value {
    json!({
        "input": input,
        "context": {
            "callId": ctx.call_id,
            "sessionId": ctx.session.id.as_ref().map(|id| id.as_str()),
            "channel": ctx.session.channel,
            "mode": ctx.session.mode,
            "principal": ctx.session.principal,
            "workspaceDir": ctx.workspace_dir.to_string_lossy(),
            "stateRoot": ctx.state_root.to_string_lossy(),
            "now": now_string(ctx),
            "asOfPinned": ctx.as_of_pinned,
            "dryRun": ctx.dry_run,
            "approvedBy": ctx.approved_by,
        }
    })
}

fn now_string(ctx: &ToolContext) -> String {
    ctx.now.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The `BDK_*` variables a subprocess sees.
pub(crate) fn context_env(ctx: &ToolContext) -> Vec<(String, String)> {
    let mut env = vec![
        ("BDK_CALL_ID".to_owned(), ctx.call_id.clone()),
        (
            "BDK_WORKSPACE_DIR".to_owned(),
            ctx.workspace_dir.to_string_lossy().into_owned(),
        ),
        (
            "BDK_STATE_ROOT".to_owned(),
            ctx.state_root.to_string_lossy().into_owned(),
        ),
        ("BDK_NOW".to_owned(), now_string(ctx)),
        (
            "BDK_DRY_RUN".to_owned(),
            if ctx.dry_run { "1" } else { "0" }.to_owned(),
        ),
    ];
    if let Some(id) = &ctx.session.id {
        env.push(("BDK_SESSION_ID".to_owned(), id.to_string()));
    }
    env
}

/// Appended to the error of a contained tool that failed on a permission.
pub(crate) const SANDBOX_HINT: &str = " (the tool runs in the sandbox: it can read the system and its own folder and write its workspace and $TMPDIR; grant more with [sandbox] read/write in agent.toml, see docs/security.md)";

/// True when a failed program's stderr blames a permission.
pub(crate) fn looks_denied(stderr: &Tail) -> bool {
    let text = String::from_utf8_lossy(&stderr.bytes);
    text.contains("Permission denied") || text.contains("Operation not permitted")
}

/// The program to start: names with a `/` are paths relative to the tool's
/// folder (resolved here, because std leaves relative programs with a changed
/// working directory unspecified); bare names are looked up on PATH.
pub(crate) fn resolve_program(dir: &Path, program: &str) -> PathBuf {
    let path = Path::new(program);
    if program.contains('/') && path.is_relative() {
        dir.join(path)
    } else {
        path.to_path_buf()
    }
}

fn spawn_failed_message(program: &str, e: &io::Error) -> String {
    let hint = match e.kind() {
        io::ErrorKind::NotFound if program.contains('/') => {
            "; paths containing '/' are relative to the tool's folder"
        }
        io::ErrorKind::NotFound => "; is it installed and on PATH?",
        io::ErrorKind::PermissionDenied => "; is the file executable (chmod +x)?",
        _ => "",
    };
    format!("failed to start tool program `{program}`: {e}{hint}")
}

/// The error of a call a sandbox limit stopped. Not transient: the same
/// call would reach the same limit again.
pub(crate) fn limit_message(limit: &str) -> String {
    format!("{limit} reached; the tool was stopped (raise it under [sandbox] in agent.toml)")
}

fn timed_out_message(timeout: Duration) -> String {
    format!("{TIMED_OUT}{} ms", timeout.as_millis())
}

fn exit_message(status: ExitStatus, stderr: &Tail) -> String {
    let head = if let Some(code) = status.code() {
        format!("tool exited with status {code}")
    } else if let Some(signal) = status.signal() {
        format!("{KILLED_BY_SIGNAL}{signal}")
    } else {
        "tool exited abnormally".to_owned()
    };
    let tail = stderr.text();
    if tail.is_empty() {
        head
    } else {
        format!("{head}: {tail}")
    }
}

/// Interprets a tool's successful output: empty is `""`; JSON is the result,
/// except the envelope `{content, isError?, structuredContent?}`: it sets
/// the error flag, and a `content` of MCP content blocks makes a rich result
/// ([`super::content`]); any other text is passed verbatim without its
/// trailing newline.
pub(crate) fn parse_result(bytes: Vec<u8>) -> ToolOutput {
    let Ok(text) = String::from_utf8(bytes) else {
        return ToolOutput::error("tool output is not valid UTF-8");
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return ToolOutput::ok("");
    }
    match serde_json::from_str::<Value>(trimmed) {
        Ok(Value::Object(map)) => envelope(map),
        Ok(value) => ToolOutput::ok(value),
        Err(_) => ToolOutput::ok(text.trim_end_matches(['\n', '\r']).to_owned()),
    }
}

/// The output an object stands for: the envelope's when it is exactly one,
/// else the object itself as the result.
fn envelope(mut map: Map<String, Value>) -> ToolOutput {
    let is_error = match map.get("isError") {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => None,
    };
    let only_envelope_keys = map
        .keys()
        .all(|k| matches!(k.as_str(), "content" | "isError" | "structuredContent"));
    let (Some(is_error), true, Some(content)) = (is_error, only_envelope_keys, map.get("content"))
    else {
        return ToolOutput::ok(Value::Object(map));
    };
    match content::parse_blocks(content) {
        Some(blocks) => content::output(blocks, map.remove("structuredContent"), is_error),
        // Structured content goes with content blocks only.
        None if map.contains_key("structuredContent") => ToolOutput::ok(Value::Object(map)),
        None => ToolOutput {
            content: map.remove("content").unwrap_or_default(),
            is_error,
            blocks: Vec::new(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_result_shapes() {
        assert_eq!(parse_result(b"".to_vec()), ToolOutput::ok(""));
        assert_eq!(parse_result(b" \n".to_vec()), ToolOutput::ok(""));
        assert_eq!(
            parse_result(b"{\"a\":1}\n".to_vec()),
            ToolOutput::ok(json!({"a": 1}))
        );
        assert_eq!(parse_result(b"hello\n".to_vec()), ToolOutput::ok("hello"));
        assert_eq!(
            parse_result(b"\"quoted\"".to_vec()),
            ToolOutput::ok("quoted")
        );
        assert_eq!(
            parse_result(br#"{"content":[1],"isError":true}"#.to_vec()),
            ToolOutput {
                content: json!([1]),
                is_error: true,
                blocks: Vec::new(),
            }
        );
        // Content blocks make a rich result; structured content then is
        // what the model sees.
        let rich = parse_result(
            br#"{"content":[{"type":"text","text":"hi"},{"type":"image","data":"AAAA","mimeType":"image/png"}],"structuredContent":{"n":1}}"#
                .to_vec(),
        );
        assert_eq!(rich.content, json!({"n": 1}));
        assert_eq!(rich.blocks.len(), 2);
        let rich = parse_result(br#"{"content":[{"type":"text","text":"hi"}],"isError":true,"structuredContent":{"n":1}}"#.to_vec());
        assert_eq!((rich.content, rich.is_error), (json!("hi"), true));
        // Structured content without blocks is no envelope.
        assert_eq!(
            parse_result(br#"{"content":"x","structuredContent":{"n":1}}"#.to_vec()),
            ToolOutput::ok(json!({"content": "x", "structuredContent": {"n": 1}}))
        );
        // Not an envelope: an extra key, or a non-boolean flag.
        assert_eq!(
            parse_result(br#"{"content":1,"other":2}"#.to_vec()),
            ToolOutput::ok(json!({"content": 1, "other": 2}))
        );
        assert_eq!(
            parse_result(br#"{"content":1,"isError":"yes"}"#.to_vec()),
            ToolOutput::ok(json!({"content": 1, "isError": "yes"}))
        );
        assert!(parse_result(vec![0xff, 0xfe]).is_error);
    }

    #[test]
    fn transient_only_for_runtime_failures() {
        assert!(is_transient_output(&ToolOutput::error(timed_out_message(
            Duration::from_millis(5)
        ))));
        assert!(is_transient_output(&ToolOutput::error(
            "tool endpoint returned status 503: busy"
        )));
        assert!(!is_transient_output(&ToolOutput::error(
            "tool endpoint returned status 404: nope"
        )));
        assert!(!is_transient_output(&ToolOutput::error(
            "tool exited with status 1"
        )));
        assert!(!is_transient_output(&ToolOutput::ok(timed_out_message(
            Duration::from_millis(5)
        ))));
    }

    #[test]
    fn relative_programs_resolve_against_the_tool_folder() {
        let dir = Path::new("/agent/tools");
        assert_eq!(
            resolve_program(dir, "./run.sh"),
            Path::new("/agent/tools/./run.sh")
        );
        assert_eq!(
            resolve_program(dir, "bin/run"),
            Path::new("/agent/tools/bin/run")
        );
        assert_eq!(resolve_program(dir, "python3"), Path::new("python3"));
        assert_eq!(
            resolve_program(dir, "/usr/bin/env"),
            Path::new("/usr/bin/env")
        );
    }
}
