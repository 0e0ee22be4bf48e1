//! The machine-readable surface of a project: what `bdk info --json` prints
//! and `GET /v1/info` serves, in one shape.

use serde_json::{Value, json};

use super::{Diagnostic, Project, ToolRunner, rel_path};

/// The project's surface as JSON.
pub fn surface(project: &Project, diagnostics: &[Diagnostic]) -> Value {
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
        "tools": project.tools.iter().map(|t| json!({
            "name": t.spec.name,
            "description": t.spec.description,
            "effect": t.spec.effect,
            "execution": t.spec.execution,
            "needsApproval": t.spec.needs_approval,
            "timeoutMs": t.spec.timeout_ms,
            "inputSchema": t.spec.input_schema,
            "outputSchema": t.spec.output_schema,
            "runner": match &t.runner {
                ToolRunner::Command { .. } => "command",
                ToolRunner::Url { .. } => "url",
                ToolRunner::Script { .. } => "script",
            },
            "file": rel(&t.path),
        })).collect::<Vec<_>>(),
        "skills": project.skills.iter().map(|s| json!({
            "name": s.name,
            "description": s.description,
            "form": s.form,
            "file": rel(&s.path),
            "files": s.files.keys().collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
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
            "routes": ch.routes,
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
            },
        })).collect::<Vec<_>>(),
        "sandboxFiles": project.sandbox_files.iter().map(|f| &f.workspace_path).collect::<Vec<_>>(),
        "scriptedRules": project.scripted_rules.keys().collect::<Vec<_>>(),
        "evals": project.evals_dir.is_some(),
        "diagnostics": diagnostics,
    })
}
