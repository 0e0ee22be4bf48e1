//! The user a contained program runs as when the server runs as root.
//!
//! Landlock decides what a program may read and write, but not what it
//! may do to the metadata of files it owns: a program running as uid 0,
//! even with no capability, may `chmod`, `chown` to itself, `utime` and
//! `setxattr` every file root owns, and may connect to root's Unix
//! sockets. So when the server is root its programs run as another,
//! unprivileged user ([`Ids`], `[sandbox] user`, by default an id no
//! account uses: [`default_user`]).
//!
//! What that user may read is still decided by Landlock alone: the
//! program keeps one capability, `CAP_DAC_READ_SEARCH`, which lets it
//! read and search files whatever their mode bits, so that what it was
//! granted (an interpreter under `/root/.pyenv`, an agent folder in a
//! `0700` directory) stays readable. It grants no write, no ownership and
//! no signal; the system-call filter refuses `open_by_handle_at`, the one
//! call that would let it reach a file without a path Landlock can judge.
//! What it writes (its workspace, its temp dir) the host gives to that
//! user.

use rustix::thread::{CapabilitySet, CapabilitySets};

use crate::protocol::Ids;

/// The ids tried for [`default_user`], highest first: a range Debian
/// reserves and never assigns to accounts or packages.
const DEFAULT_IDS: std::ops::RangeInclusive<u32> = 65_000..=65_533;

/// The user programs run as when the server is root and the agent names
/// none: the highest id of 65000-65533 that neither `/etc/passwd` nor
/// `/etc/group` names, as uid and gid.
pub fn default_user() -> Ids {
    let taken = |file: &str| -> Vec<u32> {
        std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.split(':').nth(2)?.parse().ok())
            .collect()
    };
    let users = taken("/etc/passwd");
    let groups = taken("/etc/group");
    let id = DEFAULT_IDS
        .rev()
        .find(|id| !users.contains(id) && !groups.contains(id))
        .unwrap_or(*DEFAULT_IDS.end());
    Ids { uid: id, gid: id }
}

/// The uid and primary gid of the account `name` in `/etc/passwd`.
pub fn lookup(name: &str) -> Option<Ids> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        if fields.next()? != name {
            return None;
        }
        let uid = fields.nth(1)?.parse().ok()?;
        let gid = fields.next()?.parse().ok()?;
        Some(Ids { uid, gid })
    })
}

/// Removes every capability but `keep` from the bounding set, so no
/// program started from here can regain one. Needs `CAP_SETPCAP`; without
/// it nothing can be removed and nothing is.
pub(crate) fn drop_bounding_except(keep: CapabilitySet) {
    // Dropping a capability that is not in the set succeeds, so there is
    // no separate read: one call per capability until the first error,
    // which is either EINVAL (past the kernel's last capability) or EPERM
    // (no CAP_SETPCAP, so no drop could succeed).
    for bit in 0..64u32 {
        let cap = CapabilitySet::from_bits_retain(1 << bit);
        if keep.contains(cap) {
            continue;
        }
        if rustix::thread::remove_capability_from_bounding_set(cap).is_err() {
            break;
        }
    }
}

/// Becomes `ids` (no supplementary groups), keeping only
/// `CAP_DAC_READ_SEARCH`, in every set and as an ambient capability so the
/// program keeps it across `exec`. Needs root's capabilities.
pub(crate) fn become_user(ids: Ids) -> Result<(), String> {
    use nix::unistd::{Gid, Uid};
    let keep = CapabilitySet::DAC_READ_SEARCH;
    // While still privileged: nothing started from here may regain more.
    drop_bounding_except(keep);
    let step = |what: &str, e: &dyn std::fmt::Display| {
        format!(
            "cannot run the program as uid {} gid {} ({what}: {e})",
            ids.uid, ids.gid
        )
    };
    rustix::thread::set_keep_capabilities(true).map_err(|e| step("keep capabilities", &e))?;
    nix::unistd::setgroups(&[]).map_err(|e| step("setgroups", &e))?;
    let gid = Gid::from_raw(ids.gid);
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| step("setresgid", &e))?;
    let uid = Uid::from_raw(ids.uid);
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| step("setresuid", &e))?;
    let sets = CapabilitySets {
        effective: keep,
        permitted: keep,
        inheritable: keep,
    };
    rustix::thread::set_capabilities(None, sets).map_err(|e| step("capabilities", &e))?;
    rustix::thread::configure_capability_in_ambient_set(keep, true)
        .map_err(|e| step("ambient capability", &e))?;
    let _ = rustix::thread::set_keep_capabilities(false);
    if nix::unistd::getuid() != uid || nix::unistd::geteuid() != uid {
        return Err(step("check", &"the uid did not change"));
    }
    Ok(())
}

/// True when this process holds `CAP_DAC_READ_SEARCH` and no other
/// capability, in any set.
pub(crate) fn holds_only_read_search() -> bool {
    let keep = CapabilitySet::DAC_READ_SEARCH;
    let bounding_ok = (0..64u32)
        .map(|bit| CapabilitySet::from_bits_retain(1 << bit))
        .filter(|cap| *cap != keep)
        .map(rustix::thread::capability_is_in_bounding_set)
        .take_while(Result::is_ok)
        .all(|held| held.is_ok_and(|held| !held));
    bounding_ok
        && rustix::thread::capabilities(None).is_ok_and(|sets| {
            sets.effective == keep && sets.permitted == keep && sets.inheritable == keep
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_user_is_named_by_no_account_or_group() {
        let ids = default_user();
        assert!(DEFAULT_IDS.contains(&ids.uid));
        assert_eq!(ids.uid, ids.gid);
        let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
        assert!(
            !passwd
                .lines()
                .any(|l| l.split(':').nth(2) == Some(&ids.uid.to_string()))
        );
    }

    #[test]
    fn accounts_are_looked_up_by_name() {
        assert_eq!(lookup("root"), Some(Ids { uid: 0, gid: 0 }));
        assert_eq!(lookup("no-such-account-here"), None);
    }
}
