#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Session workspace: path confinement, `workspaceFiles`, and seeding a new
//! workspace from a project.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bdk_core::Project;
use bdk_core::project::{AgentConfig, SandboxFile, Skill, SkillForm, ToolManifest, ToolRunner};
use bdk_core::tool::{Effect, Execution, ToolSpec};
use bdk_core::workspace::{self, Rel, Tree, TreeRoot, Trees, WorkspaceError};
use serde_json::json;

fn check_rejected(root: &Path, rel: &str) {
    match workspace::resolve(root, rel) {
        Err(WorkspaceError::InvalidPath { .. } | WorkspaceError::Escapes { .. }) => {}
        other => panic!("{rel:?} should be rejected, got {other:?}"),
    }
}

#[test]
fn resolve_rejects_paths_that_leave_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    for rel in [
        "",
        "../x",
        "..",
        "/etc/passwd",
        "a/../../x",
        "a/b/../../../x",
        "..\\x",
        "a\\b",
        "C:/x",
        "c:x",
        "a\0b",
    ] {
        check_rejected(root, rel);
    }
}

#[test]
fn resolve_accepts_relative_paths_and_normalizes_them() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    assert_eq!(workspace::resolve(root, "a/./b").unwrap(), root.join("a/b"));
    assert_eq!(workspace::resolve(root, "a/../b").unwrap(), root.join("b"));
    assert_eq!(
        workspace::resolve(root, "./x.txt").unwrap(),
        root.join("x.txt")
    );
    assert_eq!(workspace::resolve(root, ".").unwrap(), root.to_path_buf());
    assert_eq!(
        workspace::resolve(root, "new/dir/file").unwrap(),
        root.join("new/dir/file")
    );
    // A root that does not exist yet has nothing in it to follow.
    let missing = root.join("not-yet");
    assert_eq!(
        workspace::resolve(&missing, "a/b").unwrap(),
        missing.join("a/b")
    );
}

#[test]
fn resolve_looks_at_no_file() {
    // Where a path leads on disk is judged when it is opened beneath the
    // root (the tree's own tests); the front door is lexical only.
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    assert_eq!(
        workspace::resolve(root, "out/secret").unwrap(),
        root.join("out/secret")
    );
}

#[test]
fn opening_refuses_symlinks_that_point_outside() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "x").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret"), root.join("secret-link")).unwrap();
    // Dangling: a write through it would create a file outside.
    std::os::unix::fs::symlink(outside.path().join("new-file"), root.join("dangling")).unwrap();
    let tree = Tree::open(root, None).unwrap();
    let rel = |s: &str| Rel::parse(s).unwrap();
    let escapes = |r: Result<(), WorkspaceError>| matches!(r, Err(WorkspaceError::Escapes { .. }));
    assert!(escapes(tree.check_beneath(&rel("out"))));
    assert!(escapes(tree.read(&rel("out/secret"), 10).map(|_| ())));
    assert!(escapes(tree.write(&rel("out/new/file.txt"), b"x")));
    assert!(escapes(tree.read(&rel("secret-link"), 10).map(|_| ())));
    assert!(escapes(tree.write(&rel("dangling"), b"x")));
    assert!(!outside.path().join("new-file").exists());

    // Relative links that stay inside are followed; an absolute link is
    // refused even when it names a place inside (the kernel resolves
    // beneath the root, where `/` is out of reach).
    std::fs::create_dir(root.join("real")).unwrap();
    std::os::unix::fs::symlink("real", root.join("alias")).unwrap();
    std::os::unix::fs::symlink(root.join("real"), root.join("absolute")).unwrap();
    assert!(escapes(tree.write(&rel("absolute/f"), b"x")));
    tree.write(&rel("alias/f"), b"through the alias").unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("real/f")).unwrap(),
        "through the alias"
    );
}

fn tree_root(root: &Path) -> TreeRoot {
    Trees::new().root(root)
}

#[tokio::test]
async fn write_files_writes_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let mut files = BTreeMap::new();
    files.insert("a.txt".to_owned(), "A".to_owned());
    files.insert("deep/er/b.txt".to_owned(), "B".to_owned());
    workspace::write_files(&tree_root(root), &files)
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(root.join("a.txt")).unwrap(), "A");
    assert_eq!(
        std::fs::read_to_string(root.join("deep/er/b.txt")).unwrap(),
        "B"
    );

    let mut bad = BTreeMap::new();
    bad.insert("c.txt".to_owned(), "C".to_owned());
    bad.insert("../escape.txt".to_owned(), "X".to_owned());
    bad.insert("z.txt".to_owned(), "Z".to_owned());
    let err = workspace::write_files(&tree_root(root), &bad)
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::Escapes { .. }), "{err:?}");
    assert!(!root.join("c.txt").exists());
    assert!(!root.join("z.txt").exists());
    assert!(!dir.path().parent().unwrap().join("escape.txt").exists());
}

fn spec(name: &str, effect: Effect, execution: Execution) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        title: None,
        description: format!("Does {name}."),
        input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        output_schema: None,
        effect,
        execution,
        needs_approval: false,
        timeout_ms: None,
    }
}

fn project(agent_dir: &Path) -> Arc<Project> {
    let tools_dir = agent_dir.join("tools");
    std::fs::create_dir_all(&tools_dir).unwrap();
    std::fs::write(
        tools_dir.join("count.py"),
        "import sys\nprint(len(sys.stdin.read()))\n",
    )
    .unwrap();
    std::fs::write(tools_dir.join("hello"), "#!/bin/sh\necho hello\n").unwrap();
    let sandbox = agent_dir.join("sandbox/workspace");
    std::fs::create_dir_all(sandbox.join("docs")).unwrap();
    std::fs::write(sandbox.join("docs/readme.md"), "seed readme").unwrap();
    std::fs::write(sandbox.join("AGENTS.md"), "# House rules\n\nBe brief.\n").unwrap();

    let mut skill_files = BTreeMap::new();
    skill_files.insert("references/guide.md".to_owned(), b"guide".to_vec());
    Arc::new(Project {
        root: agent_dir.parent().unwrap().to_path_buf(),
        agent_dir: agent_dir.to_path_buf(),
        name: "demo".to_owned(),
        config: AgentConfig::default(),
        instructions: "SECRET INSTRUCTIONS".to_owned(),
        instruction_files: vec![agent_dir.join("instructions.md")],
        tools: vec![
            ToolManifest {
                path: tools_dir.join("count.toml"),
                dir: tools_dir.clone(),
                spec: spec("count", Effect::Read, Execution::Agent),
                runner: ToolRunner::Script {
                    source: tools_dir.join("count.py"),
                    workspace_path: ".bdk/tools/count.py".to_owned(),
                },
            },
            ToolManifest {
                path: tools_dir.join("hello.toml"),
                dir: tools_dir.clone(),
                spec: spec("hello", Effect::Write, Execution::Agent),
                runner: ToolRunner::Script {
                    source: tools_dir.join("hello"),
                    workspace_path: ".bdk/tools/hello".to_owned(),
                },
            },
            ToolManifest {
                path: tools_dir.join("server.toml"),
                dir: tools_dir.clone(),
                spec: spec("server", Effect::Read, Execution::Server),
                runner: ToolRunner::Command {
                    argv: vec!["true".to_owned()],
                    env: BTreeMap::new(),
                    pass_env: Vec::new(),
                    sandbox: Default::default(),
                    max_output_bytes: 1024,
                },
            },
        ],
        skills: vec![Skill {
            name: "research".to_owned(),
            description: "Dig: carefully, \"quoted\"".to_owned(),
            body: "Step one.\n".to_owned(),
            form: SkillForm::Packaged,
            path: agent_dir.join("skills/research/SKILL.md"),
            files: skill_files,
            arguments: vec![],
            attachments: vec![],
        }],
        subagents: vec![],
        mcp_connections: vec![],
        channels: vec![],
        hooks: vec![],
        schedules: vec![],
        gates: vec![],
        sandbox_files: vec![
            SandboxFile {
                workspace_path: "AGENTS.md".to_owned(),
                source: sandbox.join("AGENTS.md"),
            },
            SandboxFile {
                workspace_path: "docs/readme.md".to_owned(),
                source: sandbox.join("docs/readme.md"),
            },
        ],
        scripted_rules: BTreeMap::new(),
        evals_dir: None,
        experiments: Vec::new(),
        resources: Default::default(),
    })
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn all_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

#[tokio::test]
async fn materialize_seeds_a_new_workspace() {
    let project_dir = tempfile::tempdir().unwrap();
    let project = project(&project_dir.path().join("agent"));
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path().join("ws");

    assert!(
        workspace::materialize(&tree_root(&root), &project)
            .await
            .unwrap()
    );

    let skill = read(&root, ".bdk/skills/research/SKILL.md");
    assert_eq!(
        skill,
        "---\nname: \"research\"\ndescription: \"Dig: carefully, \\\"quoted\\\"\"\n---\n\nStep one.\n"
    );
    assert_eq!(
        read(&root, ".bdk/skills/research/references/guide.md"),
        "guide"
    );

    for (rel, source) in [
        (".bdk/tools/count.py", "count.py"),
        (".bdk/tools/hello", "hello"),
    ] {
        let copied = root.join(rel);
        assert_eq!(
            std::fs::read(&copied).unwrap(),
            std::fs::read(project.agent_dir.join("tools").join(source)).unwrap()
        );
        let mode = std::fs::metadata(&copied).unwrap().permissions().mode();
        assert_ne!(mode & 0o100, 0, "{rel} should be executable, mode {mode:o}");
    }
    // The server tool is not part of the workspace.
    assert!(!root.join(".bdk/tools/server").exists());

    let agents = read(&root, "AGENTS.md");
    // The sandbox's own AGENTS.md is kept, with the catalog after it.
    assert!(
        agents.starts_with("# House rules\n\nBe brief.\n\n"),
        "{agents}"
    );
    assert!(
        agents.contains("## count\n\nDoes count.\n\nEffect: read"),
        "{agents}"
    );
    assert!(agents.contains("| python3 .bdk/tools/count.py"), "{agents}");
    assert!(
        agents.contains("## hello\n\nDoes hello.\n\nEffect: write"),
        "{agents}"
    );
    assert!(agents.contains("| ./.bdk/tools/hello"), "{agents}");
    assert!(agents.contains("\"q\""), "input schema is listed: {agents}");
    assert!(!agents.contains("## server"), "{agents}");

    assert_eq!(read(&root, "docs/readme.md"), "seed readme");
    assert!(root.join(".bdk/materialized").exists());

    // Instructions never land in the workspace.
    for file in all_files(&root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("SECRET INSTRUCTIONS"), "{}", file.display());
    }
}

#[tokio::test]
async fn materialize_runs_once_and_keeps_session_edits() {
    let project_dir = tempfile::tempdir().unwrap();
    let project = project(&project_dir.path().join("agent"));
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path();

    assert!(
        workspace::materialize(&tree_root(root), &project)
            .await
            .unwrap()
    );
    std::fs::write(root.join("docs/readme.md"), "edited by the session").unwrap();
    std::fs::remove_file(root.join(".bdk/skills/research/SKILL.md")).unwrap();

    assert!(
        !workspace::materialize(&tree_root(root), &project)
            .await
            .unwrap()
    );
    assert_eq!(read(root, "docs/readme.md"), "edited by the session");
    assert!(!root.join(".bdk/skills/research/SKILL.md").exists());
}

#[tokio::test]
async fn materialize_refuses_seed_paths_outside_the_workspace() {
    let project_dir = tempfile::tempdir().unwrap();
    let mut project = Arc::unwrap_or_clone(project(&project_dir.path().join("agent")));
    project.sandbox_files.push(SandboxFile {
        workspace_path: "../outside.md".to_owned(),
        source: project.agent_dir.join("sandbox/workspace/docs/readme.md"),
    });
    let ws_dir = tempfile::tempdir().unwrap();
    let root = ws_dir.path().join("ws");
    let project = Arc::new(project);
    let err = workspace::materialize(&tree_root(&root), &project)
        .await
        .unwrap_err();
    assert!(matches!(err, WorkspaceError::Escapes { .. }), "{err:?}");
    // Nothing was written, and no marker: a fixed project can still seed it.
    assert!(!root.join(".bdk").exists());
    assert!(!ws_dir.path().join("outside.md").exists());
}

#[tokio::test]
async fn materialize_without_agent_tools_writes_no_catalog() {
    let project_dir = tempfile::tempdir().unwrap();
    let mut project = Arc::unwrap_or_clone(project(&project_dir.path().join("agent")));
    project
        .tools
        .retain(|t| !matches!(t.runner, ToolRunner::Script { .. }));
    let project = Arc::new(project);
    let ws_dir = tempfile::tempdir().unwrap();
    assert!(
        workspace::materialize(&tree_root(ws_dir.path()), &project)
            .await
            .unwrap()
    );
    // Only the sandbox's own AGENTS.md, unchanged.
    assert_eq!(
        read(ws_dir.path(), "AGENTS.md"),
        "# House rules\n\nBe brief.\n"
    );
}
