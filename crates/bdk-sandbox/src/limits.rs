//! Per-process resource limits (rlimits) of a contained call, and the
//! names of the limits a call ran into.
//!
//! The call's cgroup (`cgroup.rs`), where the host delegates one, bounds
//! the memory and processes of the whole call. Where it does not, these
//! rlimits stand in, with gaps: memory is bounded per process (its data
//! segment, `RLIMIT_DATA`: heap and private writable mappings, not the
//! page cache), and processes per user (`RLIMIT_NPROC` counts every
//! process of the sandbox user, so it is set only when the program runs as
//! that user; an ordinary server user's own processes would count too).
//! CPU time (`RLIMIT_CPU`) and file size (`RLIMIT_FSIZE`) are always per
//! process: a program over them gets `SIGXCPU` or `SIGXFSZ`.

use nix::sys::signal::Signal;
use rustix::process::{Resource, Rlimit, setrlimit};

use crate::protocol::Limits;

/// Sets the rlimits of `limits` that the call's cgroup does not already
/// enforce (`grouped`: whether it bounds memory, and processes).
/// `own_user`: the program runs as the sandbox user, so a per-user count
/// of processes counts only programs.
pub(crate) fn apply(limits: &Limits, grouped: (bool, bool), own_user: bool) -> Result<(), String> {
    let set = |resource: Resource, what: &str, soft: u64, hard: u64| {
        setrlimit(
            resource,
            Rlimit {
                current: Some(soft),
                maximum: Some(hard),
            },
        )
        .map_err(|e| format!("cannot limit the {what}: {e}"))
    };
    if let Some(seconds) = limits.cpu_seconds {
        // SIGXCPU at the limit, SIGKILL a second later if it is caught.
        set(
            Resource::Cpu,
            "CPU time",
            seconds,
            seconds.saturating_add(1),
        )?;
    }
    if let Some(bytes) = limits.file_bytes {
        set(Resource::Fsize, "file size", bytes, bytes)?;
    }
    let (memory_group, pids_group) = grouped;
    if let Some(bytes) = limits.memory_bytes
        && !memory_group
    {
        set(Resource::Data, "memory", bytes, bytes)?;
    }
    if let Some(count) = limits.processes
        && !pids_group
        && own_user
    {
        set(Resource::Nproc, "number of processes", count, count)?;
    }
    Ok(())
}

/// No core files: they would land in the working directory, or go to a
/// core handler that runs outside the sandbox.
pub(crate) fn no_core_files() -> rustix::io::Result<()> {
    setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: Some(0),
        },
    )
}

/// The limit a death by `signal` means, if one of `limits` raises it.
pub(crate) fn reached_by_signal(limits: &Limits, signal: Option<Signal>) -> Option<String> {
    match signal? {
        Signal::SIGXCPU => limits
            .cpu_seconds
            .map(|s| format!("CPU time limit of {s} s")),
        Signal::SIGXFSZ => limits
            .file_bytes
            .map(|b| format!("file size limit of {}", bytes(b))),
        _ => None,
    }
}

/// A byte count as people write it: `1 GiB`, `512 MiB`, `1500 bytes`.
pub fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ];
    for (size, unit) in UNITS {
        if n >= size && n.is_multiple_of(size) {
            return format!("{} {unit}", n / size);
        }
    }
    for (size, unit) in UNITS {
        if n >= size {
            return format!("{:.1} {unit}", n as f64 / size as f64);
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_the_way_people_write_them() {
        assert_eq!(bytes(1 << 30), "1 GiB");
        assert_eq!(bytes(512 << 20), "512 MiB");
        assert_eq!(bytes(1536 << 20), "1536 MiB");
        assert_eq!(bytes((3 << 29) + 1), "1.5 GiB");
        assert_eq!(bytes(1500), "1.5 KiB");
        assert_eq!(bytes(100), "100 bytes");
    }

    #[test]
    fn a_death_by_a_limit_signal_names_the_limit() {
        let limits = Limits {
            cpu_seconds: Some(3),
            file_bytes: Some(1 << 20),
            ..Limits::default()
        };
        assert_eq!(
            reached_by_signal(&limits, Some(Signal::SIGXCPU)).as_deref(),
            Some("CPU time limit of 3 s")
        );
        assert_eq!(
            reached_by_signal(&limits, Some(Signal::SIGXFSZ)).as_deref(),
            Some("file size limit of 1 MiB")
        );
        assert_eq!(reached_by_signal(&limits, Some(Signal::SIGKILL)), None);
        assert_eq!(
            reached_by_signal(&Limits::default(), Some(Signal::SIGXCPU)),
            None
        );
    }
}
