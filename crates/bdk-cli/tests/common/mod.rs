//! Helpers shared by the tests that drive a real `bdk serve`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use futures::StreamExt;
use serde_json::Value;
use tempfile::TempDir;

/// Copies the tree `from` into `to`, leaving out `.bdk` and `__pycache__`:
/// state and caches of someone's local runs are not part of an example.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == ".bdk" || name == "__pycache__" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A private copy of the weather example (the `weather` directory in a
/// fresh temporary directory), so state never lands in the repo.
pub fn weather() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("weather");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather"),
        &dir,
    );
    (tmp, dir)
}

/// A running `bdk serve`; killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub fn start(args: &[&str], dirs: &[&Path]) -> Server {
        let mut cmd = Command::cargo_bin("bdk").unwrap();
        cmd.arg("serve").args(dirs).args(["--port", "0"]).args(args);
        cmd.env_remove("BDK_STATE_ROOT")
            .env_remove("BDK_BEARER_TOKEN");
        Self::spawn(cmd)
    }

    pub fn spawn(mut cmd: Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let captured = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = captured.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(first)) = lines.next() {
                let _ = tx.send(first);
            }
            for _ in lines {}
        });
        let first = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| {
                panic!(
                    "serve printed no address; stderr:\n{}",
                    captured.lock().unwrap()
                )
            });
        let base = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line: {first}"))
            .to_owned();
        Server {
            child,
            base,
            stderr: captured,
        }
    }

    /// Waits (polling, up to a minute) until the captured stderr satisfies
    /// `ready`, and returns it.
    pub fn wait_for_stderr(&self, mut ready: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = self.stderr.lock().unwrap().clone();
            if ready(&text) {
                return text;
            }
            assert!(Instant::now() < deadline, "stderr never got there:\n{text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn terminate(&mut self) -> i32 {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code().unwrap_or(-1);
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    bdk_core::net::install_crypto_provider();
    reqwest::Client::new()
}

pub async fn post(c: &reqwest::Client, url: &str, body: Value) -> (u16, Value) {
    let r = c.post(url).json(&body).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Reads NDJSON lines from a streaming response until `stop` says so.
pub async fn read_until(
    resp: reqwest::Response,
    mut stop: impl FnMut(&Value) -> bool,
) -> (Vec<Value>, bool) {
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let chunk = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("stream stalled");
        let Some(chunk) = chunk else {
            return (out, true);
        };
        let Ok(chunk) = chunk else { return (out, true) };
        buf.extend_from_slice(&chunk);
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            let text = String::from_utf8(line).unwrap();
            if text.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(text.trim()).unwrap();
            let done = stop(&v);
            out.push(v);
            if done {
                return (out, false);
            }
        }
    }
}
