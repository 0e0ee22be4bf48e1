//! The route-path rule: only bdk-api writes the API's `/v1/` paths.
//!
//! `bdk-api` is the HTTP contract and its `paths` module the one place a
//! route is written; the server mounts those constants and the clients
//! fill them in, so a route cannot be renamed on one side only. The check
//! reads every `.rs` file under `crates/*/src` but bdk-api's (and
//! bdk-models', whose `/v1/` paths are the model providers' APIs) and
//! reports code that spells a path: a string literal that starts with
//! `/v1/`, or a format string that appends one to a placeholder
//! (`"{base}/v1/..."`). Prose that mentions a route (`"... POST
//! /v1/dev/schedules/:id"`), comments and `#[cfg(test)]` code do not
//! count.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

/// bdk-api owns the paths; bdk-models' `/v1/` paths are other services'.
const NOT_SCANNED: &[&str] = &["bdk-api", "bdk-models"];

/// The lines of `text` (1-based) whose code spells a `/v1/` path: comment
/// lines skipped, everything from the first `#[cfg(test)]` on skipped.
pub fn spelled_routes(text: &str) -> Vec<usize> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    code.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            !line.starts_with("//") && (line.contains("\"/v1/") || line.contains("}/v1/"))
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Every place under `crates/*/src` (but [`NOT_SCANNED`]) that spells a
/// `/v1/` path, as `path:line`.
pub fn find(root: &Path) -> Result<Vec<String>, crate::treefs::Error> {
    let crates = root.join("crates");
    let read = |path: &Path| {
        let path = path.to_path_buf();
        move |source| crate::treefs::Error::Read { path, source }
    };
    let mut files = BTreeSet::new();
    for entry in fs::read_dir(&crates).map_err(read(&crates))? {
        let entry = entry.map_err(read(&crates))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if !NOT_SCANNED.contains(&name.as_str()) {
            crate::treefs::collect(root, &entry.path().join("src"), &mut files)?;
        }
    }
    let mut found = Vec::new();
    for rel in files {
        let path = root.join(&rel);
        let text = fs::read_to_string(&path).map_err(read(&path))?;
        for line in spelled_routes(&text) {
            found.push(format!("{rel}:{line}"));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bdk_api_spells_a_route() {
        let root = crate::workspace_root();
        let found = find(&root).unwrap();
        assert!(
            found.is_empty(),
            "these places spell a /v1/ path; use bdk_api::paths instead:\n{}",
            found.join("\n")
        );
        // Guard against a vacuous pass: bdk-api itself would be caught.
        let api = fs::read_to_string(root.join("crates/bdk-api/src/paths.rs")).unwrap();
        assert!(!spelled_routes(&api).is_empty());
    }

    #[test]
    fn paths_count_and_prose_comments_and_tests_do_not() {
        assert_eq!(spelled_routes("let p = \"/v1/session\";"), [1]);
        assert_eq!(spelled_routes("\nformat!(\"{base}/v1/session/{id}\")"), [2]);
        assert!(spelled_routes("\"they fire only through POST /v1/dev/schedules/:id\"").is_empty());
        assert!(spelled_routes("/// `POST /v1/session`\n// \"/v1/x\"\nfn f() {}").is_empty());
        assert!(
            spelled_routes("fn f() {}\n#[cfg(test)]\nmod tests { const P: &str = \"/v1/x\"; }")
                .is_empty()
        );
    }
}
