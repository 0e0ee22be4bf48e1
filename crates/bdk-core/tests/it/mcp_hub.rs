#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The host side of the MCP port, with an in-memory hub: advertised tools
//! join the tool map, never replace the agent's own tools, follow catalog
//! changes (the generation counter) into direct calls and turns, and native
//! tools reach the hub through `ToolServices::mcp`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bdk_core::discover;
use bdk_core::host::{DirectCall, Host, StartSession};
use bdk_core::mcp::{ConnectionError, McpError, McpHub};
use bdk_core::tool::native::native_tool;
use bdk_core::tool::{Effect, Execution, Tool, ToolContext, ToolOutput, ToolSpec};
use bdk_store::FsStore;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tempfile::TempDir;

/// A tool the fake hub advertises; it answers with its own name.
struct Remote {
    spec: ToolSpec,
}

#[async_trait]
impl Tool for Remote {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _input: Value, _ctx: ToolContext) -> ToolOutput {
        ToolOutput::ok(format!("remote {}", self.spec.name))
    }
}

fn remote(name: &str) -> Arc<dyn Tool> {
    Arc::new(Remote {
        spec: ToolSpec {
            name: name.to_owned(),
            title: None,
            description: "a remote tool".to_owned(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            effect: Effect::Read,
            execution: Execution::Server,
            needs_approval: false,
            timeout_ms: None,
        },
    })
}

#[derive(Default)]
struct FakeHub {
    tools: Mutex<Vec<&'static str>>,
    generation: AtomicU64,
}

impl FakeHub {
    fn advertise(&self, names: &[&'static str]) {
        *self.tools.lock().unwrap() = names.to_vec();
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl McpHub for FakeHub {
    fn names(&self) -> Vec<String> {
        vec!["fake".to_owned()]
    }

    async fn list_tools(&self, name: &str) -> Result<Vec<ToolSpec>, McpError> {
        if name != "fake" {
            return Err(McpError::UnknownConnection(name.to_owned()));
        }
        Ok(self
            .advertised_tools()
            .iter()
            .map(|t| t.spec().clone())
            .collect())
    }

    async fn call_tool(
        &self,
        name: &str,
        tool: &str,
        _args: Value,
    ) -> Result<ToolOutput, McpError> {
        if name != "fake" {
            return Err(McpError::UnknownConnection(name.to_owned()));
        }
        Ok(ToolOutput::ok(format!("hub {tool}")))
    }

    fn connection_errors(&self) -> Vec<ConnectionError> {
        vec![ConnectionError {
            name: "down".to_owned(),
            message: "cannot start".to_owned(),
        }]
    }

    fn advertised_tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .lock()
            .unwrap()
            .iter()
            .map(|n| remote(n))
            .collect()
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    async fn ready(&self) {}

    async fn shutdown(&self) {}
}

#[derive(Deserialize, JsonSchema)]
struct Relay {
    tool: String,
}

const RULES: &str = r#"
[[rules]]
user_contains = "late"
tool_calls = [{ name = "late", input = {} }]

[[rules]]
tool_result = "late"
reply = "got {{ result }}"

[[rules]]
reply = "ok"
"#;

#[tokio::test]
async fn advertised_tools_join_the_map_and_follow_catalog_changes() {
    let dir = TempDir::new().unwrap();
    bdk_testkit::write_files(
        dir.path(),
        &[
            (
                "agent/agent.toml",
                "model = \"scripted\"\n[builtin_tools]\nworkspace = false\nartifacts = false\n",
            ),
            ("agent/instructions.md", "You relay.\n"),
            ("agent/scripted.toml", RULES),
        ],
    );
    let project = discover(dir.path()).project.unwrap();
    let hub = Arc::new(FakeHub::default());
    hub.advertise(&["early", "relay"]);
    // A native tool named like an advertised one wins; it reaches the hub
    // through the tool services.
    let relay = native_tool(
        "relay",
        "calls the hub",
        |r: Relay, ctx: ToolContext| async move {
            let mcp = ctx.services.and_then(|s| s.mcp()).ok_or("no hub")?;
            let out = mcp
                .call_tool("fake", &r.tool, json!({}))
                .await
                .map_err(|e| e.to_string())?;
            Ok(out.content)
        },
    );
    let host = Host::builder(
        project,
        Arc::new(FsStore::open(dir.path().join(".bdk")).unwrap()),
    )
    .tool(Arc::new(relay))
    .mcp(Arc::clone(&hub) as Arc<dyn McpHub>)
    .build()
    .await
    .unwrap();
    let names = |host: &Host| host.tools().into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(names(&host), vec!["early", "relay"]);
    assert_eq!(host.connection_errors()[0].name, "down");

    let call = |name: &str, input: Value| {
        host.call_tool(DirectCall {
            name: name.to_owned(),
            input,
            ..Default::default()
        })
    };
    assert_eq!(
        call("early", json!({})).await.unwrap().result,
        json!("remote early")
    );
    assert_eq!(
        call("relay", json!({"tool": "x"})).await.unwrap().result,
        json!("hub x")
    );
    assert!(call("late", json!({})).await.is_err());

    // The catalog changes: the next look sees the new map, in direct calls
    // and in turns.
    hub.advertise(&["late"]);
    assert_eq!(names(&host), vec!["late", "relay"]);
    assert_eq!(
        call("late", json!({})).await.unwrap().result,
        json!("remote late")
    );
    assert!(call("early", json!({})).await.is_err());
    let s = host
        .start_session(StartSession {
            message: Some("call the late one".into()),
            ..StartSession::default()
        })
        .await
        .unwrap();
    let r = host
        .wait_turn(&s.session_id, &s.turn_id.unwrap())
        .await
        .unwrap();
    assert!(r.ok, "{r:?}");
    assert_eq!(r.reply, "got remote late");
}
