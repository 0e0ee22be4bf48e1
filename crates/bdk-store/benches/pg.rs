//! PostgreSQL store benchmarks, run by `cargo xtask bench` beside the file
//! store's figures from `bdk-core`'s runtime benchmarks. A plain program (no
//! harness) that prints one JSON report on stdout in the same shape:
//!
//! ```text
//! {"machine": {...}, "profile": "release", "quick": false,
//!  "benchmarks": [{"name": "pgstore.append.batch1", "unit": "events/s", ...}]}
//! ```
//!
//! - `pgstore.append.batch1` / `batch64`: append throughput into one session,
//!   one event per call and 64 per call (every call is a committed
//!   transaction).
//! - `pgstore.subscribe.cross_replica.latency`: from the start of an append
//!   through one store to the moment a follower on a second store (its own
//!   pool and listener, as on another replica) yields the event.
//!
//! The database is `BDK_TEST_DATABASE_URL` (default the local server); the
//! run uses a fresh schema and drops it at the end. An unreachable database
//! fails the run.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bdk_bench::{Bench, help, machine};
use bdk_events::{MessageAppended, SessionId, SessionMode, TurnId};
use bdk_store::{NewEvent, PgOptions, PgStore, SessionRecord, Store};
use chrono::Utc;
use futures::StreamExt;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

/// Events appended per throughput figure (one per call, 64 per call).
const APPEND_EVENTS: [(usize, usize); 2] = [(1, 5_000), (64, 64_000)];
/// Samples of the cross-replica delivery latency.
const LATENCY_EVENTS: usize = 500;
/// How long one event may take to reach the follower before the run fails.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(usage) = help(&args, "", &[]) {
        print!("{usage}");
        return ExitCode::SUCCESS;
    }
    let quick = args.iter().any(|a| a == "--quick");
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(quick)) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench: the PostgreSQL benchmarks failed: {e}");
            ExitCode::FAILURE
        }
    }
}

fn database_url() -> String {
    std::env::var("BDK_TEST_DATABASE_URL")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

async fn run(quick: bool) -> Result<Value> {
    let url = database_url();
    let schema = format!("bdk_bench_{}", std::process::id());
    let scratch = tempfile::tempdir()?;
    let open = |name: &str| {
        PgStore::connect(
            PgOptions::new(url.clone(), scratch.path().join(name))
                .schema(schema.clone())
                .max_connections(4),
        )
    };
    let outcome = async {
        let writer = open("writer").await.map_err(|e| {
            format!(
                "cannot reach PostgreSQL at BDK_TEST_DATABASE_URL or the default local server: {e}"
            )
        })?;
        let follower = open("follower").await?;
        let mut benchmarks = Vec::new();
        for (batch, full) in APPEND_EVENTS {
            let total = if quick { (full / 20).max(64) } else { full };
            let rate = append_rate(&writer, total, batch).await?;
            benchmarks.push(progress(Bench::throughput(
                format!("pgstore.append.batch{batch}"),
                "events/s",
                total,
                rate,
                json!({ "value": { "min": if batch == 1 { 500.0 } else { 10_000.0 } } }),
            )));
        }
        let count = if quick { 50 } else { LATENCY_EVENTS };
        let mut latencies = cross_replica_latencies(&writer, &follower, count).await?;
        benchmarks.push(progress(Bench::latency_ms(
            "pgstore.subscribe.cross_replica.latency",
            &mut latencies,
            json!({ "p50": { "max": 10.0 } }),
        )));
        writer.close().await;
        follower.close().await;
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(benchmarks)
    }
    .await;
    drop_schema(&url, &schema).await;
    let benchmarks = outcome?;
    Ok(json!({
        "machine": machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "quick": quick,
        "benchmarks": benchmarks,
    }))
}

/// Prints `bench`'s progress line on stderr and returns its report entry.
fn progress(bench: Bench) -> Value {
    eprintln!("{}", bench.summary());
    bench.to_json()
}

async fn drop_schema(url: &str, schema: &str) {
    let Ok(mut conn) = sqlx::PgConnection::connect(url).await else {
        return;
    };
    let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
    if let Err(e) = conn.execute(sqlx::AssertSqlSafe(sql)).await {
        eprintln!("bench: could not drop schema {schema}: {e}");
    }
    let _ = conn.close().await;
}

async fn new_session(store: &PgStore) -> Result<SessionId> {
    let id = SessionId::generate();
    let now = Utc::now();
    store
        .create_session(SessionRecord {
            id: id.clone(),
            mode: SessionMode::Chat,
            channel: "bench".into(),
            principal: None,
            continuation_token: format!("bench:{id}"),
            title: None,
            purpose: None,
            dry_run: false,
            as_of: None,
            created_at: now,
            updated_at: now,
            extra: Value::Null,
        })
        .await?;
    Ok(id)
}

fn small_event(turn: &TurnId) -> NewEvent {
    NewEvent::turn(
        turn,
        MessageAppended {
            delta: "The weather in Paris ".into(),
        },
    )
}

async fn append_rate(store: &PgStore, total: usize, batch: usize) -> Result<f64> {
    let id = new_session(store).await?;
    let event = small_event(&TurnId::generate());
    let started = Instant::now();
    let mut appended = 0;
    while appended < total {
        let n = batch.min(total - appended);
        store.append(&id, vec![event.clone(); n]).await?;
        appended += n;
    }
    let elapsed = started.elapsed();
    let recorded = store.next_index(&id).await?;
    if recorded != total as u64 {
        return Err(format!("appended {total} events but the store recorded {recorded}").into());
    }
    Ok(total as f64 / elapsed.as_secs_f64())
}

async fn cross_replica_latencies(
    writer: &PgStore,
    follower: &PgStore,
    count: usize,
) -> Result<Vec<Duration>> {
    let id = new_session(writer).await?;
    let mut stream = follower.subscribe(&id, 0).await?;
    let event = small_event(&TurnId::generate());
    let mut out = Vec::with_capacity(count);
    // A few untimed rounds warm the pools and the listener.
    for round in 0..count + 20 {
        let started = Instant::now();
        writer.append(&id, vec![event.clone()]).await?;
        match tokio::time::timeout(DELIVERY_DEADLINE, stream.next()).await {
            Ok(Some(Ok(env))) if env.index == round as u64 => {}
            Ok(Some(Ok(env))) => {
                return Err(
                    format!("expected index {round}, the follower got {}", env.index).into(),
                );
            }
            Ok(Some(Err(e))) => return Err(e.into()),
            Ok(None) => return Err("the follower's stream ended".into()),
            Err(_) => return Err("an event did not reach the follower within 10s".into()),
        }
        if round >= 20 {
            out.push(started.elapsed());
        }
    }
    Ok(out)
}
