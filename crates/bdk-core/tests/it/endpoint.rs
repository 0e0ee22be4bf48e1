#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The host endpoint end to end: a Python tool (no Rust) reaching host
//! services over the Unix socket named in its environment, driven by model
//! turns and by direct calls, and the endpoint's refusals checked from the
//! test side of the socket.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bdk_core::discover;
use bdk_core::host::{DirectCall, DirectOutcome, Host, StartSession};
use bdk_events::{Event, SessionId};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// A tool that proves its token works, leaves it in a file, then hangs until
/// the runtime's timeout kills it.
const HANG_PY: &str = r#"
import json, os, socket, sys, time

request = json.loads(sys.stdin.readline())
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["BDK_HOST_SOCKET"])
stream = conn.makefile("rwb")
token = os.environ["BDK_HOST_TOKEN"]
stream.write((json.dumps({"token": token, "id": 1, "op": "session.info"}) + "\n").encode())
stream.flush()
answer = json.loads(stream.readline())
with open(request["input"]["out"], "w") as f:
    json.dump({"socket": os.environ["BDK_HOST_SOCKET"], "token": token, "answer": answer}, f)
time.sleep(120)
"#;

const HANG_TOML: &str = r#"
description = "Hangs after reporting its token."
effect = "read"
command = ["python3", "hang.py"]
timeout_ms = 4000

[input_schema]
type = "object"
required = ["out"]
properties = { out = { type = "string" } }
"#;

const RULES: &str = r##"
[[rules]]
user_contains = "remember"
tool_calls = [{ name = "client", input = { requests = [
    { op = "kv.put", args = { namespace = "notes", key = "color", value = { color = "teal" } } },
    { op = "kv.get", args = { namespace = "notes", key = "color" } },
    { op = "artifacts.tag", args = { kind = "report", name = "summary.md", content = "# Done", metadata = { from = "turn" } } },
    { op = "session.info" },
] } }]

[[rules]]
tool_result = "client"
reply = "stored {{ result.answers[1].result.value.color }} as {{ result.answers[2].result.artifactId }}"

[[rules]]
reply = "echo: {{ user }}"
"##;

const INBOX_TOML: &str = r#"
[[routes]]
method = "POST"
path = "/"
"#;

/// Writes the test project and returns its folder.
fn project_dir() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "You are a test agent.\n"),
        ("agent/scripted.toml", RULES),
        (
            "agent/tools/client.toml",
            bdk_testkit::endpoint::CLIENT_TOML,
        ),
        ("agent/tools/client.py", bdk_testkit::endpoint::CLIENT_PY),
        ("agent/tools/hang.toml", HANG_TOML),
        ("agent/tools/hang.py", HANG_PY),
        ("agent/channels/inbox.toml", INBOX_TOML),
    ];
    bdk_testkit::write_files(dir.path(), &files);
    dir
}

async fn host_at(project: &Path, state_root: &Path) -> Host {
    let d = discover(project);
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(state_root).unwrap());
    Host::builder(d.project.unwrap(), store)
        .build()
        .await
        .unwrap()
}

/// A project and a host over `<project>/state`.
async fn setup() -> (TempDir, Host) {
    let dir = project_dir();
    let host = host_at(dir.path(), &dir.path().join("state")).await;
    (dir, host)
}

/// Runs the client tool with `requests`, bound to `session` when given.
async fn run_client(
    host: &Host,
    session: Option<&SessionId>,
    principal: Option<&str>,
    requests: Value,
) -> DirectOutcome {
    let out = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: json!({ "requests": requests }),
            session_id: session.cloned(),
            principal: principal.map(str::to_owned),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    out
}

fn answers(out: &DirectOutcome) -> &Vec<Value> {
    out.result["answers"].as_array().unwrap()
}

fn socket_of(out: &DirectOutcome) -> PathBuf {
    PathBuf::from(out.result["socket"].as_str().unwrap())
}

fn token_of(out: &DirectOutcome) -> String {
    out.result["token"].as_str().unwrap().to_owned()
}

/// One request line on a fresh connection; the answer line parsed.
async fn ask(socket: &Path, line: &str) -> Value {
    let mut stream = UnixStream::connect(socket).await.unwrap();
    stream.write_all(line.as_bytes()).await.unwrap();
    stream.write_all(b"\n").await.unwrap();
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).await.unwrap();
    serde_json::from_str(&answer).unwrap()
}

fn assert_error(answer: &Value, code: &str) {
    assert_eq!(answer["ok"], json!(false), "{answer}");
    assert_eq!(answer["error"], json!(code), "{answer}");
    assert!(
        answer["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
}

fn assert_ok(answer: &Value) -> &Value {
    assert_eq!(answer["ok"], json!(true), "{answer}");
    &answer["result"]
}

#[tokio::test]
async fn bound_direct_call_reaches_every_service() {
    let (dir, host) = setup().await;
    let session = host
        .start_session(StartSession {
            principal: Some("alice".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .session_id;
    // A file in the session workspace for `artifacts.tag` with a path.
    let workspace = host.store().workspace_dir(&session);
    std::fs::create_dir_all(workspace.join("out")).unwrap();
    std::fs::write(workspace.join("out/report.md"), "# Report").unwrap();

    let out = run_client(
        &host,
        Some(&session),
        Some("alice"),
        json!([
            {"op": "kv.put", "args": {"namespace": "prefs", "key": "lang", "value": {"code": "it", "n": [1, 2]}}},
            {"op": "kv.get", "args": {"namespace": "prefs", "key": "lang"}},
            {"op": "kv.get", "args": {"namespace": "prefs", "key": "missing"}},
            {"op": "kv.put", "args": {"namespace": "prefs", "key": "other", "value": 3}},
            {"op": "kv.list", "args": {"namespace": "prefs"}},
            {"op": "kv.delete", "args": {"namespace": "prefs", "key": "other"}},
            {"op": "files.put", "args": {"path": "notes/a.txt", "content": "héllo"}},
            {"op": "files.put", "args": {"path": "notes/b.bin", "contentBase64": "AP8B"}},
            {"op": "files.get", "args": {"path": "notes/a.txt"}},
            {"op": "files.get", "args": {"path": "notes/b.bin"}},
            {"op": "files.get", "args": {"path": "notes/a.txt", "encoding": "base64"}},
            {"op": "files.list", "args": {"prefix": "notes/"}},
            {"op": "files.delete", "args": {"path": "notes/b.bin"}},
            {"op": "files.get", "args": {"path": "notes/b.bin"}},
            {"op": "artifacts.tag", "args": {"kind": "report", "name": "r.txt", "content": "all good", "metadata": {"score": 9}}},
            {"op": "session.info"},
            {"op": "kv.teleport", "args": {}},
            {"raw": "{not json"},
            {"op": "kv.get", "args": {"namespace": "prefs", "key": "lang"}},
            {"op": "send", "args": {"channel": "http", "message": "hi"}},
            {"op": "reminders.create", "args": {}},
            {"op": "mcp.call_tool", "args": {}},
            {"op": "kv.get", "token": "bht_forged", "args": {"namespace": "prefs", "key": "lang"}},
            {"op": "kv.get", "args": {"namespace": "prefs"}},
            {"op": "files.put", "args": {"path": "x", "content": "a", "contentBase64": "YQ=="}},
            {"op": "kv.get", "args": "not an object"},
            {"raw": "[1, 2]"},
            {"op": "artifacts.tag", "args": {"kind": "report", "path": "out/./report.md"}},
            {"op": "artifacts.tag", "args": {"kind": "report", "path": "out/report.md", "content": "x"}},
            {"op": "artifacts.tag", "args": {"kind": "report", "path": "../escape.md"}},
        ]),
    )
    .await;
    let a = answers(&out);
    // Every answer carries the id of its request (malformed ones get null).
    for (n, answer) in a.iter().enumerate() {
        let expected = if n == 17 || n == 26 {
            Value::Null
        } else {
            json!(n)
        };
        assert_eq!(answer["id"], expected, "{answer}");
    }
    assert_ok(&a[0]);
    assert_eq!(
        assert_ok(&a[1]),
        &json!({"found": true, "value": {"code": "it", "n": [1, 2]}})
    );
    assert_eq!(assert_ok(&a[2]), &json!({"found": false, "value": null}));
    assert_eq!(assert_ok(&a[4]), &json!({"keys": ["lang", "other"]}));
    assert_eq!(assert_ok(&a[5]), &json!({"deleted": true}));
    assert_eq!(assert_ok(&a[6]), &json!({"size": 6}));
    assert_eq!(assert_ok(&a[7]), &json!({"size": 3}));
    assert_eq!(
        assert_ok(&a[8]),
        &json!({"found": true, "size": 6, "content": "héllo"})
    );
    assert_eq!(
        assert_ok(&a[9]),
        &json!({"found": true, "size": 3, "contentBase64": "AP8B"})
    );
    assert_eq!(
        assert_ok(&a[10]),
        &json!({"found": true, "size": 6, "contentBase64": "aMOpbGxv"})
    );
    assert_eq!(
        assert_ok(&a[11]),
        &json!({"paths": ["notes/a.txt", "notes/b.bin"]})
    );
    assert_eq!(assert_ok(&a[12]), &json!({"deleted": true}));
    assert_eq!(assert_ok(&a[13]), &json!({"found": false}));
    let artifact_id = assert_ok(&a[14])["artifactId"].as_str().unwrap().to_owned();
    assert_eq!(
        assert_ok(&a[15]),
        &json!({
            "id": session.as_str(),
            "channel": "http",
            "mode": "chat",
            "principal": "alice",
            "callId": out.call_id,
            "dryRun": false,
        })
    );
    assert_error(&a[16], "unknown_op");
    assert!(a[16]["message"].as_str().unwrap().contains("kv.teleport"));
    assert_error(&a[17], "invalid_json");
    // The connection survived the malformed line.
    assert_eq!(assert_ok(&a[18])["value"]["code"], json!("it"));
    // `send` names no session: a channel alone is not a conversation.
    assert_error(&a[19], "invalid_args");
    assert!(
        a[19]["message"]
            .as_str()
            .unwrap()
            .contains("name the session"),
        "{}",
        a[19]
    );
    // Reminders are an extension (bdk-scheduler's) this host was not built
    // with: their operations are unknown here, and the message lists what
    // is known.
    assert_error(&a[20], "unknown_op");
    let known = a[20]["message"]
        .as_str()
        .unwrap()
        .split("known ops:")
        .nth(1);
    assert!(
        known.is_some_and(|ops| ops.contains("kv.get") && !ops.contains("reminders")),
        "{}",
        a[20]
    );
    // The host has no MCP connections, so the `mcp.*` ops have nothing to reach.
    assert_error(&a[21], "unavailable");
    assert!(
        a[21]["message"]
            .as_str()
            .unwrap()
            .contains("no MCP connections"),
        "{}",
        a[21]
    );
    assert_error(&a[22], "unauthorized");
    assert_error(&a[23], "invalid_args");
    assert!(
        a[23]["message"].as_str().unwrap().contains("key"),
        "{}",
        a[23]
    );
    assert_error(&a[24], "invalid_args");
    assert_error(&a[25], "invalid_args");
    assert_error(&a[26], "invalid_request");

    // The writes are in the store, where Rust code and other tools see them.
    let store = host.store();
    assert_eq!(
        store.kv_get("prefs", "lang").await.unwrap(),
        Some(json!({"code": "it", "n": [1, 2]}))
    );
    assert_eq!(store.kv_get("prefs", "other").await.unwrap(), None);
    assert_eq!(
        store.file_get("notes/a.txt").await.unwrap(),
        Some("héllo".as_bytes().to_vec())
    );
    // The artifact belongs to the session and its owner, like one tagged by
    // the built-in tool, and the session records `artifact.tagged`.
    let record = store.artifact_get(&artifact_id).await.unwrap().unwrap();
    assert_eq!(record.session_id.as_ref(), Some(&session));
    assert_eq!(record.principal.as_deref(), Some("alice"));
    assert_eq!(record.kind, "report");
    assert_eq!(record.name, "r.txt");
    assert_eq!(record.content_type, "text/plain; charset=utf-8");
    assert_eq!(record.metadata, json!({"score": 9}));
    assert_eq!(
        store.artifact_content(&artifact_id).await.unwrap(),
        Some(b"all good".to_vec())
    );
    let events = host.events(&session, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    let tagged: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            Event::ArtifactTagged(t) => Some(t),
            _ => None,
        })
        .collect();
    // Issue 15, item 8: inline content has no path (its name used to be
    // recorded as one); a workspace file records its real, normalized path.
    assert_eq!(tagged.len(), 2);
    assert_eq!(tagged[0].artifact_id, artifact_id);
    assert_eq!(tagged[0].kind, "report");
    assert_eq!(tagged[0].path, None);
    let from_file = assert_ok(&a[27])["artifactId"].as_str().unwrap().to_owned();
    assert_eq!(tagged[1].artifact_id, from_file);
    assert_eq!(tagged[1].path.as_deref(), Some("out/report.md"));
    let record = store.artifact_get(&from_file).await.unwrap().unwrap();
    assert_eq!(record.name, "report.md");
    assert_eq!(record.content_type, "text/markdown; charset=utf-8");
    assert_eq!(
        store.artifact_content(&from_file).await.unwrap(),
        Some(b"# Report".to_vec())
    );
    assert_error(&a[28], "invalid_args");
    assert_error(&a[29], "invalid_args");

    // The socket sits in the state root; the token died with its call.
    let socket = socket_of(&out);
    assert_eq!(socket, dir.path().join("state/host.sock"));
    let late = ask(
        &socket,
        &json!({"token": token_of(&out), "id": "late", "op": "session.info"}).to_string(),
    )
    .await;
    assert_eq!(late["id"], json!("late"));
    assert_error(&late, "unauthorized");
}

#[tokio::test]
async fn unbound_direct_calls_get_fresh_tokens_and_no_session() {
    let (_dir, host) = setup().await;
    let requests = json!([
        {"op": "session.info"},
        {"op": "kv.put", "args": {"namespace": "cache", "key": "k", "value": "v"}},
        {"op": "kv.get", "args": {"namespace": "cache", "key": "k"}},
        {"op": "artifacts.tag", "args": {"kind": "report", "content": "x"}},
    ]);
    let first = run_client(&host, None, Some("bob"), requests.clone()).await;
    let a = answers(&first);
    assert_eq!(
        assert_ok(&a[0]),
        &json!({
            "id": null,
            "channel": "direct",
            "mode": "chat",
            "principal": "bob",
            "callId": first.call_id,
            "dryRun": false,
        })
    );
    assert_ok(&a[1]);
    assert_eq!(assert_ok(&a[2]), &json!({"found": true, "value": "v"}));
    assert_error(&a[3], "no_session");

    let second = run_client(&host, None, None, requests).await;
    assert_ne!(token_of(&first), token_of(&second));
    assert_eq!(socket_of(&first), socket_of(&second));
    assert_eq!(answers(&second)[0]["result"]["principal"], Value::Null);
    for out in [&first, &second] {
        let late = ask(
            &socket_of(out),
            &json!({"token": token_of(out), "op": "kv.get", "args": {"namespace": "cache", "key": "k"}})
                .to_string(),
        )
        .await;
        assert_eq!(late["id"], Value::Null);
        assert_error(&late, "unauthorized");
    }
}

#[tokio::test]
async fn model_turn_tool_call_uses_the_endpoint() {
    let (_dir, host) = setup().await;
    let started = host
        .start_session(StartSession {
            message: Some("please remember my color".into()),
            principal: Some("carol".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let turn = started.turn_id.clone().unwrap();
    let result = host.wait_turn(&started.session_id, &turn).await.unwrap();
    assert!(result.ok, "{result:?}");
    let events = host.events(&started.session_id, 0, None).await.unwrap();
    assert_eq!(
        bdk_events::sequence::violations(&events),
        Vec::<String>::new()
    );
    let tagged = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ArtifactTagged(t) => Some((e, t)),
            _ => None,
        })
        .expect("artifact.tagged recorded");
    // Tagged inside the turn that called the tool.
    assert_eq!(tagged.0.turn_id.as_ref(), Some(&turn));
    assert_eq!(tagged.1.metadata, json!({"from": "turn"}));
    assert_eq!(
        result.reply,
        format!("stored teal as {}", tagged.1.artifact_id)
    );
    let call = events
        .iter()
        .find_map(|e| match &e.event {
            Event::ActionResult(r) if r.name == "client" => Some(r),
            _ => None,
        })
        .unwrap();
    assert!(!call.is_error, "{:?}", call.output);
    assert_eq!(
        call.output["answers"][3]["result"],
        json!({
            "id": started.session_id.as_str(),
            "channel": "http",
            "mode": "chat",
            "principal": "carol",
            "callId": call.call_id,
            "dryRun": false,
        })
    );
    assert_eq!(
        host.store().kv_get("notes", "color").await.unwrap(),
        Some(json!({"color": "teal"}))
    );
    let record = host
        .store()
        .artifact_get(&tagged.1.artifact_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.session_id.as_ref(), Some(&started.session_id));
    assert_eq!(record.principal.as_deref(), Some("carol"));
}

#[tokio::test]
async fn dry_run_sessions_read_but_refuse_writes() {
    let (_dir, host) = setup().await;
    host.store()
        .kv_put("prefs", "seen", json!(true))
        .await
        .unwrap();
    let session = host
        .start_session(StartSession {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .session_id;
    let out = run_client(
        &host,
        Some(&session),
        None,
        json!([
            {"op": "kv.get", "args": {"namespace": "prefs", "key": "seen"}},
            {"op": "kv.put", "args": {"namespace": "prefs", "key": "new", "value": 1}},
            {"op": "files.put", "args": {"path": "f.txt", "content": "x"}},
            {"op": "artifacts.tag", "args": {"kind": "report", "content": "x"}},
            {"op": "session.info"},
        ]),
    )
    .await;
    let a = answers(&out);
    assert_eq!(assert_ok(&a[0]), &json!({"found": true, "value": true}));
    for answer in &a[1..4] {
        assert_error(answer, "dry_run");
    }
    assert_eq!(assert_ok(&a[4])["dryRun"], json!(true));
    assert_eq!(host.store().kv_get("prefs", "new").await.unwrap(), None);
    assert_eq!(host.store().file_get("f.txt").await.unwrap(), None);
}

#[tokio::test]
async fn oversize_line_is_refused_and_its_connection_closed() {
    let (_dir, host) = setup().await;
    let out = run_client(&host, None, None, json!([{"op": "session.info"}])).await;
    let socket = socket_of(&out);

    let mut stream = UnixStream::connect(&socket).await.unwrap();
    let line = vec![b'a'; bdk_core::endpoint::MAX_LINE_BYTES + 1];
    // The endpoint may close before reading all of it; a failed write is the
    // closed connection showing early.
    let _ = stream.write_all(&line).await;
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    reader.read_line(&mut answer).await.unwrap();
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_error(&answer, "line_too_long");
    // Then the connection ends: end of file, or a reset because the endpoint
    // closed with part of the line unread.
    let mut rest = Vec::new();
    match reader.read_to_end(&mut rest).await {
        Ok(_) => assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest)),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
    }

    // Other connections are unaffected.
    let fine = ask(
        &socket,
        &json!({"token": "bht_nope", "id": 7, "op": "kv.get"}).to_string(),
    )
    .await;
    assert_eq!(fine["id"], json!(7));
    assert_error(&fine, "unauthorized");
}

#[tokio::test]
async fn token_is_revoked_when_a_call_times_out() {
    let (dir, host) = setup().await;
    let report = dir.path().join("hang.json");
    let out = host
        .call_tool(DirectCall {
            name: "hang".into(),
            input: json!({"out": report.to_string_lossy()}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(out.is_error);
    assert!(
        out.result.as_str().unwrap().starts_with("tool timed out"),
        "{:?}",
        out.result
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    // The token worked while the tool ran, and is refused now it was killed.
    assert_eq!(report["answer"]["ok"], json!(true), "{report}");
    let late = ask(
        Path::new(report["socket"].as_str().unwrap()),
        &json!({"token": report["token"], "id": 1, "op": "session.info"}).to_string(),
    )
    .await;
    assert_error(&late, "unauthorized");
}

#[tokio::test]
async fn shutdown_removes_the_socket() {
    let (dir, host) = setup().await;
    let out = run_client(&host, None, None, json!([{"op": "session.info"}])).await;
    let socket = socket_of(&out);
    assert_eq!(socket, dir.path().join("state/host.sock"));
    let mode = std::fs::symlink_metadata(&socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "socket mode {mode:o}");
    host.shutdown(Duration::from_secs(5)).await;
    assert!(!socket.exists());
    assert!(UnixStream::connect(&socket).await.is_err());
    // Tools still run after shutdown's endpoint close, without an endpoint:
    // the call is cancelled with the host.
    let after = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: json!({"requests": []}),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(after.is_error);
    assert!(!socket.exists());
}

#[tokio::test]
async fn long_state_roots_use_a_private_socket_dir() {
    let dir = project_dir();
    let state = dir.path().join("s".repeat(120));
    let host = host_at(dir.path(), &state).await;
    let out = run_client(&host, None, None, json!([{"op": "session.info"}])).await;
    let socket = socket_of(&out);
    assert!(socket.as_os_str().len() <= bdk_core::endpoint::MAX_SOCKET_PATH_BYTES);
    assert!(socket.starts_with(std::env::temp_dir()), "{socket:?}");
    let private = socket.parent().unwrap().to_path_buf();
    let mode = std::fs::metadata(&private).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "dir mode {mode:o}");
    host.shutdown(Duration::from_secs(5)).await;
    assert!(!socket.exists());
    assert!(!private.exists());
}

#[tokio::test]
async fn a_live_socket_is_kept_and_a_stale_one_replaced() {
    let dir = project_dir();
    let state = dir.path().join("state");
    let first = host_at(dir.path(), &state).await;
    let a = run_client(&first, None, None, json!([{"op": "session.info"}])).await;
    assert_eq!(socket_of(&a), state.join("host.sock"));

    // A second host over the same state root must not take the first one's
    // socket away.
    let second = host_at(dir.path(), &state).await;
    let b = run_client(&second, None, None, json!([{"op": "session.info"}])).await;
    assert_ne!(socket_of(&b), socket_of(&a));
    assert!(socket_of(&b).starts_with(std::env::temp_dir()));
    let again = run_client(&first, None, None, json!([{"op": "session.info"}])).await;
    assert_eq!(socket_of(&again), state.join("host.sock"));
    assert_ok(&answers(&again)[0]);

    // Closing the second host leaves the first one's socket alone.
    second.shutdown(Duration::from_secs(5)).await;
    assert!(state.join("host.sock").exists());
    first.shutdown(Duration::from_secs(5)).await;
    assert!(!state.join("host.sock").exists());

    // A socket file nobody listens on (a crashed host) is replaced.
    drop(std::os::unix::net::UnixListener::bind(state.join("host.sock")).unwrap());
    assert!(state.join("host.sock").exists());
    let third = host_at(dir.path(), &state).await;
    let c = run_client(&third, None, None, json!([{"op": "session.info"}])).await;
    assert_eq!(socket_of(&c), state.join("host.sock"));
    assert_ok(&answers(&c)[0]);
}

/// The Python example in docs/tools.md, run as written.
#[tokio::test]
async fn documented_python_example_works() {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/tools.md"))
            .unwrap();
    let section = docs
        .split_once("## Host services for subprocess tools")
        .unwrap()
        .1;
    let example = section
        .split_once("```python\n")
        .unwrap()
        .1
        .split_once("```")
        .unwrap()
        .0;
    let dir = project_dir();
    let tools = dir.path().join("agent/tools");
    std::fs::write(tools.join("lookups.py"), example).unwrap();
    std::fs::write(
        tools.join("lookups.toml"),
        r#"
description = "Counts lookups per city."
command = ["python3", "lookups.py"]

[input_schema]
type = "object"
required = ["city"]
properties = { city = { type = "string" } }
"#,
    )
    .unwrap();
    let host = host_at(dir.path(), &dir.path().join("state")).await;
    for expected in 1..=2 {
        let out = host
            .call_tool(DirectCall {
                name: "lookups".into(),
                input: json!({"city": "Oslo"}),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(!out.is_error, "{:?}", out.result);
        assert_eq!(out.result, json!({"city": "Oslo", "lookups": expected}));
    }
    assert_eq!(
        host.store().kv_get("lookups", "Oslo").await.unwrap(),
        Some(json!(2))
    );
}

/// `send`, `session.get`, `session.wait` and `tools.call` reach the
/// sessions the caller's principal owns and those nobody owns, never the
/// caller's own session, and never anything else.
#[tokio::test]
async fn session_services_follow_the_reach_rule() {
    let (_dir, host) = setup().await;
    let start = |principal: Option<&str>| {
        let host = host.clone();
        let principal = principal.map(str::to_owned);
        async move {
            host.start_session(StartSession {
                principal,
                ..Default::default()
            })
            .await
            .unwrap()
            .session_id
        }
    };
    let alice = start(Some("alice")).await;
    let bob = start(Some("bob")).await;
    let open = start(None).await;
    let out = run_client(
        &host,
        Some(&alice),
        Some("alice"),
        json!([
            {"op": "send", "args": {"sessionId": bob.as_str(), "message": "hi bob"}},
            {"op": "send", "args": {"sessionId": open.as_str(), "message": "hello open", "admission": "preempt", "deliveryId": "dlv_mine"}},
            {"op": "send", "args": {"sessionId": alice.as_str(), "message": "myself"}},
            {"op": "session.wait", "args": {"sessionId": open.as_str(), "timeoutMs": 60000}},
            {"op": "session.get", "args": {"sessionId": bob.as_str()}},
            {"op": "session.get", "args": {"sessionId": "ses_nothing"}},
            {"op": "send", "args": {"channel": "inbox", "key": "k1", "message": "first"}},
            {"op": "session.wait", "args": {"channel": "inbox", "key": "k1"}},
            {"op": "send", "args": {"channel": "inbox", "key": "k1", "message": "second"}},
            {"op": "session.wait", "args": {"channel": "inbox", "key": "k1"}},
            {"op": "send", "args": {"key": "k1", "message": "no channel"}},
            {"op": "send", "args": {"channel": "nope", "key": "k1", "message": "x"}},
            {"op": "tools.call", "args": {"tool": "client", "input": {"requests": [{"op": "session.info"}]}}},
            {"op": "tools.call", "args": {"tool": "nope"}},
            {"op": "tools.call", "args": {"tool": "client", "input": {}}},
            {"op": "tools.call", "args": {"tool": "client", "sessionId": alice.as_str(), "input": {"requests": []}}},
            {"op": "tools.call", "args": {"tool": "client", "sessionId": bob.as_str(), "input": {"requests": []}}},
            {"op": "session.get", "args": {"sessionId": open.as_str(), "timeoutMs": 5}},
            {"op": "send", "args": {"sessionId": open.as_str(), "key": "k", "message": "x"}},
            {"op": "send", "args": {"sessionId": open.as_str(), "message": "   "}},
            {"op": "send", "args": {"sessionId": open.as_str(), "message": "x", "admission": "shove"}},
            {"op": "session.wait", "args": {"sessionId": alice.as_str()}},
        ]),
    )
    .await;
    let a = answers(&out);
    assert_error(&a[0], "forbidden");
    let sent = assert_ok(&a[1]);
    assert_eq!(sent["sessionId"], json!(open.as_str()));
    assert_eq!(sent["deliveryId"], json!("dlv_mine"));
    assert_eq!(sent["created"], json!(false));
    assert!(sent["turnId"].as_str().is_some(), "{sent}");
    assert_error(&a[2], "invalid_args");
    let waited = assert_ok(&a[3]);
    assert_eq!(waited["timedOut"], json!(false), "{waited}");
    assert_eq!(waited["status"], json!("waiting"), "{waited}");
    assert_eq!(waited["lastReply"], json!("echo: hello open"), "{waited}");
    assert_eq!(waited["turns"], json!(1), "{waited}");
    assert_eq!(waited["lastTurn"]["ok"], json!(true), "{waited}");
    assert_error(&a[4], "forbidden");
    assert_error(&a[5], "session_not_found");
    let first = assert_ok(&a[6]);
    assert_eq!(first["created"], json!(true), "{first}");
    assert_eq!(first["continuationToken"], json!("inbox:k1"));
    let keyed = first["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(assert_ok(&a[7])["lastReply"], json!("echo: first"));
    let second = assert_ok(&a[8]);
    assert_eq!(second["created"], json!(false), "{second}");
    assert_eq!(second["sessionId"], json!(keyed));
    let after = assert_ok(&a[9]);
    assert_eq!(after["lastReply"], json!("echo: second"), "{after}");
    assert_eq!(after["turns"], json!(2), "{after}");
    // The keyed session belongs to its sender.
    assert_eq!(after["principal"], json!("alice"));
    assert_error(&a[10], "invalid_args");
    assert!(
        a[10]["message"]
            .as_str()
            .unwrap()
            .contains("give `channel`")
    );
    assert_error(&a[11], "invalid_args");
    let called = assert_ok(&a[12]);
    assert_eq!(called["isError"], json!(false), "{called}");
    assert_eq!(called["sessionId"], Value::Null);
    // The nested call ran with its own token, as alice, bound to nothing.
    let info = &called["result"]["answers"][0]["result"];
    assert_eq!(info["principal"], json!("alice"), "{called}");
    assert_eq!(info["id"], Value::Null, "{called}");
    assert_error(&a[13], "unknown_tool");
    assert_error(&a[14], "invalid_tool_input");
    assert_error(&a[15], "invalid_args");
    assert_error(&a[16], "forbidden");
    assert_error(&a[17], "invalid_args");
    assert_error(&a[18], "invalid_args");
    assert_error(&a[19], "invalid_args");
    assert_error(&a[20], "invalid_args");
    assert_error(&a[21], "invalid_args");

    // A caller without a principal is anonymous, not trusted: it reaches
    // only sessions nobody owns.
    let out = run_client(
        &host,
        Some(&open),
        None,
        json!([
            {"op": "session.get", "args": {"sessionId": alice.as_str()}},
            {"op": "send", "args": {"sessionId": bob.as_str(), "message": "x"}},
            {"op": "session.get", "args": {"channel": "inbox", "key": "k1"}},
        ]),
    )
    .await;
    let a = answers(&out);
    assert_error(&a[0], "forbidden");
    assert_error(&a[1], "forbidden");
    assert_error(&a[2], "forbidden");

    // Nothing was sent where it was refused.
    for id in [&alice, &bob] {
        let events = host.events(id, 0, None).await.unwrap();
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.event, Event::MessageReceived(_))),
            "{events:?}"
        );
    }
}

/// A dry-run session's calls may read sessions but not send into them.
#[tokio::test]
async fn dry_run_calls_may_not_send() {
    let (_dir, host) = setup().await;
    let open = host
        .start_session(StartSession::default())
        .await
        .unwrap()
        .session_id;
    let dry = host
        .start_session(StartSession {
            dry_run: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .session_id;
    let out = run_client(
        &host,
        Some(&dry),
        None,
        json!([
            {"op": "send", "args": {"sessionId": open.as_str(), "message": "x"}},
            {"op": "session.get", "args": {"sessionId": open.as_str()}},
        ]),
    )
    .await;
    let a = answers(&out);
    assert_error(&a[0], "dry_run");
    assert_eq!(assert_ok(&a[1])["status"], json!("waiting"));
}

#[tokio::test]
async fn a_tool_reports_progress_and_log_messages_to_a_listening_caller() {
    use bdk_core::tool::{ToolNote, ToolReporter};
    use std::sync::Mutex;

    let (_dir, host) = setup().await;
    let heard: Arc<Mutex<Vec<ToolNote>>> = Arc::default();
    let sink = heard.clone();
    let requests = json!([
        {"op": "report.progress", "args": {"progress": 1, "total": 3, "message": "one"}},
        {"op": "report.progress", "args": {"progress": 2}},
        {"op": "report.log", "args": {"level": "warning", "message": "careful"}},
        {"op": "report.log", "args": {"level": "debug", "data": {"rows": 7}}},
        // Refused: a level MCP does not know, nothing to say, unknown keys.
        {"op": "report.log", "args": {"level": "loud", "message": "x"}},
        {"op": "report.log", "args": {"level": "info"}},
        {"op": "report.progress", "args": {"progress": 1, "percent": 5}},
        {"op": "report.progress", "args": {"progress": "half"}},
        // Too big to keep waiting in memory for a slow caller.
        {"op": "report.log", "args": {"level": "info", "message": "x".repeat(bdk_core::endpoint::MAX_REPORT_BYTES + 1)}},
        {"op": "report.progress", "args": {"progress": 1, "message": "x".repeat(bdk_core::endpoint::MAX_REPORT_BYTES + 1)}},
    ]);
    let out = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: json!({ "requests": requests }),
            reporter: Some(ToolReporter::new(move |note| {
                sink.lock().unwrap().push(note);
            })),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    let a = answers(&out);
    for ok in &a[..4] {
        assert_eq!(ok["ok"], true, "{ok}");
    }
    for refused in &a[4..] {
        assert_eq!(refused["ok"], false, "{refused}");
        assert_eq!(refused["error"], "invalid_args", "{refused}");
    }
    assert!(
        a[4]["message"]
            .as_str()
            .unwrap()
            .contains("unknown level `loud`"),
        "{}",
        a[4]
    );
    assert!(
        a[8]["message"]
            .as_str()
            .unwrap()
            .contains("at most 16384 bytes"),
        "{}",
        a[8]
    );
    assert_eq!(
        *heard.lock().unwrap(),
        vec![
            ToolNote::Progress {
                progress: 1.0,
                total: Some(3.0),
                message: Some("one".into())
            },
            ToolNote::Progress {
                progress: 2.0,
                total: None,
                message: None
            },
            ToolNote::Log {
                level: "warning".into(),
                data: json!("careful")
            },
            ToolNote::Log {
                level: "debug".into(),
                data: json!({"rows": 7})
            },
        ]
    );

    // Nobody listening: the reports are accepted and go to the log.
    let out = run_client(
        &host,
        None,
        None,
        json!([{"op": "report.progress", "args": {"progress": 1}}]),
    )
    .await;
    assert_eq!(answers(&out)[0]["ok"], true);
}

/// An extension that keeps state of its own in the store, to see the
/// namespaces extensions declare refused like the runtime's.
struct Ledger;

#[async_trait::async_trait]
impl bdk_core::extension::HostExtension for Ledger {
    fn name(&self) -> &'static str {
        "ledger"
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn reserved_namespaces(&self) -> &'static [&'static str] {
        &["ledger-entries"]
    }
}

/// A host like [`setup`]'s with [`Ledger`] and a namespace reserved through
/// the builder (`eval-like`), as the server's parts that are not extensions
/// reserve theirs.
async fn reserving_host(project: &Path) -> Host {
    let d = discover(project);
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(project.join("state")).unwrap());
    Host::builder(d.project.unwrap(), store)
        .extension(Arc::new(Ledger))
        .reserve_namespace("eval-like")
        .build()
        .await
        .unwrap()
}

/// Issue 43, item 4: tools reached the server's own key-value namespaces
/// through the endpoint. Every one of them (the runtime's, an extension's,
/// one reserved through the builder) is now refused for all four `kv.*`
/// operations, nothing reaches the store, and ordinary namespaces work as
/// before.
#[tokio::test]
async fn the_servers_namespaces_are_refused_to_tools() {
    let dir = project_dir();
    let host = reserving_host(dir.path()).await;
    let reserved: Vec<&str> = bdk_core::host::CORE_NAMESPACES
        .iter()
        .copied()
        .chain(["ledger-entries", "eval-like"])
        .collect();
    assert_eq!(
        bdk_core::host::CORE_NAMESPACES,
        ["channel-keys", "channel-events", "queued-messages"]
    );
    let requests: Vec<Value> = reserved
        .iter()
        .chain(&["notes"])
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .collect();
    let out = run_client(&host, None, Some("mallory"), json!(requests)).await;
    let a = answers(&out);
    for (n, namespace) in reserved.iter().enumerate() {
        bdk_testkit::endpoint::assert_reserved(&a[n * 4..n * 4 + 4], namespace);
        assert_eq!(
            host.store().kv_list(namespace, "").await.unwrap(),
            Vec::<String>::new(),
            "{namespace}"
        );
    }
    let ordinary = &a[reserved.len() * 4..];
    assert_eq!(
        assert_ok(&ordinary[0]),
        &json!({"found": false, "value": null})
    );
    assert_ok(&ordinary[1]);
    assert_eq!(assert_ok(&ordinary[2]), &json!({"deleted": true}));
    assert_eq!(assert_ok(&ordinary[3]), &json!({"keys": []}));
}

/// Issue 43, item 4, the campaign's attack: a tool planted a claim on a
/// future conversation's key in `channel-keys` (here naming the tool's own
/// session), so the conversation's first message found the planted session
/// instead of starting its own. The plant is refused, and the conversation
/// starts a session of its own.
#[tokio::test]
async fn a_tool_cannot_squat_a_future_conversation_key() {
    let (_dir, host) = setup().await;
    let squatter = host
        .start_session(StartSession {
            principal: Some("mallory".into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .session_id;
    let now = chrono::Utc::now().to_rfc3339();
    let out = run_client(
        &host,
        Some(&squatter),
        Some("mallory"),
        json!([
            {"op": "kv.put", "args": {"namespace": "channel-keys", "key": "inbox:order-7#0",
                                      "value": {"claimedAt": now, "sessionId": squatter.as_str()}}},
            {"op": "kv.put", "args": {"namespace": "channel-keys", "key": "inbox:order-8#0",
                                      "value": {"claimedAt": now}}},
        ]),
    )
    .await;
    for answer in answers(&out) {
        assert_error(answer, "reserved_namespace");
    }
    for key in ["order-7", "order-8"] {
        let found = tokio::time::timeout(
            Duration::from_secs(10),
            host.session_for_key("inbox", key, StartSession::default()),
        )
        .await
        .expect("no planted claim holds the key up")
        .unwrap();
        let bdk_core::host::KeySession::Started(started) = found else {
            panic!("{key}: the conversation found a session instead of starting one: {found:?}");
        };
        assert_ne!(started.session_id, squatter);
        let record = host.session(&started.session_id, None).await.unwrap();
        assert_eq!(record.continuation_token, format!("inbox:{key}"));
    }
}

/// A handler program reaches the same endpoint as a tool, and is refused
/// the server's namespaces the same way.
#[tokio::test]
async fn the_servers_namespaces_are_refused_to_handlers() {
    let dir = project_dir();
    bdk_testkit::write_files(
        dir.path(),
        &[
            (
                "agent/schedules/probe.toml",
                "cron = \"0 0 1 1 *\"\nhandler = [\"python3\", \"probe.py\"]\n",
            ),
            ("agent/schedules/probe.py", PROBE_HANDLER_PY),
        ],
    );
    let host = reserving_host(dir.path()).await;
    let spec = host
        .project()
        .schedules
        .iter()
        .find_map(|s| match &s.action {
            bdk_core::project::ScheduleAction::Handler { handler } => Some(handler.clone()),
            _ => None,
        })
        .unwrap();
    let requests: Vec<Value> = ["channel-keys", "ledger-entries", "eval-like", "notes"]
        .iter()
        .flat_map(|ns| bdk_testkit::endpoint::kv_requests(ns))
        .collect();
    let mut request = serde_json::Map::new();
    request.insert("requests".into(), json!(requests));
    let answer = host
        .run_handler(
            &spec,
            bdk_core::handler::HandlerCall {
                kind: "schedule",
                request,
                principal: Some("schedule:probe".into()),
                channel: "schedule".into(),
                session: None,
                cancel: tokio_util::sync::CancellationToken::new(),
            },
        )
        .await
        .unwrap();
    let a = answer["answers"].as_array().unwrap();
    for (n, namespace) in ["channel-keys", "ledger-entries", "eval-like"]
        .iter()
        .enumerate()
    {
        bdk_testkit::endpoint::assert_reserved(&a[n * 4..n * 4 + 4], namespace);
    }
    for answer in &a[12..] {
        assert_ok(answer);
    }
}

/// A handler that sends its request's `requests` to the endpoint and
/// answers with what came back.
const PROBE_HANDLER_PY: &str = r#"
import json, os, socket, sys

request = json.loads(sys.stdin.readline())
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(os.environ["BDK_HOST_SOCKET"])
stream = conn.makefile("rwb")
answers = []
for n, step in enumerate(request["requests"]):
    message = dict(step, token=os.environ["BDK_HOST_TOKEN"], id=n)
    stream.write((json.dumps(message) + "\n").encode())
    stream.flush()
    answers.append(json.loads(stream.readline()))
print(json.dumps({"answers": answers}))
"#;
