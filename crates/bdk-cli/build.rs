//! Embeds the weather example for `bdk init`: every file under
//! `examples/weather` (state and caches excluded) becomes an entry of a
//! generated table, so `init` always scaffolds what the repository tests.

use std::fs;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name == ".bdk" || name == "__pycache__" || name.ends_with(".pyc") {
            continue;
        }
        if path.is_dir() {
            walk(&path, out);
        } else if path.is_file() {
            out.push(path);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let example = manifest.join("../../examples/weather");
    println!("cargo:rerun-if-changed={}", example.display());
    let mut files = Vec::new();
    walk(&example, &mut files);
    let mut table = String::from(
        "/// The weather example: (relative path, bytes).\npub const EXAMPLE_FILES: &[(&str, &[u8])] = &[\n",
    );
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
        let rel = f.strip_prefix(&example).unwrap_or(f);
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        table.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            f.display().to_string()
        ));
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("example_files.rs");
    if let Err(e) = fs::write(&out, table) {
        println!("cargo:warning=failed to write {}: {e}", out.display());
    }
}
