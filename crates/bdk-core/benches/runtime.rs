//! Runtime benchmarks, run by `cargo xtask bench` (release build, no harness).
//!
//! The program prints exactly one JSON object on stdout:
//!
//! ```json
//! {"machine": {"cores": 2, "cpu": "...", "os": "linux", "arch": "x86_64"},
//!  "profile": "release", "quick": false,
//!  "benchmarks": [{"name": "store.append.batch1", "unit": "events/s",
//!                  "samples": 200000, "measured": {"value": 250000},
//!                  "target": {"value": {"min": 100000}}, "meetsTarget": true}]}
//! ```
//!
//! `measured` holds `value` (a throughput) or `p50`/`p99` (a latency);
//! `target` bounds some of those keys with `min` or `max`, and `meetsTarget`
//! is true when every bound holds. Progress goes to stderr. `--quick` runs
//! small sample counts for a smoke run; the numbers are then not meaningful.
//!
//! Benchmarks measure, tests assert: nothing here is a pass/fail test, and
//! no test anywhere asserts a timing.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use bdk_bench::{Bench, help, machine, only_groups};
use bdk_events::{MessageAppended, SessionId, SessionMode, TurnId};
use bdk_store::{FsStore, NewEvent, SessionRecord, Store};
use chrono::Utc;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::runtime::Runtime;

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

/// One group of benchmarks: runs against the shared environment and returns
/// its report entries.
type BenchFn = fn(&Env) -> Result<Vec<Bench>>;

/// Every benchmark group, in report order, each with a name for `--only`. A
/// new benchmark is a function of type [`BenchFn`] added here.
const BENCHMARKS: &[(&str, BenchFn)] = &[
    ("store.append", store_append_throughput),
    ("store.subscribe", store_subscribe_latency),
    ("turn.overhead", turn_overhead),
];

/// Turns timed by the turn-overhead benchmark.
const TURNS: usize = 2_000;
/// Turns per session in the turn-overhead benchmark.
const TURNS_PER_SESSION: usize = 10;
/// Untimed turns first, so workspace creation and cold caches stay out.
const TURN_WARMUP: usize = 50;

/// Events appended by the throughput benchmark.
const APPEND_EVENTS: usize = 200_000;
/// Events timed by the delivery-latency benchmark.
const LATENCY_EVENTS: usize = 10_000;
/// Untimed appends before the latency samples, so file creation and the
/// first wake-ups of the runtime's workers are not in the figures.
const LATENCY_WARMUP: usize = 200;
/// How long one event may take to reach the subscriber before the run fails
/// instead of hanging.
const DELIVERY_DEADLINE: Duration = Duration::from_secs(10);

/// What every benchmark can use.
struct Env {
    runtime: Runtime,
    /// A scratch directory on the same filesystem as the target directory,
    /// removed when the run ends.
    scratch: tempfile::TempDir,
    quick: bool,
}

impl Env {
    /// `full` normally, a small count under `--quick`.
    fn count(&self, full: usize) -> usize {
        if self.quick {
            (full / 100).max(50)
        } else {
            full
        }
    }

    /// A fresh store root for one benchmark.
    fn store_root(&self, name: &str) -> std::path::PathBuf {
        self.scratch.path().join(name)
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; only `--quick` and `--only GROUP`
    // (repeatable: run just the groups named) and `--help` mean anything here.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let names: Vec<&str> = BENCHMARKS.iter().map(|(name, _)| *name).collect();
    if let Some(usage) = help(&args, "", &names) {
        print!("{usage}");
        return ExitCode::SUCCESS;
    }
    let result = only_groups(&args, &names)
        .map_err(BenchError::from)
        .and_then(|only| run(quick, &only));
    match result {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("bench: failed: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(quick: bool, only: &[&str]) -> Result<Value> {
    let env = Env {
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        scratch: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?,
        quick,
    };
    let mut benchmarks = Vec::new();
    for (name, group) in BENCHMARKS {
        if !only.is_empty() && !only.contains(name) {
            continue;
        }
        for bench in group(&env)? {
            eprintln!("{}", bench.summary());
            benchmarks.push(bench.to_json());
        }
    }
    Ok(json!({
        "machine": machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "quick": quick,
        "benchmarks": benchmarks,
    }))
}

/// A chat session in `store`, ready for appends.
async fn new_session(store: &dyn Store) -> Result<SessionId> {
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

/// A small streamed-text event: the most frequent event of a turn, and not a
/// boundary, so the store appends it without an fsync.
fn small_event(turn: &TurnId) -> NewEvent {
    NewEvent::turn(
        turn,
        MessageAppended {
            delta: "The weather in Paris ".into(),
        },
    )
}

/// (a) Append throughput into one session, one event per call and 64 per call.
fn store_append_throughput(env: &Env) -> Result<Vec<Bench>> {
    let total = env.count(APPEND_EVENTS);
    let mut out = Vec::new();
    for batch in [1, 64] {
        // Opening is a few synchronous mkdirs, done before entering the runtime.
        let store = FsStore::open(env.store_root(&format!("append-{batch}")))?;
        let rate = env.runtime.block_on(append_rate(&store, total, batch))?;
        out.push(Bench::throughput(
            format!("store.append.batch{batch}"),
            "events/s",
            total,
            rate,
            json!({ "value": { "min": 100_000.0 } }),
        ));
    }
    Ok(out)
}

async fn append_rate(store: &FsStore, total: usize, batch: usize) -> Result<f64> {
    let id = new_session(store).await?;
    let first = store.next_index(&id).await?;
    let turn = TurnId::generate();
    let event = small_event(&turn);

    let started = Instant::now();
    let mut appended = 0;
    while appended < total {
        let n = batch.min(total - appended);
        store.append(&id, vec![event.clone(); n]).await?;
        appended += n;
    }
    let elapsed = started.elapsed();

    // A throughput figure is only worth printing if every event landed.
    let recorded = store.next_index(&id).await? - first;
    if recorded != total as u64 {
        return Err(format!("appended {total} events but the store recorded {recorded}").into());
    }
    Ok(total as f64 / elapsed.as_secs_f64())
}

/// (b) Delivery latency to a live subscriber: from the start of the append
/// call to the moment the subscriber's stream yields the event.
fn store_subscribe_latency(env: &Env) -> Result<Vec<Bench>> {
    let count = env.count(LATENCY_EVENTS);
    let store = FsStore::open(env.store_root("subscribe"))?;
    let mut latencies = env.runtime.block_on(delivery_latencies(&store, count))?;
    Ok(vec![Bench::latency_ms(
        "store.subscribe.latency",
        &mut latencies,
        json!({ "p50": { "max": 1.0 } }),
    )])
}

async fn delivery_latencies(store: &FsStore, count: usize) -> Result<Vec<Duration>> {
    let id = new_session(store).await?;
    let from = store.next_index(&id).await?;
    let mut stream = store.subscribe(&id, from).await?;

    // The subscriber runs as its own task, as a stream reader would, and
    // stamps each event the moment its stream yields it.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            let received = Instant::now();
            let sent = item.map(|envelope| (envelope.index, received));
            if seen_tx.send(sent).is_err() {
                break;
            }
        }
    });

    let turn = TurnId::generate();
    let event = small_event(&turn);
    let mut latencies = Vec::with_capacity(count);
    let result: Result<()> = async {
        // One event in flight at a time: the figure is the delivery path's
        // latency, not the depth of a queue the benchmark built up itself.
        for i in 0..LATENCY_WARMUP + count {
            let started = Instant::now();
            let recorded = store.append(&id, vec![event.clone()]).await?;
            let index = recorded
                .first()
                .map(|e| e.index)
                .ok_or("append returned no envelope")?;
            let (seen, received) = tokio::time::timeout(DELIVERY_DEADLINE, seen_rx.recv())
                .await
                .map_err(|_| format!("event {index} did not reach the subscriber in time"))?
                .ok_or("the subscriber's stream ended early")??;
            if seen != index {
                return Err(format!("subscriber saw index {seen}, expected {index}").into());
            }
            if i >= LATENCY_WARMUP {
                latencies.push(received.duration_since(started));
            }
        }
        Ok(())
    }
    .await;
    // The benchmark owns the reader task and ends it whatever happened.
    reader.abort();
    result?;
    Ok(latencies)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct EchoInput {
    text: String,
}

/// (c) Runtime overhead of one turn: the scripted model (no delay) asks for
/// one in-process read tool, then answers from its result; every event goes
/// to FsStore (with the fsyncs at turn boundaries). Measured from the send to
/// the recorded `turn.completed`, which is everything but model time.
fn turn_overhead(env: &Env) -> Result<Vec<Bench>> {
    let dir = env.scratch.path().join("turn-project");
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "Benchmark agent.\n"),
        (
            "agent/scripted.toml",
            "[[rules]]\ntool_result = \"echo\"\nreply = \"echoed {{ result_text }}\"\n\n[[rules]]\ntool_calls = [{ name = \"echo\", input = { text = \"{{ user }}\" } }]\n",
        ),
    ];
    for (path, content) in files {
        let p = dir.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(p, content)?;
    }
    let discovery = bdk_core::discover(&dir);
    let valid = !discovery.has_errors();
    let project = discovery
        .project
        .filter(|_| valid)
        .ok_or("the benchmark project does not validate")?;
    let turns = env.count(TURNS);
    let root = env.store_root("turns");
    // The loop runs as a task on the runtime's workers, where a server's
    // request handlers run, not on the thread that blocks on the runtime.
    let run = env.runtime.spawn(async move {
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(FsStore::open(root)?);
        let echo = bdk_core::tool::native::native_tool(
            "echo",
            "returns its input",
            |i: EchoInput, _ctx| async move { Ok(json!({ "text": i.text })) },
        )
        .effect(bdk_core::tool::Effect::Read);
        let host = bdk_core::host::Host::builder(project, store)
            .tool(std::sync::Arc::new(echo))
            .build()
            .await?;
        let mut session = host
            .start_session(bdk_core::host::StartSession::default())
            .await?
            .session_id;
        let mut latencies = Vec::with_capacity(turns);
        for i in 0..TURN_WARMUP + turns {
            // A fresh (untimed) session every few turns: this measures the
            // cost of a turn, not of an ever longer conversation, which the
            // model has to read in full on every step anyway.
            if i % TURNS_PER_SESSION == 0 {
                session = host
                    .start_session(bdk_core::host::StartSession::default())
                    .await?
                    .session_id;
            }
            let start = Instant::now();
            let sent = host
                .send(
                    &session,
                    bdk_core::host::FollowUp {
                        message: format!("turn {i}"),
                        ..Default::default()
                    },
                )
                .await?;
            let turn = sent.turn_id.ok_or("the send did not start a turn")?;
            let result = host
                .wait_turn_from(&session, &turn, sent.index.unwrap_or(0))
                .await?;
            let elapsed = start.elapsed();
            if !result.ok {
                return Err(format!("turn failed: {}", result.reply).into());
            }
            host.wait_idle(&session).await;
            if i >= TURN_WARMUP {
                latencies.push(elapsed);
            }
        }
        Ok::<_, BenchError>(latencies)
    });
    let mut latencies = env.runtime.block_on(run)??;
    Ok(vec![Bench::latency_ms(
        "turn.overhead",
        &mut latencies,
        json!({ "p50": { "max": 1.0 }, "p99": { "max": 5.0 } }),
    )])
}
