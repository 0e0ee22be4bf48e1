//! How `bdk serve` gives memory back: the allocator setting it runs with.
//!
//! glibc's malloc raises its mmap threshold every time a large block is
//! freed, so after the first few big requests, blocks of a megabyte come
//! from its per-thread arenas, which it rarely returns to the system. A
//! server that had served 200 sessions started with a 1 MB message stayed
//! about 70 MB above its idle size once they rested, although nothing held
//! them (`cargo xtask bench`, `memory.rss_after_200_sessions_1mb`). Pinning
//! the threshold makes every block of 128 KiB or more a mapping of its own,
//! unmapped when freed. The setting is a glibc tunable, read once when the
//! process starts, so `bdk serve` re-executes itself once with it set. An
//! operator's own `GLIBC_TUNABLES` is left alone. (mimalloc was tried
//! instead and kept far more: a heap per thread, and the runtime has many.)

/// The tunables `bdk serve` runs with.
pub const TUNABLES: &str = "glibc.malloc.mmap_threshold=131072";

/// Re-executes this process with [`TUNABLES`] in `GLIBC_TUNABLES`, unless
/// the variable is already set (by the operator, or by this re-execution).
/// Must run before any thread starts. Returns only when it did not
/// re-execute; a failed exec leaves glibc's default behaviour, with a note.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn pin_mmap_threshold() {
    use std::os::unix::process::CommandExt;

    if std::env::var_os("GLIBC_TUNABLES").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let err = command.args(args).env("GLIBC_TUNABLES", TUNABLES).exec();
    errln!(
        "note: could not restart with GLIBC_TUNABLES={TUNABLES} ({err}); memory freed by large requests may not be returned to the system"
    );
}

/// Other platforms keep their allocator's defaults.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn pin_mmap_threshold() {}
