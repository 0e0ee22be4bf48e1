//! Helpers shared by this crate's integration tests: the live processes
//! that carry a marker in their command line, and waiting on them.
#![allow(clippy::unwrap_used, dead_code)]

use std::time::{Duration, Instant};

/// Live processes whose command line contains `marker`.
pub fn live_with(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmdline).contains(marker) {
            continue;
        }
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The state follows the parenthesized command name.
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .chars()
            .next();
        if state != Some('Z') && state.is_some() {
            out.push(pid);
        }
    }
    out
}

pub fn wait_until_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !live_with(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{marker} still running: {:?}",
            live_with(marker)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `count` live processes carry `marker`; returns their pids.
pub fn wait_for(marker: &str, count: usize) -> Vec<u32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let live = live_with(marker);
        if live.len() >= count {
            return live;
        }
        assert!(
            Instant::now() < deadline,
            "{marker}: {} of {count} started",
            live.len()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
