//! What the host knows of A/B arms before any session: each declared
//! arm's overrides, prepared once when the host is built, and the draw
//! that enrolls a new session (recorded as `ab.assigned` right after
//! `session.started`). A leaf: the host's state names it, and it names
//! nothing of the host but its errors.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use bdk_events::{AbAssigned, AbUnit, SessionId};
use bdk_models::Model;

use crate::project::{ExperimentUnit, Project};

use super::error::{HostError, HostResult};

/// What one arm changes in the root agent, prepared when the host is built.
#[derive(Clone)]
pub(super) struct ArmOverride {
    /// Appended to the instructions (before the catalogs).
    pub(super) overlay: Option<String>,
    /// The model and the name sent to the provider.
    pub(super) model: Option<(Arc<dyn Model>, String)>,
    /// The reasoning effort.
    pub(super) effort: Option<String>,
}

/// Every declared arm's overrides, by experiment and arm.
pub(super) type ArmOverrides = HashMap<(String, String), ArmOverride>;

/// The arms `project` declares, with their models resolved by `model_for`.
pub(super) fn prepare(
    project: &Project,
    mut model_for: impl FnMut(&str) -> Arc<dyn Model>,
) -> ArmOverrides {
    let mut out = HashMap::new();
    for e in &project.experiments {
        for arm in &e.arms {
            let model = arm.model.as_deref().map(|m| {
                let name = bdk_models::split_model(m).1.to_owned();
                (model_for(m), name)
            });
            out.insert(
                (e.name.clone(), arm.name.clone()),
                ArmOverride {
                    overlay: arm
                        .instructions
                        .as_deref()
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned),
                    model,
                    effort: arm.effort.clone(),
                },
            );
        }
    }
    out
}

/// The arms a new session is enrolled in: `pinned` arms (experiment ->
/// arm) as given, then a draw in every other enabled experiment, by the
/// session id or, for `unit = "channel_key"`, by a channel conversation's
/// continuation token. Pins naming an unknown experiment or arm are
/// refused.
pub(super) fn enroll(
    project: &Project,
    id: &SessionId,
    token: &str,
    pinned: &BTreeMap<String, String>,
) -> HostResult<Vec<AbAssigned>> {
    for (experiment, arm) in pinned {
        let Some(e) = project.experiment(experiment) else {
            let known: Vec<&str> = project
                .experiments
                .iter()
                .map(|e| e.name.as_str())
                .collect();
            return Err(HostError::InvalidRequest(format!(
                "unknown experiment `{experiment}` (declared: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            )));
        };
        if e.arm(arm).is_none() {
            let arms: Vec<&str> = e.arms.iter().map(|a| a.name.as_str()).collect();
            return Err(HostError::InvalidRequest(format!(
                "experiment `{experiment}` has no arm `{arm}` (arms: {})",
                arms.join(", ")
            )));
        }
    }
    let mut out = Vec::new();
    for e in &project.experiments {
        if let Some(arm) = pinned.get(&e.name) {
            out.push(AbAssigned {
                experiment: e.name.clone(),
                arm: arm.clone(),
                unit: Some(AbUnit::Pinned),
                unit_key: Some(id.to_string()),
            });
            continue;
        }
        if !e.enabled {
            continue;
        }
        // Opaque `http:` tokens rotate and belong to one session: only a
        // channel's `<channelId>:<key>` names a conversation.
        let (unit, key) = match e.unit {
            ExperimentUnit::ChannelKey if !token.starts_with("http:") => {
                (AbUnit::ChannelKey, token.to_owned())
            }
            _ => (AbUnit::Session, id.to_string()),
        };
        if let Some(arm) = crate::ab::draw(e, &key) {
            out.push(AbAssigned {
                experiment: e.name.clone(),
                arm: arm.name.clone(),
                unit: Some(unit),
                unit_key: Some(key),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ab::{bucket, draw};
    use crate::project::{Experiment, discover};

    fn project(manifest: &str) -> (tempfile::TempDir, Project) {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("agent");
        std::fs::create_dir_all(agent.join("experiments")).unwrap();
        std::fs::write(agent.join("instructions.md"), "Be helpful.").unwrap();
        std::fs::write(agent.join("experiments/tone.toml"), manifest).unwrap();
        let found = discover(dir.path());
        assert!(!found.has_errors(), "{:?}", found.diagnostics);
        let project = found.project.unwrap();
        (dir, project)
    }

    #[test]
    fn pins_draws_and_units() {
        let (_dir, p) = project(
            "unit = \"channel_key\"\n[[arms]]\nname = \"a\"\nweight = 50\n[[arms]]\nname = \"b\"\nweight = 50\n",
        );
        let id = SessionId::from_string("ses_x");
        let pinned = BTreeMap::from([("tone".to_owned(), "b".to_owned())]);
        let got = enroll(&p, &id, "http:abc", &pinned).unwrap();
        assert_eq!(got[0].unit, Some(AbUnit::Pinned));
        assert_eq!(got[0].arm, "b");

        // A channel token draws by the token, the same for every session.
        let one = enroll(&p, &id, "slack:T1", &BTreeMap::new()).unwrap();
        let other = enroll(
            &p,
            &SessionId::from_string("ses_y"),
            "slack:T1",
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(one[0].unit, Some(AbUnit::ChannelKey));
        assert_eq!(one[0].unit_key.as_deref(), Some("slack:T1"));
        assert_eq!(one[0].arm, other[0].arm);
        // An opaque HTTP token draws by the session.
        let http = enroll(&p, &id, "http:abc", &BTreeMap::new()).unwrap();
        assert_eq!(http[0].unit, Some(AbUnit::Session));
        assert_eq!(http[0].unit_key.as_deref(), Some("ses_x"));

        let bad = BTreeMap::from([("nope".to_owned(), "a".to_owned())]);
        let e = enroll(&p, &id, "http:abc", &bad).unwrap_err().to_string();
        assert!(e.contains("unknown experiment `nope`"), "{e}");
        let bad = BTreeMap::from([("tone".to_owned(), "c".to_owned())]);
        let e = enroll(&p, &id, "http:abc", &bad).unwrap_err().to_string();
        assert!(e.contains("no arm `c`"), "{e}");
    }

    #[test]
    fn a_disabled_experiment_enrolls_only_pins() {
        let (_dir, p) = project(
            "enabled = false\n[[arms]]\nname = \"a\"\nweight = 100\n[[arms]]\nname = \"b\"\nweight = 0\n",
        );
        let id = SessionId::from_string("ses_x");
        assert!(
            enroll(&p, &id, "http:t", &BTreeMap::new())
                .unwrap()
                .is_empty()
        );
        let pinned = BTreeMap::from([("tone".to_owned(), "b".to_owned())]);
        assert_eq!(enroll(&p, &id, "http:t", &pinned).unwrap()[0].arm, "b");
    }

    /// An experiment `tone` with these arm weights, through discovery (the
    /// only way one is built).
    fn experiment(weights: &[(&str, u32)]) -> Experiment {
        let arms: String = weights
            .iter()
            .map(|(name, weight)| format!("[[arms]]\nname = \"{name}\"\nweight = {weight}\n"))
            .collect();
        let (_dir, mut p) = project(&arms);
        p.experiments.remove(0)
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
            let arm = draw(&e, &key).unwrap();
            let b = bucket("tone", &key);
            let want = if b < 30 { "a" } else { "c" };
            assert_eq!(arm.name, want, "bucket {b}");
            counts[["a", "b", "c"].iter().position(|n| *n == arm.name).unwrap()] += 1;
        }
        assert_eq!(counts[1], 0, "a zero weight never draws");
        assert!((2_700..3_300).contains(&counts[0]), "{counts:?}");
    }
}
