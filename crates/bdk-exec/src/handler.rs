//! Handler programs: author code, in any language, that the host runs where
//! the agent meets the world (a schedule's fire, a channel route's request).
//!
//! A handler runs the way a command tool runs: started in its folder from an
//! empty environment plus the allowlist and what its manifest passes, under
//! the host's containment, with a timeout and a cap on stdout, and with the
//! host endpoint in its environment (`BDK_HOST_SOCKET`, `BDK_HOST_TOKEN`) for
//! side effects: send into sessions, read them, call tools, kv, files. It
//! reads one JSON object on stdin and answers one JSON object on stdout.
//!
//! [`HandlerCall`] says who runs it (the kind, the principal its endpoint
//! token carries, the session it is bound to, if any); `Host::run_handler`
//! (in `host/handlers.rs`) runs it and returns the answer object or a
//! [`HandlerError`] that says exactly what went wrong. Whoever runs a handler
//! decides what its answer means; the failures are the same for every kind.
//!
//! A Rust program that embeds bdk may write a handler in Rust instead: a
//! [`NativeHandler`] registered with `HostBuilder::handler(name, ..)` and
//! named by the manifest as `handler = "name"`. It gets the same request
//! (with `kind` and `context`) and answers the same object; instead of the
//! endpoint it holds the same host services as [`ToolServices`], with the
//! same reach, and it runs under the same timeout and cancellation.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::containment::{Containment, Grants};
use crate::grant::{EndpointGrant, SOCKET_ENV, TOKEN_ENV};
use crate::process::{ProcessEnd, ProcessSpec, run_process, temp_env};
use crate::tool::subprocess::resolve_program;
use crate::tool::{ToolContext, ToolServices};
use bdk_project::{HandlerCommand, HandlerSpec, Project, ScheduleAction};

/// How much of a handler's garbled stdout an error quotes.
const EXCERPT_CHARS: usize = 200;

/// One run of a handler: who runs it and what it is asked.
#[derive(Clone, Debug)]
pub struct HandlerCall {
    /// What kind of handler this is (`schedule`, `route`): the request's
    /// `kind`, and the prefix of its call id.
    pub kind: &'static str,
    /// The request, a JSON object; the runner adds `kind` and `context`.
    pub request: Map<String, Value>,
    /// The principal its endpoint token acts as (`schedule:<name>`, a
    /// route's authenticated caller); `None` for an anonymous caller, who
    /// reaches only sessions nobody owns.
    pub principal: Option<String>,
    /// The channel it acts for (`schedule`, a channel's name): the default
    /// channel of `send` by key.
    pub channel: String,
    /// The session the run is bound to, if any (a handler that acts on one
    /// conversation): its endpoint token then carries that session, as a
    /// tool call's does (`artifacts.tag`, `reminders.*` act on it; the
    /// session services refuse it as a target), and a dry-run session's
    /// refusals apply.
    pub session: Option<bdk_events::SessionId>,
    /// Fires when the run must stop (the caller went away); the host's
    /// shutdown stops it too.
    pub cancel: CancellationToken,
}

/// Why a handler gave no answer. Each has a stable code for records and
/// HTTP answers ([`HandlerError::code`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandlerError {
    /// The program could not be started.
    #[error("handler `{program}` could not start: {reason}")]
    Spawn {
        /// The program as written.
        program: String,
        /// Why, with a hint.
        reason: String,
    },
    /// It exited with a failure status (or was killed by a signal).
    #[error("handler `{program}` {how}{}", stderr_suffix(.stderr))]
    Exited {
        /// The program as written.
        program: String,
        /// `exited with status 3`, `was killed by signal 9`.
        how: String,
        /// The end of its stderr.
        stderr: String,
    },
    /// It ran past its timeout and was stopped with everything it started.
    #[error("handler `{program}` did not answer within {} s and was stopped", .timeout.as_secs_f64())]
    TimedOut {
        /// The program as written.
        program: String,
        /// Its limit.
        timeout: Duration,
    },
    /// A resource limit of the sandbox stopped it.
    #[error("handler `{program}` reached its {limit} and was stopped")]
    LimitReached {
        /// The program as written.
        program: String,
        /// The limit (`memory limit of 1 GiB`).
        limit: String,
    },
    /// It wrote more than its stdout cap and was stopped.
    #[error("handler `{program}` wrote more than {limit} bytes to stdout and was stopped")]
    OutputExceeded {
        /// The program as written.
        program: String,
        /// The cap.
        limit: usize,
    },
    /// It exited cleanly but its stdout is not one JSON object.
    #[error("handler `{program}` must print one JSON object on stdout; {found}")]
    BadAnswer {
        /// The program as written.
        program: String,
        /// What it printed instead.
        found: String,
    },
    /// The run was cancelled (shutdown, or the caller went away).
    #[error("handler `{program}` was cancelled")]
    Cancelled {
        /// The program as written.
        program: String,
    },
    /// Running it failed on the host's side (temp dir, pipes, sandbox).
    #[error("handler `{program}` could not run: {reason}")]
    Failed {
        /// The program as written.
        program: String,
        /// Why.
        reason: String,
    },
}

/// What a native handler is handed for one run.
pub struct NativeRequest {
    /// The request, exactly as a program reads it on stdin (with `kind`
    /// and `context`).
    pub request: Map<String, Value>,
    /// The host services (send, session reads and waits, tool calls, kv
    /// through the store...), with the reach of the call's principal.
    pub services: Arc<dyn ToolServices>,
    /// The context those services take (its `cancel` fires when the run
    /// must stop).
    pub ctx: ToolContext,
}

/// A handler written in Rust by a program that embeds bdk (see the module
/// docs). Its failures are [`HandlerError`]s, like a program's.
#[async_trait]
pub trait NativeHandler: Send + Sync + 'static {
    /// Answers one request with one JSON object.
    async fn handle(&self, request: NativeRequest) -> Result<Map<String, Value>, HandlerError>;
}

/// Every native handler `project` names, with where: `schedule `x``,
/// `channel `c` route POST /p`.
pub fn native_names(project: &Project) -> Vec<(String, String)> {
    let schedules = project.schedules.iter().filter_map(|s| match &s.action {
        ScheduleAction::Handler {
            handler: HandlerSpec::Native { name, .. },
        } => Some((format!("schedule `{}`", s.name), name.clone())),
        _ => None,
    });
    let routes = project.channels.iter().flat_map(|c| {
        c.routes.iter().filter_map(move |r| match &r.handler {
            Some(bdk_project::RouteHandler {
                handler: HandlerSpec::Native { name, .. },
                ..
            }) => Some((format!("channel `{}` route {r}", c.name), name.clone())),
            _ => None,
        })
    });
    schedules.chain(routes).collect()
}

fn stderr_suffix(stderr: &str) -> String {
    if stderr.is_empty() {
        String::new()
    } else {
        format!(": {stderr}")
    }
}

impl HandlerError {
    /// A stable code: `handler_spawn_failed`, `handler_exited`,
    /// `handler_timeout`, `handler_output_exceeded`, `handler_bad_answer`,
    /// `handler_cancelled`, `handler_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            HandlerError::Spawn { .. } => "handler_spawn_failed",
            HandlerError::Exited { .. } => "handler_exited",
            HandlerError::TimedOut { .. } => "handler_timeout",
            HandlerError::OutputExceeded { .. } => "handler_output_exceeded",
            HandlerError::LimitReached { .. } => "handler_limit_reached",
            HandlerError::BadAnswer { .. } => "handler_bad_answer",
            HandlerError::Cancelled { .. } => "handler_cancelled",
            HandlerError::Failed { .. } => "handler_failed",
        }
    }
}

/// What the host hands the runner for one run.
pub struct Run<'a> {
    pub command: &'a HandlerCommand,
    pub containment: &'a Containment,
    /// The agent's shared code (`lib/`), readable by every program.
    pub lib: Option<PathBuf>,
    /// Where its temp dir goes (`<state_root>/tmp/<call id>`).
    pub state_root: &'a Path,
    /// Folders it may write besides its temp dir (a result gate's session
    /// workspace, as for a tool of that session).
    pub write: Vec<PathBuf>,
    pub call_id: &'a str,
    /// The request line, without its newline.
    pub stdin: Vec<u8>,
    /// The endpoint capability for this run, when the host has one.
    pub grant: Option<&'a EndpointGrant>,
    pub cancel: &'a CancellationToken,
}

/// Runs a handler program once and reads its answer.
pub async fn run(run: Run<'_>) -> Result<Map<String, Value>, HandlerError> {
    let command = run.command;
    let program = command.program().to_owned();
    let Some((name, args)) = command.argv.split_first() else {
        return Err(HandlerError::Spawn {
            program,
            reason: "the command is empty".to_owned(),
        });
    };
    let scratch = run
        .containment
        .scratch(run.state_root, run.call_id)
        .await
        .map_err(|e| HandlerError::Failed {
            program: program.clone(),
            reason: format!("cannot create its temp dir: {e}"),
        })?;
    let mut env = run.containment.env(&command.pass_env);
    env.extend(command.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.push(("BDK_CALL_ID".to_owned(), run.call_id.to_owned()));
    env.extend(temp_env(scratch.path()));
    let mut read = vec![command.dir.clone()];
    read.extend(run.lib);
    let resolved = resolve_program(&command.dir, name);
    if name.contains('/') {
        read.push(resolved.clone());
    }
    let mut write = vec![scratch.path().to_path_buf()];
    write.extend(run.write);
    let mut grants = Grants {
        mode: command.sandbox,
        read,
        write,
        ..Grants::default()
    };
    if let Some(grant) = run.grant {
        env.push((
            SOCKET_ENV.to_owned(),
            grant.socket.to_string_lossy().into_owned(),
        ));
        env.push((TOKEN_ENV.to_owned(), grant.token.clone()));
        grants.sockets.push(grant.socket.clone());
    }
    let mut stdin = run.stdin;
    stdin.push(b'\n');
    let spec = ProcessSpec {
        program: resolved,
        args: args.to_vec(),
        cwd: command.dir.clone(),
        env,
        stdin: Some(stdin),
        max_stdout: command.max_output_bytes,
        timeout: command.timeout,
        sandbox: run.containment.call(&grants),
    };
    let contained = spec.sandbox.is_some();
    let end = run_process(spec, run.cancel).await;
    scratch.finish(run.containment.tree_gone(contained, &end));
    match end {
        ProcessEnd::Exited { status, stdout, .. } if status.success() => answer(&program, &stdout),
        ProcessEnd::Exited { status, stderr, .. } => Err(HandlerError::Exited {
            program,
            how: exit_how(status),
            stderr: stderr.text(),
        }),
        ProcessEnd::TimedOut => Err(HandlerError::TimedOut {
            program,
            timeout: command.timeout,
        }),
        ProcessEnd::OutputExceeded { .. } => Err(HandlerError::OutputExceeded {
            program,
            limit: command.max_output_bytes,
        }),
        ProcessEnd::Cancelled => Err(HandlerError::Cancelled { program }),
        ProcessEnd::LimitReached { limit } => Err(HandlerError::LimitReached { program, limit }),
        ProcessEnd::SpawnFailed(e) => {
            let hint = match e.kind() {
                std::io::ErrorKind::NotFound if name.contains('/') => {
                    "; paths containing '/' are relative to the handler's folder"
                }
                std::io::ErrorKind::NotFound => "; is it installed and on PATH?",
                std::io::ErrorKind::PermissionDenied => "; is the file executable (chmod +x)?",
                _ => "",
            };
            Err(HandlerError::Spawn {
                program,
                reason: format!("{e}{hint}"),
            })
        }
        ProcessEnd::Failed(e) => Err(HandlerError::Failed {
            program,
            reason: e.to_string(),
        }),
    }
}

/// The answer on stdout: one JSON object, surrounding whitespace allowed.
fn answer(program: &str, stdout: &[u8]) -> Result<Map<String, Value>, HandlerError> {
    let bad = |found: String| HandlerError::BadAnswer {
        program: program.to_owned(),
        found,
    };
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        return Err(bad("it printed nothing".to_owned()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(bad(format!("it printed {}", json_kind(&other)))),
        Err(e) => Err(bad(format!(
            "it printed `{}` ({e})",
            excerpt(text, EXCERPT_CHARS)
        ))),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

fn exit_how(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(signal) = status.signal() {
        format!("was killed by signal {signal}")
    } else {
        "exited abnormally".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_one_json_object() {
        assert_eq!(
            answer("h", b"  {\"ok\": true}\n").ok(),
            serde_json::json!({"ok": true}).as_object().cloned()
        );
        for (stdout, says) in [
            (&b""[..], "it printed nothing"),
            (b"\n  \n", "it printed nothing"),
            (b"[1]", "it printed an array"),
            (b"\"done\"", "it printed a string"),
            (b"done", "it printed `done`"),
            (b"{\"a\":1}{\"b\":2}", "it printed `{\"a\":1}{\"b\":2}`"),
        ] {
            let e = answer("h", stdout).expect_err("not an object");
            assert_eq!(e.code(), "handler_bad_answer");
            assert!(e.to_string().contains(says), "{e}");
        }
    }

    #[test]
    fn long_garbage_is_quoted_short() {
        let noise = "x".repeat(10_000);
        let e = answer("h", noise.as_bytes()).expect_err("garbage");
        assert!(e.to_string().len() < 600, "{}", e.to_string().len());
    }
}
