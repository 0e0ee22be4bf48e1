//! Which parts of the filesystem a contained program may read.
//!
//! Landlock only grants: there is no "everything but X". So "the system,
//! except what is protected" is computed as a list of grants. Each rule is a
//! canonical path with a decision (deny or allow); the decision for any path
//! is the one of the longest rule that contains it (allow when none does).
//! [`plan`] walks from `/` and grants every subtree whose decision is
//! uniform, descending only into directories that contain a rule. The walk
//! never follows symbolic links: a link is resolved when it is used, and
//! Landlock judges the file it leads to by that file's own place, which the
//! walk has already decided.

use std::path::{Path, PathBuf};

/// What a rule says about the paths beneath it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not readable.
    Deny,
    /// Readable.
    Allow,
}

/// Device files every contained program may read and write.
pub(crate) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// Files that hold secrets on many systems. Protected only when this
/// process can read them: otherwise the file's own permissions already
/// keep a contained program out, and protecting them would cost grants.
const SECRET_FILES: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
];

/// Entries of a home directory that never become readable through `PATH`.
const SECRET_HOME_ENTRIES: &[&str] = &[
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".kube",
    ".docker",
    ".netrc",
    ".pgpass",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    ".config",
    ".local/share/keyrings",
];

/// Credential files inside installation roots that `PATH` makes readable.
const SECRET_TOOL_FILES: &[&str] = &[".cargo/credentials", ".cargo/credentials.toml"];

/// The rules every sandbox starts with: homes, temp dirs, `/dev`, runtime
/// dirs with per-user sockets and secrets are denied; the installation roots
/// of programs on `PATH` inside a home stay readable.
pub(crate) fn default_rules() -> Vec<(PathBuf, Decision)> {
    let mut homes: Vec<PathBuf> = ["/root", "/home"].iter().map(PathBuf::from).collect();
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        homes.push(PathBuf::from(home));
    }
    let homes: Vec<PathBuf> = homes.iter().filter_map(|p| p.canonicalize().ok()).collect();

    let mut rules: Vec<(PathBuf, Decision)> = Vec::new();
    let deny = |p: PathBuf, rules: &mut Vec<(PathBuf, Decision)>| {
        if let Ok(c) = p.canonicalize() {
            rules.push((c, Decision::Deny));
        }
    };
    for home in &homes {
        deny(home.clone(), &mut rules);
    }
    let mut temps = vec![
        PathBuf::from("/tmp"),
        PathBuf::from("/var/tmp"),
        PathBuf::from("/dev/shm"),
    ];
    temps.push(std::env::temp_dir());
    for dir in temps {
        deny(dir, &mut rules);
    }
    for dir in ["/dev", "/run/user", "/run/secrets"] {
        deny(PathBuf::from(dir), &mut rules);
    }
    for file in SECRET_FILES {
        let path = Path::new(file);
        if std::fs::File::open(path).is_ok() {
            deny(path.to_path_buf(), &mut rules);
        }
    }

    // Interpreters installed in a home (pyenv, nvm, rustup, ~/.local) stay
    // usable: the top folder of the home that holds a PATH entry is readable,
    // unless it is one that holds secrets.
    if let Some(path) = std::env::var_os("PATH") {
        for entry in std::env::split_paths(&path) {
            let Ok(entry) = entry.canonicalize() else {
                continue;
            };
            for home in &homes {
                let Ok(rest) = entry.strip_prefix(home) else {
                    continue;
                };
                let Some(top) = rest.components().next() else {
                    continue;
                };
                let top = home.join(top);
                // A top folder that is itself a secret stays closed; secrets
                // deeper inside an open one get deny rules of their own below.
                let secret = SECRET_HOME_ENTRIES
                    .iter()
                    .any(|s| top.starts_with(home.join(s)));
                if !secret {
                    rules.push((top, Decision::Allow));
                }
            }
        }
    }
    for home in &homes {
        for file in SECRET_TOOL_FILES {
            deny(home.join(file), &mut rules);
        }
        for entry in SECRET_HOME_ENTRIES {
            deny(home.join(entry), &mut rules);
        }
    }
    rules
}

/// The decision for `path`: the longest rule containing it, else allow.
fn decide(path: &Path, rules: &[(PathBuf, Decision)]) -> Decision {
    rules
        .iter()
        .filter(|(r, _)| path.starts_with(r))
        .max_by_key(|(r, _)| r.components().count())
        .map_or(Decision::Allow, |(_, d)| *d)
}

/// The grants that make every allowed path readable and no denied one.
pub(crate) fn plan(rules: &[(PathBuf, Decision)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let root = Path::new("/");
    walk(root, decide(root, rules), rules, &mut out);
    out
}

fn walk(dir: &Path, decision: Decision, rules: &[(PathBuf, Decision)], out: &mut Vec<PathBuf>) {
    let nested = rules.iter().any(|(r, _)| r != dir && r.starts_with(dir));
    if !nested {
        if decision == Decision::Allow {
            out.push(dir.to_path_buf());
        }
        return;
    }
    // The directory holds a rule of its own somewhere beneath: grant its
    // entries one by one. An unreadable directory grants nothing beneath.
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<(PathBuf, std::fs::FileType)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.path(), e.file_type().ok()?)))
        .collect();
    children.sort_by(|a, b| a.0.cmp(&b.0));
    for (path, kind) in children {
        if kind.is_symlink() {
            continue;
        }
        let child = decide(&path, rules);
        if kind.is_dir() {
            walk(&path, child, rules, out);
        } else if child == Decision::Allow {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for d in [
            "agent/tools",
            "agent/lib",
            "state/sessions/a/workspace",
            "other",
            "state/x",
        ] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["agent/agent.toml", "agent/tools/t.py", "other/f", "top.txt"] {
            std::fs::write(root.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(root.join("state"), root.join("link")).unwrap();
        dir
    }

    #[test]
    fn the_plan_grants_everything_around_the_protected_paths() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        let rules = vec![
            (root.join("agent"), Decision::Deny),
            (root.join("state"), Decision::Deny),
        ];
        let grants = plan(&rules);
        let inside: Vec<&Path> = grants
            .iter()
            .filter_map(|g| g.strip_prefix(&root).ok())
            .collect();
        assert_eq!(inside, vec![Path::new("other"), Path::new("top.txt")]);
        // Nothing outside the tree is left out: `/` is granted entry by
        // entry, and every entry but the path down to the tree is whole.
        assert!(grants.iter().any(|g| g == Path::new("/usr")));
        assert!(!grants.iter().any(|g| g == Path::new("/")));
        for g in &grants {
            assert!(!g.starts_with(root.join("agent")) && !g.starts_with(root.join("state")));
        }
    }

    #[test]
    fn an_allow_inside_a_deny_is_granted_and_a_deny_inside_it_is_not() {
        let dir = tree();
        let root = dir.path().canonicalize().unwrap();
        let rules = vec![
            (root.clone(), Decision::Deny),
            (root.join("agent"), Decision::Allow),
            (root.join("agent/tools"), Decision::Deny),
        ];
        let grants = plan(&rules);
        let inside: Vec<&Path> = grants
            .iter()
            .filter_map(|g| g.strip_prefix(&root).ok())
            .collect();
        assert_eq!(
            inside,
            vec![Path::new("agent/agent.toml"), Path::new("agent/lib")]
        );
    }

    #[test]
    fn decisions_follow_the_longest_rule() {
        let rules = vec![
            (PathBuf::from("/a"), Decision::Deny),
            (PathBuf::from("/a/b"), Decision::Allow),
        ];
        assert_eq!(decide(Path::new("/a/c"), &rules), Decision::Deny);
        assert_eq!(decide(Path::new("/a/b/c"), &rules), Decision::Allow);
        assert_eq!(decide(Path::new("/ab"), &rules), Decision::Allow);
        assert_eq!(decide(Path::new("/z"), &rules), Decision::Allow);
    }

    #[test]
    fn the_defaults_protect_homes_temp_dirs_and_devices() {
        let rules = default_rules();
        let grants = plan(&rules);
        for denied in ["/root", "/tmp", "/dev", "/home"] {
            let denied = Path::new(denied);
            if denied.exists() {
                assert!(
                    !grants.iter().any(|g| g == denied || denied.starts_with(g)),
                    "{} is readable",
                    denied.display()
                );
            }
        }
        assert!(grants.iter().any(|g| g == Path::new("/usr")));
        assert!(grants.iter().any(|g| g == Path::new("/proc")));
    }
}
