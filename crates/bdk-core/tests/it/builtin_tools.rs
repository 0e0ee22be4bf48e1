#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Built-in tools: workspace file tools, shell, load_skill, tag_artifact and
//! the task spec.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bdk_core::tool::builtin;
use bdk_core::tool::{
    Effect, NewArtifact, SessionInfo, Tool, ToolContext, ToolOutput, ToolServices,
};
use bdk_core::workspace::{FILE_OPS_PER_TREE, Trees};
use bdk_events::{SessionId, SessionMode};
use chrono::Utc;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// One `tag_artifact` call as the services saw it.
#[derive(Debug, Clone, PartialEq)]
struct Tagged {
    kind: String,
    name: String,
    path: Option<String>,
    content: Vec<u8>,
    content_type: String,
    metadata: Value,
    call_id: String,
}

#[derive(Default)]
struct TestServices {
    skills: BTreeMap<String, String>,
    tagged: Mutex<Vec<Tagged>>,
}

#[async_trait]
impl ToolServices for TestServices {
    fn skill(&self, name: &str) -> Option<String> {
        self.skills.get(name).cloned()
    }

    async fn tag_artifact(
        &self,
        ctx: &ToolContext,
        artifact: NewArtifact,
    ) -> Result<String, String> {
        if artifact.kind == "refused" {
            return Err("store is read-only".to_owned());
        }
        let mut tagged = self.tagged.lock().unwrap();
        tagged.push(Tagged {
            kind: artifact.kind,
            name: artifact.name,
            path: artifact.path,
            content: artifact.content,
            content_type: artifact.content_type,
            metadata: artifact.metadata,
            call_id: ctx.call_id.clone(),
        });
        Ok(format!("art_{}", tagged.len()))
    }
}

fn ctx(workspace: &Path, services: Option<Arc<TestServices>>) -> ToolContext {
    ToolContext {
        call_id: "call_b1".to_owned(),
        session: SessionInfo {
            id: Some(SessionId::from_string("ses_b")),
            channel: "cli".to_owned(),
            mode: SessionMode::Chat,
            principal: None,
        },
        workspace_dir: workspace.to_path_buf(),
        trees: Default::default(),
        state_root: workspace.join("../state"),
        now: Utc::now(),
        as_of_pinned: false,
        dry_run: false,
        approved_by: None,
        cancel: CancellationToken::new(),
        services: services.map(|s| s as Arc<dyn ToolServices>),
        reporter: None,
    }
}

fn tool(name: &str) -> Arc<dyn Tool> {
    let mut all = builtin::workspace_tools();
    all.push(builtin::shell_tool(Default::default()));
    all.push(builtin::load_skill_tool());
    all.push(builtin::tag_artifact_tool());
    all.into_iter()
        .find(|t| t.spec().name == name)
        .unwrap_or_else(|| panic!("no built-in {name}"))
}

/// A workspace plus a sibling directory outside it.
struct Fixture {
    _dir: tempfile::TempDir,
    ws: std::path::PathBuf,
    outside: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "top secret").unwrap();
    Fixture {
        _dir: dir,
        ws,
        outside,
    }
}

async fn call(f: &Fixture, name: &str, input: Value) -> ToolOutput {
    tool(name).call(input, ctx(&f.ws, None)).await
}

fn text(output: &ToolOutput) -> &str {
    output
        .content
        .as_str()
        .unwrap_or_else(|| panic!("not text: {output:?}"))
}

fn error_text(output: &ToolOutput) -> &str {
    assert!(output.is_error, "expected an error, got {output:?}");
    text(output)
}

#[test]
fn specs_are_strict_and_declare_effects() {
    let expected = [
        ("read_file", Effect::Read),
        ("write_file", Effect::Write),
        ("edit_file", Effect::Write),
        ("list_files", Effect::Read),
        ("delete_file", Effect::Write),
        ("shell", Effect::Write),
        ("load_skill", Effect::Read),
        ("tag_artifact", Effect::Write),
    ];
    for (name, effect) in expected {
        let spec = tool(name).spec().clone();
        assert_eq!(spec.effect, effect, "{name}");
        assert!(!spec.description.is_empty(), "{name}");
        assert_eq!(spec.input_schema["type"], "object", "{name}");
        assert_eq!(spec.input_schema["additionalProperties"], false, "{name}");
    }
}

#[tokio::test]
async fn confinement_applies_to_every_file_tool() {
    let f = fixture();
    std::os::unix::fs::symlink(&f.outside, f.ws.join("link")).unwrap();
    let cases = [
        ("read_file", json!({"path": "../outside/secret.txt"})),
        ("read_file", json!({"path": "link/secret.txt"})),
        ("read_file", json!({"path": "/etc/passwd"})),
        (
            "write_file",
            json!({"path": "../outside/new.txt", "content": "x"}),
        ),
        (
            "write_file",
            json!({"path": "link/new.txt", "content": "x"}),
        ),
        (
            "edit_file",
            json!({"path": "link/secret.txt", "old_text": "top", "new_text": "no"}),
        ),
        ("list_files", json!({"path": ".."})),
        ("list_files", json!({"path": "link"})),
        ("delete_file", json!({"path": "../outside/secret.txt"})),
        ("delete_file", json!({"path": "link/secret.txt"})),
    ];
    for (name, input) in cases {
        let output = call(&f, name, input.clone()).await;
        let message = error_text(&output);
        assert!(
            message.contains("escapes the workspace") || message.contains("invalid workspace path"),
            "{name} {input}: {message}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(f.outside.join("secret.txt")).unwrap(),
        "top secret"
    );
    assert!(!f.outside.join("new.txt").exists());
}

#[tokio::test]
async fn read_file_whole_and_by_lines() {
    let f = fixture();
    std::fs::write(f.ws.join("a.txt"), "one\ntwo\nthree\nfour\n").unwrap();
    assert_eq!(
        text(&call(&f, "read_file", json!({"path": "a.txt"})).await),
        "one\ntwo\nthree\nfour\n"
    );
    assert_eq!(
        text(
            &call(
                &f,
                "read_file",
                json!({"path": "a.txt", "offset": 2, "limit": 2})
            )
            .await
        ),
        "two\nthree\n"
    );
    assert_eq!(
        text(&call(&f, "read_file", json!({"path": "./a.txt", "offset": 4})).await),
        "four\n"
    );
    assert_eq!(
        text(&call(&f, "read_file", json!({"path": "a.txt", "offset": 9})).await),
        "[the file has fewer than 9 lines]"
    );
    // No trailing newline on the last line.
    std::fs::write(f.ws.join("b.txt"), "x\ny").unwrap();
    assert_eq!(
        text(&call(&f, "read_file", json!({"path": "b.txt", "offset": 2})).await),
        "y"
    );
}

#[tokio::test]
async fn read_file_errors() {
    let f = fixture();
    std::fs::create_dir(f.ws.join("dir")).unwrap();
    std::fs::write(f.ws.join("bin"), [0x66, 0xff, 0xfe, 0x00]).unwrap();
    assert_eq!(
        error_text(&call(&f, "read_file", json!({"path": "nope.txt"})).await),
        "no such file: nope.txt"
    );
    assert_eq!(
        error_text(&call(&f, "read_file", json!({"path": "dir"})).await),
        "dir is a directory"
    );
    assert_eq!(
        error_text(&call(&f, "read_file", json!({"path": "bin"})).await),
        "bin is not UTF-8 text"
    );
    let output = call(&f, "read_file", json!({"path": "bin", "extra": 1})).await;
    assert!(
        error_text(&output).starts_with("invalid input: "),
        "{output:?}"
    );
}

#[tokio::test]
async fn read_file_caps_long_output_at_line_boundaries() {
    let f = fixture();
    // 10,000 lines of 100 bytes: about 1 MB.
    let line = format!("{}\n", "y".repeat(99));
    std::fs::write(f.ws.join("big.txt"), line.repeat(10_000)).unwrap();
    let output = call(&f, "read_file", json!({"path": "big.txt"})).await;
    let got = text(&output);
    let (body, note) = got.rsplit_once('\n').unwrap();
    let lines = builtin::READ_FILE_CAP_BYTES / 100;
    assert_eq!(body.len() + 1, lines * 100);
    assert_eq!(
        note,
        format!(
            "[output cut at {} bytes; continue with offset={}]",
            builtin::READ_FILE_CAP_BYTES,
            lines + 1
        )
    );
    // Continuing from the note picks up where it stopped.
    let next = call(
        &f,
        "read_file",
        json!({"path": "big.txt", "offset": lines + 1, "limit": 1}),
    )
    .await;
    assert_eq!(text(&next), line);

    // One line longer than the cap is cut inside the line, at a character
    // boundary.
    let huge = "é".repeat(builtin::READ_FILE_CAP_BYTES);
    std::fs::write(f.ws.join("huge.txt"), format!("{huge}\nnext\n")).unwrap();
    let output = call(&f, "read_file", json!({"path": "huge.txt"})).await;
    let got = text(&output);
    let (body, note) = got.rsplit_once('\n').unwrap();
    assert!(
        body.len() <= builtin::READ_FILE_CAP_BYTES && body.len() > builtin::READ_FILE_CAP_BYTES - 4
    );
    assert!(body.chars().all(|c| c == 'é'));
    assert!(
        note.contains("line 1 is longer than") && note.ends_with("continue with offset=2]"),
        "{note}"
    );
}

#[tokio::test]
async fn write_file_creates_parents_and_overwrites() {
    let f = fixture();
    let output = call(
        &f,
        "write_file",
        json!({"path": "src/deep/x.rs", "content": "fn main() {}"}),
    )
    .await;
    assert_eq!(
        output,
        ToolOutput::ok(json!({"path": "src/deep/x.rs", "bytes": 12}))
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("src/deep/x.rs")).unwrap(),
        "fn main() {}"
    );
    call(
        &f,
        "write_file",
        json!({"path": "src/deep/x.rs", "content": "v2"}),
    )
    .await;
    assert_eq!(
        std::fs::read_to_string(f.ws.join("src/deep/x.rs")).unwrap(),
        "v2"
    );
}

#[tokio::test]
async fn edit_file_replaces_exactly_one_occurrence() {
    let f = fixture();
    std::fs::write(f.ws.join("c.txt"), "alpha beta\ngamma beta\n").unwrap();
    let output = call(
        &f,
        "edit_file",
        json!({"path": "c.txt", "old_text": "beta", "new_text": "B"}),
    )
    .await;
    assert_eq!(
        error_text(&output),
        "old_text occurs 2 times in c.txt; include more surrounding text so it occurs exactly once"
    );
    let output = call(
        &f,
        "edit_file",
        json!({"path": "c.txt", "old_text": "delta", "new_text": "B"}),
    )
    .await;
    assert!(error_text(&output).starts_with("old_text does not occur in c.txt"));
    assert_eq!(
        std::fs::read_to_string(f.ws.join("c.txt")).unwrap(),
        "alpha beta\ngamma beta\n"
    );

    let output = call(
        &f,
        "edit_file",
        json!({"path": "c.txt", "old_text": "gamma beta", "new_text": "gamma B"}),
    )
    .await;
    assert!(!output.is_error, "{output:?}");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("c.txt")).unwrap(),
        "alpha beta\ngamma B\n"
    );

    let output = call(
        &f,
        "edit_file",
        json!({"path": "missing.txt", "old_text": "a", "new_text": "b"}),
    )
    .await;
    assert_eq!(error_text(&output), "no such file: missing.txt");
}

#[tokio::test]
async fn list_files_is_sorted_recursive_and_skips_runtime_files() {
    let f = fixture();
    for rel in [
        "b.txt",
        "a/x.txt",
        "a/sub/y.txt",
        "a.txt",
        "a-b.txt",
        ".bdk/skills/s/SKILL.md",
        "Z.md",
    ] {
        let path = f.ws.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "").unwrap();
    }
    std::fs::create_dir(f.ws.join("empty")).unwrap();
    let listing = call(&f, "list_files", json!({})).await;
    assert_eq!(
        text(&listing),
        "Z.md\na-b.txt\na.txt\na/\na/sub/\na/sub/y.txt\na/x.txt\nb.txt\nempty/"
    );
    let listing = call(&f, "list_files", json!({"path": "a"})).await;
    assert_eq!(text(&listing), "a/sub/\na/sub/y.txt\na/x.txt");
    let listing = call(&f, "list_files", json!({"path": "empty"})).await;
    assert_eq!(text(&listing), "(no files)");
    // Asked for by name, the runtime folder is listed.
    let listing = call(&f, "list_files", json!({"path": ".bdk/skills"})).await;
    assert_eq!(text(&listing), ".bdk/skills/s/\n.bdk/skills/s/SKILL.md");

    assert_eq!(
        error_text(&call(&f, "list_files", json!({"path": "b.txt"})).await),
        "b.txt is not a directory"
    );
    assert_eq!(
        error_text(&call(&f, "list_files", json!({"path": "nope"})).await),
        "no such directory: nope"
    );
}

#[tokio::test]
async fn list_files_stops_at_the_cap() {
    let f = fixture();
    let dir = f.ws.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..1100 {
        std::fs::write(dir.join(format!("f{i:04}.txt")), "").unwrap();
    }
    let listing = call(&f, "list_files", json!({})).await;
    let got = text(&listing);
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(lines.len(), builtin::LIST_FILES_MAX_ENTRIES + 1);
    assert_eq!(lines[0], "many/");
    assert_eq!(lines[1], "many/f0000.txt");
    // The directory line takes one slot, so the last file shown is f0998.
    assert_eq!(lines[builtin::LIST_FILES_MAX_ENTRIES - 1], "many/f0998.txt");
    assert_eq!(
        lines[builtin::LIST_FILES_MAX_ENTRIES],
        "[listing stopped at 1000 entries; list a subdirectory to see more]"
    );
}

#[tokio::test]
async fn delete_file_removes_files_only() {
    let f = fixture();
    std::fs::write(f.ws.join("gone.txt"), "x").unwrap();
    std::fs::create_dir(f.ws.join("dir")).unwrap();
    let output = call(&f, "delete_file", json!({"path": "gone.txt"})).await;
    assert_eq!(
        output,
        ToolOutput::ok(json!({"path": "gone.txt", "deleted": true}))
    );
    assert!(!f.ws.join("gone.txt").exists());
    assert_eq!(
        error_text(&call(&f, "delete_file", json!({"path": "gone.txt"})).await),
        "no such file: gone.txt"
    );
    assert!(
        error_text(&call(&f, "delete_file", json!({"path": "dir"})).await)
            .starts_with("dir is a directory")
    );
    assert!(f.ws.join("dir").is_dir());
}

#[tokio::test]
async fn shell_runs_in_the_workspace() {
    let f = fixture();
    std::fs::write(f.ws.join("in.txt"), "hello").unwrap();
    let output = call(
        &f,
        "shell",
        json!({"command": "cat in.txt; echo; echo \"$BDK_CALL_ID\"; echo oops >&2; exit 4"}),
    )
    .await;
    assert_eq!(
        output,
        ToolOutput::ok(json!({"exitCode": 4, "stdout": "hello\ncall_b1\n", "stderr": "oops\n"}))
    );
    let output = call(&f, "shell", json!({"command": "pwd -P"})).await;
    assert_eq!(
        output.content["stdout"].as_str().unwrap().trim(),
        f.ws.canonicalize().unwrap().to_string_lossy()
    );
}

#[tokio::test]
async fn shell_timeout_and_output_cap_kill_the_command() {
    let f = fixture();
    let started = Instant::now();
    let output = call(
        &f,
        "shell",
        json!({"command": "sleep 100", "timeout_ms": 300}),
    )
    .await;
    assert_eq!(
        error_text(&output),
        "command timed out after 300 ms and was killed"
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    let output = call(&f, "shell", json!({"command": "yes"})).await;
    assert!(output.is_error);
    assert_eq!(output.content["exitCode"], Value::Null);
    assert_eq!(
        output.content["stdout"].as_str().unwrap().len(),
        builtin::SHELL_MAX_STDOUT_BYTES
    );
    assert!(
        output.content["error"]
            .as_str()
            .unwrap()
            .starts_with("output exceeded")
    );
}

#[tokio::test]
async fn shell_stops_on_cancel() {
    let f = fixture();
    let context = ctx(&f.ws, None);
    let cancel = context.cancel.clone();
    let shell = tool("shell");
    let call = tokio::spawn(async move {
        shell
            .call(json!({"command": "touch started; sleep 100"}), context)
            .await
    });
    // No event tells us the command has started; poll for its file.
    bdk_testkit::poll::until("the command to start", || {
        std::future::ready(f.ws.join("started").exists())
    })
    .await;
    cancel.cancel();
    let output = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(error_text(&output), "tool call cancelled");
}

#[tokio::test]
async fn load_skill_reads_from_services() {
    let f = fixture();
    let mut services = TestServices::default();
    services
        .skills
        .insert("research".to_owned(), "# Research\nDig.".to_owned());
    let services = Arc::new(services);
    let load = tool("load_skill");
    let output = load
        .call(
            json!({"name": "research"}),
            ctx(&f.ws, Some(services.clone())),
        )
        .await;
    assert_eq!(output, ToolOutput::ok("# Research\nDig."));
    let output = load
        .call(json!({"name": "nope"}), ctx(&f.ws, Some(services)))
        .await;
    assert!(error_text(&output).starts_with("unknown skill `nope`"));
    let output = load
        .call(json!({"name": "research"}), ctx(&f.ws, None))
        .await;
    assert_eq!(
        error_text(&output),
        "skills are not available in this context"
    );
}

#[tokio::test]
async fn tag_artifact_from_content_or_file() {
    let f = fixture();
    let services = Arc::new(TestServices::default());
    let tag = tool("tag_artifact");
    let with = |input: Value| {
        let tag = tag.clone();
        let context = ctx(&f.ws, Some(services.clone()));
        async move { tag.call(input, context).await }
    };

    let output =
        with(json!({"kind": "summary", "content": "all good", "metadata": {"pr": 42}})).await;
    assert_eq!(output, ToolOutput::ok(json!({"artifactId": "art_1"})));

    std::fs::create_dir(f.ws.join("out")).unwrap();
    std::fs::write(f.ws.join("out/report.md"), "# Report").unwrap();
    let output = with(json!({"kind": "report", "path": "out/report.md"})).await;
    assert_eq!(output, ToolOutput::ok(json!({"artifactId": "art_2"})));
    let output = with(json!({"kind": "report", "path": "./out//report.md", "name": "Final", "contentType": "text/x-custom"})).await;
    assert_eq!(output, ToolOutput::ok(json!({"artifactId": "art_3"})));

    let tagged = services.tagged.lock().unwrap().clone();
    assert_eq!(
        tagged,
        vec![
            Tagged {
                kind: "summary".to_owned(),
                name: "summary".to_owned(),
                path: None,
                content: b"all good".to_vec(),
                content_type: "text/plain; charset=utf-8".to_owned(),
                metadata: json!({"pr": 42}),
                call_id: "call_b1".to_owned(),
            },
            Tagged {
                kind: "report".to_owned(),
                name: "report.md".to_owned(),
                path: Some("out/report.md".to_owned()),
                content: b"# Report".to_vec(),
                content_type: "text/markdown; charset=utf-8".to_owned(),
                metadata: json!({}),
                call_id: "call_b1".to_owned(),
            },
            Tagged {
                kind: "report".to_owned(),
                name: "Final".to_owned(),
                path: Some("out/report.md".to_owned()),
                content: b"# Report".to_vec(),
                content_type: "text/x-custom".to_owned(),
                metadata: json!({}),
                call_id: "call_b1".to_owned(),
            },
        ]
    );
}

#[tokio::test]
async fn tag_artifact_rejections() {
    let f = fixture();
    let services = Arc::new(TestServices::default());
    let tag = tool("tag_artifact");
    let with = |input: Value, services: Option<Arc<TestServices>>| {
        let tag = tag.clone();
        let context = ctx(&f.ws, services);
        async move { tag.call(input, context).await }
    };
    let s = || Some(services.clone());

    let both = with(json!({"kind": "k", "path": "a", "content": "b"}), s()).await;
    assert_eq!(error_text(&both), "give exactly one of path or content");
    let neither = with(json!({"kind": "k"}), s()).await;
    assert_eq!(error_text(&neither), "give exactly one of path or content");
    let escape = with(json!({"kind": "k", "path": "../outside/secret.txt"}), s()).await;
    assert!(error_text(&escape).contains("escapes the workspace"));
    let missing = with(json!({"kind": "k", "path": "nope.bin"}), s()).await;
    assert_eq!(error_text(&missing), "no such file: nope.bin");
    let bad_meta = with(json!({"kind": "k", "content": "x", "metadata": [1]}), s()).await;
    assert_eq!(error_text(&bad_meta), "metadata must be a JSON object");

    // Sparse, so the test does not write 10 MiB.
    let big = std::fs::File::create(f.ws.join("big.bin")).unwrap();
    big.set_len(builtin::ARTIFACT_MAX_BYTES + 1).unwrap();
    let too_big = with(json!({"kind": "k", "path": "big.bin"}), s()).await;
    assert!(error_text(&too_big).starts_with("big.bin is larger than"));

    let refused = with(json!({"kind": "refused", "content": "x"}), s()).await;
    assert_eq!(
        error_text(&refused),
        "failed to tag the artifact: store is read-only"
    );
    let no_services = with(json!({"kind": "k", "content": "x"}), None).await;
    assert_eq!(
        error_text(&no_services),
        "artifacts are not available in this context"
    );
    assert!(services.tagged.lock().unwrap().is_empty());
}

#[test]
fn task_spec_names_each_subagent() {
    let spec = builtin::task_spec(&[("reviewer".to_owned(), "Reviews pull requests.".to_owned())]);
    assert_eq!(spec.name, "task");
    assert_eq!(spec.effect, Effect::Write);
    assert!(
        spec.description
            .contains("reviewer: Reviews pull requests.")
    );
    assert_eq!(
        spec.input_schema,
        json!({
            "type": "object",
            "properties": {
                "subagent": {"type": "string", "enum": ["reviewer"], "description": "Which subagent to run."},
                "prompt": {"type": "string", "minLength": 1, "description": "The complete task for the subagent."}
            },
            "required": ["subagent", "prompt"],
            "additionalProperties": false
        })
    );
}

/// Awaits `call`, failing the test if it hangs (as a read of a FIFO did).
async fn patiently<T>(call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), call)
        .await
        .expect("a call on a special file hung")
}

/// Issue 43: a FIFO or socket in the workspace is refused by every file
/// tool at once, by name, and hundreds of reads of a FIFO never hold more
/// than the tree's few blocking threads (the old open blocked one thread
/// per read until the pool was gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_files_are_refused_by_every_file_tool_and_never_pile_up() {
    let f = fixture();
    let made = std::process::Command::new("mkfifo")
        .arg(f.ws.join("pipe"))
        .status()
        .unwrap();
    assert!(made.success());
    let _socket = std::os::unix::net::UnixListener::bind(f.ws.join("sock")).unwrap();
    let trees = Trees::new();
    let services = Arc::new(TestServices::default());
    let shared = |services: Option<Arc<TestServices>>| {
        let mut c = ctx(&f.ws, services);
        c.trees = trees.clone();
        c
    };
    for (name, kind) in [("pipe", "FIFO (named pipe)"), ("sock", "Unix socket")] {
        let read = format!("{name} is a {kind}; only regular files can be read");
        let written = format!("{name} is a {kind}; only regular files can be written");
        for (tool_name, input, want) in [
            ("read_file", json!({"path": name}), &read),
            (
                "edit_file",
                json!({"path": name, "old_text": "a", "new_text": "b"}),
                &read,
            ),
            (
                "write_file",
                json!({"path": name, "content": "x"}),
                &written,
            ),
            ("tag_artifact", json!({"kind": "k", "path": name}), &read),
        ] {
            let out = patiently(tool(tool_name).call(input, shared(Some(services.clone())))).await;
            assert_eq!(error_text(&out), want.as_str(), "{tool_name} {name}");
        }
    }
    assert!(services.tagged.lock().unwrap().is_empty());

    // Keep the tree's gate alive to read its gauge afterwards.
    let gate = trees.root(&f.ws);
    let reads: Vec<_> = (0..300)
        .map(|_| {
            let c = shared(None);
            tokio::spawn(async move { tool("read_file").call(json!({"path": "pipe"}), c).await })
        })
        .collect();
    for read in reads {
        let out = patiently(read).await.unwrap();
        assert!(error_text(&out).contains("FIFO"));
    }
    assert!(
        gate.peak() >= 1 && gate.peak() <= FILE_OPS_PER_TREE,
        "{}",
        gate.peak()
    );
    assert_eq!(gate.in_flight(), 0);
    std::fs::write(f.ws.join("plain.txt"), "fine\n").unwrap();
    let out = patiently(tool("read_file").call(json!({"path": "plain.txt"}), shared(None))).await;
    assert_eq!(text(&out), "fine\n");
}

/// Issue 43: a file swapped for a symlink to a secret outside, as fast as a
/// thread can, while every file tool works on that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_tools_never_follow_a_link_swapped_in_under_them() {
    let f = fixture();
    let secret = f.outside.join("secret.txt");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (ws, secret, stop) = (f.ws.clone(), secret.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let staged = ws.join(".staged");
                let _ = std::fs::remove_file(&staged);
                let _ = if n.is_multiple_of(2) {
                    std::fs::write(&staged, "plain")
                } else {
                    std::os::unix::fs::symlink(&secret, &staged)
                };
                let _ = std::fs::rename(&staged, ws.join("swap"));
                n += 1;
            }
        })
    };
    let services = Arc::new(TestServices::default());
    let mut seen = String::new();
    for _ in 0..300 {
        for (name, input) in [
            ("read_file", json!({"path": "swap"})),
            (
                "write_file",
                json!({"path": "swap", "content": "overwritten"}),
            ),
            (
                "edit_file",
                json!({"path": "swap", "old_text": "top secret", "new_text": "edited"}),
            ),
            ("tag_artifact", json!({"kind": "race", "path": "swap"})),
            ("delete_file", json!({"path": "swap"})),
        ] {
            let out = tool(name)
                .call(input, ctx(&f.ws, Some(services.clone())))
                .await;
            seen.push_str(&out.content.to_string());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(!seen.contains("top secret"), "an answer carried the secret");
    assert!(seen.contains("escapes the workspace"), "the race never hit");
    for tagged in services.tagged.lock().unwrap().iter() {
        assert_ne!(tagged.content, b"top secret");
    }
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret");
}
