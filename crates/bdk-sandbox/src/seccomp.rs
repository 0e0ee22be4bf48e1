//! The system-call filter: what no tool needs and an attacker would use
//! against the kernel or its host, refused with `EPERM`.
//!
//! Refused outright: new namespaces and joining others (`unshare`,
//! `setns`, and `clone` with a namespace flag: a new user namespace hands
//! a process every capability inside it, the widest kernel attack surface
//! there is), every mount call, the kernel keyrings (`keyctl`, `add_key`,
//! `request_key`), `bpf`, `perf_event_open`, `userfaultfd`, `ptrace` and
//! the cross-process memory calls, `open_by_handle_at` (which would let a
//! program holding `CAP_DAC_READ_SEARCH` open a file without a path
//! Landlock can judge), io_uring (whose operations bypass this filter),
//! and the module, kexec, swap, reboot and accounting calls. Refused with
//! an argument check: `chmod`, `fchmod`, `fchmodat`, `fchmodat2`, `open`,
//! `openat`, `creat`, `mknod` and `mknodat` whose mode carries the setuid
//! or setgid bit, so a program cannot make a set-id file (the writable
//! mounts are `nosuid` too).
//!
//! `clone3` and `openat2` pass their arguments in memory a filter cannot
//! read, so they answer `ENOSYS`, on which the C library falls back to
//! `clone` and `openat`. Calls of the x32 ABI (numbers with bit 30 set,
//! another table a filter keyed on x86-64 numbers would miss) answer
//! `ENOSYS`; other architectures' calls (`int 0x80`) kill the process.
//!
//! Built with `seccompiler` (rust-vmm, Firecracker's filter compiler).

/// The filter, compiled: a fork server compiles it once and every call it
/// starts applies it (compiling costs about half a millisecond).
pub(crate) struct Filter {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    program: seccompiler::BpfProgram,
}

impl Filter {
    /// Compiles the filter for this architecture.
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    pub(crate) fn build() -> Result<Self, String> {
        program()
            .map(|program| Filter { program })
            .map_err(|e| format!("cannot build the filter: {e}"))
    }

    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    pub(crate) fn build() -> Result<Self, String> {
        Err("the system-call filter is not built for this architecture".to_owned())
    }

    /// Applies the filter to this process (and so to everything it
    /// starts). Sets `no_new_privs`, which the filter needs.
    pub(crate) fn apply(&self) -> Result<(), String> {
        // One program: the kernel checks and compiles each one it is given.
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        seccompiler::apply_filter(&self.program)
            .map_err(|e| format!("cannot apply the system-call filter: {e}"))?;
        Ok(())
    }
}

/// True when the filter is in force: a new user namespace is refused.
pub(crate) fn holds() -> bool {
    matches!(
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER),
        Err(nix::errno::Errno::EPERM)
    ) && rustix::thread::secure_computing_mode()
        .is_ok_and(|m| m == rustix::thread::SecureComputingMode::Filter)
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn program() -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    use std::collections::BTreeMap;

    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };

    let arch = TargetArch::try_from(std::env::consts::ARCH)?;
    let always = |calls: &[libc::c_long]| {
        calls
            .iter()
            .map(|&call| (call, Vec::new()))
            .collect::<Vec<_>>()
    };
    // A rule per bit of `mask` that argument `arg` may not carry.
    let bits = |arg: u8, mask: &[u64]| -> Result<Vec<SeccompRule>, seccompiler::Error> {
        mask.iter()
            .map(|&bit| {
                let condition = SeccompCondition::new(
                    arg,
                    SeccompCmpArgLen::Qword,
                    SeccompCmpOp::MaskedEq(bit),
                    bit,
                )?;
                Ok(SeccompRule::new(vec![condition])?)
            })
            .collect()
    };

    let mut refused: BTreeMap<i64, Vec<SeccompRule>> = always(&[
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_open_by_handle_at,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_reboot,
        libc::SYS_acct,
    ])
    .into_iter()
    .collect();

    // `clone(flags, ...)`: the namespace flags.
    let namespaces = [
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWNS,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWCGROUP,
    ]
    .map(|flag| u64::from(flag.unsigned_abs()));
    refused.insert(libc::SYS_clone, bits(0, &namespaces)?);

    // Modes with the setuid or setgid bit, by the argument that holds the
    // mode.
    let set_id = [u64::from(libc::S_ISUID), u64::from(libc::S_ISGID)];
    let mut modes: Vec<(libc::c_long, u8)> = vec![
        (libc::SYS_fchmod, 1),
        (libc::SYS_fchmodat, 2),
        (libc::SYS_fchmodat2, 2),
        (libc::SYS_openat, 3),
        (libc::SYS_mknodat, 2),
    ];
    #[cfg(target_arch = "x86_64")]
    modes.extend([
        (libc::SYS_chmod, 1),
        (libc::SYS_open, 2),
        (libc::SYS_creat, 1),
        (libc::SYS_mknod, 1),
    ]);
    for (call, arg) in modes {
        refused.insert(call, bits(arg, &set_id)?);
    }

    let refused = SeccompFilter::new(
        refused,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM.unsigned_abs()),
        arch,
    )?;
    let mut program: seccompiler::BpfProgram = refused.try_into()?;
    program.splice(0..0, missing_prefix());
    Ok(program)
}

/// Instructions put before the compiled rules: the calls whose arguments a
/// filter cannot read (`clone3`, `openat2`) and, on x86-64, every call of
/// the x32 ABI (numbers with bit 30 set) answer `ENOSYS`.
/// `seccompiler` takes one answer per filter; a second filter would cost a
/// second check and compilation in the kernel per call.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn missing_prefix() -> Vec<seccompiler::sock_filter> {
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
    const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
    const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
    const BPF_JA: u16 = 0x05; // BPF_JMP | BPF_JA
    const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    let op = |code, k| seccompiler::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    // Each test jumps to the `ENOSYS` return at the end when it holds.
    let mut tests: Vec<(u16, u32)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    tests.push((BPF_JGE_K, 0x4000_0000));
    for call in [libc::SYS_clone3, libc::SYS_openat2] {
        tests.push((BPF_JEQ_K, u32::try_from(call).unwrap_or(u32::MAX)));
    }
    // The call number is the first field of `seccomp_data`.
    let mut out = vec![op(BPF_LD_W_ABS, 0)];
    let n = tests.len();
    for (i, (code, k)) in tests.into_iter().enumerate() {
        let mut test = op(code, k);
        // Past the tests left and the jump over the return.
        test.jt = u8::try_from(n - i).unwrap_or(u8::MAX);
        out.push(test);
    }
    out.push(op(BPF_JA, 1));
    out.push(op(
        BPF_RET_K,
        SECCOMP_RET_ERRNO | libc::ENOSYS.unsigned_abs(),
    ));
    out
}

#[cfg(all(test, any(target_arch = "x86_64", target_arch = "aarch64")))]
mod tests {
    #[test]
    fn the_filter_compiles_for_this_architecture() {
        let program = super::program().unwrap();
        assert!(program.len() > 40, "{}", program.len());
    }
}
