#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Manifest tools that run outside Rust: subprocess (`command`) and HTTP
//! (`url`) tools, driven through the `Tool` trait as the runtime drives them.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bdk_core::project::{ToolManifest, ToolRunner};
use bdk_core::tool::subprocess;
use bdk_core::tool::{Effect, Execution, SessionInfo, Tool, ToolContext, ToolOutput, ToolSpec};
use bdk_events::{SessionId, SessionMode};
use chrono::{TimeZone, Utc};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

fn ctx(workspace: &Path) -> ToolContext {
    ToolContext {
        call_id: "call_test123".to_owned(),
        session: SessionInfo {
            id: Some(SessionId::from_string("ses_abc")),
            channel: "http".to_owned(),
            mode: SessionMode::Task,
            principal: Some("alice".to_owned()),
        },
        workspace_dir: workspace.to_path_buf(),
        trees: Default::default(),
        state_root: workspace.join("state"),
        now: Utc.with_ymd_and_hms(2026, 3, 4, 5, 6, 7).unwrap(),
        as_of_pinned: true,
        dry_run: true,
        approved_by: Some("bob".to_owned()),
        cancel: CancellationToken::new(),
        services: None,
        reporter: None,
    }
}

fn spec(name: &str, timeout_ms: Option<u64>) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        title: None,
        description: "test tool".to_owned(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
        effect: Effect::Read,
        execution: Execution::Server,
        needs_approval: false,
        timeout_ms,
    }
}

/// A tool folder holding `script` as an executable `tool.sh`.
struct CommandFixture {
    dir: tempfile::TempDir,
    tool: Arc<dyn Tool>,
}

fn command_tool(script: &str, timeout_ms: Option<u64>, max_output_bytes: usize) -> CommandFixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tool.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let tool = tool_from_argv(
        dir.path(),
        &["./tool.sh"],
        BTreeMap::new(),
        timeout_ms,
        max_output_bytes,
    );
    CommandFixture { dir, tool }
}

fn tool_from_argv(
    dir: &Path,
    argv: &[&str],
    env: BTreeMap<String, String>,
    timeout_ms: Option<u64>,
    max_output_bytes: usize,
) -> Arc<dyn Tool> {
    let manifest = ToolManifest {
        path: dir.join("tool.toml"),
        dir: dir.to_path_buf(),
        spec: spec("tool", timeout_ms),
        runner: ToolRunner::Command {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            env,
            pass_env: Vec::new(),
            sandbox: Default::default(),
            max_output_bytes,
        },
    };
    subprocess::from_manifest(&manifest, DEFAULT_TIMEOUT, &Default::default(), None).unwrap()
}

async fn run(fixture: &CommandFixture, input: Value) -> ToolOutput {
    fixture.tool.call(input, ctx(fixture.dir.path())).await
}

fn error_text(output: &ToolOutput) -> &str {
    assert!(output.is_error, "expected an error, got {output:?}");
    output.content.as_str().unwrap()
}

/// True once `pid` no longer runs (gone, or a zombie waiting for its reaper).
fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the parenthesized command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Polls for a condition that has no event to await: the death of a process
/// signalled by the code under test, or a file a subprocess writes.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    bdk_testkit::poll::until(what, || std::future::ready(check())).await;
}

async fn read_pid(path: PathBuf) -> u32 {
    eventually("the pid file", || {
        std::fs::read_to_string(&path).is_ok_and(|s| s.ends_with('\n'))
    })
    .await;
    std::fs::read_to_string(&path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn json_value_result() {
    let fixture = command_tool(
        r#"cat >/dev/null; echo '{"city": "Paris", "tempC": 21}'"#,
        None,
        1 << 20,
    );
    let output = run(&fixture, json!({"city": "Paris"})).await;
    assert_eq!(
        output,
        ToolOutput::ok(json!({"city": "Paris", "tempC": 21}))
    );
}

#[tokio::test]
async fn json_string_result() {
    let fixture = command_tool(r#"cat >/dev/null; echo '"sunny"'"#, None, 1 << 20);
    assert_eq!(run(&fixture, json!({})).await, ToolOutput::ok("sunny"));
}

#[tokio::test]
async fn plain_text_result_is_verbatim_without_the_trailing_newline() {
    let fixture = command_tool(
        r#"cat >/dev/null; printf 'line one\n  {not json}\n'"#,
        None,
        1 << 20,
    );
    assert_eq!(
        run(&fixture, json!({})).await,
        ToolOutput::ok("line one\n  {not json}")
    );
}

#[tokio::test]
async fn empty_output_is_an_empty_string() {
    let fixture = command_tool("cat >/dev/null", None, 1 << 20);
    assert_eq!(run(&fixture, json!({})).await, ToolOutput::ok(""));
}

#[tokio::test]
async fn envelope_sets_the_error_flag() {
    let fixture = command_tool(
        r#"cat >/dev/null; echo '{"content": [{"type": "text", "text": "no such city"}], "isError": true}'"#,
        None,
        1 << 20,
    );
    let output = run(&fixture, json!({})).await;
    assert_eq!(
        output,
        ToolOutput {
            content: json!("no such city"),
            is_error: true,
            blocks: vec![json!({"type": "text", "text": "no such city"})],
        }
    );
    // A tool's own error result is not a transient failure.
    assert!(!fixture.tool.is_transient(&output));

    let fixture = command_tool(r#"echo '{"content": "fine"}'"#, None, 1 << 20);
    assert_eq!(run(&fixture, json!({})).await, ToolOutput::ok("fine"));
}

#[tokio::test]
async fn non_zero_exit_reports_status_and_stderr() {
    let fixture = command_tool(
        "echo 'partial' ; echo 'bad input: city' >&2; exit 3",
        None,
        1 << 20,
    );
    let output = run(&fixture, json!({})).await;
    assert_eq!(
        error_text(&output),
        "tool exited with status 3: bad input: city"
    );
    assert!(!fixture.tool.is_transient(&output));
}

#[tokio::test]
async fn stderr_keeps_only_its_tail() {
    // 20 KiB of 'a' and then the real reason: only the end survives.
    let fixture = command_tool(
        "head -c 20480 /dev/zero | tr '\\0' a >&2; echo ' the reason' >&2; exit 1",
        None,
        1 << 20,
    );
    let text = error_text(&run(&fixture, json!({})).await).to_owned();
    assert!(
        text.starts_with("tool exited with status 1: ...aaa"),
        "{}",
        &text[..60]
    );
    assert!(text.ends_with("the reason"));
    assert!(
        text.len() < 9 * 1024,
        "stderr tail too long: {}",
        text.len()
    );
}

#[tokio::test]
async fn death_by_signal_is_transient() {
    let fixture = command_tool("kill -TERM $$; sleep 5", None, 1 << 20);
    let output = run(&fixture, json!({})).await;
    assert_eq!(error_text(&output), "tool was killed by signal 15");
    assert!(fixture.tool.is_transient(&output));
}

#[tokio::test]
async fn hanging_tool_is_killed_with_its_children_on_timeout() {
    let fixture = command_tool(
        "echo $$ > leader.pid; sh -c 'sleep 100' & echo $! > child.pid; sleep 100",
        Some(1500),
        1 << 20,
    );
    let started = Instant::now();
    let output = run(&fixture, json!({})).await;
    assert_eq!(error_text(&output), "tool timed out after 1500 ms");
    assert!(fixture.tool.is_transient(&output));
    // Promptly: nowhere near the 100 s the tool wanted.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    let leader = read_pid(fixture.dir.path().join("leader.pid")).await;
    let child = read_pid(fixture.dir.path().join("child.pid")).await;
    eventually("the tool process to die", || is_dead(leader)).await;
    eventually("the tool's child to die", || is_dead(child)).await;
}

#[tokio::test]
async fn background_job_does_not_outlive_a_finished_tool() {
    // The tool answers and exits, leaving a job that holds no pipe.
    let fixture = command_tool(
        "sleep 100 >/dev/null 2>&1 & echo $! > job.pid; echo done",
        None,
        1 << 20,
    );
    let output = run(&fixture, json!({})).await;
    assert_eq!(output, ToolOutput::ok("done"));
    let job = read_pid(fixture.dir.path().join("job.pid")).await;
    eventually("the background job to die", || is_dead(job)).await;
}

#[tokio::test]
async fn background_job_holding_stdout_does_not_stall_the_result() {
    // The job inherits stdout; without killing the group after the tool
    // exits, reading stdout would wait for the job (and hit the timeout).
    let fixture = command_tool("sleep 100 & echo done", Some(20_000), 1 << 20);
    let started = Instant::now();
    let output = run(&fixture, json!({})).await;
    assert_eq!(output, ToolOutput::ok("done"));
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn stdout_flood_is_capped_and_killed() {
    let fixture = command_tool("echo $$ > leader.pid; yes flood", None, 1000);
    let output = run(&fixture, json!({})).await;
    assert_eq!(error_text(&output), "tool output exceeded 1000 bytes");
    assert!(!fixture.tool.is_transient(&output));
    let leader = read_pid(fixture.dir.path().join("leader.pid")).await;
    eventually("the flooding tool to die", || is_dead(leader)).await;
}

#[tokio::test]
async fn output_exactly_at_the_cap_is_accepted() {
    let fixture = command_tool("printf 1234567890", None, 10);
    assert_eq!(
        run(&fixture, json!({})).await,
        ToolOutput::ok(1_234_567_890)
    );
}

#[tokio::test]
async fn cancellation_kills_the_tool() {
    let fixture = command_tool(
        "echo $$ > leader.pid; sleep 100 & echo $! > child.pid; wait",
        None,
        1 << 20,
    );
    let mut context = ctx(fixture.dir.path());
    let cancel = CancellationToken::new();
    context.cancel = cancel.clone();
    let tool = fixture.tool.clone();
    let call = tokio::spawn(async move { tool.call(json!({}), context).await });

    let leader = read_pid(fixture.dir.path().join("leader.pid")).await;
    let child = read_pid(fixture.dir.path().join("child.pid")).await;
    cancel.cancel();
    let output = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(error_text(&output), "tool call cancelled");
    eventually("the tool process to die", || is_dead(leader)).await;
    eventually("the tool's child to die", || is_dead(child)).await;
}

#[tokio::test]
async fn already_cancelled_call_does_not_start() {
    let fixture = command_tool("touch started", None, 1 << 20);
    let context = ctx(fixture.dir.path());
    context.cancel.cancel();
    let output = fixture.tool.call(json!({}), context).await;
    assert_eq!(error_text(&output), "tool call cancelled");
    assert!(!fixture.dir.path().join("started").exists());
}

const ECHO_CONTEXT_PY: &str = r#"
import json, os, sys
request = json.loads(sys.stdin.readline())
rest = sys.stdin.read()
env = {k: v for k, v in os.environ.items() if k.startswith("BDK_") or k == "MANIFEST_VAR"}
print(json.dumps({"request": request, "env": env, "cwd": os.getcwd(), "rest": rest}))
"#;

#[tokio::test]
async fn request_context_and_environment_reach_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("echo.py"), ECHO_CONTEXT_PY).unwrap();
    let mut env = BTreeMap::new();
    env.insert("MANIFEST_VAR".to_owned(), "from-manifest".to_owned());
    let tool = tool_from_argv(dir.path(), &["python3", "echo.py"], env, None, 1 << 20);
    let workspace = tempfile::tempdir().unwrap();
    let context = ctx(workspace.path());

    let output = tool
        .call(json!({"city": "Paris", "days": 3}), context)
        .await;
    assert!(!output.is_error, "{output:?}");
    let got = output.content;
    let ws = workspace.path().to_string_lossy().into_owned();
    let state = workspace
        .path()
        .join("state")
        .to_string_lossy()
        .into_owned();
    assert_eq!(
        got["request"],
        json!({
            "input": {"city": "Paris", "days": 3},
            "context": {
                "callId": "call_test123",
                "sessionId": "ses_abc",
                "channel": "http",
                "mode": "task",
                "principal": "alice",
                "workspaceDir": ws,
                "stateRoot": state,
                "now": "2026-03-04T05:06:07.000Z",
                "asOfPinned": true,
                "dryRun": true,
                "approvedBy": "bob",
            }
        })
    );
    // Exactly one line, then end of input.
    assert_eq!(got["rest"], "");
    // Variables of the test harness itself (BDK_TEST_*) are inherited like
    // any other; the tool's own context is what is checked.
    let mut seen = got["env"].as_object().unwrap().clone();
    seen.retain(|k, _| !k.starts_with("BDK_TEST_"));
    assert_eq!(
        Value::Object(seen),
        json!({
            "BDK_CALL_ID": "call_test123",
            "BDK_SESSION_ID": "ses_abc",
            "BDK_WORKSPACE_DIR": ws,
            "BDK_STATE_ROOT": state,
            "BDK_NOW": "2026-03-04T05:06:07.000Z",
            "BDK_DRY_RUN": "1",
            "MANIFEST_VAR": "from-manifest",
        })
    );
    // The tool runs in its own folder.
    let cwd = PathBuf::from(got["cwd"].as_str().unwrap());
    assert_eq!(
        cwd.canonicalize().unwrap(),
        dir.path().canonicalize().unwrap()
    );
}

#[tokio::test]
async fn unbound_call_has_no_session_id() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("echo.py"), ECHO_CONTEXT_PY).unwrap();
    let tool = tool_from_argv(
        dir.path(),
        &["python3", "echo.py"],
        BTreeMap::new(),
        None,
        1 << 20,
    );
    let mut context = ctx(dir.path());
    context.session.id = None;
    context.session.principal = None;
    context.approved_by = None;
    context.dry_run = false;
    let got = tool.call(json!(null), context).await.content;
    let request_context = &got["request"]["context"];
    assert_eq!(request_context["sessionId"], Value::Null);
    assert_eq!(request_context["principal"], Value::Null);
    assert_eq!(request_context["approvedBy"], Value::Null);
    assert_eq!(got["env"].get("BDK_SESSION_ID"), None);
    assert_eq!(got["env"]["BDK_DRY_RUN"], "0");
}

#[tokio::test]
async fn program_not_found_names_the_program() {
    let dir = tempfile::tempdir().unwrap();
    let tool = tool_from_argv(
        dir.path(),
        &["bdk-no-such-program-xyz", "a"],
        BTreeMap::new(),
        None,
        1024,
    );
    let output = tool.call(json!({}), ctx(dir.path())).await;
    let text = error_text(&output);
    assert!(text.contains("`bdk-no-such-program-xyz`"), "{text}");
    assert!(text.contains("PATH"), "{text}");
    assert!(!tool.is_transient(&output));

    let tool = tool_from_argv(dir.path(), &["./missing.sh"], BTreeMap::new(), None, 1024);
    let text = tool.call(json!({}), ctx(dir.path())).await.content;
    let text = text.as_str().unwrap();
    assert!(
        text.contains("`./missing.sh`") && text.contains("tool's folder"),
        "{text}"
    );
}

#[tokio::test]
async fn tool_that_ignores_stdin_still_answers() {
    // A request far larger than a pipe buffer, to a tool that never reads it.
    let fixture = command_tool("echo ok", None, 1 << 20);
    let big = "x".repeat(4 << 20);
    assert_eq!(
        run(&fixture, json!({"blob": big})).await,
        ToolOutput::ok("ok")
    );
}

#[tokio::test]
async fn agent_scripts_are_not_host_callable() {
    let manifest = ToolManifest {
        path: PathBuf::from("/agent/tools/x.toml"),
        dir: PathBuf::from("/agent/tools"),
        spec: spec("x", None),
        runner: ToolRunner::Script {
            source: PathBuf::from("/agent/tools/x.py"),
            workspace_path: ".bdk/tools/x.py".to_owned(),
        },
    };
    assert!(
        subprocess::from_manifest(&manifest, DEFAULT_TIMEOUT, &Default::default(), None).is_none()
    );
}

// ------------------------------------------------------------------ url tools

/// One request as the test server saw it.
#[derive(Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

/// A tiny HTTP/1.1 server on 127.0.0.1:0 answering by path:
/// `/ok` echoes the request input as JSON, `/text` answers plain text,
/// `/envelope` an error envelope, `/fail` 503, `/missing` 404, `/big` and `/big-unsized` 2 MiB,
/// `/hang` never answers.
async fn start_server() -> (String, mpsc::UnboundedReceiver<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let header_end = loop {
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    let n = stream.read(&mut chunk).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                };
                let head = String::from_utf8_lossy(&buf[..header_end]).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                while buf.len() < header_end + length {
                    let n = stream.read(&mut chunk).await.unwrap();
                    assert!(n > 0, "client closed mid-body");
                    buf.extend_from_slice(&chunk[..n]);
                }
                let body = buf[header_end..header_end + length].to_vec();
                let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                tx.send(Seen { head, body }).unwrap();
                let (status, content): (&str, Vec<u8>) = match path.as_str() {
                    "/ok" => (
                        "200 OK",
                        json!({"echo": request["input"]}).to_string().into_bytes(),
                    ),
                    "/text" => ("200 OK", b"plain answer\n".to_vec()),
                    "/envelope" => (
                        "200 OK",
                        br#"{"content":"upstream said no","isError":true}"#.to_vec(),
                    ),
                    "/fail" => ("503 Service Unavailable", b"overloaded, try later".to_vec()),
                    "/missing" => ("404 Not Found", b"no such route".to_vec()),
                    "/big" | "/big-unsized" => ("200 OK", vec![b'a'; 2 << 20]),
                    "/hang" => {
                        // Hold the connection open until the client goes away.
                        let _ = stream.read(&mut chunk).await;
                        return;
                    }
                    _ => ("500 Internal Server Error", Vec::new()),
                };
                // `/big-unsized` declares no length: its body ends when the
                // connection closes, so only counting the bytes can cap it.
                let length = if path == "/big-unsized" {
                    String::new()
                } else {
                    format!("content-length: {}\r\n", content.len())
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\n{length}content-type: application/json\r\nconnection: close\r\n\r\n"
                );
                // The client may hang up early (the size cap); that is fine.
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.write_all(&content).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (base, rx)
}

fn url_tool(url: &str, timeout_ms: Option<u64>) -> Arc<dyn Tool> {
    let mut headers = BTreeMap::new();
    headers.insert("x-api-key".to_owned(), "k-123".to_owned());
    let manifest = ToolManifest {
        path: PathBuf::from("/agent/tools/remote.toml"),
        dir: PathBuf::from("/agent/tools"),
        spec: spec("remote", timeout_ms),
        runner: ToolRunner::Url {
            url: url.to_owned(),
            headers,
        },
    };
    subprocess::from_manifest(&manifest, DEFAULT_TIMEOUT, &Default::default(), None).unwrap()
}

#[tokio::test]
async fn url_tool_posts_the_request_and_parses_the_answer() {
    let (base, mut seen) = start_server().await;
    let workspace = tempfile::tempdir().unwrap();
    let tool = url_tool(&format!("{base}/ok"), None);
    let output = tool
        .call(json!({"city": "Oslo"}), ctx(workspace.path()))
        .await;
    assert_eq!(output, ToolOutput::ok(json!({"echo": {"city": "Oslo"}})));

    let request = seen.recv().await.unwrap();
    assert!(
        request.head.starts_with("POST /ok HTTP/1.1\r\n"),
        "{}",
        request.head
    );
    let head = request.head.to_ascii_lowercase();
    assert!(head.contains("\r\nx-api-key: k-123\r\n"), "{head}");
    assert!(
        head.contains("\r\ncontent-type: application/json\r\n"),
        "{head}"
    );
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["input"], json!({"city": "Oslo"}));
    assert_eq!(body["context"]["callId"], "call_test123");
    assert_eq!(body["context"]["sessionId"], "ses_abc");
    assert_eq!(body["context"]["now"], "2026-03-04T05:06:07.000Z");

    let tool = url_tool(&format!("{base}/text"), None);
    assert_eq!(
        tool.call(json!({}), ctx(workspace.path())).await,
        ToolOutput::ok("plain answer")
    );

    let tool = url_tool(&format!("{base}/envelope"), None);
    assert_eq!(
        tool.call(json!({}), ctx(workspace.path())).await,
        ToolOutput {
            content: json!("upstream said no"),
            is_error: true,
            blocks: Vec::new(),
        }
    );
}

#[tokio::test]
async fn url_tool_errors_carry_status_and_transience() {
    let (base, _seen) = start_server().await;
    let workspace = tempfile::tempdir().unwrap();

    let tool = url_tool(&format!("{base}/fail"), None);
    let output = tool.call(json!({}), ctx(workspace.path())).await;
    assert_eq!(
        error_text(&output),
        "tool endpoint returned status 503: overloaded, try later"
    );
    assert!(tool.is_transient(&output));

    let tool = url_tool(&format!("{base}/missing"), None);
    let output = tool.call(json!({}), ctx(workspace.path())).await;
    assert_eq!(
        error_text(&output),
        "tool endpoint returned status 404: no such route"
    );
    assert!(!tool.is_transient(&output));

    for path in ["/big", "/big-unsized"] {
        let tool = url_tool(&format!("{base}{path}"), None);
        let output = tool.call(json!({}), ctx(workspace.path())).await;
        assert_eq!(
            error_text(&output),
            "tool output exceeded 1048576 bytes",
            "{path}"
        );
        assert!(!tool.is_transient(&output));
    }
}

#[tokio::test]
async fn url_tool_connection_failure_is_transient() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let workspace = tempfile::tempdir().unwrap();
    let tool = url_tool(&format!("http://127.0.0.1:{port}/x"), None);
    let output = tool.call(json!({}), ctx(workspace.path())).await;
    assert!(
        error_text(&output).starts_with("tool endpoint connection failed: "),
        "{output:?}"
    );
    assert!(tool.is_transient(&output));
}

#[tokio::test]
async fn url_tool_times_out_and_cancels() {
    let (base, mut seen) = start_server().await;
    let workspace = tempfile::tempdir().unwrap();
    let tool = url_tool(&format!("{base}/hang"), Some(300));
    let output = tool.call(json!({}), ctx(workspace.path())).await;
    assert_eq!(error_text(&output), "tool timed out after 300 ms");
    assert!(tool.is_transient(&output));

    let tool = url_tool(&format!("{base}/hang"), None);
    let context = ctx(workspace.path());
    let cancel = context.cancel.clone();
    let call = tokio::spawn({
        let tool = tool.clone();
        async move { tool.call(json!({}), context).await }
    });
    // The server has the request once it reports it; then cancel.
    seen.recv().await.unwrap();
    seen.recv().await.unwrap();
    cancel.cancel();
    let output = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(error_text(&output), "tool call cancelled");
}
