//! Cron schedules (`agent/schedules/*`) and durable per-session reminders.
//!
//! Not built yet: this crate is reserved for the schedules issue and exports
//! nothing. Schedule manifests are already parsed and validated by
//! `bdk_core::project`; nothing fires them until this crate does.
