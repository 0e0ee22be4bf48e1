//! `cargo xtask`: the one entry point for the project's suites.
//!
//! - `cargo xtask test` runs every gate CI runs, in order, and stops at the
//!   first failure: formatting, the module-cycle check, clippy, the tests
//!   (nextest when installed), doc tests, and rustdoc with warnings denied.
//!   It prints each step's command and duration and ends with one total over
//!   every test step (`tests: N passed, N failed, N skipped`). If it passes
//!   locally, CI (`.ci/run`) is green.
//!   Before the steps it checks that the PostgreSQL the store tests use
//!   (`BDK_TEST_DATABASE_URL`, default [`DEFAULT_TEST_DATABASE_URL`]) accepts
//!   connections, and stops with the fix when it does not; the URL is passed
//!   to the test step explicitly.
//! - `cargo xtask lint` runs only the formatting, module-cycle, tree-fs and
//!   clippy gates.
//! - `cargo xtask cycles` prints the import cycles between the module files
//!   of each crate and fails unless they equal the committed baseline
//!   `xtask/module-cycles.txt` (see `cycles`); `--update` rewrites the
//!   baseline from the tree, for when a cycle has been taken apart. The check
//!   reads source text in-process, so it is instant and runs in `test` and
//!   `lint` right after formatting.
//! - `cargo xtask tree-fs` lists the `std::fs`/`tokio::fs` path operations
//!   in the modules that handle trees a tool can write and fails unless each
//!   is on the allowlist `xtask/tree-fs-allowlist.txt` with its reason (see
//!   `treefs`); it runs in `test` and `lint` after the cycle check.
//! - `cargo xtask bench` builds and runs the benchmark programs in release
//!   mode (the only release build of the project): the runtime benchmarks of
//!   `bdk-core`, the HTTP benchmarks of `bdk-cli` (which also time the
//!   release `bdk` binary cargo builds for them) and the PostgreSQL store
//!   benchmarks of `bdk-store` (which need the database `cargo xtask test`
//!   checks for). It merges their reports
//!   into one JSON report, prints it and saves it as `bench-report.json` in
//!   the target directory.
//!
//! Every step runs with the same profile and `--all-features`, so clippy,
//! tests and rustdoc share the one target directory and reuse each other's
//! dependency artifacts as far as cargo allows. The subcommands are parsed by
//! hand and serde_json is the only dependency, because xtask is compiled
//! before anything else runs and must stay quick to build.
//!
//! The crate-edge test (`edges`) also lives here: it runs under
//! `cargo test --workspace` like any other test, so it needs no step of its own.

mod cycles;
#[cfg(test)]
mod edges;
// A ratchet that runs as a test (`cargo xtask test` runs it under nextest).
#[cfg(test)]
mod packs;
// Only bdk-api writes the API's `/v1/` paths; runs as a test too.
#[cfg(test)]
mod routes;
mod tally;
mod treefs;

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::tally::Counts;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test             fmt check, module cycles, clippy, tests (nextest when installed),
                   doc tests, rustdoc
  lint             fmt check, module cycles, tree fs and clippy only
  cycles [options] print the import cycles between module files of each crate; fail
                   unless they equal the baseline xtask/module-cycles.txt
      --update     rewrite the baseline from the tree (after removing a cycle)
  tree-fs          list std::fs/tokio::fs path operations in the modules that handle
                   trees tools write; fail unless each is in xtask/tree-fs-allowlist.txt
  bench [options]  run the runtime and HTTP benchmarks (release build) and print one JSON
                   report, also saved as bench-report.json in the target directory
      --quick      smaller sample counts, for a fast smoke run of the benchmarks
      --strict     exit non-zero when a benchmark misses its target
  help             print this text";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = parse(&args).and_then(|task| match task {
        Task::Test => {
            let root = workspace_root();
            let database = test_database_url();
            install_test_deps(&root)
                .and_then(|()| check_postgres(&database))
                .and_then(|()| run_steps("test", &test_steps(&root, &database)))
        }
        Task::Lint => run_steps("lint", &lint_steps()),
        Task::Cycles { update } => module_cycles(&workspace_root(), update),
        Task::TreeFs => tree_fs(&workspace_root(), true),
        Task::Bench(options) => bench(options),
        Task::Help => {
            println!("{USAGE}");
            Ok(())
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err @ Error::Usage(_)) => {
            eprintln!("xtask: {err}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("xtask: {err}");
            ExitCode::FAILURE
        }
    }
}

/// What went wrong in a task.
#[derive(Debug)]
enum Error {
    /// The command line was not understood.
    Usage(String),
    /// A step's command ran and exited unsuccessfully.
    StepFailed {
        step: String,
        command: String,
        status: std::process::ExitStatus,
    },
    /// A command could not be started at all.
    Spawn { command: String, source: io::Error },
    /// A file could not be written.
    Write { path: PathBuf, source: io::Error },
    /// Cargo's metadata or a benchmark report was not what we expect.
    Malformed { what: &'static str, message: String },
    /// `--strict` benchmarks missed a target.
    MissedTargets(Vec<String>),
    /// The module-cycle check could not read the tree or its baseline.
    CycleScan(cycles::Error),
    /// The module cycles differ from the committed baseline.
    CyclesChanged(Vec<String>),
    /// The tree-fs check could not read the tree or its allowlist.
    TreeFsScan(treefs::Error),
    /// A path operation in a tree-handling module is not allowlisted (or
    /// an allowlist entry is stale).
    TreeFs(Vec<String>),
    /// A service the tests need is not there.
    Service { name: &'static str, message: String },
}

impl From<cycles::Error> for Error {
    fn from(err: cycles::Error) -> Self {
        Error::CycleScan(err)
    }
}

impl From<treefs::Error> for Error {
    fn from(err: treefs::Error) -> Self {
        Error::TreeFsScan(err)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(message) => write!(f, "{message}"),
            Error::StepFailed {
                step,
                command,
                status,
            } => write!(f, "step `{step}` failed: `{command}` exited with {status}"),
            Error::Spawn { command, source } => {
                write!(f, "could not start `{command}`: {source}")
            }
            Error::Write { path, source } => {
                write!(f, "could not write {}: {source}", path.display())
            }
            Error::Malformed { what, message } => write!(f, "unexpected {what}: {message}"),
            Error::MissedTargets(names) => {
                write!(f, "benchmarks missed their target: {}", names.join(", "))
            }
            Error::Service { name, message } => write!(f, "{name} is not reachable: {message}"),
            Error::CycleScan(err) => write!(f, "module cycle check: {err}"),
            Error::TreeFsScan(err) => write!(f, "tree-fs check: {err}"),
            Error::TreeFs(problems) => {
                write!(
                    f,
                    "path operations in modules that handle tool-writable trees (see {}):",
                    treefs::ALLOWLIST
                )?;
                for problem in problems {
                    write!(f, "\n  {problem}")?;
                }
                Ok(())
            }
            Error::CyclesChanged(problems) => {
                write!(f, "module cycles differ from {}:", cycles::BASELINE)?;
                for problem in problems {
                    write!(f, "\n  {problem}")?;
                }
                Ok(())
            }
        }
    }
}

#[derive(Debug, PartialEq)]
enum Task {
    Test,
    Lint,
    Cycles { update: bool },
    TreeFs,
    Bench(BenchOptions),
    Help,
}

#[derive(Debug, Default, PartialEq)]
struct BenchOptions {
    quick: bool,
    strict: bool,
}

fn parse(args: &[String]) -> Result<Task, Error> {
    let Some((command, rest)) = args.split_first() else {
        return Err(Error::Usage("missing command".into()));
    };
    let no_options = |task: Task| match rest.first() {
        None => Ok(task),
        Some(extra) => Err(Error::Usage(format!(
            "`{command}` takes no arguments, got `{extra}`"
        ))),
    };
    match command.as_str() {
        "test" => no_options(Task::Test),
        "lint" => no_options(Task::Lint),
        "help" | "--help" | "-h" => no_options(Task::Help),
        "tree-fs" => no_options(Task::TreeFs),
        "cycles" => match rest {
            [] => Ok(Task::Cycles { update: false }),
            [flag] if flag == "--update" => Ok(Task::Cycles { update: true }),
            _ => Err(Error::Usage(format!(
                "`cycles` takes only `--update`, got `{}`",
                rest.join(" ")
            ))),
        },
        "bench" => {
            let mut options = BenchOptions::default();
            for arg in rest {
                match arg.as_str() {
                    "--quick" => options.quick = true,
                    "--strict" => options.strict = true,
                    other => {
                        return Err(Error::Usage(format!("unknown bench option `{other}`")));
                    }
                }
            }
            Ok(Task::Bench(options))
        }
        other => Err(Error::Usage(format!("unknown command `{other}`"))),
    }
}

/// One gate: a cargo invocation with a name for the progress lines, or a
/// check xtask runs itself.
struct Step {
    name: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Runs tests: its output is relayed and its test counts are totalled.
    runs_tests: bool,
    /// A check run in-process, given the workspace root, instead of cargo;
    /// `args` then say how a person runs it alone (`cargo xtask ...`).
    in_process: Option<Check>,
}

/// A check xtask runs itself, given the workspace root.
type Check = fn(&Path) -> Result<(), Error>;

impl Step {
    fn new(name: &'static str, args: &[&'static str]) -> Self {
        Step {
            name,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            runs_tests: false,
            in_process: None,
        }
    }

    fn in_process(name: &'static str, args: &[&'static str], run: Check) -> Self {
        Step {
            in_process: Some(run),
            ..Step::new(name, args)
        }
    }

    fn arg(mut self, arg: String) -> Self {
        self.args.push(arg);
        self
    }

    fn running_tests(mut self) -> Self {
        self.runs_tests = true;
        self
    }

    fn with_env(mut self, key: &'static str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// The command as a person would type it, for progress and failure lines.
    fn display(&self) -> String {
        let mut parts: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(&redact_password(v))))
            .collect();
        parts.push("cargo".into());
        parts.extend(self.args.iter().map(|a| shell_quote(a)));
        parts.join(" ")
    }
}

fn shell_quote(s: &str) -> String {
    if s.chars().any(char::is_whitespace) {
        format!("\"{s}\"")
    } else {
        s.to_owned()
    }
}

fn lint_steps() -> Vec<Step> {
    vec![
        Step::new("fmt", &["fmt", "--all", "--", "--check"]),
        // Instant, so it goes before the first compiling step.
        Step::in_process("module cycles", &["xtask", "cycles"], module_cycles_step),
        Step::in_process("tree fs", &["xtask", "tree-fs"], |root| {
            tree_fs(root, false)
        }),
        Step::new(
            "clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--all-features",
                "--",
                "-D",
                "warnings",
            ],
        ),
    ]
}

fn test_steps(root: &Path, database: &str) -> Vec<Step> {
    let mut steps = lint_steps();
    if nextest_installed() {
        // Our nextest settings (per-test timeouts) ride along as a tool
        // config file, which nextest wants as an absolute path.
        let config = root.join("xtask").join("nextest.toml");
        steps.push(
            Step::new(
                "tests (nextest)",
                &[
                    "nextest",
                    "run",
                    "--workspace",
                    "--all-features",
                    "--tool-config-file",
                ],
            )
            .arg(format!("xtask:{}", config.display()))
            .with_env(DATABASE_ENV, database)
            .running_tests(),
        );
    } else {
        println!("xtask: cargo-nextest is not installed; running the tests with cargo test");
        steps.push(
            Step::new(
                "tests (cargo test)",
                &["test", "--workspace", "--all-features"],
            )
            .with_env(DATABASE_ENV, database)
            .running_tests(),
        );
    }
    // Nextest does not run doc tests, and with plain `cargo test` running
    // them separately keeps the step list the same on every machine.
    steps.push(
        Step::new(
            "doc tests",
            &["test", "--workspace", "--doc", "--all-features"],
        )
        .running_tests(),
    );
    steps.push(
        Step::new(
            "rustdoc",
            &["doc", "--workspace", "--no-deps", "--all-features"],
        )
        .with_env("RUSTDOCFLAGS", "-D warnings"),
    );
    steps
}

/// Runs `.ci/test-deps`, which installs what the tests need beyond Rust
/// (python3, curl, the MCP peers and the Python MCP SDK under target/), so a
/// fresh machine needs nothing but `cargo xtask test`.
fn install_test_deps(root: &Path) -> Result<(), Error> {
    let script = root.join(".ci").join("test-deps");
    let command = format!("bash {}", script.display());
    println!("==> [0] test dependencies: {command}");
    let status = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .status()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(Error::StepFailed {
            step: "test dependencies".into(),
            command,
            status,
        })
    }
}

/// The variable naming the PostgreSQL database of the store tests.
const DATABASE_ENV: &str = "BDK_TEST_DATABASE_URL";

/// The database the store tests use when [`DATABASE_ENV`] is unset: the
/// local server `.ci/run` starts.
const DEFAULT_TEST_DATABASE_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

fn test_database_url() -> String {
    env::var(DATABASE_ENV)
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_TEST_DATABASE_URL.to_owned())
}

/// The password of a URL's user info replaced by `***`, for printing.
fn redact_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) if user_info.contains(':') => {
            let user = user_info.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// Host and port of a `postgres://` URL (port 5432 when absent).
fn pg_host_port(url: &str) -> Option<(String, u16)> {
    let rest = url
        .strip_prefix("postgres://")
        .or_else(|| url.strip_prefix("postgresql://"))?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    let port = match port {
        None | Some("") => 5432,
        Some(p) => p.parse().ok()?,
    };
    let host = if host.is_empty() { "localhost" } else { host };
    Some((host.to_owned(), port))
}

/// Checks that the store tests' PostgreSQL accepts connections, before any
/// step runs: a TCP connect, then `pg_isready` when it is installed.
fn check_postgres(url: &str) -> Result<(), Error> {
    use std::net::{TcpStream, ToSocketAddrs};
    const FIX: &str = "the PostgreSQL store tests need it. Start the local server with \
        `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` \
        (`.ci/run` does this), or set BDK_TEST_DATABASE_URL to a reachable database";
    let shown = redact_password(url);
    let fail = |why: String| Error::Service {
        name: "PostgreSQL",
        message: format!("{why} ({DATABASE_ENV}={shown}); {FIX}"),
    };
    let (host, port) =
        pg_host_port(url).ok_or_else(|| fail("the URL is not a postgres:// URL".into()))?;
    let addrs: Vec<_> = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| fail(format!("cannot resolve {host}: {e}")))?
        .collect();
    let connected = addrs
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_secs(5)).is_ok());
    if !connected {
        return Err(fail(format!(
            "nothing accepts connections at {host}:{port}"
        )));
    }
    match Command::new("pg_isready")
        .args(["-q", "-t", "10", "-d", url])
        .status()
    {
        Ok(status) if status.success() => {}
        Ok(status) => {
            return Err(fail(format!(
                "{host}:{port} is open but pg_isready says it is not ready ({status})"
            )));
        }
        // pg_isready is not installed: the TCP connect has to do.
        Err(_) => {}
    }
    println!("==> [0] postgresql: accepting connections at {host}:{port}");
    Ok(())
}

fn nextest_installed() -> bool {
    Command::new(cargo())
        .args(["nextest", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The cargo that started us (`cargo run` sets `CARGO`), so nested
/// invocations use the same toolchain.
fn cargo() -> OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The workspace root: xtask sits one level below it.
///
/// `cargo run` and `cargo test` set `CARGO_MANIFEST_DIR` for the process, and
/// that value is preferred over the one compiled in: cargo treats a
/// workspace copied elsewhere (with the same target directory) as fresh and
/// does not rebuild xtask, so the compiled-in path can name the old copy.
fn workspace_root() -> PathBuf {
    let manifest_dir = env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest_dir
        .parent()
        .map_or_else(|| manifest_dir.clone(), Path::to_path_buf)
}

fn run_steps(task: &str, steps: &[Step]) -> Result<(), Error> {
    let root = workspace_root();
    let started = Instant::now();
    let mut timings = Vec::with_capacity(steps.len());
    let mut tests = Counts::default();
    for (i, step) in steps.iter().enumerate() {
        let command = step.display();
        println!("==> [{}/{}] {}: {command}", i + 1, steps.len(), step.name);
        let step_started = Instant::now();
        if let Some(run) = step.in_process {
            if let Err(err) = run(&root) {
                println!(
                    "<== {} failed after {}",
                    step.name,
                    seconds(step_started.elapsed())
                );
                return Err(err);
            }
            println!(
                "<== {} ok in {}",
                step.name,
                seconds(step_started.elapsed())
            );
            timings.push((step.name, step_started.elapsed()));
            continue;
        }
        let mut child = Command::new(cargo());
        child
            .args(&step.args)
            .envs(step.env.iter().map(|(k, v)| (k, v.as_str())))
            .current_dir(&root);
        let spawned = if step.runs_tests {
            tally::run_counting(&mut child).map(|(status, counts)| {
                tests.add(counts);
                status
            })
        } else {
            child.status()
        };
        let status = spawned.map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
        let elapsed = step_started.elapsed();
        if !status.success() {
            println!("<== {} failed after {}", step.name, seconds(elapsed));
            return Err(Error::StepFailed {
                step: step.name.to_owned(),
                command,
                status,
            });
        }
        println!("<== {} ok in {}", step.name, seconds(elapsed));
        timings.push((step.name, elapsed));
    }
    println!(
        "xtask {task}: all {} steps passed in {}",
        steps.len(),
        seconds(started.elapsed())
    );
    for (name, elapsed) in timings {
        println!("  {name:<20} {:>8}", seconds(elapsed));
    }
    if steps.iter().any(|s| s.runs_tests) {
        // The last line: one total over every test step, in the plain
        // `N passed, N failed` form any reader of the log understands.
        println!(
            "tests: {} passed, {} failed, {} skipped",
            tests.passed, tests.failed, tests.skipped
        );
    }
    Ok(())
}

/// `cargo xtask cycles`: prints every import cycle between module files with
/// the names that tie it, then checks them against the baseline; with
/// `update`, rewrites the baseline instead.
fn module_cycles(root: &Path, update: bool) -> Result<(), Error> {
    let found = cycles::find_cycles(root)?;
    for cycle in &found {
        println!("{cycle}");
    }
    let crates: std::collections::BTreeSet<&str> = found.iter().map(|c| c.krate.as_str()).collect();
    println!("{} import cycles in {} crates", found.len(), crates.len());
    if update {
        let path = root.join(cycles::BASELINE);
        std::fs::write(&path, cycles::render_baseline(&found)).map_err(|source| Error::Write {
            path: path.clone(),
            source,
        })?;
        println!("wrote {}", path.display());
        return Ok(());
    }
    let problems = cycles::compare(&found, &cycles::read_baseline(root)?);
    if problems.is_empty() {
        println!("as in the baseline {}", cycles::BASELINE);
        Ok(())
    } else {
        Err(Error::CyclesChanged(problems))
    }
}

/// The module-cycle step of `test` and `lint`: the check of
/// `cargo xtask cycles`, printing the cycles only when it fails.
fn module_cycles_step(root: &Path) -> Result<(), Error> {
    let found = cycles::find_cycles(root)?;
    let problems = cycles::compare(&found, &cycles::read_baseline(root)?);
    if problems.is_empty() {
        println!(
            "{} import cycles, as in the baseline {}",
            found.len(),
            cycles::BASELINE
        );
        return Ok(());
    }
    for cycle in &found {
        println!("{cycle}");
    }
    Err(Error::CyclesChanged(problems))
}

/// `cargo xtask tree-fs` (`verbose`: every finding with its allowlist
/// entry) and its step in `test` and `lint`: fails on a path operation the
/// allowlist does not cover, or an entry that covers nothing.
fn tree_fs(root: &Path, verbose: bool) -> Result<(), Error> {
    let findings = treefs::find(root)?;
    let allowed = treefs::read_allowlist(root)?;
    if verbose {
        for finding in &findings {
            println!("{finding}");
        }
    }
    let problems = treefs::compare(&findings, &allowed);
    if !problems.is_empty() {
        return Err(Error::TreeFs(problems));
    }
    println!(
        "{} path operations in the tree-handling modules, each allowed by {}",
        findings.len(),
        treefs::ALLOWLIST
    );
    Ok(())
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// `cargo metadata --format-version 1 --no-deps` of the workspace.
fn workspace_metadata(root: &Path) -> Result<Value, Error> {
    let command = "cargo metadata --format-version 1 --no-deps";
    let output = Command::new(cargo())
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| Error::Spawn {
            command: command.into(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::StepFailed {
            step: "metadata".into(),
            command: command.into(),
            status: output.status,
        });
    }
    serde_json::from_slice(&output.stdout).map_err(|e| Error::Malformed {
        what: "cargo metadata output",
        message: e.to_string(),
    })
}

/// The benchmark programs, as (package, bench target). Each is a plain
/// program (no harness) that prints one JSON report on stdout.
///
/// `bdk-store`'s `pg` program measures the PostgreSQL store (append
/// throughput, cross-replica delivery latency) against the database of
/// `BDK_TEST_DATABASE_URL`, beside the file store's figures from `runtime`.
const BENCH_PROGRAMS: &[(&str, &str)] = &[
    ("bdk-core", "runtime"),
    ("bdk-scheduler", "reminders"),
    ("bdk-cli", "http"),
    ("bdk-store", "pg"),
];

/// `cargo bench` arguments running every benchmark program. One invocation
/// builds them all with one feature resolution, so the programs share their
/// release artifacts instead of each package building its own.
fn bench_args(quick: bool) -> Vec<&'static str> {
    let mut args = vec!["bench"];
    for (package, _) in BENCH_PROGRAMS {
        args.extend(["-p", package]);
    }
    for (_, target) in BENCH_PROGRAMS {
        args.extend(["--bench", target]);
    }
    if quick {
        args.extend(["--", "--quick"]);
    }
    args
}

fn bench(options: BenchOptions) -> Result<(), Error> {
    let root = workspace_root();
    // The PostgreSQL store benchmarks need the database: say so up front
    // rather than after the release build.
    check_postgres(&test_database_url())?;
    let args = bench_args(options.quick);
    let command = format!("cargo {}", args.join(" "));
    println!("==> bench: {command}");
    let started = Instant::now();
    // The benchmarks print their reports on stdout and their progress on
    // stderr; only the reports are captured.
    let output = Command::new(cargo())
        .args(&args)
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| Error::Spawn {
            command: command.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(Error::StepFailed {
            step: "bench".into(),
            command,
            status: output.status,
        });
    }
    let report = merge_reports(parse_reports(&output.stdout)?, BENCH_PROGRAMS.len())?;
    let pretty = serde_json::to_string_pretty(&report).map_err(|e| Error::Malformed {
        what: "benchmark report",
        message: e.to_string(),
    })?;
    println!("{pretty}");

    let target_dir = workspace_metadata(&root)?
        .get("target_directory")
        .and_then(Value::as_str)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let path = target_dir.join("bench-report.json");
    std::fs::write(&path, format!("{pretty}\n")).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    println!(
        "<== bench done in {}; report saved to {}",
        seconds(started.elapsed()),
        path.display()
    );

    let missed = missed_targets(&report);
    if missed.is_empty() {
        println!("every benchmark met its target");
        Ok(())
    } else if options.strict {
        Err(Error::MissedTargets(missed))
    } else {
        println!("missed their target: {}", missed.join(", "));
        Ok(())
    }
}

/// Parses the benchmarks' stdout: one JSON object per program, each with a
/// `benchmarks` array, one after the other.
fn parse_reports(stdout: &[u8]) -> Result<Vec<Value>, Error> {
    let malformed = |message: String| Error::Malformed {
        what: "benchmark report",
        message,
    };
    let mut reports = Vec::new();
    for report in serde_json::Deserializer::from_slice(stdout).into_iter::<Value>() {
        let report = report.map_err(|e| {
            malformed(format!(
                "{e}; the benchmarks printed: {}",
                String::from_utf8_lossy(stdout).trim()
            ))
        })?;
        if !report.get("benchmarks").is_some_and(Value::is_array) {
            return Err(malformed("no `benchmarks` array".into()));
        }
        reports.push(report);
    }
    Ok(reports)
}

/// One report from the programs' reports, in the shape each of them has:
/// the first one's `machine`, `profile` and `quick`, and every program's
/// benchmarks in order. A program that printed no report (or two) is an
/// error rather than a report with silently missing benchmarks.
fn merge_reports(reports: Vec<Value>, programs: usize) -> Result<Value, Error> {
    if reports.len() != programs {
        return Err(Error::Malformed {
            what: "benchmark output",
            message: format!(
                "expected {programs} reports, one per benchmark program, got {}",
                reports.len()
            ),
        });
    }
    let mut reports = reports.into_iter();
    let Some(mut merged) = reports.next() else {
        return Err(Error::Malformed {
            what: "benchmark output",
            message: "no report".into(),
        });
    };
    let mut benchmarks = match merged.get_mut("benchmarks").map(Value::take) {
        Some(Value::Array(all)) => all,
        _ => Vec::new(),
    };
    for report in reports {
        if let Some(Value::Array(more)) = report.get("benchmarks") {
            benchmarks.extend(more.iter().cloned());
        }
    }
    merged["benchmarks"] = Value::Array(benchmarks);
    Ok(merged)
}

/// Names of the benchmarks whose `meetsTarget` is not true.
fn missed_targets(report: &Value) -> Vec<String> {
    report
        .get("benchmarks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("meetsTarget") != Some(&Value::Bool(true)))
        .map(|b| {
            b.get("name")
                .and_then(Value::as_str)
                .unwrap_or("<unnamed>")
                .to_owned()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| (*a).to_owned()).collect()
    }

    #[test]
    fn parses_each_command_and_rejects_the_rest() {
        assert_eq!(parse(&args(&["test"])).unwrap(), Task::Test);
        assert_eq!(parse(&args(&["lint"])).unwrap(), Task::Lint);
        assert_eq!(
            parse(&args(&["cycles"])).unwrap(),
            Task::Cycles { update: false }
        );
        assert_eq!(
            parse(&args(&["cycles", "--update"])).unwrap(),
            Task::Cycles { update: true }
        );
        assert_eq!(
            parse(&args(&["bench", "--strict"])).unwrap(),
            Task::Bench(BenchOptions {
                quick: false,
                strict: true
            })
        );
        assert_eq!(
            parse(&args(&["bench", "--quick"])).unwrap(),
            Task::Bench(BenchOptions {
                quick: true,
                strict: false
            })
        );
        for bad in [
            &[][..],
            &["tset"],
            &["test", "--fast"],
            &["bench", "--slow"],
            &["cycles", "--force"],
            &["cycles", "--update", "extra"],
        ] {
            let err = parse(&args(bad)).unwrap_err();
            assert!(matches!(err, Error::Usage(_)), "{bad:?}: {err}");
        }
    }

    #[test]
    fn test_steps_run_in_the_documented_order_with_shared_features() {
        let steps = test_steps(&workspace_root(), DEFAULT_TEST_DATABASE_URL);
        let names: Vec<&str> = steps.iter().map(|s| s.name).collect();
        assert_eq!(names[..4], ["fmt", "module cycles", "tree fs", "clippy"]);
        assert!(names[4].starts_with("tests ("), "{names:?}");
        assert_eq!(names[5..], ["doc tests", "rustdoc"]);
        // The source checks run in-process; their lines show how to run them alone.
        assert!(steps[1].in_process.is_some());
        assert_eq!(steps[1].display(), "cargo xtask cycles");
        assert!(steps[2].in_process.is_some());
        assert_eq!(steps[2].display(), "cargo xtask tree-fs");
        // Every compiling step uses the same feature set, so they share artifacts.
        for step in &steps[3..] {
            assert!(step.in_process.is_none(), "{}", step.display());
            assert!(
                step.args.iter().any(|a| a == "--all-features"),
                "{}",
                step.display()
            );
            assert!(
                step.args.iter().any(|a| a == "--workspace"),
                "{}",
                step.display()
            );
        }
        assert_eq!(
            steps[6].display(),
            "RUSTDOCFLAGS=\"-D warnings\" cargo doc --workspace --no-deps --all-features"
        );
        // The test step hands the database URL to the tests explicitly.
        assert!(
            steps[4]
                .env
                .iter()
                .any(|(k, v)| *k == DATABASE_ENV && v == DEFAULT_TEST_DATABASE_URL),
            "{}",
            steps[4].display()
        );
        // Lint is the same first four steps.
        let lint: Vec<&str> = lint_steps().iter().map(|s| s.name).collect();
        assert_eq!(lint, ["fmt", "module cycles", "tree fs", "clippy"]);
    }

    #[test]
    fn an_in_process_step_runs_without_cargo_and_its_failure_stops_the_run() {
        fn fails(_: &Path) -> Result<(), Error> {
            Err(Error::CyclesChanged(vec![
                "new import cycle in x: a.rs b.rs".into(),
            ]))
        }
        fn passes(root: &Path) -> Result<(), Error> {
            assert!(root.join("xtask").is_dir());
            Ok(())
        }
        let ok = Step::in_process("passes", &["xtask", "passes"], passes);
        assert!(run_steps("lint", &[ok]).is_ok());
        let steps = [
            Step::in_process("fails", &["xtask", "fails"], fails),
            // Never reached: it would fail too, differently.
            Step::new("broken", &["no-such-cargo-subcommand-xtask"]),
        ];
        let err = run_steps("lint", &steps).unwrap_err().to_string();
        assert_eq!(
            err,
            "module cycles differ from xtask/module-cycles.txt:\n  new import cycle in x: a.rs b.rs"
        );
    }

    #[test]
    fn database_urls_give_host_port_and_hide_passwords() {
        assert_eq!(
            pg_host_port(DEFAULT_TEST_DATABASE_URL),
            Some(("127.0.0.1".into(), 5432))
        );
        assert_eq!(
            pg_host_port("postgresql://u:p@db.example:6543/x?sslmode=require"),
            Some(("db.example".into(), 6543))
        );
        assert_eq!(
            pg_host_port("postgres://[::1]:5433/x"),
            Some(("::1".into(), 5433))
        );
        assert_eq!(
            pg_host_port("postgres:///x"),
            Some(("localhost".into(), 5432))
        );
        assert_eq!(pg_host_port("mysql://h/x"), None);
        assert_eq!(pg_host_port("postgres://h:port/x"), None);
        assert_eq!(
            redact_password("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(
            redact_password(DEFAULT_TEST_DATABASE_URL),
            DEFAULT_TEST_DATABASE_URL
        );
    }

    #[test]
    fn an_unreachable_database_fails_with_the_fix() {
        // Port 1 on loopback: nothing listens there.
        let err = check_postgres("postgres://postgres@127.0.0.1:1/test")
            .unwrap_err()
            .to_string();
        assert!(err.contains("PostgreSQL is not reachable"), "{err}");
        assert!(err.contains("pg_ctlcluster"), "{err}");
        assert!(err.contains(DATABASE_ENV), "{err}");
        assert!(check_postgres("not a url").is_err());
    }

    #[test]
    fn a_failing_step_names_its_command() {
        let step = Step::new("broken", &["no-such-cargo-subcommand-xtask"]);
        let err = run_steps("test", &[step]).unwrap_err().to_string();
        assert!(err.contains("step `broken` failed"), "{err}");
        assert!(
            err.contains("`cargo no-such-cargo-subcommand-xtask`"),
            "{err}"
        );
    }

    #[test]
    fn report_parsing_finds_missed_targets() {
        let reports = parse_reports(
            br#"{"machine":{"cores":2},"benchmarks":[
                {"name":"a","meetsTarget":true},
                {"name":"b","meetsTarget":false},
                {"name":"c"}]}"#,
        )
        .unwrap();
        let report = merge_reports(reports, 1).unwrap();
        assert_eq!(missed_targets(&report), ["b", "c"]);
        assert!(missed_targets(&json!({"benchmarks": []})).is_empty());
        assert!(parse_reports(b"not json").is_err());
        assert!(parse_reports(br#"{"machine":{}}"#).is_err());
        assert!(parse_reports(br#"{"benchmarks":[]} {"machine":{}}"#).is_err());
    }

    #[test]
    fn reports_of_every_program_merge_into_one() {
        let stdout = br#"{"machine":{"cores":2},"profile":"release","quick":false,"benchmarks":[{"name":"a","meetsTarget":true}]}
{"machine":{"cores":2},"profile":"release","quick":false,"benchmarks":[{"name":"b","meetsTarget":false},{"name":"c","meetsTarget":true}]}
"#;
        let merged = merge_reports(parse_reports(stdout).unwrap(), 2).unwrap();
        assert_eq!(
            merged,
            json!({
                "machine": {"cores": 2}, "profile": "release", "quick": false,
                "benchmarks": [
                    {"name": "a", "meetsTarget": true},
                    {"name": "b", "meetsTarget": false},
                    {"name": "c", "meetsTarget": true},
                ],
            })
        );
        assert_eq!(missed_targets(&merged), ["b"]);
        // A program that printed nothing is an error, not a shorter report.
        let one = parse_reports(br#"{"benchmarks":[]}"#).unwrap();
        assert!(merge_reports(one, 2).is_err());
        assert!(merge_reports(Vec::new(), 0).is_err());
    }

    #[test]
    fn bench_runs_every_program_in_one_cargo_invocation() {
        assert_eq!(
            bench_args(false),
            [
                "bench",
                "-p",
                "bdk-core",
                "-p",
                "bdk-scheduler",
                "-p",
                "bdk-cli",
                "-p",
                "bdk-store",
                "--bench",
                "runtime",
                "--bench",
                "reminders",
                "--bench",
                "http",
                "--bench",
                "pg"
            ]
        );
        assert_eq!(bench_args(true)[17..], ["--", "--quick"]);
    }
}
