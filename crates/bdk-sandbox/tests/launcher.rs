#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The launcher, run for real: programs started through it read what the
//! system offers but nothing protected, write only their grants, cannot
//! reach the process that started them, and take every process they start
//! down with them.
//!
//! These tests need what the project's machines have: Landlock ABI 6 or
//! newer and PID namespaces (root, or unprivileged user namespaces). They
//! fail, rather than skip, where that is missing.

#![cfg(target_os = "linux")]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bdk_sandbox::{Call, Sandbox};
use common::{wait_for, wait_until_gone};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sandbox: Sandbox,
}

/// An agent-like tree: a protected "state" with two workspaces, a
/// protected "agent" with a tool folder.
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    for d in [
        "agent/tools",
        "state/a/workspace",
        "state/b/workspace",
        "state/tmp-a",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("agent/agent.toml"), "secret = 1\n").unwrap();
    std::fs::write(root.join("agent/tools/tool.sh"), "echo tool\n").unwrap();
    std::fs::write(root.join("state/b/workspace/notes.txt"), "b's notes\n").unwrap();
    std::fs::write(root.join("state/b/events.ndjson"), "{}\n").unwrap();
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
            write: vec![
                self.root.join("state/a/workspace"),
                self.root.join("state/tmp-a"),
            ],
            sockets: Vec::new(),
        }
    }

    fn command(&self, script: &str) -> Command {
        let wrapped = self
            .sandbox
            .wrap(
                &self.call(),
                Path::new("/bin/sh"),
                &["-c".to_owned(), script.to_owned()],
            )
            .unwrap();
        let mut command = Command::new(&wrapped.program);
        command
            .args(&wrapped.args)
            .current_dir(self.root.join("agent/tools"))
            .env_clear()
            .envs(bdk_sandbox::env::base(&[]))
            .stdin(Stdio::null())
            .process_group(0);
        command
    }

    fn sh(&self, script: &str) -> Output {
        self.command(script).output().unwrap()
    }
}

use std::os::unix::process::CommandExt as _;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

#[test]
fn the_probe_finds_every_protection_on_this_machine() {
    let f = fixture();
    let support = f.sandbox.probe().unwrap();
    assert!(
        support.is_complete(),
        "the sandbox is incomplete here: {:?} (missing: {:?})",
        support,
        support.missing()
    );
    assert!(support.landlock_abi >= 6);
}

#[test]
fn a_probe_is_remembered_for_every_sandbox_of_the_same_launcher() {
    let f = fixture();
    // Another sandbox of the same launcher, with other paths.
    let other = Sandbox::builder(env!("CARGO_BIN_EXE_bdk-sandbox"))
        .protect(f.root.join("state"))
        .build();
    let elsewhere = Sandbox::builder(f.root.join("no-such-launcher")).build();
    assert_eq!(f.sandbox.probed(), None, "nothing probed yet");
    let support = f.sandbox.probe().unwrap();
    assert_eq!(f.sandbox.probed(), Some(support.clone()));
    assert_eq!(other.probed(), Some(support));
    // A launcher that cannot run leaves no result.
    assert!(elsewhere.probe().is_err());
    assert_eq!(elsewhere.probed(), None);
}

#[test]
fn a_contained_program_reads_the_system_and_its_folder_but_nothing_protected() {
    let f = fixture();
    let o = f.sh("cat tool.sh && test -r /usr/bin/env && echo system-ok");
    assert_eq!(stdout(&o), "echo tool\nsystem-ok", "{o:?}");

    for path in [
        f.root.join("agent/agent.toml"),
        f.root.join("state/b/workspace/notes.txt"),
        f.root.join("state/b/events.ndjson"),
    ] {
        let o = f.sh(&format!("cat '{}'", path.display()));
        assert!(!o.status.success(), "read {}: {o:?}", path.display());
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Permission denied"),
            "{o:?}"
        );
    }
    // Listing a protected folder fails too, so other sessions' ids stay hidden.
    let o = f.sh(&format!("ls '{}'", f.root.join("state").display()));
    assert!(!o.status.success(), "{o:?}");
    // Home directories and temp dirs are private.
    let o = f.sh("ls /root >/dev/null 2>&1 || echo denied; ls /tmp >/dev/null 2>&1 || echo denied");
    assert_eq!(stdout(&o), "denied\ndenied", "{o:?}");
}

/// A grant reached through a symbolic link (in the folder above it or in
/// its last part) opens what the link points at, as `open(2)` would.
#[test]
fn grants_through_symbolic_links_reach_their_targets() {
    let f = fixture();
    std::os::unix::fs::symlink(f.root.join("agent"), f.root.join("agent-link")).unwrap();
    std::os::unix::fs::symlink(f.root.join("agent/tools"), f.root.join("tools-link")).unwrap();
    for granted in [f.root.join("agent-link/tools"), f.root.join("tools-link")] {
        let call = Call {
            read: vec![granted.clone()],
            ..f.call()
        };
        let wrapped = f
            .sandbox
            .wrap(
                &call,
                Path::new("/bin/cat"),
                &[f.root.join("agent/tools/tool.sh").display().to_string()],
            )
            .unwrap();
        let o = Command::new(&wrapped.program)
            .args(&wrapped.args)
            .env_clear()
            .envs(bdk_sandbox::env::base(&[]))
            .stdin(Stdio::null())
            .process_group(0)
            .output()
            .unwrap();
        assert_eq!(stdout(&o), "echo tool", "{}: {o:?}", granted.display());
    }
    // And the file the grant does not cover stays closed.
    let o = f.sh(&format!(
        "cat '{}'",
        f.root.join("agent/agent.toml").display()
    ));
    assert!(!o.status.success(), "{o:?}");
}

#[test]
fn a_contained_program_writes_only_its_grants() {
    let f = fixture();
    let ws = f.root.join("state/a/workspace");
    let o = f.sh(&format!(
        "echo hi > '{ws}/out.txt' && mkdir '{ws}/d' && mv '{ws}/out.txt' '{ws}/d/' && echo ok > /dev/null && echo done",
        ws = ws.display()
    ));
    assert_eq!(stdout(&o), "done", "{o:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("d/out.txt")).unwrap(),
        "hi\n"
    );

    for target in [
        f.root.join("state/b/events.ndjson"),
        f.root.join("agent/tools/tool.sh"),
        f.root.join("state/new.txt"),
        PathBuf::from("/tmp/bdk-sandbox-escape.txt"),
    ] {
        let o = f.sh(&format!("echo forged >> '{}'", target.display()));
        assert!(!o.status.success(), "wrote {}: {o:?}", target.display());
    }
    assert_eq!(
        std::fs::read_to_string(f.root.join("state/b/events.ndjson")).unwrap(),
        "{}\n"
    );
    assert!(!f.root.join("state/new.txt").exists());
}

#[test]
fn a_contained_program_cannot_reach_the_process_that_started_it() {
    let f = fixture();
    let me = std::process::id();
    // Its environment is only the allowlist.
    let o = f.sh("env");
    for line in stdout(&o).lines() {
        let name = line.split('=').next().unwrap();
        assert!(
            bdk_sandbox::env::is_allowed(name) || name == "PWD" || name == "SHLVL" || name == "_",
            "{line}"
        );
    }
    // Not our environment, not our memory, not a signal.
    let o = f.sh(&format!("cat /proc/{me}/environ"));
    assert!(!o.status.success(), "{o:?}");
    let o = f.sh(&format!("cat /proc/{me}/maps"));
    assert!(!o.status.success(), "{o:?}");
    let o = f.sh(&format!("kill -0 {me} && echo reached"));
    assert_ne!(stdout(&o), "reached", "{o:?}");
    // Inside its PID namespace it is the first process and sees no parent.
    let o = f.sh("echo $$ $PPID");
    assert_eq!(stdout(&o), "1 0", "{o:?}");
    // And it has no capabilities left, even when the caller is root.
    let o = f.sh("grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status");
    for line in stdout(&o).lines() {
        assert!(line.ends_with("0000000000000000"), "{line}");
    }
}

/// A shell line that starts a detached (`setsid`) grandchild carrying
/// `marker` in its command line (bash's `exec -a` names it).
fn detached(marker: &str) -> String {
    format!("setsid bash -c 'exec -a {marker} sleep 600' </dev/null >/dev/null 2>&1 &")
}

#[test]
fn a_detached_grandchild_dies_with_the_program() {
    let f = fixture();
    let marker = format!("bdk-sandbox-grandchild-{}", std::process::id());
    let go = f.root.join("state/a/workspace/go");
    // The program starts the grandchild, then waits for the test to have
    // seen it before it exits on its own.
    let mut child = f
        .command(&format!(
            "{} while [ ! -e '{}' ]; do sleep 0.02; done; echo done",
            detached(&marker),
            go.display()
        ))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&marker, 1);
    std::fs::write(&go, "").unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    wait_until_gone(&marker);
}

#[test]
fn a_stop_signal_kills_the_program_and_everything_it_started() {
    let f = fixture();
    let marker = format!("bdk-sandbox-stopped-{}", std::process::id());
    let mut child = f
        .command(&format!(
            "{} exec bash -c 'exec -a {marker}-main sleep 600'",
            detached(&marker)
        ))
        .spawn()
        .unwrap();
    wait_for(&marker, 2);
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success());
    wait_until_gone(&marker);
}

#[test]
fn exit_codes_and_signals_pass_through() {
    use std::os::unix::process::ExitStatusExt;
    let f = fixture();
    assert_eq!(f.sh("exit 7").status.code(), Some(7));
    // A program killed by a signal (from outside: as the first process of
    // its namespace it ignores what it does not handle from inside) makes
    // the launcher die by the same signal.
    let marker = format!("bdk-sandbox-killed-{}", std::process::id());
    let child = f
        .command(&format!("exec bash -c 'exec -a {marker} sleep 600'"))
        .spawn()
        .unwrap();
    let pids = wait_for(&marker, 1);
    let pid = rustix::process::Pid::from_raw(i32::try_from(pids[0]).unwrap()).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.signal(), Some(9), "{o:?}");
}

#[test]
fn a_program_that_cannot_be_executed_is_reported() {
    let f = fixture();
    let wrapped = f
        .sandbox
        .wrap(&f.call(), Path::new("no-such-program-anywhere"), &[])
        .unwrap();
    let o = Command::new(&wrapped.program)
        .args(&wrapped.args)
        .env_clear()
        .envs(bdk_sandbox::env::base(&[]))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with(bdk_sandbox::EXEC_FAILED_PREFIX),
        "{o:?}"
    );
}

#[test]
fn a_launcher_whose_parent_is_not_the_caller_refuses_to_start() {
    let f = fixture();
    let wrapped = f
        .sandbox
        .wrap(&f.call(), Path::new("/bin/true"), &[])
        .unwrap();
    // An intermediate shell becomes the launcher's parent: not the pid the
    // policy names, so the launcher stops before starting anything.
    let mut line = shell_quote(&wrapped.program.to_string_lossy());
    for arg in &wrapped.args {
        line.push(' ');
        line.push_str(&shell_quote(&arg.to_string_lossy()));
    }
    let o = Command::new("/bin/sh")
        .arg("-c")
        .arg(format!("{line}; echo status=$?"))
        .output()
        .unwrap();
    assert_eq!(
        stdout(&o),
        format!("status={}", bdk_sandbox::LAUNCHER_FAILED),
        "{o:?}"
    );
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}
