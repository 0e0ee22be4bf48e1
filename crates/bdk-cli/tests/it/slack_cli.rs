#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `bdk slack manifest` and `bdk slack doctor`, run as the real binary on
//! agent folders written here, against the fake Slack Web API
//! (`bdk_testkit::slack::FakeSlack`) and a real `bdk serve` of the same
//! folder for the request URL check.

use crate::common;

use std::path::{Path, PathBuf};

use bdk_testkit::PATIENCE;
use bdk_testkit::slack::{Failure, FakeSlack};
use common::Server;
use serde_json::Value;
use tempfile::TempDir;

/// The signing secret the server and the doctor share.
const SECRET: &str = "8f742231b10e8888abcd99aaabbb85a5";
/// Another well-formed signing secret.
const OTHER_SECRET: &str = "0123456789abcdef0123456789abcdef";

/// The slug `bdk serve` mounts the test agent under (its directory).
const SLUG: &str = "helper";

/// A scripted agent in `<tmp>/helper` with the Slack channels `channels`
/// (`(name, extra [slack] lines)`), each talking to `api`.
fn agent(api: &str, channels: &[(&str, &str)]) -> (TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(SLUG);
    let mut files = vec![
        (
            "agent/agent.toml".to_owned(),
            "name = \"Release Helper\"\ndescription = \"Answers questions about releases.\"\nmodel = \"scripted\"\n"
                .to_owned(),
        ),
        ("agent/instructions.md".to_owned(), "You answer.\n".to_owned()),
        (
            "agent/scripted.toml".to_owned(),
            "[[rules]]\nreply = \"ok\"\n".to_owned(),
        ),
    ];
    for (name, extra) in channels {
        files.push((
            format!("agent/channels/{name}.toml"),
            format!("kind = \"slack\"\n\n[slack]\napi_url = \"{api}\"\n{extra}"),
        ));
    }
    bdk_testkit::write_files(&dir, &files);
    (tmp, dir)
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    fn both(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// `bdk slack <args>` with no Slack or public-URL variable but `env`.
async fn slack(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"));
    cmd.arg("slack").args(args);
    for (name, _) in std::env::vars() {
        if name.starts_with("SLACK_") {
            cmd.env_remove(name);
        }
    }
    cmd.env_remove("BDK_PUBLIC_URL");
    cmd.envs(env.iter().copied());
    let out = tokio::time::timeout(PATIENCE, cmd.output())
        .await
        .expect("bdk slack ends")
        .unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

/// `bdk serve DIR --port 0` with the bot token, `secret` and the fake's
/// API URL.
fn serve(dir: &Path, fake: &FakeSlack, secret: &str) -> Server {
    let mut cmd = Server::command(&[dir]);
    for (name, _) in std::env::vars() {
        if name.starts_with("SLACK_") {
            cmd.env_remove(name);
        }
    }
    cmd.env("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN)
        .env("SLACK_SIGNING_SECRET", secret)
        .env("SLACK_API_URL", fake.url());
    Server::spawn(cmd)
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect()
}

/// The check named `name` of a doctor's JSON report.
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name}: {report}"))
}

// ---------------------------------------------------------------- manifest

#[tokio::test]
async fn manifest_names_scopes_events_and_the_request_url() {
    let (_tmp, dir) = agent("http://127.0.0.1:9/api", &[("slack", "")]);
    let dir = dir.to_str().unwrap();

    let run = slack(
        &["manifest", dir, "--url", "https://helper.example.com/"],
        &[],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.both());
    let m = run.json();
    let url = "https://helper.example.com/v1/channels/slack";
    assert_eq!(m["display_information"]["name"], "Release Helper");
    assert_eq!(
        m["display_information"]["description"],
        "Answers questions about releases."
    );
    assert_eq!(m["features"]["bot_user"]["display_name"], "release-helper");
    assert_eq!(m["features"]["bot_user"]["always_online"], true);
    assert_eq!(m["features"]["app_home"]["messages_tab_enabled"], true);
    assert_eq!(
        strings(&m["oauth_config"]["scopes"]["bot"]),
        [
            "app_mentions:read",
            "channels:history",
            "chat:write",
            "files:write",
            "groups:history",
            "im:history"
        ]
    );
    assert_eq!(
        strings(&m["settings"]["event_subscriptions"]["bot_events"]),
        [
            "app_mention",
            "message.channels",
            "message.groups",
            "message.im"
        ]
    );
    assert_eq!(m["settings"]["event_subscriptions"]["request_url"], url);
    assert_eq!(m["settings"]["interactivity"]["request_url"], url);
    assert_eq!(m["settings"]["interactivity"]["is_enabled"], true);
    assert_eq!(m["settings"]["socket_mode_enabled"], false);
    assert!(
        run.stderr.contains("From an app manifest"),
        "{}",
        run.both()
    );

    // Without --url: the channel's `public_url`, else BDK_PUBLIC_URL.
    let (_tmp2, with_public) = agent(
        "http://127.0.0.1:9/api",
        &[(
            "slack",
            "public_url = \"https://bots.example.com/helper\"\n",
        )],
    );
    let run = slack(
        &["manifest", with_public.to_str().unwrap()],
        &[("BDK_PUBLIC_URL", "https://ignored.example.com")],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(
        run.json()["settings"]["event_subscriptions"]["request_url"],
        "https://bots.example.com/helper/v1/channels/slack"
    );
    let run = slack(
        &["manifest", dir],
        &[("BDK_PUBLIC_URL", "https://env.example.com")],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(
        run.json()["settings"]["interactivity"]["request_url"],
        "https://env.example.com/v1/channels/slack"
    );

    // YAML says the same.
    let run = slack(
        &[
            "manifest",
            dir,
            "--url",
            "https://helper.example.com",
            "--yaml",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.both());
    assert!(
        run.stdout.contains(&format!("request_url: {url}")),
        "{}",
        run.both()
    );
    assert!(run.stdout.contains("- im:history"), "{}", run.both());
}

#[tokio::test]
async fn without_direct_messages_the_manifest_asks_for_no_im_scope_or_event() {
    let (_tmp, dir) = agent(
        "http://127.0.0.1:9/api",
        &[("slack", "direct_messages = false\n")],
    );
    let run = slack(
        &[
            "manifest",
            dir.to_str().unwrap(),
            "--url",
            "https://helper.example.com",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, 0, "{}", run.both());
    let m = run.json();
    let scopes = strings(&m["oauth_config"]["scopes"]["bot"]);
    assert!(!scopes.contains(&"im:history"), "{m}");
    assert_eq!(scopes.len(), 5, "{m}");
    assert_eq!(
        strings(&m["settings"]["event_subscriptions"]["bot_events"]),
        ["app_mention", "message.channels", "message.groups"]
    );
    assert_eq!(m["features"]["app_home"]["messages_tab_enabled"], false);
}

#[tokio::test]
async fn manifest_without_a_public_url_is_exit_2_with_the_fix() {
    let (_tmp, dir) = agent("http://127.0.0.1:9/api", &[("slack", "")]);
    let run = slack(&["manifest", dir.to_str().unwrap()], &[]).await;
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stdout.is_empty(), "{}", run.both());
    assert!(
        run.stderr.contains("--url https://<your public host>"),
        "{}",
        run.both()
    );
    assert!(run.stderr.contains("tunnel"), "{}", run.both());

    let run = slack(
        &[
            "manifest",
            dir.to_str().unwrap(),
            "--url",
            "helper.example.com",
        ],
        &[],
    )
    .await;
    assert_eq!(run.code, 2, "{}", run.both());
}

#[tokio::test]
async fn the_channel_must_be_named_when_there_are_several_and_exist() {
    let (_tmp, dir) = agent(
        "http://127.0.0.1:9/api",
        &[("support", ""), ("alerts", "direct_messages = false\n")],
    );
    let dir = dir.to_str().unwrap();
    let url = "https://h.example.com";
    for command in ["manifest", "doctor"] {
        let run = slack(&[command, dir, "--url", url], &[]).await;
        assert_eq!(run.code, 2, "{command}: {}", run.both());
        assert!(
            run.stderr.contains("`alerts`") && run.stderr.contains("`support`"),
            "{command}: {}",
            run.both()
        );
        assert!(run.stderr.contains("--channel"), "{}", run.both());
    }
    let run = slack(&["manifest", dir, "--url", url, "--channel", "alerts"], &[]).await;
    assert_eq!(run.code, 0, "{}", run.both());
    assert_eq!(
        run.json()["settings"]["event_subscriptions"]["request_url"],
        "https://h.example.com/v1/channels/alerts"
    );
    let run = slack(&["manifest", dir, "--url", url, "--channel", "nope"], &[]).await;
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("no channel `nope`"), "{}", run.both());

    // A project without a Slack channel.
    let (_tmp, plain) = agent("http://127.0.0.1:9/api", &[]);
    let run = slack(&["doctor", plain.to_str().unwrap(), "--url", url], &[]).await;
    assert_eq!(run.code, 2, "{}", run.both());
    assert!(run.stderr.contains("no Slack channel"), "{}", run.both());
    assert!(run.stderr.contains("kind = \"slack\""), "{}", run.both());
}

// ---------------------------------------------------------------- doctor

#[tokio::test(flavor = "multi_thread")]
async fn doctor_is_all_ok_against_fake_slack_and_the_real_server() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = agent(&fake.url(), &[("slack", "")]);
    let server = serve(&dir, &fake, SECRET);
    let dir_arg = dir.to_str().unwrap();
    let env = [
        ("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN),
        ("SLACK_SIGNING_SECRET", SECRET),
    ];
    let public = format!("{}/{SLUG}", server.base);

    let run = slack(&["doctor", dir_arg, "--url", &public], &env).await;
    assert_eq!(run.code, 0, "{}", run.both());
    let lines: Vec<&str> = run
        .stdout
        .lines()
        .filter(|l| !l.starts_with("Slack channel"))
        .collect();
    let names: Vec<&str> = ["token", "auth", "scopes", "signing_secret", "request_url"].into();
    for (line, name) in lines.iter().zip(&names) {
        assert!(
            line.starts_with(&format!("ok       {name}: ")),
            "{line}\n{}",
            run.both()
        );
    }
    assert_eq!(
        lines.get(names.len()),
        Some(&"no problem found"),
        "{}",
        run.both()
    );
    assert!(run.stdout.contains(FakeSlack::BOT_USER), "{}", run.both());
    assert!(run.stdout.contains(FakeSlack::TEAM), "{}", run.both());
    assert!(
        fake.requests().iter().any(|r| r.method == "auth.test"),
        "the doctor asked auth.test"
    );

    // The JSON report: every check, with name, status, detail and fix.
    let run = slack(&["doctor", dir_arg, "--url", &public, "--json"], &env).await;
    assert_eq!(run.code, 0, "{}", run.both());
    let report = run.json();
    assert_eq!(report["ok"], true, "{report}");
    let checks = report["checks"].as_array().unwrap();
    assert_eq!(
        checks
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect::<Vec<_>>(),
        names
    );
    for c in checks {
        let keys: Vec<&str> = c.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["detail", "fix", "name", "status"], "{c}");
        assert_eq!(c["status"], "ok", "{c}");
        assert!(c["fix"].is_null(), "{c}");
    }

    // The server mounts the agent under its slug: without it, a 404 whose
    // fix names the slugged URL.
    let run = slack(&["doctor", dir_arg, "--url", &server.base, "--json"], &env).await;
    assert_eq!(run.code, 1, "{}", run.both());
    let report = run.json();
    assert_eq!(report["ok"], false);
    let c = check(&report, "request_url");
    assert_eq!(c["status"], "problem", "{c}");
    assert!(c["detail"].as_str().unwrap().contains("404"), "{c}");
    assert!(
        c["fix"].as_str().unwrap().contains(&public),
        "the fix names {public}: {c}"
    );

    // Without a public URL the request URL is skipped, not a problem.
    let run = slack(&["doctor", dir_arg, "--json"], &env).await;
    assert_eq!(run.code, 0, "{}", run.both());
    let c = check(&run.json(), "request_url").clone();
    assert_eq!(c["status"], "skipped", "{c}");
    assert!(c["detail"].as_str().unwrap().contains("--url"), "{c}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_with_another_signing_secret_is_the_401_problem() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = agent(&fake.url(), &[("slack", "")]);
    let server = serve(&dir, &fake, OTHER_SECRET);
    let public = format!("{}/{SLUG}", server.base);
    let run = slack(
        &["doctor", dir.to_str().unwrap(), "--url", &public],
        &[
            ("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN),
            ("SLACK_SIGNING_SECRET", SECRET),
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("problem  request_url:")
                && l.contains("401")
                && l.contains("another signing secret")),
        "{}",
        run.both()
    );
    assert!(run.stdout.contains("Signing Secret"), "{}", run.both());
    assert!(run.stdout.contains("ok       auth:"), "{}", run.both());
}

#[tokio::test]
async fn a_token_without_im_history_is_a_problem_naming_the_scope_and_its_fix() {
    let fake = FakeSlack::start().await;
    let scopes: Vec<&str> = FakeSlack::BOT_SCOPES
        .iter()
        .copied()
        .filter(|s| *s != "im:history")
        .collect();
    fake.add_token("xoxb-without-dms", &scopes);
    let (_tmp, dir) = agent(&fake.url(), &[("slack", "")]);
    let env = [
        ("SLACK_BOT_TOKEN", "xoxb-without-dms"),
        ("SLACK_SIGNING_SECRET", SECRET),
    ];
    let run = slack(&["doctor", dir.to_str().unwrap()], &env).await;
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stdout
            .contains("problem  scopes: missing scope `im:history` (direct messages)"),
        "{}",
        run.both()
    );
    assert!(
        run.stdout.contains(
            "fix: add it under OAuth & Permissions → Scopes → Bot Token Scopes, then reinstall the app to the workspace"
        ),
        "{}",
        run.both()
    );
    assert!(run.stdout.contains("1 problem"), "{}", run.both());

    // The same token serves a channel without direct messages.
    let (_tmp2, no_dms) = agent(&fake.url(), &[("slack", "direct_messages = false\n")]);
    let run = slack(&["doctor", no_dms.to_str().unwrap()], &env).await;
    assert_eq!(run.code, 0, "{}", run.both());
}

#[tokio::test]
async fn unknown_and_revoked_tokens_are_auth_problems_with_their_fixes() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = agent(&fake.url(), &[("slack", "")]);
    let dir = dir.to_str().unwrap();
    let run = slack(
        &["doctor", dir, "--json"],
        &[
            ("SLACK_BOT_TOKEN", "xoxb-nobody-knows"),
            ("SLACK_SIGNING_SECRET", SECRET),
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    let report = run.json();
    let auth = check(&report, "auth");
    assert_eq!(auth["status"], "problem", "{report}");
    assert!(
        auth["detail"].as_str().unwrap().contains("invalid_auth"),
        "{auth}"
    );
    assert!(
        auth["fix"].as_str().unwrap().contains("SLACK_BOT_TOKEN"),
        "{auth}"
    );
    assert_eq!(check(&report, "token")["status"], "ok");
    assert_eq!(check(&report, "scopes")["status"], "skipped");
    assert_eq!(check(&report, "signing_secret")["status"], "ok");

    fake.fail_next(Failure::slack_error("auth.test", "token_revoked"));
    let run = slack(
        &["doctor", dir],
        &[
            ("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN),
            ("SLACK_SIGNING_SECRET", SECRET),
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("problem  auth:") && l.contains("token_revoked")),
        "{}",
        run.both()
    );
    assert!(
        run.stdout.contains("Reinstall to Workspace"),
        "{}",
        run.both()
    );

    // A user token is named as such, and still tested.
    let run = slack(
        &["doctor", dir, "--json"],
        &[("SLACK_BOT_TOKEN", "xoxp-a-user-token")],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    let report = run.json();
    let token = check(&report, "token");
    assert!(
        token["detail"].as_str().unwrap().contains("user token"),
        "{token}"
    );
    assert!(
        !report.to_string().contains("xoxp-a-user-token"),
        "the token leaked: {report}"
    );
}

#[tokio::test]
async fn a_missing_or_malformed_signing_secret_is_a_problem() {
    let fake = FakeSlack::start().await;
    let (_tmp, dir) = agent(&fake.url(), &[("slack", "")]);
    let dir = dir.to_str().unwrap();
    let run = slack(
        &["doctor", dir, "--url", "https://h.example.com"],
        &[("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN)],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    assert!(
        run.stdout
            .contains("problem  signing_secret: `SLACK_SIGNING_SECRET` is not set"),
        "{}",
        run.both()
    );
    assert!(
        run.stdout
            .contains("Basic Information → App Credentials → Signing Secret"),
        "{}",
        run.both()
    );
    assert!(
        run.stdout.contains("skipped  request_url:"),
        "no secret to sign with: {}",
        run.both()
    );

    let run = slack(
        &["doctor", dir, "--json"],
        &[
            ("SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN),
            ("SLACK_SIGNING_SECRET", "not-a-secret"),
        ],
    )
    .await;
    assert_eq!(run.code, 1, "{}", run.both());
    let report = run.json();
    let c = check(&report, "signing_secret");
    assert_eq!(c["status"], "problem", "{report}");
    assert!(
        c["detail"].as_str().unwrap().contains("32 hexadecimal"),
        "{c}"
    );
    assert!(c["fix"].is_string(), "{c}");
}
