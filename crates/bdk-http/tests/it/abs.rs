#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! `GET /v1/abs` over real sockets: a caller sees the figures of the
//! sessions it may see, as in the session list, and nothing of another
//! principal's.

use crate::common;

use bdk_http::{Auth, BearerToken, Config, Mount};
use common::{client, expect_ok, serve};
use serde_json::{Value, json};

const TONE: &str = "[[arms]]\nname = \"a\"\nweight = 50\n[[arms]]\nname = \"b\"\nweight = 50\n";

#[tokio::test]
async fn each_principal_sees_its_own_sessions_figures() {
    let dir = tempfile::tempdir().unwrap();
    bdk_testkit::write_files(
        dir.path(),
        &[
            ("agent/agent.toml", "model = \"scripted\"\n"),
            ("agent/instructions.md", "Be brief.\n"),
            ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
            ("agent/experiments/tone.toml", TONE),
        ],
    );
    let found = bdk_core::discover(dir.path());
    assert!(found.diagnostics.is_empty(), "{:?}", found.diagnostics);
    let host =
        bdk_testkit::host_over(found.project.unwrap(), &dir.path().join("state"), |b| b).await;
    let config = Config {
        auth: Auth::Bearer(vec![
            BearerToken {
                principal: "alice".into(),
                token: "alice-secret-token".into(),
            },
            BearerToken {
                principal: "bob".into(),
                token: "bob-secret-token".into(),
            },
        ]),
        ..Config::default()
    };
    let base = serve(
        vec![Mount {
            slug: None,
            host,
            diagnostics: Vec::new(),
            reload: None,
        }],
        config,
    )
    .await;
    let http = client();
    let mut owned: Vec<(String, String)> = Vec::new();
    for (who, n) in [("alice", 3), ("bob", 5)] {
        for _ in 0..n {
            let started = expect_ok(
                http.post(format!("{base}/v1/session"))
                    .bearer_auth(format!("{who}-secret-token"))
                    .json(&json!({}))
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            owned.push((
                who.to_owned(),
                started["sessionId"].as_str().unwrap().to_owned(),
            ));
        }
    }
    for (who, n) in [("alice", 3u64), ("bob", 5)] {
        let abs: Value = expect_ok(
            http.get(format!("{base}/v1/abs"))
                .bearer_auth(format!("{who}-secret-token"))
                .send()
                .await
                .unwrap(),
        )
        .await;
        let tone = &abs["experiments"][0];
        assert_eq!(tone["name"], "tone");
        assert_eq!(tone["totals"]["sessions"], n, "{abs:#}");
        let arms: u64 = tone["arms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["totals"]["sessions"].as_u64().unwrap())
            .sum();
        assert_eq!(arms, n);
        for s in tone["sessions"].as_array().unwrap() {
            let id = s["sessionId"].as_str().unwrap();
            assert!(
                owned.iter().any(|(o, i)| o == who && i == id),
                "{who} sees {id}, which is not theirs"
            );
        }
    }
    // No token, no figures.
    let resp = http.get(format!("{base}/v1/abs")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
}
