#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The fork server, run for real: a program it starts gets what a program
//! started by a launcher per call gets (its grants and nothing protected,
//! exactly the environment it is given, its own working directory), its
//! exit status comes back, a stop takes its whole tree down, and neither
//! the host letting go of the fork server nor the fork server's death
//! leaves anything running.
//!
//! Like the launcher's tests, these need Landlock and PID namespaces and
//! fail, rather than skip, where they are missing.

#![cfg(target_os = "linux")]

use crate::common;

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use bdk_sandbox::{Call, Event, ForkServer, Sandbox};
use common::{wait_for, wait_until_gone};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sandbox: Sandbox,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for d in ["agent/tools", "state/a/workspace", "state/b/workspace"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("agent/agent.toml"), "secret = 1\n").unwrap();
    std::fs::write(root.join("agent/tools/tool.sh"), "echo tool\n").unwrap();
    std::fs::write(root.join("state/b/workspace/notes.txt"), "b's notes\n").unwrap();
    let sandbox = Sandbox::builder(env!("CARGO_BIN_EXE_bdk-sandbox"))
        .protect(root.join("agent"))
        .protect(root.join("state"))
        .build();
    Fixture {
        _dir: dir,
        root,
        sandbox,
    }
}

impl Fixture {
    fn call(&self) -> Call {
        Call {
            filesystem: true,
            read: vec![self.root.join("agent/tools")],
            write: vec![self.root.join("state/a/workspace")],
            sockets: Vec::new(),
        }
    }
}

/// A started call: its events, and the host's ends of its pipes.
struct Started {
    events: mpsc::Receiver<Event>,
    id: bdk_sandbox::CallId,
    stdin: Option<std::io::PipeWriter>,
    stdout: std::io::PipeReader,
    stderr: std::io::PipeReader,
}

impl Started {
    fn next(&self) -> Event {
        self.events
            .recv_timeout(Duration::from_secs(20))
            .expect("no event from the fork server")
    }

    /// Closes stdin, reads stdout and stderr to the end and returns them
    /// with the call's last event.
    fn finish(mut self) -> (String, String, Event) {
        drop(self.stdin.take());
        let mut out = String::new();
        self.stdout.read_to_string(&mut out).unwrap();
        let mut err = String::new();
        self.stderr.read_to_string(&mut err).unwrap();
        let last = self.next();
        (out, err, last)
    }
}

fn start(server: &ForkServer, f: &Fixture, script: &str, env: &[(&str, &str)]) -> Started {
    let (stdin_r, stdin_w) = std::io::pipe().unwrap();
    let (stdout_r, stdout_w) = std::io::pipe().unwrap();
    let (stderr_r, stderr_w) = std::io::pipe().unwrap();
    let (tx, events) = mpsc::channel();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let id = server
        .run(
            &f.call(),
            &["sh".to_owned(), "-c".to_owned(), script.to_owned()],
            &env,
            &f.root.join("agent/tools"),
            [
                OwnedFd::from(stdin_r),
                OwnedFd::from(stdout_w),
                OwnedFd::from(stderr_w),
            ],
            move |event| {
                let _ = tx.send(event);
            },
        )
        .unwrap();
    let started = Started {
        events,
        id,
        stdin: Some(stdin_w),
        stdout: stdout_r,
        stderr: stderr_r,
    };
    match started.next() {
        Event::Started(pid) => assert!(pid > 1),
        other => panic!("expected Started, got {other:?}"),
    }
    started
}

const PATH: (&str, &str) = ("PATH", "/usr/local/bin:/usr/bin:/bin");

#[test]
fn a_program_gets_its_grants_its_input_and_its_environment_and_nothing_else() {
    let f = fixture();
    let server = f.sandbox.fork_server().unwrap();
    let script = format!(
        "cat; echo; cat tool.sh; echo \"[$ONLY_THIS][$HOME]\"; pwd; \
         cat {agent} 2>/dev/null || echo agent-denied; \
         cat {other} 2>/dev/null || echo other-denied; \
         echo mine > {mine} && echo written; \
         echo to-stderr >&2; exit 3",
        agent = f.root.join("agent/agent.toml").display(),
        other = f.root.join("state/b/workspace/notes.txt").display(),
        mine = f.root.join("state/a/workspace/mine.txt").display(),
    );
    let mut call = start(&server, &f, &script, &[PATH, ("ONLY_THIS", "yes")]);
    call.stdin.as_mut().unwrap().write_all(b"hello").unwrap();
    let (out, err, last) = call.finish();
    assert_eq!(
        out,
        format!(
            "hello\necho tool\n[yes][]\n{}\nagent-denied\nother-denied\nwritten\n",
            f.root.join("agent/tools").display()
        )
    );
    assert_eq!(err, "to-stderr\n");
    match last {
        Event::Exited(status) => assert_eq!(status.code(), Some(3)),
        other => panic!("expected Exited, got {other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(f.root.join("state/a/workspace/mine.txt")).unwrap(),
        "mine\n"
    );
}

#[test]
fn calls_run_side_by_side_and_a_missing_program_fails_like_one() {
    let f = fixture();
    let server = f.sandbox.fork_server().unwrap();
    let calls: Vec<Started> = (0..4)
        .map(|n| start(&server, &f, &format!("cat >/dev/null; echo {n}"), &[PATH]))
        .collect();
    for (n, call) in calls.into_iter().enumerate() {
        let (out, _, last) = call.finish();
        assert_eq!(out, format!("{n}\n"));
        assert!(matches!(last, Event::Exited(s) if s.success()), "{last:?}");
    }
    // `exec` of a program that does not exist, reported as the launcher
    // reports it.
    let (stdin_r, _stdin_w) = std::io::pipe().unwrap();
    let (mut stdout_r, stdout_w) = std::io::pipe().unwrap();
    let (mut stderr_r, stderr_w) = std::io::pipe().unwrap();
    let (tx, events) = mpsc::channel();
    server
        .run(
            &f.call(),
            &["no-such-program-here".to_owned()],
            &[(PATH.0.to_owned(), PATH.1.to_owned())],
            &f.root.join("agent/tools"),
            [stdin_r.into(), stdout_w.into(), stderr_w.into()],
            move |event| {
                let _ = tx.send(event);
            },
        )
        .unwrap();
    let mut sink = String::new();
    stdout_r.read_to_string(&mut sink).unwrap();
    let mut err = String::new();
    stderr_r.read_to_string(&mut err).unwrap();
    assert!(err.starts_with(bdk_sandbox::EXEC_FAILED_PREFIX), "{err}");
    let events: Vec<Event> = events.iter().take(2).collect();
    assert!(matches!(events[0], Event::Started(_)), "{events:?}");
    assert!(
        matches!(&events[1], Event::Exited(s) if s.code() == Some(127)),
        "{events:?}"
    );
}

#[test]
fn a_stop_takes_the_whole_tree_down() {
    let f = fixture();
    let server = f.sandbox.fork_server().unwrap();
    let marker = format!("bdk-fs-stop-{}", std::process::id());
    let call = start(
        &server,
        &f,
        &format!(
            "setsid bash -c 'exec -a {marker}-child sleep 600' </dev/null >/dev/null 2>&1 & exec bash -c 'exec -a {marker}-main sleep 600'"
        ),
        &[PATH],
    );
    wait_for(&marker, 2);
    server.stop(call.id);
    let (_, _, last) = call.finish();
    match last {
        Event::Exited(status) => assert_eq!(status.code(), Some(128 + 9), "{status:?}"),
        other => panic!("expected Exited, got {other:?}"),
    }
    wait_until_gone(&marker);
    // The fork server still takes calls.
    let (out, _, _) = start(&server, &f, "echo again", &[PATH]).finish();
    assert_eq!(out, "again\n");
}

#[test]
fn letting_go_of_the_fork_server_stops_what_it_runs() {
    let f = fixture();
    let server = f.sandbox.fork_server().unwrap();
    let marker = format!("bdk-fs-drop-{}", std::process::id());
    let call = start(
        &server,
        &f,
        &format!(
            "setsid bash -c 'exec -a {marker}-child sleep 600' </dev/null >/dev/null 2>&1 & exec bash -c 'exec -a {marker}-main sleep 600'"
        ),
        &[PATH],
    );
    wait_for(&marker, 2);
    drop(server);
    assert!(matches!(call.next(), Event::Lost));
    wait_until_gone(&marker);
}

#[test]
fn a_fork_server_that_dies_takes_its_programs_and_refuses_new_calls() {
    let f = fixture();
    let server = f.sandbox.fork_server().unwrap();
    let marker = format!("bdk-fs-kill-{}", std::process::id());
    let call = start(
        &server,
        &f,
        &format!(
            "setsid bash -c 'exec -a {marker}-child sleep 600' </dev/null >/dev/null 2>&1 & exec bash -c 'exec -a {marker}-main sleep 600'"
        ),
        &[PATH],
    );
    wait_for(&marker, 2);
    let fork_server = fork_servers_of(std::process::id());
    assert_eq!(fork_server.len(), 1, "{fork_server:?}");
    let killed = Command::new("kill")
        .args(["-9", &fork_server[0].to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(matches!(call.next(), Event::Lost));
    wait_until_gone(&marker);
    assert!(!server.is_alive());
    let (stdin_r, _w) = std::io::pipe().unwrap();
    let (_r1, stdout_w) = std::io::pipe().unwrap();
    let (_r2, stderr_w) = std::io::pipe().unwrap();
    let refused = server.run(
        &f.call(),
        &["true".to_owned()],
        &[],
        &f.root,
        [stdin_r.into(), stdout_w.into(), stderr_w.into()],
        |_| {},
    );
    assert!(refused.is_err());
}

#[test]
fn a_launcher_without_a_fork_server_is_an_error_not_a_hang() {
    // Neither knows the `serve` stage: `true` exits at once without a
    // word, `cat` fails on its arguments.
    for launcher in ["/bin/true", "/bin/cat"] {
        let sandbox = Sandbox::builder(launcher).without_defaults().build();
        let error = sandbox.fork_server().unwrap_err().to_string();
        assert!(error.contains("did not start a fork server"), "{error}");
    }
}

use std::process::Command;

/// The fork servers this process started (its children running `serve`).
fn fork_servers_of(parent: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let ppid = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent)
            && String::from_utf8_lossy(&cmdline).contains("__bdk-sandbox\0serve")
        {
            out.push(pid);
        }
    }
    out
}
