//! Embeds the user documentation (`docs/**/*.md` at the workspace root, and
//! the root `README.md` and `ARCHITECTURE.md` as `project/...`) into the
//! crate, so `GET /docs/*` works from an installed binary with no files
//! beside it.
//!
//! The script writes `docs_pages.rs` into `OUT_DIR`: a sorted table of
//! `(path under docs/, include_str!(absolute file))`. A missing `docs/`
//! folder yields an empty table rather than a build failure.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

fn main() -> io::Result<()> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let docs = manifest.join("..").join("..").join("docs");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());

    println!("cargo:rerun-if-changed={}", docs.display());
    let mut pages = Vec::new();
    if docs.is_dir() {
        collect(&docs, &docs, &mut pages)?;
    }
    // The project's own README and ARCHITECTURE, which the docs link to
    // (`../README.md`), served under `project/`.
    for name in ["README.md", "ARCHITECTURE.md"] {
        let path = manifest.join("..").join("..").join(name);
        if path.is_file() {
            println!("cargo:rerun-if-changed={}", path.display());
            pages.push((format!("project/{name}"), path.canonicalize()?));
        }
    }
    pages.sort();

    let mut code = String::from("pub(crate) static PAGES: &[(&str, &str)] = &[\n");
    for (rel, abs) in &pages {
        // Directories are watched for added or removed files; each page is
        // watched for edits.
        println!("cargo:rerun-if-changed={}", abs.display());
        code.push_str(&format!(
            "    ({rel:?}, include_str!({:?})),\n",
            abs.display().to_string()
        ));
    }
    code.push_str("];\n");
    fs::write(out.join("docs_pages.rs"), code)
}

/// Every `*.md` file under `dir`, as (`/`-separated path relative to `root`, absolute path).
fn collect(root: &Path, dir: &Path, pages: &mut Vec<(String, PathBuf)>) -> io::Result<()> {
    println!("cargo:rerun-if-changed={}", dir.display());
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(root, &path, pages)?;
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some("md") {
            continue;
        }
        let Ok(rel) = path.strip_prefix(root) else {
            continue;
        };
        let rel: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let abs = path.canonicalize()?;
        pages.push((rel.join("/"), abs));
    }
    Ok(())
}
