//! Evals: the `evals/**/*.eval.toml` format, the Rust eval API, the runner and
//! its reporters.
//!
//! Not built yet: this crate is reserved for the evals issue and exports
//! nothing.
