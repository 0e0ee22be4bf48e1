//! The tool sandbox of the `bdk` binary. Its programs start through the
//! small `bdk-launcher` beside `bdk` when it is there, else through `bdk`
//! itself (`main` hands a launcher invocation to [`bdk_core::containment`]
//! before anything else runs).
//!
//! Every host of one process protects every agent folder and state root the
//! process serves, so no agent's programs read another agent's files, plus
//! its own `[sandbox] deny` paths. The first host built probes the sandbox
//! once: an incomplete one is a loud warning on stderr, or an error under
//! `--require-sandbox`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use anyhow::{Result, bail};
use bdk_core::containment::{Ids, Sandbox, Support};
use bdk_core::project::{Project, SandboxMode, SandboxUser};

/// Names another launcher executable than this `bdk` (a packaged
/// `bdk-sandbox`, say).
const LAUNCHER_ENV: &str = "BDK_SANDBOX_LAUNCHER";

/// The small launcher program installed beside `bdk` (`src/bin/bdk-launcher.rs`).
const LAUNCHER_NAME: &str = "bdk-launcher";

/// What every sandbox of this process protects: the agent folders and state
/// roots it serves.
#[derive(Clone, Debug, Default)]
pub(crate) struct Protected(pub(crate) Vec<PathBuf>);

/// The sandbox for `project`'s host, checked against the system: `Ok(None)`
/// when the agent turns the sandbox off.
pub(crate) fn for_project(
    project: &Project,
    protected: &Protected,
    require: bool,
) -> Result<Option<Sandbox>> {
    if project.config.sandbox.mode == SandboxMode::Off {
        return Ok(None);
    }
    let launcher =
        match std::env::var_os(LAUNCHER_ENV).filter(|v| !v.is_empty()) {
            Some(path) => PathBuf::from(path),
            None => default_launcher(&std::env::current_exe().map_err(|e| {
                anyhow::anyhow!("cannot find the bdk executable to launch tools: {e}")
            })?),
        };
    let user = programs_user(project)?;
    let mut builder = Sandbox::builder(launcher)
        .limits(bdk_core::containment::limits(
            &project.config.sandbox.limits,
        ))
        .cgroups(cgroups().clone())
        .user(user);
    for path in protected.0.iter().chain(&project.config.sandbox.deny) {
        builder = builder.protect(path);
    }
    let sandbox = builder.build();
    check(&sandbox, project, require)?;
    if let Some(user) = sandbox.effective_user() {
        for path in &project.config.sandbox.write {
            if !writable_by(path, user) {
                errln!(
                    "warning: {}: [sandbox] write grants {}, but the agent's programs run as uid {} gid {} (bdk runs as root) and cannot write it: `chown -R {}:{} {}`, or grant a place they own",
                    project.root.display(),
                    path.display(),
                    user.uid,
                    user.gid,
                    user.uid,
                    user.gid,
                    path.display()
                );
            }
        }
    }
    Ok(Some(sandbox))
}

/// Who the agent's programs run as: nobody in particular (their server's
/// own uid) unless `bdk` runs as root, when they get an unprivileged user:
/// `[sandbox] user`, or an id no account uses.
fn programs_user(project: &Project) -> Result<Option<Ids>> {
    let configured = &project.config.sandbox.user;
    if !rustix::process::geteuid().is_root() {
        if configured.is_some() {
            static NOTED: OnceLock<()> = OnceLock::new();
            NOTED.get_or_init(|| {
                errln!(
                    "note: [sandbox] user applies when bdk runs as root; the agent's programs run as this server's user"
                );
            });
        }
        return Ok(None);
    }
    Ok(Some(match configured {
        None => bdk_core::containment::user::default_user(),
        Some(SandboxUser::Ids { uid, gid }) => Ids {
            uid: *uid,
            gid: *gid,
        },
        Some(SandboxUser::Name(name)) => match bdk_core::containment::user::lookup(name) {
            Some(ids) if ids.uid != 0 => ids,
            Some(_) => bail!("[sandbox] user `{name}` is root; name an unprivileged account"),
            None => bail!(
                "[sandbox] user: no account named `{name}` in /etc/passwd; create it or write its uid (`user = 64000`)"
            ),
        },
    }))
}

/// True when `user` may write into `path` by its mode bits (or it is not
/// there: Landlock skips a grant that does not exist).
fn writable_by(path: &Path, user: Ids) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(path) else {
        return true;
    };
    let mode = meta.mode();
    (meta.uid() == user.uid && mode & 0o200 != 0)
        || (meta.gid() == user.gid && mode & 0o020 != 0)
        || mode & 0o002 != 0
}

/// The cgroups of this process's calls, once looked for.
static CGROUPS: OnceLock<bdk_core::containment::CgroupDirs> = OnceLock::new();

/// Where this process makes its calls' cgroups (found, and made, once).
fn cgroups() -> &'static bdk_core::containment::CgroupDirs {
    CGROUPS.get_or_init(bdk_core::containment::cgroup::prepare)
}

/// Removes the cgroup directories this process made, once its programs
/// have ended (the end of `main`).
pub(crate) fn release_cgroups() {
    if let Some(dirs) = CGROUPS.get() {
        bdk_core::containment::cgroup::release(dirs);
    }
}

/// The server's score for the kernel's OOM killer: when the machine runs
/// out of memory, a tool (whose launcher raises its own score to the
/// maximum) goes before the server. Lowering a score takes root
/// (`CAP_SYS_RESOURCE`); an ordinary user's server keeps its own, and its
/// tools still go first.
pub(crate) const SERVER_OOM_SCORE_ADJ: i32 = -500;

/// Lowers this process's OOM score (see [`SERVER_OOM_SCORE_ADJ`]).
pub(crate) fn lower_oom_score() {
    let _refused_without_root =
        std::fs::write("/proc/self/oom_score_adj", SERVER_OOM_SCORE_ADJ.to_string());
}

/// The launcher of a `bdk` at `exe`: the `bdk-launcher` program beside it
/// when there is one (a regular, executable file), else `bdk` itself. Both
/// act the same; the small one starts several times faster.
fn default_launcher(exe: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let sibling = exe.with_file_name(LAUNCHER_NAME);
    match std::fs::metadata(&sibling) {
        Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => sibling,
        _ => exe.to_path_buf(),
    }
}

/// Probes once per process; warns (or, with `require`, fails) when the
/// system does not enforce every protection and the agent runs programs.
fn check(sandbox: &Sandbox, project: &Project, require: bool) -> Result<()> {
    static PROBE: OnceLock<Result<Support, String>> = OnceLock::new();
    let probe = PROBE.get_or_init(|| sandbox.probe().map_err(|e| e.to_string()));
    let missing: Vec<String> = match probe {
        Ok(support) => support.missing().into_iter().map(str::to_owned).collect(),
        Err(e) => vec![format!("the sandbox launcher does not work ({e})")],
    };
    if missing.is_empty() || !project.has_programs() {
        return Ok(());
    }
    if require {
        bail!(
            "--require-sandbox: the tool sandbox is incomplete on this system: {}",
            missing.join("; ")
        );
    }
    static WARNED: OnceLock<()> = OnceLock::new();
    WARNED.get_or_init(|| {
        errln!(
            "warning: the tool sandbox is incomplete on this system, so tools, shell commands and command hooks can reach more than they are granted: missing {}. Pass --require-sandbox to refuse to start instead (see docs/security.md).",
            missing.join("; ")
        );
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launcher_beside_bdk_is_used_when_it_can_run() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("bdk");
        std::fs::write(&exe, "").unwrap();
        // Nothing beside it: bdk is its own launcher.
        assert_eq!(default_launcher(&exe), exe);
        // A file that cannot be executed is passed over, and so is a folder.
        let sibling = dir.path().join(LAUNCHER_NAME);
        std::fs::write(&sibling, "").unwrap();
        std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(default_launcher(&exe), exe);
        std::fs::set_permissions(&sibling, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(default_launcher(&exe), sibling);
        std::fs::remove_file(&sibling).unwrap();
        std::fs::create_dir(&sibling).unwrap();
        assert_eq!(default_launcher(&exe), exe);
    }
}
