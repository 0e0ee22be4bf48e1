//! The injectable clock, re-exported from [`bdk_core::clock`] so the host,
//! its tools, the reminder timer and the schedule cadence share one trait
//! (and, when wired so, one clock).

pub use bdk_core::clock::{Clock, ManualClock, Sleep, SystemClock};
