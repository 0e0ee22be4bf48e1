#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! CLI conventions, run as the real binary: completions and man pages
//! generated from the command definitions, `--version` with the commit and
//! build date, and an explicitly chosen `--port` that is busy.

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

mod common;

fn bdk(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn completions_generate_for_each_shell_from_the_commands() {
    for (shell, marker) in [
        ("bash", "complete -F _bdk"),
        ("zsh", "#compdef bdk"),
        ("fish", "complete -c bdk"),
        ("elvish", "edit:completion:arg-completer[bdk]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let (code, out, err) = bdk(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {err}");
        assert!(out.contains(marker), "{shell}: {out}");
        for command in ["serve", "evals", "slack", "doctor", "replay"] {
            assert!(out.contains(command), "{shell} lacks {command}");
        }
    }
    let (code, _, err) = bdk(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("possible values"), "{err}");
}

#[test]
fn man_pages_describe_every_command() {
    let (code, out, err) = bdk(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(".TH bdk 1"), "{out}");
    assert!(out.contains("serve"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let (code, _, err) = bdk(&["man", "--out-dir", dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    for page in [
        "bdk.1",
        "bdk-serve.1",
        "bdk-github-replay.1",
        "bdk-slack-doctor.1",
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.starts_with(".ie"), "{page}: {text}");
    }
}

#[test]
fn the_version_names_the_commit_and_the_build_date() {
    let (code, out, err) = bdk(&["--version"]);
    assert_eq!(code, 0, "{err}");
    let line = out.trim();
    // `bdk <version> (<commit> <YYYY-MM-DD>)`.
    let inner = line
        .strip_prefix("bdk ")
        .and_then(|rest| rest.split_once(" ("))
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    let (commit, date) = inner.split_once(' ').unwrap_or_else(|| panic!("{line}"));
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{line}"
    );
    let digits: Vec<&str> = date.split('-').collect();
    assert!(
        digits.len() == 3
            && [4, 2, 2]
                .iter()
                .zip(&digits)
                .all(|(n, d)| d.len() == *n && d.chars().all(|c| c.is_ascii_digit())),
        "{line}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    if let Some(head) = head {
        assert_eq!(commit, head, "{line}");
    }
    // The same on a subcommand.
    let (_, sub, _) = bdk(&["serve", "--version"]);
    assert!(sub.contains(commit), "{sub}");
}

#[test]
fn a_busy_port_that_was_asked_for_is_an_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let (_tmp, dir) = common::weather();
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(["serve", dir.to_str().unwrap(), "--port", &port])
        .env_remove("BDK_STATE_ROOT")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is busy")),
        "{err}"
    );
    assert!(err.contains("--port 0"), "{err}");
}
