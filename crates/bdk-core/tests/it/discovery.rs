//! Project discovery: a full valid fixture, a broken fixture with one of each
//! problem, edge cases built in temporary folders, and the weather example.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use bdk_core::project::{
    Diagnostic, Discovery, HookEvents, HookTarget, McpTransport, RouteAuth, ScheduleAction,
    Severity, SkillArgument, SkillForm, ToolRunner, discover,
};
use bdk_core::tool::{Effect, Execution};
use bdk_models::scripted::{RulesFile, ScriptedModel};
use bdk_models::{Message, Model, ModelEvent, ModelRequest};
use futures::StreamExt;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn weather_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather")
}

fn show(diags: &[Diagnostic]) -> String {
    diags
        .iter()
        .map(|d| {
            format!(
                "{:?} {}: {} (fix: {})",
                d.severity, d.file, d.message, d.fix
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every diagnostic names a fix; the list is sorted by (file, message).
fn check_invariants(found: &Discovery) {
    for d in &found.diagnostics {
        assert!(!d.fix.trim().is_empty(), "diagnostic without a fix: {d:?}");
        assert!(!d.file.contains('\\'), "file must be /-separated: {d:?}");
    }
    let mut sorted = found.diagnostics.clone();
    sorted.sort_by(|a, b| (&a.file, &a.message).cmp(&(&b.file, &b.message)));
    assert_eq!(sorted, found.diagnostics, "diagnostics must be sorted");
}

/// Writes `files` (path -> content) under a fresh temporary project folder.
fn project(files: &[(&str, &[u8])]) -> tempfile::TempDir {
    bdk_testkit::AgentFolder::empty().files(files).write()
}

/// Asserts exactly one diagnostic and returns it.
fn only(found: &Discovery) -> &Diagnostic {
    check_invariants(found);
    assert_eq!(found.diagnostics.len(), 1, "{}", show(&found.diagnostics));
    &found.diagnostics[0]
}

#[test]
fn full_fixture_discovers_every_form_without_diagnostics() {
    let found = discover(&fixture("full"));
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.expect("project");
    let root = fs::canonicalize(fixture("full")).unwrap();
    assert_eq!(p.root, root);
    assert_eq!(p.agent_dir, root.join("agent"));
    assert_eq!(p.name, "full-agent");

    // agent.toml
    let c = &p.config;
    assert_eq!(
        c.description.as_deref(),
        Some("Exercises every discovery form.")
    );
    assert_eq!(c.model.as_deref(), Some("scripted"));
    assert_eq!(c.effort.as_deref(), Some("high"));
    assert_eq!(c.max_steps, Some(12));
    assert_eq!(c.max_running_turns, Some(2));
    assert_eq!(c.tool_timeout_ms, Some(5000));
    assert!(c.builtin_tools.workspace && c.builtin_tools.shell && c.builtin_tools.reminders);
    assert!(!c.builtin_tools.artifacts);

    // Root instructions: the file form.
    assert_eq!(p.instructions, "# Full agent\n\nUse the tools.\n");
    assert_eq!(
        p.instruction_files,
        vec![root.join("agent/instructions.md")]
    );

    // Tools, sorted, one per runner.
    let names: Vec<&str> = p.tools.iter().map(|t| t.spec.name.as_str()).collect();
    assert_eq!(names, ["echo", "fetch", "notify", "ping"]);
    let echo = &p.tools[0];
    assert_eq!(echo.spec.effect, Effect::Read);
    assert_eq!(echo.spec.execution, Execution::Server);
    assert_eq!(echo.dir, root.join("agent/tools"));
    assert_eq!(
        echo.spec.input_schema,
        json!({"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}})
    );
    assert_eq!(
        echo.runner,
        ToolRunner::Command {
            argv: vec!["python3".into(), "./echo.py".into(), "--verbose".into()],
            env: BTreeMap::from([("ECHO_MODE".into(), "plain".into())]),
            pass_env: Vec::new(),
            sandbox: Default::default(),
            max_output_bytes: 4096,
        }
    );
    let fetch = &p.tools[1];
    assert_eq!(
        fetch.spec.effect,
        Effect::Write,
        "undeclared effect counts as write"
    );
    assert!(fetch.spec.needs_approval);
    assert_eq!(fetch.spec.timeout_ms, Some(2500));
    assert_eq!(fetch.spec.input_schema["required"], json!(["id"]));
    assert_eq!(
        fetch.spec.output_schema,
        Some(json!({"type": "object", "properties": {"id": {"type": "string"}}}))
    );
    assert_eq!(
        fetch.runner,
        ToolRunner::Url {
            url: "https://records.example.com/fetch".into(),
            headers: BTreeMap::from([("X-Team".into(), "core".into())]),
        }
    );
    let notify = &p.tools[2];
    assert_eq!(notify.spec.execution, Execution::Agent);
    assert_eq!(
        notify.runner,
        ToolRunner::Script {
            source: root.join("agent/tools/notify.sh"),
            workspace_path: ".bdk/tools/notify.sh".into(),
        }
    );
    let ping = &p.tools[3];
    assert_eq!(
        ping.spec.input_schema,
        json!({"type": "object", "properties": {}})
    );
    assert!(matches!(
        &ping.runner,
        ToolRunner::Command {
            max_output_bytes: 1_048_576,
            ..
        }
    ));

    // Skills: flat (with and without frontmatter), packaged, generated.
    let skills: Vec<(&str, SkillForm, &str)> = p
        .skills
        .iter()
        .map(|s| (s.name.as_str(), s.form, s.description.as_str()))
        .collect();
    assert_eq!(
        skills,
        [
            (
                "checklist",
                SkillForm::Flat,
                "Use when a change needs a review checklist."
            ),
            ("fallback", SkillForm::Flat, "Fallback title"),
            ("generated", SkillForm::Generated, "Generated skill."),
            (
                "research",
                SkillForm::Packaged,
                "Research unfamiliar topics before answering."
            ),
        ]
    );
    assert_eq!(p.skills[0].body, "# Checklist\n\n1. Read the diff.\n");
    assert_eq!(p.skills[2].body, "Do the generated thing.");
    assert_eq!(
        p.skills[2].files,
        BTreeMap::from([("references/a.md".to_owned(), b"# A\n".to_vec())])
    );
    assert_eq!(
        p.skills[3].path,
        root.join("agent/skills/research/SKILL.md")
    );
    assert_eq!(
        p.skills[3].files,
        BTreeMap::from([("references/sources.md".to_owned(), b"# Sources\n".to_vec())])
    );

    // Subagents: the directory form and the template form.
    assert_eq!(p.subagents.len(), 2);
    let reviewer = &p.subagents[0];
    assert_eq!(reviewer.name, "reviewer");
    assert_eq!(reviewer.description, "Reviews changes.");
    assert_eq!(reviewer.config.model.as_deref(), Some("scripted/alt"));
    assert_eq!(reviewer.instructions, "You review.\n\nBe brief.");
    assert_eq!(reviewer.dir, root.join("agent/subagents/reviewer"));
    let writer = &p.subagents[1];
    assert_eq!(writer.name, "writer");
    assert_eq!(writer.config.model, None, "inherits the parent's model");
    assert_eq!(
        writer.instructions,
        "You are writer: Writes prose. Env visible: yes."
    );

    // MCP connections.
    assert_eq!(p.mcp_connections.len(), 2);
    let local = &p.mcp_connections[0];
    assert_eq!(local.name, "local");
    assert!(local.advertise_tools);
    assert_eq!(local.timeout_ms, Some(1000));
    assert_eq!(
        local.transport,
        McpTransport::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), "some-mcp-server".into()],
            env: BTreeMap::from([("LOG".into(), "1".into())]),
            cwd: Some(PathBuf::from("servers")),
        }
    );
    let remote = &p.mcp_connections[1];
    assert!(!remote.advertise_tools);
    assert_eq!(
        remote.transport,
        McpTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: BTreeMap::from([("X-Client".into(), "bdk".into())]),
            bearer_token_env: Some("REMOTE_TOKEN".into()),
            oauth: None,
        }
    );

    // Channels are typed, the channel's auth block inherited by routes
    // without their own.
    assert_eq!(p.channels.len(), 1);
    assert_eq!(p.channels[0].name, "drive");
    assert_eq!(p.channels[0].routes, ["POST /webhook", "GET /status"]);
    assert_eq!(
        p.channels[0].routes[0].auth,
        RouteAuth::Bearer {
            token_env: "BDK_CHANNEL_DRIVE_TOKEN".into()
        }
    );
    assert_eq!(
        p.channels[0].routes[1].auth,
        RouteAuth::Hmac {
            secret_env: "DRIVE_SECRET".into(),
            signature_header: "x-signature".into(),
        }
    );
    assert_eq!(
        p.channels[0].routes[0].body_schema,
        Some(serde_json::json!({"type": "object"}))
    );

    // Hooks.
    assert_eq!(p.hooks.len(), 2);
    assert_eq!(p.hooks[0].name, "audit");
    assert_eq!(
        p.hooks[0].events,
        HookEvents::Only(vec!["turn.completed".into(), "turn.failed".into()])
    );
    assert_eq!(
        p.hooks[0].target,
        HookTarget::File {
            path: "audit.ndjson".into()
        }
    );
    assert_eq!(p.hooks[1].events, HookEvents::All);
    assert_eq!(
        p.hooks[1].target,
        HookTarget::Command {
            argv: vec!["cat".into()]
        }
    );

    // Schedules: Markdown and hand-off, nested names.
    assert_eq!(p.schedules.len(), 2);
    assert_eq!(p.schedules[0].name, "heartbeat");
    assert_eq!(p.schedules[0].cron, "0 9 * * 1-5");
    assert_eq!(
        p.schedules[0].action,
        ScheduleAction::Prompt {
            prompt: "Summarize open incidents.".into()
        }
    );
    assert_eq!(p.schedules[1].name, "nightly/report");
    assert_eq!(
        p.schedules[1].action,
        ScheduleAction::Handoff {
            channel: "drive".into(),
            message: "Post the nightly report.".into(),
            continuation_key: Some("nightly".into()),
        }
    );

    // Sandbox seed files, sorted by workspace path.
    let seeds: Vec<&str> = p
        .sandbox_files
        .iter()
        .map(|f| f.workspace_path.as_str())
        .collect();
    assert_eq!(seeds, ["README.md", "data/seed.json"]);
    assert_eq!(
        p.sandbox_files[1].source,
        root.join("agent/sandbox/workspace/data/seed.json")
    );

    // Scripted rules and evals.
    assert_eq!(
        p.scripted_rules,
        BTreeMap::from([
            ("alt".to_owned(), root.join("agent/scripted/alt.toml")),
            ("default".to_owned(), root.join("agent/scripted.toml")),
        ])
    );
    assert_eq!(p.evals_dir, Some(root.join("evals")));
}

#[test]
fn broken_fixture_reports_one_diagnostic_per_problem() {
    use Severity::{Error as E, Warning as W};
    let found = discover(&fixture("broken"));
    check_invariants(&found);
    let expected: &[(&str, Severity, &str)] = &[
        (
            "agent",
            E,
            "instructions are defined in more than one form (instructions.md, instructions)",
        ),
        ("agent/agent.toml", E, "`max_steps` must be greater than 0"),
        (
            "agent/agent.toml",
            E,
            "model `scripted/missing` needs a rules file at agent/scripted/missing.toml",
        ),
        ("agent/agent.toml", W, "unknown key `colour`"),
        (
            "agent/channels/badauth.toml",
            E,
            "`auth = \"hmac\"` needs `signature_header`",
        ),
        (
            "agent/channels/badmethod.toml",
            E,
            "`routes[0].method` must be one of GET, POST",
        ),
        (
            "agent/channels/badschema.toml",
            E,
            "`routes[0].body_schema` is not a valid JSON Schema",
        ),
        ("agent/channels/noroutes.toml", E, "missing `[[routes]]`"),
        ("agent/evals", W, "evals/ inside agent/ is ignored"),
        ("agent/hooks/empty.toml", W, "the hook observes nothing"),
        ("agent/hooks/notarget.toml", E, "no target"),
        (
            "agent/hooks/unknown.toml",
            W,
            "unknown event type `turn.exploded`",
        ),
        (
            "agent/mcp-connections/both.toml",
            E,
            "both `command` and `url`",
        ),
        ("agent/mcp-connections/none.toml", E, "no transport"),
        ("agent/notes.txt", W, "stray entry in agent/"),
        ("agent/sandbox/extra.txt", W, "stray entry in sandbox/"),
        (
            "agent/schedules/_bad.md",
            E,
            "schedule name `_bad` is invalid",
        ),
        (
            "agent/schedules/badcron.md",
            E,
            "invalid cron `61 * * * *`: minute field",
        ),
        (
            "agent/schedules/ghost.toml",
            E,
            "channel `nope` does not exist",
        ),
        ("agent/schedules/nobody.md", E, "schedule has no prompt"),
        ("agent/schedules/nocron.md", E, "missing `cron` frontmatter"),
        ("agent/schedules/notes.txt", W, "stray file in schedules/"),
        ("agent/scripted.toml", E, "invalid TOML at line 1"),
        ("agent/skills", E, "skill `dup` is defined more than once"),
        ("agent/skills/badfm.md", E, "invalid YAML frontmatter"),
        ("agent/skills/blank.md", E, "skill has no description"),
        ("agent/skills/empty", E, "skill folder has no SKILL.md"),
        ("agent/skills/hostile.toml", E, "`files` path `../x`"),
        ("agent/skills/image.png", W, "stray file in skills/"),
        (
            "agent/skills/nodesc/SKILL.md",
            E,
            "missing `description` frontmatter",
        ),
        ("agent/subagents/loose.md", W, "stray file in subagents/"),
        (
            "agent/subagents/nested/subagents",
            E,
            "nested subagents are not supported",
        ),
        (
            "agent/subagents/nested/tools",
            W,
            "tools/ in a subagent is ignored",
        ),
        (
            "agent/subagents/nodesc/agent.toml",
            E,
            "missing `description`",
        ),
        (
            "agent/subagents/noinstr/instructions.md",
            E,
            "missing instructions",
        ),
        (
            "agent/tools/agentcmd.toml",
            E,
            "agent-execution tools run a `script`, not `command`",
        ),
        (
            "agent/tools/bad.name.toml",
            E,
            "tool name `bad.name` is invalid",
        ),
        (
            "agent/tools/badschema.toml",
            E,
            "`input_schema` is not a valid JSON Schema",
        ),
        (
            "agent/tools/both.toml",
            E,
            "both `input_schema` and `input_schema_file`",
        ),
        ("agent/tools/extra.toml", W, "unknown key `colour`"),
        ("agent/tools/nodesc.toml", E, "missing `description`"),
        (
            "agent/tools/noscript.toml",
            E,
            "script `missing.sh` does not exist",
        ),
        (
            "agent/tools/notobject.toml",
            E,
            "top-level `\"type\": \"object\"`",
        ),
        ("agent/tools/orphan.py", W, "stray file in tools/"),
        (
            "agent/tools/tworunners.toml",
            E,
            "more than one runner (command, url)",
        ),
    ];
    let got = &found.diagnostics;
    let pairs = got.len().max(expected.len());
    for i in 0..pairs {
        let (Some(d), Some((file, sev, msg))) = (got.get(i), expected.get(i)) else {
            panic!("diagnostic count differs at {i}:\n{}", show(got));
        };
        assert!(
            d.file == *file && d.severity == *sev && d.message.contains(msg),
            "diagnostic {i}: expected {sev:?} {file}: ...{msg}...\nall:\n{}",
            show(got)
        );
    }
    assert!(found.has_errors());
    // A broken project still yields the parts that are fine.
    let p = found.project.expect("project");
    assert_eq!(p.name, "broken");
    let tools: Vec<&str> = p.tools.iter().map(|t| t.spec.name.as_str()).collect();
    assert_eq!(tools, ["extra"]);
    let subagents: Vec<&str> = p.subagents.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(subagents, Vec::<&str>::new());
    assert_eq!(p.sandbox_files.len(), 1);
}

#[test]
fn both_agent_and_bot_uses_agent() {
    let dir = project(&[
        ("agent/instructions.md", b"From agent."),
        ("bot/instructions.md", b"From bot."),
    ]);
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!((d.file.as_str(), d.severity), ("bot", Severity::Error));
    assert!(d.message.contains("agent/ is used"), "{}", d.message);
    assert_eq!(found.project.unwrap().instructions, "From agent.");
}

#[test]
fn bot_alone_is_an_alias() {
    let dir = project(&[("bot/instructions.md", b"From bot.")]);
    let found = discover(dir.path());
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.unwrap();
    assert!(p.agent_dir.ends_with("bot"));
}

#[test]
fn no_agent_folder_is_an_error_without_a_project() {
    let dir = project(&[("lib/x.py", b"")]);
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!((d.file.as_str(), d.severity), ("agent", Severity::Error));
    assert!(found.project.is_none());

    let missing = dir.path().join("does-not-exist");
    let found = discover(&missing);
    assert_eq!(only(&found).severity, Severity::Error);
    assert!(found.project.is_none());
}

#[test]
fn missing_instructions_is_an_error() {
    let dir = project(&[("agent/agent.toml", b"")]);
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!(d.file, "agent/instructions.md");
    assert_eq!(d.message, "missing instructions");
}

#[test]
fn empty_instructions_is_a_warning() {
    let dir = project(&[("agent/instructions.md", b"  \n")]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(
        (d.file.as_str(), d.severity),
        ("agent/instructions.md", Severity::Warning)
    );
}

#[test]
fn non_utf8_file_is_an_error_not_a_panic() {
    let dir = project(&[("agent/instructions.md", b"caf\xe9\n")]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(d.file, "agent/instructions.md");
    assert!(d.message.contains("not valid UTF-8"), "{}", d.message);
}

#[test]
fn bad_toml_reports_line_and_column() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"name = \"x\"\nmodel = \n"),
    ]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(d.file, "agent/agent.toml");
    assert!(
        d.message.starts_with("invalid TOML at line 2, column"),
        "{}",
        d.message
    );
    assert!(d.fix.contains("line 2"), "{}", d.fix);
}

#[test]
fn tool_choice_and_max_output_tokens_are_read_and_checked() {
    use bdk_models::ToolChoice;
    let parse = |toml: &str| {
        let dir = project(&[
            ("agent/instructions.md", b"Hi."),
            ("agent/agent.toml", toml.as_bytes()),
        ]);
        discover(dir.path())
    };
    for (toml, want) in [
        ("tool_choice = \"auto\"", ToolChoice::Auto),
        ("tool_choice = \"required\"", ToolChoice::Required),
        ("tool_choice = \"none\"", ToolChoice::None),
        (
            "tool_choice = { tool = \"get_weather\" }",
            ToolChoice::Tool("get_weather".into()),
        ),
    ] {
        let found = parse(&format!("{toml}\nmax_output_tokens = 64\n"));
        assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
        let config = found.project.unwrap().config;
        assert_eq!(config.tool_choice, Some(want));
        assert_eq!(config.max_output_tokens, Some(64));
    }
    for toml in [
        "tool_choice = \"always\"",
        "tool_choice = { name = \"x\" }",
        "tool_choice = 3",
        "max_output_tokens = 0",
    ] {
        let found = parse(toml);
        let d = only(&found);
        assert!(
            d.message.contains("tool_choice") || d.message.contains("max_output_tokens"),
            "{toml}: {}",
            d.message
        );
    }
}

#[test]
fn wrong_types_and_bad_models_are_errors() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/agent.toml",
            b"name = 3\nmodel = \"gpt-4o\"\n[builtin_tools]\nshell = \"yes\"\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let messages: Vec<&str> = found
        .diagnostics
        .iter()
        .map(|d| d.message.as_str())
        .collect();
    assert_eq!(
        messages,
        [
            "`builtin_tools.shell` must be a boolean, found string",
            "`model` must be `provider/model` or `scripted`, found `gpt-4o`",
            "`name` must be a string, found integer",
        ]
    );
    // Without a name in agent.toml, the project takes the folder's name.
    let p = found.project.unwrap();
    assert_eq!(p.name, dir.path().file_name().unwrap().to_str().unwrap());
}

#[test]
fn relative_project_paths_are_canonicalized() {
    let dir = project(&[("agent/instructions.md", b"Hi.")]);
    let dotted = dir.path().join("agent/..");
    let p = discover(&dotted).project.unwrap();
    assert_eq!(p.root, fs::canonicalize(dir.path()).unwrap());
    assert_eq!(p.name, dir.path().file_name().unwrap().to_str().unwrap());
}

#[test]
fn scripted_model_needs_its_rules_file() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"model = \"scripted\"\n"),
    ]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(d.file, "agent/agent.toml");
    assert!(d.message.contains("agent/scripted.toml"), "{}", d.message);
}

#[test]
fn schemas_must_be_valid() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/tools/a.toml",
            b"description = \"a\"\ncommand = [\"true\"]\ninput_schema_file = \"a.json\"\n",
        ),
        ("agent/tools/a.json", b"{\"type\": \"object\",}"),
        (
            "agent/tools/b.toml",
            b"description = \"b\"\ncommand = [\"true\"]\ninput_schema = { type = \"object\", properties = { x = { minLength = -1 } } }\n",
        ),
        (
            "agent/tools/c.toml",
            b"description = \"c\"\ncommand = [\"true\"]\ninput_schema = { type = \"object\" }\noutput_schema = { type = \"strnig\" }\n",
        ),
        (
            "agent/tools/d.toml",
            b"description = \"d\"\ncommand = [\"true\"]\ninput_schema_file = \"../escape.json\"\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let got: Vec<(&str, &str)> = found
        .diagnostics
        .iter()
        .map(|d| (d.file.as_str(), d.message.split(':').next().unwrap()))
        .collect();
    assert_eq!(
        got,
        [
            ("agent/tools/a.json", "invalid JSON"),
            (
                "agent/tools/b.toml",
                "`input_schema` is not a valid JSON Schema at /properties/x/minLength"
            ),
            (
                "agent/tools/c.toml",
                "`output_schema` is not a valid JSON Schema at /type"
            ),
            (
                "agent/tools/d.toml",
                "`input_schema_file` must be a relative path inside tools/, found `../escape.json`"
            ),
        ],
        "{}",
        show(&found.diagnostics)
    );
    assert!(found.project.unwrap().tools.is_empty());
}

#[test]
fn hostile_generated_skill_paths_are_rejected() {
    for bad in ["../x", "/etc/passwd", "a/../../x", "a\\\\..\\\\x"] {
        let manifest = format!(
            "description = \"h\"\nmarkdown = \"m\"\nfiles = {{ \"{bad}\" = \"pwned\", \"ok.md\" = \"fine\" }}\n"
        );
        let dir = project(&[
            ("agent/instructions.md", b"Hi."),
            ("agent/skills/hostile.toml", manifest.as_bytes()),
        ]);
        let found = discover(dir.path());
        let d = only(&found);
        assert_eq!(d.file, "agent/skills/hostile.toml");
        assert!(
            d.message
                .contains("must be a relative path inside the skill folder"),
            "{bad}: {}",
            d.message
        );
        assert!(found.project.unwrap().skills.is_empty(), "{bad}");
    }
}

#[test]
fn skill_arguments_are_read_from_frontmatter_and_generated_skills() {
    let flat = "---\ndescription: Use when a pull request needs a review.\narguments:\n  - name: pr\n    description: The pull request number\n    required: true\n  - name: depth\n    values: [quick, thorough]\n---\nReview {{pr}} ({{ depth }}).\n";
    let generated = "description = \"Generated.\"\nmarkdown = \"Hi {{who}}\"\narguments = [{ name = \"who\", required = false }]\n";
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/skills/review.md", flat.as_bytes()),
        ("agent/skills/greet.toml", generated.as_bytes()),
        ("agent/skills/plain.md", b"# Plain\nNo arguments.\n"),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.unwrap();
    let by_name = |name: &str| p.skills.iter().find(|s| s.name == name).unwrap();
    assert_eq!(
        by_name("review").arguments,
        [
            SkillArgument {
                name: "pr".to_owned(),
                description: Some("The pull request number".to_owned()),
                required: true,
                values: vec![],
            },
            SkillArgument {
                name: "depth".to_owned(),
                description: None,
                required: false,
                values: vec!["quick".to_owned(), "thorough".to_owned()],
            },
        ]
    );
    // The body keeps its placeholders: only the MCP server fills them in.
    assert_eq!(by_name("review").body, "Review {{pr}} ({{ depth }}).\n");
    assert_eq!(by_name("greet").arguments[0].name, "who");
    assert!(!by_name("greet").arguments[0].required);
    assert!(by_name("plain").arguments.is_empty());

    // `bdk info` shows the arguments of the skills that declare some.
    let info = bdk_core::project::info::surface(&p, &[]);
    let skills = info["skills"].as_array().unwrap();
    let shown = |name: &str| skills.iter().find(|s| s["name"] == name).unwrap();
    assert_eq!(
        shown("review")["arguments"],
        json!([
            {"name": "pr", "description": "The pull request number", "required": true},
            {"name": "depth", "required": false, "values": ["quick", "thorough"]}
        ])
    );
    assert!(shown("plain").get("arguments").is_none(), "{info}");
}

#[test]
fn bad_skill_arguments_are_errors_that_name_the_argument() {
    let cases = [
        (
            "arguments: pr",
            "`arguments` must be a list, found a string",
        ),
        ("arguments:\n  - pr", "`arguments[0]` must be a mapping"),
        (
            "arguments:\n  - description: x",
            "`arguments[0]` has no `name`",
        ),
        (
            "arguments:\n  - name: 7",
            "`arguments[0].name` must be a string",
        ),
        (
            "arguments:\n  - name: \"a b\"",
            "argument name `a b` in `arguments[0]` is invalid",
        ),
        (
            "arguments:\n  - name: pr\n    required: \"yes\"",
            "`required` of argument `pr` must be true or false",
        ),
        (
            "arguments:\n  - name: pr\n    values: [1, 2]",
            "`values` of argument `pr` must be a list of strings",
        ),
        (
            "arguments:\n  - name: pr\n    values: low",
            "`values` of argument `pr` must be a list of strings, found a string",
        ),
        (
            "arguments:\n  - name: pr\n    description: [x]",
            "`description` of argument `pr` must be a string",
        ),
        (
            "arguments:\n  - name: pr\n    default: 1",
            "unknown key `default` in `arguments[0]`",
        ),
        (
            "arguments:\n  - name: pr\n  - name: pr",
            "argument `pr` is declared more than once",
        ),
    ];
    for (yaml, message) in cases {
        let text = format!("---\ndescription: Use it.\n{yaml}\n---\nBody {{{{pr}}}}.\n");
        let dir = project(&[
            ("agent/instructions.md", b"Hi."),
            ("agent/skills/review.md", text.as_bytes()),
        ]);
        let found = discover(dir.path());
        let d = only(&found);
        assert_eq!(d.severity, Severity::Error, "{yaml}");
        assert_eq!(d.file, "agent/skills/review.md", "{yaml}");
        assert!(d.message.contains(message), "{yaml}: {}", d.message);
        assert!(found.project.unwrap().skills.is_empty(), "{yaml}");
    }
    // The same rules hold for a packaged skill and a generated one.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/skills/pack/SKILL.md",
            b"---\ndescription: Use it.\narguments: {pr: 1}\n---\nBody.\n",
        ),
        (
            "agent/skills/gen.toml",
            b"description = \"d\"\nmarkdown = \"m\"\narguments = [\"pr\"]\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let messages: Vec<(&str, &str)> = found
        .diagnostics
        .iter()
        .map(|d| (d.file.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(
        messages,
        [
            (
                "agent/skills/gen.toml",
                "`arguments[0]` must be a mapping, found a string"
            ),
            (
                "agent/skills/pack/SKILL.md",
                "`arguments` must be a list, found a mapping"
            ),
        ]
    );
}

#[test]
fn directories_where_files_are_expected() {
    let dir = project(&[
        ("agent/instructions.md/x", b""),
        ("agent/agent.toml/y", b""),
        ("agent/tools", b"not a folder"),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let got: Vec<(&str, &str)> = found
        .diagnostics
        .iter()
        .map(|d| (d.file.as_str(), d.message.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("agent/agent.toml", "expected a file, found a directory"),
            (
                "agent/instructions.md",
                "expected a file, found a directory"
            ),
            (
                "agent/tools",
                "expected a directory, found a file: tools/ is a discovery folder"
            ),
        ]
    );
}

#[test]
fn template_instructions_fail_on_undefined_variables() {
    let dir = project(&[("agent/instructions.md.j2", b"Hello {{ nobody.here }}")]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(d.file, "agent/instructions.md.j2");
    assert!(
        d.message
            .starts_with("instructions template failed to render"),
        "{}",
        d.message
    );

    let dir = project(&[
        (
            "agent/agent.toml",
            b"name = \"tpl\"\nmodel = \"xai/grok-4\"\n",
        ),
        (
            "agent/instructions.md.j2",
            b"I am {{ agent.name }} on {{ agent.model }}.",
        ),
    ]);
    let found = discover(dir.path());
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    assert_eq!(
        found.project.unwrap().instructions,
        "I am tpl on xai/grok-4."
    );
}

#[cfg(unix)]
#[test]
fn sandbox_symlinks_are_skipped_with_a_warning() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/sandbox/workspace/real.txt", b"real"),
    ]);
    std::os::unix::fs::symlink(
        "/etc/hostname",
        dir.path().join("agent/sandbox/workspace/link.txt"),
    )
    .unwrap();
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!(
        (d.file.as_str(), d.severity),
        ("agent/sandbox/workspace/link.txt", Severity::Warning)
    );
    let seeds: Vec<String> = found
        .project
        .unwrap()
        .sandbox_files
        .into_iter()
        .map(|f| f.workspace_path)
        .collect();
    assert_eq!(seeds, ["real.txt"]);
}

#[cfg(unix)]
#[test]
fn symlink_loops_terminate() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/schedules/a.md",
            b"---\ncron: \"0 * * * *\"\n---\nGo.\n",
        ),
        (
            "agent/skills/pack/SKILL.md",
            b"---\ndescription: Pack.\n---\nBody.\n",
        ),
    ]);
    let agent = dir.path().join("agent");
    std::os::unix::fs::symlink("..", agent.join("schedules/loop")).unwrap();
    std::os::unix::fs::symlink("..", agent.join("skills/pack/up")).unwrap();
    let found = discover(dir.path());
    check_invariants(&found);
    let got: Vec<(&str, Severity)> = found
        .diagnostics
        .iter()
        .map(|d| (d.file.as_str(), d.severity))
        .collect();
    assert_eq!(
        got,
        [
            ("agent/schedules/loop", Severity::Warning),
            ("agent/skills/pack/up", Severity::Warning),
        ]
    );
    let p = found.project.unwrap();
    assert_eq!(p.schedules.len(), 1);
    assert!(p.skills[0].files.is_empty());
}

#[cfg(unix)]
#[test]
fn non_utf8_file_names_are_reported_and_skipped() {
    use std::os::unix::ffi::OsStrExt;
    let dir = project(&[("agent/instructions.md", b"Hi.")]);
    let skills = dir.path().join("agent/skills");
    fs::create_dir_all(&skills).unwrap();
    fs::write(
        skills.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md")),
        "# Cafe",
    )
    .unwrap();
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!(d.severity, Severity::Warning);
    assert!(d.file.starts_with("agent/skills/caf"), "{}", d.file);
    assert!(d.message.contains("not valid UTF-8"), "{}", d.message);
    assert!(found.project.unwrap().skills.is_empty());
}

#[test]
fn too_many_schedules_is_an_error() {
    let dir = project(&[("agent/instructions.md", b"Hi.")]);
    for i in 0..65 {
        let p = dir.path().join(format!("agent/schedules/s{i:02}.md"));
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, "---\ncron: \"0 * * * *\"\n---\nGo.\n").unwrap();
    }
    let d = only(&discover(dir.path())).clone();
    assert_eq!(d.file, "agent/schedules");
    assert!(
        d.message
            .contains("too many schedules (65; the limit is 64)"),
        "{}",
        d.message
    );
}

#[test]
fn tool_helpers_referenced_by_path_are_not_strays() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/tools/run.toml",
            b"description = \"r\"\ncommand = [\"python3\", \"helper/run.py\"]\n",
        ),
        ("agent/tools/helper/run.py", b""),
        ("agent/tools/run/data.txt", b""),
        ("agent/tools/run.test.py", b""),
        ("agent/tools/unused/x.py", b""),
    ]);
    let d = only(&discover(dir.path())).clone();
    assert_eq!(
        (d.file.as_str(), d.severity),
        ("agent/tools/unused", Severity::Warning)
    );
}

#[test]
fn weather_example_discovers_without_diagnostics() {
    let found = discover(&weather_dir());
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.unwrap();
    assert_eq!(p.name, "weather");
    assert_eq!(p.config.model.as_deref(), Some("scripted"));
    assert!(p.instructions.contains("get_weather"));
    let tool = &p.tools[0];
    assert_eq!(p.tools.len(), 1);
    assert_eq!(tool.spec.name, "get_weather");
    assert_eq!(tool.spec.effect, Effect::Read);
    assert_eq!(tool.spec.input_schema["required"], json!(["city"]));
    assert_eq!(tool.spec.input_schema["additionalProperties"], json!(false));
    assert_eq!(
        tool.spec.input_schema["properties"]["unit"]["enum"],
        json!(["celsius", "fahrenheit"])
    );
    assert!(
        matches!(&tool.runner, ToolRunner::Command { argv, .. } if argv == &["python3", "get_weather.py"])
    );
    assert_eq!(p.skills.len(), 1);
    assert_eq!(p.skills[0].name, "forecast-style");
    assert_eq!(p.subagents.len(), 1);
    assert_eq!(p.subagents[0].name, "climate");
    assert_eq!(p.hooks.len(), 1);
    assert_eq!(
        p.hooks[0].target,
        HookTarget::File {
            path: "audit.ndjson".into()
        }
    );
    assert_eq!(p.sandbox_files.len(), 1);
    assert_eq!(p.sandbox_files[0].workspace_path, "README.md");
    assert!(p.scripted_rules.contains_key("default"));
}

/// One scripted step for `messages`: (text, tool calls as (name, input)).
async fn step(
    model: &ScriptedModel,
    messages: Vec<Message>,
) -> (String, Vec<(String, serde_json::Value)>) {
    let request = ModelRequest {
        model: "scripted".into(),
        system: String::new(),
        messages,
        tools: Default::default(),
        effort: None,
        tool_choice: None,
        max_tokens: None,
    };
    let mut stream = model.step(request, CancellationToken::new()).await.unwrap();
    let mut text = String::new();
    let mut calls = Vec::new();
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            ModelEvent::TextDelta(t) => text.push_str(&t),
            ModelEvent::ToolCall(c) => calls.push((c.name, c.input)),
            _ => {}
        }
    }
    (text, calls)
}

fn user(text: &str) -> Message {
    Message::User { text: text.into() }
}

fn result(name: &str, content: &str) -> Message {
    Message::Tool {
        call_id: "call_1".into(),
        name: name.into(),
        content: content.into(),
        is_error: false,
        images: Vec::new(),
    }
}

#[tokio::test]
async fn weather_rules_drive_the_documented_conversations() {
    let path = weather_dir().join("agent/scripted.toml");
    let rules = RulesFile::parse(&fs::read_to_string(&path).unwrap(), &path).unwrap();
    let model = ScriptedModel::from_rules(rules, "scripted/default");

    let q = "What's the weather in Paris?";
    let (_, calls) = step(&model, vec![user(q)]).await;
    assert_eq!(
        calls,
        [("get_weather".to_owned(), json!({"city": "Paris"}))]
    );
    let weather = r#"{"city": "Paris", "conditions": "sunny", "humidity": 34, "simulated": true, "temperatureC": 12}"#;
    let (text, calls) = step(&model, vec![user(q), result("get_weather", weather)]).await;
    assert_eq!(text, "It is 12°C and sunny in Paris (simulated data).");
    assert!(calls.is_empty());

    let q = "Tell me about the climate history of Oslo";
    let (_, calls) = step(&model, vec![user(q)]).await;
    let prompt = format!("Climate research: {q}");
    assert_eq!(
        calls,
        [(
            "task".to_owned(),
            json!({"subagent": "climate", "prompt": prompt})
        )]
    );
    // The subagent shares the rules and sees the delegated prompt.
    let (note, calls) = step(&model, vec![user(&prompt)]).await;
    assert!(calls.is_empty());
    assert!(note.starts_with("Climate note"), "{note}");
    let (text, _) = step(&model, vec![user(q), result("task", &note)]).await;
    assert_eq!(text, format!("From the climate subagent: {note}"));

    let q = "Write a forecast for Rome";
    let (_, calls) = step(&model, vec![user(q)]).await;
    assert_eq!(
        calls,
        [("load_skill".to_owned(), json!({"name": "forecast-style"}))]
    );
    let (text, _) = step(
        &model,
        vec![user(q), result("load_skill", "# Forecast write-up")],
    )
    .await;
    assert!(text.contains("forecast-style"), "{text}");

    let (text, calls) = step(&model, vec![user("hello")]).await;
    assert!(calls.is_empty());
    assert!(text.contains("offline weather example"), "{text}");
}

#[test]
fn weather_tool_is_deterministic_and_validates_input() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let script = weather_dir().join("agent/tools/get_weather.py");
    let run = |request: &str| -> serde_json::Value {
        let mut child = Command::new("python3")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 is needed to run the weather tool");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(request.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success());
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let a = run(r#"{"input": {"city": "Paris"}, "context": {}}"#);
    let b = run(r#"{"input": {"city": "  paris "}, "context": {}}"#);
    assert_eq!(a["temperatureC"], b["temperatureC"]);
    assert_eq!(a["conditions"], b["conditions"]);
    assert_eq!(a["city"], "Paris");
    assert_eq!(a["simulated"], true);
    assert!(a["humidity"].as_u64().unwrap() <= 100);
    let f = run(r#"{"input": {"city": "Paris", "unit": "fahrenheit"}, "context": {}}"#);
    assert_eq!(f["unit"], "fahrenheit");
    let c = a["temperatureC"].as_i64().unwrap() as f64;
    assert_eq!(
        f["temperatureF"].as_i64().unwrap(),
        (c * 9.0 / 5.0 + 32.0).round() as i64
    );
    let bad = run(r#"{"input": {"city": ""}, "context": {}}"#);
    assert_eq!(bad["isError"], true);
    let bad = run(r#"{"input": {"city": "Paris", "unit": "kelvin"}, "context": {}}"#);
    assert_eq!(bad["isError"], true);
}

#[test]
fn sandbox_settings_and_exposed_built_ins_are_checked() {
    // The full form, with every kind of path.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/agent.toml",
            b"[builtin_tools]\ndirect = [\"read_file\"]\n[sandbox]\nread = [\"data\", \"/opt/shared\", \"~/.cache/x\"]\nwrite = [\"/var/cache/agent\"]\ndeny = [\"secrets\"]\nenv = [\"GITHUB_TOKEN\"]\n",
        ),
        (
            "agent/tools/t.toml",
            b"description = \"d\"\neffect = \"read\"\ncommand = [\"true\"]\nenv = [\"API_KEY\"]\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.unwrap();
    let sandbox = &p.config.sandbox;
    assert_eq!(sandbox.mode, bdk_core::project::SandboxMode::On);
    assert_eq!(sandbox.read[0], p.root.join("data"));
    assert_eq!(sandbox.read[1], std::path::Path::new("/opt/shared"));
    assert!(sandbox.read[2].ends_with(".cache/x") && sandbox.read[2].is_absolute());
    assert_eq!(sandbox.deny, [p.root.join("secrets")]);
    assert_eq!(sandbox.env, ["GITHUB_TOKEN"]);
    assert_eq!(p.config.builtin_tools.direct, ["read_file"]);
    match &p.tools[0].runner {
        ToolRunner::Command { env, pass_env, .. } => {
            assert!(env.is_empty());
            assert_eq!(pass_env, &["API_KEY"]);
        }
        other => panic!("{other:?}"),
    }

    // Every mistake is named with its fix; turning the sandbox off warns.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/agent.toml",
            b"sandbox = \"off\"\n[builtin_tools]\ndirect = [\"shell\", \"nope\"]\n",
        ),
        (
            "agent/tools/t.toml",
            b"description = \"d\"\neffect = \"read\"\ncommand = [\"true\"]\nsandbox = \"maybe\"\nenv = [\"1BAD\"]\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let got: Vec<(Severity, &str)> = found
        .diagnostics
        .iter()
        .map(|d| (d.severity, d.message.as_str()))
        .collect();
    let has = |sev: Severity, text: &str| {
        assert!(
            got.iter().any(|(s, m)| *s == sev && m.contains(text)),
            "{text}: {got:#?}"
        );
    };
    has(
        Severity::Error,
        "names `shell`, which is not an enabled built-in",
    );
    has(
        Severity::Error,
        "names `nope`, which is not an enabled built-in",
    );
    has(Severity::Warning, "the sandbox is off");
    has(
        Severity::Error,
        "`sandbox` must be \"on\" or \"off\", found \"maybe\"",
    );
    has(
        Severity::Error,
        "`1BAD` is not an environment variable name",
    );
}

#[test]
fn unknown_providers_and_the_local_table_are_errors_with_a_fix() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/agent.toml",
            b"model = \"bogus/none\"\n[local]\ncwd = \"work\"\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let messages: Vec<(&str, &str)> = found
        .diagnostics
        .iter()
        .map(|d| (d.message.as_str(), d.fix.as_str()))
        .collect();
    assert_eq!(messages.len(), 2, "{}", show(&found.diagnostics));
    assert!(
        found
            .diagnostics
            .iter()
            .all(|d| d.severity == Severity::Error)
    );
    assert!(
        messages
            .iter()
            .any(|(m, f)| m.contains("unknown provider `bogus`") && f.contains("openai")),
        "{messages:?}"
    );
    assert!(
        messages
            .iter()
            .any(|(m, f)| m.contains("`[local]` is not supported") && f.contains("--state-root")),
        "{messages:?}"
    );
}

#[test]
fn scripted_templates_may_only_read_what_a_conversation_provides() {
    let cases: &[(&str, &str)] = &[
        (
            "[[rules]]\nuser_regex = \"in (?P<city>\\\\w+)\"\nreply = \"{{ captures.town }}\"\n",
            "uses `captures.town`, but its user_regex names city",
        ),
        (
            "[[rules]]\nuser_contains = \"hi\"\nreply = \"{{ captures.city }}\"\n",
            "the rule has no user_regex with named groups",
        ),
        (
            "[[rules]]\nreply = \"{{ weather.temp }}\"\n",
            "reply uses `weather`, which no conversation provides",
        ),
        (
            "[[rules]]\ntool_calls = [{ name = \"t\", input = { q = \"{{ usr }}\" } }]\n",
            "tool_calls[0].input.q uses `usr`",
        ),
    ];
    for (rules, expected) in cases {
        let dir = project(&[
            ("agent/instructions.md", b"Hi."),
            ("agent/agent.toml", b"model = \"scripted\"\n"),
            ("agent/scripted.toml", rules.as_bytes()),
        ]);
        let d = only(&discover(dir.path())).clone();
        assert_eq!(d.file, "agent/scripted.toml");
        assert_eq!(d.severity, Severity::Error);
        assert!(d.message.contains(expected), "{rules}: {}", d.message);
    }
    // What the documentation shows stays valid: every variable, a real
    // capture group, a loop variable and an engine function.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"model = \"scripted\"\n"),
        (
            "agent/scripted.toml",
            b"[[rules]]\nuser_regex = \"in (?P<city>\\\\w+)\"\nreply = \"{{ captures.city }} {{ user }} {{ step }}\"\n[[rules]]\ntool_result = \"t\"\nreply = \"{{ tool }} {{ result.a }} {{ result_text }} {% for i in range(2) %}{{ i }}{% endfor %}\"\n",
        ),
    ]);
    let found = discover(dir.path());
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
}

#[test]
fn tools_named_like_built_ins_are_errors_with_the_fix() {
    let tool = b"description = \"Mine.\"\ncommand = [\"true\"]\n";
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"[builtin_tools]\nshell = true\n"),
        ("agent/tools/read_file.toml", tool),
        ("agent/tools/shell.toml", tool),
        ("agent/tools/task.toml", tool),
        ("agent/tools/mine.toml", tool),
        ("agent/subagents/helper/instructions.md", b"Help."),
        (
            "agent/subagents/helper/agent.toml",
            b"description = \"Helps.\"\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    let mut got: Vec<(String, String, String)> = found
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .map(|d| (d.file.clone(), d.message.clone(), d.fix.clone()))
        .collect();
    got.sort();
    assert_eq!(got.len(), 3, "{}", show(&found.diagnostics));
    assert_eq!(got[0].0, "agent/tools/read_file.toml");
    assert!(got[0].1.contains("collides with the built-in"), "{got:?}");
    assert!(got[0].2.contains("workspace = false"), "{got:?}");
    assert_eq!(got[1].0, "agent/tools/shell.toml");
    assert!(got[1].2.contains("shell = false"), "{got:?}");
    assert_eq!(got[2].0, "agent/tools/task.toml");
    assert!(got[2].1.contains("never get it"), "{got:?}");

    // With the built-ins off, the same names are the agent's own.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"[builtin_tools]\nworkspace = false\n"),
        ("agent/tools/read_file.toml", tool),
        ("agent/tools/shell.toml", tool),
    ]);
    let found = discover(dir.path());
    assert!(
        found
            .diagnostics
            .iter()
            .all(|d| d.severity != Severity::Error),
        "{}",
        show(&found.diagnostics)
    );
}

#[test]
fn mcp_oauth_tables_are_read_and_checked() {
    use bdk_core::project::McpOAuth;
    let dir = bdk_testkit::AgentFolder::new()
        .rules("[[rules]]\nreply = \"x\"\n")
        .file(
            "agent/mcp-connections/signed.toml",
            "url = \"https://mcp.example/mcp\"\n\n[oauth]\nclient_id = \"abc\"\nscopes = [\"read\", \"write\"]\n",
        )
        .file(
            "agent/mcp-connections/plain.toml",
            "url = \"https://mcp.example/mcp\"\n\n[oauth]\n",
        )
        .file(
            "agent/mcp-connections/both.toml",
            "url = \"https://mcp.example/mcp\"\nbearer_token_env = \"TOKEN\"\n\n[oauth]\n",
        )
        .file("agent/mcp-connections/local.toml", "command = \"srv\"\n\n[oauth]\n")
        .file(
            "agent/mcp-connections/typo.toml",
            "url = \"https://mcp.example/mcp\"\n\n[oauth]\nclientid = \"abc\"\n",
        )
        .write();
    let d = bdk_core::discover(dir.path());
    let said = |file: &str| -> Vec<(Severity, String)> {
        d.diagnostics
            .iter()
            .filter(|x| x.file == format!("agent/mcp-connections/{file}.toml"))
            .map(|x| (x.severity, x.message.clone()))
            .collect()
    };
    assert!(
        said("signed").is_empty() && said("plain").is_empty(),
        "{:?}",
        d.diagnostics
    );
    assert_eq!(said("both").len(), 1);
    assert_eq!(said("both")[0].0, Severity::Error);
    assert!(
        said("both")[0]
            .1
            .contains("both `bearer_token_env` and `[oauth]`")
    );
    assert_eq!(
        said("local"),
        [(
            Severity::Warning,
            "`oauth` is ignored for a stdio connection".to_owned()
        )]
    );
    assert_eq!(said("typo")[0].0, Severity::Warning);
    assert!(
        said("typo")[0].1.contains("unknown key `oauth.clientid`"),
        "{:?}",
        said("typo")
    );
    // The project is not served with an error in it; read the good ones
    // from a folder without the bad one.
    std::fs::remove_file(dir.path().join("agent/mcp-connections/both.toml")).unwrap();
    let p = bdk_core::discover(dir.path()).project.unwrap();
    let oauth_of = |name: &str| match &p
        .mcp_connections
        .iter()
        .find(|c| c.name == name)
        .unwrap()
        .transport
    {
        McpTransport::Http { oauth, .. } => oauth.clone(),
        McpTransport::Stdio { .. } => None,
    };
    assert_eq!(
        oauth_of("signed"),
        Some(McpOAuth {
            client_id: Some("abc".into()),
            scopes: vec!["read".into(), "write".into()],
        })
    );
    assert_eq!(oauth_of("plain"), Some(McpOAuth::default()));
    assert_eq!(oauth_of("local"), None);
}

// ---------------------------------------------------------------------------
// Agent-declared resources (`resources.toml`) and skill attachments.

/// A command tool `lookup` (read) and `deploy` (needs approval).
const RESOURCE_TOOLS: &[(&str, &[u8])] = &[
    ("agent/instructions.md", b"Hi."),
    (
        "agent/tools/lookup.toml",
        b"description = \"Looks up an item.\"\neffect = \"read\"\ncommand = [\"python3\", \"lookup.py\"]\n[input_schema]\ntype = \"object\"\n",
    ),
    ("agent/tools/lookup.py", b"print('x')\n"),
    (
        "agent/tools/deploy.toml",
        b"description = \"Deploys.\"\nneeds_approval = true\ncommand = [\"python3\", \"deploy.py\"]\n[input_schema]\ntype = \"object\"\n",
    ),
    ("agent/tools/deploy.py", b"print('x')\n"),
];

fn with_resources(manifest: &str, extra: &[(&str, &[u8])]) -> tempfile::TempDir {
    let mut files: Vec<(&str, &[u8])> = RESOURCE_TOOLS.to_vec();
    files.push(("agent/resources.toml", manifest.as_bytes()));
    files.extend_from_slice(extra);
    project(&files)
}

#[test]
fn declared_resources_and_templates_are_read() {
    let manifest = r#"
[[resources]]
uri = "docs://runbook"
name = "runbook"
title = "On-call runbook"
description = "What to do when paged."
mime_type = "text/markdown"
file = "resources/runbook.md"

[[resources]]
uri = "test://static-binary"
name = "logo"
file = "lib/logo.png"

[[templates]]
uri_template = "test://items/{id}/data"
name = "item"
mime_type = "application/json"
tool = "lookup"
"#;
    let dir = with_resources(
        manifest,
        &[
            ("agent/resources/runbook.md", b"# Runbook\n"),
            ("agent/resources/forgotten.md", b"nobody serves me"),
            ("agent/lib/logo.png", &[0x89, b'P', b'N', b'G']),
        ],
    );
    let found = discover(dir.path());
    check_invariants(&found);
    // A file in resources/ that no entry serves is a warning, nothing more.
    let d = only(&found);
    assert_eq!(
        (d.file.as_str(), d.severity),
        ("agent/resources/forgotten.md", Severity::Warning)
    );
    let p = found.project.unwrap();
    let r = &p.resources;
    assert_eq!(r.resources.len(), 2);
    assert_eq!(r.resources[0].uri, "docs://runbook");
    assert_eq!(r.resources[0].title.as_deref(), Some("On-call runbook"));
    assert_eq!(r.resources[0].mime_type.as_deref(), Some("text/markdown"));
    assert_eq!(r.resources[0].file, "resources/runbook.md");
    assert_eq!(r.resources[1].mime_type, None);
    assert_eq!(r.templates.len(), 1);
    assert_eq!(
        r.templates[0].uri_template.as_str(),
        "test://items/{id}/data"
    );
    assert_eq!(r.templates[0].tool, "lookup");
    assert_eq!(
        r.templates[0].uri_template.matches("test://items/42/data"),
        Some(vec![("id".to_owned(), "42".to_owned())])
    );
    // `bdk info` lists them; an agent without any lists nothing new.
    let info = bdk_core::project::info::surface(&p, &[]);
    assert_eq!(info["resources"][0]["uri"], "docs://runbook", "{info}");
    assert_eq!(info["resources"][1]["file"], "lib/logo.png", "{info}");
    assert_eq!(
        info["resourceTemplates"][0],
        json!({"uriTemplate": "test://items/{id}/data", "name": "item", "title": null,
               "mimeType": "application/json", "tool": "lookup"})
    );
    let plain = discover(&weather_dir()).project.unwrap();
    let info = bdk_core::project::info::surface(&plain, &[]);
    assert!(info.get("resources").is_none(), "{info}");
}

#[test]
fn bad_resource_declarations_are_errors_that_name_the_entry() {
    let resource = |body: &str| format!("[[resources]]\nname = \"r\"\n{body}\n");
    let template = |body: &str| format!("[[templates]]\nname = \"t\"\n{body}\n");
    let cases = [
        (
            resource("uri = \"docs://a\"\nfile = \"../secret.txt\""),
            "`resources[0].file` `../secret.txt` must be a relative path inside the agent folder",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"/etc/passwd\""),
            "must be a relative path inside the agent folder",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/../../secret.txt\""),
            "must be a relative path inside the agent folder",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/out.txt\""),
            "leads outside the agent folder through a symlink",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/missing.md\""),
            "`resources[0].file` `resources/missing.md` does not exist",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources\""),
            "is not a regular file",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/huge.bin\""),
            "is too large",
        ),
        (
            resource("uri = \"runbook\"\nfile = \"resources/a.md\""),
            "`resources[0].uri` `runbook` is not usable: it has no scheme",
        ),
        (
            resource("uri = \"bdk://sessions/x/events\"\nfile = \"resources/a.md\""),
            "reserved",
        ),
        (
            resource("uri = \"docs://a\""),
            "missing `resources[0].file`",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/a.md\"\nmime_type = \"png\""),
            "`resources[0].mime_type` `png` is not a media type",
        ),
        (
            resource("uri = \"docs://a\"\nfile = \"resources/a.md\"\ntool = \"lookup\""),
            "belong to templates",
        ),
        (
            "[[resources]]\nuri = \"docs://a\"\nfile = \"resources/a.md\"\n".to_owned(),
            "missing `resources[0].name`",
        ),
        (
            format!(
                "{}{}",
                resource("uri = \"docs://a\"\nfile = \"resources/a.md\""),
                resource("uri = \"docs://a\"\nfile = \"resources/a.md\"")
            ),
            "resource `docs://a` is declared more than once",
        ),
        (
            "resources = \"docs://a\"\n".to_owned(),
            "`resources` must be an array of tables",
        ),
        (
            template("uri_template = \"test://items/{id}\"\ntool = \"nope\""),
            "`templates[0].tool` names the unknown tool `nope`",
        ),
        (
            template("uri_template = \"test://items/{id}\"\ntool = \"deploy\""),
            "needs approval",
        ),
        (
            template("uri_template = \"test://items/{id}\"\ntool = \"read_file\""),
            "is a built-in that remote callers may not call",
        ),
        (
            template("uri_template = \"test://items/{+id}\"\ntool = \"lookup\""),
            "RFC 6570 level 1",
        ),
        (
            template("uri_template = \"test://items/{a-b}\"\ntool = \"lookup\""),
            "variable name `a-b` is invalid",
        ),
        (
            template("uri_template = \"test://items/{id}{rest}\"\ntool = \"lookup\""),
            "follows another variable",
        ),
        (
            template("uri_template = \"test://items\"\ntool = \"lookup\""),
            "has no `{variable}`",
        ),
        (
            template("uri_template = \"bdk://sessions/{id}\"\ntool = \"lookup\""),
            "reserved",
        ),
        (
            template("uri_template = \"test://items/{id}\""),
            "missing `templates[0].tool`",
        ),
        (
            template(
                "uri_template = \"test://items/{id}\"\ntool = \"lookup\"\nfile = \"resources/a.md\"",
            ),
            "belong to fixed resources",
        ),
    ];
    for (manifest, message) in cases {
        let dir = with_resources(&manifest, &[("agent/resources/a.md", b"# A\n")]);
        std::os::unix::fs::symlink(
            dir.path().join("secret.txt"),
            dir.path().join("agent/resources/out.txt"),
        )
        .unwrap();
        fs::write(dir.path().join("secret.txt"), "secret").unwrap();
        // Sparse: no 17 MiB written to disk.
        fs::File::create(dir.path().join("agent/resources/huge.bin"))
            .unwrap()
            .set_len(17 * 1024 * 1024)
            .unwrap();
        let found = discover(dir.path());
        check_invariants(&found);
        let errors: Vec<&Diagnostic> = found
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        assert_eq!(errors.len(), 1, "{manifest}\n{}", show(&found.diagnostics));
        assert_eq!(errors[0].file, "agent/resources.toml", "{manifest}");
        assert!(
            errors[0].message.contains(message),
            "{manifest}\nwant: {message}\ngot: {}",
            errors[0].message
        );
        assert!(!errors[0].fix.is_empty());
    }
}

#[test]
fn a_template_may_name_an_exposed_built_in_or_an_advertised_tool() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        ("agent/agent.toml", b"[builtin_tools]\ndirect = [\"read_file\"]\n"),
        (
            "agent/resources.toml",
            b"[[templates]]\nuri_template = \"files://{name}\"\nname = \"f\"\ntool = \"read_file\"\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));

    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/mcp-connections/docs.toml",
            b"command = \"docs-server\"\nadvertise_tools = true\n",
        ),
        (
            "agent/resources.toml",
            b"[[templates]]\nuri_template = \"docs://{page}\"\nname = \"page\"\ntool = \"fetch_page\"\n",
        ),
    ]);
    let found = discover(dir.path());
    let d = only(&found);
    assert_eq!(d.severity, Severity::Warning, "{}", d.message);
    assert!(d.message.contains("MCP connection"), "{}", d.message);
    assert_eq!(found.project.unwrap().resources.templates.len(), 1);
}

#[test]
fn skill_attachments_name_files_bundled_with_the_skill() {
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/skills/explain/SKILL.md",
            b"---\ndescription: Use it.\nattachments: [diagram.png, notes/steps.md]\n---\nLook.\n",
        ),
        ("agent/skills/explain/diagram.png", &[0x89, b'P', b'N', b'G']),
        ("agent/skills/explain/notes/steps.md", b"1. Look\n"),
        ("agent/skills/explain/other.md", b"not attached"),
        (
            "agent/skills/gen.toml",
            b"description = \"d\"\nmarkdown = \"m\"\nfiles = { \"a.md\" = \"A\" }\nattachments = [\"a.md\"]\n",
        ),
    ]);
    let found = discover(dir.path());
    check_invariants(&found);
    assert!(found.diagnostics.is_empty(), "{}", show(&found.diagnostics));
    let p = found.project.unwrap();
    let by_name = |name: &str| p.skills.iter().find(|s| s.name == name).unwrap();
    assert_eq!(
        by_name("explain").attachments,
        ["diagram.png", "notes/steps.md"]
    );
    assert_eq!(by_name("gen").attachments, ["a.md"]);
}

#[test]
fn bad_skill_attachments_are_errors() {
    let many: String = (0..17).map(|i| format!("f{i}.md, ")).collect();
    let cases = [
        (
            "attachments: [../secret.txt]",
            "attachment `../secret.txt` must be a relative path inside the skill folder",
        ),
        (
            "attachments: [/etc/passwd]",
            "must be a relative path inside the skill folder",
        ),
        (
            "attachments: [missing.png]",
            "attachment `missing.png` is not a file of the skill",
        ),
        (
            "attachments: [link.txt]",
            "attachment `link.txt` is not a file of the skill",
        ),
        ("attachments: [SKILL.md]", "is not a file of the skill"),
        ("attachments: [a.md, a.md]", "listed more than once"),
        ("attachments: a.md", "`attachments` must be a list of paths"),
        (
            "attachments: [1]",
            "`attachments[0]` must be a path, found a number",
        ),
        (
            &format!("attachments: [{many}]") as &str,
            "at most 16 attachments",
        ),
    ];
    for (yaml, message) in cases {
        let text = format!("---\ndescription: Use it.\n{yaml}\n---\nBody.\n");
        let dir = project(&[
            ("agent/instructions.md", b"Hi."),
            ("agent/skills/pack/SKILL.md", text.as_bytes()),
            ("agent/skills/pack/a.md", b"A"),
        ]);
        fs::write(dir.path().join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("secret.txt"),
            dir.path().join("agent/skills/pack/link.txt"),
        )
        .unwrap();
        let found = discover(dir.path());
        check_invariants(&found);
        let errors: Vec<&Diagnostic> = found
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .collect();
        assert_eq!(errors.len(), 1, "{yaml}\n{}", show(&found.diagnostics));
        assert_eq!(errors[0].file, "agent/skills/pack/SKILL.md", "{yaml}");
        assert!(
            errors[0].message.contains(message),
            "{yaml}: {}",
            errors[0].message
        );
        assert!(found.project.unwrap().skills.is_empty(), "{yaml}");
    }
    // A flat skill has no folder of its own to bundle files in.
    let dir = project(&[
        ("agent/instructions.md", b"Hi."),
        (
            "agent/skills/flat.md",
            b"---\nattachments: [x.png]\n---\nBody.\n",
        ),
    ]);
    let found = discover(dir.path());
    let d = only(&found);
    assert!(
        d.message.contains("needs a packaged skill"),
        "{}",
        d.message
    );
    // Together the attachments stay a size a prompt can carry.
    let big = vec![b'x'; 900 * 1024];
    let files: Vec<(String, &[u8])> = (0..5)
        .map(|i| (format!("agent/skills/pack/f{i}.txt"), big.as_slice()))
        .collect();
    let mut all: Vec<(&str, &[u8])> = files.iter().map(|(p, b)| (p.as_str(), *b)).collect();
    all.push(("agent/instructions.md", b"Hi."));
    all.push((
        "agent/skills/pack/SKILL.md",
        b"---\ndescription: d\nattachments: [f0.txt, f1.txt, f2.txt, f3.txt, f4.txt]\n---\nB\n",
    ));
    let dir = project(&all);
    let found = discover(dir.path());
    let d = only(&found);
    assert!(
        d.message.contains("a prompt carries at most 4 MiB"),
        "{}",
        d.message
    );
}
