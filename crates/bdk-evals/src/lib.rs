//! Evals: trajectory tests for agents, written as files or in Rust.
//!
//! This crate owns the `evals/` file format ([`spec`]: `evals.toml` and
//! `**/*.eval.toml`), the Rust eval API ([`Case`], [`Turn`] and the
//! [`Assertions`] they share, with [`Matcher`]s), the LLM [`judge`], the
//! [`runner`] (selection, concurrency, timeouts, iterations, cancellation),
//! the [`report`]ers (JSON, JUnit XML, the summary table) and the run
//! [`history`] the HTTP routes serve. A file case compiles into the same
//! body a Rust author writes, so both forms share one semantics.
//!
//! Evals reach the agent through a [`target::Target`]: the in-process
//! `bdk_core::host::Host` (feature `host`) or a running server over HTTP
//! (feature `http`); both are on by default. With only `http`, the crate
//! stands on the agent folder's data (`bdk-project`) and the model port
//! (`bdk-models`, for judges), not on the runtime. This crate knows nothing
//! of axum or the CLI.

pub mod assert;
pub mod case;
#[cfg(feature = "host")]
pub mod history;
#[cfg(feature = "schema")]
mod json_schema;
pub mod judge;
pub mod matcher;
pub mod report;
pub mod runner;
pub mod spec;
pub mod target;

pub use assert::{
    Assertions, CallStatus, EventMatch, EventRef, Failure, GateMatch, Score, Stop, ToolCallView,
    ToolMatch,
};
pub use case::{Case, CaseOutcome, PendingApproval, SendOptions, Turn};
pub use judge::Judge;
pub use matcher::Matcher;
pub use runner::{RunOptions, RunResult, Runner};
pub use spec::{CaseSpec, EvalConfig, Suite, load};

#[cfg(feature = "host")]
use std::sync::Arc;

#[cfg(feature = "host")]
use bdk_core::Project;
#[cfg(feature = "host")]
use bdk_core::models::{BuiltinModels, ModelResolver};

/// A judge resolver over the project's model providers (the same ones the
/// agent uses, `scripted` included).
#[cfg(feature = "host")]
pub fn project_judges(project: Project) -> runner::JudgeResolver {
    Arc::new(move |spec: &spec::JudgeSpec| {
        BuiltinModels
            .resolve(&spec.model, &project)
            .map(|m| Arc::new(Judge::new(m)))
            .map_err(|e| e.to_string())
    })
}
