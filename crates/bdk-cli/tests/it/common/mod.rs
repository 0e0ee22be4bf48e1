//! Helpers shared by the tests that drive a real `bdk serve`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
        let mut cmd = Self::command(dirs);
        cmd.args(args);
        Self::spawn(cmd)
    }

    /// `bdk serve <dirs> --port 0`, with none of the test runner's own
    /// state root, bearer token or public URL: what each suite adds its
    /// flags and environment to before [`Server::spawn`].
    pub fn command(dirs: &[&Path]) -> Command {
        let mut cmd = Command::cargo_bin("bdk").unwrap();
        cmd.arg("serve").args(dirs).args(["--port", "0"]);
        cmd.env_remove("BDK_STATE_ROOT")
            .env_remove("BDK_BEARER_TOKEN")
            .env_remove("BDK_PUBLIC_URL");
        cmd
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

    /// Waits (polling: a child's output announces nothing) until the
    /// captured stderr satisfies `ready`, and returns it; a failure shows
    /// the stderr it last read.
    pub fn wait_for_stderr(&self, mut ready: impl FnMut(&str) -> bool) -> String {
        bdk_testkit::poll::blocking_until_ok("stderr to get there", bdk_testkit::PATIENCE, || {
            let text = self.stderr.lock().unwrap().clone();
            if ready(&text) {
                Ok(text)
            } else {
                Err(format!("stderr:\n{text}"))
            }
        })
    }

    pub fn terminate(&mut self) -> i32 {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        bdk_testkit::poll::blocking_until_some(
            "serve to exit after SIGTERM",
            Duration::from_secs(30),
            || self.child.try_wait().unwrap(),
        )
        .code()
        .unwrap_or(-1)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    bdk_models::net::install_crypto_provider();
    reqwest::Client::new()
}

/// `GET url`, read as JSON.
pub async fn get_json(c: &reqwest::Client, url: &str) -> Value {
    c.get(url).send().await.unwrap().json().await.unwrap()
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

/// Runs `cmd` and reads its stdout as JSON; returns the exit code with it.
pub fn run_json(cmd: &mut Command) -> (i32, Value) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), value)
}

/// Scripted rules with a turn that never ends by itself ("slow") and a quick
/// echo for everything else.
pub const QUEUE_RULES: &str = r#"
[[rules]]
user_contains = "slow"
reply = "slow reply"
delay_ms = 600000

[[rules]]
reply = "quick: {{ user }}"
"#;

/// Writes an agent at `dir` that runs one turn at a time
/// (`max_running_turns = 1`) with [`QUEUE_RULES`].
pub fn queue_agent(dir: &Path) {
    bdk_testkit::AgentFolder::new()
        .agent_toml("model = \"scripted\"\nmax_running_turns = 1\n")
        .rules(QUEUE_RULES)
        .write_to(dir);
}

async fn events_json(c: &reqwest::Client, url: &str) -> Vec<Value> {
    let r = c.get(format!("{url}?format=json")).send().await.unwrap();
    assert_eq!(r.status(), 200, "{url}");
    let v: Value = r.json().await.unwrap();
    v["events"].as_array().unwrap().clone()
}

/// Waits until a recorded event of the session at `url` (its `.../events`
/// route) satisfies `pred`, following the server's stream of the session
/// (a replay, then live events) rather than polling; returns every event
/// recorded by then.
pub async fn wait_for(c: &reqwest::Client, url: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
    let base = url
        .strip_suffix("/events")
        .unwrap_or_else(|| panic!("not an events route: {url}"));
    let resp = c
        .get(format!("{base}/stream?startIndex=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{base}/stream");
    let (seen, ended) = read_until(resp, |e| pred(e)).await;
    assert!(!ended, "the stream ended before the event came: {seen:#?}");
    events_json(c, url).await
}

/// How often each delivery id appears on `message.received` and
/// `nudge.delivered` events.
pub fn deliveries(events: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut out = std::collections::BTreeMap::new();
    for e in events {
        let ids: Vec<&Value> = match e["type"].as_str().unwrap() {
            "message.received" => e["data"]["deliveryIds"]
                .as_array()
                .unwrap()
                .iter()
                .collect(),
            "nudge.delivered" => vec![&e["data"]["deliveryId"]],
            _ => continue,
        };
        for id in ids {
            *out.entry(id.as_str().unwrap().to_owned()).or_default() += 1;
        }
    }
    out
}

/// How the first server goes away.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Stop {
    /// `kill -9`.
    Kill,
    /// SIGTERM, which must exit 0.
    Terminate,
}

/// Regression (issue 13): a coalesced follow-up answered 200 behind a
/// running turn was lost on `kill -9`, and a turn waiting for a slot under
/// `max_running_turns` was only marked failed after the restart. Both were
/// acknowledged, so both must run once the server is back, exactly once,
/// also across a later restart. `args` pick the store; the agent at `dir`
/// (see [`queue_agent`]) is served at `/<slug>`.
pub async fn acknowledged_work_survives_kill_nine(args: &[&str], dir: &Path, slug: &str) {
    acknowledged_work_survives(args, dir, slug, Stop::Kill).await;
}

/// [`acknowledged_work_survives_kill_nine`], with the first server stopped by `stop`.
pub async fn acknowledged_work_survives(args: &[&str], dir: &Path, slug: &str, stop: Stop) {
    let c = client();
    let url = |server: &Server, path: &str| format!("{}/{slug}/v1{path}", server.base);
    let mut first = Server::start(args, &[dir]);
    let (status, slow) = post(
        &c,
        &url(&first, "/session"),
        serde_json::json!({"message": "be slow"}),
    )
    .await;
    assert_eq!(status, 200, "{slow}");
    let one = slow["sessionId"].as_str().unwrap().to_owned();
    let slow_turn = slow["turnId"].clone();
    // Every accepted send hands out a new token; the last one must still be
    // good after the restarts, and the one before it stale.
    let mut tokens = vec![slow["continuationToken"].as_str().unwrap().to_owned()];
    let one_events = url(&first, &format!("/session/{one}/events"));
    wait_for(&c, &one_events, |e| e["type"] == "turn.started").await;

    // A second session waits for the only turn slot.
    let (status, waiting) = post(
        &c,
        &url(&first, "/session"),
        serde_json::json!({"message": "second in line"}),
    )
    .await;
    assert_eq!(status, 200, "{waiting}");
    let two = waiting["sessionId"].as_str().unwrap().to_owned();
    let queued_turn = waiting["turnId"].clone();
    wait_for(&c, &url(&first, &format!("/session/{two}/events")), |e| {
        e["type"] == "turn.queued"
    })
    .await;

    // Two follow-ups queued behind the slow turn, acknowledged.
    for (text, delivery) in [
        ("after the first one", "dlv_kill9_a"),
        ("and this too", "dlv_kill9_b"),
    ] {
        let (status, sent) = post(
            &c,
            &url(&first, &format!("/session/{one}")),
            serde_json::json!({"message": text, "admission": "coalesce", "deliveryId": delivery}),
        )
        .await;
        assert_eq!(status, 200, "{sent}");
        assert!(
            sent.get("turnId").is_none(),
            "queued behind the running turn: {sent}"
        );
        tokens.push(sent["continuationToken"].as_str().unwrap().to_owned());
    }
    match stop {
        Stop::Kill => {
            first.child.kill().unwrap(); // SIGKILL
            first.child.wait().unwrap();
        }
        Stop::Terminate => {
            assert_eq!(first.terminate(), 0, "{}", first.stderr.lock().unwrap());
        }
    }

    let mut second = Server::start(args, &[dir]);
    let one_events = url(&second, &format!("/session/{one}/events"));
    let two_events = url(&second, &format!("/session/{two}/events"));
    // The queued follow-ups run as one turn, in the order they were sent.
    let all = wait_for(&c, &one_events, |e| {
        e["type"] == "turn.completed"
            && e["data"]["reply"] == "quick: after the first one\n\nand this too"
    })
    .await;
    let interrupted = all
        .iter()
        .find(|e| e["turnId"] == slow_turn && e["type"] == "turn.failed")
        .expect("the running turn was recorded interrupted");
    assert_eq!(interrupted["data"]["status"], "interrupted");
    let drained = all
        .iter()
        .find(|e| e["type"] == "message.received" && e["turnId"] != slow_turn)
        .unwrap();
    assert_eq!(
        drained["data"]["deliveryIds"],
        serde_json::json!(["dlv_kill9_a", "dlv_kill9_b"])
    );
    // The waiting turn runs under the turn id it was acknowledged with.
    let all_two = wait_for(&c, &two_events, |e| {
        e["turnId"] == queued_turn && e["type"] == "turn.completed"
    })
    .await;
    let done = all_two
        .iter()
        .find(|e| e["turnId"] == queued_turn && e["type"] == "turn.completed")
        .unwrap();
    assert_eq!(done["data"]["reply"], "quick: second in line");
    assert!(
        !all_two.iter().any(|e| e["type"] == "turn.failed"),
        "the waiting turn is run, not failed: {all_two:#?}"
    );
    for events in [&all, &all_two] {
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["index"], i as u64, "gapless: {events:#?}");
        }
    }

    // Exactly once, also after another restart.
    let drained_at = drained["index"].as_u64().unwrap();
    wait_for(&c, &one_events, |e| {
        e["type"] == "session.waiting" && e["index"].as_u64().unwrap() > drained_at
    })
    .await;
    let before_one = events_json(&c, &one_events).await.len();
    let before_two = events_json(&c, &two_events).await.len();
    assert_eq!(second.terminate(), 0, "{}", second.stderr.lock().unwrap());
    let third = Server::start(args, &[dir]);
    let one_events = url(&third, &format!("/session/{one}/events"));
    let two_events = url(&third, &format!("/session/{two}/events"));
    let after_one = events_json(&c, &one_events).await;
    let after_two = events_json(&c, &two_events).await;
    assert_eq!(
        after_one.len(),
        before_one,
        "nothing new after a clean restart: {after_one:#?}"
    );
    assert_eq!(after_two.len(), before_two, "{after_two:#?}");
    let counts = deliveries(&after_one);
    assert_eq!(counts.get("dlv_kill9_a"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("dlv_kill9_b"), Some(&1), "{counts:?}");

    // The tokens handed out before the kill: the last is current, the one
    // before it was superseded.
    let follow_up = |token: &str| serde_json::json!({"message": "after the restarts", "continuationToken": token});
    let session_one = url(&third, &format!("/session/{one}"));
    let (status, stale) = post(&c, &session_one, follow_up(&tokens[1])).await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["error"], "stale_continuation_token", "{stale}");
    let (status, sent) = post(&c, &session_one, follow_up(&tokens[2])).await;
    assert_eq!(status, 200, "the last token survives: {sent}");
    assert_ne!(sent["continuationToken"], tokens[2].as_str());
}

/// `bdk <args>` run in `cwd` with a pseudo-terminal as its stdout (through
/// util-linux `script`), as a person at a terminal runs it; its output.
#[allow(dead_code)]
pub fn on_a_terminal(args: &[&str], cwd: &Path) -> String {
    let quoted: Vec<String> = std::iter::once(env!("CARGO_BIN_EXE_bdk"))
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let out = std::process::Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .current_dir(cwd)
        .env_remove("BDK_STATE_ROOT")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux `script` runs bdk on a pseudo-terminal");
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

/// Gives `dir` to the user the agent's programs run as when `bdk` runs as
/// root (the default sandbox user), as an operator would for a
/// `[sandbox] write` grant; nothing to do for an ordinary user.
pub fn give_to_programs(dir: &Path) {
    if !rustix::process::geteuid().is_root() {
        return;
    }
    let user = bdk_core::containment::user::default_user();
    rustix::fs::chown(
        dir,
        Some(rustix::fs::Uid::from_raw(user.uid)),
        Some(rustix::fs::Gid::from_raw(user.gid)),
    )
    .unwrap();
}
