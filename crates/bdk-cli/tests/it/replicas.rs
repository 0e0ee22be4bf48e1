//! Several real `bdk serve --store postgres://...` processes on one fresh
//! schema of the machine's PostgreSQL (`BDK_TEST_DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`): streams followed on one
//! replica while follow-ups land on another, stops and busy answers across
//! replicas, a replica killed mid-turn, and a schedule raced by three.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bdk_testkit::poll;
use common::{Server, client, post, read_until, wait_for};
use serde_json::{Value, json};
use tempfile::TempDir;

/// Generous bound for waiting on a condition; never a timing assertion.
const PATIENCE: Duration = Duration::from_secs(120);

fn database_url() -> String {
    std::env::var("BDK_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

const NOTE_TOOL: &str = r#"
description = "Writes a note."
effect = "write"
command = ["sh", "-c", "cat >/dev/null; echo '{\"noted\": true}'"]

[input_schema]
type = "object"
"#;

/// An agent in a directory of a unique name, so its schema (`bdk_<slug>`)
/// is fresh; the schema is dropped when this goes away.
struct Agent {
    _tmp: TempDir,
    dir: PathBuf,
    slug: String,
}

impl Agent {
    fn new(schedule: bool) -> Agent {
        static N: AtomicU32 = AtomicU32::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let slug = format!(
            "rep{}x{}x{}",
            std::process::id(),
            nanos,
            N.fetch_add(1, Ordering::SeqCst)
        );
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(&slug);
        let mut files = vec![
            ("agent/agent.toml", "model = \"scripted\"\n".to_owned()),
            (
                "agent/instructions.md",
                "You are a test agent.\n".to_owned(),
            ),
            ("agent/scripted.toml", common::QUEUE_RULES.to_owned()),
            ("agent/tools/note.toml", NOTE_TOOL.to_owned()),
        ];
        if schedule {
            files.push((
                "agent/schedules/tick.md",
                "---\ncron: \"* * * * *\"\n---\n\nTick.\n".to_owned(),
            ));
        }
        bdk_testkit::write_files(&dir, &files);
        Agent {
            _tmp: tmp,
            dir,
            slug,
        }
    }

    fn serve(&self) -> Server {
        let url = database_url();
        Server::start(&["--store", &url], &[self.dir.as_path()])
    }

    fn url(&self, server: &Server, path: &str) -> String {
        format!("{}/{}/v1{path}", server.base, self.slug)
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let schema = format!("bdk_{}", self.slug);
        let _ = Command::new("psql")
            .arg(database_url())
            .args([
                "-q",
                "-c",
                &format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

async fn events(c: &reqwest::Client, url: &str) -> Vec<Value> {
    let r = c.get(format!("{url}?format=json")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    v["events"].as_array().unwrap().clone()
}

fn turn_event<'a>(events: &'a [Value], turn: &Value, kind: &str) -> Option<&'a Value> {
    events
        .iter()
        .find(|e| e["turnId"] == *turn && e["type"] == kind)
}

fn assert_gapless(events: &[Value]) {
    for (i, e) in events.iter().enumerate() {
        assert_eq!(
            e["index"].as_u64(),
            Some(i as u64),
            "gap at {i}: {events:#?}"
        );
    }
}

/// No turn's `message.received` while another turn is open.
fn assert_one_turn_at_a_time(events: &[Value]) {
    let mut open: Option<&Value> = None;
    for e in events {
        match e["type"].as_str().unwrap() {
            "message.received" => {
                assert!(open.is_none(), "two turns at once: {events:#?}");
                open = Some(&e["turnId"]);
            }
            "turn.completed" | "turn.failed" => open = None,
            _ => {}
        }
    }
}

async fn start(c: &reqwest::Client, agent: &Agent, server: &Server, message: &str) -> Value {
    let (status, started) = post(
        c,
        &agent.url(server, "/session"),
        json!({"message": message}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    started
}

#[tokio::test(flavor = "multi_thread")]
async fn two_replicas_share_sessions_streams_stops_and_busy_rules() {
    let agent = Agent::new(false);
    let a = agent.serve();
    let b = agent.serve();
    let c = client();

    // A slow turn starts on A; a client follows the session on A.
    let started = start(&c, &agent, &a, "be slow").await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let first = started["turnId"].clone();
    let stream = c
        .get(agent.url(&a, &format!("/session/{id}/stream?startIndex=0")))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);
    let follower = tokio::spawn(read_until(stream, |e| e["type"] == "turn.completed"));
    let on_b = agent.url(&b, &format!("/session/{id}/events"));
    wait_for(&c, &on_b, |e| e["type"] == "turn.started").await;

    // A write call on B while A runs the turn: busy, with the documented code.
    let (status, busy) = post(
        &c,
        &agent.url(&b, "/tools/note"),
        json!({"input": {}, "sessionId": id}),
    )
    .await;
    assert_eq!(status, 409, "{busy}");
    assert_eq!(busy["error"], "session_busy");

    // The follow-up lands on B: A's turn is preempted, B runs the new one,
    // and the follower on A sees it all in order.
    let (status, sent) = post(
        &c,
        &agent.url(&b, &format!("/session/{id}")),
        json!({"message": "hello from b", "continuationToken": started["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let (seen, _) = tokio::time::timeout(PATIENCE, follower)
        .await
        .unwrap()
        .unwrap();
    assert_gapless(&seen);
    let failed = turn_event(&seen, &first, "turn.failed").expect("A's turn ended");
    assert_eq!(failed["data"]["status"], "interrupted");
    let done = seen.last().unwrap();
    assert_eq!(done["turnId"], sent["turnId"]);
    assert_eq!(done["data"]["reply"], "quick: hello from b");
    // The rotated token is shared: the old one is stale on A too.
    let (status, stale) = post(
        &c,
        &agent.url(&a, &format!("/session/{id}")),
        json!({"message": "x", "continuationToken": started["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 409, "{stale}");
    assert_eq!(stale["error"], "stale_continuation_token");

    // A stop on A reaches a turn running on B.
    let on_a = agent.url(&a, &format!("/session/{id}/events"));
    wait_for(&c, &on_a, |e| {
        e["type"] == "session.waiting" && e["index"].as_u64() > Some(3)
    })
    .await;
    let (status, slow) = post(
        &c,
        &agent.url(&b, &format!("/session/{id}")),
        json!({"message": "slow again", "continuationToken": sent["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 200, "{slow}");
    wait_for(&c, &on_a, |e| {
        e["turnId"] == slow["turnId"] && e["type"] == "turn.started"
    })
    .await;
    let (status, stopped) = post(
        &c,
        &agent.url(&a, &format!("/session/{id}/stop")),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["stopped"], true);
    let all = wait_for(&c, &on_a, |e| {
        e["turnId"] == slow["turnId"] && e["type"] == "turn.failed"
    })
    .await;
    let failed = turn_event(&all, &slow["turnId"], "turn.failed").unwrap();
    assert_eq!(failed["data"]["status"], "cancelled");

    // Once the session rests, the write call goes through on either replica.
    wait_for(&c, &on_a, |e| {
        e["type"] == "session.waiting" && e["index"].as_u64() > failed["index"].as_u64()
    })
    .await;
    let (status, noted) = post(
        &c,
        &agent.url(&a, "/tools/note"),
        json!({"input": {}, "sessionId": id}),
    )
    .await;
    assert_eq!(status, 200, "{noted}");
    let all = events(&c, &on_b).await;
    assert_gapless(&all);
    assert_one_turn_at_a_time(&all);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_killed_mid_turn_leaves_a_usable_session() {
    let agent = Agent::new(false);
    let mut a = agent.serve();
    let b = agent.serve();
    let c = client();
    let started = start(&c, &agent, &a, "be slow").await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let first = started["turnId"].clone();
    let on_b = agent.url(&b, &format!("/session/{id}/events"));
    wait_for(&c, &on_b, |e| e["type"] == "turn.started").await;
    // Follow on B from the start, then kill A outright.
    let stream = c
        .get(agent.url(&b, &format!("/session/{id}/stream?startIndex=0")))
        .send()
        .await
        .unwrap();
    let follower = tokio::spawn(read_until(stream, |e| e["type"] == "turn.completed"));
    a.child.kill().unwrap();
    a.child.wait().unwrap();

    // A follow-up on B waits until A's heartbeat lapses, takes the turn over
    // (recorded interrupted) and runs.
    let (status, sent) = post(
        &c,
        &agent.url(&b, &format!("/session/{id}")),
        json!({"message": "are you there?", "continuationToken": started["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let (seen, _) = tokio::time::timeout(PATIENCE, follower)
        .await
        .unwrap()
        .unwrap();
    assert_gapless(&seen);
    let failed = turn_event(&seen, &first, "turn.failed").expect("the dead turn was recorded");
    assert_eq!(failed["data"]["status"], "interrupted");
    assert_eq!(
        seen.last().unwrap()["data"]["reply"],
        "quick: are you there?"
    );
    let all = events(&c, &on_b).await;
    assert_one_turn_at_a_time(&all);
    let interrupted = all
        .iter()
        .filter(|e| e["type"] == "turn.failed" && e["data"]["status"] == "interrupted")
        .count();
    assert_eq!(interrupted, 1);
    // A restarted replica leaves the session alone: nothing is open.
    let a2 = agent.serve();
    let (status, again) = post(
        &c,
        &agent.url(&a2, &format!("/session/{id}")),
        json!({"message": "back", "continuationToken": sent["continuationToken"]}),
    )
    .await;
    assert_eq!(status, 200, "{again}");
    let on_a2 = agent.url(&a2, &format!("/session/{id}/events"));
    let all = wait_for(&c, &on_a2, |e| {
        e["turnId"] == again["turnId"] && e["type"] == "turn.completed"
    })
    .await;
    assert_one_turn_at_a_time(&all);
}

/// The log lines of a replica as one string.
async fn logs(c: &reqwest::Client, agent: &Agent, server: &Server) -> String {
    let r = c
        .get(agent.url(server, "/logs?after=0&limit=1000"))
        .send()
        .await
        .unwrap();
    r.text().await.unwrap()
}

/// What one replica's log says about schedule fires: the claim keys it
/// found already claimed (`tick@<minute>`), and the minutes
/// (`2026-01-01T00:00`) in which it fired the schedule itself.
fn fires(log: &str) -> (Vec<String>, Vec<String>) {
    let v: Value = serde_json::from_str(log).unwrap();
    let (mut lost, mut fired) = (Vec::new(), Vec::new());
    for line in v["lines"].as_array().unwrap() {
        let message = line["message"].as_str().unwrap_or_default();
        if message.contains("already claimed")
            && let Some(at) = message.find("tick@")
        {
            lost.push(message[at..at + "tick@2026-01-01T00:00:00Z".len()].to_owned());
        }
        if message.starts_with("schedule fired") {
            let at = line["at"].as_str().unwrap();
            fired.push(at[.."2026-01-01T00:00".len()].to_owned());
        }
    }
    (lost, fired)
}

#[tokio::test(flavor = "multi_thread")]
async fn three_replicas_fire_a_due_schedule_once_and_share_streams() {
    let agent = Agent::new(true);
    let servers = [agent.serve(), agent.serve(), agent.serve()];
    let c = client();

    // Meanwhile: a client follows a session on the third replica while
    // follow-ups land on the first and the second.
    let started = start(&c, &agent, &servers[0], "hello").await;
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let stream = c
        .get(agent.url(&servers[2], &format!("/session/{id}/stream?startIndex=0")))
        .send()
        .await
        .unwrap();
    let mut token = started["continuationToken"].clone();
    let mut turns = vec![started["turnId"].clone()];
    for (i, server) in [&servers[1], &servers[0], &servers[1]]
        .into_iter()
        .enumerate()
    {
        let (status, sent) = post(
            &c,
            &agent.url(server, &format!("/session/{id}")),
            json!({"message": format!("follow-up {i}"), "continuationToken": token}),
        )
        .await;
        assert_eq!(status, 200, "{sent}");
        token = sent["continuationToken"].clone();
        turns.push(sent["turnId"].clone());
    }
    let last = turns.last().unwrap().clone();
    let (seen, _) = read_until(stream, |e| {
        e["turnId"] == last && e["type"] == "turn.completed"
    })
    .await;
    assert_gapless(&seen);
    assert_one_turn_at_a_time(&seen);
    assert_eq!(seen.last().unwrap()["data"]["reply"], "quick: follow-up 2");
    for t in &turns {
        assert!(
            seen.iter()
                .any(|e| e["turnId"] == *t && e["type"] == "message.received"),
            "every follow-up got its turn"
        );
    }

    // The schedule is due every minute. For the first minute that has
    // been decided everywhere, exactly one replica fired it and the other
    // two found it already claimed.
    // Each check reads three servers' logs, so it is paced at 200 ms.
    poll::until_ok_paced(
        "a scheduled minute decided on every replica",
        PATIENCE,
        Duration::from_millis(200),
        || async {
            let mut lost: HashMap<String, usize> = HashMap::new();
            let mut fired: HashMap<String, usize> = HashMap::new();
            for s in &servers {
                let (l, f) = fires(&logs(&c, &agent, s).await);
                for k in l {
                    *lost
                        .entry(k["tick@".len()..k.len() - ":00Z".len()].to_owned())
                        .or_default() += 1;
                }
                for m in f {
                    *fired.entry(m).or_default() += 1;
                }
            }
            if let Some((minute, n)) = fired.iter().find(|(_, n)| **n > 1) {
                panic!("minute {minute} fired {n} times");
            }
            let decided = lost
                .iter()
                .find(|(minute, n)| **n + fired.get(*minute).copied().unwrap_or(0) >= 3);
            let Some((minute, n)) = decided else {
                return Err(format!("lost {lost:?}, fired {fired:?}"));
            };
            assert_eq!(*n, 2, "minute {minute}: lost {lost:?}, fired {fired:?}");
            assert_eq!(
                fired.get(minute),
                Some(&1),
                "minute {minute}: fired {fired:?}"
            );
            Ok(())
        },
    )
    .await;
}

/// The kill -9 regression of issue 13 on PostgreSQL: a coalesced follow-up
/// acknowledged behind a running turn, and a turn waiting under
/// `max_running_turns`, both run once the replica is back (after the dead
/// replica's leases lapse), exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_work_survives_kill_nine_on_postgres() {
    let agent = Agent::new(false);
    std::fs::write(
        agent.dir.join("agent/agent.toml"),
        "model = \"scripted\"\nmax_running_turns = 1\n",
    )
    .unwrap();
    let url = database_url();
    common::acknowledged_work_survives_kill_nine(&["--store", &url], &agent.dir, &agent.slug).await;
}
