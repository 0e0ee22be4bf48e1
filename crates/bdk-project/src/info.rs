//! The machine-readable surface of a project: what `bdk info --json` prints
//! and `GET /v1/info` serves, in one shape.
//!
//! [`surface`] describes what the folder declares; [`add_tools`] adds the
//! tools only a running host knows (advertised MCP tools, native tools), so
//! every listing shows every tool the model gets, each with its `source`.

use bdk_api::paths;
use serde_json::{Value, json};

use super::{Diagnostic, Project, ToolRunner, rel_path};
use crate::gate::GateSpec;
use crate::tool::{ToolSource, ToolSpec};

/// One tool as the surface lists it (manifest tools add `runner` and `file`).
fn tool_json(spec: &ToolSpec, source: &ToolSource) -> Value {
    json!({
        "name": spec.name,
        "title": spec.title,
        "description": spec.description,
        "effect": spec.effect,
        "execution": spec.execution,
        "needsApproval": spec.needs_approval,
        "timeoutMs": spec.timeout_ms,
        "inputSchema": spec.input_schema,
        "outputSchema": spec.output_schema,
        "source": source,
    })
}

/// `routes`, `github` or `slack`.
fn channel_kind(ch: &super::ChannelManifest) -> &'static str {
    if ch.github.is_some() {
        "github"
    } else if ch.slack.is_some() {
        "slack"
    } else {
        "routes"
    }
}

/// The routes of a channel as objects: method, path (relative to the
/// channel), the full path under the agent's base path, the description,
/// the session mode, and the body and query schemas, null when undeclared.
/// A channel route declares no output schema: it answers the fixed shape
/// of a channel delivery.
fn channel_routes(ch: &super::ChannelManifest) -> Vec<Value> {
    if ch.slack.is_some() {
        // The pack serves one route: Slack's events and interactivity.
        return vec![json!({
            "method": "POST",
            "path": "/",
            "fullPath": paths::fill(paths::CHANNEL, &[&ch.name]),
            "description": "Slack Events API and interactivity requests",
            "mode": "chat",
            "bodySchema": null,
            "querySchema": null,
        })];
    }
    if ch.github.is_some() {
        // The pack serves one route: GitHub's webhook deliveries.
        return vec![json!({
            "method": "POST",
            "path": "/",
            "fullPath": paths::fill(paths::CHANNEL, &[&ch.name]),
            "description": "GitHub webhook deliveries",
            "mode": "chat",
            "bodySchema": null,
            "querySchema": null,
        })];
    }
    ch.routes
        .iter()
        .map(|r| {
            let channel = paths::fill(paths::CHANNEL, &[&ch.name]);
            let full = if r.path == "/" {
                channel
            } else {
                format!("{channel}{}", r.path)
            };
            json!({
                "method": r.method,
                "path": r.path,
                "fullPath": full,
                "description": r.description,
                "mode": r.mode,
                "bodySchema": r.body_schema,
                "querySchema": r.query_schema,
            })
        })
        .collect()
}

/// Adds to `surface["tools"]` the tools the folder does not declare:
/// advertised MCP tools (`source: "mcp:<connection>"`) and native tools.
/// Built-ins (summarized under `builtinTools`), manifest tools (listed by
/// [`surface`]) and a tool named like one of those or like `task` (which
/// the host never gives the model) are left out.
pub fn add_tools(surface: &mut Value, project: &Project, tools: &[(ToolSpec, ToolSource)]) {
    let builtins = super::discover::builtin_tool_names(project);
    let Some(list) = surface.get_mut("tools").and_then(Value::as_array_mut) else {
        return;
    };
    for (spec, source) in tools {
        if matches!(source, ToolSource::Builtin | ToolSource::Manifest)
            || spec.name == crate::tool::TASK_TOOL
            || builtins.contains(&spec.name)
            || list.iter().any(|t| t["name"] == spec.name.as_str())
        {
            continue;
        }
        list.push(tool_json(spec, source));
    }
}

/// One result gate as the surface lists it (programs add `file`).
fn gate_json(spec: &GateSpec, source: &str) -> Value {
    json!({
        "name": spec.name,
        "description": spec.description,
        "maxAttempts": spec.max_attempts,
        "timeoutMs": u64::try_from(spec.timeout.as_millis()).unwrap_or(u64::MAX),
        "onError": spec.on_error,
        "source": source,
    })
}

/// Adds to `surface["gates"]` the Rust gates of a host (`source:
/// "native"`), which replace programs of the same name as they do in the
/// host, keeping the list in the order gates run (by name).
pub fn add_gates(surface: &mut Value, native: &[GateSpec]) {
    let Some(list) = surface.get_mut("gates").and_then(Value::as_array_mut) else {
        return;
    };
    for spec in native {
        list.retain(|g| g["name"] != spec.name.as_str());
        list.push(gate_json(spec, "native"));
    }
    list.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
}

/// The project's surface as JSON.
pub fn surface(project: &Project, diagnostics: &[Diagnostic]) -> Value {
    let mut out = declared_surface(project, diagnostics);
    // Only agents that publish resources say so, which keeps the report of
    // every other agent as it was.
    let r = &project.resources;
    if !r.is_empty() {
        out["resources"] = json!(
            r.resources
                .iter()
                .map(|r| json!({
                    "uri": r.uri,
                    "name": r.name,
                    "title": r.title,
                    "mimeType": r.mime_type,
                    "file": r.file,
                }))
                .collect::<Vec<_>>()
        );
        out["resourceTemplates"] = json!(
            r.templates
                .iter()
                .map(|t| json!({
                    "uriTemplate": t.uri_template,
                    "name": t.name,
                    "title": t.title,
                    "mimeType": t.mime_type,
                    "tool": t.tool,
                }))
                .collect::<Vec<_>>()
        );
    }
    out
}

fn declared_surface(project: &Project, diagnostics: &[Diagnostic]) -> Value {
    let rel = |p: &std::path::Path| rel_path(&project.root, p);
    let c = &project.config;
    json!({
        "name": project.name,
        "description": c.description,
        "model": c.model,
        "effort": c.effort,
        "maxSteps": c.max_steps,
        "maxRunningTurns": c.max_running_turns,
        "builtinTools": c.builtin_tools,
        "instructions": {
            "files": project.instruction_files.iter().map(|p| rel(p)).collect::<Vec<_>>(),
            "chars": project.instructions.chars().count(),
        },
        "tools": project.tools.iter().map(|t| {
            let mut tool = tool_json(&t.spec, &ToolSource::Manifest);
            tool["runner"] = json!(match &t.runner {
                ToolRunner::Command { .. } => "command",
                ToolRunner::Url { .. } => "url",
                ToolRunner::Script { .. } => "script",
            });
            tool["file"] = json!(rel(&t.path));
            tool
        }).collect::<Vec<_>>(),
        "skills": project.skills.iter().map(|s| {
            let mut skill = json!({
                "name": s.name,
                "description": s.description,
                "form": s.form,
                "file": rel(&s.path),
                "files": s.files.keys().collect::<Vec<_>>(),
            });
            // Only skills served with arguments say so, which keeps the
            // report of every other agent as it was.
            if !s.arguments.is_empty() {
                skill["arguments"] = json!(s.arguments);
            }
            if !s.attachments.is_empty() {
                skill["attachments"] = json!(s.attachments);
            }
            skill
        }).collect::<Vec<_>>(),
        "subagents": project.subagents.iter().map(|s| json!({
            "name": s.name,
            "description": s.description,
            "model": s.config.model,
        })).collect::<Vec<_>>(),
        // Filled in by whoever runs the connections (the host); a bare
        // project has not tried any yet.
        "connectionErrors": [],
        "mcpConnections": project.mcp_connections.iter().map(|m| json!({
            "name": m.name,
            "transport": match &m.transport {
                super::McpTransport::Stdio { .. } => "stdio",
                super::McpTransport::Http { .. } => "http",
            },
            "advertiseTools": m.advertise_tools,
        })).collect::<Vec<_>>(),
        "channels": project.channels.iter().map(|ch| json!({
            "name": ch.name,
            "kind": channel_kind(ch),
            "description": ch.description,
            "routes": channel_routes(ch),
        })).collect::<Vec<_>>(),
        "hooks": project.hooks.iter().map(|h| json!({
            "name": h.name,
            "events": h.events,
            "target": match &h.target {
                super::HookTarget::Command { .. } => "command",
                super::HookTarget::Url { .. } => "url",
                super::HookTarget::File { .. } => "file",
            },
        })).collect::<Vec<_>>(),
        "schedules": project.schedules.iter().map(|s| json!({
            "name": s.name,
            "cron": s.cron,
            "kind": match &s.action {
                super::ScheduleAction::Prompt { .. } => "prompt",
                super::ScheduleAction::Handoff { .. } => "handoff",
                super::ScheduleAction::Tool { .. } => "tool",
                super::ScheduleAction::Handler { .. } => "handler",
            },
        })).collect::<Vec<_>>(),
        "gates": project.gates.iter().map(|g| {
            let mut gate = gate_json(&g.spec, "program");
            gate["file"] = json!(rel(&g.path));
            gate
        }).collect::<Vec<_>>(),
        "experiments": project.experiments.iter().map(|e| json!({
            "name": e.name,
            "description": e.description,
            "unit": e.unit,
            "enabled": e.enabled,
            "file": rel(&e.path),
            "arms": e.arms.iter().map(|a| json!({
                "name": a.name,
                "weight": a.weight,
                "instructions": a.instructions_file.as_deref().map(&rel),
                "model": a.model,
                "effort": a.effort,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "sandboxFiles": project.sandbox_files.iter().map(|f| &f.workspace_path).collect::<Vec<_>>(),
        "scriptedRules": project.scripted_rules.keys().collect::<Vec<_>>(),
        "evals": project.evals_dir.is_some(),
        "diagnostics": diagnostics,
    })
}
