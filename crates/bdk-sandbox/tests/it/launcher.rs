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

use crate::common;

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
    fixture_with(|b| b)
}

/// [`fixture`] with more settings on the sandbox.
fn fixture_with(configure: impl FnOnce(bdk_sandbox::Builder) -> bdk_sandbox::Builder) -> Fixture {
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
    let sandbox = configure(
        Sandbox::builder(env!("CARGO_BIN_EXE_bdk-sandbox"))
            .protect(root.join("agent"))
            .protect(root.join("state")),
    )
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
    // Inside its PID namespace it is the second process, under the
    // sandbox's init, and sees nothing beyond it: /proc is its namespace's
    // own, so not even the caller's command line is there.
    let o = f.sh("echo $$ $PPID");
    assert_eq!(stdout(&o), "2 1", "{o:?}");
    let o = f.sh(&format!(
        "test -e /proc/{me} && echo visible; ls /proc | grep -E '^[0-9]+$' | sort -n | tr '\\n' ' '; echo; grep -c . /proc/self/status"
    ));
    let out = stdout(&o);
    assert!(!out.contains("visible"), "{o:?}");
    let mut lines = out.lines();
    let pids: Vec<u32> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    // The init, the shell and its pipeline: a handful, not the machine's.
    assert!(pids.len() < 12 && pids.contains(&1), "{pids:?}");
    assert!(lines.next().unwrap().parse::<u32>().unwrap() > 10, "{o:?}");
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

// ---------------------------------------------------------------------
// Attacks on the host (issue 43): what a program must not be able to do
// even as root's child, and how it is told it ran into a limit.

/// Runs `script` with the machine's Python (not a version manager's shim:
/// its start-up costs ten times more).
fn python(f: &Fixture, script: &str) -> Output {
    let wrapped = f
        .sandbox
        .wrap(
            &f.call(),
            Path::new("/usr/bin/python3"),
            &["-c".to_owned(), script.to_owned()],
        )
        .unwrap();
    Command::new(&wrapped.program)
        .args(&wrapped.args)
        .current_dir(f.root.join("agent/tools"))
        .env_clear()
        .envs(bdk_sandbox::env::base(&[]))
        .env("WS", f.root.join("state/a/workspace"))
        .env("OTHER", f.root.join("state/b/workspace"))
        .stdin(Stdio::null())
        .process_group(0)
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_owned()
}

#[test]
fn a_program_can_signal_itself_and_dies_of_the_signal() {
    use std::os::unix::process::ExitStatusExt;
    let f = fixture();
    // As the first process of its namespace these would be dropped; under
    // the sandbox's init the program is an ordinary process.
    for (name, number) in [("TERM", 15), ("SEGV", 11), ("USR1", 10), ("KILL", 9)] {
        let o = f.sh(&format!("kill -{name} $$; sleep 5; echo survived"));
        assert_eq!(o.status.signal(), Some(number), "{name}: {o:?}");
        assert_eq!(stdout(&o), "", "{name}: {o:?}");
    }
    // And the init passes a signal sent to it on to the program.
    let o = f.sh("trap 'echo got TERM; exit 3' TERM; kill -TERM 1; sleep 5 & wait");
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    assert_eq!(stdout(&o), "got TERM");
}

/// One line per probe: `name errno` (0 when the call succeeded).
const SYSCALL_PROBES: &str = r##"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
    print(name, 0 if r >= 0 else ctypes.get_errno())
call("unshare-user", 272, 0x10000000)
call("unshare-mount", 272, 0x20000)
call("clone-newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
call("setns", 308, 0, 0)
call("mount", 165, 0, 0, 0, 0, 0)
call("umount2", 166, 0, 0)
call("pivot_root", 155, 0, 0)
call("keyctl", 250, 1, 0)
call("add_key", 248, 0, 0, 0, 0, 0)
call("bpf", 321, 0, 0, 0)
call("perf_event_open", 298, 0, 0, 0, 0, 0)
call("ptrace", 101, 0, 0, 0, 0)
call("process_vm_readv", 310, 1, 0, 0, 0, 0, 0)
call("open_by_handle_at", 304, 0, 0, 0)
call("io_uring_setup", 425, 1, 0)
call("userfaultfd", 323, 0)
call("clone3", 435, 0, 0)
call("openat2", 437, 0, 0, 0, 0)
call("x32-getpid", 0x40000000 | 39)
ws = os.environ["WS"]
path = os.path.join(ws, "tool")
with open(path, "w") as f: f.write("#!/bin/sh\n")
for name, mode in [("chmod-setuid", 0o4755), ("chmod-setgid", 0o2755), ("chmod-plain", 0o755)]:
    try:
        os.chmod(path, mode); print(name, 0)
    except OSError as e:
        print(name, e.errno)
for name, mode in [("create-setuid", 0o4755), ("create-plain", 0o644)]:
    try:
        os.close(os.open(os.path.join(ws, name), os.O_CREAT | os.O_WRONLY, mode)); print(name, 0)
    except OSError as e:
        print(name, e.errno)
print("getpid", 0 if os.getpid() > 0 else 1)
"##;

#[test]
fn the_system_call_filter_refuses_what_no_tool_needs() {
    let f = fixture();
    let o = python(&f, SYSCALL_PROBES);
    assert!(o.status.success(), "{o:?}");
    let seen: std::collections::HashMap<String, i32> = stdout(&o)
        .lines()
        .filter_map(|l| {
            let (name, errno) = l.split_once(' ')?;
            Some((name.to_owned(), errno.parse().ok()?))
        })
        .collect();
    const EPERM: i32 = 1;
    const ENOSYS: i32 = 38;
    for name in [
        "unshare-user",
        "unshare-mount",
        "clone-newuser",
        "setns",
        "mount",
        "umount2",
        "pivot_root",
        "keyctl",
        "add_key",
        "bpf",
        "perf_event_open",
        "ptrace",
        "process_vm_readv",
        "open_by_handle_at",
        "io_uring_setup",
        "userfaultfd",
        "chmod-setuid",
        "chmod-setgid",
        "create-setuid",
    ] {
        assert_eq!(seen.get(name), Some(&EPERM), "{name}: {seen:?}");
    }
    for name in ["clone3", "openat2", "x32-getpid"] {
        assert_eq!(seen.get(name), Some(&ENOSYS), "{name}: {seen:?}");
    }
    // What tools do every day still works.
    for name in ["chmod-plain", "create-plain", "getpid"] {
        assert_eq!(seen.get(name), Some(&0), "{name}: {seen:?}");
    }
}

#[test]
fn outside_its_write_grants_a_program_changes_no_metadata() {
    let f = fixture();
    // Files root owns, outside the grants: the program is uid 0 here (no
    // user given), so without the read-only view the owner check passes.
    let theirs = f.root.join("state/b/workspace/notes.txt");
    let ours = f.root.join("state/a/workspace/mine.txt");
    std::fs::write(&ours, "mine\n").unwrap();
    let script = |path: &Path| {
        format!(
            r#"
import os
p = "{}"
for name, act in [
    ("chmod", lambda: os.chmod(p, 0o777)),
    ("chown", lambda: os.chown(p, os.getuid(), os.getgid())),
    ("utime", lambda: os.utime(p, (0, 0))),
    ("setxattr", lambda: os.setxattr(p, "user.bdk", b"x")),
    ("mkdir-beside", lambda: os.mkdir(p + ".d")),
]:
    try:
        act(); print(name, 0)
    except OSError as e:
        print(name, e.errno)
"#,
            path.display()
        )
    };
    const EROFS: i32 = 30;
    let o = python(&f, &script(&theirs));
    for line in stdout(&o).lines() {
        let (name, errno) = line.split_once(' ').unwrap();
        // The read-only mount answers before Landlock is asked.
        assert_eq!(errno.parse::<i32>().unwrap(), EROFS, "{name}: {o:?}");
    }
    assert_eq!(stdout(&o).lines().count(), 5, "{o:?}");
    let meta = std::fs::metadata(&theirs).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.mode() & 0o777, meta.uid()), (0o644, 0), "{meta:?}");
    // The state root itself: no chmod either.
    let o = f.sh(&format!("chmod 0777 {}", f.root.join("state").display()));
    assert!(!o.status.success(), "{o:?}");
    assert!(stderr(&o).contains("Read-only file system"), "{o:?}");
    // In its own workspace every one of them works.
    let o = python(&f, &script(&ours));
    assert!(
        stdout(&o).lines().all(|l| l.ends_with(" 0")),
        "{}\n{o:?}",
        stdout(&o)
    );
    // And nothing there may raise privileges: the writable mounts are
    // nosuid and nodev.
    let o = f.sh(&format!(
        "grep ' {} ' /proc/self/mountinfo",
        f.root.join("state/a/workspace").display()
    ));
    let line = stdout(&o);
    assert!(
        line.contains("nosuid") && line.contains("nodev") && line.contains(" rw"),
        "{line}"
    );
}

#[test]
fn under_root_a_program_runs_as_the_sandbox_user_and_reads_what_it_is_granted() {
    use std::os::unix::fs::MetadataExt;
    let user = bdk_sandbox::user::default_user();
    let f = fixture_with(|b| b.user(Some(user)));
    assert_eq!(f.sandbox.probe().unwrap().user, Some(true));
    // The host gives the user what it writes.
    let ws = f.root.join("state/a/workspace");
    rustix::fs::chown(
        &ws,
        Some(rustix::fs::Uid::from_raw(user.uid)),
        Some(rustix::fs::Gid::from_raw(user.gid)),
    )
    .unwrap();
    std::fs::write(ws.join("roots.txt"), "root's\n").unwrap();
    let o = f.sh(&format!(
        "id -u; id -g; id -G; grep -E '^Cap(Eff|Prm|Amb|Bnd)' /proc/self/status; cat tool.sh; echo new > {ws}/new.txt && echo wrote",
        ws = ws.display()
    ));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    let id = user.uid.to_string();
    assert_eq!(lines[..3], [id.as_str(), id.as_str(), id.as_str()], "{o:?}");
    // CAP_DAC_READ_SEARCH (bit 2) and nothing else, in every set.
    for line in &lines[3..7] {
        assert!(line.ends_with("0000000000000004"), "{line}: {o:?}");
    }
    // Its own folder, inside the test's 0700 temp dir, is readable: what
    // it reads is Landlock's decision, not the mode bits'.
    assert_eq!(lines[7], "echo tool", "{o:?}");
    assert_eq!(lines[8], "wrote", "{o:?}");
    assert_eq!(
        std::fs::metadata(ws.join("new.txt")).unwrap().uid(),
        user.uid
    );
    // What root owns stays root's, even inside the workspace; root's
    // powers and root itself are out of reach.
    let o = python(
        &f,
        &format!(
            r#"
import os
p = "{}"
for name, act in [
    ("chmod", lambda: os.chmod(p, 0o777)),
    ("write", lambda: open(p, "w").write("x")),
    ("setuid", lambda: os.setuid(0)),
    ("read-shadow", lambda: open("/etc/shadow").read()),
]:
    try:
        act(); print(name, 0)
    except OSError as e:
        print(name, e.errno)
"#,
            ws.join("roots.txt").display()
        ),
    );
    assert_eq!(
        stdout(&o),
        "chmod 1\nwrite 13\nsetuid 1\nread-shadow 13",
        "{o:?}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("roots.txt")).unwrap(),
        "root's\n"
    );
}

#[test]
fn the_program_goes_first_when_memory_runs_out() {
    let f = fixture();
    let o = f.sh("cat /proc/self/oom_score_adj");
    assert_eq!(stdout(&o), "1000", "{o:?}");
}

/// The cgroups of this test process, which the test must find: the
/// project's machines delegate cgroup v1 to root.
fn cgroups() -> bdk_sandbox::CgroupDirs {
    let dirs = bdk_sandbox::cgroup::prepare();
    assert!(
        !dirs.is_empty(),
        "no cgroup hierarchy with the memory or pids controller is writable here"
    );
    dirs
}

fn limited() -> bdk_sandbox::Limits {
    bdk_sandbox::Limits {
        memory_bytes: Some(64 << 20),
        processes: Some(24),
        cpu_seconds: Some(1),
        file_bytes: Some(1 << 20),
    }
}

#[test]
fn a_call_over_a_limit_is_stopped_and_the_limit_named() {
    use std::os::unix::process::ExitStatusExt;
    let dirs = cgroups();
    let f = fixture_with(|b| b.limits(limited()).cgroups(dirs.clone()));
    let support = f.sandbox.probe().unwrap();
    assert!(support.cgroup_limits, "{support:?}");
    let limit_line = |o: &Output| {
        stderr(o)
            .lines()
            .find_map(|l| l.strip_prefix(bdk_sandbox::LIMIT_PREFIX))
            .map(str::to_owned)
    };
    // Memory: the kernel kills the call in its cgroup, not the server.
    let o = python(&f, "b = b'x' * (256 << 20); print('allocated')");
    assert_eq!(o.status.signal(), Some(9), "{o:?}");
    assert_eq!(limit_line(&o).as_deref(), Some("memory limit of 64 MiB"));
    // Processes: the 25th fork of the call fails.
    let o = python(
        &f,
        r#"
import os, time, sys
n = 0
try:
    while n < 200:
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        n += 1
except OSError as e:
    print("forked", n, "then", e.errno); sys.exit(1)
"#,
    );
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(stdout(&o).ends_with("then 11"), "{o:?}");
    assert_eq!(limit_line(&o).as_deref(), Some("process limit of 24"));
    // CPU time and file size: the kernel's signals, named.
    let o = f.sh("exec /bin/sh -c 'while :; do :; done'");
    assert_eq!(o.status.signal(), Some(24), "{o:?}");
    assert_eq!(limit_line(&o).as_deref(), Some("CPU time limit of 1 s"));
    let o = f.sh(&format!(
        "exec head -c 2097152 /dev/zero > {}/big",
        f.root.join("state/a/workspace").display()
    ));
    assert_eq!(o.status.signal(), Some(25), "{o:?}");
    assert_eq!(limit_line(&o).as_deref(), Some("file size limit of 1 MiB"));
    // Within its limits a call runs as before, and every call's cgroup is
    // gone once it ends.
    let o = f.sh("echo fine");
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), "fine".to_owned()));
    assert_eq!(limit_line(&o), None);
    for base in [&dirs.memory, &dirs.pids, &dirs.unified]
        .into_iter()
        .flatten()
    {
        let left: Vec<_> = std::fs::read_dir(base)
            .unwrap()
            .flatten()
            .filter(|e| e.file_type().unwrap().is_dir())
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "{}: {left:?}", base.display());
    }
    bdk_sandbox::cgroup::release(&dirs);
}

#[test]
fn without_a_cgroup_memory_is_bounded_per_process() {
    let f = fixture_with(|b| b.limits(limited()));
    let o = python(
        &f,
        "try:\n    b = b'x' * (256 << 20)\nexcept MemoryError:\n    print('refused')",
    );
    assert_eq!(
        (o.status.code(), stdout(&o)),
        (Some(0), "refused".to_owned()),
        "{o:?}"
    );
}

#[test]
fn a_fork_server_call_gets_the_same_limits_and_user() {
    let dirs = cgroups();
    let user = bdk_sandbox::user::default_user();
    let f = fixture_with(|b| b.limits(limited()).cgroups(dirs.clone()).user(Some(user)));
    f.sandbox.probe().unwrap();
    let server = f.sandbox.fork_server().unwrap();
    let (stdin_r, stdin_w) = std::io::pipe().unwrap();
    drop(stdin_w);
    let (mut out_r, out_w) = std::io::pipe().unwrap();
    let (mut err_r, err_w) = std::io::pipe().unwrap();
    let (tell, heard) = std::sync::mpsc::channel();
    server
        .run(
            &f.call(),
            &[
                "/usr/bin/python3".to_owned(),
                "-c".to_owned(),
                "import os; print(os.getuid(), flush=True); b = b'x' * (256 << 20)".to_owned(),
            ],
            &bdk_sandbox::env::base(&[]),
            &f.root.join("agent/tools"),
            [stdin_r.into(), out_w.into(), err_w.into()],
            move |event| {
                let _ = tell.send(event);
            },
        )
        .unwrap();
    let status = loop {
        match heard.recv().unwrap() {
            bdk_sandbox::Event::Exited(status) => break status,
            bdk_sandbox::Event::Started(_) => {}
            other => panic!("{other:?}"),
        }
    };
    let (mut out, mut err) = (String::new(), String::new());
    std::io::Read::read_to_string(&mut out_r, &mut out).unwrap();
    std::io::Read::read_to_string(&mut err_r, &mut err).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{out} {err}");
    assert_eq!(out.trim(), user.uid.to_string());
    assert!(
        err.contains(&format!(
            "{}memory limit of 64 MiB",
            bdk_sandbox::LIMIT_PREFIX
        )),
        "{err}"
    );
    drop(server);
    bdk_sandbox::cgroup::release(&dirs);
}

#[test]
fn an_ordinary_user_gets_the_read_only_view_in_a_user_namespace() {
    // The launcher run by an ordinary user (uid 4321 here): no root, so a
    // user namespace holds its PID and mount namespaces.
    use std::os::unix::fs::MetadataExt;
    const UID: u32 = 4321;
    let f = fixture();
    for entry in [
        "",
        "agent",
        "agent/tools",
        "agent/tools/tool.sh",
        "state",
        "state/a",
        "state/a/workspace",
        "state/b",
        "state/b/workspace",
        "state/b/workspace/notes.txt",
    ] {
        rustix::fs::chown(
            f.root.join(entry),
            Some(rustix::fs::Uid::from_raw(UID)),
            Some(rustix::fs::Gid::from_raw(UID)),
        )
        .unwrap();
    }
    let run = |script: &str| f.command(script).uid(UID).gid(UID).output().unwrap();
    let o = run("id -u; echo $$; echo new > ../../state/a/workspace/new.txt && echo wrote");
    assert_eq!(stdout(&o), format!("{UID}\n2\nwrote"), "{o:?}");
    // Its own user's files elsewhere: no chmod, no utime.
    let theirs = f.root.join("state/b/workspace/notes.txt");
    let o = run(&format!(
        "chmod 0777 {p}; touch -d 2001-01-01 {p}",
        p = theirs.display()
    ));
    assert!(
        stderr(&o).matches("Read-only file system").count() == 2,
        "{o:?}"
    );
    assert_eq!(std::fs::metadata(&theirs).unwrap().mode() & 0o777, 0o644);
    // And the filter holds here too.
    let o = run("unshare -U true");
    assert!(!o.status.success(), "{o:?}");
}
