#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! CLI conventions, run as the real binary: completions and man pages
//! generated from the command definitions, `--version` with the commit and
//! build date, and an explicitly chosen `--port` that is busy.

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;

use crate::common;

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

/// `bdk <args>` run in `cwd`, with `stdin` on standard input.
fn bdk_in(cwd: &std::path::Path, args: &[&str], stdin: &str) -> (i32, String, String) {
    use std::io::Write as _;
    let mut child = Command::cargo_bin("bdk")
        .unwrap()
        .args(args)
        .current_dir(cwd)
        .env_remove("BDK_STATE_ROOT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn json_arguments_come_inline_from_stdin_or_from_a_file() {
    let (_tmp, dir) = common::weather();
    let (code, out, err) = bdk_in(
        &dir,
        &["call", "get_weather", "--input", "-"],
        r#"{"city": "Paris"}"#,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Paris"), "{out}");
    let file = dir.join("input.json");
    std::fs::write(&file, r#"{"city": "Oslo"}"#).unwrap();
    let at = format!("@{}", file.display());
    let (code, out, err) = bdk_in(&dir, &["call", "get_weather", "-i", &at], "");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("Oslo"), "{out}");
    for (input, stdin, says) in [
        ("@/no/such/file.json", "", "cannot read the file"),
        ("-", "{not json", "standard input is not valid JSON"),
        ("{nope", "", "--input is not valid JSON"),
    ] {
        let (code, _, err) = bdk_in(&dir, &["call", "get_weather", "-i", input], stdin);
        assert_eq!(code, 2, "{input}: {err}");
        assert!(err.contains(says), "{input}: {err}");
    }
}

#[test]
fn the_project_is_found_from_any_folder_inside_it() {
    let (_tmp, dir) = common::weather();
    for inside in [dir.clone(), dir.join("agent"), dir.join("agent/tools")] {
        let (code, out, err) = bdk_in(&inside, &["validate"], "");
        assert_eq!(code, 0, "{}: {err}", inside.display());
        assert!(
            out.contains("0 error(s)") || err.contains("0 error(s)"),
            "{out}{err}"
        );
    }
    // The state lives at the project root, whichever folder bdk ran in.
    let (code, _, err) = bdk_in(
        &dir.join("agent/tools"),
        &["call", "get_weather", "-i", r#"{"city": "Rome"}"#],
        "",
    );
    assert_eq!(code, 0, "{err}");
    assert!(dir.join(".bdk").is_dir());
    assert!(!dir.join("agent/tools/.bdk").exists());
    // Outside any project: the error, and where bdk looked.
    let outside = tempfile::tempdir().unwrap();
    let (code, _, err) = bdk_in(outside.path(), &["validate"], "");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no agent/ folder in"), "{err}");
    assert!(err.contains(&outside.path().display().to_string()), "{err}");
}

#[test]
fn init_starts_from_a_template_with_variables() {
    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("helpdesk");
    let (code, out, err) = bdk(&[
        "init",
        empty.to_str().unwrap(),
        "--template",
        "empty",
        "--var",
        "name=helpdesk",
        "--var",
        "description=Answers \"tickets\"",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("3 files"), "{out}");
    let toml = std::fs::read_to_string(empty.join("agent/agent.toml")).unwrap();
    assert!(toml.contains("name = \"helpdesk\""), "{toml}");
    assert!(
        toml.contains(r#"description = "Answers \"tickets\"""#),
        "{toml}"
    );
    let (code, out, err) = bdk(&["info", empty.to_str().unwrap(), "--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"helpdesk\""), "{out}");

    // The weather example with another name still validates.
    let weather = tmp.path().join("forecaster");
    let (code, _, err) = bdk(&[
        "init",
        weather.to_str().unwrap(),
        "--var",
        "name=forecaster",
    ]);
    assert_eq!(code, 0, "{err}");
    let toml = std::fs::read_to_string(weather.join("agent/agent.toml")).unwrap();
    assert!(toml.contains("name = \"forecaster\""), "{toml}");
    assert!(
        toml.contains("[builtin_tools]"),
        "comments and tables kept: {toml}"
    );
    let (code, _, err) = bdk(&["validate", weather.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");

    // Bad variables and templates write nothing.
    for args in [
        vec!["--var", "colour=red"],
        vec!["--var", "no-equals-sign"],
        vec!["--template", "kitchen-sink"],
    ] {
        let target = tmp.path().join("never");
        let mut all = vec!["init", target.to_str().unwrap()];
        all.extend(args.iter().copied());
        let (code, _, err) = bdk(&all);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!target.exists(), "{args:?}");
    }
}

#[test]
fn the_main_commands_show_examples_in_their_help() {
    for command in [
        "init",
        "validate",
        "info",
        "run",
        "call",
        "sessions",
        "serve",
        "evals",
        "completions",
        "man",
    ] {
        let (code, out, err) = bdk(&[command, "--help"]);
        assert_eq!(code, 0, "{command}: {err}");
        let examples = out
            .split_once("Examples:")
            .unwrap_or_else(|| panic!("{command} --help has no examples:\n{out}"))
            .1;
        assert!(
            examples.contains(&format!("bdk {command}")),
            "{command}: {examples}"
        );
    }
}

#[test]
fn a_terminal_gets_text_and_a_pipe_or_json_gets_the_json() {
    let (_tmp, dir) = common::weather();
    let ask = ["run", "-m", "What's the weather in Paris?"];
    let text = common::on_a_terminal(&ask, &dir);
    assert!(
        text.starts_with("It is 12°C and sunny in Paris (simulated data).\n"),
        "{text}"
    );
    assert!(text.contains("✓ completed · get_weather ("), "{text}");
    assert!(!text.contains("\"reply\""), "{text}");
    // `--json` on a terminal, and any pipe: the JSON as before.
    let with_flag = common::on_a_terminal(&["run", "-m", "hi", "--json"], &dir);
    let v: serde_json::Value = serde_json::from_str(with_flag.trim()).unwrap();
    assert_eq!(v["ok"], true);
    let (code, piped, err) = bdk_in(&dir, &["run", "-m", "hi"], "");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&piped).unwrap();
    assert!(v["sessionId"].is_string(), "{v}");
    let id = v["sessionId"].as_str().unwrap().to_owned();

    let text = common::on_a_terminal(&["call", "get_weather", "-i", r#"{"city": "Oslo"}"#], &dir);
    assert!(text.contains("\"city\": \"Oslo\""), "{text}");
    assert!(text.contains("✓ get_weather ("), "{text}");
    let text = common::on_a_terminal(&["call", "nope"], &dir);
    assert!(text.contains("✗ unknown_tool"), "{text}");

    let text = common::on_a_terminal(&["session", &id], &dir);
    assert!(
        text.starts_with(&format!("{id}  waiting  chat session on cli")),
        "{text}"
    );
    let (_, piped, _) = bdk_in(&dir, &["session", &id], "");
    let v: serde_json::Value = serde_json::from_str(&piped).unwrap();
    assert_eq!(v["session"]["id"], id.as_str());

    let text = common::on_a_terminal(&["sessions"], &dir);
    assert!(text.contains(&id) && !text.contains('{'), "{text}");
    let (_, piped, _) = bdk_in(&dir, &["sessions"], "");
    let v: serde_json::Value = serde_json::from_str(&piped).unwrap();
    assert!(v.as_array().is_some_and(|a| a.len() == 3), "{v}");
    let text = common::on_a_terminal(&["info"], &dir);
    assert!(text.starts_with("agent: weather"), "{text}");
    let (_, piped, _) = bdk_in(&dir, &["info"], "");
    let v: serde_json::Value = serde_json::from_str(&piped).unwrap();
    assert_eq!(v["name"], "weather");
}
