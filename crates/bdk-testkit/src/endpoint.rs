//! A subprocess tool that talks to the host endpoint, for tests of
//! host-endpoint operations (`kv.*`, `reminders.*`, `github.*`, `slack.*`,
//! ...): add [`CLIENT_TOML`] and [`CLIENT_PY`] to an agent folder as
//! `agent/tools/client.toml` and `agent/tools/client.py`, call
//! the `client` tool with `{"requests": [...]}`, and read `answers` from
//! its result.
//!
//! Each request is `{"op", "args"}` (args optional), or `{"raw": LINE}` to
//! send a line as it is, and may carry its own `token`; the requests run in
//! order on one connection. The tool prints
//! `{"socket", "token", "answers"}`: the endpoint's socket and token from
//! its environment, and one answer per request.

/// The tool program (Python, standard library only).
pub const CLIENT_PY: &str = r#"
import json, os, socket, sys

request = json.loads(sys.stdin.readline())
steps = request["input"]["requests"]
path = os.environ["BDK_HOST_SOCKET"]
token = os.environ["BDK_HOST_TOKEN"]
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(path)
stream = conn.makefile("rwb")
answers = []
for n, step in enumerate(steps):
    if "raw" in step:
        line = step["raw"]
    else:
        message = {"token": step.get("token", token), "id": n, "op": step["op"]}
        if "args" in step:
            message["args"] = step["args"]
        line = json.dumps(message)
    stream.write(line.encode() + b"\n")
    stream.flush()
    answers.append(json.loads(stream.readline()))
print(json.dumps({"socket": path, "token": token, "answers": answers}))
"#;

/// The tool's manifest: a read tool named after its file, `client`.
pub const CLIENT_TOML: &str = r#"
description = "Runs requests against the host endpoint."
effect = "read"
command = ["python3", "client.py"]

[input_schema]
type = "object"
required = ["requests"]
properties = { requests = { type = "array" } }
"#;

/// The four `kv.*` requests on `namespace` for the client tool: `kv.get`,
/// `kv.put`, `kv.delete` and `kv.list`, in that order. A test sends them to
/// see a reserved namespace refused (with [`assert_reserved`]) or an
/// ordinary one served.
pub fn kv_requests(namespace: &str) -> Vec<serde_json::Value> {
    let key = serde_json::json!({"namespace": namespace, "key": "probe"});
    vec![
        serde_json::json!({"op": "kv.get", "args": key}),
        serde_json::json!({"op": "kv.put", "args": {"namespace": namespace, "key": "probe", "value": {"planted": true}}}),
        serde_json::json!({"op": "kv.delete", "args": key}),
        serde_json::json!({"op": "kv.list", "args": {"namespace": namespace}}),
    ]
}

/// Asserts that every answer to [`kv_requests`]`(namespace)` refuses it
/// with `reserved_namespace` and a message that names it as the server's.
pub fn assert_reserved(answers: &[serde_json::Value], namespace: &str) {
    assert_eq!(answers.len(), 4, "{namespace}: {answers:?}");
    for (answer, op) in answers.iter().zip(["get", "put", "delete", "list"]) {
        assert_eq!(answer["ok"], false, "kv.{op} {namespace}: {answer}");
        assert_eq!(
            answer["error"], "reserved_namespace",
            "kv.{op} {namespace}: {answer}"
        );
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!("`{namespace}`"))
                && message.contains("belongs to the server"),
            "kv.{op} {namespace}: {answer}"
        );
    }
}

/// An agent folder with the client tool and a scripted model that answers
/// "ok": the set-up of a test of a pack's endpoint operations. Add the
/// pack's channel with [`AgentFolder::channel`](crate::folder::AgentFolder::channel).
pub fn client_agent() -> crate::folder::AgentFolder {
    crate::folder::AgentFolder::new()
        .rules("[[rules]]\nreply = \"ok\"\n")
        .tool("client", CLIENT_TOML)
        .tool_script("client.py", CLIENT_PY)
}

/// Runs the client tool on `host` with `requests`: unbound to any session,
/// or bound to a fresh dry-run session. The answers, one per request; a
/// failed call fails the test.
pub async fn run_client(
    host: &bdk_core::host::Host,
    dry_run: bool,
    requests: serde_json::Value,
) -> Vec<serde_json::Value> {
    use bdk_core::host::{DirectCall, StartSession};
    let session_id = if dry_run {
        let started = host
            .start_session(StartSession {
                dry_run: true,
                ..StartSession::default()
            })
            .await
            .unwrap();
        Some(started.session_id)
    } else {
        None
    };
    let out = host
        .call_tool(DirectCall {
            name: "client".into(),
            input: serde_json::json!({ "requests": requests }),
            session_id,
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!out.is_error, "{:?}", out.result);
    out.result["answers"].as_array().unwrap().clone()
}

/// The result of an answer that must have succeeded.
pub fn ok(answer: &serde_json::Value) -> &serde_json::Value {
    assert_eq!(answer["ok"], serde_json::json!(true), "{answer}");
    &answer["result"]
}

/// The message of an answer that must have been refused with `code`.
pub fn refused(answer: &serde_json::Value, code: &str) -> String {
    assert_eq!(answer["ok"], serde_json::json!(false), "{answer}");
    assert_eq!(answer["error"], serde_json::json!(code), "{answer}");
    answer["message"].as_str().unwrap().to_owned()
}
