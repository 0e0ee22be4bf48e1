//! `turn.load.*`: the whole turn loop under load, against the real `bdk
//! serve` in its own process, so its CPU can be read off `/proc`.
//!
//! The agent's model is a fake OpenAI-compatible server in this process
//! (a few hundred lines of HTTP/1.1 with keep-alive, answering from
//! prebuilt bytes, so it costs the server nothing to wait on): the first
//! step of every turn calls the `echo` tool, the second answers. `echo` is
//! a compiled program (`cat`: it prints the request it is given), run as
//! every command tool is, sandboxed. Each turn is what a client does:
//! `POST /v1/session` with a message, then the session's stream until
//! `session.waiting`. The driver is this process's tokio runtime and one
//! pooled HTTP client; at 1, 8 and 32 connections it reports turns per
//! second, latency percentiles, and the server's CPU per turn, user and
//! system, tool children included (`/proc/<pid>/stat`: `utime`, `stime`,
//! `cutime`, `cstime`, of the server and of its live children: the
//! sandbox's fork server reaps the tool calls, so their CPU is its
//! children's), and, where the state root sits on a block device
//! that reports them, the disk's cache flushes per turn (how far ext4 lets
//! concurrent turns' fsyncs share one). Where `strace` is on the machine, one more
//! sequential run is traced (`strace -f -c`) for the system calls per turn;
//! where `valgrind` is, two short sequential runs of a server under
//! callgrind give its user-space instructions per turn (the difference
//! between the runs, so startup cancels out): a figure that does not move
//! with the machine's noise. Both callgrind outputs are kept in a directory
//! the caller names, for `callgrind_annotate --inclusive=yes` to say where
//! the instructions go. The fake model counts the connections the server
//! opens to it, which shows whether the server reuses them. First of all,
//! the tool program is started plainly a few hundred times for the CPU one
//! start costs in itself: the floor under the per-turn CPU.
//!
//! It names nothing of the program around it: the caller passes a runtime,
//! the `bdk` program to serve with (this build's, or another one for a
//! before/after comparison under the same driver), a scratch directory, a
//! directory to keep profiles in and whether the run is quick.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bdk_bench::{Bench, millis, percentile};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

type BenchError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BenchError> = std::result::Result<T, E>;

/// Turns per concurrency level (before warm-up), full runs.
const LEVELS: [(usize, usize); 3] = [(1, 300), (8, 1_000), (32, 2_000)];
/// Turns run before each level's measured ones.
const WARMUP: usize = 20;
/// Sequential turns traced for the system-call count.
const TRACED_TURNS: usize = 100;
/// Sequential turns of the two callgrind runs (startup cancels out).
const COUNTED_TURNS: (usize, usize) = (5, 25);
/// Bare starts of the tool program timed for its CPU floor.
const FLOOR_RUNS: usize = 500;
/// The longest any one step of a turn may take before the run fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// The targets (2-core machine, fake model at 0 ms, compiled tool).
const CPU_PER_TURN_MAX_MS: f64 = 1.0;
const SEQUENTIAL_P50_MAX_MS: f64 = 2.0;
const TURNS_PER_SECOND_AT_32_MIN: f64 = 1_000.0;
/// Connection reuse: at most one new model connection per ten turns (each
/// turn makes two model calls, so a server without reuse shows 2.0).
const MODEL_CONNECTIONS_PER_TURN_MAX: f64 = 0.1;

/// Runs the load benchmarks.
pub(crate) fn run(
    runtime: &Runtime,
    bdk: &Path,
    dir: &Path,
    keep: &Path,
    quick: bool,
) -> Result<Vec<Bench>> {
    let floor = tool_floor(if quick { 50 } else { FLOOR_RUNS })?;
    runtime.block_on(async {
        let model = FakeModel::start().await?;
        let project = write_agent(dir, model.port)?;
        let server = Server::start(bdk, &project, &dir.join("state"), None).await?;
        let disk = Disk::of(dir);
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .timeout(DEADLINE)
            .build()?;
        let mut out = vec![floor];
        let mut total_turns = 0;
        for (connections, turns) in LEVELS {
            let turns = if quick { (turns / 10).max(20) } else { turns };
            total_turns += WARMUP.min(turns) + turns;
            drive(&http, &server.base, WARMUP.min(turns), connections).await?;
            let before = server.cpu()?;
            let flushes_before = disk.as_ref().and_then(Disk::flushes);
            let (wall, mut latencies) = drive(&http, &server.base, turns, connections).await?;
            let cpu = server.cpu()?.since(&before);
            let flushes = flushes_before
                .zip(disk.as_ref().and_then(Disk::flushes))
                .map(|(before, after)| after.saturating_sub(before));
            out.extend(level_benches(
                connections,
                turns,
                wall,
                &mut latencies,
                &cpu,
            ));
            if let Some(flushes) = flushes {
                out.push(Bench::new(
                    format!("turn.load.c{connections}.disk_flushes_per_turn"),
                    "flushes",
                    turns,
                    json!({ "value": (flushes as f64 / turns as f64 * 1000.0).round() / 1000.0 }),
                    json!({}),
                ));
            }
        }
        out.push(model.connections_bench(total_turns));
        out.push(syscalls(&http, &server, if quick { 20 } else { TRACED_TURNS }).await?);
        server.stop().await;
        let counted = if quick { (2, 6) } else { COUNTED_TURNS };
        out.push(instructions(&http, bdk, &project, dir, keep, counted).await?);
        Ok(out)
    })
}

fn level_benches(
    connections: usize,
    turns: usize,
    wall: Duration,
    latencies: &mut [Duration],
    cpu: &Cpu,
) -> Vec<Bench> {
    latencies.sort_unstable();
    let per_turn = |ticks: u64| cpu.ms(ticks) / turns as f64;
    let rate = turns as f64 / wall.as_secs_f64();
    let (rate_target, p50_target, cpu_target) = match connections {
        1 => (
            json!({}),
            json!({ "p50": { "max": SEQUENTIAL_P50_MAX_MS } }),
            json!({ "total": { "max": CPU_PER_TURN_MAX_MS } }),
        ),
        32 => (
            json!({ "value": { "min": TURNS_PER_SECOND_AT_32_MIN } }),
            json!({}),
            json!({}),
        ),
        _ => (json!({}), json!({}), json!({})),
    };
    let round = |v: f64| (v * 1000.0).round() / 1000.0;
    vec![
        Bench::throughput(
            format!("turn.load.c{connections}.turns_per_s"),
            "turns/s",
            turns,
            rate,
            rate_target,
        ),
        Bench::new(
            format!("turn.load.c{connections}.latency"),
            "ms",
            turns,
            json!({
                "p50": millis(percentile(latencies, 50)),
                "p90": millis(percentile(latencies, 90)),
                "p99": millis(percentile(latencies, 99)),
            }),
            p50_target,
        ),
        Bench::new(
            format!("turn.load.c{connections}.server_cpu_per_turn"),
            "ms",
            turns,
            json!({
                "total": round(per_turn(cpu.user + cpu.system + cpu.children_user + cpu.children_system)),
                "user": round(per_turn(cpu.user)),
                "system": round(per_turn(cpu.system)),
                "toolUser": round(per_turn(cpu.children_user)),
                "toolSystem": round(per_turn(cpu.children_system)),
            }),
            cpu_target,
        ),
    ]
}

/// Runs `turns` turns on `connections` concurrent clients: the wall time
/// and each turn's latency.
async fn drive(
    http: &reqwest::Client,
    base: &str,
    turns: usize,
    connections: usize,
) -> Result<(Duration, Vec<Duration>)> {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..connections {
        let next = Arc::clone(&next);
        let http = http.clone();
        let base = base.to_owned();
        workers.spawn(async move {
            let mut latencies = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < turns {
                let t = Instant::now();
                turn(&http, &base).await?;
                latencies.push(t.elapsed());
            }
            Ok::<_, BenchError>(latencies)
        });
    }
    let mut all = Vec::with_capacity(turns);
    while let Some(done) = workers.join_next().await {
        all.extend(done??);
    }
    Ok((started.elapsed(), all))
}

/// One turn as a client runs it: start a session with a message, then read
/// its stream until the session waits again.
async fn turn(http: &reqwest::Client, base: &str) -> Result<()> {
    let resp = http
        .post(format!("{base}/v1/session"))
        .json(&json!({ "message": "echo hi" }))
        .send()
        .await?;
    if !resp.status().is_success() {
        return Err(format!("POST /v1/session answered {}", resp.status()).into());
    }
    let started: Value = resp.json().await?;
    let id = started["sessionId"]
        .as_str()
        .ok_or("the start answer has no sessionId")?;
    let mut stream = http
        .get(format!("{base}/v1/session/{id}/stream?startIndex=0"))
        .send()
        .await?;
    if !stream.status().is_success() {
        return Err(format!("the stream of {id} answered {}", stream.status()).into());
    }
    let mut buf: Vec<u8> = Vec::new();
    loop {
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            if line.windows(17).any(|w| w == b"\"session.waiting\"") {
                return Ok(());
            }
            if line.windows(13).any(|w| w == b"\"turn.failed\"") {
                return Err(
                    format!("a turn failed: {}", String::from_utf8_lossy(&line).trim()).into(),
                );
            }
        }
        match stream.chunk().await? {
            Some(chunk) => buf.extend_from_slice(&chunk),
            None => {
                return Err(format!("the stream of {id} ended before the session waited").into());
            }
        }
    }
}

/// `turn.load.syscalls_per_turn`: `strace -f -c` attached to the server
/// for a sequential run; `null` where strace is missing or not allowed.
async fn syscalls(http: &reqwest::Client, server: &Server, turns: usize) -> Result<Bench> {
    let name = "turn.load.syscalls_per_turn";
    let Some(strace) = which("strace") else {
        return Ok(Bench::new(
            name,
            "calls",
            0,
            json!({ "value": null, "why": "strace is not installed" }),
            json!({}),
        ));
    };
    let out = server.dir.join("strace.txt");
    // The server and its live children (the sandbox's fork server, whose
    // supervisors and tools are forked after the attach and so followed).
    let mut tracer = tokio::process::Command::new(strace);
    tracer.args(["-f", "-c", "-o"]).arg(&out);
    for pid in std::iter::once(server.pid).chain(children_of(server.pid)) {
        tracer.arg("-p").arg(pid.to_string());
    }
    let mut tracer = tracer
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut said = tokio::io::BufReader::new(tracer.stderr.take().ok_or("no stderr pipe")?).lines();
    // strace says "attached" once per thread; the first means it runs.
    let attached = tokio::time::timeout(Duration::from_secs(5), said.next_line()).await;
    if !matches!(attached, Ok(Ok(Some(_)))) {
        let _ = tracer.kill().await;
        return Ok(Bench::new(
            name,
            "calls",
            0,
            json!({ "value": null, "why": "strace could not attach" }),
            json!({}),
        ));
    }
    // The rest of the threads attach within moments.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drive(http, &server.base, turns, 1).await?;
    // SIGINT detaches strace, which then writes its summary.
    let tracer_pid = tracer.id().ok_or("strace exited early")?;
    tokio::process::Command::new("kill")
        .args(["-INT", &tracer_pid.to_string()])
        .status()
        .await?;
    tokio::time::timeout(DEADLINE, tracer.wait()).await??;
    drop(said);
    let summary = std::fs::read_to_string(&out)?;
    let total = summary
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|calls| calls.parse::<f64>().ok())
        .ok_or_else(|| format!("no total in strace's summary:\n{summary}"))?;
    let mut top: Vec<(String, f64)> = summary
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors,] syscall
            let calls = f.get(3)?.parse::<f64>().ok()?;
            let call = f.last()?;
            (*call != "total").then(|| (call.to_string(), calls))
        })
        .collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1));
    let per_call: serde_json::Map<String, Value> = top
        .into_iter()
        .take(12)
        .map(|(call, n)| (call, json!((n / turns as f64 * 10.0).round() / 10.0)))
        .collect();
    Ok(Bench::new(
        name,
        "calls",
        turns,
        json!({ "value": (total / turns as f64).round(), "byCall": per_call }),
        json!({}),
    ))
}

/// `turn.load.instructions_per_turn`: the server's user-space
/// instructions per turn under callgrind (its tool children not counted);
/// `null` where valgrind is missing. The two runs' outputs are copied into
/// `keep` and named in the entry.
async fn instructions(
    http: &reqwest::Client,
    bdk: &Path,
    project: &Path,
    dir: &Path,
    keep: &Path,
    (few, many): (usize, usize),
) -> Result<Bench> {
    let name = "turn.load.instructions_per_turn";
    let Some(valgrind) = which("valgrind") else {
        return Ok(Bench::new(
            name,
            "instructions",
            0,
            json!({ "value": null, "why": "valgrind is not installed" }),
            json!({}),
        ));
    };
    // Without `GLIBC_TUNABLES`, `bdk serve` re-executes itself to set it,
    // and callgrind would count a process that does nothing. This program
    // runs with it set (see `run_like_serve`), and the server inherits it.
    if std::env::var_os("GLIBC_TUNABLES").is_none() {
        return Err("GLIBC_TUNABLES is unset: the counted server would re-execute itself".into());
    }
    // Both runs see the same files around them (the same names in the same
    // directories): the server's startup walks the folders above its state
    // root to plan the sandbox, and its cost must cancel out.
    std::fs::create_dir_all(keep)?;
    let out = dir.join("callgrind.out");
    let state = dir.join("counted-state");
    let mut totals = Vec::new();
    let mut kept = Vec::new();
    for turns in [few, many] {
        let wrapper = vec![
            valgrind.clone().into_os_string(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", out.display()).into(),
        ];
        let server = Server::start(bdk, project, &state, Some(wrapper)).await?;
        drive(http, &server.base, turns, 1).await?;
        server.interrupt().await?;
        let written = std::fs::read_to_string(&out)?;
        let total = written
            .lines()
            .find_map(|l| l.strip_prefix("totals:"))
            .and_then(|t| t.trim().parse::<f64>().ok())
            .ok_or_else(|| format!("no totals in {}", out.display()))?;
        totals.push(total);
        let copy = keep.join(format!("callgrind-turn-load-{turns}-turns.out"));
        std::fs::copy(&out, &copy)?;
        std::fs::remove_file(&out)?;
        std::fs::remove_dir_all(&state)?;
        kept.push(copy.display().to_string());
    }
    let per_turn = (totals[1] - totals[0]) / (many - few) as f64;
    Ok(Bench::new(
        name,
        "instructions",
        many - few,
        json!({ "value": per_turn.round(), "profiles": kept }),
        json!({}),
    ))
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(program))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file())
}

/// The agent: the fake model, and `echo` as a compiled command tool.
fn write_agent(dir: &Path, model_port: u16) -> Result<PathBuf> {
    let project = dir.join("load");
    let agent = project.join("agent");
    std::fs::create_dir_all(agent.join("tools"))?;
    std::fs::write(
        agent.join("agent.toml"),
        format!(
            "name = \"load\"\nmodel = \"openai-compatible/bench\"\n\n[provider]\nbase_url = \"http://127.0.0.1:{model_port}/v1\"\n"
        ),
    )?;
    std::fs::write(
        agent.join("instructions.md"),
        "Echo what you are asked to.\n",
    )?;
    std::fs::write(
        agent.join("tools/echo.toml"),
        "description = \"Echoes its request.\"\neffect = \"read\"\ncommand = [\"cat\"]\n\n[input_schema]\ntype = \"object\"\nproperties = { text = { type = \"string\" } }\n",
    )?;
    Ok(project)
}

/// The block device under the state root, whose statistics count the
/// cache flushes it completed: what the server's fsyncs cost the disk.
/// Concurrent fsyncs of different files can share one flush (ext4 commits
/// its journal once for all of them), so at 8 and 32 clients the count per
/// turn shows how much of that sharing happens. Other writers on the same
/// device add to the count.
struct Disk {
    stat: PathBuf,
}

impl Disk {
    /// `None` when the state root is not on a block device that reports
    /// flushes (tmpfs, overlay, an old kernel).
    fn of(path: &Path) -> Option<Disk> {
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(path).ok()?.dev();
        // glibc's `major`/`minor` encoding of `dev_t`.
        let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
        let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
        let disk = Disk {
            stat: PathBuf::from(format!("/sys/dev/block/{major}:{minor}/stat")),
        };
        disk.flushes().map(|_| disk)
    }

    /// Flush requests completed so far (the 16th field of the block
    /// device's `stat`, present since Linux 5.5).
    fn flushes(&self) -> Option<u64> {
        let text = std::fs::read_to_string(&self.stat).ok()?;
        text.split_whitespace().nth(15)?.parse().ok()
    }
}

/// CPU time of the server, in clock ticks.
#[derive(Clone, Copy, Debug)]
struct Cpu {
    user: u64,
    system: u64,
    children_user: u64,
    children_system: u64,
    ticks_per_second: u64,
}

impl Cpu {
    fn since(&self, before: &Cpu) -> Cpu {
        Cpu {
            user: self.user - before.user,
            system: self.system - before.system,
            children_user: self.children_user - before.children_user,
            children_system: self.children_system - before.children_system,
            ticks_per_second: self.ticks_per_second,
        }
    }

    fn ms(&self, ticks: u64) -> f64 {
        ticks as f64 * 1000.0 / self.ticks_per_second as f64
    }
}

/// The CPU time of process `pid` and of its reaped children, from
/// `/proc/<pid>/stat`.
fn cpu_of(pid: u32) -> Result<Cpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces: fields start after its `)`.
    let rest = stat.rsplit_once(')').ok_or("unreadable /proc stat")?.1;
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    Ok(Cpu {
        user: f[0],
        system: f[1],
        children_user: f[2],
        children_system: f[3],
        ticks_per_second: rustix::param::clock_ticks_per_second(),
    })
}

/// The live processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                .and_then(|stat| {
                    // The parent is the second field after the name's `)`.
                    let rest = stat.rsplit_once(')')?.1.to_owned();
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// `turn.load.tool_floor_cpu`: the CPU one bare start of the tool program
/// costs (the process alone: started plainly from this process, fed a
/// request-sized input, reaped), with no sandbox and no server. The
/// per-turn CPU target includes one such start, so this says how much of
/// the target any process per call takes on this machine. Run before the
/// server starts, so that the only children reaped meanwhile are these.
fn tool_floor(runs: usize) -> Result<Bench> {
    use std::io::Write;
    let input = vec![b'x'; 512];
    let before = cpu_of(std::process::id())?;
    for _ in 0..runs {
        let mut child = std::process::Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        child
            .stdin
            .take()
            .ok_or("no stdin pipe")?
            .write_all(&input)?;
        if !child.wait()?.success() {
            return Err("cat failed".into());
        }
    }
    let cpu = cpu_of(std::process::id())?.since(&before);
    let per_run = cpu.ms(cpu.children_user + cpu.children_system) / runs as f64;
    Ok(Bench::new(
        "turn.load.tool_floor_cpu",
        "ms",
        runs,
        json!({ "value": (per_run * 1000.0).round() / 1000.0 }),
        json!({}),
    ))
}

/// `bdk serve` in its own process.
struct Server {
    child: tokio::process::Child,
    pid: u32,
    base: String,
    dir: PathBuf,
    /// Kept open: a closed pipe would fail the server's later prints.
    _stdout: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

impl Server {
    /// Starts `bdk serve` (the program `bdk`), under `wrapper` (a program
    /// and its arguments, e.g. valgrind) when given.
    async fn start(
        bdk: &Path,
        project: &Path,
        state_root: &Path,
        wrapper: Option<Vec<std::ffi::OsString>>,
    ) -> Result<Server> {
        let mut argv = wrapper.unwrap_or_default();
        argv.push(bdk.into());
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .arg("serve")
            .arg(project)
            .args(["--port", "0", "--state-root"])
            .arg(state_root)
            .env_remove("BDK_STATE_ROOT")
            .env_remove("BDK_BEARER_TOKEN")
            .env_remove("BDK_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().ok_or("bdk serve exited at once")?;
        let mut stdout =
            tokio::io::BufReader::new(child.stdout.take().ok_or("no stdout pipe")?).lines();
        let first = tokio::time::timeout(DEADLINE, stdout.next_line())
            .await??
            .ok_or("bdk serve exited before printing its address")?;
        if !first.starts_with("listening on ") {
            return Err(format!("unexpected first line from bdk serve: {first}").into());
        }
        // Then `  <agent>: <url>/v1`: the agent's API under its slug.
        let line = tokio::time::timeout(DEADLINE, stdout.next_line())
            .await??
            .ok_or("bdk serve exited before naming its agent")?;
        let base = line
            .split_whitespace()
            .last()
            .and_then(|url| url.strip_suffix("/v1"))
            .ok_or_else(|| format!("unexpected agent line from bdk serve: {line}"))?
            .to_owned();
        Ok(Server {
            child,
            pid,
            base,
            dir: state_root.parent().unwrap_or(state_root).to_path_buf(),
            _stdout: stdout,
        })
    }

    /// The server's CPU with its tool calls': the children it reaped, and
    /// its live children with everything they reaped (the sandbox's fork
    /// server, which starts and reaps every contained call).
    fn cpu(&self) -> Result<Cpu> {
        let mut cpu = cpu_of(self.pid)?;
        for child in children_of(self.pid) {
            // A child that ended meanwhile is in the server's own figures.
            if let Ok(c) = cpu_of(child) {
                cpu.children_user += c.user + c.children_user;
                cpu.children_system += c.system + c.children_system;
            }
        }
        Ok(cpu)
    }

    async fn stop(mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Stops the server as Ctrl-C does and waits for it to exit, so that a
    /// wrapper such as callgrind writes its output.
    async fn interrupt(mut self) -> Result<()> {
        tokio::process::Command::new("kill")
            .args(["-INT", &self.pid.to_string()])
            .status()
            .await?;
        match tokio::time::timeout(Duration::from_secs(120), self.child.wait()).await {
            Ok(status) => {
                status?;
                Ok(())
            }
            Err(_) => {
                let _ = self.child.start_kill();
                Err("the server did not exit within 120 s of SIGINT".into())
            }
        }
    }
}

/// The fake model: every request whose last message is a tool result gets
/// the answer, every other the call of `echo`, both streamed as OpenAI's
/// chat completions stream them.
struct FakeModel {
    port: u16,
    /// Connections accepted and requests answered so far.
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl FakeModel {
    async fn start() -> Result<FakeModel> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let call: Arc<[u8]> = response(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"hi\"}"}}]}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 8}}),
        ])
        .into();
        let answer: Arc<[u8]> = response(&[
            json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]}),
            json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 60, "completion_tokens": 1}}),
        ])
        .into();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (accepted, answered) = (Arc::clone(&connections), Arc::clone(&requests));
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::Relaxed);
                let (call, answer) = (Arc::clone(&call), Arc::clone(&answer));
                let answered = Arc::clone(&answered);
                tokio::spawn(async move {
                    let _ = serve_connection(socket, &call, &answer, &answered).await;
                });
            }
        });
        Ok(FakeModel {
            port,
            connections,
            requests,
        })
    }

    /// `turn.load.model_connections`: how many connections the server
    /// opened to the model for `turns` turns (two model calls each). A
    /// server that reuses its connections opens about one per concurrent
    /// turn in all; one that does not opens one per call.
    fn connections_bench(&self, turns: usize) -> Bench {
        let connections = self.connections.load(Ordering::Relaxed);
        let requests = self.requests.load(Ordering::Relaxed);
        let per_turn = connections as f64 / turns.max(1) as f64;
        Bench::new(
            "turn.load.model_connections",
            "count",
            turns,
            json!({
                "connections": connections,
                "requests": requests,
                "newPerTurn": (per_turn * 10_000.0).round() / 10_000.0,
            }),
            json!({ "newPerTurn": { "max": MODEL_CONNECTIONS_PER_TURN_MAX } }),
        )
    }
}

/// A complete HTTP response carrying `chunks` as a server-sent event stream.
fn response(chunks: &[Value]) -> Vec<u8> {
    let mut body = String::new();
    for c in chunks {
        body.push_str(&format!("data: {c}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    let mut out = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// Answers the requests of one keep-alive connection in order.
async fn serve_connection(
    mut socket: TcpStream,
    call: &[u8],
    answer: &[u8],
    answered: &AtomicUsize,
) -> Result<()> {
    socket.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
    loop {
        let head_end = loop {
            if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break p + 4;
            }
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse())
            .transpose()?
            .unwrap_or(0);
        while buf.len() < head_end + length {
            if socket.read_buf(&mut buf).await? == 0 {
                return Ok(());
            }
        }
        let body = &buf[head_end..head_end + length];
        let reply = if last_role_is_tool(body) {
            answer
        } else {
            call
        };
        socket.write_all(reply).await?;
        answered.fetch_add(1, Ordering::Relaxed);
        buf.drain(..head_end + length);
    }
}

/// True when the last `"role":` of the request body is `"tool"`.
fn last_role_is_tool(body: &[u8]) -> bool {
    const ROLE: &[u8] = b"\"role\":\"";
    body.windows(ROLE.len())
        .rposition(|w| w == ROLE)
        .is_some_and(|at| body[at + ROLE.len()..].starts_with(b"tool\""))
}
