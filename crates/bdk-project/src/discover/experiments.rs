//! `experiments/`: one A/B experiment per `<name>.toml`, with the Markdown
//! overlays its arms name beside it.
//!
//! Everything that can be wrong with an experiment is found here, before a
//! session is ever drawn: weights that do not add up to
//! [`WEIGHT_TOTAL`](crate::WEIGHT_TOTAL), duplicate or invalid arm
//! names, overlay files that are missing or outside the folder, model
//! strings of the wrong shape. An experiment with an error is left out of
//! the project. The TypeScript forms of the seeds (`agent/ab.ts`,
//! `agent/ab/*.ts`, `experiments/*.ts`) get a diagnostic that points to the
//! TOML form instead of a generic stray-file warning.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::agent::{check_model_shape, check_scripted_rules};
use super::util::{
    Diags, Fields, Kind, is_safe_relpath, is_slug, list_dir, path_kind, read_text, read_toml,
    report_other,
};
use crate::{Arm, Experiment, ExperimentUnit, WEIGHT_TOTAL};

const EXPERIMENT_KEYS: &[&str] = &["description", "unit", "enabled", "arms"];
const ARM_KEYS: &[&str] = &["name", "weight", "instructions", "model", "effort"];

/// Extensions of the seeds' code-defined experiments (`defineAB`).
const SCRIPT_EXTENSIONS: &[&str] = &["ts", "mts", "js", "mjs"];

/// The fix every TypeScript-form diagnostic gives.
const TOML_FORM: &str = "declare the experiment as agent/experiments/<name>.toml with `[[arms]]` (name, weight, and optional instructions, model, effort); see docs/experiments.md";

/// Reports a seeds-style experiment at the root of the agent folder
/// (`ab.ts`, or the `ab/` folder): it is never loaded.
pub(crate) fn report_script_root(d: &mut Diags, path: &Path, is_dir: bool) {
    let what = if is_dir {
        "an `ab/` folder of code-defined A/B experiments is not supported; it is ignored"
    } else {
        "A/B experiments written in code (`ab.ts`) are not supported; the file is ignored"
    };
    d.warn(path, what, TOML_FORM);
}

/// True for a root entry that is the seeds' A/B form (`ab.ts`, `ab.js`,
/// `ab/`, `ab.config.ts`).
pub(crate) fn is_script_root(name: &str, kind: Kind) -> bool {
    if name == "ab" {
        return kind == Kind::Dir;
    }
    match name.split_once('.') {
        Some(("ab", ext)) => {
            let ext = ext.strip_prefix("config.").unwrap_or(ext);
            SCRIPT_EXTENSIONS.contains(&ext)
        }
        _ => false,
    }
}

/// What the arms of a project's agent may name, to check models against.
pub(crate) struct ModelContext<'a> {
    pub(crate) agent_dir: &'a Path,
    pub(crate) rules: &'a BTreeMap<String, PathBuf>,
}

/// Discovers the experiments in `dir`, sorted by name.
pub(crate) fn discover(d: &mut Diags, dir: &Path, models: &ModelContext<'_>) -> Vec<Experiment> {
    let mut out = Vec::new();
    // Overlay paths the arms name (relative to `dir`), so the Markdown
    // files beside the manifests are not taken for strays.
    let mut referenced: BTreeSet<String> = BTreeSet::new();
    let mut others = Vec::new();
    for entry in list_dir(d, dir) {
        let (stem, ext) = entry.stem_ext();
        match (entry.kind, ext) {
            (Kind::File, Some("toml")) => {
                let stem = stem.to_owned();
                if let Some(e) = experiment(d, &entry.path, stem, dir, models, &mut referenced) {
                    out.push(e);
                }
            }
            (Kind::File, Some(ext)) if SCRIPT_EXTENSIONS.contains(&ext) => d.warn(
                &entry.path,
                "A/B experiments written in code are not supported; the file is ignored",
                TOML_FORM,
            ),
            (Kind::Other, _) => report_other(d, &entry),
            _ => others.push(entry),
        }
    }
    // Overlays and folders holding them belong here; anything else is a stray.
    for entry in others {
        let name = entry.name.as_str();
        let used = referenced
            .iter()
            .any(|r| r == name || r.starts_with(&format!("{name}/")));
        if used {
            continue;
        }
        let what = if entry.is_dir() { "folder" } else { "file" };
        d.warn(
            &entry.path,
            format!("stray {what} in experiments/: no arm names it as its `instructions`"),
            "name it in an arm's `instructions`, or move it out of experiments/",
        );
    }
    check_overlaps(d, &out);
    out
}

fn experiment(
    d: &mut Diags,
    path: &Path,
    name: String,
    dir: &Path,
    models: &ModelContext<'_>,
    referenced: &mut BTreeSet<String>,
) -> Option<Experiment> {
    let errors_before = d.error_count();
    if !is_slug(&name, usize::MAX) {
        d.error(
            path,
            format!("experiment name `{name}` is invalid"),
            "use letters, digits, `_` or `-`, starting with a letter or digit",
        );
    }
    let table = read_toml(d, path)?;
    let f = Fields::new(&table, path);
    f.unknown_keys(d, EXPERIMENT_KEYS);
    let description = f.string(d, "description");
    let enabled = f.bool(d, "enabled").unwrap_or(true);
    let unit = match f.string(d, "unit").as_deref() {
        None | Some("session") => ExperimentUnit::Session,
        Some("channel_key") => ExperimentUnit::ChannelKey,
        Some(other) => {
            d.error(
                path,
                format!("`unit` must be \"session\" or \"channel_key\", found \"{other}\""),
                "write `unit = \"session\"` (the default: every session draws its own arm) or `unit = \"channel_key\"` (one arm per channel conversation)",
            );
            ExperimentUnit::Session
        }
    };
    let arms = match table.get("arms") {
        None => {
            d.error(
                path,
                "missing `[[arms]]`: an experiment needs arms to split sessions between",
                "add `[[arms]]` sections, each with `name` and `weight` (percent; the weights add up to 100)",
            );
            Vec::new()
        }
        Some(toml::Value::Array(items)) if items.is_empty() => {
            d.error(
                path,
                "`arms` is empty: an experiment needs arms to split sessions between",
                "add `[[arms]]` sections, each with `name` and `weight`",
            );
            Vec::new()
        }
        Some(toml::Value::Array(items)) => {
            let mut arms: Vec<Arm> = Vec::new();
            let mut complete = true;
            for (i, item) in items.iter().enumerate() {
                let Some(t) = item.as_table() else {
                    d.error(
                        path,
                        format!("`arms[{i}]` must be a table"),
                        "write each arm as an `[[arms]]` section",
                    );
                    complete = false;
                    continue;
                };
                match arm(d, path, i, t, dir, models, referenced) {
                    Some(a) => {
                        if arms.iter().any(|o| o.name == a.name) {
                            d.error(
                                path,
                                format!("arm `{}` is declared more than once", a.name),
                                "give every arm its own name",
                            );
                        }
                        arms.push(a);
                    }
                    None => complete = false,
                }
            }
            // A sum over arms that failed their own checks would be a
            // second, misleading error.
            let sum: u64 = arms.iter().map(|a| u64::from(a.weight)).sum();
            if complete && sum != u64::from(WEIGHT_TOTAL) {
                let listed = arms
                    .iter()
                    .map(|a| format!("{} {}", a.name, a.weight))
                    .collect::<Vec<_>>()
                    .join(" + ");
                d.error(
                    path,
                    format!(
                        "arm weights add up to {sum} ({listed}); they must add up to {WEIGHT_TOTAL}"
                    ),
                    "weights are percentages of the sessions: change them so they add up to 100",
                );
            }
            if complete && arms.len() == 1 {
                d.warn(
                    path,
                    "the experiment has one arm, so it compares nothing",
                    "add a second arm (a control arm with no overrides is enough)",
                );
            }
            arms
        }
        Some(other) => {
            d.error(
                path,
                format!(
                    "`arms` must be an array of tables, found {}",
                    other.type_str()
                ),
                "declare arms as `[[arms]]` sections",
            );
            Vec::new()
        }
    };
    if d.error_count() > errors_before {
        return None;
    }
    Some(Experiment {
        name,
        path: path.to_owned(),
        description,
        unit,
        enabled,
        arms,
    })
}

fn arm(
    d: &mut Diags,
    path: &Path,
    i: usize,
    table: &toml::Table,
    dir: &Path,
    models: &ModelContext<'_>,
    referenced: &mut BTreeSet<String>,
) -> Option<Arm> {
    let errors_before = d.error_count();
    let f = Fields::nested(table, path, format!("arms[{i}]."));
    f.unknown_keys(d, ARM_KEYS);
    let name = match f.string(d, "name") {
        Some(n) if is_slug(&n, 64) => Some(n),
        Some(n) => {
            d.error(
                path,
                format!("`arms[{i}].name` `{n}` is invalid"),
                "use 1-64 letters, digits, `_` or `-`, starting with a letter or digit",
            );
            None
        }
        None => {
            if !f.has("name") {
                d.error(
                    path,
                    format!("`arms[{i}]` has no `name`"),
                    "add `name = \"...\"`: it is what `ab.assigned` records and evals pin",
                );
            }
            None
        }
    };
    let weight = match table.get("weight") {
        None => {
            d.error(
                path,
                format!("`arms[{i}]` has no `weight`"),
                "add `weight = <percent>`; the weights of all arms add up to 100",
            );
            None
        }
        Some(toml::Value::Integer(w)) if (0..=i64::from(WEIGHT_TOTAL)).contains(w) => {
            u32::try_from(*w).ok()
        }
        Some(toml::Value::Integer(w)) => {
            d.error(
                path,
                format!("`arms[{i}].weight` is {w}, outside 0-{WEIGHT_TOTAL}"),
                "weights are percentages: use a whole number from 0 to 100",
            );
            None
        }
        Some(other) => {
            d.error(
                path,
                format!(
                    "`arms[{i}].weight` must be a whole number, found {}",
                    other.type_str()
                ),
                "write the weight as a percentage without quotes or decimals, like `weight = 50`",
            );
            None
        }
    };
    let (instructions_file, instructions) = match f.string(d, "instructions") {
        None => (None, None),
        Some(rel) => match overlay(d, path, i, &rel, dir) {
            Some((file, text)) => {
                referenced.insert(rel);
                (Some(file), Some(text))
            }
            None => {
                // Named, even if broken: not a stray on top of its error.
                referenced.insert(rel);
                (None, None)
            }
        },
    };
    let model = f.nonempty_string(d, "model");
    if let Some(m) = &model {
        check_model_shape(d, path, m);
        check_scripted_rules(d, path, m, models.agent_dir, models.rules);
    }
    let effort = f.nonempty_string(d, "effort");
    if d.error_count() > errors_before {
        return None;
    }
    Some(Arm {
        name: name?,
        weight: weight?,
        instructions_file,
        instructions,
        model,
        effort,
    })
}

/// Reads an arm's overlay: a Markdown file inside `experiments/`.
fn overlay(
    d: &mut Diags,
    path: &Path,
    i: usize,
    rel: &str,
    dir: &Path,
) -> Option<(PathBuf, String)> {
    if !is_safe_relpath(rel) {
        d.error(
            path,
            format!("`arms[{i}].instructions` `{rel}` must be a relative path inside experiments/"),
            "name a Markdown file beside the manifest, like `instructions = \"concise.md\"`",
        );
        return None;
    }
    let file = dir.join(rel);
    match path_kind(&file) {
        Some(Kind::File) => {}
        Some(_) => {
            d.error(
                path,
                format!("`arms[{i}].instructions` names {rel}, which is not a file"),
                "point `instructions` at a Markdown file",
            );
            return None;
        }
        None => {
            let shown = d.rel(&file);
            d.error(
                path,
                format!("`arms[{i}].instructions` names {shown}, which does not exist"),
                format!("create {shown} with the instructions the arm adds, or correct the path"),
            );
            return None;
        }
    }
    let text = read_text(d, &file)?;
    if text.trim().is_empty() {
        d.warn(
            &file,
            "the overlay is empty, so its arm adds no instructions",
            "write the instructions the arm adds, or remove `instructions` from the arm",
        );
    }
    Some((file, text))
}

/// Two enabled experiments that both override the model (or the effort)
/// would fight over it: the later one by name wins, which is rarely what
/// the author meant.
fn check_overlaps(d: &mut Diags, experiments: &[Experiment]) {
    for (what, set) in [
        ("model", (|a: &Arm| a.model.is_some()) as fn(&Arm) -> bool),
        ("effort", (|a: &Arm| a.effort.is_some()) as fn(&Arm) -> bool),
    ] {
        let touching: Vec<&Experiment> = experiments
            .iter()
            .filter(|e| e.enabled && e.arms.iter().any(set))
            .collect();
        if let [first, .., last] = touching.as_slice() {
            d.warn(
                &last.path,
                format!(
                    "experiments `{}` and `{}` both override the {what}; for a session in both, `{}` wins",
                    first.name, last.name, last.name
                ),
                format!("let one experiment at a time change the {what}, or disable one of them"),
            );
        }
    }
}
