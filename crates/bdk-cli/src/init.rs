//! `bdk init`: scaffolds the offline weather example into a directory.

use std::path::Path;

use anyhow::{Context, Result, bail};

include!(concat!(env!("OUT_DIR"), "/example_files.rs"));

/// Writes the example into `dir`, which must be absent or empty (exit 2
/// otherwise: the argument is unusable, nothing is written).
pub fn run(dir: &Path) -> Result<u8> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))?;
        if entries.next().is_some() {
            // A usage error (exit 2), like any other unusable argument.
            errln!(
                "error: {} is not empty; pass a new directory, e.g. `bdk init my-agent`",
                dir.display()
            );
            return Ok(crate::support::UNUSABLE);
        }
    }
    if EXAMPLE_FILES.is_empty() {
        bail!("this build carries no example files");
    }
    for (rel, bytes) in EXAMPLE_FILES {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
        #[cfg(unix)]
        if rel.ends_with(".py") || rel.ends_with(".sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    outln!(
        "created an agent project in {} ({} files)",
        dir.display(),
        EXAMPLE_FILES.len()
    );
    outln!(
        "next: bdk validate {0} && bdk run --dir {0} --message \"What's the weather in Paris?\"",
        dir.display()
    );
    Ok(0)
}
