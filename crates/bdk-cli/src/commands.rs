//! The commands behind `bdk`'s subcommands.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use bdk_api::sessions::{FollowUpRequest, StartSessionRequest};
use bdk_core::host::{CallOrigin, DirectCall, FollowUp, HostError, StartSession};
use bdk_core::project::info::{add_tools, surface};
use bdk_core::trajectory::summarize;
use bdk_core::{Project, discover};
use bdk_events::view::session_state;
use bdk_events::{SessionId, SessionMode};
use bdk_store::{FsStore, Store};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::args::Command;
use crate::init;
use crate::support::{
    FAILED, OK, Opened, UNUSABLE, counts, open_host_or_remote, parse_session_id, print_diagnostics,
    print_json,
};
use crate::trace::{write_trace, write_trace_to};

/// Runs one command and returns the process exit code.
pub async fn dispatch(command: Command, logs: bdk_http::LogBuffer) -> ExitCode {
    let result = match command {
        Command::Init {
            dir,
            template,
            vars,
        } => init::run(&dir, template, &vars),
        Command::Validate {
            path,
            project,
            json,
        } => validate(&project.dir(path.as_deref()), json),
        Command::Info {
            path,
            project,
            json,
        } => {
            let dir = project.dir(path.as_deref());
            info(&dir, &project.state_root(&dir), json).await
        }
        Command::Run {
            project,
            message,
            session,
            dry_run,
            as_of,
            record,
            otlp_endpoint: _,
            json,
        } => {
            crate::support::choose_output(crate::support::Render::Run, json);
            let dir = project.dir(None);
            let root = project.state_root(&dir);
            let opts = RunOptions {
                message,
                session,
                dry_run,
                as_of,
                record,
            };
            run(&dir, &root, opts).await
        }
        Command::Call {
            tool,
            project,
            input,
            session,
            approve,
            json,
        } => {
            crate::support::choose_output(crate::support::Render::Call, json);
            let dir = project.dir(None);
            let root = project.state_root(&dir);
            call(&dir, &root, tool, &input, session, approve).await
        }
        Command::Cost {
            project,
            session,
            json,
        } => {
            let dir = project.dir(None);
            crate::cost::run(&dir, &project.state_root(&dir), session.as_deref(), json).await
        }
        Command::Trajectory { events } => trajectory(&events),
        Command::Serve {
            dirs,
            dev,
            port,
            host,
            mode,
            state_root,
            bearer_tokens,
            allow_anonymous,
            no_playground,
            no_docs,
            no_schedules,
            otlp_endpoint: _,
            store,
            connections,
            require_sandbox,
            session_cache,
        } => {
            let opts = crate::serve::ServeOptions {
                dirs,
                dev,
                port: port.unwrap_or(crate::serve::DEFAULT_PORT),
                port_fallback: port.is_none(),
                host,
                single: mode == "single",
                state_root,
                bearer_tokens,
                allow_anonymous,
                docs: !no_docs,
                playground: !no_playground,
                schedules: !no_schedules,
                store,
                connections,
                require_sandbox,
                session_cache,
                watch: false,
            };
            crate::serve::run(opts, logs).await
        }
        Command::Dev {
            dirs,
            port,
            host,
            mode,
            state_root,
            no_playground,
        } => {
            let opts = crate::serve::ServeOptions {
                dirs,
                dev: true,
                port: port.unwrap_or(crate::serve::DEFAULT_PORT),
                port_fallback: port.is_none(),
                host,
                single: mode == "single",
                state_root,
                bearer_tokens: Vec::new(),
                allow_anonymous: false,
                docs: true,
                playground: !no_playground,
                schedules: false,
                store: None,
                connections: crate::serve::ConnectionArgs::default(),
                require_sandbox: false,
                session_cache: bdk_core::host::DEFAULT_SESSION_CACHE_BYTES,
                watch: true,
            };
            crate::serve::run(opts, logs).await
        }
        Command::Chat(args) => crate::chat::run(args).await,
        Command::Evals(args) => crate::evals::run(args).await,
        Command::Github(args) => Ok(crate::github::run(args).await),
        Command::Slack(args) => Ok(crate::slack::run(args).await),
        Command::Completions { shell } => crate::generate::completions(shell).map(|()| 0),
        Command::Man { out_dir } => crate::generate::man(out_dir.as_deref()).map(|()| 0),
        Command::Mcp {
            command: None,
            project,
        } => {
            let dir = project.dir(None);
            crate::mcp::run(&dir, &project.state_root(&dir)).await
        }
        Command::Mcp {
            command:
                Some(crate::args::McpCommand::Login {
                    name,
                    project,
                    no_browser,
                }),
            ..
        } => {
            let dir = project.dir(None);
            crate::mcp::login::run(&dir, &project.state_root(&dir), &name, !no_browser).await
        }
        Command::Sessions { project, json } => {
            let dir = project.dir(None);
            sessions(&project.state_root(&dir), json).await
        }
        Command::Session {
            id,
            project,
            events,
            json,
        } => {
            crate::support::choose_output(crate::support::Render::Session, json);
            let dir = project.dir(None);
            session(&project.state_root(&dir), &id, events).await
        }
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            errln!("error: {e:#}");
            ExitCode::from(FAILED)
        }
    }
}

fn validate(dir: &Path, json: bool) -> Result<u8> {
    let mut discovery = discover(dir);
    // Eval files are checked by bdk-evals, which bdk-core cannot name.
    discovery
        .diagnostics
        .extend(bdk_evals::load(dir).diagnostics);
    let (errors, warnings) = counts(&discovery.diagnostics);
    if json {
        print_json(&json!({
            "ok": errors == 0,
            "errors": errors,
            "warnings": warnings,
            "diagnostics": discovery.diagnostics,
        }))?;
    } else {
        print_diagnostics(&discovery.diagnostics, false);
        outln!(
            "{}: {errors} error(s), {warnings} warning(s)",
            dir.display()
        );
    }
    Ok(if errors == 0 { OK } else { UNUSABLE })
}

async fn info(dir: &Path, state_root: &Path, json: bool) -> Result<u8> {
    let json = crate::support::wants_json(json);
    let discovery = discover(dir);
    let Some(project) = &discovery.project else {
        print_diagnostics(&discovery.diagnostics, true);
        return Ok(UNUSABLE);
    };
    let mut value = surface(project, &discovery.diagnostics);
    let (connection_errors, mcp_tools) = mcp_listing(project, state_root).await;
    add_tools(&mut value, project, &mcp_tools);
    value["connectionErrors"] = json!(connection_errors);
    if json {
        print_json(&value)?;
        return Ok(OK);
    }
    let c = &project.config;
    outln!("agent: {}", project.name);
    if let Some(d) = &c.description {
        outln!("description: {d}");
    }
    outln!(
        "model: {}",
        c.model.as_deref().unwrap_or(bdk_models::DEFAULT_MODEL)
    );
    let section = |title: &str, items: Vec<String>| {
        outln!("{title} ({}):", items.len());
        for i in items {
            outln!("  {i}");
        }
    };
    section(
        "tools",
        value["tools"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|t| {
                let text = |key: &str| t[key].as_str().unwrap_or_default();
                // Manifest tools read as before; others name where they come from.
                let source = match text("source") {
                    "manifest" | "" => String::new(),
                    other => format!(", {other}"),
                };
                format!(
                    "{} [{}, {}{}{source}] {}",
                    text("name"),
                    text("effect"),
                    text("execution"),
                    if t["needsApproval"] == true {
                        ", needs approval"
                    } else {
                        ""
                    },
                    text("description"),
                )
            })
            .collect(),
    );
    section(
        "skills",
        project
            .skills
            .iter()
            .map(|s| format!("{}: {}", s.name, s.description))
            .collect(),
    );
    section(
        "subagents",
        project
            .subagents
            .iter()
            .map(|s| format!("{}: {}", s.name, s.description))
            .collect(),
    );
    section(
        "mcp connections",
        project
            .mcp_connections
            .iter()
            .map(
                |m| match connection_errors.iter().find(|e| e.name == m.name) {
                    Some(e) => format!("{} (failed: {})", m.name, e.message),
                    None => m.name.clone(),
                },
            )
            .collect(),
    );
    section(
        "channels",
        project
            .channels
            .iter()
            .map(|c| {
                let routes: Vec<String> = c.routes.iter().map(ToString::to_string).collect();
                format!("{} {}", c.name, routes.join(", "))
            })
            .collect(),
    );
    section(
        "hooks",
        project.hooks.iter().map(|h| h.name.clone()).collect(),
    );
    section(
        "schedules",
        project
            .schedules
            .iter()
            .map(|s| format!("{} ({})", s.name, s.cron))
            .collect(),
    );
    section(
        "experiments",
        project
            .experiments
            .iter()
            .map(|e| {
                let arms: Vec<String> = e
                    .arms
                    .iter()
                    .map(|a| format!("{} {}%", a.name, a.weight))
                    .collect();
                let off = if e.enabled { "" } else { " (disabled)" };
                format!("{}{off}: {}", e.name, arms.join(", "))
            })
            .collect(),
    );
    section(
        "sandbox files",
        project
            .sandbox_files
            .iter()
            .map(|f| f.workspace_path.clone())
            .collect(),
    );
    print_diagnostics(&discovery.diagnostics, false);
    Ok(OK)
}

/// The longest `bdk info` waits for one MCP connection to list its tools
/// (a connection's own shorter `timeout_ms` ends it sooner).
const INFO_MCP_WAIT: Duration = Duration::from_secs(15);

/// Tries every MCP connection of `project` once, each bounded by
/// [`INFO_MCP_WAIT`], and returns the ones that could not list their tools
/// (each also said on stderr) and the advertised tools with their source.
/// OAuth connections read their tokens under `state_root`.
async fn mcp_listing(
    project: &Project,
    state_root: &Path,
) -> (
    Vec<bdk_core::mcp::ConnectionError>,
    Vec<(bdk_core::tool::ToolSpec, bdk_core::tool::ToolSource)>,
) {
    use bdk_core::mcp::{ConnectionError, McpHub};
    if project.mcp_connections.is_empty() {
        return (Vec::new(), Vec::new());
    }
    let containment = bdk_core::containment::Containment::new(None, project.config.sandbox.clone());
    let hub = bdk_mcp::client::McpConnections::start_in(project, containment, state_root);
    let names = hub.names();
    let listings = futures::future::join_all(names.iter().map(|name| {
        let hub = &hub;
        async move {
            let listed = tokio::time::timeout(INFO_MCP_WAIT, hub.list_tools(name)).await;
            (name, listed.is_err())
        }
    }))
    .await;
    let mut errors = hub.connection_errors();
    for (name, timed_out) in listings {
        if timed_out && !errors.iter().any(|e| &e.name == name) {
            errors.push(ConnectionError {
                name: name.clone(),
                message: format!(
                    "no answer to tools/list within {} s",
                    INFO_MCP_WAIT.as_secs()
                ),
            });
        }
    }
    errors.sort_by(|a, b| a.name.cmp(&b.name));
    for e in &errors {
        errln!(
            "warning: MCP connection `{}` did not list its tools, so they are not shown: {}",
            e.name,
            e.message
        );
    }
    let tools = hub
        .advertised_tools()
        .iter()
        .map(|t| (t.spec().clone(), t.source()))
        .collect();
    hub.shutdown().await;
    (errors, tools)
}

/// The arguments of `bdk run`.
struct RunOptions {
    message: String,
    session: Option<String>,
    dry_run: bool,
    as_of: Option<String>,
    record: Option<PathBuf>,
}

async fn run(dir: &Path, state_root: &Path, opts: RunOptions) -> Result<u8> {
    let RunOptions {
        message,
        session,
        dry_run,
        as_of,
        record,
    } = opts;
    let as_of = match as_of.as_deref().map(parse_as_of).transpose() {
        Ok(v) => v,
        Err(e) => {
            errln!("error: --as-of {e}");
            return Ok(UNUSABLE);
        }
    };
    let session = match session.as_deref().map(parse_session_id).transpose() {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let (host, _lock) = match open_host_or_remote(dir, state_root, record.as_deref()).await? {
        Ok(Opened::Local(host, lock)) => (host, lock),
        Ok(Opened::Remote(remote)) => {
            return remote_run(&remote, state_root, message, session, dry_run, as_of).await;
        }
        Err(code) => return Ok(code),
    };
    let recorded_before = match host.recording() {
        Some(r) => r.steps().await,
        None => 0,
    };
    let (session_id, turn_id) = match session {
        Some(id) => {
            if dry_run || as_of.is_some() {
                errln!(
                    "warning: --dry-run and --as-of apply to new sessions; the session keeps its own settings"
                );
            }
            let sent = match host
                .send(
                    &id,
                    FollowUp {
                        message,
                        ..FollowUp::default()
                    },
                )
                .await
            {
                Ok(s) => s,
                Err(e) => return host_error(&e),
            };
            (sent.session_id, sent.turn_id)
        }
        None => {
            let started = host
                .start_session(StartSession {
                    message: Some(message),
                    mode: SessionMode::Chat,
                    channel: "cli".into(),
                    dry_run,
                    as_of,
                    ..StartSession::default()
                })
                .await;
            match started {
                Ok(s) => (s.session_id, s.turn_id),
                Err(e) => return host_error(&e),
            }
        }
    };
    if let Some(turn_id) = &turn_id {
        tokio::select! {
            r = host.wait_turn(&session_id, turn_id) => { r?; }
            _ = tokio::signal::ctrl_c() => {
                errln!("interrupted: recording the turn as interrupted");
                host.shutdown(Duration::from_secs(5)).await;
            }
        }
    }
    host.wait_idle(&session_id).await;
    crate::hooks::drain(&host).await;
    let events = host.store().read(&session_id, 0).await?;
    let trace = write_trace(host.store().as_ref(), &session_id, &events).await?;
    let summary = summarize(&events);
    let ok = summary.ok;
    let mut value = serde_json::to_value(&summary)?;
    if let Value::Object(map) = &mut value {
        map.insert("trace".into(), Value::String(trace.display().to_string()));
        if let Some(r) = host.recording() {
            let steps = r.steps().await;
            map.insert(
                "recording".into(),
                json!({
                    "path": r.path().display().to_string(),
                    "steps": steps,
                    "recordedNow": steps - recorded_before,
                }),
            );
        }
    }
    print_json(&value)?;
    Ok(if ok { OK } else { FAILED })
}

/// `bdk run` through a running server: the same turn, the same summary.
async fn remote_run(
    remote: &crate::remote::Remote,
    state_root: &Path,
    message: String,
    session: Option<SessionId>,
    dry_run: bool,
    as_of: Option<DateTime<Utc>>,
) -> Result<u8> {
    let client = remote.client();
    let sent = match &session {
        Some(id) => {
            if dry_run || as_of.is_some() {
                errln!(
                    "warning: --dry-run and --as-of apply to new sessions; the session keeps its own settings"
                );
            }
            let body = FollowUpRequest::message(message, None);
            remote
                .reply(client.follow_up(id, &body).await)?
                .map(|a| (a.session_id, a.turn_id))
        }
        None => {
            let body = StartSessionRequest {
                dry_run,
                as_of: as_of.map(|t| t.to_rfc3339()),
                ..StartSessionRequest::message(message)
            };
            remote
                .reply(client.start_session(&body).await)?
                .map(|a| (a.session_id, a.turn_id))
        }
    };
    let (session_id, turn_id) = match sent {
        Ok(sent) => sent,
        Err(refusal) => return remote_error(&serde_json::to_value(refusal)?),
    };
    if let Some(turn_id) = &turn_id {
        tokio::select! {
            r = remote.wait_turn(&session_id, turn_id) => { r?; }
            _ = tokio::signal::ctrl_c() => {
                errln!("interrupted: stopping the turn on the server");
                remote.stop(&session_id).await;
            }
        }
    }
    let events = remote.events(&session_id).await?;
    let trace = write_trace_to(&state_root.join("traces"), session_id.as_str(), &events).await?;
    let summary = summarize(&events);
    let ok = summary.ok;
    let mut value = serde_json::to_value(&summary)?;
    if let Value::Object(map) = &mut value {
        map.insert("trace".into(), Value::String(trace.display().to_string()));
    }
    print_json(&value)?;
    Ok(if ok { OK } else { FAILED })
}

/// Prints a server's error answer as the local command would print a host
/// error, with the same exit codes.
fn remote_error(body: &Value) -> Result<u8> {
    print_json(body)?;
    let code = body["error"].as_str().unwrap_or_default();
    Ok(
        if code.starts_with("invalid_") || code == "payload_too_large" {
            UNUSABLE
        } else {
            FAILED
        },
    )
}

fn parse_as_of(s: &str) -> std::result::Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .map_err(|e| {
            format!("must be an RFC 3339 timestamp with a zone, like 2026-01-15T09:00:00Z ({e})")
        })
}

fn host_error(e: &HostError) -> Result<u8> {
    let mut body = json!({"ok": false, "error": e.code(), "message": e.to_string()});
    match e {
        HostError::UnknownTool { available, .. } => body["available"] = json!(available),
        HostError::InvalidToolInput { errors, .. } => body["errors"] = json!(errors),
        _ => {}
    }
    print_json(&body)?;
    Ok(match e {
        HostError::InvalidRequest(_) | HostError::InvalidToolInput { .. } => UNUSABLE,
        _ => FAILED,
    })
}

/// A JSON argument as given: inline JSON, `-` for standard input, or
/// `@FILE` for a file's content (as curl reads `-d @file`).
fn read_json_arg(flag: &str, value: &str) -> Result<Value, String> {
    let (text, from) = if value == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)
            .map_err(|e| format!("{flag} -: cannot read standard input: {e}"))?;
        (text, "standard input".to_owned())
    } else if let Some(path) = value.strip_prefix('@') {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{flag} @{path}: cannot read the file: {e}"))?;
        (text, path.to_owned())
    } else {
        (value.to_owned(), String::new())
    };
    serde_json::from_str(&text).map_err(|e| {
        if from.is_empty() {
            format!("{flag} is not valid JSON: {e}")
        } else {
            format!("{flag}: {from} is not valid JSON: {e}")
        }
    })
}

async fn call(
    dir: &Path,
    state_root: &Path,
    tool: String,
    input: &str,
    session: Option<String>,
    approve: bool,
) -> Result<u8> {
    let input: Value = match read_json_arg("--input", input) {
        Ok(v) => v,
        Err(message) => {
            errln!("error: {message}");
            return Ok(UNUSABLE);
        }
    };
    let session = match session.as_deref().map(parse_session_id).transpose() {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let (host, _lock) = match open_host_or_remote(dir, state_root, None).await? {
        Ok(Opened::Local(host, lock)) => (host, lock),
        Ok(Opened::Remote(remote)) => {
            // Through the server the call is a remote caller's: built-ins
            // need `[builtin_tools] direct`, approvals need --approve.
            let mut body = json!({"input": input, "approve": approve});
            if let Some(id) = &session {
                body["sessionId"] = json!(id);
            }
            let path = bdk_api::paths::fill(bdk_api::paths::TOOL, &[&tool]);
            let answer: Value = match remote.reply(remote.client().post(&path, &body).await)? {
                Ok(answer) => answer,
                Err(refusal) => return remote_error(&serde_json::to_value(refusal)?),
            };
            print_json(&answer)?;
            return Ok(if answer["isError"].as_bool() == Some(true) {
                FAILED
            } else {
                OK
            });
        }
        Err(code) => return Ok(code),
    };
    let outcome = host
        .call_tool(DirectCall {
            name: tool,
            input,
            session_id: session,
            // The operator at the shell: every tool of the agent.
            origin: CallOrigin::Agent,
            approve,
            ..DirectCall::default()
        })
        .await;
    crate::hooks::drain(&host).await;
    match outcome {
        Ok(o) => {
            let is_error = o.is_error;
            let mut value = serde_json::to_value(&o)?;
            if let Value::Object(map) = &mut value {
                map.insert("ok".into(), Value::Bool(true));
            }
            print_json(&value)?;
            Ok(if is_error { FAILED } else { OK })
        }
        Err(e) => host_error(&e),
    }
}

fn trajectory(path: &Path) -> Result<u8> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            errln!("error: cannot read {}: {e}", path.display());
            return Ok(UNUSABLE);
        }
    };
    let scan = match bdk_events::ndjson::scan(&bytes) {
        Ok(s) => s,
        Err(e) => {
            errln!("error: {}: {e}", path.display());
            return Ok(UNUSABLE);
        }
    };
    if scan.is_torn() {
        errln!(
            "warning: {} ends in {} bytes of an unfinished line; ignored",
            path.display(),
            scan.torn_bytes
        );
    }
    let summary = summarize(&scan.events);
    let mut value = serde_json::to_value(&summary)?;
    if let Value::Object(map) = &mut value {
        map.insert("trace".into(), Value::String(path.display().to_string()));
    }
    print_json(&value)?;
    Ok(OK)
}

async fn sessions(state_root: &Path, json: bool) -> Result<u8> {
    let json = crate::support::wants_json(json);
    if !state_root.exists() {
        if json {
            print_json(&json!([]))?;
        } else {
            outln!("no sessions under {}", state_root.display());
        }
        return Ok(OK);
    }
    let store = FsStore::open(state_root)?;
    let mut rows = Vec::new();
    for r in store.list_sessions().await? {
        // A session whose log cannot be read is listed as such, with the
        // reason, and never hides the others.
        let (status, count, problem) = match store.read(&r.id, 0).await {
            Ok(events) => (session_state(&events).as_str(), json!(events.len()), None),
            Err(e @ bdk_store::StoreError::Corrupt { .. }) => {
                ("corrupt", Value::Null, Some(e.to_string()))
            }
            Err(e) => ("unreadable", Value::Null, Some(e.to_string())),
        };
        let mut row = json!({
            "sessionId": r.id,
            "mode": r.mode,
            "channel": r.channel,
            "title": r.title,
            "principal": r.principal,
            "createdAt": r.created_at,
            "status": status,
            "events": count,
        });
        if let Some(problem) = problem {
            row["problem"] = json!(problem);
        }
        rows.push(row);
    }
    if json {
        print_json(&rows)?;
    } else {
        for row in &rows {
            let events = row["events"]
                .as_u64()
                .map_or_else(|| "-".to_owned(), |n| n.to_string());
            let problem = row["problem"]
                .as_str()
                .map(|p| format!("  ({p})"))
                .unwrap_or_default();
            outln!(
                "{}  {:<9} {:<5} {:>5} events  {}{problem}",
                row["sessionId"].as_str().unwrap_or_default(),
                row["status"].as_str().unwrap_or_default(),
                row["mode"].as_str().unwrap_or_default(),
                events,
                row["createdAt"].as_str().unwrap_or_default()
            );
        }
        if rows.is_empty() {
            outln!("no sessions under {}", state_root.display());
        }
    }
    Ok(OK)
}

async fn session(state_root: &Path, id: &str, raw: bool) -> Result<u8> {
    let id = match parse_session_id(id) {
        Ok(id) => id,
        Err(code) => return Ok(code),
    };
    let store = FsStore::open(state_root)?;
    let Some(record) = store.get_session(&id).await? else {
        print_json(
            &json!({"ok": false, "error": "session_not_found", "message": format!("session {id} not found under {}", state_root.display())}),
        )?;
        return Ok(FAILED);
    };
    let events = match store.read(&id, 0).await {
        Ok(events) => events,
        Err(e @ bdk_store::StoreError::Corrupt { .. }) => {
            print_json(&json!({
                "ok": false,
                "error": "session_corrupt",
                "message": format!("{e}; repair the file or delete the session's directory"),
            }))?;
            return Ok(FAILED);
        }
        Err(e) => return Err(e.into()),
    };
    if raw {
        for e in &events {
            outln!("{}", e.to_line()?);
        }
        return Ok(OK);
    }
    print_json(&json!({
        "session": record,
        "status": session_state(&events).as_str(),
        "events": events.len(),
        "workspace": store.workspace_dir(&id),
        "trajectory": summarize(&events),
    }))?;
    Ok(OK)
}
