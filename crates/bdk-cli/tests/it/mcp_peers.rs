#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The agent's own MCP surfaces against independent, official peers:
//!
//! - the Python MCP SDK (PyPI `mcp`, installed by `.ci/run` into
//!   `target/py`) drives `/v1/mcp` over streamable HTTP and `bdk mcp` over
//!   stdio with the weather example;
//! - the MCP conformance suite (npm `@modelcontextprotocol/conformance`,
//!   installed by `.ci/run` into `target/mcp-peers`) runs its server
//!   scenarios against `/v1/mcp` and `/v1/mcp/tools`.
//!
//! A missing peer fails the test with the command that installs it; these
//! tests never skip.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bdk_core::discover;
use bdk_core::host::Host;
use bdk_http::{Config, Mount};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

use crate::common;
use common::copy_dir;

/// A peer run gives up after this long rather than hang.
const DEADLINE: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn python() -> PathBuf {
    let path = workspace().join("target/py/bin/python");
    assert!(
        path.exists(),
        "{} is missing: the Python MCP SDK is a required peer; install it with `.ci/run` or `python3 -m venv target/py && target/py/bin/pip install mcp`",
        path.display()
    );
    path
}

fn conformance() -> PathBuf {
    let path = workspace().join("target/mcp-peers/node_modules/.bin/conformance");
    assert!(
        path.exists(),
        "{} is missing: the MCP conformance suite is a required peer; install it with `.ci/run` or `npm install --prefix target/mcp-peers @modelcontextprotocol/conformance@0.1.13`",
        path.display()
    );
    path
}

/// A copy of the weather example and a state root beside it.
fn weather() -> (TempDir, PathBuf, PathBuf) {
    let (tmp, dir) = common::weather();
    let state = tmp.path().join("state");
    (tmp, dir, state)
}

/// Serves the weather example at `/<slug>` (multi mode), as `bdk serve`
/// does by default; returns the base URL.
async fn serve_weather_multi(dir: &Path, state: &Path, shutdown: &CancellationToken) -> String {
    let d = discover(dir);
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(state).unwrap());
    let host = Host::builder(d.project.unwrap(), store)
        .build()
        .await
        .unwrap();
    let mount = Mount {
        slug: Some("weather".to_owned()),
        host,
        diagnostics: d.diagnostics,
        reload: None,
    };
    let app = bdk_http::app(vec![mount], Config::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = shutdown.clone();
    tokio::spawn(async move { bdk_http::serve(listener, app, token).await });
    format!("http://{addr}")
}

/// Serves the weather example in single mode with the default (loopback)
/// auth on 127.0.0.1:0; returns the base URL.
async fn serve_weather(dir: &Path, state: &Path, shutdown: &CancellationToken) -> String {
    let d = discover(dir);
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let store: Arc<dyn Store> = Arc::new(FsStore::open(state).unwrap());
    let host = Host::builder(d.project.unwrap(), store)
        .build()
        .await
        .unwrap();
    let mount = Mount {
        slug: None,
        host,
        diagnostics: d.diagnostics,
        reload: None,
    };
    let app = bdk_http::app(vec![mount], Config::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = shutdown.clone();
    tokio::spawn(async move { bdk_http::serve(listener, app, token).await });
    format!("http://{addr}")
}

/// Runs the Python client script and returns the JSON it prints.
async fn python_client(args: &[&str]) -> Value {
    python_script("mcp_client.py", args).await
}

/// Runs a Python SDK script of `tests/peers` and returns the JSON it prints.
async fn python_script(name: &str, args: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(name);
    let output = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(python())
            .arg(script)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the Python MCP client did not finish in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python MCP client failed ({}):\n{stderr}\n{stdout}",
        output.status
    );
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("unreadable client report ({e}): {stdout}\n{stderr}"))
}

/// What both transports must show the Python SDK.
fn check_report(report: &Value) {
    let ask = &report["ask"];
    assert_eq!(ask["isError"], false, "{report}");
    assert_eq!(ask["status"], "completed", "{report}");
    assert!(ask["reply"].as_str().unwrap().contains("Paris"), "{report}");
    let check = &report["check"];
    assert_eq!(check["isError"], false, "{report}");
    assert_eq!(check["status"], "completed", "{report}");
    assert_eq!(check["sessionId"], ask["sessionId"], "{report}");
    assert_eq!(check["reply"], ask["reply"], "{report}");
    assert_eq!(check["toolCalls"][0]["name"], "get_weather", "{report}");
    assert_eq!(report["readOnly"]["check"], true, "{report}");
    assert_eq!(report["readOnly"]["ask"], false, "{report}");
    assert_eq!(report["missing"]["isError"], true, "{report}");
    assert!(
        report["missing"]["text"]
            .as_str()
            .unwrap()
            .starts_with("session_not_found:"),
        "{report}"
    );

    // The skill as a prompt, the session's events as a resource.
    let context = &report["context"];
    assert_eq!(
        context["prompts"],
        serde_json::json!(["forecast-style"]),
        "{report}"
    );
    let prompt = &context["prompt"];
    assert_eq!(prompt["role"], "user", "{report}");
    assert!(
        prompt["description"]
            .as_str()
            .unwrap()
            .starts_with("Use when the user asks for a forecast"),
        "{report}"
    );
    assert!(
        prompt["text"]
            .as_str()
            .unwrap()
            .starts_with("# Forecast write-up"),
        "{report}"
    );
    let session = ask["sessionId"].as_str().unwrap();
    let events_uri = format!("bdk://sessions/{session}/events");
    assert!(
        context["resources"]
            .as_array()
            .unwrap()
            .contains(&Value::from(events_uri.as_str())),
        "{report}"
    );
    assert_eq!(
        context["templates"].as_array().unwrap().len(),
        3,
        "{report}"
    );
    let events = &context["events"];
    assert_eq!(events["uri"], events_uri.as_str(), "{report}");
    assert_eq!(events["mimeType"], "application/x-ndjson", "{report}");
    assert_eq!(events["types"][0], "session.started", "{report}");
    assert!(
        events["types"]
            .as_array()
            .unwrap()
            .contains(&Value::from("turn.completed")),
        "{report}"
    );
    assert!(
        context["completion"]
            .as_array()
            .unwrap()
            .contains(&Value::from(session)),
        "{report}"
    );
}

#[tokio::test]
async fn python_sdk_talks_to_the_agent_over_streamable_http() {
    let (_tmp, dir, state) = weather();
    let shutdown = CancellationToken::new();
    let base = serve_weather(&dir, &state, &shutdown).await;
    let report = python_client(&["http", &format!("{base}/v1/mcp")]).await;
    check_report(&report);
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(tools, ["ask", "call_tool", "check"], "{report}");
    let direct = &report["direct"];
    assert_eq!(direct["isError"], false, "{report}");
    assert_eq!(direct["value"]["toolName"], "get_weather", "{report}");
    assert_eq!(direct["value"]["result"]["city"], "Lima", "{report}");
    shutdown.cancel();
}

#[tokio::test]
async fn ask_reports_progress_and_log_messages_to_a_caller_that_asks_for_them() {
    let (_tmp, dir, state) = weather();
    let shutdown = CancellationToken::new();
    let base = serve_weather(&dir, &state, &shutdown).await;
    let url = format!("{base}/v1/mcp");
    let report = python_script("mcp_progress.py", &[&url]).await;
    assert_eq!(report["streamed"]["status"], "completed", "{report}");
    assert!(
        report["streamed"]["reply"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{report}"
    );
    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        messages,
        [
            "step 1",
            "calling get_weather",
            messages[2],
            "step 2",
            "reply ready"
        ],
        "{report}"
    );
    assert!(
        messages[2].starts_with("get_weather answered in "),
        "{report}"
    );
    let values: Vec<f64> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        values.windows(2).all(|w| w[0] < w[1]),
        "progress increases: {values:?}"
    );
    // The same steps as log messages, with the events behind them.
    let logs = report["logs"].as_array().unwrap();
    assert_eq!(logs.len(), messages.len(), "{report}");
    assert!(logs.iter().all(|l| l["logger"] == "bdk.turn"), "{report}");
    assert_eq!(logs[1]["data"]["type"], "actions.requested", "{report}");
    assert_eq!(logs[1]["data"]["data"]["name"], "get_weather", "{report}");
    assert_eq!(logs[4]["data"]["type"], "turn.completed", "{report}");
    // An ask without a progress token hears nothing and still answers.
    assert_eq!(report["quiet"]["status"], "completed", "{report}");
    assert_eq!(report["progressAfterQuiet"], 0, "{report}");
    assert_eq!(logs.len(), 5, "no log messages for the quiet ask: {report}");

    // On the wire: a call without a token is answered as plain JSON; with
    // one, as an event stream that carries the notifications first.
    bdk_models::net::install_crypto_provider();
    let http = reqwest::Client::new();
    let call = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "ask", "arguments": {"message": "What's the weather in Rome?"}, "_meta": meta}})
    };
    let plain = http
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&call(json!({})))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.headers()["content-type"], "application/json");
    let answer: Value = plain.json().await.unwrap();
    assert_eq!(
        answer["result"]["structuredContent"]["status"], "completed",
        "{answer}"
    );
    let streamed = http
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&call(json!({"progressToken": "p-1"})))
        .send()
        .await
        .unwrap();
    assert!(
        streamed.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = streamed.text().await.unwrap();
    let frames: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    let progress = frames
        .iter()
        .position(|f| f["method"] == "notifications/progress")
        .unwrap_or_else(|| panic!("no progress notification: {body}"));
    let result = frames
        .iter()
        .position(|f| f["id"] == 7)
        .unwrap_or_else(|| panic!("no result: {body}"));
    assert!(progress < result, "{body}");
    assert_eq!(frames[progress]["params"]["progressToken"], "p-1", "{body}");
    assert_eq!(
        frames[result]["result"]["structuredContent"]["status"],
        "completed"
    );
    shutdown.cancel();
}

#[tokio::test]
async fn python_sdk_talks_to_bdk_mcp_over_stdio() {
    let (_tmp, dir, state) = weather();
    let report = python_client(&[
        "stdio",
        env!("CARGO_BIN_EXE_bdk"),
        dir.to_str().unwrap(),
        state.to_str().unwrap(),
    ])
    .await;
    check_report(&report);
    let tools: Vec<&str> = report["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"get_weather"), "{report}");
    assert!(!tools.contains(&"call_tool"), "{report}");
    assert_eq!(report["readOnly"]["get_weather"], true, "{report}");
    let direct = &report["direct"];
    assert_eq!(direct["isError"], false, "{report}");
    assert_eq!(direct["value"]["city"], "Lima", "{report}");
}

/// An agent whose `deploy` tool needs approval, asked to deploy.
fn deploy_agent() -> (TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deployer");
    bdk_testkit::AgentFolder::new()
        .rules(
            r#"
[[rules]]
user_contains = "deploy"
tool_calls = [{ name = "deploy", input = { env = "production" } }]

[[rules]]
tool_result = "deploy"
reply = "deploy said: {{ result_text }}"

[[rules]]
reply = "ok"
"#,
        )
        .tool(
            "deploy",
            "description = \"Deploys the build.\"\neffect = \"write\"\nneeds_approval = true\ncommand = [\"python3\", \"deploy.py\"]\n\n[input_schema]\ntype = \"object\"\n",
        )
        .tool_script("deploy.py", "print('deployed')\n")
        .write_to(&dir);
    let state = tmp.path().join("state");
    (tmp, dir, state)
}

async fn elicit(choice: &str) -> (Value, Vec<Value>) {
    let (_tmp, dir, state) = deploy_agent();
    let report = python_script(
        "mcp_elicit.py",
        &[
            env!("CARGO_BIN_EXE_bdk"),
            dir.to_str().unwrap(),
            state.to_str().unwrap(),
            choice,
        ],
    )
    .await;
    let session = report["ask"]["sessionId"].as_str().unwrap().to_owned();
    let store = FsStore::open(&state).unwrap();
    let events = store
        .read(&bdk_events::SessionId::parse(&session).unwrap(), 0)
        .await
        .unwrap();
    let events = events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    (report, events)
}

#[tokio::test]
async fn a_parked_call_is_asked_as_an_elicitation_form_over_stdio() {
    // Approved in the form: the call runs, recorded as approved by `local`.
    let (report, events) = elicit("approve").await;
    let forms = report["forms"].as_array().unwrap();
    assert_eq!(forms.len(), 1, "{report}");
    let message = forms[0]["message"].as_str().unwrap();
    assert!(
        message.contains("`deploy`") && message.contains("production"),
        "{report}"
    );
    assert_eq!(
        forms[0]["schema"]["required"],
        json!(["approve"]),
        "{report}"
    );
    assert_eq!(report["ask"]["status"], "completed", "{report}");
    assert_eq!(report["ask"]["reply"], "deploy said: deployed", "{report}");
    let resolved = events
        .iter()
        .find(|e| e["type"] == "action.approval_resolved")
        .unwrap_or_else(|| panic!("{events:#?}"));
    assert_eq!(resolved["data"]["approved"], true);
    assert_eq!(resolved["data"]["by"], "local");
    assert_eq!(resolved["data"]["reason"], "looks right");

    // Denied: the model gets the denial, and nothing ran.
    let (report, events) = elicit("deny").await;
    assert_eq!(report["ask"]["status"], "completed", "{report}");
    let resolved = events
        .iter()
        .find(|e| e["type"] == "action.approval_resolved")
        .unwrap();
    assert_eq!(resolved["data"]["approved"], false);
    assert_eq!(resolved["data"]["reason"], "not today");
    assert!(
        !report["ask"]["reply"]
            .as_str()
            .unwrap()
            .contains("deployed"),
        "{report}"
    );

    // Dismissed: no decision; the call stays parked for the session API.
    let (report, events) = elicit("dismiss").await;
    assert_eq!(report["forms"].as_array().unwrap().len(), 1, "{report}");
    assert_eq!(report["ask"]["status"], "running", "{report}");
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "action.approval_resolved"),
        "{events:#?}"
    );
}

/// The conformance scenarios that pass against the fixture agent
/// (`tests/fixtures/mcp-conformance`) on `/v1/mcp`, each for what it claims:
/// the lifecycle, ping, listing tools, the Host-header check, the agent's
/// skills as prompts (the fixture's `test_simple_prompt` and
/// `test_prompt_with_arguments`, with substitution and completion, and
/// `test_prompt_with_image` and `test_prompt_with_embedded_resource`,
/// whose attachments are an image and an embedded resource), its declared
/// resources (`test://static-text`, `test://static-binary` and the
/// template `test://template/{id}/data` over a fixture tool), its
/// sessions' events as resources, and an accepted log level. The
/// `tools-call-*` scenarios are not counted here: they call fixture tools by
/// name, and this endpoint serves `ask`, `check` and `call_tool` only.
const PASSING_AGENT: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "dns-rebinding-protection",
    "prompts-list",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-with-image",
    "prompts-get-embedded-resource",
    "completion-complete",
    "resources-list",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "logging-set-level",
];

/// The same on `/v1/mcp/tools`, where the fixture's tools are served by
/// name: a text result (`test_simple_text`), a tool error
/// (`test_error_handling`), results of MCP content blocks (image, audio,
/// embedded resource, all three with text), and a tool that reports
/// progress and one that logs, through the host endpoint.
const PASSING_TOOLS: &[&str] = &[
    "server-initialize",
    "ping",
    "tools-list",
    "logging-set-level",
    "tools-call-simple-text",
    "tools-call-error",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-with-progress",
    "tools-call-with-logging",
    "dns-rebinding-protection",
];

/// `scenario -> (passed, failed)` from the suite's summary lines
/// (`✓ name: 1 passed, 0 failed`).
fn summary(output: &str) -> BTreeMap<String, (u32, u32)> {
    let mut out = BTreeMap::new();
    let Some(start) = output.find("=== SUMMARY ===") else {
        return out;
    };
    for line in output[start..].lines() {
        let line = line.trim_start_matches(['✓', '✗', ' ']);
        let Some((name, counts)) = line.split_once(": ") else {
            continue;
        };
        if name == "Total" {
            continue;
        }
        let numbers: Vec<u32> = counts
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let [passed, failed] = numbers[..]
            && counts.contains("passed")
        {
            out.insert(name.to_owned(), (passed, failed));
        }
    }
    out
}

/// The newest conformance suite and the Node 22 it needs, from npm (see
/// `.ci/test-deps`): `(suite, node's bin dir)`.
fn conformance_next() -> (PathBuf, PathBuf) {
    let bin = workspace().join("target/mcp-peers-next/node_modules/.bin");
    assert!(
        bin.join("conformance").exists() && bin.join("node").exists(),
        "{} lacks the newest conformance suite or Node 22; install them with `.ci/run` or `npm install --prefix target/mcp-peers-next node@22 @modelcontextprotocol/conformance@0.1.16`",
        bin.display()
    );
    (bin.join("conformance"), bin)
}

#[tokio::test]
async fn conformance_suite_passes_its_scenarios_against_the_fixture_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("conformance");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp-conformance"),
        &dir,
    );
    let state = tmp.path().join("state");
    let shutdown = CancellationToken::new();
    let base = serve_weather(&dir, &state, &shutdown).await;
    // The pinned release on the machine's node, and the newest one on Node
    // 22 (its own binary first on PATH): both must pass the same list.
    let (next, node22) = conformance_next();
    let path_with_node22 = std::env::join_paths(std::iter::once(node22).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let suites = [
        (
            "0.1.13",
            conformance(),
            std::env::var_os("PATH").unwrap_or_default(),
        ),
        ("0.1.16", next, path_with_node22),
    ];
    for (release, suite, search_path) in &suites {
        for path in ["/v1/mcp", "/v1/mcp/tools"] {
            let url = format!("{base}{path}");
            let output = tokio::time::timeout(
                DEADLINE,
                tokio::process::Command::new(suite)
                    .args(["server", "--url", &url])
                    .env("PATH", search_path)
                    // The suite writes result files into its working directory.
                    .current_dir(tmp.path())
                    .kill_on_drop(true)
                    .output(),
            )
            .await
            .expect("the conformance suite did not finish in time")
            .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let results = summary(&text);
            assert!(
                !results.is_empty(),
                "conformance {release} printed no summary for {url}:\n{text}"
            );
            let (passed, failed) = results
                .values()
                .fold((0, 0), |(p, f), (sp, sf)| (p + sp, f + sf));
            eprintln!("conformance {release} {path}: {passed} checks passed, {failed} failed");
            for (name, (p, f)) in &results {
                eprintln!("  {name}: {p} passed, {f} failed");
            }
            let passing = if path == "/v1/mcp" {
                PASSING_AGENT
            } else {
                PASSING_TOOLS
            };
            for name in passing {
                let (p, f) = results.get(*name).unwrap_or_else(|| {
                    panic!("scenario {name} did not run in {release} for {url}:\n{text}")
                });
                assert!(
                    *p > 0 && *f == 0,
                    "scenario {name} failed in {release} for {url}:\n{text}"
                );
            }
        }
    }
    shutdown.cancel();
}

#[tokio::test]
async fn the_peer_example_consults_the_weather_agent_over_mcp() {
    let (tmp, dir, state) = weather();
    let shutdown = CancellationToken::new();
    let base = serve_weather_multi(&dir, &state, &shutdown).await;
    // The example's connection names port 3000; point it at this server.
    let peer = tmp.path().join("peer");
    copy_dir(&workspace().join("examples/peer"), &peer);
    let manifest = peer.join("agent/mcp-connections/weather.toml");
    let text = std::fs::read_to_string(&manifest).unwrap();
    assert!(
        text.contains("http://127.0.0.1:3000/weather/v1/mcp"),
        "{text}"
    );
    std::fs::write(&manifest, text.replace("http://127.0.0.1:3000", &base)).unwrap();
    let output = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"))
            .args(["run", "--dir"])
            .arg(&peer)
            .arg("--state-root")
            .arg(tmp.path().join("peer-state"))
            .args(["-m", "Planning a trip to Paris"])
            .env_remove("BDK_STATE_ROOT")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("bdk run did not finish in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bdk run failed:\n{stderr}\n{stdout}"
    );
    let run: Value = serde_json::from_str(&stdout).unwrap();
    let reply = run["reply"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply: {run}"));
    assert!(reply.starts_with("I asked the weather agent:"), "{reply}");
    assert!(reply.contains("sunny in Paris"), "{reply}");
    shutdown.cancel();
}

#[tokio::test]
async fn the_peer_example_runs_the_weather_agent_over_stdio_with_its_tools_nested() {
    // The weather agent as a stdio MCP server of the planner: `bdk mcp`
    // runs inside the planner's sandbox, so its own tools start in a
    // sandbox nested in that one (no namespaces of their own: the outer
    // filter refuses them; Landlock and the filter stack).
    let (tmp, dir, state) = weather();
    let peer = tmp.path().join("peer");
    copy_dir(&workspace().join("examples/peer"), &peer);
    let manifest = peer.join("agent/mcp-connections/weather.toml");
    let args = serde_json::to_string(&[
        "mcp",
        "--dir",
        dir.to_str().unwrap(),
        "--state-root",
        state.to_str().unwrap(),
    ])
    .unwrap();
    std::fs::write(
        &manifest,
        format!(
            "command = {:?}\nargs = {args}\nadvertise_tools = true\ntimeout_ms = 60000\n",
            env!("CARGO_BIN_EXE_bdk")
        ),
    )
    .unwrap();
    let output = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"))
            .args(["run", "--dir"])
            .arg(&peer)
            .arg("--state-root")
            .arg(tmp.path().join("peer-state"))
            .args(["-m", "Planning a trip to Paris"])
            .env_remove("BDK_STATE_ROOT")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("bdk run did not finish in time")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "bdk run failed:\n{stderr}\n{stdout}"
    );
    let run: Value = serde_json::from_str(&stdout).unwrap();
    let reply = run["reply"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply: {run}"));
    // The reply carries what the nested `get_weather` answered.
    assert!(reply.contains("sunny in Paris"), "{reply}\n{stderr}");
}
