#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The weather example's reminder rule through the real `bdk serve --dev`:
//! the agent sets a reminder, the reminder survives a restart with the same
//! next fire time, and the dev route fires it into the conversation.

use serde_json::{Value, json};

use crate::common;
use common::{Server, client, post, read_until, weather};

/// Every reminder the dev route lists.
async fn dev_reminders(c: &reqwest::Client, base: &str) -> Vec<Value> {
    let r = c
        .get(format!("{base}/weather/v1/dev/reminders"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    body["reminders"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_set_by_the_agent_survives_a_restart_and_fires_from_the_dev_route() {
    let (_tmp, dir) = weather();
    let mut server = Server::start(&["--dev"], &[&dir]);
    let c = client();
    let (status, started) = post(
        &c,
        &format!("{}/weather/v1/session", server.base),
        json!({"message": "Please remind me about Paris"}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let id = started["sessionId"].as_str().unwrap().to_owned();
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    let (events, _) = read_until(resp, |e| e["type"] == "session.waiting").await;
    let completed = events
        .iter()
        .find(|e| e["type"] == "turn.completed")
        .unwrap_or_else(|| panic!("{events:?}"));
    let reply = completed["data"]["reply"].as_str().unwrap();
    assert!(reply.starts_with("Done:"), "{reply}");

    let listed = dev_reminders(&c, &server.base).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    let reminder = &listed[0];
    let rem_id = reminder["id"].as_str().unwrap().to_owned();
    assert!(reply.contains(&rem_id), "{reply}");
    assert_eq!(reminder["sessionId"], id.as_str());
    assert_eq!(reminder["status"], "armed");
    assert_eq!(reminder["schedule"], "10m");
    assert_eq!(reminder["prompt"], "Check the weather in Paris again.");
    let next_fire_at = reminder["nextFireAt"].as_str().unwrap().to_owned();

    let code = server.terminate();
    assert_eq!(code, 0, "stderr:\n{}", server.stderr.lock().unwrap());

    // Same project, same state root (the project's .bdk), new process.
    let server = Server::start(&["--dev"], &[&dir]);
    let listed = dev_reminders(&c, &server.base).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["id"], rem_id.as_str());
    assert_eq!(listed[0]["status"], "armed");
    assert_eq!(listed[0]["nextFireAt"], next_fire_at.as_str());

    let (status, fired) = post(
        &c,
        &format!("{}/weather/v1/dev/reminders/{rem_id}", server.base),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{fired}");
    assert_eq!(fired["result"], "delivered", "{fired}");
    let resp = c
        .get(format!(
            "{}/weather/v1/session/{id}/stream?startIndex=0",
            server.base
        ))
        .send()
        .await
        .unwrap();
    let (events, _) = read_until(resp, |e| {
        e["type"] == "message.received"
            && e["data"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Check the weather in Paris again."))
    })
    .await;
    let received: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "message.received")
        .collect();
    assert_eq!(received.len(), 2, "the fire is a second prompt: {events:?}");
}
