//! The typed form of an A/B experiment (`experiments/<name>.toml`). The
//! draw that puts a unit (a session, or a channel conversation) into one of
//! its arms is the runtime's (`bdk_core::ab::draw`).
//!
//! Discovery builds these values and checks them once (keys, arm names,
//! weights summing to [`WEIGHT_TOTAL`], overlay files, model strings); an
//! experiment with an error is left out of the
//! [`Project`](super::Project). The draw is a pure function of the
//! experiment's name, its weights and the unit's key, through SHA-256, so it
//! gives the same arm on every replica, every restart and every Rust
//! version. The host records the arm as `ab.assigned` when a session starts
//! and reads it back from there afterwards: the draw only ever runs for new
//! sessions.

use std::path::PathBuf;

use serde::Serialize;

/// What the arm weights of an experiment must add up to: weights are
/// percentages.
pub const WEIGHT_TOTAL: u32 = 100;

/// What an experiment draws its arms by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExperimentUnit {
    /// Every session draws on its own (the default).
    #[default]
    Session,
    /// Sessions draw by their conversation's continuation token
    /// (`<channelId>:<key>`), so every session of one channel key gets the
    /// same arm. Sessions without a channel key (the built-in HTTP API's
    /// opaque `http:` tokens) draw by their session id.
    ChannelKey,
}

/// One arm of an experiment.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Arm {
    /// The arm's name (`[A-Za-z0-9][A-Za-z0-9_-]*`, at most 64).
    pub name: String,
    /// Its share of the units, in percent (0-100).
    pub weight: u32,
    /// The overlay file (`instructions`, relative to `agent/experiments/`).
    pub instructions_file: Option<PathBuf>,
    /// The overlay's text, appended to the agent's instructions.
    pub instructions: Option<String>,
    /// `provider/model` replacing the agent's model.
    pub model: Option<String>,
    /// Reasoning effort replacing the agent's.
    pub effort: Option<String>,
}

impl Arm {
    /// True when the arm changes nothing (a control arm).
    pub fn is_control(&self) -> bool {
        self.instructions.is_none() && self.model.is_none() && self.effort.is_none()
    }
}

/// An experiment, typed and checked by discovery: its weights add up to
/// [`WEIGHT_TOTAL`], its arm names are unique and its overlay files were
/// read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Experiment {
    /// The experiment's name (file stem).
    pub name: String,
    /// The manifest.
    pub path: PathBuf,
    /// What it tests.
    pub description: Option<String>,
    /// What it draws by.
    pub unit: ExperimentUnit,
    /// False stops enrolling new sessions; sessions already enrolled keep
    /// their arm.
    pub enabled: bool,
    /// The arms, in manifest order.
    pub arms: Vec<Arm>,
}

impl Experiment {
    /// The arm named `name`.
    pub fn arm(&self, name: &str) -> Option<&Arm> {
        self.arms.iter().find(|a| a.name == name)
    }
}
