//! The Rust eval API over a parked `needs_approval` call: approve and deny.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::sync::Arc;

use bdk_core::host::Host;
use bdk_evals::{Assertions, Case, Matcher, ToolMatch};
use bdk_store::FsStore;
use serde_json::json;

fn project(dir: &Path) {
    for (path, content) in [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "You deploy things.\n"),
        (
            "agent/scripted.toml",
            "[[rules]]\nuser_contains = \"deploy\"\ntool_calls = [{ name = \"deploy\", input = { target = \"prod\" } }]\n\n[[rules]]\ntool_result = \"deploy\"\nreply = \"deploy said: {{ result_text }}\"\n",
        ),
        (
            "agent/tools/deploy.toml",
            "description = \"Deploys.\"\neffect = \"write\"\nneeds_approval = true\ncommand = [\"sh\", \"deploy.sh\"]\n\n[input_schema]\ntype = \"object\"\n",
        ),
        (
            "agent/tools/deploy.sh",
            "cat > /dev/null\necho '{\"deployed\": \"prod\"}'\n",
        ),
    ] {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}

/// Issue 15, item 2, Rust form: `send` returns a parked turn instead of
/// timing out, `require_input_request` gets the request, and
/// `approve` / `deny` let the same turn go on.
#[tokio::test]
async fn a_case_approves_or_denies_a_parked_call() {
    let tmp = tempfile::tempdir().unwrap();
    project(tmp.path());
    let project = bdk_core::discover(tmp.path()).project.unwrap();
    let store = FsStore::open(tmp.path().join("state")).unwrap();
    let host = Host::builder(project, Arc::new(store))
        .build()
        .await
        .unwrap();

    for approve in [true, false] {
        let mut t = Case::in_process("deploy", host.clone());
        let turn = t.send("deploy please").await.unwrap();
        assert!(!turn.ok);
        assert_eq!(turn.status.as_deref(), Some("waiting"));
        assert_eq!(turn.pending_approvals.len(), 1);
        let request = turn.require_input_request("deploy").unwrap();
        let call_id = request["callId"].as_str().unwrap().to_owned();
        let turn = if approve {
            t.approve(&call_id).await.unwrap()
        } else {
            t.deny("deploy", Some("not today")).await.unwrap()
        };
        turn.expect_ok().unwrap();
        assert_eq!(turn.index, 1, "the same turn went on");
        assert!(turn.pending_approvals.is_empty());
        if approve {
            turn.called_tool(
                "deploy",
                ToolMatch::any().output(json!({"deployed": "prod"})),
            );
        } else {
            t.check("reply", &json!(t.reply()), &Matcher::contains("not today"));
        }
        // Nothing is parked any more: another approve stops the case.
        assert!(t.approve("deploy").await.is_err());
        let outcome = t.finish();
        assert_eq!(outcome.failures.len(), 1, "{:?}", outcome.failures);
        assert!(
            outcome.failures[0].message.contains("not parked"),
            "{:?}",
            outcome.failures
        );
    }
}
