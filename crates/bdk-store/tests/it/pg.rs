//! PostgreSQL-specific behaviour of [`PgStore`]: several stores (separate
//! pools, as separate replicas would have) on one schema.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::pg_support;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bdk_events::ids::new_http_token;
use bdk_events::{Envelope, Event, MessageAppended, SessionId, SessionMode};
use bdk_store::{EventStream, NewEvent, PgOptions, PgStore, SessionRecord, Store, StoreError};
use chrono::{SubsecRound, Utc};
use futures::{FutureExt, StreamExt};
use pg_support::{admin, database_url, drop_schemas, new_schema, open};
use serde_json::json;

const DEADLINE: Duration = Duration::from_secs(30);

/// Runs `body` with a fresh schema and a temp dir, dropping the schema
/// afterwards whatever happened.
async fn with_schema<F, Fut>(body: F)
where
    F: FnOnce(String, std::path::PathBuf) -> Fut,
    Fut: Future<Output = ()>,
{
    drop(admin().await);
    let schema = new_schema();
    let dir = tempfile::tempdir().unwrap();
    let outcome = AssertUnwindSafe(body(schema.clone(), dir.path().to_path_buf()))
        .catch_unwind()
        .await;
    drop_schemas(&[schema]).await;
    if let Err(payload) = outcome {
        std::panic::resume_unwind(payload);
    }
}

/// `n` stores on one schema, each with its own pool and local root.
async fn replicas(schema: &str, dir: &std::path::Path, n: usize, conns: u32) -> Vec<PgStore> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(open(schema, &dir.join(format!("r{i}")), conns).await);
    }
    out
}

fn record(id: &SessionId) -> SessionRecord {
    let now = Utc::now().trunc_subsecs(3);
    SessionRecord {
        id: id.clone(),
        mode: SessionMode::Chat,
        channel: "http".to_owned(),
        principal: None,
        continuation_token: new_http_token(id),
        title: None,
        purpose: None,
        dry_run: false,
        as_of: None,
        created_at: now,
        updated_at: now,
        extra: serde_json::Value::Null,
    }
}

fn delta(text: String) -> NewEvent {
    NewEvent::session(MessageAppended { delta: text })
}

fn text(env: &Envelope) -> &str {
    match &env.event {
        Event::MessageAppended(d) => &d.delta,
        other => panic!("expected message.appended, got {}", other.kind()),
    }
}

async fn take(stream: &mut EventStream, n: usize) -> Vec<Envelope> {
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        match tokio::time::timeout(DEADLINE, stream.next()).await {
            Err(_) => panic!("stream stalled after {} of {n} events", out.len()),
            Ok(None) => panic!("stream ended after {} of {n} events", out.len()),
            Ok(Some(Err(e))) => panic!("stream failed after {} events: {e}", out.len()),
            Ok(Some(Ok(env))) => out.push(env),
        }
    }
    out
}

/// 32 appenders, each its own store and pool like 32 replicas, on one
/// session: every index exactly once, each appender's events in its order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_replicas_append_to_one_session_without_gap_or_duplicate() {
    with_schema(|schema, dir| async move {
        const APPENDERS: usize = 32;
        const EACH: usize = 40;
        let stores = replicas(&schema, &dir, APPENDERS, 1).await;
        let id = SessionId::generate();
        stores[0].create_session(record(&id)).await.unwrap();
        let mut tasks = Vec::new();
        for (t, store) in stores.into_iter().enumerate() {
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                let mut got = Vec::with_capacity(EACH);
                for i in 0..EACH {
                    // Every fifth append is a batch of three.
                    let batch: Vec<NewEvent> = if i % 5 == 4 {
                        (0..3).map(|k| delta(format!("{t}:{i}.{k}"))).collect()
                    } else {
                        vec![delta(format!("{t}:{i}.0"))]
                    };
                    let len = batch.len() as u64;
                    let envs = store.append(&id, batch).await.unwrap();
                    let first = envs[0].index;
                    assert_eq!(
                        envs.iter().map(|e| e.index).collect::<Vec<_>>(),
                        (first..first + len).collect::<Vec<_>>(),
                        "a batch gets consecutive indices"
                    );
                    got.extend(envs.iter().map(|e| e.index));
                }
                store.close().await;
                got
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            let got = task.await.unwrap();
            assert!(got.windows(2).all(|w| w[0] < w[1]));
            all.extend(got);
        }
        all.sort_unstable();
        let total = (APPENDERS * (EACH + (EACH / 5) * 2)) as u64;
        assert_eq!(
            all,
            (0..total).collect::<Vec<_>>(),
            "every index exactly once"
        );

        let reader = open(&schema, &dir.join("reader"), 2).await;
        let read = reader.read(&id, 0).await.unwrap();
        assert_eq!(read.len() as u64, total);
        assert_eq!(reader.next_index(&id).await.unwrap(), total);
        let mut next: HashMap<usize, (usize, usize)> = HashMap::new();
        for env in &read {
            let (t, rest) = text(env).split_once(':').unwrap();
            let (i, k) = rest.split_once('.').unwrap();
            let (t, i, k): (usize, usize, usize) =
                (t.parse().unwrap(), i.parse().unwrap(), k.parse().unwrap());
            let expected = next.entry(t).or_insert((0, 0));
            assert_eq!(
                (i, k),
                *expected,
                "appender {t}'s events in its order, each once"
            );
            *expected = if i % 5 == 4 && k < 2 {
                (i, k + 1)
            } else {
                (i + 1, 0)
            };
        }
        assert_eq!(next.len(), APPENDERS);
        reader.close().await;
    })
    .await;
}

/// A follower on one store sees appends made through another, live, with
/// no gap or duplicate at the replay/live seam while appends are running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_sees_another_replicas_appends_across_the_seam() {
    with_schema(|schema, dir| async move {
        const BEFORE: usize = 20;
        const DURING: usize = 150;
        let stores = replicas(&schema, &dir, 2, 4).await;
        let (follower, writer) = (stores[0].clone(), Arc::new(stores[1].clone()));
        for round in 0..6usize {
            let id = SessionId::generate();
            writer.create_session(record(&id)).await.unwrap();
            for i in 0..BEFORE {
                writer
                    .append(&id, vec![delta(format!("b{i}"))])
                    .await
                    .unwrap();
            }
            let appender = {
                let (writer, id) = (writer.clone(), id.clone());
                tokio::spawn(async move {
                    for i in 0..DURING {
                        writer
                            .append(&id, vec![delta(format!("d{i}"))])
                            .await
                            .unwrap();
                    }
                })
            };
            for _ in 0..round * 4 {
                tokio::task::yield_now().await;
            }
            let from = if round % 2 == 0 { 0 } else { 7 };
            let mut stream = follower.subscribe(&id, from).await.unwrap();
            let total = (BEFORE + DURING) as u64;
            let got = take(&mut stream, (total - from) as usize).await;
            assert_eq!(
                got.iter().map(|e| e.index).collect::<Vec<_>>(),
                (from..total).collect::<Vec<_>>(),
                "round {round}"
            );
            appender.await.unwrap();
            if let Some(item) = stream.next().now_or_never() {
                panic!("round {round}: a duplicate after catching up: {item:?}");
            }
            // Live, from the other replica only: the follower's own store
            // never appended, so only the notification can wake it.
            writer
                .append(&id, vec![delta("marker".into())])
                .await
                .unwrap();
            assert_eq!(take(&mut stream, 1).await[0].index, total, "round {round}");
            // A delete through the writer ends the follower's stream.
            assert!(writer.delete_session(&id).await.unwrap());
            match tokio::time::timeout(DEADLINE, stream.next()).await {
                Ok(None) => {}
                other => panic!("round {round}: expected the stream to end, got {other:?}"),
            }
        }
        follower.close().await;
        writer.close().await;
    })
    .await;
}

/// Claims race across replicas: exactly one of 16 stores wins each key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_if_absent_has_one_winner_across_replicas() {
    with_schema(|schema, dir| async move {
        let stores = replicas(&schema, &dir, 16, 1).await;
        for round in 0..5 {
            let key = format!("nightly@2026-11-30T0{round}:00:00Z");
            let mut tasks = Vec::new();
            for (i, store) in stores.iter().enumerate() {
                let (store, key) = (store.clone(), key.clone());
                tasks.push(tokio::spawn(async move {
                    (
                        store
                            .kv_put_if_absent("schedules", &key, json!({"replica": i}))
                            .await
                            .unwrap(),
                        i,
                    )
                }));
            }
            let mut winners = Vec::new();
            for task in tasks {
                let (won, i) = task.await.unwrap();
                if won {
                    winners.push(i);
                }
            }
            assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
            assert_eq!(
                stores[3].kv_get("schedules", &key).await.unwrap(),
                Some(json!({"replica": winners[0]}))
            );
        }
        for store in stores {
            store.close().await;
        }
    })
    .await;
}

/// Replicas starting together on an empty schema race on creating it and on
/// the migrations; all of them come up on one set of tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_starting_together_migrate_once() {
    with_schema(|schema, dir| async move {
        let mut tasks = Vec::new();
        for i in 0..6 {
            let (schema, dir) = (schema.clone(), dir.join(format!("r{i}")));
            tasks.push(tokio::spawn(async move { open(&schema, &dir, 1).await }));
        }
        let mut stores = Vec::new();
        for task in tasks {
            stores.push(task.await.unwrap());
        }
        let id = SessionId::generate();
        stores[0].create_session(record(&id)).await.unwrap();
        for store in &stores {
            assert_eq!(
                store.get_session(&id).await.unwrap().map(|r| r.id),
                Some(id.clone())
            );
            assert_eq!(store.schema(), schema);
        }
        let mut conn = admin().await;
        let (applied, distinct): (i64, i64) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT count(*), count(DISTINCT version) FROM \"{schema}\".bdk_migrations"
        )))
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert!(applied >= 1, "the migrations are recorded");
        assert_eq!(applied, distinct, "each migration is recorded once");
        for store in stores {
            store.close().await;
        }
    })
    .await;
}

/// Two schemas on one database are two separate stores: no shared
/// sessions, and no wake-ups from the other's appends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_keep_agents_apart() {
    with_schema(|schema_a, dir| async move {
        let schema_b = new_schema();
        let a = open(&schema_a, &dir.join("a"), 2).await;
        let b = open(&schema_b, &dir.join("b"), 2).await;
        let id = SessionId::generate();
        a.create_session(record(&id)).await.unwrap();
        a.kv_put("ns", "k", json!(1)).await.unwrap();
        assert_eq!(b.get_session(&id).await.unwrap(), None);
        assert_eq!(b.kv_get("ns", "k").await.unwrap(), None);
        assert!(matches!(
            b.subscribe(&id, 0).await,
            Err(StoreError::SessionNotFound(_))
        ));
        // The same id in b is another session with its own numbering.
        b.create_session(record(&id)).await.unwrap();
        a.append(&id, vec![delta("a0".into())]).await.unwrap();
        let envs = b.append(&id, vec![delta("b0".into())]).await.unwrap();
        assert_eq!(envs[0].index, 0);
        a.close().await;
        b.close().await;
        drop_schemas(&[schema_b]).await;
    })
    .await;
}

/// Bad options are refused with clear errors, not panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for schema in [
        "",
        "Upper",
        "1abc",
        "a-b",
        "a;drop",
        "x\"y",
        &"s".repeat(64),
    ] {
        match PgStore::connect(PgOptions::new(database_url(), dir.path()).schema(schema)).await {
            Err(StoreError::Invalid { what: "schema", .. }) => {}
            other => panic!(
                "schema {schema:?}: expected Invalid, got {:?}",
                other.map(|_| ())
            ),
        }
    }
    match PgStore::connect(PgOptions::new("mysql://nope", dir.path())).await {
        Err(StoreError::Invalid {
            what: "database url",
            ..
        }) => {}
        other => panic!("expected an invalid url, got {:?}", other.map(|_| ())),
    }
    // Nothing listens on port 1: a database error, quickly.
    match PgStore::connect(PgOptions::new(
        "postgres://postgres@127.0.0.1:1/test",
        dir.path(),
    ))
    .await
    {
        Err(StoreError::Database(_)) => {}
        other => panic!("expected a database error, got {:?}", other.map(|_| ())),
    }
}

/// The listening connection of a follower's store is killed by the server:
/// the store reconnects, and the follower gets the events appended while it
/// was gone and after, with no gap or duplicate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_listening_connection_loses_no_event() {
    with_schema(|schema, dir| async move {
        let stores = replicas(&schema, &dir, 2, 2).await;
        let (follower, writer) = (&stores[0], &stores[1]);
        let id = SessionId::generate();
        writer.create_session(record(&id)).await.unwrap();
        let mut stream = follower.subscribe(&id, 0).await.unwrap();
        writer
            .append(&id, vec![delta("before".into())])
            .await
            .unwrap();
        assert_eq!(take(&mut stream, 1).await[0].index, 0);

        // The one connection of this schema's channel that is LISTENing.
        let mut admin = admin().await;
        let channel = format!("bdk:{schema}");
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'bdk' AND query LIKE 'LISTEN %' \
               AND position($1 in query) > 0",
        )
        .bind(&channel)
        .fetch_all(&mut admin)
        .await
        .unwrap();
        assert_eq!(killed, vec![true], "one listening connection terminated");

        for i in 1..=20 {
            writer
                .append(&id, vec![delta(format!("after{i}"))])
                .await
                .unwrap();
        }
        let got = take(&mut stream, 20).await;
        assert_eq!(
            got.iter().map(|e| e.index).collect::<Vec<_>>(),
            (1..=20).collect::<Vec<u64>>()
        );
        // And it keeps following live.
        writer
            .append(&id, vec![delta("tail".into())])
            .await
            .unwrap();
        assert_eq!(take(&mut stream, 1).await[0].index, 21);
        for store in stores {
            store.close().await;
        }
    })
    .await;
}

/// NUL bytes, which PostgreSQL text cannot hold, are refused as invalid
/// input (or match nothing), never surfacing as database errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nul_bytes_are_invalid_input_not_database_errors() {
    with_schema(|schema, dir| async move {
        let store = open(&schema, &dir, 2).await;
        let invalid = |r: Result<(), StoreError>, what: &str| match r {
            Err(StoreError::Invalid { .. }) => {}
            other => panic!("{what}: expected Invalid, got {other:?}"),
        };
        let mut bad = record(&SessionId::generate());
        bad.principal = Some("al\0ice".into());
        invalid(store.create_session(bad).await, "principal");
        let mut bad = record(&SessionId::generate());
        bad.continuation_token = "http:\0".into();
        invalid(store.create_session(bad).await, "token");

        let good = record(&SessionId::generate());
        store.create_session(good.clone()).await.unwrap();
        invalid(
            store
                .rotate_token(&good.id, &good.continuation_token, "http:\0x")
                .await
                .map(|_| ()),
            "rotated token",
        );
        assert_eq!(store.find_by_token("http:\0x").await.unwrap(), None);
        let mut renamed = good.clone();
        renamed.principal = Some("\0".into());
        invalid(store.update_session(renamed).await, "updated principal");
        assert_eq!(
            store.get_session(&good.id).await.unwrap(),
            Some(good.clone())
        );

        // NUL inside JSON (session extra, event text, kv values) is fine.
        let mut odd = record(&SessionId::generate());
        odd.extra = json!({"note": "a\u{0}b"});
        store.create_session(odd.clone()).await.unwrap();
        assert_eq!(store.get_session(&odd.id).await.unwrap(), Some(odd.clone()));
        let envs = store
            .append(&odd.id, vec![delta("x\u{0}y".into())])
            .await
            .unwrap();
        assert_eq!(store.read(&odd.id, 0).await.unwrap(), envs);
        store.kv_put("ns", "k", json!("\u{0}")).await.unwrap();
        assert_eq!(store.kv_get("ns", "k").await.unwrap(), Some(json!("\u{0}")));

        let artifact = bdk_store::ArtifactRecord {
            id: "art_nul".into(),
            session_id: None,
            principal: None,
            kind: "re\0port".into(),
            name: "a.md".into(),
            content_type: "text/markdown".into(),
            size: 1,
            metadata: serde_json::Value::Null,
            created_at: Utc::now().trunc_subsecs(3),
        };
        invalid(
            store.artifact_put(artifact, b"x".to_vec()).await,
            "artifact kind",
        );
        let filter = bdk_store::ArtifactFilter {
            kind: Some("\0".into()),
            ..Default::default()
        };
        assert_eq!(store.artifact_list(&filter).await.unwrap(), vec![]);
        store.close().await;
    })
    .await;
}
