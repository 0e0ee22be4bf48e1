//! The typed form of an A/B experiment (`experiments/<name>.toml`) and the
//! draw that puts a unit (a session, or a channel conversation) into one of
//! its arms.
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
use sha2::{Digest, Sha256};

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

    /// The arm `unit_key` draws: its bucket (see [`bucket`]) against the
    /// arms' cumulative weights, in manifest order. `None` only when the
    /// weights do not add up, which discovery never lets through.
    pub fn draw(&self, unit_key: &str) -> Option<&Arm> {
        let b = bucket(&self.name, unit_key);
        let mut upper = 0;
        for arm in &self.arms {
            upper += arm.weight;
            if b < upper {
                return Some(arm);
            }
        }
        None
    }
}

/// The bucket (0 to [`WEIGHT_TOTAL`] - 1) of `unit_key` in `experiment`:
/// the first 8 bytes of SHA-256 over `<experiment>\0<unit key>`, as a
/// big-endian integer, modulo [`WEIGHT_TOTAL`]. The experiment's name is
/// part of the input so two experiments split the same sessions
/// independently; renaming an experiment redraws every new session.
pub fn bucket(experiment: &str, unit_key: &str) -> u32 {
    let mut hash = Sha256::new();
    hash.update(experiment.as_bytes());
    hash.update([0u8]);
    hash.update(unit_key.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    let n = u64::from_be_bytes(first) % u64::from(WEIGHT_TOTAL);
    // Below WEIGHT_TOTAL, so it fits.
    u32::try_from(n).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experiment(weights: &[(&str, u32)]) -> Experiment {
        Experiment {
            name: "tone".into(),
            path: PathBuf::from("tone.toml"),
            description: None,
            unit: ExperimentUnit::Session,
            enabled: true,
            arms: weights
                .iter()
                .map(|(name, weight)| Arm {
                    name: (*name).into(),
                    weight: *weight,
                    instructions_file: None,
                    instructions: None,
                    model: None,
                    effort: None,
                })
                .collect(),
        }
    }

    #[test]
    fn buckets_are_pinned() {
        // SHA-256 is fixed by its standard: these values must never move,
        // or running experiments would reshuffle on an upgrade.
        assert_eq!(bucket("tone", "ses_1"), bucket("tone", "ses_1"));
        let pinned: Vec<u32> = ["ses_a", "ses_b", "ses_c", "slack:T1"]
            .iter()
            .map(|k| bucket("tone", k))
            .collect();
        assert_eq!(pinned, PINNED);
        assert_ne!(
            (0..50)
                .map(|i| bucket("tone", &i.to_string()))
                .collect::<Vec<_>>(),
            (0..50)
                .map(|i| bucket("other", &i.to_string()))
                .collect::<Vec<_>>()
        );
    }

    /// `bucket("tone", k)` for `ses_a`, `ses_b`, `ses_c`, `slack:T1`.
    const PINNED: [u32; 4] = [47, 13, 60, 93];

    #[test]
    fn draws_follow_cumulative_weights() {
        let e = experiment(&[("a", 30), ("b", 0), ("c", 70)]);
        let mut counts = [0u32; 3];
        for i in 0..10_000 {
            let key = format!("ses_{i}");
            let arm = e.draw(&key).unwrap();
            let b = bucket("tone", &key);
            let want = if b < 30 { "a" } else { "c" };
            assert_eq!(arm.name, want, "bucket {b}");
            counts[["a", "b", "c"].iter().position(|n| *n == arm.name).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0, "a zero weight never draws");
        assert!((2_700..3_300).contains(&counts[0]), "{counts:?}");
        // Weights that do not add up draw nothing for the buckets past them.
        let short = experiment(&[("a", 0)]);
        assert!(short.draw("ses_x").is_none());
    }
}
