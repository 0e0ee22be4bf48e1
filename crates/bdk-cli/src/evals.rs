//! `bdk evals`: run the project's evals in process (default) or against a
//! running server (`--url`), print progress and a summary, write reports,
//! and exit non-zero when a case fails.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use bdk_evals::runner::{CaseResult, CaseStatus, IterationResult, Progress, RunOptions, Runner};
use bdk_evals::target::{HostTarget, HttpTarget, Target};
use tokio_util::sync::CancellationToken;

use crate::support::ProjectArgs;
use crate::support::{FAILED, OK, UNUSABLE, print_diagnostics};

/// Arguments of `bdk evals`.
#[derive(clap::Args, Debug)]
pub(crate) struct EvalsArgs {
    #[command(flatten)]
    project: ProjectArgs,
    /// Only these case ids (or id prefixes such as a file's path); repeatable, any may match.
    #[arg(long, value_name = "ID", num_args = 1..)]
    filter: Vec<String>,
    /// Only cases with one of these tags; repeatable. With --filter, a case must match both.
    #[arg(long, value_name = "TAG", num_args = 1..)]
    tags: Vec<String>,
    /// Per-case timeout in milliseconds (a case's or file's own timeout wins).
    #[arg(long, value_name = "MS")]
    timeout: Option<u64>,
    /// Print every turn of every case, passing ones included.
    #[arg(long)]
    verbose: bool,
    /// Print the run result as JSON on stdout (progress goes to stderr).
    #[arg(long)]
    json: bool,
    /// Write a JUnit XML report to FILE.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Run against a running `bdk serve` at this agent base URL
    /// (`http://127.0.0.1:3000/<slug>`, or the server root in single mode).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// Bearer token for --url.
    #[arg(long, value_name = "TOKEN", env = "BDK_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Run the suite once per arm of this A/B experiment, every case's
    /// session pinned to the arm, and report the arms side by side (in
    /// process only).
    #[arg(long, value_name = "EXPERIMENT", conflicts_with = "url")]
    per_arm: Option<String>,
}

/// Live progress: a rewritten status line on a terminal, one line per
/// finished case otherwise. Always on stderr.
struct Live {
    tty: bool,
    total: usize,
    done: AtomicUsize,
    failed: AtomicUsize,
    running: AtomicUsize,
    verbose: bool,
}

impl Live {
    fn status(&self) {
        if !self.tty {
            return;
        }
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2Krunning: {}/{} case(s) done, {} failed, {} iteration(s) in flight",
            self.done.load(Ordering::Relaxed),
            self.total,
            self.failed.load(Ordering::Relaxed),
            self.running.load(Ordering::Relaxed),
        );
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.tty {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
        }
    }
}

impl Progress for Live {
    fn iteration_started(&self, _case: &str, _iteration: u32) {
        self.running.fetch_add(1, Ordering::Relaxed);
        self.status();
    }

    fn iteration_finished(&self, _case: &str, _result: &IterationResult) {
        self.running.fetch_sub(1, Ordering::Relaxed);
        self.status();
    }

    fn case_finished(&self, c: &CaseResult) {
        self.done.fetch_add(1, Ordering::Relaxed);
        let mark = match c.status {
            CaseStatus::Passed => "ok  ",
            CaseStatus::Failed => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                "FAIL"
            }
            _ => "skip",
        };
        self.clear();
        let mut lines = vec![format!("{mark} {} ({} ms)", c.id, c.duration_ms)];
        if c.status != CaseStatus::Passed {
            lines.extend(
                bdk_evals::report::failure_lines(c)
                    .into_iter()
                    .map(|l| format!("     - {l}")),
            );
        }
        if self.verbose {
            for it in &c.iterations {
                for t in &it.turns {
                    lines.push(format!(
                        "     iteration {} turn {}: {:?} -> {} [{}]",
                        it.iteration,
                        t.index,
                        t.prompt,
                        bdk_evals::report::clip(&t.message, 160),
                        t.tool_calls.join(", ")
                    ));
                }
            }
        }
        errln!("{}", lines.join("\n"));
        self.status();
    }
}

pub(crate) async fn run(args: EvalsArgs) -> Result<u8> {
    let dir = args.project.dir(None);
    let loaded = bdk_evals::load(&dir);
    print_diagnostics(&loaded.diagnostics, true);
    let Some(suite) = loaded.suite else {
        if loaded.diagnostics.is_empty() {
            errln!(
                "error: {} has no evals/ folder; create evals/evals.toml and a <name>.eval.toml case file",
                dir.display()
            );
        } else {
            errln!(
                "error: the eval files of {} have errors; fix them and run again",
                dir.display()
            );
        }
        return Ok(UNUSABLE);
    };
    let opts = RunOptions {
        filter_ids: args.filter.clone(),
        tags: args.tags.clone(),
        timeout_ms: args.timeout,
        verbose: args.verbose,
    };
    if args.timeout == Some(0) {
        errln!("error: --timeout must be above 0");
        return Ok(UNUSABLE);
    }
    let cases = bdk_evals::runner::select(&suite.cases, &opts);
    if cases.is_empty() {
        errln!(
            "error: no eval case matches the selection (--filter {:?}, --tags {:?}); {} case(s) exist",
            args.filter,
            args.tags,
            suite.cases.len()
        );
        return Ok(UNUSABLE);
    }

    // The judge resolves through the project's providers in both modes, so
    // the project must be readable even when the agent runs elsewhere.
    let discovery = bdk_core::discover(&dir);
    let arms: Option<(String, Vec<String>)> = match &args.per_arm {
        None => None,
        Some(name) => {
            let Some(experiment) = discovery.project.as_ref().and_then(|p| p.experiment(name))
            else {
                let known: Vec<String> = discovery
                    .project
                    .iter()
                    .flat_map(|p| p.experiments.iter().map(|e| e.name.clone()))
                    .collect();
                errln!(
                    "error: --per-arm names experiment `{name}`, which {} does not declare (declared: {})",
                    dir.display(),
                    if known.is_empty() {
                        "none".to_owned()
                    } else {
                        known.join(", ")
                    }
                );
                return Ok(UNUSABLE);
            };
            Some((
                experiment.name.clone(),
                experiment.arms.iter().map(|a| a.name.clone()).collect(),
            ))
        }
    };
    let mut host_guard = None;
    let target: Arc<dyn Target> = match &args.url {
        Some(url) => match HttpTarget::new(url, args.token.clone()) {
            Ok(t) => Arc::new(t),
            Err(e) => {
                errln!("error: {e}");
                return Ok(UNUSABLE);
            }
        },
        None => {
            let root = args.project.state_root(&dir);
            match crate::support::open_host_or_remote(&dir, &root, None).await? {
                Ok(crate::support::Opened::Local(host, lock)) => {
                    host_guard = Some((host.clone(), lock));
                    Arc::new(HostTarget::new(host))
                }
                Ok(crate::support::Opened::Remote(_)) if arms.is_some() => {
                    errln!(
                        "error: --per-arm pins arms in process, but a running server holds the state root of {}; stop it or pass --state-root",
                        dir.display()
                    );
                    return Ok(UNUSABLE);
                }
                // A running server holds the state root: run the cases
                // through it, as `--url` would.
                Ok(crate::support::Opened::Remote(remote)) => {
                    match HttpTarget::new(remote.base(), args.token.clone()) {
                        Ok(t) => Arc::new(t),
                        Err(e) => {
                            errln!("error: {e}");
                            return Ok(UNUSABLE);
                        }
                    }
                }
                Err(code) => return Ok(code),
            }
        }
    };
    let judges = discovery.project.map(bdk_evals::project_judges);
    let runner = |arm: Option<(&str, &str)>| {
        let mut runner = Runner::new(suite.config.clone(), Arc::clone(&target));
        if let Some(judges) = &judges {
            runner = runner.judges(Arc::clone(judges));
        }
        if let Some((experiment, arm)) = arm {
            runner = runner.pin_arm(experiment, arm);
        }
        runner
    };

    let mut live = Live {
        tty: std::io::stderr().is_terminal(),
        total: cases.len(),
        done: AtomicUsize::new(0),
        failed: AtomicUsize::new(0),
        running: AtomicUsize::new(0),
        verbose: args.verbose,
    };
    let cancel = CancellationToken::new();
    if let Some((_, arm_names)) = &arms {
        live.total = cases.len() * arm_names.len();
    }
    let interrupt = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                errln!("\ninterrupted: cancelling the eval run");
                cancel.cancel();
            }
        })
    };
    if let Some((experiment, arm_names)) = arms {
        let mut runs = Vec::new();
        for arm in arm_names {
            if cancel.is_cancelled() {
                break;
            }
            errln!("arm {arm}:");
            let run = runner(Some((experiment.as_str(), arm.as_str())))
                .run(
                    bdk_evals::runner::new_run_id(),
                    cases.clone(),
                    opts.clone(),
                    cancel.clone(),
                    &live,
                )
                .await;
            runs.push(bdk_evals::report::ArmRun { arm, run });
        }
        interrupt.abort();
        live.clear();
        if let Some((host, _lock)) = host_guard {
            host.shutdown(Duration::from_secs(5)).await;
            crate::hooks::drain(&host).await;
        }
        let table = bdk_evals::report::per_arm_table(&experiment, &runs);
        if args.json {
            err!("{table}");
            outln!("{}", bdk_evals::report::per_arm_json(&experiment, &runs));
        } else {
            out!("{table}");
        }
        let written = bdk_evals::report::write_per_arm_reports(
            &dir,
            &suite.config.reporters,
            &cases,
            &experiment,
            &runs,
        )
        .context("failed to write an eval report")?;
        for path in written {
            errln!("report: {}", path.display());
        }
        if let Some(path) = &args.junit {
            write_junit(path, &bdk_evals::report::per_arm_junit(&experiment, &runs))?;
        }
        let passed = !runs.is_empty() && runs.iter().all(|r| r.run.passed());
        return Ok(if passed { OK } else { FAILED });
    }
    let result = runner(None)
        .run(
            bdk_evals::runner::new_run_id(),
            cases.clone(),
            opts,
            cancel.clone(),
            &live,
        )
        .await;
    interrupt.abort();
    live.clear();

    if let Some((host, _lock)) = host_guard {
        host.shutdown(Duration::from_secs(5)).await;
        crate::hooks::drain(&host).await;
    }

    let table = bdk_evals::report::summary_table(&result);
    if args.json {
        err!("{table}");
        outln!("{}", bdk_evals::report::json(&result));
    } else {
        out!("{table}");
    }
    let written = bdk_evals::report::write_reports(&dir, &suite.config.reporters, &cases, &result)
        .context("failed to write an eval report")?;
    for path in written {
        errln!("report: {}", path.display());
    }
    if let Some(path) = &args.junit {
        write_junit(path, &bdk_evals::report::junit(&result))?;
    }
    Ok(if result.passed() { OK } else { FAILED })
}

/// Writes the `--junit` report, creating its folder.
fn write_junit(path: &std::path::Path, xml: &std::io::Result<String>) -> Result<()> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("failed to create {}", parent.display()))?;
    }
    let xml = xml
        .as_ref()
        .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))
        .with_context(|| format!("failed to write {}", path.display()))?;
    std::fs::write(path, xml).with_context(|| format!("failed to write {}", path.display()))?;
    errln!("junit: {}", path.display());
    Ok(())
}
