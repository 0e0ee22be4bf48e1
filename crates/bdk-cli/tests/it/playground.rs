#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The playground in a real browser: headless Chromium (Debian's `chromium`,
//! driven by `playwright-core` from npm, both installed by `.ci/test-deps`)
//! against a real `bdk serve --dev` of the weather example with the
//! `playground-weather` overlay (an approval tool, a channel, extra rules).
//!
//! The browser steps live in `tests/playground/*.mjs`; each test here starts
//! the server, runs one script with `node` and fails with the script's output
//! when it fails. Screenshots of every surface land in
//! `target/playground-screenshots/`. A missing browser, `node` or
//! `playwright-core` fails the test, naming the install step: the suite must
//! not pass by skipping.

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use tempfile::TempDir;

use crate::common;
use common::{Server, copy_dir};

const CHROMIUM: &str = "/usr/bin/chromium";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The weather example plus the overlay; the overlay's extra rules go in
/// front of the example's own.
fn fixture() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("weather");
    copy_dir(&workspace().join("examples/weather"), &dir);
    let overlay = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/playground-weather");
    copy_dir(&overlay, &dir);
    let extra = dir.join("agent/scripted-extra.toml");
    let rules = dir.join("agent/scripted.toml");
    let merged = format!(
        "{}\n{}",
        std::fs::read_to_string(&extra).unwrap(),
        std::fs::read_to_string(&rules).unwrap()
    );
    std::fs::write(&rules, merged).unwrap();
    std::fs::remove_file(extra).unwrap();
    (tmp, dir)
}

/// Where `.ci/test-deps` installs playwright-core.
fn playwright_dir() -> PathBuf {
    workspace().join("target/playground/node_modules/playwright-core")
}

/// Fails loudly when the browser tool chain is missing.
fn require_browser() {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.as_ref().is_ok_and(|o| o.status.success()),
        "`node` is missing; run .ci/test-deps (it installs nodejs, chromium and playwright-core)"
    );
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing; run .ci/test-deps (apt-get install chromium)"
    );
    assert!(
        playwright_dir().join("package.json").exists(),
        "playwright-core is missing under target/playground; run .ci/test-deps"
    );
}

/// Starts the fixture under `--dev`, with request logging on so the Logs
/// tab has lines to show.
fn serve(dir: &Path, extra: &[&str]) -> Server {
    let mut cmd = Server::command(&[dir]);
    cmd.arg("--dev")
        .args(extra)
        .env("BDK_LOG", "info,tower_http=debug");
    Server::spawn(cmd)
}

/// Runs one browser script against `agent_url`; panics with its output when
/// it fails.
fn run_script(script: &str, agent_url: &str, server: &Server) {
    run_script_with(script, agent_url, server, &[]);
}

fn run_script_with(script: &str, agent_url: &str, server: &Server, vars: &[(&str, &str)]) {
    require_browser();
    let shots = workspace().join("target/playground-screenshots");
    // Failure screenshots of an earlier run of this script would mislead.
    let stem = script.trim_end_matches(".mjs");
    if let Ok(entries) = std::fs::read_dir(&shots) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&format!("failure-{stem}-")) {
                std::fs::remove_file(entry.path()).unwrap();
            }
        }
    }
    let work = tempfile::tempdir().unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/playground")
        .join(script);
    let out = Command::new("node")
        .arg(&path)
        .env("AGENT_URL", agent_url)
        .env("CHROMIUM", CHROMIUM)
        .env("PLAYWRIGHT_DIR", playwright_dir())
        .env("SHOTS", &shots)
        .env("WORK", work.path())
        // Never let playwright fetch a browser of its own.
        .env("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
        .envs(vars.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}\nserver stderr:\n{}",
        out.status,
        server.stderr.lock().unwrap()
    );
    println!("{stdout}");
}

#[test]
fn every_surface_works_in_a_real_browser() {
    let (_tmp, dir) = fixture();
    let server = serve(&dir, &[]);
    let agent = format!("{}/weather", server.base);
    run_script("surfaces.mjs", &agent, &server);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_index_links_the_playground_and_no_playground_removes_it() {
    let (_tmp, dir) = fixture();
    let c = common::client();

    let server = serve(&dir, &[]);
    let index = c.get(&server.base).send().await.unwrap();
    assert_eq!(index.status(), 200);
    let html = index.text().await.unwrap();
    assert!(html.contains("href=\"/weather/playground\""), "{html}");
    let page = c
        .get(format!("{}/weather/playground", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let body = page.text().await.unwrap();
    assert!(body.contains("content=\"/weather\""), "{body}");
    let started: serde_json::Value = c
        .post(format!("{}/weather/v1/session", server.base))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        started["playgroundUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!(
                "/weather/playground?sessionId={}",
                started["sessionId"].as_str().unwrap()
            )),
        "{started}"
    );
    drop(server);

    let server = serve(&dir, &["--no-playground"]);
    let html = c
        .get(&server.base)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!html.contains("playground"), "{html}");
    for path in ["/weather/playground", "/weather/playground/assets/app.js"] {
        let resp = c
            .get(format!("{}{path}", server.base))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
    }
    let meta = common::get_json(&c, &format!("{}/weather/v1/meta", server.base)).await;
    assert_eq!(meta["playground"], false);
}

#[test]
fn the_evals_tab_runs_cancels_and_explains_failures() {
    let (_tmp, dir) = fixture();
    let server = serve(&dir, &[]);
    let agent = format!("{}/weather", server.base);
    run_script("evals.mjs", &agent, &server);
}

#[test]
fn the_token_field_admits_a_bearer_caller() {
    let (_tmp, dir) = fixture();
    let server = serve(&dir, &["--bearer-token", "ops=s3cret-token"]);
    let agent = format!("{}/weather", server.base);
    run_script_with("token.mjs", &agent, &server, &[("TOKEN", "s3cret-token")]);
}

#[test]
fn the_playground_notices_reloads_under_bdk_dev() {
    let (_tmp, dir) = fixture();
    let mut cmd = Command::cargo_bin("bdk").unwrap();
    cmd.arg("dev")
        .arg(&dir)
        .args(["--port", "0"])
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN");
    let server = Server::spawn(cmd);
    let agent = format!("{}/weather", server.base);
    let dir = dir.to_string_lossy().into_owned();
    run_script_with("dev.mjs", &agent, &server, &[("AGENT_DIR", dir.as_str())]);
}

#[test]
fn chat_and_trace_show_result_gate_verdicts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gated");
    copy_dir(&workspace().join("examples/gated"), &dir);
    let server = serve(&dir, &[]);
    let agent = format!("{}/gated", server.base);
    run_script("gates.mjs", &agent, &server);
}

/// A tool that answers with text, an image, audio and an embedded resource.
const BLOCKS_PY: &str = r#"
import base64, io, json, wave
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
buf = io.BytesIO()
with wave.open(buf, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(8000)
    w.writeframes(b"\0\0" * 800)
print(json.dumps({"content": [
    {"type": "text", "text": "Rendered the chart."},
    {"type": "image", "data": PNG, "mimeType": "image/png"},
    {"type": "audio", "data": base64.b64encode(buf.getvalue()).decode(), "mimeType": "audio/wav"},
    {"type": "resource", "resource": {"uri": "chart://q3", "mimeType": "text/plain", "text": "Q3 went up."}},
    {"type": "image", "data": PNG, "mimeType": "image/svg+xml"},
]}))
"#;

#[test]
fn tool_content_blocks_render_in_the_chat() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("charts");
    bdk_testkit::write_files(
        &dir,
        &[
            ("agent/agent.toml", "model = \"scripted\"\n"),
            ("agent/instructions.md", "Draw charts.\n"),
            (
                "agent/scripted.toml",
                "[[rules]]\nuser_contains = \"chart\"\ntool_calls = [{ name = \"chart\", input = {} }]\n\n[[rules]]\ntool_result = \"chart\"\nreply = \"Here it is.\"\n\n[[rules]]\nreply = \"ok\"\n",
            ),
            (
                "agent/tools/chart.toml",
                "description = \"Draws the chart.\"\neffect = \"read\"\ncommand = [\"python3\", \"chart.py\"]\n[input_schema]\ntype = \"object\"\n",
            ),
            ("agent/tools/chart.py", BLOCKS_PY),
        ],
    );
    let server = serve(&dir, &[]);
    let agent = format!("{}/charts", server.base);
    run_script("blocks.mjs", &agent, &server);
}
