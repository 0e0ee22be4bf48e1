#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `Host::session_for_key` over one backing store shared by several hosts,
//! as replicas of one agent share it: of the callers racing on one key,
//! exactly one starts the session, whatever host they call.

use std::sync::Arc;

use bdk_core::Project;
use bdk_core::host::{CLAIM_PATIENCE, Host, KEY_CLAIMS_NAMESPACE, KeySession, StartSession};
use bdk_store::{FsStore, Store};
use bdk_testkit::AgentFolder;
use serde_json::json;
use tempfile::TempDir;

fn project() -> (TempDir, Project) {
    let d = AgentFolder::new()
        .rules("[[rules]]\nreply = \"ok\"\n")
        .discover();
    (d.dir, d.project)
}

/// Hosts that each open the shared state on their own, as separate
/// processes would.
async fn hosts(dir: &TempDir, project: &Project, n: usize) -> Vec<Host> {
    let mut out = Vec::new();
    for _ in 0..n {
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path().join("state")).unwrap());
        out.push(Host::builder(project.clone(), store).build().await.unwrap());
    }
    out
}

fn start(message: &str) -> StartSession {
    StartSession {
        message: Some(message.to_owned()),
        ..StartSession::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_racing_on_one_key_over_two_hosts_get_one_session() {
    let (dir, project) = project();
    let hosts = hosts(&dir, &project, 2).await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let host = hosts[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            host.session_for_key("gh", "pr:1", start(&format!("m{i}")))
                .await
                .unwrap()
        }));
    }
    let mut started = 0;
    let mut ids = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            KeySession::Started(s) => {
                started += 1;
                assert_eq!(s.continuation_token, "gh:pr:1");
                ids.push(s.session_id);
            }
            KeySession::Found(r) => ids.push(r.id),
        }
    }
    assert_eq!(started, 1, "exactly one caller starts the session");
    ids.dedup();
    assert_eq!(ids.len(), 1, "every caller has the same session: {ids:?}");
    let sessions = hosts[0].store().list_sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].channel, "gh");
}

#[tokio::test]
async fn a_deleted_session_and_an_abandoned_claim_give_the_key_a_new_session() {
    let (dir, project) = project();
    let hosts = hosts(&dir, &project, 1).await;
    let host = &hosts[0];
    let KeySession::Started(first) = host.session_for_key("c", "k", start("a")).await.unwrap()
    else {
        panic!("the first call starts the session");
    };
    host.store()
        .delete_session(&first.session_id)
        .await
        .unwrap();
    let KeySession::Started(second) = host.session_for_key("c", "k", start("b")).await.unwrap()
    else {
        panic!("a deleted session's key starts over");
    };
    assert_ne!(first.session_id, second.session_id);

    // A creator that claimed the next generation and died before creating
    // the session: after the claim's patience the key is taken over.
    host.store()
        .delete_session(&second.session_id)
        .await
        .unwrap();
    let long_ago = chrono::Utc::now() - chrono::Duration::from_std(CLAIM_PATIENCE).unwrap();
    assert!(
        host.store()
            .kv_put_if_absent(
                KEY_CLAIMS_NAMESPACE,
                "c:k#2",
                json!({ "claimedAt": long_ago })
            )
            .await
            .unwrap()
    );
    let KeySession::Started(third) = host.session_for_key("c", "k", start("c")).await.unwrap()
    else {
        panic!("an abandoned claim is taken over");
    };
    assert_ne!(third.session_id, second.session_id);
    assert!(
        host.store()
            .kv_get(KEY_CLAIMS_NAMESPACE, "c:k#3")
            .await
            .unwrap()
            .is_some()
    );
}
