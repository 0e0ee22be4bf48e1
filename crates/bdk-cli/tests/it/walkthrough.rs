#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Runs `docs/http-walkthrough.md` as written: its ```sh blocks, in order,
//! as one bash script (`-euo pipefail`) against a real `bdk serve` of a copy
//! of `examples/weather` on a free port.
//!
//! The block that starts the server (marked with [`SERVER_MARKER`]) is
//! skipped: the test starts the binary itself and rewrites the page's
//! `http://127.0.0.1:3000` to the real address and a leading `bdk` to the
//! binary under test. Blocks share shell variables and functions, exactly
//! as they do for a reader pasting them into one terminal.
//!
//! curl is required, not optional: without it the page cannot be checked,
//! and a silently skipped doc test is how docs rot. `.ci/run` installs it.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::common;
use common::copy_dir;

/// The comment that marks the block starting the server.
const SERVER_MARKER: &str = "# (the test starts this server itself)";
/// The server address the page uses.
const DOC_ORIGIN: &str = "http://127.0.0.1:3000";
/// How long the whole script may take; it needs a few seconds.
const DEADLINE: Duration = Duration::from_secs(120);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Fails (never skips) when a program the page needs is missing.
fn require(program: &str, why: &str) {
    let found = std::process::Command::new(program)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "`{program}` is not installed or does not run: the walkthrough test needs it because {why}. \
         Install it (Debian/Ubuntu: `apt-get install -y {program}`); .ci/run does this in CI."
    );
}

/// The ```sh blocks of a Markdown page, in order.
fn sh_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_end() == "```sh" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.push(current.take().unwrap()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(current.is_none(), "an unterminated ```sh block");
    blocks
}

/// Points the page at the test's server and binary.
fn rewrite(block: &str, base: &str, bdk: &Path) -> (String, usize) {
    let quoted = format!("'{}'", bdk.display());
    let mut commands = 0;
    let mut out = String::new();
    for line in block.lines() {
        let line = line.replace(DOC_ORIGIN, base);
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with("bdk ") {
            commands += 1;
            out.push_str(&line[..indent]);
            out.push_str(&quoted);
            out.push_str(&line[indent + "bdk".len()..]);
        } else {
            out.push_str(&line);
        }
        out.push('\n');
    }
    (out, commands)
}

/// A running `bdk serve`; killed when dropped.
struct Server {
    _child: tokio::process::Child,
    /// `http://127.0.0.1:<port>`.
    base: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `bdk serve examples/weather --port 0` in `dir`; returns it and
    /// the binary's path.
    async fn start(dir: &Path) -> (Server, PathBuf) {
        let mut std_cmd = std::process::Command::cargo_bin("bdk").unwrap();
        let program = PathBuf::from(std_cmd.get_program());
        std_cmd
            .args(["serve", "examples/weather", "--port", "0"])
            .current_dir(dir)
            .env_remove("BDK_STATE_ROOT")
            .env_remove("BDK_BEARER_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut cmd = tokio::process::Command::from(std_cmd);
        cmd.kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();

        // Keep both pipes drained for the server's whole life, so a chatty
        // log can never block it.
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let mut err_lines = BufReader::new(child.stderr.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err_lines.next_line().await {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let mut out_lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), out_lines.next_line())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "bdk serve printed no address; stderr:\n{}",
                    stderr.lock().unwrap()
                )
            })
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "bdk serve exited before listening; stderr:\n{}",
                    stderr.lock().unwrap()
                )
            });
        tokio::spawn(async move { while let Ok(Some(_)) = out_lines.next_line().await {} });
        let base = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line of bdk serve: {first}"))
            .to_owned();
        (
            Server {
                _child: child,
                base,
                stderr,
            },
            program,
        )
    }
}

/// The value printed on the line `<label>: <value>`.
fn labelled<'a>(stdout: &'a str, label: &str) -> &'a str {
    let prefix = format!("{label}: ");
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("the walkthrough printed no `{label}:` line:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_walkthrough_runs_as_written() {
    require("curl", "every step of the page is a curl command");
    require(
        "python3",
        "the page reads JSON fields with python3 and the weather tool is Python",
    );
    require("bash", "the page is a bash session");

    let markdown = std::fs::read_to_string(workspace().join("docs/http-walkthrough.md")).unwrap();
    let blocks = sh_blocks(&markdown);
    let servers: Vec<usize> = (0..blocks.len())
        .filter(|&i| blocks[i].lines().any(|l| l.trim() == SERVER_MARKER))
        .collect();
    assert_eq!(
        servers.len(),
        1,
        "exactly one block must carry `{SERVER_MARKER}`"
    );
    assert!(
        blocks[servers[0]].contains("bdk serve examples/weather"),
        "the marked block must be the one that starts the server"
    );

    let tmp = tempfile::tempdir().unwrap();
    copy_dir(
        &workspace().join("examples/weather"),
        &tmp.path().join("examples/weather"),
    );
    let (server, bdk) = Server::start(tmp.path()).await;

    // One script, so variables and functions carry over between blocks; a
    // marker before each block tells which one failed.
    let mut script = String::new();
    let mut bdk_commands = 0;
    let mut last = 0;
    for (i, block) in blocks.iter().enumerate() {
        if i == servers[0] {
            continue;
        }
        let (text, commands) = rewrite(block, &server.base, &bdk);
        bdk_commands += commands;
        last = i + 1;
        script.push_str(&format!("printf '\\n@@ block {last} @@\\n'\n{text}\n"));
    }
    assert!(bdk_commands > 0, "no block runs the bdk binary");
    let path = tmp.path().join("walkthrough.sh");
    std::fs::write(&path, &script).unwrap();

    let run = tokio::process::Command::new("bash")
        .args(["-euo", "pipefail"])
        .arg(&path)
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(DEADLINE, run)
        .await
        .unwrap_or_else(|_| panic!("the walkthrough did not finish within {DEADLINE:?}"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    if !output.status.success() {
        let failed = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("@@ block "))
            .next_back()
            .and_then(|l| l.strip_suffix(" @@"))
            .unwrap_or("?");
        panic!(
            "the walkthrough failed in ```sh block {failed} ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n--- server stderr\n{}",
            output.status,
            server.stderr.lock().unwrap()
        );
    }
    assert!(
        stdout.contains(&format!("@@ block {last} @@")),
        "the last block did not run:\n{stdout}"
    );

    // The outputs the page talks about.
    let reply = labelled(&stdout, "reply");
    assert!(reply.contains("Paris"), "first reply: {reply}");
    let second = labelled(&stdout, "second reply");
    assert!(second.contains("Tokyo"), "second reply: {second}");
    let old = labelled(&stdout, "old token");
    let new = labelled(&stdout, "new token");
    assert!(
        old.starts_with("http:") && new.starts_with("http:"),
        "{old} {new}"
    );
    assert_ne!(old, new, "the follow-up did not rotate the token");
    assert_eq!(labelled(&stdout, "stale token answer"), "409");
    assert!(stdout.contains("\"toolName\":\"get_weather\""), "{stdout}");
    assert!(stdout.contains("invalid_tool_input"), "{stdout}");

    // The server agrees: the token the page ended with is the current one.
    let session = labelled(&stdout, "session");
    bdk_models::net::install_crypto_provider();
    let listed: Value = reqwest::get(format!("{}/weather/v1/sessions", server.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let record = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["sessionId"] == session)
        .unwrap_or_else(|| panic!("session {session} is not listed: {listed}"));
    assert_eq!(record["continuationToken"], new);
}

#[test]
fn blocks_are_read_in_order_and_rewritten() {
    let page = "text\n```sh\nbdk validate x\ncurl http://127.0.0.1:3000/v1\n```\n\n```json\n{}\n```\n```sh\n  bdk serve\n```\n";
    let blocks = sh_blocks(page);
    assert_eq!(blocks.len(), 2);
    let (first, n) = rewrite(&blocks[0], "http://127.0.0.1:9", Path::new("/b/bdk"));
    assert_eq!(n, 1);
    assert_eq!(first, "'/b/bdk' validate x\ncurl http://127.0.0.1:9/v1\n");
    let (second, n) = rewrite(&blocks[1], "x", Path::new("/b/bdk"));
    assert_eq!((second.as_str(), n), ("  '/b/bdk' serve\n", 1));
}
