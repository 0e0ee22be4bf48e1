//! HTTP benchmarks, run by `cargo xtask bench` beside the runtime ones
//! (release build, no harness).
//!
//! They measure the served API end to end over loopback: an in-process
//! server (`bdk_http::app` run by `bdk_http::serve` on 127.0.0.1:0, an
//! `FsStore` in a scratch directory, a scripted agent whose fallback rule
//! replies directly, and one native read tool) driven by a pooled reqwest
//! client; the memory figure uses the same host without HTTP; the startup
//! figure spawns the real `bdk` binary on `examples/weather`.
//!
//! The program prints exactly one JSON object on stdout, in the shape of the
//! runtime benchmarks' report (`crates/bdk-core/benches/runtime.rs`):
//!
//! ```json
//! {"machine": {"cores": 2, "cpu": "...", "os": "linux", "arch": "x86_64"},
//!  "profile": "release", "quick": false,
//!  "benchmarks": [{"name": "http.stream.delivery", "unit": "ms",
//!                  "samples": 5000, "measured": {"p50": 0.2, "p99": 0.5},
//!                  "target": {"p50": {"max": 1.0}}, "meetsTarget": true}]}
//! ```
//!
//! `measured` holds `value` (a throughput, a size or a count) or `p50`/`p99`
//! (a latency), plus context figures some entries add; `target` bounds some
//! of those keys and `meetsTarget` is true when every bound holds. A `min`
//! bound is inclusive and a `max` bound exclusive ("under 1 ms"), as in the
//! runtime report, except on the loss count `lost`, where `max: 0` means
//! "none lost" and is inclusive. The design brief sets no target for session
//! start latency, session throughput or direct-call throughput: those report
//! an empty `target`, which has no bound to miss, so `meetsTarget` is true.
//! Progress goes to stderr. `--quick` runs small sample counts for a smoke
//! run; the numbers are then not meaningful.
//!
//! Benchmarks measure, tests assert: nothing here is a pass/fail test, and
//! no test anywhere asserts a timing.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bdk_bench::{Bench, help, machine, millis, only_groups};
use bdk_core::host::{Host, MemoryStats, StartSession};
use bdk_core::tool::native::native_tool;
use bdk_core::tool::{Effect, ToolContext};
use bdk_events::{MessageAppended, SessionId, TurnId};
use bdk_http::{Config, Mount};
use bdk_store::{FsStore, NewEvent, Store};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

// Not `benches/load.rs`: cargo would take that for a benchmark program.
#[path = "http/load.rs"]
mod load;

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

/// One group of benchmarks: runs against the shared environment and returns
/// its report entries.
type BenchFn = fn(&Env) -> Result<Vec<Bench>>;

/// Every benchmark group, in report order. The memory figure comes first, so
/// that memory freed by earlier groups cannot be reused by the sessions it
/// counts and flatter the figure.
/// Each has a name for `--only`.
const BENCHMARKS: &[(&str, BenchFn)] = &[
    ("memory.idle", idle_session_memory),
    ("memory.rested", rested_session_memory),
    ("session.start", session_start),
    ("session.throughput", session_throughput),
    ("tool.throughput", tool_call_throughput),
    ("stream.delivery", stream_delivery),
    ("stream.readers", stream_readers),
    ("serve.ready", serve_ready),
    ("tool.spawn", tool_spawn),
    ("turn.load", turn_load),
];

/// Program runs timed by the spawn benchmark, per variant.
const SPAWNS: usize = 300;

/// Sessions timed by the start-to-waiting latency benchmark.
const START_SESSIONS: usize = 500;
/// Sessions started per concurrency level by the throughput benchmark.
const RATE_SESSIONS_C1: usize = 300;
const RATE_SESSIONS_C32: usize = 2_000;
/// Direct tool calls timed by the tool-call throughput benchmark.
const TOOL_CALLS: usize = 20_000;
/// Concurrent callers of the throughput benchmarks.
const CONCURRENCY: usize = 32;
/// Events timed by the stream delivery benchmark.
const DELIVERY_EVENTS: usize = 5_000;
/// Stream readers of one session in the fan-out benchmark (also in `--quick`,
/// where only the events per reader shrink: the reader count is the point).
const READERS: usize = 1_000;
/// Events each of those readers must receive.
const READER_EVENTS: usize = 100;
/// Idle sessions held by the memory benchmark.
const IDLE_SESSIONS: usize = 10_000;
/// Concurrent creators of those sessions: enough to keep the store busy on
/// two cores without making the transient allocations of creation the bulk
/// of what is measured.
const IDLE_CREATORS: usize = 8;
/// Sessions run to rest, one short turn each, by the rested-memory benchmark.
const RESTED_SESSIONS: usize = 10_000;
/// Sessions started with a big first message by the same benchmark.
const BIG_SESSIONS: usize = 200;
/// The size of that message: just under the server's 1 MiB body limit.
const BIG_MESSAGE: usize = 1_000_000;
/// "Within a few MB of the idle figure": the bound on what resting sessions
/// may add to the RSS of an idle server, over what the conversation cache
/// holds by design (up to its budget, `DEFAULT_SESSION_CACHE_BYTES`).
const RESTED_MAX_BYTES: u64 = 5 * 1024 * 1024;
/// `bdk serve` starts timed by the readiness benchmark.
const SERVE_STARTS: usize = 20;
/// Untimed iterations before a timed run, so connection setup, file creation
/// and cold caches stay out of the figures.
const WARMUP: usize = 50;

/// How long one request, one stream line or one server start may take before
/// the run fails instead of hanging.
const DEADLINE: Duration = Duration::from_secs(30);
/// How long the fan-out benchmark waits for every reader to finish; a reader
/// still short of its events then counts them as lost.
const READERS_DEADLINE: Duration = Duration::from_secs(120);

/// The benchmark agent's scripted model: one fallback rule that replies
/// directly, so a turn is one model step with no tool call.
const RULES: &str = "[[rules]]\nreply = \"ok: {{ user }}\"\n";

/// What every benchmark can use.
struct Env {
    runtime: Runtime,
    /// A scratch directory on the same filesystem as the target directory,
    /// removed when the run ends.
    scratch: tempfile::TempDir,
    quick: bool,
    /// The `bdk` program `turn.load` serves with: this build's, or the one
    /// `--server PATH` names (another build, timed by the same driver in
    /// the same run, for before/after figures).
    server: PathBuf,
    /// Whether `server` is another build than this one.
    other_server: bool,
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

    /// A fresh directory for one benchmark.
    fn dir(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }
}

/// Runs this program under the allocator setting of `bdk serve`
/// (`src/malloc.rs`), so the memory figures are the server's: re-executes
/// once with the same `GLIBC_TUNABLES` unless it is set already.
fn run_like_serve() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("GLIBC_TUNABLES").is_none()
        && let Ok(exe) = std::env::current_exe()
    {
        use std::os::unix::process::CommandExt;
        let err = std::process::Command::new(exe)
            .args(std::env::args_os().skip(1))
            .env("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=131072")
            .exec();
        eprintln!("bench: could not re-execute with GLIBC_TUNABLES: {err}");
    }
}

fn main() -> ExitCode {
    run_like_serve();
    // `cargo bench` passes `--bench`; only `--quick`, `--only GROUP`
    // (repeatable: run just the groups named, e.g. `--only turn.load`),
    // `--server PATH` (serve `turn.load` with another build of `bdk`) and
    // `--help` mean anything here.
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let names: Vec<&str> = BENCHMARKS.iter().map(|(name, _)| *name).collect();
    let server_option =
        "  --server PATH    serve turn.load with another build of bdk (an absolute path)\n";
    if let Some(usage) = help(&args, server_option, &names) {
        print!("{usage}");
        return ExitCode::SUCCESS;
    }
    let only = match only_groups(&args, &names) {
        Ok(only) => only,
        Err(e) => {
            eprintln!("bench: failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    // A `--server` without its path must not quietly time this build.
    if args.last().is_some_and(|a| a == "--server") {
        eprintln!("bench: --server needs the path of a bdk program");
        return ExitCode::FAILURE;
    }
    let server = args
        .windows(2)
        .find(|w| w[0] == "--server")
        .map(|w| PathBuf::from(&w[1]));
    match run(quick, &only, server) {
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

fn run(quick: bool, only: &[&str], other: Option<PathBuf>) -> Result<Value> {
    if let Some(path) = other.as_ref().filter(|p| !p.is_file()) {
        return Err(format!("--server {}: no such program", path.display()).into());
    }
    bdk_models::net::install_crypto_provider();
    let env = Env {
        runtime: tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        scratch: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR"))?,
        quick,
        other_server: other.is_some(),
        server: other.unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bdk"))),
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

// ---------------------------------------------------------------------------
// The benchmark agent, the in-process server and the client side.

#[derive(Deserialize, schemars::JsonSchema)]
struct EchoInput {
    text: String,
}

/// Writes the benchmark agent under `dir` and builds its host over an
/// `FsStore` at `dir/state`, with the native `echo` read tool registered.
async fn bench_host(dir: &Path) -> Result<Host> {
    let project_dir = dir.join("project");
    let files = [
        ("agent/agent.toml", "model = \"scripted\"\n"),
        ("agent/instructions.md", "Benchmark agent.\n"),
        ("agent/scripted.toml", RULES),
    ];
    for (path, content) in files {
        let p = project_dir.join(path);
        if let Some(parent) = p.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::write(p, content).await?;
    }
    // Discovery reads a handful of small files; off the runtime's workers
    // like any other file walk.
    let discovery = tokio::task::spawn_blocking(move || bdk_core::discover(&project_dir)).await?;
    let valid = !discovery.has_errors();
    let project = discovery
        .project
        .filter(|_| valid)
        .ok_or("the benchmark project does not validate")?;
    let state = dir.join("state");
    let store: Arc<dyn Store> =
        Arc::new(tokio::task::spawn_blocking(move || FsStore::open(state)).await??);
    let echo = native_tool(
        "echo",
        "Returns its input.",
        |i: EchoInput, _ctx: ToolContext| async move { Ok(json!({ "text": i.text })) },
    )
    .effect(Effect::Read);
    Ok(Host::builder(project, store)
        .tool(Arc::new(echo))
        .build()
        .await?)
}

/// The benchmark agent served in this process (single mode, `/v1/*`).
struct Served {
    host: Host,
    base: String,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    async fn start(dir: &Path) -> Result<Self> {
        let host = bench_host(dir).await?;
        let shutdown = CancellationToken::new();
        let config = Config {
            shutdown: shutdown.clone(),
            ..Config::default()
        };
        let app = bdk_http::app(
            vec![Mount {
                slug: None,
                host: host.clone(),
                diagnostics: Vec::new(),
                reload: None,
            }],
            config,
        );
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let base = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(bdk_http::serve(listener, app, shutdown.clone()));
        Ok(Served {
            host,
            base,
            shutdown,
            task,
        })
    }

    /// Ends open streams, stops the server and waits for it.
    async fn stop(self) -> Result<()> {
        self.shutdown.cancel();
        match tokio::time::timeout(DEADLINE, self.task).await {
            Ok(served) => Ok(served??),
            Err(_) => Err("the in-process server did not stop in time".into()),
        }
    }
}

/// A pooled client, as a real caller would keep one.
fn client() -> Result<reqwest::Client> {
    // No whole-request timeout: it would also cut long-lived streams. Each
    // await below has its own deadline instead.
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .tcp_nodelay(true)
        .build()?)
}

/// POSTs JSON and returns the `ok: true` answer.
async fn post_ok(http: &reqwest::Client, url: &str, body: &Value) -> Result<Value> {
    let resp = tokio::time::timeout(DEADLINE, http.post(url).json(body).send()).await??;
    let status = resp.status();
    let answer: Value = tokio::time::timeout(DEADLINE, resp.json()).await??;
    if !status.is_success() || answer["ok"] != true {
        return Err(format!("POST {url} answered {status}: {answer}").into());
    }
    Ok(answer)
}

/// The two fields of an event line the benchmarks look at.
#[derive(Deserialize)]
struct Line {
    #[serde(rename = "type")]
    kind: String,
    index: u64,
}

/// An NDJSON stream as a client reads it.
struct Lines {
    resp: reqwest::Response,
    buf: Vec<u8>,
    /// When the last chunk arrived: every complete line still in `buf` was
    /// completed by it, since a chunk is only read once `buf` has none.
    arrived: Instant,
}

impl Lines {
    /// Opens `GET /v1/session/:id/stream?startIndex=from`.
    async fn open(http: &reqwest::Client, base: &str, id: &str, from: u64) -> Result<Self> {
        let url = format!("{base}/v1/session/{id}/stream?startIndex={from}");
        let resp = tokio::time::timeout(DEADLINE, http.get(&url).send()).await??;
        if !resp.status().is_success() {
            return Err(format!("GET {url} answered {}", resp.status()).into());
        }
        Ok(Lines {
            resp,
            buf: Vec::new(),
            arrived: Instant::now(),
        })
    }

    /// The next event and when its line arrived, or `None` when the body
    /// ended. Heartbeat (blank) lines are skipped.
    async fn next(&mut self) -> Result<Option<(Line, Instant)>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=pos).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some((serde_json::from_slice(&line)?, self.arrived)));
            }
            match tokio::time::timeout(DEADLINE, self.resp.chunk()).await?? {
                Some(chunk) => {
                    self.arrived = Instant::now();
                    self.buf.extend_from_slice(&chunk);
                }
                None if self.buf.is_empty() => return Ok(None),
                None => return Err("the stream ended mid-line".into()),
            }
        }
    }

    /// Reads until an event of type `kind`.
    async fn until(&mut self, kind: &str) -> Result<()> {
        while let Some((line, _)) = self.next().await? {
            if line.kind == kind {
                return Ok(());
            }
        }
        Err(format!("the stream ended before {kind}").into())
    }
}

/// One session as a client runs it: `POST /v1/session` with a message, then
/// the session's stream from the start until the turn has ended and the
/// session rests in `session.waiting`.
async fn session_to_waiting(http: &reqwest::Client, base: &str, n: usize) -> Result<()> {
    let started = post_ok(
        http,
        &format!("{base}/v1/session"),
        &json!({ "message": format!("hello {n}") }),
    )
    .await?;
    let id = started["sessionId"]
        .as_str()
        .ok_or("the start answer has no sessionId")?;
    // With a first message there is no `session.waiting` before the turn,
    // so the first one on the stream is the end of that turn.
    Lines::open(http, base, id, 0)
        .await?
        .until("session.waiting")
        .await
}

/// Runs `job(0..total)` on `concurrency` tasks; returns the wall time.
async fn run_concurrently<F, Fut>(total: usize, concurrency: usize, job: F) -> Result<Duration>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    // The set owns the workers: returning early on an error aborts the rest.
    let mut workers = JoinSet::new();
    for _ in 0..concurrency {
        let next = Arc::clone(&next);
        let job = job.clone();
        workers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, BenchError>(());
                }
                job(n).await?;
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done??;
    }
    Ok(started.elapsed())
}

// ---------------------------------------------------------------------------
// The benchmarks.

/// `memory.idle_session_bytes`: RSS growth per idle chat session, for
/// sessions created with no message (each rests in `session.waiting`) and
/// held by this process's host.
fn idle_session_memory(env: &Env) -> Result<Vec<Bench>> {
    let sessions = env.count(IDLE_SESSIONS);
    let dir = env.dir("idle");
    let bytes_per_session = env.runtime.block_on(async {
        let host = bench_host(&dir).await?;
        let create = |host: Host| {
            move |n: usize| {
                let host = host.clone();
                async move {
                    host.start_session(StartSession {
                        title: Some(format!("idle {n}")),
                        ..StartSession::default()
                    })
                    .await?;
                    Ok(())
                }
            }
        };
        // Untimed sessions first, so the allocator's arenas, the runtime's
        // workers and the store's first directories exist before the
        // baseline is taken.
        run_concurrently(WARMUP * 10, IDLE_CREATORS, create(host.clone())).await?;
        let before = rss_bytes()?;
        run_concurrently(sessions, IDLE_CREATORS, create(host.clone())).await?;
        let after = rss_bytes()?;
        let held = host.list_sessions(None).await?.len();
        if held != WARMUP * 10 + sessions {
            return Err(format!(
                "created {} sessions but the host lists {held}",
                WARMUP * 10 + sessions
            )
            .into());
        }
        Ok::<_, BenchError>(after.saturating_sub(before) as f64 / sessions as f64)
    })?;
    Ok(vec![Bench {
        name: "memory.idle_session_bytes".into(),
        unit: "bytes",
        samples: sessions,
        measured: json!({ "value": bytes_per_session.round() }),
        target: json!({ "value": { "max": 10_240 } }),
    }])
}

/// `memory.rss_after_10000_finished_sessions` and
/// `memory.rss_after_200_sessions_1mb`: how far above the RSS of an idle
/// server (warmed up, nothing running) the process stays once sessions that
/// were run to the end over HTTP rest: 10,000 with one short turn each, then
/// 200 started with a 1 MB message. What a server holds should follow the
/// running work, not the history: both should be within a few MB of idle
/// beyond the conversation cache, which holds up to its budget on purpose.
fn rested_session_memory(env: &Env) -> Result<Vec<Bench>> {
    let rested = env.count(RESTED_SESSIONS);
    let big = if env.quick { 20 } else { BIG_SESSIONS };
    let dir = env.dir("rested");
    let (idle, after_rested, after_big) = env.runtime.block_on(async {
        let served = Served::start(&dir).await?;
        let http = client()?;
        let job = |big: bool| {
            let http = http.clone();
            let base = served.base.clone();
            move |n: usize| {
                let http = http.clone();
                let base = base.clone();
                async move {
                    if big {
                        big_session_to_waiting(&http, &base, n).await
                    } else {
                        session_to_waiting(&http, &base, n).await
                    }
                }
            }
        };
        let result = async {
            // Warm up both paths (allocator arenas, connections, the store's
            // directories) before the idle figure is taken.
            run_concurrently(WARMUP * 4, CONCURRENCY, job(false)).await?;
            run_concurrently(8, 4, job(true)).await?;
            let idle = rss_at_rest(&served.host).await?.0;
            run_concurrently(rested, CONCURRENCY, job(false)).await?;
            let after_rested = rss_at_rest(&served.host).await?;
            run_concurrently(big, 4, job(true)).await?;
            let after_big = rss_at_rest(&served.host).await?;
            Ok::<_, BenchError>((idle, after_rested, after_big))
        }
        .await;
        served.stop().await?;
        result
    })?;
    let budget = bdk_core::host::DEFAULT_SESSION_CACHE_BYTES;
    let entry = |name: &str, samples: usize, (after, memory): (u64, MemoryStats)| Bench {
        name: name.into(),
        unit: "bytes",
        samples,
        measured: json!({
            "value": after.saturating_sub(idle),
            "idleRssBytes": idle,
            "rssBytes": after,
            "cachedTranscriptBytes": memory.cached_transcript_bytes,
            "transcriptBudgetBytes": memory.transcript_budget_bytes,
            "storeResidentSessions": memory.store_resident_sessions,
        }),
        target: json!({ "value": { "max": budget + RESTED_MAX_BYTES } }),
    };
    Ok(vec![
        entry(
            "memory.rss_after_10000_finished_sessions",
            rested,
            after_rested,
        ),
        entry("memory.rss_after_200_sessions_1mb", big, after_big),
    ])
}

/// The RSS once no session is in use any more (turn tasks let go of their
/// sessions right after those rest), with what the host then holds.
async fn rss_at_rest(host: &Host) -> Result<(u64, MemoryStats)> {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while host.memory().active_sessions > 0 {
        if tokio::time::Instant::now() > deadline {
            return Err(format!("sessions stayed active: {:?}", host.memory()).into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((rss_bytes()?, host.memory()))
}

/// [`session_to_waiting`] with a first message of [`BIG_MESSAGE`] bytes.
async fn big_session_to_waiting(http: &reqwest::Client, base: &str, n: usize) -> Result<()> {
    let mut message = format!("big {n} ");
    message.extend(std::iter::repeat_n('x', BIG_MESSAGE - message.len()));
    let started = post_ok(
        http,
        &format!("{base}/v1/session"),
        &json!({ "message": message }),
    )
    .await?;
    let id = started["sessionId"]
        .as_str()
        .ok_or("the start answer has no sessionId")?;
    Lines::open(http, base, id, 0)
        .await?
        .until("session.waiting")
        .await
}

/// Resident set size of this process, from `/proc/self/statm` (pages).
fn rss_bytes() -> Result<u64> {
    // A short read of a virtual file: a bounded syscall, fine on the runtime.
    let statm = std::fs::read_to_string("/proc/self/statm")?;
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .ok_or("/proc/self/statm has no resident field")?
        .parse()?;
    Ok(pages * rustix::param::page_size() as u64)
}

/// `http.session.start_to_waiting`: from `POST /v1/session` to the turn's
/// `session.waiting` line on the session's stream, one session at a time.
fn session_start(env: &Env) -> Result<Vec<Bench>> {
    let count = env.count(START_SESSIONS);
    let dir = env.dir("start");
    let mut latencies = env.runtime.block_on(async {
        let served = Served::start(&dir).await?;
        let http = client()?;
        let mut latencies = Vec::with_capacity(count);
        let result: Result<()> = async {
            for n in 0..WARMUP + count {
                let started = Instant::now();
                session_to_waiting(&http, &served.base, n).await?;
                if n >= WARMUP {
                    latencies.push(started.elapsed());
                }
            }
            Ok(())
        }
        .await;
        served.stop().await?;
        result?;
        Ok::<_, BenchError>(latencies)
    })?;
    Ok(vec![Bench::latency_ms(
        "http.session.start_to_waiting",
        &mut latencies,
        json!({}),
    )])
}

/// `http.sessions_per_s.c1` and `.c32`: sessions started and run to
/// `session.waiting` per second, by 1 and by 32 concurrent clients.
fn session_throughput(env: &Env) -> Result<Vec<Bench>> {
    let mut out = Vec::new();
    for (concurrency, full) in [(1, RATE_SESSIONS_C1), (CONCURRENCY, RATE_SESSIONS_C32)] {
        let total = env.count(full);
        let dir = env.dir(&format!("sessions-c{concurrency}"));
        let rate = env.runtime.block_on(async {
            let served = Served::start(&dir).await?;
            let http = client()?;
            let job = |http: reqwest::Client, base: String| {
                move |n: usize| {
                    let http = http.clone();
                    let base = base.clone();
                    async move { session_to_waiting(&http, &base, n).await }
                }
            };
            let result = async {
                run_concurrently(WARMUP, concurrency, job(http.clone(), served.base.clone()))
                    .await?;
                run_concurrently(total, concurrency, job(http.clone(), served.base.clone())).await
            }
            .await;
            served.stop().await?;
            Ok::<_, BenchError>(total as f64 / result?.as_secs_f64())
        })?;
        out.push(Bench::throughput(
            format!("http.sessions_per_s.c{concurrency}"),
            "sessions/s",
            total,
            rate,
            json!({}),
        ));
    }
    Ok(out)
}

/// `http.tool_calls_per_s`: direct calls of the native read tool
/// (`POST /v1/tools/echo`, bound to no session) by 32 concurrent clients.
fn tool_call_throughput(env: &Env) -> Result<Vec<Bench>> {
    let total = env.count(TOOL_CALLS);
    let dir = env.dir("tools");
    let rate = env.runtime.block_on(async {
        let served = Served::start(&dir).await?;
        let http = client()?;
        let url = format!("{}/v1/tools/echo", served.base);
        let job = move |n: usize| {
            let http = http.clone();
            let url = url.clone();
            async move {
                let text = format!("call {n}");
                let answer = post_ok(&http, &url, &json!({ "input": { "text": text } })).await?;
                // A rate is only worth printing if every call did its work.
                if answer["isError"] != false || answer["result"]["text"] != text.as_str() {
                    return Err(format!("direct call {n} answered {answer}").into());
                }
                Ok(())
            }
        };
        let result = async {
            run_concurrently(WARMUP * 4, CONCURRENCY, job.clone()).await?;
            run_concurrently(total, CONCURRENCY, job).await
        }
        .await;
        served.stop().await?;
        Ok::<_, BenchError>(total as f64 / result?.as_secs_f64())
    })?;
    Ok(vec![Bench::throughput(
        "http.tool_calls_per_s",
        "calls/s",
        total,
        rate,
        json!({}),
    )])
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

/// An idle session of `host` and the index its next event will get.
async fn idle_session(host: &Host) -> Result<(SessionId, u64)> {
    let id = host
        .start_session(StartSession::default())
        .await?
        .session_id;
    let next = host.store().next_index(&id).await?;
    Ok((id, next))
}

/// `http.stream.delivery`: from the start of a store append to the moment
/// its NDJSON line reaches a client streaming the session over loopback.
fn stream_delivery(env: &Env) -> Result<Vec<Bench>> {
    let count = env.count(DELIVERY_EVENTS);
    let dir = env.dir("delivery");
    let mut latencies = env.runtime.block_on(async {
        let served = Served::start(&dir).await?;
        let result = delivery_latencies(&served, count).await;
        served.stop().await?;
        result
    })?;
    Ok(vec![Bench::latency_ms(
        "http.stream.delivery",
        &mut latencies,
        json!({ "p50": { "max": 1.0 } }),
    )])
}

async fn delivery_latencies(served: &Served, count: usize) -> Result<Vec<Duration>> {
    let http = client()?;
    let (id, from) = idle_session(&served.host).await?;
    let mut lines = Lines::open(&http, &served.base, id.as_str(), from).await?;

    // The client runs as its own task, as a stream reader would, and stamps
    // each line with the arrival of the chunk that completed it.
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        loop {
            let item = lines
                .next()
                .await
                .map(|line| line.map(|(line, arrived)| (line.index, arrived)));
            let end = !matches!(item, Ok(Some(_)));
            if seen_tx.send(item).is_err() || end {
                break;
            }
        }
    });

    let store = served.host.store();
    let turn = TurnId::generate();
    let event = small_event(&turn);
    let mut latencies = Vec::with_capacity(count);
    let result: Result<()> = async {
        // One event in flight at a time: the figure is the delivery path's
        // latency, not the depth of a queue the benchmark built up itself.
        for i in 0..WARMUP * 4 + count {
            let started = Instant::now();
            let recorded = store.append(&id, vec![event.clone()]).await?;
            let index = recorded
                .first()
                .map(|e| e.index)
                .ok_or("append returned no envelope")?;
            let (seen, arrived) = tokio::time::timeout(DEADLINE, seen_rx.recv())
                .await
                .map_err(|_| format!("event {index} did not reach the client in time"))?
                .ok_or("the client's reader stopped early")??
                .ok_or("the stream ended early")?;
            if seen != index {
                return Err(format!("the client saw index {seen}, expected {index}").into());
            }
            if i >= WARMUP * 4 {
                latencies.push(arrived.duration_since(started));
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

/// `http.stream.readers_1000`: 1,000 clients stream one session while events
/// are appended to it; every reader must receive every event, in order.
fn stream_readers(env: &Env) -> Result<Vec<Bench>> {
    let events = if env.quick { 10 } else { READER_EVENTS };
    let dir = env.dir("readers");
    let fanout = env.runtime.block_on(async {
        let served = Served::start(&dir).await?;
        let result = fan_out(&served, READERS, events).await;
        served.stop().await?;
        result
    })?;
    let expected = (READERS * events) as u64;
    let lost = expected.saturating_sub(fanout.delivered);
    Ok(vec![Bench {
        name: "http.stream.readers_1000".into(),
        unit: "events",
        samples: READERS,
        measured: json!({
            "value": fanout.delivered,
            "expected": expected,
            "lost": lost,
            "readers": READERS,
            "eventsPerReader": events,
            "ms": millis(fanout.elapsed),
        }),
        target: json!({ "lost": { "max": 0 } }),
    }])
}

struct FanOut {
    /// Events received in order by all readers together.
    delivered: u64,
    /// From the first append to the last reader done (or the deadline).
    elapsed: Duration,
}

async fn fan_out(served: &Served, readers: usize, events: usize) -> Result<FanOut> {
    let (id, from) = idle_session(&served.host).await?;
    let last = from + events as u64 - 1;
    let http = client()?;
    // Events received in order, by all readers together: a reader that is
    // still short when the deadline passes keeps what it got.
    let delivered = Arc::new(AtomicU64::new(0));

    // Every reader subscribes (its GET has answered) before the first
    // append, then counts the events it receives in order.
    let (subscribed_tx, mut subscribed_rx) = tokio::sync::mpsc::channel::<Result<()>>(readers);
    // The set owns the readers: whatever happens, they end with it.
    let mut tasks = JoinSet::new();
    for _ in 0..readers {
        let http = http.clone();
        let base = served.base.clone();
        let id = id.clone();
        let subscribed = subscribed_tx.clone();
        let delivered = Arc::clone(&delivered);
        tasks.spawn(async move {
            let opened = Lines::open(&http, &base, id.as_str(), from).await;
            let mut lines = match opened {
                Ok(lines) => {
                    let _ = subscribed.send(Ok(())).await;
                    lines
                }
                Err(e) => {
                    let _ = subscribed.send(Err(e)).await;
                    return;
                }
            };
            drop(subscribed);
            let mut expected = from;
            // A reader that errs, skips an index or sees one twice stops
            // counting: whatever it has not received in order is lost.
            while let Ok(Some((line, _))) = lines.next().await {
                if line.index != expected {
                    break;
                }
                delivered.fetch_add(1, Ordering::Relaxed);
                if line.index == last {
                    break;
                }
                expected += 1;
            }
        });
    }
    drop(subscribed_tx);
    for _ in 0..readers {
        tokio::time::timeout(DEADLINE, subscribed_rx.recv())
            .await
            .map_err(|_| "the stream readers did not all subscribe in time")?
            .ok_or("a stream reader ended before subscribing")??;
    }

    let started = Instant::now();
    let store = served.host.store();
    let turn = TurnId::generate();
    let event = small_event(&turn);
    for _ in 0..events {
        store.append(&id, vec![event.clone()]).await?;
    }
    let deadline = tokio::time::Instant::now() + READERS_DEADLINE;
    while let Ok(Some(done)) = tokio::time::timeout_at(deadline, tasks.join_next()).await {
        done?;
    }
    let elapsed = started.elapsed();
    Ok(FanOut {
        delivered: delivered.load(Ordering::Relaxed),
        elapsed,
    })
}

/// `serve.ready_ms`: from spawning the release `bdk serve examples/weather
/// --port 0` to the answer of its `/v1/health` route.
fn serve_ready(env: &Env) -> Result<Vec<Bench>> {
    let starts = if env.quick { 3 } else { SERVE_STARTS };
    let project = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/weather");
    // A state root of the benchmark's own: the example's default one may be
    // locked by a server someone else is running.
    let state_root = env.dir("serve-state");
    let mut latencies = env.runtime.block_on(async {
        let http = client()?;
        let mut latencies = Vec::with_capacity(starts);
        for _ in 0..starts {
            latencies.push(ready_once(&http, &project, &state_root).await?);
        }
        Ok::<_, BenchError>(latencies)
    })?;
    Ok(vec![Bench::latency_ms(
        "serve.ready_ms",
        &mut latencies,
        json!({ "p50": { "max": 100.0 } }),
    )])
}

async fn ready_once(http: &reqwest::Client, project: &Path, state_root: &Path) -> Result<Duration> {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_bdk"))
        .arg("serve")
        .arg(project)
        .args(["--port", "0", "--state-root"])
        .arg(state_root)
        .env_remove("BDK_STATE_ROOT")
        .env_remove("BDK_BEARER_TOKEN")
        .env_remove("BDK_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    // The reader stays alive until the server is gone: a closed pipe would
    // fail the server's later prints.
    let mut stdout =
        tokio::io::BufReader::new(child.stdout.take().ok_or("no stdout pipe")?).lines();
    let ready: Result<Duration> = async {
        let first = tokio::time::timeout(DEADLINE, stdout.next_line())
            .await??
            .ok_or("bdk serve exited before printing its address")?;
        let base = first
            .strip_prefix("listening on ")
            .ok_or_else(|| format!("unexpected first line from bdk serve: {first}"))?;
        // The listener is bound before the address is printed, so the
        // connection waits in its backlog until the server accepts: one
        // request, no polling.
        let resp =
            tokio::time::timeout(DEADLINE, http.get(format!("{base}/v1/health")).send()).await??;
        let elapsed = started.elapsed();
        if !resp.status().is_success() {
            return Err(format!("/v1/health answered {}", resp.status()).into());
        }
        Ok(elapsed)
    }
    .await;
    child.start_kill()?;
    let output = tokio::time::timeout(DEADLINE, child.wait_with_output()).await??;
    drop(stdout);
    ready.map_err(|e| {
        format!(
            "{e}; bdk serve said: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into()
    })
}

/// `tool.spawn.plain`, `tool.spawn.sandboxed` and
/// `tool.spawn.sandboxed_by_bdk`: one run of `/bin/true` through the host's
/// program runner, without and with the tool sandbox (a fork of the
/// sandbox's fork server into a PID namespace, Landlock), start to reaped.
/// The sandboxed run's fork server is the small `bdk-launcher`, as `bdk
/// serve` uses when it is installed beside `bdk`; the last one's is `bdk`
/// itself, the fallback (started once, so its size now matters little).
/// The differences are what the sandbox costs a tool call; a Python tool
/// pays 20-200 ms of interpreter start on top.
fn tool_spawn(env: &Env) -> Result<Vec<Bench>> {
    use bdk_core::containment::{Containment, Program, ProgramEnd, Sandbox};
    let count = env.count(SPAWNS);
    let dir = env.dir("spawn");
    std::fs::create_dir_all(dir.join("state"))?;
    let sandbox = |launcher: &str| {
        Sandbox::builder(launcher)
            .protect(dir.join("state"))
            .build()
    };
    let small = sandbox(env!("CARGO_BIN_EXE_bdk-launcher"));
    let support = small.probe().map_err(|e| BenchError::from(e.to_string()))?;
    let variants = [
        ("tool.spawn.plain", Containment::default()),
        (
            "tool.spawn.sandboxed",
            Containment::new(Some(small), Default::default()),
        ),
        (
            "tool.spawn.sandboxed_by_bdk",
            Containment::new(Some(sandbox(env!("CARGO_BIN_EXE_bdk"))), Default::default()),
        ),
    ];
    let mut out = Vec::new();
    for (name, containment) in variants {
        // Every process the runs start is counted, the fork server's
        // supervisors and programs included (they are reparented away from
        // this process, so its own /proc figures miss them).
        let meter = CpuGroup::enter(name);
        let mut cpu_ns = 0u64;
        let mut latencies = env.runtime.block_on(async {
            let cancel = CancellationToken::new();
            let mut latencies = Vec::with_capacity(count);
            for n in 0..WARMUP + count {
                let program = Program {
                    argv: vec!["/bin/true".to_owned()],
                    cwd: dir.clone(),
                    read: Vec::new(),
                    stdin: Vec::new(),
                    env: Vec::new(),
                    max_stdout: 1024,
                    timeout: Duration::from_secs(10),
                };
                if n == WARMUP {
                    cpu_ns = meter.as_ref().map_or(0, CpuGroup::usage_ns);
                }
                let started = Instant::now();
                let end = containment.run(program, &dir.join("state"), &cancel).await;
                let elapsed = started.elapsed();
                match end {
                    ProgramEnd::Exited { status, .. } if status.success() => {}
                    other => return Err(BenchError::from(format!("{name}: {other:?}"))),
                }
                if n >= WARMUP {
                    latencies.push(elapsed);
                }
            }
            Ok::<_, BenchError>(latencies)
        })?;
        let used = meter.as_ref().map(|m| m.usage_ns().saturating_sub(cpu_ns));
        // Its fork server goes with it, so the group can go too.
        drop(containment);
        if let Some(meter) = meter {
            meter.leave();
        }
        let cpu = used.map(|ns| ns as f64 / 1e6 / count as f64);
        let mut bench = Bench::latency_ms(name, &mut latencies, json!({}));
        if name.contains("sandboxed") {
            bench.measured["complete"] = json!(support.is_complete());
        }
        // CPU of one run, every process counted (a cpuacct cgroup; null
        // where this process cannot make one).
        bench.measured["cpu_ms_per_run"] = json!(cpu.map(|ms| (ms * 1000.0).round() / 1000.0));
        out.push(bench);
    }
    Ok(out)
}

/// A cgroup v1 `cpuacct` group holding this process while it lives, so
/// that everything it starts is counted, wherever it is reparented.
struct CpuGroup {
    dir: PathBuf,
    parent: PathBuf,
}

impl CpuGroup {
    /// Moves this process into a new group under its own `cpuacct`
    /// group; `None` where there is no such hierarchy or no right to make
    /// one.
    fn enter(name: &str) -> Option<Self> {
        let membership = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let path = membership.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let _ = fields.next()?;
            let controllers = fields.next()?;
            let path = fields.next()?;
            controllers
                .split(',')
                .any(|c| c == "cpuacct")
                .then(|| path.to_owned())
        })?;
        let parent = Path::new("/sys/fs/cgroup/cpuacct").join(path.trim_start_matches('/'));
        let dir = parent.join(format!("bdk-bench-{}-{name}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        if std::fs::write(dir.join("cgroup.procs"), std::process::id().to_string()).is_err() {
            let _ = std::fs::remove_dir(&dir);
            return None;
        }
        Some(Self { dir, parent })
    }

    fn usage_ns(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("cpuacct.usage"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Moves this process back, and removes the group once what it
    /// started has gone (a fork server exits when its sandbox is dropped).
    fn leave(self) {
        let _ = std::fs::write(
            self.parent.join("cgroup.procs"),
            std::process::id().to_string(),
        );
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// `turn.load.*`: the full turn loop against the real `bdk serve` at 1, 8
/// and 32 connections (see `http/load.rs`).
fn turn_load(env: &Env) -> Result<Vec<Bench>> {
    let dir = env.dir("load");
    std::fs::create_dir_all(&dir)?;
    // Profiles outlive the scratch directory: they sit beside the report,
    // another build's apart, so a before/after pair keeps both.
    let mut keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench-profiles");
    if env.other_server {
        keep.push("other-build");
    }
    load::run(&env.runtime, &env.server, &dir, &keep, env.quick)
}
