//! `bdk evals` driven as a real binary: the weather example passes offline;
//! the failing fixture suite reports every violated assertion with its
//! event, writes well-formed JUnit XML and exits 1; bad files and empty
//! selections exit 2; `--url` runs the same cases against `bdk serve`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

fn bdk(args: &[&str]) -> (i32, String, String) {
    let out = Command::cargo_bin("bdk")
        .unwrap()
        .args(args)
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_TOKEN")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The weather agent with the failing fixture evals instead of its own.
fn failing_project() -> (tempfile::TempDir, PathBuf) {
    let (tmp, dir) = common::weather();
    std::fs::remove_dir_all(dir.join("evals")).unwrap();
    common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../bdk-evals/tests/fixtures/failing/evals"),
        &dir.join("evals"),
    );
    (tmp, dir)
}

/// A small XML well-formedness check: balanced, properly nested tags,
/// quoted attributes, only the five predefined entities, one root.
/// An element: name, attributes, text.
type Element = (String, Vec<(String, String)>, String);

fn check_xml(xml: &str) -> Vec<Element> {
    let body = xml.trim_start();
    let body = match body.strip_prefix("<?xml") {
        Some(rest) => &rest[rest.find("?>").expect("unterminated declaration") + 2..],
        None => body,
    };
    let mut stack: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut roots = 0;
    let mut rest = body;
    let mut text = String::new();
    let check_text = |t: &str| {
        let mut s = t;
        while let Some(i) = s.find('&') {
            let end = s[i..].find(';').expect("unterminated entity") + i;
            let ent = &s[i + 1..end];
            assert!(
                ["amp", "lt", "gt", "quot", "apos"].contains(&ent),
                "unknown entity &{ent};"
            );
            s = &s[end + 1..];
        }
        assert!(!t.contains('<'), "raw < in text");
    };
    while let Some(open) = rest.find('<') {
        text.push_str(&rest[..open]);
        check_text(&rest[..open]);
        let close = rest[open..].find('>').expect("unterminated tag") + open;
        let tag = &rest[open + 1..close];
        rest = &rest[close + 1..];
        if let Some(name) = tag.strip_prefix('/') {
            let top = stack.pop().expect("closing tag without an opening one");
            assert_eq!(top, name.trim(), "mismatched closing tag");
            if let Some(last) = elements
                .iter_mut()
                .rev()
                .find(|(n, _, _): &&mut Element| *n == top)
            {
                last.2 = std::mem::take(&mut text);
            }
            continue;
        }
        let self_closing = tag.ends_with('/');
        let tag = tag.trim_end_matches('/');
        let mut parts = tag.splitn(2, char::is_whitespace);
        let name = parts.next().unwrap().to_owned();
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_:".contains(c)),
            "bad tag name {name:?}"
        );
        let mut attrs = Vec::new();
        let mut a = parts.next().unwrap_or("").trim();
        while !a.is_empty() {
            let eq = a.find('=').expect("attribute without value");
            let key = a[..eq].trim().to_owned();
            let after = &a[eq + 1..];
            assert!(after.starts_with('"'), "unquoted attribute {key}");
            let end = after[1..].find('"').expect("unterminated attribute") + 1;
            let value = &after[1..end];
            check_text(value);
            attrs.push((key, value.to_owned()));
            a = after[end + 1..].trim();
        }
        if stack.is_empty() {
            roots += 1;
        }
        elements.push((name.clone(), attrs, String::new()));
        if !self_closing {
            stack.push(name);
        }
    }
    assert!(rest.trim().is_empty(), "trailing text after the root");
    assert!(stack.is_empty(), "unclosed tags: {stack:?}");
    assert_eq!(roots, 1, "exactly one root element");
    elements
}

#[test]
fn the_weather_example_passes_offline() {
    let (_tmp, dir) = common::weather();
    let (code, stdout, stderr) = bdk(&["evals", "--dir", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("6 case(s): 6 passed, 0 failed"), "{stdout}");
    for id in [
        "weather/current-conditions",
        "weather/small-talk",
        "weather/forecast-skill",
        "weather/climate-subagent",
        "weather/two-turns",
        "judge/celsius-answer",
    ] {
        assert!(stdout.contains(id), "{id} missing from:\n{stdout}");
    }
}

#[test]
fn failing_cases_print_every_violation_with_its_event_and_write_junit() {
    let (tmp, dir) = failing_project();
    let junit = tmp.path().join("reports/junit.xml");
    let (code, stdout, stderr) = bdk(&[
        "evals",
        "--dir",
        dir.to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("6 case(s): 1 passed, 5 failed"), "{stdout}");
    let expected = [
        (
            r#"calledTool("get_weather", {input: {city: "Lyon", ..}})"#,
            "actions.requested",
        ),
        ("usedNoTools()", "actions.requested"),
        (r#"notCalledTool("get_weather")"#, "actions.requested"),
        ("maxToolCalls(0)", "actions.requested"),
        (r#"loadedSkill("forecast-style")"#, "session.waiting"),
        (r#"toolOrder(["task", "get_weather"])"#, "session.waiting"),
        (r#"calledSubagent("climate")"#, "session.waiting"),
        (r#"taggedArtifact("report")"#, "session.waiting"),
        ("event(turn.failed)", "session.waiting"),
        ("notEvent(action.result", "action.result"),
        (
            "eventOrder([turn.completed, actions.requested])",
            "turn.completed",
        ),
        (
            r#"eventsSatisfy("every result is an error")"#,
            "action.result",
        ),
        (
            r#"check("reply", containing "snow storm")"#,
            "session.waiting",
        ),
        ("status: failed})", "action.result"),
        ("noFailedActions()", "action.result"),
        ("judge(", "turn.completed"),
        (r#"requireToolCall("get_weather")"#, "turn.completed"),
    ];
    for (assertion, event) in expected {
        let line = stdout
            .lines()
            .find(|l| l.contains(assertion))
            .unwrap_or_else(|| panic!("no line for {assertion} in:\n{stdout}"));
        assert!(
            line.contains(&format!(" {event})")) && line.contains("(event #"),
            "{assertion} should name the {event} event: {line}"
        );
    }
    assert!(stdout.contains("timed out after 300 ms"), "{stdout}");
    // The stopped case never sent its second message.
    assert!(!stdout.contains("Rome"), "{stdout}");

    let xml = std::fs::read_to_string(&junit).unwrap();
    let elements = check_xml(&xml);
    let cases: Vec<_> = elements.iter().filter(|e| e.0 == "testcase").collect();
    assert_eq!(cases.len(), 6);
    let failures: Vec<_> = elements.iter().filter(|e| e.0 == "failure").collect();
    assert_eq!(failures.len(), 5);
    let suites = elements.iter().find(|e| e.0 == "testsuites").unwrap();
    assert!(
        suites.1.contains(&("failures".into(), "5".into())),
        "{:?}",
        suites.1
    );
    assert!(xml.contains("(event #"), "{xml}");
}

#[test]
fn filters_json_output_and_unusable_requests() {
    let (_tmp, dir) = failing_project();
    let d = dir.to_str().unwrap();
    // OR within --tags, AND with --filter.
    let (code, stdout, stderr) = bdk(&["evals", "--dir", d, "--tags", "fine", "judge", "--json"]);
    assert_eq!(code, 1, "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let ids: Vec<&str> = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["broken/judge-rejects", "broken/passes"]);
    assert_eq!(v["status"], "completed");
    let judge = &v["cases"][0]["iterations"][0];
    assert_eq!(judge["failures"][0]["event"]["type"], "turn.completed");
    assert_eq!(judge["scores"][0]["name"], "judge");

    let (code, stdout, _) = bdk(&[
        "evals",
        "--dir",
        d,
        "--tags",
        "fine",
        "judge",
        "--filter",
        "broken/passes",
    ]);
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("1 case(s): 1 passed"), "{stdout}");

    let (code, _, stderr) = bdk(&["evals", "--dir", d, "--filter", "nope"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no eval case matches"), "{stderr}");

    std::fs::write(
        dir.join("evals/bad.eval.toml"),
        "[[cases]]\nname = \"x\"\nsteps = 3\n",
    )
    .unwrap();
    let (code, _, stderr) = bdk(&["evals", "--dir", d]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("evals/bad.eval.toml: invalid TOML at line 3"),
        "{stderr}"
    );
    assert!(stderr.contains("fix:"), "{stderr}");

    let empty = tempfile::tempdir().unwrap();
    common::copy_dir(&dir.join("agent"), &empty.path().join("agent"));
    let (code, _, stderr) = bdk(&["evals", "--dir", empty.path().to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(stderr.contains("no evals/ folder"), "{stderr}");
}

#[test]
fn url_mode_runs_the_cases_against_a_running_server() {
    let (_tmp, dir) = common::weather();
    let server = common::Server::start(&[], &[&dir]);
    let url = format!("{}/weather", server.base);
    let (code, stdout, stderr) = bdk(&[
        "evals",
        "--dir",
        dir.to_str().unwrap(),
        "--url",
        &url,
        "--filter",
        "weather/current-conditions",
        "weather/two-turns",
        "judge",
    ]);
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("3 case(s): 3 passed"), "{stdout}");
    // The server recorded the eval sessions with purpose `eval`.
    let mut started = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().is_some_and(|n| n == "events.ndjson") {
                let text = std::fs::read_to_string(&path).unwrap();
                let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
                started.push(first);
            }
        }
    }
    assert_eq!(started.len(), 3, "{started:?}");
    assert!(
        started
            .iter()
            .all(|e| e["type"] == "session.started" && e["data"]["purpose"] == "eval"),
        "{started:?}"
    );

    let (code, _, stderr) = bdk(&["evals", "--dir", dir.to_str().unwrap(), "--url", "ftp://x"]);
    assert_eq!(code, 2, "{stderr}");
}

/// bdk-evals built with only its `http` feature (no runtime: no bdk-core,
/// bdk-store or sandbox in the program) runs the weather example's whole
/// suite, judge included, against a real `bdk serve`. The program is the
/// crate's `remote` example, built here by cargo with exactly those
/// features, so the feature split is proven by a build, not assumed; the
/// crate's unit tests run in that build as well.
#[test]
fn evals_built_for_http_only_run_the_weather_suite_against_a_server() {
    let (_tmp, dir) = common::weather();
    let server = common::Server::start(&[], &[&dir]);
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let built = Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args([
            "build",
            "--quiet",
            "-p",
            "bdk-evals",
            "--no-default-features",
            "-F",
            "http",
            "--example",
            "remote",
            "--message-format",
            "json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&built.stdout);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // The example's path, from cargo's own report of what it built.
    let program = stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "remote")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the example it built");
    // The crate's own unit tests pass in that build too, among them the
    // ones only such a build has (a JUnit reporter without `junit`).
    let unit = Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args([
            "test",
            "-p",
            "bdk-evals",
            "--no-default-features",
            "-F",
            "http",
            "--lib",
        ])
        .output()
        .unwrap();
    let unit_out = String::from_utf8_lossy(&unit.stdout);
    assert!(
        unit.status.success(),
        "{unit_out}\n{}",
        String::from_utf8_lossy(&unit.stderr)
    );
    assert!(
        unit_out
            .contains("without_the_junit_feature_a_junit_reporter_is_an_error_naming_it ... ok"),
        "{unit_out}"
    );

    // The program links no runtime crate: its dependency graph, as cargo
    // resolves it for these features, has neither bdk-core nor bdk-store.
    let tree = Command::new(env!("CARGO"))
        .current_dir(&workspace)
        .args([
            "tree",
            "-p",
            "bdk-evals",
            "--no-default-features",
            "-F",
            "http",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .output()
        .unwrap();
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.contains("bdk-project"), "{tree}");
    for runtime in ["bdk-core", "bdk-store", "bdk-sandbox"] {
        assert!(!tree.contains(runtime), "{runtime} in:\n{tree}");
    }

    let run = Command::new(&program)
        .args([dir.to_str().unwrap(), &format!("{}/weather", server.base)])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&run.stdout);
    let err = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.contains("6 case(s): 6 passed"), "{out}");
    assert!(out.contains("judge/celsius-answer        passed"), "{out}");

    // A server that is not there fails every case, and says so.
    let run = Command::new(&program)
        .args([dir.to_str().unwrap(), "http://127.0.0.1:9/weather"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&run.stdout).contains("0 passed, 6 failed"),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
}

#[test]
fn validate_reports_eval_file_problems() {
    let (_tmp, dir) = common::weather();
    let d = dir.to_str().unwrap();
    let (code, stdout, _) = bdk(&["validate", d]);
    assert_eq!(code, 0, "{stdout}");
    std::fs::write(
        dir.join("evals/typo.eval.toml"),
        "[[cases]]\nname = \"t\"\n[[cases.steps]]\nsend = \"hi\"\nexpect = [{ assert = \"called_tool\", nme = \"x\" }]\n",
    )
    .unwrap();
    let (code, stdout, _) = bdk(&["validate", d]);
    assert_eq!(code, 2, "{stdout}");
    assert!(
        stdout.contains("error: evals/typo.eval.toml: invalid TOML at line 5"),
        "{stdout}"
    );
    assert!(stdout.contains("unknown field `nme`"), "{stdout}");
}
