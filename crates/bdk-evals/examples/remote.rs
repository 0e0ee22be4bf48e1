//! Runs an agent folder's eval files against a running `bdk serve`, with
//! bdk-evals built for HTTP only (no runtime in the program):
//!
//! ```text
//! bdk serve examples/weather --port 3000 &
//! cargo run -p bdk-evals --no-default-features -F http --example remote -- \
//!     examples/weather http://127.0.0.1:3000/weather
//! ```
//!
//! It prints the summary table and exits 0 when every case passed, 1 when
//! one failed and 2 when the suite cannot be loaded or run. A bearer token,
//! when the server wants one, comes from `BDK_TOKEN`. Judge models are
//! resolved here, beside the suite: `scripted/<name>` from the folder's
//! rules files, any other `provider/model` through its preset and the
//! provider's key in the environment.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use bdk_evals::Judge;
use bdk_evals::report::summary_table;
use bdk_evals::runner::{JudgeResolver, Quiet, RunOptions, Runner, new_run_id};
use bdk_evals::spec::JudgeSpec;
use bdk_evals::target::HttpTarget;
use bdk_models::http::HttpOptions;
use bdk_models::resolve::resolve_model;
use bdk_models::scripted::ScriptedModel;
use bdk_models::{Model, ProviderConfig, split_model};
use tokio_util::sync::CancellationToken;

/// Judges for the agent folder at `root`, without the runtime.
fn judges(root: PathBuf) -> JudgeResolver {
    let rules = bdk_project::discover(&root)
        .project
        .map(|p| p.scripted_rules)
        .unwrap_or_default();
    Arc::new(move |spec: &JudgeSpec| {
        let model: Arc<dyn Model> = match split_model(&spec.model) {
            ("scripted", name) => {
                let path = rules
                    .get(name)
                    .ok_or_else(|| format!("no rules file for `{}`", spec.model))?;
                Arc::new(
                    ScriptedModel::load(path, format!("scripted/{name}"))
                        .map_err(|e| e.to_string())?,
                )
            }
            _ => resolve_model(
                &spec.model,
                &ProviderConfig::default(),
                HttpOptions::default(),
                &|var| std::env::var(var).ok(),
            ),
        };
        Ok(Arc::new(Judge::new(model)))
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(url)) = (args.next(), args.next()) else {
        eprintln!("usage: remote <agent folder> <server url>");
        return ExitCode::from(2);
    };
    let root = PathBuf::from(root);
    let loaded = bdk_evals::load(&root);
    for d in &loaded.diagnostics {
        eprintln!("{:?} {}: {}", d.severity, d.file, d.message);
    }
    let Some(suite) = loaded.suite else {
        eprintln!("no runnable eval suite");
        return ExitCode::from(2);
    };
    let target = match HttpTarget::new(&url, std::env::var("BDK_TOKEN").ok()) {
        Ok(target) => target,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let runner = Runner::new(suite.config, Arc::new(target)).judges(judges(root));
    let result = runner
        .run(
            new_run_id(),
            suite.cases,
            RunOptions::default(),
            CancellationToken::new(),
            &Quiet,
        )
        .await;
    print!("{}", summary_table(&result));
    if let Some(error) = &result.error {
        eprintln!("{error}");
        return ExitCode::from(2);
    }
    if result.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
