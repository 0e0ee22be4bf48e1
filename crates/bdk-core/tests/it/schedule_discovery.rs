#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! TOML tool schedules in discovery (what `bdk validate` reports): the
//! parsed form, and every refusal: unknown tools, agent-execution tools,
//! input that breaks the tool's schema, both or neither of `channel` and
//! `tool`, and keys that belong to the other form.

use bdk_core::project::{HandlerSpec, ScheduleAction};
use bdk_core::{Discovery, Severity, discover};
use serde_json::json;
use tempfile::TempDir;

const ECHO: &str = r#"
description = "Echo the input back."
effect = "read"
command = ["sh", "-c", "cat"]

[input_schema]
type = "object"
required = ["text"]
properties = { text = { type = "string" }, times = { type = "integer", minimum = 1 } }
additionalProperties = false
"#;

const NOTIFY: &str = r#"
description = "Print a notification in the workspace."
execution = "agent"
script = "notify.sh"
"#;

const GUARD: &str = r#"
description = "Needs a person to approve each call."
effect = "write"
needs_approval = true
command = ["true"]
"#;

const INBOX: &str = r#"
description = "Receives scheduled hand-offs."
auth = "default"

[[routes]]
method = "POST"
path = "/"
message = "{{ method }} {{ path }}"
"#;

/// A project with tools `echo` (server) and `notify` (agent), channel
/// `inbox`, and the given schedule files (plus `extra` files).
fn project(schedules: &[(&str, &str)], extra: &[(&str, &str)]) -> (TempDir, Discovery) {
    let dir = tempfile::tempdir().unwrap();
    let mut files: Vec<(String, String)> = vec![
        ("agent/agent.toml".into(), "model = \"scripted\"\n".into()),
        ("agent/instructions.md".into(), "You run jobs.\n".into()),
        (
            "agent/scripted.toml".into(),
            "[[rules]]\nreply = \"ok\"\n".into(),
        ),
        ("agent/tools/echo.toml".into(), ECHO.into()),
        ("agent/tools/notify.toml".into(), NOTIFY.into()),
        ("agent/tools/notify.sh".into(), "echo hi\n".into()),
        ("agent/tools/guard.toml".into(), GUARD.into()),
        ("agent/channels/inbox.toml".into(), INBOX.into()),
    ];
    for (name, body) in schedules {
        files.push((format!("agent/schedules/{name}.toml"), (*body).to_owned()));
    }
    for (path, body) in extra {
        files.push(((*path).to_owned(), (*body).to_owned()));
    }
    bdk_testkit::write_files(dir.path(), &files);
    let d = discover(dir.path());
    (dir, d)
}

/// The diagnostics of `agent/schedules/<name>.toml` as `(severity, message)`.
fn diags(d: &Discovery, name: &str) -> Vec<(Severity, String)> {
    let file = format!("agent/schedules/{name}.toml");
    d.diagnostics
        .iter()
        .filter(|x| x.file == file)
        .map(|x| (x.severity, x.message.clone()))
        .collect()
}

#[test]
fn a_tool_schedule_is_parsed_with_its_input() {
    let (_dir, d) = project(
        &[
            (
                "sweep",
                "cron = \"*/10 * * * *\"\ntool = \"echo\"\n\n[input]\ntext = \"sweep\"\ntimes = 2\n",
            ),
            // No [input]: the tool gets `{}`, which this built-in accepts.
            (
                "skills_off",
                "cron = \"0 * * * *\"\ntool = \"list_files\"\n",
            ),
        ],
        &[],
    );
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let p = d.project.unwrap();
    let sweep = p.schedules.iter().find(|s| s.name == "sweep").unwrap();
    assert_eq!(sweep.cron, "*/10 * * * *");
    assert_eq!(
        sweep.action,
        ScheduleAction::Tool {
            tool: "echo".into(),
            input: json!({"text": "sweep", "times": 2}),
        }
    );
    let builtin = p.schedules.iter().find(|s| s.name == "skills_off").unwrap();
    assert_eq!(
        builtin.action,
        ScheduleAction::Tool {
            tool: "list_files".into(),
            input: json!({}),
        }
    );
    let info = bdk_core::project::info::surface(&p, &[]);
    let kinds: Vec<&str> = info["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool", "tool"]);
}

#[test]
fn tool_schedules_that_cannot_run_are_errors_naming_the_fix() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "ghost",
            "cron = \"0 * * * *\"\ntool = \"nope\"\n",
            "unknown tool `nope`",
        ),
        (
            "agentside",
            "cron = \"0 * * * *\"\ntool = \"notify\"\n",
            "tool `notify` runs in the agent's workspace",
        ),
        (
            "approval",
            "cron = \"0 * * * *\"\ntool = \"guard\"\n",
            "tool `guard` needs approval",
        ),
        (
            "badinput",
            "cron = \"0 * * * *\"\ntool = \"echo\"\n[input]\ntimes = 0\n",
            "`input` does not match the input schema of `echo`",
        ),
        (
            "noinput",
            "cron = \"0 * * * *\"\ntool = \"echo\"\n",
            "`input` does not match the input schema of `echo`",
        ),
        (
            "scalar",
            "cron = \"0 * * * *\"\ntool = \"echo\"\ninput = \"text\"\n",
            "`input` must be a table",
        ),
        (
            "both",
            "cron = \"0 * * * *\"\ntool = \"echo\"\nchannel = \"inbox\"\nmessage = \"hi\"\n",
            "names `channel` and `tool`",
        ),
        (
            "neither",
            "cron = \"0 * * * *\"\nmessage = \"hi\"\n",
            "names none of `channel`, `tool` and `handler`",
        ),
        (
            "toolmsg",
            "cron = \"0 * * * *\"\ntool = \"echo\"\nmessage = \"hi\"\n[input]\ntext = \"x\"\n",
            "`message` only applies to channel hand-offs",
        ),
        (
            "chaninput",
            "cron = \"0 * * * *\"\nchannel = \"inbox\"\nmessage = \"hi\"\n[input]\ntext = \"x\"\n",
            "`input` only applies to tool schedules",
        ),
        (
            "nomsg",
            "cron = \"0 * * * *\"\nchannel = \"inbox\"\n",
            "missing `message`",
        ),
        (
            "nocron",
            "tool = \"echo\"\n[input]\ntext = \"x\"\n",
            "missing `cron`",
        ),
        (
            "never",
            "cron = \"0 0 31 2 *\"\ntool = \"echo\"\n[input]\ntext = \"x\"\n",
            "never fires",
        ),
        ("emptytool", "cron = \"0 * * * *\"\ntool = \"\"\n", "`tool`"),
    ];
    let files: Vec<(&str, &str)> = cases.iter().map(|(n, b, _)| (*n, *b)).collect();
    let (_dir, d) = project(&files, &[]);
    let project = d.project.as_ref().unwrap();
    for (name, _, want) in cases {
        let got = diags(&d, name);
        assert!(
            got.iter()
                .any(|(sev, msg)| *sev == Severity::Error && msg.contains(want)),
            "{name}: want an error containing {want:?}, got {got:#?}"
        );
        assert!(
            project.schedules.iter().all(|s| s.name != *name),
            "{name} must not be scheduled"
        );
    }
    // The unknown-tool fix lists what can be called (server tools only).
    let ghost = d
        .diagnostics
        .iter()
        .find(|x| x.message.contains("unknown tool `nope`"))
        .unwrap();
    assert!(ghost.fix.contains("echo"), "{}", ghost.fix);
    assert!(!ghost.fix.contains("notify"), "{}", ghost.fix);
}

#[test]
fn a_tool_an_mcp_connection_may_advertise_is_a_warning() {
    let (_dir, d) = project(
        &[("remote", "cron = \"0 * * * *\"\ntool = \"linear_search\"\n")],
        &[(
            "agent/mcp-connections/linear.toml",
            "url = \"http://127.0.0.1:9/mcp\"\nadvertise_tools = true\n",
        )],
    );
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    let got = diags(&d, "remote");
    assert!(
        got.iter().any(|(sev, msg)| *sev == Severity::Warning
            && msg.contains("must come from an MCP connection")),
        "{got:#?}"
    );
    let p = d.project.unwrap();
    assert_eq!(p.schedules.len(), 1);
}

#[test]
fn handler_schedules_run_a_program_next_to_their_file() {
    let (dir, d) = project(
        &[
            (
                "nightly",
                "cron = \"0 3 * * *\"\nhandler = [\"python3\", \"nightly.py\"]\ntimeout_secs = 20\nenv = [\"REGION\"]\n",
            ),
            (
                "team/digest",
                "cron = \"0 9 * * 1\"\nhandler = [\"./digest.sh\"]\nenv = { MODE = \"weekly\" }\nsandbox = \"off\"\n",
            ),
        ],
        &[
            ("agent/schedules/nightly.py", "print('{}')\n"),
            ("agent/schedules/team/digest.sh", "echo '{}'\n"),
        ],
    );
    assert!(!d.has_errors(), "{:#?}", d.diagnostics);
    // The programs a handler runs are not strays; `sandbox = "off"` warns.
    let warnings: Vec<&str> = d
        .diagnostics
        .iter()
        .filter(|x| x.severity == Severity::Warning)
        .map(|x| x.message.as_str())
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert!(warnings[0].contains("runs uncontained"), "{warnings:#?}");
    let p = d.project.unwrap();
    let nightly = p.schedules.iter().find(|s| s.name == "nightly").unwrap();
    let ScheduleAction::Handler {
        handler: HandlerSpec::Program(handler),
    } = &nightly.action
    else {
        panic!("{:?}", nightly.action);
    };
    assert_eq!(handler.argv, ["python3", "nightly.py"]);
    assert_eq!(handler.dir, dir.path().join("agent/schedules"));
    assert_eq!(handler.timeout, std::time::Duration::from_secs(20));
    assert_eq!(handler.pass_env, ["REGION"]);
    let digest = p
        .schedules
        .iter()
        .find(|s| s.name == "team/digest")
        .unwrap();
    let ScheduleAction::Handler {
        handler: HandlerSpec::Program(handler),
    } = &digest.action
    else {
        panic!("{:?}", digest.action);
    };
    assert_eq!(handler.dir, dir.path().join("agent/schedules/team"));
    assert_eq!(handler.env.get("MODE").map(String::as_str), Some("weekly"));
    let info = bdk_core::project::info::surface(&p, &[]);
    assert!(
        info["schedules"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["kind"] == "handler"),
        "{info}"
    );
}

#[test]
fn handler_schedules_that_cannot_run_are_errors() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "twoforms",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\ntool = \"echo\"\n",
            "names `tool` and `handler`",
        ),
        (
            "threeforms",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\ntool = \"echo\"\nchannel = \"inbox\"\nmessage = \"m\"\n",
            "names `channel` and `tool` and `handler`",
        ),
        (
            "emptyprog",
            "cron = \"0 * * * *\"\nhandler = [\"\"]\n",
            "`handler` must start with a program",
        ),
        (
            "noargv",
            "cron = \"0 * * * *\"\nhandler = []\n",
            "`handler` must start with a program",
        ),
        (
            "number",
            "cron = \"0 * * * *\"\nhandler = 5\n",
            "`handler` must be",
        ),
        (
            "scalar",
            "cron = \"0 * * * *\"\nhandler = \"run.py\"\n",
            "names `run.py`, which is not a handler name",
        ),
        (
            "toolong",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\ntimeout_secs = 7200\n",
            "the longest a handler may run is 3600 seconds",
        ),
        (
            "zero",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\ntimeout_secs = 0\n",
            "`timeout_secs` must be greater than 0",
        ),
        (
            "envnohandler",
            "cron = \"0 * * * *\"\ntool = \"echo\"\nenv = [\"A\"]\n[input]\ntext = \"x\"\n",
            "`env` only applies to handler schedules",
        ),
        (
            "handlermsg",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\nmessage = \"m\"\n",
            "`message` does not apply to handler schedules",
        ),
        (
            "badenv",
            "cron = \"0 * * * *\"\nhandler = [\"x\"]\nenv = [\"1BAD\"]\n",
            "is not an environment variable name",
        ),
    ];
    let files: Vec<(&str, &str)> = cases.iter().map(|(n, b, _)| (*n, *b)).collect();
    let (_dir, d) = project(&files, &[("agent/schedules/stray.py", "")]);
    let project = d.project.as_ref().unwrap();
    for (name, _, want) in cases {
        let got = diags(&d, name);
        assert!(
            got.iter()
                .any(|(sev, msg)| *sev == Severity::Error && msg.contains(want)),
            "{name}: want an error containing {want:?}, got {got:#?}"
        );
        assert!(
            project.schedules.iter().all(|s| s.name != *name),
            "{name} must not be scheduled"
        );
    }
    // A program no handler runs is still a stray.
    assert!(
        d.diagnostics
            .iter()
            .any(|x| x.message.contains("stray file in schedules/")
                && x.file.ends_with("stray.py")),
        "{:#?}",
        d.diagnostics
    );
}

#[test]
fn a_native_handler_is_named_by_a_string() {
    let (_dir, d) = project(
        &[
            (
                "rust",
                "cron = \"0 * * * *\"\nhandler = \"digest\"\ntimeout_secs = 9\n",
            ),
            (
                "rustenv",
                "cron = \"0 * * * *\"\nhandler = \"digest\"\nenv = [\"A\"]\n",
            ),
            ("badname", "cron = \"0 * * * *\"\nhandler = \"no spaces\"\n"),
        ],
        &[],
    );
    let rust = diags(&d, "rust");
    assert!(
        rust.iter().any(|(sev, msg)| *sev == Severity::Warning
            && msg.contains("native handler: the program that embeds bdk must register it")),
        "{rust:#?}"
    );
    assert!(
        diags(&d, "rustenv")
            .iter()
            .any(|(sev, msg)| *sev == Severity::Error
                && msg.contains("`env` applies to handler programs")),
        "{:#?}",
        d.diagnostics
    );
    assert!(
        diags(&d, "badname")
            .iter()
            .any(|(sev, msg)| *sev == Severity::Error && msg.contains("is not a handler name")),
        "{:#?}",
        d.diagnostics
    );
    let p = d.project.unwrap();
    let rust = p.schedules.iter().find(|s| s.name == "rust").unwrap();
    assert_eq!(
        rust.action,
        ScheduleAction::Handler {
            handler: HandlerSpec::Native {
                name: "digest".into(),
                timeout: std::time::Duration::from_secs(9),
            }
        }
    );
}
