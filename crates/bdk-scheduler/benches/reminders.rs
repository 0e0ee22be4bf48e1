//! The reminder benchmarks, run by `cargo xtask bench` (release build, no
//! harness); the report format is `bdk-core`'s `runtime` program's (see
//! there). `--quick` runs small sample counts for a smoke run.
//!
//! Benchmarks measure, tests assert: nothing here is a pass/fail test.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use bdk_bench::{Bench, help, machine, micros, percentile, rss_bytes};
use bdk_core::host::{Host, StartSession};
use bdk_scheduler::reminders::{NewReminder, Reminders};
use bdk_store::{FsStore, Store};
use serde_json::{Value, json};

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; only `--quick` and `--help` mean anything here.
    let args: Vec<String> = std::env::args().collect();
    if let Some(usage) = help(&args, "", &[]) {
        print!("{usage}");
        return ExitCode::SUCCESS;
    }
    let quick = args.iter().any(|a| a == "--quick");
    match run(quick) {
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

fn run(quick: bool) -> Result<Value> {
    let scratch = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let count = |full: usize| if quick { (full / 100).max(50) } else { full };
    let mut benchmarks = Vec::new();
    for bench in reminders_armed(&runtime, scratch.path(), count)? {
        eprintln!("{}", bench.summary());
        benchmarks.push(bench.to_json());
    }
    Ok(json!({
        "machine": machine(),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "quick": quick,
        "benchmarks": benchmarks,
    }))
}

/// Reminders armed by the reminder-timer benchmark.
const ARMED_REMINDERS: usize = 100_000;
/// Reminders per idle chat session in that benchmark.
const REMINDERS_PER_SESSION: usize = 100;
/// Next-fire lookups timed once they are armed.
const LOOKUPS: usize = 100_000;

/// Timer overhead with many reminders armed: 100,000 prompt reminders
/// on idle chat sessions, all due in 30 days so none fires during the run.
/// Reports the resident memory each armed reminder costs and the latency of
/// the timer's next-fire lookup, which it repeats after every change to the
/// table. DESIGN gives no target for either, so both report an empty target.
fn reminders_armed(
    runtime: &tokio::runtime::Runtime,
    scratch: &std::path::Path,
    count: impl Fn(usize) -> usize,
) -> Result<Vec<Bench>> {
    let dir = scratch.join("reminders-project");
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "Benchmark agent.\n"),
        ("agent/scripted.toml", "[[rules]]\nreply = \"ok\"\n"),
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
    let total = count(ARMED_REMINDERS);
    let sessions = total.div_ceil(REMINDERS_PER_SESSION).max(1);
    let lookups = count(LOOKUPS);
    let (grown, mut latencies) = runtime.block_on(async {
        let store: Arc<dyn Store> = Arc::new(FsStore::open(scratch.join("reminders"))?);
        let reminders = Arc::new(Reminders::new());
        let host = Host::builder(project, store)
            .extension(Arc::clone(&reminders) as Arc<dyn bdk_core::extension::HostExtension>)
            .build()
            .await?;
        let mut ids = Vec::with_capacity(sessions);
        for _ in 0..sessions {
            ids.push(
                host.start_session(StartSession::default())
                    .await?
                    .session_id,
            );
        }
        // The baseline is taken once the sessions exist, so the growth is
        // that of the reminder table alone (plus the store's own caching of
        // what it wrote, which a host pays for every reminder too).
        let before = rss_bytes().ok_or("cannot read /proc/self/statm")?;
        for i in 0..total {
            let session = &ids[i % sessions];
            reminders
                .create(
                    session,
                    NewReminder {
                        delay: Some("30d".into()),
                        prompt: Some(format!("reminder {i}")),
                        ..Default::default()
                    },
                )
                .await?;
        }
        let grown = rss_bytes()
            .ok_or("cannot read /proc/self/statm")?
            .saturating_sub(before);
        let mut latencies = Vec::with_capacity(lookups);
        for _ in 0..lookups {
            let start = Instant::now();
            let next = reminders.next_fire();
            let elapsed = start.elapsed();
            if next.is_none() {
                return Err::<_, BenchError>("no reminder is armed".into());
            }
            latencies.push(elapsed);
        }
        Ok((grown, latencies))
    })?;
    latencies.sort_unstable();
    Ok(vec![
        Bench::new(
            "reminders.armed_100k.bytes_per_reminder",
            "bytes",
            total,
            json!({ "value": (grown as f64 / total as f64).round() }),
            json!({}),
        ),
        Bench::new(
            "reminders.next_fire_lookup",
            "us",
            latencies.len(),
            json!({
                "p50": micros(percentile(&latencies, 50)),
                "p99": micros(percentile(&latencies, 99)),
            }),
            json!({}),
        ),
    ])
}
