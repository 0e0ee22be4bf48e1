//! The discovery walk: finds the agent folder, visits every discovery folder
//! in it, and assembles a [`Project`] plus every [`Diagnostic`] found.
//!
//! Each folder has its own submodule; this one owns the root layout (which
//! entries belong in `agent/`), subagents, the sandbox seed files, the
//! scripted-model rules files, and the final assembly. Problems never stop
//! the walk: a broken manifest is reported and left out of the project.
//!
//! [`Diagnostic`]: super::Diagnostic

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::{AgentConfig, Discovery, Project, SandboxFile, Subagent};

mod agent;
mod experiments;
mod frontmatter;
mod gates;
mod github;
mod handler;
mod resources;
mod schedules;
mod skill_arguments;
mod skill_attachments;
mod skills;
mod slack;
mod surfaces;
mod tools;
mod util;

use agent::{
    TemplateAgent, check_scripted_rules, is_instructions_entry, load_instructions, parse_config,
};
use util::{Diags, Kind, is_slug, list_dir, path_kind, read_text, read_toml, report_other};

/// The folders `discover` walks (besides instructions, which the
/// instructions loader owns).
const FOLDERS: &[&str] = &[
    "tools",
    "skills",
    "subagents",
    "mcp-connections",
    "channels",
    "hooks",
    "schedules",
    "sandbox",
    "scripted",
    "gates",
    "experiments",
];

/// Discovers the project in `dir` (the folder holding `agent/`).
///
/// Never panics and never stops at the first problem: every problem found is
/// in [`Discovery::diagnostics`], sorted by file then message. The project is
/// `None` only when there is no agent folder to read.
pub fn discover(dir: &Path) -> Discovery {
    let root = match fs::canonicalize(dir) {
        Ok(root) => root,
        Err(e) => {
            let mut d = Diags::new(PathBuf::new());
            d.error(
                dir,
                format!("cannot open the project directory: {e}"),
                "pass the path of a folder that contains agent/",
            );
            return Discovery {
                project: None,
                diagnostics: d.into_sorted(),
            };
        }
    };
    let mut d = Diags::new(root.clone());
    let project = discover_in(&mut d, &root);
    Discovery {
        project,
        diagnostics: d.into_sorted(),
    }
}

/// Picks `agent/` (canonical) or `bot/` (alias).
fn agent_dir(d: &mut Diags, root: &Path) -> Option<PathBuf> {
    let agent = root.join("agent");
    let bot = root.join("bot");
    let has_agent = path_kind(&agent) == Some(Kind::Dir);
    let has_bot = path_kind(&bot) == Some(Kind::Dir);
    match (has_agent, has_bot) {
        (true, true) => {
            d.error(
                &bot,
                "both agent/ and bot/ exist; agent/ is used and bot/ is ignored",
                "merge bot/ into agent/ and delete bot/",
            );
            Some(agent)
        }
        (true, false) => Some(agent),
        (false, true) => {
            if path_kind(&agent).is_some() {
                d.warn(
                    &agent,
                    "agent is not a directory; bot/ is used",
                    "remove or rename the `agent` file so the agent folder is unambiguous",
                );
            }
            Some(bot)
        }
        (false, false) => {
            if path_kind(&agent).is_some() {
                d.error(
                    &agent,
                    "agent is not a directory",
                    "replace it with an agent/ folder holding instructions.md",
                );
            } else {
                d.error(
                    &agent,
                    "no agent/ folder in the project directory",
                    "create agent/ with an instructions.md (bot/ is accepted as an alias)",
                );
            }
            None
        }
    }
}

fn discover_in(d: &mut Diags, root: &Path) -> Option<Project> {
    let agent_dir = agent_dir(d, root)?;
    let dir_label = agent_dir
        .file_name()
        .map_or_else(|| "agent".to_owned(), |n| n.to_string_lossy().into_owned());

    // Root layout: every entry is either ours, lib/, or a stray.
    let mut folders: BTreeMap<&str, PathBuf> = BTreeMap::new();
    for entry in list_dir(d, &agent_dir) {
        let name = entry.name.as_str();
        if let Some(folder) = FOLDERS.iter().find(|f| **f == name) {
            match entry.kind {
                Kind::Dir => {
                    folders.insert(folder, entry.path.clone());
                }
                _ => d.error(
                    &entry.path,
                    format!("expected a directory, found a file: {name}/ is a discovery folder"),
                    format!("replace it with a {name}/ folder, or rename it"),
                ),
            }
            continue;
        }
        match name {
            // `recordings/` holds model recordings for `replay/` models; like
            // `lib/`, it is never discovered. `resources/` holds the files
            // `resources.toml` serves, which checks it.
            "agent.toml" | "scripted.toml" | "resources.toml" | "lib" | "recordings" => {}
            "resources" if entry.is_dir() => {}
            _ if is_instructions_entry(name) => {}
            "evals" => d.warn(
                &entry.path,
                format!("evals/ inside {dir_label}/ is ignored: evals live at the project root"),
                format!("move {dir_label}/evals/ to evals/ next to {dir_label}/"),
            ),
            _ if entry.kind == Kind::Other => report_other(d, &entry),
            _ if experiments::is_script_root(name, entry.kind) => {
                experiments::report_script_root(d, &entry.path, entry.is_dir());
            }
            _ => d.warn(
                &entry.path,
                format!("stray entry in {dir_label}/: `{name}` is not part of the agent layout"),
                "move shared code to lib/, put the file in the folder it belongs to, or remove it",
            ),
        }
    }

    let scripted_rules = scripted_rules(d, &agent_dir, folders.get("scripted"));

    let config_path = agent_dir.join("agent.toml");
    let config = match path_kind(&config_path) {
        Some(_) => read_toml(d, &config_path)
            .map(|t| parse_config(d, &config_path, &t, root))
            .unwrap_or_default(),
        None => AgentConfig::default(),
    };
    let name = config.name.clone().unwrap_or_else(|| {
        root.file_name()
            .map_or_else(|| "agent".to_owned(), |n| n.to_string_lossy().into_owned())
    });
    let instructions = load_instructions(
        d,
        &agent_dir,
        &TemplateAgent {
            name: &name,
            description: config.description.as_deref(),
            model: config.model.as_deref(),
        },
    );
    if let Some(model) = &config.model {
        check_scripted_rules(d, &config_path, model, &agent_dir, &scripted_rules);
    }

    let tools = folders
        .get("tools")
        .map(|p| tools::discover(d, p))
        .unwrap_or_default();
    let skills = folders
        .get("skills")
        .map(|p| skills::discover(d, p))
        .unwrap_or_default();
    let subagents = folders
        .get("subagents")
        .map(|p| subagents(d, p, root, &agent_dir, &scripted_rules))
        .unwrap_or_default();
    let mcp_connections = folders
        .get("mcp-connections")
        .map(|p| surfaces::mcp_connections(d, p))
        .unwrap_or_default();
    let channels = folders
        .get("channels")
        .map(|p| surfaces::channels(d, p))
        .unwrap_or_default();
    let hooks = folders
        .get("hooks")
        .map(|p| surfaces::hooks(d, p))
        .unwrap_or_default();
    // Hand-off schedules must name a channel manifest; compare against every
    // manifest file (even a broken one) so one broken channel is one problem.
    let channel_names = folders
        .get("channels")
        .map(|p| manifest_stems(p))
        .unwrap_or_default();
    check_direct_builtins(d, &config_path, &config, !skills.is_empty());
    check_tool_collisions(
        d,
        &config,
        &tools,
        !skills.is_empty(),
        !subagents.is_empty(),
    );
    let schedule_targets = schedules::Targets {
        channels: channel_names,
        tools: schedules::known_tools(&config, &tools, !skills.is_empty()),
        mcp_advertises: mcp_connections.iter().any(|m| m.advertise_tools),
    };
    let schedules = folders
        .get("schedules")
        .map(|p| schedules::discover(d, p, &schedule_targets))
        .unwrap_or_default();
    let builtins = enabled_builtins(&config, !skills.is_empty());
    let resources = resources::discover(
        d,
        &agent_dir,
        &resources::Tools {
            targets: &schedule_targets,
            builtins: &builtins,
            direct: &config.builtin_tools.direct,
        },
    );
    let gates = folders
        .get("gates")
        .map(|p| gates::discover(d, p))
        .unwrap_or_default();
    let sandbox_files = folders
        .get("sandbox")
        .map(|p| sandbox(d, p))
        .unwrap_or_default();
    let experiments = folders
        .get("experiments")
        .map(|p| {
            let models = experiments::ModelContext {
                agent_dir: &agent_dir,
                rules: &scripted_rules,
            };
            experiments::discover(d, p, &models)
        })
        .unwrap_or_default();

    let evals = root.join("evals");
    let evals_dir = (path_kind(&evals) == Some(Kind::Dir)).then_some(evals);

    Some(Project {
        root: root.to_owned(),
        agent_dir,
        name,
        config,
        instructions: instructions.text,
        instruction_files: instructions.files,
        tools,
        skills,
        subagents,
        mcp_connections,
        channels,
        hooks,
        schedules,
        gates,
        sandbox_files,
        scripted_rules,
        evals_dir,
        experiments,
        resources,
    })
}

/// The stems of the `.toml` files directly in `dir`, read quietly (the
/// folder's own walk reports its problems).
fn manifest_stems(dir: &Path) -> BTreeSet<String> {
    let Ok(read) = fs::read_dir(dir) else {
        return BTreeSet::new();
    };
    read.filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".toml")
                .map(str::to_owned)
        })
        .collect()
}

/// `scripted.toml` (rules `default`) and `scripted/<name>.toml`, each checked
/// by the scripted provider's own parser so `bdk validate` reports what a
/// turn would trip over.
fn scripted_rules(
    d: &mut Diags,
    agent_dir: &Path,
    folder: Option<&PathBuf>,
) -> BTreeMap<String, PathBuf> {
    let mut rules = BTreeMap::new();
    let default = agent_dir.join("scripted.toml");
    if path_kind(&default).is_some() {
        check_rules(d, &default);
        rules.insert("default".to_owned(), default);
    }
    let Some(folder) = folder else {
        return rules;
    };
    for entry in list_dir(d, folder) {
        let (stem, ext) = entry.stem_ext();
        match (entry.kind, ext) {
            (Kind::File, Some("toml")) => {
                if !is_slug(stem, 64) {
                    d.error(
                        &entry.path,
                        format!("rules name `{stem}` is invalid"),
                        "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
                    );
                    continue;
                }
                check_rules(d, &entry.path);
                if rules.contains_key(stem) {
                    d.error(
                        &entry.path,
                        "scripted rules `default` are defined twice (scripted.toml and scripted/default.toml)",
                        "keep only one of the two files",
                    );
                    continue;
                }
                rules.insert(stem.to_owned(), entry.path.clone());
            }
            (Kind::Other, _) => report_other(d, &entry),
            _ => d.warn(
                &entry.path,
                "stray entry in scripted/: only <name>.toml rules files are read",
                "rename it to <name>.toml or remove it",
            ),
        }
    }
    rules
}

/// Reports a rules file's TOML errors (with line and column), then what the
/// scripted provider's parser finds wrong in its rules.
fn check_rules(d: &mut Diags, path: &Path) {
    if read_toml(d, path).is_none() {
        return;
    }
    let Some(text) = read_text(d, path) else {
        return;
    };
    if let Err(e) = bdk_models::scripted::RulesFile::parse(&text, path) {
        let full = e.to_string();
        let origin = format!("{}: ", path.display());
        let message = full.strip_prefix(&origin).unwrap_or(&full).to_owned();
        d.error(
            path,
            message,
            "correct the rule; docs/project-layout.md describes the rules file",
        );
    }
}

/// Entries a subagent folder may hold besides its instructions.
const SUBAGENT_INHERITED: &[&str] = &["tools", "skills", "mcp-connections"];

/// Discovers `subagents/<name>/`, sorted by name.
fn subagents(
    d: &mut Diags,
    dir: &Path,
    root: &Path,
    agent_dir: &Path,
    rules: &BTreeMap<String, PathBuf>,
) -> Vec<Subagent> {
    let mut out = Vec::new();
    for entry in list_dir(d, dir) {
        match entry.kind {
            Kind::Dir => {}
            Kind::Other => {
                report_other(d, &entry);
                continue;
            }
            Kind::File => {
                d.warn(
                    &entry.path,
                    "stray file in subagents/: each subagent is a folder",
                    "move it into subagents/<name>/ (agent.toml and instructions.md), or remove it",
                );
                continue;
            }
        }
        let name = entry.name.clone();
        if !is_slug(&name, 64) {
            d.error(
                &entry.path,
                format!("subagent name `{name}` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
            continue;
        }
        if let Some(s) = subagent(d, &entry.path, name, root, agent_dir, rules) {
            out.push(s);
        }
    }
    out
}

fn subagent(
    d: &mut Diags,
    dir: &Path,
    name: String,
    root: &Path,
    agent_dir: &Path,
    rules: &BTreeMap<String, PathBuf>,
) -> Option<Subagent> {
    let errors_before = d.error_count();
    for entry in list_dir(d, dir) {
        let n = entry.name.as_str();
        if n == "agent.toml" || is_instructions_entry(n) {
            continue;
        }
        if n == "subagents" {
            d.error(
                &entry.path,
                "nested subagents are not supported",
                "move the nested subagent up to the parent's subagents/ folder",
            );
        } else if SUBAGENT_INHERITED.contains(&n) {
            d.warn(
                &entry.path,
                format!("{n}/ in a subagent is ignored: subagents use the parent's tools, skills and connections"),
                format!("move its contents to the parent's {n}/ folder and remove this one"),
            );
        } else if entry.kind == Kind::Other {
            report_other(d, &entry);
        } else {
            d.warn(
                &entry.path,
                format!("stray entry in subagent `{name}`: a subagent holds agent.toml and its instructions"),
                "move it to the parent agent or remove it",
            );
        }
    }
    let config_path = dir.join("agent.toml");
    let config = if path_kind(&config_path).is_some() {
        read_toml(d, &config_path).map(|t| {
            let config = parse_config(d, &config_path, &t, root);
            if config.name.is_some() {
                d.warn(
                    &config_path,
                    "`name` is ignored for subagents: the folder name is the subagent's name",
                    "remove `name`, or rename the folder",
                );
            }
            if !t.contains_key("description") {
                d.error(
                    &config_path,
                    "missing `description` (required for subagents)",
                    "add `description = \"...\"`: a routing rule saying when the parent should delegate here",
                );
            } else if config.description.as_deref().is_some_and(|s| s.trim().is_empty()) {
                d.error(
                    &config_path,
                    "`description` is empty (required for subagents)",
                    "write a routing rule saying when the parent should delegate here",
                );
            }
            config
        })
    } else {
        d.error(
            &config_path,
            "missing agent.toml: subagents need a description",
            "create agent.toml with `description = \"...\"`, a routing rule for the parent",
        );
        None
    };
    let config = config.unwrap_or_default();
    if let (Some(model), true) = (&config.model, path_kind(&config_path).is_some()) {
        check_scripted_rules(d, &config_path, model, agent_dir, rules);
    }
    let instructions = load_instructions(
        d,
        dir,
        &TemplateAgent {
            name: &name,
            description: config.description.as_deref(),
            model: config.model.as_deref(),
        },
    );
    if d.error_count() > errors_before {
        return None;
    }
    Some(Subagent {
        name,
        description: config.description.clone()?,
        config,
        instructions: instructions.text,
        dir: dir.to_owned(),
    })
}

/// Files under `sandbox/workspace/`, sorted by workspace path.
fn sandbox(d: &mut Diags, dir: &Path) -> Vec<SandboxFile> {
    let mut out = Vec::new();
    for entry in list_dir(d, dir) {
        if entry.name == "workspace" && entry.is_dir() && !entry.symlink {
            walk_workspace(d, &entry.path, "", &mut out);
        } else if entry.name == "workspace" {
            d.error(
                &entry.path,
                "sandbox/workspace must be a directory",
                "make sandbox/workspace/ a folder of seed files",
            );
        } else {
            d.warn(
                &entry.path,
                "stray entry in sandbox/: only sandbox/workspace/ is seeded",
                "move it under sandbox/workspace/ to seed it, or remove it",
            );
        }
    }
    out.sort_by(|a, b| a.workspace_path.cmp(&b.workspace_path));
    out
}

fn walk_workspace(d: &mut Diags, dir: &Path, prefix: &str, out: &mut Vec<SandboxFile>) {
    for entry in list_dir(d, dir) {
        let rel = format!("{prefix}{}", entry.name);
        if entry.symlink {
            // A seed symlink could copy files from anywhere on the host into
            // every session workspace, so it is never followed.
            d.warn(
                &entry.path,
                "symlink in the sandbox is skipped",
                "replace the symlink with a copy of the file",
            );
            continue;
        }
        match entry.kind {
            Kind::File => out.push(SandboxFile {
                workspace_path: rel,
                source: entry.path.clone(),
            }),
            Kind::Dir => walk_workspace(d, &entry.path, &format!("{rel}/"), out),
            Kind::Other => report_other(d, &entry),
        }
    }
}

/// The names of the built-in tools the agent has (its `[builtin_tools]`,
/// and `load_skill` when it has skills).
pub(crate) fn builtin_tool_names(project: &crate::Project) -> BTreeSet<String> {
    enabled_builtins(&project.config, !project.skills.is_empty())
}

/// The names of the built-ins `config` turns on: the runtime's own and the
/// reminder tools an extension adds.
fn enabled_builtins(config: &crate::AgentConfig, has_skills: bool) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = schedules::known_tools(config, &[], has_skills)
        .into_keys()
        .collect();
    if config.builtin_tools.reminders {
        names.extend(crate::REMINDER_TOOLS.iter().map(|n| (*n).to_owned()));
    }
    names
}

/// `[builtin_tools] direct` may only name built-ins the agent has.
/// A tool manifest named like an enabled built-in would replace it, and one
/// named `task` would never reach the model (the name is the subagent
/// delegation tool's). Both are errors, never a silent choice.
fn check_tool_collisions(
    d: &mut Diags,
    config: &crate::AgentConfig,
    tools: &[crate::ToolManifest],
    has_skills: bool,
    has_subagents: bool,
) {
    let enabled = enabled_builtins(config, has_skills);
    for tool in tools {
        let name = tool.spec.name.as_str();
        if name == crate::tool::TASK_TOOL {
            let why = if has_subagents {
                "the model delegates to agent/subagents/ through it"
            } else {
                "it delegates to subagents"
            };
            d.error(
                &tool.path,
                format!("tool `task` collides with the built-in `task` tool ({why}), so the model would never get it"),
                "rename the tool (its file and `name`); `task` is reserved",
            );
            continue;
        }
        if !enabled.contains(name) {
            continue;
        }
        let fix = match name {
            "shell" => "rename the tool, or turn the built-in off with `shell = false` under [builtin_tools] in agent/agent.toml".to_owned(),
            "tag_artifact" => "rename the tool, or turn the built-in off with `artifacts = false` under [builtin_tools] in agent/agent.toml".to_owned(),
            "load_skill" => "rename the tool: `load_skill` is how the model reads the agent's skills".to_owned(),
            n if n.starts_with("reminders_") => "rename the tool, or turn the built-ins off with `reminders = false` under [builtin_tools] in agent/agent.toml".to_owned(),
            _ => "rename the tool, or turn the workspace built-ins off with `workspace = false` under [builtin_tools] in agent/agent.toml".to_owned(),
        };
        d.error(
            &tool.path,
            format!("tool `{name}` collides with the built-in tool of the same name"),
            fix,
        );
    }
}

fn check_direct_builtins(
    d: &mut Diags,
    path: &Path,
    config: &crate::AgentConfig,
    has_skills: bool,
) {
    let enabled = enabled_builtins(config, has_skills);
    for name in &config.builtin_tools.direct {
        if !enabled.contains(name) {
            let mut names: Vec<&str> = enabled.iter().map(String::as_str).collect();
            names.sort_unstable();
            d.error(
                path,
                format!("`builtin_tools.direct` names `{name}`, which is not an enabled built-in tool"),
                format!(
                    "list only enabled built-ins ({}); manifest and MCP tools are callable directly without it",
                    names.join(", ")
                ),
            );
        }
    }
}
