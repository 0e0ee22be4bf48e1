//! The log ring buffer behind `GET /v1/logs`: recent server log lines with
//! monotonically increasing cursors, so a client polls with
//! `?after=<last cursor>` and never sees a line twice.
//!
//! The buffer only stores; the binary decides what goes in (typically a
//! tracing layer that pushes every event at or above a level).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::Serialize;

/// One log line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogLine {
    /// Position in the buffer's history; the first line pushed is 1.
    #[schemars(range(min = 1))]
    pub cursor: u64,
    /// When it was pushed.
    pub at: DateTime<Utc>,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: String,
    /// The module or component that logged it.
    pub target: String,
    /// The rendered message.
    pub message: String,
}

/// A bounded ring buffer of log lines with monotonically increasing cursors.
/// Clones share the same buffer.
#[derive(Clone, Debug)]
pub struct LogBuffer {
    inner: Arc<Mutex<Ring>>,
}

#[derive(Debug)]
struct Ring {
    capacity: usize,
    lines: VecDeque<LogLine>,
    last_cursor: u64,
}

impl LogBuffer {
    /// A buffer keeping the newest `capacity` lines (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            inner: Arc::new(Mutex::new(Ring {
                capacity,
                lines: VecDeque::with_capacity(capacity.min(4096)),
                last_cursor: 0,
            })),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        // The ring is plain data that a panicking pusher cannot leave half
        // updated in a way that matters, so a poisoned lock is used as is.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a line, evicting the oldest when full.
    pub fn push(&self, level: &str, target: &str, message: String) {
        let mut ring = self.ring();
        ring.last_cursor += 1;
        let line = LogLine {
            cursor: ring.last_cursor,
            at: Utc::now(),
            level: level.to_owned(),
            target: target.to_owned(),
            message,
        };
        if ring.lines.len() >= ring.capacity {
            ring.lines.pop_front();
        }
        ring.lines.push_back(line);
    }

    /// Up to `limit` lines with a cursor greater than `cursor`, oldest first,
    /// and the cursor to poll with next: the last line returned, or (with
    /// nothing new) `cursor` itself, capped at the newest cursor so a client
    /// that holds a cursor from an earlier process catches up instead of
    /// waiting forever.
    pub fn after(&self, cursor: u64, limit: usize) -> (Vec<LogLine>, u64) {
        let ring = self.ring();
        let lines: Vec<LogLine> = ring
            .lines
            .iter()
            .filter(|l| l.cursor > cursor)
            .take(limit)
            .cloned()
            .collect();
        let next = lines
            .last()
            .map_or(cursor.min(ring.last_cursor), |l| l.cursor);
        (lines, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_grow_and_old_lines_are_evicted() {
        let buf = LogBuffer::new(3);
        for i in 1..=5 {
            buf.push("info", "test", format!("line {i}"));
        }
        let (lines, next) = buf.after(0, 10);
        let cursors: Vec<u64> = lines.iter().map(|l| l.cursor).collect();
        assert_eq!(cursors, vec![3, 4, 5]);
        assert_eq!(next, 5);
        assert_eq!(lines[0].message, "line 3");
    }

    #[test]
    fn after_pages_with_limit_and_never_repeats() {
        let buf = LogBuffer::new(10);
        for i in 1..=4 {
            buf.push("warn", "t", format!("{i}"));
        }
        let (page, next) = buf.after(0, 3);
        assert_eq!(page.len(), 3);
        assert_eq!(next, 3);
        let (page, next) = buf.after(next, 3);
        assert_eq!(page.iter().map(|l| l.cursor).collect::<Vec<_>>(), vec![4]);
        assert_eq!(next, 4);
        let (page, next) = buf.after(next, 3);
        assert!(page.is_empty());
        assert_eq!(next, 4);
    }

    #[test]
    fn a_cursor_from_the_future_is_capped() {
        let buf = LogBuffer::new(10);
        buf.push("info", "t", "a".into());
        let (page, next) = buf.after(99, 10);
        assert!(page.is_empty());
        assert_eq!(next, 1);
    }

    #[test]
    fn zero_capacity_keeps_one_line() {
        let buf = LogBuffer::new(0);
        buf.push("info", "t", "a".into());
        buf.push("info", "t", "b".into());
        let (page, _) = buf.after(0, 10);
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].message, "b");
    }
}
