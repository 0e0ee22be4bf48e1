#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk chat`, run as the real binary: at a real pseudo-terminal (tmux,
//! typed into with send-keys and read with capture-pane), from a pipe, and
//! against a running `bdk serve`.
//!
//! Each terminal test has its own tmux server (a private socket) that is
//! killed when the test ends. The screen is polled until the expected text
//! is there (a terminal announces nothing); the next line is typed only
//! once the prompt is back, since a line editor drops keys typed before it
//! reads.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use bdk_testkit::{PATIENCE, poll};
use serde_json::Value;
use tempfile::TempDir;

use crate::common;
use common::{Server, weather};

const BDK: &str = env!("CARGO_BIN_EXE_bdk");

/// What a pane's shell writes before the exit status of the program.
const EXITED: &str = "[bdk exited ";

/// The weather example's answer for Paris (simulated data).
const PARIS: &str = "It is 12°C and sunny in Paris (simulated data).";
/// The weather example's fallback reply.
const FALLBACK: &str = "I am the offline weather example. Ask \"What's the weather in Paris?\" for simulated current conditions, ask about a city's climate history to reach the climate subagent, or ask for a forecast write-up.";

/// An agent with a tool that needs approval (`deploy`) and one that takes
/// 30 s (`wait_a_while`); a message no rule matches fails its turn.
const OPS_RULES: &str = r#"
[[rules]]
user_contains = "deploy"
tool_calls = [{ name = "deploy", input = { target = "prod" } }]

[[rules]]
user_contains = "wait"
tool_calls = [{ name = "wait_a_while", input = {} }]

[[rules]]
tool_result = "deploy"
reply = "deploy said: {{ result_text }}"

[[rules]]
tool_result = "wait_a_while"
reply = "waited"
"#;

const DEPLOY_TOML: &str = r#"
description = "Deploys (asks a person first)."
effect = "write"
needs_approval = true
command = ["python3", "deploy.py"]

[input_schema]
type = "object"
required = ["target"]
properties = { target = { type = "string" } }
"#;

const DEPLOY_PY: &str = r#"import json, sys
request = json.load(sys.stdin)
print(json.dumps({"deployed": request["input"]["target"]}))
"#;

const WAIT_TOML: &str = r#"
description = "Takes thirty seconds."
effect = "read"
command = ["python3", "wait_a_while.py"]

[input_schema]
type = "object"
"#;

const WAIT_PY: &str = "import time\ntime.sleep(30)\nprint('{}')\n";

/// The `ops` agent in a fresh temporary directory.
fn ops() -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ops");
    bdk_testkit::AgentFolder::new()
        .agent_toml("name = \"ops\"\nmodel = \"scripted\"\n")
        .rules(OPS_RULES)
        .tool("deploy", DEPLOY_TOML)
        .tool_script("deploy.py", DEPLOY_PY)
        .tool("wait_a_while", WAIT_TOML)
        .tool_script("wait_a_while.py", WAIT_PY)
        .write_to(&dir);
    (tmp, dir)
}

/// `bdk chat` (or any `bdk` command line) in a tmux pane of its own.
struct Pane {
    socket: String,
    _conf: tempfile::NamedTempFile,
}

impl Pane {
    /// Starts `bdk args` in a 150x50 pane; `env` is added to its
    /// environment (and `BDK_STATE_ROOT` removed). When the program exits
    /// the pane's shell writes its exit status, and the pane stays.
    fn start(args: &[&str], env: &[(&str, &str)]) -> Pane {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let socket = format!(
            "bdk-chat-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut conf = tempfile::NamedTempFile::new().unwrap();
        writeln!(conf, "set -g remain-on-exit on\nset -g history-limit 10000").unwrap();
        let command: Vec<String> = std::iter::once(BDK)
            .chain(args.iter().copied())
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        let mut tmux = Command::new("tmux");
        tmux.args(["-L", &socket, "-f"])
            .arg(conf.path())
            .args(["new-session", "-d", "-s", "chat", "-x", "150", "-y", "50"])
            .arg(format!("{}; echo \"{EXITED}$?]\"", command.join(" ")))
            .env_remove("BDK_STATE_ROOT")
            .env_remove("NO_COLOR")
            .env_remove("TMUX");
        for (k, v) in env {
            tmux.env(k, v);
        }
        let status = tmux
            .status()
            .expect("tmux runs (the terminal tests need it: apt-get install tmux)");
        assert!(status.success(), "tmux new-session failed");
        Pane {
            socket,
            _conf: conf,
        }
    }

    fn tmux(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .unwrap()
    }

    /// Presses keys by their tmux names (`Enter`, `Escape`, `C-c`, `y`).
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "chat"];
        args.extend_from_slice(keys);
        assert!(self.tmux(&args).status.success());
    }

    /// Types `text` as it is, then Enter.
    fn line(&self, text: &str) {
        assert!(
            self.tmux(&["send-keys", "-t", "chat", "-l", text])
                .status
                .success()
        );
        self.keys(&["Enter"]);
    }

    /// Everything the pane shows and scrolled past, wrapped lines joined.
    fn screen(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-J", "-S", "-", "-t", "chat"])
                .stdout,
        )
        .into_owned()
    }

    /// The same with colours and attributes as escape sequences.
    fn screen_with_escapes(&self) -> String {
        String::from_utf8_lossy(
            &self
                .tmux(&["capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "chat"])
                .stdout,
        )
        .into_owned()
    }

    /// Waits until the screen satisfies `ready`; returns it.
    fn wait(&self, what: &str, mut ready: impl FnMut(&str) -> bool) -> String {
        poll::blocking_until_ok(what, PATIENCE, || {
            let screen = self.screen();
            if ready(&screen) {
                Ok(screen)
            } else {
                Err(format!("the screen:\n{screen}"))
            }
        })
    }

    /// Waits until `text` is on the screen `times` times.
    fn wait_for_n(&self, text: &str, times: usize) -> String {
        self.wait(&format!("{text:?} x{times}"), |s| {
            s.matches(text).count() >= times
        })
    }

    /// Waits until `text` is on the screen.
    fn wait_for(&self, text: &str) -> String {
        self.wait_for_n(text, 1)
    }

    /// Waits until the last line shown is an empty prompt: the chat reads
    /// the next line.
    fn wait_prompt(&self) -> String {
        self.wait("an empty prompt", |s| {
            s.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .map(str::trim_end)
                == Some("›")
        })
    }

    /// The program's exit status once it has exited. (It is read off the
    /// screen, where the pane's shell writes it: tmux's own record of a
    /// dead pane's status is sometimes missing.)
    fn wait_exit(&self) -> i32 {
        poll::blocking_until_ok("bdk to exit", PATIENCE, || {
            let screen = self.screen();
            screen
                .lines()
                .find_map(|l| l.strip_prefix(EXITED)?.strip_suffix(']')?.parse().ok())
                .ok_or_else(|| format!("the screen:\n{screen}"))
        })
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = self.tmux(&["kill-server"]);
    }
}

/// The session ids the chat announced (`new session ses_...`), in order.
fn sessions_on(screen: &str) -> Vec<String> {
    screen
        .lines()
        .filter_map(|l| l.trim().strip_prefix("new session "))
        .map(|s| s.trim().to_owned())
        .collect()
}

/// A session's recorded events, through `bdk session ID --events`.
fn events_of(state_root: &Path, id: &str) -> Vec<Value> {
    let out = Command::new(BDK)
        .args(["session", id, "--events", "--state-root"])
        .arg(state_root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `bdk chat args` with `input` on standard input (a pipe): exit code,
/// stdout, stderr.
fn piped(args: &[&str], input: &str) -> (i32, String, String) {
    let mut child = Command::new(BDK)
        .arg("chat")
        .args(args)
        .env_remove("BDK_STATE_ROOT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_reply_streams_with_its_tool_call_inline_then_trace_and_new_work() {
    let (_tmp, dir) = weather();
    let pane = Pane::start(&["chat", dir.to_str().unwrap()], &[]);
    let banner = pane.wait_prompt();
    assert!(
        banner.contains("bdk chat with weather (scripted"),
        "{banner}"
    );

    pane.line("What's the weather in Paris?");
    let screen = pane.wait_for(PARIS);
    let call = screen
        .lines()
        .find(|l| l.contains("⚙ get_weather"))
        .unwrap_or_else(|| panic!("no tool line:\n{screen}"));
    assert!(
        call.starts_with("  ⚙ get_weather {\"city\":\"Paris\"} → ok ")
            && call.contains(" ms {\"city\":\"Paris\""),
        "one line per call, input, outcome, duration, output: {call}"
    );
    // The reply comes after its tool call, whole, once.
    assert!(
        screen.find(PARIS) > screen.find("⚙ get_weather"),
        "{screen}"
    );
    assert_eq!(screen.matches(PARIS).count(), 1, "{screen}");
    // On a terminal the outcome is coloured (NO_COLOR is not set).
    assert!(
        pane.screen_with_escapes().contains("\u{1b}["),
        "no colour on a terminal"
    );
    let first = sessions_on(&screen);
    assert_eq!(first.len(), 1, "{screen}");
    // The reply streamed: the model sent it in several deltas, all shown.
    let root = dir.join(".bdk");
    let events = events_of(&root, &first[0]);
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "message.appended")
        .map(|e| e["data"]["delta"].as_str().unwrap())
        .collect();
    assert!(deltas.len() > 1, "{deltas:?}");
    assert_eq!(deltas.concat(), PARIS);
    pane.wait_prompt();

    pane.line("/trace");
    let screen = pane.wait_for("trace: ");
    let trace_line = screen.lines().find(|l| l.starts_with("trace: ")).unwrap();
    let trace = PathBuf::from(trace_line.trim_start_matches("trace: ").trim());
    assert_eq!(
        trace,
        root.join("traces").join(format!("{}.ndjson", first[0]))
    );
    let traced = std::fs::read_to_string(&trace).unwrap();
    assert!(traced.contains("\"turn.completed\""), "{traced}");
    assert!(
        screen.contains("  1. “What's the weather in Paris?” → completed · get_weather ("),
        "{screen}"
    );
    assert!(
        screen.contains(&format!("{} · waiting · 1 turn", first[0])),
        "{screen}"
    );
    pane.wait_prompt();

    pane.line("/new");
    pane.wait_for("the next message starts a new session");
    pane.wait_prompt();
    pane.line("hello");
    let screen = pane.wait_for(FALLBACK);
    let sessions = sessions_on(&screen);
    assert_eq!(sessions.len(), 2, "{screen}");
    assert_ne!(sessions[0], sessions[1]);
    pane.wait_prompt();

    // Ctrl-D leaves, with exit code 0; the lines typed are in the history
    // file under the state root.
    pane.keys(&["C-d"]);
    assert_eq!(pane.wait_exit(), 0, "{}", pane.screen());
    let history = std::fs::read_to_string(root.join("chat_history")).unwrap();
    for line in ["What's the weather in Paris?", "/trace", "/new", "hello"] {
        assert!(history.contains(line), "{history}");
    }
}

#[test]
fn escape_stops_a_slow_tool_and_ctrl_c_stops_then_leaves() {
    let (_tmp, dir) = ops();
    let root = dir.join(".bdk");
    let pane = Pane::start(&["chat", dir.to_str().unwrap()], &[("NO_COLOR", "1")]);
    pane.wait_prompt();

    pane.line("please wait");
    pane.wait_for("⚙ wait_a_while {}");
    pane.keys(&["Escape"]);
    let screen = pane.wait_for("stopped");
    assert!(screen.contains("wait_a_while → error"), "{screen}");
    let id = sessions_on(&screen).remove(0);
    let events = events_of(&root, &id);
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn.failed")
        .collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    assert_eq!(failed[0]["data"]["status"], "cancelled");
    let result = events
        .iter()
        .find(|e| e["type"] == "action.result")
        .unwrap();
    assert_eq!(
        result["data"]["isError"], true,
        "the tool was cut short: {result}"
    );
    assert!(
        !events.iter().any(|e| e["type"] == "turn.completed"),
        "{events:#?}"
    );
    // No colour with NO_COLOR.
    assert!(!pane.screen_with_escapes().contains("\u{1b}[3"), "coloured");
    pane.wait_prompt();

    // Ctrl-C stops the same way; one more at the prompt leaves.
    pane.line("wait again");
    pane.wait_for_n("⚙ wait_a_while {}", 2);
    pane.keys(&["C-c"]);
    pane.wait_for_n("stopped", 2);
    pane.wait_prompt();
    pane.keys(&["C-c"]);
    assert_eq!(pane.wait_exit(), 0, "{}", pane.screen());
    let events = events_of(&root, &id);
    let statuses: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "turn.failed")
        .map(|e| &e["data"]["status"])
        .collect();
    assert_eq!(statuses, ["cancelled", "cancelled"], "{events:#?}");
}

#[test]
fn approvals_are_asked_in_place_and_answered_with_y_or_n() {
    let (_tmp, dir) = ops();
    let pane = Pane::start(&["chat", dir.to_str().unwrap()], &[]);
    pane.wait_prompt();

    pane.line("deploy it");
    let screen = pane.wait_for("approve? [y]es/[n]o");
    assert!(
        screen.contains("  ⚙ deploy {\"target\":\"prod\"} · approve? [y]es/[n]o"),
        "asked on the call's line: {screen}"
    );
    pane.keys(&["y"]);
    let screen = pane.wait_for("deploy said: {\"deployed\":\"prod\"}");
    assert!(screen.contains("approve? [y]es/[n]o yes"), "{screen}");
    assert!(screen.contains("⚙ deploy → ok "), "{screen}");
    pane.wait_prompt();

    pane.line("deploy again");
    pane.wait_for_n("approve? [y]es/[n]o", 2);
    pane.keys(&["n"]);
    let screen = pane.wait_for("deploy said: call denied");
    assert!(screen.contains("approve? [y]es/[n]o no"), "{screen}");
    assert!(screen.contains("⚙ deploy → error "), "{screen}");
    pane.wait_prompt();

    let id = sessions_on(&screen).remove(0);
    let decisions: Vec<Value> = events_of(&dir.join(".bdk"), &id)
        .into_iter()
        .filter(|e| e["type"] == "action.approval_resolved")
        .map(|e| e["data"]["approved"].clone())
        .collect();
    assert_eq!(decisions, [true, false]);
    pane.keys(&["C-d"]);
    assert_eq!(pane.wait_exit(), 0);
}

#[test]
fn a_pipe_gets_exactly_the_replies_of_one_session() {
    let (_tmp, dir) = weather();
    let (code, out, err) = piped(
        &[dir.to_str().unwrap()],
        "What's the weather in Paris?\n\nhello\n",
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, format!("{PARIS}\n{FALLBACK}\n"));
    // Tool lines go to stderr.
    assert!(
        err.contains("⚙ get_weather {\"city\":\"Paris\"} → ok "),
        "{err}"
    );
    // Both turns went to one session.
    let listed = Command::new(BDK)
        .args(["sessions", "--json", "--state-root"])
        .arg(dir.join(".bdk"))
        .output()
        .unwrap();
    let sessions: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions.as_array().unwrap().len(), 1, "{sessions:#}");
    let id = sessions[0]["sessionId"].as_str().unwrap();
    let turns = events_of(&dir.join(".bdk"), id)
        .iter()
        .filter(|e| e["type"] == "turn.completed")
        .count();
    assert_eq!(turns, 2);

    // Continuing that session from a pipe.
    let (code, out, err) = piped(&[dir.to_str().unwrap(), "--session", id], "hello\n");
    assert_eq!(
        (code, out.as_str()),
        (0, format!("{FALLBACK}\n").as_str()),
        "{err}"
    );

    // Nothing to say: nothing printed, exit 0.
    let (code, out, err) = piped(&[dir.to_str().unwrap()], "");
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
}

#[test]
fn a_pipe_denies_approvals_and_exits_1_when_a_turn_fails() {
    let (_tmp, dir) = ops();
    let (code, out, err) = piped(
        &[dir.to_str().unwrap()],
        "deploy it\nsomething no rule matches\n",
    );
    assert_eq!(code, 1, "{out}\n{err}");
    assert_eq!(
        out,
        "deploy said: call denied by local: nobody could be asked: bdk chat was reading messages from a pipe\n"
    );
    assert!(err.contains("needs approval; denied"), "{err}");
    assert!(err.contains("error: the turn failed: "), "{err}");
}

#[test]
fn url_and_a_server_holding_the_state_root_go_through_the_http_api() {
    let (_tmp, dir) = ops();
    let mut server = Server::start(&[], &[&dir]);
    let url = format!("{}/ops", server.base);

    // The state root is the server's: `bdk chat DIR` goes through it too.
    let (code, out, err) = piped(&[dir.to_str().unwrap()], "deploy it\n");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("deploy said: call denied"), "{out}");
    assert!(err.contains("going through its API"), "{err}");

    // Pipe mode with --url.
    let (code, out, err) = piped(&["--url", &url], "deploy it\n");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("deploy said: call denied"), "{out}");

    // --url at a terminal: an approval answered over HTTP, then a stop.
    let pane = Pane::start(&["chat", "--url", &url], &[]);
    let banner = pane.wait_prompt();
    assert!(
        banner.contains(&format!("bdk chat with ops (scripted) at {url}")),
        "{banner}"
    );
    pane.line("deploy it");
    pane.wait_for("approve? [y]es/[n]o");
    pane.keys(&["y"]);
    pane.wait_for("deploy said: {\"deployed\":\"prod\"}");
    pane.wait_prompt();
    pane.line("please wait");
    pane.wait_for("⚙ wait_a_while {}");
    pane.keys(&["Escape"]);
    pane.wait_for("stopped");
    pane.wait_prompt();
    pane.line("/trace");
    let screen = pane.wait_for("trace: ");
    assert!(
        screen.contains(&format!("trace: {url}/v1/session/")),
        "{screen}"
    );
    assert!(screen.contains("→ cancelled"), "{screen}");
    pane.wait_prompt();

    // The server goes away: the message fails, the conversation does not.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    pane.line("deploy it");
    pane.wait_for("is the server still running?");
    pane.wait_prompt();
    pane.keys(&["C-d"]);
    assert_eq!(pane.wait_exit(), 0, "{}", pane.screen());

    // Nobody there at all: said at once, exit 1.
    let (code, _, err) = piped(&["--url", &url], "hi\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is the server still running?"), "{err}");
}

#[test]
fn unknown_commands_and_sessions_leave_the_conversation_as_it_was() {
    let (_tmp, dir) = weather();
    let pane = Pane::start(&["chat", dir.to_str().unwrap()], &[("NO_COLOR", "1")]);
    pane.wait_prompt();
    pane.line("/frobnicate now");
    pane.wait_for("unknown command /frobnicate now; /help lists the commands");
    pane.wait_prompt();
    pane.line("hello");
    let screen = pane.wait_for(FALLBACK);
    let id = sessions_on(&screen).remove(0);
    pane.wait_prompt();
    pane.line("/session ses_doesnotexist");
    pane.wait_for(&format!(
        "✗ session_not_found: session ses_doesnotexist not found; still in {id}"
    ));
    pane.wait_prompt();
    pane.line("/session not-an-id");
    pane.wait_for("✗ invalid_session_id");
    pane.wait_prompt();
    pane.line("/help");
    pane.wait_for("/trace          the session's turns");
    pane.wait_prompt();
    // Still the same session.
    pane.line("/session");
    pane.wait("the current session", |s| {
        s.lines().filter(|l| l.trim() == id).count() == 1
    });
    pane.wait_prompt();
    pane.line("hello again");
    let screen = pane.wait_for_n(FALLBACK, 2);
    assert_eq!(sessions_on(&screen), vec![id], "{screen}");
    pane.wait_prompt();
    pane.line("/quit");
    assert_eq!(pane.wait_exit(), 0);

    // Bad arguments.
    let (code, _, err) = piped(&[dir.to_str().unwrap(), "--session", "ses_nope"], "hi\n");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("session_not_found"), "{err}");
    let (code, _, err) = piped(&[dir.to_str().unwrap(), "--session", "nope"], "hi\n");
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = piped(&["--url", "ftp://example"], "hi\n");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("http://"), "{err}");
}
