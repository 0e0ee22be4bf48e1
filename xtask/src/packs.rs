//! The pack-name ratchet: which files of the crates below the packs still
//! name GitHub or Slack.
//!
//! The channel packs (bdk-github, bdk-slack) are to live wholly in their
//! own crates; the runtime, the agent-folder reader, the program runner
//! and the HTTP surface should name neither. That is not true yet, so
//! [`BASELINE`] lists the files that still do, and the test fails on a new
//! one (a pack reaching further down) or on a listed file that no longer
//! names a pack (so the list only shrinks).

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

/// The committed list, relative to the workspace root.
pub const BASELINE: &str = "xtask/pack-names.txt";

/// The source folders that should name no pack.
pub const SCANNED: &[&str] = &[
    "crates/bdk-core/src",
    "crates/bdk-project/src",
    "crates/bdk-exec/src",
    "crates/bdk-http/src",
];

/// True when `text` names a pack, in any case.
pub fn names_a_pack(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("github") || lower.contains("slack")
}

/// The `.rs` files under the scanned folders that name a pack, as
/// `/`-separated paths relative to `root` (walked as the tree-fs check
/// walks its folders).
pub fn find(root: &Path) -> Result<BTreeSet<String>, crate::treefs::Error> {
    let mut files = BTreeSet::new();
    for place in SCANNED {
        crate::treefs::collect(root, &root.join(place), &mut files)?;
    }
    let mut found = BTreeSet::new();
    for rel in files {
        let path = root.join(&rel);
        let text = fs::read_to_string(&path)
            .map_err(|source| crate::treefs::Error::Read { path, source })?;
        if names_a_pack(&text) {
            found.insert(rel);
        }
    }
    Ok(found)
}

/// The files [`BASELINE`] lists (comments and blank lines skipped).
pub fn read_baseline(root: &Path) -> io::Result<BTreeSet<String>> {
    Ok(fs::read_to_string(root.join(BASELINE))?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

/// One message per difference between what was found and the baseline.
pub fn compare(found: &BTreeSet<String>, baseline: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for file in found.difference(baseline) {
        problems.push(format!(
            "{file} names a channel pack (GitHub or Slack): keep a pack's names in its own crate"
        ));
    }
    for file in baseline.difference(found) {
        problems.push(format!(
            "{file} no longer names a channel pack: delete its line from {BASELINE}"
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_names_only_recede() {
        let root = crate::workspace_root();
        let found = find(&root).unwrap();
        // Guard against a vacuous pass: the folders were read.
        assert!(
            found.iter().any(|f| f.starts_with("crates/bdk-http/")),
            "{found:?}"
        );
        let problems = compare(&found, &read_baseline(&root).unwrap());
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn a_new_file_and_a_cleaned_one_are_both_reported() {
        let found: BTreeSet<String> = ["a.rs", "new.rs"].map(String::from).into();
        let baseline: BTreeSet<String> = ["a.rs", "gone.rs"].map(String::from).into();
        let problems = compare(&found, &baseline);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("new.rs names a channel pack"));
        assert!(problems[1].starts_with("gone.rs no longer names"));
        assert!(names_a_pack("the GitHub pack") && names_a_pack("SLACK"));
        assert!(!names_a_pack("a channel"));
    }
}
